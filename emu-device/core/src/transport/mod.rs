//! The transport engine: requester, responder and completer for RC, UC and UD, compatible
//! with Linux rdma_rxe on the wire. Owns the `Outbox` (packets built and not yet sent, and
//! the QPs that may have more); works on the other pieces through an `Engine` borrowing
//! them.
//!
//! How it plugs into the layer below: WQEs live in `Qp::sq` / `Qp::rq` (or the SRQ via
//! `Engine::take_srq_wqe`); completions go through `Engine::push_completion` /
//! `Engine::push_recv_completion`; fatal errors through `Engine::qp_to_error`; application
//! memory through `core::memory` after the key checks in `access`.
//!
//! Packets are built when `Hca::poll_transmit` is called (so timers are armed with the
//! caller's `now`) and queued in the outbox; received datagrams go through the receive checks
//! in `handle_datagram` and are dispatched to the responder (requests) or the completer
//! (responses).

mod access;
mod acks;
mod admission;
pub(crate) mod completer;
pub mod gsi;
pub(crate) mod ipv4_ids;
mod queues;
pub(crate) mod recovery;
mod requester;
mod responder;
mod timers;
pub(crate) mod tm_rndv;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softroce_wire::icrc::{self, IcrcCheck, UdpEndpoints};
use softroce_wire::{BthRepr, RocePacket, RoceRepr, Transport};

use super::counters::{Counters, DropReason};
use super::cq::Completions;
use super::device::{Device, PortState};
use super::events::{EventElement, Events};
use super::handles::QpHandle;
use super::multicast::{MULTICAST_QPN, Multicast};
use super::store::Store;
use super::types::{EventType, QpState, QpType};

pub(crate) use timers::Timers;

/// A datagram as the driver received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingDatagram<'a> {
    /// Sender address and port.
    pub src: SocketAddr,
    /// The local address it was received on.
    pub dst: IpAddr,
    /// The UDP payload: a RoCEv2 packet.
    pub payload: &'a [u8],
    /// The IPv4 TOS / IPv6 traffic class byte it arrived with (0 when unknown): a UD
    /// receive's GRH area shows it.
    pub traffic_class: u8,
    /// The IPv4 Identification it arrived with, when the receiver knows it (a simulated
    /// network): its ICRC is then checked exactly. `None` from a UDP socket, which hides
    /// the IP header: the check then solves for the ID, and a corrupted packet whose damage
    /// some ID explains (one bit flip in 32 768) passes it.
    pub ipv4_id: Option<u16>,
}

/// A datagram to send; its bytes are in the buffer given to `poll_transmit`.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub destination: SocketAddr,
    /// The IPv4 TOS / IPv6 traffic class byte the datagram leaves with: the address
    /// vector's GRH traffic class (DSCP and ECN), as rxe puts it in the IP header.
    pub traffic_class: u8,
    /// Source address (the device's).
    pub source: SocketAddr,
    /// The datagram's length: its bytes are the buffer's first `len` (but for a
    /// [`payload`](Self::payload) left unwritten there).
    pub len: usize,
    /// Set (with [`HcaConfig::transmit_feedback`](crate::HcaConfig::transmit_feedback))
    /// on a UC/UD request packet, whose work request waits for the caller's report:
    /// [`Hca::handle_sent`](crate::Hca::handle_sent) or
    /// [`Hca::handle_send_failure`](crate::Hca::handle_send_failure).
    pub token: Option<TransmitToken>,
    /// With [`HcaConfig::payload_by_reference`](crate::HcaConfig::payload_by_reference):
    /// the payload the buffer leaves out. The datagram is then the buffer's first
    /// `payload.at` bytes, the application's `payload.len` bytes at `payload.addr`, and the
    /// rest of the buffer (pad and ICRC); `len` counts all of it, and the buffer holds `len`
    /// bytes with the payload's unwritten.
    pub payload: Option<PayloadRef>,
}

/// A packet's payload left in registered memory (see [`Transmit::payload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadRef {
    /// Where in the datagram the payload starts (the header length).
    pub at: usize,
    /// The application address it is read from (checked against the region at build).
    pub addr: u64,
    /// Its length.
    pub len: usize,
}

