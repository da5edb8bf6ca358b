//! What work requests come to: completions into CQs, receive WQEs taken from SRQs, and the
//! error states that flush a QP's queues.

use super::super::cq::PushOutcome;
use super::super::events::EventElement;
use super::super::handles::{CqHandle, QpHandle, SrqHandle};
use super::super::objects::SendWqe;
use super::super::qp_transport::InProgress;
use super::super::types::{EventType, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use super::super::wr::{RecvWr, VendorErr, WorkCompletion};
use super::Engine;

impl Engine<'_> {
    /// Store a completion (see [`Completions::push`](super::super::cq::Completions::push)).
    pub(crate) fn push_completion(
        &mut self,
        cq: CqHandle,
        wc: WorkCompletion,
        solicited: bool,
    ) -> PushOutcome {
        self.cqs.push(self.events, self.counters, cq, wc, solicited)
    }

    /// Store a receive completion; an overrun moves the QP to ERR, as rxe's responder does.
    pub(crate) fn push_recv_completion(
        &mut self,
        qp: QpHandle,
        cq: CqHandle,
        wc: WorkCompletion,
        solicited: bool,
    ) {
        if self.push_completion(cq, wc, solicited) == PushOutcome::Overrun {
            let in_err = self
                .store
                .get(qp)
                .is_some_and(|q| q.attr.qp_state == QpState::Err);
            if !in_err {
                self.qp_to_error(qp, Some(EventType::QpFatal));
            }
        }
    }

    /// Take the next receive WR of an SRQ, raising SRQ_LIMIT_REACHED once when the count
    /// drops below an armed limit (the limit is then disarmed).
    pub(crate) fn take_srq_wqe(&mut self, srq: SrqHandle) -> Option<RecvWr> {
        let s = self.store.get_mut(srq)?;
        let wr = s.queue.pop_front()?;
        if s.attr.srq_limit > 0 && (s.queue.len() as u32) < s.attr.srq_limit {
            s.attr.srq_limit = 0;
            self.events
                .raise(EventType::SrqLimitReached, EventElement::Srq(srq));
        }
        Some(wr)
    }

    /// A QP moved to RESET (not through ERR) in the middle of a SEND gives the receive it
    /// took from an SRQ back to the head of that SRQ, uncompleted. RESET completes nothing
    /// (IBTA), but the receive was posted to the SRQ, not the QP: with no completion the
    /// application still owns it as posted there (ibv_post_srq_recv(3): a buffer is reused
    /// only after its completion), so the next message takes it, in posting order. rxe
    /// loses it instead (`get_srq_wqe` consumes the SRQ entry at the FIRST, `rxe_qp_reset`
    /// drops `resp.wqe`), and mlx5's driver has no step giving one back (its RESET only
    /// cleans the QP's completions from the CQ). A matched tag's buffer is not an SRQ
    /// receive and stays consumed; an unexpected message's receive goes back uncounted, as
    /// software never saw it to report it in IBV_OPS_TM_SYNC.
    pub(crate) fn give_back_srq_receive(&mut self, qp: QpHandle) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let delivery = q.transport.tm_delivery;
        let taken = matches!(
            q.transport.in_progress,
            InProgress::Send { from_srq: true, .. }
        );
        if !taken || delivery.is_some_and(|d| d.flags.contains(WcFlags::TM_MATCH)) {
            return;
        }
        // An XRC target's later packets may have named other SRQs: the message's own.
        let srq = if q.init.qp_type == QpType::XrcRecv {
            q.transport.xrc_msg_srq
        } else {
            q.init.srq
        };
        let InProgress::Send { wqe, .. } = std::mem::take(&mut q.transport.in_progress) else {
            return;
        };
        q.transport.tm_delivery = None;
        let Some(s) = srq.and_then(|srq| self.store.get_mut(srq)) else {
            return;
        };
        s.queue.push_front(wqe);
        if delivery.is_some_and(|d| d.opcode == WcOpcode::TmRecv)
            && let Some(t) = s.tm.as_deref_mut()
        {
            t.uncount_unexpected();
        }
    }

    /// Move a QP to ERR (raising `event` if given) and flush its queues. Used by the
    /// transport on fatal errors and by fault injection.
    pub(crate) fn qp_to_error(&mut self, qp: QpHandle, event: Option<EventType>) {
        // Messages already received and completed are acknowledged before the QP stops.
        self.flush_deferred_ack(qp);
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let was = q.attr.qp_state;
        q.attr.qp_state = QpState::Err;
        q.attr.cur_qp_state = QpState::Err;
        if let Some(ev) = event {
            self.events.raise(ev, EventElement::Qp(qp));
        }
        if was != QpState::Err {
            self.flush_qp(qp);
        }
    }

    /// UC/UD send error: the QP enters SQE and its send queue is flushed; receives go on.
    pub(crate) fn qp_to_sqe(&mut self, qp: QpHandle) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        q.attr.qp_state = QpState::Sqe;
        q.attr.cur_qp_state = QpState::Sqe;
        self.flush_send_queue(qp);
    }

    /// Complete every send WQE of the QP with IBV_WC_WR_FLUSH_ERR: a QP in SQE flushes its
    /// send queue, those posted there later too (IBTA: the send queue stays in error until
    /// the QP is moved back to RTS), while its receives go on.
    pub(crate) fn flush_send_queue(&mut self, qp: QpHandle) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let qpn = q.qpn.value();
        let cq = q.init.send_cq;
        let rest: Vec<SendWqe> = q.sq.drain(..).collect();
        q.transport.send_index = 0;
        self.flush_sends(qpn, cq, rest);
    }

    /// Complete send WQEs with IBV_WC_WR_FLUSH_ERR, in order.
    fn flush_sends(&mut self, qpn: u32, cq: CqHandle, wqes: Vec<SendWqe>) {
        for wqe in wqes {
            let wc = WorkCompletion::error(
                wqe.wr.wr_id,
                qpn,
                WcStatus::WrFlushErr,
                WcOpcode::for_send(wqe.wr.opcode),
                VendorErr::Flushed as u32,
            );
            if let Some((cq, wc)) = super::tm_rndv::error_target(&wqe, cq, wc) {
                let _ = self.push_completion(cq, wc, false);
            }
        }
    }

    /// A QP entering ERR: complete every outstanding WR with IBV_WC_WR_FLUSH_ERR, send queue
    /// first, in posting order. A QP taking its receives from SRQs (attached to one, or an
    /// XRC target served by XRC SRQs) raises LAST_WQE_REACHED (once, on entering ERR)
    /// instead of flushing the shared queues.
    pub(crate) fn flush_qp(&mut self, qp: QpHandle) {
        if self.flush_queues(qp) {
            self.events
                .raise(EventType::QpLastWqeReached, EventElement::Qp(qp));
        }
    }

    /// Flush what is queued on a QP already in ERR (a WR posted there): no second
    /// LAST_WQE_REACHED. Returns whether the QP takes its receives from SRQs.
    pub(crate) fn flush_queues(&mut self, qp: QpHandle) -> bool {
        let Some(q) = self.store.get_mut(qp) else {
            return false;
        };
        let qpn = q.qpn.value();
        let send_cq = q.init.send_cq;
        let recv_cq = q.init.recv_cq;
        let shared = q.init.srq.is_some() || q.init.qp_type == QpType::XrcRecv;
        // A message in progress holds a receive: one of the RQ goes back to be flushed with
        // the others; one taken from an SRQ (or a rendezvous request's matched tag) is
        // flushed on the CQ it would have completed on, as what it was received as.
        if !matches!(q.transport.in_progress, InProgress::None) {
            // An XRC target's later packets may have named other SRQs: the message's own.
            q.transport.xrc_srq = q.transport.xrc_msg_srq;
        }
        let mut taken = None;
        match std::mem::take(&mut q.transport.in_progress) {
            InProgress::Send {
                wqe,
                from_srq: false,
                ..
            } => q.rq.push_front(wqe),
            InProgress::Send { wqe, .. } => {
                let opcode = q.transport.tm_delivery.map_or(WcOpcode::Recv, |d| d.opcode);
                taken = Some((wqe.wr_id, opcode));
            }
            InProgress::Rndv { tag, .. } => taken = Some((tag.recv_wr_id, WcOpcode::TmRecv)),
            InProgress::None | InProgress::Write { .. } => {}
        }
        let taken_cq = taken.and_then(|_| super::responder::recv_cq(self, qp));
        let Some(q) = self.store.get_mut(qp) else {
            return false;
        };
        let sq: Vec<SendWqe> = q.sq.drain(..).collect();
        let rq: Vec<RecvWr> = q.rq.drain(..).collect();
        q.transport.on_flush();
        self.flush_sends(qpn, send_cq, sq);
        let flushed = VendorErr::Flushed as u32;
        for wr in rq {
            let wc =
                WorkCompletion::error(wr.wr_id, qpn, WcStatus::WrFlushErr, WcOpcode::Recv, flushed);
            self.push_recv_completion(qp, recv_cq, wc, false);
        }
        if let (Some((wr_id, opcode)), Some(cq)) = (taken, taken_cq) {
            let wc = WorkCompletion::error(wr_id, qpn, WcStatus::WrFlushErr, opcode, flushed);
            self.push_recv_completion(qp, cq, wc, false);
        }
        shared
    }

    /// Raise SQ_DRAINED if the QP is in SQD, asked for the notification, and has nothing in
    /// flight.
    pub(crate) fn check_sq_drained(&mut self, qp: QpHandle) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        if q.attr.qp_state == QpState::Sqd && q.sqd_notify_pending && q.sq_drained() {
            q.sqd_notify_pending = false;
            self.events
                .raise(EventType::SqDrained, EventElement::Qp(qp));
        }
    }
}
