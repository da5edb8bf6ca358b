//! Between the C structs of `verbs.h` and the emulator's types.

use softroce_emu::core::{
    AccessFlags, AhAttr, DeviceAttr, PortAttr, PortState, QpAttr, QpAttrMask, QpState, RecvWr, Sge,
    WorkCompletion,
};
use softroce_ibverbs_abi::*;
use softroce_wire::{Gid, Mtu, Psn};

use crate::ffi::copy_cstr;

/// An all-zero C struct.
pub(crate) fn zeroed<T: Copy>() -> T {
    // SAFETY: only used for the plain-data verbs structs (integers, raw pointers, optional
    // function pointers and unions of those), for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

/// IBV_DEVICE_MEM_WINDOW, MEM_MGT_EXTENSIONS, MEM_WINDOW_TYPE_2A and _2B.
const NOT_EMULATED_CAPS: u32 = (1 << 17) | (1 << 21) | (1 << 23) | (1 << 24);

/// Responder resources, as rxe reports them.
const MAX_RES_RD_ATOM: i32 = 0x3f80;

fn clamp_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

pub(crate) fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let mut d: ibv_device_attr = zeroed();
    copy_cstr(&mut d.fw_ver, &a.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.sys_image_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    // 0: perftest then uses its generic (legacy ibv_post_send) path.
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    d.max_qp = clamp_i32(a.max_qp);
    d.max_qp_wr = clamp_i32(a.max_qp_wr);
    // Memory windows and fast-registration work requests are not emulated.
    d.device_cap_flags = a.device_cap_flags & !NOT_EMULATED_CAPS;
    d.max_sge = clamp_i32(a.max_sge);
    d.max_sge_rd = clamp_i32(a.max_sge_rd);
    d.max_cq = clamp_i32(a.max_cq);
    d.max_cqe = clamp_i32(a.max_cqe);
    d.max_mr = clamp_i32(a.max_mr);
    d.max_pd = clamp_i32(a.max_pd);
    d.max_qp_rd_atom = clamp_i32(a.max_qp_rd_atom);
    d.max_res_rd_atom = MAX_RES_RD_ATOM;
    d.max_qp_init_rd_atom = clamp_i32(a.max_qp_init_rd_atom);
    d.atomic_cap = a.atomic_cap;
    d.max_ah = clamp_i32(a.max_ah);
    d.max_srq = clamp_i32(a.max_srq);
    d.max_srq_wr = clamp_i32(a.max_srq_wr);
    d.max_srq_sge = clamp_i32(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = a.local_ca_ack_delay;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

pub(crate) fn port_attr(p: &PortAttr) -> ibv_port_attr {
    let active = p.state == PortState::Active;
    ibv_port_attr {
        state: p.state as u32,
        max_mtu: u32::from(p.max_mtu.code()),
        active_mtu: u32::from(p.active_mtu.code()),
        gid_tbl_len: clamp_i32(p.gid_tbl_len),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        max_vl_num: 1,
        // 4X at 2.5 Gb/s: some width and speed a tool can print.
        active_width: 2,
        active_speed: 1,
        // LinkUp / Disabled.
        phys_state: if active { 5 } else { 3 },
        link_layer: if p.link_layer_ethernet {
            IBV_LINK_LAYER_ETHERNET
        } else {
            IBV_LINK_LAYER_INFINIBAND
        },
        ..Default::default()
    }
}

pub(crate) fn gid_to_c(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.to_bytes() }
}

pub(crate) fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern is a valid byte array.
    Gid::from_bytes(unsafe { g.raw })
}

pub(crate) fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status.raw(),
        opcode: w.opcode.raw(),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: w.imm_data,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.0,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

pub(crate) fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    let dgid = gid_from_c(&a.grh.dgid);
    let udp_port = if dgid.is_ipv4_mapped() || dgid != Gid::ZERO {
        crate::devices::udp_port_for(dgid.to_ip()).unwrap_or(0)
    } else {
        0
    };
    AhAttr {
        dgid,
        flow_label: a.grh.flow_label,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        is_global: a.is_global != 0,
        sl: a.sl,
        port_num: a.port_num,
        udp_port,
    }
}

pub(crate) fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: gid_to_c(a.dgid),
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: 0,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}

