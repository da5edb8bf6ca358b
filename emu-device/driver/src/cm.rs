//! The device's connection manager: one [`CmEndpoint`] per device, fed with the MADs its
//! QP1 receives and sending its MADs from QP1, its timers run by whoever runs the device's
//! timers, its events queued for the application behind a pollable fd.
//!
//! The events are [`CmEvent`]s, which a librdmacm maps one-to-one onto `rdma_cm_event`
//! types: `ConnectRequest` → `RDMA_CM_EVENT_CONNECT_REQUEST`, `ConnectResponse` →
//! `CONNECT_RESPONSE`, `Established` → `ESTABLISHED`, `Rejected` → `REJECTED` (status =
//! the reject reason, private data), `Unreachable` → `UNREACHABLE`, `Disconnected` →
//! `DISCONNECTED`, `TimeWaitExit` → `TIMEWAIT_EXIT`; their parameters carry
//! `rdma_conn_param`'s fields (private data, responder resources, initiator depth, retry
//! and RNR retry counts, SRQ, QP number).
//!
//! Addresses: the CM names peers by GID, the socket needs a UDP port too. A peer is reached
//! on the port given to [`crate::Device::cm_connect`], else on this device's own port: 4791,
//! or the one every device of a private setup shares. Never on the port a MAD came from:
//! rxe sends QP1's MADs from `ud_source_port(1)` and receives on 4791.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use softroce_emu_cm::{
    AcceptParams, CmEndpoint, CmError, CmEvent, ConnId, ConnectParams, SidrParams,
};
use softroce_emu_core::{Hca, HcaEvent, IncomingDatagram, Transmit};
use softroce_wire::mad::{MAD_LEN, MGMT_CLASS_CM, Mad};
use softroce_wire::{Gid, Qpn};

/// Events queued for the application at most; a `ConnectRequest` beyond is refused (the
/// peer gets a REJ) rather than held, so a flood of REQs costs bounded memory.
pub const MAX_CM_EVENTS: usize = 4096;
/// Peers whose UDP port is remembered at most (others are reached on our own port).
const MAX_PEERS: usize = 4096;

/// What a device adds to its endpoint: the event queue and the address book. Sans IO
/// like the endpoint and the core it glues together, so the simulator's tests run the
/// same glue as the real device.
#[derive(Debug)]
pub struct CmAgent {
    pub(crate) endpoint: CmEndpoint,
    events: VecDeque<CmEvent>,
    peers: HashMap<Gid, SocketAddr>,
    /// Passive connections whose QP may receive data before the RTU: QPN → connection.
    awaiting_rtu: HashMap<u32, ConnId>,
    own_port: u16,
    /// MADs of other management classes (QP1 carries them too; nobody here serves them).
    pub non_cm_mads: u64,
    /// Requests refused because the application left [`MAX_CM_EVENTS`] events untaken.
    pub refused_backlog: u64,
}

impl CmAgent {
    /// An agent around `endpoint`, reaching unknown peers on `own_port`.
    pub fn new(endpoint: CmEndpoint, own_port: u16) -> Self {
        Self {
            endpoint,
            events: VecDeque::new(),
            peers: HashMap::new(),
            awaiting_rtu: HashMap::new(),
            own_port,
            non_cm_mads: 0,
            refused_backlog: 0,
        }
    }

    /// Remember where `gid`'s CM listens (its device's address and UDP port).
    pub fn learn_peer(&mut self, gid: Gid, addr: SocketAddr) {
        if self.peers.len() < MAX_PEERS || self.peers.contains_key(&gid) {
            self.peers.insert(gid, addr);
        }
    }

    /// `qpn` belongs to passive connection `id`, waiting for its RTU.
    pub fn await_rtu(&mut self, qpn: Qpn, id: ConnId) {
        self.awaiting_rtu.insert(qpn.value(), id);
    }

    /// The QP numbered `qpn` received its first packet: its connection is established.
    pub fn comm_est(&mut self, qpn: Qpn) {
        if let Some(id) = self.awaiting_rtu.remove(&qpn.value()) {
            // Already established by the RTU (or gone): nothing to do, as in the kernel.
            let _ = self.endpoint.establish(id);
        }
    }

    /// Send a REQ to the CM listening at `peer` (address and UDP port of its device);
    /// `params.remote_gid` is taken from `peer`.
    pub fn connect(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        mut params: ConnectParams,
    ) -> Result<ConnId, CmError> {
        params.remote_gid = Gid::from_ip(peer.ip());
        self.learn_peer(params.remote_gid, peer);
        self.endpoint.connect(now, params)
    }

    /// Send a SIDR_REQ to the CM listening at `peer` (address and UDP port of its device);
    /// `params.remote_gid` is taken from `peer`.
    pub fn sidr_resolve(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        mut params: SidrParams,
    ) -> Result<ConnId, CmError> {
        params.remote_gid = Gid::from_ip(peer.ip());
        self.learn_peer(params.remote_gid, peer);
        self.endpoint.sidr_resolve(now, params)
    }

    /// Accept a `ConnectRequest` with a REP; data arriving on `params.local_qpn` before
    /// the RTU establishes the connection (COMM_EST), as with rdma_cm.
    pub fn accept(
        &mut self,
        now: Instant,
        id: ConnId,
        params: AcceptParams,
    ) -> Result<(), CmError> {
        let qpn = params.local_qpn;
        self.endpoint.accept(now, id, params)?;
        self.await_rtu(qpn, id);
        Ok(())
    }

    /// The oldest event, if any.
    pub fn take_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Whether events wait.
    pub fn events_pending(&self) -> bool {
        !self.events.is_empty()
    }

