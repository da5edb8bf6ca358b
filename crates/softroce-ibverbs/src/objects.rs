//! PDs, MRs, completion channels, CQs, QPs, SRQs, AHs and the data path (`ctx->ops`).
//!
//! Each object is a `#[repr(C)]` struct whose first field is the C struct applications see,
//! so the pointer handed out is also a pointer to ours.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use softroce_emu::Hca;
use softroce_emu::core::{
    AccessFlags, AhHandle, ChannelHandle, CqHandle, MrHandle, PdHandle, QpAttrMask, QpHandle,
    QpType, RecvWr, SendWr, SrqHandle, WcOpcode, WorkCompletion,
};
use softroce_emu::driver::{Device, EventFd};
use softroce_ibverbs_abi::convert::{self, ConvertError};
use softroce_ibverbs_abi::*;

use crate::context::{EmuContext, ctx_of, fd_is_nonblocking};
use crate::devices;
use crate::ffi::{fail, fail_null, guard, set_errno, zeroed};

#[repr(C)]
struct EmuPd {
    pd: ibv_pd,
    handle: PdHandle,
}

#[repr(C)]
struct EmuMr {
    mr: ibv_mr,
    handle: MrHandle,
}

#[repr(C)]
struct EmuChannel {
    ch: ibv_comp_channel,
    handle: ChannelHandle,
    fd: Arc<EventFd>,
}

/// A CQ. Every CQ carries an `ibv_cq_ex` (whose first 128 bytes are the `ibv_cq`); CQs made
/// by `ibv_create_cq_ex` have its polling entry points set.
#[repr(C)]
pub(crate) struct EmuCq {
    pub(crate) cqx: ibv_cq_ex,
    pub(crate) handle: CqHandle,
    /// The completion `ibv_start_poll`/`ibv_next_poll` moved to (`ibv_wc_read_*` read it).
    pub(crate) current: Mutex<Option<WorkCompletion>>,
}

/// A QP. Every QP carries an `ibv_qp_ex` (whose first member is the `ibv_qp`); only QPs
/// made by `ibv_create_qp_ex` with send ops hand it out (`ibv_qp_to_qp_ex`).
#[repr(C)]
pub(crate) struct EmuQp {
    pub(crate) qpx: ibv_qp_ex,
    pub(crate) handle: QpHandle,
    pub(crate) qp_type: QpType,
    /// Created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: the `ibv_wr_*` API is set up.
    pub(crate) extended: bool,
    /// Work requests built with `ibv_wr_*` between `ibv_wr_start` and `ibv_wr_complete`.
    pub(crate) batch: Mutex<crate::qp_ex::Batch>,
}

#[repr(C)]
struct EmuSrq {
    srq: ibv_srq,
    handle: SrqHandle,
}

#[repr(C)]
pub(crate) struct EmuAh {
    ah: ibv_ah,
    pub(crate) handle: AhHandle,
}

/// Object pointers by device handle, for async events (which name objects by handle).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Cq,
    Qp,
    Srq,
}

/// (context address, kind, raw handle) → object address.
type Registry = HashMap<(usize, Kind, u64), usize>;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn register(ctx: &EmuContext, kind: Kind, raw: u64, ptr: usize) {
    lock(&REGISTRY)
        .get_or_insert_with(HashMap::new)
        .insert((std::ptr::from_ref(ctx) as usize, kind, raw), ptr);
}

fn unregister(ctx: &EmuContext, kind: Kind, raw: u64) {
    if let Some(m) = lock(&REGISTRY).as_mut() {
        m.remove(&(std::ptr::from_ref(ctx) as usize, kind, raw));
    }
}

fn lookup(ctx: &EmuContext, kind: Kind, raw: u64) -> usize {
    lock(&REGISTRY)
        .as_ref()
        .and_then(|m| {
            m.get(&(std::ptr::from_ref(ctx) as usize, kind, raw))
                .copied()
        })
        .unwrap_or(0)
}

pub(crate) fn cq_ptr(ctx: &EmuContext, h: CqHandle) -> usize {
    lookup(ctx, Kind::Cq, h.to_raw())
}

pub(crate) fn qp_ptr(ctx: &EmuContext, h: QpHandle) -> usize {
    lookup(ctx, Kind::Qp, h.to_raw())
}

pub(crate) fn srq_ptr(ctx: &EmuContext, h: SrqHandle) -> usize {
    lookup(ctx, Kind::Srq, h.to_raw())
}

/// Fill the data-path entry points the inline wrappers of verbs.h call.
pub(crate) fn fill_ops(ops: &mut ibv_context_ops) {
    ops.poll_cq = Some(op_poll_cq);
    ops.req_notify_cq = Some(op_req_notify_cq);
    ops.post_send = Some(op_post_send);
    ops.post_recv = Some(op_post_recv);
    ops.post_srq_recv = Some(op_post_srq_recv);
}

/// Run a verb on the device without waking the engine (nothing it does changes timers), for
/// the polling hot path.
pub(crate) fn peek<R>(dev: &Device, f: impl FnOnce(&mut Hca) -> R) -> Option<R> {
    let mut f = Some(f);
    dev.wait_for(Duration::ZERO, |h| f.take().map(|f| f(h)))
}

