//! Connection management in the style of rdma_cm: listen on an IP address and port, accept
//! or reject requests, connect with a timeout, disconnect. The device's IB CM carries the
//! exchange over QP1 (REQ, REP, RTU, REJ, DREQ, DREP) exactly as the kernel's rdma_cm does,
//! so a peer may be rdma_cm on rxe; this module brings the QPs through INIT → RTR → RTS
//! with what the CM negotiated, as `rdma_accept` / `rdma_connect` do.
//!
//! On the libibverbs backend (cargo feature `ibverbs`) the same API runs on the system's
//! librdmacm, loaded at run time like libibverbs: `SOFTROCE_LIBRDMACM` names the file, else
//! the `librdmacm.so.1` (or `librdmacm.so`) next to the libibverbs file the backend loaded,
//! else `librdmacm.so.1`. One `rdma_event_channel` per device, its events taken by whichever
//! call waits and dispatched as on the emulator (each acknowledged at once); connects run
//! `rdma_resolve_addr` → `rdma_resolve_route` → `rdma_connect` and conclude with
//! `rdma_establish`. The QP is the application's (built on the context, not with
//! `rdma_create_qp`): its number goes in `rdma_conn_param.qp_num` and it is moved to RTR and
//! RTS with `rdma_init_qp_attr`; the address must be on the context's device. Errors name
//! the librdmacm call and its errno; without librdmacm, `connection_manager()` fails with
//! `EOPNOTSUPP` saying which file it could not load. On that backend
//! [`ConnectionRequest::params`] holds only what rdma_cm's event carries (QPN, responder
//! resources, initiator depth, retry counts, SRQ, flow control),
//! [`ConnectOptions::device_port`] does not apply (librdmacm reaches the peer's device on
//! 4791), and [`ConnectionManager::counters`] is zero (librdmacm keeps no MAD counters).
//!
//! UD address resolution is rdma_cm's `RDMA_PS_UDP`: [`ConnectionManager::listen_ud`]
//! listens on an address and UDP-space port; each SIDR_REQ becomes a [`UdRequest`] (the
//! requester's address and private data) that the application answers with a UD QP of its
//! own ([`UdRequest::accept`]: a SIDR_REP naming its QPN and Q_Key, [`RDMA_UDP_QKEY`] as
//! rdma_cm gives it, with private data) or refuses ([`UdRequest::reject`], SIDR status 2),
//! as udaddy's server answers each request with its QP. [`ConnectionManager::resolve_ud`]
//! sends the SIDR_REQ (retried as the kernel's CM does) and returns a [`UdPeer`]: the
//! listener's QPN, Q_Key and a [`UdTarget`](crate::UdTarget) made on the resolving QP's PD,
//! ready for `SendWr::ud`; [`CmFailure::UdRejected`] (status 1: nobody listens; 2:
//! rejected), [`CmFailure::TimedOut`] or [`CmFailure::Unreachable`] otherwise. A resolution
//! makes no connection: nothing is left to disconnect. As with the kernel's CM, a request
//! answered once is forgotten, so a retried SIDR_REQ (its SIDR_REP lost) reaches the
//! application again. On the libibverbs backend it is an id of `RDMA_PS_UDP`:
//! `rdma_connect` → `RDMA_CM_EVENT_ESTABLISHED` with `param.ud` (the address handle is made
//! from its `ah_attr` on the QP's PD), and `rdma_accept` / `rdma_reject` of its
//! `CONNECT_REQUEST` (librdmacm always names `RDMA_UDP_QKEY`, so the QP must have it).
//!
//! ```no_run
//! # use softroce_verbs::*;
//! # use softroce_verbs::cm::*;
//! # use std::time::Duration;
//! # fn f(server: Context, client: Context) -> Result<()> {
//! let listener = server.connection_manager()?.listen("127.0.0.1:7471".parse().unwrap())?;
//! // client side (its own thread or process):
//! let (pd, cq) = (client.alloc_pd()?, client.create_cq(16, None)?);
//! let qp = pd.create_qp(&cq, &cq, QpType::Rc).build()?;
//! let conn = client.connection_manager()?.connect(
//!     qp, "127.0.0.1:7471".parse().unwrap(), &ConnectOptions::default())?;
//! # let _ = (listener, conn); Ok(()) }
//! ```
//!
//! UD (each side on its own thread or process):
//!
//! ```no_run
//! # use softroce_verbs::*;
//! # use softroce_verbs::cm::*;
//! # use std::time::Duration;
//! # fn f(server: Context, client: Context) -> Result<()> {
//! # let ud_qp = |ctx: &Context| -> Result<QueuePair> {
//! #     let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
//! #     let qp = pd.create_qp(&cq, &cq, QpType::Ud).qkey(RDMA_UDP_QKEY).build()?;
//! #     let e = qp.endpoint();
//! #     qp.handshake(e)
//! # };
//! let listener = server.connection_manager()?.listen_ud("127.0.0.1:7174".parse().unwrap())?;
//! let (server_qp, client_qp) = (ud_qp(&server)?, ud_qp(&client)?);
//! // server side:
//! listener.get_request(Duration::from_secs(30))?.accept(&server_qp, b"welcome")?;
//! // client side:
//! let peer = client.connection_manager()?.resolve_ud(
//!     &client_qp, "127.0.0.1:7174".parse().unwrap(), &ConnectOptions::default())?;
//! let mut wr = SendWr::new(1, WrOpcode::Send);
//! wr.ud = Some(peer.target());
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use softroce_emu::cm::CmEndpoint;
use softroce_emu::cm::{
    AcceptParams, CmCounters, CmEvent, ConnId, ConnectParams, REJ_CONSUMER_DEFINED,
    REJ_INVALID_SERVICE_ID, REJ_STALE_CONN, REJ_TIMEOUT, RequestParams, SIDR_REJECT,
    SIDR_UNSUPPORTED, SidrParams, SidrReply, cma_private_data, split_cma_private_data,
};
use softroce_emu::driver::Device;
use softroce_wire::cm::CmaAddrs;
use softroce_wire::{CmaHdrRepr, Gid, PortSpace, Psn, Qpn};

use crate::backend::Simulated;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::qp::{CmTransition, PreparedQueuePair, QueuePair, QueuePairEndpoint};

/// How long a waiting call sleeps on the device's CM fd before looking at what other
/// threads took from it (events are shared by every user of the device).
const SLICE: Duration = Duration::from_millis(5);

/// Requests a listener holds untaken at most (rdma_listen's backlog).
const MAX_BACKLOG: usize = 1024;

#[cfg(feature = "tokio")]
mod asynchronous;
#[cfg(feature = "ibverbs")]
mod hardware;
mod ud;

