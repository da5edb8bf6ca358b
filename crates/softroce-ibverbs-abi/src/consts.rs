//! Enumerators and flag bits of `<infiniband/verbs.h>` (rdma-core 44), as the plain integers
//! the C enums hold.

macro_rules! consts {
    ($ty:ty; $( $(#[$m:meta])* $name:ident = $value:expr ),* $(,)?) => {
        $( $(#[$m])* pub const $name: $ty = $value; )*
    };
}

/// `__VERBS_ABI_IS_EXTENDED`: the value of `ibv_context.abi_compat` that marks the context as
/// the tail of a `verbs_context`.
pub const __VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

consts! { i32;
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

consts! { u32;
    /// `enum ibv_port_state`: no state change.
    IBV_PORT_NOP = 0,
    /// Link down.
    IBV_PORT_DOWN = 1,
    /// Initializing.
    IBV_PORT_INIT = 2,
    /// Armed.
    IBV_PORT_ARMED = 3,
    /// Active.
    IBV_PORT_ACTIVE = 4,
    /// Active, deferred.
    IBV_PORT_ACTIVE_DEFER = 5,
    /// `enum ibv_mtu`: 256 bytes.
    IBV_MTU_256 = 1,
    /// 512 bytes.
    IBV_MTU_512 = 2,
    /// 1024 bytes.
    IBV_MTU_1024 = 3,
    /// 2048 bytes.
    IBV_MTU_2048 = 4,
    /// 4096 bytes.
    IBV_MTU_4096 = 5,
    /// `enum ibv_gid_type`: InfiniBand.
    IBV_GID_TYPE_IB = 0,
    /// RoCE v1.
    IBV_GID_TYPE_ROCE_V1 = 1,
    /// RoCE v2.
    IBV_GID_TYPE_ROCE_V2 = 2,
    /// `enum ibv_gid_type_sysfs` (private ABI, `ibv_query_gid_type`): IB or RoCE v1.
    IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0,
    /// RoCE v2.
    IBV_GID_TYPE_SYSFS_ROCE_V2 = 1,
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
    /// `enum ibv_qp_type`: reliable connection.
    IBV_QPT_RC = 2,
    /// Unreliable connection.
    IBV_QPT_UC = 3,
    /// Unreliable datagram.
    IBV_QPT_UD = 4,
    /// Raw packet.
    IBV_QPT_RAW_PACKET = 8,
    /// XRC send.
    IBV_QPT_XRC_SEND = 9,
    /// XRC receive.
    IBV_QPT_XRC_RECV = 10,
    /// Driver-specific.
    IBV_QPT_DRIVER = 0xff,
    /// `enum ibv_qp_state`.
    IBV_QPS_RESET = 0,
    /// Initialized.
    IBV_QPS_INIT = 1,
    /// Ready to receive.
    IBV_QPS_RTR = 2,
    /// Ready to send.
    IBV_QPS_RTS = 3,
    /// SQ drained.
    IBV_QPS_SQD = 4,
    /// SQ error.
    IBV_QPS_SQE = 5,
    /// Error.
    IBV_QPS_ERR = 6,
    /// Unknown.
    IBV_QPS_UNKNOWN = 7,
    /// `enum ibv_qp_attr_mask`.
    IBV_QP_STATE = 1 << 0,
    /// cur_qp_state.
    IBV_QP_CUR_STATE = 1 << 1,
    /// en_sqd_async_notify.
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
    /// qp_access_flags.
    IBV_QP_ACCESS_FLAGS = 1 << 3,
    /// pkey_index.
    IBV_QP_PKEY_INDEX = 1 << 4,
    /// port_num.
    IBV_QP_PORT = 1 << 5,
    /// qkey.
    IBV_QP_QKEY = 1 << 6,
    /// ah_attr.
    IBV_QP_AV = 1 << 7,
    /// path_mtu.
    IBV_QP_PATH_MTU = 1 << 8,
    /// timeout.
    IBV_QP_TIMEOUT = 1 << 9,
    /// retry_cnt.
    IBV_QP_RETRY_CNT = 1 << 10,
    /// rnr_retry.
    IBV_QP_RNR_RETRY = 1 << 11,
    /// rq_psn.
    IBV_QP_RQ_PSN = 1 << 12,
    /// max_rd_atomic.
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13,
    /// Alternate path.
    IBV_QP_ALT_PATH = 1 << 14,
    /// min_rnr_timer.
    IBV_QP_MIN_RNR_TIMER = 1 << 15,
    /// sq_psn.
    IBV_QP_SQ_PSN = 1 << 16,
    /// max_dest_rd_atomic.
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
    /// path_mig_state.
    IBV_QP_PATH_MIG_STATE = 1 << 18,
    /// cap.
    IBV_QP_CAP = 1 << 19,
    /// dest_qp_num.
    IBV_QP_DEST_QPN = 1 << 20,
    /// rate_limit.
    IBV_QP_RATE_LIMIT = 1 << 25,
    /// `enum ibv_qp_init_attr_mask`: pd.
    IBV_QP_INIT_ATTR_PD = 1 << 0,
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
    /// `enum ibv_cq_init_attr_mask`: flags.
    IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0,
    /// parent_domain.
    IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1,
    /// `enum ibv_create_cq_attr_flags`: single-threaded use.
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0,
    /// Ignore overruns.
    IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,
    /// `enum ibv_srq_attr_mask`: max_wr.
    IBV_SRQ_MAX_WR = 1 << 0,
    /// srq_limit.
    IBV_SRQ_LIMIT = 1 << 1,
    /// `enum ibv_access_flags`.
    IBV_ACCESS_LOCAL_WRITE = 1,
    /// Remote write.
    IBV_ACCESS_REMOTE_WRITE = 1 << 1,
    /// Remote read.
    IBV_ACCESS_REMOTE_READ = 1 << 2,
    /// Remote atomic.
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3,
    /// Memory window binding.
    IBV_ACCESS_MW_BIND = 1 << 4,
    /// Zero-based addressing.
    IBV_ACCESS_ZERO_BASED = 1 << 5,
    /// On-demand paging.
    IBV_ACCESS_ON_DEMAND = 1 << 6,
    /// Huge pages hint.
    IBV_ACCESS_HUGETLB = 1 << 7,
    /// Flush (persistent memory).
    IBV_ACCESS_FLUSH_GLOBAL = 1 << 8,
    /// Flush (persistent memory).
    IBV_ACCESS_FLUSH_PERSISTENT = 1 << 9,
    /// Relaxed ordering (optional: ignored where unsupported).
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
    /// Bits a provider may ignore (`IBV_ACCESS_OPTIONAL_RANGE`).
    IBV_ACCESS_OPTIONAL_RANGE = 0x3ff0_0000,
    /// `enum ibv_wr_opcode`.
    IBV_WR_RDMA_WRITE = 0,
    /// RDMA WRITE with immediate.
    IBV_WR_RDMA_WRITE_WITH_IMM = 1,
    /// SEND.
    IBV_WR_SEND = 2,
    /// SEND with immediate.
    IBV_WR_SEND_WITH_IMM = 3,
    /// RDMA READ.
    IBV_WR_RDMA_READ = 4,
    /// Compare and swap.
    IBV_WR_ATOMIC_CMP_AND_SWP = 5,
    /// Fetch and add.
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
    /// Local invalidate.
    IBV_WR_LOCAL_INV = 7,
    /// Bind memory window.
    IBV_WR_BIND_MW = 8,
    /// SEND with invalidate.
    IBV_WR_SEND_WITH_INV = 9,
    /// TSO.
    IBV_WR_TSO = 10,
    /// Driver-specific.
    IBV_WR_DRIVER1 = 11,
    /// RDMA FLUSH.
    IBV_WR_FLUSH = 14,
    /// Atomic write.
    IBV_WR_ATOMIC_WRITE = 15,
    /// `enum ibv_send_flags`.
    IBV_SEND_FENCE = 1 << 0,
    /// Generate a completion.
    IBV_SEND_SIGNALED = 1 << 1,
    /// Solicited event.
    IBV_SEND_SOLICITED = 1 << 2,
    /// Inline data.
    IBV_SEND_INLINE = 1 << 3,
    /// IP checksum offload.
    IBV_SEND_IP_CSUM = 1 << 4,
    /// `enum ibv_wc_status`.
    IBV_WC_SUCCESS = 0,
    /// Local length error.
    IBV_WC_LOC_LEN_ERR = 1,
    /// Local QP operation error.
    IBV_WC_LOC_QP_OP_ERR = 2,
    /// Local EE context operation error.
    IBV_WC_LOC_EEC_OP_ERR = 3,
    /// Local protection error.
    IBV_WC_LOC_PROT_ERR = 4,
    /// Flushed.
    IBV_WC_WR_FLUSH_ERR = 5,
    /// MW bind error.
    IBV_WC_MW_BIND_ERR = 6,
    /// Bad response.
    IBV_WC_BAD_RESP_ERR = 7,
    /// Local access error.
    IBV_WC_LOC_ACCESS_ERR = 8,
    /// Remote invalid request.
    IBV_WC_REM_INV_REQ_ERR = 9,
    /// Remote access error.
    IBV_WC_REM_ACCESS_ERR = 10,
    /// Remote operational error.
    IBV_WC_REM_OP_ERR = 11,
    /// Transport retries exceeded.
    IBV_WC_RETRY_EXC_ERR = 12,
    /// RNR retries exceeded.
    IBV_WC_RNR_RETRY_EXC_ERR = 13,
    /// Local RDD violation.
    IBV_WC_LOC_RDD_VIOL_ERR = 14,
    /// Remote invalid RD request.
    IBV_WC_REM_INV_RD_REQ_ERR = 15,
    /// Remote aborted.
    IBV_WC_REM_ABORT_ERR = 16,
    /// Invalid EE context number.
    IBV_WC_INV_EECN_ERR = 17,
    /// Invalid EE context state.
    IBV_WC_INV_EEC_STATE_ERR = 18,
    /// Fatal.
    IBV_WC_FATAL_ERR = 19,
    /// Response timeout.
    IBV_WC_RESP_TIMEOUT_ERR = 20,
    /// General error.
    IBV_WC_GENERAL_ERR = 21,
    /// Tag matching error.
    IBV_WC_TM_ERR = 22,
    /// Tag matching rendezvous incomplete.
    IBV_WC_TM_RNDV_INCOMPLETE = 23,
    /// `enum ibv_wc_opcode`.
    IBV_WC_SEND = 0,
    /// RDMA WRITE.
    IBV_WC_RDMA_WRITE = 1,
    /// RDMA READ.
    IBV_WC_RDMA_READ = 2,
    /// Compare and swap.
    IBV_WC_COMP_SWAP = 3,
    /// Fetch and add.
    IBV_WC_FETCH_ADD = 4,
    /// MW bind.
    IBV_WC_BIND_MW = 5,
    /// Local invalidate.
    IBV_WC_LOCAL_INV = 6,
    /// TSO.
    IBV_WC_TSO = 7,
    /// Receive.
    IBV_WC_RECV = 128,
    /// Receive of RDMA WRITE with immediate.
    IBV_WC_RECV_RDMA_WITH_IMM = 129,
    /// `enum ibv_wc_flags`.
    IBV_WC_GRH = 1 << 0,
    /// Immediate data valid.
    IBV_WC_WITH_IMM = 1 << 1,
    /// IP checksum verified.
    IBV_WC_IP_CSUM_OK = 1 << 2,
    /// An rkey was invalidated.
    IBV_WC_WITH_INV = 1 << 3,
    /// Tag matching sync request.
    IBV_WC_TM_SYNC_REQ = 1 << 4,
    /// Tag matching match.
    IBV_WC_TM_MATCH = 1 << 5,
    /// Tag matching data valid.
    IBV_WC_TM_DATA_VALID = 1 << 6,
    /// `enum ibv_event_type`.
    IBV_EVENT_CQ_ERR = 0,
    /// QP fatal.
    IBV_EVENT_QP_FATAL = 1,
    /// QP request error.
    IBV_EVENT_QP_REQ_ERR = 2,
    /// QP access error.
    IBV_EVENT_QP_ACCESS_ERR = 3,
    /// Communication established.
    IBV_EVENT_COMM_EST = 4,
    /// SQ drained.
    IBV_EVENT_SQ_DRAINED = 5,
    /// Path migrated.
    IBV_EVENT_PATH_MIG = 6,
    /// Path migration error.
    IBV_EVENT_PATH_MIG_ERR = 7,
    /// Device fatal.
    IBV_EVENT_DEVICE_FATAL = 8,
    /// Port active.
    IBV_EVENT_PORT_ACTIVE = 9,
    /// Port error.
    IBV_EVENT_PORT_ERR = 10,
    /// LID change.
    IBV_EVENT_LID_CHANGE = 11,
    /// P_Key change.
    IBV_EVENT_PKEY_CHANGE = 12,
    /// SM change.
    IBV_EVENT_SM_CHANGE = 13,
    /// SRQ error.
    IBV_EVENT_SRQ_ERR = 14,
    /// SRQ limit reached.
    IBV_EVENT_SRQ_LIMIT_REACHED = 15,
    /// Last WQE reached.
    IBV_EVENT_QP_LAST_WQE_REACHED = 16,
    /// Client reregister.
    IBV_EVENT_CLIENT_REREGISTER = 17,
    /// GID change.
    IBV_EVENT_GID_CHANGE = 18,
    /// WQ fatal.
    IBV_EVENT_WQ_FATAL = 19,
}

consts! { u8;
    /// `IBV_LINK_LAYER_UNSPECIFIED`.
    IBV_LINK_LAYER_UNSPECIFIED = 0,
    /// InfiniBand.
    IBV_LINK_LAYER_INFINIBAND = 1,
    /// Ethernet (RoCE).
    IBV_LINK_LAYER_ETHERNET = 2,
}
