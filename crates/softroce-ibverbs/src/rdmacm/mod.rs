//! The RDMA connection manager behind softroce's `librdmacm.so.1` (crate softroce-rdmacm),
//! which reaches it through [`softroce_rdmacm_entry_points`]: one entry point per librdmacm
//! function, same name and C signature, each inside the panic guard.
//!
//! It lives here because its ids hand out this library's contexts, PDs, CQs and QPs, and its
//! connections run on this library's devices.
//!
//! - `channel`: event channels (an eventfd per channel) and events;
//! - `id`: ids, the registry of everything handed out, binding, ports, address and route
//!   resolution, options;
//! - `qp`: the QPs, SRQs and CQs rdma_cm makes for an id, `rdma_init_qp_attr`,
//!   `rdma_create_ep`;
//! - `conn`: listening, connecting, accepting, rejecting, disconnecting on the IB CM of the
//!   devices' QP1, and the QP attributes of a connection;
//! - `addrinfo`: `rdma_getaddrinfo`.
//! - `mcast`: UD multicast joins and leaves, as the kernel's rdma_cm runs them on RoCEv2.

mod addrinfo;
mod channel;
mod conn;
mod id;
mod mcast;
mod qp;

use std::ffi::{c_char, c_int, c_void};

use libc::sockaddr;
use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::*;

use crate::ffi::{guard, guard_ptr, guard_status, set_errno};

symver_directives!();

unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    guard_ptr("rdma_create_event_channel", id::create_channel)
}

unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard("rdma_destroy_event_channel", (), || {
        let _ = id::destroy_channel(channel);
    })
}

unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    guard_status("rdma_create_id", || {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let created = id::create_id(channel, context, ps)?;
        // SAFETY: checked non-NULL; room for one pointer.
        unsafe { *out = created };
        Ok(())
    })
}

unsafe extern "C" fn rdma_destroy_id(p: *mut rdma_cm_id) -> c_int {
    guard_status("rdma_destroy_id", || id::destroy_id(p))
}

unsafe extern "C" fn rdma_bind_addr(p: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard_status("rdma_bind_addr", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's sockaddr.
        let addr = unsafe { id::socket_addr_from_c(addr) }?;
        id::bind(cm_id, addr)
    })
}

unsafe extern "C" fn rdma_resolve_addr(
    p: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard_status("rdma_resolve_addr", || {
        let cm_id = id::id(p)?;
        let src = if src.is_null() {
            None
        } else {
            // SAFETY: the caller's sockaddr.
            Some(unsafe { id::socket_addr_from_c(src) }?)
        };
        // SAFETY: NULL (refused) or the caller's sockaddr.
        let dst = unsafe { id::socket_addr_from_c(dst) }?;
        id::resolve_addr(cm_id, src, dst)
    })
}

unsafe extern "C" fn rdma_resolve_route(p: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    guard_status("rdma_resolve_route", || {
        let cm_id = id::id(p)?;
        // The kernel's rdma_resolve_route (6.x): no time to resolve in is EINVAL.
        if timeout_ms == 0 {
            return Err(libc::EINVAL);
        }
        id::resolve_route(cm_id)
    })
}

unsafe extern "C" fn rdma_create_qp(
    p: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_status("rdma_create_qp", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's attributes.
        let attr = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        qp::create_qp(cm_id, pd, attr)
    })
}

unsafe extern "C" fn rdma_create_qp_ex(
    p: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard_status("rdma_create_qp_ex", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's attributes.
        let attr = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        qp::create_qp_ex(cm_id, attr)
    })
}

unsafe extern "C" fn rdma_destroy_qp(p: *mut rdma_cm_id) {
    guard("rdma_destroy_qp", (), || {
        if let Ok(cm_id) = id::id(p) {
            qp::destroy_qp(cm_id);
        }
    })
}

unsafe extern "C" fn rdma_connect(p: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: NULL or the caller's parameters.
    guard_status("rdma_connect", || unsafe {
        conn::connect(id::id(p)?, param)
    })
}

unsafe extern "C" fn rdma_establish(p: *mut rdma_cm_id) -> c_int {
    guard_status("rdma_establish", || conn::establish(id::id(p)?))
}

unsafe extern "C" fn rdma_listen(p: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard_status("rdma_listen", || conn::listen(id::id(p)?, backlog))
}