pub use ud::{RDMA_UDP_QKEY, Resolving, UdListener, UdPeer, UdRequest};

/// Why a connection attempt or a wait failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmFailure {
    /// The peer sent a REJ (`RDMA_CM_EVENT_REJECTED`): `reason` is `enum ib_cm_rej_reason`
    /// (8: nobody listens on the port; 28: the application rejected).
    Rejected {
        /// The reject reason.
        reason: u16,
        /// The REJ's private data (148 bytes on the wire, zero padded).
        private_data: Vec<u8>,
    },
    /// Every retry went unanswered (`RDMA_CM_EVENT_UNREACHABLE`).
    Unreachable,
    /// Nothing conclusive arrived within the caller's timeout.
    TimedOut(Duration),
    /// The connection was torn down before it was established.
    Disconnected,
    /// UD address resolution was refused: the SIDR_REP's `status` is
    /// `enum ib_cm_sidr_status` (1: nobody listens on the port; 2: the application
    /// rejected). rdma_cm reports it as `RDMA_CM_EVENT_UNREACHABLE` (or `REJECTED`) with
    /// that status.
    UdRejected {
        /// The SIDR_REP's status.
        status: u8,
        /// The SIDR_REP's private data (136 bytes on the wire, zero padded).
        private_data: Vec<u8>,
    },
}

impl CmFailure {
    /// The errno a socket would report: ECONNREFUSED for a REJ, EHOSTUNREACH, ETIMEDOUT,
    /// ECONNRESET.
    pub fn errno(&self) -> i32 {
        match self {
            Self::Rejected { .. } | Self::UdRejected { .. } => libc::ECONNREFUSED,
            Self::Unreachable => libc::EHOSTUNREACH,
            Self::TimedOut(_) => libc::ETIMEDOUT,
            Self::Disconnected => libc::ECONNRESET,
        }
    }
}

impl std::fmt::Display for CmFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected { reason, .. } => {
                let why = match *reason {
                    REJ_INVALID_SERVICE_ID => "nobody listens on that port (invalid service ID)",
                    REJ_CONSUMER_DEFINED => "the peer application rejected the request",
                    REJ_STALE_CONN => "the peer holds a stale connection for this QP",
                    REJ_TIMEOUT => "the peer gave up waiting",
                    _ => "see IBTA table 112",
                };
                write!(f, "rejected with reason {reason}: {why}")
            }
            Self::Unreachable => {
                write!(f, "unreachable: every retry of the request went unanswered")
            }
            Self::TimedOut(t) => write!(f, "no answer within {t:?}"),
            Self::Disconnected => write!(f, "the peer disconnected first"),
            Self::UdRejected { status, .. } => {
                let why = match *status {
                    SIDR_UNSUPPORTED => "nobody listens on that UDP port (service ID unsupported)",
                    SIDR_REJECT => "the peer application rejected the request",
                    3 => "the peer has no QP for the service",
                    4 => "the peer redirected the request",
                    _ => "see IBTA table 120",
                };
                write!(
                    f,
                    "UD address resolution refused with status {status}: {why}"
                )
            }
        }
    }
}

/// What `connect` asks for (`rdma_conn_param`).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Application private data after rdma_cm's header (at most 56 bytes).
    pub private_data: Vec<u8>,
    /// RDMA READs / atomics the peer may have outstanding at us.
    pub responder_resources: u8,
    /// RDMA READs / atomics we may have outstanding at the peer.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries the peer should use towards us (3 bits; 7: forever).
    pub rnr_retry_count: u8,
    /// How long to wait for the peer's answer.
    pub timeout: Duration,
    /// UDP port of the peer's device (`None`: the port of ours, 4791 unless a private
    /// setup chose another).
    pub device_port: Option<u16>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            timeout: Duration::from_secs(30),
            device_port: None,
        }
    }
}

/// Per-device dispatch of CM events to the listeners and connections of this API.
#[derive(Debug, Default)]
struct Dispatch {
    /// Service ID → requests not yet taken.
    listeners: HashMap<u64, VecDeque<CmEvent>>,
    /// Connection → its events not yet taken.
    mailboxes: HashMap<ConnId, VecDeque<CmEvent>>,
    /// Async waiters to wake when something is filed (another thread may file what
    /// they wait for while they sleep on the device's fd).
    #[cfg(feature = "tokio")]
    wakers: Vec<std::task::Waker>,
}

/// The device a connection manager runs on: an emulated one (real UDP, wall-clock time,
/// its engine thread runs the CM), one of a simulated fabric (virtual time, the fabric
/// runs while a call waits), or a libibverbs device whose CM is the system's librdmacm.
#[derive(Debug)]
enum CmDev {
    Emulated(Arc<Device>),
    Simulated(Simulated),
    #[cfg(feature = "ibverbs")]
    Hardware(Box<hardware::Rdmacm>),
}

impl CmDev {
    /// Run `f` on the device's CM endpoint, then send what it produced (`None` on a
    /// hardware device, whose CM is librdmacm's).
    fn try_with_cm<R>(&self, f: impl FnOnce(&mut CmEndpoint, Instant) -> R) -> Option<R> {
        match self {
            Self::Emulated(dev) => Some(dev.with_cm(f)),
            Self::Simulated(sim) => Some(
                sim.fabric()
                    .with_cm(sim.index(), |cm, now| f(cm.endpoint(), now)),
            ),
            #[cfg(feature = "ibverbs")]
            Self::Hardware(_) => None,
        }
    }

    /// Run `f` on the device's CM endpoint (emulated and simulated devices only).
    fn with_cm<R>(
        &self,
        f: impl FnOnce(&mut CmEndpoint, Instant) -> std::result::Result<R, softroce_emu::cm::CmError>,
    ) -> std::result::Result<R, softroce_emu::cm::CmError> {
        match self.try_with_cm(f) {
            Some(r) => r,
            None => Err(softroce_emu::cm::CmError::UnknownConnection(ConnId(0))),
        }
    }

    /// The librdmacm CM of a hardware device.
    #[cfg(feature = "ibverbs")]
    fn hardware(&self) -> Option<&hardware::Rdmacm> {
        match self {
            Self::Hardware(hw) => Some(hw),
            _ => None,
        }
    }

    /// `rdma_reject` of request `id` with `private_data`.
    fn reject(&self, id: ConnId, private_data: &[u8]) -> Result<()> {
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.hardware() {
            return hw.reject(id, private_data);
        }
        self.with_cm(|cm, now| cm.reject(now, id, private_data))
            .map_err(|e| cm_error("reject", e))
    }

