//! [`CmEndpoint`]: every connection of one CM agent (one port's QP1), its listeners, timers
//! and the queues of MADs to send and events to report.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use softroce_wire::cm::{
    CmDrepRepr, CmDreqRepr, CmMraRepr, CmMsgResponse, CmPathRepr, CmRejRepr, CmRepRepr, CmReqRepr,
    CmRtuRepr, CmSidrRepRepr, CmSidrReqRepr, MRA_PRIVATE_DATA_LEN,
};
use softroce_wire::mad::{BASE_VERSION, METHOD_SEND, Mad};
use softroce_wire::{CmMadRepr, CmMessage, Gid, Mtu, Qpn};

use crate::timing::{cm_ack_timeout, cm_timeout};
use crate::types::*;

/// The permissive LID: RoCE has no LIDs and the kernel writes this for routed (hop limit
/// > 1) paths, which every RoCEv2 path is.
const PERMISSIVE_LID: u16 = 0xffff;
/// Hop limit of the primary path we advertise (RoCEv2 routes over IP).
const ROCE_HOP_LIMIT: u8 = 64;
/// The service timeout of the MRA rdma_cm sends for a request its application has not
/// answered yet (the kernel's CMA_CM_MRA_SETTING: 2^24 x 4.096 us, about 69 s).
const RDMA_CM_MRA_SERVICE_TIMEOUT: u8 = 24;
/// Transport service type RC in a REQ.
const TRANSPORT_RC: u8 = 0;
/// Transport service type UC in a REQ.
const TRANSPORT_UC: u8 = 1;
/// Transport service type "extended" in a REQ, with extended transport type 1: XRC.
const TRANSPORT_EXTENDED: u8 = 3;
const EXTENDED_XRC: u8 = 1;

/// A request or reply waiting for its answer, retransmitted on timeout (the MAD layer's
/// `ib_mad_send_buf` with `retries` and `timeout_ms`).
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    mad: CmMadRepr,
    retries_left: u8,
    timeout: Duration,
    deadline: Instant,
}

/// One connection or SIDR exchange (`cm_id_private`).
#[derive(Debug, Clone)]
struct Connection {
    state: CmState,
    /// Where our MADs for this connection go.
    peer: Gid,
    /// The peer's communication ID; 0 until its first message names it.
    remote_comm_id: u32,
    remote_ca_guid: u64,
    remote_qpn: Qpn,
    local_qpn: Qpn,
    service_id: u64,
    /// Transaction ID of the exchange in progress: our REQ's on the active side, the
    /// peer's REQ (then DREQ) on the passive side.
    tid: u64,
    /// How long to wait for an answer before retransmitting (`timeout_ms`).
    response_timeout: Duration,
    max_retries: u8,
    /// The path's ACK timeout exponent (`av.timeout`): time-wait length and MRA grace.
    ack_timeout: u8,
    /// The active side's path packet life time: with the REP's target ACK delay, the
    /// connection's ACK timeout (`cm_rep_handler`).
    packet_life_time: u8,
    outstanding: Option<Outstanding>,
    timewait_until: Option<Instant>,
    /// The RTU or MRA we sent, resent when the message it answers comes again.
    last_reply: Option<CmMadRepr>,
    /// Keys of this connection in the endpoint's duplicate and stale-connection tables.
    remote_id_key: Option<(u64, u32)>,
    remote_qpn_key: Option<(u64, u32)>,
    /// Key in the SIDR duplicate table (passive SIDR only).
    sidr_key: Option<(Gid, u32)>,
    disconnect_reported: bool,
    /// An XRC connection: the REP names the target QP in its local EECN.
    xrc: bool,
}

