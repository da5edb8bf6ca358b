//! QPs, SRQs and CQs that rdma_cm makes for an id (`rdma_create_qp`, `rdma_create_srq`,
//! `rdma_create_ep`), and the attributes it moves them through (`rdma_init_qp_attr`), as
//! rdma-core 44's `librdmacm/cma.c` with the kernel's `rdma_init_qp_attr` behind it.

use std::ffi::c_int;

use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::*;

use super::id::{self, CmId};
use crate::objects;

fn is_ud(cm_id: &CmId) -> bool {
    cm_id.c.qp_type == IBV_QPT_UD as c_int
}

fn is_xrc_recv(cm_id: &CmId) -> bool {
    cm_id.c.qp_type == IBV_QPT_XRC_RECV as c_int
}

/// The XRC domain librdmacm keeps per device for its XRC targets and SRQs (`ucma_get_xrcd`:
/// opened on first use, without a file), by context.
static XRCDS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

/// `fork()`: the per-device XRC domains (see [`crate::fork`]).
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    crate::fork::take(&XRCDS, held);
}

fn device_xrcd(cm_id: &CmId) -> Result<*mut ibv_xrcd, c_int> {
    let mut xrcds = XRCDS.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = cm_id.c.verbs as usize;
    if let Some(&(_, x)) = xrcds.iter().find(|(c, _)| *c == ctx) {
        return Ok(x as *mut ibv_xrcd);
    }
    let mut attr = ibv_xrcd_init_attr {
        comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        fd: -1,
        oflags: libc::O_CREAT,
    };
    // SAFETY: the id's context and a complete attribute struct.
    let x = unsafe { objects::vctx_open_xrcd(cm_id.c.verbs, &mut attr) };
    if x.is_null() {
        return Err(crate::ffi::errno());
    }
    xrcds.push((ctx, x as usize));
    Ok(x)
}

/// The last id on the device with context `ctx` went: its XRC domain goes too (librdmacm's
/// ucma_put_device; one still in use stays, forgotten).
pub(crate) fn close_device_xrcd(ctx: *mut ibv_context) {
    let mut xrcds = XRCDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = xrcds.iter().position(|&(c, _)| c == ctx as usize) {
        let (_, x) = xrcds.remove(at);
        drop(xrcds);
        // SAFETY: the XRC domain we opened, forgotten above.
        let _ = unsafe { objects::vctx_close_xrcd(x as *mut ibv_xrcd) };
    }
}

/// The device the id is bound to.
fn device_of(cm_id: &CmId) -> Result<usize, c_int> {
    cm_id.state().device.ok_or(libc::EINVAL)
}

/// The attributes of `qp_state` the connection manager knows for the id's QP, and their
/// mask. Without a connection (or for UD) that is the kernel's `cma_ib_init_qp_attr`: P_Key
/// index, port and either the Q_Key (UD) or no remote access (connected, until the
/// connection says more).
pub(crate) fn unconnected_qp_attr(cm_id: &CmId, attr: &mut ibv_qp_attr) -> Result<c_int, c_int> {
    device_of(cm_id)?;
    attr.pkey_index = 0;
    attr.port_num = cm_id.c.port_num;
    let mut mask = (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) as c_int;
    if is_ud(cm_id) {
        attr.qkey = RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY as c_int;
    } else {
        attr.qp_access_flags = 0;
        mask |= IBV_QP_ACCESS_FLAGS as c_int;
    }
    Ok(mask)
}