    /// Refuse a request taken from a listener's queue (REJ, or SIDR_REP with status reject).
    fn refuse(&self, ev: &CmEvent) {
        let _ = match ev {
            CmEvent::SidrRequest { id, .. } => self.reject_ud(*id, &[]),
            ev => self.reject(ev.id(), &[]),
        };
    }

    /// `rdma_reject` of UD request `id`: a SIDR_REP with status reject and `private_data`.
    fn reject_ud(&self, id: ConnId, private_data: &[u8]) -> Result<()> {
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.hardware() {
            return hw.reject(id, private_data);
        }
        let reply = SidrReply {
            status: SIDR_REJECT,
            qpn: Qpn::default(),
            qkey: 0,
            private_data: private_data.to_vec(),
        };
        self.with_cm(|cm, _| cm.sidr_reply(id, reply))
            .map_err(|e| cm_error("reject", e))
    }

    /// Send a SIDR_REQ to the CM at `peer` (emulated and simulated devices only).
    fn sidr_resolve(
        &self,
        peer: SocketAddr,
        params: SidrParams,
    ) -> std::result::Result<ConnId, softroce_emu::cm::CmError> {
        match self {
            Self::Emulated(dev) => dev.cm_sidr_resolve(peer, params),
            Self::Simulated(sim) => sim
                .fabric()
                .with_cm(sim.index(), |cm, now| cm.sidr_resolve(now, peer, params)),
            #[cfg(feature = "ibverbs")]
            Self::Hardware(_) => Err(softroce_emu::cm::CmError::UnknownConnection(ConnId(0))),
        }
    }

    /// Forget connection `id` (as destroying an rdma_cm_id does: the peer is told).
    fn destroy(&self, id: ConnId) {
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.hardware() {
            return hw.destroy(id);
        }
        let _ = self.with_cm(|cm, _| cm.destroy(id));
    }

    /// `rdma_disconnect`: the DREQ, or the DREP to the peer's.
    fn disconnect(&self, id: ConnId) -> Result<()> {
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.hardware() {
            return hw.disconnect(id);
        }
        self.with_cm(|cm, now| cm.disconnect(now, id, &[]))
            .map_err(|e| cm_error("disconnect", e))
    }

    fn stop_listening(&self, service_id: u64) {
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.hardware() {
            return hw.stop_listening(service_id);
        }
        let _ = self.with_cm(|cm, _| cm.stop_listening(service_id));
    }

    fn connection_count(&self) -> usize {
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.hardware() {
            return hw.connection_count();
        }
        self.try_with_cm(|cm, _| cm.connection_count())
            .unwrap_or_default()
    }

    /// Listen on `service_id` (on a shared device, only if no other process does).
    fn listen(&self, service_id: u64) -> std::result::Result<(), softroce_emu::cm::CmError> {
        match self {
            Self::Emulated(dev) => dev.cm_listen(service_id),
            _ => self.with_cm(|cm, _| cm.listen(service_id)),
        }
    }

    fn connect(
        &self,
        peer: SocketAddr,
        params: ConnectParams,
    ) -> std::result::Result<ConnId, softroce_emu::cm::CmError> {
        match self {
            Self::Emulated(dev) => dev.cm_connect(peer, params),
            Self::Simulated(sim) => sim
                .fabric()
                .with_cm(sim.index(), |cm, now| cm.connect(now, peer, params)),
            #[cfg(feature = "ibverbs")]
            Self::Hardware(_) => Err(softroce_emu::cm::CmError::UnknownConnection(ConnId(0))),
        }
    }

    fn accept(
        &self,
        id: ConnId,
        params: AcceptParams,
    ) -> std::result::Result<(), softroce_emu::cm::CmError> {
        match self {
            Self::Emulated(dev) => dev.cm_accept(id, params),
            Self::Simulated(sim) => sim
                .fabric()
                .with_cm(sim.index(), |cm, now| cm.accept(now, id, params)),
            #[cfg(feature = "ibverbs")]
            Self::Hardware(_) => Err(softroce_emu::cm::CmError::UnknownConnection(id)),
        }
    }

    fn peer_addr(&self, gid: Gid) -> SocketAddr {
        match self {
            Self::Emulated(dev) => dev.cm_peer_addr(gid),
            Self::Simulated(sim) => sim.fabric().with_cm(sim.index(), |cm, _| cm.peer_addr(gid)),
            #[cfg(feature = "ibverbs")]
            Self::Hardware(_) => SocketAddr::new(gid.to_ip(), softroce_wire::ROCE_V2_PORT),
        }
    }

    fn counters(&self) -> CmCounters {
        match self {
            Self::Emulated(dev) => dev.cm_counters().0,
            Self::Simulated(sim) => sim
                .fabric()
                .with_cm(sim.index(), |cm, _| *cm.endpoint().counters()),
            // librdmacm keeps no MAD counters.
            #[cfg(feature = "ibverbs")]
            Self::Hardware(_) => CmCounters::default(),
        }
    }

    /// An event that is already there, without waiting.
    fn try_event(&self) -> Option<CmEvent> {
        match self {
            Self::Emulated(dev) => dev.cm_get_event(Some(Duration::ZERO)),
            Self::Simulated(sim) => sim.fabric().take_cm_event(sim.index()),
            #[cfg(feature = "ibverbs")]
            Self::Hardware(hw) => hw.try_event(),
        }
    }

    /// Wait at most `left` (of the device's time) for an event. The emulated device hands
    /// it out; the simulated one leaves it queued for [`CmDev::try_event`].
    fn wait_event(&self, left: Duration) -> Option<CmEvent> {
        match self {
            // In slices: other threads may take what we wait for and file it for us.
            Self::Emulated(dev) => dev.cm_get_event(Some(left.min(SLICE))),
            Self::Simulated(sim) => {
                sim.fabric().wait_cm_event(sim.index(), left);
                None
            }
            // In slices too, for the same reason.
            #[cfg(feature = "ibverbs")]
            Self::Hardware(hw) => hw.wait_event(left.min(SLICE)),
        }
    }
}