impl PayloadRef {
    /// Copy the payload into its place in `datagram` (the buffer
    /// [`Hca::poll_transmit`](crate::Hca::poll_transmit) filled), making the datagram whole
    /// there: for a caller that reads the bytes rather than sending from the memory. Through
    /// the installed copier, so a page unmapped since reads as zeros where that is
    /// fault-safe. A buffer too short for it is left alone.
    ///
    /// # Safety
    /// The memory is still registered, as [`Hca::reg_mr`](crate::Hca::reg_mr)'s contract
    /// keeps it until deregistration (a fault-safe copier also survives it being unmapped).
    pub unsafe fn fill(&self, datagram: &mut [u8]) {
        if let Some(dst) = datagram.get_mut(self.at..self.at + self.len) {
            // SAFETY: forwarded; the range was checked against the registration at build.
            unsafe { crate::memory::read_app(self.addr, dst) };
        }
    }
}

/// Names a UC/UD request packet handed out by `poll_transmit`, for the caller to report
/// whether the host sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransmitToken {
    pub(crate) qp: QpHandle,
    pub(crate) psn: softroce_wire::Psn,
}

/// Where a packet goes: the peer's address, and the traffic class its IP header carries
/// (the address vector's, as rxe sets the IPv4 TOS / IPv6 traffic class from the GRH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) addr: SocketAddr,
    pub(crate) traffic_class: u8,
}

/// A packet waiting to be sent.
#[derive(Debug, Clone)]
pub(crate) struct OutPacket {
    pub(crate) dst: Dest,
    pub(crate) data: Vec<u8>,
    pub(crate) token: Option<TransmitToken>,
    pub(crate) payload: Option<PayloadRef>,
}

/// An XRC QP sends the XRC twins of the RC packets the engine builds: an initiator's
/// requests carry the XRCETH naming the peer's SRQ (`srqn`), a target's responses none.
pub(crate) fn to_xrc(repr: &mut RoceRepr, srqn: Option<u32>) {
    if let Some(op) = repr.bth.opcode.rc_to_xrc() {
        repr.bth.opcode = op;
    }
    // The reserved byte stays zero.
    repr.ext.xrceth = srqn.map(|n| n & 0x00FF_FFFF);
}

/// The local ACK timeout of a QP: 4.096 µs × 2^timeout; `None` for 0 (infinite).
pub(crate) fn ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        None
    } else {
        Some(Duration::from_nanos(4096u64 << timeout.min(31)))
    }
}

/// Packets built and not yet sent, and the QPs that may have more to send (served
/// round-robin: a turn builds a bounded number of a QP's responses and requests).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    packets: VecDeque<OutPacket>,
    active_qps: VecDeque<QpHandle>,
    /// Buffers handed back by `poll_transmit` for the next packets (bounded by
    /// [`SPARE_BUFFERS`]): no allocation per packet.
    spare: Vec<Vec<u8>>,
    /// The members of `active_qps` by slot index (a handle's slot, reused with a new
    /// generation after a destroy): every received packet marks its QP, and a scan of the
    /// queue would cost each packet the number of busy QPs (thousands at scale).
    queued: Vec<Option<QpHandle>>,
    /// The bound on RC requests in flight to each peer.
    admission: admission::Admission,
    /// QPs whose held ACK goes at the next transmit pass, after the packets that arrived
    /// with it were all handled (see `Engine::ack`).
    pub(crate) prompt_acks: Vec<QpHandle>,
    /// QPs that took a held ACK since the list was last emptied (a QP may be listed after
    /// its ACK went): a MAD sends them all first (`Engine::flush_held_acks`).
    pub(crate) holding_acks: Vec<QpHandle>,
    /// How long `holding_acks` may grow before it is pruned again.
    pub(crate) holding_acks_bound: usize,
}

/// Send buffers the outbox keeps for reuse.
const SPARE_BUFFERS: usize = 256;

impl Outbox {
    /// A buffer of `len` bytes for a packet, holding whatever a packet it carried before
    /// left: its user writes every byte (headers, payload, pad, ICRC), so it is not zeroed
    /// again for each packet.
    pub(crate) fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        if b.len() >= len {
            b.truncate(len);
        } else {
            b.resize(len, 0);
        }
        b
    }

    /// Remember that a QP may have packets to send.
    pub(crate) fn mark_active(&mut self, qp: QpHandle) {
        let i = qp.index as usize;
        // Slots are as many as QPs ever lived at once (at most the 2^24 QPNs); a handle
        // beyond names no QP, and must not size the index.
        if i >= 1 << 24 {
            if !self.active_qps.contains(&qp) {
                self.active_qps.push_back(qp);
            }
            return;
        }
        if i >= self.queued.len() {
            self.queued.resize(i + 1, None);
        }
        if self.queued[i] != Some(qp) {
            self.queued[i] = Some(qp);
            self.active_qps.push_back(qp);
        }
    }

    /// The next QP whose turn it is, out of the round-robin.
    fn next_active(&mut self) -> Option<QpHandle> {
        let qp = self.active_qps.pop_front()?;
        // A destroyed QP's slot may already name its successor, which stays queued.
        if let Some(slot) = self.queued.get_mut(qp.index as usize)
            && *slot == Some(qp)
        {
            *slot = None;
        }
        Some(qp)
    }

    /// Bytes of packets built and not yet handed to the caller.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.packets.iter().map(|p| p.data.len()).sum()
    }
}