/// Resolve `(context, device)` of an object's context pointer, or return the errno.
macro_rules! ctx_dev {
    ($verb:expr, $ctxptr:expr) => {{
        let ctx_ptr: *mut ibv_context = $ctxptr;
        // SAFETY: the object's context field, set by us at creation.
        let ctx = match unsafe { ctx_of($verb, ctx_ptr) } {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        match ctx.device($verb) {
            Ok(d) => (ctx, d),
            Err(e) => return Err(e),
        }
    }};
}

/// Report a C value the core has no form for.
fn fail_convert(verb: &str, e: ConvertError) -> c_int {
    fail(verb, e.errno, e.why)
}

/// Turn `Result<*mut T, errno>` into a pointer (NULL with errno set on failure).
fn ptr_or_null<T>(r: Result<*mut T, c_int>) -> *mut T {
    match r {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

fn errno_of(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

fn init_sync(mutex: &mut libc::pthread_mutex_t, cond: Option<&mut libc::pthread_cond_t>) {
    // SAFETY: initialising library-owned pthread objects in place, where they stay.
    unsafe {
        libc::pthread_mutex_init(mutex, std::ptr::null());
        if let Some(c) = cond {
            libc::pthread_cond_init(c, std::ptr::null());
        }
    }
}

fn destroy_sync(mutex: &mut libc::pthread_mutex_t, cond: &mut libc::pthread_cond_t) {
    // SAFETY: objects initialised by init_sync, no longer used.
    unsafe {
        libc::pthread_mutex_destroy(mutex);
        libc::pthread_cond_destroy(cond);
    }
}

// ---- PD ------------------------------------------------------------------------------

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    const VERB: &str = "ibv_alloc_pd";
    guard(VERB, std::ptr::null_mut(), || {
        ptr_or_null((|| {
            let (ctx, dev) = ctx_dev!(VERB, context);
            let handle = dev
                .with(|h| h.alloc_pd())
                .map_err(|e| fail(VERB, e.errno(), e))?;
            let pd = Box::new(EmuPd {
                pd: ibv_pd {
                    context: ctx.ctx_ptr(),
                    handle: handle.to_raw() as u32,
                },
                handle,
            });
            Ok(Box::into_raw(pd).cast::<ibv_pd>())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    const VERB: &str = "ibv_dealloc_pd";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            if pd.is_null() {
                return Err(fail(VERB, libc::EINVAL, "pd is NULL"));
            }
            let p = pd.cast::<EmuPd>();
            // SAFETY: a PD from ibv_alloc_pd.
            let (_, dev) = ctx_dev!(VERB, unsafe { (*p).pd.context });
            // SAFETY: as above.
            let handle = unsafe { (*p).handle };
            dev.with(|h| h.dealloc_pd(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: the box from ibv_alloc_pd, now unused.
            drop(unsafe { Box::from_raw(p) });
            Ok(())
        })())
    })
}

/// The PD handle and context of a PD pointer.
///
/// # Safety
/// `pd` must be NULL or from ibv_alloc_pd.
unsafe fn pd_parts<'a>(
    verb: &str,
    pd: *mut ibv_pd,
) -> Result<(&'a EmuContext, &'a Device, PdHandle), c_int> {
    if pd.is_null() {
        return Err(fail(verb, libc::EINVAL, "pd is NULL"));
    }
    let p = pd.cast::<EmuPd>();
    // SAFETY: as documented.
    let (ctx, dev) = ctx_dev!(verb, unsafe { (*p).pd.context });
    // SAFETY: as documented.
    Ok((ctx, dev, unsafe { (*p).handle }))
}

// ---- MR ------------------------------------------------------------------------------

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    const VERB: &str = "ibv_reg_mr";
    guard(VERB, std::ptr::null_mut(), || {
        ptr_or_null((|| {
            // SAFETY: pd from ibv_alloc_pd or rejected.
            let (ctx, dev, pdh) = unsafe { pd_parts(VERB, pd) }?;
            if iova != addr as u64 {
                return Err(fail(
                    VERB,
                    libc::EOPNOTSUPP,
                    format!(
                        "iova {iova:#x} differs from the address {addr:p}: the emulator addresses regions by their virtual address"
                    ),
                ));
            }
            // Optional bits (relaxed ordering …) may be ignored by a device (verbs.h).
            let access = AccessFlags(access & !IBV_ACCESS_OPTIONAL_RANGE);
            // SAFETY: ibv_reg_mr(3): the application keeps the memory valid until dereg.
            let (handle, keys) = dev
                .with(|h| unsafe { h.reg_mr(pdh, addr.cast(), length, access) })
                .map_err(|e| fail(VERB, e.errno(), e))?;
            let mr = Box::new(EmuMr {
                mr: ibv_mr {
                    context: ctx.ctx_ptr(),
                    pd,
                    addr,
                    length,
                    handle: handle.to_raw() as u32,
                    lkey: keys.lkey,
                    rkey: keys.rkey,
                },
                handle,
            });
            Ok(Box::into_raw(mr).cast::<ibv_mr>())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    const VERB: &str = "ibv_dereg_mr";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            if mr.is_null() {
                return Err(fail(VERB, libc::EINVAL, "mr is NULL"));
            }
            let m = mr.cast::<EmuMr>();
            // SAFETY: an MR from ibv_reg_mr.
            let (_, dev) = ctx_dev!(VERB, unsafe { (*m).mr.context });
            // SAFETY: as above.
            let handle = unsafe { (*m).handle };
            dev.with(|h| h.dereg_mr(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: the box from ibv_reg_mr, now unused.
            drop(unsafe { Box::from_raw(m) });
            Ok(())
        })())
    })
}

// ---- completion channels and CQs ---------------------------------------------------------

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    const VERB: &str = "ibv_create_comp_channel";
    guard(VERB, std::ptr::null_mut(), || {
        ptr_or_null((|| {
            let (ctx, dev) = ctx_dev!(VERB, context);
            let (handle, fd) = dev
                .create_comp_channel()
                .map_err(|e| fail(VERB, e.raw_os_error().unwrap_or(libc::EMFILE), e))?;
            let ch = Box::new(EmuChannel {
                ch: ibv_comp_channel {
                    context: ctx.ctx_ptr(),
                    fd: fd.as_raw_fd(),
                    refcnt: 0,
                },
                handle,
                fd,
            });
            Ok(Box::into_raw(ch).cast::<ibv_comp_channel>())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    const VERB: &str = "ibv_destroy_comp_channel";
    guard(VERB, -1, || {
        let r = (|| {
            if channel.is_null() {
                return Err(fail(VERB, libc::EINVAL, "channel is NULL"));
            }
            let c = channel.cast::<EmuChannel>();
            // SAFETY: a channel from ibv_create_comp_channel.
            let (_, dev) = ctx_dev!(VERB, unsafe { (*c).ch.context });
            // SAFETY: as above.
            let handle = unsafe { (*c).handle };
            dev.destroy_comp_channel(handle)
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: the box from ibv_create_comp_channel, now unused.
            drop(unsafe { Box::from_raw(c) });
            Ok(())
        })();
        // rdma-core returns -1 with errno here.
        if errno_of(r) == 0 { 0 } else { -1 }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    const VERB: &str = "ibv_create_cq";
    guard(VERB, std::ptr::null_mut(), || {
        let (Ok(cqe), Ok(comp_vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
            return fail_null(VERB, libc::EINVAL, "cqe or comp_vector is negative");
        };
        // SAFETY: context and channel from this library, or rejected.
        ptr_or_null(unsafe { create_cq(VERB, context, cqe, cq_context, channel, comp_vector) })
            .cast::<ibv_cq>()
    })
}

/// Create a CQ (its `ibv_cq_ex` polling entry points are set by the caller when wanted).
///
/// # Safety
/// `context` must be NULL or from ibv_open_device, `channel` NULL or from
/// ibv_create_comp_channel.
pub(crate) unsafe fn create_cq(
    verb: &str,
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
) -> Result<*mut EmuCq, c_int> {
    let (ctx, dev) = ctx_dev!(verb, context);
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: a channel from ibv_create_comp_channel.
        Some(unsafe { (*channel.cast::<EmuChannel>()).handle })
    };
    // SAFETY: ibv_cq_ex is plain data (pointers, integers, optional fn pointers, pthread
    // objects initialised below) for which all-zero bytes are valid.
    let mut cqx: ibv_cq_ex = unsafe { std::mem::zeroed() };
    cqx.context = ctx.ctx_ptr();
    cqx.channel = channel;
    cqx.cq_context = cq_context;
    let mut cq = Box::new(EmuCq {
        cqx,
        handle: CqHandle::from_raw(0),
        current: Mutex::new(None),
    });
    // The device hands this pointer back with each completion event.
    let me = std::ptr::from_mut(cq.as_mut()) as u64;
    let (handle, real) = dev
        .with(|h| h.create_cq(cqe, ch, comp_vector, me))
        .map_err(|e| fail(verb, e.errno(), e))?;
    cq.handle = handle;
    cq.cqx.handle = handle.to_raw() as u32;
    cq.cqx.cqe = i32::try_from(real).unwrap_or(i32::MAX);
    init_sync(&mut cq.cqx.mutex, Some(&mut cq.cqx.cond));
    if !channel.is_null() {
        // SAFETY: as above.
        unsafe { (*channel).refcnt += 1 };
    }
    let p = Box::into_raw(cq);
    register(ctx, Kind::Cq, handle.to_raw(), p as usize);
    Ok(p)
}

/// CQ handle and device of a CQ pointer.
///
/// # Safety
/// `cq` must be NULL or from ibv_create_cq.
pub(crate) unsafe fn cq_parts<'a>(
    verb: &str,
    cq: *mut ibv_cq,
) -> Result<(&'a EmuContext, &'a Device, CqHandle), c_int> {
    if cq.is_null() {
        return Err(fail(verb, libc::EINVAL, "cq is NULL"));
    }
    // SAFETY: as documented.
    let (ctx, dev) = ctx_dev!(verb, unsafe { (*cq).context });
    // SAFETY: as documented.
    Ok((ctx, dev, unsafe { (*cq.cast::<EmuCq>()).handle }))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    const VERB: &str = "ibv_destroy_cq";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: cq from ibv_create_cq or rejected.
            let (ctx, dev, handle) = unsafe { cq_parts(VERB, cq) }?;
            dev.with(|h| h.destroy_cq(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            unregister(ctx, Kind::Cq, handle.to_raw());
            let c = cq.cast::<EmuCq>();
            // SAFETY: the box from ibv_create_cq, now unused.
            unsafe {
                let channel = (*c).cqx.channel;
                if !channel.is_null() {
                    (*channel).refcnt -= 1;
                }
                destroy_sync(&mut (*c).cqx.mutex, &mut (*c).cqx.cond);
                drop(Box::from_raw(c));
            }
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    const VERB: &str = "ibv_resize_cq";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: cq from ibv_create_cq or rejected.
            let (_, dev, handle) = unsafe { cq_parts(VERB, cq) }?;
            let cqe = u32::try_from(cqe).map_err(|_| fail(VERB, libc::EINVAL, "cqe < 0"))?;
            let real = dev
                .with(|h| h.resize_cq(handle, cqe))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: as above.
            unsafe { (*cq).cqe = i32::try_from(real).unwrap_or(i32::MAX) };
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    const VERB: &str = "ibv_get_cq_event";
    guard(VERB, -1, || {
        let r = (|| {
            if channel.is_null() || cq.is_null() || cq_context.is_null() {
                return Err(fail(VERB, libc::EINVAL, "a NULL argument"));
            }
            let c = channel.cast::<EmuChannel>();
            // SAFETY: a channel from ibv_create_comp_channel.
            let (_, dev) = ctx_dev!(VERB, unsafe { (*c).ch.context });
            // SAFETY: as above.
            let (handle, fd) = unsafe { ((*c).handle, (*c).fd.as_raw_fd()) };
            // A non-blocking channel fd (the ibv_get_cq_event(3) example) must not block.
            let timeout = fd_is_nonblocking(fd).then_some(Duration::ZERO);
            let (_, me) = dev.get_cq_event(handle, timeout).map_err(|e| {
                set_errno(e.errno());
                e.errno()
            })?;
            let emu = me as usize as *mut EmuCq;
            // SAFETY: the pointer given to create_cq; the CQ cannot be destroyed while
            // events are unacknowledged.
            unsafe {
                *cq = emu.cast();
                *cq_context = (*emu).cqx.cq_context;
            }
            Ok(())
        })();
        if r.is_ok() { 0 } else { -1 }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    const VERB: &str = "ibv_ack_cq_events";
    guard(VERB, (), || {
        let _ = (|| {
            // SAFETY: cq from ibv_create_cq or rejected.
            let (_, dev, handle) = unsafe { cq_parts(VERB, cq) }?;
            dev.with(|h| h.ack_cq_events(handle, nevents))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: as above; the field is the library's.
            unsafe {
                (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents)
            };
            Ok::<(), c_int>(())
        })();
    })
}

unsafe extern "C" fn op_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    const VERB: &str = "ibv_poll_cq";
    guard(VERB, -libc::EIO, || {
        // SAFETY: cq from ibv_create_cq or rejected.
        let (_, dev, handle) = match unsafe { cq_parts(VERB, cq) } {
            Ok(p) => p,
            Err(e) => return -e,
        };
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return -fail(VERB, libc::EINVAL, "num_entries < 0 or wc is NULL");
        }
        let want = num_entries as usize;
        const CHUNK: usize = 32;
        let mut buf = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); CHUNK];
        let got = peek(dev, |h| {
            let mut total = 0usize;
            while total < want {
                let n = CHUNK.min(want - total);
                match h.poll_cq(handle, &mut buf[..n]) {
                    Ok(k) => {
                        for (i, w) in buf[..k].iter().enumerate() {
                            // SAFETY: the caller's array holds num_entries entries.
                            unsafe { *wc.add(total + i) = convert::wc_to_c(w) };
                        }
                        total += k;
                        if k < n {
                            break;
                        }
                    }
                    Err(e) if total == 0 => return -e.errno(),
                    Err(_) => break,
                }
            }
            total as c_int
        })
        .unwrap_or(0);
        if got == 0 {
            // Busy pollers would otherwise keep the engine thread from the device lock.
            std::thread::yield_now();
        }
        got
    })
}

unsafe extern "C" fn op_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    const VERB: &str = "ibv_req_notify_cq";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: cq from ibv_create_cq or rejected.
            let (_, dev, handle) = unsafe { cq_parts(VERB, cq) }?;
            dev.with(|h| h.req_notify_cq(handle, solicited_only != 0))
                .map_err(|e| fail(VERB, e.errno(), e))
        })())
    })
}

// ---- SRQ ------------------------------------------------------------------------------

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    const VERB: &str = "ibv_create_srq";
    guard(VERB, std::ptr::null_mut(), || {
        ptr_or_null((|| {
            // SAFETY: pd from ibv_alloc_pd or rejected.
            let (ctx, dev, pdh) = unsafe { pd_parts(VERB, pd) }?;
            if init.is_null() {
                return Err(fail(VERB, libc::EINVAL, "srq_init_attr is NULL"));
            }
            // SAFETY: non-NULL from the caller.
            let ia = unsafe { &mut *init };
            let attr = convert::srq_attr_from_c(&ia.attr);
            let mut srq = Box::new(EmuSrq {
                srq: ibv_srq {
                    context: ctx.ctx_ptr(),
                    srq_context: ia.srq_context,
                    pd,
                    handle: 0,
                    // SAFETY: zeroed pthread objects are initialised below.
                    mutex: unsafe { std::mem::zeroed() },
                    // SAFETY: as above.
                    cond: unsafe { std::mem::zeroed() },
                    events_completed: 0,
                },
                handle: SrqHandle::from_raw(0),
            });
            let (handle, real) = dev
                .with(|h| h.create_srq(pdh, attr, ia.srq_context as u64))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            ia.attr.max_wr = real.max_wr;
            ia.attr.max_sge = real.max_sge;
            srq.handle = handle;
            srq.srq.handle = handle.to_raw() as u32;
            init_sync(&mut srq.srq.mutex, Some(&mut srq.srq.cond));
            let p = Box::into_raw(srq);
            register(ctx, Kind::Srq, handle.to_raw(), p as usize);
            Ok(p.cast::<ibv_srq>())
        })())
    })
}

/// SRQ handle and device of an SRQ pointer.
///
/// # Safety
/// `srq` must be NULL or from ibv_create_srq.
unsafe fn srq_parts<'a>(
    verb: &str,
    srq: *mut ibv_srq,
) -> Result<(&'a EmuContext, &'a Device, SrqHandle), c_int> {
    if srq.is_null() {
        return Err(fail(verb, libc::EINVAL, "srq is NULL"));
    }
    // SAFETY: as documented.
    let (ctx, dev) = ctx_dev!(verb, unsafe { (*srq).context });
    // SAFETY: as documented.
    Ok((ctx, dev, unsafe { (*srq.cast::<EmuSrq>()).handle }))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    const VERB: &str = "ibv_modify_srq";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: srq from ibv_create_srq or rejected.
            let (_, dev, handle) = unsafe { srq_parts(VERB, srq) }?;
            if attr.is_null() {
                return Err(fail(VERB, libc::EINVAL, "srq_attr is NULL"));
            }
            let m = convert::srq_attr_mask_from_c(mask).map_err(|e| fail_convert(VERB, e))?;
            // SAFETY: non-NULL from the caller.
            let attr = convert::srq_attr_from_c(unsafe { &*attr });
            dev.with(|h| h.modify_srq(handle, attr, m))
                .map_err(|e| fail(VERB, e.errno(), e))
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    const VERB: &str = "ibv_query_srq";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: srq from ibv_create_srq or rejected.
            let (_, dev, handle) = unsafe { srq_parts(VERB, srq) }?;
            if attr.is_null() {
                return Err(fail(VERB, libc::EINVAL, "srq_attr is NULL"));
            }
            let a = dev
                .with(|h| h.query_srq(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: non-NULL from the caller.
            unsafe { *attr = convert::srq_attr_to_c(&a) };
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    const VERB: &str = "ibv_destroy_srq";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: srq from ibv_create_srq or rejected.
            let (ctx, dev, handle) = unsafe { srq_parts(VERB, srq) }?;
            dev.with(|h| h.destroy_srq(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            unregister(ctx, Kind::Srq, handle.to_raw());
            let s = srq.cast::<EmuSrq>();
            // SAFETY: the box from ibv_create_srq, now unused.
            unsafe {
                destroy_sync(&mut (*s).srq.mutex, &mut (*s).srq.cond);
                drop(Box::from_raw(s));
            }
            Ok(())
        })())
    })
}

// ---- QP -------------------------------------------------------------------------------

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    const VERB: &str = "ibv_create_qp";
    guard(VERB, std::ptr::null_mut(), || {
        if init.is_null() {
            return fail_null(VERB, libc::EINVAL, "qp_init_attr is NULL");
        }
        // SAFETY: pd from ibv_alloc_pd or rejected; init non-NULL from the caller.
        ptr_or_null(unsafe { create_qp(VERB, pd, &mut *init, false) })
    })
}

