//! Between the C structs of `<infiniband/verbs.h>` and the emulator core's types
//! (`softroce_emu_core`), both ways: the drop-in `libibverbs.so.1` turns what programs pass
//! into core values and the core's answers into C structs; the libibverbs backend of
//! `softroce-verbs` does the opposite.
//!
//! Only what the C structs say is converted. Object pointers and handles are the caller's
//! business (the drop-in keeps objects of its own, the backend's handles are the pointers), so
//! functions that need them take them as arguments, and values C has no field for (the
//! destination UDP port of an address vector, `DeviceAttr::max_msg_sz` …) are left at their
//! defaults for the caller to fill.

use core::ffi::{c_char, c_int, c_void};
use core::fmt;

use softroce_emu_core::{
    AccessFlags, AhAttr, AhHandle, AtomicTarget, CqHandle, DeviceAttr, EventType, MrHandle, MwBind,
    MwHandle, OdpCaps, PortAttr, PortState, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType,
    RdmaTarget, RecvWr, SendFlags, SendWr, SgList, Sge, SrqAttr, SrqAttrMask, SrqHandle, TmOp,
    TmOpKind, UdTarget, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use softroce_wire::{Gid, Mtu, Psn};

use crate::*;

/// A C value the core has no form for, with the errno a verb reports for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertError {
    /// `EINVAL` (a value C does not define) or `EOPNOTSUPP` (one the emulator lacks).
    pub errno: c_int,
    /// What is wrong, for the caller's message.
    pub why: String,
}

