//! The transport engine: requester, responder and completer for RC, UC and UD, compatible
//! with Linux rdma_rxe on the wire.
//!
//! How it plugs into the objects layer: WQEs live in `Qp::sq` / `Qp::rq` (or the SRQ via
//! `Hca::take_srq_wqe`); completions go through `Hca::push_completion` /
//! `Hca::push_recv_completion`; fatal errors through `Hca::qp_to_error`; application memory
//! through `core::memory` after the key checks in `access`; counters in `Hca::counters`.
//!
//! Packets are built when `Hca::poll_transmit` is called (so timers are armed with the caller's
//! `now`) and queued in `Hca::tx_queue`; received datagrams go through the receive checks in
//! `Hca::handle_datagram` and are dispatched to the responder (requests) or the completer
//! (responses).

mod access;
mod completer;
mod requester;
mod responder;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softroce_wire::icrc::{self, IcrcCheck, UdpEndpoints};
use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RocePacket, RoceRepr, Transport};

use super::counters::DropReason;
use super::handles::QpHandle;
use super::hca::{EventElement, Hca, PortState};
use super::types::{EventType, QpState, QpType};

/// A datagram as the driver received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingDatagram<'a> {
    /// Sender address and port.
    pub src: SocketAddr,
    /// The local address it was received on.
    pub dst: IpAddr,
    /// The UDP payload: a RoCEv2 packet.
    pub payload: &'a [u8],
}

/// A datagram to send; its bytes are in the buffer given to `poll_transmit`.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub destination: SocketAddr,
    /// Source address (the device's).
    pub source: SocketAddr,
    /// Bytes written to the buffer.
    pub len: usize,
}

/// A packet waiting to be sent.
#[derive(Debug, Clone)]
pub(crate) struct OutPacket {
    pub(crate) dst: SocketAddr,
    pub(crate) data: Vec<u8>,
}

/// A READ or atomic the responder executed, kept to answer duplicates without
/// re-executing (IBTA 9.7.5.1.4; rxe's `resp_res`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    Read {
        first_psn: Psn,
        npkts: u32,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// A message being received in several packets.
#[derive(Debug, Clone, Default)]
pub(crate) enum InProgress {
    #[default]
    None,
    Send {
        wqe: super::wr::RecvWr,
        from_srq: bool,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        len: u32,
        offset: u64,
    },
}

/// Per-QP transport state.
#[derive(Debug, Default, Clone)]
pub(crate) struct QpTransport {
    // ---- requester / completer
    /// Next PSN for a request not sent before.
    pub(crate) sq_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub(crate) comp_psn: Psn,
    /// Index in the SQ of the next WQE with packets to (re)send.
    pub(crate) send_index: usize,
    /// Retransmit deadline.
    pub(crate) retrans_at: Option<Instant>,
    /// RNR back-off deadline; sending pauses until then.
    pub(crate) rnr_at: Option<Instant>,
    /// Transport retries left for the oldest outstanding request.
    pub(crate) retry_left: u8,
    /// RNR retries left.
    pub(crate) rnr_left: u8,
    // ---- responder
    /// Next expected request PSN.
    pub(crate) rq_psn: Psn,
    /// Messages completed (AETH MSN).
    pub(crate) msn: u32,
    /// A PSN-sequence NAK was sent for the current gap.
    pub(crate) nak_sent: bool,
    /// UC: drop packets until the next FIRST/ONLY.
    pub(crate) uc_resync: bool,
    pub(crate) in_progress: InProgress,
    pub(crate) resources: VecDeque<Resource>,
    /// COMM_EST was raised.
    pub(crate) comm_est: bool,
    /// A positive ACK held back (its PSN, and when it must go at the latest).
    pub(crate) deferred_ack: Option<(Psn, Instant)>,
}

impl QpTransport {
    pub(crate) fn on_rtr(&mut self, rq_psn: Psn) {
        self.rq_psn = rq_psn;
        self.nak_sent = false;
        self.in_progress = InProgress::None;
    }

    pub(crate) fn on_rts(&mut self, sq_psn: Psn) {
        self.sq_psn = sq_psn;
        self.comp_psn = sq_psn;
        self.send_index = 0;
    }

    pub(crate) fn on_flush(&mut self) {
        self.send_index = 0;
        self.retrans_at = None;
        self.rnr_at = None;
        self.in_progress = InProgress::None;
    }
}

/// The local ACK timeout of a QP: 4.096 µs × 2^timeout; `None` for 0 (infinite).
pub(crate) fn ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        None
    } else {
        Some(Duration::from_nanos(4096u64 << timeout.min(31)))
    }
}

