//! Open devices: the per-context state ([`EmuContext`]), the queries, GIDs, P_Keys and async
//! events.
//!
//! An `ibv_context` pointer is the tail of an `EmuContext` (its `verbs_context` ends with the
//! `ibv_context`), so [`ctx_of`] finds the context's state from the pointer alone; objects
//! reach it through their own `context` field. Nothing here knows the objects' types: the
//! CQs, QPs and SRQs register their addresses by device handle, which async events name.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use softroce_emu::Hca;
use softroce_emu::core::{AsyncEvent, DeviceAttr, EventElement, EventType, VerbsResult};
use softroce_emu::driver::{Device, DeviceConfig, EventFd};
use softroce_ibverbs_abi::convert::{self, CEventElement, gid_to_c};
use softroce_ibverbs_abi::*;

use crate::devices::{self, DeviceEntry};
use crate::ffi::{fail, fail_loud, guard, guard_errno, guard_status, set_errno, zeroed};

symver_directives!();

const CONTEXT_MAGIC: u64 = u64::from_be_bytes(*b"softroce");

/// The objects async events name, by the device's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ObjectKind {
    Cq,
    Qp,
    Srq,
}

/// An open device. `vctx` holds the `ibv_context` applications see at its end; the rest is
/// ours.
#[repr(C)]
pub(crate) struct EmuContext {
    vctx: verbs_context,
    magic: u64,
    pub(crate) entry: &'static DeviceEntry,
    /// Shared by the contexts of this process that opened the same device (and with other
    /// processes on it: the first binds its port, later ones are its guests). `None` when
    /// the port is held by something that does not share it (not softroce, or every slot
    /// taken): queries still work, creating objects fails with EADDRINUSE.
    device: Option<Arc<Device>>,
    open_error: String,
    /// `open_error` was printed: the first verb the missing device fails says why on
    /// stderr (a 65th process, a port another program holds), later ones only set errno.
    open_error_said: std::sync::atomic::AtomicBool,
    /// `ibv_context.async_fd`: this context's own (ibv_get_async_event(3) is per context;
    /// UCX, for one, keys its handlers by fd and fails when two contexts share one),
    /// readable while `async_queue` may hold events.
    async_fd: Arc<EventFd>,
    /// The device's async events that belong to this context: those of its own CQs, QPs
    /// and SRQs, and every port and device event.
    async_queue: Mutex<std::collections::VecDeque<AsyncEvent>>,
    /// Answers queries when there is no device.
    query_hca: Mutex<Hca>,
    /// `ibv_context.cmd_fd`. A kernel provider issues its commands on this fd (an open
    /// `/dev/infiniband/uverbsN`); here no command goes through it, but programs treat it
    /// as a live descriptor (pyverbs `dup`s it, others `fcntl` or `poll` it), so it is a
    /// real one: `/dev/null`, readable and writable, closed with the context.
    cmd_fd: std::fs::File,
    /// Addresses of this context's CQs, QPs and SRQs by (kind, raw device handle).
    objects: Mutex<HashMap<(ObjectKind, u64), usize>>,
    /// The device objects made on this context and not destroyed yet, by the address of
    /// the application's object: their order of going at close (lowest first) and how.
    owned: Mutex<HashMap<usize, OwnedObject>>,
    /// `ibv_close_device` has begun: threads waiting in `ibv_get_async_event` leave with
    /// EIO (as a read of the kernel's closed event file) before the context is freed.
    closing: std::sync::atomic::AtomicBool,
    /// Threads inside `ibv_get_async_event` on this context.
    async_waiters: std::sync::atomic::AtomicUsize,
}

/// A device object a context made: how to destroy it when the context closes first.
pub(crate) type CloseDestroy = Box<dyn FnOnce(&Device) -> VerbsResult<()> + Send>;

/// An object of [`EmuContext::owned`].
struct OwnedObject {
    order: u8,
    destroy: CloseDestroy,
}

/// Async events handed out and not yet acknowledged, across contexts (`ibv_ack_async_event`
/// gets no context).
struct PendingEvent {
    /// The context's address: closing it forgets its events.
    ctx: usize,
    event_type: EventType,
    element: CEventElement,
    event: AsyncEvent,
    device: Arc<Device>,
}

static PENDING_EVENTS: Mutex<Vec<PendingEvent>> = Mutex::new(Vec::new());

/// The open contexts (addresses), to route a device's async events to: a context leaves
/// this list, under its lock, before it is freed.
static LIVE_CONTEXTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The object an async event names, as contexts register objects.
fn element_key(element: EventElement) -> Option<(ObjectKind, u64)> {
    match element {
        EventElement::Cq(h) => Some((ObjectKind::Cq, h.to_raw())),
        EventElement::Qp(h) => Some((ObjectKind::Qp, h.to_raw())),
        EventElement::Srq(h) => Some((ObjectKind::Srq, h.to_raw())),
        EventElement::Port(_) | EventElement::Device => None,
    }
}

