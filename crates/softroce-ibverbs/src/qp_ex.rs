//! `ibv_create_qp_ex` and the `ibv_wr_*` send API of `ibv_qp_ex`: work requests are built
//! between `ibv_wr_start` and `ibv_wr_complete`, then posted like `ibv_post_send`'s.

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use softroce_emu::core::{
    AtomicTarget, QpType, RdmaTarget, SendFlags, SendWr, Sge, UdTarget, WrOpcode,
};
use softroce_ibverbs_abi::*;

use crate::ffi::{fail, guard, guard_ptr};
use crate::objects::{
    EmuAh, EmuMr, EmuMw, EmuQp, Object, WrBatch, create_qp, create_xrc_recv_qp, ibv_destroy_qp,
    resolve,
};

/// Send ops the emulator carries out.
const SUPPORTED_SEND_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

/// Each send op flag and the opcode it posts.
const SEND_OPS: &[(u64, WrOpcode)] = &[
    (IBV_QP_EX_WITH_RDMA_WRITE as u64, WrOpcode::RdmaWrite),
    (
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as u64,
        WrOpcode::RdmaWriteWithImm,
    ),
    (IBV_QP_EX_WITH_SEND as u64, WrOpcode::Send),
    (IBV_QP_EX_WITH_SEND_WITH_IMM as u64, WrOpcode::SendWithImm),
    (IBV_QP_EX_WITH_RDMA_READ as u64, WrOpcode::RdmaRead),
    (
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64,
        WrOpcode::AtomicCmpAndSwp,
    ),
    (
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as u64,
        WrOpcode::AtomicFetchAndAdd,
    ),
    (IBV_QP_EX_WITH_SEND_WITH_INV as u64, WrOpcode::SendWithInv),
    (IBV_QP_EX_WITH_BIND_MW as u64, WrOpcode::BindMw),
    (IBV_QP_EX_WITH_LOCAL_INV as u64, WrOpcode::LocalInv),
    (IBV_QP_EX_WITH_ATOMIC_WRITE as u64, WrOpcode::AtomicWrite),
];

impl WrBatch {
    /// Remember the first failure of this batch.
    fn record(&mut self, errno: c_int, why: impl FnOnce() -> String) {
        if self.error.is_none() {
            self.error = Some((errno, why()));
        }
    }

    /// Change the last work request (a setter called before any opcode call is an error).
    fn set_last(&mut self, verb: &str, f: impl FnOnce(&mut SendWr, &mut Vec<Vec<u8>>)) {
        match self.wrs.last_mut() {
            Some(wr) => f(wr, &mut self.inline),
            None => self.record(libc::EINVAL, || {
                format!("{verb} before an opcode (ibv_wr_send, ibv_wr_rdma_write …)")
            }),
        }
    }

    /// Record an operation the emulator does not carry out.
    fn unsupported(&mut self, verb: &str) {
        self.record(libc::EOPNOTSUPP, || {
            format!("{verb} is not supported by the emulator")
        });
    }

    /// Set the last work request's data: a copy, as the caller may reuse its buffers at
    /// once.
    fn set_inline(&mut self, verb: &str, data: Vec<u8>) {
        self.set_last(verb, |w, keep| {
            w.sg_list = smallvec::smallvec![Sge {
                addr: data.as_ptr() as u64,
                length: u32::try_from(data.len()).unwrap_or(u32::MAX),
                lkey: 0,
            }];
            w.send_flags = SendFlags(w.send_flags.0 | IBV_SEND_INLINE);
            // Moving the Vec keeps its heap buffer where the SGE points.
            keep.push(data);
        });
    }
}

fn lock(m: &Mutex<WrBatch>) -> MutexGuard<'_, WrBatch> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Point the `ibv_wr_*` slots of a new extended QP at this module.
fn fill_wr_ops(q: &mut ibv_qp_ex) {
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_send_tso = Some(wr_send_tso);
    q.wr_atomic_write = Some(wr_atomic_write);
}

/// The batch of an extended QP.
///
/// # Safety
/// `qpx` must be an `ibv_qp_ex` from `ibv_qp_to_qp_ex`.
unsafe fn batch<'a>(qpx: *mut ibv_qp_ex) -> &'a Mutex<WrBatch> {
    // SAFETY: such an ibv_qp_ex is the first field of an EmuQp. Only the batch is borrowed:
    // the application writes the other fields (wr_id …).
    unsafe { &*std::ptr::addr_of!((*qpx.cast::<EmuQp>()).batch) }
}

