//! The device's objects and their attributes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softroce_wire::{Gid, Mtu, Psn, Qpn};

use super::handles::{
    ChannelHandle, CqHandle, DmHandle, MrHandle, PdHandle, QpHandle, SrqHandle, XrcdHandle,
};
use super::types::{AccessFlags, MwType, QpState, QpType};
use super::wr::{RecvWr, SendWr, WorkCompletion};

/// A protection domain.
#[derive(Debug, Default)]
pub(crate) struct Pd {
    /// MRs, AHs, QPs and SRQs using it.
    pub(crate) users: u32,
}

/// An XRC domain: the scope in which XRC target QPs deliver into XRC SRQs.
#[derive(Debug, Default)]
pub(crate) struct Xrcd {
    /// XRC SRQs and XRC target QPs in it.
    pub(crate) users: u32,
}

/// What makes an SRQ an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct XrcSrq {
    pub(crate) xrcd: XrcdHandle,
    /// Where the receives it completes go, whichever target QP they came through.
    pub(crate) cq: CqHandle,
}

/// A memory region.
#[derive(Debug, Clone)]
pub(crate) struct Mr {
    pub(crate) pd: PdHandle,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    /// The address the region's keys address it by (ibv_reg_mr_iova(3)): its virtual
    /// address, 0 with `IBV_ACCESS_ZERO_BASED`, or the iova given.
    pub(crate) iova: u64,
    pub(crate) access: AccessFlags,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    /// Cleared by a SEND_WITH_INV naming the rkey (only ever for a region
    /// [`Mr::remotely_invalidatable`] accepts).
    pub(crate) remote_valid: bool,
    /// Memory windows bound to the region: `ibv_dereg_mr` fails while any is
    /// (ibv_alloc_mw(3), NOTES).
    pub(crate) windows: u32,
    /// The device memory the region covers (`ibv_reg_dm_mr`), which cannot be freed while
    /// the region exists (ibv_alloc_dm(3), NOTES).
    pub(crate) dm: Option<DmHandle>,
    /// A null MR (ibv_alloc_null_mr(3)): every address of the maximum length, read as
    /// zeros, written to nowhere; its key opens nothing to peers.
    pub(crate) null: bool,
}

/// A device memory allocation (ibv_alloc_dm(3)). The emulator's device memory is memory
/// of the process the application reaches only through `ibv_memcpy_to_dm` /
/// `ibv_memcpy_from_dm` and regions over it; the core keeps its size (the device's
/// `max_dm_size` bounds the sum) and the regions that cover it.
#[derive(Debug, Clone)]
pub(crate) struct Dm {
    pub(crate) len: u64,
    /// Regions registered over it.
    pub(crate) regions: u32,
}

impl Mr {
    /// Whether a peer's SEND_WITH_INV may invalidate this region's rkey. IBTA allows it
    /// only for memory windows (see [`Mw`]) and fast-registration regions (rxe_invalidate_mr
    /// refuses every type but IB_MR_TYPE_MEM_REG); every region here comes from
    /// `ibv_reg_mr`, so none is. The one place to widen when fast-reg regions arrive.
    pub(crate) fn remotely_invalidatable(&self) -> bool {
        false
    }

    /// Whether `va..va+len`, an address as keys use it (from `iova`), lies inside the
    /// region.
    pub(crate) fn contains(&self, va: u64, len: u64) -> bool {
        va >= self.iova
            && va
                .checked_add(len)
                .is_some_and(|end| end <= self.iova + self.len)
    }

    /// The process address of `va` (checked with [`Mr::contains`]).
    pub(crate) fn local(&self, va: u64) -> u64 {
        self.addr + (va - self.iova)
    }

