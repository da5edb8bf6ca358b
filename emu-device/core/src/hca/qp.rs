//! The QP and SRQ verbs: creation, the state machine, posting, destruction.

use smallvec::SmallVec;
use softroce_wire::{Gid, Qpn};

use super::super::device::MAX_XRCDS;
use super::super::error::{PostError, VerbsError, VerbsResult};
use super::super::events::EventElement;
use super::super::handles::{CqHandle, PdHandle, QpHandle, SrqHandle, XrcdHandle};
use super::super::memory;
use super::super::objects::{
    Qp, QpAttr, QpCap, QpInitAttr, SendWqe, Srq, SrqAttr, SrqAttrMask, XrcSrq,
};
use super::super::qp_state::{TransitionError, check_transition};
use super::super::transport;
use super::super::types::{EventType, QpAttrMask as M, QpState, QpType, SendFlags, WrOpcode};
use super::super::wr::{RecvWr, SendWr};
use super::Hca;

impl Hca {
    // ---- SRQ ----------------------------------------------------------------------------

    /// `ibv_create_srq`. The limit is not armed at creation (ibv_create_srq(3)).
    pub fn create_srq(
        &mut self,
        pd: PdHandle,
        attr: SrqAttr,
        context: u64,
    ) -> VerbsResult<(SrqHandle, SrqAttr)> {
        const VERB: &str = "create_srq";
        self.store.lookup(VERB, pd)?;
        if attr.max_wr == 0 || attr.max_wr > self.device.attr().max_srq_wr {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "max_wr {} outside 1..={}",
                    attr.max_wr,
                    self.device.attr().max_srq_wr
                ),
            ));
        }
        // 0 SGEs is taken as 1, as rxe's rxe_srq_chk_init rounds it up.
        let attr = SrqAttr {
            max_sge: attr.max_sge.max(1),
            ..attr
        };
        if attr.max_sge > self.device.attr().max_srq_sge {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "max_sge {} beyond the device's {}",
                    attr.max_sge,
                    self.device.attr().max_srq_sge
                ),
            ));
        }
        if self.store.count::<SrqHandle>() >= self.device.attr().max_srq as usize {
            return Err(VerbsError::no_resources(VERB, "max_srq reached"));
        }
        let real = SrqAttr {
            srq_limit: 0,
            ..attr
        };
        let handle = self
            .store
            .insert_srq(Srq {
                pd,
                srqn: 0,
                xrc: None,
                tm: None,
                attr: real,
                queue: std::collections::VecDeque::new(),
                users: 0,
                async_unacked: 0,
                context,
            })
            .ok_or_else(|| VerbsError::no_resources(VERB, "no free SRQ number"))?;
        self.store.add_pd_users(VERB, pd, 1)?;
        Ok((handle, real))
    }

    // ---- XRC ----------------------------------------------------------------------------

    /// `ibv_open_xrcd` (a new domain; sharing one through a file is the caller's): ENOMEM
    /// once [`MAX_XRCDS`] are open, as every other object of the device is bounded.
    pub fn open_xrcd(&mut self) -> VerbsResult<XrcdHandle> {
        if self.store.count::<XrcdHandle>() >= MAX_XRCDS {
            return Err(VerbsError::no_resources(
                "open_xrcd",
                format!("{MAX_XRCDS} XRC domains are open already"),
            ));
        }
        Ok(self.store.insert_xrcd())
    }

    /// `ibv_close_xrcd`: EBUSY while XRC SRQs or XRC target QPs use the domain.
    pub fn close_xrcd(&mut self, xrcd: XrcdHandle) -> VerbsResult<()> {
        const VERB: &str = "close_xrcd";
        let x = self.store.lookup(VERB, xrcd)?;
        if x.users > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} XRC SRQs and target QPs still use the domain", x.users),
            ));
        }
        self.store.remove_xrcd(VERB, xrcd).map(|_| ())
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ of `pd` in `xrcd` whose receives
    /// complete on `cq`, whichever target QP of the domain they arrive through.
    pub fn create_xrc_srq(
        &mut self,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: SrqAttr,
        context: u64,
    ) -> VerbsResult<(SrqHandle, SrqAttr)> {
        const VERB: &str = "create_srq_ex";
        self.store.lookup(VERB, xrcd)?;
        self.cqs.lookup(VERB, cq)?;
        let (srq, real) = self.create_srq(pd, attr, context)?;
        if let Some(s) = self.store.get_mut(srq) {
            s.xrc = Some(XrcSrq { xrcd, cq });
        }
        self.cqs.add_users(cq, 1);
        self.store.add_xrcd_users(VERB, xrcd, 1)?;
        Ok((srq, real))
    }

    /// `ibv_get_srq_num`: the number XRC requests name the SRQ by.
    pub fn srq_num(&self, srq: SrqHandle) -> VerbsResult<u32> {
        Ok(self.store.lookup("get_srq_num", srq)?.srqn)
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP in `xrcd`, without PD,
    /// CQs or queues; its requests are served by the XRC SRQ each one names.
    pub fn create_xrc_recv_qp(
        &mut self,
        xrcd: XrcdHandle,
        qp_context: u64,
    ) -> VerbsResult<(QpHandle, Qpn)> {
        const VERB: &str = "create_qp";
        self.store.lookup(VERB, xrcd)?;
        if self.store.count::<QpHandle>() >= self.device.attr().max_qp as usize {
            return Err(VerbsError::no_resources(VERB, "max_qp reached"));
        }
        let qpn = self
            .store
            .alloc_qpn()
            .ok_or_else(|| VerbsError::no_resources(VERB, "no free QP number"))?;
        let init = QpInitAttr {
            send_cq: CqHandle::NONE,
            recv_cq: CqHandle::NONE,
            srq: None,
            cap: QpCap::default(),
            qp_type: QpType::XrcRecv,
            sq_sig_all: false,
            qp_context,
        };
        let handle = self.store.insert_qp(Qp {
            qpn,
            pd: PdHandle::NONE,
            xrcd: Some(xrcd),
            opens: 1,
            init,
            attr: QpAttr::default(),
            peer: QpAttr::default().ah_attr.destination(),
            sq: std::collections::VecDeque::new(),
            rq: std::collections::VecDeque::new(),
            async_unacked: 0,
            sqd_notify_pending: false,
            transport: Default::default(),
        });
        self.store.add_xrcd_users(VERB, xrcd, 1)?;
        Ok((handle, qpn))
    }

    /// `ibv_open_qp`: another handle to the XRC target QP `qpn` of `xrcd`; the QP goes
    /// when its last handle is destroyed.
    pub fn open_xrc_recv_qp(&mut self, xrcd: XrcdHandle, qpn: u32) -> VerbsResult<QpHandle> {
        const VERB: &str = "open_qp";
        self.store.lookup(VERB, xrcd)?;
        let found = Qpn::new(qpn).and_then(|n| self.store.qp_by_number(n));
        let Some(qp) = found else {
            return Err(VerbsError::invalid(VERB, format!("no QP {qpn:#x}")));
        };
        let q = self.store.lookup_mut(VERB, qp)?;
        if q.init.qp_type != QpType::XrcRecv || q.xrcd != Some(xrcd) {
            return Err(VerbsError::invalid(
                VERB,
                format!("QP {qpn:#x} is not an XRC target QP of this XRC domain"),
            ));
        }
        q.opens += 1;
        Ok(qp)
    }

    /// The XRC domain of an XRC target QP.
    pub fn qp_xrcd(&self, qp: QpHandle) -> VerbsResult<Option<XrcdHandle>> {
        Ok(self.store.lookup("query_qp", qp)?.xrcd)
    }

    /// `ibv_modify_srq`: resize (not below the WRs held) and/or arm the limit (which must
    /// not exceed max_wr).
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        attr: SrqAttr,
        mask: SrqAttrMask,
    ) -> VerbsResult<()> {
        const VERB: &str = "modify_srq";
        let max_srq_wr = self.device.attr().max_srq_wr;
        let s = self.store.lookup_mut(VERB, srq)?;
        let new_max = if mask.max_wr {
            attr.max_wr
        } else {
            s.attr.max_wr
        };
        if mask.max_wr
            && (new_max == 0 || new_max > max_srq_wr || (new_max as usize) < s.queue.len())
        {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "max_wr {new_max} must be within 1..={max_srq_wr} and hold the {} posted WRs",
                    s.queue.len()
                ),
            ));
        }
        // An armed limit must stay within the queue, whether the limit or the size changes
        // (rxe refuses shrinking max_wr below an armed limit).
        let limit = if mask.limit {
            attr.srq_limit
        } else {
            s.attr.srq_limit
        };
        if limit > new_max {
            return Err(VerbsError::invalid(
                VERB,
                format!("srq_limit {limit} exceeds max_wr {new_max}"),
            ));
        }
        s.attr.max_wr = new_max;
        if mask.limit {
            s.attr.srq_limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: SrqHandle) -> VerbsResult<SrqAttr> {
        Ok(self.store.lookup("query_srq", srq)?.attr)
    }

    /// The context value given to `create_srq`.
    pub fn srq_context(&self, srq: SrqHandle) -> VerbsResult<u64> {
        Ok(self.store.lookup("srq_context", srq)?.context)
    }

    /// Receive WRs waiting in an SRQ.
    pub fn srq_len(&self, srq: SrqHandle) -> VerbsResult<usize> {
        Ok(self.store.lookup("srq_len", srq)?.queue.len())
    }

    /// `ibv_destroy_srq`: EBUSY while QPs use it or its async events are unacknowledged.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> VerbsResult<()> {
        const VERB: &str = "destroy_srq";
        let s = self.store.lookup_mut(VERB, srq)?;
        if s.users > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} QPs still use the SRQ", s.users),
            ));
        }
        if s.async_unacked > 0 {
            return Err(VerbsError::unacknowledged(
                VERB,
                format!(
                    "{} async events about the SRQ are not acknowledged",
                    s.async_unacked
                ),
            ));
        }
        let (pd, xrc, tm_cq) = (s.pd, s.xrc, s.tm.as_ref().map(|t| t.cq));
        self.store.remove_srq(VERB, srq)?;
        self.events.purge(EventElement::Srq(srq));
        if let Some(cq) = tm_cq {
            self.cqs.add_users(cq, -1);
        }
        if let Some(x) = xrc {
            self.cqs.add_users(x.cq, -1);
            self.store.add_xrcd_users(VERB, x.xrcd, -1)?;
        }
        self.store.add_pd_users(VERB, pd, -1)
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        let mut owned: SmallVec<[RecvWr; 4]> = wrs.iter().cloned().collect();
        self.post_srq_recv_owned(srq, &mut owned)
    }

    /// [`Hca::post_srq_recv`] of requests the caller gives up: the scatter/gather list of
    /// each one queued is moved into the queue (left empty in `wrs`), not copied.
    pub fn post_srq_recv_owned(
        &mut self,
        srq: SrqHandle,
        wrs: &mut [RecvWr],
    ) -> Result<(), PostError> {
        const VERB: &str = "post_srq_recv";
        for (index, wr) in wrs.iter_mut().enumerate() {
            let fail = |error| PostError { index, error };
            let s = self.store.lookup(VERB, srq).map_err(fail)?;
            if s.queue.len() >= s.attr.max_wr as usize {
                return Err(fail(VerbsError::no_resources(
                    VERB,
                    format!("SRQ full ({} WRs)", s.attr.max_wr),
                )));
            }
            if wr.sg_list.len() > s.attr.max_sge as usize {
                return Err(fail(VerbsError::invalid(
                    VERB,
                    format!(
                        "num_sge {} exceeds max_sge {}",
                        wr.sg_list.len(),
                        s.attr.max_sge
                    ),
                )));
            }
            // The lkeys are checked when a message lands, as for QP receives (post_recv).
            if let Some(s) = self.store.get_mut(srq) {
                s.queue.push_back(take_recv_wr(wr));
            }
        }
        Ok(())
    }

    // ---- QP -----------------------------------------------------------------------------

    /// `ibv_create_qp`. Returns the handle, the QP number and the capacities granted.
    pub fn create_qp(
        &mut self,
        pd: PdHandle,
        init: QpInitAttr,
    ) -> VerbsResult<(QpHandle, Qpn, QpCap)> {
        const VERB: &str = "create_qp";
        if init.qp_type == QpType::XrcRecv {
            return Err(VerbsError::invalid(
                VERB,
                "an XRC target QP has no PD: create it in its XRC domain (create_xrc_recv_qp)",
            ));
        }
        let mut init = init;
        if init.qp_type == QpType::XrcSend {
            // ibv_create_qp_ex(3): the initiator has no receive side; its one CQ is the
            // send CQ.
            if init.srq.is_some() {
                return Err(VerbsError::invalid(
                    VERB,
                    "an XRC initiator QP has no receive queue: no SRQ",
                ));
            }
            init.recv_cq = init.send_cq;
            init.cap.max_recv_wr = 0;
            init.cap.max_recv_sge = 0;
        }
        self.store.lookup(VERB, pd)?;
        self.cqs.lookup(VERB, init.send_cq)?;
        self.cqs.lookup(VERB, init.recv_cq)?;
        if let Some(srq) = init.srq {
            let s = self.store.lookup(VERB, srq)?;
            if s.pd != pd {
                return Err(VerbsError::invalid(VERB, "the SRQ belongs to another PD"));
            }
            // ibv_create_qp(3) NOTES: only RC and UD QPs can be associated with an SRQ.
            if !matches!(init.qp_type, QpType::Rc | QpType::Ud) {
                return Err(VerbsError::invalid(
                    VERB,
                    format!("a {} QP cannot use an SRQ (only RC and UD)", init.qp_type),
                ));
            }
        }
        let a = self.device.attr();
        let cap = init.cap;
        let limits = [
            ("max_send_wr", cap.max_send_wr, a.max_qp_wr),
            ("max_send_sge", cap.max_send_sge, a.max_sge),
            ("max_inline_data", cap.max_inline_data, a.max_inline_data),
        ];
        for (name, value, max) in limits {
            if value > max {
                return Err(VerbsError::invalid(
                    VERB,
                    format!("{name} {value} exceeds the device limit {max}"),
                ));
            }
        }
        if init.srq.is_none() {
            for (name, value, max) in [
                ("max_recv_wr", cap.max_recv_wr, a.max_qp_wr),
                ("max_recv_sge", cap.max_recv_sge, a.max_sge),
            ] {
                if value > max {
                    return Err(VerbsError::invalid(
                        VERB,
                        format!("{name} {value} exceeds the device limit {max}"),
                    ));
                }
            }
        }
        if self.store.count::<QpHandle>() >= self.device.attr().max_qp as usize {
            return Err(VerbsError::no_resources(VERB, "max_qp reached"));
        }
        let qpn = self
            .store
            .alloc_qpn()
            .ok_or_else(|| VerbsError::no_resources(VERB, "no free QP number"))?;
        let granted = QpCap {
            max_recv_wr: if init.srq.is_some() {
                0
            } else {
                cap.max_recv_wr
            },
            max_recv_sge: if init.srq.is_some() {
                0
            } else {
                cap.max_recv_sge
            },
            // ibv_create_qp(3): the granted caps may exceed the request. As rxe does, a send
            // WQE's room for its gather list also holds inline data (16 bytes per SGE), so
            // programs that send a small inline message without asking (rdma_xclient) work.
            max_inline_data: cap
                .max_inline_data
                .max(cap.max_send_sge.saturating_mul(16))
                .min(a.max_inline_data.max(cap.max_inline_data)),
            ..cap
        };
        init.cap = granted;
        let attr = QpAttr {
            cap: granted,
            ..QpAttr::default()
        };
        let handle = self.store.insert_qp(Qp {
            qpn,
            pd,
            xrcd: None,
            opens: 1,
            init,
            peer: attr.ah_attr.destination(),
            attr,
            sq: std::collections::VecDeque::new(),
            rq: std::collections::VecDeque::new(),
            async_unacked: 0,
            sqd_notify_pending: false,
            transport: Default::default(),
        });
        self.store.add_pd_users(VERB, pd, 1)?;
        for cq in [init.send_cq, init.recv_cq] {
            self.cqs.add_users(cq, 1);
        }
        if let Some(srq) = init.srq
            && let Some(s) = self.store.get_mut(srq)
        {
            s.users += 1;
        }
        Ok((handle, qpn, granted))
    }

    /// The QP with this number, if any.
    pub fn qp_by_number(&self, qpn: Qpn) -> Option<QpHandle> {
        self.store.qp_by_number(qpn)
    }

    /// `ibv_query_qp`: the current attributes and the creation attributes.
    pub fn query_qp(&self, qp: QpHandle) -> VerbsResult<(QpAttr, QpInitAttr)> {
        let q = self.store.lookup("query_qp", qp)?;
        let mut attr = q.attr;
        attr.cur_qp_state = attr.qp_state;
        attr.sq_draining = q.attr.qp_state == QpState::Sqd && !q.sq_drained();
        // The QP as it is: the PSN it sends next and the one it expects next once it has
        // them (rxe's req.psn and resp.psn; a HCA reads them from the QP context), not
        // what the modify that started them set.
        let state = attr.qp_state;
        if state != QpState::Reset && state != QpState::Init {
            attr.rq_psn = q.transport.rq_psn;
        }
        if matches!(
            state,
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err
        ) {
            attr.sq_psn = q.transport.sq_psn;
        }
        Ok((attr, q.init))
    }

    /// The QP's number.
    pub fn qp_num(&self, qp: QpHandle) -> VerbsResult<Qpn> {
        Ok(self.store.lookup("qp_num", qp)?.qpn)
    }

    /// The QP's state.
    pub fn qp_state(&self, qp: QpHandle) -> VerbsResult<QpState> {
        Ok(self.store.lookup("qp_state", qp)?.attr.qp_state)
    }

    /// `ibv_modify_qp`: checked against the state table, then attribute values.
    pub fn modify_qp(&mut self, qp: QpHandle, attr: &QpAttr, mask: M) -> VerbsResult<()> {
        const VERB: &str = "modify_qp";
        let q = self.store.lookup(VERB, qp)?;
        let qpn = q.qpn.value();
        let cur = q.attr.qp_state;
        let next = if mask.contains(M::STATE) {
            attr.qp_state
        } else {
            cur
        };
        // Bits past IBV_QP_DEST_QPN, IBV_QP_RATE_LIMIT among them, are refused before
        // anything else, as libibverbs' ibv_cmd_modify_qp and the kernel's modify command
        // refuse them: a rate limit goes through ibv_modify_qp_rate_limit.
        let past_dest_qpn = mask.0 & !((M::DEST_QPN.0 << 1) - 1);
        if past_dest_qpn != 0 {
            return Err(VerbsError::Unsupported {
                verb: VERB,
                what: format!("attribute mask bits {past_dest_qpn:#x} (past IBV_QP_DEST_QPN)"),
            });
        }
        if mask.contains(M::CUR_STATE) && attr.cur_qp_state != cur {
            return Err(VerbsError::Transition {
                qpn,
                source: TransitionError::CurrentStateMismatch {
                    claimed: attr.cur_qp_state,
                    actual: cur,
                },
            });
        }
        check_transition(q.init.qp_type, cur, next, mask)
            .map_err(|source| VerbsError::Transition { qpn, source })?;
        self.check_qp_values(qpn, attr, mask)?;
        if next != cur {
            // Leaving the current state: what was received is acknowledged first.
            self.engine().flush_deferred_ack(qp);
            if next == QpState::Reset {
                self.engine().give_back_srq_receive(qp);
            }
        }
        let q = self.store.lookup_mut(VERB, qp)?;
        let a = &mut q.attr;
        if mask.contains(M::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if mask.contains(M::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if mask.contains(M::PORT) {
            a.port_num = attr.port_num;
        }
        if mask.contains(M::QKEY) {
            a.qkey = attr.qkey;
        }
        if mask.contains(M::AV) {
            a.ah_attr = attr.ah_attr;
            q.peer = a.ah_attr.destination();
        }
        if mask.contains(M::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if mask.contains(M::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if mask.contains(M::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
        }
        if mask.contains(M::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
        }
        if mask.contains(M::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if mask.contains(M::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if mask.contains(M::PATH_MIG_STATE) {
            a.path_mig_state = attr.path_mig_state;
        }
        if mask.contains(M::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        a.qp_state = next;
        a.cur_qp_state = next;
        let entering = cur != next;
        match next {
            QpState::Reset if entering => {
                // IBTA: RESET discards all work requests without completions (a receive
                // taken from an SRQ went back to it above). The QP's completions not yet
                // polled go too (as mlx4 and mlx5 clean their CQs on this transition): a
                // QP brought back from ERR does not first report the flushes of its
                // previous life.
                q.sq.clear();
                q.rq.clear();
                q.sqd_notify_pending = false;
                let share = q.transport.inflight_share.take();
                q.transport = Default::default();
                let (qpn, send_cq, recv_cq) = (q.qpn.value(), q.init.send_cq, q.init.recv_cq);
                self.cqs.remove_qp_entries(send_cq, qpn);
                self.cqs.remove_qp_entries(recv_cq, qpn);
                let cap = self.device.config().max_outstanding_psns;
                self.outbox.forget(&mut self.store, cap, share);
            }
            QpState::Rtr if entering => {
                let rq_psn = q.attr.rq_psn;
                q.transport.on_rtr(rq_psn);
            }
            QpState::Rts if entering && cur == QpState::Rtr => {
                let sq_psn = q.attr.sq_psn;
                q.transport.on_rts(sq_psn);
                q.transport.restart_retries(q.attr.retry_cnt);
                q.transport.rnr_left = q.attr.rnr_retry;
            }
            QpState::Sqd if entering => {
                q.sqd_notify_pending =
                    mask.contains(M::EN_SQD_ASYNC_NOTIFY) && attr.en_sqd_async_notify;
                self.engine().check_sq_drained(qp);
            }
            QpState::Err if entering => self.engine().flush_qp(qp),
            _ => {}
        }
        self.engine().settle(qp);
        Ok(())
    }

    fn check_qp_values(&self, qpn: u32, attr: &QpAttr, mask: M) -> VerbsResult<()> {
        let bad = |reason: String| {
            Err(VerbsError::invalid(
                "modify_qp",
                format!("QP {qpn:#x}: {reason}"),
            ))
        };
        if mask.contains(M::PKEY_INDEX) && attr.pkey_index != 0 {
            return bad(format!(
                "pkey_index {} beyond the P_Key table of 1",
                attr.pkey_index
            ));
        }
        if mask.contains(M::PORT) && attr.port_num != 1 {
            return bad(format!("port_num {} does not exist", attr.port_num));
        }
        // ibv_modify_qp(3): the mask "of enabled remote access operations". Region-only bits
        // (LOCAL_WRITE, ON_DEMAND …) enable nothing and are ignored, as rxe and mlx5 do
        // (rdma-core's ODP tests pass the region's flags); unknown bits are refused.
        if mask.contains(M::ACCESS_FLAGS) && attr.qp_access_flags.unknown_bits() != 0 {
            return bad(format!(
                "qp_access_flags has unknown bits {:#x}",
                attr.qp_access_flags.unknown_bits()
            ));
        }
        if mask.contains(M::AV) {
            self.device.check_ah_attr("modify_qp", &attr.ah_attr)?;
        }
        if mask.contains(M::TIMEOUT) && attr.timeout > 31 {
            return bad(format!("timeout {} exceeds 31", attr.timeout));
        }
        if mask.contains(M::RETRY_CNT) && attr.retry_cnt > 7 {
            return bad(format!("retry_cnt {} exceeds 7", attr.retry_cnt));
        }
        if mask.contains(M::RNR_RETRY) && attr.rnr_retry > 7 {
            return bad(format!("rnr_retry {} exceeds 7", attr.rnr_retry));
        }
        if mask.contains(M::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return bad(format!("min_rnr_timer {} exceeds 31", attr.min_rnr_timer));
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC)
            && u32::from(attr.max_rd_atomic) > self.device.attr().max_qp_init_rd_atom
        {
            return bad(format!(
                "max_rd_atomic {} exceeds max_qp_init_rd_atom {}",
                attr.max_rd_atomic,
                self.device.attr().max_qp_init_rd_atom
            ));
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC)
            && u32::from(attr.max_dest_rd_atomic) > self.device.attr().max_qp_rd_atom
        {
            return bad(format!(
                "max_dest_rd_atomic {} exceeds max_qp_rd_atom {}",
                attr.max_dest_rd_atomic,
                self.device.attr().max_qp_rd_atom
            ));
        }
        if mask.contains(M::DEST_QPN) && Qpn::new(attr.dest_qp_num).is_none() {
            return bad(format!(
                "dest_qp_num {:#x} exceeds 24 bits",
                attr.dest_qp_num
            ));
        }
        if mask.contains(M::PATH_MIG_STATE) && attr.path_mig_state > 2 {
            return bad(format!(
                "path_mig_state {} is not MIGRATED/REARM/ARMED",
                attr.path_mig_state
            ));
        }
        if mask.contains(M::ALT_PATH) {
            // EINVAL as the kernel's ib_modify_qp: RoCE has no alternate paths.
            return bad("alternate paths (IBV_QP_ALT_PATH) do not exist on RoCE".into());
        }
        if mask.intersects(M::CAP | M::RATE_LIMIT) {
            return Err(VerbsError::Unsupported {
                verb: "modify_qp",
                what: "resizing a QP or rate limits".into(),
            });
        }
        Ok(())
    }

    // ---- multicast -----------------------------------------------------------------------

    /// `ibv_attach_mcast`: attach a UD QP to the group `mgid` (EINVAL for another QP type
    /// or a GID that is no multicast address, as the kernel's `ib_attach_mcast`; ENOMEM
    /// beyond the device's limits). Attaching again is a no-op. `lid` means nothing on
    /// RoCE (the kernel ignores it there).
    pub fn attach_mcast(&mut self, qp: QpHandle, mgid: Gid, lid: u16) -> VerbsResult<()> {
        const VERB: &str = "attach_mcast";
        let _ = lid;
        let q = self.store.lookup(VERB, qp)?;
        if q.init.qp_type != QpType::Ud {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "only UD QPs join multicast groups (QP {:#x} is {:?})",
                    q.qpn.value(),
                    q.init.qp_type
                ),
            ));
        }
        if !mgid.is_multicast() {
            return Err(VerbsError::invalid(
                VERB,
                format!("{mgid} is not a multicast GID"),
            ));
        }
        self.multicast.attach(self.device.attr(), qp, mgid)
    }

    /// `ibv_detach_mcast`: EINVAL when the QP is not attached to `mgid`.
    pub fn detach_mcast(&mut self, qp: QpHandle, mgid: Gid, lid: u16) -> VerbsResult<()> {
        let _ = lid;
        self.store.lookup("detach_mcast", qp)?;
        self.multicast.detach(qp, mgid)
    }

    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: the UD QP does not receive the multicast
    /// packets it sent itself (copies of them still reach the device's other QPs).
    pub fn block_multicast_loopback(&mut self, qp: QpHandle) -> VerbsResult<()> {
        const VERB: &str = "create_qp";
        let q = self.store.lookup(VERB, qp)?;
        if q.init.qp_type != QpType::Ud {
            return Err(VerbsError::invalid(
                VERB,
                "blocking multicast loopback applies to UD QPs only",
            ));
        }
        self.multicast.set_block_own(qp, true);
        Ok(())
    }

    /// The multicast groups some QP of this device is attached to: the driver receives
    /// their traffic while they are listed.
    pub fn multicast_groups(&self) -> Vec<Gid> {
        self.multicast.groups().collect()
    }

    /// `ibv_destroy_qp`: EBUSY while async events about it are unacknowledged, and while it
    /// is attached to a multicast group (the kernel's `uverbs_free_qp`). Outstanding work
    /// requests are discarded without completions.
    pub fn destroy_qp(&mut self, qp: QpHandle) -> VerbsResult<()> {
        const VERB: &str = "destroy_qp";
        let q = self.store.lookup_mut(VERB, qp)?;
        if q.opens > 1 {
            // Another handle (ibv_open_qp) still uses the XRC target QP.
            q.opens -= 1;
            return Ok(());
        }
        let q = self.store.lookup(VERB, qp)?;
        let groups = self.multicast.groups_of(qp);
        if groups > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("the QP is attached to {groups} multicast groups: detach it first"),
            ));
        }
        if q.async_unacked > 0 {
            return Err(VerbsError::unacknowledged(
                VERB,
                format!(
                    "{} async events about the QP are not acknowledged",
                    q.async_unacked
                ),
            ));
        }
        // The peer is owed the ACK of what this QP received (hardware would have sent it
        // already); it leaves with the next transmit.
        self.engine().flush_deferred_ack(qp);
        let share = self
            .store
            .lookup_mut(VERB, qp)?
            .transport
            .inflight_share
            .take();
        self.outbox.forget(
            &mut self.store,
            self.device.config().max_outstanding_psns,
            share,
        );
        let q = self.store.remove_qp(VERB, qp)?;
        self.multicast.set_block_own(qp, false);
        self.events.purge(EventElement::Qp(qp));
        if let Some(xrcd) = q.xrcd {
            // An XRC target holds no PD, CQ or SRQ.
            return self.store.add_xrcd_users(VERB, xrcd, -1);
        }
        for cq in [q.init.send_cq, q.init.recv_cq] {
            // Its receive completions and flushes not yet polled go with it, as mlx4 and
            // mlx5 clean their CQs when a QP is destroyed: a program (libfabric's rxm) that
            // drains a shared CQ after closing an endpoint must not be handed receives (the
            // flushes of its disconnect) whose wr_id names memory it freed with the
            // endpoint. Its finished sends stay (see `remove_destroyed_qp_entries`): rxm
            // closes a connection from its connection manager thread as soon as the peer
            // disconnects, and a send whose ACK came just before the DREQ, still unpolled,
            // was reported to the application as flushed.
            self.cqs.remove_destroyed_qp_entries(cq, q.qpn.value());
            self.cqs.add_users(cq, -1);
        }
        if let Some(srq) = q.init.srq
            && let Some(s) = self.store.get_mut(srq)
        {
            s.users = s.users.saturating_sub(1);
        }
        self.store.add_pd_users(VERB, q.pd, -1)
    }

    /// `ibv_post_send`. Work requests are checked in order; the first failure stops the
    /// post and is reported with its index (`bad_wr`). The ones before it are posted and
    /// execute (ibv_post_send(3): `bad_wr` is the first WR that was not posted).
    ///
    /// # Safety
    /// For work requests with `IBV_SEND_INLINE`, the scatter/gather addresses are read
    /// during this call (not checked against memory regions, as with hardware): each
    /// `addr..addr+length` must be readable memory of this process.
    pub unsafe fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr]) -> Result<(), PostError> {
        let mut owned: SmallVec<[SendWr; 4]> = wrs.iter().cloned().collect();
        // SAFETY: forwarded.
        unsafe { self.post_send_wrs(qp, &mut owned, false) }
    }

    /// [`Hca::post_send`] of requests the caller gives up (the drop-in's, converted for
    /// this call): the scatter/gather list of each one queued is moved into its WQE (left
    /// empty in `wrs`), not copied, saving an allocation per post.
    ///
    /// # Safety
    /// As [`Hca::post_send`].
    pub unsafe fn post_send_owned(
        &mut self,
        qp: QpHandle,
        wrs: &mut [SendWr],
    ) -> Result<(), PostError> {
        // SAFETY: forwarded.
        unsafe { self.post_send_wrs(qp, wrs, false) }
    }

    /// `ibv_wr_complete`: all of `wrs` or none. ibv_wr_post(3): "If a failure is detected
    /// [...] ibv_wr_complete() will return failure and the entire posting will be aborted"
    /// — unlike [`Hca::post_send`], the WRs before the failing one do not run either.
    ///
    /// # Safety
    /// As [`Hca::post_send`].
    pub unsafe fn post_send_all_or_nothing(
        &mut self,
        qp: QpHandle,
        wrs: &[SendWr],
    ) -> Result<(), PostError> {
        let mut owned: SmallVec<[SendWr; 4]> = wrs.iter().cloned().collect();
        // SAFETY: forwarded.
        unsafe { self.post_send_wrs(qp, &mut owned, true) }
    }

    /// # Safety
    /// As [`Hca::post_send`].
    unsafe fn post_send_wrs(
        &mut self,
        qp: QpHandle,
        wrs: &mut [SendWr],
        all_or_nothing: bool,
    ) -> Result<(), PostError> {
        // SAFETY: forwarded.
        let result = unsafe { self.queue_send_wrs(qp, wrs, all_or_nothing) };
        let posted = match &result {
            Ok(()) => wrs.len(),
            Err(_) if all_or_nothing => 0,
            Err(e) => e.index,
        };
        if posted > 0 {
            transport::on_post_send(&mut self.engine(), qp);
        }
        result
    }

    /// Queue `wrs` on the send queue until the first that fails its checks; with
    /// `all_or_nothing`, a failure takes the ones queued before it back off the queue
    /// (nothing has seen them: the transport runs after this returns).
    ///
    /// # Safety
    /// As [`Hca::post_send`].
    unsafe fn queue_send_wrs(
        &mut self,
        qp: QpHandle,
        wrs: &mut [SendWr],
        all_or_nothing: bool,
    ) -> Result<(), PostError> {
        const VERB: &str = "post_send";
        // A QP in ERR flushes what is posted, one in SQE its send queue.
        let mut flushing = None;
        for (index, wr) in wrs.iter_mut().enumerate() {
            let fail = |error| PostError { index, error };
            let built = self.store.lookup(VERB, qp).and_then(|q| {
                flushing =
                    Some(q.attr.qp_state).filter(|s| matches!(s, QpState::Err | QpState::Sqe));
                self.check_send_wr(q, wr)?;
                // SAFETY: the caller's guarantee for inline SGE ranges is passed on.
                unsafe { self.send_wqe(q, wr) }
            });
            let wqe = match built {
                Ok(wqe) => wqe,
                Err(e) => {
                    if all_or_nothing && let Ok(q) = self.store.lookup_mut(VERB, qp) {
                        // The `index` WRs before this one were queued by this call.
                        for _ in 0..index {
                            q.sq.pop_back();
                        }
                    }
                    return Err(fail(e));
                }
            };
            let q = self.store.lookup_mut(VERB, qp).map_err(fail)?;
            self.signaled_posts += u64::from(wqe.signaled);
            q.sq.push_back(wqe);
            if !all_or_nothing {
                self.flush_posted(qp, flushing);
            }
        }
        if all_or_nothing {
            self.flush_posted(qp, flushing);
        }
        Ok(())
    }

    /// Flush what was just posted on a QP in ERR (both queues) or SQE (its send queue).
    fn flush_posted(&mut self, qp: QpHandle, state: Option<QpState>) {
        match state {
            Some(QpState::Err) => {
                self.engine().flush_queues(qp);
            }
            Some(QpState::Sqe) => self.engine().flush_send_queue(qp),
            _ => {}
        }
    }

    fn check_send_wr(&self, q: &Qp, wr: &SendWr) -> VerbsResult<()> {
        const VERB: &str = "post_send";
        let state = q.attr.qp_state;
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(VerbsError::BadQpState {
                verb: VERB,
                qpn: q.qpn.value(),
                state,
            });
        }
        let qp_type = q.init.qp_type;
        if !wr.opcode.valid_for(qp_type) {
            return Err(VerbsError::invalid(
                VERB,
                format!("{} is not valid on a {qp_type} QP", wr.opcode),
            ));
        }
        if wr.opcode == WrOpcode::BindMw {
            let Some(b) = wr.bind.as_deref().copied() else {
                return Err(VerbsError::invalid(
                    VERB,
                    "IBV_WR_BIND_MW without its bind_mw",
                ));
            };
            self.store.lookup(VERB, b.mw)?;
            match b.mr {
                Some(mr) => {
                    self.store.lookup(VERB, mr)?;
                }
                None if b.length > 0 => {
                    return Err(VerbsError::invalid(
                        VERB,
                        "a window of non-zero length needs its region (bind_info.mr)",
                    ));
                }
                None => {}
            }
        }
        if q.sq.len() >= q.init.cap.max_send_wr as usize {
            return Err(VerbsError::no_resources(
                VERB,
                format!("send queue full ({} WRs)", q.init.cap.max_send_wr),
            ));
        }
        // Inline or not (rxe's and mlx5's providers check it first, whatever the flags).
        if wr.sg_list.len() > q.init.cap.max_send_sge as usize {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "num_sge {} exceeds max_send_sge {}",
                    wr.sg_list.len(),
                    q.init.cap.max_send_sge
                ),
            ));
        }
        let inline = wr.send_flags.contains(SendFlags::INLINE);
        let total = wr.total_len();
        // ATOMIC WRITE's 8 bytes travel in the WQE, as the other atomics' operands do
        // (ibv_wr_atomic_write copies them): they take no inline room.
        if inline && wr.opcode != WrOpcode::AtomicWrite {
            if total > u64::from(q.init.cap.max_inline_data) {
                return Err(VerbsError::invalid(
                    VERB,
                    format!(
                        "{total} inline bytes exceed max_inline_data {}",
                        q.init.cap.max_inline_data
                    ),
                ));
            }
            if matches!(
                wr.opcode,
                WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
            ) {
                return Err(VerbsError::invalid(
                    VERB,
                    format!("{} cannot be inline", wr.opcode),
                ));
            }
        }
        if total > u64::from(self.device.attr().max_msg_sz) {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "message of {total} bytes exceeds max_msg_sz {}",
                    self.device.attr().max_msg_sz
                ),
            ));
        }
        let is_atomic = matches!(
            wr.opcode,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        );
        if is_atomic && (wr.sg_list.len() != 1 || total != 8) {
            return Err(VerbsError::invalid(
                VERB,
                "an atomic needs exactly one 8-byte scatter/gather element for the result",
            ));
        }
        // rxe refuses the post (a responder would NAK it as an invalid request anyway).
        if is_atomic && wr.atomic.remote_addr % 8 != 0 {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "atomic remote_addr {:#x} is not 8-byte aligned",
                    wr.atomic.remote_addr
                ),
            ));
        }
        if wr.opcode == WrOpcode::AtomicWrite && total != 8 {
            return Err(VerbsError::invalid(
                VERB,
                format!("an ATOMIC WRITE carries exactly 8 bytes, not {total}"),
            ));
        }
        if qp_type == QpType::Ud {
            let Some(ud) = wr.ud else {
                return Err(VerbsError::invalid(
                    VERB,
                    "a UD send needs an address handle (wr.ud)",
                ));
            };
            let ah = self.store.lookup(VERB, ud.ah)?;
            if ah.pd != q.pd {
                return Err(VerbsError::invalid(
                    VERB,
                    "the address handle belongs to another PD",
                ));
            }
            if Qpn::new(ud.remote_qpn).is_none() {
                return Err(VerbsError::invalid(VERB, "remote_qpn exceeds 24 bits"));
            }
        }
        Ok(())
    }

    /// The send queue entry for a checked work request: inline data copied now; other
    /// scatter/gather lists are read (and their lkeys checked) when the data moves.
    ///
    /// # Safety
    /// As [`Hca::post_send`]: inline SGE ranges must be readable.
    unsafe fn send_wqe(&self, q: &Qp, wr: &mut SendWr) -> VerbsResult<SendWqe> {
        let inline = wr.send_flags.contains(SendFlags::INLINE);
        let total = wr.total_len();
        let signaled = q.init.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED);
        let inline_data = if inline {
            let mut data = crate::objects::InlineData::from_elem(0, total as usize);
            let mut off = 0;
            for sge in &wr.sg_list {
                let n = sge.length as usize;
                // SAFETY: the caller guarantees inline SGE ranges are readable.
                unsafe { memory::read_app(sge.addr, &mut data[off..off + n]) };
                off += n;
            }
            Some(data)
        } else {
            // The lkeys are checked when the data moves, as rxe and mlx5 do: a key that does
            // not match the address completes with IBV_WC_LOC_PROT_ERR (ibv_poll_cq(3)),
            // not a failed post.
            None
        };
        Ok(SendWqe {
            wr: SendWr {
                // An inline request's data was copied above: its list is not needed again.
                sg_list: if inline {
                    crate::wr::SgList::new()
                } else {
                    std::mem::take(&mut wr.sg_list)
                },
                bind: wr.bind.take(),
                ..*wr
            },
            inline: inline_data,
            signaled,
            first_psn: None,
            npkts: 0,
            next_pkt: 0,
            sent_pkts: 0,
            all_sent: false,
            tm_done: None,
            internal: false,
        })
    }

    /// `ibv_post_recv`. Refused for QPs attached to an SRQ (ibv_post_recv(3)).
    pub fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr]) -> Result<(), PostError> {
        let mut owned: SmallVec<[RecvWr; 4]> = wrs.iter().cloned().collect();
        self.post_recv_owned(qp, &mut owned)
    }

    /// [`Hca::post_recv`] of requests the caller gives up: the scatter/gather list of each
    /// one queued is moved into the queue (left empty in `wrs`), not copied.
    pub fn post_recv_owned(&mut self, qp: QpHandle, wrs: &mut [RecvWr]) -> Result<(), PostError> {
        const VERB: &str = "post_recv";
        for (index, wr) in wrs.iter_mut().enumerate() {
            let fail = |error| PostError { index, error };
            let q = self.store.lookup(VERB, qp).map_err(fail)?;
            if matches!(q.init.qp_type, QpType::XrcSend | QpType::XrcRecv) {
                return Err(fail(VerbsError::invalid(
                    VERB,
                    format!(
                        "{} QP {:#x} has no receive queue (XRC receives go to XRC SRQs)",
                        q.init.qp_type,
                        q.qpn.value()
                    ),
                )));
            }
            if q.init.srq.is_some() {
                return Err(fail(VerbsError::invalid(
                    VERB,
                    format!(
                        "QP {:#x} receives from an SRQ: post with post_srq_recv",
                        q.qpn.value()
                    ),
                )));
            }
            let state = q.attr.qp_state;
            if state == QpState::Reset {
                return Err(fail(VerbsError::BadQpState {
                    verb: VERB,
                    qpn: q.qpn.value(),
                    state,
                }));
            }
            if q.rq.len() >= q.init.cap.max_recv_wr as usize {
                return Err(fail(VerbsError::no_resources(
                    VERB,
                    format!("receive queue full ({} WRs)", q.init.cap.max_recv_wr),
                )));
            }
            if wr.sg_list.len() > q.init.cap.max_recv_sge as usize {
                return Err(fail(VerbsError::invalid(
                    VERB,
                    format!(
                        "num_sge {} exceeds max_recv_sge {}",
                        wr.sg_list.len(),
                        q.init.cap.max_recv_sge
                    ),
                )));
            }
            // The lkeys are checked when a message lands (IBV_WC_LOC_PROT_ERR and a NAK),
            // as rxe and mlx5 do: the region may be re-registered (ibv_rereg_mr) or
            // deregistered between the post and the arrival, so the check that counts is
            // the one at arrival.
            let q = self.store.lookup_mut(VERB, qp).map_err(fail)?;
            q.rq.push_back(take_recv_wr(wr));
            if state == QpState::Err {
                self.engine().flush_queues(qp);
            }
        }
        Ok(())
    }

    /// Force a QP into the error state with an affiliated async event (fault injection):
    /// `IBV_EVENT_QP_FATAL`, `IBV_EVENT_QP_REQ_ERR` or `IBV_EVENT_QP_ACCESS_ERR`.
    pub fn force_qp_error(&mut self, qp: QpHandle, event: EventType) -> VerbsResult<()> {
        const VERB: &str = "force_qp_error";
        self.store.lookup(VERB, qp)?;
        if !matches!(
            event,
            EventType::QpFatal | EventType::QpReqErr | EventType::QpAccessErr
        ) {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "{event} is not a QP error event (use QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR)"
                ),
            ));
        }
        self.engine().qp_to_error(qp, Some(event));
        Ok(())
    }
}

/// `wr` for a queue, its scatter/gather list moved out (the caller gave it up).
fn take_recv_wr(wr: &mut RecvWr) -> RecvWr {
    RecvWr {
        wr_id: wr.wr_id,
        sg_list: std::mem::take(&mut wr.sg_list),
    }
}
