//! Enumerators and flag bits of `<infiniband/verbs.h>` (rdma-core 44), as the plain integers
//! the C enums hold.
//!
//! A value the emulator's core also names (`softroce_emu_core::QpState` …) is taken from
//! there, so it is written once; the rest are literals. `tests/layout_matches_verbs_h.rs`
//! compares every one of [`CONSTANTS`] with gcc's view of the installed header, which also
//! proves the core's values are the C values.

use softroce_emu_core::{
    AccessFlags, EventType, PortState, QpAttrMask, QpState, QpType, SendFlags, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};
use softroce_wire::Mtu;

/// `NAME = value` items grouped by type; every item is also listed in [`CONSTANTS`].
macro_rules! consts {
    ($( $ty:ty { $( $(#[$m:meta])* $name:ident = $value:expr ),* $(,)? } )*) => {
        $($(
            $(#[$m])*
            #[doc = concat!("`", stringify!($value), "`")]
            pub const $name: $ty = $value;
        )*)*

        /// Every constant of this module that `<infiniband/verbs.h>` defines, as `(C name,
        /// value)`: what the C comparison test checks.
        pub static CONSTANTS: &[(&str, i64)] = &[ $($( (stringify!($name), $name as i64), )*)* ];
    };
}

/// `__VERBS_ABI_IS_EXTENDED`: the value of `ibv_context.abi_compat` that marks the context as
/// the tail of a `verbs_context`.
pub const __VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `enum ibv_gid_type_sysfs` (private ABI, `ibv_query_gid_type`; not in verbs.h): IB or
/// RoCE v1.
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
/// `enum ibv_gid_type_sysfs`: RoCE v2.
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

// Values rdma-core 45 added: outside [`CONSTANTS`], which the rdma-core 44 header is checked
// against.
/// `enum ibv_access_flags`: flush to global visibility (rdma-core 45).
pub const IBV_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
/// `enum ibv_access_flags`: flush to persistence (rdma-core 45).
pub const IBV_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// `enum ibv_wr_opcode`: RDMA FLUSH (rdma-core 45).
pub const IBV_WR_FLUSH: u32 = 14;

consts! {
    i32 {
        /// `enum ibv_node_type`.
        IBV_NODE_UNKNOWN = -1,
        /// InfiniBand channel adapter (also RoCE NICs).
        IBV_NODE_CA = 1,
        /// Switch.
        IBV_NODE_SWITCH = 2,
        /// Router.
        IBV_NODE_ROUTER = 3,
        /// iWARP NIC.
        IBV_NODE_RNIC = 4,

        /// `enum ibv_rereg_mr_err_code`: the old MR is valid, libibverbs found bad input.
        IBV_REREG_MR_ERR_INPUT = -1,
        /// The MR should not be used: the command failed.
        IBV_REREG_MR_ERR_CMD = -4,
        /// usNIC UDP.
        IBV_NODE_USNIC = 5,
        /// usNIC UDP.
        IBV_NODE_USNIC_UDP = 6,
        /// Unspecified.
        IBV_NODE_UNSPECIFIED = 7,
        /// `enum ibv_transport_type`.
        IBV_TRANSPORT_UNKNOWN = -1,
        /// InfiniBand transport (also RoCE).
        IBV_TRANSPORT_IB = 0,
        /// iWARP.
        IBV_TRANSPORT_IWARP = 1,
        /// usNIC.
        IBV_TRANSPORT_USNIC = 2,
        /// usNIC UDP.
        IBV_TRANSPORT_USNIC_UDP = 3,
        /// Unspecified.
        IBV_TRANSPORT_UNSPECIFIED = 4,
    }

    u32 {
        /// `enum ibv_port_state`: no state change.
        IBV_PORT_NOP = 0,
        /// Link down.
        IBV_PORT_DOWN = PortState::Down as u32,
        /// Initializing.
        IBV_PORT_INIT = 2,
        /// Armed.
        IBV_PORT_ARMED = 3,
        /// Active.
        IBV_PORT_ACTIVE = PortState::Active as u32,
        /// Active, deferred.
        IBV_PORT_ACTIVE_DEFER = 5,

        /// `enum ibv_mtu`: 256 bytes.
        IBV_MTU_256 = Mtu::Mtu256 as u32,
        /// 512 bytes.
        IBV_MTU_512 = Mtu::Mtu512 as u32,
        /// 1024 bytes.
        IBV_MTU_1024 = Mtu::Mtu1024 as u32,
        /// 2048 bytes.
        IBV_MTU_2048 = Mtu::Mtu2048 as u32,
        /// 4096 bytes.
        IBV_MTU_4096 = Mtu::Mtu4096 as u32,

        /// `enum ibv_gid_type`: InfiniBand.
        IBV_GID_TYPE_IB = 0,
        /// RoCE v1.
        IBV_GID_TYPE_ROCE_V1 = 1,
        /// RoCE v2.
        IBV_GID_TYPE_ROCE_V2 = 2,

        /// `enum ibv_atomic_cap`: none.
        IBV_ATOMIC_NONE = 0,
        /// Atomic within the HCA.
        IBV_ATOMIC_HCA = 1,
        /// Global atomics.
        IBV_ATOMIC_GLOB = 2,

        /// `enum ibv_fork_status`.
        IBV_FORK_DISABLED = 0,
        /// Fork support enabled.
        IBV_FORK_ENABLED = 1,
        /// Fork support not needed (the kernel copes).
        IBV_FORK_UNNEEDED = 2,

        /// `enum ibv_qp_type`.
        IBV_QPT_RC = QpType::Rc as u32,
        /// Unreliable connection.
        IBV_QPT_UC = QpType::Uc as u32,
        /// Unreliable datagram.
        IBV_QPT_UD = QpType::Ud as u32,
        /// Raw packet.
        IBV_QPT_RAW_PACKET = 8,
        /// XRC send.
        IBV_QPT_XRC_SEND = 9,
        /// XRC receive.
        IBV_QPT_XRC_RECV = 10,
        /// Driver-specific.
        IBV_QPT_DRIVER = 0xff,

        /// `enum ibv_qp_state`.
        IBV_QPS_RESET = QpState::Reset as u32,
        /// Initialized.
        IBV_QPS_INIT = QpState::Init as u32,
        /// Ready to receive.
        IBV_QPS_RTR = QpState::Rtr as u32,
        /// Ready to send.
        IBV_QPS_RTS = QpState::Rts as u32,
        /// SQ drained.
        IBV_QPS_SQD = QpState::Sqd as u32,
        /// SQ error.
        IBV_QPS_SQE = QpState::Sqe as u32,
        /// Error.
        IBV_QPS_ERR = QpState::Err as u32,
        /// Unknown.
        IBV_QPS_UNKNOWN = 7,

        /// `enum ibv_qp_attr_mask`.
        IBV_QP_STATE = QpAttrMask::STATE.0,
        /// cur_qp_state.
        IBV_QP_CUR_STATE = QpAttrMask::CUR_STATE.0,
        /// en_sqd_async_notify.
        IBV_QP_EN_SQD_ASYNC_NOTIFY = QpAttrMask::EN_SQD_ASYNC_NOTIFY.0,
        /// qp_access_flags.
        IBV_QP_ACCESS_FLAGS = QpAttrMask::ACCESS_FLAGS.0,
        /// pkey_index.
        IBV_QP_PKEY_INDEX = QpAttrMask::PKEY_INDEX.0,
        /// port_num.
        IBV_QP_PORT = QpAttrMask::PORT.0,
        /// qkey.
        IBV_QP_QKEY = QpAttrMask::QKEY.0,
        /// ah_attr.
        IBV_QP_AV = QpAttrMask::AV.0,
        /// path_mtu.
        IBV_QP_PATH_MTU = QpAttrMask::PATH_MTU.0,
        /// timeout.
        IBV_QP_TIMEOUT = QpAttrMask::TIMEOUT.0,
        /// retry_cnt.
        IBV_QP_RETRY_CNT = QpAttrMask::RETRY_CNT.0,
        /// rnr_retry.
        IBV_QP_RNR_RETRY = QpAttrMask::RNR_RETRY.0,
        /// rq_psn.
        IBV_QP_RQ_PSN = QpAttrMask::RQ_PSN.0,
        /// max_rd_atomic.
        IBV_QP_MAX_QP_RD_ATOMIC = QpAttrMask::MAX_QP_RD_ATOMIC.0,
        /// Alternate path.
        IBV_QP_ALT_PATH = QpAttrMask::ALT_PATH.0,
        /// min_rnr_timer.
        IBV_QP_MIN_RNR_TIMER = QpAttrMask::MIN_RNR_TIMER.0,
        /// sq_psn.
        IBV_QP_SQ_PSN = QpAttrMask::SQ_PSN.0,
        /// max_dest_rd_atomic.
        IBV_QP_MAX_DEST_RD_ATOMIC = QpAttrMask::MAX_DEST_RD_ATOMIC.0,
        /// path_mig_state.
        IBV_QP_PATH_MIG_STATE = QpAttrMask::PATH_MIG_STATE.0,
        /// cap.
        IBV_QP_CAP = QpAttrMask::CAP.0,
        /// dest_qp_num.
        IBV_QP_DEST_QPN = QpAttrMask::DEST_QPN.0,
        /// rate_limit.
        IBV_QP_RATE_LIMIT = QpAttrMask::RATE_LIMIT.0,

        /// `enum ibv_qp_init_attr_mask`: pd.
        IBV_QP_INIT_ATTR_PD = 1 << 0,
        /// `enum ibv_srq_init_attr_mask`: `pd` is set.
        IBV_SRQ_INIT_ATTR_PD = 1 << 1,
        /// `enum ibv_srq_type`: an ordinary SRQ.
        IBV_SRQT_BASIC = 0,
        /// `enum ibv_srq_type`: an XRC SRQ (in an XRC domain, with its own CQ).
        IBV_SRQT_XRC = 1,
        /// `enum ibv_srq_type`: a tag-matching SRQ.
        IBV_SRQT_TM = 2,
        /// `enum ibv_srq_init_attr_mask`: `srq_type` is set.
        IBV_SRQ_INIT_ATTR_TYPE = 1 << 0,
        /// `enum ibv_srq_init_attr_mask`: `xrcd` is set.
        IBV_SRQ_INIT_ATTR_XRCD = 1 << 2,
        /// `enum ibv_srq_init_attr_mask`: `cq` is set.
        IBV_SRQ_INIT_ATTR_CQ = 1 << 3,
        /// `enum ibv_srq_init_attr_mask`: `tm_cap` is set.
        IBV_SRQ_INIT_ATTR_TM = 1 << 4,
        /// `enum ibv_ops_wr_opcode`: add a tag.
        IBV_WR_TAG_ADD = 0,
        /// `enum ibv_ops_wr_opcode`: remove a tag.
        IBV_WR_TAG_DEL = 1,
        /// `enum ibv_ops_wr_opcode`: report the unexpected messages handled.
        IBV_WR_TAG_SYNC = 2,
        /// `enum ibv_ops_flags`: complete on the SRQ's CQ.
        IBV_OPS_SIGNALED = 1 << 0,
        /// `enum ibv_ops_flags`: `tm.unexpected_cnt` is valid.
        IBV_OPS_TM_SYNC = 1 << 1,
        /// `enum ibv_tm_cap_flags`: tag matching over RC.
        IBV_TM_CAP_RC = 1 << 0,
        /// `enum ibv_cq_attr_mask`: `moderate` is set (ibv_modify_cq).
        IBV_CQ_ATTR_MODERATE = 1 << 0,
        /// `enum ibv_cq_attr_mask`: the first bit past the known ones.
        IBV_CQ_ATTR_RESERVED = 1 << 1,
        /// `enum ibv_xrcd_init_attr_mask`: `fd` is set.
        IBV_XRCD_INIT_ATTR_FD = 1 << 0,
        /// `enum ibv_xrcd_init_attr_mask`: `oflags` is set.
        IBV_XRCD_INIT_ATTR_OFLAGS = 1 << 1,
        /// `enum ibv_qp_open_attr_mask`: `qp_num` is set.
        IBV_QP_OPEN_ATTR_NUM = 1 << 0,
        /// `enum ibv_qp_open_attr_mask`: `xrcd` is set.
        IBV_QP_OPEN_ATTR_XRCD = 1 << 1,
        /// `enum ibv_qp_open_attr_mask`: `qp_context` is set.
        IBV_QP_OPEN_ATTR_CONTEXT = 1 << 2,
        /// `enum ibv_qp_open_attr_mask`: `qp_type` is set.
        IBV_QP_OPEN_ATTR_TYPE = 1 << 3,
        /// `enum ibv_rate`: 10 Gb/s.
        IBV_RATE_10_GBPS = 3,
        /// xrcd.
        IBV_QP_INIT_ATTR_XRCD = 1 << 1,
        /// create_flags.
        IBV_QP_INIT_ATTR_CREATE_FLAGS = 1 << 2,
        /// max_tso_header.
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER = 1 << 3,
        /// rwq_ind_tbl.
        IBV_QP_INIT_ATTR_IND_TABLE = 1 << 4,
        /// rx_hash_conf.
        IBV_QP_INIT_ATTR_RX_HASH = 1 << 5,
        /// send_ops_flags.
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6,
        /// `enum ibv_qp_create_flags`: the QP does not receive the multicast it sends.
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB = 1 << 1,

        /// `enum ibv_qp_create_send_ops_flags`: `ibv_wr_rdma_write`.
        IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0,
        /// `ibv_wr_rdma_write_imm`.
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM = 1 << 1,
        /// `ibv_wr_send`.
        IBV_QP_EX_WITH_SEND = 1 << 2,
        /// `ibv_wr_send_imm`.
        IBV_QP_EX_WITH_SEND_WITH_IMM = 1 << 3,
        /// `ibv_wr_rdma_read`.
        IBV_QP_EX_WITH_RDMA_READ = 1 << 4,
        /// `ibv_wr_atomic_cmp_swp`.
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP = 1 << 5,
        /// `ibv_wr_atomic_fetch_add`.
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD = 1 << 6,
        /// `ibv_wr_local_inv`.
        IBV_QP_EX_WITH_LOCAL_INV = 1 << 7,
        /// `ibv_wr_bind_mw`.
        IBV_QP_EX_WITH_BIND_MW = 1 << 8,
        /// `ibv_wr_send_inv`.
        IBV_QP_EX_WITH_SEND_WITH_INV = 1 << 9,
        /// `ibv_wr_send_tso`.
        IBV_QP_EX_WITH_TSO = 1 << 10,
        /// `ibv_wr_atomic_write`.
        IBV_QP_EX_WITH_ATOMIC_WRITE = 1 << 12,

        /// `enum ibv_create_cq_wc_flags`: byte_len.
        IBV_WC_EX_WITH_BYTE_LEN = 1 << 0,
        /// imm_data.
        IBV_WC_EX_WITH_IMM = 1 << 1,
        /// qp_num.
        IBV_WC_EX_WITH_QP_NUM = 1 << 2,
        /// src_qp.
        IBV_WC_EX_WITH_SRC_QP = 1 << 3,
        /// slid.
        IBV_WC_EX_WITH_SLID = 1 << 4,
        /// sl.
        IBV_WC_EX_WITH_SL = 1 << 5,
        /// dlid_path_bits.
        IBV_WC_EX_WITH_DLID_PATH_BITS = 1 << 6,
        /// Completion timestamp (HCA clock).
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7,
        /// CVLAN.
        IBV_WC_EX_WITH_CVLAN = 1 << 8,
        /// Flow tag.
        IBV_WC_EX_WITH_FLOW_TAG = 1 << 9,
        /// Tag matching info.
        IBV_WC_EX_WITH_TM_INFO = 1 << 10,
        /// Completion timestamp (wall clock).
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11,
        /// The fields of `ibv_wc` (`IBV_WC_STANDARD_FLAGS`).
        IBV_WC_STANDARD_FLAGS = 0x7f,

        /// `enum ibv_values_mask`: the raw clock (`ibv_query_rt_values_ex`).
        IBV_VALUES_MASK_RAW_CLOCK = 1 << 0,

        /// `enum ibv_cq_init_attr_mask`: flags.
        IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0,
        /// parent_domain.
        IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1,

        /// `enum ibv_parent_domain_init_attr_mask`: alloc and free are given.
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1 << 0,
        /// pd_context is given.
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 1 << 1,

        /// `enum ibv_create_cq_attr_flags`: single-threaded use.
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0,
        /// Ignore overruns.
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,

        /// `enum ibv_rereg_mr_flags`: change the range.
        IBV_REREG_MR_CHANGE_TRANSLATION = 1 << 0,
        /// Change the PD.
        IBV_REREG_MR_CHANGE_PD = 1 << 1,
        /// Change the access flags.
        IBV_REREG_MR_CHANGE_ACCESS = 1 << 2,

        /// `enum ibv_srq_attr_mask`: max_wr.
        IBV_SRQ_MAX_WR = 1 << 0,
        /// srq_limit.
        IBV_SRQ_LIMIT = 1 << 1,

        /// `enum ibv_access_flags`.
        IBV_ACCESS_LOCAL_WRITE = AccessFlags::LOCAL_WRITE.0,
        /// Remote write.
        IBV_ACCESS_REMOTE_WRITE = AccessFlags::REMOTE_WRITE.0,
        /// Remote read.
        IBV_ACCESS_REMOTE_READ = AccessFlags::REMOTE_READ.0,
        /// Remote atomic.
        IBV_ACCESS_REMOTE_ATOMIC = AccessFlags::REMOTE_ATOMIC.0,
        /// Memory window binding.
        IBV_ACCESS_MW_BIND = AccessFlags::MW_BIND.0,
        /// Zero-based addressing.
        IBV_ACCESS_ZERO_BASED = AccessFlags::ZERO_BASED.0,
        /// On-demand paging.
        IBV_ACCESS_ON_DEMAND = AccessFlags::ON_DEMAND.0,
        /// Huge pages hint.
        IBV_ACCESS_HUGETLB = AccessFlags::HUGETLB.0,
        /// Relaxed ordering (optional: ignored where unsupported).
        IBV_ACCESS_RELAXED_ORDERING = AccessFlags::RELAXED_ORDERING.0,
        /// Bits a provider may ignore (`IBV_ACCESS_OPTIONAL_RANGE`).
        IBV_ACCESS_OPTIONAL_RANGE = 0x3ff0_0000,

        /// `enum ibv_wr_opcode`.
        IBV_WR_RDMA_WRITE = WrOpcode::RdmaWrite as u32,
        /// RDMA WRITE with immediate.
        IBV_WR_RDMA_WRITE_WITH_IMM = WrOpcode::RdmaWriteWithImm as u32,
        /// SEND.
        IBV_WR_SEND = WrOpcode::Send as u32,
        /// SEND with immediate.
        IBV_WR_SEND_WITH_IMM = WrOpcode::SendWithImm as u32,
        /// RDMA READ.
        IBV_WR_RDMA_READ = WrOpcode::RdmaRead as u32,
        /// Compare and swap.
        IBV_WR_ATOMIC_CMP_AND_SWP = WrOpcode::AtomicCmpAndSwp as u32,
        /// Fetch and add.
        IBV_WR_ATOMIC_FETCH_AND_ADD = WrOpcode::AtomicFetchAndAdd as u32,
        /// Local invalidate.
        IBV_WR_LOCAL_INV = WrOpcode::LocalInv as u32,
        /// Bind memory window.
        IBV_WR_BIND_MW = WrOpcode::BindMw as u32,
        /// SEND with invalidate.
        IBV_WR_SEND_WITH_INV = WrOpcode::SendWithInv as u32,
        /// TSO.
        IBV_WR_TSO = 10,
        /// Driver-specific.
        IBV_WR_DRIVER1 = 11,
        /// Atomic write.
        IBV_WR_ATOMIC_WRITE = WrOpcode::AtomicWrite as u32,

        /// `enum ibv_send_flags`.
        IBV_SEND_FENCE = SendFlags::FENCE.0,
        /// Generate a completion.
        IBV_SEND_SIGNALED = SendFlags::SIGNALED.0,
        /// Solicited event.
        IBV_SEND_SOLICITED = SendFlags::SOLICITED.0,
        /// Inline data.
        IBV_SEND_INLINE = SendFlags::INLINE.0,
        /// IP checksum offload.
        IBV_SEND_IP_CSUM = SendFlags::IP_CSUM.0,

        /// `enum ibv_wc_status`.
        IBV_WC_SUCCESS = WcStatus::Success as u32,
        /// Local length error.
        IBV_WC_LOC_LEN_ERR = WcStatus::LocLenErr as u32,
        /// Local QP operation error.
        IBV_WC_LOC_QP_OP_ERR = WcStatus::LocQpOpErr as u32,
        /// Local EE context operation error.
        IBV_WC_LOC_EEC_OP_ERR = WcStatus::LocEecOpErr as u32,
        /// Local protection error.
        IBV_WC_LOC_PROT_ERR = WcStatus::LocProtErr as u32,
        /// Flushed.
        IBV_WC_WR_FLUSH_ERR = WcStatus::WrFlushErr as u32,
        /// MW bind error.
        IBV_WC_MW_BIND_ERR = WcStatus::MwBindErr as u32,
        /// Bad response.
        IBV_WC_BAD_RESP_ERR = WcStatus::BadRespErr as u32,
        /// Local access error.
        IBV_WC_LOC_ACCESS_ERR = WcStatus::LocAccessErr as u32,
        /// Remote invalid request.
        IBV_WC_REM_INV_REQ_ERR = WcStatus::RemInvReqErr as u32,
        /// Remote access error.
        IBV_WC_REM_ACCESS_ERR = WcStatus::RemAccessErr as u32,
        /// Remote operational error.
        IBV_WC_REM_OP_ERR = WcStatus::RemOpErr as u32,
        /// Transport retries exceeded.
        IBV_WC_RETRY_EXC_ERR = WcStatus::RetryExcErr as u32,
        /// RNR retries exceeded.
        IBV_WC_RNR_RETRY_EXC_ERR = WcStatus::RnrRetryExcErr as u32,
        /// Local RDD violation.
        IBV_WC_LOC_RDD_VIOL_ERR = WcStatus::LocRddViolErr as u32,
        /// Remote invalid RD request.
        IBV_WC_REM_INV_RD_REQ_ERR = WcStatus::RemInvRdReqErr as u32,
        /// Remote aborted.
        IBV_WC_REM_ABORT_ERR = WcStatus::RemAbortErr as u32,
        /// Invalid EE context number.
        IBV_WC_INV_EECN_ERR = WcStatus::InvEecnErr as u32,
        /// Invalid EE context state.
        IBV_WC_INV_EEC_STATE_ERR = WcStatus::InvEecStateErr as u32,
        /// Fatal.
        IBV_WC_FATAL_ERR = WcStatus::FatalErr as u32,
        /// Response timeout.
        IBV_WC_RESP_TIMEOUT_ERR = WcStatus::RespTimeoutErr as u32,
        /// General error.
        IBV_WC_GENERAL_ERR = WcStatus::GeneralErr as u32,
        /// Tag matching error.
        IBV_WC_TM_ERR = WcStatus::TmErr as u32,
        /// Tag matching rendezvous incomplete.
        IBV_WC_TM_RNDV_INCOMPLETE = WcStatus::TmRndvIncomplete as u32,

        /// `enum ibv_wc_opcode`.
        IBV_WC_SEND = WcOpcode::Send as u32,
        /// RDMA WRITE.
        IBV_WC_RDMA_WRITE = WcOpcode::RdmaWrite as u32,
        /// RDMA READ.
        IBV_WC_RDMA_READ = WcOpcode::RdmaRead as u32,
        /// Compare and swap.
        IBV_WC_COMP_SWAP = WcOpcode::CompSwap as u32,
        /// Fetch and add.
        IBV_WC_FETCH_ADD = WcOpcode::FetchAdd as u32,
        /// MW bind.
        IBV_WC_BIND_MW = WcOpcode::BindMw as u32,
        /// Local invalidate.
        IBV_WC_LOCAL_INV = WcOpcode::LocalInv as u32,
        /// TSO.
        IBV_WC_TSO = 7,
        /// RDMA ATOMIC WRITE.
        IBV_WC_ATOMIC_WRITE = WcOpcode::AtomicWrite as u32,
        /// Receive.
        IBV_WC_RECV = WcOpcode::Recv as u32,
        /// Receive of RDMA WRITE with immediate.
        IBV_WC_RECV_RDMA_WITH_IMM = WcOpcode::RecvRdmaWithImm as u32,
        /// Tag list IBV_WR_TAG_ADD.
        IBV_WC_TM_ADD = WcOpcode::TmAdd as u32,
        /// Tag list IBV_WR_TAG_DEL.
        IBV_WC_TM_DEL = WcOpcode::TmDel as u32,
        /// Tag list IBV_WR_TAG_SYNC.
        IBV_WC_TM_SYNC = WcOpcode::TmSync as u32,
        /// Tagged receive.
        IBV_WC_TM_RECV = WcOpcode::TmRecv as u32,
        /// Receive of a NO_TAG message.
        IBV_WC_TM_NO_TAG = WcOpcode::TmNoTag as u32,

        /// `enum ibv_wc_flags`.
        IBV_WC_GRH = WcFlags::GRH.0,
        /// Immediate data valid.
        IBV_WC_WITH_IMM = WcFlags::WITH_IMM.0,
        /// IP checksum verified.
        IBV_WC_IP_CSUM_OK = WcFlags::IP_CSUM_OK.0,
        /// An rkey was invalidated.
        IBV_WC_WITH_INV = WcFlags::WITH_INV.0,
        /// Tag matching sync request.
        IBV_WC_TM_SYNC_REQ = WcFlags::TM_SYNC_REQ.0,
        /// Tag matching match.
        IBV_WC_TM_MATCH = WcFlags::TM_MATCH.0,
        /// Tag matching data valid.
        IBV_WC_TM_DATA_VALID = WcFlags::TM_DATA_VALID.0,

        /// `enum ibv_event_type`.
        IBV_EVENT_CQ_ERR = EventType::CqErr as u32,
        /// QP fatal.
        IBV_EVENT_QP_FATAL = EventType::QpFatal as u32,
        /// QP request error.
        IBV_EVENT_QP_REQ_ERR = EventType::QpReqErr as u32,
        /// QP access error.
        IBV_EVENT_QP_ACCESS_ERR = EventType::QpAccessErr as u32,
        /// Communication established.
        IBV_EVENT_COMM_EST = EventType::CommEst as u32,
        /// SQ drained.
        IBV_EVENT_SQ_DRAINED = EventType::SqDrained as u32,
        /// Path migrated.
        IBV_EVENT_PATH_MIG = EventType::PathMig as u32,
        /// Path migration error.
        IBV_EVENT_PATH_MIG_ERR = EventType::PathMigErr as u32,
        /// Device fatal.
        IBV_EVENT_DEVICE_FATAL = EventType::DeviceFatal as u32,
        /// Port active.
        IBV_EVENT_PORT_ACTIVE = EventType::PortActive as u32,
        /// Port error.
        IBV_EVENT_PORT_ERR = EventType::PortErr as u32,
        /// LID change.
        IBV_EVENT_LID_CHANGE = EventType::LidChange as u32,
        /// P_Key change.
        IBV_EVENT_PKEY_CHANGE = EventType::PkeyChange as u32,
        /// SM change.
        IBV_EVENT_SM_CHANGE = EventType::SmChange as u32,
        /// SRQ error.
        IBV_EVENT_SRQ_ERR = EventType::SrqErr as u32,
        /// SRQ limit reached.
        IBV_EVENT_SRQ_LIMIT_REACHED = EventType::SrqLimitReached as u32,
        /// Last WQE reached.
        IBV_EVENT_QP_LAST_WQE_REACHED = EventType::QpLastWqeReached as u32,
        /// Client reregister.
        IBV_EVENT_CLIENT_REREGISTER = EventType::ClientReregister as u32,
        /// GID change.
        IBV_EVENT_GID_CHANGE = EventType::GidChange as u32,
        /// WQ fatal.
        IBV_EVENT_WQ_FATAL = EventType::WqFatal as u32,
    }

    u8 {
        /// `IBV_LINK_LAYER_UNSPECIFIED`.
        IBV_LINK_LAYER_UNSPECIFIED = 0,
        /// InfiniBand.
        IBV_LINK_LAYER_INFINIBAND = 1,
        /// Ethernet (RoCE).
        IBV_LINK_LAYER_ETHERNET = 2,
        /// `ibv_port_attr.flags`: address handles need a GRH (every RoCE port).
        IBV_QPF_GRH_REQUIRED = 1,
    }
}
