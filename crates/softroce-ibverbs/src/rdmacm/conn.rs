//! Connections: `rdma_listen`, `rdma_connect`, `rdma_accept`, `rdma_reject`,
//! `rdma_disconnect`, `rdma_establish`, `rdma_notify`, `rdma_get_request`, and the QP
//! attributes of a connection (`rdma_init_qp_attr`), on the IB CM each device runs on its
//! QP1 (`softroce_emu::driver::Device::cm_*`).
//!
//! A thread per device with CM users (the *pump*) takes the device's CM events and turns
//! them into `rdma_cm_event`s on the channels of the ids they belong to, doing what
//! librdmacm and the kernel's rdma_cm do on the way: a request makes a new id on the
//! listener's channel; a reply to an id with a QP moves the QP to RTR and RTS, sends the RTU
//! and reports ESTABLISHED (CONNECT_RESPONSE without a QP).
//!
//! Values follow the kernel's `ib_cm_init_qp_attr` and librdmacm's `rdma_accept` /
//! `ucma_process_conn_resp`: remote access from the responder resources, RTR from the
//! peer's QPN and starting PSN, RTS from ours and the negotiated retry counts.

use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use softroce_emu::cm::{
    AcceptParams, CmEvent, CmQpType, ConnId, ConnectParams, PathParams, SidrParams, SidrReply,
    cma_private_data, cma_sidr_private_data, split_cma_private_data,
};
use softroce_emu::driver::Device;
use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::*;
use softroce_wire::cm::{CmaAddrs, CmaHdrRepr, PortSpace};
use softroce_wire::{Gid, Mtu, Psn, Qpn};

use super::channel::Event;
use super::id::{self, CmId, Phase};

/// What a connection negotiated: the facts its QP's RTR and RTS are made of.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Connection {
    pub(crate) device: usize,
    pub(crate) conn: ConnId,
    /// Created by a request (the listening side).
    pub(crate) passive: bool,
    /// The peer's half of the handshake is here (the passive side's REQ, the active side's
    /// REP): before it there is no QP number or PSN to move a QP to RTR or RTS with.
    pub(crate) answered: bool,
    pub(crate) remote_gid: Gid,
    pub(crate) remote_qpn: u32,
    /// The PSN our QP receives from (RTR `rq_psn`).
    pub(crate) rq_psn: u32,
    /// The PSN our QP sends from (RTS `sq_psn`). As the kernel's CM uses them: the REQ's
    /// starting PSN is the active side's receive PSN and the passive side's send PSN, the
    /// REP's the other way round.
    pub(crate) sq_psn: u32,
    /// `enum ibv_mtu`.
    pub(crate) mtu: u32,
    /// READs/atomics the peer may have outstanding at us (`max_dest_rd_atomic`).
    pub(crate) responder_resources: u8,
    /// READs/atomics we may have outstanding (`max_rd_atomic`).
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    /// Local ACK timeout exponent.
    pub(crate) timeout: u8,
}

/// Which id each connection and each listened service belongs to, and which devices
/// have a pump. Holding the lock keeps every id named here alive: `forget_id` removes an
/// id under it before the id is freed.
#[derive(Default)]
struct Routes {
    conns: HashMap<(usize, u32), usize>,
    listeners: HashMap<(usize, u64), Vec<usize>>,
    pumps: HashSet<usize>,
}

static ROUTES: Mutex<Option<Routes>> = Mutex::new(None);

