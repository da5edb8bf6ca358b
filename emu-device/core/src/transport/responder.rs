//! The responder: PSN checks, duplicate handling (re-ACK; READ replay; atomics answered from
//! the replay cache, never re-executed), receive WQE consumption, remote access checks,
//! ACK/NAK/RNR generation, UC and UD receive. READ responses are built lazily, a packet at
//! a time, from a cursor the QP keeps (`send_replies`).

use std::net::IpAddr;
use std::time::Instant;

use softroce_wire::grh::{GRH_LEN, emit_ipv4, emit_ipv6};
use softroce_wire::ip::{IPV4_DF, Ipv4Fields, Ipv6Fields};
use softroce_wire::{
    AethRepr, BthRepr, ExtRepr, Msn, NakCode, Opcode, Operation, Position, Qpn, RocePacket,
    RoceRepr, Syndrome,
};

use super::super::counters::DropReason;
use super::super::device::PAYLOAD_BY_REFERENCE_MIN;
use super::super::handles::{CqHandle, PdHandle, QpHandle, SrqHandle};
use super::super::memory;
use super::super::objects::Qp;
use super::super::qp_transport::{AckKind, InProgress, ReadCursor, Reply, Resource, TmDelivery};
use super::super::store::Store;
use super::super::tm::{Rvh, TMH_LEN, TmTag, Tmh, TmhOp};
use super::super::types::{AccessFlags, EventType, QpType, WcFlags, WcOpcode, WcStatus};
use super::super::wr::{RecvWr, VendorErr, WorkCompletion};
use super::IncomingDatagram;
use super::access::{LocalFault, RemoteFault, Via};
use super::{Engine, PayloadRef};

/// The wire bytes of immediate data, as `ibv_wc.imm_data` (network order) holds them.
fn imm_from_wire(imm: u32) -> u32 {
    u32::from_ne_bytes(imm.to_be_bytes())
}

pub(super) fn on_request(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
    d: IncomingDatagram<'_>,
    ip_id: u16,
) {
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    match q.init.qp_type {
        QpType::Ud => ud_receive(eng, qp, packet, bth, d, ip_id),
        QpType::Uc => uc_receive(eng, now, qp, packet, bth),
        QpType::Rc => rc_receive(eng, now, qp, packet, bth),
        QpType::XrcRecv => {
            select_xrc_srq(eng, qp, packet);
            rc_receive(eng, now, qp, packet, bth);
        }
        // Filtered out by `deliver`: an initiator takes no requests.
        QpType::XrcSend => eng.counters.drop(DropReason::OpcodeForQpType),
    }
}

/// An XRC target serves each request with the XRC SRQ its XRCETH names, if that SRQ is an
/// XRC SRQ of the target's own domain (else none: the request is refused).
fn select_xrc_srq(eng: &mut Engine<'_>, qp: QpHandle, packet: &RocePacket<&[u8]>) {
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    let srq = packet
        .xrceth()
        .and_then(|x| eng.store.srq_by_number(x.srqn()))
        .filter(|&srq| {
            eng.store
                .get(srq)
                .and_then(|s| s.xrc)
                .is_some_and(|x| Some(x.xrcd) == q.xrcd)
        });
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.xrc_srq = srq;
    }
}

/// Where a request to a QP is received: its PD, receive CQ and SRQ, or for an XRC target
/// those of the XRC SRQ the request named (none named: handles that fail every lookup).
#[derive(Debug, Clone, Copy)]
struct RecvTarget {
    pd: PdHandle,
    cq: CqHandle,
    srq: Option<SrqHandle>,
}

fn recv_target(store: &Store, q: &Qp) -> RecvTarget {
    if q.init.qp_type != QpType::XrcRecv {
        // A tag matching SRQ completes every receive on its own CQ.
        let tm_cq = q
            .init
            .srq
            .and_then(|s| store.get(s))
            .and_then(|s| s.tm.as_ref())
            .map(|t| t.cq);
        return RecvTarget {
            pd: q.pd,
            cq: tm_cq.unwrap_or(q.init.recv_cq),
            srq: q.init.srq,
        };
    }
    let named = q
        .transport
        .xrc_srq
        .and_then(|srq| Some((srq, store.get(srq)?)))
        .and_then(|(srq, s)| Some((srq, s.pd, s.xrc?.cq)));
    match named {
        Some((srq, pd, cq)) => RecvTarget {
            pd,
            cq,
            srq: Some(srq),
        },
        None => RecvTarget {
            pd: PdHandle::NONE,
            cq: CqHandle::NONE,
            srq: None,
        },
    }
}

/// The receive target of `qp` (see [`recv_target`]).
fn target_of(eng: &Engine<'_>, qp: QpHandle) -> Option<RecvTarget> {
    eng.store.get(qp).map(|q| recv_target(eng.store, q))
}

/// The CQ a receive of `qp` completes on (for an XRC target, that of the XRC SRQ the
/// request being handled named).
pub(super) fn recv_cq(eng: &Engine<'_>, qp: QpHandle) -> Option<CqHandle> {
    target_of(eng, qp).map(|t| t.cq)
}

/// Take a receive WQE from the QP's SRQ or RQ.
fn take_recv_wqe(eng: &mut Engine<'_>, qp: QpHandle) -> Option<(RecvWr, bool)> {
    let t = target_of(eng, qp)?;
    match t.srq {
        Some(srq) => eng.take_srq_wqe(srq).map(|w| (w, true)),
        None if eng.store.get(qp)?.init.qp_type == QpType::XrcRecv => None,
        None => eng.store.get_mut(qp)?.rq.pop_front().map(|w| (w, false)),
    }
}

/// Give an unfinished receive WQE back (UC message abandoned, RNR after a partial take).
fn return_recv_wqe(eng: &mut Engine<'_>, qp: QpHandle, wqe: RecvWr, from_srq: bool) {
    let Some(t) = target_of(eng, qp) else {
        return;
    };
    if from_srq {
        if let Some(srq) = t.srq
            && let Some(s) = eng.store.get_mut(srq)
        {
            s.queue.push_front(wqe);
        }
    } else if let Some(q) = eng.store.get_mut(qp) {
        q.rq.push_front(wqe);
    }
}