/// Create a QP; `extended` sets up the `ibv_wr_*` entry points.
///
/// # Safety
/// `pd` must be NULL or from ibv_alloc_pd; the CQs and SRQ of `ia` from this library.
pub(crate) unsafe fn create_qp(
    verb: &str,
    pd: *mut ibv_pd,
    ia: &mut ibv_qp_init_attr,
    extended: bool,
) -> Result<*mut ibv_qp, c_int> {
    // SAFETY: pd from ibv_alloc_pd or rejected.
    let (ctx, dev, pdh) = unsafe { pd_parts(verb, pd) }?;
    if ia.send_cq.is_null() || ia.recv_cq.is_null() {
        return Err(fail(verb, libc::EINVAL, "send_cq and recv_cq are required"));
    }
    // SAFETY: CQs from ibv_create_cq, SRQ from ibv_create_srq.
    let (send_cq, recv_cq, srq) = unsafe {
        (
            (*ia.send_cq.cast::<EmuCq>()).handle,
            (*ia.recv_cq.cast::<EmuCq>()).handle,
            (!ia.srq.is_null()).then(|| (*ia.srq.cast::<EmuSrq>()).handle),
        )
    };
    let attr = convert::qp_init_attr_from_c(ia, send_cq, recv_cq, srq)
        .map_err(|e| fail_convert(verb, e))?;
    let qp_type = attr.qp_type;
    let (handle, qpn, cap) = dev
        .with(|h| h.create_qp(pdh, attr))
        .map_err(|e| fail(verb, e.errno(), e))?;
    ia.cap = convert::qp_cap_to_c(&cap);
    // SAFETY: ibv_qp_ex is plain data (pointers, integers, optional fn pointers, pthread
    // objects initialised below) for which all-zero bytes are valid.
    let mut qpx: ibv_qp_ex = unsafe { std::mem::zeroed() };
    qpx.qp_base.context = ctx.ctx_ptr();
    qpx.qp_base.qp_context = ia.qp_context;
    qpx.qp_base.pd = pd;
    qpx.qp_base.send_cq = ia.send_cq;
    qpx.qp_base.recv_cq = ia.recv_cq;
    qpx.qp_base.srq = ia.srq;
    qpx.qp_base.handle = handle.to_raw() as u32;
    qpx.qp_base.qp_num = qpn.value();
    qpx.qp_base.state = IBV_QPS_RESET;
    qpx.qp_base.qp_type = ia.qp_type;
    if extended {
        crate::qp_ex::fill_wr_ops(&mut qpx);
    }
    let mut qp = Box::new(EmuQp {
        qpx,
        handle,
        qp_type,
        extended,
        batch: Mutex::new(crate::qp_ex::Batch::default()),
    });
    init_sync(&mut qp.qpx.qp_base.mutex, Some(&mut qp.qpx.qp_base.cond));
    let p = Box::into_raw(qp);
    register(ctx, Kind::Qp, handle.to_raw(), p as usize);
    Ok(p.cast::<ibv_qp>())
}

