//! PDs, MRs, MWs, completion channels, CQs, QPs, SRQs, AHs and the data path (`ctx->ops`).
//!
//! Each object is a `#[repr(C)]` struct whose first field is the C struct applications see,
//! so the pointer handed out is also a pointer to ours, and it reaches its context through
//! that C struct's `context` field. Every kind follows one template: [`Object`] says where
//! its context and handle are and how the device frees it, [`resolve`] checks a pointer
//! from the application and [`destroy`] is every `ibv_destroy_*`/`ibv_dealloc_*`.

use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smallvec::SmallVec;
use softroce_emu::Hca;
use softroce_emu::core::{
    AccessFlags, AhHandle, ChannelHandle, CqHandle, DmHandle, EventElement, MrHandle, MwHandle,
    MwType, PdHandle, PostError, QpAttrMask, QpCap, QpHandle, QpType, RecvWr, SendFlags, SendWr,
    SrqHandle, TmOpKind, VerbsError, VerbsResult, WcOpcode, WorkCompletion, XrcdHandle,
    without_ignored_xrc_attributes,
};
use softroce_emu::driver::{Device, EventFd};
use softroce_ibverbs_abi::convert::{CWorkRequest, ConvertError};
use softroce_ibverbs_abi::*;

use crate::context::{
    EmuContext, ObjectKind, ctx_and_device, ctx_of, fd_is_nonblocking, on_device,
};
use crate::devices;
use crate::ffi::{fail, guard, guard_errno, guard_ptr, guard_status, zeroed};

symver_directives!();

/// A completion as a RoCE provider reports it: a UD receive (GRH present) carries the
/// received packet's RoCE type in `sl`, as mlx4 and mlx5 do (RoCEv2 over IPv4: 2, over
/// IPv6: 1; an IBTA SL means nothing on Ethernet). UCX's ud_verbs reads it to know where the
/// destination address sits in the 40-byte GRH area (`uct_ud_iface_check_grh`), and drops
/// every packet whose address it cannot find there.
pub(crate) fn with_roce_packet_type(mut w: WorkCompletion, ctx: &EmuContext) -> WorkCompletion {
    if w.wc_flags.contains(softroce_emu::core::WcFlags::GRH) {
        w.sl = if ctx.entry.spec.ip.is_ipv4() { 2 } else { 1 };
    }
    w
}

/// One of this library's objects.
///
/// # Safety
/// Implementors are `#[repr(C)]` with the C struct applications hold (`C`) as their first
/// field, and are only ever allocated by [`publish`].
pub(crate) unsafe trait Object: Sized {
    /// The C struct at the start: what the application's pointer points to.
    type C;
    /// The device's name for the object.
    type Handle: Copy;
    /// What the argument is called in messages.
    const ARG: &'static str;

    /// The C struct's `context` field.
    ///
    /// # Safety
    /// `p` must point to a live object.
    unsafe fn context(p: *const Self) -> *mut ibv_context;

    /// The device's handle.
    ///
    /// # Safety
    /// `p` must point to a live object.
    unsafe fn handle(p: *const Self) -> Self::Handle;

    /// Free the device's object.
    fn destroy_on(dev: &Device, handle: Self::Handle) -> VerbsResult<()>;

    /// When the object goes, among those its context still has at `ibv_close_device`:
    /// lower first (the kernel's order: QPs, SRQs, windows, AHs, regions, DMs, CQs,
    /// channels, XRC domains, PDs), so that nothing is in use when it goes.
    const CLOSE_ORDER: u8;

    /// Free the device's object as its context closes: as [`Object::destroy_on`], but
    /// without waiting for events nobody will acknowledge any more.
    fn close_on(dev: &Device, handle: Self::Handle) -> VerbsResult<()> {
        Self::destroy_on(dev, handle)
    }

    /// Undo what creation set up besides the allocation and the device's object.
    ///
    /// # Safety
    /// `p` must point to a live object the application no longer uses.
    unsafe fn release(_ctx: &EmuContext, _p: *mut Self) {}
}

/// [`Object::context`] and [`Object::handle`] for an object whose C struct is the field
/// path given and whose handle is the field `handle`. Both are set once, at creation, so
/// they are read without a reference to the whole object (applications write other fields
/// of the C struct from any thread).
macro_rules! object_fields {
    ($($c:ident).+) => {
        unsafe fn context(p: *const Self) -> *mut ibv_context {
            // SAFETY: the caller passes a live object.
            unsafe { std::ptr::addr_of!((*p).$($c).+.context).read() }
        }
        unsafe fn handle(p: *const Self) -> Self::Handle {
            // SAFETY: the caller passes a live object.
            unsafe { std::ptr::addr_of!((*p).handle).read() }
        }
    };
}

/// An application's object pointer, checked: the object, its context and running device.
pub(crate) struct Resolved<'a, O: Object> {
    pub(crate) ctx: &'a EmuContext,
    pub(crate) dev: &'a Device,
    pub(crate) handle: O::Handle,
    pub(crate) ptr: *mut O,
}

/// Check an object pointer from the application.
///
/// # Safety
/// `c` must be NULL or a pointer this library handed out as an `O` that is still live.
pub(crate) unsafe fn resolve<'a, O: Object>(
    verb: &str,
    c: *mut O::C,
) -> Result<Resolved<'a, O>, c_int> {
    if c.is_null() {
        return Err(fail(verb, libc::EINVAL, format!("{} is NULL", O::ARG)));
    }
    let ptr = c.cast::<O>();
    // SAFETY: a live object (as documented), whose context field was set at creation.
    let (ctx, dev) = unsafe { ctx_and_device(verb, O::context(ptr)) }?;
    Ok(Resolved {
        ctx,
        dev,
        // SAFETY: as above.
        handle: unsafe { O::handle(ptr) },
        ptr,
    })
}

/// Allocate a new object for the application (its address stays put until [`destroy`]);
/// its context destroys the device's object at `ibv_close_device` if the application has
/// not by then.
fn publish<O: Object>(object: Box<O>) -> *mut O
where
    O::Handle: Send + 'static,
{
    let ptr = Box::into_raw(object);
    // SAFETY: just allocated; its context field was set by the caller.
    let (context, handle) = unsafe { (O::context(ptr), O::handle(ptr)) };
    // SAFETY: objects are made on contexts of this library.
    if let Some(ctx) = unsafe { EmuContext::from_ctx(context) } {
        ctx.own(
            ptr as usize,
            O::CLOSE_ORDER,
            Box::new(move |dev: &Device| O::close_on(dev, handle)),
        );
    }
    ptr
}

/// The application destroyed the object at `ptr`: its context no longer owns it.
fn unpublish<O: Object>(ctx: &EmuContext, ptr: *mut O) {
    ctx.disown(ptr as usize);
}

/// `ibv_destroy_*`: the device's object first (when it refuses, the application keeps a
/// working object), then ours.
///
/// # Safety
/// As [`resolve`]; after success the application no longer uses the object.
unsafe fn destroy<O: Object>(verb: &str, c: *mut O::C) -> Result<(), c_int> {
    // SAFETY: forwarded.
    let o = unsafe { resolve::<O>(verb, c) }?;
    O::destroy_on(o.dev, o.handle).map_err(|e| fail(verb, e.errno(), e))?;
    unpublish(o.ctx, o.ptr);
    // SAFETY: allocated by publish, no longer used.
    unsafe {
        O::release(o.ctx, o.ptr);
        drop(Box::from_raw(o.ptr));
    }
    Ok(())
}

/// Run a destroy on the device, waiting for as long as it is refused only because events
/// about the object were retrieved and not acknowledged: libibverbs' destroy verbs wait for
/// those acknowledgements, which another thread gives (ibv_get_cq_event(3),
/// ibv_get_async_event(3) NOTES). As there, a program that never acknowledges waits forever.
/// Events routed to a context and not yet read are not waited for: they are discarded.
fn destroy_after_acks(
    dev: &Device,
    verb: &str,
    object: (ObjectKind, u64),
    mut destroy: impl FnMut(&mut Hca) -> VerbsResult<()>,
) -> VerbsResult<()> {
    let mut told = false;
    loop {
        let done = dev.wait_for(Duration::from_secs(60), |h| {
            crate::context::discard_unread_events(dev, h, object);
            match destroy(h) {
                Err(e @ VerbsError::Unacknowledged { .. }) => {
                    if !told {
                        fail(
                            verb,
                            e.errno(),
                            format!("{e}; waiting for the acknowledgements"),
                        );
                        told = true;
                    }
                    None
                }
                r => Some(r),
            }
        });
        if let Some(r) = done {
            return r;
        }
    }
}

/// Initialise the pthread objects of a C struct in place, where they stay.
fn init_sync(mutex: &mut libc::pthread_mutex_t, cond: &mut libc::pthread_cond_t) {
    // SAFETY: library-owned pthread objects, initialised where they stay.
    unsafe {
        libc::pthread_mutex_init(mutex, std::ptr::null());
        libc::pthread_cond_init(cond, std::ptr::null());
    }
}

/// # Safety
/// Objects initialised by [`init_sync`], no longer used.
unsafe fn destroy_sync(mutex: *mut libc::pthread_mutex_t, cond: *mut libc::pthread_cond_t) {
    // SAFETY: as documented.
    unsafe {
        libc::pthread_mutex_destroy(mutex);
        libc::pthread_cond_destroy(cond);
    }
}

/// Report a C value the core has no form for.
fn fail_convert(verb: &str, e: ConvertError) -> c_int {
    fail(verb, e.errno, e.why)
}

/// Fill the data-path entry points the inline wrappers of verbs.h call.
pub(crate) fn fill_ops(ops: &mut ibv_context_ops) {
    ops.poll_cq = Some(op_poll_cq);
    ops.req_notify_cq = Some(op_req_notify_cq);
    ops.post_send = Some(op_post_send);
    ops.post_recv = Some(op_post_recv);
    ops.post_srq_recv = Some(op_post_srq_recv);
    ops.alloc_mw = Some(op_alloc_mw);
    ops.bind_mw = Some(op_bind_mw);
    ops.dealloc_mw = Some(op_dealloc_mw);
}

/// Run a verb on the device without waking the engine (nothing it does changes timers), for
/// the polling hot path.
pub(crate) fn peek<R>(dev: &Device, f: impl FnOnce(&mut Hca) -> R) -> Option<R> {
    let mut f = Some(f);
    dev.wait_for(Duration::ZERO, |h| f.take().map(|f| f(h)))
}

// ---- PD ------------------------------------------------------------------------------

/// A PD, or a parent domain over one (which has the PD's handle).
#[repr(C)]
struct EmuPd {
    pd: ibv_pd,
    handle: PdHandle,
    /// A parent domain: its thread domain (or NULL); `None` for a plain PD.
    parent_of_td: Option<*mut EmuTd>,
}

/// A thread domain. The emulator's objects are safe for concurrent use whatever the
/// domain (ibv_alloc_td(3): "by default all verbs objects are safe for multi-threaded
/// access"); it only counts the parent domains using it.
#[repr(C)]
pub(crate) struct EmuTd {
    td: ibv_td,
    users: std::sync::atomic::AtomicU32,
}

// SAFETY: repr(C), ibv_pd first, allocated by publish.
unsafe impl Object for EmuPd {
    type C = ibv_pd;
    type Handle = PdHandle;
    const ARG: &'static str = "pd";
    object_fields!(pd);
    const CLOSE_ORDER: u8 = 10;
    fn destroy_on(dev: &Device, handle: PdHandle) -> VerbsResult<()> {
        dev.with(|h| h.dealloc_pd(handle))
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    const VERB: &str = "ibv_alloc_pd";
    guard_ptr(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let (ctx, dev) = unsafe { ctx_and_device(VERB, context) }?;
        let handle = on_device(VERB, dev, |h| h.alloc_pd())?;
        let pd = ibv_pd {
            context: ctx.ctx_ptr(),
            handle: handle.to_raw() as u32,
        };
        Ok(publish(Box::new(EmuPd {
            pd,
            handle,
            parent_of_td: None,
        }))
        .cast())
    })
}

