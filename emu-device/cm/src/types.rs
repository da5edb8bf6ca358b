//! The CM's plain data: configuration, parameters, events, errors and counters.

use core::fmt;

use softroce_wire::cm::{
    CmMadRepr, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN,
    SIDR_REP_PRIVATE_DATA_LEN, SIDR_REQ_PRIVATE_DATA_LEN,
};
use softroce_wire::{Gid, Mtu, Psn, Qpn};

/// `IB_CM_REJ_TIMEOUT`: the active side gave up (sent when a pending request is destroyed).
pub const REJ_TIMEOUT: u16 = 4;
/// `IB_CM_REJ_INVALID_SERVICE_ID`: nobody listens on the requested service ID.
pub const REJ_INVALID_SERVICE_ID: u16 = 8;
/// `IB_CM_REJ_STALE_CONN`: the request names a QP that is still connected (or the comm ID
/// of a connection in time-wait).
pub const REJ_STALE_CONN: u16 = 10;
/// `IB_CM_REJ_CONSUMER_DEFINED`: the application rejected.
pub const REJ_CONSUMER_DEFINED: u16 = 28;
/// REJ reason: the responder does not take the requester's ECE options (librdmacm's
/// `rdma_reject_ece`).
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

/// `IB_SIDR_SUCCESS`: the SIDR_REP names a valid QP.
pub const SIDR_SUCCESS: u8 = 0;
/// `IB_SIDR_UNSUPPORTED`: nobody listens on the service ID.
pub const SIDR_UNSUPPORTED: u8 = 1;
/// `IB_SIDR_REJECT`: the application rejected (or destroyed the request).
pub const SIDR_REJECT: u8 = 2;

/// One connection (or SIDR exchange) of a [`CmEndpoint`](crate::CmEndpoint): its local
/// communication ID, the value the peer sees in our messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cm#{:#010x}", self.0)
    }
}

/// The CM states of IBTA chapter 12 (`enum ib_cm_state`). IDLE is not represented: an idle
/// connection is forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP/REJ/MRA.
    ReqSent,
    /// Passive: REQ received, waiting for the application to accept or reject.
    ReqRcvd,
    /// Passive: MRA sent for the REQ (the application asked for more time).
    MraReqSent,
    /// Active: MRA received for our REQ (the REQ timer was extended).
    MraReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, waiting for the application to send the RTU.
    RepRcvd,
    /// Active: MRA sent for the REP.
    MraRepSent,
    /// Passive: MRA received for our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received, waiting for the application to disconnect (send the DREP).
    DreqRcvd,
    /// Disconnected; comm ID and QPN kept out of reuse until the timer runs out.
    TimeWait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, waiting for the application's reply.
    SidrReqRcvd,
}

/// How the endpoint identifies itself and times its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The GID our CM MADs leave from (the primary path's local GID).
    pub local_gid: Gid,
    /// Our CA GUID (the node GUID, `Local CA GUID` of REQ and REP).
    pub ca_guid: u64,
    /// Seed of the communication-ID scrambler and the transaction-ID high word: the
    /// kernel draws them at random; a seed keeps runs reproducible.
    pub seed: u64,
    /// CM response timeout exponent we advertise and wait with (rdma_cm's
    /// `CMA_CM_RESPONSE_TIMEOUT`, 20: about 4 s).
    pub cm_response_timeout: u8,
    /// Retransmissions of REQ, REP, DREQ and SIDR_REQ before giving up (rdma_cm's
    /// `CMA_MAX_CM_RETRIES`, 15; 4 bits on the wire).
    pub max_cm_retries: u8,
    /// Packet life time exponent of the path (rdma_cm uses `CMA_IBOE_PACKET_LIFETIME`, 16,
    /// on RoCE).
    pub packet_life_time: u8,
    /// Our CA's ACK delay exponent (the REP's target ACK delay; rxe reports 15).
    pub ack_delay: u8,
    /// Partition key of our requests.
    pub pkey: u16,
    /// The slot of this process when several share the device (`None`: alone). Our
    /// communication IDs then carry it in their top bits ([`comm_id_slot`]), so the
    /// process receiving the device's MADs can route every answer to its connection's
    /// process.
    pub id_slot: Option<u8>,
}