impl Hca {
    /// Where packets of a QP go: its address vector's GID and UDP port.
    pub(crate) fn qp_peer(&self, qp: QpHandle) -> Option<SocketAddr> {
        let q = self.qps.get(qp.index, qp.generation)?;
        let av = q.attr.ah_attr;
        let port = if av.udp_port == 0 {
            icrc::ROCE_V2_PORT
        } else {
            av.udp_port
        };
        Some(SocketAddr::new(av.dgid.to_ip(), port))
    }

    /// Build a packet from a repr and payload bytes, fill its ICRC for our UDP socket, and
    /// queue it.
    pub(crate) fn queue_packet(&mut self, dst: SocketAddr, repr: &RoceRepr, payload: &[u8]) {
        let mut data = vec![0u8; repr.buffer_len()];
        if repr.emit_with_payload(payload, &mut data).is_err() {
            // A bug in the engine, never input-driven: count it rather than panic.
            self.counters.send_err += 1;
            return;
        }
        let src = self.local_addr();
        let ep = UdpEndpoints {
            src: src.ip(),
            dst: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
        };
        let body = data.len() - softroce_wire::ICRC_LEN;
        let Ok(crc) = icrc::compute_for_udp_socket(&ep, &data[..body]) else {
            self.counters.send_err += 1;
            return;
        };
        RocePacket::new_unchecked(&mut data[..]).set_icrc(crc);
        self.counters.sent_pkts += 1;
        self.tx_queue.push_back(OutPacket { dst, data });
    }

    /// Queue an ACK/NAK for an RC QP.
    /// Queue an ACK or NAK now (a held positive ACK goes first, keeping PSN order).
    pub(crate) fn queue_ack(&mut self, qp: QpHandle, psn: Psn, syndrome: softroce_wire::Syndrome) {
        self.flush_deferred_ack(qp);
        self.queue_ack_now(qp, psn, syndrome);
    }

    /// A positive ACK for `psn`: held back up to `ack_defer` for the QP's next packet, or
    /// sent at once when deferral is off.
    pub(crate) fn ack(&mut self, qp: QpHandle, psn: Psn) {
        let defer = self.config.ack_defer;
        let Some(now) = self.input_time.filter(|_| !defer.is_zero()) else {
            return self.queue_ack(qp, psn, softroce_wire::Syndrome::ACK);
        };
        let Some(q) = self.qps.get_mut(qp.index, qp.generation) else {
            return;
        };
        let due = q.transport.deferred_ack.map_or(now + defer, |(_, due)| due);
        q.transport.deferred_ack = Some((psn, due));
        self.counters.ack_deferred += 1;
    }

    /// Send the QP's held ACK, if any (before its next packet, or when it is due).
    pub(crate) fn flush_deferred_ack(&mut self, qp: QpHandle) {
        let Some(q) = self.qps.get_mut(qp.index, qp.generation) else {
            return;
        };
        let Some((psn, _)) = q.transport.deferred_ack.take() else {
            return;
        };
        if matches!(q.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.queue_ack_now(qp, psn, softroce_wire::Syndrome::ACK);
        }
    }

    fn queue_ack_now(&mut self, qp: QpHandle, psn: Psn, syndrome: softroce_wire::Syndrome) {
        let Some(q) = self.qps.get(qp.index, qp.generation) else {
            return;
        };
        let dest = Qpn::from_wire(q.attr.dest_qp_num);
        let msn = softroce_wire::Msn::new(q.transport.msn);
        let Some(dst) = self.qp_peer(qp) else {
            return;
        };
        let repr = RoceRepr::new(
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, dest, psn),
            ExtRepr {
                aeth: Some(softroce_wire::AethRepr { syndrome, msn }),
                ..ExtRepr::default()
            },
            0,
        );
        self.queue_packet(dst, &repr, &[]);
    }
}