/// What the transport works on: the device's pieces, borrowed for one call.
pub(crate) struct Engine<'a> {
    pub(crate) device: &'a Device,
    pub(crate) store: &'a mut Store,
    pub(crate) cqs: &'a mut Completions,
    pub(crate) events: &'a mut Events,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) counters: &'a mut Counters,
    pub(crate) gsi: &'a mut gsi::Gsi,
    pub(crate) multicast: &'a Multicast,
    pub(crate) timers: &'a mut Timers,
    pub(crate) ipv4_ids: &'a mut ipv4_ids::Ipv4Ids,
}

impl Engine<'_> {
    /// After a step on `qp` (a packet handled, a transmit turn, timers fired, a verb):
    /// file its timers under their new deadline and count its requests in flight again.
    pub(crate) fn settle(&mut self, qp: QpHandle) {
        self.timers.sync(self.store, qp);
        let cap = self.device.config().max_outstanding_psns;
        self.outbox.account(self.store, cap, qp);
    }

    /// Give `qp` a transmit turn if one could build anything: replies owed, or send work
    /// not all sent (a resend moves the cursor back). A turn for nothing (an ACK that
    /// completed the last request, a request whose ACK is held) costs every ping-pong
    /// packet a pass through the requester.
    pub(crate) fn mark_active_if_work(&mut self, qp: QpHandle) {
        if self
            .store
            .get(qp)
            .is_some_and(|q| !q.transport.replies.is_empty() || q.transport.send_index < q.sq.len())
        {
            self.outbox.mark_active(qp);
        }
    }
}

/// Receive path: the checks rxe makes (rxe_recv.c), in its order, then dispatch.
pub(crate) fn handle_datagram(eng: &mut Engine<'_>, now: Instant, d: IncomingDatagram<'_>) {
    if eng.device.port_state() != PortState::Active {
        eng.counters.drop(DropReason::PortDown);
        return;
    }
    let Ok(packet) = RocePacket::new_checked(d.payload) else {
        eng.counters.drop(DropReason::Malformed);
        return;
    };
    let ep = UdpEndpoints {
        src: d.src.ip(),
        dst: d.dst,
        src_port: d.src.port(),
        dst_port: eng.device.config().udp_port,
    };
    let checked = match d.ipv4_id {
        Some(id) => icrc::verify_udp_socket_with_ipv4_id(&ep, d.payload, id).map(|_| {
            IcrcCheck::RecoveredIpv4Id {
                id,
                dont_fragment: true,
            }
        }),
        None => icrc::verify_udp_socket(&ep, d.payload),
    };
    let ip_id = match checked {
        // An ID solved from the ICRC must be one its sender could have used.
        Ok(IcrcCheck::RecoveredIpv4Id { id, dont_fragment })
            if d.ipv4_id.is_none() && !eng.ipv4_ids.plausible(d.src, id, dont_fragment) =>
        {
            eng.counters.drop(DropReason::IcrcMismatch);
            return;
        }
        Ok(IcrcCheck::RecoveredIpv4Id { id, .. }) => id,
        Ok(IcrcCheck::Exact) => 0,
        Err(_) => {
            // rxe drops bad ICRCs silently: the requester must time out.
            eng.counters.drop(DropReason::IcrcMismatch);
            return;
        }
    };
    let Ok(bth) = BthRepr::parse(&packet.bth()) else {
        eng.counters.drop(DropReason::Malformed);
        return;
    };
    if bth.pkey & 0x7FFF != 0x7FFF {
        eng.counters.bad_pkey += 1;
        eng.counters.drop(DropReason::BadPkey);
        return;
    }
    let Some(info) = bth.opcode.info() else {
        eng.counters.drop(DropReason::Unsupported);
        return;
    };
    if bth.dest_qpn.value() == gsi::GSI_QPN {
        gsi::on_datagram(eng, &packet, &bth, d);
        return;
    }
    if bth.dest_qpn.value() == MULTICAST_QPN {
        // rxe_rcv_mcast_pkt: the group is the packet's destination address; each attached
        // QP gets its own copy after its own checks (type, state, Q_Key).
        let mgid = softroce_wire::Gid::from_ip(d.dst);
        let members = eng.multicast.members(mgid);
        if !mgid.is_multicast() || members.is_empty() {
            eng.counters.drop(DropReason::UnknownQpn);
            return;
        }
        let from_us = d.src == eng.device.local_addr();
        let src_qpn = packet.deth().map(|h| h.src_qpn().value());
        for &qp in members {
            let own = from_us && eng.store.get(qp).map(|q| q.qpn.value()) == src_qpn;
            if own && eng.multicast.blocks_own(qp) {
                continue;
            }
            deliver(eng, now, qp, &packet, &bth, info, d, ip_id);
        }
        return;
    }
    let Some(qp) = eng.store.qp_by_number(bth.dest_qpn) else {
        eng.counters.drop(DropReason::UnknownQpn);
        return;
    };
    deliver(eng, now, qp, &packet, &bth, info, d, ip_id);
}