fn abandon_in_progress(eng: &mut Engine<'_>, qp: QpHandle) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    if let InProgress::Send { wqe, from_srq, .. } = std::mem::take(&mut q.transport.in_progress) {
        return_recv_wqe(eng, qp, wqe, from_srq);
    }
}

/// Why a request failed, and what the requester is told.
enum Failure {
    /// NAK with this code; complete the receive WQE in progress with this status; raise
    /// this async event; move the QP to ERR.
    Fatal(NakCode, WcStatus, Option<EventType>),
    /// Receiver not ready: RNR NAK, nothing consumed.
    Rnr,
}

fn remote_fault_to_failure(f: RemoteFault) -> Failure {
    match f {
        // Class C like rxe: NAK invalid request (the requester sees IBV_WC_REM_INV_REQ_ERR).
        RemoteFault::Misaligned => invalid_request(),
        _ => Failure::Fatal(
            NakCode::RemoteAccessError,
            WcStatus::RemAccessErr,
            Some(EventType::QpAccessErr),
        ),
    }
}

fn invalid_request() -> Failure {
    Failure::Fatal(
        NakCode::InvalidRequest,
        WcStatus::RemInvReqErr,
        Some(EventType::QpReqErr),
    )
}

/// How many times each sequence-error NAK goes out (see [`nak_gap`]).
pub(crate) const NAK_COPIES: u8 = 3;

/// Tell the requester that `epsn` is missing: a sequence-error NAK, sent
/// [`NAK_COPIES`] times.
///
/// rxe NAKs a gap once and then drops what follows in silence, so a lost NAK, or a lost
/// resend of the missing packet, leaves the requester to its local ACK timeout (67 ms for
/// rdma-core's default 14): under 1 % loss a stall every few hundred packets. Here the NAK
/// goes out three times, and again when the resend shows up without its first packet (a
/// PSN past the gap arriving a second time: a packet the network reordered arrives late
/// but once). Twice was not enough: at 1 % loss a 1 MiB WRITE stream NAKs some 8 000 gaps
/// a second, and losing both copies (1 in 10 000) stalled it 67 ms about once a second.
/// The requester resends on the first copy it gets and takes the others for its echoes
/// (`QpTransport::nak_echoes_due`); rxe's ignores them too (`started_retry`).
/// Each is an answer to a packet received, never a timer's: the requester still waits
/// the full `timeout` (ibv_modify_qp(3)) before resending on its own.
fn nak_gap(eng: &mut Engine<'_>, qp: QpHandle, epsn: softroce_wire::Psn) {
    for _ in 0..NAK_COPIES {
        eng.queue_ack(qp, epsn, Syndrome::Nak(NakCode::PsnSequenceError));
    }
}

fn rc_receive(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
) {
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    let epsn = q.transport.rq_psn;
    let psn = bth.psn;
    let diff = psn.diff(epsn);
    if diff > 0 {
        eng.counters.drop(DropReason::OutOfSequence);
        let first_of_gap = !q.transport.nak_sent;
        let mut resend_lost = false;
        if let Some(q) = eng.store.get_mut(qp) {
            let t = &mut q.transport;
            if first_of_gap {
                t.gap_seen = 0;
                t.acks_twice_left = super::acks::ACKS_TWICE_AFTER_GAP;
            }
            // PSNs up to 64 past the gap, as they arrive: one arriving again means the
            // requester went back and resent, and the missing packet is missing again
            // (or the network duplicated a packet: a spurious NAK costs one retry). One
            // arriving late (reordered) arrives once.
            let bit = u32::try_from(diff - 1)
                .ok()
                .and_then(|i| 1u64.checked_shl(i));
            if let Some(bit) = bit {
                resend_lost = !first_of_gap && t.gap_seen & bit != 0;
                if resend_lost {
                    // What arrives from here on tells of the next resend.
                    t.gap_seen = 0;
                }
                t.gap_seen |= bit;
            }
            t.nak_sent = true;
        }
        if first_of_gap {
            // rxe's out_of_seq_request counts the gaps it NAKs, not every packet after one
            // (those are the drop counter's).
            eng.counters.out_of_seq_request += 1;
        } else if resend_lost {
            eng.counters.seq_nak_repeated += 1;
        } else {
            return;
        }
        nak_gap(eng, qp, epsn);
        return;
    }
    if diff < 0 {
        eng.counters.duplicate_request += 1;
        on_duplicate(eng, qp, packet, bth);
        return;
    }
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.nak_sent = false;
    }
    let Some(info) = bth.opcode.info() else {
        return;
    };
    let xrc_switch = xrc_message_srq(eng, qp, info.position);
    let no_xrc_srq = eng
        .store
        .get(qp)
        .is_some_and(|q| q.init.qp_type == QpType::XrcRecv && q.transport.xrc_srq.is_none());
    let inside_message = eng
        .store
        .get(qp)
        .is_some_and(|q| !matches!(q.transport.in_progress, InProgress::None));
    let asks_answer = matches!(
        info.operation,
        Operation::ReadRequest
            | Operation::CompareSwap
            | Operation::FetchAdd
            | Operation::AtomicWrite
    );
    if asks_answer && !inside_message && !xrc_switch && eng.owes_all_it_may(qp) {
        // The requester has more READs and atomics in flight than the responder resources
        // it was given (ibv_modify_qp(3): max_rd_atomic above the peer's
        // max_dest_rd_atomic). rxe serves them in turn; here the request is left unseen,
        // as if lost, its PSN not taken: what follows is NAKed out of sequence and the
        // requester goes back to it once the answers ahead have left. (Taking it and
        // dropping its answer left the retry to find its resource recycled: the requester
        // ran out of retries.)
        eng.counters.replies_dropped += 1;
        return;
    }
    let result = match info.operation {
        // Inside a message, another XRC SRQ than its FIRST named: malformed (class C).
        _ if xrc_switch => Err(invalid_request()),
        // A READ or an atomic where a SEND or WRITE's MIDDLE or LAST belongs: the message
        // lost its end (rxe's check_op_seq, IBTA 9.7.5.1.1: an invalid request).
        Operation::ReadRequest
        | Operation::CompareSwap
        | Operation::FetchAdd
        | Operation::AtomicWrite
            if inside_message =>
        {
            Err(invalid_request())
        }
        // The XRCETH named no XRC SRQ of the target's domain.
        _ if no_xrc_srq => Err(invalid_request()),
        // A QP not enabled for the operation does not support it: an invalid request,
        // before any key is looked at (rxe's check_op_valid; an MR's or MW's missing right
        // is a remote access error instead).
        op if !qp_permits(eng, qp, op) => Err(invalid_request()),
        Operation::Send => on_send(eng, now, qp, packet, bth, info.position, true),
        Operation::Write => on_write(eng, now, qp, packet, bth, info.position, true),
        Operation::ReadRequest => on_read(eng, qp, packet, bth),
        Operation::CompareSwap | Operation::FetchAdd => on_atomic(eng, qp, packet, bth),
        Operation::AtomicWrite => on_atomic_write(eng, qp, packet, bth),
        // FLUSH (IBTA 1.5) is not implemented: refuse it cleanly.
        _ => Err(invalid_request()),
    };
    match result {
        Ok(()) => {}
        Err(Failure::Rnr) => {
            eng.counters.send_rnr_err += 1;
            let timer = eng.store.get(qp).map_or(0, |q| q.attr.min_rnr_timer);
            eng.queue_ack(qp, psn, Syndrome::RnrNak { timer });
        }
        Err(Failure::Fatal(code, status, event)) => {
            eng.queue_ack(qp, psn, Syndrome::Nak(code));
            responder_fatal(eng, qp, status, event);
        }
    }
}