/// Bits of a communication ID below the slot of a shared device (64 slots).
pub const COMM_ID_SLOT_SHIFT: u32 = 26;

/// The slot a communication ID of a shared device's endpoint belongs to.
pub const fn comm_id_slot(id: u32) -> u8 {
    (id >> COMM_ID_SLOT_SHIFT) as u8
}

impl CmConfig {
    /// rdma_cm's defaults on RoCE, for an endpoint at `local_gid` with `ca_guid`.
    pub const fn new(local_gid: Gid, ca_guid: u64, seed: u64) -> Self {
        Self {
            local_gid,
            ca_guid,
            seed,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            ack_delay: 15,
            pkey: 0xffff,
            id_slot: None,
        }
    }
}

/// Enhanced Connection Establishment options (librdmacm's `ibv_ece`): a vendor's QP
/// options offered in the REQ and answered in the REP. On the wire the vendor ID (24 bits)
/// rides in the message's VendorID field, the options in the MAD header's attribute
/// modifier (the kernel's `cm_format_req`, `cm_format_rep`). All zero: no ECE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ece {
    /// Vendor ID (24 bits; 0 = none).
    pub vendor_id: u32,
    /// The vendor's options.
    pub options: u32,
}

/// A RoCE path as the REQ's primary path carries it: the GRH fields the passive side's QP
/// sends with and the packet life time its ACK timeout follows from (the kernel's
/// `cm_format_req` and `cm_format_paths_from_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathParams {
    /// GRH traffic class (rdma_cm: the id's TOS when the route was resolved).
    pub traffic_class: u8,
    /// GRH flow label (20 bits).
    pub flow_label: u32,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// Service level.
    pub sl: u8,
    /// Packet life time exponent: the REQ's Local ACK Timeout is
    /// [`cm_ack_timeout`](crate::cm_ack_timeout)`(ack delay, packet_life_time)`; on the
    /// passive side, one less than the REQ's Local ACK Timeout.
    pub packet_life_time: u8,
}

/// The connected QP types a REQ names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CmQpType {
    /// Reliable connected (transport service type 0).
    #[default]
    Rc,
    /// Unreliable connected (type 1).
    Uc,
    /// An XRC initiator: type 3, extended type 1; the REP names the target QP in its local
    /// EECN.
    Xrc,
}

/// What [`CmEndpoint::connect`](crate::CmEndpoint::connect) puts in the REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The GID of the peer's port (its CM answers from there).
    pub remote_gid: Gid,
    /// Service ID to connect to (rdma_cm: [`PortSpace::service_id`](softroce_wire::PortSpace::service_id)).
    pub service_id: u64,
    /// Our RC QP.
    pub local_qpn: Qpn,
    /// The REQ's starting PSN. The kernel's CM (so rdma_cm) uses it as the active side's
    /// receive PSN: the passive side sends from it (`cm_req_handler` sets its `sq_psn`).
    pub starting_psn: Psn,
    /// RDMA READ / atomic requests we accept at once (our `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READ / atomic requests we issue at once (our `max_rd_atomic`).
    pub initiator_depth: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// RNR retry count (3 bits; 7 = forever).
    pub rnr_retry_count: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Our QP's type, the REQ's transport service type (the kernel's `cm_req_set_qp_type`).
    pub qp_type: CmQpType,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// ECE options offered (REQ).
    pub ece: Ece,
    /// The route's path; `None`: traffic class, flow label and SL 0, hop limit 64 and the
    /// configured packet life time.
    pub path: Option<PathParams>,
    /// Private data (at most 92 bytes; rdma_cm starts it with a `cma_hdr`, see
    /// [`cma_private_data`](crate::cma_private_data)).
    pub private_data: Vec<u8>,
}