unsafe extern "C" fn rdma_get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> c_int {
    guard_status("rdma_get_request", || {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let child = conn::get_request(id::id(listen)?)?;
        // SAFETY: checked non-NULL.
        unsafe { *out = child };
        Ok(())
    })
}

unsafe extern "C" fn rdma_accept(p: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    // SAFETY: NULL or the caller's parameters.
    guard_status("rdma_accept", || unsafe { conn::accept(id::id(p)?, param) })
}

unsafe extern "C" fn rdma_reject(p: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: NULL or `len` bytes of the caller's.
    guard_status("rdma_reject", || unsafe {
        conn::reject(id::id(p)?, data, len, false)
    })
}

unsafe extern "C" fn rdma_reject_ece(p: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    // SAFETY: as rdma_reject; the REJ's reason is "vendor option not supported" (35).
    guard_status("rdma_reject_ece", || unsafe {
        conn::reject(id::id(p)?, data, len, true)
    })
}

unsafe extern "C" fn rdma_notify(p: *mut rdma_cm_id, event: c_int) -> c_int {
    guard_status("rdma_notify", || {
        let cm_id = id::id(p)?;
        // rdma_notify(3): COMM_EST is the event to report; the kernel's ib_cm_notify also
        // takes PATH_MIG (a switch to the alternate path, a no-op without one) and
        // refuses every other event with EINVAL.
        if event == IBV_EVENT_COMM_EST as c_int {
            conn::notify_established(cm_id)
        } else if event == IBV_EVENT_PATH_MIG as c_int {
            conn::notify_path_change(cm_id)
        } else {
            Err(libc::EINVAL)
        }
    })
}

unsafe extern "C" fn rdma_disconnect(p: *mut rdma_cm_id) -> c_int {
    guard_status("rdma_disconnect", || conn::disconnect(id::id(p)?))
}

unsafe extern "C" fn rdma_join_multicast(
    p: *mut rdma_cm_id,
    addr: *mut sockaddr,
    context: *mut c_void,
) -> c_int {
    guard_status("rdma_join_multicast", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's sockaddr.
        let addr = unsafe { mcast::group_addr(addr) }?;
        mcast::join(cm_id, addr, false, context)
    })
}

unsafe extern "C" fn rdma_leave_multicast(p: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    guard_status("rdma_leave_multicast", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's sockaddr.
        let addr = unsafe { mcast::group_addr(addr) }?;
        mcast::leave(cm_id, addr)
    })
}

unsafe extern "C" fn rdma_join_multicast_ex(
    p: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    guard_status("rdma_join_multicast_ex", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's struct.
        unsafe { mcast::join_ex(cm_id, attr, context) }
    })
}

unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard_status("rdma_get_cm_event", || id::get_event(channel, event))
}

unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard_status("rdma_ack_cm_event", || id::ack_event(event))
}

unsafe extern "C" fn rdma_get_src_port(p: *mut rdma_cm_id) -> u16 {
    guard("rdma_get_src_port", 0, || match id::id(p) {
        Ok(cm_id) => id::port_of(&cm_id.c.route.addr.src).to_be(),
        Err(_) => 0,
    })
}

unsafe extern "C" fn rdma_get_dst_port(p: *mut rdma_cm_id) -> u16 {
    guard("rdma_get_dst_port", 0, || match id::id(p) {
        Ok(cm_id) => id::port_of(&cm_id.c.route.addr.dst).to_be(),
        Err(_) => 0,
    })
}

unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    guard_ptr("rdma_get_devices", || {
        let contexts = id::all_contexts();
        // SAFETY: calloc of n + 1 pointers (NULL-terminated), freed by rdma_free_devices.
        let list = unsafe { libc::calloc(contexts.len() + 1, size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        for (slot, &(device, ctx)) in contexts.iter().enumerate() {
            // SAFETY: within the n + 1 slots.
            unsafe { *list.add(slot) = ctx };
            // Each listed device has one more user until rdma_free_devices (librdmacm's
            // refcnt): its default PD outlives the ids meanwhile.
            id::list_device(device);
        }
        if !num_devices.is_null() {
            // SAFETY: the caller's int.
            unsafe { *num_devices = contexts.len() as c_int };
        }
        Ok(list)
    })
}

unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // The contexts stay open (rdma_get_devices(3)); the array goes, and its devices have a
    // user less (without deallocating anything: librdmacm's rdma_free_devices).
    guard("rdma_free_devices", (), || {
        if list.is_null() {
            return;
        }
        // Bounded: the list is NULL-terminated and holds at most one entry per device.
        for i in 0..=id::device_count() {
            // SAFETY: the NULL-terminated array from rdma_get_devices.
            let ctx = unsafe { *list.add(i) };
            if ctx.is_null() {
                break;
            }
            if let Some(index) = id::device_of_context(ctx) {
                id::stop_using_device(index, false);
            }
        }
        // SAFETY: the array from rdma_get_devices.
        unsafe { libc::free(list.cast()) }
    })
}

unsafe extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    guard("rdma_event_str", c"UNKNOWN EVENT".as_ptr(), || {
        match event {
            RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
            RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
            RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
            RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
            RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
            RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
            RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
            RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
            RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
            RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
            RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
            RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
            RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
            RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
            RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
            RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
            RDMA_CM_EVENT_ADDRINFO_RESOLVED => c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
            RDMA_CM_EVENT_ADDRINFO_ERROR => c"RDMA_CM_EVENT_ADDRINFO_ERROR",
            _ => c"UNKNOWN EVENT",
        }
        .as_ptr()
    })
}

unsafe extern "C" fn rdma_set_option(
    p: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: usize,
) -> c_int {
    guard_status("rdma_set_option", || {
        id::set_option(id::id(p)?, level, name, value, len)
    })
}

unsafe extern "C" fn rdma_migrate_id(
    p: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    guard_status("rdma_migrate_id", || id::migrate_id(p, channel))
}

unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard("rdma_getaddrinfo", -1, || {
        if res.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller's strings and hints, NULL or valid.
        match unsafe { addrinfo::getaddrinfo(node, service, hints) } {
            Ok(list) => {
                // SAFETY: checked non-NULL.
                unsafe { *res = list };
                0
            }
            Err((rc, errno)) => {
                set_errno(errno);
                rc
            }
        }
    })
}

unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    // SAFETY: NULL or a list from rdma_getaddrinfo.
    guard("rdma_freeaddrinfo", (), || unsafe {
        addrinfo::freeaddrinfo(res)
    })
}

unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_status("rdma_create_ep", || {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: NULL (refused) or the caller's addrinfo.
        let res = unsafe { res.as_ref() }.ok_or(libc::EINVAL)?;
        // SAFETY: forwarded.
        let created = unsafe { qp::create_ep(res, pd, qp_init_attr) }?;
        // SAFETY: checked non-NULL.
        unsafe { *out = created };
        Ok(())
    })
}

unsafe extern "C" fn rdma_destroy_ep(p: *mut rdma_cm_id) {
    guard("rdma_destroy_ep", (), || {
        if let Ok(cm_id) = id::id(p) {
            qp::destroy_qp(cm_id);
            qp::destroy_srq(cm_id);
            let _ = id::destroy_id(p);
        }
    })
}

unsafe extern "C" fn rdma_create_srq(
    p: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard_status("rdma_create_srq", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's attributes.
        let attr = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        qp::create_srq(cm_id, pd, attr)
    })
}

unsafe extern "C" fn rdma_create_srq_ex(
    p: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    guard_status("rdma_create_srq_ex", || {
        let cm_id = id::id(p)?;
        // SAFETY: NULL (refused) or the caller's attributes.
        let attr = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        qp::create_srq_ex(cm_id, attr)
    })
}

unsafe extern "C" fn rdma_destroy_srq(p: *mut rdma_cm_id) {
    guard("rdma_destroy_srq", (), || {
        if let Ok(cm_id) = id::id(p) {
            qp::destroy_srq(cm_id);
        }
    })
}

