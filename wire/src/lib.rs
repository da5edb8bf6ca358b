//! RoCEv2 wire formats, in the smoltcp style.
//!
//! Every header has a zero-copy *view* (`Packet<T: AsRef<[u8]>>`-like types that read and
//! write fields in place) and an owned, validated *repr* that can be parsed from a view and
//! emitted into one. The crate does no I/O and never allocates on the parse path.
//!
//! # Contract
//! - Received bytes must go through a `new_checked`/`parse` constructor; once that succeeded,
//!   no getter panics.
//! - `emit` writes every byte of the header it covers (reserved fields included), so buffers
//!   can be reused without leaking old data.
//! - No input panics: malformed bytes give a [`WireError`] that says why.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod gid;
pub mod mtu;
pub mod psn;

pub use gid::Gid;
pub use mtu::Mtu;
pub use psn::{Msn, Psn, Qpn};
