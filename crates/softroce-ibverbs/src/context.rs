//! Open devices: `ibv_open_device`/`ibv_close_device`, the queries, GIDs, P_Keys and async
//! events.

use std::ffi::{c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use softroce_emu::Hca;
use softroce_emu::core::{AsyncEvent, DeviceAttr, EventElement, HcaConfig};
use softroce_emu::driver::{Device, DeviceConfig, EventFd};
use softroce_ibverbs_abi::convert::{self, gid_to_c};
use softroce_ibverbs_abi::*;

use crate::devices::{self, DeviceEntry};
use crate::ffi::{fail, fail_null, guard, set_errno, zeroed};
use crate::objects;

const CONTEXT_MAGIC: u64 = u64::from_be_bytes(*b"softroce");

/// An open device. `vctx` holds the `ibv_context` applications see at its end; the rest is
/// ours.
#[repr(C)]
pub(crate) struct EmuContext {
    vctx: verbs_context,
    magic: u64,
    pub(crate) entry: &'static DeviceEntry,
    /// Shared by the contexts of this process that opened the same device. `None` when the
    /// device's address and port were taken (another process uses the device): queries
    /// still work, creating objects fails with EADDRINUSE.
    device: Option<Arc<Device>>,
    open_error: String,
    /// The async fd when there is no device.
    spare_async_fd: Option<EventFd>,
    /// Answers queries when there is no device.
    query_hca: Mutex<Hca>,
}

/// Async events handed out and not yet acknowledged, across contexts (`ibv_ack_async_event`
/// gets no context).
struct PendingEvent {
    ctx: usize,
    event_type: u32,
    element: usize,
    event: AsyncEvent,
}

static PENDING_EVENTS: Mutex<Vec<PendingEvent>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmuContext {
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
        self.device
            .as_deref()
            .ok_or_else(|| fail(verb, libc::EADDRINUSE, &self.open_error))
    }

    /// Run a query on the device (or on the stand-in when the device could not start).
    pub(crate) fn query<R>(&self, f: impl FnOnce(&Hca) -> R) -> R {
        match &self.device {
            Some(d) => d.with(|h| f(h)),
            None => f(&lock(&self.query_hca)),
        }
    }
}

/// The context of an object's `context` field, or the errno to return.
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

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    const VERB: &str = "ibv_open_device";
    guard(VERB, std::ptr::null_mut(), || {
        let Some(entry) = devices::entry(device) else {
            return devices::unknown_device(VERB).cast();
        };
        let mut cfg = DeviceConfig::new(&entry.spec.name, entry.spec.ip);
        cfg.hca.udp_port = entry.spec.udp_port;
        let (device, open_error, spare_async_fd) = match entry.open(|| Device::start(cfg)) {
            Ok(d) => (Some(d), String::new(), None),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                let why = format!(
                    "device {} cannot bind {}:{} ({e}): another process uses it; \
                     only queries work in this one",
                    entry.spec.name, entry.spec.ip, entry.spec.udp_port
                );
                match EventFd::new() {
                    Ok(fd) => (None, why, Some(fd)),
                    Err(e) => return fail_null(VERB, libc::EMFILE, e),
                }
            }
            Err(e) => {
                return fail_null(
                    VERB,
                    e.raw_os_error().unwrap_or(libc::EINVAL),
                    format!(
                        "device {} on {}:{}: {e}",
                        entry.spec.name, entry.spec.ip, entry.spec.udp_port
                    ),
                );
            }
        };
        let query_hca = Hca::new(HcaConfig::new(entry.spec.name.clone(), entry.spec.ip));
        let num_comp_vectors = query_hca.query_device().num_comp_vectors;
        let async_fd = match (&device, &spare_async_fd) {
            (Some(d), _) => d.async_fd().as_raw_fd(),
            (None, Some(fd)) => fd.as_raw_fd(),
            (None, None) => -1,
        };
        let mut vctx: verbs_context = zeroed_vctx();
        vctx.query_port = Some(vctx_query_port);
        vctx.query_device_ex = Some(vctx_query_device_ex);
        vctx.create_qp_ex = Some(crate::qp_ex::vctx_create_qp_ex);
        vctx.create_cq_ex = Some(crate::cq_ex::vctx_create_cq_ex);
        vctx.sz = size_of::<verbs_context>();
        let c = &mut vctx.context;
        c.device = device_ptr(entry);
        c.cmd_fd = -1;
        c.async_fd = async_fd;
        c.num_comp_vectors = i32::try_from(num_comp_vectors).unwrap_or(1);
        c.abi_compat = __VERBS_ABI_IS_EXTENDED as *mut c_void;
        objects::fill_ops(&mut c.ops);
        let ctx = Box::into_raw(Box::new(EmuContext {
            vctx,
            magic: CONTEXT_MAGIC,
            entry,
            device,
            open_error,
            spare_async_fd,
            query_hca: Mutex::new(query_hca),
        }));
        // SAFETY: freshly boxed; the mutex is initialised in place, where it stays.
        unsafe {
            libc::pthread_mutex_init(&mut (*ctx).vctx.context.mutex, std::ptr::null());
            (*ctx).ctx_ptr()
        }
    })
}