fn routes() -> MutexGuard<'static, Option<Routes>> {
    ROUTES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` between two routed CM events: the thread that routes them holds the routes'
/// lock while it hands one to its id's channel, so an id's channel can change in `f`
/// without an event landing on the old one.
pub(crate) fn between_routed_events<R>(f: impl FnOnce() -> R) -> R {
    let _routing = routes();
    f()
}

/// `fork()`: the routes (see [`crate::fork`]).
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    crate::fork::take(&ROUTES, held);
}

fn with_routes<R>(f: impl FnOnce(&mut Routes) -> R) -> R {
    f(routes().get_or_insert_with(Routes::default))
}

/// The running device of configured device `index`, for the life of the process (rdma_cm
/// keeps its contexts open).
fn device(index: usize) -> Result<&'static Device, c_int> {
    let ctx = id::context_of(index)?;
    // SAFETY: a context rdma_cm opened and never closes.
    let emu = unsafe { crate::context::ctx_of("rdma_cm", ctx) }?;
    emu.device("rdma_cm")
}

/// The application turns to connection management on device `index` (it resolves an
/// address or a route, or listens): the ACKs the device holds for its QPs' next packets
/// go now, as a device that acknowledges at once would have sent them. Its peer may be
/// waiting on one to complete the send it will act on next.
pub(crate) fn send_held_acks(index: usize) {
    if let Ok(dev) = device(index) {
        dev.send_held_acks();
    }
}

/// Starts the pump of device `index` unless it runs.
fn ensure_pump(index: usize) -> Result<(), c_int> {
    let dev = device(index)?;
    if !with_routes(|r| r.pumps.insert(index)) {
        return Ok(());
    }
    let spawned = std::thread::Builder::new()
        .name(format!("softroce-rdmacm-{index}"))
        .spawn(move || pump(index, dev));
    if spawned.is_err() {
        with_routes(|r| r.pumps.remove(&index));
        return Err(libc::EAGAIN);
    }
    Ok(())
}

/// Takes the device's CM events for as long as the process lives.
fn pump(index: usize, dev: &'static Device) {
    use std::os::fd::AsRawFd;
    let fd = dev.cm_fd().as_raw_fd();
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd; a timeout so a missed wake-up costs at most a second.
        unsafe { libc::poll(&raw mut pfd, 1, 1000) };
        while let Some(event) = dev.cm_get_event(Some(Duration::ZERO)) {
            route(index, dev, event);
        }
    }
}

/// Hands `event` to the id it belongs to (under the routes lock, so the id stays alive).
fn route(index: usize, dev: &Device, event: CmEvent) {
    let mut guard = routes();
    let r = guard.get_or_insert_with(Routes::default);
    if let CmEvent::ConnectRequest {
        id: conn,
        params,
        private_data,
    } = &event
    {
        on_request(r, index, dev, *conn, params, private_data);
        return;
    }
    if let CmEvent::SidrRequest {
        id: conn,
        service_id,
        remote_gid,
        private_data,
        ..
    } = &event
    {
        on_sidr_request(r, index, dev, *conn, *service_id, *remote_gid, private_data);
        return;
    }
    let Some(&p) = r.conns.get(&(index, event.id().0)) else {
        // A connection whose id is gone: the CM already told the peer.
        return;
    };
    // SAFETY: routed ids are alive while the lock is held.
    let cm_id = unsafe { &*(p as *const CmId) };
    let me = p as *mut rdma_cm_id;
    match event {
        CmEvent::ConnectResponse {
            params,
            private_data,
            ..
        } => {
            let mut st = cm_id.state();
            let ack_timeout = st.ack_timeout;
            // librdmacm's ucma_process_conn_resp_ece: a REP naming another vendor than our
            // REQ's breaks the ECE handshake (one without a vendor has no ECE).
            let ece_broken = params.ece.vendor_id != 0
                && params.ece.vendor_id != st.local_ece.vendor_id
                && !cm_id.c.qp.is_null();
            st.remote_ece = params.ece;
            let Some(c) = st.conn.as_mut() else {
                return;
            };
            c.remote_qpn = params.remote_qpn.value();
            c.answered = true;
            // We receive from the PSN our REQ carried and send from the REP's.
            c.rq_psn = c.sq_psn;
            c.sq_psn = params.starting_psn.value();
            // The CM gives the REP in our terms (its responder resources are our initiator
            // depth, as the kernel's cm_format_rep_event): we issue at most what it serves.
            c.initiator_depth = c.initiator_depth.min(params.initiator_depth);
            c.responder_resources = c.responder_resources.min(params.responder_resources);
            c.rnr_retry_count = params.rnr_retry_count;
            if ack_timeout.is_none() {
                c.timeout = params.local_ack_timeout;
            }
            let conn = *c;
            drop(st);
            let mut ev = Event::new(me, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
            // rdma_get_cm_event(3): the event shows what the remote asked for, unclipped.
            // A REP carries no retry count: the kernel's event has 0 there.
            let shown = Connection {
                responder_resources: params.responder_resources,
                initiator_depth: params.initiator_depth,
                retry_count: 0,
                ..conn
            };
            let echo = params_echo(&shown, params.srq, params.flow_control);
            conn_param_event(&mut ev, &echo, &private_data);
            if cm_id.c.qp.is_null() {
                cm_id.report(ev);
                return;
            }
            // ucma_process_conn_resp: RTR, RTS, then the RTU; the user sees ESTABLISHED.
            let moved = if ece_broken {
                Err(libc::EINVAL)
            } else {
                move_qp_to_rts(cm_id, &conn)
            };
            match moved {
                Ok(()) => {
                    let _ = dev.with_cm(|cm, _| cm.send_rtu(conn.conn, &[]));
                    cm_id.state().phase = Phase::Connected;
                    ev.c.event = RDMA_CM_EVENT_ESTABLISHED;
                }
                Err(_) => {
                    let _ = dev.with_cm(|cm, now| cm.reject(now, conn.conn, &[]));
                    ev.c.event = RDMA_CM_EVENT_CONNECT_ERROR;
                    // librdmacm's ucma_process_conn_resp returns -1 (errno set), and that
                    // is the event's status: a synchronous rdma_connect then fails EPERM.
                    ev.c.status = -1;
                }
            }
            cm_id.report(ev);
        }
        CmEvent::Established { .. } => {
            let passive = cm_id.state().conn.is_some_and(|c| c.passive);
            // The active side reported ESTABLISHED when it sent the RTU.
            if passive {
                cm_id.state().phase = Phase::Connected;
                cm_id.report(Event::new(me, RDMA_CM_EVENT_ESTABLISHED, 0));
            }
        }
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => {
            r.conns.remove(&(index, event_conn(cm_id)));
            cm_id.state().phase = Phase::Disconnected;
            let mut ev = Event::new(me, RDMA_CM_EVENT_REJECTED, c_int::from(reason));
            set_private_data(&mut ev, &private_data, false);
            cm_id.report(ev);
        }
        CmEvent::Unreachable { .. } | CmEvent::SidrUnreachable { .. } => {
            r.conns.remove(&(index, event_conn(cm_id)));
            cm_id.state().phase = Phase::Disconnected;
            cm_id.report(Event::new(me, RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT));
        }
        CmEvent::Disconnected { timed_out, .. } => {
            cm_id.state().phase = Phase::Disconnected;
            // The kernel's cma_ib_handler: a DREQ that went unanswered is -ETIMEDOUT.
            let status = if timed_out { -libc::ETIMEDOUT } else { 0 };
            cm_id.report(Event::new(me, RDMA_CM_EVENT_DISCONNECTED, status));
        }
        CmEvent::TimeWaitExit { .. } => {
            r.conns.remove(&(index, event_conn(cm_id)));
            cm_id.report(Event::new(me, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0));
        }
        CmEvent::SidrResponse {
            status,
            qpn,
            qkey,
            private_data,
            ..
        } => {
            r.conns.remove(&(index, event_conn(cm_id)));
            if status != 0 {
                // As the kernel's cma_sidr_rep_handler: a refusing SIDR_REP is UNREACHABLE
                // with the SIDR status (1: nobody listens, 2: rejected), and its private
                // data.
                let mut ev = Event::new(me, RDMA_CM_EVENT_UNREACHABLE, c_int::from(status));
                set_private_data(&mut ev, &private_data, true);
                cm_id.report(ev);
                return;
            }
            let mut ev = Event::new(me, RDMA_CM_EVENT_ESTABLISHED, 0);
            ud_param_event(&mut ev, cm_id, qpn.value(), qkey, &private_data);
            cm_id.report(ev);
        }
        CmEvent::ConnectRequest { .. } | CmEvent::SidrRequest { .. } => {}
    }
}

fn event_conn(cm_id: &CmId) -> u32 {
    cm_id.state().conn.map_or(0, |c| c.conn.0)
}

/// The `param.conn` a reply or request shows the application, from the negotiated values.
fn params_echo(c: &Connection, srq: bool, flow_control: bool) -> rdma_conn_param {
    rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: u8::from(flow_control),
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: u8::from(srq),
        qp_num: c.remote_qpn,
    }
}

fn conn_param_event(ev: &mut Event, param: &rdma_conn_param, private_data: &[u8]) {
    ev.c.param.conn = *param;
    set_private_data(ev, private_data, false);
}

/// Points the event's private data at its own copy (freed with the event).
fn set_private_data(ev: &mut Event, data: &[u8], ud: bool) {
    ev.private_data = data.to_vec();
    let (ptr, len) = if ev.private_data.is_empty() {
        (std::ptr::null(), 0)
    } else {
        (
            ev.private_data.as_ptr().cast(),
            ev.private_data.len().min(255) as u8,
        )
    };
    // Writing a union's Copy fields is safe.
    if ud {
        ev.c.param.ud.private_data = ptr;
        ev.c.param.ud.private_data_len = len;
    } else {
        ev.c.param.conn.private_data = ptr;
        ev.c.param.conn.private_data_len = len;
    }
}

fn ud_param_event(ev: &mut Event, cm_id: &CmId, qpn: u32, qkey: u32, private_data: &[u8]) {
    // SAFETY: ibv_ah_attr is plain data.
    let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah.is_global = 1;
    ah.port_num = cm_id.c.port_num;
    ah.grh.dgid = cm_id.c.route.addr.ibaddr.dgid;
    ah.grh.sgid_index = 0;
    ah.grh.hop_limit = 64;
    // The kernel's address handle comes from the route's path record (its traffic class
    // and flow label), when the id has one.
    {
        let st = cm_id.state();
        ah.grh.traffic_class = st.path.as_ref().map_or(st.tos, |p| p.traffic_class);
        if let Some(p) = st.path.as_ref() {
            ah.grh.flow_label = u32::from_be(p.flow_label);
        }
    }
    ev.c.param.ud = rdma_ud_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        ah_attr: ah,
        qp_num: qpn,
        qkey,
    };
    set_private_data(ev, private_data, true);
}

/// Whether `listener` has as many connection requests reported and not yet retrieved as its
/// backlog allows (the kernel's ucma_connect_event_handler then refuses the request with
/// -ENOMEM; rdma_listen(3): "backlog of incoming connection requests").
fn backlog_full(listener: &CmId) -> bool {
    let me = std::ptr::from_ref(listener).cast_mut().cast::<rdma_cm_id>();
    let waiting = listener
        .channel()
        .count_where(|e| e.c.event == RDMA_CM_EVENT_CONNECT_REQUEST && e.c.listen_id == me);
    waiting >= listener.state().backlog
}

/// A request for a service some id listens on: a new id on the listener's channel.
fn on_request(
    r: &mut Routes,
    index: usize,
    dev: &Device,
    conn: ConnId,
    params: &softroce_emu::cm::RequestParams,
    private_data: &[u8],
) {
    let Some((hdr, user)) = split_cma_private_data(private_data) else {
        // Not from rdma_cm (no addresses): nobody here can take it.
        let _ = dev.with_cm(|cm, now| cm.reject(now, conn, &[]));
        return;
    };
    let Some(listener) = listener_for(r, index, params.service_id, hdr.addrs.dst()) else {
        let _ = dev.with_cm(|cm, now| cm.reject(now, conn, &[]));
        return;
    };
    let peer = SocketAddr::new(hdr.addrs.src(), hdr.src_port);
    let port = PortSpace::from_service_id(params.service_id).map_or(0, |(_, p)| p);
    let local = SocketAddr::new(hdr.addrs.dst(), port);
    // SAFETY: a routed id, alive under the lock.
    let listen_id = unsafe { &*(listener as *const CmId) };
    // The kernel's cma_ib_check_req_qp_type: a listener takes requests for its own QP type
    // (the REQ's transport: 0 RC, 1 UC, 3 extended, XRC); the others are rejected.
    let requested = match params.transport_service_type {
        0 => Some(IBV_QPT_RC),
        1 => Some(IBV_QPT_UC),
        3 => Some(IBV_QPT_XRC_RECV),
        _ => None,
    };
    if requested.is_none_or(|t| t as c_int != listen_id.c.qp_type) {
        let _ = dev.with_cm(|cm, now| cm.reject(now, conn, &[]));
        return;
    }
    // Past the backlog the IB CM drops the REQ unanswered, and the requester's retried REQ
    // comes back later.
    if backlog_full(listen_id) {
        let _ = dev.with_cm(|cm, _| cm.drop_request(conn));
        return;
    }
    let Ok(child) = id::create_child(listen_id, index, local, peer, Some(&params.path)) else {
        let _ = dev.with_cm(|cm, now| cm.reject(now, conn, &[]));
        return;
    };
    // SAFETY: just created and registered.
    let child_id = unsafe { &*(child as *const CmId) };
    let max = device_limits(index);
    let c = Connection {
        device: index,
        conn,
        passive: true,
        answered: true,
        remote_gid: params.remote_gid,
        remote_qpn: params.remote_qpn.value(),
        // We send from the REQ's PSN and receive from the one our REP carries.
        sq_psn: params.starting_psn.value(),
        rq_psn: random_psn(),
        mtu: mtu_code(params.path_mtu.unwrap_or(Mtu::Mtu1024)).min(id::port_mtu(index)),
        // The CM gives the REQ in our terms (the requester's initiator depth is our
        // responder resources, as the kernel's cm_format_req_event), clipped to the device.
        responder_resources: params.responder_resources.min(max.0),
        initiator_depth: params.initiator_depth.min(max.1),
        retry_count: params.retry_count,
        rnr_retry_count: params.rnr_retry_count,
        // The kernel's cm_init_av_by_path: the path's packet life time plus one, the
        // REQ's Local ACK Timeout (an ACK timeout set on the new id before rdma_accept
        // overrides it).
        timeout: params.local_ack_timeout.max(1),
    };
    {
        let mut st = child_id.state();
        st.conn = Some(c);
        st.phase = Phase::RequestReceived;
        st.remote_ece = params.ece;
    }
    r.conns.insert((index, conn.0), child);
    let mut ev = Event::new(child as *mut rdma_cm_id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    ev.c.listen_id = listener as *mut rdma_cm_id;
    // rdma_get_cm_event(3): "matches the initiator depth specified by the remote node".
    let shown = Connection {
        responder_resources: params.responder_resources,
        initiator_depth: params.initiator_depth,
        ..c
    };
    let echo = params_echo(&shown, params.srq, params.flow_control);
    conn_param_event(&mut ev, &echo, user);
    child_id.report(ev);
}

/// A SIDR request (UD port space): a new id on the listener's channel, answered by
/// `rdma_accept` (or `rdma_reject`).
#[allow(clippy::too_many_arguments)]
fn on_sidr_request(
    r: &mut Routes,
    index: usize,
    dev: &Device,
    conn: ConnId,
    service_id: u64,
    remote_gid: Gid,
    private_data: &[u8],
) {
    let refuse = || {
        let reply = SidrReply {
            status: softroce_emu::cm::SIDR_REJECT,
            qpn: Qpn::default(),
            qkey: 0,
            private_data: Vec::new(),
        };
        let _ = dev.with_cm(|cm, _| cm.sidr_reply(conn, reply));
    };
    let Some((hdr, user)) = split_cma_private_data(private_data) else {
        return refuse();
    };
    let Some(listener) = listener_for(r, index, service_id, hdr.addrs.dst()) else {
        return refuse();
    };
    let port = PortSpace::from_service_id(service_id).map_or(0, |(_, p)| p);
    // SAFETY: a routed id, alive under the lock.
    let listen_id = unsafe { &*(listener as *const CmId) };
    // Past the backlog the kernel's CM refuses a SIDR_REQ (cm_destroy_id of a
    // SIDR_REQ_RCVD ID rejects it).
    if backlog_full(listen_id) {
        return refuse();
    }
    let Ok(child) = id::create_child(
        listen_id,
        index,
        SocketAddr::new(hdr.addrs.dst(), port),
        SocketAddr::new(hdr.addrs.src(), hdr.src_port),
        None,
    ) else {
        return refuse();
    };
    // SAFETY: just created and registered.
    let child_id = unsafe { &*(child as *const CmId) };
    {
        let mut st = child_id.state();
        st.conn = Some(Connection {
            passive: true,
            ..sidr_connection(index, conn, remote_gid)
        });
        st.phase = Phase::RequestReceived;
    }
    r.conns.insert((index, conn.0), child);
    let mut ev = Event::new(child as *mut rdma_cm_id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    ev.c.listen_id = listener as *mut rdma_cm_id;
    ud_param_event(&mut ev, child_id, 0, 0, user);
    child_id.report(ev);
}

/// The id listening on `service` of device `index` for `dst`: bound to it, or to a wildcard
/// that takes `dst`'s family (the kernel's cma_match_private_data: a wildcard taking only
/// its own family, AFONLY, does not hear the other). A wildcard is what the kernel's
/// cma_any_addr says: 0.0.0.0, `::` and a loopback address no device has (a listener on
/// 127.0.0.1 hears every device's address, as `rping -s -a 127.0.0.1` does on a real stack).
fn listener_for(r: &Routes, index: usize, service: u64, dst: IpAddr) -> Option<usize> {
    let ids = r.listeners.get(&(index, service))?;
    let bound = |&&p: &&usize| {
        // SAFETY: routed ids are alive while the lock is held.
        let cm_id = unsafe { &*(p as *const CmId) };
        let st = cm_id.state();
        st.bound.map(|b| (b.ip(), id::afonly(&st, b.ip())))
    };
    ids.iter()
        .find(|p| bound(p).is_some_and(|(ip, _)| ip == dst))
        .or_else(|| {
            ids.iter().find(|p| {
                bound(p).is_some_and(|(ip, afonly)| {
                    id::is_any_address(ip) && (!afonly || ip.is_ipv4() == dst.is_ipv4())
                })
            })
        })
        .copied()
}

/// (max responder resources, max initiator depth) of device `index`.
fn device_limits(index: usize) -> (u8, u8) {
    let Ok(ctx) = id::context_of(index) else {
        return (0, 0);
    };
    // SAFETY: a context rdma_cm opened.
    let Ok(emu) = (unsafe { crate::context::ctx_of("rdma_cm", ctx) }) else {
        return (0, 0);
    };
    emu.query(|h| {
        let attr = h.query_device();
        (
            attr.max_qp_rd_atom.min(255) as u8,
            attr.max_qp_init_rd_atom.min(255) as u8,
        )
    })
}

fn random_psn() -> u32 {
    (softroce_emu::driver::entropy::random_u64() as u32) & 0x00ff_ffff
}

fn mtu_code(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => IBV_MTU_256,
        Mtu::Mtu512 => IBV_MTU_512,
        Mtu::Mtu1024 => IBV_MTU_1024,
        Mtu::Mtu2048 => IBV_MTU_2048,
        Mtu::Mtu4096 => IBV_MTU_4096,
    }
}

fn mtu_of_code(code: u32) -> Mtu {
    match code {
        IBV_MTU_256 => Mtu::Mtu256,
        IBV_MTU_512 => Mtu::Mtu512,
        IBV_MTU_2048 => Mtu::Mtu2048,
        IBV_MTU_4096 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}

// ---- QP attributes ----------------------------------------------------------------------

/// The attributes of `attr.qp_state` for a connected id's QP, as the kernel's
/// `ib_cm_init_qp_attr`; the mask is returned.
pub(crate) fn connected_qp_attr(
    cm_id: &CmId,
    c: &Connection,
    attr: &mut ibv_qp_attr,
) -> Result<c_int, c_int> {
    match attr.qp_state {
        IBV_QPS_INIT => {
            attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
            if c.responder_resources > 0 {
                attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
            }
            attr.pkey_index = 0;
            attr.port_num = cm_id.c.port_num;
            Ok((IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) as c_int)
        }
        IBV_QPS_RTR => {
            // SAFETY: ibv_ah_attr is plain data.
            let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
            ah.is_global = 1;
            ah.port_num = cm_id.c.port_num;
            ah.grh.dgid = ibv_gid {
                raw: c.remote_gid.to_bytes(),
            };
            ah.grh.sgid_index = 0;
            ah.grh.hop_limit = 64;
            // The route's traffic class, flow label and SL (the TOS when the route was
            // resolved, as the kernel's AV from the path record; a TOS set later changes
            // neither; the passive side's path is the REQ's).
            {
                let st = cm_id.state();
                ah.grh.traffic_class = st.path.as_ref().map_or(st.tos, |p| p.traffic_class);
                if let Some(p) = st.path.as_ref() {
                    ah.grh.flow_label = u32::from_be(p.flow_label);
                    ah.grh.hop_limit = p.hop_limit;
                    ah.sl = p.sl;
                }
            }
            attr.ah_attr = ah;
            attr.path_mtu = c.mtu;
            attr.dest_qp_num = c.remote_qpn;
            attr.rq_psn = c.rq_psn;
            attr.max_dest_rd_atomic = c.responder_resources;
            attr.min_rnr_timer = 0;
            let mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
            // The kernel's cm_init_qp_rtr_attr: responder attributes for RC and XRC targets
            // only (not for UC or XRC initiators).
            let qp_type = cm_id.c.qp_type;
            if qp_type == IBV_QPT_RC as c_int || qp_type == IBV_QPT_XRC_RECV as c_int {
                Ok((mask | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) as c_int)
            } else {
                Ok(mask as c_int)
            }
        }
        IBV_QPS_RTS => {
            attr.sq_psn = c.sq_psn;
            // The kernel's cm_init_qp_rts_attr: a UC QP has no ACKs to time or retry, and an
            // XRC target sends no requests of its own.
            if cm_id.c.qp_type == IBV_QPT_UC as c_int {
                return Ok((IBV_QP_STATE | IBV_QP_SQ_PSN) as c_int);
            }
            attr.timeout = c.timeout;
            if cm_id.c.qp_type == IBV_QPT_XRC_RECV as c_int {
                return Ok((IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT) as c_int);
            }
            attr.retry_cnt = c.retry_count.min(7);
            attr.rnr_retry = c.rnr_retry_count.min(7);
            attr.max_rd_atomic = c.initiator_depth;
            Ok((IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC) as c_int)
        }
        _ => Err(libc::EINVAL),
    }
}

/// INIT (the connection's access) → RTR → RTS, as librdmacm's `ucma_modify_qp_rtr/rts`.
fn move_qp_to_rts(cm_id: &CmId, c: &Connection) -> Result<(), c_int> {
    for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
        // SAFETY: ibv_qp_attr is plain data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        let mask = connected_qp_attr(cm_id, c, &mut attr)?;
        // SAFETY: the id's QP and a live attribute struct.
        match unsafe { crate::objects::ibv_modify_qp(cm_id.c.qp, &mut attr, mask) } {
            0 => {}
            e => return Err(e),
        }
    }
    Ok(())
}

/// Moves the id's QP to ERR (rdma_disconnect, a failed accept).
/// librdmacm's rdma_get_cm_event: a REJECTED taken by the application moves the id's QP
/// to ERR (its posted receives are flushed).
pub(crate) fn on_retrieved_by(cm_id: &CmId, event: &Event) {
    if event.c.event == RDMA_CM_EVENT_REJECTED {
        qp_to_error(cm_id);
    }
}

fn qp_to_error(cm_id: &CmId) {
    if cm_id.c.qp.is_null() {
        return;
    }
    // SAFETY: ibv_qp_attr is plain data.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_ERR;
    // SAFETY: the id's QP.
    unsafe { crate::objects::ibv_modify_qp(cm_id.c.qp, &mut attr, IBV_QP_STATE as c_int) };
}

// ---- the verbs --------------------------------------------------------------------------

/// The `RDMA_PS_*` port space of an id as the CM's.
fn port_space(ps: c_int) -> PortSpace {
    match ps {
        RDMA_PS_UDP => PortSpace::Udp,
        RDMA_PS_IB => PortSpace::Ib,
        RDMA_PS_IPOIB => PortSpace::IpoIb,
        _ => PortSpace::Tcp,
    }
}

/// The kernel's `net.rdma_ucm.max_backlog` default: the backlog of a listen that asks for
/// none (0 or less) or for more.
const MAX_BACKLOG: usize = 1024;

pub(crate) fn listen(cm_id: &mut CmId, backlog: c_int) -> Result<(), c_int> {
    let phase = cm_id.state().phase;
    let backlog = usize::try_from(backlog)
        .ok()
        .filter(|&b| b > 0 && b < MAX_BACKLOG)
        .unwrap_or(MAX_BACKLOG);
    if phase == Phase::Listening {
        // The kernel's ucma_listen takes the new backlog, then rdma_listen refuses an id
        // that already listens.
        cm_id.state().backlog = backlog;
        return Err(libc::EINVAL);
    }
    match phase {
        // rdma_listen on an unbound id binds it to the wildcard first (the kernel does).
        Phase::Idle => {
            let any = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);
            id::bind(cm_id, any)?;
        }
        Phase::Bound => {}
        _ => return Err(libc::EINVAL),
    }
    id::claim_port_for_listening(cm_id)?;
    cm_id.state().backlog = backlog;
    let (bound, bound_device) = {
        let st = cm_id.state();
        (st.bound.ok_or(libc::EINVAL)?, st.device)
    };
    let service = port_space(cm_id.c.ps).service_id(bound.port());
    // A wildcard listens on every device (the kernel's cma_listen_on_all), a loopback
    // address no device has too (bind gave it the first device's context, for the
    // programs that probe with 127.0.0.1, but it is a wildcard all the same).
    let devices: Vec<usize> = match bound_device {
        Some(d) if !id::is_any_address(bound.ip()) => vec![d],
        _ => (0..id::device_count()).collect(),
    };
    let wildcard = devices.len() > 1;
    let me = std::ptr::from_ref(cm_id) as usize;
    let listened = (|| {
        let (mut unusable, mut listening) = (None, 0);
        for &d in &devices {
            let dev = match device(d) {
                Ok(dev) => dev,
                // A device that cannot open (its address is not the host's) receives
                // nothing: a wildcard listens on the others (the open already said why on
                // stderr).
                Err(e) if wildcard => {
                    unusable.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            dev.send_held_acks();
            ensure_pump(d)?;
            with_routes(|r| {
                let ids = r.listeners.entry((d, service)).or_default();
                if ids.is_empty() {
                    // The CM listens once per service; ids share it by address.
                    dev.cm_listen(service).map_err(|_| libc::EADDRINUSE)?;
                }
                ids.push(me);
                Ok::<(), c_int>(())
            })?;
            listening += 1;
        }
        match unusable {
            // No device could listen.
            Some(e) if listening == 0 => Err(e),
            _ => Ok(()),
        }
    })();
    if let Err(e) = listened {
        // A listen that fails part-way listens nowhere: the devices before stop hearing it.
        stop_listening(cm_id);
        return Err(e);
    }
    cm_id.state().phase = Phase::Listening;
    Ok(())
}

/// Takes the id off every device it listens on (the CM stops listening on a service no id
/// is left on).
fn stop_listening(cm_id: &CmId) {
    let me = std::ptr::from_ref(cm_id) as usize;
    with_routes(|r| {
        let mut emptied = Vec::new();
        for (&(d, service), ids) in r.listeners.iter_mut() {
            let before = ids.len();
            ids.retain(|&p| p != me);
            if ids.is_empty() && before > 0 {
                emptied.push((d, service));
            }
        }
        for (d, service) in emptied {
            r.listeners.remove(&(d, service));
            if let Ok(dev) = device(d) {
                let _ = dev.with_cm(|cm, _| cm.stop_listening(service));
            }
        }
    });
}

/// Stops listening and forgets every route of the id; after this no event reaches it.
pub(crate) fn forget_id(cm_id: &CmId) {
    let me = std::ptr::from_ref(cm_id) as usize;
    let conn = cm_id.state().conn;
    stop_listening(cm_id);
    with_routes(|r| {
        if let Some(c) = conn {
            if r.conns.get(&(c.device, c.conn.0)) == Some(&me) {
                r.conns.remove(&(c.device, c.conn.0));
                // The kernel's rdma_destroy_id: the CM tells the peer (REJ, DREQ or DREP).
                if let Ok(dev) = device(c.device) {
                    let _ = dev.with_cm(|cm, _| cm.destroy(c.conn));
                }
            }
        }
    });
}

/// Checks `param`'s depths against the device (librdmacm's `ucma_valid_param`) and returns
/// them with RDMA_MAX_* replaced by the device's limits.
fn depths(
    index: usize,
    param: Option<&rdma_conn_param>,
    default: (u8, u8),
) -> Result<(u8, u8), c_int> {
    let max = device_limits(index);
    let Some(p) = param else {
        return Ok((default.0.min(max.0), default.1.min(max.1)));
    };
    let pick = |asked: u8, limit: u8, all: c_int, default: u8| {
        if c_int::from(asked) == all {
            Ok(default.min(limit))
        } else if asked > limit {
            Err(libc::EINVAL)
        } else {
            Ok(asked)
        }
    };
    Ok((
        pick(p.responder_resources, max.0, RDMA_MAX_RESP_RES, default.0)?,
        pick(p.initiator_depth, max.1, RDMA_MAX_INIT_DEPTH, default.1)?,
    ))
}

/// The application's private data of a connect/accept/reject, at most `room` bytes.
///
/// # Safety
///
/// `data` is NULL or holds `len` bytes.
unsafe fn user_data(data: *const std::ffi::c_void, len: u8) -> Vec<u8> {
    if data.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's buffer of `len` bytes.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }.to_vec()
}

/// The cma_hdr of a connection from the id's addresses.
fn cma_hdr(cm_id: &CmId) -> Result<CmaHdrRepr, c_int> {
    // SAFETY: reading our own sockaddr unions, written by id::write_sockaddr.
    let src = unsafe { id::socket_addr_from_c(&cm_id.c.route.addr.src.addr) }?;
    // SAFETY: as above.
    let dst = unsafe { id::socket_addr_from_c(&cm_id.c.route.addr.dst.addr) }?;
    let addrs = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => CmaAddrs::V4 { src: s, dst: d },
        (IpAddr::V6(s), IpAddr::V6(d)) => CmaAddrs::V6 { src: s, dst: d },
        _ => return Err(libc::EAFNOSUPPORT),
    };
    Ok(CmaHdrRepr {
        src_port: src.port(),
        addrs,
    })
}

/// # Safety
///
/// `param` is NULL or valid, its private data as it says.
pub(crate) unsafe fn connect(cm_id: &mut CmId, param: *const rdma_conn_param) -> Result<(), c_int> {
    let (phase, index) = {
        let st = cm_id.state();
        (st.phase, st.device)
    };
    let index = index.ok_or(libc::EINVAL)?;
    if phase != Phase::RouteResolved {
        return Err(libc::EINVAL);
    }
    // SAFETY: NULL or the caller's parameters.
    let param = unsafe { param.as_ref() };
    // rdma_create_ep's ai_connect goes first (librdmacm's ucma_copy_conn_param_to_kern).
    let mut user = cm_id.state().connect_prefix.clone();
    // SAFETY: as the function's contract.
    user.extend(param.map_or_else(Vec::new, |p| unsafe {
        user_data(p.private_data, p.private_data_len)
    }));
    let hdr = cma_hdr(cm_id)?;
    // SAFETY: reading our own sockaddr union.
    let dst = unsafe { id::socket_addr_from_c(&cm_id.c.route.addr.dst.addr) }?;
    let service = port_space(cm_id.c.ps).service_id(dst.port());
    // Where the CM datagrams go: the destination GID rdma_resolve_addr resolved.
    // SAFETY: every view of ibv_gid is 16 plain bytes, written by rdma_resolve_addr.
    let remote_gid = Gid::from_bytes(unsafe { cm_id.c.route.addr.ibaddr.dgid.raw });
    let remote_ip = remote_gid.to_ip();
    let peer = SocketAddr::new(
        remote_ip,
        crate::devices::udp_port_for(remote_ip).unwrap_or(softroce_wire::ROCE_V2_PORT),
    );
    let dev = device(index)?;
    ensure_pump(index)?;
    let me = std::ptr::from_mut(cm_id) as usize;
    if cm_id.c.qp_type == IBV_QPT_UD as c_int {
        // UD: SIDR resolves the remote QP (rdma_connect(3) on a UDP id).
        let private_data = cma_sidr_private_data(&hdr, &user).map_err(|_| libc::EINVAL)?;
        with_routes(|r| {
            let conn = dev
                .with_cm(|cm, now| {
                    cm.sidr_resolve(
                        now,
                        SidrParams {
                            remote_gid,
                            service_id: service,
                            private_data,
                        },
                    )
                })
                .map_err(|_| libc::EINVAL)?;
            r.conns.insert((index, conn.0), me);
            let mut st = cm_id.state();
            st.conn = Some(sidr_connection(index, conn, remote_gid));
            st.connect_prefix.clear();
            // Under the routes' lock, which the answer's handler takes first: it cannot
            // run (and move the id on) before the id is Connecting.
            st.phase = Phase::Connecting;
            Ok::<(), c_int>(())
        })?;
        return cm_id.complete();
    }
    let private_data = cma_private_data(&hdr, &user).map_err(|_| libc::EINVAL)?;
    let (qp_num, srq) = if cm_id.c.qp.is_null() {
        let p = param.ok_or(libc::EINVAL)?;
        (p.qp_num, p.srq != 0)
    } else {
        // SAFETY: the id's QP.
        let qp = unsafe { &*cm_id.c.qp };
        (qp.qp_num, !qp.srq.is_null())
    };
    // rdma_connect: no parameters, or RDMA_MAX_*, asks for all the device offers.
    let (responder_resources, initiator_depth) = depths(index, param, device_limits(index))?;
    let retry_count = param.map_or(7, |p| p.retry_count.min(7));
    let rnr_retry_count = param.map_or(7, |p| p.rnr_retry_count.min(7));
    let mtu = cm_id
        .state()
        .path
        .as_ref()
        .map_or(IBV_MTU_1024, |p| u32::from(p.mtu));
    let local_psn = random_psn();
    let ack_timeout = cm_id.state().ack_timeout;
    // The kernel's cm_format_req: the REQ carries the route's path record.
    let path = cm_id.state().path.as_ref().map(|p| PathParams {
        traffic_class: p.traffic_class,
        flow_label: u32::from_be(p.flow_label),
        hop_limit: p.hop_limit,
        sl: p.sl,
        packet_life_time: p.packet_life_time,
    });
    let params = ConnectParams {
        path,
        ece: cm_id.state().local_ece,
        qp_type: match cm_id.c.qp_type {
            t if t == IBV_QPT_XRC_SEND as c_int => CmQpType::Xrc,
            t if t == IBV_QPT_UC as c_int => CmQpType::Uc,
            _ => CmQpType::Rc,
        },
        remote_gid,
        service_id: service,
        local_qpn: Qpn::new(qp_num & 0x00ff_ffff).ok_or(libc::EINVAL)?,
        starting_psn: Psn::new(local_psn),
        responder_resources,
        initiator_depth,
        retry_count,
        rnr_retry_count,
        path_mtu: mtu_of_code(mtu),
        srq,
        // librdmacm's ucma_copy_conn_param_to_kern: no parameters, no flow control; the
        // CM message's field is one bit (the kernel keeps bit 0).
        flow_control: param.is_some_and(|p| p.flow_control & 1 != 0),
        private_data,
    };
    with_routes(|r| {
        let conn = dev.cm_connect(peer, params).map_err(|_| libc::EINVAL)?;
        r.conns.insert((index, conn.0), me);
        cm_id.state().conn = Some(Connection {
            device: index,
            conn,
            passive: false,
            answered: false,
            remote_gid,
            remote_qpn: 0,
            // Until the REP: the PSN of our REQ (see `Connection::sq_psn`).
            rq_psn: 0,
            sq_psn: local_psn,
            mtu,
            responder_resources,
            initiator_depth,
            retry_count,
            rnr_retry_count,
            timeout: ack_timeout.unwrap_or(14),
        });
        // Under the routes' lock, which the REP's handler takes first: a REP handled at
        // once on the engine's thread finds the id Connecting, and its Connected stays.
        let mut st = cm_id.state();
        st.phase = Phase::Connecting;
        st.connect_prefix.clear();
        Ok::<(), c_int>(())
    })?;
    cm_id.complete()
}

/// A SIDR exchange with `remote_gid`: nothing to negotiate but the ids.
fn sidr_connection(device: usize, conn: ConnId, remote_gid: Gid) -> Connection {
    Connection {
        device,
        conn,
        passive: false,
        answered: true,
        remote_gid,
        remote_qpn: 0,
        rq_psn: 0,
        sq_psn: 0,
        mtu: 0,
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        timeout: 0,
    }
}

/// # Safety
///
/// `param` is NULL or valid, its private data as it says.
pub(crate) unsafe fn accept(cm_id: &mut CmId, param: *const rdma_conn_param) -> Result<(), c_int> {
    let (phase, conn) = {
        let st = cm_id.state();
        (st.phase, st.conn)
    };
    let (Phase::RequestReceived, Some(mut c)) = (phase, conn) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: NULL or the caller's parameters.
    let param = unsafe { param.as_ref() };
    // SAFETY: as the function's contract.
    let user = param.map_or_else(Vec::new, |p| unsafe {
        user_data(p.private_data, p.private_data_len)
    });
    let dev = device(c.device)?;
    if cm_id.c.qp_type == IBV_QPT_UD as c_int {
        let (qpn, qkey) = if cm_id.c.qp.is_null() {
            (param.ok_or(libc::EINVAL)?.qp_num, RDMA_UDP_QKEY)
        } else {
            // SAFETY: the id's QP.
            (unsafe { (*cm_id.c.qp).qp_num }, RDMA_UDP_QKEY)
        };
        let reply = SidrReply {
            status: softroce_emu::cm::SIDR_SUCCESS,
            qpn: Qpn::new(qpn & 0x00ff_ffff).ok_or(libc::EINVAL)?,
            qkey,
            private_data: user,
        };
        if dev.with_cm(|cm, _| cm.sidr_reply(c.conn, reply)).is_err() {
            // As the kernel's rdma_accept: a reply that cannot go (more private data than
            // a SIDR_REP holds) rejects the request (SIDR_REP status REJECT).
            let refusal = SidrReply {
                status: softroce_emu::cm::SIDR_REJECT,
                qpn: Qpn::default(),
                qkey: 0,
                private_data: Vec::new(),
            };
            let _ = dev.with_cm(|cm, _| cm.sidr_reply(c.conn, refusal));
            with_routes(|r| r.conns.remove(&(c.device, c.conn.0)));
            cm_id.state().phase = Phase::Disconnected;
            return Err(libc::EINVAL);
        }
        with_routes(|r| r.conns.remove(&(c.device, c.conn.0)));
        cm_id.state().phase = Phase::Connected;
        return Ok(());
    }
    let (responder_resources, initiator_depth) =
        depths(c.device, param, (c.responder_resources, c.initiator_depth))?;
    c.responder_resources = responder_resources;
    c.initiator_depth = initiator_depth;
    let (qp_num, srq) = if cm_id.c.qp.is_null() {
        let p = param.ok_or(libc::EINVAL)?;
        (p.qp_num, p.srq != 0)
    } else {
        // SAFETY: the id's QP.
        let qp = unsafe { &*cm_id.c.qp };
        (qp.qp_num, !qp.srq.is_null())
    };
    cm_id.state().conn = Some(c);
    if !cm_id.c.qp.is_null()
        && let Err(e) = move_qp_to_rts(cm_id, &c)
    {
        qp_to_error(cm_id);
        return Err(e);
    }
    // librdmacm's REP answers with the vendor the REQ named and our own options.
    let ece = {
        let st = cm_id.state();
        softroce_emu::cm::Ece {
            vendor_id: st.remote_ece.vendor_id,
            options: st.local_ece.options,
        }
    };
    let accept = AcceptParams {
        ece,
        xrc: cm_id.c.qp_type == IBV_QPT_XRC_RECV as c_int,
        local_qpn: Qpn::new(qp_num & 0x00ff_ffff).ok_or(libc::EINVAL)?,
        starting_psn: Psn::new(c.rq_psn),
        responder_resources,
        initiator_depth,
        rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count.min(7)),
        srq,
        // librdmacm's ucma_copy_conn_param_to_kern: no parameters, no flow control; the
        // CM message's field is one bit (the kernel keeps bit 0).
        flow_control: param.is_some_and(|p| p.flow_control & 1 != 0),
        private_data: user,
    };
    // Accepting before the REP leaves: its RTU may be handled on the engine's thread
    // (Connected, ESTABLISHED) before this one goes on.
    let before = std::mem::replace(&mut cm_id.state().phase, Phase::Accepting);
    if dev.cm_accept(c.conn, accept).is_err() {
        // As the kernel's rdma_accept: a failed accept (e.g. more private data than a REP
        // holds) moves the QP to the error state and rejects the request.
        cm_id.state().phase = before;
        qp_to_error(cm_id);
        let _ = dev.with_cm(|cm, now| cm.reject(now, c.conn, &[]));
        return Err(libc::EINVAL);
    }
    cm_id.complete()
}

/// # Safety
///
/// `data` is NULL or holds `len` bytes.
pub(crate) unsafe fn reject(
    cm_id: &mut CmId,
    data: *const std::ffi::c_void,
    len: u8,
    refused_ece: bool,
) -> Result<(), c_int> {
    let (phase, conn) = {
        let st = cm_id.state();
        (st.phase, st.conn)
    };
    // The kernel's ib_send_cm_rej takes a request in flight either way: the active side's
    // before its RTU (REQ_SENT, REP_RCVD), the passive side's before and after its REP
    // (REQ_RCVD, REP_SENT); the CM refuses the rest. A SIDR reply only answers a request.
    let is_ud = cm_id.c.qp_type == IBV_QPT_UD as c_int;
    let c = match (phase, conn) {
        (Phase::RequestReceived, Some(c)) => c,
        (Phase::Connecting | Phase::Accepting, Some(c)) if !is_ud => c,
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: as the function's contract.
    let user = unsafe { user_data(data, len) };
    let dev = device(c.device)?;
    let result = if is_ud {
        let reply = SidrReply {
            status: softroce_emu::cm::SIDR_REJECT,
            qpn: Qpn::default(),
            qkey: 0,
            private_data: user,
        };
        dev.with_cm(|cm, _| cm.sidr_reply(c.conn, reply))
    } else if refused_ece {
        dev.with_cm(|cm, now| cm.reject_ece(now, c.conn, &user))
    } else {
        dev.with_cm(|cm, now| cm.reject(now, c.conn, &user))
    };
    result.map_err(|_| libc::EINVAL)?;
    with_routes(|r| r.conns.remove(&(c.device, c.conn.0)));
    cm_id.state().phase = Phase::Disconnected;
    Ok(())
}

pub(crate) fn disconnect(cm_id: &mut CmId) -> Result<(), c_int> {
    let conn = cm_id.state().conn.ok_or(libc::EINVAL)?;
    // librdmacm's ucma_shutdown: the QP goes to ERR first, flushing its work requests.
    qp_to_error(cm_id);
    let dev = device(conn.device)?;
    // As the kernel's rdma_disconnect: a DREQ, or the DREP of the peer's, when the
    // connection takes one; nothing to send (a second disconnect, a UD id) is no error.
    if dev
        .with_cm(|cm, now| cm.disconnect(now, conn.conn, &[]))
        .is_ok()
    {
        cm_id.state().phase = Phase::Disconnected;
    }
    // librdmacm's rdma_disconnect ends in ucma_complete: a synchronous id waits for its next
    // event (DISCONNECTED once the peer answers; status -ETIMEDOUT if it never does).
    cm_id.complete()
}

/// `rdma_establish`: the active side of an id without a QP completes the connection after
/// CONNECT_RESPONSE by sending the RTU itself (rdma_establish(3): not for an id with a QP).
pub(crate) fn establish(cm_id: &mut CmId) -> Result<(), c_int> {
    let conn = cm_id.state().conn.ok_or(libc::EINVAL)?;
    if conn.passive || !cm_id.c.qp.is_null() {
        return Err(libc::EINVAL);
    }
    let dev = device(conn.device)?;
    dev.with_cm(|cm, _| cm.send_rtu(conn.conn, &[]))
        .map_err(|_| libc::EINVAL)?;
    cm_id.state().phase = Phase::Connected;
    Ok(())
}

/// `rdma_notify(IBV_EVENT_COMM_EST)`: data reached the passive side's QP before the RTU, so
/// the connection is established now (the kernel's `ib_cm_notify`). rdma_notify(3): EISCONN
/// when the CM had established it already.
pub(crate) fn notify_established(cm_id: &mut CmId) -> Result<(), c_int> {
    let (phase, conn) = {
        let st = cm_id.state();
        (st.phase, st.conn.ok_or(libc::EINVAL)?)
    };
    if !conn.passive {
        // The active side is established by the REP it received (or rdma_establish).
        return Err(if phase == Phase::Connected {
            libc::EISCONN
        } else {
            libc::EINVAL
        });
    }
    let dev = device(conn.device)?;
    match dev.with_cm(|cm, _| cm.establish(conn.conn)) {
        Ok(()) => Ok(()),
        Err(softroce_emu::cm::CmError::AlreadyEstablished(_)) => Err(libc::EISCONN),
        Err(_) => Err(libc::EINVAL),
    }
}

/// `rdma_notify(id, IBV_EVENT_PATH_MIG)`: the kernel's `cm_migrate` moves an established
/// connection to its alternate path; a RoCE connection has none, so it stays on its one
/// path. Only an established connection takes it (EINVAL otherwise, as the kernel).
pub(crate) fn notify_path_change(cm_id: &mut CmId) -> Result<(), c_int> {
    let st = cm_id.state();
    match (st.phase, st.conn) {
        (Phase::Connected, Some(_)) => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

/// `rdma_init_qp_attr`: the attributes of `attr.qp_state` for the id's QP.
pub(crate) fn init_qp_attr(cm_id: &CmId, attr: &mut ibv_qp_attr) -> Result<c_int, c_int> {
    let (conn, phase) = {
        let st = cm_id.state();
        (st.conn, st.phase)
    };
    match conn {
        // The kernel's cm_init_qp_*_attr: a connection that ended has no attributes left.
        Some(_) if cm_id.c.qp_type != IBV_QPT_UD as c_int && phase == Phase::Disconnected => {
            Err(libc::EINVAL)
        }
        // cm_init_qp_rtr_attr/rts_attr refuse REQ_SENT: the REP brings what RTR and RTS set.
        Some(c)
            if cm_id.c.qp_type != IBV_QPT_UD as c_int
                && !c.answered
                && matches!(attr.qp_state, IBV_QPS_RTR | IBV_QPS_RTS) =>
        {
            Err(libc::EINVAL)
        }
        Some(c) if cm_id.c.qp_type != IBV_QPT_UD as c_int => connected_qp_attr(cm_id, &c, attr),
        _ => super::qp::unconnected_qp_attr(cm_id, attr),
    }
}

/// `rdma_get_request`: the next request of a synchronous listener.
pub(crate) fn get_request(listener: &mut CmId) -> Result<*mut rdma_cm_id, c_int> {
    if !listener.synchronous || listener.state().phase != Phase::Listening {
        return Err(libc::EINVAL);
    }
    listener.complete()?;
    // SAFETY: complete() left the event in listener.event.
    let event = unsafe { &*listener.c.event };
    if event.event != RDMA_CM_EVENT_CONNECT_REQUEST {
        return Err(libc::EINVAL);
    }
    let child = event.id;
    let child_id = id::id(child)?;
    // The request event moves to the new id, which becomes synchronous too.
    listener.c.event = std::ptr::null_mut();
    id::make_synchronous(
        child_id,
        event as *const rdma_cm_event as *mut rdma_cm_event,
    )?;
    let saved = listener.state().qp_init_attr;
    if let Some(mut attr) = saved {
        // rdma_create_ep(3): the request's id gets a QP from the saved attributes.
        super::qp::create_qp(child_id, listener.c.pd, &mut attr)?;
    }
    Ok(child)
}