/// Held while events are taken from a device and queued to its contexts: the device's
/// router thread and every thread in `ibv_get_async_event` route, and an event taken first
/// must be queued first (ibv_get_async_event(3) gives a context the device's events in
/// order, as the kernel's event file does). Taken before any other lock.
static ROUTING: Mutex<()> = Mutex::new(());

/// Move every async event `dev` has queued to the contexts it belongs to: an object's to
/// the context that made it (none: destroyed since), a port's or the device's to all.
fn route_async_events(dev: &Arc<Device>) {
    let _in_order = lock(&ROUTING);
    while let Ok(ev) = dev.get_async_event(Some(Duration::ZERO)) {
        let owner = element_key(ev.element);
        let live = lock(&LIVE_CONTEXTS);
        for &p in live.iter() {
            // SAFETY: listed contexts are alive while the list is locked.
            let c = unsafe { &*(p as *const EmuContext) };
            let on_dev = c.device.as_ref().is_some_and(|d| Arc::ptr_eq(d, dev));
            if on_dev && owner.is_none_or(|(kind, h)| c.object_address(kind, h) != 0) {
                let mut queue = lock(&c.async_queue);
                queue.push_back(ev);
                // Under the queue's lock: the fd is readable exactly while it holds events.
                let _ = c.async_fd.notify();
            }
        }
    }
}

/// Before an object is destroyed: the events about it that were routed to a context and
/// not read yet are dropped and acknowledged to the device (the application never got
/// them, so the destroy must not wait for their acknowledgement). `hca` is `dev`'s, locked.
pub(crate) fn discard_unread_events(dev: &Device, hca: &mut Hca, object: (ObjectKind, u64)) {
    let live = lock(&LIVE_CONTEXTS);
    for &p in live.iter() {
        // SAFETY: listed contexts are alive while the list is locked.
        let c = unsafe { &*(p as *const EmuContext) };
        if !c.device.as_ref().is_some_and(|d| std::ptr::eq(&**d, dev)) {
            continue;
        }
        let mut queue = lock(&c.async_queue);
        let before = queue.len();
        queue.retain(|ev| {
            let about_it = element_key(ev.element) == Some(object);
            if about_it {
                let _ = hca.ack_async_event(ev);
            }
            !about_it
        });
        // Only the readiness of what was discarded goes: the fd also carries a closing
        // context's wake-up for its waiters, which taking would leave them asleep and
        // ibv_close_device waiting for them forever.
        if queue.is_empty() && queue.len() < before && !c.closing.load(Ordering::SeqCst) {
            let _ = c.async_fd.try_consume();
        }
    }
}

/// `fork()`: the async-event routing, the routed devices, the open contexts and the
/// events handed out, in the order they nest (see [`crate::fork`]).
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    crate::fork::take(&ROUTING, held);
    crate::fork::take(&ROUTED_DEVICES, held);
    crate::fork::take(&LIVE_CONTEXTS, held);
    crate::fork::take(&PENDING_EVENTS, held);
}

