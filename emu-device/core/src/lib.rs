//! The sans-IO core of the emulated HCA. See [`Hca`] for the call contract.

pub mod bringup;
pub mod counters;
pub mod cq;
pub mod error;
pub mod handles;
pub mod hca;
pub(crate) mod memory;
pub mod objects;
pub mod qp;
pub mod qp_state;
pub mod transport;
pub mod types;
pub mod wr;

pub use bringup::{QpBringup, QpPeer};
pub use counters::{Counters, DropReason};
pub use error::{PostError, VerbsError, VerbsResult};
pub use handles::{AhHandle, ChannelHandle, CqHandle, MrHandle, PdHandle, QpHandle, SrqHandle};
pub use hca::{
    AsyncEvent, DeviceAttr, EventElement, Hca, HcaConfig, HcaEvent, MrKeys, PortAttr, PortState,
};
pub use objects::{AhAttr, QpAttr, QpCap, QpInitAttr, SrqAttr};
pub use qp::SrqAttrMask;
pub use qp_state::{
    TransitionError, TransitionRule, check_transition, required_mask, transition_rule,
};
pub use transport::{IncomingDatagram, Transmit};
pub use types::{
    AccessFlags, EventType, QpAttrMask, QpState, QpType, SendFlags, WcFlags, WcOpcode, WcStatus,
    WrOpcode,
};
pub use wr::{AtomicTarget, RdmaTarget, RecvWr, SendWr, Sge, UdTarget, VendorErr, WorkCompletion};
