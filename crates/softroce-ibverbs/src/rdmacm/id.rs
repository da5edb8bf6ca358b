//! Communication identifiers and what they know before a connection: the channel they report
//! to, the device and address they are bound to, the port they hold, the resolved route.
//!
//! Every id, channel and outstanding event handed to the application is in a registry, so a
//! stale or foreign pointer is refused with EINVAL instead of being dereferenced.

use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use softroce_emu::cm::PathParams;
use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::*;
use softroce_wire::{Gid, ROCE_V2_PORT};

use super::channel::{Channel, Event};
use crate::devices::{self, DeviceEntry};

/// Where an id is in its life before connecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Created, no address.
    Idle,
    /// `rdma_bind_addr` (a specific or wildcard address and a port).
    Bound,
    /// `rdma_resolve_addr` done: a device, source and destination.
    AddrResolved,
    /// `rdma_resolve_route` done.
    RouteResolved,
    /// `rdma_listen`.
    Listening,
    /// `rdma_connect` sent a request.
    Connecting,
    /// Made by a connection request, not yet accepted or rejected.
    RequestReceived,
    /// `rdma_accept` sent the reply.
    Accepting,
    /// Established.
    Connected,
    /// Rejected, unreachable or disconnected.
    Disconnected,
}

/// An id; `c` is first, so the `*mut rdma_cm_id` handed out is the id.
#[repr(C)]
pub(crate) struct CmId {
    pub(crate) c: rdma_cm_id,
    /// The channel events go to (the id's own one in synchronous mode).
    pub(crate) channel: *mut Channel,
    /// Synchronous mode: the channel is private and calls wait for their event.
    pub(crate) synchronous: bool,
    pub(crate) state: Mutex<IdState>,
    /// Events queued for this id, and those acknowledged (or discarded unread).
    pub(crate) reported: AtomicUsize,
    pub(crate) acked: AtomicUsize,
}

/// The mutable part of an id.
#[derive(Debug)]
pub(crate) struct IdState {
    pub(crate) phase: Phase,
    /// The configured device (index into the device list) once bound to one.
    pub(crate) device: Option<usize>,
    /// The device this id counts as a user of (see `Registry::device_users`).
    pub(crate) device_user: Option<usize>,
    /// `rdma_addrinfo.ai_connect` of rdma_create_ep: private data the next rdma_connect
    /// sends ahead of the application's (rdma_getaddrinfo(3)), once.
    pub(crate) connect_prefix: Vec<u8>,
    /// The bound address (unspecified for a wildcard) and port, in the id's port space.
    pub(crate) bound: Option<SocketAddr>,
    pub(crate) tos: u8,
    pub(crate) reuse_address: bool,
    /// RDMA_OPTION_ID_AFONLY as set (`None`: the kernel's default, see [`afonly`]).
    pub(crate) afonly: Option<bool>,
    /// The source address resolving gave an id bound to a wildcard (the kernel's
    /// `cma_src_addr`, which port conflicts compare).
    pub(crate) routed_source: Option<IpAddr>,
    pub(crate) ack_timeout: Option<u8>,
    /// The path record `route.path_rec` points at.
    pub(crate) path: Option<Box<ibv_sa_path_rec>>,
    /// The connection, once requested.
    pub(crate) conn: Option<super::conn::Connection>,
    /// A passive `rdma_create_ep`'s QP attributes, for the QPs of `rdma_get_request`.
    pub(crate) qp_init_attr: Option<ibv_qp_init_attr>,
    /// The multicast groups joined.
    pub(crate) multicast: Vec<super::mcast::Membership>,
    /// A listener's backlog: connection requests reported on its channel and not yet
    /// retrieved beyond which new ones are dropped unanswered (rdma_listen(3)).
    pub(crate) backlog: usize,
    /// ECE options for our REQ or REP (rdma_set_local_ece(3); a QP rdma_cm creates
    /// resets them to the device's, which has none, as librdmacm's `init_ece`).
    pub(crate) local_ece: softroce_emu::cm::Ece,
    /// ECE options the peer's REQ or REP carried (rdma_get_remote_ece(3)).
    pub(crate) remote_ece: softroce_emu::cm::Ece,
    /// `rdma_resolve_addrinfo` started and its result not yet taken.
    pub(crate) resolving_ai: bool,
    /// Its result (a `*mut rdma_addrinfo`, 0 for none) until `rdma_query_addrinfo`.
    pub(crate) resolved_ai: usize,
}

/// Everything handed out, by address; and the ports in use per port space.
#[derive(Default)]
struct Registry {
    channels: HashMap<usize, usize>,
    ids: HashSet<usize>,
    events: HashSet<usize>,
    /// (port space, port) → the ids holding it.
    ports: HashMap<(c_int, u16), Vec<usize>>,
    /// The contexts rdma_cm opened, by device index (rdma_get_devices(3): "devices remain
    /// opened while the librdmacm is loaded").
    contexts: HashMap<usize, usize>,
    /// One default PD per device (rdma_create_qp(3)), while the device has users.
    default_pds: HashMap<usize, usize>,
    /// Users of each device, as librdmacm's `cma_device.refcnt`: the ids attached to it and
    /// the lists from rdma_get_devices not yet freed. The last id to go takes the default
    /// PD with it.
    device_users: HashMap<usize, usize>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// `fork()`: the registry (see [`crate::fork`]).
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    crate::fork::take(&REGISTRY, held);
}

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    f(registry().get_or_insert_with(Registry::default))
}

// ---- channels ---------------------------------------------------------------------------

pub(crate) fn create_channel() -> Result<*mut rdma_event_channel, c_int> {
    let channel = Box::into_raw(Channel::new()?);
    with_registry(|r| r.channels.insert(channel as usize, 0));
    Ok(channel.cast())
}

/// The channel behind a pointer the application passed.
pub(crate) fn channel<'a>(c: *mut rdma_event_channel) -> Result<&'a Channel, c_int> {
    if with_registry(|r| r.channels.contains_key(&(c as usize))) {
        // SAFETY: registered channels are live boxes until destroyed.
        Ok(unsafe { &*c.cast::<Channel>() })
    } else {
        Err(libc::EINVAL)
    }
}

pub(crate) fn destroy_channel(c: *mut rdma_event_channel) -> Result<(), c_int> {
    let users = with_registry(|r| r.channels.get(&(c as usize)).copied()).ok_or(libc::EINVAL)?;
    // rdma_destroy_event_channel(3): ids destroyed and events acked first. Freeing it under
    // a live id would leave that id a dangling pointer: keep it then, and say why.
    // SAFETY: registered, see `channel`.
    let pending = unsafe { &*c.cast::<Channel>() }.has_events();
    if users > 0 {
        crate::ffi::fail(
            "rdma_destroy_event_channel",
            libc::EBUSY,
            format!("{users} rdma_cm_id(s) still use the channel; it stays open"),
        );
        return Err(libc::EBUSY);
    }
    with_registry(|r| r.channels.remove(&(c as usize)));
    // Events nobody will read go with it.
    let _ = pending;
    // SAFETY: registered and removed: ours to free, once.
    drop(unsafe { Box::from_raw(c.cast::<Channel>()) });
    Ok(())
}

