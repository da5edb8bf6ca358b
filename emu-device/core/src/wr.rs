//! Work requests, as posted, and work completions, as polled (the fields of `ibv_send_wr`,
//! `ibv_recv_wr` and `ibv_wc`).

use super::handles::{AhHandle, MrHandle, MwHandle};
use super::types::{AccessFlags, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode};

/// A scatter/gather element: `ibv_sge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Sge {
    /// Start address in a registered memory region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

/// Remote side of an RDMA WRITE or READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RdmaTarget {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// Remote side and operands of an atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct AtomicTarget {
    /// Remote virtual address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare value (CMP_AND_SWP) or add value (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// UD destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdTarget {
    /// Address handle.
    pub ah: AhHandle,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key (the QP's own Q_Key is used when the high bit is set: IBTA 10.2.5).
    pub remote_qkey: u32,
}

/// A memory window bind: `ibv_send_wr.bind_mw` (`IBV_WR_BIND_MW`), or `ibv_bind_mw`'s
/// `ibv_mw_bind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window.
    pub mw: MwHandle,
    /// The window's R_Key after the bind: its index with a new key byte (`ibv_inc_rkey`).
    pub rkey: u32,
    /// The region the window lies in (none for a zero-length bind, which unbinds).
    pub mr: Option<MrHandle>,
    /// Start address of the window (inside the region).
    pub addr: u64,
    /// Length; 0 unbinds.
    pub length: u64,
    /// Remote rights, and `IBV_ACCESS_ZERO_BASED`.
    pub access: AccessFlags,
}

/// A scatter/gather list. Most requests name one or two buffers: those stay inline, so a
/// post allocates nothing (`SgList::from(vec)` and `sg_list.to_vec()` convert).
pub type SgList = smallvec::SmallVec<[Sge; 2]>;

/// A send work request: `ibv_send_wr` without the linked-list pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Local buffers.
    pub sg_list: SgList,
    /// Flags.
    pub send_flags: SendFlags,
    /// Immediate data, in network byte order as in `ibv_send_wr.imm_data`.
    pub imm_data: u32,
    /// R_Key to invalidate (SEND_WITH_INV, LOCAL_INV).
    pub invalidate_rkey: u32,
    /// RDMA WRITE/READ target.
    pub rdma: RdmaTarget,
    /// Atomic target.
    pub atomic: AtomicTarget,
    /// UD destination.
    pub ud: Option<UdTarget>,
    /// XRC initiator: the peer's XRC SRQ the request is for (`qp_type.xrc.remote_srqn`).
    pub xrc_remote_srqn: u32,
    /// The window to bind (`IBV_WR_BIND_MW`). Boxed: rare, and a work request is copied
    /// into the send queue and out of it with every post.
    pub bind: Option<Box<MwBind>>,
}

impl SendWr {
    /// A signaled work request of `opcode` with no buffers.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> Self {
        Self {
            wr_id,
            opcode,
            sg_list: SgList::new(),
            send_flags: SendFlags::SIGNALED,
            imm_data: 0,
            invalidate_rkey: 0,
            rdma: RdmaTarget::default(),
            atomic: AtomicTarget::default(),
            ud: None,
            xrc_remote_srqn: 0,
            bind: None,
        }
    }

    /// Total bytes of the scatter/gather list.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A receive work request: `ibv_recv_wr` without the linked-list pointer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Buffers to receive into.
    pub sg_list: SgList,
}

impl RecvWr {
    /// Total bytes of the scatter/gather list.
    pub fn total_len(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A work completion: every field of `ibv_wc`.
///
/// For a status other than success only `wr_id`, `status`, `qp_num` and `vendor_err` are
/// meaningful (ibv_poll_cq(3)); the others are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkCompletion {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation that completed.
    pub opcode: WcOpcode,
    /// Vendor error syndrome (non-zero only for errors; see [`VendorErr`]).
    pub vendor_err: u32,
    /// Bytes transferred (receives: bytes written, incl. the 40-byte GRH area for UD).
    pub byte_len: u32,
    /// Immediate data in network byte order, valid with `IBV_WC_WITH_IMM`; the invalidated
    /// R_Key with `IBV_WC_WITH_INV`.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index (always 0: one P_Key).
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits (0 on RoCE).
    pub dlid_path_bits: u8,
    /// The device clock when the completion was generated
    /// (`ibv_wc_read_completion_ts`): see [`Hca::clock`](crate::Hca::clock) for its unit
    /// and epoch. 0 from a backend that does not report it.
    pub completion_ts: u64,
    /// Tag matching (`ibv_wc_read_tm_info`, valid with `IBV_WC_TM_MATCH`): the message's
    /// TMH tag.
    pub tm_tag: u64,
    /// Tag matching: the TMH's `app_ctx` (`ibv_wc_tm_info.priv`).
    pub tm_priv: u32,
}

impl WorkCompletion {
    /// A completion with only the fields an error completion carries.
    pub const fn error(
        wr_id: u64,
        qp_num: u32,
        status: WcStatus,
        opcode: WcOpcode,
        vendor_err: u32,
    ) -> Self {
        Self {
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::EMPTY,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            completion_ts: 0,
            tm_tag: 0,
            tm_priv: 0,
        }
    }

    /// A successful completion.
    pub const fn success(wr_id: u64, qp_num: u32, opcode: WcOpcode, byte_len: u32) -> Self {
        Self {
            wr_id,
            status: WcStatus::Success,
            opcode,
            vendor_err: 0,
            byte_len,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::EMPTY,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            completion_ts: 0,
            tm_tag: 0,
            tm_priv: 0,
        }
    }
}

/// The `vendor_err` values softroce reports, so an application (or a test) can tell which
/// check produced an error completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum VendorErr {
    /// Flushed because the QP entered the error state.
    Flushed = 0x100,
    /// The CQ overran.
    CqOverrun = 0x101,
    /// A local key did not name a usable region (deregistered, wrong PD, bounds, access).
    LocalKey = 0x102,
    /// Receive buffer too small for the message.
    RecvTooSmall = 0x103,
    /// Transport retries exhausted.
    RetryExceeded = 0x104,
    /// RNR retries exhausted.
    RnrRetryExceeded = 0x105,
    /// Responder NAK: invalid request.
    RemoteInvalidRequest = 0x106,
    /// Responder NAK: remote access error.
    RemoteAccess = 0x107,
    /// Responder NAK: remote operational error.
    RemoteOperational = 0x108,
    /// A memory window bind or a local invalidate was refused (the window, region, PD,
    /// rights or range did not allow it).
    LocalOp = 0x109,
    /// The host refused to send the request's packet (the driver's socket call failed).
    NotSent = 0x10A,
    /// Forced by fault injection.
    Injected = 0x1FF,
}