/// An XRC target's in-sequence request: a FIRST records the XRC SRQ it named for its
/// message, and while that message is in progress every packet must name the same SRQ.
/// Whether this one names another; the request is then served (refused) with the
/// message's own SRQ, so its receive completes on that SRQ's CQ.
fn xrc_message_srq(eng: &mut Engine<'_>, qp: QpHandle, pos: Position) -> bool {
    let Some(q) = eng.store.get_mut(qp) else {
        return false;
    };
    if q.init.qp_type != QpType::XrcRecv {
        return false;
    }
    let t = &mut q.transport;
    if matches!(t.in_progress, InProgress::None) {
        if pos == Position::First {
            t.xrc_msg_srq = t.xrc_srq;
        }
        return false;
    }
    let other = t.xrc_srq != t.xrc_msg_srq;
    t.xrc_srq = t.xrc_msg_srq;
    other
}

/// Whether `qp`'s access flags enable the remote `operation` on it (SENDs need nothing).
fn qp_permits(eng: &Engine<'_>, qp: QpHandle, operation: Operation) -> bool {
    let need = match operation {
        Operation::Write | Operation::AtomicWrite => AccessFlags::REMOTE_WRITE,
        Operation::ReadRequest => AccessFlags::REMOTE_READ,
        Operation::CompareSwap | Operation::FetchAdd => AccessFlags::REMOTE_ATOMIC,
        _ => return true,
    };
    eng.store
        .get(qp)
        .is_some_and(|q| q.attr.qp_access_flags.contains(need))
}

/// Complete the receive in progress (if any) with `status` and move the QP to ERR.
fn responder_fatal(eng: &mut Engine<'_>, qp: QpHandle, status: WcStatus, event: Option<EventType>) {
    let Some(t) = target_of(eng, qp) else {
        return;
    };
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let qpn = q.qpn.value();
    let cq = t.cq;
    // A message through a tag matching SRQ completes as what it was received as.
    let opcode = q
        .transport
        .tm_delivery
        .take()
        .map_or(WcOpcode::Recv, |d| d.opcode);
    match std::mem::take(&mut q.transport.in_progress) {
        InProgress::Send { wqe, .. } => {
            let wc = WorkCompletion::error(wqe.wr_id, qpn, status, opcode, vendor_for(status));
            eng.push_recv_completion(qp, cq, wc, false);
        }
        // A rendezvous request broken off: its matched tag completes in error.
        InProgress::Rndv { tag, .. } => {
            let wc = WorkCompletion::error(
                tag.recv_wr_id,
                qpn,
                status,
                WcOpcode::TmRecv,
                vendor_for(status),
            );
            eng.push_recv_completion(qp, cq, wc, false);
        }
        InProgress::None | InProgress::Write { .. } => {}
    }
    eng.qp_to_error(qp, event);
}

fn vendor_for(status: WcStatus) -> u32 {
    match status {
        WcStatus::LocLenErr => VendorErr::RecvTooSmall as u32,
        WcStatus::LocProtErr => VendorErr::LocalKey as u32,
        WcStatus::RemAccessErr => VendorErr::RemoteAccess as u32,
        _ => VendorErr::RemoteInvalidRequest as u32,
    }
}

/// IBTA length rules (rxe_resp_check_length): FIRST/MIDDLE carry exactly one MTU, LAST 1..MTU,
/// ONLY up to the MTU.
fn length_ok(pos: Position, len: usize, mtu: usize) -> bool {
    match pos {
        Position::First | Position::Middle => len == mtu,
        Position::Last => len >= 1 && len <= mtu,
        Position::Only => len <= mtu,
    }
}

fn ack_if_requested(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    bth: &BthRepr,
    reliable: bool,
) {
    if reliable && bth.ack_req {
        eng.ack(now, qp, bth.psn);
    }
}

fn advance(eng: &mut Engine<'_>, qp: QpHandle, npkts: u32, message_done: bool) {
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.rq_psn = q.transport.rq_psn.add(npkts);
        if message_done {
            q.transport.msn = Msn::new(q.transport.msn).next().value();
        }
    }
}