/// What the library keeps of a QP, copied out (the QP struct itself may be read and written
/// by several application threads at once, so no reference to it is held).
#[derive(Clone, Copy)]
struct QpInfo {
    handle: QpHandle,
    qp_type: QpType,
    ptr: *mut EmuQp,
}

impl QpInfo {
    /// Record the state set through the library in `qp->state`.
    fn set_state(&self, state: u32) {
        // SAFETY: a live QP from ibv_create_qp; a plain field write, as rdma-core does.
        unsafe { std::ptr::addr_of_mut!((*self.ptr).qpx.qp_base.state).write(state) };
    }
}

/// QP parts of a QP pointer.
///
/// # Safety
/// `qp` must be NULL or from ibv_create_qp.
unsafe fn qp_parts<'a>(
    verb: &str,
    qp: *mut ibv_qp,
) -> Result<(&'a EmuContext, &'a Device, QpInfo), c_int> {
    if qp.is_null() {
        return Err(fail(verb, libc::EINVAL, "qp is NULL"));
    }
    // SAFETY: as documented.
    let (ctx, dev) = ctx_dev!(verb, unsafe { (*qp).context });
    let ptr = qp.cast::<EmuQp>();
    // SAFETY: as documented; fields set once at creation.
    let (handle, qp_type) = unsafe { ((*ptr).handle, (*ptr).qp_type) };
    Ok((
        ctx,
        dev,
        QpInfo {
            handle,
            qp_type,
            ptr,
        },
    ))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    const VERB: &str = "ibv_modify_qp";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: qp from ibv_create_qp or rejected.
            let (_, dev, q) = unsafe { qp_parts(VERB, qp) }?;
            if attr.is_null() {
                return Err(fail(VERB, libc::EINVAL, "qp_attr is NULL"));
            }
            let mask = QpAttrMask(mask as u32);
            // SAFETY: non-NULL from the caller.
            let c = unsafe { &*attr };
            let mut a = convert::qp_attr_from_c(c, mask).map_err(|e| fail_convert(VERB, e))?;
            if mask.contains(QpAttrMask::AV) {
                a.ah_attr = devices::address_vector(&c.ah_attr);
            }
            let handle = q.handle;
            dev.with(|h| h.modify_qp(handle, &a, mask))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            if mask.contains(QpAttrMask::STATE) {
                q.set_state(a.qp_state.raw());
            }
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    const VERB: &str = "ibv_query_qp";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: qp from ibv_create_qp or rejected.
            let (_, dev, q) = unsafe { qp_parts(VERB, qp) }?;
            if attr.is_null() || init_attr.is_null() {
                return Err(fail(VERB, libc::EINVAL, "qp_attr or init_attr is NULL"));
            }
            let handle = q.handle;
            let (a, init) = dev
                .with(|h| h.query_qp(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            let ca = convert::qp_attr_to_c(&a);
            q.set_state(ca.qp_state);
            // SAFETY: non-NULL from the caller; the QP's pointer fields are set at creation.
            unsafe {
                *attr = ca;
                *init_attr = ibv_qp_init_attr {
                    qp_context: (*q.ptr).qpx.qp_base.qp_context,
                    send_cq: (*q.ptr).qpx.qp_base.send_cq,
                    recv_cq: (*q.ptr).qpx.qp_base.recv_cq,
                    srq: (*q.ptr).qpx.qp_base.srq,
                    cap: ca.cap,
                    qp_type: init.qp_type.raw(),
                    sq_sig_all: c_int::from(init.sq_sig_all),
                };
            }
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    const VERB: &str = "ibv_destroy_qp";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            // SAFETY: qp from ibv_create_qp or rejected.
            let (ctx, dev, q) = unsafe { qp_parts(VERB, qp) }?;
            let handle = q.handle;
            dev.with(|h| h.destroy_qp(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            unregister(ctx, Kind::Qp, handle.to_raw());
            let p = qp.cast::<EmuQp>();
            // SAFETY: the box from ibv_create_qp, now unused.
            unsafe {
                destroy_sync(&mut (*p).qpx.qp_base.mutex, &mut (*p).qpx.qp_base.cond);
                drop(Box::from_raw(p));
            }
            Ok(())
        })())
    })
}