/// `ibv_dealloc_pd`, of a PD or a parent domain (ibv_alloc_parent_domain(3)).
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    const VERB: &str = "ibv_dealloc_pd";
    // SAFETY: a PD from ibv_alloc_pd or ibv_alloc_parent_domain, or rejected.
    guard_errno(VERB, || unsafe { dealloc_pd(VERB, pd) })
}

/// The context of a PD or parent domain from the application.
///
/// # Safety
/// `pd` is NULL or a live PD or parent domain of this library.
pub(crate) unsafe fn pd_context(verb: &str, pd: *mut ibv_pd) -> Result<*mut ibv_context, c_int> {
    // SAFETY: forwarded.
    let p = unsafe { resolve::<EmuPd>(verb, pd) }?;
    Ok(p.ctx.ctx_ptr())
}

/// # Safety
/// `pd` is NULL or a live PD or parent domain of this library.
unsafe fn dealloc_pd(verb: &str, pd: *mut ibv_pd) -> Result<(), c_int> {
    // SAFETY: forwarded.
    let p = unsafe { resolve::<EmuPd>(verb, pd) }?;
    // SAFETY: a live object; the field is set at creation.
    let Some(td) = (unsafe { std::ptr::addr_of!((*p.ptr).parent_of_td).read() }) else {
        // SAFETY: forwarded.
        return unsafe { destroy::<EmuPd>(verb, pd) };
    };
    on_device(verb, p.dev, |h| h.dealloc_parent_domain(p.handle))?;
    unpublish(p.ctx, p.ptr);
    if !td.is_null() {
        // SAFETY: the thread domain outlives the parent domains counted in it.
        unsafe { &(*td).users }.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: allocated by publish; the application no longer uses it.
    drop(unsafe { Box::from_raw(p.ptr) });
    Ok(())
}

/// `verbs_context.advise_mr` (`ibv_advise_mr`): 0, or the errno value (ibv_advise_mr(3)).
pub(crate) unsafe extern "C" fn vctx_advise_mr(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sges: u32,
) -> c_int {
    const VERB: &str = "ibv_advise_mr";
    guard_errno(VERB, || {
        // SAFETY: a PD or parent domain of this library, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, pd) }?;
        let n = c_int::try_from(num_sges).map_err(|_| fail(VERB, libc::EINVAL, "num_sges"))?;
        // The kernel takes the list as one ioctl attribute, whose length is 16 bits.
        let most = (u16::MAX as usize / size_of::<ibv_sge>()) as u32;
        // SAFETY: the caller's list of num_sges elements (a longer count is refused unread).
        let sges =
            unsafe { convert::sges_from_c(sg_list, n, most) }.map_err(|e| fail_convert(VERB, e))?;
        on_device(VERB, p.dev, |h| h.advise_mr(p.handle, advice, flags, &sges))
    })
}

/// `verbs_context.alloc_td` (`ibv_alloc_td`): NULL with errno on failure.
pub(crate) unsafe extern "C" fn vctx_alloc_td(
    context: *mut ibv_context,
    init_attr: *mut c_void,
) -> *mut c_void {
    const VERB: &str = "ibv_alloc_td";
    guard_ptr(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        let attr = init_attr.cast::<ibv_td_init_attr>();
        // SAFETY: the caller's attributes, if any.
        if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "init_attr must be given, with comp_mask 0",
            ));
        }
        let td = EmuTd {
            td: ibv_td {
                context: ctx.ctx_ptr(),
            },
            users: std::sync::atomic::AtomicU32::new(0),
        };
        Ok(Box::into_raw(Box::new(td)).cast())
    })
}

/// `verbs_context.dealloc_td` (`ibv_dealloc_td`): 0, or EBUSY (the value) while a parent
/// domain uses it.
pub(crate) unsafe extern "C" fn vctx_dealloc_td(td: *mut c_void) -> c_int {
    const VERB: &str = "ibv_dealloc_td";
    guard_errno(VERB, || {
        if td.is_null() {
            return Err(fail(VERB, libc::EINVAL, "td is NULL"));
        }
        let t = td.cast::<EmuTd>();
        // SAFETY: a thread domain from ibv_alloc_td.
        let users = unsafe { &(*t).users }.load(std::sync::atomic::Ordering::Relaxed);
        if users > 0 {
            return Err(fail(
                VERB,
                libc::EBUSY,
                format!("{users} parent domains still use the thread domain"),
            ));
        }
        // SAFETY: allocated by vctx_alloc_td; the application no longer uses it.
        drop(unsafe { Box::from_raw(t) });
        Ok(())
    })
}

/// `verbs_context.alloc_parent_domain` (`ibv_alloc_parent_domain`): a PD interchangeable
/// with `attr.pd`. The emulator keeps no provider memory in the application's address
/// space, so it never calls the custom allocators: its queues are its own.
pub(crate) unsafe extern "C" fn vctx_alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut c_void,
) -> *mut ibv_pd {
    const VERB: &str = "ibv_alloc_parent_domain";
    guard_ptr(VERB, || {
        let attr = attr.cast::<ibv_parent_domain_init_attr>();
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "attr is NULL"));
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { *attr };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!("unknown comp_mask bits {:#x}", a.comp_mask & !known),
            ));
        }
        if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0
            && (a.alloc.is_none() || a.free.is_none())
        {
            return Err(fail(VERB, libc::EINVAL, "allocators without alloc or free"));
        }
        // SAFETY: a PD from ibv_alloc_pd, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, a.pd) }?;
        if p.ctx.ctx_ptr() != context {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the PD belongs to another context",
            ));
        }
        // SAFETY: a live object; the field is set at creation.
        if unsafe { std::ptr::addr_of!((*p.ptr).parent_of_td).read() }.is_some() {
            return Err(fail(VERB, libc::EINVAL, "pd is itself a parent domain"));
        }
        let td = a.td.cast::<EmuTd>();
        // SAFETY: a thread domain from ibv_alloc_td, if any.
        if !td.is_null() && unsafe { (*td).td.context } != context {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the thread domain belongs to another context",
            ));
        }
        on_device(VERB, p.dev, |h| h.alloc_parent_domain(p.handle))?;
        if !td.is_null() {
            // SAFETY: as above.
            unsafe { &(*td).users }.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let pd = ibv_pd {
            context,
            handle: p.handle.to_raw() as u32,
        };
        let parent = publish(Box::new(EmuPd {
            pd,
            handle: p.handle,
            parent_of_td: Some(td),
        }));
        // It shares its PD's handle: at close it goes as a parent domain, before the PDs.
        let handle = p.handle;
        p.ctx.own(
            parent as usize,
            EmuPd::CLOSE_ORDER - 1,
            Box::new(move |dev: &Device| dev.with(|h| h.dealloc_parent_domain(handle))),
        );
        Ok(parent.cast())
    })
}

// ---- MR ------------------------------------------------------------------------------

#[repr(C)]
pub(crate) struct EmuMr {
    mr: ibv_mr,
    handle: MrHandle,
}

// SAFETY: repr(C), ibv_mr first, allocated by publish.
unsafe impl Object for EmuMr {
    type C = ibv_mr;
    type Handle = MrHandle;
    const ARG: &'static str = "mr";
    object_fields!(mr);
    const CLOSE_ORDER: u8 = 4;
    fn destroy_on(dev: &Device, handle: MrHandle) -> VerbsResult<()> {
        dev.with(|h| h.dereg_mr(handle))
    }
}

/// Every `ibv_reg_mr*` export.
///
/// # Safety
/// `pd` must be NULL or from ibv_alloc_pd; `addr..addr+length` stays valid until
/// ibv_dereg_mr (ibv_reg_mr(3)).
unsafe fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, c_int> {
    const VERB: &str = "ibv_reg_mr";
    // SAFETY: forwarded.
    let p = unsafe { resolve::<EmuPd>(VERB, pd) }?;
    // Optional bits (relaxed ordering …) may be ignored by a device (verbs.h).
    let access = AccessFlags(access & !IBV_ACCESS_OPTIONAL_RANGE);
    // SAFETY: forwarded: the application keeps the memory valid until dereg; the device
    // checks the pages are mapped with the access the flags need.
    let (handle, keys) = unsafe { p.dev.reg_mr(p.handle, addr.cast(), length, access) }
        .map_err(|e| fail(VERB, e.errno(), e))?;
    // ibv_reg_mr_iova: the keys address the region from `iova` (ZERO_BASED: from 0, which
    // the registration already set up).
    if iova != addr as u64
        && !access.contains(AccessFlags::ZERO_BASED)
        && let Err(e) = p.dev.with(|h| h.set_mr_iova(handle, iova))
    {
        let _ = p.dev.with(|h| h.dereg_mr(handle));
        return Err(fail(VERB, e.errno(), e));
    }
    let mr = ibv_mr {
        context: p.ctx.ctx_ptr(),
        pd,
        addr,
        length,
        handle: handle.to_raw() as u32,
        lkey: keys.lkey,
        rkey: keys.rkey,
    };
    Ok(publish(Box::new(EmuMr { mr, handle })).cast())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's PD and memory (ibv_reg_mr(3)).
    guard_ptr("ibv_reg_mr", || unsafe {
        reg_mr(pd, addr, length, addr as u64, access as c_uint)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the caller's PD and memory (ibv_reg_mr(3)).
    guard_ptr("ibv_reg_mr", || unsafe {
        reg_mr(pd, addr, length, iova, access as c_uint)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the caller's PD and memory (ibv_reg_mr(3)).
    guard_ptr("ibv_reg_mr", || unsafe {
        reg_mr(pd, addr, length, iova, access)
    })
}

/// The flags `ibv_rereg_mr` knows (`IBV_REREG_MR_FLAGS_SUPPORTED`).
const REREG_FLAGS: u32 =
    IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;

/// `ibv_rereg_mr` (ibv_rereg_mr(3)): 0, or `IBV_REREG_MR_ERR_INPUT` with errno when the old
/// region stays valid (libibverbs' own argument checks, and the device's: the region is
/// only changed when every check passed).
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    const VERB: &str = "ibv_rereg_mr";
    guard(VERB, IBV_REREG_MR_ERR_INPUT, || {
        // SAFETY: an MR from ibv_reg_mr, or rejected.
        let Ok(m) = (unsafe { resolve::<EmuMr>(VERB, mr) }) else {
            return IBV_REREG_MR_ERR_INPUT;
        };
        let flags = flags as u32;
        let input_error = |why: &str| {
            fail(VERB, libc::EINVAL, why);
            IBV_REREG_MR_ERR_INPUT
        };
        // libibverbs' checks (verbs.c), before the provider sees the call.
        if flags & !REREG_FLAGS != 0 {
            return input_error("unknown flags");
        }
        let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        if translation && (length == 0 || addr.is_null()) {
            return input_error("a new translation needs an address and a length");
        }
        if access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0 {
            return input_error("access given without IBV_REREG_MR_CHANGE_ACCESS");
        }
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: a PD from ibv_alloc_pd, or rejected.
            match unsafe { resolve::<EmuPd>(VERB, pd) } {
                Ok(p) if std::ptr::eq(p.ctx, m.ctx) => Some(p.handle),
                Ok(_) => return input_error("the PD belongs to another context"),
                Err(_) => return IBV_REREG_MR_ERR_INPUT,
            }
        } else {
            None
        };
        let range = translation.then_some((addr.cast::<u8>(), length));
        // Optional bits may be ignored, as at registration.
        let new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS != 0)
            .then_some(AccessFlags(access as c_uint & !IBV_ACCESS_OPTIONAL_RANGE));
        // SAFETY: the application keeps a new range valid until ibv_dereg_mr
        // (ibv_reg_mr(3)); the device checks its pages first.
        match unsafe { m.dev.rereg_mr(m.handle, new_pd, range, new_access) } {
            Ok(keys) => {
                // SAFETY: the live region; libibverbs updates these fields after the
                // provider's success.
                unsafe {
                    let c = &mut (*m.ptr).mr;
                    if new_pd.is_some() {
                        c.pd = pd;
                    }
                    if translation {
                        c.addr = addr;
                        c.length = length;
                    }
                    c.lkey = keys.lkey;
                    c.rkey = keys.rkey;
                }
                0
            }
            Err(e) => {
                fail(VERB, e.errno(), e);
                IBV_REREG_MR_ERR_INPUT
            }
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    const VERB: &str = "ibv_dereg_mr";
    // SAFETY: an MR from ibv_reg_mr, or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuMr>(VERB, mr) })
}

// ---- DM (verbs.h's inline ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr call the verbs_context;
// ibv_memcpy_to_dm / ibv_memcpy_from_dm the ibv_dm's pointers) -----------------------------

/// Device memory: process memory the application reaches only through the copy functions
/// and zero-based regions (ibv_alloc_dm(3)); the core accounts for it.
#[repr(C)]
pub(crate) struct EmuDm {
    dm: ibv_dm,
    handle: DmHandle,
    mem: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: repr(C), ibv_dm first, allocated by publish.
unsafe impl Object for EmuDm {
    type C = ibv_dm;
    type Handle = DmHandle;
    const ARG: &'static str = "dm";
    object_fields!(dm);
    const CLOSE_ORDER: u8 = 5;
    fn destroy_on(dev: &Device, handle: DmHandle) -> VerbsResult<()> {
        dev.with(|h| h.free_dm(handle))
    }
    unsafe fn release(_ctx: &EmuContext, p: *mut Self) {
        // SAFETY: the live object, no longer used; its memory came from alloc_zeroed with
        // this layout and no region covers it any more (the device refused otherwise).
        unsafe { std::alloc::dealloc((*p).mem, (*p).layout) };
    }
}

/// `verbs_context.alloc_dm` (`ibv_alloc_dm`): NULL with errno (ibv_alloc_dm(3)): EINVAL
/// for a comp_mask this version does not know, an empty allocation or an alignment above a
/// page; ENOMEM beyond `max_dm_size`.
pub(crate) unsafe extern "C" fn vctx_alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    const VERB: &str = "ibv_alloc_dm";
    guard_ptr(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let (ctx, dev) = unsafe { ctx_and_device(VERB, context) }?;
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "attr is NULL"));
        }
        // SAFETY: the caller's attributes.
        let a = unsafe { *attr };
        if a.comp_mask != 0 {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!("comp_mask {:#x}: no optional fields are known", a.comp_mask),
            ));
        }
        let handle = on_device(VERB, dev, |h| h.alloc_dm(a.length as u64, a.log_align_req))?;
        // The device checked the alignment (at most a page) and the length (non-zero,
        // within max_dm_size); atomics on device memory want 8 bytes at least.
        let align = (1usize << a.log_align_req.min(12)).max(8);
        let layout = std::alloc::Layout::from_size_align(a.length, align)
            .map_err(|e| fail(VERB, libc::EINVAL, e))?;
        // SAFETY: a non-zero size (the device refuses 0).
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        if mem.is_null() {
            let _ = dev.with(|h| h.free_dm(handle));
            return Err(fail(VERB, libc::ENOMEM, "out of memory"));
        }
        let dm = ibv_dm {
            context: ctx.ctx_ptr(),
            memcpy_to_dm: Some(dm_memcpy_to),
            memcpy_from_dm: Some(dm_memcpy_from),
            comp_mask: 0,
            handle: handle.to_raw() as u32,
        };
        Ok(publish(Box::new(EmuDm {
            dm,
            handle,
            mem,
            layout,
        }))
        .cast())
    })
}