/// A thread counted among a context's async-event waiters while this lives.
struct AsyncWaiter<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for AsyncWaiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The devices a router thread serves (weak: the allocation stays, so no other device
/// can take its address while listed), each with the fd that wakes its thread.
static ROUTED_DEVICES: Mutex<Vec<(Weak<Device>, Arc<EventFd>)>> = Mutex::new(Vec::new());

/// Start the thread that routes `dev`'s async events as they are queued (so a context's
/// async fd becomes readable for its own events only), unless one runs. It ends when the
/// device has no open context left.
fn ensure_async_router(dev: &Arc<Device>) {
    let weak = Arc::downgrade(dev);
    let mut routed = lock(&ROUTED_DEVICES);
    if routed.iter().any(|(w, _)| w.ptr_eq(&weak)) {
        return;
    }
    // Without the thread (no fd or thread to spare), ibv_get_async_event still routes:
    // only the fd's readability comes late.
    let Ok(hint) = EventFd::new().map(Arc::new) else {
        return;
    };
    dev.watch_async_events(&hint);
    let wake = Arc::clone(&hint);
    let mine = weak.clone();
    let started = std::thread::Builder::new()
        .name("softroce-async".into())
        .spawn(move || {
            loop {
                let _ = hint.wait_readable(Some(Duration::from_millis(500)));
                let _ = hint.try_consume();
                let mut routed = lock(&ROUTED_DEVICES);
                let dev = mine.upgrade();
                let used = dev.as_ref().is_some_and(|d| {
                    lock(&LIVE_CONTEXTS).iter().any(|&p| {
                        // SAFETY: listed contexts are alive while the list is locked.
                        let c = unsafe { &*(p as *const EmuContext) };
                        c.device.as_ref().is_some_and(|cd| Arc::ptr_eq(cd, d))
                    })
                });
                if !used {
                    routed.retain(|(w, _)| !w.ptr_eq(&mine));
                    return;
                }
                drop(routed);
                if let Some(d) = dev {
                    route_async_events(&d);
                }
            }
        });
    if started.is_ok() {
        routed.push((weak, wake));
    }
}

/// The fd that wakes `dev`'s router thread, if one runs.
fn router_wake(dev: &Arc<Device>) -> Option<Arc<EventFd>> {
    let weak = Arc::downgrade(dev);
    lock(&ROUTED_DEVICES)
        .iter()
        .find(|(w, _)| w.ptr_eq(&weak))
        .map(|(_, wake)| Arc::clone(wake))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmuContext {
    /// Open `device`: start (or share) its emulated device and build a context whose
    /// data-path and extended entry points `install` sets.
    pub(crate) fn open(
        verb: &str,
        device: *mut ibv_device,
        install: impl FnOnce(&mut verbs_context),
    ) -> Result<*mut ibv_context, c_int> {
        let entry = devices::entry(device).ok_or_else(|| {
            fail(
                verb,
                libc::EINVAL,
                "the device pointer is not from ibv_get_device_list",
            )
        })?;
        let spec = &entry.spec;
        let mut cfg = DeviceConfig::new(&spec.name, spec.ip);
        cfg.hca.udp_port = spec.udp_port;
        // Queries answer what the running device would (its link MTU, its address).
        let query_cfg = cfg.hca.clone();
        let (device, open_error) = match entry.open(|| Device::start(cfg)) {
            Ok(d) => (Some(d), String::new()),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                let why = format!(
                    "device {} cannot bind {}:{} and cannot share it ({e}); \
                     only queries work in this process",
                    spec.name, spec.ip, spec.udp_port
                );
                (None, why)
            }
            Err(e) => {
                // A device that cannot start (a fault plan or capture file that is wrong, an
                // address it cannot bind) is the environment's error: said whatever
                // SOFTROCE_LOG asks, or the program only sees a NULL context.
                return Err(fail_loud(
                    verb,
                    e.raw_os_error().unwrap_or(libc::EINVAL),
                    format!("device {} on {}:{}: {e}", spec.name, spec.ip, spec.udp_port),
                ));
            }
        };
        let cmd_fd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| {
                fail(
                    verb,
                    libc::EMFILE,
                    format!("opening /dev/null for cmd_fd: {e}"),
                )
            })?;
        let query_hca = Hca::new(query_cfg);
        let num_comp_vectors = query_hca.query_device().num_comp_vectors;
        let async_fd = Arc::new(EventFd::new().map_err(|e| fail(verb, libc::EMFILE, e))?);

        // SAFETY: all-zero is valid for verbs_context (integers, raw pointers, optional
        // function pointers; a zeroed pthread mutex is PTHREAD_MUTEX_INITIALIZER on glibc).
        let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
        vctx.query_port = Some(vctx_query_port);
        vctx.query_device_ex = Some(vctx_query_device_ex);
        vctx.query_rt_values = Some(vctx_query_rt_values);
        vctx.sz = size_of::<verbs_context>();
        install(&mut vctx);
        let c = &mut vctx.context;
        c.device = std::ptr::addr_of!(entry.dev).cast_mut();
        c.cmd_fd = cmd_fd.as_raw_fd();
        c.async_fd = async_fd.as_raw_fd();
        c.num_comp_vectors = i32::try_from(num_comp_vectors).unwrap_or(1);
        c.abi_compat = __VERBS_ABI_IS_EXTENDED as *mut c_void;
        let ctx = Box::into_raw(Box::new(Self {
            vctx,
            magic: CONTEXT_MAGIC,
            entry,
            device,
            open_error,
            open_error_said: std::sync::atomic::AtomicBool::new(false),
            async_fd,
            async_queue: Mutex::new(std::collections::VecDeque::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            async_waiters: std::sync::atomic::AtomicUsize::new(0),
            query_hca: Mutex::new(query_hca),
            cmd_fd,
            objects: Mutex::new(HashMap::new()),
            owned: Mutex::new(HashMap::new()),
        }));
        // SAFETY: freshly boxed; the mutex is initialised in place, where it stays.
        unsafe {
            libc::pthread_mutex_init(&mut (*ctx).vctx.context.mutex, std::ptr::null());
        }
        lock(&LIVE_CONTEXTS).push(ctx as usize);
        // SAFETY: as above.
        if let Some(d) = unsafe { &(*ctx).device } {
            ensure_async_router(d);
        }
        // SAFETY: as above.
        Ok(unsafe { (*ctx).ctx_ptr() })
    }

    /// Close a context: forget its pending events, free it (which stops its device when it
    /// was the last user).
    ///
    /// # Safety
    /// `context` must be NULL or from [`EmuContext::open`], and no longer be used (nor any
    /// object of it).
    pub(crate) unsafe fn close(verb: &str, context: *mut ibv_context) -> Result<(), c_int> {
        // SAFETY: forwarded.
        let ctx = unsafe { ctx_of(verb, context) }?;
        let p = std::ptr::from_ref(ctx).cast_mut();
        // A thread blocked in ibv_get_async_event would sleep on a closed fd (or on a reused
        // one, then touch freed memory): wake them all and let them leave first. Each checks
        // `closing` before it waits; the wake-up is given again on every turn, as a waiter
        // that was emptying the fd when it came may have taken it from the others.
        ctx.closing.store(true, Ordering::SeqCst);
        // In a forked child the count may include the parent's waiters, which are not here.
        let inherited = ctx.device.as_ref().is_some_and(|d| d.inherited());
        while !inherited && ctx.async_waiters.load(Ordering::SeqCst) > 0 {
            let _ = ctx.async_fd.notify();
            std::thread::sleep(Duration::from_micros(100));
        }
        lock(&PENDING_EVENTS).retain(|e| e.ctx != p as usize);
        lock(&LIVE_CONTEXTS).retain(|&c| c != p as usize);
        ctx.destroy_owned();
        let router = ctx.device.as_ref().and_then(router_wake);
        // SAFETY: the box from open, no longer used. Dropping joins the engine thread.
        unsafe {
            (*p).magic = 0;
            libc::pthread_mutex_destroy(&mut (*p).vctx.context.mutex);
            drop(Box::from_raw(p));
        }
        // The device's router ends now if this was its last context, rather than at its
        // next timeout (a program opening and closing in a loop would pile them up). Woken
        // after the device went, so that the router never holds it last.
        if let Some(wake) = router {
            let _ = wake.notify();
        }
        Ok(())
    }

    /// Our context behind an `ibv_context` pointer, or None (NULL or not ours).
    ///
    /// # Safety
    /// `ctx` must be NULL or an `ibv_context` pointer some libibverbs handed out.
    pub(crate) unsafe fn from_ctx<'a>(ctx: *mut ibv_context) -> Option<&'a Self> {
        if ctx.is_null() {
            return None;
        }
        let off = offset_of!(Self, vctx) + offset_of!(verbs_context, context);
        // SAFETY: our contexts are the `context` field of a boxed EmuContext.
        let p = unsafe { ctx.cast::<u8>().sub(off).cast::<Self>() };
        // SAFETY: as above; the magic guards against pointers from elsewhere.
        let this = unsafe { &*p };
        (this.magic == CONTEXT_MAGIC).then_some(this)
    }

    /// The `ibv_context` pointer of this context.
    pub(crate) fn ctx_ptr(&self) -> *mut ibv_context {
        std::ptr::addr_of!(self.vctx.context).cast_mut()
    }

    /// The running device, or EADDRINUSE with the reason.
    pub(crate) fn device(&self, verb: &str) -> Result<&Device, c_int> {
        self.shared_device(verb).map(|d| &**d)
    }

    /// The running device, shared.
    fn shared_device(&self, verb: &str) -> Result<&Arc<Device>, c_int> {
        self.device.as_ref().ok_or_else(|| {
            if self.open_error_said.swap(true, Ordering::Relaxed) {
                fail(verb, libc::EADDRINUSE, &self.open_error)
            } else {
                fail_loud(verb, libc::EADDRINUSE, &self.open_error)
            }
        })
    }

    /// Run a query on the device (or on the stand-in when the device could not start).
    pub(crate) fn query<R>(&self, f: impl FnOnce(&Hca) -> R) -> R {
        match &self.device {
            Some(d) => d.with(|h| f(h)),
            None => f(&lock(&self.query_hca)),
        }
    }

    /// Remember where an object async events may name lives.
    pub(crate) fn register(&self, kind: ObjectKind, handle: u64, address: usize) {
        lock(&self.objects).insert((kind, handle), address);
    }

    /// Forget a destroyed object.
    pub(crate) fn unregister(&self, kind: ObjectKind, handle: u64) {
        lock(&self.objects).remove(&(kind, handle));
        // Its unread events go with it (the device forgets those it still holds).
        let mut queue = lock(&self.async_queue);
        let before = queue.len();
        queue.retain(|ev| element_key(ev.element) != Some((kind, handle)));
        // As in `discard_unread_events`: a closing context's wake-up stays.
        if queue.is_empty() && queue.len() < before && !self.closing.load(Ordering::SeqCst) {
            let _ = self.async_fd.try_consume();
        }
    }

    /// The application's object at `address` was made on this context: `destroy` removes
    /// its device object if the context closes first (replacing what was said before).
    pub(crate) fn own(&self, address: usize, order: u8, destroy: CloseDestroy) {
        lock(&self.owned).insert(address, OwnedObject { order, destroy });
    }

    /// The application destroyed the object at `address` itself.
    pub(crate) fn disown(&self, address: usize) {
        lock(&self.owned).remove(&address);
    }

    /// `ibv_close_device` with objects left: the kernel's uverbs file release destroys
    /// every object of the context, so they leave the wire (no peer reaches a closed
    /// context's QP or writes through its region's rkey) and stop counting against the
    /// device's limits while other contexts keep it open. The application's own
    /// structures are not freed: ibv_open_device(3), close "does not release all the
    /// resources allocated using context".
    fn destroy_owned(&self) {
        let Some(dev) = self.device.as_ref() else {
            return;
        };
        let mut owned: Vec<OwnedObject> = lock(&self.owned).drain().map(|(_, o)| o).collect();
        owned.sort_by_key(|o| o.order);
        for o in owned {
            if let Err(e) = (o.destroy)(dev) {
                // Said with SOFTROCE_LOG=verbs; the close goes on.
                fail("ibv_close_device", e.errno(), e);
            }
        }
    }

    /// Counts the calling thread among the async-event waiters that `close` lets leave
    /// first, until the returned guard drops: for the whole of `ibv_get_async_event`,
    /// which reads the context after the event came too.
    fn count_waiter(&self) -> AsyncWaiter<'_> {
        self.async_waiters.fetch_add(1, Ordering::SeqCst);
        AsyncWaiter(&self.async_waiters)
    }

    /// This context's next async event: at once when its fd is non-blocking (EAGAIN when
    /// there is none), else waiting for one.
    /// The caller must be counted among the waiters ([`EmuContext::count_waiter`]).
    fn next_async_event(&self, dev: &Arc<Device>) -> Result<AsyncEvent, c_int> {
        loop {
            if self.closing.load(Ordering::SeqCst) {
                return Err(libc::EIO);
            }
            route_async_events(dev);
            let mut queue = lock(&self.async_queue);
            let ev = queue.pop_front();
            // A closing context's wake-up stays for the other waiters.
            if queue.is_empty() && !self.closing.load(Ordering::SeqCst) {
                let _ = self.async_fd.try_consume();
            }
            drop(queue);
            if let Some(ev) = ev {
                return Ok(ev);
            }
            if fd_is_nonblocking(self.async_fd.as_raw_fd()) {
                return Err(libc::EAGAIN);
            }
            // Checked after the fd was emptied: a close that notified before this sees
            // `closing` here, one after it wakes the wait below.
            if self.closing.load(Ordering::SeqCst) {
                return Err(libc::EIO);
            }
            dev.before_waiting();
            // As the kernel's read of the async event file: a signal whose handler was
            // installed without SA_RESTART ends the wait with EINTR.
            if let Err(e) = self.async_fd.wait_readable_as_read()
                && e.kind() == std::io::ErrorKind::Interrupted
            {
                return Err(libc::EINTR);
            }
        }
    }

    /// The address of a registered object, 0 when there is none.
    fn object_address(&self, kind: ObjectKind, handle: u64) -> usize {
        lock(&self.objects)
            .get(&(kind, handle))
            .copied()
            .unwrap_or(0)
    }
}

