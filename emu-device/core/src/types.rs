//! Verbs vocabulary with the libibverbs numeric values, so a C ABI layer can pass them
//! through unchanged.

use core::fmt;

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $( $(#[$vm:meta])* $variant:ident = $value:expr => $cname:literal ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        pub enum $name { $( $(#[$vm])* $variant = $value ),* }

        impl $name {
            /// Every value.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];
            /// From the libibverbs numeric value.
            pub const fn from_raw(raw: u32) -> Option<Self> {
                match raw { $( $value => Some(Self::$variant), )* _ => None }
            }
            /// The libibverbs numeric value.
            pub const fn raw(self) -> u32 { self as u32 }
            /// The libibverbs constant name.
            pub const fn c_name(self) -> &'static str {
                match self { $( Self::$variant => $cname ),* }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.c_name()) }
        }
    };
}

c_enum! {
    /// `enum ibv_qp_state`.
    QpState {
        /// Reset.
        Reset = 0 => "IBV_QPS_RESET",
        /// Initialized.
        Init = 1 => "IBV_QPS_INIT",
        /// Ready to receive.
        Rtr = 2 => "IBV_QPS_RTR",
        /// Ready to send.
        Rts = 3 => "IBV_QPS_RTS",
        /// Send queue drained.
        Sqd = 4 => "IBV_QPS_SQD",
        /// Send queue error.
        Sqe = 5 => "IBV_QPS_SQE",
        /// Error.
        Err = 6 => "IBV_QPS_ERR",
    }
}

c_enum! {
    /// `enum ibv_qp_type` (the types this device supports).
    QpType {
        /// Reliable connection.
        Rc = 2 => "IBV_QPT_RC",
        /// Unreliable connection.
        Uc = 3 => "IBV_QPT_UC",
        /// Unreliable datagram.
        Ud = 4 => "IBV_QPT_UD",
        /// XRC initiator: a send queue whose requests name an XRC SRQ of the peer's XRC
        /// domain; no receive queue.
        XrcSend = 9 => "IBV_QPT_XRC_SEND",
        /// XRC target: receives into the XRC SRQs of its XRC domain; no PD, CQs or queues.
        XrcRecv = 10 => "IBV_QPT_XRC_RECV",
    }
}

c_enum! {
    /// `enum ibv_wr_opcode`.
    WrOpcode {
        /// RDMA WRITE.
        RdmaWrite = 0 => "IBV_WR_RDMA_WRITE",
        /// RDMA WRITE with immediate.
        RdmaWriteWithImm = 1 => "IBV_WR_RDMA_WRITE_WITH_IMM",
        /// SEND.
        Send = 2 => "IBV_WR_SEND",
        /// SEND with immediate.
        SendWithImm = 3 => "IBV_WR_SEND_WITH_IMM",
        /// RDMA READ.
        RdmaRead = 4 => "IBV_WR_RDMA_READ",
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5 => "IBV_WR_ATOMIC_CMP_AND_SWP",
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6 => "IBV_WR_ATOMIC_FETCH_AND_ADD",
        /// Local invalidate.
        LocalInv = 7 => "IBV_WR_LOCAL_INV",
        /// Bind memory window.
        BindMw = 8 => "IBV_WR_BIND_MW",
        /// SEND with invalidate.
        SendWithInv = 9 => "IBV_WR_SEND_WITH_INV",
        /// RDMA ATOMIC WRITE (IBTA 1.5, rxe since Linux 6.2): the WR's 8 bytes of data
        /// stored at `rdma.remote_addr` in one atomic store. RC only.
        AtomicWrite = 15 => "IBV_WR_ATOMIC_WRITE",
    }
}

impl QpType {
    /// Reliable: acknowledged, retried, go-back-N (RC and both XRC halves).
    pub const fn is_reliable(self) -> bool {
        matches!(self, Self::Rc | Self::XrcSend | Self::XrcRecv)
    }
}

impl WrOpcode {
    /// Operations the send queue executes locally, without a packet: bind a memory window,
    /// invalidate an R_Key.
    pub const fn is_local(self) -> bool {
        matches!(self, Self::BindMw | Self::LocalInv)
    }