/// The send queue's SGEs and inline bytes per request as created: the setters check the
/// counts and lengths they are given against these before they read the caller's lists.
///
/// # Safety
/// As [`batch`].
unsafe fn send_limits(qpx: *mut ibv_qp_ex) -> (u32, u32) {
    // SAFETY: as documented.
    let cap = unsafe { EmuQp::cap(qpx.cast()) };
    (cap.max_send_sge, cap.max_inline_data)
}

/// Run `f` on the batch of an extended QP.
fn with_batch(verb: &str, qpx: *mut ibv_qp_ex, f: impl FnOnce(&mut WrBatch)) {
    guard(verb, (), || {
        if qpx.is_null() {
            return;
        }
        // SAFETY: the ibv_wr_* entry points are only set on QPs from ibv_create_qp_ex.
        f(&mut lock(unsafe { batch(qpx) }));
    })
}

/// Start a new work request with the `wr_id` and `wr_flags` the application set.
fn new_wr(verb: &str, qpx: *mut ibv_qp_ex, opcode: WrOpcode, fill: impl FnOnce(&mut SendWr)) {
    with_batch(verb, qpx, |b| push_wr(b, qpx, opcode, fill));
}

/// Add a work request of `opcode` with the QP's current `wr_id` and `wr_flags`.
fn push_wr(b: &mut WrBatch, qpx: *mut ibv_qp_ex, opcode: WrOpcode, fill: impl FnOnce(&mut SendWr)) {
    // SAFETY: a QP from ibv_create_qp_ex (the caller's check); the application writes these
    // fields before each builder call: read them as plain values.
    let (wr_id, flags) = unsafe {
        (
            std::ptr::addr_of!((*qpx).wr_id).read(),
            std::ptr::addr_of!((*qpx).wr_flags).read(),
        )
    };
    let mut wr = SendWr::new(wr_id, opcode);
    wr.send_flags = SendFlags(flags);
    fill(&mut wr);
    b.wrs.push(wr);
}

/// Change the last work request.
fn set_last_wr(verb: &str, qpx: *mut ibv_qp_ex, f: impl FnOnce(&mut SendWr, &mut Vec<Vec<u8>>)) {
    with_batch(verb, qpx, |b| b.set_last(verb, f));
}

/// Record an operation the emulator does not carry out; `ibv_wr_complete` fails with it.
fn record_unsupported(verb: &str, qpx: *mut ibv_qp_ex) {
    with_batch(verb, qpx, |b| b.unsupported(verb));
}

/// The QP's `ibv_wr_start` … `ibv_wr_complete` section.
///
/// # Safety
/// `qpx` must be a QP from ibv_create_qp_ex.
unsafe fn building<'a>(qpx: *mut ibv_qp_ex) -> &'a crate::section::Section {
    // SAFETY: as `batch`.
    unsafe { &*std::ptr::addr_of!((*qpx.cast::<EmuQp>()).building) }
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    guard("ibv_wr_start", (), || {
        if qpx.is_null() {
            return;
        }
        // ibv_wr_post(3): "ibv_wr_start() and ibv_wr_complete()/abort() form a per-QP
        // critical section where no other threads can enter".
        // SAFETY: the ibv_wr_* entry points are only set on QPs from ibv_create_qp_ex.
        unsafe { building(qpx) }.enter();
        // SAFETY: as above.
        *lock(unsafe { batch(qpx) }) = WrBatch::default();
    })
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    guard("ibv_wr_abort", (), || {
        if qpx.is_null() {
            return;
        }
        // SAFETY: as in wr_start.
        *lock(unsafe { batch(qpx) }) = WrBatch::default();
        // SAFETY: as above.
        unsafe { building(qpx) }.leave();
    })
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    const VERB: &str = "ibv_wr_complete";
    guard(VERB, libc::EIO, || {
        if qpx.is_null() {
            return fail(VERB, libc::EINVAL, "qp is NULL");
        }
        // SAFETY: as in wr_start.
        let posted = unsafe { post_batch(VERB, qpx) };
        // Posted or not, the section ends here (the batch is gone either way).
        // SAFETY: as above.
        unsafe { building(qpx) }.leave();
        posted
    })
}

