//! RoCEv2 wire formats, in the smoltcp style.
//!
//! Every header has a zero-copy *view* (a wrapper over `T: AsRef<[u8]>` that reads and
//! writes fields in place) and an owned, validated *repr* that can be parsed from a view and
//! emitted into one. The crate does no I/O and never allocates on the parse path.
//!
//! # Contract
//! - Received bytes must go through a `new_checked`/`parse` constructor; once that succeeded,
//!   no getter panics.
//! - `emit` writes every byte of the header it covers (reserved fields included), so buffers
//!   can be reused without leaking old data.
//! - No input panics: malformed bytes give a [`WireError`] that says why.
//!
//! ```
//! use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RocePacket, RoceRepr};
//!
//! let repr = RoceRepr::new(
//!     BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::from_wire(0x11), Psn::new(1)),
//!     ExtRepr::default(),
//!     5,
//! );
//! let mut buf = vec![0; repr.buffer_len()];
//! repr.emit_with_payload(b"hello", &mut buf).unwrap();
//! let packet = RocePacket::new_checked(&buf[..]).unwrap();
//! assert_eq!(packet.payload(), b"hello");
//! assert_eq!(packet.opcode().to_string(), "RC_SEND_ONLY");
//! ```
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod bth;
pub mod cm;
pub mod error;
pub mod ext;
mod field;
#[doc(hidden)]
pub mod fuzzing;
pub mod gid;
pub mod grh;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod mtu;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod pretty;
pub mod psn;
pub mod udp_port;

pub use bth::{Bth, BthRepr};
pub use cm::{CmAttr, CmMadRepr, CmMessage, CmaHdrRepr, PortSpace};
pub use error::{Header, Result, WireError};
pub use ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth, Ieth, ImmDt,
    NakCode, Reth, RethRepr, Syndrome, XrcEth, rnr_timer_micros,
};
pub use gid::Gid;
pub use icrc::{IcrcCheck, ROCE_V2_PORT, UdpEndpoints};
pub use mad::{Mad, MadRepr};
pub use mtu::Mtu;
pub use opcode::{ExtHeaders, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{BTH_LEN, ExtRepr, ICRC_LEN, RocePacket, RoceRepr};
pub use psn::{Msn, Psn, Qpn};