/// The context of an `ibv_context` pointer, or the errno to return.
///
/// # Safety
/// As [`EmuContext::from_ctx`].
pub(crate) unsafe fn ctx_of<'a>(
    verb: &str,
    ctx: *mut ibv_context,
) -> Result<&'a EmuContext, c_int> {
    // SAFETY: forwarded.
    unsafe { EmuContext::from_ctx(ctx) }.ok_or_else(|| {
        fail(
            verb,
            libc::EINVAL,
            "the context is NULL or was not opened by this library",
        )
    })
}

/// The context and its running device, or the errno to return.
///
/// # Safety
/// As [`EmuContext::from_ctx`].
pub(crate) unsafe fn ctx_and_device<'a>(
    verb: &str,
    ctx: *mut ibv_context,
) -> Result<(&'a EmuContext, &'a Device), c_int> {
    // SAFETY: forwarded.
    let ctx = unsafe { ctx_of(verb, ctx) }?;
    Ok((ctx, ctx.device(verb)?))
}

/// Run a verb on the device; a failure is reported and becomes the errno.
pub(crate) fn on_device<R>(
    verb: &str,
    dev: &Device,
    f: impl FnOnce(&mut Hca) -> VerbsResult<R>,
) -> Result<R, c_int> {
    dev.with(f).map_err(|e| fail(verb, e.errno(), e))
}

