//! Tag matching SRQs (ibv_create_srq_ex(3) `IBV_SRQT_TM`, ibv_post_srq_ops(3)).
//!
//! A tag matching SRQ holds, besides its ordinary receive WRs, a list of tagged buffers
//! (`IBV_WR_TAG_ADD`). A SEND arriving through a QP of the SRQ starts with a tag matching
//! header (`struct ibv_tmh`, 16 bytes, big-endian: opcode, 3 reserved bytes, `app_ctx`,
//! `tag`):
//!
//! - EAGER whose tag matches a posted entry (`msg.tag & entry.mask == entry.tag`, the
//!   oldest such entry wins): the rest of the message goes into the entry's buffer, which
//!   is consumed; `IBV_WC_TM_RECV` with `IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID`, the
//!   entry's `recv_wr_id` and `tm_info` {tag, app_ctx}.
//! - EAGER or RNDV matching nothing (or arriving while software has not acknowledged every
//!   unexpected message, see below): *unexpected* — the whole message, header included,
//!   lands in an ordinary SRQ receive, `IBV_WC_TM_RECV` without flags, and the SRQ's count
//!   of unexpected messages goes up.
//! - NO_TAG (and FIN): an ordinary receive, header included, `IBV_WC_TM_NO_TAG`.
//! - RNDV matching an entry: the header is followed by `struct ibv_rvh` (va, rkey, len);
//!   `IBV_WC_TM_RECV` with `IBV_WC_TM_MATCH` at once, then the device RDMA READs `len`
//!   bytes from (va, rkey) into the entry's buffer over the same QP, completes
//!   `IBV_WC_TM_RECV` with `IBV_WC_TM_DATA_VALID` and sends the peer a FIN (a SEND of a
//!   header with opcode FIN and the tag).
//!
//! Phase synchronisation: every list operation posted with `IBV_OPS_TM_SYNC` reports how
//! many unexpected messages software has handled. While that differs from the SRQ's own
//! count, no message matches (each is unexpected) and list operations complete with
//! `IBV_WC_TM_SYNC_REQ`.
//!
//! On the wire everything stays RC SENDs and READs.

use super::handles::CqHandle;
use super::wr::Sge;

/// Bytes of `struct ibv_tmh`.
pub const TMH_LEN: usize = 16;
/// Bytes of `struct ibv_rvh`.
pub const RVH_LEN: usize = 16;

/// `struct ibv_tm_caps` of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmCaps {
    /// Largest rendezvous request (TMH + RVH + application header).
    pub max_rndv_hdr_size: u32,
    /// Largest tag list.
    pub max_num_tags: u32,
    /// Most outstanding list operations (each completes as it is posted).
    pub max_ops: u32,
    /// Most SGEs of a tag's buffer.
    pub max_sge: u32,
}

/// What the device supports (RC only: `IBV_TM_CAP_RC`).
pub const TM_CAPS: TmCaps = TmCaps {
    max_rndv_hdr_size: 64,
    max_num_tags: 128,
    max_ops: 256,
    max_sge: 4,
};

/// `enum ibv_tmh_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TmhOp {
    /// IBV_TMH_NO_TAG.
    NoTag = 0,
    /// IBV_TMH_RNDV.
    Rndv = 1,
    /// IBV_TMH_FIN.
    Fin = 2,
    /// IBV_TMH_EAGER.
    Eager = 3,
}

/// `struct ibv_tmh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tmh {
    /// Raw opcode (see [`TmhOp`]).
    pub opcode: u8,
    /// Opaque application context (`ibv_wc_tm_info.priv`).
    pub app_ctx: u32,
    /// The tag.
    pub tag: u64,
}

