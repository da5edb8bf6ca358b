//! Rendezvous of a tag matching SRQ (see [`crate::tm`]): a RNDV request that matched a
//! tag has the device RDMA READ the sender's buffer into the tag's, then send the sender a
//! FIN. Both are work requests of the receiving QP that no one posted: they complete
//! nowhere but through the tag (`IBV_WC_TM_RECV` with `IBV_WC_TM_DATA_VALID`, on the
//! SRQ's CQ, when the READ completes).

use super::super::handles::{CqHandle, QpHandle};
use super::super::objects::SendWqe;
use super::super::tm::{Rvh, TmTag, Tmh, TmhOp};
use super::super::types::{SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode};
use super::super::wr::{RdmaTarget, SendWr, Sge, WorkCompletion};
use super::Engine;

/// The first `len` bytes of `sges`, or None if they hold fewer.
fn prefix(sges: &[Sge], len: u32) -> Option<Vec<Sge>> {
    let mut left = len;
    let mut out = Vec::new();
    for s in sges {
        if left == 0 {
            break;
        }
        let n = s.length.min(left);
        out.push(Sge { length: n, ..*s });
        left -= n;
    }
    (left == 0).then_some(out)
}

fn internal(wr: SendWr, inline: Option<Vec<u8>>) -> SendWqe {
    SendWqe {
        wr,
        inline: inline.map(crate::objects::InlineData::from_vec),
        signaled: false,
        first_psn: None,
        npkts: 0,
        next_pkt: 0,
        sent_pkts: 0,
        all_sent: false,
        tm_done: None,
        internal: true,
    }
}

/// Where the error completion `wc` of `wqe` goes: the send queue's `cq` for a posted WR;
/// for a rendezvous READ, the tag's CQ as its `IBV_WC_TM_RECV`; for a FIN, nowhere.
pub(crate) fn error_target(
    wqe: &SendWqe,
    cq: CqHandle,
    mut wc: WorkCompletion,
) -> Option<(CqHandle, WorkCompletion)> {
    if !wqe.internal {
        return Some((cq, wc));
    }
    let done = wqe.tm_done.as_deref()?;
    wc.wr_id = done.wc.wr_id;
    wc.opcode = WcOpcode::TmRecv;
    Some((done.cq, wc))
}

/// Queue the READ of `rvh` into `tag`'s buffer and the FIN after it. A buffer too small
/// for `rvh.len` completes the tag at once with `IBV_WC_TM_RNDV_INCOMPLETE` (software
/// finishes the transfer).
pub(super) fn start(eng: &mut Engine<'_>, qp: QpHandle, tag: TmTag, rvh: Rvh, msg_tag: u64) {
    let srq = eng.store.get(qp).and_then(|q| q.init.srq);
    let Some(cq) = srq
        .and_then(|s| eng.store.get(s))
        .and_then(|s| s.tm.as_ref())
        .map(|t| t.cq)
    else {
        return;
    };
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let qpn = q.qpn.value();
    let Some(sg_list) = prefix(&tag.sg_list, rvh.len) else {
        let wc = WorkCompletion::error(
            tag.recv_wr_id,
            qpn,
            WcStatus::TmRndvIncomplete,
            WcOpcode::TmRecv,
            0,
        );
        eng.push_recv_completion(qp, cq, wc, false);
        return;
    };
    let mut read = SendWr::new(tag.recv_wr_id, WrOpcode::RdmaRead);
    read.send_flags = SendFlags::EMPTY;
    read.sg_list = sg_list.into();
    read.rdma = RdmaTarget {
        remote_addr: rvh.va,
        rkey: rvh.rkey,
    };
    let mut done = WorkCompletion::success(tag.recv_wr_id, qpn, WcOpcode::TmRecv, rvh.len);
    done.wc_flags = WcFlags::TM_DATA_VALID;
    let mut read = internal(read, None);
    read.tm_done = Some(Box::new(RndvDone {
        cq,
        wc: done,
        tag: msg_tag,
    }));
    q.sq.push_back(read);
    super::on_post_send(eng, qp);
}

/// The READ of a rendezvous completed: the tag's completion, then the FIN (only now: the
/// sender may reuse its buffer once the FIN arrives, so nothing may be read after it).
pub(super) fn finish(eng: &mut Engine<'_>, qp: QpHandle, done: RndvDone) {
    let _ = eng.push_completion(done.cq, done.wc, false);
    let fin = Tmh {
        opcode: TmhOp::Fin as u8,
        app_ctx: 0,
        tag: done.tag,
    }
    .emit();
    let mut send = SendWr::new(0, WrOpcode::Send);
    send.send_flags = SendFlags::INLINE;
    send.sg_list = smallvec::smallvec![Sge {
        addr: 0,
        length: fin.len() as u32,
        lkey: 0,
    }];
    if let Some(q) = eng.store.get_mut(qp) {
        q.sq.push_back(internal(send, Some(fin.to_vec())));
        eng.outbox.mark_active(qp);
    }
}

/// What completes a rendezvous READ.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RndvDone {
    /// The tag matching SRQ's CQ.
    pub(crate) cq: CqHandle,
    /// `IBV_WC_TM_RECV` with `IBV_WC_TM_DATA_VALID`.
    pub(crate) wc: WorkCompletion,
    /// The message's tag, which the FIN carries.
    pub(crate) tag: u64,
}
