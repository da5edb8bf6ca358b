//! libibverbs' IBVERBS_1.0 marshalling helpers (`<infiniband/marshall.h>`): conversions
//! between the verbs structs and the kernel's user ABI ones, field by field as rdma-core's
//! `libibverbs/marshall.c` (no kernel involved). A NULL argument does nothing.

use softroce_ibverbs_abi::kern::{ib_user_path_rec, ib_uverbs_ah_attr, ib_uverbs_qp_attr};
use softroce_ibverbs_abi::rdmacm::ibv_sa_path_rec;
use softroce_ibverbs_abi::{ibv_ah_attr, ibv_gid, ibv_qp_attr};

use crate::ffi::guard;

symver_directives!();

fn ah_attr_from_kern(dst: &mut ibv_ah_attr, src: &ib_uverbs_ah_attr) {
    dst.grh.dgid = ibv_gid { raw: src.grh.dgid };
    dst.grh.flow_label = src.grh.flow_label;
    dst.grh.sgid_index = src.grh.sgid_index;
    dst.grh.hop_limit = src.grh.hop_limit;
    dst.grh.traffic_class = src.grh.traffic_class;
    dst.dlid = src.dlid;
    dst.sl = src.sl;
    dst.src_path_bits = src.src_path_bits;
    dst.static_rate = src.static_rate;
    dst.is_global = src.is_global;
    dst.port_num = src.port_num;
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *const ib_uverbs_ah_attr,
) {
    guard("ibv_copy_ah_attr_from_kern", (), || {
        // SAFETY: the caller's structs, or NULL.
        if let (Some(dst), Some(src)) = unsafe { (dst.as_mut(), src.as_ref()) } {
            ah_attr_from_kern(dst, src);
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *const ib_uverbs_qp_attr,
) {
    guard("ibv_copy_qp_attr_from_kern", (), || {
        // SAFETY: the caller's structs, or NULL.
        let (Some(d), Some(s)) = (unsafe { (dst.as_mut(), src.as_ref()) }) else {
            return;
        };
        // As marshall.c: qp_state is not among the fields copied.
        d.cur_qp_state = s.cur_qp_state;
        d.path_mtu = s.path_mtu;
        d.path_mig_state = s.path_mig_state;
        d.qkey = s.qkey;
        d.rq_psn = s.rq_psn;
        d.sq_psn = s.sq_psn;
        d.dest_qp_num = s.dest_qp_num;
        d.qp_access_flags = s.qp_access_flags;
        d.cap.max_send_wr = s.max_send_wr;
        d.cap.max_recv_wr = s.max_recv_wr;
        d.cap.max_send_sge = s.max_send_sge;
        d.cap.max_recv_sge = s.max_recv_sge;
        d.cap.max_inline_data = s.max_inline_data;
        ah_attr_from_kern(&mut d.ah_attr, &s.ah_attr);
        ah_attr_from_kern(&mut d.alt_ah_attr, &s.alt_ah_attr);
        d.pkey_index = s.pkey_index;
        d.alt_pkey_index = s.alt_pkey_index;
        d.en_sqd_async_notify = s.en_sqd_async_notify;
        d.sq_draining = s.sq_draining;
        d.max_rd_atomic = s.max_rd_atomic;
        d.max_dest_rd_atomic = s.max_dest_rd_atomic;
        d.min_rnr_timer = s.min_rnr_timer;
        d.port_num = s.port_num;
        d.timeout = s.timeout;
        d.retry_cnt = s.retry_cnt;
        d.rnr_retry = s.rnr_retry;
        d.alt_port_num = s.alt_port_num;
        d.alt_timeout = s.alt_timeout;
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const ib_user_path_rec,
) {
    guard("ibv_copy_path_rec_from_kern", (), || {
        // SAFETY: the caller's structs, or NULL.
        let (Some(d), Some(s)) = (unsafe { (dst.as_mut(), src.as_ref()) }) else {
            return;
        };
        d.dgid = ibv_gid { raw: s.dgid };
        d.sgid = ibv_gid { raw: s.sgid };
        d.dlid = s.dlid;
        d.slid = s.slid;
        // C's conversions of these unsigned fields to int and to uint8_t.
        d.raw_traffic = s.raw_traffic as i32;
        d.flow_label = s.flow_label;
        d.hop_limit = s.hop_limit;
        d.traffic_class = s.traffic_class;
        d.reversible = s.reversible as i32;
        d.numb_path = s.numb_path;
        d.pkey = s.pkey;
        d.sl = s.sl;
        d.mtu_selector = s.mtu_selector;
        d.mtu = s.mtu as u8;
        d.rate_selector = s.rate_selector;
        d.rate = s.rate;
        d.packet_life_time = s.packet_life_time;
        d.preference = s.preference;
        d.packet_life_time_selector = s.packet_life_time_selector;
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    guard("ibv_copy_path_rec_to_kern", (), || {
        // SAFETY: the caller's structs, or NULL.
        let (Some(d), Some(s)) = (unsafe { (dst.as_mut(), src.as_ref()) }) else {
            return;
        };
        // SAFETY: every bit pattern of a GID is its raw bytes.
        let (dgid, sgid) = unsafe { (s.dgid.raw, s.sgid.raw) };
        d.dgid = dgid;
        d.sgid = sgid;
        d.dlid = s.dlid;
        d.slid = s.slid;
        d.raw_traffic = s.raw_traffic as u32;
        d.flow_label = s.flow_label;
        d.hop_limit = s.hop_limit;
        d.traffic_class = s.traffic_class;
        d.reversible = s.reversible as u32;
        d.numb_path = s.numb_path;
        d.pkey = s.pkey;
        d.sl = s.sl;
        d.mtu_selector = s.mtu_selector;
        d.mtu = u32::from(s.mtu);
        d.rate_selector = s.rate_selector;
        d.rate = s.rate;
        d.packet_life_time = s.packet_life_time;
        d.preference = s.preference;
        d.packet_life_time_selector = s.packet_life_time_selector;
    })
}
