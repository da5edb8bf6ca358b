//! The connection manager on the libibverbs backend: the system's `librdmacm.so.1`, loaded
//! at run time with `libloading` next to the libibverbs the backend loaded (cargo feature
//! `ibverbs`; nothing from rdma-core is needed to build).
//!
//! One `rdma_event_channel` per device's [`ConnectionManager`](super::ConnectionManager),
//! its fd non-blocking: the waits of [`CmShared`](super::CmShared) poll it, and every event
//! is copied out and acknowledged at once (`rdma_destroy_id` waits for the acknowledgement
//! of its id's events, so none is ever held). Each `rdma_cm_id` gets a [`ConnId`] and its
//! events become the emulated CM's [`CmEvent`]s, which the dispatch tables of `cm.rs` hand
//! to the waiting call as on an emulated device.
//!
//! The QPs are the application's, made through the Rust API on the backend's own
//! `ibv_context` (librdmacm's "QP not created by `rdma_create_qp`" path): `conn_param.qp_num`
//! names them, and they are moved to RTR and RTS with `rdma_init_qp_attr`, as
//! `ucma_process_conn_resp` and `rdma_accept` would move a QP of their own. The id's
//! device (`cm_id->verbs`) must be the QP's.
//!
//! An active connect resolves the address, then the route, then sends the REQ: each step
//! is started by the previous one's event as it is taken, so `start_connect` returns at
//! once and the async calls work as on the emulator.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libc::sockaddr;
use libloading::Library;
use softroce_emu::cm::{
    CmEvent, ConnId, PathParams, ReplyParams, RequestParams, cma_private_data,
    cma_sidr_private_data,
};
use softroce_emu::core::AhAttr;
use softroce_ibverbs_abi as sys;
use softroce_ibverbs_abi::rdmacm::*;
use softroce_wire::cm::CmaAddrs;
use softroce_wire::{CmaHdrRepr, Gid, PortSpace, Psn, Qpn};

use super::lock;
use crate::backend::{Backend, Ibverbs};
use crate::error::{Error, Result};
use crate::qp::{PreparedQueuePair, QueuePair};

/// The librdmacm entry points used here, resolved once (rdma-core 17 has them all).
struct Fns {
    create_event_channel: unsafe extern "C" fn() -> *mut rdma_event_channel,
    destroy_event_channel: unsafe extern "C" fn(*mut rdma_event_channel),
    create_id: unsafe extern "C" fn(
        *mut rdma_event_channel,
        *mut *mut rdma_cm_id,
        *mut c_void,
        c_int,
    ) -> c_int,
    destroy_id: unsafe extern "C" fn(*mut rdma_cm_id) -> c_int,
    bind_addr: unsafe extern "C" fn(*mut rdma_cm_id, *mut sockaddr) -> c_int,
    resolve_addr:
        unsafe extern "C" fn(*mut rdma_cm_id, *mut sockaddr, *mut sockaddr, c_int) -> c_int,
    resolve_route: unsafe extern "C" fn(*mut rdma_cm_id, c_int) -> c_int,
    connect: unsafe extern "C" fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int,
    establish: unsafe extern "C" fn(*mut rdma_cm_id) -> c_int,
    listen: unsafe extern "C" fn(*mut rdma_cm_id, c_int) -> c_int,
    accept: unsafe extern "C" fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int,
    reject: unsafe extern "C" fn(*mut rdma_cm_id, *const c_void, u8) -> c_int,
    disconnect: unsafe extern "C" fn(*mut rdma_cm_id) -> c_int,
    get_cm_event: unsafe extern "C" fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int,
    ack_cm_event: unsafe extern "C" fn(*mut rdma_cm_event) -> c_int,
    init_qp_attr: unsafe extern "C" fn(*mut rdma_cm_id, *mut sys::ibv_qp_attr, *mut c_int) -> c_int,
    event_str: unsafe extern "C" fn(c_int) -> *const c_char,
}

impl Fns {
    /// Resolve every entry point; a missing one names itself.
    ///
    /// # Safety
    /// `lib` must be librdmacm (the signatures are taken from its header).
    unsafe fn load(lib: &Library, path: &str) -> Result<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the caller guarantees the library; the type is the header's.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| Error::Cm {
                    what: "connection_manager",
                    reason: format!("{path} lacks {}: {e}", $name),
                    errno: libc::EOPNOTSUPP,
                })?
            };
        }
        Ok(Self {
            create_event_channel: sym!("rdma_create_event_channel"),
            destroy_event_channel: sym!("rdma_destroy_event_channel"),
            create_id: sym!("rdma_create_id"),
            destroy_id: sym!("rdma_destroy_id"),
            bind_addr: sym!("rdma_bind_addr"),
            resolve_addr: sym!("rdma_resolve_addr"),
            resolve_route: sym!("rdma_resolve_route"),
            connect: sym!("rdma_connect"),
            establish: sym!("rdma_establish"),
            listen: sym!("rdma_listen"),
            accept: sym!("rdma_accept"),
            reject: sym!("rdma_reject"),
            disconnect: sym!("rdma_disconnect"),
            get_cm_event: sym!("rdma_get_cm_event"),
            ack_cm_event: sym!("rdma_ack_cm_event"),
            init_qp_attr: sym!("rdma_init_qp_attr"),
            event_str: sym!("rdma_event_str"),
        })
    }
}