/// Moves a new QP as rdma-core does: connected QPs to INIT; UD QPs to RTS (sq_psn 0).
fn initialise_qp(cm_id: &CmId, qp: *mut ibv_qp) -> Result<(), c_int> {
    // SAFETY: ibv_qp_attr is plain data.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_INIT;
    let mask = unconnected_qp_attr(cm_id, &mut attr)?;
    modify(qp, &mut attr, mask)?;
    if is_ud(cm_id) {
        attr.qp_state = IBV_QPS_RTR;
        modify(qp, &mut attr, IBV_QP_STATE as c_int)?;
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = 0;
        modify(qp, &mut attr, (IBV_QP_STATE | IBV_QP_SQ_PSN) as c_int)?;
    }
    Ok(())
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: c_int) -> Result<(), c_int> {
    // SAFETY: a QP of ours and a live attribute struct.
    match unsafe { objects::ibv_modify_qp(qp, attr, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Creates the CQs (with completion channels) the caller did not give: `send`/`recv` are
/// their sizes, 0 for none.
fn create_cqs(cm_id: &mut CmId, send: c_int, recv: c_int) -> Result<(), c_int> {
    let ctx = cm_id.c.verbs;
    let me = std::ptr::from_mut(cm_id).cast::<std::ffi::c_void>();
    let make = |size: c_int| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
        // SAFETY: the id's context.
        let channel = unsafe { objects::ibv_create_comp_channel(ctx) };
        if channel.is_null() {
            return Err(crate::ffi::errno());
        }
        // SAFETY: as above, with a channel of it.
        let cq = unsafe { objects::ibv_create_cq(ctx, size, me, channel, 0) };
        if cq.is_null() {
            let e = crate::ffi::errno();
            // SAFETY: ours, unused.
            unsafe { objects::ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        Ok((channel, cq))
    };
    if recv > 0 && cm_id.c.recv_cq.is_null() {
        let (channel, cq) = make(recv)?;
        cm_id.c.recv_cq_channel = channel.cast();
        cm_id.c.recv_cq = cq.cast();
    }
    if send > 0 && cm_id.c.send_cq.is_null() {
        let (channel, cq) = make(send)?;
        cm_id.c.send_cq_channel = channel.cast();
        cm_id.c.send_cq = cq.cast();
    }
    Ok(())
}

/// Destroys the CQs rdma_cm made for the id (librdmacm's ucma_destroy_cqs: not while an
/// XRC target's SRQ, which they were made for, still uses them).
fn destroy_cqs(cm_id: &mut CmId) {
    if cm_id.c.qp_type == IBV_QPT_XRC_RECV as c_int && !cm_id.c.srq.is_null() {
        return;
    }
    for (cq, channel) in [
        (&mut cm_id.c.send_cq, &mut cm_id.c.send_cq_channel),
        (&mut cm_id.c.recv_cq, &mut cm_id.c.recv_cq_channel),
    ] {
        if !cq.is_null() {
            // SAFETY: a CQ rdma_cm created for this id.
            unsafe { objects::ibv_destroy_cq(cq.cast()) };
            *cq = std::ptr::null_mut();
        }
        if !channel.is_null() {
            // SAFETY: its channel.
            unsafe { objects::ibv_destroy_comp_channel(channel.cast()) };
            *channel = std::ptr::null_mut();
        }
    }
}

pub(crate) fn create_qp_ex(cm_id: &mut CmId, attr: &mut ibv_qp_init_attr_ex) -> Result<(), c_int> {
    if !cm_id.c.qp.is_null() || cm_id.c.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr.pd = cm_id.c.pd;
    } else {
        // SAFETY: the caller's PD.
        if unsafe { (*attr.pd).context } != cm_id.c.verbs {
            return Err(libc::EINVAL);
        }
    }
    if attr.pd.is_null() {
        return Err(libc::EINVAL);
    }
    let mismatched = |ours: *mut std::ffi::c_void, theirs: *mut ibv_cq| {
        !ours.is_null() && !theirs.is_null() && ours != theirs.cast()
    };
    if mismatched(cm_id.c.recv_cq, attr.recv_cq) || mismatched(cm_id.c.send_cq, attr.send_cq) {
        return Err(libc::EINVAL);
    }
    let send = if attr.send_cq.is_null() && cm_id.c.send_cq.is_null() {
        attr.cap.max_send_wr as c_int
    } else {
        0
    };
    let recv = if attr.recv_cq.is_null() && cm_id.c.recv_cq.is_null() {
        attr.cap.max_recv_wr as c_int
    } else {
        0
    };
    create_cqs(cm_id, send, recv)?;
    if attr.send_cq.is_null() {
        attr.send_cq = cm_id.c.send_cq.cast();
    }
    if attr.recv_cq.is_null() {
        attr.recv_cq = cm_id.c.recv_cq.cast();
    }
    if attr.srq.is_null() && !cm_id.c.srq.is_null() {
        attr.srq = cm_id.c.srq.cast();
    }
    if is_xrc_recv(cm_id) && (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null()) {
        attr.xrcd = device_xrcd(cm_id)?;
        attr.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    }
    // SAFETY: the id's context and a complete attribute struct.
    let qp = unsafe { crate::qp_ex::vctx_create_qp_ex(cm_id.c.verbs, attr) };
    if qp.is_null() {
        let e = crate::ffi::errno();
        destroy_cqs(cm_id);
        return Err(if e == 0 { libc::ENOMEM } else { e });
    }
    if let Err(e) = initialise_qp(cm_id, qp) {
        // SAFETY: ours, just created.
        unsafe { objects::ibv_destroy_qp(qp) };
        destroy_cqs(cm_id);
        return Err(e);
    }
    // SAFETY: a QP we created.
    cm_id.c.pd = unsafe { (*qp).pd };
    cm_id.c.qp = qp;
    // librdmacm's init_ece: the id takes the QP's ECE options, and ibv_query_ece on this
    // device has none (EOPNOTSUPP).
    cm_id.state().local_ece = Default::default();
    Ok(())
}

pub(crate) fn create_qp(
    cm_id: &mut CmId,
    pd: *mut ibv_pd,
    attr: &mut ibv_qp_init_attr,
) -> Result<(), c_int> {
    // SAFETY: ibv_qp_init_attr_ex is plain data; its head is ibv_qp_init_attr.
    let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    ex.qp_context = attr.qp_context;
    ex.send_cq = attr.send_cq;
    ex.recv_cq = attr.recv_cq;
    ex.srq = attr.srq;
    ex.cap = attr.cap;
    ex.qp_type = attr.qp_type;
    ex.sq_sig_all = attr.sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = if pd.is_null() { cm_id.c.pd } else { pd };
    let r = create_qp_ex(cm_id, &mut ex);
    // rdma_create_qp(3): "the actual capabilities … will be returned … through the
    // qp_init_attr parameter".
    attr.send_cq = ex.send_cq;
    attr.recv_cq = ex.recv_cq;
    attr.srq = ex.srq;
    attr.cap = ex.cap;
    r
}

pub(crate) fn destroy_qp(cm_id: &mut CmId) {
    // An attached QP cannot be destroyed (EBUSY, the kernel's rule): the id knows its
    // groups and lets go of them first, so the QP does not outlive the call.
    super::mcast::detach_qp(cm_id);
    if !cm_id.c.qp.is_null() {
        // SAFETY: the QP rdma_create_qp made.
        unsafe { objects::ibv_destroy_qp(cm_id.c.qp) };
        cm_id.c.qp = std::ptr::null_mut();
    }
    destroy_cqs(cm_id);
}

pub(crate) fn create_srq(
    cm_id: &mut CmId,
    pd: *mut ibv_pd,
    attr: &mut ibv_srq_init_attr,
) -> Result<(), c_int> {
    if cm_id.c.verbs.is_null() || !cm_id.c.srq.is_null() {
        return Err(libc::EINVAL);
    }
    let pd = if pd.is_null() { cm_id.c.pd } else { pd };
    if pd.is_null() {
        return Err(libc::EINVAL);
    }
    if is_xrc_recv(cm_id) {
        // librdmacm's rdma_create_srq: an XRC target's id gets an XRC SRQ.
        // SAFETY: ibv_srq_init_attr_ex is plain data.
        let mut ex: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        ex.srq_context = attr.srq_context;
        ex.attr = attr.attr;
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        ex.srq_type = IBV_SRQT_XRC;
        ex.pd = pd;
        create_srq_ex(cm_id, &mut ex)?;
        attr.attr = ex.attr;
        return Ok(());
    }
    // SAFETY: a PD of the caller (or ours) and its attribute struct.
    let srq = unsafe { objects::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(crate::ffi::errno());
    }
    // librdmacm's rdma_create_srq_ex: the id keeps its PD; the SRQ's only fills a gap.
    if cm_id.c.pd.is_null() {
        cm_id.c.pd = pd;
    }
    cm_id.c.srq = srq.cast();
    Ok(())
}

pub(crate) fn create_srq_ex(
    cm_id: &mut CmId,
    attr: &mut ibv_srq_init_attr_ex,
) -> Result<(), c_int> {
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && attr.srq_type == IBV_SRQT_XRC {
        return create_xrc_srq(cm_id, attr);
    }
    if attr.srq_type != IBV_SRQT_BASIC {
        return Err(libc::EOPNOTSUPP);
    }
    let pd = if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
        attr.pd
    } else {
        std::ptr::null_mut()
    };
    let mut basic = ibv_srq_init_attr {
        srq_context: attr.srq_context,
        attr: attr.attr,
    };
    create_srq(cm_id, pd, &mut basic)?;
    attr.attr = basic.attr;
    Ok(())
}

/// librdmacm's rdma_create_srq_ex for `IBV_SRQT_XRC`: the id's PD, the device's XRC
/// domain and the id's receive CQ (made here if missing) unless the caller gives them.
fn create_xrc_srq(cm_id: &mut CmId, attr: &mut ibv_srq_init_attr_ex) -> Result<(), c_int> {
    if cm_id.c.verbs.is_null() || !cm_id.c.srq.is_null() {
        return Err(libc::EINVAL);
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.pd = cm_id.c.pd;
        attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null() {
        attr.xrcd = device_xrcd(cm_id)?;
    }
    if attr.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || attr.cq.is_null() {
        create_cqs(cm_id, 0, attr.attr.max_wr as c_int)?;
        attr.cq = cm_id.c.recv_cq.cast();
    }
    attr.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    // SAFETY: the id's context and a complete attribute struct.
    let srq = unsafe { objects::vctx_create_srq_ex(cm_id.c.verbs, attr) };
    if srq.is_null() {
        return Err(crate::ffi::errno());
    }
    if cm_id.c.pd.is_null() {
        cm_id.c.pd = attr.pd;
    }
    cm_id.c.srq = srq.cast();
    Ok(())
}

pub(crate) fn destroy_srq(cm_id: &mut CmId) {
    if !cm_id.c.srq.is_null() {
        // SAFETY: the SRQ rdma_create_srq made.
        unsafe { objects::ibv_destroy_srq(cm_id.c.srq.cast()) };
        cm_id.c.srq = std::ptr::null_mut();
    }
    // As librdmacm's rdma_destroy_srq: the CQs it made go with it.
    destroy_cqs(cm_id);
}

/// `rdma_create_ep`: a synchronous id from `res`, bound (passive) or resolved (active),
/// with a QP for the active side when `qp_init_attr` is given.
///
/// # Safety
///
/// `res` is a valid rdma_addrinfo; `qp_init_attr` NULL or valid.
pub(crate) unsafe fn create_ep(
    res: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> Result<*mut rdma_cm_id, c_int> {
    let p = id::create_id(
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        res.ai_port_space,
    )?;
    let built = (|| {
        let cm_id = id::id(p)?;
        cm_id.c.qp_type = res.ai_qp_type;
        if res.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: the result's source address, NULL or valid.
            let src = unsafe { id::socket_addr_from_c(res.ai_src_addr) }?;
            id::bind(cm_id, src)?;
            // The passive side keeps pd and attributes for rdma_get_request's QPs.
            if !pd.is_null() {
                cm_id.c.pd = pd;
            }
            if !qp_init_attr.is_null() {
                // SAFETY: non-NULL, the caller's.
                let mut attr = unsafe { *qp_init_attr };
                attr.qp_type = res.ai_qp_type as u32;
                cm_id.state().qp_init_attr = Some(attr);
            }
            return Ok(());
        }
        let src = if res.ai_src_addr.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { id::socket_addr_from_c(res.ai_src_addr) }?)
        };
        // SAFETY: the result's destination address.
        let dst = unsafe { id::socket_addr_from_c(res.ai_dst_addr) }?;
        id::resolve_addr(cm_id, src, dst)?;
        // rdma_getaddrinfo(3): ai_route is "routing information ... required as part of
        // connection establishment": librdmacm sets it as RDMA_OPTION_IB_PATH instead of
        // resolving the route.
        if res.ai_route_len != 0 && !res.ai_route.is_null() {
            id::set_ib_path(cm_id, res.ai_route, res.ai_route_len)?;
        } else {
            id::resolve_route(cm_id)?;
        }
        if !qp_init_attr.is_null() {
            // SAFETY: non-NULL, the caller's.
            let attr = unsafe { &mut *qp_init_attr };
            attr.qp_type = res.ai_qp_type as u32;
            create_qp(cm_id, pd, attr)?;
        }
        // "ai_connect data must be transferred as private data, with any user supplied
        // private data following it": kept for the id's rdma_connect.
        if res.ai_connect_len != 0 && !res.ai_connect.is_null() {
            // SAFETY: the result's ai_connect_len bytes.
            let prefix = unsafe {
                std::slice::from_raw_parts(res.ai_connect.cast::<u8>(), res.ai_connect_len)
            };
            cm_id.state().connect_prefix = prefix.to_vec();
        }
        Ok(())
    })();
    match built {
        Ok(()) => Ok(p),
        Err(e) => {
            if let Ok(cm_id) = id::id(p) {
                destroy_qp(cm_id);
            }
            let _ = id::destroy_id(p);
            Err(e)
        }
    }
}
