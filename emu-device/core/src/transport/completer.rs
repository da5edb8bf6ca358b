//! The completer: ACKs, NAKs, READ responses and atomic ACKs complete send WQEs in order;
//! timers drive retransmission (go-back-N) and RNR back-off.
//!
//! Retry counting: `retry_cnt` 0–6 is the number of retransmissions after a timeout or an
//! implied NAK before IBV_WC_RETRY_EXC_ERR, 7 included (IBTA and the man pages; rxe retries
//! forever on 7, which `HcaConfig::retry_cnt_7_is_infinite` reproduces when asked).
//! `rnr_retry` 7 means infinite RNR retries (IBTA). Both counters are restored whenever the
//! responder makes progress.

use std::time::Instant;

use softroce_wire::{NakCode, Psn, RocePacket, Syndrome, rnr_timer_micros};

use super::super::counters::DropReason;
use super::super::handles::QpHandle;
use super::super::types::{QpState, WcOpcode, WcStatus, WrOpcode};
use super::super::wr::{VendorErr, WorkCompletion};
use super::Engine;
use super::requester::{fail_send, rewind_to};
use super::responder::NAK_COPIES;

fn is_rd_atomic(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
    )
}

pub(super) fn on_response(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    bth: &softroce_wire::BthRepr,
) {
    let psn = bth.psn;
    let opcode = bth.opcode;
    if opcode == softroce_wire::Opcode::RC_ACKNOWLEDGE {
        let Some(aeth) = packet.aeth() else {
            eng.counters.drop(DropReason::Malformed);
            return;
        };
        match Syndrome::from_byte(aeth.syndrome_raw()) {
            Syndrome::Ack { .. } => ack_through(eng, now, qp, psn),
            Syndrome::RnrNak { timer } => {
                eng.counters.rcvd_rnr_err += 1;
                ack_through(eng, now, qp, psn.sub(1));
                on_rnr_nak(eng, now, qp, psn, timer);
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                ack_through(eng, now, qp, psn.sub(1));
                on_sequence_nak(eng, now, qp, psn);
            }
            Syndrome::Nak(code) => {
                ack_through(eng, now, qp, psn.sub(1));
                let (status, vendor) = match code {
                    NakCode::InvalidRequest => {
                        (WcStatus::RemInvReqErr, VendorErr::RemoteInvalidRequest)
                    }
                    NakCode::RemoteAccessError => (WcStatus::RemAccessErr, VendorErr::RemoteAccess),
                    _ => (WcStatus::RemOpErr, VendorErr::RemoteOperational),
                };
                if front_contains(eng, qp, psn) {
                    fail_send(eng, qp, 0, status, vendor);
                } else {
                    eng.counters.drop(DropReason::UnexpectedResponse);
                }
            }
            Syndrome::Reserved(_) => eng.counters.drop(DropReason::Malformed),
        }
        return;
    }
    let Some(info) = opcode.info() else {
        return;
    };
    match info.operation {
        softroce_wire::Operation::ReadResponse => {
            on_read_response(eng, now, qp, packet, psn, info.position);
        }
        softroce_wire::Operation::AtomicAcknowledge => {
            ack_through(eng, now, qp, psn.sub(1));
            let Some(q) = eng.store.get(qp) else {
                return;
            };
            let matches = q.sq.front().is_some_and(|w| {
                matches!(
                    w.wr.opcode,
                    WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
                ) && w.first_psn == Some(psn)
                    && w.all_sent
            });
            if !matches {
                eng.counters.drop(DropReason::UnexpectedResponse);
                return;
            }
            let orig = packet.atomic_ack_eth().map_or(0, |a| a.orig());
            let (pd, sges) = match q.sq.front() {
                Some(w) => (q.pd, w.wr.sg_list.clone()),
                None => return,
            };
            if eng
                .store
                .scatter(pd, &sges, 0, &orig.to_ne_bytes())
                .is_err()
            {
                fail_send(eng, qp, 0, WcStatus::LocProtErr, VendorErr::LocalKey);
                return;
            }
            complete_front(eng, now, qp, 8);
        }
        _ => eng.counters.drop(DropReason::UnexpectedResponse),
    }
}