/// The `ibv_qp_ex` of a QP made by `ibv_create_qp_ex` with send ops; NULL for others (as
/// rdma-core).
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard("ibv_qp_to_qp_ex", std::ptr::null_mut(), || {
        if qp.is_null() {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
        let p = qp.cast::<EmuQp>();
        // SAFETY: a QP from ibv_create_qp(_ex); `extended` is set once at creation.
        if unsafe { (*p).extended } {
            // SAFETY: as above.
            unsafe { std::ptr::addr_of_mut!((*p).qpx) }
        } else {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: u32, _flags: u32) -> c_int {
    // 0: no in-order guarantee beyond what the transport gives.
    0
}

/// A send WR in the emulator's form.
///
/// # Safety
/// `wr` must be a valid `ibv_send_wr` (its lists readable, its AH from ibv_create_ah).
unsafe fn send_wr(wr: &ibv_send_wr, qp_type: QpType) -> Result<SendWr, ConvertError> {
    // SAFETY: forwarded; an AH from ibv_create_ah is the first field of an EmuAh.
    unsafe { convert::send_wr_from_c(wr, qp_type, |ah| (*ah.cast::<EmuAh>()).handle) }
}

/// Walk a C list of work requests, bounded (a cyclic list must not hang us).
const MAX_WR_LIST: usize = 1 << 20;

unsafe extern "C" fn op_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    const VERB: &str = "ibv_post_send";
    let set_bad = |p: *mut ibv_send_wr| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's bad_wr slot.
            unsafe { *bad_wr = p };
        }
    };
    guard(VERB, libc::EIO, || {
        // SAFETY: qp from ibv_create_qp or rejected.
        let (_, dev, q) = match unsafe { qp_parts(VERB, qp) } {
            Ok(p) => p,
            Err(e) => {
                set_bad(wr);
                return e;
            }
        };
        let mut wrs = Vec::new();
        let mut ptrs = Vec::new();
        let mut cur = wr;
        let mut convert_err = None;
        while !cur.is_null() && ptrs.len() < MAX_WR_LIST {
            // SAFETY: a list of valid WRs from the caller.
            match unsafe { send_wr(&*cur, q.qp_type) } {
                Ok(w) => wrs.push(w),
                Err(e) => {
                    convert_err = Some((cur, e));
                    break;
                }
            }
            ptrs.push(cur);
            // SAFETY: as above.
            cur = unsafe { (*cur).next };
        }
        let handle = q.handle;
        // SAFETY: inline data is read now from the caller's buffers (ibv_post_send(3)).
        if let Err(e) = dev.with(|h| unsafe { h.post_send(handle, &wrs) }) {
            set_bad(ptrs.get(e.index).copied().unwrap_or(wr));
            return fail(VERB, e.error.errno(), e);
        }
        if let Some((p, e)) = convert_err {
            set_bad(p);
            return fail_convert(VERB, e);
        }
        0
    })
}