impl Tmh {
    /// The header at the start of `payload`, if it is long enough.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let h = payload.get(..TMH_LEN)?;
        Some(Self {
            opcode: h[0],
            app_ctx: u32::from_be_bytes(h[4..8].try_into().ok()?),
            tag: u64::from_be_bytes(h[8..16].try_into().ok()?),
        })
    }

    /// Its wire form.
    pub fn emit(&self) -> [u8; TMH_LEN] {
        let mut b = [0u8; TMH_LEN];
        b[0] = self.opcode;
        b[4..8].copy_from_slice(&self.app_ctx.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.to_be_bytes());
        b
    }

    /// The opcode, if known.
    pub fn op(&self) -> Option<TmhOp> {
        match self.opcode {
            0 => Some(TmhOp::NoTag),
            1 => Some(TmhOp::Rndv),
            2 => Some(TmhOp::Fin),
            3 => Some(TmhOp::Eager),
            _ => None,
        }
    }
}

/// `struct ibv_rvh`, after the TMH of a RNDV message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rvh {
    /// The sender's buffer.
    pub va: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Bytes to read.
    pub len: u32,
}

impl Rvh {
    /// The header following the TMH in `payload`.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let h = payload.get(TMH_LEN..TMH_LEN + RVH_LEN)?;
        Some(Self {
            va: u64::from_be_bytes(h[0..8].try_into().ok()?),
            rkey: u32::from_be_bytes(h[8..12].try_into().ok()?),
            len: u32::from_be_bytes(h[12..16].try_into().ok()?),
        })
    }
}

/// One operation of `ibv_post_srq_ops`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TmOpKind {
    /// `IBV_WR_TAG_ADD`.
    Add {
        /// Returned in the receive completion.
        recv_wr_id: u64,
        /// The tag's buffer.
        sg_list: Vec<Sge>,
        /// Matching: `msg.tag & mask == tag`.
        tag: u64,
        /// Matching mask.
        mask: u64,
    },
    /// `IBV_WR_TAG_DEL` of the entry `handle`.
    Del {
        /// What `Add` returned.
        handle: u32,
    },
    /// `IBV_WR_TAG_SYNC`.
    Sync,
}

/// `struct ibv_ops_wr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmOp {
    /// Returned in the operation's completion.
    pub wr_id: u64,
    /// What to do.
    pub kind: TmOpKind,
    /// `IBV_OPS_SIGNALED`: complete on the SRQ's CQ.
    pub signaled: bool,
    /// `IBV_OPS_TM_SYNC`: the unexpected messages software has handled.
    pub sync: Option<u32>,
    /// Output of `Add`: the entry's handle.
    pub handle: u32,
}

/// A posted tag.
#[derive(Debug, Clone)]
pub(crate) struct TmTag {
    pub(crate) tag: u64,
    pub(crate) mask: u64,
    pub(crate) recv_wr_id: u64,
    pub(crate) sg_list: Vec<Sge>,
    /// Posting order: the oldest match wins.
    seq: u64,
}

/// The tag matching state of an SRQ.
#[derive(Debug)]
pub(crate) struct TmSrq {
    /// Where list operations and every receive of the SRQ complete.
    pub(crate) cq: CqHandle,
    pub(crate) max_ops: u32,
    /// Indexed by handle.
    slots: Vec<Option<TmTag>>,
    next_seq: u64,
    /// Unexpected messages the SRQ delivered.
    unexpected: u32,
    /// Unexpected messages software reported handled (`IBV_OPS_TM_SYNC`).
    handled: u32,
}

impl TmSrq {
    pub(crate) fn new(cq: CqHandle, max_num_tags: u32, max_ops: u32) -> Self {
        Self {
            cq,
            max_ops,
            slots: vec![None; max_num_tags as usize],
            next_seq: 0,
            unexpected: 0,
            handled: 0,
        }
    }