// ---- ids --------------------------------------------------------------------------------

/// The QP type rdma_cm gives a port space's ids.
fn qp_type_of(ps: c_int) -> Option<c_int> {
    match ps {
        RDMA_PS_TCP | RDMA_PS_IB => Some(IBV_QPT_RC as c_int),
        RDMA_PS_UDP | RDMA_PS_IPOIB => Some(IBV_QPT_UD as c_int),
        _ => None,
    }
}

pub(crate) fn create_id(
    channel_ptr: *mut rdma_event_channel,
    context: *mut std::ffi::c_void,
    ps: c_int,
) -> Result<*mut rdma_cm_id, c_int> {
    let qp_type = qp_type_of(ps).ok_or(libc::EINVAL)?;
    let (channel_ptr, synchronous) = if channel_ptr.is_null() {
        (create_channel()?, true)
    } else {
        channel(channel_ptr)?;
        (channel_ptr, false)
    };
    // SAFETY: rdma_cm_id is plain data (pointers, integers, unions of sockaddrs).
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel_ptr;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let id = Box::into_raw(Box::new(CmId {
        c,
        channel: channel_ptr.cast(),
        synchronous,
        state: Mutex::new(IdState {
            phase: Phase::Idle,
            device: None,
            device_user: None,
            connect_prefix: Vec::new(),
            bound: None,
            tos: 0,
            reuse_address: false,
            afonly: None,
            routed_source: None,
            ack_timeout: None,
            path: None,
            conn: None,
            qp_init_attr: None,
            multicast: Vec::new(),
            backlog: 0,
            local_ece: Default::default(),
            remote_ece: Default::default(),
            resolving_ai: false,
            resolved_ai: 0,
        }),
        reported: AtomicUsize::new(0),
        acked: AtomicUsize::new(0),
    }));
    with_registry(|r| {
        r.ids.insert(id as usize);
        *r.channels.entry(channel_ptr as usize).or_default() += 1;
    });
    Ok(id.cast())
}

/// The id behind a pointer the application passed.
pub(crate) fn id<'a>(p: *mut rdma_cm_id) -> Result<&'a mut CmId, c_int> {
    if with_registry(|r| r.ids.contains(&(p as usize))) {
        // SAFETY: registered ids are live boxes until destroyed; the application serialises
        // calls on one id as librdmacm requires.
        Ok(unsafe { &mut *p.cast::<CmId>() })
    } else {
        Err(libc::EINVAL)
    }
}

impl CmId {
    pub(crate) fn state(&self) -> MutexGuard<'_, IdState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn channel(&self) -> &Channel {
        // SAFETY: an id's channel outlives it (destroy_channel refuses while ids use it).
        unsafe { &*self.channel }
    }

    /// Drops events taken from this id's channel unread: they count as acknowledged (by
    /// the id each is counted on).
    #[allow(clippy::vec_box)]
    pub(crate) fn discard(&self, events: Vec<Box<Event>>) {
        for event in events {
            with_registry(|r| r.events.remove(&((&raw const event.c) as usize)));
            count_ack(&event.c);
        }
    }

    /// Queues an event for this id (counted on the id it belongs to: see [`counted_on`]).
    pub(crate) fn report(&self, event: Box<Event>) {
        let owner = counted_on(&event.c);
        if std::ptr::eq(owner.cast_const(), std::ptr::from_ref(self).cast()) {
            self.reported.fetch_add(1, Ordering::SeqCst);
        } else if let Ok(owner) = id(owner) {
            owner.reported.fetch_add(1, Ordering::SeqCst);
        }
        let c = (&raw const event.c) as usize;
        with_registry(|r| r.events.insert(c));
        self.channel().push(event);
    }

    /// In synchronous mode, waits for the event the call just caused and keeps it in
    /// `id.event` (acknowledging the previous one), failing as the event did; asynchronous
    /// ids return at once.
    pub(crate) fn complete(&mut self) -> Result<(), c_int> {
        if !self.synchronous {
            return Ok(());
        }
        if !self.c.event.is_null() {
            ack_event(self.c.event)?;
            self.c.event = std::ptr::null_mut();
        }
        let mut event = self.channel().pop()?;
        super::mcast::on_retrieved_by(self, &mut event);
        super::conn::on_retrieved_by(self, &event);
        let status = event.c.status;
        let kind = event.c.event;
        self.c.event = &raw mut Box::leak(event).c;
        match status {
            0 => Ok(()),
            _ if kind == RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
            s if s < 0 => Err(-s),
            s => Err(s),
        }
    }
}

pub(crate) fn destroy_id(p: *mut rdma_cm_id) -> Result<(), c_int> {
    let cm_id = id(p)?;
    // rdma_leave_multicast(3): "Destroying an rdma_cm_id will automatically leave all
    // multicast groups."
    super::mcast::leave_all(cm_id);
    // No event reaches it from here on; its connection says goodbye (the kernel's destroy).
    super::conn::forget_id(cm_id);
    if cm_id.synchronous && !cm_id.c.event.is_null() {
        ack_event(cm_id.c.event)?;
        cm_id.c.event = std::ptr::null_mut();
    }
    // Events not yet read are discarded; those read wait for their acknowledgement
    // (rdma_get_cm_event(3): "destruction of an rdma_cm_id will block until related events
    // have been acknowledged").
    let discarded = cm_id.channel().take_events_of(p);
    // A listener's connection requests nobody retrieved: their new ids go too, and each
    // rejects its request as it goes (the kernel's ucma_cleanup_ctx_events destroys them,
    // cm_destroy_id in REQ_RCVD sends the REJ), so the peer is not left waiting.
    let unretrieved: Vec<*mut rdma_cm_id> = discarded
        .iter()
        .filter(|e| e.c.event == RDMA_CM_EVENT_CONNECT_REQUEST && e.c.listen_id == p)
        .map(|e| e.c.id)
        .collect();
    cm_id.discard(discarded);
    for child in unretrieved {
        let _ = destroy_id(child);
    }
    let reported = &cm_id.reported;
    let acked = &cm_id.acked;
    cm_id
        .channel()
        .wait_until(|| acked.load(Ordering::SeqCst) >= reported.load(Ordering::SeqCst));
    release_port(cm_id);
    let channel_ptr = cm_id.channel;
    let synchronous = cm_id.synchronous;
    with_registry(|r| {
        r.ids.remove(&(p as usize));
        if let Some(users) = r.channels.get_mut(&(channel_ptr as usize)) {
            *users = users.saturating_sub(1);
        }
    });
    if let Some(path) = cm_id.state().path.take() {
        drop(path);
    }
    super::addrinfo::forget_resolved(cm_id);
    if let Some(index) = cm_id.state().device_user.take() {
        stop_using_device(index, true);
    }
    // SAFETY: registered and now removed: ours to free, once.
    drop(unsafe { Box::from_raw(p.cast::<CmId>()) });
    if synchronous {
        destroy_channel(channel_ptr.cast())?;
    }
    Ok(())
}