fn on_send(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
    pos: Position,
    reliable: bool,
) -> Result<(), Failure> {
    let Some(q) = eng.store.get_mut(qp) else {
        return Ok(());
    };
    let mtu = q.attr.path_mtu.bytes();
    let payload = packet.payload();
    let starts = matches!(pos, Position::First | Position::Only);
    if !length_ok(pos, payload.len(), mtu) {
        // rxe takes the message's receive before it checks the length (CHK_RESOURCE, then
        // CHK_LENGTH): that receive completes in error with the QP (class C), or, with none
        // posted, the answer is RNR. (Not through a tag matching SRQ: no tag was matched.)
        let opens = starts && matches!(q.transport.in_progress, InProgress::None);
        if opens && !receives_through_tm_srq(eng, qp) {
            let Some((wqe, from_srq)) = take_recv_wqe(eng, qp) else {
                return Err(Failure::Rnr);
            };
            if let Some(q) = eng.store.get_mut(qp) {
                q.transport.in_progress = InProgress::Send {
                    wqe,
                    from_srq,
                    offset: 0,
                };
            }
        }
        return Err(invalid_request());
    }
    let mut payload = payload;
    let (wqe, from_srq, offset) = match (starts, std::mem::take(&mut q.transport.in_progress)) {
        (true, InProgress::None) => match tm_start(eng, qp, payload) {
            TmStart::NotTm => match take_recv_wqe(eng, qp) {
                Some((w, s)) => (w, s, 0),
                None => return Err(Failure::Rnr),
            },
            TmStart::Rnr => return Err(Failure::Rnr),
            TmStart::Deliver { wqe, skip } => {
                payload = &payload[skip..];
                (wqe, true, 0)
            }
            TmStart::Rndv(tag, rvh, msg_tag) => {
                rndv_packet(eng, now, qp, bth, reliable, pos, (tag, rvh, msg_tag));
                return Ok(());
            }
        },
        (false, InProgress::Rndv { tag, rvh, msg_tag }) => {
            rndv_packet(eng, now, qp, bth, reliable, pos, (tag, rvh, msg_tag));
            return Ok(());
        }
        (
            false,
            InProgress::Send {
                wqe,
                from_srq,
                offset,
            },
        ) => (wqe, from_srq, offset),
        // A FIRST inside another message, or a MIDDLE/LAST with no FIRST.
        (_, other) => {
            if let Some(q) = eng.store.get_mut(qp) {
                q.transport.in_progress = other;
            }
            return Err(invalid_request());
        }
    };
    let Some(q) = eng.store.get(qp) else {
        return Ok(());
    };
    let t = recv_target(eng.store, q);
    let pd = t.pd;
    let qpn = q.qpn.value();
    let recv_cq = t.cq;
    if let Err(fault) = eng.store.scatter(pd, &wqe.sg_list, offset, payload) {
        let (code, status) = match fault {
            LocalFault::TooLong => (NakCode::InvalidRequest, WcStatus::LocLenErr),
            LocalFault::Protection => (NakCode::RemoteOperationalError, WcStatus::LocProtErr),
        };
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.in_progress = InProgress::Send {
                wqe,
                from_srq,
                offset,
            };
        }
        return Err(Failure::Fatal(code, status, None));
    }
    let ends = matches!(pos, Position::Last | Position::Only);
    if ends
        && let Some(ieth) = packet.ieth()
        && !eng.store.invalidate_rkey(pd, ieth.rkey(), qp)
    {
        // Class J (rxe: RESPST_ERR_INVALIDATE_RKEY): the receive completes with
        // IBV_WC_REM_INV_REQ_ERR and the QP stops; the requester is told by an
        // invalid-request NAK.
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.in_progress = InProgress::Send {
                wqe,
                from_srq,
                offset,
            };
        }
        return Err(invalid_request());
    }
    let offset = offset + payload.len() as u64;
    advance(eng, qp, 1, ends);
    if ends {
        let mut wc = WorkCompletion::success(wqe.wr_id, qpn, WcOpcode::Recv, offset as u32);
        if let Some(q) = eng.store.get_mut(qp)
            && let Some(d) = q.transport.tm_delivery.take()
        {
            wc.opcode = d.opcode;
            wc.wc_flags |= d.flags;
            wc.tm_tag = d.tag;
            wc.tm_priv = d.app_ctx;
        }
        if let Some(imm) = packet.imm() {
            wc.imm_data = imm_from_wire(imm.imm());
            wc.wc_flags |= WcFlags::WITH_IMM;
        }
        if let Some(ieth) = packet.ieth() {
            // Invalidated above.
            wc.imm_data = ieth.rkey();
            wc.wc_flags |= WcFlags::WITH_INV;
        }
        eng.push_recv_completion(qp, recv_cq, wc, bth.solicited);
    } else if let Some(q) = eng.store.get_mut(qp) {
        q.transport.in_progress = InProgress::Send {
            wqe,
            from_srq,
            offset,
        };
    }
    ack_if_requested(eng, now, qp, bth, reliable);
    Ok(())
}

/// A packet of a rendezvous request whose headers matched `tag`: until its last packet the
/// request stays in progress (the application header after the RVH, which a matched
/// rendezvous does not deliver, is dropped); its last starts the READ and FIN.
fn rndv_packet(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    bth: &BthRepr,
    reliable: bool,
    pos: Position,
    (tag, rvh, msg_tag): (TmTag, Rvh, u64),
) {
    let ends = matches!(pos, Position::Last | Position::Only);
    advance(eng, qp, 1, ends);
    if !ends {
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.in_progress = InProgress::Rndv { tag, rvh, msg_tag };
        }
        ack_if_requested(eng, now, qp, bth, reliable);
        return;
    }
    // The request is acknowledged before the READ and FIN it causes: the sender sees its
    // SEND complete before the FIN arrives.
    ack_if_requested(eng, now, qp, bth, reliable);
    eng.flush_deferred_ack(qp);
    super::tm_rndv::start(eng, qp, tag, rvh, msg_tag);
}

/// How a message starting at a QP of a tag matching SRQ is received.
enum TmStart {
    /// The QP's SRQ is not a tag matching SRQ.
    NotTm,
    /// Into `wqe` (an ordinary SRQ receive or a matched tag's buffer), skipping `skip`
    /// header bytes; the completion is in `tm_delivery`.
    Deliver { wqe: RecvWr, skip: usize },
    /// No ordinary receive for a message that needs one.
    Rnr,
    /// A rendezvous request matched `TmTag` (its MATCH completion pushed): READ what the
    /// `Rvh` names, then send the FIN of the message's tag.
    Rndv(TmTag, Rvh, u64),
}

/// Match the first packet of a message against a tag matching SRQ (see [`crate::tm`]).
/// Whether `qp` (RC) receives through a tag matching SRQ.
fn receives_through_tm_srq(eng: &Engine<'_>, qp: QpHandle) -> bool {
    eng.store
        .get(qp)
        .filter(|q| q.init.qp_type == QpType::Rc)
        .and_then(|q| q.init.srq)
        .and_then(|srq| eng.store.get(srq))
        .is_some_and(|s| s.tm.is_some())
}

