//! A device-wide bound on the RC request PSNs in flight (`HcaConfig::max_outstanding_psns`).
//!
//! Each RC QP may have 128 PSNs unacknowledged (rxe's window); sixty-four busy QPs are then
//! 8192 packets in flight, far more than a peer's socket can buffer while it is descheduled
//! for a moment. What overflows is lost, and go-back-N resends the whole window into the
//! same full buffer: under load some QP met `retry_cnt` timeouts in a row and failed with
//! IBV_WC_RETRY_EXC_ERR although nothing was wrong but the load. Bounding the sum keeps
//! what is in flight within what the peer can hold (lossless, as RoCE fabrics are made to
//! be with PFC); a QP that would exceed it waits for the ACKs of others. Resends always go:
//! they repair what is already counted.

use std::collections::VecDeque;

use super::Outbox;
use super::requester::MAX_UNACKED_PSNS;
use crate::handles::QpHandle;
use crate::store::Store;
use crate::types::QpState;

/// The device's outstanding PSNs, and the QPs waiting for room.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// The sum of every QP's `QpTransport::inflight_share`.
    outstanding: u32,
    /// QPs refused for lack of room, woken (made active) when enough comes back.
    waiting: VecDeque<QpHandle>,
}

impl Outbox {
    /// Whether a QP may send a request packet it never sent before.
    pub(crate) fn has_room(&self, cap: u32) -> bool {
        self.admission.outstanding < cap
    }

    /// `qp` was refused for lack of room: make it active again once there is.
    pub(crate) fn wait_for_room(&mut self, store: &mut Store, qp: QpHandle) {
        if let Some(q) = store.get_mut(qp)
            && !q.transport.awaiting_room
        {
            q.transport.awaiting_room = true;
            self.admission.waiting.push_back(qp);
        }
    }

    /// Count `qp`'s share again after a step that may have sent or acknowledged requests
    /// or changed its state, and wake the waiting QPs when an eighth of the bound is free
    /// (not at every single ACK: each wakeup is a turn for every waiting QP).
    pub(crate) fn account(&mut self, store: &mut Store, cap: u32, qp: QpHandle) {
        if let Some(q) = store.get_mut(qp) {
            let sending = q.init.qp_type.is_reliable()
                && matches!(q.attr.qp_state, QpState::Rts | QpState::Sqd);
            let (sent, acked) = (q.transport.sent_psn, q.transport.comp_psn);
            let share = if sending && acked.is_before(sent) {
                sent.distance_from(acked).min(MAX_UNACKED_PSNS)
            } else {
                0
            };
            self.admission.outstanding = self
                .admission
                .outstanding
                .saturating_sub(q.transport.inflight_share)
                .saturating_add(share);
            q.transport.inflight_share = share;
        }
        if self.admission.outstanding <= cap - cap / 8 {
            // Bounded by the waiting QPs, each queued once.
            while let Some(w) = self.admission.waiting.pop_front() {
                if let Some(q) = store.get_mut(w) {
                    q.transport.awaiting_room = false;
                }
                self.mark_active(w);
            }
        }
    }

    /// A QP's transport state is going away (destroyed, reset) with `share` counted.
    pub(crate) fn forget(&mut self, share: u32) {
        self.admission.outstanding = self.admission.outstanding.saturating_sub(share);
    }
}