/// Posts the batch built since `ibv_wr_start`, all or nothing: 0 or an errno.
///
/// # Safety
/// `qpx` must be a QP from ibv_create_qp_ex.
unsafe fn post_batch(verb: &str, qpx: *mut ibv_qp_ex) -> c_int {
    // SAFETY: as documented.
    let batch = std::mem::take(&mut *lock(unsafe { batch(qpx) }));
    if let Some((errno, why)) = batch.error {
        return fail(verb, errno, why);
    }
    // SAFETY: as above; its ibv_qp is the first member.
    let q = match unsafe { resolve::<EmuQp>(verb, qpx.cast()) } {
        Ok(q) => q,
        Err(e) => return e,
    };
    // SAFETY: inline SGEs point into `batch.inline`, alive until this returns; other SGEs
    // name registered memory.
    match q
        .dev
        .post_send(|h| unsafe { h.post_send_all_or_nothing(q.handle, &batch.wrs) })
    {
        Ok(()) => 0,
        Err(e) => fail(verb, e.error.errno(), e),
    }
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    new_wr("ibv_wr_send", qpx, WrOpcode::Send, |_| {});
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm_data: __be32) {
    new_wr("ibv_wr_send_imm", qpx, WrOpcode::SendWithImm, |w| {
        w.imm_data = imm_data
    });
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, invalidate_rkey: u32) {
    new_wr("ibv_wr_send_inv", qpx, WrOpcode::SendWithInv, |w| {
        w.invalidate_rkey = invalidate_rkey
    });
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    new_wr("ibv_wr_rdma_write", qpx, WrOpcode::RdmaWrite, |w| {
        w.rdma = RdmaTarget { remote_addr, rkey }
    });
}

unsafe extern "C" fn wr_rdma_write_imm(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: __be32,
) {
    new_wr(
        "ibv_wr_rdma_write_imm",
        qpx,
        WrOpcode::RdmaWriteWithImm,
        |w| {
            w.rdma = RdmaTarget { remote_addr, rkey };
            w.imm_data = imm_data;
        },
    );
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    new_wr("ibv_wr_rdma_read", qpx, WrOpcode::RdmaRead, |w| {
        w.rdma = RdmaTarget { remote_addr, rkey }
    });
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    new_wr(
        "ibv_wr_atomic_cmp_swp",
        qpx,
        WrOpcode::AtomicCmpAndSwp,
        |w| {
            w.atomic = AtomicTarget {
                remote_addr,
                compare_add: compare,
                swap,
                rkey,
            }
        },
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    new_wr(
        "ibv_wr_atomic_fetch_add",
        qpx,
        WrOpcode::AtomicFetchAndAdd,
        |w| {
            w.atomic = AtomicTarget {
                remote_addr,
                compare_add: add,
                swap: 0,
                rkey,
            }
        },
    );
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    set_last_wr("ibv_wr_set_sge", qpx, |w, _| {
        w.sg_list = smallvec::smallvec![Sge { addr, length, lkey }]
    });
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    const VERB: &str = "ibv_wr_set_sge_list";
    with_batch(VERB, qpx, |b| {
        let Ok(n) = i32::try_from(num_sge) else {
            return b.unsupported(VERB);
        };
        // SAFETY: the caller passes num_sge readable entries (a count over the queue's is
        // refused before any is read).
        // SAFETY: with_batch runs this for a QP from ibv_create_qp_ex only.
        let (max_sge, _) = unsafe { send_limits(qpx) };
        match unsafe { convert::sges_from_c(sg_list, n, max_sge) } {
            Ok(list) => b.set_last(VERB, |w, _| w.sg_list = list),
            Err(e) => b.record(e.errno, || e.why),
        }
    });
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    const VERB: &str = "ibv_wr_set_inline_data";
    with_batch(VERB, qpx, |b| {
        // SAFETY: with_batch runs this for a QP from ibv_create_qp_ex only.
        let (_, max_inline) = unsafe { send_limits(qpx) };
        if length > max_inline as usize {
            return b.record(libc::EINVAL, || {
                format!(
                    "{VERB}: {length} bytes are more than the QP's max_inline_data {max_inline}"
                )
            });
        }
        let data = if length == 0 || addr.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller passes `length` readable bytes.
            unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), length) }.to_vec()
        };
        b.set_inline(VERB, data);
    });
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    const VERB: &str = "ibv_wr_set_inline_data_list";
    with_batch(VERB, qpx, |b| {
        // SAFETY: with_batch runs this for a QP from ibv_create_qp_ex only.
        let (_, max_inline) = unsafe { send_limits(qpx) };
        let mut data = Vec::new();
        if num_buf > 0 && !buf_list.is_null() {
            // One entry at a time, stopping once the total passes the QP's inline size (as
            // rxe's provider): a wild num_buf is not read past that, nor copied.
            for i in 0..num_buf {
                // SAFETY: the caller passes num_buf readable entries, each naming readable
                // bytes; read only while the total fits.
                let d = unsafe { &*buf_list.add(i) };
                if d.length > (max_inline as usize).saturating_sub(data.len()) {
                    return b.record(libc::EINVAL, || {
                        format!(
                            "{VERB}: the buffers hold more than the QP's max_inline_data {max_inline}"
                        )
                    });
                }
                if !d.addr.is_null() && d.length > 0 {
                    // SAFETY: as above.
                    data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(d.addr.cast::<u8>(), d.length)
                    });
                }
            }
        }
        b.set_inline(VERB, data);
    });
}