/// `verbs_context.free_dm` (`ibv_free_dm`): 0 or the errno value; EBUSY while a region
/// covers the memory (ibv_alloc_dm(3), NOTES).
pub(crate) unsafe extern "C" fn vctx_free_dm(dm: *mut ibv_dm) -> c_int {
    const VERB: &str = "ibv_free_dm";
    // SAFETY: device memory from ibv_alloc_dm, or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuDm>(VERB, dm) })
}

/// The bytes `offset..offset+len` of device memory `dm`, checked as mlx5 checks them (its
/// copies move 4-byte words): EFAULT outside the allocation, EINVAL when the offset or the
/// length is not a multiple of 4.
///
/// # Safety
/// `dm` is NULL or live device memory from ibv_alloc_dm.
unsafe fn dm_bytes(verb: &str, dm: *mut ibv_dm, offset: u64, len: usize) -> Result<*mut u8, c_int> {
    // SAFETY: forwarded.
    let d = unsafe { resolve::<EmuDm>(verb, dm) }?;
    // SAFETY: the live object; its size is fixed at creation.
    let size = unsafe { (*d.ptr).layout.size() } as u64;
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(fail(
            verb,
            libc::EFAULT,
            format!("offset {offset} + length {len} is outside the {size} bytes of device memory"),
        ));
    }
    if offset % 4 != 0 || len % 4 != 0 {
        return Err(fail(
            verb,
            libc::EINVAL,
            format!("offset {offset} and length {len} must be multiples of 4"),
        ));
    }
    // SAFETY: in bounds, checked above.
    Ok(unsafe { (*d.ptr).mem.add(offset as usize) })
}

/// `ibv_memcpy_to_dm`: 0 or the errno value (ibv_alloc_dm(3)).
unsafe extern "C" fn dm_memcpy_to(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    const VERB: &str = "ibv_memcpy_to_dm";
    // SAFETY: forwarded.
    guard_errno(VERB, || unsafe {
        dm_copy(VERB, dm, dm_offset, host_addr.cast_mut(), length, true)
    })
}

/// `ibv_memcpy_from_dm`: 0 or the errno value (ibv_alloc_dm(3)).
unsafe extern "C" fn dm_memcpy_from(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    const VERB: &str = "ibv_memcpy_from_dm";
    // SAFETY: forwarded.
    guard_errno(VERB, || unsafe {
        dm_copy(VERB, dm, dm_offset, host_addr, length, false)
    })
}

/// Copy `length` bytes between the host memory at `host` and device memory `dm` at
/// `offset`, towards the device when `to_device`.
///
/// # Safety
/// `dm` is NULL or live device memory; `host` holds `length` readable (or, from the device,
/// writable) bytes.
unsafe fn dm_copy(
    verb: &str,
    dm: *mut ibv_dm,
    offset: u64,
    host: *mut c_void,
    length: usize,
    to_device: bool,
) -> Result<(), c_int> {
    // SAFETY: forwarded.
    let device = unsafe { dm_bytes(verb, dm, offset, length) }?;
    if length > 0 && host.is_null() {
        return Err(fail(verb, libc::EINVAL, "host_addr is NULL"));
    }
    let (from, to) = if to_device {
        (host.cast::<u8>().cast_const(), device)
    } else {
        (device.cast_const(), host.cast::<u8>())
    };
    // SAFETY: the checked device memory range and the caller's `length` bytes.
    unsafe { std::ptr::copy(from, to, length) };
    Ok(())
}

/// `verbs_context.reg_dm_mr` (`ibv_reg_dm_mr`): a zero-based region over part of the device
/// memory; NULL with errno: EINVAL without `IBV_ACCESS_ZERO_BASED` or for a range outside
/// the allocation (ibv_alloc_dm(3), "Device memory registration").
pub(crate) unsafe extern "C" fn vctx_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    const VERB: &str = "ibv_reg_dm_mr";
    guard_ptr(VERB, || {
        // SAFETY: device memory from ibv_alloc_dm, or rejected.
        let d = unsafe { resolve::<EmuDm>(VERB, dm) }?;
        // SAFETY: a PD from ibv_alloc_pd, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, pd) }?;
        if !std::ptr::eq(p.dev, d.dev) {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the PD and the device memory are of different devices",
            ));
        }
        let flags = AccessFlags(access & !IBV_ACCESS_OPTIONAL_RANGE);
        let (handle, keys) = on_device(VERB, d.dev, |h| {
            h.check_dm_range(d.handle, dm_offset, length as u64, flags)?;
            // SAFETY: our own allocation, in bounds (checked above), so no page check (and
            // an empty region is fine, as on mlx5); it lives until ibv_free_dm, which the
            // device refuses while this region exists.
            let (mr, keys) = unsafe {
                h.reg_mr(
                    p.handle,
                    (*d.ptr).mem.add(dm_offset as usize),
                    length,
                    flags,
                )
            }?;
            if let Err(e) = h.tie_mr_to_dm(mr, d.handle) {
                let _ = h.dereg_mr(mr);
                return Err(e);
            }
            Ok((mr, keys))
        })?;
        // As the kernel's registration: the memory's address is the device's, hidden.
        let mr = ibv_mr {
            context: p.ctx.ctx_ptr(),
            pd,
            addr: std::ptr::null_mut(),
            length,
            handle: handle.to_raw() as u32,
            lkey: keys.lkey,
            rkey: keys.rkey,
        };
        Ok(publish(Box::new(EmuMr { mr, handle })).cast())
    })
}

/// `verbs_context.alloc_null_mr` (`ibv_alloc_null_mr`): a region of the maximum length
/// that reads as zeros and discards writes (ibv_alloc_null_mr(3)); NULL with errno on
/// failure. As mlx5's: `addr` NULL, `length` SIZE_MAX, only the lkey valid (rkey 0).
pub(crate) unsafe extern "C" fn vctx_alloc_null_mr(pd: *mut ibv_pd) -> *mut ibv_mr {
    const VERB: &str = "ibv_alloc_null_mr";
    guard_ptr(VERB, || {
        // SAFETY: a PD from ibv_alloc_pd, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, pd) }?;
        let (handle, keys) = on_device(VERB, p.dev, |h| h.alloc_null_mr(p.handle))?;
        let mr = ibv_mr {
            context: p.ctx.ctx_ptr(),
            pd,
            addr: std::ptr::null_mut(),
            length: usize::MAX,
            handle: handle.to_raw() as u32,
            lkey: keys.lkey,
            rkey: keys.rkey,
        };
        Ok(publish(Box::new(EmuMr { mr, handle })).cast())
    })
}

// ---- MW (verbs.h's inline ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw call ctx->ops) -----

#[repr(C)]
pub(crate) struct EmuMw {
    mw: ibv_mw,
    handle: MwHandle,
}

// SAFETY: repr(C), ibv_mw first, allocated by publish.
unsafe impl Object for EmuMw {
    type C = ibv_mw;
    type Handle = MwHandle;
    const ARG: &'static str = "mw";
    object_fields!(mw);
    const CLOSE_ORDER: u8 = 2;
    fn destroy_on(dev: &Device, handle: MwHandle) -> VerbsResult<()> {
        dev.with(|h| h.dealloc_mw(handle))
    }
}

/// `ibv_alloc_mw`: NULL with errno on failure (ibv_alloc_mw(3)); an unknown type is EINVAL.
unsafe extern "C" fn op_alloc_mw(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw {
    const VERB: &str = "ibv_alloc_mw";
    guard_ptr(VERB, || {
        // SAFETY: a PD from ibv_alloc_pd, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, pd) }?;
        let Some(t) = MwType::from_raw(mw_type) else {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!("memory window type {mw_type} (IBV_MW_TYPE_1 or IBV_MW_TYPE_2)"),
            ));
        };
        let (handle, rkey) = on_device(VERB, p.dev, |h| h.alloc_mw(p.handle, t))?;
        let mw = ibv_mw {
            context: p.ctx.ctx_ptr(),
            pd,
            rkey,
            handle: handle.to_raw() as u32,
            type_: mw_type,
        };
        Ok(publish(Box::new(EmuMw { mw, handle })).cast())
    })
}

/// `ibv_dealloc_mw`: 0, or the errno value (ibv_alloc_mw(3)).
unsafe extern "C" fn op_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    const VERB: &str = "ibv_dealloc_mw";
    // SAFETY: a window from ibv_alloc_mw, or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuMw>(VERB, mw) })
}