fn tm_start(eng: &mut Engine<'_>, qp: QpHandle, payload: &[u8]) -> TmStart {
    if !receives_through_tm_srq(eng, qp) {
        return TmStart::NotTm;
    }
    let Some(srq) = eng.store.get(qp).and_then(|q| q.init.srq) else {
        return TmStart::NotTm;
    };
    let tmh = Tmh::parse(payload);
    let op = tmh.and_then(|h| h.op());
    let tagged = matches!(op, Some(TmhOp::Eager | TmhOp::Rndv));
    // The RVH follows the TMH in the message's first packet: a FIRST carries a whole path
    // MTU (256 bytes at least), an ONLY as much as the message has.
    let rvh = (op == Some(TmhOp::Rndv))
        .then(|| Rvh::parse(payload))
        .flatten();
    let matched = match (tmh, op) {
        (Some(h), Some(TmhOp::Eager)) | (Some(h), Some(TmhOp::Rndv))
            if op == Some(TmhOp::Eager) || rvh.is_some() =>
        {
            eng.store
                .get_mut(srq)
                .and_then(|s| s.tm.as_deref_mut())
                .and_then(|t| t.take_match(h.tag))
        }
        _ => None,
    };
    let tm_info = |flags: WcFlags| {
        let h = tmh.unwrap_or(Tmh {
            opcode: 0,
            app_ctx: 0,
            tag: 0,
        });
        TmDelivery {
            opcode: WcOpcode::TmRecv,
            flags,
            tag: h.tag,
            app_ctx: h.app_ctx,
        }
    };
    let (wqe, skip, delivery) = match (matched, rvh) {
        (Some(tag), Some(rvh)) => {
            let d = tm_info(WcFlags::TM_MATCH);
            if let Some(q) = eng.store.get(qp) {
                let t = recv_target(eng.store, q);
                let mut wc = WorkCompletion::success(tag.recv_wr_id, q.qpn.value(), d.opcode, 0);
                wc.wc_flags = d.flags;
                wc.tm_tag = d.tag;
                wc.tm_priv = d.app_ctx;
                eng.push_recv_completion(qp, t.cq, wc, false);
            }
            return TmStart::Rndv(tag, rvh, d.tag);
        }
        (Some(tag), None) => (
            RecvWr {
                wr_id: tag.recv_wr_id,
                sg_list: tag.sg_list.into(),
            },
            TMH_LEN,
            tm_info(WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID),
        ),
        (None, _) => {
            let Some(wqe) = eng.take_srq_wqe(srq) else {
                return TmStart::Rnr;
            };
            let d = if tagged {
                if let Some(t) = eng.store.get_mut(srq).and_then(|s| s.tm.as_deref_mut()) {
                    t.count_unexpected();
                }
                TmDelivery {
                    opcode: WcOpcode::TmRecv,
                    flags: WcFlags::EMPTY,
                    tag: 0,
                    app_ctx: 0,
                }
            } else if tmh.is_some() {
                TmDelivery {
                    opcode: WcOpcode::TmNoTag,
                    flags: WcFlags::EMPTY,
                    tag: 0,
                    app_ctx: 0,
                }
            } else {
                // Shorter than a header: an ordinary receive.
                TmDelivery {
                    opcode: WcOpcode::Recv,
                    flags: WcFlags::EMPTY,
                    tag: 0,
                    app_ctx: 0,
                }
            };
            (wqe, 0, d)
        }
    };
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.tm_delivery = Some(delivery);
    }
    TmStart::Deliver { wqe, skip }
}

fn on_write(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
    pos: Position,
    reliable: bool,
) -> Result<(), Failure> {
    let Some(t) = target_of(eng, qp) else {
        return Ok(());
    };
    let Some(q) = eng.store.get_mut(qp) else {
        return Ok(());
    };
    let mtu = q.attr.path_mtu.bytes();
    let payload = packet.payload();
    if !length_ok(pos, payload.len(), mtu) {
        return Err(invalid_request());
    }
    let via = Via { pd: t.pd, qp };
    // Where `len` bytes at `va` lie in memory, if `rkey` lets this QP write them there.
    let writable = |store: &Store, rkey: u32, va: u64, len: u64| {
        store
            .check_remote(via, rkey, va, len, AccessFlags::REMOTE_WRITE)
            .map_err(remote_fault_to_failure)
    };
    let starts = matches!(pos, Position::First | Position::Only);
    // `at_va`: where `va` lies in memory when this packet checked the whole message (its
    // first), so its own payload needs no second lookup: a region or window maps a range
    // linearly, and nothing changed it in between.
    let (va, rkey, len, offset, at_va) =
        match (starts, std::mem::take(&mut q.transport.in_progress)) {
            (true, InProgress::None) => {
                let Some(reth) = packet.reth() else {
                    return Err(invalid_request());
                };
                let (va, rkey, len) = (reth.va(), reth.rkey(), reth.dma_len());
                if len > 1 << 31 || (pos == Position::Only && payload.len() != len as usize) {
                    return Err(invalid_request());
                }
                // The pad makes the message a multiple of 4 bytes at its end, and only
                // there (rxe's check_rkey: a length error otherwise).
                let pad_wanted = if pos == Position::Only {
                    len.wrapping_neg() & 3
                } else {
                    0
                };
                if u32::from(packet.bth().pad_count()) != pad_wanted {
                    return Err(invalid_request());
                }
                let at_va = if len > 0 {
                    Some(writable(eng.store, rkey, va, u64::from(len))?)
                } else {
                    None
                };
                (va, rkey, len, 0u64, at_va)
            }
            (
                false,
                InProgress::Write {
                    va,
                    rkey,
                    len,
                    offset,
                },
            ) => (va, rkey, len, offset, None),
            (_, other) => {
                if let Some(q) = eng.store.get_mut(qp) {
                    q.transport.in_progress = other;
                }
                return Err(invalid_request());
            }
        };
    let end = offset + payload.len() as u64;
    if end > u64::from(len) {
        return Err(invalid_request());
    }
    // The region may have been deregistered between packets: check every time (as rxe).
    let addr = if payload.is_empty() {
        va + offset
    } else if let Some(at_va) = at_va {
        at_va + offset
    } else {
        writable(eng.store, rkey, va + offset, payload.len() as u64)?
    };
    let ends = matches!(pos, Position::Last | Position::Only);
    if ends && end != u64::from(len) {
        return Err(invalid_request());
    }
    let imm = packet.imm().map(|i| imm_from_wire(i.imm()));
    // WRITE with immediate consumes a receive WQE: check before touching memory so an
    // RNR NAK leaves nothing half-done.
    let recv = if ends && imm.is_some() {
        match take_recv_wqe(eng, qp) {
            Some(w) => Some(w),
            None => {
                if let Some(q) = eng.store.get_mut(qp) {
                    if !starts {
                        q.transport.in_progress = InProgress::Write {
                            va,
                            rkey,
                            len,
                            offset,
                        };
                    }
                }
                return Err(Failure::Rnr);
            }
        }
    } else {
        None
    };
    eng.store
        .write_remote(rkey, addr, payload)
        .map_err(remote_fault_to_failure)?;
    advance(eng, qp, 1, ends);
    if ends {
        if let (Some(imm), Some((wqe, _))) = (imm, recv) {
            let Some(q) = eng.store.get(qp) else {
                return Ok(());
            };
            let qpn = q.qpn.value();
            let cq = t.cq;
            let mut wc = WorkCompletion::success(wqe.wr_id, qpn, WcOpcode::RecvRdmaWithImm, len);
            wc.imm_data = imm;
            wc.wc_flags |= WcFlags::WITH_IMM;
            eng.push_recv_completion(qp, cq, wc, bth.solicited);
        }
    } else if let Some(q) = eng.store.get_mut(qp) {
        q.transport.in_progress = InProgress::Write {
            va,
            rkey,
            len,
            offset: end,
        };
    }
    ack_if_requested(eng, now, qp, bth, reliable);
    Ok(())
}