fn device_ptr(entry: &'static DeviceEntry) -> *mut ibv_device {
    std::ptr::addr_of!(entry.dev).cast_mut()
}

fn zeroed_vctx() -> verbs_context {
    // SAFETY: all-zero is valid for verbs_context (integers, raw pointers, optional function
    // pointers; a zeroed pthread mutex is PTHREAD_MUTEX_INITIALIZER on glibc).
    unsafe { std::mem::zeroed() }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    const VERB: &str = "ibv_close_device";
    guard(VERB, libc::EIO, || {
        // SAFETY: an ibv_context from ibv_open_device, or rejected.
        let ctx = match unsafe { ctx_of(VERB, context) } {
            Ok(c) => c,
            Err(e) => return e,
        };
        let key = std::ptr::from_ref(ctx) as usize;
        lock(&PENDING_EVENTS).retain(|p| p.ctx != key);
        let p = std::ptr::from_ref(ctx).cast_mut();
        // SAFETY: the box from ibv_open_device; the application promises not to use the
        // context (or objects of it) any more. Dropping joins the engine thread.
        unsafe {
            (*p).magic = 0;
            libc::pthread_mutex_destroy(&mut (*p).vctx.context.mutex);
            drop(Box::from_raw(p));
        }
        0
    })
}

/// IBV_DEVICE_MEM_WINDOW, MEM_MGT_EXTENSIONS, MEM_WINDOW_TYPE_2A and _2B.
const NOT_EMULATED_CAPS: u32 = (1 << 17) | (1 << 21) | (1 << 23) | (1 << 24);

/// Responder resources, as rxe reports them.
const MAX_RES_RD_ATOM: i32 = 0x3f80;

/// The device attributes this library reports. (The core's vendor_part_id is 0: perftest
/// then uses its generic, legacy `ibv_post_send` path.)
fn reported_device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let mut d = convert::device_attr_to_c(a);
    // Memory windows and fast-registration work requests are not emulated.
    d.device_cap_flags &= !NOT_EMULATED_CAPS;
    d.max_res_rd_atom = MAX_RES_RD_ATOM;
    d
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    const VERB: &str = "ibv_query_device";
    guard(VERB, libc::EIO, || {
        // SAFETY: checked by ctx_of.
        let ctx = match unsafe { ctx_of(VERB, context) } {
            Ok(c) => c,
            Err(e) => return e,
        };
        if device_attr.is_null() {
            return fail(VERB, libc::EINVAL, "device_attr is NULL");
        }
        let a = ctx.query(|h| reported_device_attr(h.query_device()));
        // SAFETY: non-NULL attribute struct from the caller.
        unsafe { *device_attr = a };
        0
    })
}

unsafe extern "C" fn vctx_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    const VERB: &str = "ibv_query_device_ex";
    guard(VERB, libc::EIO, || {
        // SAFETY: checked by ctx_of.
        let ctx = match unsafe { ctx_of(VERB, context) } {
            Ok(c) => c,
            Err(e) => return e,
        };
        // SAFETY: the input struct, if given, is readable.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return fail(VERB, libc::EINVAL, "input comp_mask must be 0");
        }
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return fail(
                VERB,
                libc::EINVAL,
                format!("attr is NULL or attr_size {attr_size} is below ibv_device_attr"),
            );
        }
        let mut ex: ibv_device_attr_ex = zeroed();
        ex.orig_attr = ctx.query(|h| reported_device_attr(h.query_device()));
        ex.phys_port_cnt_ex = u32::from(ex.orig_attr.phys_port_cnt);
        let n = attr_size.min(size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct holds attr_size bytes; we write at most that.
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::from_ref(&ex).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        0
    })
}