impl Connection {
    fn new(state: CmState, peer: Gid, config: &CmConfig) -> Self {
        Self {
            state,
            peer,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            remote_qpn: Qpn::default(),
            local_qpn: Qpn::default(),
            service_id: 0,
            tid: 0,
            response_timeout: cm_timeout(config.cm_response_timeout),
            max_retries: config.max_cm_retries,
            ack_timeout: config.packet_life_time.saturating_add(1).min(31),
            packet_life_time: config.packet_life_time,
            outstanding: None,
            timewait_until: None,
            last_reply: None,
            remote_id_key: None,
            remote_qpn_key: None,
            sidr_key: None,
            disconnect_reported: false,
            xrc: false,
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.timewait_until
            .or_else(|| self.outstanding.map(|o| o.deadline))
    }
}

/// The CM of one port, sans IO. See the [crate documentation](crate) for the call contract.
#[derive(Debug)]
pub struct CmEndpoint {
    config: CmConfig,
    /// High word of our transaction IDs (the MAD agent's `hi_tid`).
    hi_tid: u32,
    /// Communication IDs are a counter XORed with this (`cm.random_id_operand`), so a
    /// restarted peer is unlikely to reuse the IDs of its previous life.
    id_scrambler: u32,
    id_counter: u32,
    listeners: BTreeSet<u64>,
    connections: BTreeMap<u32, Connection>,
    /// (remote CA GUID, remote comm ID) → local comm ID: duplicate REQ and REP detection.
    by_remote_id: BTreeMap<(u64, u32), u32>,
    /// (remote CA GUID, remote QPN) → local comm ID: stale connection detection.
    by_remote_qpn: BTreeMap<(u64, u32), u32>,
    /// (requester GID, request ID) → local ID: duplicate SIDR_REQ detection.
    by_sidr_request: BTreeMap<(Gid, u32), u32>,
    transmits: VecDeque<CmTransmit>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
}

/// splitmix64: a seed becomes well-mixed words without a random number crate.
fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed.wrapping_add(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Copy private data into a message's fixed field, zero padded; callers check the length
/// first, and longer input is cut rather than trusted.
fn padded<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    out
}

fn check_room(data: &[u8], (max, message): (usize, &'static str)) -> Result<(), CmError> {
    if data.len() > max {
        return Err(CmError::PrivateDataTooLong {
            len: data.len(),
            max,
            message,
        });
    }
    Ok(())
}

fn check_bits(name: &'static str, value: u8, bits: u32) -> Result<(), CmError> {
    if u32::from(value) >> bits != 0 {
        return Err(CmError::FieldTooWide {
            name,
            value: value.into(),
            bits,
        });
    }
    Ok(())
}

impl CmEndpoint {
    /// An endpoint with no connections and no listeners.
    pub fn new(config: CmConfig) -> Self {
        // hi_tid 0 would make our TIDs look like the comm ID alone; the kernel's start at 1.
        let hi_tid = (mix(config.seed, 1) as u32).max(1);
        Self {
            config,
            hi_tid,
            id_scrambler: mix(config.seed, 2) as u32,
            id_counter: 0,
            listeners: BTreeSet::new(),
            connections: BTreeMap::new(),
            by_remote_id: BTreeMap::new(),
            by_remote_qpn: BTreeMap::new(),
            by_sidr_request: BTreeMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    // ---------------------------------------------------------------------------------
    // A. Getters
    // ---------------------------------------------------------------------------------

    /// The configuration.
    pub const fn config(&self) -> &CmConfig {
        &self.config
    }

    /// The state of a connection; `None` once it is forgotten (or never existed).
    pub fn state(&self, id: ConnId) -> Option<CmState> {
        self.connections.get(&id.0).map(|c| c.state)
    }

    /// Connections and SIDR exchanges still remembered, time-wait included.
    pub fn connection_count(&self) -> usize {
        self.connections.len()
    }

    /// The service IDs listened on.
    pub fn listeners(&self) -> impl Iterator<Item = u64> + '_ {
        self.listeners.iter().copied()
    }

    /// Whether REQs and SIDR_REQs for `service_id` are accepted.
    pub fn is_listening(&self, service_id: u64) -> bool {
        self.listeners.contains(&service_id)
    }

    /// What happened to the MADs so far.
    pub const fn counters(&self) -> &CmCounters {
        &self.counters
    }

    // ---------------------------------------------------------------------------------
    // B. Handlers
    // ---------------------------------------------------------------------------------

    /// A CM MAD that QP1 received from `from`. Malformed, unsupported and unexpected MADs
    /// are counted and dropped.
    pub fn handle_mad(&mut self, now: Instant, from: Gid, mad: CmMadRepr) {
        self.counters.received += 1;
        let header = mad.header;
        if header.base_version != BASE_VERSION
            || !header.is_cm()
            || header.attr_id != mad.message.attr().id()
        {
            self.counters.dropped_malformed += 1;
            return;
        }
        // The CM speaks only SEND; GET/SET are for ClassPortInfo, which we do not serve.
        if header.method != METHOD_SEND {
            self.counters.dropped_unsupported += 1;
            return;
        }
        let tid = header.tid;
        match mad.message {
            CmMessage::Req(m) => self.on_req(now, from, tid, &m, header.attr_mod),
            CmMessage::Mra(m) => self.on_mra(now, &m),
            CmMessage::Rej(m) => self.on_rej(now, &m),
            CmMessage::Rep(m) => self.on_rep(now, from, tid, &m, header.attr_mod),
            CmMessage::Rtu(m) => self.on_rtu(&m),
            CmMessage::Dreq(m) => self.on_dreq(now, from, tid, &m),
            CmMessage::Drep(m) => self.on_drep(now, &m),
            CmMessage::SidrReq(m) => self.on_sidr_req(from, tid, &m),
            CmMessage::SidrRep(m) => self.on_sidr_rep(&m),
            // LAP and APR are not supported on RoCE (the kernel drops them too).
            CmMessage::Other { .. } => self.counters.dropped_unsupported += 1,
        }
    }

    /// The bytes of a MAD that QP1 received from `from` (the UD payload).
    pub fn handle_mad_bytes(&mut self, now: Instant, from: Gid, bytes: &[u8]) {
        match Mad::new_checked(bytes).and_then(|m| CmMadRepr::parse(&m)) {
            Ok(mad) => self.handle_mad(now, from, mad),
            Err(_) => {
                self.counters.received += 1;
                self.counters.dropped_malformed += 1;
            }
        }
    }

    /// Time has reached `now`: retransmit, give up, or leave time-wait. Calls before the
    /// deadline [`poll_timeout`](Self::poll_timeout) gave do nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .connections
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.on_deadline(now, id);
        }
    }

    // ---------------------------------------------------------------------------------
    // C. Application calls
    // ---------------------------------------------------------------------------------

    /// Accept REQs and SIDR_REQs for `service_id` (exact match).
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    /// Stop accepting requests for `service_id`; connections already made stay.
    pub fn stop_listening(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listeners.remove(&service_id) {
            return Err(CmError::NotListening(service_id));
        }
        Ok(())
    }

    /// Send a REQ (`ib_send_cm_req`) and retry it every CM response timeout until a REP,
    /// REJ or MRA arrives.
    pub fn connect(&mut self, now: Instant, params: ConnectParams) -> Result<ConnId, CmError> {
        check_room(&params.private_data, room::REQ)?;
        check_bits("retry_count", params.retry_count, 3)?;
        check_bits("rnr_retry_count", params.rnr_retry_count, 3)?;
        let local = self.alloc_comm_id();
        let cfg = self.config;
        let mut conn = Connection::new(CmState::ReqSent, params.remote_gid, &cfg);
        conn.local_qpn = params.local_qpn;
        conn.service_id = params.service_id;
        let xrc = params.qp_type == CmQpType::Xrc;
        conn.xrc = xrc;
        conn.tid = self.tid_for(local);
        let route = params.path.unwrap_or(PathParams {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: ROCE_HOP_LIMIT,
            sl: 0,
            packet_life_time: cfg.packet_life_time,
        });
        let plt = route.packet_life_time.min(31);
        conn.packet_life_time = plt;
        // The active side waits for the REQ's round trip plus the peer's processing time.
        conn.response_timeout = cm_timeout(plt) * 2 + cm_timeout(cfg.cm_response_timeout);
        conn.max_retries = cfg.max_cm_retries.min(15);
        // The kernel's cm_format_req: the route's GRH fields; subnet-local when the packets
        // never leave the subnet.
        let path = CmPathRepr {
            local_lid: PERMISSIVE_LID,
            remote_lid: PERMISSIVE_LID,
            local_gid: cfg.local_gid,
            remote_gid: params.remote_gid,
            flow_label: route.flow_label & 0xf_ffff,
            packet_rate: 0,
            traffic_class: route.traffic_class,
            hop_limit: route.hop_limit,
            sl: route.sl & 0xf,
            subnet_local: route.hop_limit <= 1,
            local_ack_timeout: cm_ack_timeout(cfg.ack_delay, plt),
        };
        let req = CmReqRepr {
            local_comm_id: local,
            vendor_id: params.ece.vendor_id,
            service_id: params.service_id,
            local_ca_guid: cfg.ca_guid,
            local_qkey: 0,
            local_qpn: params.local_qpn,
            responder_resources: params.responder_resources,
            local_eecn: 0,
            initiator_depth: params.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.cm_response_timeout.min(31),
            transport_service_type: match params.qp_type {
                CmQpType::Rc => TRANSPORT_RC,
                CmQpType::Uc => TRANSPORT_UC,
                CmQpType::Xrc => TRANSPORT_EXTENDED,
            },
            end_to_end_flow_control: params.flow_control,
            starting_psn: params.starting_psn,
            local_cm_response_timeout: cfg.cm_response_timeout.min(31),
            retry_count: params.retry_count,
            pkey: cfg.pkey,
            path_mtu: params.path_mtu.code(),
            rdc_exists: false,
            rnr_retry_count: params.rnr_retry_count,
            max_cm_retries: conn.max_retries,
            srq: params.srq,
            extended_transport_type: if xrc { EXTENDED_XRC } else { 0 },
            primary_path: path,
            alternate_path: CmPathRepr::default(),
            sap_supported: false,
            private_data: padded(&params.private_data),
        };
        let mad = with_ece_options(CmMadRepr::new(conn.tid, CmMessage::Req(req)), params.ece);
        self.connections.insert(local, conn);
        self.send_expecting_answer(now, local, mad);
        Ok(ConnId(local))
    }

    /// Answer a [`CmEvent::ConnectRequest`] with a REP (`ib_send_cm_rep`), retried until
    /// the RTU (or [`establish`](Self::establish)).
    pub fn accept(
        &mut self,
        now: Instant,
        id: ConnId,
        params: AcceptParams,
    ) -> Result<(), CmError> {
        check_room(&params.private_data, room::REP)?;
        check_bits("rnr_retry_count", params.rnr_retry_count, 3)?;
        let cfg = self.config;
        let conn = self.conn_in(id, &[CmState::ReqRcvd, CmState::MraReqSent], "accept")?;
        let rep = CmRepRepr {
            local_comm_id: id.0,
            remote_comm_id: conn.remote_comm_id,
            local_qkey: 0,
            local_qpn: if params.xrc {
                Qpn::default()
            } else {
                params.local_qpn
            },
            local_eecn: if params.xrc {
                params.local_qpn.value()
            } else {
                0
            },
            starting_psn: params.starting_psn,
            vendor_id: params.ece.vendor_id,
            responder_resources: params.responder_resources,
            initiator_depth: params.initiator_depth,
            target_ack_delay: cfg.ack_delay.min(31),
            failover_accepted: 0,
            end_to_end_flow_control: params.flow_control,
            rnr_retry_count: params.rnr_retry_count,
            srq: params.srq || params.xrc,
            local_ca_guid: cfg.ca_guid,
            private_data: padded(&params.private_data),
        };
        let mad = with_ece_options(CmMadRepr::new(conn.tid, CmMessage::Rep(rep)), params.ece);
        let conn = self.conn_mut(id)?;
        conn.local_qpn = params.local_qpn;
        conn.state = CmState::RepSent;
        self.send_expecting_answer(now, id.0, mad);
        Ok(())
    }

    /// Refuse a request or reply with a REJ of reason [`REJ_CONSUMER_DEFINED`]
    /// (`ib_send_cm_rej`). Before a REP was sent the ID is forgotten at once; after, it
    /// goes through time-wait.
    pub fn reject(&mut self, now: Instant, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        self.reject_for(now, id, REJ_CONSUMER_DEFINED, private_data)
    }

    /// Drop a [`CmEvent::ConnectRequest`] unanswered, as the kernel's CM drops a REQ its
    /// consumer had no room for (`cm_destroy_id` of a REQ_RCVD ID with -ENOMEM: "do not
    /// reject to allow future retries"): the requester's next REQ comes in as a new request.
    pub fn drop_request(&mut self, id: ConnId) -> Result<(), CmError> {
        self.conn_in(id, &[CmState::ReqRcvd], "drop_request")?;
        self.forget(id.0);
        self.counters.dropped_requests += 1;
        Ok(())
    }

    /// Refuse a request whose ECE options we do not take: a REJ of reason
    /// [`REJ_VENDOR_OPTION_NOT_SUPPORTED`] (librdmacm's `rdma_reject_ece`), otherwise as
    /// [`reject`](Self::reject).
    pub fn reject_ece(
        &mut self,
        now: Instant,
        id: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.reject_for(now, id, REJ_VENDOR_OPTION_NOT_SUPPORTED, private_data)
    }

    fn reject_for(
        &mut self,
        now: Instant,
        id: ConnId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_room(private_data, room::REJ)?;
        let conn = self.conn_in(
            id,
            &[
                CmState::ReqSent,
                CmState::MraReqRcvd,
                CmState::ReqRcvd,
                CmState::MraReqSent,
                CmState::RepRcvd,
                CmState::MraRepSent,
                CmState::RepSent,
                CmState::MraRepRcvd,
            ],
            "reject",
        )?;
        let state = conn.state;
        let mad = self.rej_for_state(id.0, reason, &[], private_data);
        let peer = conn.peer;
        self.send(peer, mad);
        if matches!(state, CmState::RepSent | CmState::MraRepRcvd) {
            self.enter_timewait(now, id.0);
        } else {
            self.forget(id.0);
        }
        Ok(())
    }

    /// Ask the peer for more time with an MRA (`ib_send_cm_mra`): for its REQ (passive)
    /// or its REP (active). The peer waits 4.096 µs × 2^`service_timeout` more.
    pub fn delay_response(
        &mut self,
        id: ConnId,
        service_timeout: u8,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_room(private_data, (MRA_PRIVATE_DATA_LEN, "MRA"))?;
        check_bits("service_timeout", service_timeout, 5)?;
        let conn = self.conn_in(id, &[CmState::ReqRcvd, CmState::RepRcvd], "delay_response")?;
        let (next, mraed) = if conn.state == CmState::ReqRcvd {
            (CmState::MraReqSent, CmMsgResponse::Req)
        } else {
            (CmState::MraRepSent, CmMsgResponse::Rep)
        };
        let mra = CmMraRepr {
            local_comm_id: id.0,
            remote_comm_id: conn.remote_comm_id,
            message_mraed: mraed,
            service_timeout,
            private_data: padded(private_data),
        };
        let mad = CmMadRepr::new(conn.tid, CmMessage::Mra(mra));
        let peer = conn.peer;
        let conn = self.conn_mut(id)?;
        conn.state = next;
        conn.last_reply = Some(mad);
        self.send(peer, mad);
        Ok(())
    }

    /// The active side's QP is in RTS after a [`CmEvent::ConnectResponse`]: send the RTU
    /// (`ib_send_cm_rtu`) and report [`CmEvent::Established`]. The RTU is not retried; a
    /// repeated REP makes us send it again.
    pub fn send_rtu(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        check_room(
            private_data,
            (softroce_wire::cm::RTU_PRIVATE_DATA_LEN, "RTU"),
        )?;
        let conn = self.conn_in(id, &[CmState::RepRcvd, CmState::MraRepSent], "send_rtu")?;
        let rtu = CmRtuRepr {
            local_comm_id: id.0,
            remote_comm_id: conn.remote_comm_id,
            private_data: padded(private_data),
        };
        let mad = CmMadRepr::new(conn.tid, CmMessage::Rtu(rtu));
        let peer = conn.peer;
        let conn = self.conn_mut(id)?;
        conn.state = CmState::Established;
        conn.last_reply = Some(mad);
        self.send(peer, mad);
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// The passive side's QP received data before the RTU (`IB_EVENT_COMM_EST`,
    /// `ib_cm_notify`): the connection is established; stop retrying the REP.
    pub fn establish(&mut self, id: ConnId) -> Result<(), CmError> {
        let conn = self.conn_mut(id)?;
        match conn.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                conn.state = CmState::Established;
                conn.outstanding = None;
                self.events.push_back(CmEvent::Established { id });
                Ok(())
            }
            CmState::Established => Err(CmError::AlreadyEstablished(id)),
            state => Err(CmError::WrongState {
                id,
                state,
                operation: "establish",
            }),
        }
    }