/// The connection manager of one device (shared by every clone of its [`Context`]).
#[derive(Debug)]
pub(crate) struct CmShared {
    dev: CmDev,
    /// The start of the device's clock as [`CmShared::now`] counts it.
    epoch: Instant,
    dispatch: Mutex<Dispatch>,
    next_port: AtomicU16,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn cm_error(what: &'static str, e: softroce_emu::cm::CmError) -> Error {
    use softroce_emu::cm::CmError as E;
    let errno = match e {
        E::AlreadyListening(_) => libc::EADDRINUSE,
        E::AlreadyEstablished(_) => libc::EISCONN,
        _ => libc::EINVAL,
    };
    Error::Cm {
        what,
        reason: e.to_string(),
        errno,
    }
}

impl CmShared {
    fn new(dev: CmDev) -> Self {
        let random = match &dev {
            CmDev::Emulated(_) => softroce_emu::driver::entropy::random_u64(),
            // librdmacm chooses the source ports.
            #[cfg(feature = "ibverbs")]
            CmDev::Hardware(_) => 0,
            // From the seed, so simulated runs replay.
            CmDev::Simulated(sim) => sim.fabric().draw(),
        };
        // An ephemeral source port per connection, as rdma_resolve_addr binds one.
        let start = 32768 + (random % 28000) as u16;
        Self {
            dev,
            epoch: Instant::now(),
            dispatch: Mutex::new(Dispatch::default()),
            next_port: AtomicU16::new(start),
        }
    }

    /// The device's time: wall-clock on an emulated device, virtual on a simulated one.
    fn now(&self) -> Duration {
        match &self.dev {
            CmDev::Simulated(sim) => sim.fabric().now(),
            _ => self.epoch.elapsed(),
        }
    }

    /// File an event with its listener or connection; requests nobody listens for any
    /// more are rejected, events of forgotten connections dropped.
    fn file(&self, d: &mut Dispatch, ev: CmEvent) {
        #[cfg(feature = "tokio")]
        for w in d.wakers.drain(..) {
            w.wake();
        }
        if let CmEvent::SidrRequest { id, service_id, .. } = &ev {
            match d.listeners.get_mut(service_id) {
                Some(q) if q.len() < MAX_BACKLOG => q.push_back(ev),
                // As for connection requests: refused (a SIDR_REP with status reject).
                _ => {
                    let _ = self.dev.reject_ud(*id, &[]);
                }
            }
            return;
        }
        if let CmEvent::ConnectRequest { id, params, .. } = &ev {
            match d.listeners.get_mut(&params.service_id) {
                Some(q) if q.len() < MAX_BACKLOG => q.push_back(ev),
                // Nobody listens, or the application leaves requests untaken: refused,
                // as a full listen backlog refuses them.
                _ => {
                    let _ = self.dev.reject(*id, &[]);
                }
            }
            return;
        }
        let id = ev.id();
        if let Some(q) = d.mailboxes.get_mut(&id) {
            q.push_back(ev);
        } else if matches!(ev, CmEvent::Rejected { .. } | CmEvent::Unreachable { .. }) {
            // A request the requester withdrew (its REJ) before anyone took it: not handed
            // out any more.
            for q in d.listeners.values_mut() {
                q.retain(|r| r.id() != id);
            }
        }
    }

    /// File the events already there, then try `take` on the dispatch tables.
    fn take_now<T>(&self, take: &mut impl FnMut(&mut Dispatch) -> Option<T>) -> Option<T> {
        let mut d = lock(&self.dispatch);
        while let Some(ev) = self.dev.try_event() {
            self.file(&mut d, ev);
        }
        take(&mut d)
    }

    /// Wait until `take` finds what it wants in the dispatch tables (filling them from
    /// the device's events), at most `timeout` of the device's time.
    fn wait<T>(
        &self,
        timeout: Duration,
        mut take: impl FnMut(&mut Dispatch) -> Option<T>,
    ) -> Option<T> {
        let deadline = self.now() + timeout;
        // Bounded by the deadline: each round waits at most until it or takes an event.
        loop {
            if let Some(t) = self.take_now(&mut take) {
                return Some(t);
            }
            let left = deadline.saturating_sub(self.now());
            if left.is_zero() {
                return None;
            }
            if let Some(ev) = self.dev.wait_event(left) {
                let mut d = lock(&self.dispatch);
                self.file(&mut d, ev);
            }
        }
    }

    fn next_event(&self, id: ConnId, timeout: Duration) -> Option<CmEvent> {
        self.wait(timeout, |d| d.mailboxes.get_mut(&id)?.pop_front())
    }

    fn forget(&self, id: ConnId) {
        lock(&self.dispatch).mailboxes.remove(&id);
        // Tell the peer what the kernel tells it when an rdma_cm_id is destroyed; an ID
        // the CM already forgot (after time-wait) needs nothing.
        self.dev.destroy(id);
    }
}

/// A device's connection manager: see the [module documentation](self).
#[derive(Debug, Clone)]
pub struct ConnectionManager {
    ctx: Context,
    shared: Arc<CmShared>,
}

impl Context {
    /// The device's connection manager: the emulator's IB CM on emulated and simulated
    /// devices; on the libibverbs backend (cargo feature `ibverbs`), the system's
    /// librdmacm, loaded on first use (an error says why when it cannot be).
    pub fn connection_manager(&self) -> Result<ConnectionManager> {
        if let Some(shared) = self.cm.get() {
            return Ok(ConnectionManager {
                ctx: self.clone(),
                shared: Arc::clone(shared),
            });
        }
        let backend = self.backend();
        let dev = match (backend.emulated(), backend.simulated()) {
            (Some(dev), _) => CmDev::Emulated(Arc::clone(dev)),
            (None, Some(sim)) => CmDev::Simulated(sim.clone()),
            #[cfg(feature = "ibverbs")]
            (None, None) if backend.ibverbs().is_some() => {
                CmDev::Hardware(Box::new(hardware::Rdmacm::open(backend)?))
            }
            (None, None) => {
                return Err(Error::Unsupported {
                    what: "the connection manager (built without the `ibverbs` feature)",
                    backend: backend.kind(),
                });
            }
        };
        // A thread that raced us may have set it first: its manager is the one.
        let shared = self.cm.get_or_init(|| Arc::new(CmShared::new(dev))).clone();
        Ok(ConnectionManager {
            ctx: self.clone(),
            shared,
        })
    }
}

impl ConnectionManager {
    /// The device's address (connections are made from and to it).
    fn device_ip(&self) -> Result<IpAddr> {
        match &self.shared.dev {
            CmDev::Emulated(dev) => Ok(dev.local_addr().ip()),
            CmDev::Simulated(_) => self.ctx.with_hca(|h| h.config().ip),
            // The address the source GID is made from (RoCEv2: IPv4-mapped or IPv6).
            #[cfg(feature = "ibverbs")]
            CmDev::Hardware(_) => Ok(self.ctx.gid(self.ctx.ip_gid_index())?.to_ip()),
        }
    }

    /// Connections the device's CM still remembers (time-wait included): 0 once every
    /// connection was disconnected and dropped.
    pub fn connection_count(&self) -> usize {
        self.shared.dev.connection_count()
    }