/// What [`CmEndpoint::accept`](crate::CmEndpoint::accept) puts in the REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Our RC QP.
    pub local_qpn: Qpn,
    /// The REP's starting PSN: for the kernel's CM the passive side's receive PSN, the
    /// active side sends from it (`cm_rep_handler` sets its `sq_psn`).
    pub starting_psn: Psn,
    /// RDMA READ / atomic requests we accept at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests we issue at once.
    pub initiator_depth: u8,
    /// RNR retry count the requester should use towards us (3 bits).
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Our QP is an XRC target: the REP names it in its local EECN, with the SRQ bit set
    /// (the kernel's `cm_format_rep`).
    pub xrc: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// ECE answered (REP): librdmacm echoes the REQ's vendor with its own options.
    pub ece: Ece,
    /// Private data (at most 196 bytes).
    pub private_data: Vec<u8>,
}

/// A received REQ from the passive side's point of view: what its QP needs for RTR/RTS.
/// Like the kernel's `ib_cm_req_event_param`, responder resources and initiator depth are
/// swapped into local terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestParams {
    /// The requested service ID.
    pub service_id: u64,
    /// The GID the REQ came from.
    pub remote_gid: Gid,
    /// The requester's CA GUID.
    pub remote_ca_guid: u64,
    /// The requester's QP (our QP's destination).
    pub remote_qpn: Qpn,
    /// The REQ's starting PSN: as the kernel's CM uses it, the PSN our QP sends from
    /// (the requester receives from it).
    pub starting_psn: Psn,
    /// Our responder resources: the requester's initiator depth.
    pub responder_resources: u8,
    /// Our initiator depth: the requester's responder resources.
    pub initiator_depth: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// Path MTU (`None` when the REQ carries an unknown code).
    pub path_mtu: Option<Mtu>,
    /// Transport service type (0 RC, 1 UC, 3 extended).
    pub transport_service_type: u8,
    /// The requester uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Local ACK timeout exponent of the primary path (our QP's `timeout`).
    pub local_ack_timeout: u8,
    /// The primary path the REQ carries (its packet life time one less than the Local ACK
    /// Timeout, as the kernel's `cm_format_paths_from_req`).
    pub path: PathParams,
    /// The requester's ECE offer.
    pub ece: Ece,
}

/// A received REP from the active side's point of view (responder resources and
/// initiator depth swapped into local terms, as in `ib_cm_rep_event_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyParams {
    /// The responder's CA GUID.
    pub remote_ca_guid: u64,
    /// The responder's QP (our QP's destination).
    pub remote_qpn: Qpn,
    /// The REP's starting PSN: as the kernel's CM uses it, the PSN our QP sends from
    /// (the responder receives from it).
    pub starting_psn: Psn,
    /// Our responder resources: the responder's initiator depth.
    pub responder_resources: u8,
    /// Our initiator depth: the responder's responder resources.
    pub initiator_depth: u8,
    /// The responder's CA ACK delay exponent.
    pub target_ack_delay: u8,
    /// RNR retry count to use towards the responder.
    pub rnr_retry_count: u8,
    /// The responder uses an SRQ.
    pub srq: bool,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Local ACK timeout exponent for our QP (`cm_ack_timeout` of the target ACK delay
    /// and the path's packet life time).
    pub local_ack_timeout: u8,
    /// The responder's ECE answer.
    pub ece: Ece,
}

/// What [`CmEndpoint::sidr_resolve`](crate::CmEndpoint::sidr_resolve) puts in the SIDR_REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The GID of the peer's port.
    pub remote_gid: Gid,
    /// Service ID to resolve.
    pub service_id: u64,
    /// Private data (at most 216 bytes; rdma_cm starts it with a `cma_hdr`).
    pub private_data: Vec<u8>,
}