/// The errno of the last failed call (librdmacm returns -1 and sets errno).
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}

/// A failed librdmacm call as an error that names it and says why.
fn call_failed(what: &'static str, call: &str, detail: &str, errno: i32) -> Error {
    Error::Cm {
        what,
        reason: format!(
            "{call} failed{detail}: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
        errno,
    }
}

/// The REQ an active id sends once its route is resolved.
#[derive(Debug, Clone)]
pub(crate) struct ConnectRequestParams {
    /// Application private data (rdma_cm prepends its header).
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    /// The QP the REQ names.
    pub(crate) qp_num: u32,
}

/// One id of this connection manager.
#[derive(Debug)]
struct Id {
    ptr: usize,
    /// An active id still resolving: the REQ to send, and the step timeout (ms).
    pending: Option<(ConnectRequestParams, c_int)>,
    /// An id of `RDMA_PS_UDP` (its connect is a SIDR exchange).
    ud: bool,
}

#[derive(Debug, Default)]
struct State {
    next: u32,
    ids: HashMap<ConnId, Id>,
    by_ptr: HashMap<usize, ConnId>,
    /// Service ID → listening id.
    listeners: HashMap<u64, usize>,
    /// Listening id → service ID.
    services: HashMap<usize, u64>,
    /// Why an attempt failed in a step this module ran (resolution, the REQ), reported by
    /// `connect` instead of a bare "unreachable".
    failures: HashMap<ConnId, Error>,
    /// The address vector of a resolved UD peer (`param.ud.ah_attr` of its ESTABLISHED),
    /// until the resolution concludes.
    ud_ah: HashMap<ConnId, sys::ibv_ah_attr>,
}

impl State {
    fn register(
        &mut self,
        ptr: usize,
        pending: Option<(ConnectRequestParams, c_int)>,
        ud: bool,
    ) -> ConnId {
        // Bounded: at most as many ids as are live can be skipped.
        let id = loop {
            self.next = self.next.wrapping_add(1);
            let id = ConnId(self.next);
            if !self.ids.contains_key(&id) {
                break id;
            }
        };
        self.ids.insert(id, Id { ptr, pending, ud });
        self.by_ptr.insert(ptr, id);
        id
    }

    fn unregister(&mut self, id: ConnId) -> Option<usize> {
        self.failures.remove(&id);
        self.ud_ah.remove(&id);
        let entry = self.ids.remove(&id)?;
        self.by_ptr.remove(&entry.ptr);
        Some(entry.ptr)
    }
}

/// An event copied out of librdmacm (and acknowledged).
#[derive(Debug)]
struct RawEvent {
    kind: c_int,
    status: c_int,
    id: usize,
    listen_id: usize,
    private_data: Vec<u8>,
    qp_num: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    srq: bool,
    flow_control: bool,
    /// The id's addresses (a request's: the requester's and ours).
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    /// `param.ud` (meaningful on ids of `RDMA_PS_UDP` only): the peer's address vector,
    /// QPN and Q_Key.
    ud_ah_attr: sys::ibv_ah_attr,
    ud_qp_num: u32,
    ud_qkey: u32,
}

/// The address in an `rdma_sockaddr`, if it is IPv4 or IPv6.
fn socket_addr(a: &rdma_sockaddr) -> Option<SocketAddr> {
    // SAFETY: every member of the union is plain data; the family says which is valid.
    unsafe {
        match c_int::from(a.addr.sa_family) {
            libc::AF_INET => {
                let sin = a.sin;
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let sin6 = a.sin6;
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    u16::from_be(sin6.sin6_port),
                ))
            }
            _ => None,
        }
    }
}

/// `addr` as a C socket address.
fn to_sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: plain data; all-zero is valid.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage has room for (and the alignment of) a sockaddr_in.
            unsafe { ptr::write((&raw mut s).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            // SAFETY: plain data; all-zero is valid.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            // SAFETY: sockaddr_storage has room for (and the alignment of) a sockaddr_in6.
            unsafe { ptr::write((&raw mut s).cast(), sin6) };
        }
    }
    s
}

/// The librdmacm connection manager of one libibverbs device.
pub(crate) struct Rdmacm {
    fns: Fns,
    channel: *mut rdma_event_channel,
    /// The device's backend: its libibverbs (which librdmacm uses) stays loaded, and QPs
    /// are moved through it.
    backend: Arc<dyn Backend>,
    state: Mutex<State>,
    path: String,
    /// Keeps the entry points valid; dropped last.
    _lib: Library,
}

// SAFETY: librdmacm's calls may be made from any thread (it locks internally); the
// channel pointer is only used through them.
unsafe impl Send for Rdmacm {}
// SAFETY: as above.
unsafe impl Sync for Rdmacm {}

impl std::fmt::Debug for Rdmacm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rdmacm")
            .field("library", &self.path)
            .field("ids", &lock(&self.state).ids.len())
            .finish()
    }
}