/// `ibv_bind_mw` (type 1; verbs.h has checked the type and the region's PD): posts the
/// bind with the window's next R_Key (`ibv_inc_rkey`) and, once posted, returns that key in
/// `mw->rkey`; 0, or the errno value (ibv_bind_mw(3)).
unsafe extern "C" fn op_bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    const VERB: &str = "ibv_bind_mw";
    guard_errno(VERB, || {
        // SAFETY: a QP from ibv_create_qp, or rejected.
        let q = unsafe { resolve::<EmuQp>(VERB, qp) }?;
        // SAFETY: a window from ibv_alloc_mw, or rejected.
        let w = unsafe { resolve::<EmuMw>(VERB, mw) }?;
        if mw_bind.is_null() {
            return Err(fail(VERB, libc::EINVAL, "mw_bind is NULL"));
        }
        // SAFETY: the caller's bind description.
        let b = unsafe { *mw_bind };
        let old = unsafe { std::ptr::addr_of!((*w.ptr).mw.rkey).read() };
        let rkey = (old & !0xFF) | (old.wrapping_add(1) & 0xFF);
        let mr = (!b.bind_info.mr.is_null())
            // SAFETY: a region from ibv_reg_mr (verbs.h compared its PD with the window's).
            .then(|| unsafe { EmuMr::handle(b.bind_info.mr.cast()) });
        let bind = convert::mw_bind_from_c(w.handle, mr, rkey, &b.bind_info);
        on_device(VERB, q.dev, |h| {
            h.bind_mw(q.handle, b.wr_id, SendFlags(b.send_flags), bind)
        })?;
        // SAFETY: the live window; the application reads the new key from it.
        unsafe { std::ptr::addr_of_mut!((*w.ptr).mw.rkey).write(rkey) };
        Ok(())
    })
}

// ---- completion channels --------------------------------------------------------------

#[repr(C)]
struct EmuChannel {
    ch: ibv_comp_channel,
    handle: ChannelHandle,
    fd: Arc<EventFd>,
}

// SAFETY: repr(C), ibv_comp_channel first, allocated by publish.
unsafe impl Object for EmuChannel {
    type C = ibv_comp_channel;
    type Handle = ChannelHandle;
    const ARG: &'static str = "channel";
    object_fields!(ch);
    const CLOSE_ORDER: u8 = 7;
    fn destroy_on(dev: &Device, handle: ChannelHandle) -> VerbsResult<()> {
        dev.destroy_comp_channel(handle)
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    const VERB: &str = "ibv_create_comp_channel";
    guard_ptr(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let (ctx, dev) = unsafe { ctx_and_device(VERB, context) }?;
        let (handle, fd) = dev
            .create_comp_channel()
            .map_err(|e| fail(VERB, e.raw_os_error().unwrap_or(libc::EMFILE), e))?;
        let ch = ibv_comp_channel {
            context: ctx.ctx_ptr(),
            fd: fd.as_raw_fd(),
            refcnt: 0,
        };
        Ok(publish(Box::new(EmuChannel { ch, handle, fd })).cast())
    })
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    const VERB: &str = "ibv_destroy_comp_channel";
    // SAFETY: a channel from ibv_create_comp_channel, or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuChannel>(VERB, channel) })
}

// ---- CQ -------------------------------------------------------------------------------

/// A CQ. Every CQ carries an `ibv_cq_ex` (whose first 128 bytes are the `ibv_cq`); CQs made
/// by `ibv_create_cq_ex` have its polling entry points set.
#[repr(C)]
pub(crate) struct EmuCq {
    pub(crate) cqx: ibv_cq_ex,
    handle: CqHandle,
    /// The completion `ibv_start_poll`/`ibv_next_poll` moved to (`ibv_wc_read_*` read it).
    pub(crate) current: Mutex<Option<WorkCompletion>>,
    /// `ibv_start_poll` … `ibv_end_poll`, one poller at a time (not taken for a CQ created
    /// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`).
    pub(crate) polling: crate::section::Section,
    pub(crate) single_threaded: bool,
}