/// What [`CmEndpoint::sidr_reply`](crate::CmEndpoint::sidr_reply) puts in the SIDR_REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReply {
    /// [`SIDR_SUCCESS`] or a refusal such as [`SIDR_REJECT`].
    pub status: u8,
    /// The UD QP serving the service.
    pub qpn: Qpn,
    /// Its Q_Key.
    pub qkey: u32,
    /// Private data (at most 136 bytes).
    pub private_data: Vec<u8>,
}

/// What the application learns, in the order it happened; mirrors rdma_cm's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service we listen on: answer with `accept`, `reject` or
    /// `delay_response`.
    ConnectRequest {
        /// The new passive connection.
        id: ConnId,
        /// The request, in local terms.
        params: RequestParams,
        /// The REQ's private data (all 92 bytes: the wire carries no length).
        private_data: Vec<u8>,
    },
    /// A REP for our REQ: bring the QP to RTR and RTS, then call `send_rtu`.
    ConnectResponse {
        /// The active connection.
        id: ConnId,
        /// The reply, in local terms.
        params: ReplyParams,
        /// The REP's private data (196 bytes).
        private_data: Vec<u8>,
    },
    /// The connection is up: RTU received, `establish` called (data arrived first) or, on
    /// the active side, RTU sent.
    Established {
        /// The connection.
        id: ConnId,
    },
    /// The peer sent a REJ (also: a REQ to a service nobody listens on, reason
    /// [`REJ_INVALID_SERVICE_ID`]). The ID is forgotten unless the reason sent it to
    /// time-wait (a [`CmEvent::TimeWaitExit`] follows).
    Rejected {
        /// The connection.
        id: ConnId,
        /// `enum ib_cm_rej_reason`.
        reason: u16,
        /// Additional rejection information (72 bytes).
        ari: Vec<u8>,
        /// The REJ's private data (148 bytes).
        private_data: Vec<u8>,
    },
    /// Our REQ or REP went unanswered through every retry; the ID is forgotten.
    Unreachable {
        /// The connection.
        id: ConnId,
    },
    /// The connection is going down: DREQ received (answer with `disconnect`), DREP
    /// received, or our DREQ went unanswered. A [`CmEvent::TimeWaitExit`] follows.
    Disconnected {
        /// The connection.
        id: ConnId,
        /// Our DREQ went unanswered through every retry (the kernel's `IB_CM_DREQ_ERROR`,
        /// which rdma_cm reports as DISCONNECTED with status -ETIMEDOUT).
        timed_out: bool,
    },
    /// Time-wait is over: the QP may be reused; the ID is forgotten.
    TimeWaitExit {
        /// The connection.
        id: ConnId,
    },
    /// A SIDR_REQ for a service we listen on: answer with `sidr_reply`.
    SidrRequest {
        /// The SIDR exchange.
        id: ConnId,
        /// The requested service ID.
        service_id: u64,
        /// The GID the request came from.
        remote_gid: Gid,
        /// The request's partition key.
        pkey: u16,
        /// The SIDR_REQ's private data (216 bytes).
        private_data: Vec<u8>,
    },
    /// The SIDR_REP for our SIDR_REQ; the ID is forgotten.
    SidrResponse {
        /// The SIDR exchange.
        id: ConnId,
        /// `enum ib_cm_sidr_status` ([`SIDR_SUCCESS`] when `qpn` is valid).
        status: u8,
        /// The UD QP serving the service.
        qpn: Qpn,
        /// Its Q_Key.
        qkey: u32,
        /// The SIDR_REP's private data (136 bytes).
        private_data: Vec<u8>,
    },
    /// Our SIDR_REQ went unanswered through every retry; the ID is forgotten.
    SidrUnreachable {
        /// The SIDR exchange.
        id: ConnId,
    },
}