unsafe extern "C" fn wr_set_ud_addr(
    qpx: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    const VERB: &str = "ibv_wr_set_ud_addr";
    with_batch(VERB, qpx, |b| {
        if ah.is_null() {
            return b.record(libc::EINVAL, || format!("{VERB}: ah is NULL"));
        }
        // SAFETY: an AH from ibv_create_ah.
        let ah = unsafe { EmuAh::handle(ah.cast()) };
        b.set_last(VERB, |w, _| {
            w.ud = Some(UdTarget {
                ah,
                remote_qpn,
                remote_qkey,
            })
        });
    });
}

/// The peer's XRC SRQ the WR being built is for (an XRC initiator's `qp_type.xrc`).
unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut ibv_qp_ex, remote_srqn: u32) {
    set_last_wr("ibv_wr_set_xrc_srqn", qpx, |w, _| {
        w.xrc_remote_srqn = remote_srqn
    });
}

unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    const VERB: &str = "ibv_wr_bind_mw";
    with_batch(VERB, qpx, |b| {
        if mw.is_null() || bind_info.is_null() {
            return b.record(libc::EINVAL, || format!("{VERB}: mw or bind_info is NULL"));
        }
        // SAFETY: the caller's bind description; a window from ibv_alloc_mw and a region
        // from ibv_reg_mr.
        let bind = unsafe {
            let info = *bind_info;
            let mr = (!info.mr.is_null()).then(|| EmuMr::handle(info.mr.cast()));
            convert::mw_bind_from_c(EmuMw::handle(mw.cast()), mr, rkey, &info)
        };
        // SAFETY: the application wrote these fields before the call.
        let (wr_id, flags) = unsafe {
            (
                std::ptr::addr_of!((*qpx).wr_id).read(),
                std::ptr::addr_of!((*qpx).wr_flags).read(),
            )
        };
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw);
        wr.send_flags = SendFlags(flags);
        wr.bind = Some(Box::new(bind));
        b.wrs.push(wr);
    });
}

unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, invalidate_rkey: u32) {
    new_wr("ibv_wr_local_inv", qpx, WrOpcode::LocalInv, |w| {
        w.invalidate_rkey = invalidate_rkey
    });
}

unsafe extern "C" fn wr_send_tso(qpx: *mut ibv_qp_ex, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    record_unsupported("ibv_wr_send_tso", qpx);
}

