//! The kernel's user ABI structs libibverbs' IBVERBS_1.0 marshalling helpers
//! (`ibv_copy_*_kern`, `<infiniband/marshall.h>`) convert from and to: `<rdma/ib_user_verbs.h>`
//! and `<rdma/ib_user_sa.h>`. Layouts checked against those headers like the others.

#![allow(non_camel_case_types)]

use crate::{__be16, __be32};

/// `struct ib_uverbs_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_global_route {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_ah_attr {
    /// The GRH fields.
    pub grh: ib_uverbs_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether the GRH is used.
    pub is_global: u8,
    /// Port number.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_qp_attr {
    /// Attribute mask.
    pub qp_attr_mask: u32,
    /// QP state.
    pub qp_state: u32,
    /// Current QP state.
    pub cur_qp_state: u32,
    /// Path MTU.
    pub path_mtu: u32,
    /// Path migration state.
    pub path_mig_state: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// Access flags.
    pub qp_access_flags: u32,
    /// Primary path.
    pub ah_attr: ib_uverbs_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: ib_uverbs_ah_attr,
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// Send SGEs.
    pub max_send_sge: u32,
    /// Receive SGEs.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD async notification.
    pub en_sqd_async_notify: u8,
    /// SQ draining.
    pub sq_draining: u8,
    /// Outstanding RDMA READs/atomics as initiator.
    pub max_rd_atomic: u8,
    /// ... as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port number.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port number.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Reserved.
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_user_path_rec {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination LID (big-endian).
    pub dlid: __be16,
    /// Source LID (big-endian).
    pub slid: __be16,
    /// Raw traffic.
    pub raw_traffic: u32,
    /// Flow label (big-endian).
    pub flow_label: __be32,
    /// Reversible.
    pub reversible: u32,
    /// Path MTU.
    pub mtu: u32,
    /// P_Key (big-endian).
    pub pkey: __be16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Number of paths.
    pub numb_path: u8,
    /// Service level.
    pub sl: u8,
    /// MTU selector.
    pub mtu_selector: u8,
    /// Rate selector.
    pub rate_selector: u8,
    /// Static rate.
    pub rate: u8,
    /// Packet lifetime selector.
    pub packet_life_time_selector: u8,
    /// Packet lifetime.
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}

pub use crate::layout::kern::{FIELD_OFFSETS, STRUCT_SIZES};
pub use crate::layout::kern_sa::{
    FIELD_OFFSETS as SA_FIELD_OFFSETS, STRUCT_SIZES as SA_STRUCT_SIZES,
};