/// Receive path: the checks rxe makes (rxe_recv.c), in its order, then dispatch.
pub(crate) fn handle_datagram(hca: &mut Hca, now: Instant, d: IncomingDatagram<'_>) {
    hca.input_time = Some(now);
    if hca.port_state != PortState::Active {
        hca.counters.drop(DropReason::PortDown);
        return;
    }
    let Ok(packet) = RocePacket::new_checked(d.payload) else {
        hca.counters.drop(DropReason::Malformed);
        return;
    };
    let ep = UdpEndpoints {
        src: d.src.ip(),
        dst: d.dst,
        src_port: d.src.port(),
        dst_port: hca.config.udp_port,
    };
    let ip_id = match icrc::verify_udp_socket(&ep, d.payload) {
        Ok(IcrcCheck::RecoveredIpv4Id { id, .. }) => id,
        Ok(IcrcCheck::Exact) => 0,
        Err(_) => {
            // rxe drops bad ICRCs silently: the requester must time out.
            hca.counters.drop(DropReason::IcrcMismatch);
            return;
        }
    };
    let Ok(bth) = BthRepr::parse(&packet.bth()) else {
        hca.counters.drop(DropReason::Malformed);
        return;
    };
    if bth.pkey & 0x7FFF != 0x7FFF {
        hca.counters.bad_pkey += 1;
        hca.counters.drop(DropReason::BadPkey);
        return;
    }
    let Some(info) = bth.opcode.info() else {
        hca.counters.drop(DropReason::Unsupported);
        return;
    };
    let Some(qp) = hca.qp_by_number(bth.dest_qpn) else {
        hca.counters.drop(DropReason::UnknownQpn);
        return;
    };
    let Some(q) = hca.qps.get(qp.index, qp.generation) else {
        hca.counters.drop(DropReason::UnknownQpn);
        return;
    };
    let transport_ok = matches!(
        (q.init.qp_type, bth.opcode.transport()),
        (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) | (QpType::Ud, Transport::Ud)
    );
    if !transport_ok {
        hca.counters.drop(DropReason::OpcodeForQpType);
        return;
    }
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
        hca.counters.drop(DropReason::QpNotReady);
        return;
    }
    match q.init.qp_type {
        QpType::Rc | QpType::Uc => {
            let av = q.attr.ah_attr;
            let ours = hca.gids.get(usize::from(av.sgid_index)).map(|g| g.to_ip());
            if d.src.ip() != av.dgid.to_ip() || ours != Some(d.dst) {
                hca.counters.drop(DropReason::AddressMismatch);
                return;
            }
        }
        QpType::Ud => {
            let Some(deth) = packet.deth() else {
                hca.counters.drop(DropReason::Malformed);
                return;
            };
            if deth.qkey() != q.attr.qkey {
                hca.counters.qkey_violation += 1;
                hca.counters.drop(DropReason::BadQkey);
                return;
            }
        }
    }
    hca.counters.rcvd_pkts += 1;
    if state == QpState::Rtr && !q.transport.comm_est {
        if let Some(q) = hca.qps.get_mut(qp.index, qp.generation) {
            q.transport.comm_est = true;
        }
        hca.raise_async(EventType::CommEst, EventElement::Qp(qp));
    }
    if info.is_response() {
        completer::on_response(hca, now, qp, &packet, &bth);
    } else {
        responder::on_request(hca, now, qp, &packet, &bth, d, ip_id);
    }
    hca.mark_active(qp);
}

impl Hca {
    /// Remember that a QP may have packets to send.
    pub(crate) fn mark_active(&mut self, qp: QpHandle) {
        if !self.active_qps.contains(&qp) {
            self.active_qps.push_back(qp);
        }
    }
}

pub(crate) fn poll_transmit(hca: &mut Hca, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
    buf.clear();
    if hca.tx_queue.is_empty() {
        // Bounded by the number of active QPs; each round may queue packets.
        let rounds = hca.active_qps.len();
        for _ in 0..rounds {
            let Some(qp) = hca.active_qps.pop_front() else {
                break;
            };
            requester::progress(hca, now, qp);
            if !hca.tx_queue.is_empty() {
                break;
            }
        }
    }
    if hca.port_state != PortState::Active {
        hca.tx_queue.clear();
        return None;
    }
    let p = hca.tx_queue.pop_front()?;
    buf.extend_from_slice(&p.data);
    Some(Transmit {
        destination: p.dst,
        source: hca.local_addr(),
        len: p.data.len(),
    })
}

pub(crate) fn poll_timeout(hca: &Hca) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    for qp in hca.qp_by_qpn.values() {
        if let Some(q) = hca.qps.get(qp.index, qp.generation) {
            let held_ack = q.transport.deferred_ack.map(|(_, due)| due);
            for t in [q.transport.retrans_at, q.transport.rnr_at, held_ack]
                .into_iter()
                .flatten()
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
    }
    next
}

pub(crate) fn handle_timeout(hca: &mut Hca, now: Instant) {
    let qps: Vec<QpHandle> = hca.qp_by_qpn.values().copied().collect();
    for qp in qps {
        let due = hca
            .qps
            .get(qp.index, qp.generation)
            .and_then(|q| q.transport.deferred_ack)
            .is_some_and(|(_, due)| due <= now);
        if due {
            hca.flush_deferred_ack(qp);
        }
        completer::on_timers(hca, now, qp);
    }
}

pub(crate) fn on_post_send(hca: &mut Hca, qp: QpHandle) {
    // The held ACK travels with the request this post is about to produce.
    hca.flush_deferred_ack(qp);
    hca.mark_active(qp);
}

pub(crate) fn on_post_recv(_hca: &mut Hca, _qp: QpHandle) {}