impl ConvertError {
    fn invalid(why: String) -> Self {
        Self {
            errno: libc::EINVAL,
            why,
        }
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for ConvertError {}

/// Copy `s` into a fixed C char array, truncated and NUL-terminated.
pub fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// The string in a fixed C char array: up to its NUL, or all of it when there is none.
pub fn string_from_cstr(src: &[c_char]) -> String {
    let bytes: Vec<u8> = src
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn clamp_i32(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// A negative count (never meaningful) reads as 0.
fn non_negative(v: c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `union ibv_gid` of a GID.
pub fn gid_to_c(g: Gid) -> ibv_gid {
    ibv_gid { raw: g.to_bytes() }
}

/// The GID of a `union ibv_gid`.
pub fn gid_from_c(g: &ibv_gid) -> Gid {
    // SAFETY: every bit pattern is a valid byte array.
    Gid::from_bytes(unsafe { g.raw })
}

/// An `enum ibv_mtu` value, if it is one.
pub fn mtu_from_c(code: u32) -> Option<Mtu> {
    u8::try_from(code).ok().and_then(Mtu::from_code)
}

/// `ibv_query_device`'s answer. The fields the core does not model (EE, raw QPs …) are 0.
pub fn device_attr_to_c(a: &DeviceAttr) -> ibv_device_attr {
    // SAFETY: ibv_device_attr holds integers and a char array: all-zero is valid.
    let mut d: ibv_device_attr = unsafe { core::mem::zeroed() };
    copy_cstr(&mut d.fw_ver, &a.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.sys_image_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    d.max_qp = clamp_i32(a.max_qp);
    d.max_qp_wr = clamp_i32(a.max_qp_wr);
    d.device_cap_flags = a.device_cap_flags;
    d.max_sge = clamp_i32(a.max_sge);
    d.max_sge_rd = clamp_i32(a.max_sge_rd);
    d.max_cq = clamp_i32(a.max_cq);
    d.max_cqe = clamp_i32(a.max_cqe);
    d.max_mr = clamp_i32(a.max_mr);
    d.max_mw = clamp_i32(a.max_mw);
    d.max_pd = clamp_i32(a.max_pd);
    d.max_qp_rd_atom = clamp_i32(a.max_qp_rd_atom);
    d.max_qp_init_rd_atom = clamp_i32(a.max_qp_init_rd_atom);
    d.atomic_cap = a.atomic_cap;
    d.max_ah = clamp_i32(a.max_ah);
    d.max_mcast_grp = clamp_i32(a.max_mcast_grp);
    d.max_mcast_qp_attach = clamp_i32(a.max_mcast_qp_attach);
    d.max_total_mcast_qp_attach = clamp_i32(a.max_total_mcast_qp_attach);
    d.max_srq = clamp_i32(a.max_srq);
    d.max_srq_wr = clamp_i32(a.max_srq_wr);
    d.max_srq_sge = clamp_i32(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = a.local_ca_ack_delay;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

/// The core's device attributes from `ibv_query_device`'s answer. `max_inline_data`,
/// `max_msg_sz`, `num_comp_vectors`, `odp`, `max_dm_size` and the CQ moderation limits are
/// not in the struct: they are 0.
pub fn device_attr_from_c(a: &ibv_device_attr) -> DeviceAttr {
    DeviceAttr {
        fw_ver: string_from_cstr(&a.fw_ver),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: non_negative(a.max_qp),
        max_qp_wr: non_negative(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        device_cap_flags_ex: u64::from(a.device_cap_flags),
        max_sge: non_negative(a.max_sge),
        max_sge_rd: non_negative(a.max_sge_rd),
        max_cq: non_negative(a.max_cq),
        max_cqe: non_negative(a.max_cqe),
        max_mr: non_negative(a.max_mr),
        max_mw: non_negative(a.max_mw),
        // Not in ibv_device_attr (ibv_query_device_ex has them).
        odp: OdpCaps::default(),
        max_dm_size: 0,
        max_pd: non_negative(a.max_pd),
        max_qp_rd_atom: non_negative(a.max_qp_rd_atom),
        max_qp_init_rd_atom: non_negative(a.max_qp_init_rd_atom),
        atomic_cap: a.atomic_cap,
        max_ah: non_negative(a.max_ah),
        max_mcast_grp: non_negative(a.max_mcast_grp),
        max_mcast_qp_attach: non_negative(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: non_negative(a.max_total_mcast_qp_attach),
        max_srq: non_negative(a.max_srq),
        max_srq_wr: non_negative(a.max_srq_wr),
        max_srq_sge: non_negative(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
        max_inline_data: 0,
        max_msg_sz: 0,
        num_comp_vectors: 0,
        // Only ibv_query_device_ex reports a clock; ibv_poll_cq's completions carry none.
        hca_core_clock: 0,
        completion_timestamp_mask: 0,
        max_cq_moderation_count: 0,
        max_cq_moderation_period: 0,
    }
}

/// `ibv_query_port`'s answer. The core models no link: the width, speed and physical state
/// are ones a tool can print (4X at 2.5 Gb/s, LinkUp or Disabled).
pub fn port_attr_to_c(p: &PortAttr) -> ibv_port_attr {
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
        active_width: 2,
        active_speed: 1,
        phys_state: if active { 5 } else { 3 },
        link_layer: if p.link_layer_ethernet {
            IBV_LINK_LAYER_ETHERNET
        } else {
            IBV_LINK_LAYER_INFINIBAND
        },
        // ibv_query_port(3): RoCE ports report that AHs must carry a GRH, as the kernel does.
        flags: if p.link_layer_ethernet {
            IBV_QPF_GRH_REQUIRED
        } else {
            0
        },
        ..Default::default()
    }
}

/// The core's port attributes from `ibv_query_port`'s answer: any state but ACTIVE is down,
/// an MTU that is not an `enum ibv_mtu` reads as 1024.
pub fn port_attr_from_c(p: &ibv_port_attr) -> PortAttr {
    let mtu = |code| mtu_from_c(code).unwrap_or(Mtu::Mtu1024);
    PortAttr {
        state: if p.state == IBV_PORT_ACTIVE {
            PortState::Active
        } else {
            PortState::Down
        },
        max_mtu: mtu(p.max_mtu),
        active_mtu: mtu(p.active_mtu),
        gid_tbl_len: non_negative(p.gid_tbl_len),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        link_layer_ethernet: p.link_layer == IBV_LINK_LAYER_ETHERNET,
    }
}

/// A work completion as `ibv_poll_cq` returns it.
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
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

/// The core's form of a completion from `ibv_poll_cq`. A status the core does not know reads
/// as `IBV_WC_GENERAL_ERR`; an opcode it does not know as `IBV_WC_SEND` (ibv_poll_cq(3): an
/// error completion's opcode is undefined anyway).
pub fn wc_from_c(w: &ibv_wc) -> WorkCompletion {
    WorkCompletion {
        wr_id: w.wr_id,
        status: WcStatus::from_raw(w.status).unwrap_or(WcStatus::GeneralErr),
        opcode: WcOpcode::from_raw(w.opcode).unwrap_or(WcOpcode::Send),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: w.imm_data,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: WcFlags(w.wc_flags),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
        completion_ts: 0,
        tm_tag: 0,
        tm_priv: 0,
    }
}

/// An address vector as C holds it. RoCE has no LIDs or path bits: those are 0 (as every
/// RoCE provider returns them); the static rate is returned as set.
pub fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
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
        static_rate: a.static_rate,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}

/// The core's address vector from C. C has no destination UDP port: `udp_port` is 0 (4791).
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dgid: gid_from_c(&a.grh.dgid),
        flow_label: a.grh.flow_label,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        is_global: a.is_global != 0,
        sl: a.sl,
        port_num: a.port_num,
        static_rate: a.static_rate,
        udp_port: 0,
    }
}

/// `struct ibv_qp_cap`.
pub fn qp_cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The core's queue capacities.
pub fn qp_cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// QP attributes as C holds them. The core models no alternate path: its fields are 0.
pub fn qp_attr_to_c(q: &QpAttr) -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr holds integers and GID unions: all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
    a.qp_state = q.qp_state.raw();
    a.cur_qp_state = q.cur_qp_state.raw();
    a.path_mtu = u32::from(q.path_mtu.code());
    a.path_mig_state = u32::from(q.path_mig_state);
    a.qkey = q.qkey;
    a.rq_psn = q.rq_psn.value();
    a.sq_psn = q.sq_psn.value();
    a.dest_qp_num = q.dest_qp_num;
    a.qp_access_flags = q.qp_access_flags.0;
    a.cap = qp_cap_to_c(&q.cap);
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

/// The attributes `mask` selects (ibv_modify_qp(3) reads no others), refused when an enum
/// field holds a value C does not define. Unselected enum fields keep the core's defaults.
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: QpAttrMask) -> Result<QpAttr, ConvertError> {
    let state = |raw: u32, field: &str| {
        QpState::from_raw(raw).ok_or_else(|| {
            ConvertError::invalid(format!("{field} {raw} is not an enum ibv_qp_state"))
        })
    };
    let mut q = QpAttr::default();
    if mask.contains(QpAttrMask::STATE) {
        q.qp_state = state(a.qp_state, "qp_state")?;
    }
    if mask.contains(QpAttrMask::CUR_STATE) {
        q.cur_qp_state = state(a.cur_qp_state, "cur_qp_state")?;
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        q.path_mtu = mtu_from_c(a.path_mtu).ok_or_else(|| {
            ConvertError::invalid(format!("path_mtu {} is not an enum ibv_mtu", a.path_mtu))
        })?;
    }
    if mask.contains(QpAttrMask::AV) {
        q.ah_attr = ah_attr_from_c(&a.ah_attr);
    }
    q.path_mig_state = u8::try_from(a.path_mig_state).unwrap_or(u8::MAX);
    q.qkey = a.qkey;
    q.rq_psn = Psn::new(a.rq_psn);
    q.sq_psn = Psn::new(a.sq_psn);
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = AccessFlags(a.qp_access_flags);
    q.cap = qp_cap_from_c(&a.cap);
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

/// QP creation attributes as C holds them, with the C objects the core's handles name.
pub fn qp_init_attr_to_c(
    init: &QpInitAttr,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
) -> ibv_qp_init_attr {
    ibv_qp_init_attr {
        qp_context: init.qp_context as usize as *mut c_void,
        send_cq,
        recv_cq,
        srq,
        cap: qp_cap_to_c(&init.cap),
        qp_type: init.qp_type.raw(),
        sq_sig_all: c_int::from(init.sq_sig_all),
    }
}

/// The core's QP creation attributes, with the handles of the C objects `a` names; a QP
/// type the emulator lacks (raw packet, XRC …) is refused with EOPNOTSUPP.
pub fn qp_init_attr_from_c(
    a: &ibv_qp_init_attr,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    srq: Option<SrqHandle>,
) -> Result<QpInitAttr, ConvertError> {
    let qp_type = QpType::from_raw(a.qp_type).ok_or_else(|| ConvertError {
        // A type verbs.h defines that the emulator lacks (RAW_PACKET, DRIVER) is not
        // supported; any other number is invalid (EINVAL, as the kernel).
        errno: if matches!(a.qp_type, IBV_QPT_RAW_PACKET | IBV_QPT_DRIVER) {
            libc::EOPNOTSUPP
        } else {
            libc::EINVAL
        },
        why: format!(
            "QP type {} (the emulator has RC, UC, UD, XRC_SEND and XRC_RECV)",
            a.qp_type
        ),
    })?;
    Ok(QpInitAttr {
        send_cq,
        recv_cq,
        srq,
        cap: qp_cap_from_c(&a.cap),
        qp_type,
        sq_sig_all: a.sq_sig_all != 0,
        qp_context: a.qp_context as u64,
    })
}

/// `struct ibv_srq_attr`.
pub fn srq_attr_to_c(a: &SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// The core's SRQ attributes.
pub fn srq_attr_from_c(a: &ibv_srq_attr) -> SrqAttr {
    SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// An `enum ibv_srq_attr_mask` combination.
pub fn srq_attr_mask_to_c(m: SrqAttrMask) -> c_int {
    let bit = |on: bool, b: u32| if on { b } else { 0 };
    (bit(m.max_wr, IBV_SRQ_MAX_WR) | bit(m.limit, IBV_SRQ_LIMIT)) as c_int
}

/// The core's SRQ attribute mask; bits `enum ibv_srq_attr_mask` does not define are refused.
pub fn srq_attr_mask_from_c(mask: c_int) -> Result<SrqAttrMask, ConvertError> {
    let mask = mask as u32;
    if mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
        return Err(ConvertError::invalid(format!(
            "unknown mask bits {mask:#x}"
        )));
    }
    Ok(SrqAttrMask {
        max_wr: mask & IBV_SRQ_MAX_WR != 0,
        limit: mask & IBV_SRQ_LIMIT != 0,
    })
}

/// `struct ibv_sge`.
pub fn sge_to_c(s: &Sge) -> ibv_sge {
    ibv_sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}

/// The scatter/gather list of a C work request for a queue that takes at most `max_sge`
/// entries. A longer `num_sge` is refused before the list is read, as rxe's and mlx5's
/// providers check it: the array may be shorter than a wild count.
///
/// # Safety
/// `sg_list` must point to `num_sge` readable `ibv_sge` (when `0 < num_sge <= max_sge`).
pub unsafe fn sges_from_c(
    sg_list: *const ibv_sge,
    num_sge: c_int,
    max_sge: u32,
) -> Result<SgList, ConvertError> {
    if num_sge < 0 {
        return Err(ConvertError::invalid(format!(
            "num_sge {num_sge} is negative"
        )));
    }
    if num_sge as u32 > max_sge {
        return Err(ConvertError::invalid(format!(
            "num_sge {num_sge} is more than the queue's {max_sge} (its max_sge at creation)"
        )));
    }
    if num_sge == 0 {
        return Ok(SgList::new());
    }
    if sg_list.is_null() {
        return Err(ConvertError::invalid(format!(
            "num_sge {num_sge} with a NULL sg_list"
        )));
    }
    // SAFETY: the caller guarantees num_sge entries.
    let list = unsafe { core::slice::from_raw_parts(sg_list, num_sge as usize) };
    Ok(list
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

/// The core's form of one C receive work request (its `next` is not followed) for a
/// queue of `max_sge` entries per request.
///
/// # Safety
/// `wr`'s scatter/gather list must be readable.
pub unsafe fn recv_wr_from_c(wr: &ibv_recv_wr, max_sge: u32) -> Result<RecvWr, ConvertError> {
    Ok(RecvWr {
        wr_id: wr.wr_id,
        // SAFETY: forwarded from the caller.
        sg_list: unsafe { sges_from_c(wr.sg_list, wr.num_sge, max_sge) }?,
    })
}

/// The core's form of one `struct ibv_ops_wr` (its `next` is the caller's to follow) for
/// an SRQ of `max_sge` entries per receive.
///
/// # Safety
/// An ADD's `tm.add.sg_list` must hold `tm.add.num_sge` readable entries.
pub unsafe fn tm_op_from_c(wr: &ibv_ops_wr, max_sge: u32) -> Result<TmOp, ConvertError> {
    let kind = match wr.opcode {
        IBV_WR_TAG_ADD => TmOpKind::Add {
            recv_wr_id: wr.tm.add.recv_wr_id,
            // SAFETY: forwarded from the caller.
            sg_list: unsafe { sges_from_c(wr.tm.add.sg_list, wr.tm.add.num_sge, max_sge) }?
                .to_vec(),
            tag: wr.tm.add.tag,
            mask: wr.tm.add.mask,
        },
        IBV_WR_TAG_DEL => TmOpKind::Del {
            handle: wr.tm.handle,
        },
        IBV_WR_TAG_SYNC => TmOpKind::Sync,
        other => {
            return Err(ConvertError::invalid(format!(
                "ibv_ops_wr opcode {other} is not IBV_WR_TAG_ADD, _DEL or _SYNC"
            )));
        }
    };
    let flags = wr.flags as u32;
    if flags & !(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC) != 0 {
        return Err(ConvertError::invalid(format!(
            "ibv_ops_wr flags {flags:#x}: unknown bits"
        )));
    }
    Ok(TmOp {
        wr_id: wr.wr_id,
        kind,
        signaled: flags & IBV_OPS_SIGNALED != 0,
        sync: (flags & IBV_OPS_TM_SYNC != 0).then_some(wr.tm.unexpected_cnt),
        handle: 0,
    })
}

/// Whether the `wr.rdma` member of `ibv_send_wr` carries `op`'s target. `ibv_send_wr` has
/// no field for ATOMIC WRITE's 8 bytes (verbs.h gives them to `ibv_wr_atomic_write` only):
/// through `ibv_post_send` they come from its scatter/gather list, as a WRITE's data does.
fn uses_rdma(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicWrite
    )
}

/// Whether the `wr.atomic` member of `ibv_send_wr` carries `op`'s target.
fn uses_atomic(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
}

/// Whether `op` reads the `invalidate_rkey` member of the `imm_data` union
/// (ibv_post_send(3)).
fn uses_invalidate_rkey(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::SendWithInv | WrOpcode::LocalInv)
}

/// The core's form of a window bind (`ibv_mw_bind_info`, with the new R_Key): `mw` and `mr`
/// are the core's handles of the C window and region (no region: NULL).
pub fn mw_bind_from_c(
    mw: MwHandle,
    mr: Option<MrHandle>,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> MwBind {
    MwBind {
        mw,
        rkey,
        mr,
        addr: info.addr,
        length: info.length,
        access: AccessFlags(info.mw_access_flags),
    }
}

/// The core's form of one C send work request (its `next` is not followed) for a send
/// queue of `max_sge` entries per request. UD QPs read the `wr.ud` member; `ah_handle` names the core AH of its `ibv_ah`, `mw_handle` and
/// `mr_handle` the core window and region of a bind's `ibv_mw` and non-NULL `ibv_mr`.
///
/// # Safety
/// `wr`'s scatter/gather list must be readable.
pub unsafe fn send_wr_from_c(
    wr: &ibv_send_wr,
    qp_type: QpType,
    max_sge: u32,
    ah_handle: impl FnOnce(*mut ibv_ah) -> AhHandle,
    mw_handle: impl FnOnce(*mut ibv_mw) -> MwHandle,
    mr_handle: impl FnOnce(*mut ibv_mr) -> MrHandle,
) -> Result<SendWr, ConvertError> {
    let opcode = WrOpcode::from_raw(wr.opcode).ok_or_else(|| {
        ConvertError::invalid(format!(
            "opcode {} is not supported by the emulator",
            wr.opcode
        ))
    })?;
    let mut out = SendWr::new(wr.wr_id, opcode);
    if !opcode.is_local() {
        // A bind or local invalidate has no scatter/gather list (ibv_post_send(3)): its
        // num_sge is not read.
        // SAFETY: forwarded from the caller.
        out.sg_list = unsafe { sges_from_c(wr.sg_list, wr.num_sge, max_sge) }?;
    }
    out.send_flags = SendFlags(wr.send_flags);
    // One C union: the opcode says which meaning applies, the core reads the one it needs.
    out.imm_data = wr.imm_data;
    out.invalidate_rkey = wr.imm_data;
    if uses_rdma(opcode) {
        // SAFETY: the rdma member is the one these opcodes use.
        let r = unsafe { wr.wr.rdma };
        out.rdma = RdmaTarget {
            remote_addr: r.remote_addr,
            rkey: r.rkey,
        };
    }
    if uses_atomic(opcode) {
        // SAFETY: the atomic member is the one these opcodes use.
        let a = unsafe { wr.wr.atomic };
        out.atomic = AtomicTarget {
            remote_addr: a.remote_addr,
            compare_add: a.compare_add,
            swap: a.swap,
            rkey: a.rkey,
        };
    }
    if opcode == WrOpcode::BindMw {
        // SAFETY: IBV_WR_BIND_MW uses the bind_mw member.
        let b = unsafe { wr.ext.bind_mw };
        if b.mw.is_null() {
            return Err(ConvertError::invalid(
                "IBV_WR_BIND_MW with a NULL bind_mw.mw".into(),
            ));
        }
        let mr = (!b.bind_info.mr.is_null()).then(|| mr_handle(b.bind_info.mr));
        out.bind = Some(Box::new(mw_bind_from_c(
            mw_handle(b.mw),
            mr,
            b.rkey,
            &b.bind_info,
        )));
    }
    if qp_type == QpType::XrcSend {
        // SAFETY: XRC initiator QPs use the xrc member of the qp_type union.
        out.xrc_remote_srqn = unsafe { wr.qp_type.xrc.remote_srqn };
    }
    if qp_type == QpType::Ud {
        // SAFETY: UD QPs use the ud member.
        let ud = unsafe { wr.wr.ud };
        if ud.ah.is_null() {
            return Err(ConvertError::invalid(
                "UD work request without an address handle".into(),
            ));
        }
        out.ud = Some(UdTarget {
            ah: ah_handle(ud.ah),
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        });
    }
    Ok(out)
}

/// The C objects behind core handles, for work requests going to C.
pub trait CObjects {
    /// The `ibv_ah` of an address handle.
    fn ah(&mut self, h: AhHandle) -> *mut ibv_ah;
    /// The `ibv_mw` of a memory window.
    fn mw(&mut self, h: MwHandle) -> *mut ibv_mw;
    /// The `ibv_mr` of a memory region.
    fn mr(&mut self, h: MrHandle) -> *mut ibv_mr;
}

/// One send work request as C holds it, `next`, `sg_list` and `num_sge` unset (see
/// [`WrChain`]); `objects` names the C objects of the core's handles.
pub fn send_wr_to_c(w: &SendWr, objects: &mut impl CObjects) -> ibv_send_wr {
    // SAFETY: ibv_send_wr holds integers, raw pointers and unions of those: all-zero is valid.
    let mut c: ibv_send_wr = unsafe { core::mem::zeroed() };
    c.wr_id = w.wr_id;
    c.opcode = w.opcode.raw();
    c.send_flags = w.send_flags.0;
    c.imm_data = if uses_invalidate_rkey(w.opcode) {
        w.invalidate_rkey
    } else {
        w.imm_data
    };
    if let Some(b) = w.bind.as_deref() {
        c.ext.bind_mw = ibv_send_wr_bind_mw {
            mw: objects.mw(b.mw),
            rkey: b.rkey,
            bind_info: ibv_mw_bind_info {
                mr: b.mr.map_or(core::ptr::null_mut(), |mr| objects.mr(mr)),
                addr: b.addr,
                length: b.length,
                mw_access_flags: b.access.0,
            },
        };
    }
    c.qp_type.xrc.remote_srqn = w.xrc_remote_srqn;
    if let Some(ud) = w.ud {
        c.wr.ud = ibv_send_wr_ud {
            ah: objects.ah(ud.ah),
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        };
    } else if uses_atomic(w.opcode) {
        c.wr.atomic = ibv_send_wr_atomic {
            remote_addr: w.atomic.remote_addr,
            compare_add: w.atomic.compare_add,
            swap: w.atomic.swap,
            rkey: w.atomic.rkey,
        };
    } else if uses_rdma(w.opcode) {
        c.wr.rdma = ibv_send_wr_rdma {
            remote_addr: w.rdma.remote_addr,
            rkey: w.rdma.rkey,
        };
    }
    c
}

/// A C work request with a `next` pointer and a scatter/gather list.
pub trait CWorkRequest: Sized {
    /// The next request, or NULL.
    fn next(&self) -> *mut Self;
    /// Point at the next request.
    fn set_next(&mut self, next: *mut Self);
    /// Point at the scatter/gather list.
    fn set_sg_list(&mut self, list: *mut ibv_sge, num_sge: c_int);
}

impl CWorkRequest for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    fn set_sg_list(&mut self, list: *mut ibv_sge, num_sge: c_int) {
        self.sg_list = list;
        self.num_sge = num_sge;
    }
}

impl CWorkRequest for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    fn set_sg_list(&mut self, list: *mut ibv_sge, num_sge: c_int) {
        self.sg_list = list;
        self.num_sge = num_sge;
    }
}

/// Work requests as the linked C list `ibv_post_send`/`ibv_post_recv` take, owning the
/// memory the list points into (moving the chain keeps the pointers valid: they point into
/// heap buffers that never grow).
#[derive(Debug)]
pub struct WrChain<W> {
    wrs: Vec<W>,
    _sg_lists: Vec<Vec<ibv_sge>>,
}

impl<W: CWorkRequest> WrChain<W> {
    fn link(mut wrs: Vec<W>, sg_lists: Vec<&[Sge]>) -> Self {
        let mut lists: Vec<Vec<ibv_sge>> = sg_lists
            .into_iter()
            .map(|l| l.iter().map(sge_to_c).collect())
            .collect();
        for (w, l) in wrs.iter_mut().zip(lists.iter_mut()) {
            let list = if l.is_empty() {
                core::ptr::null_mut()
            } else {
                l.as_mut_ptr()
            };
            w.set_sg_list(list, l.len() as c_int);
        }
        let base = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            // SAFETY: `i` is in bounds of `wrs`, whose buffer does not move from here on.
            let next = unsafe { base.add(i) };
            wrs[i - 1].set_next(next);
        }
        Self {
            wrs,
            _sg_lists: lists,
        }
    }

    /// The head of the list, NULL when it is empty.
    pub fn first(&mut self) -> *mut W {
        if self.wrs.is_empty() {
            core::ptr::null_mut()
        } else {
            self.wrs.as_mut_ptr()
        }
    }

    /// Which request `bad` (a verb's `bad_wr`) points at; the first when it is none of them.
    pub fn index_of(&self, bad: *const W) -> usize {
        self.wrs
            .iter()
            .position(|w| core::ptr::eq(w, bad))
            .unwrap_or(0)
    }
}

impl WrChain<ibv_recv_wr> {
    /// Receive work requests as a C list.
    pub fn recv(wrs: &[RecvWr]) -> Self {
        let c = wrs
            .iter()
            .map(|w| ibv_recv_wr {
                wr_id: w.wr_id,
                next: core::ptr::null_mut(),
                sg_list: core::ptr::null_mut(),
                num_sge: 0,
            })
            .collect();
        Self::link(c, wrs.iter().map(|w| w.sg_list.as_slice()).collect())
    }
}

impl WrChain<ibv_send_wr> {
    /// Send work requests as a C list; `objects` names the C objects of core handles.
    pub fn send(wrs: &[SendWr], objects: &mut impl CObjects) -> Self {
        let c = wrs.iter().map(|w| send_wr_to_c(w, objects)).collect();
        Self::link(c, wrs.iter().map(|w| w.sg_list.as_slice()).collect())
    }
}

/// What an async event names, as `ibv_async_event.element` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CEventElement {
    /// The `cq`, `qp`, `srq` or `wq` member: the object's address.
    Object(usize),
    /// The `port_num` member.
    Port(u8),
    /// Device events name nothing.
    Device,
}

/// The member of `ibv_async_event.element` an event type uses (ibv_get_async_event(3)).
fn names_port(t: EventType) -> bool {
    matches!(
        t,
        EventType::PortActive
            | EventType::PortErr
            | EventType::LidChange
            | EventType::PkeyChange
            | EventType::SmChange
            | EventType::ClientReregister
            | EventType::GidChange
    )
}

/// An async event as C holds it.
pub fn async_event_to_c(event_type: EventType, element: CEventElement) -> ibv_async_event {
    let element = match element {
        CEventElement::Object(addr) => ibv_async_event_element {
            cq: addr as *mut ibv_cq,
        },
        CEventElement::Port(p) => ibv_async_event_element {
            port_num: c_int::from(p),
        },
        CEventElement::Device => ibv_async_event_element {
            cq: core::ptr::null_mut(),
        },
    };
    ibv_async_event {
        element,
        event_type: event_type.raw(),
    }
}

/// The type and element of a C async event, the element read from the union member its type
/// uses.
pub fn async_event_from_c(
    ev: &ibv_async_event,
) -> Result<(EventType, CEventElement), ConvertError> {
    let t = EventType::from_raw(ev.event_type)
        .ok_or_else(|| ConvertError::invalid(format!("unknown event type {}", ev.event_type)))?;
    let element = if names_port(t) {
        // SAFETY: port events carry the port number.
        CEventElement::Port(u8::try_from(unsafe { ev.element.port_num }).unwrap_or(0))
    } else if t == EventType::DeviceFatal {
        CEventElement::Device
    } else {
        // SAFETY: other events carry an object pointer (all members are pointers).
        CEventElement::Object(unsafe { ev.element.cq } as usize)
    };
    Ok((t, element))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Handles as their own C pointers, as the libibverbs backend keeps them.
    struct Tokens;

    impl CObjects for Tokens {
        fn ah(&mut self, h: AhHandle) -> *mut ibv_ah {
            h.to_raw() as usize as *mut ibv_ah
        }
        fn mw(&mut self, h: MwHandle) -> *mut ibv_mw {
            h.to_raw() as usize as *mut ibv_mw
        }
        fn mr(&mut self, h: MrHandle) -> *mut ibv_mr {
            h.to_raw() as usize as *mut ibv_mr
        }
    }

    /// Both directions agree: what the libibverbs backend posts is what the drop-in reads.
    #[test]
    fn send_work_requests_survive_the_trip_through_c() {
        let ah = AhHandle::from_raw(0x1234_5678);
        for &opcode in WrOpcode::ALL {
            let mut w = SendWr::new(7, opcode);
            w.sg_list = vec![Sge {
                addr: 0x1000,
                length: 64,
                lkey: 5,
            }]
            .into();
            w.send_flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
            let union_value = 0xdead_beef;
            if uses_invalidate_rkey(opcode) {
                w.invalidate_rkey = union_value;
            } else {
                w.imm_data = union_value;
            }
            if uses_rdma(opcode) {
                w.rdma = RdmaTarget {
                    remote_addr: 0x2000,
                    rkey: 9,
                };
            }
            if uses_atomic(opcode) {
                w.atomic = AtomicTarget {
                    remote_addr: 0x3000,
                    compare_add: 1,
                    swap: 2,
                    rkey: 10,
                };
            }
            if opcode.is_local() {
                // No scatter/gather list is read for binds and local invalidates.
                w.sg_list.clear();
            }
            if opcode == WrOpcode::BindMw {
                w.bind = Some(Box::new(MwBind {
                    mw: MwHandle::from_raw(0x4000),
                    rkey: 0x1234_5601,
                    mr: Some(MrHandle::from_raw(0x5000)),
                    addr: 0x6000,
                    length: 0x100,
                    access: AccessFlags::REMOTE_WRITE | AccessFlags::ZERO_BASED,
                }));
            }
            // UD's `wr.ud` shares the union with the RDMA and atomic targets: UD QPs only send.
            for qp_type in [QpType::Rc, QpType::Ud] {
                if !opcode.valid_for(qp_type) {
                    continue;
                }
                let mut w = w.clone();
                if qp_type == QpType::Ud {
                    w.ud = Some(UdTarget {
                        ah,
                        remote_qpn: 0x11,
                        remote_qkey: 0x22,
                    });
                }
                let mut chain = WrChain::send(std::slice::from_ref(&w), &mut Tokens);
                // SAFETY: the chain's head and its SGE list are alive.
                let back = unsafe {
                    send_wr_from_c(
                        &*chain.first(),
                        qp_type,
                        u32::MAX,
                        |p| AhHandle::from_raw(p as usize as u64),
                        |p| MwHandle::from_raw(p as usize as u64),
                        |p| MrHandle::from_raw(p as usize as u64),
                    )
                }
                .unwrap();
                assert_eq!(back.wr_id, w.wr_id);
                assert_eq!(back.opcode, opcode);
                assert_eq!(back.sg_list, w.sg_list);
                assert_eq!(back.send_flags, w.send_flags);
                assert_eq!(back.rdma, w.rdma, "{opcode}");
                assert_eq!(back.atomic, w.atomic, "{opcode}");
                assert_eq!(back.ud, w.ud, "{opcode} on {qp_type}");
                assert_eq!(back.bind, w.bind, "{opcode}");
                let read = if uses_invalidate_rkey(opcode) {
                    back.invalidate_rkey
                } else {
                    back.imm_data
                };
                assert_eq!(read, union_value, "{opcode}");
            }
        }
    }

    #[test]
    fn a_wild_num_sge_is_refused_before_the_list_is_read() {
        // NULL stands for an array far shorter than the count: reading it would fault.
        for n in [3, 100_000, c_int::MAX] {
            // SAFETY: the count is over the queue's 2, so nothing is read.
            let e = unsafe { sges_from_c(core::ptr::null(), n, 2) }.unwrap_err();
            assert_eq!(e.errno, libc::EINVAL);
            assert!(e.why.contains("more than the queue's 2"), "{}", e.why);
        }
        let one = [ibv_sge {
            addr: 0x1000,
            length: 8,
            lkey: 7,
        }];
        // SAFETY: one readable entry.
        let list = unsafe { sges_from_c(one.as_ptr(), 1, 2) }.unwrap();
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn a_chain_links_its_requests_and_finds_the_bad_one() {
        let wrs: Vec<RecvWr> = (0..3)
            .map(|i| RecvWr {
                wr_id: i,
                sg_list: vec![
                    Sge {
                        addr: 0x1000 * i,
                        length: 8,
                        lkey: 1,
                    };
                    i as usize
                ]
                .into(),
            })
            .collect();
        let mut chain = WrChain::recv(&wrs);
        let mut cur = chain.first();
        let mut seen = Vec::new();
        while !cur.is_null() {
            // SAFETY: the chain's requests and SGE lists are alive.
            let w = unsafe { recv_wr_from_c(&*cur, u32::MAX) }.unwrap();
            seen.push(w);
            // SAFETY: as above.
            cur = unsafe { (*cur).next };
        }
        assert_eq!(seen, wrs);
        // SAFETY: an element of the chain.
        let third = unsafe { chain.first().add(2) };
        assert_eq!(chain.index_of(third), 2);
        assert_eq!(chain.index_of(core::ptr::null()), 0);
        assert!(WrChain::recv(&[]).first().is_null());
    }
}