    /// Whether the QP type may post this opcode (IBTA: UC has no READ/atomics; UD only SEND).
    pub const fn valid_for(self, qp_type: QpType) -> bool {
        match qp_type {
            QpType::Rc => true,
            // XRC has no ATOMIC WRITE opcode (its twins stop at the IBTA 1.4 RC set).
            QpType::XrcSend => !matches!(self, Self::AtomicWrite),
            // An XRC target has no send queue (ibv_create_qp_ex(3)).
            QpType::XrcRecv => false,
            QpType::Uc => matches!(
                self,
                Self::Send
                    | Self::SendWithImm
                    | Self::RdmaWrite
                    | Self::RdmaWriteWithImm
                    | Self::LocalInv
                    | Self::BindMw
            ),
            QpType::Ud => matches!(self, Self::Send | Self::SendWithImm),
        }
    }
}

c_enum! {
    /// `enum ibv_mw_type`.
    MwType {
        /// Type 1: bound with `ibv_bind_mw`, to the PD; invalidated by a zero-length bind.
        Type1 = 1 => "IBV_MW_TYPE_1",
        /// Type 2: bound with an `IBV_WR_BIND_MW` work request, to the QP that posted it;
        /// invalidated by `IBV_WR_LOCAL_INV` or a peer's `IBV_WR_SEND_WITH_INV`.
        Type2 = 2 => "IBV_MW_TYPE_2",
    }
}

c_enum! {
    /// `enum ibv_wc_status`.
    WcStatus {
        /// Success.
        Success = 0 => "IBV_WC_SUCCESS",
        /// Local length error.
        LocLenErr = 1 => "IBV_WC_LOC_LEN_ERR",
        /// Local QP operation error.
        LocQpOpErr = 2 => "IBV_WC_LOC_QP_OP_ERR",
        /// Local EE context operation error.
        LocEecOpErr = 3 => "IBV_WC_LOC_EEC_OP_ERR",
        /// Local protection error.
        LocProtErr = 4 => "IBV_WC_LOC_PROT_ERR",
        /// Work request flushed.
        WrFlushErr = 5 => "IBV_WC_WR_FLUSH_ERR",
        /// Memory window bind error.
        MwBindErr = 6 => "IBV_WC_MW_BIND_ERR",
        /// Bad response.
        BadRespErr = 7 => "IBV_WC_BAD_RESP_ERR",
        /// Local access error.
        LocAccessErr = 8 => "IBV_WC_LOC_ACCESS_ERR",
        /// Remote invalid request.
        RemInvReqErr = 9 => "IBV_WC_REM_INV_REQ_ERR",
        /// Remote access error.
        RemAccessErr = 10 => "IBV_WC_REM_ACCESS_ERR",
        /// Remote operation error.
        RemOpErr = 11 => "IBV_WC_REM_OP_ERR",
        /// Transport retry counter exceeded.
        RetryExcErr = 12 => "IBV_WC_RETRY_EXC_ERR",
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 13 => "IBV_WC_RNR_RETRY_EXC_ERR",
        /// Local RDD violation.
        LocRddViolErr = 14 => "IBV_WC_LOC_RDD_VIOL_ERR",
        /// Remote invalid RD request.
        RemInvRdReqErr = 15 => "IBV_WC_REM_INV_RD_REQ_ERR",
        /// Remote aborted.
        RemAbortErr = 16 => "IBV_WC_REM_ABORT_ERR",
        /// Invalid EE context number.
        InvEecnErr = 17 => "IBV_WC_INV_EECN_ERR",
        /// Invalid EE context state.
        InvEecStateErr = 18 => "IBV_WC_INV_EEC_STATE_ERR",
        /// Fatal error.
        FatalErr = 19 => "IBV_WC_FATAL_ERR",
        /// Response timeout.
        RespTimeoutErr = 20 => "IBV_WC_RESP_TIMEOUT_ERR",
        /// General error.
        GeneralErr = 21 => "IBV_WC_GENERAL_ERR",
        /// A tag list operation failed (ibv_post_srq_ops(3): the tag was consumed first).
        TmErr = 22 => "IBV_WC_TM_ERR",
        /// A rendezvous transfer of a matched tag did not complete.
        TmRndvIncomplete = 23 => "IBV_WC_TM_RNDV_INCOMPLETE",
    }
}

