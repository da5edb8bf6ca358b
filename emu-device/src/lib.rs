//! The emulated RDMA HCA.
//!
//! - [`core`]: the sans-IO device ([`Hca`]): objects, the QP state table, CQs, completion
//!   channels, async events, SRQs, memory regions and the transport engine. No sockets, no
//!   threads, no clock.
//! - [`sim`]: a deterministic in-memory network of devices with virtual time and faults.
//! - [`driver`]: the real device: UDP sockets and pollable fds.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod core;
pub mod driver;
pub mod faults;
pub mod sim;

pub use crate::core::{Hca, HcaConfig};