unsafe extern "C" fn rdma_init_qp_attr(
    p: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard_status("rdma_init_qp_attr", || {
        let cm_id = id::id(p)?;
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller's struct.
        let caller = unsafe { &mut *attr };
        // The kernel's ucma_init_qp_attr: a state past IBV_QPS_ERR is EINVAL; the attributes
        // are filled into a zeroed struct that librdmacm copies back whole (every field the
        // kernel's struct has: all but rate_limit), so what the mask leaves out reads 0.
        if caller.qp_state > IBV_QPS_ERR {
            return Err(libc::EINVAL);
        }
        // SAFETY: ibv_qp_attr is plain data.
        let mut filled: ibv_qp_attr = unsafe { std::mem::zeroed() };
        filled.qp_state = caller.qp_state;
        filled.rate_limit = caller.rate_limit;
        let m = conn::init_qp_attr(cm_id, &mut filled)?;
        *caller = filled;
        // SAFETY: as above.
        unsafe { *mask = m };
        Ok(())
    })
}

unsafe extern "C" fn rdma_set_local_ece(p: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard_status("rdma_set_local_ece", || {
        let cm_id = id::id(p)?;
        // For ids whose QP the application manages (rdma_set_local_ece(3)); librdmacm
        // refuses an id with a QP, a missing vendor and unknown comp_mask bits.
        // SAFETY: NULL or the caller's struct.
        let Some(ece) = (unsafe { ece.as_ref() }) else {
            return Err(libc::EINVAL);
        };
        if !cm_id.c.qp.is_null() || ece.vendor_id == 0 || ece.comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        cm_id.state().local_ece = softroce_emu::cm::Ece {
            vendor_id: ece.vendor_id,
            options: ece.options,
        };
        Ok(())
    })
}

unsafe extern "C" fn rdma_get_remote_ece(p: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    guard_status("rdma_get_remote_ece", || {
        let cm_id = id::id(p)?;
        if ece.is_null() || !cm_id.c.qp.is_null() {
            return Err(libc::EINVAL);
        }
        let remote = cm_id.state().remote_ece;
        // SAFETY: checked non-NULL.
        unsafe {
            *ece = ibv_ece {
                vendor_id: remote.vendor_id,
                options: remote.options,
                comp_mask: 0,
            }
        };
        Ok(())
    })
}

unsafe extern "C" fn rdma_resolve_addrinfo(
    p: *mut rdma_cm_id,
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> c_int {
    guard_status("rdma_resolve_addrinfo", || {
        let cm_id = id::id(p)?;
        // SAFETY: the caller's strings and hints, NULL or valid.
        unsafe { addrinfo::resolve_addrinfo(cm_id, node, service, hints) }
    })
}

unsafe extern "C" fn rdma_query_addrinfo(
    p: *mut rdma_cm_id,
    info: *mut *mut rdma_addrinfo,
) -> c_int {
    guard_status("rdma_query_addrinfo", || {
        addrinfo::query_addrinfo(id::id(p)?, info)
    })
}

unsafe extern "C" fn rdma_write_cm_event(
    p: *mut rdma_cm_id,
    event: c_int,
    status: c_int,
    arg: u64,
) -> c_int {
    guard_status("rdma_write_cm_event", || {
        let cm_id = id::id(p)?;
        // rdma_write_cm_event(3): "Valid user events are: RDMA_CM_EVENT_USER."
        if event != RDMA_CM_EVENT_USER {
            return Err(libc::EINVAL);
        }
        let mut written = channel::Event::new(p, RDMA_CM_EVENT_USER, status);
        written.c.param.arg = arg;
        cm_id.report(written);
        Ok(())
    })
}

/// Builds the table from the list: each field is this module's function of its name.
macro_rules! entry_point_table {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $fail:expr; )*) => {
        static ENTRY_POINTS: RdmacmEntryPoints = RdmacmEntryPoints {
            size: size_of::<RdmacmEntryPoints>(),
            $( $name, )*
        };
    };
}

softroce_ibverbs_abi::rdmacm_entry_points!(entry_point_table);

/// The private export softroce's librdmacm.so.1 finds the connection manager by.
#[unsafe(no_mangle)]
unsafe extern "C" fn softroce_rdmacm_entry_points() -> *const RdmacmEntryPoints {
    guard("softroce_rdmacm_entry_points", std::ptr::null(), || {
        &raw const ENTRY_POINTS
    })
}

/// `fork()`: the connection manager's process-wide locks, routes before the registry (an
/// incoming request makes its id under the routes' lock), then the XRC domains (see
/// [`crate::fork`]).
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    conn::hold_for_fork(held);
    id::hold_for_fork(held);
    qp::hold_for_fork(held);
}