/// Which librdmacm to load: `SOFTROCE_LIBRDMACM`, else the one next to the libibverbs file
/// the backend loaded (when that was given as a path), else `librdmacm.so.1`.
fn library_path(ibverbs: &str) -> String {
    if let Ok(path) = std::env::var("SOFTROCE_LIBRDMACM") {
        return path;
    }
    let dir = std::path::Path::new(ibverbs).parent();
    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
        for name in ["librdmacm.so.1", "librdmacm.so"] {
            let p = dir.join(name);
            if p.is_file() {
                return p.to_string_lossy().into_owned();
            }
        }
    }
    "librdmacm.so.1".into()
}

impl Rdmacm {
    /// Load librdmacm and open an event channel for the device of `backend` (which must be
    /// the libibverbs backend).
    pub(crate) fn open(backend: &Arc<dyn Backend>) -> Result<Self> {
        let Some(ibv) = backend.ibverbs() else {
            return Err(Error::Unsupported {
                what: "librdmacm",
                backend: backend.kind(),
            });
        };
        let path = library_path(ibv.library_path());
        crate::backend::ibverbs::openable_library(&path).map_err(|e| Error::Cm {
            what: "connection_manager",
            reason: format!("loading {path}: {e}"),
            errno: libc::EINVAL,
        })?;
        // SAFETY: loading librdmacm runs no constructor beyond its own initialisation (it
        // opens devices lazily, on first use).
        let lib = unsafe { Library::new(&path) }.map_err(|e| Error::Cm {
            what: "connection_manager",
            reason: format!(
                "the libibverbs backend's connection manager is librdmacm, and loading {path} \
                 failed ({e}): install librdmacm1 (rdma-core), or name the file with \
                 SOFTROCE_LIBRDMACM"
            ),
            errno: libc::EOPNOTSUPP,
        })?;
        // SAFETY: it is librdmacm.
        let fns = unsafe { Fns::load(&lib, &path) }?;
        // SAFETY: no arguments.
        let channel = unsafe { (fns.create_event_channel)() };
        if channel.is_null() {
            let e = errno();
            let hint = match e {
                // ucma_init: no /dev/infiniband/rdma_cm, or no device behind it.
                libc::ENOENT | libc::ENODEV | libc::ENOSYS => {
                    " (no kernel RDMA CM here: is rdma_ucm loaded and an RDMA device present?)"
                }
                _ => "",
            };
            let mut err = call_failed(
                "connection_manager",
                "rdma_create_event_channel",
                &format!(" ({path})"),
                e,
            );
            if let Error::Cm { reason, .. } = &mut err {
                reason.push_str(hint);
            }
            return Err(err);
        }
        // SAFETY: a live channel; its fd is librdmacm's, made non-blocking as
        // rdma_get_cm_event(3) allows.
        let fd = unsafe { (*channel).fd };
        // SAFETY: fcntl on a valid fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            let e = errno();
            // SAFETY: the channel has no ids yet.
            unsafe { (fns.destroy_event_channel)(channel) };
            return Err(call_failed(
                "connection_manager",
                "fcntl(O_NONBLOCK) on the event channel",
                "",
                e,
            ));
        }
        Ok(Self {
            fns,
            channel,
            backend: Arc::clone(backend),
            state: Mutex::new(State::default()),
            path,
            _lib: lib,
        })
    }

    fn ibverbs(&self) -> &Ibverbs {
        match self.backend.ibverbs() {
            Some(ibv) => ibv,
            None => unreachable!("opened on the libibverbs backend"),
        }
    }

    /// The event channel's fd (readable while events are queued).
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel lives as long as `self`.
        unsafe { (*self.channel).fd }
    }

    /// Ids alive (listeners not counted).
    pub(crate) fn connection_count(&self) -> usize {
        lock(&self.state).ids.len()
    }

    fn ptr_of(&self, id: ConnId) -> Option<*mut rdma_cm_id> {
        lock(&self.state)
            .ids
            .get(&id)
            .map(|e| e.ptr as *mut rdma_cm_id)
    }

    fn ptr(&self, what: &'static str, id: ConnId) -> Result<*mut rdma_cm_id> {
        self.ptr_of(id).ok_or_else(|| Error::Cm {
            what,
            reason: format!("{id} is not a live rdma_cm_id"),
            errno: libc::EINVAL,
        })
    }

    fn create_id(&self, what: &'static str, ps: PortSpace) -> Result<*mut rdma_cm_id> {
        let ps = match ps {
            PortSpace::Udp => RDMA_PS_UDP,
            _ => RDMA_PS_TCP,
        };
        let mut id = ptr::null_mut();
        // SAFETY: a live channel and a valid out pointer.
        let rc = unsafe { (self.fns.create_id)(self.channel, &mut id, ptr::null_mut(), ps) };
        if rc != 0 || id.is_null() {
            return Err(call_failed(what, "rdma_create_id", "", errno()));
        }
        Ok(id)
    }

    fn destroy_ptr(&self, id: *mut rdma_cm_id) {
        // SAFETY: a live id of this channel whose events were all acknowledged.
        let _ = unsafe { (self.fns.destroy_id)(id) };
    }

    /// The id's device must be this backend's (its QPs are on it).
    ///
    /// # Safety
    /// `id` must be live.
    unsafe fn check_device(&self, what: &'static str, id: *mut rdma_cm_id) -> Result<()> {
        // SAFETY: the caller's live id.
        let verbs = unsafe { (*id).verbs };
        if verbs.is_null() {
            return Err(Error::Cm {
                what,
                reason: "the rdma_cm_id has no device".into(),
                errno: libc::ENODEV,
            });
        }
        // SAFETY: librdmacm's context of the same libibverbs.
        let theirs = unsafe { self.ibverbs().device_name_of(verbs) };
        let ours = self.backend.device_name();
        if theirs != ours {
            return Err(Error::Cm {
                what,
                reason: format!(
                    "the address is on RDMA device {theirs}, but this context (and its QPs) \
                     is on {ours}: open the context on {theirs}"
                ),
                errno: libc::EXDEV,
            });
        }
        // SAFETY: the caller's live id.
        let port = unsafe { (*id).port_num };
        if port > 1 {
            return Err(Error::Cm {
                what,
                reason: format!(
                    "the address is on port {port} of {ours}, but the QPs of this API are on \
                     port 1"
                ),
                errno: libc::EXDEV,
            });
        }
        Ok(())
    }

    /// `rdma_create_id` in port space `ps` + `rdma_bind_addr` + `rdma_listen` on `addr` for
    /// `service_id`.
    pub(crate) fn listen(&self, ps: PortSpace, service_id: u64, addr: SocketAddr) -> Result<()> {
        if lock(&self.state).listeners.contains_key(&service_id) {
            return Err(Error::Cm {
                what: "listen",
                reason: format!("already listening on {addr}"),
                errno: libc::EADDRINUSE,
            });
        }
        let id = self.create_id("listen", ps)?;
        let mut sa = to_sockaddr(addr);
        // SAFETY: a live id and a valid socket address.
        let r = if unsafe { (self.fns.bind_addr)(id, (&raw mut sa).cast()) } != 0 {
            Err(call_failed(
                "listen",
                "rdma_bind_addr",
                &format!(" to {addr}"),
                errno(),
            ))
        } else {
            // SAFETY: a live id, bound to a device.
            unsafe { self.check_device("listen", id) }
        };
        if let Err(e) = r {
            self.destroy_ptr(id);
            return Err(e);
        }
        // Known before the first request can come.
        {
            let mut s = lock(&self.state);
            s.listeners.insert(service_id, id as usize);
            s.services.insert(id as usize, service_id);
        }
        // SAFETY: a live, bound id.
        if unsafe { (self.fns.listen)(id, super::MAX_BACKLOG as c_int) } != 0 {
            let e = call_failed("listen", "rdma_listen", &format!(" on {addr}"), errno());
            self.stop_listening(service_id);
            return Err(e);
        }
        Ok(())
    }

    /// Stop listening on `service_id` (`rdma_destroy_id` of the listening id).
    pub(crate) fn stop_listening(&self, service_id: u64) {
        let id = {
            let mut s = lock(&self.state);
            let id = s.listeners.remove(&service_id);
            if let Some(id) = id {
                s.services.remove(&id);
            }
            id
        };
        if let Some(id) = id {
            self.destroy_ptr(id as *mut rdma_cm_id);
        }
    }

    /// Start an active connection from `src` to `to`: `rdma_resolve_addr` now, the route
    /// and the REQ as their events come.
    pub(crate) fn connect(
        &self,
        src: IpAddr,
        to: SocketAddr,
        params: ConnectRequestParams,
        timeout: Duration,
    ) -> Result<ConnId> {
        self.start_active("connect", PortSpace::Tcp, src, to, params, timeout)
    }

    /// Start UD address resolution from `src` to `to` (an id of `RDMA_PS_UDP`):
    /// `rdma_resolve_addr` now, the route and `rdma_connect` (the SIDR_REQ) as their
    /// events come; its ESTABLISHED carries the peer's QPN, Q_Key and address vector.
    pub(crate) fn resolve_ud(
        &self,
        src: IpAddr,
        to: SocketAddr,
        private_data: Vec<u8>,
        timeout: Duration,
    ) -> Result<ConnId> {
        let params = ConnectRequestParams {
            private_data,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            qp_num: 0,
        };
        self.start_active("resolve_ud", PortSpace::Udp, src, to, params, timeout)
    }

    fn start_active(
        &self,
        what: &'static str,
        ps: PortSpace,
        src: IpAddr,
        to: SocketAddr,
        params: ConnectRequestParams,
        timeout: Duration,
    ) -> Result<ConnId> {
        let step_ms = c_int::try_from(timeout.as_millis().clamp(1, 60_000)).unwrap_or(60_000);
        let ptr = self.create_id(what, ps)?;
        let id =
            lock(&self.state).register(ptr as usize, Some((params, step_ms)), ps == PortSpace::Udp);
        let mut s = to_sockaddr(SocketAddr::new(src, 0));
        let mut d = to_sockaddr(to);
        // SAFETY: a live id and valid socket addresses.
        let rc = unsafe {
            (self.fns.resolve_addr)(ptr, (&raw mut s).cast(), (&raw mut d).cast(), step_ms)
        };
        if rc != 0 {
            let e = errno();
            self.destroy(id);
            return Err(call_failed(
                what,
                "rdma_resolve_addr",
                &format!(" from {src} to {to}"),
                e,
            ));
        }
        Ok(id)
    }

    /// Why the attempt `id` failed in a step this module ran, if it did.
    pub(crate) fn failure(&self, id: ConnId) -> Option<Error> {
        lock(&self.state).failures.remove(&id)
    }

    /// `qp` must be of this manager's context: its handle is then one of the backend's
    /// `ibv_qp` pointers (a QP of another backend carries a token that is none).
    pub(crate) fn check_qp(&self, what: &'static str, qp: &PreparedQueuePair) -> Result<()> {
        self.check_backend(what, qp.backend_handle().0)
    }

    /// [`Rdmacm::check_qp`] of a QP in RTS (a UD QP).
    pub(crate) fn check_ud_qp(&self, what: &'static str, qp: &QueuePair) -> Result<()> {
        self.check_backend(what, qp.backend_handle().0)
    }

    fn check_backend(&self, what: &'static str, backend: &Arc<dyn Backend>) -> Result<()> {
        if ptr::addr_eq(Arc::as_ptr(backend), Arc::as_ptr(&self.backend)) {
            return Ok(());
        }
        Err(Error::Invalid {
            what,
            reason: format!(
                "the QP was made on {} ({} backend), not on this connection manager's \
                 context ({}, libibverbs)",
                backend.device_name(),
                backend.kind(),
                self.backend.device_name()
            ),
        })
    }

    /// Move `qp` to RTR and RTS with `rdma_init_qp_attr` of `id` (overriding the responder
    /// resources and initiator depth on the passive side, as `rdma_accept` does); returns
    /// the PSN it sends from.
    fn move_qp(
        &self,
        what: &'static str,
        id: *mut rdma_cm_id,
        qp: &PreparedQueuePair,
        depths: Option<(u8, u8)>,
    ) -> Result<u32> {
        self.check_qp(what, qp)?;
        // SAFETY: a live id.
        unsafe { self.check_device(what, id) }?;
        let (_, handle) = qp.backend_handle();
        let mut sq_psn = 0;
        for (state, name) in [(sys::IBV_QPS_RTR, "RTR"), (sys::IBV_QPS_RTS, "RTS")] {
            // SAFETY: plain data; all-zero is valid.
            let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
            attr.qp_state = state;
            let mut mask: c_int = 0;
            // SAFETY: a live id and valid out pointers.
            if unsafe { (self.fns.init_qp_attr)(id, &mut attr, &mut mask) } != 0 {
                return Err(call_failed(
                    what,
                    "rdma_init_qp_attr",
                    &format!(" for {name}"),
                    errno(),
                ));
            }
            if let Some((responder_resources, initiator_depth)) = depths {
                if state == sys::IBV_QPS_RTR {
                    attr.max_dest_rd_atomic = responder_resources;
                } else {
                    attr.max_rd_atomic = initiator_depth;
                }
            }
            self.ibverbs().modify_qp_c(handle, &mut attr, mask, || {
                format!("to {name} with rdma_init_qp_attr's attributes (mask {mask:#x})")
            })?;
            sq_psn = attr.sq_psn;
        }
        Ok(sq_psn)
    }

    /// The active side's answer to a REP (`RDMA_CM_EVENT_CONNECT_RESPONSE`): `qp` to RTR
    /// and RTS, then `rdma_establish` sends the RTU. Returns the PSN the QP sends from.
    pub(crate) fn establish(&self, id: ConnId, qp: &PreparedQueuePair) -> Result<u32> {
        let ptr = self.ptr("connect", id)?;
        let psn = self.move_qp("connect", ptr, qp, None)?;
        // SAFETY: a live id that took a CONNECT_RESPONSE.
        if unsafe { (self.fns.establish)(ptr) } != 0 {
            return Err(call_failed("connect", "rdma_establish", "", errno()));
        }
        Ok(psn)
    }

    /// `rdma_accept` of request `id` with `qp` (moved to RTR and RTS first). Returns the
    /// PSN the QP sends from.
    pub(crate) fn accept(
        &self,
        id: ConnId,
        qp: &PreparedQueuePair,
        responder_resources: u8,
        initiator_depth: u8,
        private_data: &[u8],
    ) -> Result<u32> {
        let ptr = self.ptr("accept", id)?;
        let len = u8::try_from(private_data.len()).map_err(|_| Error::Invalid {
            what: "accept private data",
            reason: format!("{} bytes (at most 196)", private_data.len()),
        })?;
        let psn = self.move_qp(
            "accept",
            ptr,
            qp,
            Some((responder_resources, initiator_depth)),
        )?;
        let mut param = rdma_conn_param {
            private_data: if private_data.is_empty() {
                ptr::null()
            } else {
                private_data.as_ptr().cast()
            },
            private_data_len: len,
            responder_resources,
            initiator_depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: qp.endpoint().qpn,
        };
        // SAFETY: a live id with a request, and a valid parameter block.
        if unsafe { (self.fns.accept)(ptr, &mut param) } != 0 {
            return Err(call_failed("accept", "rdma_accept", "", errno()));
        }
        Ok(psn)
    }

    /// `rdma_accept` of UD request `id`: the SIDR_REP names `qpn` (rdma_cm gives it
    /// `RDMA_UDP_QKEY`) and carries `private_data`; then the id is destroyed.
    pub(crate) fn accept_ud(&self, id: ConnId, qpn: u32, private_data: &[u8]) -> Result<()> {
        let ptr = self.ptr("accept", id)?;
        let len = u8::try_from(private_data.len()).map_err(|_| Error::Invalid {
            what: "accept private data",
            reason: format!("{} bytes (at most 136)", private_data.len()),
        })?;
        let mut param = rdma_conn_param {
            private_data: if private_data.is_empty() {
                ptr::null()
            } else {
                private_data.as_ptr().cast()
            },
            private_data_len: len,
            responder_resources: 0,
            initiator_depth: 0,
            flow_control: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            srq: 0,
            qp_num: qpn,
        };
        // SAFETY: a live id with a request, and a valid parameter block.
        let r = if unsafe { (self.fns.accept)(ptr, &mut param) } != 0 {
            Err(call_failed("accept", "rdma_accept", "", errno()))
        } else {
            Ok(())
        };
        self.destroy(id);
        r
    }

    /// The address vector of UD peer `id` resolved (from its ESTABLISHED), as the core's.
    pub(crate) fn take_ud_ah(&self, id: ConnId) -> Option<AhAttr> {
        let ah = lock(&self.state).ud_ah.remove(&id)?;
        Some(softroce_ibverbs_abi::convert::ah_attr_from_c(&ah))
    }

    /// `rdma_reject` of request `id` with `private_data`, then its id is destroyed.
    pub(crate) fn reject(&self, id: ConnId, private_data: &[u8]) -> Result<()> {
        let ptr = self.ptr("reject", id)?;
        let len = u8::try_from(private_data.len()).map_err(|_| Error::Invalid {
            what: "reject private data",
            reason: format!("{} bytes (at most 148)", private_data.len()),
        })?;
        let data = if private_data.is_empty() {
            ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: a live id and `len` readable bytes.
        let r = if unsafe { (self.fns.reject)(ptr, data, len) } != 0 {
            Err(call_failed("reject", "rdma_reject", "", errno()))
        } else {
            Ok(())
        };
        self.destroy(id);
        r
    }

    /// `rdma_disconnect` (DREQ, or DREP to the peer's DREQ).
    pub(crate) fn disconnect(&self, id: ConnId) -> Result<()> {
        let ptr = self.ptr("disconnect", id)?;
        // SAFETY: a live id.
        if unsafe { (self.fns.disconnect)(ptr) } != 0 {
            return Err(call_failed("disconnect", "rdma_disconnect", "", errno()));
        }
        Ok(())
    }

    /// `rdma_destroy_id` of `id` (a no-op for an id already gone).
    pub(crate) fn destroy(&self, id: ConnId) {
        let ptr = lock(&self.state).unregister(id);
        if let Some(ptr) = ptr {
            self.destroy_ptr(ptr as *mut rdma_cm_id);
        }
    }

    /// Take one event from the channel, copy it and acknowledge it; `None` when none is
    /// queued. Takes no lock: an event is never held while anything waits.
    fn take_raw(&self) -> Option<RawEvent> {
        let mut ev = ptr::null_mut();
        // SAFETY: a live channel (non-blocking) and a valid out pointer.
        if unsafe { (self.fns.get_cm_event)(self.channel, &mut ev) } != 0 || ev.is_null() {
            return None;
        }
        // SAFETY: librdmacm's event, valid until acknowledged below.
        let e = unsafe { &*ev };
        // SAFETY: the union's `conn` member is what every event but UD ones carries; it is
        // plain data in either case, and UD's `ud` starts with the same private data
        // pointer and length.
        let conn = unsafe { e.param.conn };
        // SAFETY: plain data (the union is as large as its `ud` member); meaningful on UD
        // ids only.
        let ud = unsafe { e.param.ud };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm's private data of the given length, valid until the ack.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
            .to_vec()
        };
        let (src, dst) = if e.id.is_null() {
            (None, None)
        } else {
            // SAFETY: the event's id is live at least until the ack.
            let addr = unsafe { &(*e.id).route.addr };
            (socket_addr(&addr.src), socket_addr(&addr.dst))
        };
        let raw = RawEvent {
            kind: e.event,
            status: e.status,
            id: e.id as usize,
            listen_id: e.listen_id as usize,
            private_data,
            qp_num: conn.qp_num & 0x00ff_ffff,
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
            retry_count: conn.retry_count,
            rnr_retry_count: conn.rnr_retry_count,
            srq: conn.srq != 0,
            flow_control: conn.flow_control != 0,
            src,
            dst,
            ud_ah_attr: ud.ah_attr,
            ud_qp_num: ud.qp_num & 0x00ff_ffff,
            ud_qkey: ud.qkey,
        };
        // SAFETY: the event from rdma_get_cm_event, acknowledged once.
        let _ = unsafe { (self.fns.ack_cm_event)(ev) };
        Some(raw)
    }

    fn event_name(&self, kind: c_int) -> String {
        // SAFETY: rdma_event_str returns a static string for any value.
        let s = unsafe { (self.fns.event_str)(kind) };
        if s.is_null() {
            return format!("event {kind}");
        }
        // SAFETY: non-null and NUL-terminated.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    /// Record why attempt `id` failed; it concludes as unreachable, with this error.
    fn fail(&self, id: ConnId, e: Error) -> Option<CmEvent> {
        lock(&self.state).failures.insert(id, e);
        Some(CmEvent::Unreachable { id })
    }

    /// The next event in the emulated CM's terms, running the steps of active connects on
    /// the way; `None` when none is queued.
    pub(crate) fn try_event(&self) -> Option<CmEvent> {
        // Bounded: each round takes an event off the channel.
        for _ in 0..64 {
            let raw = self.take_raw()?;
            if let Some(ev) = self.translate(raw) {
                return Some(ev);
            }
        }
        None
    }

    /// Wait at most `left` for the channel to have an event, then take it.
    pub(crate) fn wait_event(&self, left: Duration) -> Option<CmEvent> {
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = c_int::try_from(left.as_millis().max(1)).unwrap_or(c_int::MAX);
        // SAFETY: one valid pollfd.
        let _ = unsafe { libc::poll(&mut pfd, 1, ms) };
        self.try_event()
    }

    fn translate(&self, raw: RawEvent) -> Option<CmEvent> {
        if raw.kind == RDMA_CM_EVENT_CONNECT_REQUEST {
            return self.request(raw);
        }
        let (id, ud) = {
            let s = lock(&self.state);
            let id = *s.by_ptr.get(&raw.id)?;
            (id, s.ids.get(&id).is_some_and(|e| e.ud))
        };
        let ptr = raw.id as *mut rdma_cm_id;
        if ud && let Some(ev) = self.translate_ud(id, &raw) {
            return ev;
        }
        match raw.kind {
            RDMA_CM_EVENT_ADDR_RESOLVED => {
                let step = lock(&self.state)
                    .ids
                    .get(&id)
                    .and_then(|e| e.pending.as_ref().map(|p| p.1));
                let step = step?;
                // SAFETY: a live id with a resolved address.
                if let Err(e) = unsafe { self.check_device("connect", ptr) } {
                    return self.fail(id, e);
                }
                // SAFETY: a live id with a resolved address.
                if unsafe { (self.fns.resolve_route)(ptr, step) } != 0 {
                    let e = call_failed("connect", "rdma_resolve_route", "", errno());
                    return self.fail(id, e);
                }
                None
            }
            RDMA_CM_EVENT_ROUTE_RESOLVED => {
                let pending = lock(&self.state)
                    .ids
                    .get_mut(&id)
                    .and_then(|e| e.pending.take());
                let (p, _) = pending?;
                let mut param = rdma_conn_param {
                    private_data: if p.private_data.is_empty() {
                        ptr::null()
                    } else {
                        p.private_data.as_ptr().cast()
                    },
                    private_data_len: p.private_data.len().min(255) as u8,
                    responder_resources: p.responder_resources,
                    initiator_depth: p.initiator_depth,
                    flow_control: 1,
                    retry_count: p.retry_count,
                    rnr_retry_count: p.rnr_retry_count,
                    srq: 0,
                    qp_num: p.qp_num,
                };
                // SAFETY: a live id with a resolved route; the private data outlives the
                // call (librdmacm copies it).
                if unsafe { (self.fns.connect)(ptr, &mut param) } != 0 {
                    let e = call_failed("connect", "rdma_connect", "", errno());
                    return self.fail(id, e);
                }
                None
            }
            RDMA_CM_EVENT_ADDR_ERROR | RDMA_CM_EVENT_ROUTE_ERROR | RDMA_CM_EVENT_CONNECT_ERROR => {
                let status = raw.status.unsigned_abs() as i32;
                let e = Error::Cm {
                    what: "connect",
                    reason: format!(
                        "librdmacm reported {} (status {}: {})",
                        self.event_name(raw.kind),
                        raw.status,
                        std::io::Error::from_raw_os_error(status)
                    ),
                    errno: if status == 0 {
                        libc::EHOSTUNREACH
                    } else {
                        status
                    },
                };
                self.fail(id, e)
            }
            RDMA_CM_EVENT_CONNECT_RESPONSE => Some(CmEvent::ConnectResponse {
                id,
                params: ReplyParams {
                    ece: Default::default(),
                    remote_ca_guid: 0,
                    remote_qpn: Qpn::from_wire(raw.qp_num),
                    starting_psn: Psn::new(0),
                    responder_resources: raw.responder_resources,
                    initiator_depth: raw.initiator_depth,
                    target_ack_delay: 0,
                    rnr_retry_count: raw.rnr_retry_count,
                    srq: raw.srq,
                    flow_control: raw.flow_control,
                    local_ack_timeout: 0,
                },
                private_data: raw.private_data,
            }),
            RDMA_CM_EVENT_ESTABLISHED => Some(CmEvent::Established { id }),
            RDMA_CM_EVENT_REJECTED => Some(CmEvent::Rejected {
                id,
                reason: u16::try_from(raw.status).unwrap_or(0),
                ari: Vec::new(),
                private_data: raw.private_data,
            }),
            RDMA_CM_EVENT_UNREACHABLE => Some(CmEvent::Unreachable { id }),
            RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                Some(CmEvent::Disconnected {
                    id,
                    timed_out: raw.status == -libc::ETIMEDOUT,
                })
            }
            RDMA_CM_EVENT_TIMEWAIT_EXIT => Some(CmEvent::TimeWaitExit { id }),
            _ => None,
        }
    }

    /// The end of a UD resolution (`None`: not one, translated as for RC): ESTABLISHED
    /// with the peer's QP, or the SIDR_REP's refusal (the kernel reports it as UNREACHABLE
    /// with the SIDR status, softroce's drop-in as REJECTED), or no answer.
    fn translate_ud(&self, id: ConnId, raw: &RawEvent) -> Option<Option<CmEvent>> {
        let refused = |status: c_int| CmEvent::SidrResponse {
            id,
            status: u8::try_from(status).unwrap_or(u8::MAX),
            qpn: Qpn::default(),
            qkey: 0,
            private_data: raw.private_data.clone(),
        };
        Some(Some(match raw.kind {
            RDMA_CM_EVENT_ESTABLISHED => {
                lock(&self.state).ud_ah.insert(id, raw.ud_ah_attr);
                CmEvent::SidrResponse {
                    id,
                    status: 0,
                    qpn: Qpn::from_wire(raw.ud_qp_num),
                    qkey: raw.ud_qkey,
                    private_data: raw.private_data.clone(),
                }
            }
            RDMA_CM_EVENT_REJECTED => refused(raw.status),
            RDMA_CM_EVENT_UNREACHABLE if raw.status > 0 => refused(raw.status),
            RDMA_CM_EVENT_UNREACHABLE => CmEvent::SidrUnreachable { id },
            _ => return None,
        }))
    }

    /// A request on a listener: a new id, and the event `Listener::request` expects (rdma_cm's
    /// header, which the kernel took off, put back from the id's addresses).
    fn request(&self, raw: RawEvent) -> Option<CmEvent> {
        let ptr = raw.id as *mut rdma_cm_id;
        let (service, id) = {
            let mut s = lock(&self.state);
            let service = s.services.get(&raw.listen_id).copied();
            let ud = service.is_some_and(|sid| {
                PortSpace::from_service_id(sid).is_some_and(|(ps, _)| ps == PortSpace::Udp)
            });
            (service, service.map(|_| s.register(raw.id, None, ud)))
        };
        let (Some(service_id), Some(id)) = (service, id) else {
            // Its listener is gone: refused, as the kernel refuses it.
            // SAFETY: the new id of the (acknowledged) request.
            let _ = unsafe { (self.fns.reject)(ptr, ptr::null(), 0) };
            self.destroy_ptr(ptr);
            return None;
        };
        let ud = PortSpace::from_service_id(service_id).is_some_and(|(ps, _)| ps == PortSpace::Udp);
        // On the passive id, `dst` is the requester, `src` us.
        let private_data = match (raw.dst, raw.src) {
            (Some(peer), Some(local)) => {
                let addrs = match (peer.ip(), local.ip()) {
                    (IpAddr::V4(src), IpAddr::V4(dst)) => Some(CmaAddrs::V4 { src, dst }),
                    (IpAddr::V6(src), IpAddr::V6(dst)) => Some(CmaAddrs::V6 { src, dst }),
                    _ => None,
                };
                addrs.and_then(|addrs| {
                    let hdr = CmaHdrRepr {
                        src_port: peer.port(),
                        addrs,
                    };
                    if ud {
                        let user = &raw.private_data[..raw.private_data.len().min(180)];
                        cma_sidr_private_data(&hdr, user).ok()
                    } else {
                        let user = &raw.private_data[..raw.private_data.len().min(56)];
                        cma_private_data(&hdr, user).ok()
                    }
                })
            }
            _ => None,
        };
        let remote_gid = raw.dst.map_or(Gid::ZERO, |a| Gid::from_ip(a.ip()));
        if ud {
            return Some(CmEvent::SidrRequest {
                id,
                service_id,
                remote_gid,
                pkey: 0xffff,
                private_data: private_data.unwrap_or(raw.private_data),
            });
        }
        Some(CmEvent::ConnectRequest {
            id,
            params: RequestParams {
                ece: Default::default(),
                service_id,
                remote_gid,
                remote_ca_guid: 0,
                remote_qpn: Qpn::from_wire(raw.qp_num),
                starting_psn: Psn::new(0),
                responder_resources: raw.responder_resources,
                initiator_depth: raw.initiator_depth,
                retry_count: raw.retry_count,
                rnr_retry_count: raw.rnr_retry_count,
                path_mtu: None,
                transport_service_type: 0,
                srq: raw.srq,
                flow_control: raw.flow_control,
                local_ack_timeout: 0,
                // The hardware's CM keeps the path and programs the QP from it.
                path: PathParams {
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                    sl: 0,
                    packet_life_time: 0,
                },
            },
            private_data: private_data.unwrap_or(raw.private_data),
        })
    }
}

impl Drop for Rdmacm {
    fn drop(&mut self) {
        let ptrs: Vec<usize> = {
            let s = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
            s.ids
                .values()
                .map(|e| e.ptr)
                .chain(s.listeners.values().copied())
                .collect()
        };
        for p in ptrs {
            self.destroy_ptr(p as *mut rdma_cm_id);
        }
        // SAFETY: every id of the channel was destroyed above.
        unsafe { (self.fns.destroy_event_channel)(self.channel) };
    }
}