/// Responder resources, as rxe reports them (RXE_MAX_RES_RD_ATOM: `ibv_devinfo -v` on the
/// interop VM's rxe0 shows 258048).
const MAX_RES_RD_ATOM: i32 = 0x3f000;

/// The device attributes this library reports. (The core's vendor_part_id is 0: perftest
/// then uses its generic, legacy `ibv_post_send` path.)
fn reported_device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let mut d = convert::device_attr_to_c(a);
    d.max_res_rd_atom = MAX_RES_RD_ATOM;
    d
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    const VERB: &str = "ibv_query_device";
    guard_errno(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        if device_attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "device_attr is NULL"));
        }
        let a = ctx.query(|h| reported_device_attr(h.query_device()));
        // SAFETY: non-NULL attribute struct from the caller.
        unsafe { *device_attr = a };
        Ok(())
    })
}

unsafe extern "C" fn vctx_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    const VERB: &str = "ibv_query_device_ex";
    guard_errno(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        // SAFETY: the input struct, if given, is readable.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return Err(fail(VERB, libc::EINVAL, "input comp_mask must be 0"));
        }
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!("attr is NULL or attr_size {attr_size} is below ibv_device_attr"),
            ));
        }
        let mut ex: ibv_device_attr_ex = zeroed();
        ex.orig_attr = ctx.query(|h| reported_device_attr(h.query_device()));
        ex.phys_port_cnt_ex = u32::from(ex.orig_attr.phys_port_cnt);
        ex.max_dm_size = ctx.query(|h| h.query_device().max_dm_size);
        ex.cq_mod_caps = ctx.query(|h| ibv_cq_moderation_caps {
            max_cq_count: h.query_device().max_cq_moderation_count,
            max_cq_period: h.query_device().max_cq_moderation_period,
        });
        ex.hca_core_clock = ctx.query(|h| h.query_device().hca_core_clock);
        ex.device_cap_flags_ex = ctx.query(|h| h.query_device().device_cap_flags_ex);
        ex.completion_timestamp_mask = ctx.query(|h| h.query_device().completion_timestamp_mask);
        let odp = ctx.query(|h| h.query_device().odp);
        ex.odp_caps = ibv_odp_caps {
            general_caps: odp.general,
            per_transport_caps: ibv_odp_caps_per_transport {
                rc_odp_caps: odp.rc,
                uc_odp_caps: odp.uc,
                ud_odp_caps: odp.ud,
            },
        };
        ex.xrc_odp_caps = odp.xrc;
        let tm = ctx.query(|h| h.tm_caps());
        ex.tm_caps = ibv_tm_caps {
            max_rndv_hdr_size: tm.max_rndv_hdr_size,
            max_num_tags: tm.max_num_tags,
            flags: IBV_TM_CAP_RC,
            max_ops: tm.max_ops,
            max_sge: tm.max_sge,
        };
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct holds attr_size bytes; we write at most that.
        unsafe {
            zero_newer_fields(attr.cast(), attr_size);
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&ex).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        Ok(())
    })
}