    /// What the device's CM did with its MADs (sent, received, retransmitted, duplicates,
    /// drops by reason).
    pub fn counters(&self) -> CmCounters {
        self.shared.dev.counters()
    }

    /// `rdma_bind_addr` + `rdma_listen` in the TCP port space: accept requests for `addr`'s
    /// port (its address must be the device's, or unspecified).
    pub fn listen(&self, addr: SocketAddr) -> Result<Listener> {
        let (service_id, addr) = self.listen_in(PortSpace::Tcp, addr)?;
        Ok(Listener {
            cm: self.clone(),
            service_id,
            addr,
        })
    }

    /// `rdma_bind_addr` + `rdma_listen` in port space `ps`: the service ID listened on
    /// (its queue of requests filed in the dispatch tables) and the address.
    fn listen_in(&self, ps: PortSpace, addr: SocketAddr) -> Result<(u64, SocketAddr)> {
        let ip = self.device_ip()?;
        if !addr.ip().is_unspecified() && addr.ip() != ip {
            return Err(Error::Invalid {
                what: "listen address",
                reason: format!("{} is not this device's address {ip}", addr.ip()),
            });
        }
        if addr.port() == 0 {
            return self.listen_on_any_port(ps, ip);
        }
        let service_id = ps.service_id(addr.port());
        let addr = SocketAddr::new(ip, addr.port());
        let mut d = lock(&self.shared.dispatch);
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.shared.dev.hardware() {
            hw.listen(ps, service_id, addr)?;
            d.listeners.insert(service_id, VecDeque::new());
            return Ok((service_id, addr));
        }
        self.shared
            .dev
            .listen(service_id)
            .map_err(|e| cm_error("listen", e))?;
        d.listeners.insert(service_id, VecDeque::new());
        Ok((service_id, addr))
    }

    /// Port 0: listen on a free port of the kernel's ephemeral range, as `rdma_bind_addr`
    /// picks one (its `cma_alloc_any_port`), starting where the source ports have got to.
    fn listen_on_any_port(&self, ps: PortSpace, ip: IpAddr) -> Result<(u64, SocketAddr)> {
        const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;
        let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let start = self.shared.next_port.load(Ordering::Relaxed) as u32 % span;
        for i in 0..span {
            let port = EPHEMERAL.start() + ((start + i) % span) as u16;
            match self.listen_in(ps, SocketAddr::new(ip, port)) {
                Err(Error::Cm { errno, .. }) if errno == libc::EADDRINUSE => continue,
                other => return other,
            }
        }
        Err(Error::Invalid {
            what: "listen address",
            reason: format!("every port of {EPHEMERAL:?} is listened on already"),
        })
    }

    /// rdma_cm's header for a request from this device to `to`: our address and a fresh
    /// source port (as `rdma_resolve_addr` binds one), and `to`'s address.
    fn cma_hdr(&self, what: &'static str, to: SocketAddr) -> Result<(IpAddr, CmaHdrRepr)> {
        let ip = self.device_ip()?;
        let src_port = self
            .shared
            .next_port
            .fetch_add(1, Ordering::Relaxed)
            .max(1024);
        let addrs = match (ip, to.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => CmaAddrs::V4 { src, dst },
            (IpAddr::V6(src), IpAddr::V6(dst)) => CmaAddrs::V6 { src, dst },
            _ => {
                return Err(Error::Invalid {
                    what,
                    reason: format!(
                        "{} and this device's {ip} are of different IP versions",
                        to.ip()
                    ),
                });
            }
        };
        Ok((ip, CmaHdrRepr { src_port, addrs }))
    }

    /// `rdma_connect` of `qp` (in INIT, as built) to the listener at `to` (IP address
    /// and TCP-space port), waiting for the answer: on a REP the QP goes to RTR and RTS
    /// with the negotiated parameters, the RTU is sent, and the connection is returned.
    /// A REJ, no answer within `options.timeout`, or every retry unanswered is an error
    /// that says which ([`Error::ConnectFailed`]).
    ///
    /// On a simulated fabric the listener's side must answer while this waits, so a
    /// single-threaded test uses [`ConnectionManager::start_connect`] instead.
    pub fn connect(
        &self,
        qp: PreparedQueuePair,
        to: SocketAddr,
        options: &ConnectOptions,
    ) -> Result<Connection> {
        self.start_connect(qp, to, options)?.wait()
    }

    /// The first half of [`ConnectionManager::connect`]: send the REQ and return at once.
    /// [`Connecting::wait`] (or `Connecting::finish` with the `tokio` feature) waits for
    /// the answer; dropping the [`Connecting`] abandons the attempt as destroying an
    /// rdma_cm_id does.
    pub fn start_connect(
        &self,
        qp: PreparedQueuePair,
        to: SocketAddr,
        options: &ConnectOptions,
    ) -> Result<Connecting> {
        let (ip, hdr) = self.cma_hdr("connect address", to)?;
        let local = qp.endpoint();
        let mtu = self.ctx.query_port(1)?.active_mtu;
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.shared.dev.hardware() {
            hw.check_qp("connect", &qp)?;
            if options.private_data.len() > 56 {
                return Err(Error::Invalid {
                    what: "connect private data",
                    reason: format!("{} bytes (at most 56)", options.private_data.len()),
                });
            }
            let params = hardware::ConnectRequestParams {
                private_data: options.private_data.clone(),
                responder_resources: options.responder_resources,
                initiator_depth: options.initiator_depth,
                retry_count: options.retry_count,
                rnr_retry_count: options.rnr_retry_count,
                qp_num: local.qpn,
            };
            let id = {
                // Filed before any event for it can be taken from the channel.
                let mut d = lock(&self.shared.dispatch);
                let id = hw.connect(ip, to, params, options.timeout)?;
                d.mailboxes.insert(id, VecDeque::new());
                id
            };
            return Ok(Connecting {
                cm: self.clone(),
                id: Some(id),
                qp: Some(qp),
                to,
                local_psn: local.psn,
                mtu,
                device_port: softroce_wire::ROCE_V2_PORT,
                retry_count: options.retry_count,
                timeout: options.timeout,
                started: self.shared.now(),
            });
        }
        let _ = ip;
        let private_data =
            cma_private_data(&hdr, &options.private_data).map_err(|e| cm_error("connect", e))?;
        let params = ConnectParams {
            ece: Default::default(),
            path: None,
            qp_type: Default::default(),
            remote_gid: Gid::ZERO,
            service_id: PortSpace::Tcp.service_id(to.port()),
            local_qpn: Qpn::from_wire(local.qpn),
            starting_psn: Psn::new(local.psn),
            responder_resources: options.responder_resources,
            initiator_depth: options.initiator_depth,
            retry_count: options.retry_count,
            rnr_retry_count: options.rnr_retry_count,
            path_mtu: mtu,
            srq: false,
            flow_control: true,
            private_data,
        };
        let device_port = options
            .device_port
            .unwrap_or_else(|| self.ctx.backend().udp_port());
        let peer = SocketAddr::new(to.ip(), device_port);
        let id = {
            // Filed before any event for it can be taken from the device.
            let mut d = lock(&self.shared.dispatch);
            let id = self
                .shared
                .dev
                .connect(peer, params)
                .map_err(|e| cm_error("connect", e))?;
            d.mailboxes.insert(id, VecDeque::new());
            id
        };
        Ok(Connecting {
            cm: self.clone(),
            id: Some(id),
            qp: Some(qp),
            to,
            local_psn: local.psn,
            mtu,
            device_port,
            retry_count: options.retry_count,
            timeout: options.timeout,
            started: self.shared.now(),
        })
    }
}

/// A connection request on its way (`rdma_connect` sent, no answer taken yet): see
/// [`ConnectionManager::start_connect`].
#[derive(Debug)]
pub struct Connecting {
    cm: ConnectionManager,
    /// `None` once the attempt ended (the connection took it over, or it was forgotten).
    id: Option<ConnId>,
    qp: Option<PreparedQueuePair>,
    to: SocketAddr,
    local_psn: u32,
    mtu: softroce_wire::Mtu,
    device_port: u16,
    retry_count: u8,
    timeout: Duration,
    /// When the REQ left, in the device's time.
    started: Duration,
}

impl Connecting {
    /// Where the request goes.
    pub fn peer_addr(&self) -> SocketAddr {
        self.to
    }