/// Post receive WRs to a QP (`Some(qp)`) or an SRQ.
fn post_recv_list(
    verb: &str,
    dev: &Device,
    target: Result<QpHandle, SrqHandle>,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let set_bad = |p: *mut ibv_recv_wr| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's bad_wr slot.
            unsafe { *bad_wr = p };
        }
    };
    let mut wrs: Vec<RecvWr> = Vec::new();
    let mut ptrs = Vec::new();
    let mut cur = wr;
    let mut convert_err = None;
    while !cur.is_null() && ptrs.len() < MAX_WR_LIST {
        // SAFETY: a list of valid WRs from the caller.
        match unsafe { convert::recv_wr_from_c(&*cur) } {
            Ok(w) => wrs.push(w),
            Err(e) => {
                convert_err = Some((cur, e));
                break;
            }
        }
        ptrs.push(cur);
        // SAFETY: as above.
        cur = unsafe { (*cur).next };
    }
    let r = dev.with(|h| match target {
        Ok(qp) => h.post_recv(qp, &wrs),
        Err(srq) => h.post_srq_recv(srq, &wrs),
    });
    if let Err(e) = r {
        set_bad(ptrs.get(e.index).copied().unwrap_or(wr));
        return fail(verb, e.error.errno(), e);
    }
    if let Some((p, e)) = convert_err {
        set_bad(p);
        return fail_convert(verb, e);
    }
    0
}