fn remember(eng: &mut Engine<'_>, qp: QpHandle, res: Resource) {
    if let Some(q) = eng.store.get_mut(qp) {
        let cap = usize::from(q.attr.max_dest_rd_atomic.max(1));
        while q.transport.resources.len() >= cap {
            q.transport.resources.pop_front();
        }
        q.transport.resources.push_back(res);
    }
}

fn on_read(
    eng: &mut Engine<'_>,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
) -> Result<(), Failure> {
    let Some(q) = eng.store.get(qp) else {
        return Ok(());
    };
    if q.attr.max_dest_rd_atomic == 0 {
        return Err(invalid_request());
    }
    let Some(reth) = packet.reth() else {
        return Err(invalid_request());
    };
    let (va, rkey, len) = (reth.va(), reth.rkey(), reth.dma_len());
    if len > 1 << 31 {
        return Err(invalid_request());
    }
    if len > 0 {
        eng.store
            .check_remote(
                Via {
                    pd: recv_target(eng.store, q).pd,
                    qp,
                },
                rkey,
                va,
                u64::from(len),
                AccessFlags::REMOTE_READ,
            )
            .map_err(remote_fault_to_failure)?;
    }
    let mtu = q.attr.path_mtu.bytes() as u64;
    let npkts = u64::from(len).div_ceil(mtu).max(1) as u32;
    remember(
        eng,
        qp,
        Resource::Read {
            first_psn: bth.psn,
            npkts,
            va,
            rkey,
            len,
        },
    );
    advance(eng, qp, npkts, true);
    let msn = eng.store.get(qp).map_or(0, |q| q.transport.msn);
    start_read_reply(
        eng,
        qp,
        ReadCursor {
            req_psn: bth.psn,
            res_psn: bth.psn,
            psn: bth.psn,
            va,
            rkey,
            resid: len,
            first: true,
            msn,
        },
    );
    Ok(())
}

/// Owe READ responses from `c` on; a cursor already owed for the same resource (a
/// duplicate arriving while its replay is still being sent) starts over in place instead.
fn start_read_reply(eng: &mut Engine<'_>, qp: QpHandle, c: ReadCursor) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let pending = q.transport.replies.iter_mut().find_map(|r| match r {
        Reply::Read(p) if p.res_psn == c.res_psn => Some(p),
        _ => None,
    });
    match pending {
        Some(p) => *p = c,
        None => eng.owe(qp, Reply::Read(c)),
    }
    eng.outbox.mark_active(qp);
}

/// Responses built per turn of a QP, so one long READ cannot starve the other QPs.
const REPLY_BUDGET: usize = 64;

/// Build up to [`REPLY_BUDGET`] of the packets the QP owes, in order: the next READ
/// response of the cursor at the head, or the ACK/NAK owed behind it.
pub(super) fn send_replies(eng: &mut Engine<'_>, qp: QpHandle) {
    for _ in 0..REPLY_BUDGET {
        let Some(head) = eng
            .store
            .get(qp)
            .and_then(|q| q.transport.replies.front().copied())
        else {
            return;
        };
        let next = match head {
            Reply::Ack(ack) => {
                eng.emit_response(qp, &ack);
                None
            }
            Reply::Read(c) => match send_read_response(eng, qp, c) {
                Ok(next) => next,
                Err(()) => return,
            },
        };
        let Some(q) = eng.store.get_mut(qp) else {
            return;
        };
        match next {
            Some(c) => q.transport.replies[0] = Reply::Read(c),
            None => {
                q.transport.replies.pop_front();
            }
        }
    }
    if eng
        .store
        .get(qp)
        .is_some_and(|q| !q.transport.replies.is_empty())
    {
        eng.outbox.mark_active(qp);
    }
}