impl CmEvent {
    /// The connection the event is about.
    pub const fn id(&self) -> ConnId {
        match self {
            Self::ConnectRequest { id, .. }
            | Self::ConnectResponse { id, .. }
            | Self::Established { id }
            | Self::Rejected { id, .. }
            | Self::Unreachable { id }
            | Self::Disconnected { id, .. }
            | Self::TimeWaitExit { id }
            | Self::SidrRequest { id, .. }
            | Self::SidrResponse { id, .. }
            | Self::SidrUnreachable { id } => *id,
        }
    }
}

/// A CM MAD to send from QP1 to QP1 at `dest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmTransmit {
    /// The peer's GID.
    pub dest: Gid,
    /// The MAD.
    pub mad: CmMadRepr,
}

/// Why a user call was refused. Nothing changed when an error is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// The ID never existed, or reached its final event and was forgotten.
    #[error(
        "{0} is not a connection of this endpoint (unknown, or forgotten after its final event)"
    )]
    UnknownConnection(ConnId),
    /// The call does not apply in the connection's state.
    #[error("{operation} is not allowed on {id} in state {state:?}")]
    WrongState {
        /// The connection.
        id: ConnId,
        /// Its state.
        state: CmState,
        /// The refused call.
        operation: &'static str,
    },
    /// `establish` on a connection that is already established (`-EISCONN`).
    #[error("{0} is already established")]
    AlreadyEstablished(ConnId),
    /// More private data than the message has room for.
    #[error("{len} bytes of private data do not fit in a {message} (at most {max})")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Room in the message.
        max: usize,
        /// The message.
        message: &'static str,
    },
    /// A parameter does not fit its wire field.
    #[error("{name} = {value} does not fit in {bits} bits")]
    FieldTooWide {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: u32,
        /// The field width.
        bits: u32,
    },
    /// `listen` on a service ID that is already listened on.
    #[error("service ID {0:#018x} is already listened on")]
    AlreadyListening(u64),
    /// `stop_listening` on a service ID nobody listens on.
    #[error("service ID {0:#018x} is not listened on")]
    NotListening(u64),
}

/// Room for private data in each message, for the length checks.
pub(crate) mod room {
    use super::*;
    pub(crate) const REQ: (usize, &str) = (REQ_PRIVATE_DATA_LEN, "REQ");
    pub(crate) const REP: (usize, &str) = (REP_PRIVATE_DATA_LEN, "REP");
    pub(crate) const REJ: (usize, &str) = (REJ_PRIVATE_DATA_LEN, "REJ");
    pub(crate) const SIDR_REQ: (usize, &str) = (SIDR_REQ_PRIVATE_DATA_LEN, "SIDR_REQ");
    pub(crate) const SIDR_REP: (usize, &str) = (SIDR_REP_PRIVATE_DATA_LEN, "SIDR_REP");
    pub(crate) const ARI: usize = REJ_ARI_LEN;
}

/// What the endpoint did with the MADs it was given and sent; the kernel keeps the same
/// (`cm_rx_msgs`, `cm_tx_msgs`, `cm_tx_retries`, `cm_rx_duplicates`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs handed to `handle_mad` / `handle_mad_bytes`.
    pub received: u64,
    /// MADs queued for transmission, retransmissions included.
    pub sent: u64,
    /// Retransmissions after a response timeout.
    pub retransmitted: u64,
    /// Duplicates recognised (and answered or dropped as the state says).
    pub duplicates: u64,
    /// Dropped: not a parseable CM MAD of class version 2, or its attribute ID does not
    /// match its message.
    pub dropped_malformed: u64,
    /// Dropped: a CM attribute or method we do not handle (LAP, APR, ClassPortInfo, a
    /// method other than SEND).
    pub dropped_unsupported: u64,
    /// Dropped: no connection has the MAD's communication IDs.
    pub dropped_unmatched: u64,
    /// Dropped: the connection's state does not expect this message (or a DREQ names
    /// another QP).
    pub dropped_unexpected: u64,
    /// REQs refused at once because nobody listens on their service ID.
    pub rejected_no_listener: u64,
    /// REQs the application dropped unanswered (a full listen backlog), for the
    /// requester's retry.
    pub dropped_requests: u64,
}