    /// Whether the process addresses `addr..addr+len` lie inside the region.
    pub(crate) fn covers(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

/// A memory window: a key that opens part of a region to remote access once bound.
#[derive(Debug, Clone)]
pub(crate) struct Mw {
    pub(crate) pd: PdHandle,
    pub(crate) mw_type: MwType,
    /// The current R_Key; its upper 24 bits (the index) never change, a bind picks the
    /// low byte.
    pub(crate) rkey: u32,
    pub(crate) binding: Option<MwBinding>,
}

/// What a bound window opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MwBinding {
    pub(crate) mr: MrHandle,
    /// The window's start as a process address.
    pub(crate) addr: u64,
    /// The window's start as remote keys address it without ZERO_BASED: the bind's
    /// address, in the region's iova.
    pub(crate) va: u64,
    pub(crate) len: u64,
    /// Remote rights, and ZERO_BASED (remote addresses are offsets from `addr`).
    pub(crate) access: AccessFlags,
    /// Type 2: the QP the window was bound on, the only one remote access may come through
    /// (IBTA 10.6.7.2.2, rxe_check_mw's type-2 QP check).
    pub(crate) qp: Option<QpHandle>,
}

impl MwBinding {
    /// The absolute address of a remote access at `va` of `len` bytes, if inside the window.
    pub(crate) fn translate(&self, va: u64, len: u64) -> Option<u64> {
        let offset = if self.access.contains(AccessFlags::ZERO_BASED) {
            va
        } else {
            va.checked_sub(self.va)?
        };
        (offset.checked_add(len)? <= self.len).then(|| self.addr + offset)
    }
}

/// Address vector: `ibv_ah_attr` with its GRH, as RoCE uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// Destination GID (its IP is where packets go).
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class (DSCP/ECN).
    pub traffic_class: u8,
    /// A GRH is used (must be true on RoCE).
    pub is_global: bool,
    /// Service level.
    pub sl: u8,
    /// Port (1).
    pub port_num: u8,
    /// `ibv_rate` the application asked for (0: the port's rate). Kept, not enforced: a
    /// QP's address vector is queried back as set (ibv_query_qp(3)), as mlx5 returns it.
    pub static_rate: u8,
    /// Destination UDP port: 0 means 4791. Only for private setups with several devices on
    /// one address.
    pub udp_port: u16,
}

impl AhAttr {
    /// An address vector to `dgid` from GID index `sgid_index`.
    pub const fn new(dgid: Gid, sgid_index: u8) -> Self {
        Self {
            dgid,
            flow_label: 0,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            is_global: true,
            sl: 0,
            port_num: 1,
            static_rate: 0,
            udp_port: 0,
        }
    }
}

impl AhAttr {
    /// Where packets to this address go: the destination GID's IP and the UDP port.
    pub(crate) fn destination(&self) -> SocketAddr {
        let port = if self.udp_port == 0 {
            softroce_wire::icrc::ROCE_V2_PORT
        } else {
            self.udp_port
        };
        SocketAddr::new(self.dgid.to_ip(), port)
    }
}

impl Default for AhAttr {
    fn default() -> Self {
        Self {
            is_global: false,
            port_num: 1,
            ..Self::new(Gid::ZERO, 0)
        }
    }
}

/// An address handle.
#[derive(Debug)]
pub(crate) struct Ah {
    pub(crate) pd: PdHandle,
    pub(crate) attr: AhAttr,
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    /// Entries the CQ can hold (the `cqe` reported to the application).
    pub(crate) capacity: u32,
    pub(crate) entries: VecDeque<WorkCompletion>,
    pub(crate) channel: Option<ChannelHandle>,
    pub(crate) context: u64,
    /// `Some(solicited_only)` while armed.
    pub(crate) armed: Option<bool>,
    /// Events delivered by get_cq_event and not yet acknowledged.
    pub(crate) events_unacked: u32,
    /// QPs and SRQs using the CQ.
    pub(crate) users: u32,
    /// Set by an overrun; completions are then dropped.
    pub(crate) in_error: bool,
    /// Completions dropped since the overrun.
    pub(crate) lost: u64,
    pub(crate) async_unacked: u32,
    /// Fault injection: the CQ overruns once it holds this many (below its capacity).
    pub(crate) depth_limit: Option<u32>,
    /// Completion event moderation (`ibv_modify_cq`): off until set.
    pub(crate) moderation: CqModeration,
    /// The completions an armed, moderated CQ holds its event back for: how many, and when
    /// the first came.
    pub(crate) held_event: Option<(u32, Instant)>,
}