    /// What is left of the caller's timeout.
    fn time_left(&self) -> Duration {
        let spent = self.cm.shared.now().saturating_sub(self.started);
        self.timeout.saturating_sub(spent)
    }

    /// Wait for the answer (at most what is left of `ConnectOptions::timeout`), then do
    /// as [`ConnectionManager::connect`] does.
    pub fn wait(self) -> Result<Connection> {
        let (id, left) = (self.conn_id(), self.time_left());
        let ev = self.cm.shared.next_event(id, left);
        self.conclude(ev)
    }

    fn conn_id(&self) -> ConnId {
        match self.id {
            Some(id) => id,
            None => unreachable!("an attempt is concluded once, by value"),
        }
    }

    /// Conclude with the connection's first event (`None`: the timeout passed).
    fn conclude(mut self, ev: Option<CmEvent>) -> Result<Connection> {
        let id = self.conn_id();
        let to = self.to;
        // A step of librdmacm's connect that failed says which and why.
        #[cfg(feature = "ibverbs")]
        if let (Some(hw), Some(CmEvent::Unreachable { .. })) = (self.cm.shared.dev.hardware(), &ev)
        {
            if let Some(e) = hw.failure(id) {
                return Err(e);
            }
        }
        let fail = |failure: CmFailure| Err(Error::ConnectFailed { to, failure });
        let (reply, private_data) = match ev {
            Some(CmEvent::ConnectResponse {
                params,
                private_data,
                ..
            }) => (params, private_data),
            Some(CmEvent::Rejected {
                reason,
                private_data,
                ..
            }) => {
                return fail(CmFailure::Rejected {
                    reason,
                    private_data,
                });
            }
            Some(CmEvent::Unreachable { .. }) => return fail(CmFailure::Unreachable),
            Some(_) => return fail(CmFailure::Disconnected),
            None => return fail(CmFailure::TimedOut(self.timeout)),
        };
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = self.cm.shared.dev.hardware() {
            let Some(qp) = self.qp.take() else {
                unreachable!("the QP is taken once, here")
            };
            let _ = reply;
            let psn = match hw.establish(id, &qp) {
                Ok(psn) => psn,
                Err(e) => {
                    // rdma_connect's failure path: the peer learns with a REJ.
                    let _ = hw.reject(id, &[]);
                    return Err(e);
                }
            };
            self.id = None;
            let qp = qp.into_connected(psn);
            return Ok(Connection::new(self.cm.clone(), id, qp, to, private_data));
        }
        let transition = CmTransition {
            remote: QueuePairEndpoint {
                qpn: reply.remote_qpn.value(),
                psn: reply.starting_psn.value(),
                gid: Gid::from_ip(to.ip()),
                udp_port: self.device_port,
            },
            // The REQ carried our receive PSN; the REP carries the one we send from.
            rq_psn: Psn::new(self.local_psn),
            sq_psn: reply.starting_psn,
            mtu: self.mtu,
            responder_resources: reply.responder_resources,
            initiator_depth: reply.initiator_depth,
            timeout: reply.local_ack_timeout,
            retry_cnt: self.retry_count,
            rnr_retry: reply.rnr_retry_count,
        };
        let Some(qp) = self.qp.take() else {
            unreachable!("the QP is taken once, here")
        };
        let shared = &self.cm.shared;
        let qp = match qp.handshake_cm(&transition) {
            Ok(qp) => qp,
            Err(e) => {
                // rdma_connect's failure path: the peer learns with a REJ (then Drop
                // forgets the ID).
                let _ = shared.dev.reject(id, &[]);
                return Err(e);
            }
        };
        shared
            .dev
            .with_cm(|cm, _| cm.send_rtu(id, &[]))
            .map_err(|e| cm_error("send RTU", e))?;
        // The Established event the RTU produced belongs to this call.
        let _ = shared.next_event(id, Duration::ZERO);
        self.id = None;
        Ok(Connection::new(self.cm.clone(), id, qp, to, private_data))
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.cm.shared.forget(id);
        }
    }
}

/// A listening port (`rdma_listen`); stops listening when dropped.
#[derive(Debug)]
pub struct Listener {
    cm: ConnectionManager,
    service_id: u64,
    addr: SocketAddr,
}