c_enum! {
    /// `enum ibv_wc_opcode`.
    WcOpcode {
        /// SEND completed.
        Send = 0 => "IBV_WC_SEND",
        /// RDMA WRITE completed.
        RdmaWrite = 1 => "IBV_WC_RDMA_WRITE",
        /// RDMA READ completed.
        RdmaRead = 2 => "IBV_WC_RDMA_READ",
        /// Compare and swap completed.
        CompSwap = 3 => "IBV_WC_COMP_SWAP",
        /// Fetch and add completed.
        FetchAdd = 4 => "IBV_WC_FETCH_ADD",
        /// Memory window bound.
        BindMw = 5 => "IBV_WC_BIND_MW",
        /// Local invalidate completed.
        LocalInv = 6 => "IBV_WC_LOCAL_INV",
        /// RDMA ATOMIC WRITE completed.
        AtomicWrite = 9 => "IBV_WC_ATOMIC_WRITE",
        /// A receive completed.
        Recv = 128 => "IBV_WC_RECV",
        /// A receive of RDMA WRITE with immediate completed.
        RecvRdmaWithImm = 129 => "IBV_WC_RECV_RDMA_WITH_IMM",
        /// A tag matching SRQ's `IBV_WR_TAG_ADD` completed.
        TmAdd = 130 => "IBV_WC_TM_ADD",
        /// A tag matching SRQ's `IBV_WR_TAG_DEL` completed.
        TmDel = 131 => "IBV_WC_TM_DEL",
        /// A tag matching SRQ's `IBV_WR_TAG_SYNC` completed.
        TmSync = 132 => "IBV_WC_TM_SYNC",
        /// A tagged message (TMH EAGER or RNDV) was received: into a matched tag's buffer
        /// (`IBV_WC_TM_MATCH`) or, unexpected, into an ordinary SRQ receive.
        TmRecv = 133 => "IBV_WC_TM_RECV",
        /// A message of TMH opcode NO_TAG was received into an ordinary SRQ receive.
        TmNoTag = 134 => "IBV_WC_TM_NO_TAG",
    }
}

impl WcOpcode {
    /// The completion opcode of a send work request.
    pub const fn for_send(op: WrOpcode) -> Self {
        match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => Self::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => Self::Send,
            WrOpcode::RdmaRead => Self::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => Self::CompSwap,
            WrOpcode::AtomicFetchAndAdd => Self::FetchAdd,
            WrOpcode::LocalInv => Self::LocalInv,
            WrOpcode::BindMw => Self::BindMw,
            WrOpcode::AtomicWrite => Self::AtomicWrite,
        }
    }
}

c_enum! {
    /// `enum ibv_event_type`.
    EventType {
        /// CQ overrun.
        CqErr = 0 => "IBV_EVENT_CQ_ERR",
        /// QP fatal error.
        QpFatal = 1 => "IBV_EVENT_QP_FATAL",
        /// Invalid request local work queue error.
        QpReqErr = 2 => "IBV_EVENT_QP_REQ_ERR",
        /// Local access violation error.
        QpAccessErr = 3 => "IBV_EVENT_QP_ACCESS_ERR",
        /// Communication established.
        CommEst = 4 => "IBV_EVENT_COMM_EST",
        /// Send queue drained.
        SqDrained = 5 => "IBV_EVENT_SQ_DRAINED",
        /// Path migrated.
        PathMig = 6 => "IBV_EVENT_PATH_MIG",
        /// Path migration request error.
        PathMigErr = 7 => "IBV_EVENT_PATH_MIG_ERR",
        /// Device fatal error.
        DeviceFatal = 8 => "IBV_EVENT_DEVICE_FATAL",
        /// Port active.
        PortActive = 9 => "IBV_EVENT_PORT_ACTIVE",
        /// Port error.
        PortErr = 10 => "IBV_EVENT_PORT_ERR",
        /// LID changed.
        LidChange = 11 => "IBV_EVENT_LID_CHANGE",
        /// P_Key table changed.
        PkeyChange = 12 => "IBV_EVENT_PKEY_CHANGE",
        /// SM changed.
        SmChange = 13 => "IBV_EVENT_SM_CHANGE",
        /// SRQ error.
        SrqErr = 14 => "IBV_EVENT_SRQ_ERR",
        /// SRQ limit reached.
        SrqLimitReached = 15 => "IBV_EVENT_SRQ_LIMIT_REACHED",
        /// Last WQE reached on an SRQ-attached QP.
        QpLastWqeReached = 16 => "IBV_EVENT_QP_LAST_WQE_REACHED",
        /// Client re-register request.
        ClientReregister = 17 => "IBV_EVENT_CLIENT_REREGISTER",
        /// GID table changed.
        GidChange = 18 => "IBV_EVENT_GID_CHANGE",
        /// Work queue fatal.
        WqFatal = 19 => "IBV_EVENT_WQ_FATAL",
    }
}