/// The attributes `mask` selects, checked for values the emulator's types cannot hold.
pub(crate) fn qp_attr_from_c(a: &ibv_qp_attr, mask: QpAttrMask) -> Result<QpAttr, String> {
    let mut q = QpAttr::default();
    if mask.contains(QpAttrMask::STATE) {
        q.qp_state = QpState::from_raw(a.qp_state)
            .ok_or_else(|| format!("qp_state {} is not an enum ibv_qp_state", a.qp_state))?;
    }
    if mask.contains(QpAttrMask::CUR_STATE) {
        q.cur_qp_state = QpState::from_raw(a.cur_qp_state).ok_or_else(|| {
            format!(
                "cur_qp_state {} is not an enum ibv_qp_state",
                a.cur_qp_state
            )
        })?;
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        q.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(Mtu::from_code)
            .ok_or_else(|| format!("path_mtu {} is not an enum ibv_mtu", a.path_mtu))?;
    }
    q.path_mig_state = u8::try_from(a.path_mig_state).unwrap_or(u8::MAX);
    q.qkey = a.qkey;
    q.rq_psn = Psn::new(a.rq_psn);
    q.sq_psn = Psn::new(a.sq_psn);
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = AccessFlags(a.qp_access_flags);
    if mask.contains(QpAttrMask::AV) {
        q.ah_attr = ah_attr_from_c(&a.ah_attr);
    }
    q.pkey_index = a.pkey_index;
    q.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.port_num = a.port_num;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    Ok(q)
}

pub(crate) fn qp_attr_to_c(q: &QpAttr) -> ibv_qp_attr {
    let mut a: ibv_qp_attr = zeroed();
    a.qp_state = q.qp_state.raw();
    a.cur_qp_state = q.cur_qp_state.raw();
    a.path_mtu = u32::from(q.path_mtu.code());
    a.path_mig_state = u32::from(q.path_mig_state);
    a.qkey = q.qkey;
    a.rq_psn = q.rq_psn.value();
    a.sq_psn = q.sq_psn.value();
    a.dest_qp_num = q.dest_qp_num;
    a.qp_access_flags = q.qp_access_flags.0;
    a.cap = ibv_qp_cap {
        max_send_wr: q.cap.max_send_wr,
        max_recv_wr: q.cap.max_recv_wr,
        max_send_sge: q.cap.max_send_sge,
        max_recv_sge: q.cap.max_recv_sge,
        max_inline_data: q.cap.max_inline_data,
    };
    a.ah_attr = ah_attr_to_c(&q.ah_attr);
    a.pkey_index = q.pkey_index;
    a.en_sqd_async_notify = u8::from(q.en_sqd_async_notify);
    a.sq_draining = u8::from(q.sq_draining);
    a.max_rd_atomic = q.max_rd_atomic;
    a.max_dest_rd_atomic = q.max_dest_rd_atomic;
    a.min_rnr_timer = q.min_rnr_timer;
    a.port_num = q.port_num;
    a.timeout = q.timeout;
    a.retry_cnt = q.retry_cnt;
    a.rnr_retry = q.rnr_retry;
    a
}

/// The scatter/gather list of a work request.
///
/// # Safety
/// `sg_list` must point to `num_sge` readable `ibv_sge` (when `num_sge > 0`).
pub(crate) unsafe fn sges(sg_list: *const ibv_sge, num_sge: i32) -> Result<Vec<Sge>, String> {
    if num_sge < 0 {
        return Err(format!("num_sge {num_sge} is negative"));
    }
    if num_sge == 0 {
        return Ok(Vec::new());
    }
    if sg_list.is_null() {
        return Err(format!("num_sge {num_sge} with a NULL sg_list"));
    }
    // SAFETY: the caller guarantees num_sge entries.
    let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    Ok(list
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// A receive work request.
///
/// # Safety
/// `wr` must be a valid `ibv_recv_wr` whose list is readable.
pub(crate) unsafe fn recv_wr(wr: &ibv_recv_wr) -> Result<RecvWr, String> {
    Ok(RecvWr {
        wr_id: wr.wr_id,
        // SAFETY: forwarded from the caller.
        sg_list: unsafe { sges(wr.sg_list, wr.num_sge) }?,
    })
}