/// A sequence-error NAK (a request packet was lost) for an outstanding request: resend
/// from `psn`, counted against the retry count as a timeout is (IBTA's "implied NAK"
/// rules, rxe's COMPST_ERROR_RETRY), unless it is the echo of the NAK that started the
/// resend under way (softroce's responder NAKs each gap three times): ignored.
///
/// The same PSN NAKed again with nothing acknowledged since (the resend lost its first
/// packet too, see the responder's `nak_gap`) is resent at once but not counted, at most
/// [`FREE_RENAK_RESENDS`] times before the next progress; further ones are left to the
/// ACK timer, which runs from the first NAK. So retries are used up no faster than
/// without the repeats (one per NAKed gap, one per timeout): on a network that delays a
/// packet far longer than a round trip, quick repeats would spend `retry_cnt` in a
/// millisecond. A peer repeating NAKs gets a bounded number of resends before the
/// timeouts fail the request.
fn on_sequence_nak(eng: &mut Engine<'_>, now: Instant, qp: QpHandle, psn: Psn) {
    let adaptive = eng.device.config().adaptive_retransmit;
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    // A NAK for a PSN already acknowledged (or never sent) is stale: one overtaken by a
    // later ACK, a duplicate the network made. Going back to it would resend from before
    // what the peer has (rxe's check_psn ignores it the same way).
    if q.transport.nak_outside_flight(psn) {
        eng.counters.drop(DropReason::UnexpectedResponse);
        return;
    }
    if q.transport.nak_echoes_due > 0 && q.transport.nak_resent == Some(psn) {
        q.transport.nak_echoes_due -= 1;
        return;
    }
    eng.counters.rcvd_seq_err += 1;
    if !outstanding(eng, qp) {
        return;
    }
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    if q.transport.nak_resent == Some(psn) {
        if q.transport.free_renak_resends == 0 {
            return;
        }
        q.transport.free_renak_resends -= 1;
        q.transport.nak_echoes_due = NAK_COPIES - 1;
        eng.counters.completer_retry_err += 1;
        rewind_to(eng, qp, psn);
        return;
    }
    if !retry_from(eng, qp, psn) {
        return;
    }
    // The responder answered: the resend gets a whole timeout, as in rxe (its completer
    // re-arms the timer after every response), not what is left of one armed before the
    // loss.
    if let Some(q) = eng.store.get_mut(qp) {
        q.transport.nak_echoes_due = NAK_COPIES - 1;
        q.transport.nak_resent = Some(psn);
        q.transport.recovery.on_loss(now, adaptive);
        q.transport.arm_retransmit(now, q.attr.timeout);
    }
}

/// Resends on a repeated NAK of one PSN, uncounted, between two ACKs that make progress.
pub(crate) const FREE_RENAK_RESENDS: u8 = 3;

fn front_contains(eng: &Engine<'_>, qp: QpHandle, psn: Psn) -> bool {
    eng.store
        .get(qp)
        .and_then(|q| q.sq.front())
        .and_then(|w| w.first_psn.map(|f| psn.in_range(f, w.npkts)))
        .unwrap_or(false)
}

fn outstanding(eng: &Engine<'_>, qp: QpHandle) -> bool {
    eng.store
        .get(qp)
        .is_some_and(|q| q.sq.front().is_some_and(|w| w.first_psn.is_some()))
}

/// Pop the front WQE as successfully completed.
fn complete_front(eng: &mut Engine<'_>, now: Instant, qp: QpHandle, byte_len: u64) {
    retire_front(eng, qp, byte_len);
    after_progress(eng, now, qp);
}