/// `struct ibv_moderate_cq`: an armed CQ's event goes once `count` completions came since
/// it was armed, or `period_us` microseconds after the first of them, whichever is first; a
/// zero leaves its condition out, and both zero is no moderation (the first completion
/// fires, as without it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CqModeration {
    pub(crate) count: u16,
    pub(crate) period_us: u16,
}

impl CqModeration {
    /// Whether `held` completions send the event without waiting for the period.
    pub(crate) fn fires_with(self, held: u32) -> bool {
        (self.count == 0 && self.period_us == 0)
            || (self.count > 0 && held >= u32::from(self.count))
    }

    /// When the event held since `first` is due by the period (none without one).
    pub(crate) fn deadline(self, first: Instant) -> Option<Instant> {
        (self.period_us > 0).then(|| first + Duration::from_micros(u64::from(self.period_us)))
    }
}

/// A completion channel.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    /// CQs with a completion event not yet retrieved, oldest first.
    pub(crate) pending: VecDeque<(CqHandle, u64)>,
    /// CQs attached.
    pub(crate) users: u32,
}

/// SRQ attributes: `ibv_srq_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Maximum outstanding receive WRs.
    pub max_wr: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Limit: SRQ_LIMIT_REACHED fires once when the WR count drops below it (0 = disarmed).
    pub srq_limit: u32,
}

/// Which SRQ attributes `modify_srq` changes (`enum ibv_srq_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttrMask {
    /// Resize to `max_wr`.
    pub max_wr: bool,
    /// Arm the limit event at `srq_limit`.
    pub limit: bool,
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) pd: PdHandle,
    /// The SRQ number (`ibv_get_srq_num`): what an XRCETH names.
    pub(crate) srqn: u32,
    pub(crate) xrc: Option<XrcSrq>,
    /// What makes it a tag matching SRQ (`IBV_SRQT_TM`).
    pub(crate) tm: Option<Box<super::tm::TmSrq>>,
    pub(crate) attr: SrqAttr,
    pub(crate) queue: VecDeque<RecvWr>,
    pub(crate) users: u32,
    pub(crate) async_unacked: u32,
    pub(crate) context: u64,
}

/// Queue capacities: `ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// QP creation attributes: `ibv_qp_init_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// CQ for send completions.
    pub send_cq: CqHandle,
    /// CQ for receive completions.
    pub recv_cq: CqHandle,
    /// Shared receive queue, if any.
    pub srq: Option<SrqHandle>,
    /// Capacities (the real ones are returned by create_qp).
    pub cap: QpCap,
    /// Transport.
    pub qp_type: QpType,
    /// Every send WR generates a completion.
    pub sq_sig_all: bool,
    /// Caller's context value.
    pub qp_context: u64,
}

/// QP attributes: `ibv_qp_attr` (the fields that apply to RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Requested or current state.
    pub qp_state: QpState,
    /// Assumed current state (with `IBV_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Path migration state (0 migrated, 1 rearm, 2 armed).
    pub path_mig_state: u8,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected receive PSN.
    pub rq_psn: Psn,
    /// Next send PSN.
    pub sq_psn: Psn,
    /// Destination QP (RC/UC).
    pub dest_qp_num: u32,
    /// Remote access allowed to this QP's responder.
    pub qp_access_flags: AccessFlags,
    /// Capacities (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Raise SQ_DRAINED when entering SQD drains.
    pub en_sqd_async_notify: bool,
    /// The SQ is draining (query only).
    pub sq_draining: bool,
    /// Outstanding READ/atomics as requester.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code sent to requesters.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries (3 bits).
    pub retry_cnt: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        Self {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu256,
            path_mig_state: 0,
            qkey: 0,
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::EMPTY,
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// A posted send WR as the SQ holds it.
/// An inline payload: up to a cache line in place, longer ones on the heap.
pub(crate) type InlineData = smallvec::SmallVec<[u8; 64]>;

#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    pub(crate) wr: SendWr,
    /// Inline payload copied at post time (IBV_SEND_INLINE): a short one without a heap
    /// allocation (a latency benchmark posts one per round trip).
    pub(crate) inline: Option<InlineData>,
    pub(crate) signaled: bool,
    /// First PSN, assigned when the first packet is sent.
    pub(crate) first_psn: Option<Psn>,
    /// PSNs the request occupies (READ: one per response packet).
    pub(crate) npkts: u32,
    /// Next packet index to (re)send.
    pub(crate) next_pkt: u32,
    /// Packets sent at least once (the high-water mark of `next_pkt`): one below it is a
    /// retransmission, even while a go-back interrupted the first pass.
    pub(crate) sent_pkts: u32,
    /// Every packet has been sent at least once.
    pub(crate) all_sent: bool,
    /// A tag matching rendezvous READ (no one posted it): on success, this completes the
    /// tag instead of anything on the send queue's CQ.
    /// Boxed: rare, and every WQE is copied into and out of the queue.
    pub(crate) tm_done: Option<Box<crate::transport::tm_rndv::RndvDone>>,
    /// Queued by the device itself (a rendezvous READ or FIN): never completes on the
    /// send queue's CQ, not even in error.
    pub(crate) internal: bool,
}