/// Build the READ response at cursor `c`; the cursor after it, or `None` when that was the
/// last. The region is looked up again for every packet (as rxe_recheck_mr): if it went
/// away, the READ fails with a remote access error NAK and the QP stops (`Err`).
fn send_read_response(
    eng: &mut Engine<'_>,
    qp: QpHandle,
    c: ReadCursor,
) -> Result<Option<ReadCursor>, ()> {
    let Some(q) = eng.store.get(qp) else {
        return Err(());
    };
    let mtu = q.attr.path_mtu.bytes() as u32;
    let chunk = c.resid.min(mtu);
    let addr = if chunk == 0 {
        Ok(c.va)
    } else {
        eng.store.check_remote(
            Via {
                pd: recv_target(eng.store, q).pd,
                qp,
            },
            c.rkey,
            c.va,
            u64::from(chunk),
            AccessFlags::REMOTE_READ,
        )
    };
    let Ok(addr) = addr else {
        read_response_failed(eng, qp, c.req_psn);
        return Err(());
    };
    let dest = Qpn::from_wire(q.attr.dest_qp_num);
    let Some(dst) = eng.qp_peer(qp) else {
        return Err(());
    };
    let last = c.resid <= mtu;
    let opcode = match (c.first, last) {
        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    };
    let aeth = (opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(AethRepr {
        syndrome: Syndrome::ACK,
        msn: Msn::new(c.msn),
    });
    let xrc = q.init.qp_type == QpType::XrcRecv;
    let mut repr = RoceRepr::new(
        BthRepr::new(opcode, dest, c.psn),
        ExtRepr {
            aeth,
            ..ExtRepr::default()
        },
        chunk as usize,
    );
    if xrc {
        super::to_xrc(&mut repr, None);
    }
    // The payload straight from the region (as a request's, see `payload_by_reference`),
    // unless the region pages on demand: its holes fail the READ, which needs the copy.
    let len = chunk as usize;
    let at = repr.header_len();
    let in_place = (len >= PAYLOAD_BY_REFERENCE_MIN
        && eng.device.config().payload_by_reference
        && memory::fault_safe()
        && !eng.store.remote_on_demand(c.rkey))
    .then_some(PayloadRef { at, addr, len });
    let mut data = eng.outbox.buffer(repr.buffer_len());
    if in_place.is_none()
        && eng
            .store
            .read_remote(c.rkey, addr, &mut data[at..at + len])
            .is_err()
    {
        read_response_failed(eng, qp, c.req_psn);
        return Err(());
    }
    eng.queue_built_from(dst, &repr, data, in_place);
    Ok((!last).then_some(ReadCursor {
        psn: c.psn.next(),
        va: c.va + u64::from(chunk),
        resid: c.resid - chunk,
        first: false,
        ..c
    }))
}

/// A READ whose region went away (or, paging on demand, has a hole) since it was checked:
/// remote access error NAK, and the QP stops.
fn read_response_failed(eng: &mut Engine<'_>, qp: QpHandle, req_psn: softroce_wire::Psn) {
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.replies.clear();
    }
    eng.queue_ack(qp, req_psn, Syndrome::Nak(NakCode::RemoteAccessError));
    responder_fatal(
        eng,
        qp,
        WcStatus::RemAccessErr,
        Some(EventType::QpAccessErr),
    );
}

fn on_atomic(
    eng: &mut Engine<'_>,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
) -> Result<(), Failure> {
    let Some(q) = eng.store.get(qp) else {
        return Ok(());
    };
    if q.attr.max_dest_rd_atomic == 0 {
        return Err(invalid_request());
    }
    let Some(a) = packet.atomic_eth() else {
        return Err(invalid_request());
    };
    let addr = eng
        .store
        .check_remote(
            Via {
                pd: recv_target(eng.store, q).pd,
                qp,
            },
            a.rkey(),
            a.va(),
            8,
            AccessFlags::REMOTE_ATOMIC,
        )
        .map_err(remote_fault_to_failure)?;
    let compare = (bth.opcode == Opcode::RC_COMPARE_SWAP).then_some(a.compare());
    let orig = eng
        .store
        .atomic_remote(a.rkey(), addr, a.swap_add(), compare)
        .map_err(remote_fault_to_failure)?;
    remember(eng, qp, Resource::Atomic { psn: bth.psn, orig });
    advance(eng, qp, 1, true);
    eng.queue_response(qp, bth.psn, Syndrome::ACK, AckKind::Atomic(orig));
    Ok(())
}

/// ATOMIC WRITE, as rxe's responder runs it: the QP must allow remote writes (rxe's
/// `check_op_valid`: else an invalid request) and have a responder resource; the RETH
/// names 8 bytes of a region writable by the peer (else a remote access error) and the
/// packet carries exactly those 8 (else an invalid request, rxe's RESPST_ERR_LENGTH); the
/// target must be 8-byte aligned (else an invalid request, RESPST_ERR_MISALIGNED_ATOMIC).
/// The store is one atomic store; the answer a READ RESPONSE ONLY without data.
fn on_atomic_write(
    eng: &mut Engine<'_>,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
) -> Result<(), Failure> {
    let Some(q) = eng.store.get(qp) else {
        return Ok(());
    };
    let inside_message = !matches!(q.transport.in_progress, InProgress::None);
    if inside_message || q.attr.max_dest_rd_atomic == 0 {
        return Err(invalid_request());
    }
    let Some(reth) = packet.reth() else {
        return Err(invalid_request());
    };
    let Ok(bytes) = <[u8; 8]>::try_from(packet.payload()) else {
        return Err(invalid_request());
    };
    if reth.dma_len() != 8 {
        return Err(invalid_request());
    }
    let addr = eng
        .store
        .check_remote(
            Via {
                pd: recv_target(eng.store, q).pd,
                qp,
            },
            reth.rkey(),
            reth.va(),
            8,
            AccessFlags::REMOTE_WRITE,
        )
        .map_err(remote_fault_to_failure)?;
    if addr % 8 != 0 {
        return Err(remote_fault_to_failure(RemoteFault::Misaligned));
    }
    eng.store
        .atomic_write_remote(reth.rkey(), addr, bytes)
        .map_err(remote_fault_to_failure)?;
    remember(eng, qp, Resource::AtomicWrite { psn: bth.psn });
    advance(eng, qp, 1, true);
    eng.queue_response(qp, bth.psn, Syndrome::ACK, AckKind::AtomicWrite);
    Ok(())
}