/// Pop the front WQE as successfully completed, and the local operations it held back: its
/// PSNs count as done and, when signaled, its completion goes to the CQ. What follows from
/// the progress (timers, retry counts, events) is [`after_progress`]'s, once for every WQE
/// an ACK retires: per WQE it was most of a coalesced ACK's cost (16 WQEs per ACK when
/// streaming).
fn retire_front(eng: &mut Engine<'_>, qp: QpHandle, byte_len: u64) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    // What the completion needs, read in place: the WQE is large, and moving it out of
    // the queue to read a few fields showed in a streaming sender's profile.
    let Some(w) = q.sq.front_mut() else {
        return;
    };
    let (first_psn, npkts, signaled, wr_id, opcode) =
        (w.first_psn, w.npkts, w.signaled, w.wr.wr_id, w.wr.opcode);
    let tm_done = w.tm_done.take();
    q.sq.pop_front();
    q.transport.send_index = q.transport.send_index.saturating_sub(1);
    if let Some(first) = first_psn {
        let next = first.add(npkts);
        if next.is_after(q.transport.comp_psn) {
            q.transport.comp_psn = next;
        }
    }
    let qpn = q.qpn.value();
    let cq = q.init.send_cq;
    let local_op_next = q.sq.front().is_some_and(|w| w.wr.opcode.is_local());
    if let Some(done) = tm_done {
        super::tm_rndv::finish(eng, qp, *done);
    } else if signaled {
        let wc = WorkCompletion::success(wr_id, qpn, WcOpcode::for_send(opcode), byte_len as u32);
        let _ = eng.push_completion(cq, wc, false);
    }
    // Asked here, where the queue is at hand: most WQEs have none behind them.
    if local_op_next {
        super::requester::retire_local_ops(eng, qp);
    }
}

/// The QP's send queue moved forward (up to `comp_psn`): the retry counts start again, the
/// path's round trip is sampled, the retransmit timer follows the oldest request still
/// outstanding, a drained SQD says so, and the QP may send again.
fn after_progress(eng: &mut Engine<'_>, now: Instant, qp: QpHandle) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    q.transport.restart_retries(q.attr.retry_cnt);
    q.transport.rnr_left = q.attr.rnr_retry;
    q.transport
        .recovery
        .on_acked_before(q.transport.comp_psn, now);
    if q.sq.front().is_some_and(|w| w.first_psn.is_some()) {
        q.transport.arm_retransmit(now, q.attr.timeout);
    } else {
        q.transport.disarm_retransmit();
    }
    eng.check_sq_drained(qp);
    eng.mark_active_if_work(qp);
}

/// Everything up to and including `psn` is acknowledged: complete SEND/WRITE WQEs in order.
/// A READ or atomic found complete-able this way lost its response (implied NAK): resend it.
fn ack_through(eng: &mut Engine<'_>, now: Instant, qp: QpHandle, psn: Psn) {
    let mut retired = false;
    // Bounded by the send queue's length.
    for _ in 0..=eng.store.get(qp).map_or(0, |q| q.sq.len()) {
        let Some(q) = eng.store.get_mut(qp) else {
            return;
        };
        let Some(w) = q.sq.front() else {
            break;
        };
        let Some(first) = w.first_psn else {
            break;
        };
        let last = first.add(w.npkts.saturating_sub(1));
        if psn.is_before(first) {
            break;
        }
        if psn.is_before(last) {
            // Part of a multi-packet request acknowledged: progress all the same.
            let progress = q.transport.comp_psn.is_before(psn.next()) && !is_rd_atomic(w.wr.opcode);
            if retired {
                after_progress(eng, now, qp);
            }
            if progress && let Some(q) = eng.store.get_mut(qp) {
                q.transport.comp_psn = psn.next();
                q.transport.restart_retries(q.attr.retry_cnt);
                q.transport.recovery.on_acked_before(psn.next(), now);
                q.transport.arm_retransmit(now, q.attr.timeout);
            }
            return;
        }
        if !w.all_sent {
            break;
        }
        if is_rd_atomic(w.wr.opcode) {
            // The ACK covers a READ/atomic whose response never came: go back to it.
            eng.counters.completer_retry_err += 1;
            if retired {
                after_progress(eng, now, qp);
            }
            rewind_to(eng, qp, first);
            return;
        }
        let len = w.len();
        retire_front(eng, qp, len);
        retired = true;
    }
    if retired {
        after_progress(eng, now, qp);
    }
}

