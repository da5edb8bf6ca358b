//! The sans-IO core of the emulated HCA. See [`Hca`] for the call contract.
//!
//! Layers, top down (each uses only those below it):
//! - [`Hca`] (`hca`): the public verbs and entry points; composes the pieces.
//! - `transport`: requester, responder and completer, working on borrowed pieces; owns the
//!   outbox of packets to send.
//! - The pieces, each owning its state: `device` (identity), `store` (objects), `cq`
//!   (completions), `events` (async events and driver notifications), [`counters`].
//! - Plain data: [`objects`], `qp_transport`, [`handles`], [`types`], [`wr`], [`qp_state`],
//!   [`error`].

pub mod bringup;
pub mod counters;
pub(crate) mod cq;
pub(crate) mod device;
pub mod error;
pub(crate) mod events;
pub mod handles;
pub mod hca;
pub(crate) mod memory;
pub mod objects;
pub mod qp_state;
pub(crate) mod qp_transport;
pub(crate) mod store;
pub mod transport;
pub mod types;
pub mod wr;

pub use bringup::{QpBringup, QpPeer};
pub use counters::{Counters, DropReason};
pub use device::{DeviceAttr, HcaConfig, OdpCaps, PortAttr, PortState};
pub use error::{PostError, VerbsError, VerbsResult};
pub use events::{AsyncEvent, EventElement, HcaEvent};
pub use handles::{
    AhHandle, ChannelHandle, CqHandle, MrHandle, MwHandle, PdHandle, QpHandle, SrqHandle,
};
pub use hca::{Hca, MrKeys};
pub use objects::{AhAttr, QpAttr, QpCap, QpInitAttr, SrqAttr, SrqAttrMask};
pub use qp_state::{
    TransitionError, TransitionRule, check_transition, required_mask, transition_rule,
};
pub use transport::{IncomingDatagram, Transmit};
pub use types::{
    AccessFlags, EventType, MwType, QpAttrMask, QpState, QpType, SendFlags, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};
pub use wr::{
    AtomicTarget, MwBind, RdmaTarget, RecvWr, SendWr, Sge, UdTarget, VendorErr, WorkCompletion,
};