unsafe extern "C" fn op_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    const VERB: &str = "ibv_post_recv";
    guard(VERB, libc::EIO, || {
        // SAFETY: qp from ibv_create_qp or rejected.
        match unsafe { qp_parts(VERB, qp) } {
            Ok((_, dev, q)) => post_recv_list(VERB, dev, Ok(q.handle), wr, bad_wr),
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn op_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    const VERB: &str = "ibv_post_srq_recv";
    guard(VERB, libc::EIO, || {
        // SAFETY: srq from ibv_create_srq or rejected.
        match unsafe { srq_parts(VERB, srq) } {
            Ok((_, dev, h)) => post_recv_list(VERB, dev, Err(h), wr, bad_wr),
            Err(e) => e,
        }
    })
}

// ---- AH -------------------------------------------------------------------------------

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    const VERB: &str = "ibv_create_ah";
    guard(VERB, std::ptr::null_mut(), || {
        ptr_or_null((|| {
            // SAFETY: pd from ibv_alloc_pd or rejected.
            let (ctx, dev, pdh) = unsafe { pd_parts(VERB, pd) }?;
            if attr.is_null() {
                return Err(fail(VERB, libc::EINVAL, "ah_attr is NULL"));
            }
            // SAFETY: non-NULL from the caller.
            let a = devices::address_vector(unsafe { &*attr });
            let handle = dev
                .with(|h| h.create_ah(pdh, a))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            let ah = Box::new(EmuAh {
                ah: ibv_ah {
                    context: ctx.ctx_ptr(),
                    pd,
                    handle: handle.to_raw() as u32,
                },
                handle,
            });
            Ok(Box::into_raw(ah).cast::<ibv_ah>())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    const VERB: &str = "ibv_destroy_ah";
    guard(VERB, libc::EIO, || {
        errno_of((|| {
            if ah.is_null() {
                return Err(fail(VERB, libc::EINVAL, "ah is NULL"));
            }
            let a = ah.cast::<EmuAh>();
            // SAFETY: an AH from ibv_create_ah.
            let (_, dev) = ctx_dev!(VERB, unsafe { (*a).ah.context });
            // SAFETY: as above.
            let handle = unsafe { (*a).handle };
            dev.with(|h| h.destroy_ah(handle))
                .map_err(|e| fail(VERB, e.errno(), e))?;
            // SAFETY: the box from ibv_create_ah, now unused.
            drop(unsafe { Box::from_raw(a) });
            Ok(())
        })())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    const VERB: &str = "ibv_init_ah_from_wc";
    guard(VERB, -1, || {
        // SAFETY: checked by ctx_of.
        let Ok(ctx) = (unsafe { ctx_of(VERB, context) }) else {
            return -1;
        };
        if wc.is_null() || grh.is_null() || ah_attr.is_null() {
            fail(VERB, libc::EINVAL, "wc, grh or ah_attr is NULL");
            return -1;
        }
        // SAFETY: non-NULL from the caller.
        let (wc, grh) = unsafe { (*wc, *grh) };
        if wc.wc_flags & IBV_WC_GRH == 0 {
            fail(
                VERB,
                libc::EINVAL,
                "RoCE needs the GRH of the completion (IBV_WC_GRH)",
            );
            return -1;
        }
        // Reply from the GID the request was sent to.
        let to = convert::gid_from_c(&grh.dgid);
        let sgid_index = ctx
            .query(|h| h.gids().iter().position(|g| *g == to))
            .unwrap_or_else(|| ctx.query(|h| h.ip_gid_index()));
        let flow = u32::from_be(grh.version_tclass_flow);
        let mut a: ibv_ah_attr = zeroed();
        a.grh.dgid = grh.sgid;
        a.grh.flow_label = flow & 0xfffff;
        a.grh.sgid_index = u8::try_from(sgid_index).unwrap_or(0);
        a.grh.hop_limit = 0xff;
        a.grh.traffic_class = ((flow >> 20) & 0xff) as u8;
        a.is_global = 1;
        a.sl = wc.sl;
        a.port_num = port_num;
        // SAFETY: non-NULL from the caller.
        unsafe { *ah_attr = a };
        0
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    const VERB: &str = "ibv_create_ah_from_wc";
    guard(VERB, std::ptr::null_mut(), || {
        if pd.is_null() {
            return fail_null(VERB, libc::EINVAL, "pd is NULL");
        }
        let mut a: ibv_ah_attr = zeroed();
        // SAFETY: pd from ibv_alloc_pd; the rest is checked by the callees.
        unsafe {
            if ibv_init_ah_from_wc((*pd).context, port_num, wc, grh, &mut a) != 0 {
                return std::ptr::null_mut();
            }
            ibv_create_ah(pd, &mut a)
        }
    })
}