    /// `rdma_disconnect`: on an established connection send a DREQ (retried until the
    /// DREP); after a [`CmEvent::Disconnected`] caused by the peer's DREQ, send the DREP.
    /// Either way the connection ends in time-wait.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_room(
            private_data,
            (softroce_wire::cm::DREQ_PRIVATE_DATA_LEN, "DREQ"),
        )?;
        let conn = self.conn_in(id, &[CmState::Established, CmState::DreqRcvd], "disconnect")?;
        if conn.state == CmState::DreqRcvd {
            self.send_drep(now, id.0, private_data);
            return Ok(());
        }
        let mad = self.dreq_for(id.0, private_data);
        let conn = self.conn_mut(id)?;
        conn.state = CmState::DreqSent;
        // The exchange in progress is now our DREQ: its TID is ours, as `cm_form_tid`.
        conn.tid = mad.header.tid;
        self.send_expecting_answer(now, id.0, mad);
        Ok(())
    }

    /// Forget a connection now (`ib_destroy_cm_id`), telling the peer what the kernel
    /// tells it: REJ (timeout) for our pending REQ, REJ (consumer) for a half-open
    /// connection, one unretried DREQ for an established one, the DREP the peer waits for,
    /// a SIDR_REP (reject) for a pending SIDR_REQ. No event follows.
    pub fn destroy(&mut self, id: ConnId) -> Result<(), CmError> {
        let conn = self.conn_mut(id)?;
        let peer = conn.peer;
        let farewell = match conn.state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                let guid = self.config.ca_guid.to_be_bytes();
                Some(self.rej_for_state(id.0, REJ_TIMEOUT, &guid, &[]))
            }
            CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::RepRcvd
            | CmState::MraRepSent => Some(self.rej_for_state(id.0, REJ_CONSUMER_DEFINED, &[], &[])),
            CmState::Established => Some(self.dreq_for(id.0, &[])),
            CmState::DreqRcvd => Some(self.drep_for(id.0, &[])),
            CmState::SidrReqRcvd => Some(self.sidr_rep_for(
                id.0,
                &SidrReply {
                    status: SIDR_REJECT,
                    qpn: Qpn::default(),
                    qkey: 0,
                    private_data: Vec::new(),
                },
            )),
            CmState::DreqSent | CmState::TimeWait | CmState::SidrReqSent => None,
        };
        if let Some(mad) = farewell {
            self.send(peer, mad);
        }
        self.forget(id.0);
        Ok(())
    }

    /// Destroy every connection ([`destroy`](Self::destroy) each): what the kernel does
    /// for a process that exits with its rdma_cm ids (ucma_close), so its peers hear a DREQ
    /// or a REJ instead of retrying into silence.
    pub fn destroy_all(&mut self) {
        let ids: Vec<u32> = self.connections.keys().copied().collect();
        for id in ids {
            let _ = self.destroy(ConnId(id));
        }
    }

    /// Resolve a service ID to a UD QPN with a SIDR_REQ (`ib_send_cm_sidr_req`), retried
    /// until the SIDR_REP.
    pub fn sidr_resolve(&mut self, now: Instant, params: SidrParams) -> Result<ConnId, CmError> {
        check_room(&params.private_data, room::SIDR_REQ)?;
        let local = self.alloc_comm_id();
        let cfg = self.config;
        let mut conn = Connection::new(CmState::SidrReqSent, params.remote_gid, &cfg);
        conn.service_id = params.service_id;
        conn.tid = self.tid_for(local);
        conn.max_retries = cfg.max_cm_retries.min(15);
        let req = CmSidrReqRepr {
            request_id: local,
            pkey: cfg.pkey,
            service_id: params.service_id,
            private_data: padded(&params.private_data),
        };
        let mad = CmMadRepr::new(conn.tid, CmMessage::SidrReq(req));
        self.connections.insert(local, conn);
        self.send_expecting_answer(now, local, mad);
        Ok(ConnId(local))
    }

    /// Answer a [`CmEvent::SidrRequest`] (`ib_send_cm_sidr_rep`); the ID is forgotten.
    pub fn sidr_reply(&mut self, id: ConnId, reply: SidrReply) -> Result<(), CmError> {
        check_room(&reply.private_data, room::SIDR_REP)?;
        let conn = self.conn_in(id, &[CmState::SidrReqRcvd], "sidr_reply")?;
        let peer = conn.peer;
        let mad = self.sidr_rep_for(id.0, &reply);
        self.send(peer, mad);
        self.forget(id.0);
        Ok(())
    }

    // ---------------------------------------------------------------------------------
    // D. Polls
    // ---------------------------------------------------------------------------------

    /// The next MAD to send from QP1. Poll until `None` after every handler and call.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<CmTransmit> {
        self.transmits.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next; `None` when no
    /// timer runs.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        // A scan, not a timer heap: a CM holds few connections in flux at once.
        self.connections
            .values()
            .filter_map(Connection::deadline)
            .min()
    }

    /// The next event for the application.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    // ---------------------------------------------------------------------------------
    // Received messages
    // ---------------------------------------------------------------------------------

    /// REQ: `cm_req_handler` and `cm_match_req`.
    fn on_req(&mut self, now: Instant, from: Gid, tid: u64, req: &CmReqRepr, ece_options: u32) {
        let remote_id_key = (req.local_ca_guid, req.local_comm_id);
        if let Some(&local) = self.by_remote_id.get(&remote_id_key) {
            self.counters.duplicates += 1;
            self.on_duplicate_req(local, from, tid);
            return;
        }
        let remote_qpn_key = (req.local_ca_guid, req.local_qpn.value());
        let stale_rej = Self::rej_reply(
            tid,
            req.local_comm_id,
            0,
            CmMsgResponse::Req,
            REJ_STALE_CONN,
        );
        if self.refuse_stale(now, from, remote_qpn_key, stale_rej) {
            return;
        }
        if !self.listeners.contains(&req.service_id) {
            self.counters.rejected_no_listener += 1;
            let rej = Self::rej_reply(
                tid,
                req.local_comm_id,
                0,
                CmMsgResponse::Req,
                REJ_INVALID_SERVICE_ID,
            );
            self.send(from, rej);
            return;
        }
        let local = self.alloc_comm_id();
        let mut conn = Connection::new(CmState::ReqRcvd, from, &self.config);
        conn.remote_comm_id = req.local_comm_id;
        conn.remote_ca_guid = req.local_ca_guid;
        conn.remote_qpn = req.local_qpn;
        conn.service_id = req.service_id;
        conn.tid = tid;
        // Our REP waits as long as the requester said it would take to answer.
        conn.response_timeout = cm_timeout(req.local_cm_response_timeout);
        conn.max_retries = req.max_cm_retries;
        conn.ack_timeout = req.primary_path.local_ack_timeout.max(1);
        self.connections.insert(local, conn);
        self.index_remote(local, remote_id_key, remote_qpn_key);
        let params = RequestParams {
            service_id: req.service_id,
            remote_gid: from,
            remote_ca_guid: req.local_ca_guid,
            remote_qpn: req.local_qpn,
            starting_psn: req.starting_psn,
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            path_mtu: Mtu::from_code(req.path_mtu),
            transport_service_type: req.transport_service_type,
            srq: req.srq,
            flow_control: req.end_to_end_flow_control,
            local_ack_timeout: req.primary_path.local_ack_timeout,
            path: PathParams {
                traffic_class: req.primary_path.traffic_class,
                flow_label: req.primary_path.flow_label,
                hop_limit: req.primary_path.hop_limit,
                sl: req.primary_path.sl,
                packet_life_time: req.primary_path.local_ack_timeout.saturating_sub(1),
            },
            ece: Ece {
                vendor_id: req.vendor_id,
                options: ece_options,
            },
        };
        self.events.push_back(CmEvent::ConnectRequest {
            id: ConnId(local),
            params,
            private_data: req.private_data.to_vec(),
        });
    }

    /// A REQ we already hold a connection for (`cm_dup_req_handler`).
    fn on_duplicate_req(&mut self, local: u32, from: Gid, tid: u64) {
        let Some(conn) = self.connections.get(&local) else {
            return;
        };
        let answer = match conn.state {
            // The application has not answered yet: ask the requester for more time, as
            // rdma_cm's delayed MRA does (cma_ib_req_handler: sent at the first duplicate).
            CmState::ReqRcvd => {
                let _ = self.delay_response(ConnId(local), RDMA_CM_MRA_SERVICE_TIMEOUT, &[]);
                return;
            }
            CmState::MraReqSent => conn.last_reply,
            // Our REP (or its retry) was lost: send it again now rather than wait for our
            // own timer. The kernel only waits; answering is harmless and faster.
            CmState::RepSent | CmState::MraRepRcvd => conn.outstanding.map(|o| o.mad),
            // The requester is retrying a connection we already closed.
            CmState::TimeWait => Some(self.rej_for_state(local, REJ_STALE_CONN, &[], &[])),
            _ => None,
        };
        if let Some(mad) = answer {
            self.send(from, CmMadRepr::new(tid, mad.message));
        }
    }

    /// MRA: `cm_mra_handler`. Extends the wait for the answer to our REQ or REP.
    fn on_mra(&mut self, now: Instant, mra: &CmMraRepr) {
        let local = match mra.message_mraed {
            CmMsgResponse::Req => self.acquire(mra.remote_comm_id, 0),
            CmMsgResponse::Rep | CmMsgResponse::Other => {
                self.acquire(mra.remote_comm_id, mra.local_comm_id)
            }
            CmMsgResponse::Reserved => None,
        };
        let Some(local) = local else {
            self.counters.dropped_unmatched += 1;
            return;
        };
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        let next = match (conn.state, mra.message_mraed) {
            (CmState::ReqSent, CmMsgResponse::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, CmMsgResponse::Rep) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.counters.duplicates += 1;
                return;
            }
            _ => {
                self.counters.dropped_unexpected += 1;
                return;
            }
        };
        // The MRA's service time plus the path's ACK time, for this and any later retry
        // (`ib_modify_mad`).
        let extended = cm_timeout(mra.service_timeout) + cm_timeout(conn.ack_timeout);
        if let Some(out) = conn.outstanding.as_mut() {
            out.timeout = extended;
            out.deadline = now + extended;
        }
        conn.state = next;
    }

    /// REJ: `cm_acquire_rejected_id` and `cm_rej_handler`.
    fn on_rej(&mut self, now: Instant, rej: &CmRejRepr) {
        let local = if rej.reason == REJ_TIMEOUT {
            // A destroyed requester names itself by CA GUID (in the ARI) and comm ID.
            let mut guid = [0u8; 8];
            guid.copy_from_slice(&rej.ari[..8]);
            self.by_remote_id
                .get(&(u64::from_be_bytes(guid), rej.local_comm_id))
                .copied()
        } else if rej.message_rejected == CmMsgResponse::Req {
            self.acquire(rej.remote_comm_id, 0)
        } else {
            self.acquire(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(local) = local else {
            self.counters.dropped_unmatched += 1;
            return;
        };
        let Some(state) = self.state(ConnId(local)) else {
            return;
        };
        let to_timewait = match state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => rej.reason == REJ_STALE_CONN,
            CmState::DreqSent | CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                true
            }
            _ => {
                self.counters.dropped_unexpected += 1;
                return;
            }
        };
        self.events.push_back(CmEvent::Rejected {
            id: ConnId(local),
            reason: rej.reason,
            ari: rej.ari[..usize::from(rej.reject_info_len).min(room::ARI)].to_vec(),
            private_data: rej.private_data.to_vec(),
        });
        if to_timewait {
            if let Some(conn) = self.connections.get_mut(&local) {
                conn.disconnect_reported = true;
            }
            self.enter_timewait(now, local);
        } else {
            self.forget(local);
        }
    }

    /// REP: `cm_rep_handler`, or `cm_dup_rep_handler` when the REQ was already answered.
    fn on_rep(&mut self, now: Instant, from: Gid, tid: u64, rep: &CmRepRepr, ece_options: u32) {
        let Some(local) = self.acquire(rep.remote_comm_id, 0) else {
            self.on_duplicate_rep(rep);
            return;
        };
        let Some(conn) = self.connections.get(&local) else {
            return;
        };
        if !matches!(conn.state, CmState::ReqSent | CmState::MraReqRcvd) {
            // A SIDR exchange with this ID, or an active connection already past its REQ.
            self.counters.dropped_unexpected += 1;
            return;
        }
        let remote_id_key = (rep.local_ca_guid, rep.local_comm_id);
        if self.by_remote_id.contains_key(&remote_id_key) {
            self.counters.duplicates += 1;
            return;
        }
        // An XRC target is named in the REP's local EECN (the kernel's cm_rep_get_qpn).
        let remote_qpn = if conn.xrc {
            Qpn::from_wire(rep.local_eecn)
        } else {
            rep.local_qpn
        };
        let remote_qpn_key = (rep.local_ca_guid, remote_qpn.value());
        let stale_rej = Self::rej_reply(
            tid,
            rep.local_comm_id,
            rep.remote_comm_id,
            CmMsgResponse::Rep,
            REJ_STALE_CONN,
        );
        if self.refuse_stale(now, from, remote_qpn_key, stale_rej) {
            return;
        }
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        let ack_timeout = cm_ack_timeout(rep.target_ack_delay, conn.packet_life_time);
        conn.state = CmState::RepRcvd;
        conn.outstanding = None;
        conn.remote_comm_id = rep.local_comm_id;
        conn.remote_ca_guid = rep.local_ca_guid;
        conn.remote_qpn = remote_qpn;
        conn.ack_timeout = ack_timeout;
        self.index_remote(local, remote_id_key, remote_qpn_key);
        let params = ReplyParams {
            remote_ca_guid: rep.local_ca_guid,
            remote_qpn,
            starting_psn: rep.starting_psn,
            responder_resources: rep.initiator_depth,
            initiator_depth: rep.responder_resources,
            target_ack_delay: rep.target_ack_delay,
            rnr_retry_count: rep.rnr_retry_count,
            srq: rep.srq,
            flow_control: rep.end_to_end_flow_control,
            local_ack_timeout: ack_timeout,
            ece: Ece {
                vendor_id: rep.vendor_id,
                options: ece_options,
            },
        };
        self.events.push_back(CmEvent::ConnectResponse {
            id: ConnId(local),
            params,
            private_data: rep.private_data.to_vec(),
        });
    }

    /// A REP for a REQ already answered: our RTU (or MRA) was lost; send it again.
    fn on_duplicate_rep(&mut self, rep: &CmRepRepr) {
        let Some(local) = self.acquire(rep.remote_comm_id, rep.local_comm_id) else {
            self.counters.dropped_unmatched += 1;
            return;
        };
        self.counters.duplicates += 1;
        let Some(conn) = self.connections.get(&local) else {
            return;
        };
        // Unlike the passive side, no MRA for a REP the application has not answered yet
        // (rdma_cm's delayed MRA on REP_RECEIVED): it would hold the peer's REP retries off
        // for a minute, and an RTU lost after it then costs that minute. Our RTU follows the
        // REP at once (the kernel's does too, for ids with a QP).
        if matches!(conn.state, CmState::Established | CmState::MraRepSent) {
            if let Some(reply) = conn.last_reply {
                let peer = conn.peer;
                self.send(peer, reply);
            }
        }
    }

    /// RTU: `cm_rtu_handler`.
    fn on_rtu(&mut self, rtu: &CmRtuRepr) {
        let Some(local) = self.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
            self.counters.dropped_unmatched += 1;
            return;
        };
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        if !matches!(conn.state, CmState::RepSent | CmState::MraRepRcvd) {
            self.counters.duplicates += 1;
            return;
        }
        conn.state = CmState::Established;
        conn.outstanding = None;
        self.events
            .push_back(CmEvent::Established { id: ConnId(local) });
    }

    /// DREQ: `cm_dreq_handler`.
    fn on_dreq(&mut self, now: Instant, from: Gid, tid: u64, dreq: &CmDreqRepr) {
        let Some(local) = self.acquire(dreq.remote_comm_id, dreq.local_comm_id) else {
            // Long gone (time-wait over): the peer still needs a DREP to finish
            // (`cm_issue_drep`).
            self.counters.duplicates += 1;
            let drep = CmDrepRepr {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; softroce_wire::cm::DREP_PRIVATE_DATA_LEN],
            };
            self.send(from, CmMadRepr::new(tid, CmMessage::Drep(drep)));
            return;
        };
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        if conn.local_qpn != dreq.remote_qpn {
            self.counters.dropped_unexpected += 1;
            return;
        }
        let simultaneous = match conn.state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::Established => false,
            CmState::DreqSent => true,
            CmState::TimeWait => {
                // Our DREP was lost.
                self.counters.duplicates += 1;
                let drep = self.drep_for(local, &[]);
                self.send(from, CmMadRepr::new(tid, drep.message));
                return;
            }
            CmState::DreqRcvd => {
                self.counters.duplicates += 1;
                return;
            }
            _ => {
                self.counters.dropped_unexpected += 1;
                return;
            }
        };
        conn.state = CmState::DreqRcvd;
        conn.outstanding = None;
        conn.tid = tid;
        let first_report = !conn.disconnect_reported;
        conn.disconnect_reported = true;
        if first_report {
            self.events.push_back(CmEvent::Disconnected {
                id: ConnId(local),
                timed_out: false,
            });
        }
        if simultaneous {
            // Both sides asked to disconnect; ours already did, so answer for it (rdma_cm
            // would leave this to destroy).
            self.send_drep(now, local, &[]);
        }
    }

    /// DREP: `cm_drep_handler`.
    fn on_drep(&mut self, now: Instant, drep: &CmDrepRepr) {
        let Some(local) = self.acquire(drep.remote_comm_id, drep.local_comm_id) else {
            self.counters.dropped_unmatched += 1;
            return;
        };
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        if !matches!(conn.state, CmState::DreqSent | CmState::DreqRcvd) {
            self.counters.duplicates += 1;
            return;
        }
        let first_report = !conn.disconnect_reported;
        conn.disconnect_reported = true;
        if first_report {
            self.events.push_back(CmEvent::Disconnected {
                id: ConnId(local),
                timed_out: false,
            });
        }
        self.enter_timewait(now, local);
    }

    /// SIDR_REQ: `cm_sidr_req_handler`.
    fn on_sidr_req(&mut self, from: Gid, tid: u64, req: &CmSidrReqRepr) {
        let key = (from, req.request_id);
        if self.by_sidr_request.contains_key(&key) {
            self.counters.duplicates += 1;
            return;
        }
        if !self.listeners.contains(&req.service_id) {
            let rep = CmSidrRepRepr {
                request_id: req.request_id,
                status: SIDR_UNSUPPORTED,
                additional_info_len: 0,
                qpn: Qpn::default(),
                service_id: req.service_id,
                qkey: 0,
                additional_info: [0; softroce_wire::cm::SIDR_REP_INFO_LEN],
                private_data: [0; softroce_wire::cm::SIDR_REP_PRIVATE_DATA_LEN],
            };
            self.send(from, CmMadRepr::new(tid, CmMessage::SidrRep(rep)));
            return;
        }
        let local = self.alloc_comm_id();
        let mut conn = Connection::new(CmState::SidrReqRcvd, from, &self.config);
        conn.remote_comm_id = req.request_id;
        conn.service_id = req.service_id;
        conn.tid = tid;
        conn.sidr_key = Some(key);
        self.by_sidr_request.insert(key, local);
        self.connections.insert(local, conn);
        self.events.push_back(CmEvent::SidrRequest {
            id: ConnId(local),
            service_id: req.service_id,
            remote_gid: from,
            pkey: req.pkey,
            private_data: req.private_data.to_vec(),
        });
    }

    /// SIDR_REP: `cm_sidr_rep_handler`.
    fn on_sidr_rep(&mut self, rep: &CmSidrRepRepr) {
        let Some(local) = self.acquire(rep.request_id, 0) else {
            self.counters.dropped_unmatched += 1;
            return;
        };
        if self.state(ConnId(local)) != Some(CmState::SidrReqSent) {
            self.counters.dropped_unexpected += 1;
            return;
        }
        self.forget(local);
        self.events.push_back(CmEvent::SidrResponse {
            id: ConnId(local),
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            private_data: rep.private_data.to_vec(),
        });
    }

    // ---------------------------------------------------------------------------------
    // Timers
    // ---------------------------------------------------------------------------------

    fn on_deadline(&mut self, now: Instant, local: u32) {
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        if conn.timewait_until.is_some() {
            self.forget(local);
            self.events
                .push_back(CmEvent::TimeWaitExit { id: ConnId(local) });
            return;
        }
        let Some(out) = conn.outstanding.as_mut() else {
            return;
        };
        if out.retries_left > 0 {
            out.retries_left -= 1;
            out.deadline = now + out.timeout;
            let (peer, mad) = (conn.peer, out.mad);
            self.counters.retransmitted += 1;
            self.send(peer, mad);
            return;
        }
        // Every retry went unanswered (`cm_process_send_error`).
        conn.outstanding = None;
        let id = ConnId(local);
        match conn.state {
            CmState::ReqSent | CmState::MraReqRcvd | CmState::RepSent | CmState::MraRepRcvd => {
                self.forget(local);
                self.events.push_back(CmEvent::Unreachable { id });
            }
            CmState::DreqSent => {
                let first_report = !conn.disconnect_reported;
                conn.disconnect_reported = true;
                if first_report {
                    self.events.push_back(CmEvent::Disconnected {
                        id,
                        timed_out: true,
                    });
                }
                self.enter_timewait(now, local);
            }
            CmState::SidrReqSent => {
                self.forget(local);
                self.events.push_back(CmEvent::SidrUnreachable { id });
            }
            _ => {}
        }
    }

    // ---------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------

    /// A fresh communication ID: never 0 (which means "not yet known" on the wire) and
    /// never one in use.
    fn alloc_comm_id(&mut self) -> u32 {
        loop {
            self.id_counter = self.id_counter.wrapping_add(1);
            let mut id = self.id_counter ^ self.id_scrambler;
            if let Some(slot) = self.config.id_slot {
                let low = id & ((1 << COMM_ID_SLOT_SHIFT) - 1);
                id = (u32::from(slot) << COMM_ID_SLOT_SHIFT) | low;
            }
            if id != 0 && !self.connections.contains_key(&id) {
                return id;
            }
        }
    }

    /// `cm_form_tid`: the agent's high word and our comm ID.
    fn tid_for(&self, local: u32) -> u64 {
        (u64::from(self.hi_tid) << 32) | u64::from(local)
    }

    /// `cm_acquire_id`: the connection with this local ID whose peer ID is `remote`.
    fn acquire(&self, local: u32, remote: u32) -> Option<u32> {
        self.connections
            .get(&local)
            .filter(|c| c.remote_comm_id == remote)
            .map(|_| local)
    }

    fn conn_mut(&mut self, id: ConnId) -> Result<&mut Connection, CmError> {
        self.connections
            .get_mut(&id.0)
            .ok_or(CmError::UnknownConnection(id))
    }

    fn conn_in(
        &self,
        id: ConnId,
        states: &[CmState],
        operation: &'static str,
    ) -> Result<&Connection, CmError> {
        let conn = self
            .connections
            .get(&id.0)
            .ok_or(CmError::UnknownConnection(id))?;
        if !states.contains(&conn.state) {
            return Err(CmError::WrongState {
                id,
                state: conn.state,
                operation,
            });
        }
        Ok(conn)
    }

    fn send(&mut self, dest: Gid, mad: CmMadRepr) {
        self.counters.sent += 1;
        self.transmits.push_back(CmTransmit { dest, mad });
    }

    /// Send a message that waits for an answer and arm its retransmission.
    fn send_expecting_answer(&mut self, now: Instant, local: u32, mad: CmMadRepr) {
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        conn.outstanding = Some(Outstanding {
            mad,
            retries_left: conn.max_retries,
            timeout: conn.response_timeout,
            deadline: now + conn.response_timeout,
        });
        let peer = conn.peer;
        self.send(peer, mad);
    }

    fn send_drep(&mut self, now: Instant, local: u32, private_data: &[u8]) {
        let Some(peer) = self.connections.get(&local).map(|c| c.peer) else {
            return;
        };
        let mad = self.drep_for(local, private_data);
        self.send(peer, mad);
        self.enter_timewait(now, local);
    }

    /// `cm_enter_timewait`: stop retrying, free the peer's QPN for a new connection, keep
    /// the comm IDs so late duplicates are recognised, and start the time-wait timer.
    fn enter_timewait(&mut self, now: Instant, local: u32) {
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        conn.state = CmState::TimeWait;
        conn.outstanding = None;
        conn.timewait_until = Some(now + cm_timeout(conn.ack_timeout));
        if let Some(key) = conn.remote_qpn_key.take() {
            if self.by_remote_qpn.get(&key) == Some(&local) {
                self.by_remote_qpn.remove(&key);
            }
        }
    }

    /// Drop every trace of a connection (the kernel's return to IDLE plus destroy).
    fn forget(&mut self, local: u32) {
        let Some(conn) = self.connections.remove(&local) else {
            return;
        };
        if let Some(key) = conn.remote_id_key {
            if self.by_remote_id.get(&key) == Some(&local) {
                self.by_remote_id.remove(&key);
            }
        }
        if let Some(key) = conn.remote_qpn_key {
            if self.by_remote_qpn.get(&key) == Some(&local) {
                self.by_remote_qpn.remove(&key);
            }
        }
        if let Some(key) = conn.sidr_key {
            if self.by_sidr_request.get(&key) == Some(&local) {
                self.by_sidr_request.remove(&key);
            }
        }
    }

    /// Record the peer's comm ID and QPN for duplicate and stale-connection detection
    /// (`cm_insert_remote_id`, `cm_insert_remote_qpn`).
    fn index_remote(&mut self, local: u32, remote_id_key: (u64, u32), remote_qpn_key: (u64, u32)) {
        let Some(conn) = self.connections.get_mut(&local) else {
            return;
        };
        conn.remote_id_key = Some(remote_id_key);
        conn.remote_qpn_key = Some(remote_qpn_key);
        self.by_remote_id.insert(remote_id_key, local);
        self.by_remote_qpn.insert(remote_qpn_key, local);
    }

    /// The peer's QP is still connected to us under another comm ID: the peer lost that
    /// connection (it restarted). Refuse the new exchange with `rej` and tear the old
    /// connection down. True when refused.
    fn refuse_stale(
        &mut self,
        now: Instant,
        from: Gid,
        remote_qpn_key: (u64, u32),
        rej: CmMadRepr,
    ) -> bool {
        let Some(&stale) = self.by_remote_qpn.get(&remote_qpn_key) else {
            return false;
        };
        self.send(from, rej);
        self.disconnect_stale(now, stale);
        true
    }

    /// A stale connection's peer is gone: send it a DREQ as `ib_send_cm_dreq` does (only
    /// an established connection sends one); its DREP or retries end it.
    fn disconnect_stale(&mut self, now: Instant, local: u32) {
        if self.state(ConnId(local)) != Some(CmState::Established) {
            return;
        }
        let mad = self.dreq_for(local, &[]);
        if let Some(conn) = self.connections.get_mut(&local) {
            conn.state = CmState::DreqSent;
            conn.tid = mad.header.tid;
        }
        self.send_expecting_answer(now, local, mad);
    }

    /// A REJ answering a received message without a connection (`cm_issue_rej`): IDs
    /// swapped from the message, its TID kept.
    fn rej_reply(
        tid: u64,
        remote_comm_id: u32,
        local_comm_id: u32,
        rejected: CmMsgResponse,
        reason: u16,
    ) -> CmMadRepr {
        let rej = CmRejRepr {
            local_comm_id,
            remote_comm_id,
            message_rejected: rejected,
            reject_info_len: 0,
            reason,
            ari: [0; softroce_wire::cm::REJ_ARI_LEN],
            private_data: [0; softroce_wire::cm::REJ_PRIVATE_DATA_LEN],
        };
        CmMadRepr::new(tid, CmMessage::Rej(rej))
    }

    /// `cm_format_rej`: which message is rejected, and whether our comm ID is named,
    /// follow the connection's state (in REQ_RCVD the kernel names none).
    fn rej_for_state(&self, local: u32, reason: u16, ari: &[u8], private_data: &[u8]) -> CmMadRepr {
        let (state, remote, tid) = self
            .connections
            .get(&local)
            .map_or((CmState::TimeWait, 0, 0), |c| {
                (c.state, c.remote_comm_id, c.tid)
            });
        let (local_comm_id, rejected) = match state {
            CmState::ReqRcvd => (0, CmMsgResponse::Req),
            CmState::MraReqSent => (local, CmMsgResponse::Req),
            CmState::RepRcvd | CmState::MraRepSent => (local, CmMsgResponse::Rep),
            _ => (local, CmMsgResponse::Other),
        };
        let ari_len = ari.len().min(room::ARI);
        let rej = CmRejRepr {
            local_comm_id,
            remote_comm_id: remote,
            message_rejected: rejected,
            reject_info_len: ari_len as u8,
            reason,
            ari: padded(ari),
            private_data: padded(private_data),
        };
        CmMadRepr::new(tid, CmMessage::Rej(rej))
    }

    fn dreq_for(&self, local: u32, private_data: &[u8]) -> CmMadRepr {
        let (remote, remote_qpn) = self
            .connections
            .get(&local)
            .map_or((0, Qpn::SMI), |c| (c.remote_comm_id, c.remote_qpn));
        let dreq = CmDreqRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            remote_qpn,
            private_data: padded(private_data),
        };
        CmMadRepr::new(self.tid_for(local), CmMessage::Dreq(dreq))
    }

    fn drep_for(&self, local: u32, private_data: &[u8]) -> CmMadRepr {
        let (remote, tid) = self
            .connections
            .get(&local)
            .map_or((0, 0), |c| (c.remote_comm_id, c.tid));
        let drep = CmDrepRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: padded(private_data),
        };
        CmMadRepr::new(tid, CmMessage::Drep(drep))
    }

    fn sidr_rep_for(&self, local: u32, reply: &SidrReply) -> CmMadRepr {
        let (request_id, service_id, tid) = self
            .connections
            .get(&local)
            .map_or((0, 0, 0), |c| (c.remote_comm_id, c.service_id, c.tid));
        let rep = CmSidrRepRepr {
            request_id,
            status: reply.status,
            additional_info_len: 0,
            qpn: reply.qpn,
            service_id,
            qkey: reply.qkey,
            additional_info: [0; softroce_wire::cm::SIDR_REP_INFO_LEN],
            private_data: padded(&reply.private_data),
        };
        CmMadRepr::new(tid, CmMessage::SidrRep(rep))
    }
}

/// A REQ or REP carrying ECE: the options go in the MAD header's attribute modifier (the
/// kernel's `cm_format_mad_ece_hdr`).
fn with_ece_options(mut mad: CmMadRepr, ece: Ece) -> CmMadRepr {
    mad.header.attr_mod = ece.options;
    mad
}