// ---- events -----------------------------------------------------------------------------

pub(crate) fn get_event(
    channel_ptr: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> Result<(), c_int> {
    let channel = channel(channel_ptr)?;
    if out.is_null() {
        return Err(libc::EINVAL);
    }
    let mut event = channel.pop()?;
    super::mcast::on_retrieved(&mut event);
    if let Ok(cm_id) = id(event.c.id) {
        super::conn::on_retrieved_by(cm_id, &event);
    }
    // SAFETY: checked non-null; the caller passes room for one pointer.
    unsafe { *out = &raw mut Box::leak(event).c };
    Ok(())
}

/// The id an event counts against until it is acknowledged: as librdmacm, a connection
/// request is the listener's (destroying the listener waits for it; destroying the new id
/// does not), every other event its own id's.
fn counted_on(c: &rdma_cm_event) -> *mut rdma_cm_id {
    if c.event == RDMA_CM_EVENT_CONNECT_REQUEST && !c.listen_id.is_null() {
        c.listen_id
    } else {
        c.id
    }
}

/// One event of `c`'s id acknowledged (or discarded): a destroy or migrate waiting for it
/// may go on.
fn count_ack(c: &rdma_cm_event) {
    if let Ok(owner) = id(counted_on(c)) {
        owner.acked.fetch_add(1, Ordering::SeqCst);
        owner.channel().notify_acked();
    }
}

pub(crate) fn ack_event(event: *mut rdma_cm_event) -> Result<(), c_int> {
    if event.is_null() || !with_registry(|r| r.events.remove(&(event as usize))) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a registered event is a leaked Box<Event> (c first); removed above, so freed
    // once.
    let event = unsafe { Box::from_raw(event.cast::<Event>()) };
    count_ack(&event.c);
    Ok(())
}

pub(crate) fn migrate_id(
    p: *mut rdma_cm_id,
    new_channel: *mut rdma_event_channel,
) -> Result<(), c_int> {
    let cm_id = id(p)?;
    // librdmacm: a synchronous id has no channel of the caller's to leave for another
    // synchronous one.
    if cm_id.synchronous && new_channel.is_null() {
        return Err(libc::EINVAL);
    }
    let (target, synchronous) = if new_channel.is_null() {
        (create_channel()?, true)
    } else {
        channel(new_channel)?;
        (new_channel, false)
    };
    // A synchronous id keeps its last event in `id.event`, unacknowledged; librdmacm
    // acknowledges it here, else the wait below never ends (libfabric's verbs provider
    // migrates the ids rdma_create_ep resolved synchronously onto its event queue).
    if cm_id.synchronous && !cm_id.c.event.is_null() {
        ack_event(cm_id.c.event)?;
        cm_id.c.event = std::ptr::null_mut();
    }
    // rdma_migrate_id(3): "will block while there are any unacknowledged events on the
    // current event channel" (of this id), then moves the pending ones.
    let pending = cm_id.channel().take_events_of(p);
    let taken = pending.iter().filter(|e| counted_on(&e.c) == p).count();
    let (reported, acked) = (&cm_id.reported, &cm_id.acked);
    cm_id
        .channel()
        .wait_until(|| acked.load(Ordering::SeqCst) + taken >= reported.load(Ordering::SeqCst));
    let old = cm_id.channel;
    let old_synchronous = cm_id.synchronous;
    // The connection manager's thread queues an event on the channel the id has when it
    // routes it: the switch happens between two routed events, and what was queued on the
    // old channel while this waited moves too (after the rest, in order). Else an event
    // could land on the old channel after the move, never read or acknowledged, or, the
    // old channel freed (rsockets' raccept renumbers so), in freed memory.
    super::conn::between_routed_events(|| {
        let late = cm_id.channel().take_events_of(p);
        cm_id.channel = target.cast();
        cm_id.c.channel = target;
        cm_id.synchronous = synchronous;
        for event in pending.into_iter().chain(late) {
            cm_id.channel().push(event);
        }
    });
    with_registry(|r| {
        if let Some(users) = r.channels.get_mut(&(old as usize)) {
            *users = users.saturating_sub(1);
        }
        *r.channels.entry(target as usize).or_default() += 1;
    });
    if old_synchronous {
        destroy_channel(old.cast())?;
    }
    Ok(())
}

// ---- addresses --------------------------------------------------------------------------

/// A socket address from C: AF_INET or AF_INET6. AF_IB (InfiniBand addressing, a family
/// librdmacm knows) is EAFNOSUPPORT here; any other family EINVAL, as librdmacm's
/// ucma_addrlen has it.
///
/// # Safety
///
/// `addr` is NULL or points at a sockaddr of its family's size.
pub(crate) unsafe fn socket_addr_from_c(addr: *const libc::sockaddr) -> Result<SocketAddr, c_int> {
    if addr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's sockaddr; its family says which view is valid.
    unsafe {
        match c_int::from((*addr).sa_family) {
            libc::AF_INET => {
                let sin = &*addr.cast::<libc::sockaddr_in>();
                Ok(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let sin6 = &*addr.cast::<libc::sockaddr_in6>();
                Ok(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    u16::from_be(sin6.sin6_port),
                ))
            }
            libc::AF_IB => Err(libc::EAFNOSUPPORT),
            _ => Err(libc::EINVAL),
        }
    }
}

/// Writes `a` into one half of an `rdma_addr`.
pub(crate) fn write_sockaddr(dst: &mut rdma_sockaddr, a: SocketAddr) {
    // SAFETY: sockaddr_storage is plain data.
    *dst = rdma_sockaddr {
        storage: unsafe { std::mem::zeroed() },
    };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_in is plain data.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            dst.sin = sin;
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_in6 is plain data.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_scope_id = v6.scope_id();
            dst.sin6 = sin6;
        }
    }
}

/// The port of one half of an `rdma_addr` (host order), 0 when it holds no address.
pub(crate) fn port_of(a: &rdma_sockaddr) -> u16 {
    // SAFETY: the family says which view is valid; all views are plain data.
    unsafe {
        match c_int::from(a.addr.sa_family) {
            libc::AF_INET => u16::from_be(a.sin.sin_port),
            libc::AF_INET6 => u16::from_be(a.sin6.sin6_port),
            _ => 0,
        }
    }
}