/// The checks of one QP (type, state, address or Q_Key), then the responder or completer.
#[allow(clippy::too_many_arguments)]
fn deliver(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
    info: softroce_wire::opcode::OpcodeInfo,
    d: IncomingDatagram<'_>,
    ip_id: u16,
) {
    let Some(q) = eng.store.get(qp) else {
        eng.counters.drop(DropReason::UnknownQpn);
        return;
    };
    let transport_ok = match (q.init.qp_type, bth.opcode.transport()) {
        (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud) => {
            true
        }
        // The initiator only sends requests, the target only answers them.
        (QpType::XrcSend, Transport::Xrc) => info.is_response(),
        (QpType::XrcRecv, Transport::Xrc) => info.is_request(),
        _ => false,
    };
    if !transport_ok {
        eng.counters.drop(DropReason::OpcodeForQpType);
        return;
    }
    // From here an XRC packet runs as its RC twin: the responder and completer go by the
    // BTH's opcode and read the extended headers from the packet, laid out by the real one.
    let rc_twin;
    let bth = match bth.opcode.xrc_to_rc() {
        Some(opcode) => {
            rc_twin = BthRepr { opcode, ..*bth };
            &rc_twin
        }
        None => bth,
    };
    let state = q.attr.qp_state;
    let ready = if info.is_response() {
        matches!(state, QpState::Rts | QpState::Sqd | QpState::Sqe)
    } else {
        matches!(
            state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    };
    if !ready {
        eng.counters.drop(DropReason::QpNotReady);
        return;
    }
    match q.init.qp_type {
        QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv => {
            let ours = eng
                .device
                .gids()
                .get(usize::from(q.attr.ah_attr.sgid_index))
                .map(|g| g.to_ip());
            // `peer` is the address vector's DGID as a socket address, kept beside it.
            if d.src.ip() != q.peer.ip() || ours != Some(d.dst) {
                eng.counters.drop(DropReason::AddressMismatch);
                return;
            }
        }
        QpType::Ud => {
            let Some(deth) = packet.deth() else {
                eng.counters.drop(DropReason::Malformed);
                return;
            };
            if deth.qkey() != q.attr.qkey {
                eng.counters.qkey_violation += 1;
                eng.counters.drop(DropReason::BadQkey);
                return;
            }
        }
    }
    eng.counters.rcvd_pkts += 1;
    let connected = q.init.qp_type != QpType::Ud;
    if !q.transport.comm_est && matches!(state, QpState::Rtr | QpState::Rts) {
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.comm_est = true;
            // The connection manager hears of the first packet in RTS too: rdma_cm moves
            // the passive QP to RTS when it accepts, and data arriving before a lost RTU
            // must still establish the connection (`rdma_establish`).
            eng.events.comm_est(q.qpn);
        }
        // IBTA 11.6.3: the async event is for a connected (RC/UC) QP in RTR only; a UD QP
        // has no connection to establish.
        if state == QpState::Rtr && connected {
            eng.events.raise(EventType::CommEst, EventElement::Qp(qp));
        }
    }
    if info.is_response() {
        completer::on_response(eng, now, qp, packet, bth);
    } else {
        responder::on_request(eng, now, qp, packet, bth, d, ip_id);
    }
    eng.settle(qp);
    eng.mark_active_if_work(qp);
}