// SAFETY: repr(C), ibv_cq_ex (which starts with the ibv_cq) first, allocated by publish.
unsafe impl Object for EmuCq {
    type C = ibv_cq;
    type Handle = CqHandle;
    const ARG: &'static str = "cq";
    object_fields!(cqx);
    const CLOSE_ORDER: u8 = 6;
    fn close_on(dev: &Device, handle: CqHandle) -> VerbsResult<()> {
        dev.with(|h| {
            h.forget_unacknowledged(EventElement::Cq(handle));
            h.destroy_cq(handle)
        })
    }
    fn destroy_on(dev: &Device, handle: CqHandle) -> VerbsResult<()> {
        destroy_after_acks(
            dev,
            "ibv_destroy_cq",
            (ObjectKind::Cq, handle.to_raw()),
            |h| h.destroy_cq(handle),
        )
    }
    unsafe fn release(ctx: &EmuContext, p: *mut Self) {
        // SAFETY: a live CQ no longer used (as documented).
        unsafe {
            ctx.unregister(ObjectKind::Cq, (*p).handle.to_raw());
            let channel = (*p).cqx.channel;
            if !channel.is_null() {
                // Atomic: CQs of one channel come and go on several threads (rdma-core
                // counts under the context's mutex).
                std::sync::atomic::AtomicI32::from_ptr(&raw mut (*channel).refcnt)
                    .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
            destroy_sync(&mut (*p).cqx.mutex, &mut (*p).cqx.cond);
        }
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    const VERB: &str = "ibv_create_cq";
    guard_ptr(VERB, || {
        let (Ok(cqe), Ok(comp_vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
            return Err(fail(VERB, libc::EINVAL, "cqe or comp_vector is negative"));
        };
        // SAFETY: context and channel from this library, or rejected.
        let cq = unsafe { create_cq(VERB, context, cqe, cq_context, channel, comp_vector) }?;
        Ok(cq.cast())
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
    // SAFETY: forwarded.
    let (ctx, dev) = unsafe { ctx_and_device(verb, context) }?;
    // SAFETY: a channel from ibv_create_comp_channel, or NULL.
    let ch = (!channel.is_null()).then(|| unsafe { EmuChannel::handle(channel.cast()) });
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
        polling: crate::section::Section::default(),
        single_threaded: false,
    });
    // The device hands this pointer back with each completion event.
    let me = std::ptr::from_mut(cq.as_mut()) as u64;
    let (handle, real) = on_device(verb, dev, |h| h.create_cq(cqe, ch, comp_vector, me))?;
    cq.handle = handle;
    cq.cqx.handle = handle.to_raw() as u32;
    cq.cqx.cqe = i32::try_from(real).unwrap_or(i32::MAX);
    init_sync(&mut cq.cqx.mutex, &mut cq.cqx.cond);
    if !channel.is_null() {
        // SAFETY: a channel from ibv_create_comp_channel; its aligned c_int, updated only
        // atomically by this library (see EmuCq::release).
        unsafe {
            std::sync::atomic::AtomicI32::from_ptr(&raw mut (*channel).refcnt)
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
        };
    }
    let cq = publish(cq);
    ctx.register(ObjectKind::Cq, handle.to_raw(), cq as usize);
    Ok(cq)
}

/// `verbs_context.modify_cq` (`ibv_modify_cq`): 0 or the errno value (ibv_modify_cq(3)).
/// As libibverbs and the kernel check it: an attr_mask of 0 or with a bit past
/// IBV_CQ_ATTR_MODERATE is EINVAL; a period beyond `cq_mod_caps.max_cq_period` EINVAL (as
/// mlx5).
pub(crate) unsafe extern "C" fn vctx_modify_cq(
    cq: *mut ibv_cq,
    attr: *mut ibv_modify_cq_attr,
) -> c_int {
    const VERB: &str = "ibv_modify_cq";
    guard_errno(VERB, || {
        // SAFETY: a CQ from ibv_create_cq(_ex), or rejected.
        let c = unsafe { resolve::<EmuCq>(VERB, cq) }?;
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "attr is NULL"));
        }
        // SAFETY: the caller's attributes, checked non-NULL.
        let attr = unsafe { *attr };
        if attr.attr_mask == 0 || attr.attr_mask >= IBV_CQ_ATTR_RESERVED {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!(
                    "attr_mask {:#x}: IBV_CQ_ATTR_MODERATE is the one attribute",
                    attr.attr_mask
                ),
            ));
        }
        let m = attr.moderate;
        on_device(VERB, c.dev, |h| {
            h.modify_cq_moderation(c.handle, m.cq_count, m.cq_period)
        })
    })
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    const VERB: &str = "ibv_destroy_cq";
    // SAFETY: a CQ from ibv_create_cq(_ex), or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuCq>(VERB, cq) })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    const VERB: &str = "ibv_resize_cq";
    guard_errno(VERB, || {
        // SAFETY: a CQ from ibv_create_cq, or rejected.
        let c = unsafe { resolve::<EmuCq>(VERB, cq) }?;
        let cqe = u32::try_from(cqe).map_err(|_| fail(VERB, libc::EINVAL, "cqe < 0"))?;
        let real = on_device(VERB, c.dev, |h| h.resize_cq(c.handle, cqe))?;
        // SAFETY: as above.
        unsafe { (*cq).cqe = i32::try_from(real).unwrap_or(i32::MAX) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    const VERB: &str = "ibv_get_cq_event";
    guard_status(VERB, || {
        if cq.is_null() || cq_context.is_null() {
            return Err(fail(VERB, libc::EINVAL, "a NULL argument"));
        }
        // SAFETY: a channel from ibv_create_comp_channel, or rejected.
        let ch = unsafe { resolve::<EmuChannel>(VERB, channel) }?;
        // SAFETY: as above; the fd is set once at creation.
        let fd = unsafe { (*ch.ptr).fd.as_raw_fd() };
        // A non-blocking channel fd (the ibv_get_cq_event(3) example) must not block.
        let timeout = fd_is_nonblocking(fd).then_some(Duration::ZERO);
        let (_, me) = ch
            .dev
            .get_cq_event(ch.handle, timeout)
            .map_err(|e| e.errno())?;
        let emu = me as usize as *mut EmuCq;
        // SAFETY: the pointer given to create_cq; the CQ cannot be destroyed while
        // events are unacknowledged.
        unsafe {
            *cq = emu.cast();
            *cq_context = (*emu).cqx.cq_context;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    const VERB: &str = "ibv_ack_cq_events";
    guard(VERB, (), || {
        // SAFETY: a CQ from ibv_create_cq, or rejected.
        let Ok(c) = (unsafe { resolve::<EmuCq>(VERB, cq) }) else {
            return;
        };
        if on_device(VERB, c.dev, |h| h.ack_cq_events(c.handle, nevents)).is_ok() {
            // SAFETY: as above; the field is the library's, aligned, and only updated
            // atomically (two threads may ack events of one CQ).
            unsafe {
                std::sync::atomic::AtomicU32::from_ptr(&raw mut (*cq).comp_events_completed)
                    .fetch_add(nevents, std::sync::atomic::Ordering::AcqRel)
            };
        }
    })
}

thread_local! {
    /// Empty `ibv_poll_cq` calls in a row on this thread.
    static EMPTY_POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Empty polls in a row after which a polling thread yields its core once.
const YIELD_AFTER_EMPTY_POLLS: u32 = 64;

unsafe extern "C" fn op_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    const VERB: &str = "ibv_poll_cq";
    guard(VERB, -libc::EIO, || {
        // SAFETY: a CQ from ibv_create_cq, or rejected.
        let c = match unsafe { resolve::<EmuCq>(VERB, cq) } {
            Ok(c) => c,
            Err(e) => return -e,
        };
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return -fail(VERB, libc::EINVAL, "num_entries < 0 or wc is NULL");
        }
        let want = num_entries as usize;
        const CHUNK: usize = 32;
        // As many entries as asked for (up to a chunk): a busy poller asks for one or a
        // few thousands of times a second, and a whole chunk set up per call showed.
        let blank = WorkCompletion::success(0, 0, WcOpcode::Send, 0);
        // Filled in place: `smallvec!`/`from_elem` built the vector and then moved it,
        // copying the whole inline chunk (2 KiB) on every call.
        let mut buf: SmallVec<[WorkCompletion; CHUNK]> = SmallVec::new();
        buf.resize(want.min(CHUNK), blank);
        // Busy pollers receive and run timers themselves (no engine wakeup per arrival).
        let got = c.dev.busy_poll(
            |h| {
                let mut total = 0usize;
                while total < want {
                    let n = CHUNK.min(want - total);
                    match h.poll_cq(c.handle, &mut buf[..n]) {
                        Ok(k) => {
                            for (i, w) in buf[..k].iter().enumerate() {
                                // SAFETY: the caller's array holds num_entries entries.
                                unsafe {
                                    *wc.add(total + i) =
                                        convert::wc_to_c(&with_roce_packet_type(*w, c.ctx))
                                };
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
            },
            |&n| n == 0,
        );
        // A spinning poller gives way now and then to whatever else is runnable on its
        // core (the peer, a VM): on a small machine they carry the packets it waits for.
        // Not on every empty poll: a yield that switches costs the next arrival microseconds.
        EMPTY_POLLS.with(|n| {
            let empty = if got == 0 { n.get() + 1 } else { 0 };
            n.set(if empty >= YIELD_AFTER_EMPTY_POLLS {
                std::thread::yield_now();
                0
            } else {
                empty
            });
        });
        got
    })
}

unsafe extern "C" fn op_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    const VERB: &str = "ibv_req_notify_cq";
    guard_errno(VERB, || {
        // SAFETY: a CQ from ibv_create_cq, or rejected.
        let c = unsafe { resolve::<EmuCq>(VERB, cq) }?;
        on_device(VERB, c.dev, |h| {
            h.req_notify_cq(c.handle, solicited_only != 0)
        })
    })
}

// ---- SRQ ------------------------------------------------------------------------------

#[repr(C)]
struct EmuSrq {
    srq: ibv_srq,
    handle: SrqHandle,
    /// SGEs per receive as created: a post's `num_sge` is checked before its list is read.
    max_sge: u32,
}

// SAFETY: repr(C), ibv_srq first, allocated by publish.
unsafe impl Object for EmuSrq {
    type C = ibv_srq;
    type Handle = SrqHandle;
    const ARG: &'static str = "srq";
    object_fields!(srq);
    const CLOSE_ORDER: u8 = 1;
    fn close_on(dev: &Device, handle: SrqHandle) -> VerbsResult<()> {
        dev.with(|h| {
            h.forget_unacknowledged(EventElement::Srq(handle));
            h.destroy_srq(handle)
        })
    }
    fn destroy_on(dev: &Device, handle: SrqHandle) -> VerbsResult<()> {
        destroy_after_acks(
            dev,
            "ibv_destroy_srq",
            (ObjectKind::Srq, handle.to_raw()),
            |h| h.destroy_srq(handle),
        )
    }
    unsafe fn release(ctx: &EmuContext, p: *mut Self) {
        // SAFETY: a live SRQ no longer used (as documented).
        unsafe {
            ctx.unregister(ObjectKind::Srq, (*p).handle.to_raw());
            destroy_sync(&mut (*p).srq.mutex, &mut (*p).srq.cond);
        }
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    const VERB: &str = "ibv_create_srq";
    guard_ptr(VERB, || {
        // SAFETY: a PD from ibv_alloc_pd, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, pd) }?;
        if init.is_null() {
            return Err(fail(VERB, libc::EINVAL, "srq_init_attr is NULL"));
        }
        // SAFETY: non-NULL from the caller.
        let ia = unsafe { &mut *init };
        let attr = convert::srq_attr_from_c(&ia.attr);
        let (handle, real) = on_device(VERB, p.dev, |h| {
            h.create_srq(p.handle, attr, ia.srq_context as u64)
        })?;
        ia.attr.max_wr = real.max_wr;
        ia.attr.max_sge = real.max_sge;
        Ok(publish_srq(p.ctx, pd, ia.srq_context, handle, real.max_sge).cast())
    })
}

/// The application's SRQ for a device SRQ just created.
fn publish_srq(
    ctx: &EmuContext,
    pd: *mut ibv_pd,
    srq_context: *mut c_void,
    handle: SrqHandle,
    max_sge: u32,
) -> *mut EmuSrq {
    // SAFETY: ibv_srq is plain data (pointers, integers, optional fn pointers, pthread
    // objects initialised below) for which all-zero bytes are valid.
    let mut srq: ibv_srq = unsafe { std::mem::zeroed() };
    srq.context = ctx.ctx_ptr();
    srq.srq_context = srq_context;
    srq.pd = pd;
    srq.handle = handle.to_raw() as u32;
    let s = publish(Box::new(EmuSrq {
        srq,
        handle,
        max_sge,
    }));
    // SAFETY: allocated above and not handed out yet.
    unsafe { init_sync(&mut (*s).srq.mutex, &mut (*s).srq.cond) };
    ctx.register(ObjectKind::Srq, handle.to_raw(), s as usize);
    s
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    const VERB: &str = "ibv_modify_srq";
    guard_errno(VERB, || {
        // SAFETY: an SRQ from ibv_create_srq, or rejected.
        let s = unsafe { resolve::<EmuSrq>(VERB, srq) }?;
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "srq_attr is NULL"));
        }
        let m = convert::srq_attr_mask_from_c(mask).map_err(|e| fail_convert(VERB, e))?;
        // SAFETY: non-NULL from the caller.
        let a = convert::srq_attr_from_c(unsafe { &*attr });
        on_device(VERB, s.dev, |h| h.modify_srq(s.handle, a, m))
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    const VERB: &str = "ibv_query_srq";
    guard_errno(VERB, || {
        // SAFETY: an SRQ from ibv_create_srq, or rejected.
        let s = unsafe { resolve::<EmuSrq>(VERB, srq) }?;
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "srq_attr is NULL"));
        }
        let a = on_device(VERB, s.dev, |h| h.query_srq(s.handle))?;
        // SAFETY: non-NULL from the caller.
        unsafe { *attr = convert::srq_attr_to_c(&a) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    const VERB: &str = "ibv_destroy_srq";
    // SAFETY: an SRQ from ibv_create_srq, or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuSrq>(VERB, srq) })
}

// ---- QP -------------------------------------------------------------------------------

/// Send work requests built with the `ibv_wr_*` API (`qp_ex`) between `ibv_wr_start` and
/// `ibv_wr_complete`.
#[derive(Debug, Default)]
pub(crate) struct WrBatch {
    pub(crate) wrs: Vec<SendWr>,
    /// Copies of inline data (`ibv_wr_set_inline_data` lets the caller reuse its buffer at
    /// once); the SGEs of inline WRs point here until the post copies them.
    pub(crate) inline: Vec<Vec<u8>>,
    /// The first builder call that failed: `ibv_wr_complete` reports it.
    pub(crate) error: Option<(c_int, String)>,
}

/// A QP. Every QP carries an `ibv_qp_ex` (whose first member is the `ibv_qp`); only QPs
/// made by `ibv_create_qp_ex` with send ops hand it out (`ibv_qp_to_qp_ex`).
#[repr(C)]
pub(crate) struct EmuQp {
    pub(crate) qpx: ibv_qp_ex,
    handle: QpHandle,
    qp_type: QpType,
    /// Created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: the `ibv_wr_*` API is set up.
    extended: bool,
    /// A second handle to an XRC target (`ibv_open_qp`): the object index keeps naming
    /// the creator's.
    opened: bool,
    /// The queues' sizes as created: a post's `num_sge` is checked against them before its
    /// list is read.
    cap: QpCap,
    pub(crate) batch: Mutex<WrBatch>,
    /// `ibv_wr_start` … `ibv_wr_complete`/`ibv_wr_abort`, one thread at a time.
    pub(crate) building: crate::section::Section,
}

impl EmuQp {
    /// The transport, set once at creation.
    ///
    /// # Safety
    /// `p` must point to a live QP.
    unsafe fn qp_type(p: *const Self) -> QpType {
        // SAFETY: as documented; read without a reference (see object_fields).
        unsafe { std::ptr::addr_of!((*p).qp_type).read() }
    }

    /// The queue sizes, set once at creation.
    ///
    /// # Safety
    /// `p` must point to a live QP.
    pub(crate) unsafe fn cap(p: *const Self) -> QpCap {
        // SAFETY: as documented; read without a reference (see object_fields).
        unsafe { std::ptr::addr_of!((*p).cap).read() }
    }

    /// Record the state set through the library in `qp->state`, as rdma-core does.
    ///
    /// # Safety
    /// `p` must point to a live QP.
    unsafe fn set_state(p: *mut Self, state: u32) {
        // SAFETY: as documented; a plain field write.
        unsafe { std::ptr::addr_of_mut!((*p).qpx.qp_base.state).write(state) };
    }
}

// SAFETY: repr(C), ibv_qp_ex (which starts with the ibv_qp) first, allocated by publish.
unsafe impl Object for EmuQp {
    type C = ibv_qp;
    type Handle = QpHandle;
    const ARG: &'static str = "qp";
    object_fields!(qpx.qp_base);
    const CLOSE_ORDER: u8 = 0;
    fn close_on(dev: &Device, handle: QpHandle) -> VerbsResult<()> {
        dev.with(|h| {
            h.forget_unacknowledged(EventElement::Qp(handle));
            h.destroy_qp(handle)
        })
    }
    fn destroy_on(dev: &Device, handle: QpHandle) -> VerbsResult<()> {
        destroy_after_acks(
            dev,
            "ibv_destroy_qp",
            (ObjectKind::Qp, handle.to_raw()),
            |h| h.destroy_qp(handle),
        )
    }
    unsafe fn release(ctx: &EmuContext, p: *mut Self) {
        // SAFETY: a live QP no longer used (as documented).
        unsafe {
            if !(*p).opened {
                ctx.unregister(ObjectKind::Qp, (*p).handle.to_raw());
            }
            destroy_sync(&mut (*p).qpx.qp_base.mutex, &mut (*p).qpx.qp_base.cond);
        }
    }
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    const VERB: &str = "ibv_create_qp";
    guard_ptr(VERB, || {
        if init.is_null() {
            return Err(fail(VERB, libc::EINVAL, "qp_init_attr is NULL"));
        }
        // SAFETY: pd from ibv_alloc_pd or rejected; init non-NULL from the caller.
        let qp = unsafe { create_qp(VERB, pd, &mut *init, false) }?;
        Ok(qp.cast())
    })
}

/// Create a QP; `extended` lets `ibv_qp_to_qp_ex` hand out its `ibv_qp_ex` (whose
/// `ibv_wr_*` entry points the caller sets).
///
/// # Safety
/// `pd` must be NULL or from ibv_alloc_pd; the CQs and SRQ of `ia` from this library.
pub(crate) unsafe fn create_qp(
    verb: &str,
    pd: *mut ibv_pd,
    ia: &mut ibv_qp_init_attr,
    extended: bool,
) -> Result<*mut EmuQp, c_int> {
    // SAFETY: forwarded.
    let p = unsafe { resolve::<EmuPd>(verb, pd) }?;
    // ibv_create_qp_ex(3): an XRC initiator has a send CQ only.
    let xrc_send = ia.qp_type == IBV_QPT_XRC_SEND;
    if ia.send_cq.is_null() || (ia.recv_cq.is_null() && !xrc_send) {
        return Err(fail(verb, libc::EINVAL, "send_cq and recv_cq are required"));
    }
    let recv_cq = if xrc_send { ia.send_cq } else { ia.recv_cq };
    // SAFETY: CQs from ibv_create_cq, SRQ from ibv_create_srq (as documented).
    let (send_cq, recv_cq, srq) = unsafe {
        (
            EmuCq::handle(ia.send_cq.cast()),
            EmuCq::handle(recv_cq.cast()),
            (!ia.srq.is_null()).then(|| EmuSrq::handle(ia.srq.cast())),
        )
    };
    let attr = convert::qp_init_attr_from_c(ia, send_cq, recv_cq, srq)
        .map_err(|e| fail_convert(verb, e))?;
    let (handle, qpn, cap) = on_device(verb, p.dev, |h| h.create_qp(p.handle, attr))?;
    ia.cap = convert::qp_cap_to_c(&cap);
    // SAFETY: ibv_qp_ex is plain data (pointers, integers, optional fn pointers, pthread
    // objects initialised below) for which all-zero bytes are valid.
    let mut qpx: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let base = &mut qpx.qp_base;
    base.context = p.ctx.ctx_ptr();
    base.qp_context = ia.qp_context;
    base.pd = pd;
    base.send_cq = ia.send_cq;
    base.recv_cq = ia.recv_cq;
    base.srq = ia.srq;
    base.handle = handle.to_raw() as u32;
    base.qp_num = qpn.value();
    base.state = IBV_QPS_RESET;
    base.qp_type = ia.qp_type;
    Ok(publish_qp(
        p.ctx,
        qpx,
        handle,
        attr.qp_type,
        cap,
        extended,
        false,
    ))
}

/// The application's QP for a device QP (`opened`: a further handle to an XRC target).
fn publish_qp(
    ctx: &EmuContext,
    qpx: ibv_qp_ex,
    handle: QpHandle,
    qp_type: QpType,
    cap: QpCap,
    extended: bool,
    opened: bool,
) -> *mut EmuQp {
    let q = publish(Box::new(EmuQp {
        qpx,
        handle,
        qp_type,
        extended,
        opened,
        cap,
        batch: Mutex::new(WrBatch::default()),
        building: crate::section::Section::default(),
    }));
    // SAFETY: allocated above and not handed out yet.
    unsafe { init_sync(&mut (*q).qpx.qp_base.mutex, &mut (*q).qpx.qp_base.cond) };
    if !opened {
        ctx.register(ObjectKind::Qp, handle.to_raw(), q as usize);
    }
    q
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    const VERB: &str = "ibv_modify_qp";
    guard_errno(VERB, || {
        // SAFETY: a QP from ibv_create_qp, or rejected.
        let q = unsafe { resolve::<EmuQp>(VERB, qp) }?;
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "qp_attr is NULL"));
        }
        // SAFETY: as above.
        let qp_type = unsafe { EmuQp::qp_type(q.ptr) };
        let mask = without_ignored_xrc_attributes(qp_type, QpAttrMask(mask as u32));
        // SAFETY: non-NULL from the caller.
        let c = unsafe { &*attr };
        let mut a = convert::qp_attr_from_c(c, mask).map_err(|e| fail_convert(VERB, e))?;
        if mask.contains(QpAttrMask::AV) {
            a.ah_attr = devices::address_vector(&c.ah_attr);
        }
        on_device(VERB, q.dev, |h| h.modify_qp(q.handle, &a, mask))?;
        if mask.contains(QpAttrMask::STATE) {
            // SAFETY: as above.
            unsafe { EmuQp::set_state(q.ptr, a.qp_state.raw()) };
        }
        Ok(())
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
    guard_errno(VERB, || {
        // SAFETY: a QP from ibv_create_qp, or rejected.
        let q = unsafe { resolve::<EmuQp>(VERB, qp) }?;
        if attr.is_null() || init_attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "qp_attr or init_attr is NULL"));
        }
        let (a, init) = on_device(VERB, q.dev, |h| h.query_qp(q.handle))?;
        let ca = convert::qp_attr_to_c(&a);
        // SAFETY: non-NULL from the caller; the QP's pointer fields are set at creation.
        unsafe {
            EmuQp::set_state(q.ptr, ca.qp_state);
            *attr = ca;
            *init_attr = ibv_qp_init_attr {
                qp_context: (*qp).qp_context,
                send_cq: (*qp).send_cq,
                recv_cq: (*qp).recv_cq,
                srq: (*qp).srq,
                cap: ca.cap,
                qp_type: init.qp_type.raw(),
                sq_sig_all: c_int::from(init.sq_sig_all),
            };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    const VERB: &str = "ibv_destroy_qp";
    // SAFETY: a QP from ibv_create_qp(_ex), or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuQp>(VERB, qp) })
}

/// `ibv_attach_mcast(3)`: receive the group `gid` on a UD QP (the device joins the IP
/// group); `lid` is meaningless on RoCE. Returns 0 or the errno value.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    const VERB: &str = "ibv_attach_mcast";
    // SAFETY: forwarded.
    guard_errno(VERB, || unsafe {
        mcast_membership(VERB, qp, gid, lid, Device::attach_mcast)
    })
}

/// `ibv_detach_mcast(3)`: EINVAL when the QP is not attached to `gid`.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
) -> c_int {
    const VERB: &str = "ibv_detach_mcast";
    // SAFETY: forwarded.
    guard_errno(VERB, || unsafe {
        mcast_membership(VERB, qp, gid, lid, Device::detach_mcast)
    })
}

/// Attach or detach (`change`) the QP's membership of group `gid`.
///
/// # Safety
/// `qp` is NULL or a QP from ibv_create_qp; `gid` is NULL or readable.
unsafe fn mcast_membership(
    verb: &str,
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    lid: u16,
    change: fn(&Device, QpHandle, softroce_wire::Gid, u16) -> VerbsResult<()>,
) -> Result<(), c_int> {
    // SAFETY: a QP from ibv_create_qp, or rejected.
    let q = unsafe { resolve::<EmuQp>(verb, qp) }?;
    if gid.is_null() {
        return Err(fail(verb, libc::EINVAL, "gid is NULL"));
    }
    // SAFETY: non-NULL from the caller.
    let mgid = convert::gid_from_c(unsafe { &*gid });
    change(q.dev, q.handle, mgid, lid).map_err(|e| fail(verb, e.errno(), e))
}

/// The `ibv_qp_ex` of a QP made by `ibv_create_qp_ex` with send ops; NULL for others (as
/// rdma-core).
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    guard_ptr("ibv_qp_to_qp_ex", || {
        if qp.is_null() {
            return Err(libc::EINVAL);
        }
        let p = qp.cast::<EmuQp>();
        // SAFETY: a QP from ibv_create_qp(_ex); `extended` is set once at creation.
        if unsafe { std::ptr::addr_of!((*p).extended).read() } {
            // SAFETY: as above.
            Ok(unsafe { std::ptr::addr_of_mut!((*p).qpx) })
        } else {
            Err(libc::EOPNOTSUPP)
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: u32, _flags: u32) -> c_int {
    // 0: no in-order guarantee beyond what the transport gives.
    guard("ibv_query_qp_data_in_order", 0, || 0)
}

// ---- posting work requests ----------------------------------------------------------------

/// Walk a C list of work requests, bounded (a cyclic list must not hang us).
const MAX_WR_LIST: usize = 1 << 20;

/// Post a C list of work requests: those before the first that does not convert go to the
/// device; `bad_wr` names the first that was not posted (ibv_post_send(3)).
///
/// # Safety
/// `first` must be NULL or a list of valid work requests; `bad_wr` NULL or writable.
unsafe fn post_list<W: CWorkRequest, T>(
    verb: &str,
    first: *mut W,
    bad_wr: *mut *mut W,
    mut convert: impl FnMut(&W) -> Result<T, ConvertError>,
    post: impl FnOnce(&mut [T]) -> Result<(), PostError>,
) -> c_int {
    let set_bad = |p: *mut W| {
        if !bad_wr.is_null() {
            // SAFETY: the caller's bad_wr slot.
            unsafe { *bad_wr = p };
        }
    };
    if first.is_null() {
        // An empty list posts nothing; rxe's provider calls it invalid rather than a no-op
        // that hides a caller's bug.
        set_bad(std::ptr::null_mut());
        return fail(verb, libc::EINVAL, "the work request list is NULL");
    }
    // A post's list is short (perftest posts one or a few): on the stack, not the heap.
    let mut wrs: SmallVec<[T; 4]> = SmallVec::new();
    let mut ptrs: SmallVec<[*mut W; 4]> = SmallVec::new();
    let mut convert_err = None;
    let mut cur = first;
    while !cur.is_null() && ptrs.len() < MAX_WR_LIST {
        // SAFETY: a list of valid WRs from the caller.
        let w = unsafe { &*cur };
        match convert(w) {
            Ok(t) => wrs.push(t),
            Err(e) => {
                convert_err = Some((cur, e));
                break;
            }
        }
        ptrs.push(cur);
        cur = w.next();
    }
    // The converted requests are this call's: the device moves their lists, not copies.
    if let Err(e) = post(&mut wrs) {
        set_bad(ptrs.get(e.index).copied().unwrap_or(first));
        return fail(verb, e.error.errno(), e);
    }
    if let Some((p, e)) = convert_err {
        set_bad(p);
        return fail_convert(verb, e);
    }
    0
}

unsafe extern "C" fn op_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    const VERB: &str = "ibv_post_send";
    guard(VERB, libc::EIO, || {
        // SAFETY: a QP from ibv_create_qp, or rejected.
        let q = match unsafe { resolve::<EmuQp>(VERB, qp) } {
            Ok(q) => q,
            Err(e) => {
                if !bad_wr.is_null() {
                    // SAFETY: the caller's bad_wr slot.
                    unsafe { *bad_wr = wr };
                }
                return e;
            }
        };
        // SAFETY: as above.
        let (qp_type, max_sge) = unsafe { (EmuQp::qp_type(q.ptr), EmuQp::cap(q.ptr).max_send_sge) };
        // SAFETY: the caller's list of valid WRs; their AHs from ibv_create_ah, which are
        // EmuAhs; inline data is read during the post (ibv_post_send(3)).
        unsafe {
            post_list(
                VERB,
                wr,
                bad_wr,
                |w| {
                    convert::send_wr_from_c(
                        w,
                        qp_type,
                        max_sge,
                        |ah| EmuAh::handle(ah.cast()),
                        |mw| EmuMw::handle(mw.cast()),
                        |mr| EmuMr::handle(mr.cast()),
                    )
                },
                |wrs| q.dev.post_send(|h| h.post_send_owned(q.handle, wrs)),
            )
        }
    })
}

/// `ibv_post_recv` and `ibv_post_srq_recv`: `post` the list on the QP or SRQ `target`.
///
/// # Safety
/// `target` must be NULL or from this library; the list as [`post_list`].
unsafe fn post_recv_list<O: Object>(
    verb: &str,
    target: *mut O::C,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: impl FnOnce(*const O) -> u32,
    post: impl FnOnce(&mut Hca, O::Handle, &mut [RecvWr]) -> Result<(), PostError>,
) -> c_int {
    // SAFETY: forwarded.
    let t = match unsafe { resolve::<O>(verb, target) } {
        Ok(t) => t,
        Err(e) => return e,
    };
    let max_sge = max_sge(t.ptr);
    // SAFETY: forwarded.
    unsafe {
        post_list(
            verb,
            wr,
            bad_wr,
            |w| convert::recv_wr_from_c(w, max_sge),
            |wrs| t.dev.post_recv(|h| post(h, t.handle, wrs)),
        )
    }
}

unsafe extern "C" fn op_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    const VERB: &str = "ibv_post_recv";
    // SAFETY: a QP from ibv_create_qp and the caller's list, or rejected.
    guard(VERB, libc::EIO, || unsafe {
        post_recv_list::<EmuQp>(
            VERB,
            qp,
            wr,
            bad_wr,
            // SAFETY (of the enclosing block): resolved, a live QP.
            |q| EmuQp::cap(q).max_recv_sge,
            Hca::post_recv_owned,
        )
    })
}

unsafe extern "C" fn op_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    const VERB: &str = "ibv_post_srq_recv";
    // SAFETY: an SRQ from ibv_create_srq and the caller's list, or rejected.
    guard(VERB, libc::EIO, || unsafe {
        post_recv_list::<EmuSrq>(
            VERB,
            srq,
            wr,
            bad_wr,
            // SAFETY (of the enclosing block): resolved, a live SRQ; set once at creation.
            |s| std::ptr::addr_of!((*s).max_sge).read(),
            Hca::post_srq_recv_owned,
        )
    })
}

// ---- AH -------------------------------------------------------------------------------

#[repr(C)]
pub(crate) struct EmuAh {
    ah: ibv_ah,
    handle: AhHandle,
}

// SAFETY: repr(C), ibv_ah first, allocated by publish.
unsafe impl Object for EmuAh {
    type C = ibv_ah;
    type Handle = AhHandle;
    const ARG: &'static str = "ah";
    object_fields!(ah);
    const CLOSE_ORDER: u8 = 3;
    fn destroy_on(dev: &Device, handle: AhHandle) -> VerbsResult<()> {
        dev.with(|h| h.destroy_ah(handle))
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    const VERB: &str = "ibv_create_ah";
    // SAFETY: a PD from ibv_alloc_pd, or rejected; the attributes are the caller's.
    guard_ptr(VERB, || unsafe { create_ah(VERB, pd, attr) })
}

/// # Safety
/// `pd` must be NULL or from ibv_alloc_pd, `attr` NULL or readable.
unsafe fn create_ah(
    verb: &str,
    pd: *mut ibv_pd,
    attr: *mut ibv_ah_attr,
) -> Result<*mut ibv_ah, c_int> {
    // SAFETY: forwarded.
    let p = unsafe { resolve::<EmuPd>(verb, pd) }?;
    if attr.is_null() {
        return Err(fail(verb, libc::EINVAL, "ah_attr is NULL"));
    }
    // SAFETY: non-NULL from the caller.
    let a = devices::address_vector(unsafe { &*attr });
    let handle = on_device(verb, p.dev, |h| h.create_ah(p.handle, a))?;
    let ah = ibv_ah {
        context: p.ctx.ctx_ptr(),
        pd,
        handle: handle.to_raw() as u32,
    };
    Ok(publish(Box::new(EmuAh { ah, handle })).cast())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    const VERB: &str = "ibv_destroy_ah";
    // SAFETY: an AH from ibv_create_ah, or rejected.
    guard_errno(VERB, || unsafe { destroy::<EmuAh>(VERB, ah) })
}

/// The address vector answering the sender of a UD completion (ibv_init_ah_from_wc(3)).
///
/// # Safety
/// `context` must be NULL or from ibv_open_device; the others NULL or readable/writable.
unsafe fn init_ah_from_wc(
    verb: &str,
    context: *mut ibv_context,
    port_num: u8,
    wc: *const ibv_wc,
    grh: *const ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> Result<(), c_int> {
    // SAFETY: forwarded.
    let ctx = unsafe { ctx_of(verb, context) }?;
    if wc.is_null() || grh.is_null() || ah_attr.is_null() {
        return Err(fail(verb, libc::EINVAL, "wc, grh or ah_attr is NULL"));
    }
    // rdma-core queries the port first: a port the device lacks fails the verb.
    if let Err(e) = ctx.query(|h| h.query_port(port_num)) {
        return Err(fail(verb, libc::EINVAL, format!("port {port_num}: {e}")));
    }
    // SAFETY: non-NULL from the caller.
    let (wc, grh) = unsafe { (*wc, *grh) };
    let flow = u32::from_be(grh.version_tclass_flow);
    // libibverbs' set_ah_attr_generic_fields, whatever the completion carried.
    let mut a: ibv_ah_attr = zeroed();
    a.grh.flow_label = flow & 0xfffff;
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port_num;
    if wc.wc_flags & IBV_WC_GRH == 0 {
        // As libibverbs: a completion without a GRH gives a local (non-global) address
        // vector, which ibv_create_ah then refuses on RoCE.
        // SAFETY: non-NULL from the caller.
        unsafe { *ah_attr = a };
        return Ok(());
    }
    // SAFETY: ibv_grh is 40 bytes of plain data.
    let area: &[u8; 40] = unsafe { &*std::ptr::from_ref(&grh).cast::<[u8; 40]>() };
    // The wire crate tells IPv4 (the last 20 bytes) from IPv6 as libibverbs'
    // get_grh_header_version does.
    let Ok(info) = softroce_wire::grh::parse_grh(area) else {
        return Err(fail(
            verb,
            libc::EPROTONOSUPPORT,
            "the GRH area holds neither an IPv6 nor an IPv4 header",
        ));
    };
    // libibverbs does not search the GID table for a multicast destination (EINVAL).
    if info.dgid.is_multicast() {
        return Err(fail(verb, libc::EINVAL, "sent to a multicast group"));
    }
    match info.next_header {
        // IPv4, or IPv6 carrying UDP: RoCEv2, which every GID of ours is.
        None | Some(softroce_wire::ip::PROTO_UDP) => {}
        // RoCE v1: libibverbs looks for a RoCE v1 GID of that address; a softroce port has
        // none, so the search ends past the table as it does there.
        Some(softroce_wire::grh::IB_NEXT_HEADER) => {
            return Err(fail(
                verb,
                libc::EINVAL,
                format!(
                    "RoCE v1 GRH: port {port_num} has no RoCE v1 GID {}",
                    info.dgid
                ),
            ));
        }
        Some(other) => {
            return Err(fail(
                verb,
                libc::EPROTONOSUPPORT,
                format!("IPv6 next header {other} is neither UDP (RoCEv2) nor RoCE v1"),
            ));
        }
    }
    a.grh.dgid = ibv_gid {
        raw: info.sgid.to_bytes(),
    };
    a.grh.traffic_class = info.traffic_class;
    // libibverbs answers with the hop limit (TTL) that came.
    a.grh.hop_limit = info.hop_limit;
    // The reply leaves from the GID the datagram was sent to; a destination that is not one
    // of the port's GIDs fails as libibverbs' search past the end of the table does.
    let Some(sgid_index) = ctx.query(|h| h.gids().iter().position(|g| *g == info.dgid)) else {
        return Err(fail(
            verb,
            libc::EINVAL,
            format!("{} is not a GID of port {port_num}", info.dgid),
        ));
    };
    a.grh.sgid_index = u8::try_from(sgid_index).unwrap_or(0);
    a.is_global = 1;
    // SAFETY: non-NULL from the caller.
    unsafe { *ah_attr = a };
    Ok(())
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
    // SAFETY: the caller's context and structs, checked for NULL.
    guard_status(VERB, || unsafe {
        init_ah_from_wc(VERB, context, port_num, wc, grh, ah_attr)
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
    guard_ptr(VERB, || {
        if pd.is_null() {
            return Err(fail(VERB, libc::EINVAL, "pd is NULL"));
        }
        let mut a: ibv_ah_attr = zeroed();
        // SAFETY: a PD from ibv_alloc_pd; the caller's structs, checked for NULL.
        unsafe {
            init_ah_from_wc(VERB, EmuPd::context(pd.cast()), port_num, wc, grh, &mut a)?;
            create_ah(VERB, pd, &mut a)
        }
    })
}

// ---- XRC ------------------------------------------------------------------------------

/// An XRC domain (ibv_open_xrcd(3)).
#[repr(C)]
struct EmuXrcd {
    xrcd: ibv_xrcd,
    handle: XrcdHandle,
}

// SAFETY: repr(C), ibv_xrcd first, allocated by publish.
unsafe impl Object for EmuXrcd {
    type C = ibv_xrcd;
    type Handle = XrcdHandle;
    const ARG: &'static str = "xrcd";
    object_fields!(xrcd);
    const CLOSE_ORDER: u8 = 8;
    fn destroy_on(dev: &Device, handle: XrcdHandle) -> VerbsResult<()> {
        dev.with(|h| h.close_xrcd(handle))
    }
}

/// A domain opened through a file: the context, the file (device, inode), the domain and
/// how many opens it has. Opens of the same file in one context share the domain, and the
/// last close frees it (ibv_open_xrcd(3), as the kernel's per-inode table).
struct XrcdFile {
    ctx: usize,
    file: (u64, u64),
    xrcd: usize,
    opens: u32,
}

static XRCD_FILES: Mutex<Vec<XrcdFile>> = Mutex::new(Vec::new());

fn xrcd_files() -> std::sync::MutexGuard<'static, Vec<XrcdFile>> {
    XRCD_FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// `fork()`: the XRC domains' files (see [`crate::fork`]).
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    crate::fork::take(&XRCD_FILES, held);
}

/// The context is going away: its domains are no longer found through their files.
pub(crate) fn forget_xrcd_files(context: *mut ibv_context) {
    xrcd_files().retain(|f| f.ctx != context as usize);
}

/// `verbs_context.open_xrcd`: a new domain, or with `fd` the one the file already has
/// (`O_CREAT` creates it if missing, `O_EXCL` refuses an existing one).
pub(crate) unsafe extern "C" fn vctx_open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    const VERB: &str = "ibv_open_xrcd";
    guard_ptr(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let (ctx, dev) = unsafe { ctx_and_device(VERB, context) }?;
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "xrcd_init_attr is NULL"));
        }
        // SAFETY: non-NULL from the caller.
        let a = unsafe { *attr };
        let needed = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & !needed != 0 {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!("comp_mask {:#x} has unknown bits", a.comp_mask),
            ));
        }
        if a.comp_mask & needed != needed {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "comp_mask must name both fd and oflags",
            ));
        }
        let file = if a.fd == -1 {
            None
        } else {
            // SAFETY: fstat writes the struct it is given.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: any fd value; a bad one fails with EBADF.
            if unsafe { libc::fstat(a.fd, &mut st) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(fail(
                    VERB,
                    e.raw_os_error().unwrap_or(libc::EBADF),
                    format!("fd {}: {e}", a.fd),
                ));
            }
            Some((st.st_dev, st.st_ino))
        };
        let mut files = xrcd_files();
        let ctx_key = ctx.ctx_ptr() as usize;
        if let Some(file) = file
            && let Some(f) = files
                .iter_mut()
                .find(|f| f.ctx == ctx_key && f.file == file)
        {
            if a.oflags & libc::O_EXCL != 0 {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    "O_EXCL: the file already has an XRC domain",
                ));
            }
            f.opens += 1;
            return Ok(f.xrcd as *mut ibv_xrcd);
        }
        if file.is_some() && a.oflags & libc::O_CREAT == 0 {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the file has no XRC domain and oflags lacks O_CREAT",
            ));
        }
        let handle = on_device(VERB, dev, |h| h.open_xrcd())?;
        let x = publish(Box::new(EmuXrcd {
            xrcd: ibv_xrcd {
                context: ctx.ctx_ptr(),
            },
            handle,
        }));
        if let Some(file) = file {
            files.push(XrcdFile {
                ctx: ctx_key,
                file,
                xrcd: x as usize,
                opens: 1,
            });
        }
        Ok(x.cast())
    })
}