impl Listener {
    /// The address and port listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `rdma_get_request`: the next connection request, waiting up to `timeout`.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectionRequest> {
        let service = self.service_id;
        let ev = self
            .cm
            .shared
            .wait(timeout, |d| d.listeners.get_mut(&service)?.pop_front())
            .ok_or_else(|| Error::Cm {
                what: "get_request",
                reason: format!("no connection request for {} within {timeout:?}", self.addr),
                errno: libc::ETIMEDOUT,
            })?;
        Ok(self.request(ev))
    }

    /// The [`ConnectionRequest`] for a request event filed with this listener.
    fn request(&self, ev: CmEvent) -> ConnectionRequest {
        let CmEvent::ConnectRequest {
            id,
            params,
            private_data,
        } = ev
        else {
            unreachable!("only requests are filed with listeners")
        };
        let (peer_addr, user_data) = match split_cma_private_data(&private_data) {
            Some((hdr, user)) => {
                let ip = match hdr.addrs {
                    CmaAddrs::V4 { src, .. } => IpAddr::V4(src),
                    CmaAddrs::V6 { src, .. } => IpAddr::V6(src),
                };
                (SocketAddr::new(ip, hdr.src_port), user.to_vec())
            }
            // Not rdma_cm (a bare IB CM peer): the GID's address, the whole private data.
            None => (SocketAddr::new(params.remote_gid.to_ip(), 0), private_data),
        };
        ConnectionRequest {
            cm: self.cm.clone(),
            id: Some(id),
            params,
            peer_addr,
            private_data: user_data,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.cm.stop_listening(self.service_id);
    }
}

impl ConnectionManager {
    /// A listener (RC or UD) goes away: the CM stops listening on `service` and refuses
    /// the requests it held untaken.
    pub(crate) fn stop_listening(&self, service: u64) {
        let pending = lock(&self.shared.dispatch).listeners.remove(&service);
        self.shared.dev.stop_listening(service);
        for ev in pending.into_iter().flatten() {
            self.shared.dev.refuse(&ev);
        }
    }
}

/// A connection request (`RDMA_CM_EVENT_CONNECT_REQUEST`): accept or reject it; dropping
/// it rejects it.
#[derive(Debug)]
pub struct ConnectionRequest {
    cm: ConnectionManager,
    id: Option<ConnId>,
    params: RequestParams,
    peer_addr: SocketAddr,
    private_data: Vec<u8>,
}

impl ConnectionRequest {
    /// The requester's address and source port (from rdma_cm's header).
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// The requester's private data (after rdma_cm's header; the wire carries no length,
    /// so it is zero padded to 56 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The request in the terms of our QP (responder resources, initiator depth, retry
    /// counts, the requester's QPN and first PSN, path MTU).
    pub fn params(&self) -> &RequestParams {
        &self.params
    }

    /// `rdma_accept`: bring `qp` (in INIT) to RTR and RTS with the request's parameters,
    /// send the REP with `private_data` (at most 196 bytes) and wait up to `timeout` for
    /// the RTU (or, if it was lost, for data the requester sends, COMM_EST).
    ///
    /// On a simulated fabric the requester must send its RTU while this waits, so a
    /// single-threaded test uses [`ConnectionRequest::start_accept`] instead.
    pub fn accept(
        self,
        qp: PreparedQueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Connection> {
        self.start_accept(qp, private_data)?.wait(timeout)
    }

    /// The first half of [`ConnectionRequest::accept`]: bring `qp` to RTS and send the
    /// REP, without waiting for the RTU. [`Accepting::wait`] (or `Accepting::finish`
    /// with the `tokio` feature) waits for it; dropping the [`Accepting`] tears the
    /// connection down.
    pub fn start_accept(mut self, qp: PreparedQueuePair, private_data: &[u8]) -> Result<Accepting> {
        let Some(id) = self.id.take() else {
            unreachable!("a request is answered once")
        };
        let shared = Arc::clone(&self.cm.shared);
        let p = self.params;
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = shared.dev.hardware() {
            let attr = match self.cm.ctx.query_device() {
                Ok(attr) => attr,
                Err(e) => {
                    let _ = hw.reject(id, &[]);
                    return Err(e);
                }
            };
            let responder_resources = p
                .responder_resources
                .min(attr.max_qp_rd_atom.min(255) as u8);
            let initiator_depth = p
                .initiator_depth
                .min(attr.max_qp_init_rd_atom.min(255) as u8);
            let psn = {
                // Filed before the RTU's ESTABLISHED can be taken from the channel.
                let mut d = lock(&shared.dispatch);
                d.mailboxes.insert(id, VecDeque::new());
                match hw.accept(id, &qp, responder_resources, initiator_depth, private_data) {
                    Ok(psn) => psn,
                    Err(e) => {
                        d.mailboxes.remove(&id);
                        drop(d);
                        let _ = hw.reject(id, &[]);
                        return Err(e);
                    }
                }
            };
            let (peer_addr, remote_data) = (self.peer_addr, std::mem::take(&mut self.private_data));
            let qp = qp.into_connected(psn);
            let conn = Connection::new(self.cm.clone(), id, qp, peer_addr, remote_data);
            return Ok(Accepting { conn });
        }
        let Some(mtu) = p.path_mtu else {
            let _ = shared.dev.reject(id, &[]);
            return Err(Error::Cm {
                what: "accept",
                reason: "the request names an unknown path MTU".into(),
                errno: libc::EINVAL,
            });
        };
        let attr = self.cm.ctx.query_device()?;
        let peer = shared.dev.peer_addr(p.remote_gid);
        let local = qp.endpoint();
        let transition = CmTransition {
            remote: QueuePairEndpoint {
                qpn: p.remote_qpn.value(),
                psn: p.starting_psn.value(),
                gid: p.remote_gid,
                udp_port: peer.port(),
            },
            // The REQ carried the PSN we send from; the REP carries our receive PSN.
            rq_psn: Psn::new(local.psn),
            sq_psn: p.starting_psn,
            mtu: mtu.min(self.cm.ctx.query_port(1)?.active_mtu),
            responder_resources: p
                .responder_resources
                .min(attr.max_qp_rd_atom.min(255) as u8),
            initiator_depth: p
                .initiator_depth
                .min(attr.max_qp_init_rd_atom.min(255) as u8),
            timeout: p.local_ack_timeout,
            retry_cnt: p.retry_count,
            rnr_retry: p.rnr_retry_count,
        };
        let qp = match qp.handshake_cm(&transition) {
            Ok(qp) => qp,
            Err(e) => {
                let _ = shared.dev.reject(id, &[]);
                return Err(e);
            }
        };
        {
            let mut d = lock(&shared.dispatch);
            let params = AcceptParams {
                ece: Default::default(),
                xrc: false,
                local_qpn: Qpn::from_wire(local.qpn),
                starting_psn: Psn::new(local.psn),
                responder_resources: transition.responder_resources,
                initiator_depth: transition.initiator_depth,
                rnr_retry_count: p.rnr_retry_count,
                srq: false,
                flow_control: true,
                private_data: private_data.to_vec(),
            };
            match shared.dev.accept(id, params) {
                Ok(()) => {}
                // The requester withdrew (its REJ came after we took the request).
                Err(softroce_emu::cm::CmError::UnknownConnection(_)) => {
                    return Err(Error::AcceptFailed {
                        from: self.peer_addr,
                        failure: CmFailure::Disconnected,
                    });
                }
                Err(e) => return Err(cm_error("accept", e)),
            }
            d.mailboxes.insert(id, VecDeque::new());
        }
        let peer_addr = self.peer_addr;
        let remote_data = std::mem::take(&mut self.private_data);
        let conn = Connection::new(self.cm.clone(), id, qp, peer_addr, remote_data);
        Ok(Accepting { conn })
    }

    /// `rdma_reject` with `private_data` (at most 148 bytes): the requester's connect
    /// fails with [`CmFailure::Rejected`], reason 28, carrying it.
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let Some(id) = self.id.take() else {
            unreachable!("a request is answered once")
        };
        self.cm.shared.dev.reject(id, private_data)
    }
}