/// D: the next datagram to send, written into `buf` (cleared first).
pub(crate) fn poll_transmit(
    eng: &mut Engine<'_>,
    now: Instant,
    buf: &mut Vec<u8>,
) -> Option<Transmit> {
    // Bounded: a QP is listed once per held ACK, and sending it lists nothing.
    while let Some(qp) = eng.outbox.prompt_acks.pop() {
        eng.flush_deferred_ack(qp);
    }
    if eng.outbox.packets.is_empty() {
        // Bounded by the number of active QPs; each round may queue packets.
        let rounds = eng.outbox.active_qps.len();
        for _ in 0..rounds {
            let Some(qp) = eng.outbox.next_active() else {
                break;
            };
            responder::send_replies(eng, qp);
            let queued = eng.outbox.packets.len();
            requester::progress(eng, now, qp);
            if eng.outbox.packets.len() > queued {
                // The held ACK travels with the requests just built, after them: an ACK
                // is shorter than a request, so the two leave as one GSO send (segments
                // but the last must be of one length) and reach the peer in one GRO read.
                // Requests and ACKs are in PSN spaces of their own, so nothing reorders.
                eng.flush_deferred_ack(qp);
                // The application talks back on this QP: holding its ACKs pays again.
                if let Some(q) = eng.store.get_mut(qp) {
                    q.transport.ack_unanswered = false;
                }
            }
            eng.settle(qp);
            if !eng.outbox.packets.is_empty() {
                break;
            }
        }
    }
    if eng.device.port_state() != PortState::Active {
        // Requests lost with the link complete as sent: the wire lost them, not the host.
        for p in std::mem::take(&mut eng.outbox.packets) {
            if let Some(token) = p.token {
                on_sent(eng, token);
            }
        }
        // What the responders still owe is lost with the link too, as if already built.
        for &qp in &eng.outbox.active_qps {
            if let Some(q) = eng.store.get_mut(qp) {
                q.transport.replies.clear();
            }
        }
        buf.clear();
        return None;
    }
    let Some(mut p) = eng.outbox.packets.pop_front() else {
        buf.clear();
        return None;
    };
    let len = p.data.len();
    // The packet's buffer becomes the caller's and the caller's is kept for a later
    // packet: no copy, no allocation. It goes to the spares as it is, not cleared: a
    // packet built in it later overwrites every byte, and a buffer cut to length zero
    // would be zeroed in full again for its next packet (a memset per packet).
    std::mem::swap(buf, &mut p.data);
    if eng.outbox.spare.len() < SPARE_BUFFERS {
        eng.outbox.spare.push(p.data);
    }
    Some(Transmit {
        destination: p.dst.addr,
        traffic_class: p.dst.traffic_class,
        source: eng.device.source_addr(),
        len,
        token: p.token,
        payload: p.payload,
    })
}

/// D: the earliest timer of any QP.
pub(crate) fn poll_timeout(timers: &Timers) -> Option<Instant> {
    timers.next()
}

/// B: fire every timer due at or before `now`.
pub(crate) fn handle_timeout(eng: &mut Engine<'_>, now: Instant) {
    // Only the QPs whose earliest deadline has come; their remaining timers go back in.
    for qp in eng.timers.take_due(eng.store, now) {
        let due = eng
            .store
            .get(qp)
            .and_then(|q| q.transport.deferred_ack)
            .is_some_and(|(_, due)| due <= now);
        if due {
            eng.flush_deferred_ack(qp);
            // Nothing was sent to carry it: until the QP sends again, its ACKs go promptly.
            if let Some(q) = eng.store.get_mut(qp) {
                q.transport.ack_unanswered = true;
            }
        }
        completer::on_timers(eng, now, qp);
        eng.settle(qp);
    }
}

pub(crate) use requester::{on_send_failure, on_sent};

/// Work was posted to the QP's send queue (a held ACK leaves with the requests it
/// produces, see `poll_transmit`).
pub(crate) fn on_post_send(eng: &mut Engine<'_>, qp: QpHandle) {
    eng.outbox.mark_active(qp);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_qp_is_queued_once_even_when_its_slot_is_reused_or_its_handle_is_bogus() {
        let mut o = Outbox::default();
        let destroyed = QpHandle {
            index: 3,
            generation: 1,
        };
        let successor = QpHandle {
            index: 3,
            generation: 2,
        };
        o.mark_active(destroyed);
        o.mark_active(successor);
        o.mark_active(successor);
        assert_eq!(o.next_active(), Some(destroyed));
        // Taking the destroyed QP's turn leaves its successor queued, once.
        o.mark_active(successor);
        assert_eq!(o.next_active(), Some(successor));
        assert_eq!(o.next_active(), None);
        // A handle no QP has never sizes the index, and is queued once too.
        o.mark_active(QpHandle::NONE);
        o.mark_active(QpHandle::NONE);
        assert_eq!(o.queued.len(), 4);
        assert_eq!(o.next_active(), Some(QpHandle::NONE));
        assert_eq!(o.next_active(), None);
    }
}