/// `verbs_context.close_xrcd`: one open fewer; the last frees the domain, which fails with
/// EBUSY while XRC SRQs or target QPs use it.
pub(crate) unsafe extern "C" fn vctx_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    const VERB: &str = "ibv_close_xrcd";
    guard_errno(VERB, || {
        let mut files = xrcd_files();
        let at = files.iter().position(|f| f.xrcd == xrcd as usize);
        if let Some(i) = at
            && files[i].opens > 1
        {
            files[i].opens -= 1;
            return Ok(());
        }
        // SAFETY: a domain from ibv_open_xrcd, or rejected.
        unsafe { destroy::<EmuXrcd>(VERB, xrcd) }?;
        if let Some(i) = at {
            files.remove(i);
        }
        Ok(())
    })
}

/// `verbs_context.create_srq_ex`: an XRC SRQ (in `xrcd`, completing on `cq`), a tag
/// matching SRQ (`tm_cap`, completing on `cq`) or a basic one.
pub(crate) unsafe extern "C" fn vctx_create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    const VERB: &str = "ibv_create_srq_ex";
    guard_ptr(VERB, || {
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "srq_init_attr_ex is NULL"));
        }
        // SAFETY: non-NULL from the caller.
        let a = unsafe { &mut *attr };
        let known = IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_PD
            | IBV_SRQ_INIT_ATTR_XRCD
            | IBV_SRQ_INIT_ATTR_CQ
            | IBV_SRQ_INIT_ATTR_TM;
        if a.comp_mask & !known != 0 {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!("comp_mask {:#x}: unknown bits", a.comp_mask),
            ));
        }
        let srq_type = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
            a.srq_type
        } else {
            IBV_SRQT_BASIC
        };
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return Err(fail(VERB, libc::EINVAL, "an SRQ needs its PD"));
        }
        // SAFETY: a PD from ibv_alloc_pd, or rejected.
        let p = unsafe { resolve::<EmuPd>(VERB, a.pd) }?;
        if p.ctx.ctx_ptr() != context {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the PD belongs to another context",
            ));
        }
        let attr = convert::srq_attr_from_c(&a.attr);
        let context_value = a.srq_context as u64;
        let (handle, real) = match srq_type {
            IBV_SRQT_BASIC => {
                on_device(VERB, p.dev, |h| h.create_srq(p.handle, attr, context_value))?
            }
            IBV_SRQT_XRC => {
                let has = |bit| a.comp_mask & bit != 0;
                if !has(IBV_SRQ_INIT_ATTR_XRCD)
                    || !has(IBV_SRQ_INIT_ATTR_CQ)
                    || a.xrcd.is_null()
                    || a.cq.is_null()
                {
                    return Err(fail(
                        VERB,
                        libc::EINVAL,
                        "an XRC SRQ needs its XRC domain and CQ (IBV_SRQ_INIT_ATTR_XRCD, _CQ)",
                    ));
                }
                // SAFETY: a domain from ibv_open_xrcd, or rejected; a CQ from ibv_create_cq.
                let x = unsafe { resolve::<EmuXrcd>(VERB, a.xrcd) }?;
                if x.ctx.ctx_ptr() != context {
                    return Err(fail(
                        VERB,
                        libc::EINVAL,
                        "the XRC domain belongs to another context",
                    ));
                }
                // SAFETY: as above.
                let cq = unsafe { EmuCq::handle(a.cq.cast()) };
                on_device(VERB, p.dev, |h| {
                    h.create_xrc_srq(p.handle, x.handle, cq, attr, context_value)
                })?
            }
            IBV_SRQT_TM => {
                let has = |bit| a.comp_mask & bit != 0;
                if !has(IBV_SRQ_INIT_ATTR_CQ) || !has(IBV_SRQ_INIT_ATTR_TM) || a.cq.is_null() {
                    return Err(fail(
                        VERB,
                        libc::EINVAL,
                        "a tag matching SRQ needs its CQ and tm_cap (IBV_SRQ_INIT_ATTR_CQ, _TM)",
                    ));
                }
                // SAFETY: a CQ from ibv_create_cq(_ex), or rejected.
                let c = unsafe { resolve::<EmuCq>(VERB, a.cq) }?;
                if c.ctx.ctx_ptr() != context {
                    return Err(fail(
                        VERB,
                        libc::EINVAL,
                        "the CQ belongs to another context",
                    ));
                }
                let tm = a.tm_cap;
                on_device(VERB, p.dev, |h| {
                    h.create_tm_srq(
                        p.handle,
                        c.handle,
                        attr,
                        tm.max_num_tags,
                        tm.max_ops,
                        context_value,
                    )
                })?
            }
            other => {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    format!("SRQ type {other} is unknown"),
                ));
            }
        };
        a.attr.max_wr = real.max_wr;
        a.attr.max_sge = real.max_sge;
        Ok(publish_srq(p.ctx, a.pd, a.srq_context, handle, real.max_sge).cast())
    })
}