    /// When the endpoint's timers next need [`CmAgent::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.endpoint.poll_timeout()
    }

    /// Fire the endpoint's timers due at `now` (then [`CmAgent::drive`] sends the result).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            self.endpoint.handle_timeout(now);
        }
    }

    /// The endpoint (for the application calls and getters).
    pub fn endpoint(&mut self) -> &mut CmEndpoint {
        &mut self.endpoint
    }

    /// Feed the MADs QP1 received to the endpoint, send what it has to send, collect its
    /// events. Returns whether events were queued.
    pub fn drive(&mut self, hca: &mut Hca, now: Instant) -> bool {
        while let Some(m) = hca.poll_mad() {
            if m.mad[1] != MGMT_CLASS_CM {
                self.non_cm_mads += 1;
                continue;
            }
            self.endpoint.handle_mad_bytes(now, m.sgid, &m.mad[..]);
        }
        let mut queued = false;
        // Bounded: each round either queues nothing new or destroys a refused request,
        // which produces one REJ and no further event.
        for _ in 0..MAX_CM_EVENTS + 2 {
            self.transmit(hca);
            let Some(ev) = self.endpoint.poll_event() else {
                break;
            };
            if matches!(
                ev,
                CmEvent::TimeWaitExit { .. }
                    | CmEvent::Rejected { .. }
                    | CmEvent::Unreachable { .. }
                    | CmEvent::Disconnected { .. }
                    | CmEvent::Established { .. }
            ) {
                let id = ev.id();
                self.awaiting_rtu.retain(|_, c| *c != id);
            }
            if self.events.len() >= MAX_CM_EVENTS {
                match ev {
                    CmEvent::ConnectRequest { id, .. } => {
                        let _ = self.endpoint.reject(now, id, &[]);
                    }
                    // Destroyed: the requester gets a SIDR_REP with status reject.
                    CmEvent::SidrRequest { id, .. } => {
                        let _ = self.endpoint.destroy(id);
                    }
                    _ => {}
                }
                self.refused_backlog += 1;
                continue;
            }
            self.events.push_back(ev);
            queued = true;
        }
        self.transmit(hca);
        queued
    }

    /// Where `gid`'s CM listens.
    pub fn peer_addr(&self, gid: Gid) -> SocketAddr {
        self.peers
            .get(&gid)
            .copied()
            .unwrap_or_else(|| SocketAddr::new(gid.to_ip(), self.own_port))
    }

    /// The process is exiting with connections: destroy them all and hand their farewells
    /// (DREQ, DREP, REJ) to QP1 (see [`CmEndpoint::destroy_all`]).
    pub fn destroy_all(&mut self, hca: &mut Hca) {
        self.endpoint.destroy_all();
        self.transmit(hca);
    }

    fn transmit(&mut self, hca: &mut Hca) {
        while let Some(t) = self.endpoint.poll_transmit() {
            let mut buf = [0u8; MAD_LEN];
            t.mad.emit(&mut Mad::new_unchecked(&mut buf[..]));
            let dst = self.peer_addr(t.dest);
            hca.send_mad(dst, Qpn::from_wire(softroce_emu_core::GSI_QPN), &buf);
        }
    }
}

/// An HCA with its connection manager, driven through the four sans-IO calls: what a
/// device is minus its sockets and threads. The simulator puts these on its fabric, so
/// simulated devices run the same CM glue as real ones.
#[derive(Debug)]
pub struct CmHca {
    /// The HCA.
    pub hca: Hca,
    /// Its connection manager.
    pub cm: CmAgent,
    /// The HCA's events other than COMM_EST (which the CM consumes), for the owner.
    events: VecDeque<HcaEvent>,
}

impl CmHca {
    /// `hca` with `cm` on its QP1.
    pub fn new(hca: Hca, cm: CmAgent) -> Self {
        Self {
            hca,
            cm,
            events: VecDeque::new(),
        }
    }

    /// Move MADs between QP1 and the CM, hand COMM_ESTs to the CM and keep the HCA's
    /// other events for [`CmHca::poll_event`]. Returns whether CM events were queued.
    /// Call after every call on the HCA or the CM.
    pub fn pump(&mut self, now: Instant) -> bool {
        let mut queued = self.cm.drive(&mut self.hca, now);
        let mut established = false;
        while let Some(ev) = self.hca.poll_event() {
            match ev {
                HcaEvent::CommEst(qpn) => {
                    self.cm.comm_est(qpn);
                    established = true;
                }
                other => self.events.push_back(other),
            }
        }
        if established {
            queued |= self.cm.drive(&mut self.hca, now);
        }
        queued
    }

    /// The HCA's next event (completion events, async events), COMM_ESTs excepted.
    pub fn poll_event(&mut self) -> Option<HcaEvent> {
        self.events.pop_front()
    }

    /// Deliver one datagram.
    pub fn handle_datagram(&mut self, now: Instant, datagram: IncomingDatagram<'_>) {
        self.hca.handle_datagram(now, datagram);
        self.pump(now);
    }

    /// The next datagram to send, CM MADs included.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.pump(now);
        self.hca.poll_transmit(now, buf)
    }

    /// The earliest timer of the HCA and its CM.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.hca.poll_timeout(), self.cm.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The multicast groups the HCA's QPs are attached to.
    pub fn multicast_groups(&self) -> Vec<Gid> {
        self.hca.multicast_groups()
    }

    /// Fire the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.hca.poll_timeout().is_some_and(|t| t <= now) {
            self.hca.handle_timeout(now);
        }
        self.cm.handle_timeout(now);
        self.pump(now);
    }
}
