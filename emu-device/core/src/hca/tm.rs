//! The tag matching SRQ verbs (see [`crate::tm`]).

use super::super::error::{PostError, VerbsError, VerbsResult};
use super::super::handles::{CqHandle, PdHandle, SrqHandle};
use super::super::objects::SrqAttr;
use super::super::tm::{TM_CAPS, TmCaps, TmOp, TmOpKind, TmSrq};
use super::super::types::{WcFlags, WcOpcode, WcStatus};
use super::super::wr::WorkCompletion;
use super::Hca;

impl Hca {
    /// `ibv_query_device_ex`'s `tm_caps`.
    pub fn tm_caps(&self) -> TmCaps {
        TM_CAPS
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_TM`: an SRQ of `pd` whose list operations and
    /// receives complete on `cq`, with room for `max_num_tags` tags (1..=the device's
    /// `tm_caps.max_num_tags`, else EINVAL).
    pub fn create_tm_srq(
        &mut self,
        pd: PdHandle,
        cq: CqHandle,
        attr: SrqAttr,
        max_num_tags: u32,
        max_ops: u32,
        context: u64,
    ) -> VerbsResult<(SrqHandle, SrqAttr)> {
        const VERB: &str = "create_srq_ex";
        if max_num_tags == 0 || max_num_tags > TM_CAPS.max_num_tags {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "tm_cap.max_num_tags {max_num_tags} outside 1..={}",
                    TM_CAPS.max_num_tags
                ),
            ));
        }
        if max_ops == 0 || max_ops > TM_CAPS.max_ops {
            return Err(VerbsError::invalid(
                VERB,
                format!("tm_cap.max_ops {max_ops} outside 1..={}", TM_CAPS.max_ops),
            ));
        }
        self.cqs.lookup(VERB, cq)?;
        let (srq, real) = self.create_srq(pd, attr, context)?;
        if let Some(s) = self.store.get_mut(srq) {
            s.tm = Some(Box::new(TmSrq::new(cq, max_num_tags, max_ops)));
        }
        self.cqs.add_users(cq, 1);
        Ok((srq, real))
    }

    /// The tag list size and operation limit of a tag matching SRQ.
    pub fn tm_srq_caps(&self, srq: SrqHandle) -> VerbsResult<Option<(u32, u32)>> {
        let s = self.store.lookup("query_srq", srq)?;
        Ok(s.tm.as_ref().map(|t| (t.max_num_tags(), t.max_ops)))
    }

    /// `ibv_post_srq_ops`: each operation in order; an `Add` writes its handle into the op.
    /// A non tag matching SRQ, an unknown handle (never within the list), too many SGEs are
    /// EINVAL; a full list is ENOMEM. Deleting a tag no longer posted (consumed by a
    /// message, or deleted) completes with `IBV_WC_TM_ERR`. Signaled operations complete on
    /// the SRQ's CQ, with `IBV_WC_TM_SYNC_REQ` while the SRQ waits for a sync.
    pub fn post_srq_ops(&mut self, srq: SrqHandle, ops: &mut [TmOp]) -> Result<(), PostError> {
        const VERB: &str = "post_srq_ops";
        for (index, op) in ops.iter_mut().enumerate() {
            let fail = |error| PostError { index, error };
            let s = self.store.lookup_mut(VERB, srq).map_err(fail)?;
            let Some(tm) = s.tm.as_deref_mut() else {
                return Err(fail(VerbsError::invalid(
                    VERB,
                    "not a tag matching SRQ (IBV_SRQT_TM)",
                )));
            };
            // Checked before anything changes: a refused operation has no effect.
            match &op.kind {
                TmOpKind::Add { sg_list, .. } if sg_list.len() > TM_CAPS.max_sge as usize => {
                    return Err(fail(VerbsError::invalid(
                        VERB,
                        format!(
                            "num_sge {} exceeds tm_caps.max_sge {}",
                            sg_list.len(),
                            TM_CAPS.max_sge
                        ),
                    )));
                }
                TmOpKind::Del { handle } if !tm.valid_handle(*handle) => {
                    return Err(fail(VerbsError::invalid(
                        VERB,
                        format!("handle {handle} was never returned by IBV_WR_TAG_ADD"),
                    )));
                }
                _ => {}
            }
            if let Some(n) = op.sync {
                tm.sync(n);
            }
            let (opcode, status) = match &op.kind {
                TmOpKind::Add {
                    recv_wr_id,
                    sg_list,
                    tag,
                    mask,
                } => {
                    op.handle = tm
                        .add(*tag, *mask, *recv_wr_id, sg_list.clone())
                        .ok_or_else(|| {
                            fail(VerbsError::no_resources(
                                VERB,
                                format!(
                                    "the tag list is full (max_num_tags {})",
                                    tm.max_num_tags()
                                ),
                            ))
                        })?;
                    (WcOpcode::TmAdd, WcStatus::Success)
                }
                TmOpKind::Del { handle } => {
                    let status = if tm.del(*handle) {
                        WcStatus::Success
                    } else {
                        WcStatus::TmErr
                    };
                    (WcOpcode::TmDel, status)
                }
                TmOpKind::Sync => (WcOpcode::TmSync, WcStatus::Success),
            };
            let sync_req = !tm.in_sync();
            let cq = tm.cq;
            // An unsignaled operation that fails is reported all the same.
            if op.signaled || status != WcStatus::Success {
                let mut wc = if status == WcStatus::Success {
                    WorkCompletion::success(op.wr_id, 0, opcode, 0)
                } else {
                    WorkCompletion::error(op.wr_id, 0, status, opcode, 0)
                };
                if sync_req && status == WcStatus::Success {
                    wc.wc_flags |= WcFlags::TM_SYNC_REQ;
                }
                let _ = self.engine().push_completion(cq, wc, false);
            }
        }
        Ok(())
    }
}