/// The configured devices, in order.
fn device_entries() -> Vec<&'static DeviceEntry> {
    devices::entries().unwrap_or_default()
}

/// The device with address `ip`.
fn device_with(ip: IpAddr) -> Option<usize> {
    device_entries().iter().position(|e| e.spec.ip == ip)
}

/// Whether `ip` is a loopback address (any of 127/8, as the kernel's cma_loopback_addr, or
/// ::1) and no device, of this process or another, receives RoCEv2 on it (its UDP port is
/// free): Debian's /etc/hosts gives the host's name 127.0.1.1.
fn is_host_loopback_without_device(ip: IpAddr) -> bool {
    let host = match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
    };
    host && device_with(ip).is_none() && UdpSocket::bind(SocketAddr::new(ip, ROCE_V2_PORT)).is_ok()
}

/// Whether `ip` is an address of this host (a socket can bind to it).
fn is_local_address(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The context rdma_cm keeps open for device `index`.
pub(crate) fn context_of(index: usize) -> Result<*mut ibv_context, c_int> {
    if let Some(ctx) = with_registry(|r| r.contexts.get(&index).copied()) {
        return Ok(ctx as *mut ibv_context);
    }
    let entry = *device_entries().get(index).ok_or(libc::ENODEV)?;
    let device = std::ptr::from_ref(&entry.dev).cast_mut();
    // SAFETY: a device of our list.
    let ctx = unsafe { crate::open::ibv_open_device(device) };
    if ctx.is_null() {
        return Err(crate::ffi::errno());
    }
    // Another thread may have opened it meanwhile: keep the first, close ours.
    let kept = with_registry(|r| *r.contexts.entry(index).or_insert(ctx as usize));
    if kept != ctx as usize {
        // SAFETY: ours, unused.
        unsafe { crate::open::ibv_close_device(ctx) };
    }
    Ok(kept as *mut ibv_context)
}

/// The default PD of device `index` (one per device, rdma_create_qp(3)), for a new user of
/// the device (see `Registry::device_users`); allocated for the first.
fn use_device(index: usize) -> Result<*mut ibv_pd, c_int> {
    let ctx = context_of(index)?;
    with_registry(|r| *r.device_users.entry(index).or_default() += 1);
    if let Some(pd) = with_registry(|r| r.default_pds.get(&index).copied()) {
        return Ok(pd as *mut ibv_pd);
    }
    // SAFETY: a context we opened.
    let pd = unsafe { crate::objects::ibv_alloc_pd(ctx) };
    if pd.is_null() {
        let errno = crate::ffi::errno();
        stop_using_device(index, false);
        return Err(errno);
    }
    let kept = with_registry(|r| *r.default_pds.entry(index).or_insert(pd as usize));
    if kept != pd as usize {
        // SAFETY: ours, unused.
        unsafe { crate::objects::ibv_dealloc_pd(pd) };
    }
    Ok(kept as *mut ibv_pd)
}

/// One user of device `index` is done with it. As librdmacm's ucma_put_device, the last
/// id to go deallocates the default PD (and the XRC domain): memory still registered on it
/// keeps the PD alive (EBUSY) but forgotten, so the next id gets a new PD and the old
/// regions are foreign to its QPs (rdma_dereg_mr(3): "Users must deregister all registered
/// memory before the protection domain can be destroyed"). A device list freed by
/// rdma_free_devices only stops counting (`release` false), as librdmacm's.
pub(crate) fn stop_using_device(index: usize, release: bool) {
    let pd = with_registry(|r| {
        let users = r.device_users.entry(index).or_default();
        *users = users.saturating_sub(1);
        if *users == 0 && release {
            r.default_pds.remove(&index)
        } else {
            None
        }
    });
    if let Some(pd) = pd {
        // SAFETY: the PD we allocated, forgotten above; a PD still in use stays (EBUSY).
        let _ = unsafe { crate::objects::ibv_dealloc_pd(pd as *mut ibv_pd) };
        if let Ok(ctx) = context_of(index) {
            super::qp::close_device_xrcd(ctx);
        }
    }
}

/// Device `index` is listed by rdma_get_devices: a user until rdma_free_devices.
pub(crate) fn list_device(index: usize) {
    with_registry(|r| *r.device_users.entry(index).or_default() += 1);
}

/// The device index of an opened context, if it is one of ours.
pub(crate) fn device_of_context(ctx: *mut ibv_context) -> Option<usize> {
    with_registry(|r| {
        r.contexts
            .iter()
            .find(|&(_, &c)| c == ctx as usize)
            .map(|(&i, _)| i)
    })
}

/// The contexts of every device, opened (rdma_get_devices).
/// The contexts of every device that opens, with their device indexes. A device that
/// cannot open (its address is not this host's) is left out, as librdmacm marks it dead
/// and lists the others.
pub(crate) fn all_contexts() -> Vec<(usize, *mut ibv_context)> {
    (0..device_entries().len())
        .filter_map(|i| context_of(i).ok().map(|ctx| (i, ctx)))
        .collect()
}

/// The ephemeral port range the kernel's rdma_cm picks from (inet_get_local_port_range).
const EPHEMERAL_PORTS: std::ops::RangeInclusive<u16> = 32768..=60999;

/// Takes `port` (0: any free one) at `ip` in the id's port space.
fn take_port(cm_id: &CmId, ip: IpAddr, port: u16) -> Result<u16, c_int> {
    let me = std::ptr::from_ref(cm_id) as usize;
    let ps = cm_id.c.ps;
    let (reuse, afonly) = {
        let st = cm_id.state();
        (st.reuse_address, afonly(&st, ip))
    };
    // The kernel's cma_use_port: a port below 1024 needs CAP_NET_BIND_SERVICE.
    if port != 0 && port < 1024 && !may_bind_privileged_ports() {
        return Err(libc::EACCES);
    }
    with_registry(|r| {
        let port = if port == 0 {
            // Start where a hash of the id points, as the kernel starts at a random port.
            // An ephemeral port is one nobody holds (the kernel's cma_alloc_any_port, less
            // its sharing between ids to different destinations).
            let span = u32::from(EPHEMERAL_PORTS.end() - EPHEMERAL_PORTS.start()) + 1;
            let start = (me as u32 / 64).wrapping_mul(2_654_435_761) % span;
            (0..span)
                .map(|i| EPHEMERAL_PORTS.start() + ((start + i) % span) as u16)
                .find(|&p| r.ports.get(&(ps, p)).is_none_or(|h| h.is_empty()))
                .ok_or(libc::EADDRNOTAVAIL)?
        } else {
            check_port(r, me, (ps, port), ip, afonly, reuse)?;
            port
        };
        r.ports.entry((ps, port)).or_default().push(me);
        Ok(port)
    })
}

/// The kernel's cma_check_port: whether the id `me` may hold `key`'s port at `ip` beside
/// its other holders. A holder sharing with us (both REUSEADDR, `reuse`) or of the other
/// family (both AFONLY) never conflicts; otherwise a wildcard on either side is
/// EADDRNOTAVAIL and the same address EADDRINUSE.
fn check_port(
    r: &Registry,
    me: usize,
    key: (c_int, u16),
    ip: IpAddr,
    afonly: bool,
    reuse: bool,
) -> Result<(), c_int> {
    let Some(holders) = r.ports.get(&key) else {
        return Ok(());
    };
    for &other in holders.iter().filter(|&&h| h != me) {
        // SAFETY: holders are registered ids (removed from here before freeing).
        let other = unsafe { &*(other as *const CmId) };
        let st = other.state();
        if reuse && st.reuse_address {
            continue;
        }
        let Some(other_ip) = st.routed_source.or_else(|| st.bound.map(|b| b.ip())) else {
            continue;
        };
        if afonly && self::afonly(&st, other_ip) && ip.is_ipv4() != other_ip.is_ipv4() {
            continue;
        }
        if is_any_address(ip) || is_any_address(other_ip) {
            return Err(libc::EADDRNOTAVAIL);
        }
        if ip == other_ip {
            return Err(libc::EADDRINUSE);
        }
    }
    Ok(())
}

/// The kernel's listen-time check (rdma_listen of a REUSEADDR id): a listener is alone on
/// its address and port whatever the other holders' REUSEADDR; it then shares no more.
pub(crate) fn claim_port_for_listening(cm_id: &CmId) -> Result<(), c_int> {
    let me = std::ptr::from_ref(cm_id) as usize;
    let (reuse, bound, afonly) = {
        let st = cm_id.state();
        let Some(bound) = st.bound else {
            return Err(libc::EINVAL);
        };
        (st.reuse_address, bound, afonly(&st, bound.ip()))
    };
    if !reuse {
        return Ok(());
    }
    with_registry(|r| check_port(r, me, (cm_id.c.ps, bound.port()), bound.ip(), afonly, false))?;
    cm_id.state().reuse_address = false;
    Ok(())
}

/// The kernel's cma_any_addr: a wildcard, 0.0.0.0/8 or loopback address. softroce's
/// devices live on 127.x addresses, so a loopback address that names a device is a specific
/// address here (the kernel's loopback has no RDMA device of its own).
pub(crate) fn is_any_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) if v4.octets()[0] == 0 => true,
        ip if ip.is_unspecified() => true,
        ip => ip.is_loopback() && device_with(ip).is_none(),
    }
}