    pub(crate) fn max_num_tags(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Software has handled every unexpected message: matching is on.
    pub(crate) fn in_sync(&self) -> bool {
        self.unexpected == self.handled
    }

    pub(crate) fn sync(&mut self, handled: u32) {
        self.handled = handled;
    }

    /// Post a tag: its handle, or None when the list is full.
    pub(crate) fn add(
        &mut self,
        tag: u64,
        mask: u64,
        recv_wr_id: u64,
        sg_list: Vec<Sge>,
    ) -> Option<u32> {
        let i = self.slots.iter().position(Option::is_none)?;
        self.slots[i] = Some(TmTag {
            tag,
            mask,
            recv_wr_id,
            sg_list,
            seq: self.next_seq,
        });
        self.next_seq += 1;
        Some(i as u32)
    }

    /// Whether `handle` could ever have been returned.
    pub(crate) fn valid_handle(&self, handle: u32) -> bool {
        (handle as usize) < self.slots.len()
    }

    /// Remove a posted tag: false if it is not posted (consumed or deleted).
    pub(crate) fn del(&mut self, handle: u32) -> bool {
        self.slots
            .get_mut(handle as usize)
            .and_then(Option::take)
            .is_some()
    }

    /// Consume the oldest posted tag `tag` matches, if matching is on.
    pub(crate) fn take_match(&mut self, tag: u64) -> Option<TmTag> {
        if !self.in_sync() {
            return None;
        }
        let i = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|t| (i, t)))
            .filter(|(_, t)| tag & t.mask == t.tag)
            .min_by_key(|(_, t)| t.seq)
            .map(|(i, _)| i)?;
        self.slots[i].take()
    }

    /// Count a message delivered unexpected.
    pub(crate) fn count_unexpected(&mut self) {
        self.unexpected = self.unexpected.wrapping_add(1);
    }

    /// Take back the count of an unexpected message that was never delivered.
    pub(crate) fn uncount_unexpected(&mut self) {
        self.unexpected = self.unexpected.wrapping_sub(1);
    }

    /// Tags posted.
    #[cfg(test)]
    pub(crate) fn posted(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge() -> Vec<Sge> {
        vec![Sge {
            addr: 0x1000,
            length: 64,
            lkey: 1,
        }]
    }

    #[test]
    fn tmh_round_trips_big_endian() {
        let h = Tmh {
            opcode: TmhOp::Eager as u8,
            app_ctx: 0x0102_0304,
            tag: 0x1122_3344_5566_7788,
        };
        let b = h.emit();
        assert_eq!(b[0], 3);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(Tmh::parse(&b), Some(h));
        assert_eq!(Tmh::parse(&b[..15]), None);
    }

    #[test]
    fn mask_selects_the_bits_compared_and_the_oldest_match_wins() {
        let mut t = TmSrq::new(CqHandle::NONE, 4, 4);
        let a = t.add(0x34, 0xff, 1, sge()).unwrap();
        let b = t.add(0x34, 0xff, 2, sge()).unwrap();
        assert_ne!(a, b);
        assert!(t.take_match(0x35).is_none());
        // 0x1234 & 0xff == 0x34: the first posted entry, then the second.
        assert_eq!(t.take_match(0x1234).unwrap().recv_wr_id, 1);
        assert_eq!(t.take_match(0x34).unwrap().recv_wr_id, 2);
        assert!(t.take_match(0x34).is_none());
    }

    #[test]
    fn list_is_bounded_and_delete_frees_a_handle_once() {
        let mut t = TmSrq::new(CqHandle::NONE, 2, 4);
        let a = t.add(1, !0, 1, sge()).unwrap();
        t.add(2, !0, 2, sge()).unwrap();
        assert_eq!(t.add(3, !0, 3, sge()), None, "more tags than max_num_tags");
        assert!(t.del(a));
        assert!(!t.del(a), "deleted twice");
        assert!(!t.valid_handle(2));
        assert_eq!(t.posted(), 1);
        assert!(t.take_match(1).is_none(), "a deleted tag never matches");
        assert!(t.add(3, !0, 3, sge()).is_some());
    }

    #[test]
    fn unexpected_messages_stop_matching_until_software_syncs() {
        let mut t = TmSrq::new(CqHandle::NONE, 4, 4);
        t.add(7, !0, 7, sge()).unwrap();
        t.count_unexpected();
        assert!(!t.in_sync());
        assert!(t.take_match(7).is_none());
        t.sync(1);
        assert_eq!(t.take_match(7).unwrap().recv_wr_id, 7);
    }
}