macro_rules! c_flags {
    ($(#[$m:meta])* $name:ident : $ty:ty { $( $(#[$vm:meta])* $flag:ident = $value:expr => $cname:literal ),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $ty);

        impl $name {
            $( $(#[$vm])* pub const $flag: Self = Self($value); )*
            /// No flag.
            pub const EMPTY: Self = Self(0);
            const NAMES: &'static [($ty, &'static str)] = &[$(($value, $cname)),*];
            /// Every defined bit.
            pub const ALL_BITS: $ty = 0 $(| $value)*;

            /// Whether every bit of `other` is set.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
            /// Whether any bit of `other` is set.
            pub const fn intersects(self, other: Self) -> bool { self.0 & other.0 != 0 }
            /// Union.
            pub const fn union(self, other: Self) -> Self { Self(self.0 | other.0) }
            /// Bits of `self` not in `other`.
            pub const fn difference(self, other: Self) -> Self { Self(self.0 & !other.0) }
            /// Whether no bit is set.
            pub const fn is_empty(self) -> bool { self.0 == 0 }
            /// Bits that no flag defines.
            pub const fn unknown_bits(self) -> $ty { self.0 & !Self::ALL_BITS }
        }

        impl core::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self { Self(self.0 | rhs.0) }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) { self.0 |= rhs.0; }
        }

        impl fmt::Display for $name {
            /// `NAME|NAME` with the libibverbs constant names, `0` when empty.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut first = true;
                for &(bit, name) in Self::NAMES {
                    if self.0 & bit != 0 {
                        if !first { f.write_str("|")?; }
                        f.write_str(name)?;
                        first = false;
                    }
                }
                let rest = self.unknown_bits();
                if rest != 0 {
                    if !first { f.write_str("|")?; }
                    write!(f, "{rest:#x}")?;
                    first = false;
                }
                if first { f.write_str("0")?; }
                Ok(())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self)
            }
        }
    };
}

c_flags! {
    /// `enum ibv_access_flags`.
    AccessFlags: u32 {
        /// Local write.
        LOCAL_WRITE = 1 => "IBV_ACCESS_LOCAL_WRITE",
        /// Remote write.
        REMOTE_WRITE = 1 << 1 => "IBV_ACCESS_REMOTE_WRITE",
        /// Remote read.
        REMOTE_READ = 1 << 2 => "IBV_ACCESS_REMOTE_READ",
        /// Remote atomic.
        REMOTE_ATOMIC = 1 << 3 => "IBV_ACCESS_REMOTE_ATOMIC",
        /// Memory window binding.
        MW_BIND = 1 << 4 => "IBV_ACCESS_MW_BIND",
        /// Zero-based addressing.
        ZERO_BASED = 1 << 5 => "IBV_ACCESS_ZERO_BASED",
        /// On-demand paging.
        ON_DEMAND = 1 << 6 => "IBV_ACCESS_ON_DEMAND",
        /// Huge pages hint.
        HUGETLB = 1 << 7 => "IBV_ACCESS_HUGETLB",
        /// Relaxed ordering.
        RELAXED_ORDERING = 1 << 20 => "IBV_ACCESS_RELAXED_ORDERING",
    }
}