/// Whether a READ response at `index` of a READ of `npkts` packets, at byte `offset` of
/// its `total`, has the length and the AETH its position requires: FIRST and MIDDLE carry
/// a whole MTU and end no message, LAST and ONLY carry exactly what is left and end it;
/// FIRST, LAST and ONLY acknowledge (an AETH with a NAK cannot carry data). A FIRST or ONLY
/// may come where a resent READ request restarted the message (rxe's check_psn allows the
/// same), so the opcode's position is checked against the READ's end, not its start.
/// Anything else would leave part of the local buffer unwritten under a successful
/// completion.
fn read_response_fits(
    position: softroce_wire::Position,
    packet: &RocePacket<&[u8]>,
    (index, npkts): (u32, u32),
    (offset, total, mtu): (u64, u64, u64),
) -> bool {
    use softroce_wire::Position;
    let len = packet.payload().len() as u64;
    let last = index + 1 == npkts;
    let acked = || {
        packet
            .aeth()
            .is_some_and(|a| matches!(Syndrome::from_byte(a.syndrome_raw()), Syndrome::Ack { .. }))
    };
    match position {
        Position::First => !last && len == mtu && acked(),
        Position::Middle => !last && index > 0 && len == mtu,
        Position::Last => last && index > 0 && offset + len == total && acked(),
        Position::Only => last && offset + len == total && acked(),
    }
}

fn on_read_response(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    packet: &RocePacket<&[u8]>,
    psn: Psn,
    position: softroce_wire::Position,
) {
    // Responses acknowledge every earlier request.
    ack_through(eng, now, qp, psn.sub(1));
    let Some(q) = eng.store.get(qp) else {
        return;
    };
    let Some(w) = q.sq.front() else {
        eng.counters.drop(DropReason::UnexpectedResponse);
        return;
    };
    if w.wr.opcode == WrOpcode::AtomicWrite {
        // rxe acknowledges an ATOMIC WRITE with a READ RESPONSE ONLY without data.
        let acked = packet
            .aeth()
            .is_some_and(|a| matches!(Syndrome::from_byte(a.syndrome_raw()), Syndrome::Ack { .. }));
        if acked && w.first_psn == Some(psn) && w.all_sent && packet.payload().is_empty() {
            complete_front(eng, now, qp, 8);
        } else {
            eng.counters.drop(DropReason::UnexpectedResponse);
        }
        return;
    }
    let (Some(first), WrOpcode::RdmaRead) = (w.first_psn, w.wr.opcode) else {
        eng.counters.drop(DropReason::UnexpectedResponse);
        return;
    };
    if !psn.in_range(first, w.npkts) {
        eng.counters.drop(DropReason::UnexpectedResponse);
        return;
    }
    let expected = if q.transport.comp_psn.in_range(first, w.npkts) {
        q.transport.comp_psn
    } else {
        first
    };
    if psn.is_before(expected) {
        // Duplicate of data already placed.
        return;
    }
    if psn != expected {
        // A response was lost: re-read from the first missing one.
        eng.counters.completer_retry_err += 1;
        rewind_to(eng, qp, expected);
        return;
    }
    let mtu = q.attr.path_mtu.bytes() as u64;
    let offset = u64::from(psn.distance_from(first)) * mtu;
    let total = w.wr.total_len();
    let data = packet.payload();
    let pd = q.pd;
    let npkts = w.npkts;
    let index = psn.distance_from(first);
    if !read_response_fits(position, packet, (index, npkts), (offset, total, mtu)) {
        // Not the response this READ's position needs (a forged or corrupt packet): drop
        // it; the READ is asked again after the timeout if the right one never comes.
        eng.counters.drop(DropReason::Malformed);
        return;
    }
    let sges = w.wr.sg_list.clone();
    if eng.store.scatter(pd, &sges, offset, data).is_err() {
        fail_send(eng, qp, 0, WcStatus::LocProtErr, VendorErr::LocalKey);
        return;
    }
    let done = psn.distance_from(first) + 1 == npkts;
    if done {
        complete_front(eng, now, qp, total);
    } else if let Some(q) = eng.store.get_mut(qp) {
        q.transport.comp_psn = psn.next();
        q.transport.restart_retries(q.attr.retry_cnt);
        q.transport.recovery.on_acked_before(psn.next(), now);
        q.transport.arm_retransmit(now, q.attr.timeout);
    }
}