/// RDMA ATOMIC WRITE of the 8 bytes at `atomic_wr` (copied now, as rxe's provider does:
/// the caller may reuse them at once) to `remote_addr`, which the responder requires to be
/// 8-byte aligned.
unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    const VERB: &str = "ibv_wr_atomic_write";
    with_batch(VERB, qpx, |b| {
        if atomic_wr.is_null() {
            b.record(libc::EINVAL, || format!("{VERB}: atomic_wr is NULL"));
            return;
        }
        // SAFETY: the caller's 8 bytes (verbs.h: `const void *atomic_wr`), any alignment.
        let data = unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() };
        push_wr(b, qpx, WrOpcode::AtomicWrite, |w| {
            w.rdma = RdmaTarget { remote_addr, rkey }
        });
        b.set_inline(VERB, data.to_vec());
    });
}

/// `verbs_context.create_qp_ex`: what `ibv_create_qp_ex` calls for anything beyond a plain
/// PD (send ops for the `ibv_wr_*` API, zero create flags).
pub(crate) unsafe extern "C" fn vctx_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    const VERB: &str = "ibv_create_qp_ex";
    guard_ptr(VERB, || {
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "qp_init_attr_ex is NULL"));
        }
        // SAFETY: non-NULL from the caller.
        let a = unsafe { &mut *attr };
        let known =
            IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        if a.qp_type == IBV_QPT_XRC_RECV {
            // An XRC target lives in its XRC domain: no PD, CQs, queues or send ops.
            if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    "an XRC target QP needs its XRC domain (IBV_QP_INIT_ATTR_XRCD)",
                ));
            }
            if a.comp_mask & !(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD) != 0 {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    format!(
                        "comp_mask {:#x}: an XRC target QP takes only its XRC domain",
                        a.comp_mask
                    ),
                ));
            }
            // SAFETY: a domain from ibv_open_xrcd, or rejected.
            let qp = unsafe { create_xrc_recv_qp(VERB, context, a) }?;
            a.cap = ibv_qp_cap::default();
            return Ok(qp.cast());
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return Err(fail(VERB, libc::EINVAL, "a PD is required"));
        }
        let create_flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
            a.create_flags
        } else {
            0
        };
        // Blocking one's own multicast is meaningful for UD only (mckey asks for it).
        let block_mcast_lb =
            create_flags == IBV_QP_CREATE_BLOCK_SELF_MCAST_LB && a.qp_type == IBV_QPT_UD;
        if a.comp_mask & !known != 0 || (create_flags != 0 && !block_mcast_lb) {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!(
                    "comp_mask {:#x} / create_flags {:#x}: RSS, TSO and creation flags are not emulated",
                    a.comp_mask, a.create_flags
                ),
            ));
        }
        // SAFETY: a PD from ibv_alloc_pd.
        if unsafe { (*a.pd).context } != context {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the PD belongs to another context",
            ));
        }
        let extended = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        if extended && a.send_ops_flags & !SUPPORTED_SEND_OPS != 0 {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!(
                    "send_ops_flags {:#x}: TSO and unknown send ops are not emulated",
                    a.send_ops_flags & !SUPPORTED_SEND_OPS
                ),
            ));
        }
        let Some(qp_type) = QpType::from_raw(a.qp_type) else {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!("QP type {}", a.qp_type),
            ));
        };
        // ibv_wr_post(3): "If the QP does not support all the requested work request types
        // then QP creation will fail" — the core's opcode table per QP type decides.
        if extended
            && let Some((_, op)) = SEND_OPS
                .iter()
                .find(|(bit, op)| a.send_ops_flags & bit != 0 && !op.valid_for(qp_type))
        {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!("send_ops_flags: {op} is not valid on a {qp_type} QP"),
            ));
        }
        let mut ia = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: PD, CQs and SRQ from this library (checked where possible).
        let r = unsafe { create_qp(VERB, a.pd, &mut ia, extended) };
        a.cap = ia.cap;
        let qp = r?;
        if block_mcast_lb {
            // SAFETY: created above, not handed out yet.
            let q = unsafe { resolve::<EmuQp>(VERB, qp.cast()) }?;
            if let Err(e) = q.dev.with(|h| h.block_multicast_loopback(q.handle)) {
                // SAFETY: ours, not handed out.
                unsafe { ibv_destroy_qp(qp.cast()) };
                return Err(fail(VERB, e.errno(), e));
            }
        }
        if extended {
            // SAFETY: created above, not handed out yet.
            fill_wr_ops(unsafe { &mut (*qp).qpx });
        }
        Ok(qp.cast())
    })
}