/// A request we already executed: re-ACK SEND/WRITE, replay READ data, answer atomics from
/// the cache (never executing them twice).
fn on_duplicate(eng: &mut Engine<'_>, qp: QpHandle, packet: &RocePacket<&[u8]>, bth: &BthRepr) {
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    let psn = bth.psn;
    match bth.opcode.info().map(|i| i.operation) {
        Some(Operation::ReadRequest) => {
            let Some(reth) = packet.reth() else {
                return;
            };
            let found = q.transport.resources.iter().find_map(|r| match *r {
                Resource::Read {
                    first_psn,
                    npkts,
                    va,
                    rkey,
                    len,
                } if psn.in_range(first_psn, npkts) => Some((first_psn, va, rkey, len)),
                _ => None,
            });
            let Some((first_psn, va, rkey, len)) = found else {
                eng.counters.drop(DropReason::UnexpectedResponse);
                return;
            };
            // A re-read may ask for a tail of the original range, never more.
            let (rva, rlen) = (reth.va(), reth.dma_len());
            let inside =
                reth.rkey() == rkey && rva >= va && rva + u64::from(rlen) <= va + u64::from(len);
            let still_valid = rlen == 0
                || eng
                    .store
                    .check_remote(
                        Via {
                            pd: recv_target(eng.store, q).pd,
                            qp,
                        },
                        rkey,
                        rva,
                        u64::from(rlen),
                        AccessFlags::REMOTE_READ,
                    )
                    .is_ok();
            if inside && still_valid {
                // Generated again from the requested PSN and address, one packet at a time;
                // as rxe's read_reply, a replay that starts past the READ's first PSN goes
                // on with MIDDLE/LAST rather than opening a new FIRST/ONLY.
                let msn = q.transport.msn;
                start_read_reply(
                    eng,
                    qp,
                    ReadCursor {
                        req_psn: psn,
                        res_psn: first_psn,
                        psn,
                        va: rva,
                        rkey,
                        resid: rlen,
                        first: psn == first_psn,
                        msn,
                    },
                );
            }
        }
        Some(Operation::CompareSwap | Operation::FetchAdd) => {
            let orig = q.transport.resources.iter().find_map(|r| match *r {
                Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                _ => None,
            });
            if let Some(orig) = orig {
                eng.queue_response(qp, psn, Syndrome::ACK, AckKind::Atomic(orig));
            }
        }
        Some(Operation::AtomicWrite) => {
            // Acknowledged again from its resource, never stored twice; a duplicate whose
            // resource was recycled is dropped (rxe: a class D error).
            let done = q
                .transport
                .resources
                .iter()
                .any(|r| matches!(*r, Resource::AtomicWrite { psn: p } if p == psn));
            if done {
                eng.queue_response(qp, psn, Syndrome::ACK, AckKind::AtomicWrite);
            } else {
                eng.counters.drop(DropReason::UnexpectedResponse);
            }
        }
        _ => {
            let last = q.transport.rq_psn.sub(1);
            eng.queue_ack(qp, last, Syndrome::ACK);
        }
    }
}

fn uc_receive(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
) {
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    let Some(info) = bth.opcode.info() else {
        return;
    };
    let starts = info.starts_message();
    let psn = bth.psn;
    if psn != q.transport.rq_psn || (q.transport.uc_resync && !starts) {
        // UC: a gap loses the rest of the message; resynchronise on the next FIRST/ONLY.
        abandon_in_progress(eng, qp);
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.in_progress = InProgress::None;
            if starts {
                q.transport.uc_resync = false;
                q.transport.rq_psn = psn;
            } else {
                q.transport.uc_resync = true;
                q.transport.rq_psn = psn.next();
                eng.counters.drop(DropReason::OutOfSequence);
                return;
            }
        }
    }
    let result = match info.operation {
        // A QP not enabled for RDMA WRITE drops them (rxe's check_op_valid for UC).
        op if !qp_permits(eng, qp, op) => Err(invalid_request()),
        Operation::Send => on_send(eng, now, qp, packet, bth, info.position, false),
        Operation::Write => on_write(eng, now, qp, packet, bth, info.position, false),
        _ => Err(invalid_request()),
    };
    if result.is_err() {
        // UC never NAKs: the message is dropped and the QP resynchronises.
        abandon_in_progress(eng, qp);
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.uc_resync = !info.ends_message();
            q.transport.rq_psn = psn.next();
        }
        eng.counters.drop(DropReason::Unsupported);
    }
}

fn ud_receive(
    eng: &mut Engine<'_>,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
    d: IncomingDatagram<'_>,
    ip_id: u16,
) {
    let Some(deth) = packet.deth() else {
        eng.counters.drop(DropReason::Malformed);
        return;
    };
    let Some((wqe, _)) = take_recv_wqe(eng, qp) else {
        eng.counters.drop(DropReason::NoReceiveWqe);
        return;
    };
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    let pd = q.pd;
    let qpn = q.qpn.value();
    let cq = q.init.recv_cq;
    let payload = packet.payload();
    let mut grh = [0u8; GRH_LEN];
    let udp_len = d.payload.len();
    match (d.src.ip(), d.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let fields = Ipv4Fields {
                src,
                dst,
                tos: d.traffic_class,
                id: ip_id,
                flags_frag: IPV4_DF,
                ttl: 64,
            };
            emit_ipv4(&fields, udp_len, &mut grh);
        }
        (src, dst) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V6(v) => v,
                IpAddr::V4(v) => v.to_ipv6_mapped(),
            };
            let fields = Ipv6Fields {
                src: v6(src),
                dst: v6(dst),
                traffic_class: d.traffic_class,
                flow_label: 0,
                hop_limit: 64,
            };
            emit_ipv6(&fields, udp_len, &mut grh);
        }
    }
    let total = (GRH_LEN + payload.len()) as u64;
    let fits = wqe.total_len() >= total;
    let written = fits
        && eng.store.scatter(pd, &wqe.sg_list, 0, &grh).is_ok()
        && eng
            .store
            .scatter(pd, &wqe.sg_list, GRH_LEN as u64, payload)
            .is_ok();
    let mut wc = if written {
        WorkCompletion::success(wqe.wr_id, qpn, WcOpcode::Recv, total as u32)
    } else {
        let status = if fits {
            WcStatus::LocProtErr
        } else {
            WcStatus::LocLenErr
        };
        WorkCompletion::error(wqe.wr_id, qpn, status, WcOpcode::Recv, vendor_for(status))
    };
    if written {
        wc.src_qp = deth.src_qpn().value();
        wc.wc_flags |= WcFlags::GRH;
        if let Some(imm) = packet.imm() {
            wc.imm_data = imm_from_wire(imm.imm());
            wc.wc_flags |= WcFlags::WITH_IMM;
        }
    }
    // A UD QP checks no PSN, but it is at the one after the message it took (rxe's
    // resp.psn, which ibv_query_qp reports).
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.rq_psn = bth.psn.next();
    }
    eng.push_recv_completion(qp, cq, wc, bth.solicited);
}