/// Whether an id bound at `ip` takes only its own address family: RDMA_OPTION_ID_AFONLY
/// when set, else the kernel's default (IPv4 ids always, IPv6 ids as
/// net.ipv6.bindv6only).
pub(crate) fn afonly(state: &IdState, ip: IpAddr) -> bool {
    // The sysctl is read once: it changes with the host's configuration, not per call.
    static BINDV6ONLY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    state.afonly.unwrap_or_else(|| {
        ip.is_ipv4()
            || *BINDV6ONLY.get_or_init(|| {
                std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only")
                    .is_ok_and(|v| v.trim() == "1")
            })
    })
}

/// Whether this process may bind ports below 1024 (CAP_NET_BIND_SERVICE in its effective
/// set; assumed when /proc does not say).
fn may_bind_privileged_ports() -> bool {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_none_or(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

fn release_port(cm_id: &CmId) {
    let me = std::ptr::from_ref(cm_id) as usize;
    let Some(bound) = cm_id.state().bound else {
        return;
    };
    let key = (cm_id.c.ps, bound.port());
    with_registry(|r| {
        if let Some(holders) = r.ports.get_mut(&key) {
            holders.retain(|&h| h != me);
            if holders.is_empty() {
                r.ports.remove(&key);
            }
        }
    });
}

/// Binds the id to `addr` (its device unless a wildcard) and a port.
pub(crate) fn bind(cm_id: &mut CmId, addr: SocketAddr) -> Result<(), c_int> {
    if cm_id.state().phase != Phase::Idle {
        return Err(libc::EINVAL);
    }
    let device = if addr.ip().is_unspecified() {
        None
    } else {
        match device_with(addr.ip()) {
            // A device configured on an address this host does not have (it cannot open):
            // the kernel finds no netdev for such an address before it looks for a device.
            Some(_) if !is_local_address(addr.ip()) => return Err(libc::EADDRNOTAVAIL),
            Some(d) => Some(d),
            // A loopback address no device has is the kernel's cma_any_addr: no device, a
            // wildcard. Unless every device is on the loopback interface: programs that
            // find devices by scanning interfaces pass `lo` over, and libfabric's verbs
            // provider then finds a device only through its bind of 127.0.0.1, which gets
            // the first (as the kernel's cma_bind_loopback gives one when resolving). With
            // a device on another interface, binding 127.0.0.1 to it made libfabric offer
            // 127.0.0.1 as its address, which a peer on another device could not reach.
            None if addr.ip().is_loopback() => {
                if all_devices_on_loopback_interface() {
                    Some(loopback_device()?)
                } else {
                    None
                }
            }
            // The kernel's answers: not an address of this host, or one without an RDMA
            // device.
            None if is_local_address(addr.ip()) => return Err(libc::ENODEV),
            None => return Err(libc::EADDRNOTAVAIL),
        }
    };
    // The kernel's cma_acquire_dev_by_src_ip: the IPoIB port space only on an InfiniBand
    // netdev, never on RoCE.
    if device.is_some() && cm_id.c.ps == RDMA_PS_IPOIB {
        return Err(libc::EINVAL);
    }
    let port = take_port(cm_id, addr.ip(), addr.port())?;
    let bound = SocketAddr::new(addr.ip(), port);
    if let Some(d) = device {
        attach_device(cm_id, d)?;
    }
    write_sockaddr(&mut cm_id.c.route.addr.src, bound);
    let mut state = cm_id.state();
    state.bound = Some(bound);
    state.device = device;
    state.phase = Phase::Bound;
    Ok(())
}

/// Whether every configured device sits on the loopback interface (see [`bind`]).
fn all_devices_on_loopback_interface() -> bool {
    device_entries()
        .iter()
        .all(|e| softroce_emu::driver::link::on_loopback_interface(e.spec.ip))
}

/// Gives the id device `index`: its context, port and source GID.
fn attach_device(cm_id: &mut CmId, index: usize) -> Result<(), c_int> {
    let ctx = context_of(index)?;
    let entry = device_entries()[index];
    let using = cm_id.state().device_user;
    if using != Some(index) {
        cm_id.c.pd = use_device(index)?;
        cm_id.state().device_user = Some(index);
        if let Some(before) = using {
            stop_using_device(before, true);
        }
    }
    cm_id.c.verbs = ctx;
    cm_id.c.port_num = 1;
    cm_id.c.route.addr.ibaddr.sgid = ibv_gid {
        raw: Gid::from_ip(entry.spec.ip).to_bytes(),
    };
    cm_id.c.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
    Ok(())
}

/// The device the kernel's rdma_cm takes for a loopback address that no device has: the
/// first (all of softroce's ports are active).
fn loopback_device() -> Result<usize, c_int> {
    if device_entries().is_empty() {
        Err(libc::ENODEV)
    } else {
        Ok(0)
    }
}

/// The device a connection to `dst` leaves from: the one with the destination's address
/// (loopback on one device), else the one with the address the host's routing table picks
/// as source, else, for an address of this host (another process's device), the first.
/// `Ok(None)`: the host routes `dst` out of an interface no device is on (the kernel's
/// ADDR_ERROR, -ENODEV); `Err`: the host has no route to it at all.
fn device_towards(dst: IpAddr) -> Result<Option<usize>, c_int> {
    if let Some(d) = device_with(dst) {
        return Ok(Some(d));
    }
    // The kernel's rdma_resolve_addr resolves a wildcard destination as loopback too.
    if dst.is_loopback() || dst.is_unspecified() {
        return loopback_device().map(Some);
    }
    let any = if dst.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let source = routed_source(any, dst)?;
    if let Some(d) = device_with(source) {
        return Ok(Some(d));
    }
    // The host answers its own addresses from themselves: `dst` is on this host, where a
    // device of another process may serve it (as a 127.x address of another process).
    if source == dst {
        return loopback_device().map(Some);
    }
    Ok(None)
}

/// The source address the host's routing table gives a datagram from `from` (a wildcard:
/// any) to `dst`, or the errno of its refusal: no route, or a loopback source towards
/// another host (the kernel's route lookup in rdma_resolve_addr fails the same way).
fn routed_source(from: IpAddr, dst: IpAddr) -> Result<IpAddr, c_int> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EINVAL);
    let socket = UdpSocket::bind(SocketAddr::new(from, 0)).map_err(errno)?;
    socket.connect(SocketAddr::new(dst, 9)).map_err(errno)?;
    socket.local_addr().map(|a| a.ip()).map_err(errno)
}