fn on_rnr_nak(eng: &mut Engine<'_>, now: Instant, qp: QpHandle, psn: Psn, timer: u8) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    if q.sq.front().is_none_or(|w| w.first_psn.is_none()) {
        return;
    }
    if q.attr.rnr_retry != 7 {
        if q.transport.rnr_left == 0 {
            eng.counters.retry_rnr_exceeded_err += 1;
            fail_send(
                eng,
                qp,
                0,
                WcStatus::RnrRetryExcErr,
                VendorErr::RnrRetryExceeded,
            );
            return;
        }
        q.transport.rnr_left -= 1;
    }
    q.transport.rnr_at =
        Some(now + std::time::Duration::from_micros(u64::from(rnr_timer_micros(timer))));
    q.transport.disarm_retransmit();
    rewind_to(eng, qp, psn);
}

/// Fire the QP's timers that are due.
pub(super) fn on_timers(eng: &mut Engine<'_>, now: Instant, qp: QpHandle) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    if !matches!(q.attr.qp_state, QpState::Rts | QpState::Sqd) {
        q.transport.disarm_retransmit();
        q.transport.rnr_at = None;
        return;
    }
    if q.transport.rnr_at.is_some_and(|t| t <= now) {
        q.transport.rnr_at = None;
        eng.outbox.mark_active(qp);
    }
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let outstanding = q.sq.front().is_some_and(|w| w.first_psn.is_some());
    if q.transport.recovery.fire(now, q.attr.timeout) && outstanding {
        // A lossy path stalled for a few round trips: resend, not counted as a retry.
        eng.counters.early_retransmits += 1;
        let from = q.transport.comp_psn;
        rewind_to(eng, qp, from);
        return;
    }
    if q.transport.retrans_at.is_none_or(|t| t > now) {
        return;
    }
    q.transport.retrans_at = None;
    let adaptive = eng.device.config().adaptive_retransmit;
    q.transport.recovery.on_loss(now, adaptive);
    let Some(w) = q.sq.front() else {
        return;
    };
    if w.first_psn.is_none() {
        return;
    }
    let from = q.transport.comp_psn;
    retry_from(eng, qp, from);
}

/// Resend `qp`'s send queue from `from` as a retry, counted against `retry_cnt` (ACK
/// timeouts and sequence-error NAKs both, as IBTA and rxe count them; 7 is forever only
/// when [`HcaConfig::retry_cnt_7_is_infinite`] asks for rxe's reading), or, with none left,
/// fail the oldest request with IBV_WC_RETRY_EXC_ERR. Whether the resend began.
///
/// [`HcaConfig::retry_cnt_7_is_infinite`]: crate::HcaConfig::retry_cnt_7_is_infinite
fn retry_from(eng: &mut Engine<'_>, qp: QpHandle, from: Psn) -> bool {
    let forever_if_7 = eng.device.config().retry_cnt_7_is_infinite;
    let Some(q) = eng.store.get_mut(qp) else {
        return false;
    };
    let forever = q.attr.retry_cnt == 7 && forever_if_7;
    if q.transport.retry_left == 0 && !forever {
        eng.counters.retry_exceeded_err += 1;
        fail_send(eng, qp, 0, WcStatus::RetryExcErr, VendorErr::RetryExceeded);
        return false;
    }
    q.transport.retry_left = q.transport.retry_left.saturating_sub(1);
    eng.counters.completer_retry_err += 1;
    rewind_to(eng, qp, from);
    true
}