c_flags! {
    /// `enum ibv_send_flags`.
    SendFlags: u32 {
        /// Fence: wait for prior READ/atomics.
        FENCE = 1 => "IBV_SEND_FENCE",
        /// Generate a completion.
        SIGNALED = 1 << 1 => "IBV_SEND_SIGNALED",
        /// Solicited event.
        SOLICITED = 1 << 2 => "IBV_SEND_SOLICITED",
        /// Inline data.
        INLINE = 1 << 3 => "IBV_SEND_INLINE",
        /// IP checksum offload.
        IP_CSUM = 1 << 4 => "IBV_SEND_IP_CSUM",
    }
}

c_flags! {
    /// `enum ibv_wc_flags`.
    WcFlags: u32 {
        /// A GRH is present (UD).
        GRH = 1 => "IBV_WC_GRH",
        /// Immediate data is valid.
        WITH_IMM = 1 << 1 => "IBV_WC_WITH_IMM",
        /// IP checksum verified.
        IP_CSUM_OK = 1 << 2 => "IBV_WC_IP_CSUM_OK",
        /// An R_Key was invalidated.
        WITH_INV = 1 << 3 => "IBV_WC_WITH_INV",
        /// The tag matching SRQ asks for an `IBV_WR_TAG_SYNC` (its count of unexpected
        /// messages differs from the one software reported).
        TM_SYNC_REQ = 1 << 4 => "IBV_WC_TM_SYNC_REQ",
        /// The message matched a posted tag; `tm_info` is valid.
        TM_MATCH = 1 << 5 => "IBV_WC_TM_MATCH",
        /// The tag's data is in its buffer (EAGER: with the match; RNDV: after the READ).
        TM_DATA_VALID = 1 << 6 => "IBV_WC_TM_DATA_VALID",
    }
}

c_flags! {
    /// `enum ibv_qp_attr_mask`.
    QpAttrMask: u32 {
        /// qp_state.
        STATE = 1 => "IBV_QP_STATE",
        /// cur_qp_state.
        CUR_STATE = 1 << 1 => "IBV_QP_CUR_STATE",
        /// en_sqd_async_notify.
        EN_SQD_ASYNC_NOTIFY = 1 << 2 => "IBV_QP_EN_SQD_ASYNC_NOTIFY",
        /// qp_access_flags.
        ACCESS_FLAGS = 1 << 3 => "IBV_QP_ACCESS_FLAGS",
        /// pkey_index.
        PKEY_INDEX = 1 << 4 => "IBV_QP_PKEY_INDEX",
        /// port_num.
        PORT = 1 << 5 => "IBV_QP_PORT",
        /// qkey.
        QKEY = 1 << 6 => "IBV_QP_QKEY",
        /// ah_attr.
        AV = 1 << 7 => "IBV_QP_AV",
        /// path_mtu.
        PATH_MTU = 1 << 8 => "IBV_QP_PATH_MTU",
        /// timeout.
        TIMEOUT = 1 << 9 => "IBV_QP_TIMEOUT",
        /// retry_cnt.
        RETRY_CNT = 1 << 10 => "IBV_QP_RETRY_CNT",
        /// rnr_retry.
        RNR_RETRY = 1 << 11 => "IBV_QP_RNR_RETRY",
        /// rq_psn.
        RQ_PSN = 1 << 12 => "IBV_QP_RQ_PSN",
        /// max_rd_atomic.
        MAX_QP_RD_ATOMIC = 1 << 13 => "IBV_QP_MAX_QP_RD_ATOMIC",
        /// alt_ah_attr etc.
        ALT_PATH = 1 << 14 => "IBV_QP_ALT_PATH",
        /// min_rnr_timer.
        MIN_RNR_TIMER = 1 << 15 => "IBV_QP_MIN_RNR_TIMER",
        /// sq_psn.
        SQ_PSN = 1 << 16 => "IBV_QP_SQ_PSN",
        /// max_dest_rd_atomic.
        MAX_DEST_RD_ATOMIC = 1 << 17 => "IBV_QP_MAX_DEST_RD_ATOMIC",
        /// path_mig_state.
        PATH_MIG_STATE = 1 << 18 => "IBV_QP_PATH_MIG_STATE",
        /// cap.
        CAP = 1 << 19 => "IBV_QP_CAP",
        /// dest_qp_num.
        DEST_QPN = 1 << 20 => "IBV_QP_DEST_QPN",
        /// rate_limit.
        RATE_LIMIT = 1 << 25 => "IBV_QP_RATE_LIMIT",
    }
}