pub(crate) fn resolve_addr(
    cm_id: &mut CmId,
    src: Option<SocketAddr>,
    dst: SocketAddr,
) -> Result<(), c_int> {
    let phase = cm_id.state().phase;
    if !matches!(phase, Phase::Idle | Phase::Bound) {
        return Err(libc::EINVAL);
    }
    if let Some(src) = src
        && phase == Phase::Idle
    {
        bind(cm_id, src)?;
    }
    // The kernel's resolve_prepare_src: the id's family (bound, or just bound from `src`)
    // must be the destination's, else EINVAL and the id stays bound.
    if cm_id
        .state()
        .bound
        .is_some_and(|b| b.is_ipv4() != dst.is_ipv4())
    {
        return Err(libc::EINVAL);
    }
    let bound_device = cm_id.state().device;
    let device = match bound_device {
        Some(d) => {
            // A device bound to a loopback address reaches only this host (and one on
            // another address only what the host routes from it).
            let own = device_entries()[d].spec.ip;
            if own.is_ipv4() == dst.is_ipv4() {
                routed_source(own, dst.ip())?;
            }
            d
        }
        None => match device_towards(dst.ip())? {
            Some(d) => d,
            None => return address_error(cm_id, dst, -libc::ENODEV),
        },
    };
    // The destination is another of this process's devices: a kernel's device answers the
    // CM from the start (REJ 8 where nobody listens), ours once open. One that cannot open
    // (not this host's address) is as absent as any unreachable peer.
    if let Some(peer) = device_with(dst.ip())
        && peer != device
    {
        let _ = context_of(peer);
    }
    if cm_id.c.ps == RDMA_PS_IPOIB {
        // As binding (above): the kernel's address handler fails to take the device.
        return address_error(cm_id, dst, -libc::EINVAL);
    }
    super::conn::send_held_acks(device);
    let source_ip = device_entries()[device].spec.ip;
    if cm_id.state().phase == Phase::Idle {
        bind(cm_id, SocketAddr::new(source_ip, 0))?;
    } else {
        // Bound to a wildcard: the id now has the device's address (the kernel fills in the
        // routed source the same way), keeping its port.
        attach_device(cm_id, device)?;
        let port = cm_id.state().bound.map_or(0, |b| b.port());
        let source = SocketAddr::new(source_ip, port);
        write_sockaddr(&mut cm_id.c.route.addr.src, source);
        let mut st = cm_id.state();
        st.device = Some(device);
        st.routed_source = Some(source_ip);
    }
    write_sockaddr(&mut cm_id.c.route.addr.dst, dst);
    // A loopback destination is not always this device itself, as in the kernel: softroce's
    // processes often have devices of their own, each on a 127.x address, and a connection
    // to another process's address must reach that process. A destination that is this
    // device's own address reaches the process listening on it, this one or another
    // sharing the device (the device's owner routes it). Only 127.0.0.1 or ::1 where no
    // device lives is the kernel's cma_resolve_loopback: this device (rdma-core's tests
    // listen on lo's address in one forked process and connect to it from another). So is
    // a wildcard destination (0.0.0.0, ::), as the kernel's rdma_resolve_addr has it.
    let dgid_ip = if dst.ip().is_unspecified() || is_host_loopback_without_device(dst.ip()) {
        source_ip
    } else {
        dst.ip()
    };
    cm_id.c.route.addr.ibaddr.dgid = ibv_gid {
        raw: Gid::from_ip(dgid_ip).to_bytes(),
    };
    cm_id.state().phase = Phase::AddrResolved;
    let me = std::ptr::from_mut(cm_id).cast::<rdma_cm_id>();
    cm_id.report(Event::new(me, RDMA_CM_EVENT_ADDR_RESOLVED, 0));
    cm_id.complete()
}

/// RDMA_CM_EVENT_ADDR_ERROR with `status`: -ENODEV when the host routes `dst` out of an
/// interface without a device, -EINVAL for the IPoIB port space. As the kernel, the id is
/// left bound to a wildcard address (an unbound id was bound before resolving), so it may
/// resolve again.
fn address_error(cm_id: &mut CmId, dst: SocketAddr, status: c_int) -> Result<(), c_int> {
    if cm_id.state().phase == Phase::Idle {
        let any = if dst.is_ipv4() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        };
        bind(cm_id, SocketAddr::new(any, 0))?;
    }
    let me = std::ptr::from_mut(cm_id).cast::<rdma_cm_id>();
    cm_id.report(Event::new(me, RDMA_CM_EVENT_ADDR_ERROR, status));
    cm_id.complete()
}