/// `ibv_query_rt_values_ex`: the raw clock, the one completions are stamped with
/// (nanoseconds of CLOCK_MONOTONIC: see `softroce_emu::driver::clock`), as a normalised
/// timespec (`tv_sec * 1e9 + tv_nsec` is the value; mlx5 puts its cycles in `tv_nsec`
/// alone, which for nanoseconds is the same sum).
unsafe extern "C" fn vctx_query_rt_values(context: *mut ibv_context, values: *mut c_void) -> c_int {
    const VERB: &str = "ibv_query_rt_values_ex";
    guard_errno(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        let values = values.cast::<ibv_values_ex>();
        if values.is_null() {
            return Err(fail(VERB, libc::EINVAL, "values is NULL"));
        }
        // SAFETY: non-NULL, the caller's struct.
        let v = unsafe { &mut *values };
        if v.comp_mask & !IBV_VALUES_MASK_RAW_CLOCK != 0 {
            return Err(fail(
                VERB,
                libc::EINVAL,
                format!(
                    "comp_mask {:#x} asks for values other than IBV_VALUES_MASK_RAW_CLOCK",
                    v.comp_mask
                ),
            ));
        }
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            let ns = ctx.device(VERB)?.raw_clock();
            v.raw_clock = libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            };
        }
        Ok(())
    })
}

