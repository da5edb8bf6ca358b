//! The InfiniBand Communication Manager (IBTA volume 1 chapter 12) as a sans-IO state
//! machine: the protocol rdma_cm runs over QP1 to connect, reject and disconnect RC QPs
//! and to resolve UD service IDs (SIDR), behaving on the wire as the Linux kernel's
//! `drivers/infiniband/core/cm.c` does, so it interoperates with rxe's peers.
//!
//! It knows nothing of QPs, sockets, threads or the clock: it takes CM MADs (as
//! [`CmMadRepr`](softroce_wire::CmMadRepr) plus the GID they came from) and the time as
//! arguments, and hands back MADs to send, a deadline, and events telling the application
//! what to do with its QPs.
//!
//! # Call contract
//!
//! [`CmEndpoint`]'s methods come in four kinds, in the quinn-proto manner:
//!
//! - A. Getters (`state`, `connection_count`, `counters`, …), taking `&self`.
//! - B. Handlers: [`handle_mad`](CmEndpoint::handle_mad) (or
//!   [`handle_mad_bytes`](CmEndpoint::handle_mad_bytes)) for every MAD QP1 receives with
//!   management class CM, and [`handle_timeout`](CmEndpoint::handle_timeout) once the
//!   deadline of `poll_timeout` has passed (early or repeated calls are harmless).
//! - C. Application calls: `listen`, `connect`, `accept`, `reject`, `delay_response`,
//!   `send_rtu`, `establish`, `disconnect`, `destroy`, `sidr_resolve`, `sidr_reply`. They
//!   check the connection's state and return [`CmError`] (changing nothing) when the call
//!   does not apply.
//! - D. Polls. After every B or C call, in this order:
//!   1. [`poll_transmit`](CmEndpoint::poll_transmit) until `None`: send each MAD from QP1
//!      to QP1 at its destination GID (Q_Key `0x8001_0000`).
//!   2. [`poll_timeout`](CmEndpoint::poll_timeout): when to call `handle_timeout`.
//!   3. [`poll_event`](CmEndpoint::poll_event) until `None`: act on each [`CmEvent`].
//!
//! Time is an `Instant` argument: give the handlers and calls the current time, never
//! going backwards.
//!
//! # A connection, step by step
//!
//! | active side                              | wire | passive side                          |
//! |------------------------------------------|------|---------------------------------------|
//! | `connect` (QP in INIT)                   | REQ→ | `ConnectRequest`: QP to RTR, `accept` |
//! | `ConnectResponse`: QP to RTR, RTS; `send_rtu`, `Established` | ←REP | (REP retried until RTU) |
//! |                                          | RTU→ | `Established`: QP to RTS              |
//! | `disconnect`                             | DREQ→| `Disconnected`: QP to ERR, `disconnect` |
//! | `Disconnected`, later `TimeWaitExit`     | ←DREP| later `TimeWaitExit`                  |
//!
//! When the passive QP receives data before the RTU (the RTU was lost), the application
//! calls [`establish`](CmEndpoint::establish), as rdma_cm does on `IB_EVENT_COMM_EST`.
//!
//! ```
//! use std::time::Instant;
//! use softroce_emu_cm::{AcceptParams, CmConfig, CmEndpoint, CmEvent, ConnectParams};
//! use softroce_wire::{Gid, Mtu, PortSpace, Psn, Qpn};
//!
//! let (a_gid, b_gid) = (Gid::from_ipv4([10, 0, 0, 1].into()), Gid::from_ipv4([10, 0, 0, 2].into()));
//! let mut a = CmEndpoint::new(CmConfig::new(a_gid, 0xa, 1));
//! let mut b = CmEndpoint::new(CmConfig::new(b_gid, 0xb, 2));
//! let service = PortSpace::Tcp.service_id(7471);
//! let now = Instant::now();
//! b.listen(service)?;
//! a.connect(now, ConnectParams {
//!     remote_gid: b_gid, service_id: service, local_qpn: Qpn::new(0x11).unwrap(),
//!     starting_psn: Psn::new(1), responder_resources: 1, initiator_depth: 1, retry_count: 7,
//!     rnr_retry_count: 7, path_mtu: Mtu::Mtu1024, srq: false, qp_type: Default::default(),
//!     flow_control: true, ece: Default::default(), path: None, private_data: Vec::new(),
//! })?;
//! let req = a.poll_transmit().unwrap();
//! b.handle_mad(now, a_gid, req.mad);
//! let Some(CmEvent::ConnectRequest { id, params, .. }) = b.poll_event() else { panic!() };
//! assert_eq!(params.remote_qpn.value(), 0x11);
//! b.accept(now, id, AcceptParams {
//!     local_qpn: Qpn::new(0x22).unwrap(), starting_psn: Psn::new(2), responder_resources: 1,
//!     initiator_depth: 1, rnr_retry_count: 7, srq: false, xrc: false, flow_control: true,
//!     ece: Default::default(), private_data: Vec::new(),
//! })?;
//! let rep = b.poll_transmit().unwrap();
//! a.handle_mad(now, b_gid, rep.mad);
//! assert!(matches!(a.poll_event(), Some(CmEvent::ConnectResponse { .. })));
//! # Ok::<(), softroce_emu_cm::CmError>(())
//! ```
//!
//! # Timers
//!
//! A REQ, REP, DREQ or SIDR_REQ is retransmitted unchanged every CM response timeout (the
//! kernel's `cm_convert_to_ms`, see [`cm_timeout`]) up to `max_cm_retries` times; then the
//! connection fails ([`CmEvent::Unreachable`], or time-wait after a DREQ). An MRA extends
//! the wait. Time-wait lasts the path's ACK timeout, after which [`CmEvent::TimeWaitExit`]
//! is reported and the connection forgotten.

mod endpoint;
mod private_data;
mod timing;
mod types;

pub use endpoint::CmEndpoint;
pub use private_data::{cma_private_data, cma_sidr_private_data, split_cma_private_data};
pub use timing::{cm_ack_timeout, cm_timeout};
pub use types::{
    AcceptParams, COMM_ID_SLOT_SHIFT, CmConfig, CmCounters, CmError, CmEvent, CmQpType, CmState,
    CmTransmit, ConnId, ConnectParams, Ece, PathParams, REJ_CONSUMER_DEFINED,
    REJ_INVALID_SERVICE_ID, REJ_STALE_CONN, REJ_TIMEOUT, REJ_VENDOR_OPTION_NOT_SUPPORTED,
    ReplyParams, RequestParams, SIDR_REJECT, SIDR_SUCCESS, SIDR_UNSUPPORTED, SidrParams, SidrReply,
    comm_id_slot,
};