/// `verbs_context.post_srq_ops` (ibv_post_srq_ops(3)): the list in order; each ADD gets
/// its `tm.handle`. An SRQ that is not a tag matching SRQ, an unknown opcode or handle is
/// EINVAL, a full tag list ENOMEM; `bad_op` names the first operation not performed.
pub(crate) unsafe extern "C" fn vctx_post_srq_ops(
    srq: *mut ibv_srq,
    op: *mut c_void,
    bad_op: *mut *mut c_void,
) -> c_int {
    const VERB: &str = "ibv_post_srq_ops";
    guard(VERB, libc::EIO, || {
        let first = op.cast::<ibv_ops_wr>();
        let set_bad = |p: *mut ibv_ops_wr| {
            if !bad_op.is_null() {
                // SAFETY: the caller's bad_op slot.
                unsafe { *bad_op = p.cast() };
            }
        };
        // SAFETY: an SRQ from ibv_create_srq(_ex), or rejected.
        let s = match unsafe { resolve::<EmuSrq>(VERB, srq) } {
            Ok(s) => s,
            Err(e) => {
                set_bad(first);
                return e;
            }
        };
        if first.is_null() {
            set_bad(first);
            return fail(VERB, libc::EINVAL, "the operation list is NULL");
        }
        // SAFETY: resolved: a live SRQ; the field is set once at creation.
        let srq_max_sge = unsafe { std::ptr::addr_of!((*s.ptr).max_sge).read() };
        let (mut ops, mut ptrs) = (Vec::new(), Vec::new());
        let mut convert_err = None;
        let mut cur = first;
        while !cur.is_null() && ptrs.len() < MAX_WR_LIST {
            // SAFETY: a list of valid operations from the caller.
            let w = unsafe { &*cur };
            // SAFETY: as above, with their SGE arrays.
            match unsafe { convert::tm_op_from_c(w, srq_max_sge) } {
                Ok(o) => ops.push(o),
                Err(e) => {
                    convert_err = Some((cur, e));
                    break;
                }
            }
            ptrs.push(cur);
            cur = w.next;
        }
        let result = s.dev.with(|h| h.post_srq_ops(s.handle, &mut ops));
        let done = result.as_ref().err().map_or(ops.len(), |e| e.index);
        for (p, o) in ptrs.iter().zip(&ops).take(done) {
            if matches!(o.kind, TmOpKind::Add { .. }) {
                // SAFETY: the caller's operation, writable (tm.handle is an output).
                unsafe { (**p).tm.handle = o.handle };
            }
        }
        if let Err(e) = result {
            set_bad(ptrs.get(e.index).copied().unwrap_or(first));
            return fail(VERB, e.error.errno(), e);
        }
        if let Some((p, e)) = convert_err {
            set_bad(p);
            return fail_convert(VERB, e);
        }
        0
    })
}