/// Write the first `len` bytes of the port attributes.
///
/// # Safety
/// `context` must be NULL or from ibv_open_device; `attr` must hold `len` writable bytes.
pub(crate) unsafe fn write_port_attr(
    verb: &str,
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> Result<(), c_int> {
    // SAFETY: forwarded.
    let ctx = unsafe { ctx_of(verb, context) }?;
    if attr.is_null() {
        return Err(fail(verb, libc::EINVAL, "port_attr is NULL"));
    }
    let a = ctx
        .query(|h| h.query_port(port).map(|p| convert::port_attr_to_c(&p)))
        .map_err(|e| fail(verb, libc::EINVAL, e))?;
    let n = len.min(size_of::<ibv_port_attr>());
    // SAFETY: the caller's struct holds `len` bytes.
    unsafe {
        zero_newer_fields(attr.cast(), len);
        std::ptr::copy_nonoverlapping(std::ptr::from_ref(&a).cast::<u8>(), attr.cast::<u8>(), n)
    };
    Ok(())
}

/// Zero a query's output struct of `len` bytes before filling what we know of it, as
/// libibverbs does (`memset(port_attr, 0, port_attr_len)`): a program built against newer
/// headers (rdma-core 49's `active_speed_ex` after `port_cap_flags2`) reads 0, "not
/// reported", in the fields past ours, not its stack's garbage. At most 4 KiB: no struct
/// of these grows that far, and a wild length then costs no more.
///
/// # Safety
/// `out` must be writable for `len` bytes.
unsafe fn zero_newer_fields(out: *mut u8, len: usize) {
    // SAFETY: as documented (never more than `len`).
    unsafe { std::ptr::write_bytes(out, 0, len.min(4096)) };
}

unsafe extern "C" fn vctx_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    const VERB: &str = "ibv_query_port";
    // SAFETY: the header passes the size of the caller's struct.
    guard_errno(VERB, || unsafe {
        write_port_attr(VERB, context, port_num, port_attr, port_attr_len)
    })
}

/// The exported `ibv_query_port@IBVERBS_1.1` is the fallback of old headers: their struct
/// ends before `port_cap_flags2` (48 bytes).
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    const VERB: &str = "ibv_query_port";
    // SAFETY: callers of the compat entry point pass at least the 48-byte struct.
    guard_errno(VERB, || unsafe {
        write_port_attr(VERB, context, port_num, port_attr, 48)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    const VERB: &str = "ibv_query_gid";
    guard_status(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        if gid.is_null() || index < 0 {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "gid is NULL or the index is negative",
            ));
        }
        // Tools probe indexes up to gid_tbl_len and beyond: no message, as rdma-core.
        let g = ctx
            .query(|h| h.query_gid(port_num, index as usize))
            .map_err(|_| libc::EINVAL)?;
        // SAFETY: non-NULL gid from the caller.
        unsafe { *gid = gid_to_c(g) };
        Ok(())
    })
}

/// ibv_query_gid_ex(3) as the kernel answers it: a missing port or an index past the
/// table is EINVAL; ENODATA only for an empty entry inside the table.
fn gid_entry(ctx: &EmuContext, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    if port != 1 || index as usize >= ctx.query(|h| h.gids().len()) {
        return Err(libc::EINVAL);
    }
    let gid = ctx
        .query(|h| h.query_gid(1, index as usize))
        .map_err(|_| libc::ENODATA)?;
    let port = 1u8;
    Ok(ibv_gid_entry {
        gid: gid_to_c(gid),
        gid_index: index,
        port_num: u32::from(port),
        // The emulator speaks RoCEv2 (UDP) only.
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: u32::from(ctx.entry.spec.ip.is_loopback()),
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    const VERB: &str = "ibv_query_gid_ex";
    guard_errno(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        // The kernel takes a whole entry at least (its attribute's minimum size is the
        // struct up to netdev_ifindex) and zeroes a longer one past it.
        if entry.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
            return Err(fail(
                VERB,
                libc::EINVAL,
                "entry is NULL, flags is not 0 or entry_size is shorter than an entry",
            ));
        }
        let e = gid_entry(ctx, port_num, gid_index)?;
        // SAFETY: the caller's entry of entry_size bytes.
        unsafe { write_gid_entry(&e, entry.cast(), entry_size) };
        Ok(())
    })
}