impl Drop for ConnectionRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.cm.shared.dev.reject(id, &[]);
        }
    }
}

/// An accepted request whose RTU has not been seen yet: see
/// [`ConnectionRequest::start_accept`].
#[derive(Debug)]
pub struct Accepting {
    conn: Connection,
}

impl Accepting {
    /// The requester's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.conn.peer_addr
    }

    /// Wait up to `timeout` for the RTU (or data from the requester, COMM_EST): the
    /// connection is then established.
    pub fn wait(self, timeout: Duration) -> Result<Connection> {
        let id = self.conn.id;
        let first = self
            .conn
            .cm
            .shared
            .wait(timeout, |d| Self::first_event(d, id));
        self.conclude(first, timeout)
    }

    /// The event that decides an acceptance. A DREQ proves the requester took our REP
    /// and was established (it disconnects only from there): the connection was up and is
    /// going down, and the event stays for `wait_disconnected`.
    fn first_event(d: &mut Dispatch, id: ConnId) -> Option<CmEvent> {
        let q = d.mailboxes.get_mut(&id)?;
        match q.front()? {
            CmEvent::Disconnected { .. } => Some(CmEvent::Established { id }),
            _ => q.pop_front(),
        }
    }

    /// Conclude with the first event (`None`: `timeout` passed).
    fn conclude(self, first: Option<CmEvent>, timeout: Duration) -> Result<Connection> {
        let conn = self.conn;
        let peer_addr = conn.peer_addr;
        match first {
            Some(CmEvent::Established { .. }) => Ok(conn),
            other => {
                let failure = match other {
                    None => CmFailure::TimedOut(timeout),
                    Some(CmEvent::Rejected {
                        reason,
                        private_data,
                        ..
                    }) => CmFailure::Rejected {
                        reason,
                        private_data,
                    },
                    Some(CmEvent::Unreachable { .. }) => CmFailure::Unreachable,
                    Some(_) => CmFailure::Disconnected,
                };
                Err(Error::AcceptFailed {
                    from: peer_addr,
                    failure,
                })
            }
        }
    }
}

/// An established connection and its QP (in RTS). Dropping it tears the connection down
/// as destroying an rdma_cm_id does.
#[derive(Debug)]
pub struct Connection {
    cm: ConnectionManager,
    id: ConnId,
    qp: QueuePair,
    peer_addr: SocketAddr,
    private_data: Vec<u8>,
    /// Our DREQ (or DREP) went out.
    disconnected: AtomicBool,
    /// The connection's `Disconnected` event was taken (the peer's DREQ or DREP came).
    disconnect_seen: AtomicBool,
}

impl Connection {
    fn new(
        cm: ConnectionManager,
        id: ConnId,
        qp: QueuePair,
        peer_addr: SocketAddr,
        private_data: Vec<u8>,
    ) -> Self {
        Self {
            cm,
            id,
            qp,
            peer_addr,
            private_data,
            disconnected: AtomicBool::new(false),
            disconnect_seen: AtomicBool::new(false),
        }
    }

    /// The connected QP.
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The peer's address: the listener's on the active side, the requester's (address
    /// and source port) on the passive side.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// The peer's private data: the REP's on the active side (196 bytes, zero padded),
    /// the REQ's after rdma_cm's header on the passive side (56 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// `rdma_disconnect`: the QP goes to ERR (its outstanding work requests complete
    /// flushed), a DREQ goes out, and this waits up to `timeout` for the peer's DREP. If
    /// the peer disconnected first, this answers its DREQ instead.
    ///
    /// The peer's application sends the DREP (`wait_disconnected`, or its own
    /// `disconnect`), so a single-threaded simulation calls
    /// [`Connection::start_disconnect`] first, lets the peer answer, then this.
    pub fn disconnect(&self, timeout: Duration) -> Result<()> {
        self.start_disconnect()?;
        if self.disconnect_seen.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.take_disconnected(timeout) {
            true => Ok(()),
            false => Err(Error::Cm {
                what: "disconnect",
                reason: format!("no DREP from {} within {timeout:?}", self.peer_addr),
                errno: libc::ETIMEDOUT,
            }),
        }
    }

    /// The first half of [`Connection::disconnect`]: QP to ERR and the DREQ (or, if the
    /// peer disconnected first, the DREP) sent, without waiting. Idempotent.
    pub fn start_disconnect(&self) -> Result<()> {
        if self.disconnected.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.qp.to_error()?;
        let id = self.id;
        self.cm.shared.dev.disconnect(id)
    }

    /// Take connection `id`'s `Disconnected` event, wherever it is in its mailbox.
    fn disconnected_event(d: &mut Dispatch, id: ConnId) -> Option<CmEvent> {
        let q = d.mailboxes.get_mut(&id)?;
        let at = q
            .iter()
            .position(|e| matches!(e, CmEvent::Disconnected { .. }))?;
        q.remove(at)
    }

    /// Wait up to `timeout` for this connection's `Disconnected` event and take it.
    fn take_disconnected(&self, timeout: Duration) -> bool {
        let id = self.id;
        let got = self
            .cm
            .shared
            .wait(timeout, |d| Self::disconnected_event(d, id));
        if got.is_some() {
            self.disconnect_seen.store(true, Ordering::Release);
        }
        got.is_some()
    }

    /// Wait up to `timeout` for the peer to disconnect (`RDMA_CM_EVENT_DISCONNECTED`),
    /// then do as `rdma_disconnect` does: QP to ERR and the DREP sent.
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        if !self.disconnect_seen.load(Ordering::Acquire) && !self.take_disconnected(timeout) {
            return Err(Error::Cm {
                what: "wait_disconnected",
                reason: format!("{} did not disconnect within {timeout:?}", self.peer_addr),
                errno: libc::ETIMEDOUT,
            });
        }
        self.start_disconnect()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.cm.shared.forget(self.id);
    }
}