/// `verbs_context.get_srq_num`: the number XRC senders name the SRQ by (every SRQ has
/// one, as on mlx5).
pub(crate) unsafe extern "C" fn vctx_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    const VERB: &str = "ibv_get_srq_num";
    guard_errno(VERB, || {
        // SAFETY: an SRQ from ibv_create_srq(_ex), or rejected.
        let s = unsafe { resolve::<EmuSrq>(VERB, srq) }?;
        if srq_num.is_null() {
            return Err(fail(VERB, libc::EINVAL, "srq_num is NULL"));
        }
        let n = on_device(VERB, s.dev, |h| h.srq_num(s.handle))?;
        // SAFETY: non-NULL from the caller.
        unsafe { *srq_num = n };
        Ok(())
    })
}

/// `verbs_context.modify_qp_rate_limit` (`ibv_modify_qp_rate_limit`): EOPNOTSUPP, the
/// man page's error for a device that does not implement it. The device does no packet
/// pacing (its `packet_pacing_caps` are all zero), so accepting a limit would promise a
/// rate it never keeps; rdma-core answers the same for providers without the verb (rxe).
/// Set rather than left NULL so a program calling the entry point directly gets the
/// error too.
pub(crate) unsafe extern "C" fn vctx_modify_qp_rate_limit(
    qp: *mut ibv_qp,
    _attr: *mut c_void,
) -> c_int {
    const VERB: &str = "ibv_modify_qp_rate_limit";
    guard_errno(VERB, || {
        // SAFETY: a QP from ibv_create_qp, or rejected.
        unsafe { resolve::<EmuQp>(VERB, qp) }?;
        Err(fail(
            VERB,
            libc::EOPNOTSUPP,
            "no packet pacing (packet_pacing_caps are zero)",
        ))
    })
}

/// An XRC target QP of `a.xrcd` (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`): no PD, CQs,
/// SRQ or queues of its own.
///
/// # Safety
/// `a.xrcd` must be NULL or from ibv_open_xrcd.
pub(crate) unsafe fn create_xrc_recv_qp(
    verb: &str,
    context: *mut ibv_context,
    a: &ibv_qp_init_attr_ex,
) -> Result<*mut EmuQp, c_int> {
    let qp_context = a.qp_context;
    // SAFETY: forwarded.
    let x = unsafe { resolve::<EmuXrcd>(verb, a.xrcd) }?;
    if x.ctx.ctx_ptr() != context {
        return Err(fail(
            verb,
            libc::EINVAL,
            "the XRC domain belongs to another context",
        ));
    }
    let (handle, qpn) = on_device(verb, x.dev, |h| {
        h.create_xrc_recv_qp(x.handle, qp_context as u64)
    })?;
    let mut qpx = xrc_recv_qpx(x.ctx, qp_context, handle, qpn.value(), IBV_QPS_RESET);
    // As libibverbs' set_qp: the QP shows the PD and CQs it was created with, which the
    // target does not use (librdmacm passes its id's, and keeps `id->pd = qp->pd`).
    let base = &mut qpx.qp_base;
    if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
        base.pd = a.pd;
    }
    base.send_cq = a.send_cq;
    base.recv_cq = a.recv_cq;
    base.srq = a.srq;
    Ok(publish_qp(
        x.ctx,
        qpx,
        handle,
        QpType::XrcRecv,
        QpCap::default(),
        false,
        false,
    ))
}

/// The C side of an XRC target QP handle.
fn xrc_recv_qpx(
    ctx: &EmuContext,
    qp_context: *mut c_void,
    handle: QpHandle,
    qp_num: u32,
    state: u32,
) -> ibv_qp_ex {
    // SAFETY: ibv_qp_ex is plain data (pointers, integers, optional fn pointers, pthread
    // objects initialised by publish_qp) for which all-zero bytes are valid.
    let mut qpx: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let base = &mut qpx.qp_base;
    base.context = ctx.ctx_ptr();
    base.qp_context = qp_context;
    base.handle = handle.to_raw() as u32;
    base.qp_num = qp_num;
    base.state = state;
    base.qp_type = IBV_QPT_XRC_RECV;
    qpx
}

/// `verbs_context.open_qp` (ibv_open_qp(3)): another handle to the XRC target QP
/// `qp_num` of `xrcd`; the QP lives until its last handle is destroyed.
pub(crate) unsafe extern "C" fn vctx_open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    const VERB: &str = "ibv_open_qp";
    guard_ptr(VERB, || {
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "qp_open_attr is NULL"));
        }
        // SAFETY: non-NULL from the caller.
        let a = unsafe { *attr };
        let needed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
        if a.comp_mask & !(needed | IBV_QP_OPEN_ATTR_CONTEXT) != 0 {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!("comp_mask {:#x} has unknown bits", a.comp_mask),
            ));
        }
        if a.comp_mask & needed != needed || a.xrcd.is_null() {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "qp_num, xrcd and qp_type are required",
            ));
        }
        if a.qp_type != IBV_QPT_XRC_RECV {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!("QP type {}: only XRC target QPs can be opened", a.qp_type),
            ));
        }
        // SAFETY: a domain from ibv_open_xrcd, or rejected.
        let x = unsafe { resolve::<EmuXrcd>(VERB, a.xrcd) }?;
        if x.ctx.ctx_ptr() != context {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "the XRC domain belongs to another context",
            ));
        }
        let (handle, state) = on_device(VERB, x.dev, |h| {
            let qp = h.open_xrc_recv_qp(x.handle, a.qp_num)?;
            Ok((qp, h.qp_state(qp)?))
        })?;
        let qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
            a.qp_context
        } else {
            std::ptr::null_mut()
        };
        let qpx = xrc_recv_qpx(x.ctx, qp_context, handle, a.qp_num, state.raw());
        // An XRC target has no queues of its own: nothing can be posted on it.
        let no_queues = QpCap::default();
        Ok(publish_qp(x.ctx, qpx, handle, QpType::XrcRecv, no_queues, false, true).cast())
    })
}