pub(crate) fn resolve_route(cm_id: &mut CmId) -> Result<(), c_int> {
    let (phase, device, tos) = {
        let s = cm_id.state();
        (s.phase, s.device, s.tos)
    };
    // The kernel resolves a route once (ADDR_RESOLVED -> ROUTE_QUERY): again is EINVAL.
    let (Phase::AddrResolved, Some(device)) = (phase, device) else {
        return Err(libc::EINVAL);
    };
    super::conn::send_held_acks(device);
    let path = resolved_path(cm_id, device, tos)?;
    route_resolved(cm_id, path)
}

/// The id's route is `path`: ROUTE_RESOLVED, reported (and awaited by a synchronous id).
fn route_resolved(cm_id: &mut CmId, path: Box<ibv_sa_path_rec>) -> Result<(), c_int> {
    install_path(cm_id, path);
    cm_id.state().phase = Phase::RouteResolved;
    let me = std::ptr::from_mut(cm_id).cast::<rdma_cm_id>();
    cm_id.report(Event::new(me, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    cm_id.complete()
}

/// `path` is the id's route's one path record (`id->route.path_rec`), kept with the id.
fn install_path(cm_id: &mut CmId, mut path: Box<ibv_sa_path_rec>) {
    cm_id.c.route.path_rec = &raw mut *path;
    cm_id.c.route.num_paths = 1;
    cm_id.state().path = Some(path);
}

/// The most `RDMA_OPTION_IB_PATH` takes: the kernel copies the array in whole and refuses
/// more than kmalloc's limit (KMALLOC_MAX_SIZE, 4 MiB on x86-64) with EINVAL.
const MAX_PATH_OPTION_BYTES: usize = 4 << 20;

/// `RDMA_OPTION_IB_PATH`: the route from the caller's path records instead of
/// rdma_resolve_route, as the kernel's ucma_set_ib_path and rdma_set_ib_path do on RoCE:
/// an array of whole `ibv_path_data`, of which the first marked GMP, PRIMARY and
/// BIDIRECTIONAL (exactly those flags) becomes the route of an id whose address is
/// resolved (and whose route is not); the id then reports ROUTE_RESOLVED. Its MTU, SL,
/// traffic class, flow label, hop limit and packet lifetime are what the connection uses;
/// the connection still goes to the resolved address.
pub(crate) fn set_ib_path(
    cm_id: &mut CmId,
    value: *const std::ffi::c_void,
    len: usize,
) -> Result<(), c_int> {
    const RECORD: usize = size_of::<ibv_path_data>();
    const FOR_THE_ROUTE: u32 =
        IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
    if len == 0 || len % RECORD != 0 || len > MAX_PATH_OPTION_BYTES {
        return Err(libc::EINVAL);
    }
    let records = (0..len / RECORD).map(|i| {
        // SAFETY: the caller's array of `len` bytes (ibv_path_data[]); may be unaligned.
        unsafe {
            value
                .cast::<u8>()
                .add(i * RECORD)
                .cast::<ibv_path_data>()
                .read_unaligned()
        }
    });
    let Some(primary) = records.into_iter().find(|d| d.flags == FOR_THE_ROUTE) else {
        return Err(libc::EINVAL);
    };
    let (Phase::AddrResolved, Some(device)) = ({
        let s = cm_id.state();
        (s.phase, s.device)
    }) else {
        return Err(libc::EINVAL);
    };
    let path = unpack_path(&primary.path)?;
    super::conn::send_held_acks(device);
    route_resolved(cm_id, Box::new(path))
}

/// A path record in the SA's packed form, as `ibv_sa_path_rec` (the kernel's
/// ib_sa_unpack_path). An MTU that is no `enum ibv_mtu` is refused here (EINVAL) rather
/// than when the QP is moved to RTR.
fn unpack_path(r: &ibv_path_record) -> Result<ibv_sa_path_rec, c_int> {
    let flow_hop = u32::from_be(r.flowlabel_hoplimit);
    let mtu = r.mtu & 0x3f;
    if !(IBV_MTU_256..=IBV_MTU_4096).contains(&u32::from(mtu)) {
        return Err(libc::EINVAL);
    }
    Ok(ibv_sa_path_rec {
        dgid: r.dgid,
        sgid: r.sgid,
        dlid: r.dlid,
        slid: r.slid,
        raw_traffic: 0,
        flow_label: ((flow_hop >> 8) & 0xf_ffff).to_be(),
        hop_limit: (flow_hop & 0xff) as u8,
        traffic_class: r.tclass,
        reversible: c_int::from(r.reversible_numpath >> 7),
        numb_path: r.reversible_numpath & 0x7f,
        pkey: r.pkey,
        sl: (u16::from_be(r.qosclass_sl) & 0xf) as u8,
        mtu_selector: r.mtu >> 6,
        mtu,
        rate_selector: r.rate >> 6,
        rate: r.rate & 0x3f,
        packet_life_time_selector: r.packetlifetime >> 6,
        packet_life_time: r.packetlifetime & 0x3f,
        preference: r.preference,
    })
}

/// The path record to the destination the id resolved, as the kernel's RoCE route.
fn resolved_path(cm_id: &mut CmId, device: usize, tos: u8) -> Result<Box<ibv_sa_path_rec>, c_int> {
    let active_mtu = port_active_mtu(device)?;
    let flow_label = roce_flow_label(cm_id);
    Ok(Box::new(ibv_sa_path_rec {
        dgid: cm_id.c.route.addr.ibaddr.dgid,
        sgid: cm_id.c.route.addr.ibaddr.sgid,
        dlid: 0,
        slid: 0,
        raw_traffic: 0,
        flow_label: flow_label.to_be(),
        // The kernel's route for RoCE: the IP hop limit, the TOS as traffic class, the
        // netdev's MTU, CMA_IBOE_PACKET_LIFETIME.
        hop_limit: 64,
        traffic_class: tos,
        reversible: 1,
        numb_path: 1,
        pkey: 0xffff_u16.to_be(),
        sl: 0,
        mtu_selector: 2,
        mtu: active_mtu,
        rate_selector: 2,
        rate: IBV_RATE_10_GBPS as u8,
        packet_life_time_selector: 2,
        // The kernel's cma_resolve_iboe_route: CMA_IBOE_PACKET_LIFETIME, or with an
        // ACK timeout set (RDMA_OPTION_ID_ACK_TIMEOUT) one less than it.
        packet_life_time: cm_id
            .state()
            .ack_timeout
            .filter(|&t| t > 0)
            .map_or(16, |t| t - 1),
        preference: 0,
    }))
}

/// The kernel's RoCEv2 route flow label (`cma_get_roce_udp_flow_label`): an IPv6 source's
/// own flow label, else a hash of the source and destination ports.
fn roce_flow_label(cm_id: &CmId) -> u32 {
    const FLOW_LABEL_MASK: u32 = 0xf_ffff;
    // SAFETY: reading our own sockaddr unions.
    let ends = unsafe {
        (
            socket_addr_from_c(&cm_id.c.route.addr.src.addr),
            socket_addr_from_c(&cm_id.c.route.addr.dst.addr),
        )
    };
    match ends {
        (Ok(SocketAddr::V6(src)), _) if src.flowinfo() & FLOW_LABEL_MASK != 0 => {
            src.flowinfo() & FLOW_LABEL_MASK
        }
        (Ok(src), Ok(dst)) => {
            (u32::from(src.port()) * 31 + u32::from(dst.port())) & FLOW_LABEL_MASK
        }
        _ => 0,
    }
}

/// The active MTU (`enum ibv_mtu`) of device `index`'s port; 1024 when unknown.
pub(crate) fn port_mtu(index: usize) -> u32 {
    port_active_mtu(index).map_or(IBV_MTU_1024, u32::from)
}

/// How many devices are configured.
pub(crate) fn device_count() -> usize {
    device_entries().len()
}

/// A new id for a connection request that `listener` takes: its channel, context and port
/// space, on device `index`, from `local` to `peer`, with the route resolved. A connection
/// request's id takes its path from the REQ's primary path (`request_path`), as the
/// kernel's `cm_format_paths_from_req`: the requester's traffic class, flow label and SL,
/// our own route's hop limit, a packet life time one less than the REQ's ACK timeout; the
/// listener's TOS and ACK timeout are not inherited. Returns its address; the caller sets
/// its connection.
pub(crate) fn create_child(
    listener: &CmId,
    index: usize,
    local: SocketAddr,
    peer: SocketAddr,
    request_path: Option<&PathParams>,
) -> Result<usize, c_int> {
    let p = create_id(listener.c.channel, listener.c.context, listener.c.ps)?;
    let child = id(p)?;
    child.c.qp_type = listener.c.qp_type;
    let tos = request_path.map_or(listener.state().tos, |r| r.traffic_class);
    let built = (|| {
        attach_device(child, index)?;
        write_sockaddr(&mut child.c.route.addr.src, local);
        write_sockaddr(&mut child.c.route.addr.dst, peer);
        child.c.route.addr.ibaddr.dgid = ibv_gid {
            raw: Gid::from_ip(peer.ip()).to_bytes(),
        };
        let path = resolved_path(child, index, tos)?;
        install_path(child, path);
        let mut st = child.state();
        if let (Some(r), Some(path)) = (request_path, st.path.as_mut()) {
            path.flow_label = (r.flow_label & 0xf_ffff).to_be();
            path.sl = r.sl;
            path.packet_life_time = r.packet_life_time;
        } else {
            st.tos = tos;
            st.ack_timeout = listener.state().ack_timeout;
        }
        st.device = Some(index);
        Ok(())
    })();
    match built {
        Ok(()) => Ok(p as usize),
        Err(e) => {
            let _ = destroy_id(p);
            Err(e)
        }
    }
}

/// `rdma_get_request`'s new id: synchronous like its listener, holding `event` (the request,
/// acknowledged by its next call or its destruction).
pub(crate) fn make_synchronous(cm_id: &mut CmId, event: *mut rdma_cm_event) -> Result<(), c_int> {
    let private = create_channel()?;
    let old = cm_id.channel;
    with_registry(|r| {
        if let Some(users) = r.channels.get_mut(&(old as usize)) {
            *users = users.saturating_sub(1);
        }
        *r.channels.entry(private as usize).or_default() += 1;
    });
    cm_id.channel = private.cast();
    cm_id.c.channel = private;
    cm_id.synchronous = true;
    cm_id.c.event = event;
    Ok(())
}

/// The active MTU (`enum ibv_mtu`) of device `index`'s port.
fn port_active_mtu(index: usize) -> Result<u8, c_int> {
    let ctx = context_of(index)?;
    // SAFETY: ibv_port_attr is plain data.
    let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: a context we opened and a live attribute struct of the size given.
    unsafe {
        crate::context::write_port_attr(
            "rdma_resolve_route",
            ctx,
            1,
            &raw mut attr,
            size_of::<ibv_port_attr>(),
        )
    }?;
    Ok(attr.active_mtu as u8)
}

pub(crate) fn set_option(
    cm_id: &mut CmId,
    level: c_int,
    name: c_int,
    value: *const std::ffi::c_void,
    len: usize,
) -> Result<(), c_int> {
    if value.is_null() && len > 0 {
        // The kernel copies the value in before looking at it (EFAULT). With no length
        // there is nothing to copy: an unknown option is then ENOSYS, a known one's length
        // check EINVAL (the accessors below).
        return Err(libc::EFAULT);
    }
    let byte = || -> Result<u8, c_int> {
        if len != 1 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's buffer of `len` (1) bytes.
        Ok(unsafe { *value.cast::<u8>() })
    };
    let int = || -> Result<c_int, c_int> {
        if len != size_of::<c_int>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's buffer of `len` bytes; may be unaligned.
        Ok(unsafe { value.cast::<c_int>().read_unaligned() })
    };
    if (level, name) == (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) {
        return set_ib_path(cm_id, value, len);
    }
    let qp_type = cm_id.c.qp_type;
    let mut state = cm_id.state();
    match (level, name) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => state.tos = byte()?,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
            // The kernel's rdma_set_reuseaddr: turned on in any state but listening (it
            // counts from then on: the next binder shares, rdma_listen checks), turned off
            // only before binding.
            let reuse = int()? != 0;
            if !(reuse && state.phase != Phase::Listening || state.phase == Phase::Idle) {
                return Err(libc::EINVAL);
            }
            state.reuse_address = reuse;
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
            // The kernel's rdma_set_afonly: before or after binding, not once resolving.
            let afonly = int()? != 0;
            if !matches!(state.phase, Phase::Idle | Phase::Bound) {
                return Err(libc::EINVAL);
            }
            state.afonly = Some(afonly);
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
            // The kernel's rdma_set_ack_timeout: connected (RC, XRC initiator) ids only.
            if qp_type != IBV_QPT_RC as c_int && qp_type != IBV_QPT_XRC_SEND as c_int {
                return Err(libc::EINVAL);
            }
            let timeout = byte()?;
            state.ack_timeout = Some(timeout);
            // Set on a connection request's id before rdma_accept: its QP goes to RTS with it
            // (the kernel's cma_modify_qp_rts reads the id's timeout then).
            if let Some(c) = state.conn.as_mut() {
                c.timeout = timeout;
            }
        }
        _ => return Err(libc::ENOSYS),
    }
    Ok(())
}