impl SendWqe {
    /// Bytes the request carries: the inline copy's, or the scatter/gather list's.
    pub(crate) fn len(&self) -> u64 {
        self.inline
            .as_ref()
            .map_or_else(|| self.wr.total_len(), |d| d.len() as u64)
    }
}

/// A QP.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) qpn: Qpn,
    /// [`PdHandle::NONE`] for an XRC target, whose requests use the PD of the XRC SRQ
    /// they name.
    pub(crate) pd: PdHandle,
    /// An XRC target's domain.
    pub(crate) xrcd: Option<XrcdHandle>,
    /// Handles to an XRC target (its creation and each `ibv_open_qp`): the QP goes with
    /// the last (the kernel's `__ib_destroy_shared_qp`). 1 for every other QP.
    pub(crate) opens: u32,
    pub(crate) init: QpInitAttr,
    pub(crate) attr: QpAttr,
    /// Where `attr.ah_attr` sends (set with it): the datapath asks per packet, and
    /// turning the GID into a socket address each time showed in profiles.
    pub(crate) peer: SocketAddr,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: VecDeque<RecvWr>,
    pub(crate) async_unacked: u32,
    /// SQD was requested with notification and SQ_DRAINED has not been raised yet.
    pub(crate) sqd_notify_pending: bool,
    /// Transport state (sequence numbers, timers, in-flight work).
    pub(crate) transport: super::qp_transport::QpTransport,
}

impl Qp {
    /// Nothing of the send queue is in flight (every WQE still waits for its first packet).
    pub(crate) fn sq_drained(&self) -> bool {
        self.sq.iter().all(|w| w.first_psn.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ibv_reg_mr(3): keys address a region from its iova ("addr + (iova - hca_va)"), and
    /// a window bound by those addresses opens the same bytes.
    #[test]
    fn keys_address_a_region_from_its_iova() {
        let mr = Mr {
            pd: PdHandle::from_raw(1),
            addr: 0x7000_0000,
            len: 4096,
            iova: 0x1_0000,
            access: AccessFlags::LOCAL_WRITE,
            lkey: 1,
            rkey: 1,
            remote_valid: true,
            windows: 0,
            dm: None,
            null: false,
        };
        assert!(mr.contains(0x1_0000, 4096) && !mr.contains(0x1_0000, 4097));
        assert!(
            !mr.contains(0x7000_0000, 1),
            "the process address is not a key address"
        );
        assert_eq!(mr.local(0x1_0010), 0x7000_0010);
        assert!(mr.covers(0x7000_0010, 16));
        let window = |access| MwBinding {
            mr: MrHandle::from_raw(1),
            addr: mr.local(0x1_0400),
            va: 0x1_0400,
            len: 64,
            access,
            qp: None,
        };
        let w = window(AccessFlags::REMOTE_WRITE);
        assert_eq!(w.translate(0x1_0408, 8), Some(0x7000_0408));
        assert_eq!(w.translate(0x1_043c, 8), None, "across the window's end");
        assert_eq!(w.translate(0x7000_0408, 8), None);
        let z = window(AccessFlags::REMOTE_WRITE | AccessFlags::ZERO_BASED);
        assert_eq!(z.translate(8, 8), Some(0x7000_0408));
        assert_eq!(z.translate(60, 8), None);
    }
}
