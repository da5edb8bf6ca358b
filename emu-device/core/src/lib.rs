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
//!
//! # Example: two HCAs and one RC SEND, the packets carried by hand
//! The core sends nothing itself: whatever a verb or a received packet produces waits in
//! [`Hca::poll_transmit`], and the caller delivers it (here straight into the other HCA; the
//! driver crate over UDP, the simulator through a virtual network).
//!
//! ```
//! use std::time::Instant;
//! use softroce_emu_core::*;
//! use softroce_wire::Psn;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Memory first: it must outlive the HCAs that may write it (dropped in reverse order).
//! let (mut mem_a, mut mem_b) = (*b"hello", [0u8; 64]);
//! let mut a = Hca::new(HcaConfig::new("a", "10.0.0.1".parse()?));
//! let mut b = Hca::new(HcaConfig::new("b", "10.0.0.2".parse()?));
//!
//! // On each: a PD, a CQ, a registered buffer and an RC QP.
//! let mut setup = |h: &mut Hca, mem: &mut [u8]| -> Result<_, VerbsError> {
//!     let pd = h.alloc_pd()?;
//!     let (cq, _) = h.create_cq(8, None, 0, 0)?;
//!     // SAFETY: `mem` lives longer than the HCA (declared before it).
//!     let (_, keys) =
//!         unsafe { h.reg_mr(pd, mem.as_mut_ptr(), mem.len(), AccessFlags::LOCAL_WRITE) }?;
//!     let init = QpInitAttr {
//!         send_cq: cq,
//!         recv_cq: cq,
//!         srq: None,
//!         cap: QpCap::new(4, 4),
//!         qp_type: QpType::Rc,
//!         sq_sig_all: false,
//!         qp_context: 0,
//!     };
//!     let (qp, qpn, _) = h.create_qp(pd, init)?;
//!     Ok((cq, qp, qpn, keys, mem.as_mut_ptr() as u64))
//! };
//! let (_, qp_a, qpn_a, keys_a, addr_a) = setup(&mut a, &mut mem_a)?;
//! let (cq_b, qp_b, qpn_b, keys_b, addr_b) = setup(&mut b, &mut mem_b)?;
//!
//! // Connect: each QP learns the other's number, first PSN and address.
//! let peer = |h: &Hca, qpn: softroce_wire::Qpn, psn: u32| -> Result<QpPeer, VerbsError> {
//!     let mut av = AhAttr::new(h.query_gid(1, h.ip_gid_index())?, 0);
//!     av.udp_port = h.local_addr().port();
//!     Ok(QpPeer { qpn: qpn.value(), psn: Psn::new(psn), av })
//! };
//! let (to_b, to_a) = (peer(&b, qpn_b, 200)?, peer(&a, qpn_a, 100)?);
//! let rc = QpBringup::new(QpType::Rc);
//! rc.to_rts(&mut a, qp_a, &to_b, Psn::new(100))?;
//! rc.to_rts(&mut b, qp_b, &to_a, Psn::new(200))?;
//!
//! // b posts a receive, a sends its five bytes.
//! let sge = |addr, length, lkey| Sge { addr, length, lkey };
//! b.post_recv(qp_b, &[RecvWr { wr_id: 1, sg_list: vec![sge(addr_b, 64, keys_b.lkey)].into() }])?;
//! let mut send = SendWr::new(2, WrOpcode::Send);
//! send.sg_list = vec![sge(addr_a, 5, keys_a.lkey)].into();
//! // SAFETY: `mem_a` outlives the HCAs.
//! unsafe { a.post_send(qp_a, &[send]) }?;
//!
//! // Carry the packets: a's SEND to b, b's ACK to a.
//! fn carry(from: &mut Hca, to: &mut Hca, now: Instant) {
//!     let mut packet = Vec::new();
//!     while let Some(t) = from.poll_transmit(now, &mut packet) {
//!         let datagram = IncomingDatagram {
//!             src: t.source,
//!             dst: t.destination.ip(),
//!             payload: &packet[..t.len],
//!             traffic_class: t.traffic_class,
//!             // A UDP socket hides the IP header: the ICRC check solves for the ID.
//!             ipv4_id: None,
//!         };
//!         to.handle_datagram(now, datagram);
//!         packet.clear();
//!     }
//! }
//! let now = Instant::now();
//! carry(&mut a, &mut b, now);
//! carry(&mut b, &mut a, now);
//! let mut wc = [WorkCompletion::success(0, 0, WcOpcode::Send, 0)];
//! assert_eq!(b.poll_cq(cq_b, &mut wc)?, 1);
//! assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 5));
//! drop((a, b));
//! assert_eq!(&mem_b[..5], b"hello");
//! # Ok(()) }
//! ```

pub mod bringup;
pub mod counters;
pub(crate) mod cq;
pub(crate) mod device;
pub mod error;
pub(crate) mod events;
pub mod handles;
pub mod hca;
pub(crate) mod memory;
pub(crate) mod multicast;
pub mod objects;
pub mod qp_state;
pub(crate) mod qp_transport;
pub(crate) mod store;
pub mod tm;
pub mod transport;
pub mod types;
pub mod wr;

pub use bringup::{QpBringup, QpPeer};
pub use counters::{Counters, DropReason};
pub use device::{
    DEVICE_ATOMIC_WRITE, DeviceAttr, HcaConfig, MAX_CQE, MAX_SLOTS, MAX_XRCDS, OdpCaps,
    PAYLOAD_BY_REFERENCE_MIN, PortAttr, PortState, QPN_SLOT_SHIFT, qpn_slot, qpn_slot_range,
};
pub use error::{PostError, VerbsError, VerbsResult};
pub use events::{AsyncEvent, EventElement, HcaEvent};
pub use handles::{
    AhHandle, ChannelHandle, CqHandle, DmHandle, MrHandle, MwHandle, PdHandle, QpHandle, SrqHandle,
    XrcdHandle,
};
pub use hca::{Hca, MrKeys};
pub use memory::{AppCopier, install_copier};
pub use multicast::MULTICAST_QPN;
pub use objects::{AhAttr, QpAttr, QpCap, QpInitAttr, SrqAttr, SrqAttrMask};
pub use qp_state::{
    TransitionError, TransitionRule, check_transition, required_mask, transition_rule,
    without_ignored_xrc_attributes,
};
pub use tm::{TM_CAPS, TmCaps, TmOp, TmOpKind};
pub use transport::gsi::{GSI_QPN, ReceivedMad};
pub use transport::{IncomingDatagram, PayloadRef, Transmit, TransmitToken};
pub use types::{
    AccessFlags, EventType, MwType, QpAttrMask, QpState, QpType, SendFlags, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};
pub use wr::{
    AtomicTarget, MwBind, RdmaTarget, RecvWr, SendWr, SgList, Sge, UdTarget, VendorErr,
    WorkCompletion,
};