fn port_attr_of(ctx: &EmuContext, port: u8) -> Result<ibv_port_attr, String> {
    ctx.query(|h| h.query_port(port).map(|p| convert::port_attr_to_c(&p)))
        .map_err(|e| e.to_string())
}

/// Write the first `len` bytes of the port attributes.
///
/// # Safety
/// `attr` must hold `len` writable bytes.
unsafe fn write_port_attr(
    verb: &str,
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: checked by ctx_of.
    let ctx = match unsafe { ctx_of(verb, context) } {
        Ok(c) => c,
        Err(e) => return e,
    };
    if attr.is_null() {
        return fail(verb, libc::EINVAL, "port_attr is NULL");
    }
    let a = match port_attr_of(ctx, port) {
        Ok(a) => a,
        Err(e) => return fail(verb, libc::EINVAL, e),
    };
    let n = len.min(size_of::<ibv_port_attr>());
    // SAFETY: the caller's struct holds `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(std::ptr::from_ref(&a).cast::<u8>(), attr.cast::<u8>(), n)
    };
    0
}

unsafe extern "C" fn vctx_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    guard("ibv_query_port", libc::EIO, || {
        // SAFETY: the header passes the size of the caller's struct.
        unsafe {
            write_port_attr(
                "ibv_query_port",
                context,
                port_num,
                port_attr,
                port_attr_len,
            )
        }
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
    guard("ibv_query_port", libc::EIO, || {
        // SAFETY: callers of the compat entry point pass at least the 48-byte struct.
        unsafe { write_port_attr("ibv_query_port", context, port_num, port_attr, 48) }
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
    guard(VERB, -1, || {
        // SAFETY: checked by ctx_of.
        let Ok(ctx) = (unsafe { ctx_of(VERB, context) }) else {
            return -1;
        };
        if gid.is_null() || index < 0 {
            fail(VERB, libc::EINVAL, "gid is NULL or the index is negative");
            return -1;
        }
        match ctx.query(|h| h.query_gid(port_num, index as usize)) {
            Ok(g) => {
                // SAFETY: non-NULL gid from the caller.
                unsafe { *gid = gid_to_c(g) };
                0
            }
            // Tools probe indexes up to gid_tbl_len and beyond: no message, as rdma-core.
            Err(_) => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    })
}

fn gid_entry(ctx: &EmuContext, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    let port = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    let gid = ctx
        .query(|h| h.query_gid(port, index as usize))
        .map_err(|_| libc::ENODATA)?;
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
    guard(VERB, libc::EIO, || {
        // SAFETY: checked by ctx_of.
        let ctx = match unsafe { ctx_of(VERB, context) } {
            Ok(c) => c,
            Err(e) => return e,
        };
        if entry.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
            return fail(
                VERB,
                libc::EINVAL,
                "entry is NULL, flags is not 0 or entry_size is too small",
            );
        }
        match gid_entry(ctx, port_num, gid_index) {
            Ok(e) => {
                // SAFETY: non-NULL entry of at least our size.
                unsafe { *entry = e };
                0
            }
            Err(e) => {
                set_errno(e);
                e
            }
        }
    })
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
        // SAFETY: checked by ctx_of.
        let ctx = match unsafe { ctx_of(VERB, context) } {
            Ok(c) => c,
            Err(e) => return -(e as isize),
        };
        if entries.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
            return -(fail(
                VERB,
                libc::EINVAL,
                "entries is NULL, flags is not 0 or entry_size is too small",
            ) as isize);
        }
        let n = ctx.query(|h| h.gids().len());
        if n > max_entries {
            return -(fail(VERB, libc::EINVAL, "max_entries is below the table size") as isize);
        }
        for i in 0..n {
            let Ok(e) = gid_entry(ctx, 1, i as u32) else {
                continue;
            };
            // SAFETY: the caller's array holds max_entries entries of entry_size bytes.
            unsafe {
                *entries
                    .cast::<u8>()
                    .add(i * entry_size)
                    .cast::<ibv_gid_entry>() = e
            };
        }
        n as isize
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
    guard(VERB, -1, || {
        // SAFETY: checked by ctx_of.
        let Ok(ctx) = (unsafe { ctx_of(VERB, context) }) else {
            return -1;
        };
        if gid_type.is_null()
            || ctx
                .query(|h| h.query_gid(port_num, index as usize))
                .is_err()
        {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: non-NULL from the caller.
        unsafe { *gid_type = IBV_GID_TYPE_SYSFS_ROCE_V2 };
        0
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
    guard(VERB, -1, || {
        // SAFETY: checked by ctx_of.
        let Ok(ctx) = (unsafe { ctx_of(VERB, context) }) else {
            return -1;
        };
        let Ok(index) = u16::try_from(index) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        match ctx.query(|h| h.query_pkey(port_num, index)) {
            Ok(p) if !pkey.is_null() => {
                // SAFETY: non-NULL from the caller.
                unsafe { *pkey = p.to_be() };
                0
            }
            _ => {
                set_errno(libc::EINVAL);
                -1
            }
        }
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
        // SAFETY: checked by ctx_of.
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
    guard(VERB, -1, || {
        // SAFETY: checked by ctx_of.
        let Ok(ctx) = (unsafe { ctx_of(VERB, context) }) else {
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let Ok(dev) = ctx.device(VERB) else {
            return -1;
        };
        let timeout = fd_is_nonblocking(dev.async_fd().as_raw_fd()).then_some(Duration::ZERO);
        let ev = match dev.get_async_event(timeout) {
            Ok(ev) => ev,
            Err(e) => {
                set_errno(e.errno());
                return -1;
            }
        };
        let element: usize = match ev.element {
            EventElement::Cq(h) => objects::cq_ptr(ctx, h),
            EventElement::Qp(h) => objects::qp_ptr(ctx, h),
            EventElement::Srq(h) => objects::srq_ptr(ctx, h),
            EventElement::Port(p) => usize::from(p),
            EventElement::Device => 0,
        };
        let mut out: ibv_async_event = ibv_async_event {
            element: ibv_async_event_element {
                cq: std::ptr::null_mut(),
            },
            event_type: ev.event_type.raw(),
        };
        match ev.element {
            EventElement::Port(p) => out.element.port_num = c_int::from(p),
            _ => out.element.cq = element as *mut ibv_cq,
        }
        lock(&PENDING_EVENTS).push(PendingEvent {
            ctx: std::ptr::from_ref(ctx) as usize,
            event_type: out.event_type,
            element,
            event: ev,
        });
        // SAFETY: non-NULL from the caller.
        unsafe { *event = out };
        0
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
        let ev = unsafe { *event };
        let is_port = matches!(
            ev.event_type,
            IBV_EVENT_PORT_ACTIVE
                | IBV_EVENT_PORT_ERR
                | IBV_EVENT_LID_CHANGE
                | IBV_EVENT_PKEY_CHANGE
                | IBV_EVENT_SM_CHANGE
                | IBV_EVENT_CLIENT_REREGISTER
                | IBV_EVENT_GID_CHANGE
        );
        let element = if is_port {
            // SAFETY: port events carry the port number.
            usize::try_from(unsafe { ev.element.port_num }).unwrap_or(0)
        } else if ev.event_type == IBV_EVENT_DEVICE_FATAL {
            0
        } else {
            // SAFETY: other events carry an object pointer.
            (unsafe { ev.element.cq }) as usize
        };
        let found = {
            let mut pending = lock(&PENDING_EVENTS);
            pending
                .iter()
                .position(|p| p.event_type == ev.event_type && p.element == element)
                .map(|i| pending.remove(i))
        };
        let Some(p) = found else {
            fail(
                VERB,
                libc::EINVAL,
                "the event was not returned by ibv_get_async_event",
            );
            return;
        };
        // SAFETY: the context is live: closing it drops its pending events.
        let ctx = unsafe { &*(p.ctx as *const EmuContext) };
        if let Ok(dev) = ctx.device(VERB)
            && let Err(e) = dev.with(|h| h.ack_async_event(&p.event))
        {
            fail(VERB, e.errno(), e);
        }
    })
}