/// One GID entry into a caller's slot of `entry_size` bytes, as the kernel's uverbs copies
/// it: a smaller slot (a table of shorter entries) takes the entry's first bytes, a larger
/// one is zeroed past the entry.
///
/// # Safety
/// `slot` must be writable for `entry_size` bytes.
unsafe fn write_gid_entry(e: &ibv_gid_entry, slot: *mut u8, entry_size: usize) {
    let ours = size_of::<ibv_gid_entry>();
    let copied = entry_size.min(ours);
    // SAFETY: `e` is `ours` bytes of plain data; the caller vouches for `slot`.
    unsafe {
        std::ptr::copy_nonoverlapping(std::ptr::from_ref(e).cast::<u8>(), slot, copied);
        if entry_size > ours {
            std::ptr::write_bytes(slot.add(ours), 0, entry_size - ours);
        }
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    const VERB: &str = "ibv_query_gid_table";
    guard(VERB, -(libc::EIO as isize), || {
        let r = (|| {
            // SAFETY: an ibv_context from ibv_open_device, or rejected.
            let ctx = unsafe { ctx_of(VERB, context) }?;
            if entries.is_null() || flags != 0 || entry_size == 0 {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    "entries is NULL, flags is not 0 or entry_size is 0",
                ));
            }
            let n = ctx.query(|h| h.gids().len());
            if n > max_entries {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    "max_entries is below the table size",
                ));
            }
            for i in 0..n {
                let Ok(e) = gid_entry(ctx, 1, i as u32) else {
                    continue;
                };
                // SAFETY: the caller's array holds max_entries entries of entry_size bytes.
                unsafe {
                    write_gid_entry(&e, entries.cast::<u8>().add(i * entry_size), entry_size)
                };
            }
            Ok(n as isize)
        })();
        r.unwrap_or_else(|e| -(e as isize))
    })
}

/// Private ABI (ibv_devinfo): the sysfs GID type, `IBV_GID_TYPE_SYSFS_*`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    gid_type: *mut u32,
) -> c_int {
    const VERB: &str = "ibv_query_gid_type";
    guard_status(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        if gid_type.is_null()
            || ctx
                .query(|h| h.query_gid(port_num, index as usize))
                .is_err()
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: non-NULL from the caller.
        unsafe { *gid_type = IBV_GID_TYPE_SYSFS_ROCE_V2 };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut __be16,
) -> c_int {
    const VERB: &str = "ibv_query_pkey";
    guard_status(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        if pkey.is_null() {
            return Err(libc::EINVAL);
        }
        // ENOENT for a port or index beyond the table: rdma-core reads
        // ports/N/pkeys/INDEX from sysfs, and that file does not exist.
        let index = u16::try_from(index).map_err(|_| libc::ENOENT)?;
        let p = ctx
            .query(|h| h.query_pkey(port_num, index))
            .map_err(|_| libc::ENOENT)?;
        // SAFETY: non-NULL from the caller.
        unsafe { *pkey = p.to_be() };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: __be16,
) -> c_int {
    const VERB: &str = "ibv_get_pkey_index";
    guard(VERB, -1, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let Ok(ctx) = (unsafe { ctx_of(VERB, context) }) else {
            return -1;
        };
        match ctx.query(|h| h.query_pkey(port_num, 0)) {
            Ok(p) if p.to_be() == pkey => 0,
            _ => {
                set_errno(libc::ENOENT);
                -1
            }
        }
    })
}

/// Whether `fd` has O_NONBLOCK set (then event reads must not wait).
pub(crate) fn fd_is_nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL on an fd number; errors return -1.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    const VERB: &str = "ibv_get_async_event";
    guard_status(VERB, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = unsafe { ctx_of(VERB, context) }?;
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        let _waiting = ctx.count_waiter();
        let dev = ctx.shared_device(VERB)?;
        let ev = ctx.next_async_event(dev)?;
        let object = |kind, handle| CEventElement::Object(ctx.object_address(kind, handle));
        let element = match ev.element {
            EventElement::Cq(h) => object(ObjectKind::Cq, h.to_raw()),
            EventElement::Qp(h) => object(ObjectKind::Qp, h.to_raw()),
            EventElement::Srq(h) => object(ObjectKind::Srq, h.to_raw()),
            EventElement::Port(p) => CEventElement::Port(p),
            EventElement::Device => CEventElement::Device,
        };
        lock(&PENDING_EVENTS).push(PendingEvent {
            ctx: std::ptr::from_ref(ctx) as usize,
            event_type: ev.event_type,
            element,
            event: ev,
            device: Arc::clone(dev),
        });
        // SAFETY: non-NULL from the caller.
        unsafe { *event = convert::async_event_to_c(ev.event_type, element) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    const VERB: &str = "ibv_ack_async_event";
    guard(VERB, (), || {
        if event.is_null() {
            return;
        }
        // SAFETY: non-NULL event from ibv_get_async_event.
        let found = convert::async_event_from_c(unsafe { &*event })
            .ok()
            .and_then(|(event_type, element)| {
                let mut pending = lock(&PENDING_EVENTS);
                pending
                    .iter()
                    .position(|p| p.event_type == event_type && p.element == element)
                    .map(|i| pending.remove(i))
            });
        let Some(p) = found else {
            fail(
                VERB,
                libc::EINVAL,
                "the event was not returned by ibv_get_async_event",
            );
            return;
        };
        if let Err(e) = p.device.with(|h| h.ack_async_event(&p.event)) {
            fail(VERB, e.errno(), e);
        }
    })
}
