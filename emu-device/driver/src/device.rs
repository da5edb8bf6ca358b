//! A real device: the sans-IO [`Hca`] behind a mutex, a UDP socket, an engine thread that
//! makes progress without the application calling in, and real pollable fds for completion
//! channels and the async event queue.
//!
//! Why a mutex rather than a command channel: every verb is a short, non-blocking state
//! change, so the application thread applies it directly and then sends whatever it produced
//! from its own thread (no hop to the engine on the latency path); the engine thread only
//! handles received datagrams and timers. Both sides drain `poll_transmit` and `poll_event`
//! under the lock, so fd notifications can never be lost between a check and a wait.
//!
//! Run to completion: an application thread busy-polling a CQ drains the socket and fires
//! due timers itself, and while it does (it polled within [`BUSY_POLL_GRACE`]) the engine is
//! not woken for timers and only takes the device lock when the poller does not hold it:
//! two threads blocking on one lock for every datagram cost a futex hand-off each time. The
//! engine watches the socket meanwhile only when it learns that arrivals find nobody polling
//! (programs that also wait by spinning on memory, as ib_write_lat): an engine woken by
//! every datagram is an extra runnable thread per packet, which a small machine pays for in
//! preempted pollers.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::cm::CmAgent;
use super::eventfd::EventFd;
use super::share::{Guest, Owner};
use super::socket::{
    MAX_BATCH, MAX_DATAGRAM, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, MAX_RECEIVE, Received, RoceSocket,
    SendGroup,
};
use softroce_emu_cm::{
    AcceptParams, CmConfig, CmCounters, CmEndpoint, CmError, CmEvent, ConnId, ConnectParams,
    SidrParams,
};
use softroce_emu_core::{
    AccessFlags, AsyncEvent, ChannelHandle, CqHandle, Hca, HcaConfig, HcaEvent, IncomingDatagram,
    MrHandle, MrKeys, PayloadRef, PdHandle, QpHandle, TransmitToken, VerbsError, VerbsResult,
    qpn_slot_range,
};
use softroce_emu_faults::{
    DeviceEvent, Direction, FaultCounters, FaultInjector, FaultPlan, Verdict, excerpt,
};
use softroce_wire::pcap::CaptureWriter;
use softroce_wire::{Gid, Qpn};

/// How to start a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// The emulated HCA (its `ip` and `udp_port` are where the socket binds).
    pub hca: HcaConfig,
    /// Write every datagram sent and received to this pcap file (`SOFTROCE_PCAP`).
    pub pcap: Option<PathBuf>,
    /// Faults to inject into this device's sent (default) or received datagrams, and device
    /// events (port down/up, device fatal) at set times after it starts, in the compact form
    /// of [`softroce_emu_faults::FaultSpec`] or a TOML plan (`SOFTROCE_FAULTS`).
    pub faults: Option<String>,
    /// Print [`Device::counters_line`] to stderr when the device closes
    /// (`SOFTROCE_COUNTERS=stderr`): counters live in the process that owns the device, and
    /// a program that never asks for them (one using the drop-in libibverbs) can still
    /// show them.
    pub counters_at_close: bool,
    /// The connection manager's response timeout exponent (4.096 µs × 2^n, advertised in
    /// its REQs and REPs and waited for before each retry): rdma_cm's 20 (about 4 s) by
    /// default; tests on a lossy link use less.
    pub cm_response_timeout: u8,
    /// Retries of a REQ, REP or DREQ before the connection manager gives up (15).
    pub cm_max_retries: u8,
    /// Share the device with other processes (on by default): the first to open it owns
    /// its port, later ones become its guests ([`crate::share`]). Off, a second opener gets
    /// EADDRINUSE. Never for port 0 (every device then has a port of its own).
    pub share: bool,
}

impl DeviceConfig {
    /// A device on `ip` with the default port (4791) and `SOFTROCE_PCAP` from the
    /// environment. Its key seed (`hca.seed`: lkeys, rkeys, initial QPNs) comes from OS
    /// entropy, so a peer cannot predict the keys of a region it was never given; set it
    /// to replay a run. Its link MTU is that of the interface holding `ip` (active MTU 4096
    /// on loopback, as rxe's), 1500 when no interface does.
    pub fn new(name: &str, ip: std::net::IpAddr) -> Self {
        let mut hca = HcaConfig::new(name, ip);
        hca.link_mtu = crate::link::link_mtu(ip).unwrap_or(hca.link_mtu);
        hca.ack_defer = ACK_DEFER;
        // Large payloads leave straight from registered memory (the guarded copier reads it
        // for the ICRC; without one the core copies as before).
        hca.payload_by_reference = true;
        hca.seed = crate::entropy::random_u64();
        hca.adaptive_retransmit = adaptive_retransmit_env();
        Self {
            hca,
            pcap: std::env::var_os("SOFTROCE_PCAP").map(PathBuf::from),
            // Lossy, not `var`: a value that is not Unicode must fail the spec's parse
            // loudly, not turn faults off without a word.
            faults: std::env::var_os("SOFTROCE_FAULTS")
                .map(|v| v.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty()),
            counters_at_close: counters_env(),
            cm_response_timeout: 20,
            cm_max_retries: 15,
            share: true,
        }
    }
}

/// `SOFTROCE_COUNTERS`: `stderr` asks for the counters at close; anything else is ignored
/// with a warning, so a typo does not pass silently.
fn counters_env() -> bool {
    // Said once a process, however many devices it configures.
    static WARNED: std::sync::Once = std::sync::Once::new();
    let value = std::env::var_os("SOFTROCE_COUNTERS");
    match value.as_ref().map(|v| v.to_str()) {
        Some(Some("stderr")) => true,
        None | Some(Some("")) => false,
        Some(_) => {
            WARNED.call_once(|| {
                let shown = excerpt(&value.unwrap_or_default().to_string_lossy());
                eprintln!(
                    "softroce: SOFTROCE_COUNTERS={shown:?} is not \"stderr\"; counters not printed"
                );
            });
            false
        }
    }
}

/// The bound on RC requests in flight for a device whose socket buffers `rcvbuf` bytes (in
/// the kernel's accounting, some 8 KiB per 4 KiB datagram), taken as what its peers buffer
/// too: every busy QP's window (128) fits at least.
fn outstanding_psns_for(rcvbuf: usize) -> u32 {
    u32::try_from(rcvbuf / 8192)
        .unwrap_or(u32::MAX)
        .clamp(128, 4096)
}

/// `SOFTROCE_ADAPTIVE_RETRANSMIT=1` turns on [`HcaConfig::adaptive_retransmit`].
fn adaptive_retransmit_env() -> bool {
    // Said once a process, however many devices it configures.
    static WARNED: std::sync::Once = std::sync::Once::new();
    let value = std::env::var_os("SOFTROCE_ADAPTIVE_RETRANSMIT");
    match value.as_ref().map(|v| v.to_str()) {
        Some(Some("1")) => true,
        None | Some(Some("" | "0")) => false,
        Some(_) => {
            WARNED.call_once(|| {
                let shown = excerpt(&value.unwrap_or_default().to_string_lossy());
                eprintln!(
                    "softroce: SOFTROCE_ADAPTIVE_RETRANSMIT={shown:?} is neither 1 nor 0; adaptive retransmission stays off"
                );
            });
            false
        }
    }
}

/// Mixed into the device seed for the connection manager's IDs, so they are not the keys'.
const CM_SEED_STREAM: u64 = 0x636d_5f69_6473; // "cm_ids"
/// Mixed into the key seed for the first QPN ([`first_qpn`]).
const QPN_SEED_STREAM: u64 = 0x7170_6e5f_6669_7273; // "qpn_firs"

/// How long a real device holds an ACK back for the QP's next packet: long enough for an
/// application to answer a request, far below any retransmission timeout.
pub const ACK_DEFER: Duration = Duration::from_micros(100);

/// How long after an application thread's last busy poll the engine leaves the socket and
/// the timers to it. Long enough that a polling loop never has the engine wake in between,
/// short enough that a program which stops polling without sleeping in a verb (it waits on
/// a side channel, or polls the channel fd itself) sees its timers and arrivals handled soon.
pub const BUSY_POLL_GRACE: Duration = Duration::from_micros(200);

/// The longest the engine sleeps past a busy poller's last poll (a grace period, then up
/// to seven more of patience: see `engine`): timers a poller leaves behind fire by then.
const BUSY_POLL_LOOKS_WITHIN: Duration =
    Duration::from_micros(BUSY_POLL_GRACE.as_micros() as u64 * 8);

/// A thread that polled this recently is still polling: it takes what arrives.
const POLLER_ACTIVE: Duration = Duration::from_micros(4);

/// Arrivals in a row that the poller took itself before the engine stops watching the
/// socket while a thread busy-polls (it still looks at the end of each grace period, and
/// watches again as soon as it finds a datagram nobody took).
const ENGINE_NEEDED_AFTER: u32 = 32;

/// Posts closer together than this (from the end of one post's doorbell to the next post)
/// are one burst: after the burst's first [`SENT_AT_ONCE`] posts, the packets of the next
/// ones are held for the application's next verb (usually the `ibv_poll_cq` that follows a
/// burst), so a burst leaves in a few GSO sends rather than a syscall per work request. A
/// ping-pong posts once per round trip, longer apart than this, and never waits.
const BURST_GAP: Duration = Duration::from_micros(8);

/// Posts of a burst sent at once before holding starts: a WRITE of data, then one of a
/// flag, then spinning on memory for the answer never waits for the engine. (4 cost
/// ib_write_bw's 8 B message rate a fifth: two more syscalls per burst of 100.) None after
/// a stream's burst ([`STREAMING_BURST`]).
const SENT_AT_ONCE: u32 = 2;

/// A burst of more posts than this holds the next burst from its first post instead of
/// sending [`SENT_AT_ONCE`] first: a streaming application (perftest's bandwidth tests
/// post a hundred between two polls) paid two one-packet sends per burst for them, two of
/// every five sends. A ping-pong's bursts are one or two posts and never held; an
/// application that streams, then spins on memory after a post without calling a verb,
/// has that post sent as the third post of a burst always was: by the engine after
/// [`DOORBELL_HOLD`], or at the end of [`BUSY_POLL_GRACE`] if it busy-polled just before.
const STREAMING_BURST: u32 = 8;

/// The longest held packets wait: an application that posts a burst and then neither
/// polls nor posts (it spins on memory, or waits on a side channel) has them sent by the
/// engine by then (or by the end of [`BUSY_POLL_GRACE`] when it busy-polled before).
const DOORBELL_HOLD: Duration = Duration::from_micros(30);

/// How long an engine receiving a stream (datagrams arriving sooner than this after it
/// last waited) waits for the next ones spinning instead of sleeping: waking a sleeping
/// thread costs its waker (the sender, on loopback) an inter-processor interrupt, which in
/// a VM is several microseconds.
const ENGINE_SPIN: Duration = Duration::from_micros(50);

/// The engine thread's timer slack (the kernel's default is 50 us).
const ENGINE_TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// Datagrams a pump builds before it sends them: one full GSO send (128 datagrams on a
/// kernel that takes them, two sends of 64 on one that does not), so that the held part
/// of a burst of small posts leaves in one `sendmmsg`. The kernel's cost is mostly per
/// GSO send, not per call or per datagram: 128 against 64 moved ib_write_bw's 8 B rate
/// over 8 QPs from 3.2-3.4 to 3.5-3.6 M msg/s (interleaved runs; two sends of 64 per
/// call did not). Holding a whole burst and sending it at the poll instead leaves the
/// peer idle meanwhile (the 8 B rate fell a tenth).
const TX_BATCH: usize = MAX_GSO_SEGMENTS;

/// GSO groups of datagrams at most this long leave as one contiguous buffer, copied
/// together first: the kernel copies a send's iovecs one by one at a cost per iovec that,
/// for a small packet (an 8 B WRITE is 72 bytes), was more than copying its bytes twice.
/// Longer ones leave straight from their buffers, one iovec each.
const COALESCE_SEGMENT: usize = 512;

/// Unsignaled posts before a signaled one that make it leave at once (see
/// [`Device::post_send`]); an application that signals every request polls often, and its
/// burst is held as any other.
const AWAITED_AFTER_UNSIGNALED: u32 = 16;

/// Posts held at most before they are sent anyway (a pump's worth), after a burst's first
/// doorbell.
const DOORBELL_BATCH: u32 = TX_BATCH as u32;

/// Posts held at most before they are sent anyway, the `burst_posts`th post of a burst
/// deciding: a burst's first doorbell rings at [`FIRST_DOORBELL_BATCH`] so that its peer
/// starts working while the rest is posted, the next ones at [`DOORBELL_BATCH`].
fn doorbell_batch(burst_posts: u32) -> u32 {
    if burst_posts <= FIRST_DOORBELL_BATCH {
        FIRST_DOORBELL_BATCH
    } else {
        DOORBELL_BATCH
    }
}

/// The first doorbell of a burst (see [`doorbell_batch`]). An application that waits for
/// completions between bursts (perftest at its default depth: 128 requests in flight, one
/// signaled in 100) left its peer idle while it posted the first 64 of each hundred, then
/// waited as long for the peer to catch up: 32 moved ib_write_bw's 8 B rate from 0.77 to
/// 0.92 M msg/s (six interleaved pairs). A stream that never waits (a deep queue, many
/// QPs) is one endless burst and rings at [`DOORBELL_BATCH`] (32 throughout cost those a
/// tenth).
const FIRST_DOORBELL_BATCH: u32 = 32;

/// Where received datagrams land: kept between receives, so a look that finds nothing
/// (a busy poller's usual one) prepares no buffers or metadata.
struct RxStorage {
    bufs: Vec<Vec<u8>>,
    meta: [Received; MAX_BATCH],
}

/// Datagrams built by `poll_transmit` straight into reusable buffers, sent from there: no
/// allocation or copy per packet on the send path.
struct TxScratch {
    bufs: Vec<Vec<u8>>,
    /// The datagrams of small-segment GSO groups, copied end to end (see
    /// [`COALESCE_SEGMENT`]): kept between flushes.
    coalesced: Vec<u8>,
    dests: [SocketAddr; TX_BATCH],
    /// Each datagram's IPv4 TOS / IPv6 traffic class byte.
    traffic_classes: [u8; TX_BATCH],
    lens: [usize; TX_BATCH],
    /// The UC/UD requests waiting for the word on their datagram (see `report`).
    tokens: [Option<TransmitToken>; TX_BATCH],
    /// Payloads left in registered memory, unwritten in their buffers (see
    /// `Transmit::payload`): sent from there, or copied in by [`fill_payloads`] before
    /// anything else reads the datagram.
    payloads: [Option<PayloadRef>; TX_BATCH],
    /// Datagrams the kernel refused.
    failed: [bool; TX_BATCH],
    n: usize,
}

/// How `open_socket` found the device.
#[derive(Debug)]
enum Role {
    /// Alone on its port (sharing off, or a private port).
    Alone,
    /// It binds the device's port and routes for guests.
    Owner(Owner),
    /// Another process owns the port; this one receives through it.
    Guest(Guest),
}

struct Shared {
    hca: Mutex<Hca>,
    /// Verbs waiting for `hca`: the engine, which could otherwise take it back the moment
    /// it lets go (a flood of work keeps it busy), lets them go first.
    verbs_waiting: AtomicU32,
    socket: RoceSocket,
    /// The device's address and port (the socket's, unless this process is a guest).
    device_addr: SocketAddr,
    /// Set while this process owns the device's port and routes for guests (from the
    /// start, or since it took the port over from an owner that exited).
    owner: OnceLock<Owner>,
    /// Set while this process is a guest (locked after `hca` and `cm`).
    guest: Mutex<Option<Guest>>,
    /// Whether `guest` is set: a look at the socket takes the guest's lock only then.
    guest_on: AtomicBool,
    /// A guest that took over the port receives on it here (its `socket` keeps sending).
    takeover_socket: OnceLock<RoceSocket>,
    /// The owner went away: the engine takes the port over or joins the new owner.
    failover_needed: AtomicBool,
    /// Neither worked: DEVICE_FATAL was raised, the device is dead in this process.
    share_dead: AtomicBool,
    /// A guest's buffer for records from the owner (locked after `hca`).
    guest_rx: Mutex<Vec<u8>>,
    /// Wakes the engine (a stop, a new fault plan, an earlier timer, the socket handed back).
    engine_wake: EventFd,
    /// When an application thread last busy-polled (nanoseconds since `epoch`, 0: never).
    polled_at: AtomicU64,
    /// The engine sleeps with the socket in its poll set (else a busy poller drains it).
    engine_watches_socket: AtomicBool,
    /// Send buffers for whoever pumps (always with `hca` locked, so never contended).
    tx: Mutex<TxScratch>,
    /// Consecutive datagrams for one peer go out as one UDP GSO send (cleared when the
    /// kernel or the route refuses one).
    gso: AtomicBool,
    stop: AtomicBool,
    channel_fds: Mutex<HashMap<ChannelHandle, Arc<EventFd>>>,
    async_fd: EventFd,
    /// More fds to signal when an async event is queued: each `ibv_context` of the drop-in
    /// has an async fd of its own (ibv_get_async_event(3) is per context), which must
    /// become readable when the device queues an event.
    async_watchers: Mutex<Vec<std::sync::Weak<EventFd>>>,
    /// The pcap capture, until the device or the process ends ([`Device::finish_at_exit`]
    /// takes it out to flush it).
    capture: Option<crate::capture_file::SharedCapture>,
    /// The fault plan in force (replaceable at run time), with what it injected.
    faults: Mutex<Option<FaultInjector>>,
    /// Whether `faults` holds a plan: without one, sends and receives never take its lock.
    faults_on: AtomicBool,
    epoch: Instant,
    /// When the application last posted send work (nanoseconds since `epoch`).
    last_post_at: AtomicU64,
    /// Since when posted work waits for the application's next verb (nanoseconds since
    /// `epoch`, 0: nothing held); see [`BURST_GAP`]. Written with `hca` locked.
    held_since: AtomicU64,
    /// The last pump stopped at [`TX_PER_PUMP`] with packets left to build: the engine
    /// pumps again at once, even while a thread busy-polls (the poller takes arrivals and
    /// timers, not the rest of a long transmit).
    transmit_left: AtomicBool,
    /// Posts whose work is held.
    held_posts: AtomicU32,
    /// Posts since the last one with a signaled request.
    posts_since_signaled: AtomicU32,
    /// A busy poll found nothing since the last early doorbell (see [`Device::post_send`]).
    polled_idle: AtomicBool,
    /// Posts of the current burst (held ones included).
    burst_posts: AtomicU32,
    /// The burst before the current one was a stream's (longer than [`STREAMING_BURST`]
    /// posts): the current one is held from its first post.
    streaming: AtomicBool,
    /// When the sleeping engine wakes up on its own (nanoseconds since `epoch`), written
    /// with the device locked. A verb wakes it only for an earlier timer: a wakeup per verb
    /// would cost the application a context switch on every post and poll.
    engine_wakes_at: AtomicU64,
    /// Receive buffers for whoever drains the socket (the engine, or an application thread
    /// waiting for a completion); locked after `hca`.
    rx_storage: Mutex<RxStorage>,
    /// Application threads asleep in [`Device::wait_for`] (counted under the `hca` lock).
    waiters: AtomicUsize,
    /// Readable when progress was made while `waiters` slept: they sleep on it and on the
    /// socket, so progress another thread made (the engine took their datagram, a timer
    /// fired, a verb flushed) wakes them at once.
    progress_fd: EventFd,
    /// Receive calls that found datagrams, by any thread: an engine that slept watching
    /// the socket sees whether pollers took arrivals meanwhile.
    received: AtomicU64,
    /// Datagrams dropped because they were larger than [`MAX_DATAGRAM`] (cut by the socket):
    /// no RoCEv2 packet is, so they come from a misconfigured or hostile peer.
    rx_oversize: AtomicU64,
    /// Datagrams the kernel refused to send (no route, no permission): counted, never
    /// silent. RC recovers them by retransmission; a UD or UC request completes in error.
    tx_failed: AtomicU64,
    /// Print the counters when the device closes.
    counters_at_close: bool,
    /// The connection manager (locked after `hca`, never before).
    cm: Mutex<CmAgent>,
    /// The connection manager may have work (a verb or a timer ran it): the next pump
    /// drives it. Else a pump leaves it alone unless QP1 received a MAD, so the datapath
    /// never takes its lock. Written with `hca` locked.
    cm_dirty: AtomicBool,
    /// The connection manager's next deadline (nanoseconds since `epoch`, 0: none), as of
    /// the last pump that drove it: its timers change only when it runs.
    cm_deadline: AtomicU64,
    /// Readable while connection manager events wait.
    cm_fd: EventFd,
    /// QPs that reached COMM_EST during a pump, for the connection manager.
    comm_est: Mutex<Vec<Qpn>>,
    /// One socket per multicast group some QP is attached to (locked after `hca`).
    groups: Mutex<Vec<(Gid, Arc<RoceSocket>)>>,
    /// Wakes the multicast receiver (the groups changed, or the device stops).
    groups_changed: EventFd,
}

/// A running emulated device.
pub struct Device {
    shared: Arc<Shared>,
    engine: Option<JoinHandle<()>>,
    /// The thread receiving on the group sockets, started with the first group.
    multicast_rx: Mutex<Option<JoinHandle<()>>>,
    /// The process that started the device: a child `fork()`ed from it inherits this
    /// memory but none of its threads.
    started_by: u32,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("addr", &self.shared.device_addr)
            .field("share", &self.share_slot())
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Bind the socket and start the engine thread.
    pub fn start(mut config: DeviceConfig) -> io::Result<Self> {
        let faults = match &config.faults {
            Some(spec) => Some(started_injector(FaultPlan::parse(spec).map_err(|e| {
                // Say where the spec came from: a variable set long ago is easy to forget.
                let from_env = std::env::var("SOFTROCE_FAULTS").is_ok_and(|v| v == *spec);
                let origin = if from_env {
                    "SOFTROCE_FAULTS="
                } else {
                    "faults "
                };
                let shown = excerpt(spec);
                io::Error::new(io::ErrorKind::InvalidInput, format!("{origin}{shown}: {e}"))
            })?)),
            None => None,
        };
        let bind = SocketAddr::new(config.hca.ip, config.hca.udp_port);
        let (socket, mut role) = open_socket(&mut config, bind)?;
        let guest = match std::mem::replace(&mut role, Role::Alone) {
            Role::Guest(g) => Some(g),
            other => {
                role = other;
                None
            }
        };
        if matches!(role, Role::Alone) && guest.is_none() {
            // Port 0 asks for an ephemeral port: the device then lives on the real one.
            config.hca.udp_port = socket.local_addr().port();
        }
        let device_addr = SocketAddr::new(config.hca.ip, config.hca.udp_port);
        let capture = match &config.pcap {
            Some(path) => Some(crate::capture_file::open(path)?),
            None => None,
        };
        // Before the device exists: its attributes report implicit ODP where copies are
        // fault-safe.
        crate::guarded_copy::install();
        config
            .hca
            .clock_epoch
            .get_or_insert_with(crate::clock::monotonic_epoch);
        // A UC/UD send the kernel refuses must complete in error, not as sent: `flush`
        // reports each datagram's fate to the core in the same pump.
        config.hca.transmit_feedback = true;
        config.hca.max_outstanding_psns = outstanding_psns_for(socket.recv_buffer_bytes());
        config.hca.first_qpn = first_qpn(&config.hca);
        let hca = Hca::new(config.hca);
        let mut cm_config = CmConfig::new(
            hca.gids()[hca.ip_gid_index()],
            hca.query_device().node_guid,
            hca.config().seed ^ CM_SEED_STREAM,
        );
        cm_config.cm_response_timeout = config.cm_response_timeout;
        cm_config.max_cm_retries = config.cm_max_retries;
        cm_config.id_slot = hca.config().qpn_slot;
        let cm = CmAgent::new(CmEndpoint::new(cm_config), hca.config().udp_port);
        let shared = Arc::new(Shared {
            hca: Mutex::new(hca),
            verbs_waiting: AtomicU32::new(0),
            socket,
            device_addr,
            guest_rx: Mutex::new(vec![0u8; MAX_RECEIVE + 64]),
            owner: match role {
                Role::Owner(o) => OnceLock::from(o),
                _ => OnceLock::new(),
            },
            guest_on: AtomicBool::new(guest.is_some()),
            guest: Mutex::new(guest),
            takeover_socket: OnceLock::new(),
            failover_needed: AtomicBool::new(false),
            share_dead: AtomicBool::new(false),
            engine_wake: EventFd::new()?,
            polled_at: AtomicU64::new(0),
            engine_watches_socket: AtomicBool::new(true),
            tx: Mutex::new(TxScratch {
                bufs: (0..TX_BATCH)
                    .map(|_| Vec::with_capacity(MAX_DATAGRAM))
                    .collect(),
                coalesced: Vec::new(),
                dests: [bind; TX_BATCH],
                traffic_classes: [0; TX_BATCH],
                lens: [0; TX_BATCH],
                tokens: [None; TX_BATCH],
                payloads: [None; TX_BATCH],
                failed: [false; TX_BATCH],
                n: 0,
            }),
            gso: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            channel_fds: Mutex::new(HashMap::new()),
            async_fd: EventFd::new()?,
            async_watchers: Mutex::new(Vec::new()),
            capture,
            faults_on: AtomicBool::new(faults.is_some()),
            faults: Mutex::new(faults),
            epoch: Instant::now(),
            engine_wakes_at: AtomicU64::new(0),
            last_post_at: AtomicU64::new(0),
            held_since: AtomicU64::new(0),
            transmit_left: AtomicBool::new(false),
            held_posts: AtomicU32::new(0),
            posts_since_signaled: AtomicU32::new(0),
            polled_idle: AtomicBool::new(false),
            burst_posts: AtomicU32::new(0),
            streaming: AtomicBool::new(false),
            rx_storage: Mutex::new(RxStorage {
                bufs: vec![vec![0u8; MAX_RECEIVE]; MAX_BATCH],
                meta: [Received {
                    len: 0,
                    from: bind,
                    truncated: false,
                    segment: 0,
                    traffic_class: 0,
                }; MAX_BATCH],
            }),
            waiters: AtomicUsize::new(0),
            progress_fd: EventFd::new()?,
            received: AtomicU64::new(0),
            rx_oversize: AtomicU64::new(0),
            tx_failed: AtomicU64::new(0),
            counters_at_close: config.counters_at_close,
            cm: Mutex::new(cm),
            cm_dirty: AtomicBool::new(true),
            cm_deadline: AtomicU64::new(0),
            cm_fd: EventFd::new()?,
            comm_est: Mutex::new(Vec::new()),
            groups: Mutex::new(Vec::new()),
            groups_changed: EventFd::new()?,
        });
        let engine_shared = Arc::clone(&shared);
        let engine = std::thread::Builder::new()
            .name("softroce-engine".into())
            .spawn(move || engine(engine_shared))?;
        Ok(Self {
            shared,
            engine: Some(engine),
            multicast_rx: Mutex::new(None),
            started_by: std::process::id(),
        })
    }

    /// `ibv_attach_mcast`: attach the QP in the core, then receive the group's traffic: the
    /// device joins the IP group (on the interface of its address) with its first QP. A
    /// group of the other IP family is attached as rxe attaches it, and nothing arrives
    /// for it (no packet of that family reaches the device). A group that cannot be joined
    /// (out of sockets) undoes the attach with ENOMEM.
    pub fn attach_mcast(&self, qp: QpHandle, mgid: Gid, lid: u16) -> VerbsResult<()> {
        let mut hca = self.shared.lock_hca_for_verb();
        let before = hca.multicast_groups().contains(&mgid);
        hca.attach_mcast(qp, mgid, lid)?;
        let group = SocketAddr::new(mgid.to_ip(), hca.config().udp_port);
        if before || group.is_ipv4() != hca.config().ip.is_ipv4() {
            return Ok(());
        }
        let socket = match RoceSocket::bind_group(group, hca.config().ip) {
            Ok(s) => s,
            Err(e) => {
                let _ = hca.detach_mcast(qp, mgid, lid);
                return Err(VerbsError::NoResources {
                    verb: "attach_mcast",
                    reason: format!("cannot join IP multicast group {}: {e}", group.ip()),
                });
            }
        };
        lock(&self.shared.groups).push((mgid, Arc::new(socket)));
        drop(hca);
        let _ = self.shared.groups_changed.notify();
        let mut rx = lock(&self.multicast_rx);
        if rx.is_none() {
            let shared = Arc::clone(&self.shared);
            match std::thread::Builder::new()
                .name("softroce-mcast".into())
                .spawn(move || multicast_receiver(shared))
            {
                Ok(t) => *rx = Some(t),
                Err(e) => {
                    drop(rx);
                    let _ = self.detach_mcast(qp, mgid, lid);
                    return Err(VerbsError::NoResources {
                        verb: "attach_mcast",
                        reason: format!("cannot start the multicast receiver: {e}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: the device leaves the IP group with the group's last QP.
    pub fn detach_mcast(&self, qp: QpHandle, mgid: Gid, lid: u16) -> VerbsResult<()> {
        let mut hca = self.shared.lock_hca_for_verb();
        hca.detach_mcast(qp, mgid, lid)?;
        if !hca.multicast_groups().contains(&mgid) {
            // Closing the socket (when the receiver lets go of it too) leaves the group.
            lock(&self.shared.groups).retain(|(g, _)| *g != mgid);
            let _ = self.shared.groups_changed.notify();
        }
        Ok(())
    }

    /// The address the device receives on (its owner's port when this process is a guest).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.device_addr
    }

    /// The address this process's packets leave from (the device's, or a guest's own).
    pub fn source_addr(&self) -> SocketAddr {
        self.shared.socket.local_addr()
    }

    /// How this process shares the device ([`crate::share`]): `None` alone, else its slot
    /// and whether it is the owner (binds the device's port).
    pub fn share_slot(&self) -> Option<(u8, bool)> {
        if let Some(o) = self.shared.owner.get() {
            return Some((o.router.slot(), true));
        }
        lock(&self.shared.guest).as_ref().map(|g| (g.slot, false))
    }

    /// Whether this process was a guest whose owner went away and could neither take the
    /// port over nor join a new owner: the device is dead here (DEVICE_FATAL was raised).
    pub fn share_dead(&self) -> bool {
        self.shared.share_dead.load(Ordering::Acquire)
    }

    /// Apply verbs to the device, then send what they produced and signal fds.
    pub fn with<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        let mut hca = self.shared.lock_hca_for_verb();
        send_held(&self.shared, &mut hca);
        // Completions a verb generates (flushes, local operations) carry the time it ran.
        hca.advance_clock(Instant::now());
        let r = f(&mut hca);
        let now = Instant::now();
        pump(&self.shared, &mut hca, now);
        wake_engine_for_timers(&self.shared, &hca);
        r
    }

    /// Post send work (`ibv_post_send` and the `ibv_wr_*` API): as [`Device::with`], except
    /// that inside a burst of posts the packets wait for the application's next verb, up
    /// to `DOORBELL_HOLD` (30 µs; see `BURST_GAP`): a doorbell rung once per burst.
    pub fn post_send<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        let shared = &*self.shared;
        let mut hca = shared.lock_hca_for_verb();
        // A post joining a burst whose packets are held reads no clock: it is held too
        // unless it fills the doorbell or is awaited (those read it below). The burst is
        // at most `DOORBELL_HOLD` old (whoever sends held packets clears `held_posts`), and
        // the clock read was a twentieth of a streaming sender's time.
        let held_posts = shared.held_posts.load(Ordering::Relaxed);
        let joins_held = held_posts > 0;
        let read_clock = |hca: &mut Hca| {
            let now = Instant::now();
            hca.advance_clock(now);
            now
        };
        let clock_read = (!joins_held).then(|| read_clock(&mut hca));
        let signaled_before = hca.signaled_posts();
        let r = f(&mut hca);
        // Only a thread holding the device lock writes these counters: plain loads and
        // stores, no locked read-modify-write per post.
        // A signaled request after a run of unsignaled ones is what the application will
        // wait for: its packets (and those held before them) leave now, not at its next
        // verb. A streaming sender (perftest signals one request in 100) would otherwise
        // post on to its queue's end, then poll idle for an ACK whose request left only
        // with that poll: a third of its time.
        let unsignaled = shared.posts_since_signaled.load(Ordering::Relaxed);
        let awaited = if hca.signaled_posts() == signaled_before {
            shared
                .posts_since_signaled
                .store(unsignaled.saturating_add(1), Ordering::Relaxed);
            false
        } else {
            shared.posts_since_signaled.store(0, Ordering::Relaxed);
            unsignaled >= AWAITED_AFTER_UNSIGNALED
                && shared.polled_idle.swap(false, Ordering::Relaxed)
        };
        let burst_so_far = shared.burst_posts.load(Ordering::Relaxed);
        // Saturating: a stream that never pauses is one burst, however long it runs.
        let burst_next = burst_so_far.saturating_add(1);
        if joins_held && held_posts + 1 < doorbell_batch(burst_next) && !awaited {
            shared.held_posts.store(held_posts + 1, Ordering::Relaxed);
            shared.burst_posts.store(burst_next, Ordering::Relaxed);
            if signal_events(shared, &mut hca) {
                pump(shared, &mut hca, Instant::now());
            }
            return r;
        }
        let now = clock_read.unwrap_or_else(|| read_clock(&mut hca));
        let t = nanos_since(shared.epoch, now).max(1);
        let prev = shared.last_post_at.load(Ordering::Relaxed);
        let in_burst =
            joins_held || (prev != 0 && t.saturating_sub(prev) < BURST_GAP.as_nanos() as u64);
        let burst_posts = if in_burst {
            burst_next
        } else {
            shared
                .streaming
                .store(burst_so_far > STREAMING_BURST, Ordering::Relaxed);
            1
        };
        shared.burst_posts.store(burst_posts, Ordering::Relaxed);
        let sent_at_once = if shared.streaming.load(Ordering::Relaxed) {
            0
        } else {
            SENT_AT_ONCE
        };
        if burst_posts > sent_at_once && held_posts + 1 < doorbell_batch(burst_posts) && !awaited {
            // A held post rings no doorbell: the gap to the next post starts now.
            shared.last_post_at.store(t, Ordering::Relaxed);
            shared.held_posts.store(held_posts + 1, Ordering::Relaxed);
            if shared.held_since.load(Ordering::Relaxed) == 0 {
                // SeqCst with the engine's `engine_wakes_at` (see `engine`): either it sees
                // this burst when it plans its sleep, or this sees the sleep it planned.
                shared.held_since.store(t, Ordering::SeqCst);
                // The engine sends them if nobody comes back in time: make sure it wakes
                // (once per burst, not per post). While the application busy-polls, the
                // engine looks within a few grace periods anyway, and a poller that comes
                // back sends them itself: no wakeup, unless the engine went to its idle
                // sleep before the polling began (a program that polls its CQ empty, posts
                // a burst, then blocks in ibv_get_cq_event or poll(2) on the channel: the
                // burst waited 100 ms).
                let deadline = t + DOORBELL_HOLD.as_nanos() as u64;
                let wakes_at = shared.engine_wakes_at.load(Ordering::SeqCst);
                let engine_looks_soon = match shared.busy_polled(now) {
                    Some(_) => wakes_at <= deadline + BUSY_POLL_LOOKS_WITHIN.as_nanos() as u64,
                    None => wakes_at <= deadline,
                };
                if !engine_looks_soon {
                    let _ = shared.engine_wake.notify();
                }
            }
            // What the post itself completed (a QP in error flushes) is signalled now
            // (a COMM_EST, for the connection manager, by a whole pump).
            if signal_events(shared, &mut hca) {
                pump(shared, &mut hca, now);
            }
            return r;
        }
        pump(shared, &mut hca, now);
        // A thread posting a burst is as busy as a poller: it takes what arrived (the ACKs
        // of its earlier posts) and fires due timers here, once per doorbell, and the
        // engine leaves both to it, as it does for a poller (see `busy_poll`): else the
        // engine wakes for every ACK and takes the lock between its posts. Not for an
        // awaited request's early send: what arrived waits for the burst's next doorbell
        // or poll (taking it here costs a syscall that a CPU-bound sender of many QPs,
        // which waits for no single completion, felt).
        let takes_arrivals = in_burst && !awaited;
        if takes_arrivals {
            shared
                .polled_at
                .store(nanos_since(shared.epoch, now).max(1), Ordering::Release);
            receive_ready(shared, &mut hca);
            if next_timer(shared, &hca).is_some_and(|t| t <= now) {
                fire_timers(shared, &mut hca, now);
                pump(shared, &mut hca, now);
            }
        }
        // The gap to the next post is the application's, not the time this doorbell took:
        // building and sending 64 packets takes longer than `BURST_GAP`, and so did one
        // packet's syscall on a loaded VM (9 us), after which every post of a stream looked
        // like a burst's first and left in a syscall of its own (0.4 against 0.67 M msg/s).
        let done = nanos_since(shared.epoch, Instant::now()).max(1);
        shared.last_post_at.store(done, Ordering::Relaxed);
        if !takes_arrivals {
            // The timers the send armed are the engine's unless the application polls.
            wake_engine_for_timers(shared, &hca);
        }
        r
    }

    /// Post receive work (`ibv_post_recv`, `ibv_post_srq_recv`): as [`Device::with`],
    /// except that a receive queue never has anything to send (a posted receive is only
    /// consumed by an arrival), so only what the post completed (a QP in error flushes it)
    /// is signalled: a ping-pong posts one per round trip.
    pub fn post_recv<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        let shared = &*self.shared;
        let mut hca = shared.lock_hca_for_verb();
        send_held(shared, &mut hca);
        hca.advance_clock(Instant::now());
        let r = f(&mut hca);
        if shared.waiters.load(Ordering::SeqCst) > 0 {
            let _ = shared.progress_fd.notify();
        }
        if signal_events(shared, &mut hca) {
            pump(shared, &mut hca, Instant::now());
        }
        r
    }

    /// `ibv_query_rt_values_ex`'s raw clock: the device clock now (CLOCK_MONOTONIC
    /// nanoseconds, see [`crate::clock`]), never behind a completion already stamped.
    pub fn raw_clock(&self) -> u64 {
        let mut hca = self.shared.lock_hca_for_verb();
        hca.advance_clock(Instant::now());
        hca.clock()
    }

    /// `ibv_reg_mr`: register `len` bytes at `addr` after checking, as pinning would, that
    /// every page is mapped with the access the flags need (EFAULT otherwise; EINVAL for a
    /// zero length), so no remote access to the region can fault the process.
    ///
    /// # Safety
    /// The memory must stay mapped, with the same protection, until the MR is deregistered.
    pub unsafe fn reg_mr(
        &self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<(MrHandle, MrKeys)> {
        // SAFETY: forwarded contract.
        self.with(|h| unsafe { crate::user_memory::register_checked(h, pd, addr, len, access) })
    }

    /// `ibv_rereg_mr` with the pages of the new registration checked
    /// ([`crate::user_memory::reregister_checked`]).
    ///
    /// # Safety
    /// As [`Device::reg_mr`] for a new range.
    pub unsafe fn rereg_mr(
        &self,
        mr: MrHandle,
        pd: Option<PdHandle>,
        range: Option<(*mut u8, usize)>,
        access: Option<AccessFlags>,
    ) -> VerbsResult<MrKeys> {
        // SAFETY: forwarded contract.
        self.with(|h| unsafe { crate::user_memory::reregister_checked(h, mr, pd, range, access) })
    }

    /// Run `f` on the device until it returns `Some` (at most `timeout` in total).
    ///
    /// The waiting thread drives the receive path itself: it drains the socket when
    /// datagrams are waiting and otherwise sleeps in `poll` on the socket, so a message
    /// for it wakes it directly instead of waking the engine, which then wakes it (one
    /// context switch less on every arrival). Progress made by others while it sleeps
    /// (the engine, timers, other threads' verbs) wakes it through the progress fd.
    pub fn wait_for<R>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&mut Hca) -> Option<R>,
    ) -> Option<R> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut hca = self.shared.lock_hca_for_verb();
                send_held(&self.shared, &mut hca);
                if let Some(r) = f(&mut hca) {
                    pump(&self.shared, &mut hca, Instant::now());
                    return Some(r);
                }
                if receive_ready(&self.shared, &mut hca) > 0 {
                    // What arrived may have set a timer (a held ACK) the engine must know.
                    wake_engine_for_timers(&self.shared, &hca);
                    continue;
                }
                if timeout.is_zero() {
                    // A non-blocking look: no sleep.
                    return None;
                }
                // This thread sleeps: timers are the engine's again.
                self.shared.hand_back_to_engine();
                // Counted before the lock is released: whoever makes progress next sees it.
                self.shared.waiters.fetch_add(1, Ordering::SeqCst);
            }
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or(Duration::ZERO);
            let _ = wait_socket_or_progress(&self.shared, left.min(Duration::from_millis(10)));
            let hca = self.shared.lock_hca_for_verb();
            self.shared.waiters.fetch_sub(1, Ordering::SeqCst);
            let _ = self.shared.progress_fd.try_consume();
            drop(hca);
            if left.is_zero() {
                // One last look happened before the sleep; the deadline has passed.
                return None;
            }
        }
    }

    /// One look of a busy-polling application (`ibv_poll_cq`): run `f`; when it found
    /// nothing (`is_empty`), receive one batch of waiting datagrams and fire due timers in
    /// this thread, then run `f` again. While threads call this, the engine leaves the
    /// socket and the timers to them (see the module comment), so an arrival costs no
    /// wakeup and no lock hand-off.
    pub fn busy_poll<R>(
        &self,
        mut f: impl FnMut(&mut Hca) -> R,
        is_empty: impl Fn(&R) -> bool,
    ) -> R {
        let shared = &*self.shared;
        let mut hca = shared.lock_hca_for_verb();
        let now = Instant::now();
        shared
            .polled_at
            .store(nanos_since(shared.epoch, now).max(1), Ordering::Release);
        send_held(shared, &mut hca);
        let r = f(&mut hca);
        if !is_empty(&r) {
            // Taking completions sends nothing and signals nothing: no pump (a ping-pong
            // polls twice per round trip, a streaming sender once per completion).
            return r;
        }
        let mut progressed = receive_ready(shared, &mut hca) > 0;
        if next_timer(shared, &hca).is_some_and(|t| t <= now) {
            fire_timers(shared, &mut hca, now);
            pump(shared, &mut hca, now);
            progressed = true;
        }
        if progressed {
            // What arrived may have set a timer (a held ACK) that must fire even if this
            // thread stops polling now. An engine that fell asleep before this thread
            // began polling sleeps up to 100 ms: it is woken (once; from then on it looks
            // within `BUSY_POLL_LOOKS_WITHIN` of the last poll, and is left alone).
            wake_engine_if_later(shared, &hca, BUSY_POLL_LOOKS_WITHIN);
        }
        if progressed {
            f(&mut hca)
        } else {
            shared.polled_idle.store(true, Ordering::Relaxed);
            r
        }
    }

    /// Create a completion channel with its pollable fd.
    pub fn create_comp_channel(&self) -> io::Result<(ChannelHandle, Arc<EventFd>)> {
        let fd = Arc::new(EventFd::new()?);
        let ch = self.with(|h| h.create_comp_channel());
        lock(&self.shared.channel_fds).insert(ch, Arc::clone(&fd));
        Ok((ch, fd))
    }

    /// Destroy a completion channel (EBUSY while CQs use it).
    pub fn destroy_comp_channel(&self, ch: ChannelHandle) -> VerbsResult<()> {
        self.with(|h| h.destroy_comp_channel(ch))?;
        lock(&self.shared.channel_fds).remove(&ch);
        Ok(())
    }

    /// Put `plan` in force from now on (`None`: no faults), replacing any plan and its
    /// counters; datagrams the old plan still holds are delivered.
    pub fn set_fault_plan(&self, plan: Option<FaultPlan>) {
        let mut held = Vec::new();
        let mut faults = lock(&self.shared.faults);
        if let Some(old) = faults.as_mut() {
            let far = Instant::now() + Duration::from_secs(3600);
            old.release(far, Direction::Tx, &mut held);
        }
        *faults = plan.map(started_injector);
        self.shared
            .faults_on
            .store(faults.is_some(), Ordering::Release);
        drop(faults);
        send_now(&self.shared, &mut held);
        let _ = self.shared.engine_wake.notify();
    }

    /// Every counter of the device as `(name, value)`: the core's (rxe's `hw_counters`
    /// names first, then drops by reason), then the driver's own `drop_oversize`,
    /// `drop_send_failed` and `unmapped_bytes` ([`crate::guarded_copy`]).
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut all: Vec<_> = self.with(|h| h.counters().iter().collect());
        all.push((
            "drop_oversize",
            self.shared.rx_oversize.load(Ordering::Relaxed),
        ));
        all.push((
            "drop_send_failed",
            self.shared.tx_failed.load(Ordering::Relaxed),
        ));
        // Process-wide: the memory belongs to the process, not to one device.
        all.push(("unmapped_bytes", crate::guarded_copy::unmapped_bytes()));
        if let Some(o) = self.shared.owner.get() {
            let c = &o.router.counters;
            all.push(("share_forwarded", c.forwarded.load(Ordering::Relaxed)));
            all.push(("drop_share_queue", c.forward_drops.load(Ordering::Relaxed)));
            all.push(("drop_share_msg", c.bad_messages.load(Ordering::Relaxed)));
            all.push(("share_refused", c.refused.load(Ordering::Relaxed)));
        } else if let Some(g) = lock(&self.shared.guest).as_ref() {
            all.push(("drop_share_msg", g.bad_datagrams.load(Ordering::Relaxed)));
        }
        all
    }

    /// [`Device::counters`] as `name=value` pairs separated by spaces, followed by what the
    /// fault injector did when faults are configured (`injected: …`).
    pub fn counters_line(&self) -> String {
        let mut line = self
            .counters()
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(f) = self.fault_counters() {
            line.push_str(&format!(" {f}"));
        }
        line
    }

    /// What the fault injector did, if faults are configured.
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        lock(&self.shared.faults)
            .as_ref()
            .map(FaultInjector::counters)
    }

    /// The fd of the async event queue (readable while events are queued).
    pub fn async_fd(&self) -> &EventFd {
        &self.shared.async_fd
    }

    /// `ibv_get_cq_event`: the next completion event on `ch`, waiting up to `timeout`
    /// (`None`: forever; zero: don't wait, EAGAIN when none).
    pub fn get_cq_event(
        &self,
        ch: ChannelHandle,
        timeout: Option<Duration>,
    ) -> VerbsResult<(CqHandle, u64)> {
        let fd =
            lock(&self.shared.channel_fds)
                .get(&ch)
                .cloned()
                .ok_or(VerbsError::StaleHandle {
                    verb: "get_cq_event",
                    kind: ChannelHandle::KIND,
                })?;
        self.wait_event(&fd, timeout, "get_cq_event", |hca| {
            let ev = hca.get_cq_event(ch)?;
            Ok((ev, hca.channel_pending(ch).unwrap_or(0) > 0))
        })
    }

    /// Signal `fd` too whenever an async event is queued (until `fd` is dropped).
    pub fn watch_async_events(&self, fd: &Arc<EventFd>) {
        lock(&self.shared.async_watchers).push(Arc::downgrade(fd));
    }

    /// The caller is about to sleep on an fd of its own until an event: the engine must
    /// receive what it waits for (a busy-polling thread may have been doing that).
    pub fn before_waiting(&self) {
        self.shared.hand_back_to_engine();
        // What the caller posted last and the device holds for its next verb goes now,
        // as in `wait_event`.
        if self.shared.held_since.load(Ordering::Acquire) != 0 {
            send_held(&self.shared, &mut self.shared.lock_hca_for_verb());
        }
    }

    /// `ibv_get_async_event`, waiting up to `timeout` like [`Device::get_cq_event`].
    pub fn get_async_event(&self, timeout: Option<Duration>) -> VerbsResult<AsyncEvent> {
        let fd = &self.shared.async_fd;
        self.wait_event(fd, timeout, "get_async_event", |hca| {
            let ev = hca.get_async_event()?;
            Ok((ev, hca.async_event_pending()))
        })
    }

    // ---- connection manager --------------------------------------------------------

    /// Send every ACK the device holds back for its QPs' next packets now
    /// ([`Hca::send_held_acks`]): for an application that turns to connection management.
    pub fn send_held_acks(&self) {
        self.with(Hca::send_held_acks);
    }

    /// Readable while connection manager events wait (a `rdma_event_channel`'s fd).
    pub fn cm_fd(&self) -> &EventFd {
        &self.shared.cm_fd
    }

    /// Run `f` on the device's connection manager (`listen`, `reject`, `send_rtu`,
    /// `establish`, `disconnect`, `destroy`, `delay_response`, getters …) with the current
    /// time, then send the MADs it produced and queue its events. Connects and accepts
    /// go through [`Device::cm_connect`] and [`Device::cm_accept`], which also keep the
    /// driver's books.
    pub fn with_cm<R>(&self, f: impl FnOnce(&mut CmEndpoint, Instant) -> R) -> R {
        let now = Instant::now();
        self.with(|_| {
            let mut cm = self.shared.cm_for_work();
            let r = f(&mut cm.endpoint, now);
            if let Some(o) = self.shared.owner.get() {
                o.router.set_own_listens(cm.endpoint.listeners().collect());
            } else if let Some(g) = lock(&self.shared.guest).as_ref() {
                // The owner routes REQs for our listens here; in force before we return.
                let wanted = cm.endpoint.listeners().collect();
                if let Err(e) = g.sync_listens(&wanted) {
                    tracing::warn!(error = %e, "registering listens with the device's owner");
                    eprintln!("softroce: {e}");
                }
            }
            r
        })
    }

    /// Accept REQs and SIDR_REQs for `service_id`: `listen` on the connection manager, and
    /// on a device shared by several processes only if no other process listens on it
    /// (`AlreadyListening` otherwise, as binding a port another process listens on fails).
    pub fn cm_listen(&self, service_id: u64) -> Result<(), CmError> {
        self.with(|_| {
            let mut cm = self.shared.cm_for_work();
            if let Some(o) = self.shared.owner.get()
                && !cm.endpoint.is_listening(service_id)
                && !o.router.claim_listen(service_id)
            {
                return Err(CmError::AlreadyListening(service_id));
            }
            cm.endpoint.listen(service_id)?;
            if let Some(g) = lock(&self.shared.guest).as_ref() {
                let wanted = cm.endpoint.listeners().collect();
                if let Err(e) = g.sync_listens(&wanted) {
                    tracing::debug!(error = %e, "the device's owner refused a listen");
                    let _ = cm.endpoint.stop_listening(service_id);
                    return Err(CmError::AlreadyListening(service_id));
                }
            }
            Ok(())
        })
    }

    /// Send a REQ to the connection manager listening at `peer` (its address and the
    /// UDP port of its device); `params.remote_gid` is taken from `peer`.
    pub fn cm_connect(&self, peer: SocketAddr, params: ConnectParams) -> Result<ConnId, CmError> {
        let now = Instant::now();
        self.with(|_| self.shared.cm_for_work().connect(now, peer, params))
    }

    /// Send a SIDR_REQ (UD address resolution) to the connection manager listening at
    /// `peer` (its address and the UDP port of its device); `params.remote_gid` is taken
    /// from `peer`.
    pub fn cm_sidr_resolve(&self, peer: SocketAddr, params: SidrParams) -> Result<ConnId, CmError> {
        let now = Instant::now();
        self.with(|_| self.shared.cm_for_work().sidr_resolve(now, peer, params))
    }

    /// Accept a `ConnectRequest` with a REP. Data arriving on `params.local_qpn` before
    /// the RTU establishes the connection (COMM_EST), as with rdma_cm.
    pub fn cm_accept(&self, id: ConnId, params: AcceptParams) -> Result<(), CmError> {
        let now = Instant::now();
        self.with(|_| self.shared.cm_for_work().accept(now, id, params))
    }

    /// The next connection manager event, waiting up to `timeout` (`None`: forever;
    /// zero: don't wait). `None` when none came in time.
    pub fn cm_get_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        if timeout.is_none_or(|t| !t.is_zero()) {
            // The caller may sleep: the engine must receive what it waits for.
            self.shared.hand_back_to_engine();
        }
        loop {
            {
                let mut cm = lock(&self.shared.cm);
                let ev = cm.take_event();
                if !cm.events_pending() {
                    let _ = self.shared.cm_fd.try_consume();
                }
                if ev.is_some() {
                    return ev;
                }
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return None,
                },
                None => None,
            };
            let _ = self.shared.cm_fd.wait_readable(left);
        }
    }

    /// Where the connection manager at `gid` listens (address and UDP port), as given to
    /// [`Device::cm_connect`]; else `gid`'s address on this device's own port.
    pub fn cm_peer_addr(&self, gid: Gid) -> SocketAddr {
        lock(&self.shared.cm).peer_addr(gid)
    }

    /// What the connection manager did: its counters, MADs of other classes QP1
    /// received, requests refused because events were left untaken.
    pub fn cm_counters(&self) -> (CmCounters, u64, u64) {
        let cm = lock(&self.shared.cm);
        (*cm.endpoint.counters(), cm.non_cm_mads, cm.refused_backlog)
    }

    /// Take an event with `take` (which also says whether more are queued), sleeping on
    /// `fd` while there is none, up to `timeout` (`None`: forever; zero: EAGAIN at once).
    /// `fd` is drained once the queue is empty, so it is readable exactly while events wait.
    fn wait_event<T>(
        &self,
        fd: &EventFd,
        timeout: Option<Duration>,
        verb: &'static str,
        mut take: impl FnMut(&mut Hca) -> VerbsResult<(T, bool)>,
    ) -> VerbsResult<T> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let may_sleep = timeout.is_none_or(|t| !t.is_zero());
        if may_sleep {
            // The caller may sleep: the engine must receive what it waits for.
            self.shared.hand_back_to_engine();
        }
        loop {
            let mut hca = self.shared.lock_hca_for_verb();
            if may_sleep {
                // What the caller posted last and the device holds for its next verb goes
                // now: this is that verb, and the completion it waits for needs it.
                send_held(&self.shared, &mut hca);
            }
            match take(&mut hca) {
                Ok((ev, more)) => {
                    if !more {
                        let _ = fd.try_consume();
                    }
                    return Ok(ev);
                }
                Err(VerbsError::WouldBlock { .. }) => {
                    let _ = fd.try_consume();
                }
                Err(e) => return Err(e),
            }
            drop(hca);
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(VerbsError::WouldBlock { verb }),
                },
                None => None,
            };
            match left {
                Some(left) => {
                    let _ = fd.wait_readable(Some(left));
                }
                // Waiting without end is the C verbs' read of the event file: a signal
                // without SA_RESTART ends it with EINTR.
                None => match fd.wait_readable_as_read() {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        return Err(VerbsError::Interrupted { verb });
                    }
                    _ => {}
                },
            }
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.inherited() {
            // A fork's copy: its threads exist only in the parent, so joining them would
            // wait forever, and the socket and eventfds are the parent's too. Leave all of
            // it to the parent.
            std::mem::forget(self.engine.take());
            std::mem::forget(lock(&self.multicast_rx).take());
            return;
        }
        self.print_counters_if_asked();
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.engine_wake.notify();
        let _ = self.shared.groups_changed.notify();
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
        if let Some(t) = lock(&self.multicast_rx).take() {
            let _ = t.join();
        }
        // The capture writer flushes when the last reference to the device state drops.
    }
}

impl Device {
    /// `SOFTROCE_COUNTERS=stderr`: the counters, on closing.
    fn print_counters_if_asked(&self) {
        if self.shared.counters_at_close {
            let name = self.with(|h| h.config().name.clone());
            eprintln!(
                "softroce counters {name} {}: {}",
                self.local_addr(),
                self.counters_line()
            );
        }
    }

    /// Whether this is a copy a `fork()`ed child inherited: no engine runs it here (only in
    /// the parent), so the child must start a device of its own (a guest of the parent's,
    /// on the same address) rather than use this one.
    pub fn inherited(&self) -> bool {
        self.started_by != std::process::id()
    }

    /// What closing the device would do, for a process that exits with it open (exit runs
    /// no destructors; librdmacm never closes the devices it opens): send the ACKs it
    /// holds and the connection manager's farewells, print the counters when asked (`SOFTROCE_COUNTERS=stderr`) and flush and close
    /// the pcap capture, so its last packets are not lost. Skips a capture that another
    /// thread is writing at that moment.
    pub fn finish_at_exit(&self) {
        // exit() may run from a signal handler that interrupted a verb holding the device
        // lock (libinfinipath, which libfabric loads, exits from its SIGTERM handler): wait
        // for the lock briefly, never forever, or the process could not be terminated.
        // The engine gives way to a waiting verb: so does it to the exit.
        self.shared.verbs_waiting.fetch_add(1, Ordering::SeqCst);
        let hca = lock_within(&self.shared.hca, EXIT_LOCK_WAIT);
        self.shared.verbs_waiting.fetch_sub(1, Ordering::SeqCst);
        let free = hca.is_some();
        if let Some(mut hca) = hca {
            // A NIC would have sent them long before: a program that exits without
            // destroying its QPs must not leave the peer resending its last message
            // until its retries run out.
            hca.send_held_acks();
            // Nor leave a connected peer waiting out its DREQ's retries (or forever): the
            // kernel destroys the rdma_cm ids of an exiting process, which says goodbye.
            if let Some(mut cm) = lock_within(&self.shared.cm, EXIT_LOCK_WAIT) {
                cm.destroy_all(&mut hca);
            }
            pump(&self.shared, &mut hca, Instant::now());
        }
        if self.shared.counters_at_close {
            if free {
                self.print_counters_if_asked();
            } else {
                eprintln!(
                    "softroce counters {}: not printed: the device was busy when the process exited",
                    self.local_addr()
                );
            }
        }
        if let Some(Ok(mut capture)) = self.shared.capture.as_ref().map(|c| c.try_lock()) {
            // Flushed here, so a failure is said; later packets are not captured.
            if let Some(mut file) = capture.take().map(CaptureWriter::into_inner)
                && let Err(e) = io::Write::flush(&mut file)
            {
                eprintln!("softroce: packet capture incomplete: writing its end failed: {e}");
            }
        }
    }
}

impl Shared {
    /// The fault plan's lock, taken only while a plan is in force.
    fn fault_plan(&self) -> Option<MutexGuard<'_, Option<FaultInjector>>> {
        self.faults_on
            .load(Ordering::Acquire)
            .then(|| lock(&self.faults))
    }

    /// The connection manager, for a verb or a timer that may give it work: the next
    /// pump drives it (see `cm_dirty`). Called with `hca` locked.
    fn cm_for_work(&self) -> MutexGuard<'_, CmAgent> {
        self.cm_dirty.store(true, Ordering::Relaxed);
        lock(&self.cm)
    }

    /// Whether an application thread busy-polled within [`BUSY_POLL_GRACE`] of `now`.
    fn busy_polled(&self, now: Instant) -> Option<u64> {
        let at = self.polled_at.load(Ordering::Acquire);
        let grace_ends = at.saturating_add(BUSY_POLL_GRACE.as_nanos() as u64);
        (at != 0 && nanos_since(self.epoch, now) < grace_ends).then_some(grace_ends)
    }

    /// Whether an application thread busy-polled within `within` of `now`.
    fn polled_within(&self, now: Instant, within: Duration) -> bool {
        let at = self.polled_at.load(Ordering::Acquire);
        at != 0 && nanos_since(self.epoch, now) < at.saturating_add(within.as_nanos() as u64)
    }

    /// When held posts must leave if the application has not come back (see [`BURST_GAP`]).
    fn held_deadline(&self) -> Option<Instant> {
        let since = self.held_since.load(Ordering::SeqCst);
        (since != 0).then(|| self.epoch + Duration::from_nanos(since) + DOORBELL_HOLD)
    }

    /// A thread that was busy-polling is about to sleep: the engine takes the socket and
    /// the timers back now rather than when the grace period ends.
    fn hand_back_to_engine(&self) {
        if self.polled_at.swap(0, Ordering::AcqRel) != 0
            && !self.engine_watches_socket.load(Ordering::Acquire)
        {
            let _ = self.engine_wake.notify();
        }
    }
}

/// Sleep up to `timeout` (with nanosecond precision: a held ACK's 100 us must not become
/// a millisecond) until woken, or a datagram waits when `watch_socket`. Returns whether the
/// socket is readable.
fn engine_sleep(shared: &Shared, watch_socket: bool, timeout: Duration) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd: shared.engine_wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            // A negative fd is ignored by ppoll: the busy poller owns the socket.
            fd: if watch_socket {
                shared.socket.as_raw_fd()
            } else {
                -1
            },
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            // A guest's records from the owner arrive with its datagrams.
            fd: if watch_socket { guest_fd(shared) } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: three pollfds (negative fds ignored) and a timespec for the duration of the call; no signal mask.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 3, &ts, std::ptr::null()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if fds[0].revents != 0 {
        let _ = shared.engine_wake.try_consume();
    }
    Ok(fds[1].revents != 0 || fds[2].revents != 0)
}

/// Wait up to `spin` for a datagram without sleeping: look at the socket (and the wake fd)
/// without blocking until one is there. True when the socket became readable; false when
/// the spin ran out or something else needs the engine (it then sleeps as usual).
fn engine_spin(shared: &Shared, spin: Duration) -> bool {
    let until = Instant::now() + spin;
    let guest = guest_fd(shared);
    loop {
        let mut fds = [
            shared.socket.as_raw_fd(),
            guest,
            shared.engine_wake.as_raw_fd(),
        ]
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: three pollfds (a negative fd is ignored) for the duration of the call;
        // zero timeout.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        if r != 0 {
            return r > 0 && fds[2].revents == 0;
        }
        if Instant::now() >= until {
            return false;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// A guest's connection carrying forwarded datagrams (-1: none to watch).
fn guest_fd(shared: &Shared) -> std::os::fd::RawFd {
    if let Some(s) = shared.takeover_socket.get() {
        return s.as_raw_fd();
    }
    lock(&shared.guest).as_ref().map_or(-1, Guest::poll_fd)
}

/// Whether joining the port's owner may work on another try: nobody listens yet (an owner
/// between its bind and its listen), or the owner went away mid-registration (it closed
/// the device; the port is free or has a new owner). A refusal (a full slot table), an
/// owner of another user or an answer that is not the protocol is final.
fn join_again(e: &io::Error) -> bool {
    !matches!(
        e.kind(),
        io::ErrorKind::AddrInUse
            | io::ErrorKind::InvalidData
            | io::ErrorKind::TimedOut
            | io::ErrorKind::PermissionDenied
    )
}

/// Where this process's QP numbers begin: somewhere in the first half of its QPN range,
/// drawn from the key seed (so a replayed seed replays them), unless the configuration
/// chose a start other than the default 0x11. A kernel numbers every process's QPs from
/// one host-wide pool, so a program restarted after a crash gets QPNs its peers have not
/// seen; starting each process at 0x11 had a peer's connection manager still holding the
/// crashed one's connection refuse the new one as stale (REJ 10) for seconds.
fn first_qpn(hca: &HcaConfig) -> u32 {
    let default = HcaConfig::new("", hca.ip).first_qpn;
    if hca.first_qpn != default {
        return hca.first_qpn;
    }
    let range = match hca.qpn_slot {
        Some(slot) => qpn_slot_range(slot),
        None => default..0xFF_FFFF,
    };
    let half = ((range.end - range.start) / 2).max(1);
    // A stream of its own (splitmix64's finaliser over the seed and a constant): the QPN is
    // on the wire, the seed the keys come from is not.
    let mut z = hca.seed ^ QPN_SEED_STREAM;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    range.start + (z % u64::from(half)) as u32
}

/// Bind the device's port, or share it: an owner when the port is free, a guest of the
/// process holding it otherwise ([`crate::share`]). Sets the HCA's slot and source port.
fn open_socket(config: &mut DeviceConfig, bind: SocketAddr) -> io::Result<(RoceSocket, Role)> {
    let share = config.share && bind.port() != 0;
    let mut why = String::new();
    // Bounded: the owner may sit between its bind and its listen, or have just exited.
    for _ in 0..100 {
        match RoceSocket::bind(bind) {
            Ok(socket) if share => match Owner::start(bind, 0) {
                Ok(owner) => {
                    config.hca.qpn_slot = Some(0);
                    return Ok((socket, Role::Owner(owner)));
                }
                Err(e) => {
                    tracing::warn!(error = %e, %bind, "cannot offer the device to other processes");
                    return Ok((socket, Role::Alone));
                }
            },
            Ok(socket) => return Ok((socket, Role::Alone)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && share => {
                match Guest::join(bind, None) {
                    Ok(guest) => {
                        let socket = RoceSocket::bind(SocketAddr::new(bind.ip(), 0))?;
                        config.hca.qpn_slot = Some(guest.slot);
                        config.hca.source_port = Some(socket.local_addr().port());
                        return Ok((socket, Role::Guest(guest)));
                    }
                    Err(j) if join_again(&j) => {
                        why = format!("{e}; sharing it failed ({j})");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(j) => {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!("{bind} is in use; sharing it failed: {j}"),
                        ));
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("{bind}: {why} (held by a program other than softroce, or with sharing off)"),
    ))
}

/// Wake the engine when the device now has a timer due before the engine's own wakeup.
fn wake_engine_for_timers(shared: &Shared, hca: &Hca) {
    if shared.busy_polled(Instant::now()).is_some() {
        // The busy poller fires timers itself.
        return;
    }
    wake_engine_if_later(shared, hca, Duration::ZERO);
}

/// Wake the engine if it sleeps more than `late` past the device's next timer.
fn wake_engine_if_later(shared: &Shared, hca: &Hca, late: Duration) {
    let earlier = next_timer(shared, hca).is_some_and(|t| {
        nanos_since(shared.epoch, t + late) < shared.engine_wakes_at.load(Ordering::Acquire)
    });
    if earlier {
        let _ = shared.engine_wake.notify();
    }
}

/// `t` as nanoseconds after `epoch` (0 for earlier instants).
fn nanos_since(epoch: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// How long exit waits for a device lock another thread (or the interrupted one) holds.
const EXIT_LOCK_WAIT: Duration = Duration::from_millis(200);

/// `m`, locked within `wait`, or `None` if it stayed taken that long (a lock seen free
/// and then taken again by another thread before this one's turn is tried again, not
/// given up on).
fn lock_within<T>(m: &Mutex<T>, wait: Duration) -> Option<MutexGuard<'_, T>> {
    let deadline = Instant::now() + wait;
    loop {
        match m.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// [`lock`] unless another thread holds `m`.
fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The longest the engine stands aside for waiting verbs before it takes the HCA itself.
const VERB_TURN_MAX: Duration = Duration::from_millis(1);

impl Shared {
    /// The HCA for a verb. A `std` mutex lets a thread that unlocks take the lock again
    /// before a woken waiter runs, so behind an engine with endless work (a peer asking a
    /// long READ again and again) a verb waited for tens of seconds: waiting verbs are
    /// counted, and the engine gives way to them (`lock_hca_for_engine`).
    fn lock_hca_for_verb(&self) -> MutexGuard<'_, Hca> {
        if let Some(hca) = try_lock(&self.hca) {
            return hca;
        }
        self.verbs_waiting.fetch_add(1, Ordering::SeqCst);
        let hca = lock(&self.hca);
        self.verbs_waiting.fetch_sub(1, Ordering::SeqCst);
        hca
    }

    /// The HCA for the engine thread, after the verbs waiting for it (for at most
    /// `VERB_TURN_MAX`).
    fn lock_hca_for_engine(&self) -> MutexGuard<'_, Hca> {
        if self.verbs_waiting.load(Ordering::Acquire) > 0 {
            let until = Instant::now() + VERB_TURN_MAX;
            while self.verbs_waiting.load(Ordering::Acquire) > 0 && Instant::now() < until {
                std::thread::yield_now();
            }
        }
        lock(&self.hca)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the device state as it was at the panic; the
    // state machine has no invariant a half-finished call could break that later calls rely
    // on for memory safety, so keep going rather than poison every later call.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sleep until a datagram waits on the socket or progress is signalled (at most `timeout`).
fn wait_socket_or_progress(shared: &Shared, timeout: Duration) -> io::Result<()> {
    let mut fds = [
        libc::pollfd {
            fd: shared.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: shared.progress_fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: guest_fd(shared),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: three valid pollfds (or ignored negative fds) for the duration of the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 3, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// The application is back in a verb: posts held since a burst (see `BURST_GAP`) leave
/// before the verb runs, so a doorbell rung before a disconnect or a destroy is heard
/// before it, as on hardware. Called with the device locked.
fn send_held(shared: &Shared, hca: &mut Hca) {
    if shared.held_since.load(Ordering::Relaxed) != 0 {
        pump(shared, hca, Instant::now());
    }
}

/// Send everything queued and signal fds. Called with the device locked.
fn pump(shared: &Shared, hca: &mut Hca, now: Instant) {
    if shared.waiters.load(Ordering::SeqCst) > 0 {
        let _ = shared.progress_fd.notify();
    }
    // The connection manager runs only when it may have work: a MAD came, or a verb or
    // a timer ran it (else the datapath would take its lock twice per pump).
    let mut drive_cm = hca.has_mads() || shared.cm_dirty.load(Ordering::Relaxed);
    let mut drove_cm = false;
    // Twice at most: a COMM_EST found in the second half makes the CM stop its REP.
    for _ in 0..2 {
        if drive_cm {
            shared.cm_dirty.store(false, Ordering::Relaxed);
            drove_cm = true;
            // Signalled under the CM lock, as `cm_get_event` drains it: no lost wakeup.
            let mut cm = lock(&shared.cm);
            if cm.drive(hca, now) {
                let _ = shared.cm_fd.notify();
            }
        }
        if !transmit_and_signal(shared, hca, now) {
            break;
        }
        let mut cm = lock(&shared.cm);
        for qpn in std::mem::take(&mut *lock(&shared.comm_est)) {
            cm.comm_est(qpn);
        }
        drive_cm = true;
    }
    if drove_cm {
        let deadline = lock(&shared.cm)
            .poll_timeout()
            .map_or(0, |t| nanos_since(shared.epoch, t).max(1));
        shared.cm_deadline.store(deadline, Ordering::Relaxed);
    }
}

/// Send what the device built and turn its notifications into fd writes; COMM_ESTs are
/// left for the caller in `comm_est` (bounded by the QPs there are). Returns whether
/// there are any.
fn transmit_and_signal(shared: &Shared, hca: &mut Hca, now: Instant) -> bool {
    shared.held_since.store(0, Ordering::Relaxed);
    shared.held_posts.store(0, Ordering::Relaxed);
    let mut tx = lock(&shared.tx);
    let mut sent_all = false;
    for _ in 0..TX_PER_PUMP {
        let i = tx.n;
        let Some(t) = hca.poll_transmit(now, &mut tx.bufs[i]) else {
            sent_all = true;
            break;
        };
        tx.payloads[i] = t.payload;
        if t.payload.is_some()
            && (t.destination == shared.device_addr || !shared.gso.load(Ordering::Relaxed))
        {
            // Only a GSO send gathers a payload from where it lies: the owner's forwarding
            // to its guests and the datagram-by-datagram path read the buffer (a fault
            // plan too: `send_out` fills them for it).
            fill_payloads(&mut tx, i..i + 1);
        }
        if t.destination == shared.device_addr && forward_own(shared, &tx.bufs[i][..t.len]) {
            if let Some(token) = t.token {
                hca.handle_sent(now, token);
            }
            continue;
        }
        tx.dests[i] = t.destination;
        tx.traffic_classes[i] = t.traffic_class;
        tx.lens[i] = t.len;
        tx.tokens[i] = t.token;
        tx.n += 1;
        if tx.n == TX_BATCH {
            flush(shared, hca, now, &mut tx);
        }
    }
    flush(shared, hca, now, &mut tx);
    drop(tx);
    shared.transmit_left.store(!sent_all, Ordering::Release);
    if !sent_all {
        // The rest after the device lock was let go (the engine comes straight back).
        let _ = shared.engine_wake.notify();
    }
    signal_events(shared, hca)
}

/// The most packets one pump sends while it holds the device lock (16 MiB at a 4096-byte
/// MTU, a few milliseconds): a READ response of a gigabyte is sent in turns, with verbs
/// and arrivals in between, not in one hold of a tenth of a second.
const TX_PER_PUMP: usize = 4096;

/// Turn the device's notifications into fd writes (COMM_ESTs are left in `comm_est`);
/// returns whether any COMM_EST was.
fn signal_events(shared: &Shared, hca: &mut Hca) -> bool {
    let mut comm_est = false;
    while let Some(ev) = hca.poll_event() {
        match ev {
            HcaEvent::CompletionEvent(ch) => {
                if let Some(fd) = lock(&shared.channel_fds).get(&ch) {
                    let _ = fd.notify();
                }
            }
            HcaEvent::ChannelEmptied(ch) => {
                if let Some(fd) = lock(&shared.channel_fds).get(&ch) {
                    let _ = fd.try_consume();
                }
            }
            HcaEvent::AsyncEventQueued => {
                let _ = shared.async_fd.notify();
                lock(&shared.async_watchers).retain(|w| match w.upgrade() {
                    Some(fd) => {
                        let _ = fd.notify();
                        true
                    }
                    None => false,
                });
            }
            HcaEvent::AsyncQueueEmptied => {
                let _ = shared.async_fd.try_consume();
            }
            HcaEvent::CommEst(qpn) => {
                lock(&shared.comm_est).push(qpn);
                comm_est = true;
            }
        }
    }
    comm_est
}

/// An owner's packet to its own port for a guest's QP goes to that guest at once, not
/// through UDP back to itself. Not with a fault plan, which must see every datagram.
fn forward_own(shared: &Shared, datagram: &[u8]) -> bool {
    let Some(router) = shared.owner.get().map(|o| &o.router) else {
        return false;
    };
    if !router.has_guests() || shared.faults_on.load(Ordering::Acquire) {
        return false;
    }
    let Some(slot) = router.route(datagram) else {
        return false;
    };
    if let Some(mut capture) = capturing(shared) {
        capture_with(&mut capture, |w| {
            w.write_roce(
                shared.epoch.elapsed(),
                shared.socket.local_addr(),
                shared.device_addr,
                datagram,
            )
        });
    }
    router.forward(slot, shared.socket.local_addr(), datagram);
    true
}

/// Copy the payloads of `range` that were left in registered memory into their buffers
/// (the fault-safe way: a page gone since reads as zeros, counted), making each datagram
/// whole in its buffer.
fn fill_payloads(tx: &mut TxScratch, range: std::ops::Range<usize>) {
    for i in range {
        if let Some(p) = tx.payloads[i].take() {
            // SAFETY: the core checked the range against a live registration; the copier
            // the driver installed survives it being unmapped since.
            unsafe { p.fill(&mut tx.bufs[i]) };
        }
    }
}

/// Send the datagrams built in `tx` (through the fault injector when one is configured)
/// and tell the device which left.
fn flush(shared: &Shared, hca: &mut Hca, now: Instant, tx: &mut TxScratch) {
    let n = tx.n;
    if n == 0 {
        return;
    }
    tx.failed[..n].fill(false);
    send_out(shared, tx, n);
    tx.n = 0;
    // In the same pump, under the device lock: no completion waits for another thread.
    for i in 0..n {
        let token = tx.tokens[i].take();
        if tx.failed[i] {
            hca.handle_send_failure(now, token);
        } else if let Some(token) = token {
            hca.handle_sent(now, token);
        }
    }
}

/// Send `tx`'s first `n` datagrams, marking in `tx.failed` those the kernel refused. The
/// fault injector (when configured) takes them all: what it later fails to send is only
/// counted.
fn send_out(shared: &Shared, tx: &mut TxScratch, mut n: usize) {
    let mut faults = shared.fault_plan();
    if let Some(inj) = faults.as_mut().and_then(|f| f.as_mut()) {
        // Decided in place: what passes leaves as it would without a plan (GSO included),
        // so a plan costs bandwidth only through the faults it injects. What the plan
        // withholds moves behind what passes, its token along: the network lost it, not
        // the host, so its request completes as sent.
        // A plan that may keep or change the bytes gets payloads left in place copied in
        // first; one that only drops reads the headers, always in the buffer.
        if !inj.only_drops() {
            fill_payloads(tx, 0..n);
        }
        let now = Instant::now();
        let src = shared.socket.local_addr();
        let mut kept = 0;
        for i in 0..n {
            let len = tx.lens[i];
            if let Verdict::Pass { len } =
                inj.filter(now, Direction::Tx, src, tx.dests[i], &mut tx.bufs[i][..len])
            {
                tx.bufs.swap(kept, i);
                tx.lens.swap(kept, i);
                tx.lens[kept] = len;
                tx.dests.swap(kept, i);
                tx.traffic_classes.swap(kept, i);
                tx.tokens.swap(kept, i);
                tx.payloads.swap(kept, i);
                kept += 1;
            }
        }
        n = kept;
    }
    drop(faults);
    if n == 0 {
        return;
    }
    let gso = shared.gso.load(Ordering::Relaxed);
    let mut failed = tx.failed;
    let unsent = if gso {
        send_segmented(shared, tx, n, &mut failed)
    } else {
        0
    };
    if unsent == n {
        tx.failed = failed;
        return;
    }
    fill_payloads(tx, unsent..n);
    let batch: [(SocketAddr, &[u8], u8); TX_BATCH] = std::array::from_fn(|i| {
        (
            tx.dests[i],
            &tx.bufs[i][..if i < n { tx.lens[i] } else { 0 }],
            tx.traffic_classes[i],
        )
    });
    if gso {
        // What GSO did not send (it was refused) was captured as segments already.
        send_uncaptured(shared, &batch[unsent..n], &mut failed[unsent..n]);
    } else {
        send_all(shared, &batch[..n], &mut failed[..n]);
    }
    tx.failed = failed;
}

/// Send `tx`'s first `n` datagrams as UDP GSO groups: runs of datagrams for one peer, all
/// as long as the first but the last. Segment `k` of a group leaves with IPv4 ID `k` (the
/// kernel counts up from the first's 0), so its ICRC is recomputed for that ID, in place:
/// each segment is what a peer checking the real header (rxe) accepts, and one iovec per
/// datagram (the kernel pays per iovec). Returns the index of the first datagram not sent
/// because the kernel refused GSO (then off for good; those datagrams get their ID-0
/// ICRCs back for sending one by one), or `n`; marks the datagrams of groups it refused
/// otherwise in `failed`.
fn send_segmented(shared: &Shared, tx: &mut TxScratch, n: usize, failed: &mut [bool]) -> usize {
    let local = shared.socket.local_addr();
    let mut groups = SmallVec::new();
    let mut id0_icrcs = [None; TX_BATCH];
    gso_groups(
        local,
        shared.socket.gso_segments(),
        tx,
        n,
        &mut groups,
        &mut id0_icrcs,
    );
    if let Some(mut capture) = capturing(shared) {
        capture_with(&mut capture, |w| {
            fill_payloads(tx, 0..n);
            let ts = shared.epoch.elapsed();
            for &(first, end, _) in &groups {
                for (k, j) in (first..end).enumerate() {
                    let data = &tx.bufs[j][..tx.lens[j]];
                    w.write_gso_segment(ts, local, tx.dests[j], data, k as u16)?;
                }
            }
            Ok(())
        });
    }
    let refused_from = send_groups(shared, tx, n, &groups, failed);
    restore_id0_icrcs(tx, refused_from..n, &id0_icrcs);
    refused_from
}

/// Cut `tx`'s first `n` datagrams into GSO groups (first datagram, end, segment length) of
/// at most `max_segments` (what the socket's kernel takes) and give each segment after a group's first the ICRC of its IPv4 ID, in place; the
/// ICRCs they had (for ID 0) go to `id0_icrcs`.
fn gso_groups(
    local: SocketAddr,
    max_segments: usize,
    tx: &mut TxScratch,
    n: usize,
    groups: &mut SendGroups,
    id0_icrcs: &mut [Option<[u8; 4]>; TX_BATCH],
) {
    let mut i = 0;
    while i < n {
        let (dest, seg) = (tx.dests[i], tx.lens[i]);
        let mut end = i + 1;
        let mut bytes = seg;
        // One GSO send is one IP header: its datagrams share the traffic class too.
        while end < n
            && tx.dests[end] == dest
            && tx.traffic_classes[end] == tx.traffic_classes[i]
            && tx.lens[end] <= seg
            && tx.lens[end - 1] == seg
            && end - i < max_segments
            && bytes + tx.lens[end] <= MAX_GSO_BYTES
        {
            bytes += tx.lens[end];
            end += 1;
        }
        if end - i > 1 && dest.is_ipv4() {
            let ep = softroce_wire::icrc::UdpEndpoints::between(local, dest);
            for (k, j) in (i..end).enumerate().skip(1) {
                let len = tx.lens[j];
                let Some(at) = len.checked_sub(4) else {
                    continue;
                };
                let icrc = &mut tx.bufs[j][at..len];
                let built: [u8; 4] = icrc.try_into().unwrap_or_default();
                let first = u32::from_le_bytes(built);
                let adjusted = softroce_wire::icrc::gso_segment_icrc(&ep, first, at, k as u16);
                icrc.copy_from_slice(&adjusted.to_le_bytes());
                id0_icrcs[j] = Some(built);
            }
        }
        groups.push((i, end, seg));
        i = end;
    }
}

/// (first datagram, end, segment length) of each GSO send of a flush.
type SendGroups = SmallVec<[(usize, usize, usize); TX_BATCH]>;

/// Give the datagrams in `range` back the ICRCs [`gso_groups`] replaced: they leave one by
/// one, with ID 0.
fn restore_id0_icrcs(
    tx: &mut TxScratch,
    range: std::ops::Range<usize>,
    id0_icrcs: &[Option<[u8; 4]>; TX_BATCH],
) {
    for j in range {
        if let Some(built) = id0_icrcs[j] {
            let len = tx.lens[j];
            tx.bufs[j][len - 4..len].copy_from_slice(&built);
        }
    }
}

/// Hand `groups` of `tx`'s first `n` datagrams to the kernel, one UDP GSO send per group
/// ([`send_segmented`] says what it returns).
fn send_groups(
    shared: &Shared,
    tx: &mut TxScratch,
    n: usize,
    groups: &[(usize, usize, usize)],
    failed: &mut [bool],
) -> usize {
    // Small-segment groups first go end to end into `coalesced` (bounded: TX_BATCH
    // datagrams of at most COALESCE_SEGMENT bytes).
    let coalesce =
        |&(first, end, seg): &(usize, usize, usize)| end - first > 1 && seg <= COALESCE_SEGMENT;
    tx.coalesced.clear();
    for g in groups.iter().filter(|g| coalesce(g)) {
        for j in g.0..g.1 {
            tx.coalesced.extend_from_slice(&tx.bufs[j][..tx.lens[j]]);
        }
    }
    let tx = &*tx;
    // Only as many entries as used: a ping-pong sends one or two datagrams per flush, and
    // setting up a whole batch's worth showed in its latency.
    // Up to three per datagram (header, payload in place, pad and ICRC): on the stack.
    const _: () = assert!(3 * TX_BATCH <= 512);
    let mut iovs: SmallVec<[io::IoSlice<'_>; 512]> = SmallVec::new();
    let mut iov_ranges: SmallVec<[(usize, usize); TX_BATCH]> = SmallVec::new();
    let mut at = 0;
    for g in groups {
        let start = iovs.len();
        if coalesce(g) {
            let bytes: usize = (g.0..g.1).map(|j| tx.lens[j]).sum();
            iovs.push(io::IoSlice::new(&tx.coalesced[at..at + bytes]));
            at += bytes;
        } else {
            for j in g.0..g.1 {
                let datagram = &tx.bufs[j][..tx.lens[j]];
                let Some(p) = tx.payloads[j] else {
                    iovs.push(io::IoSlice::new(datagram));
                    continue;
                };
                // SAFETY: the core checked the range against a live registration and read it
                // for the ICRC just now; only the kernel reads it (a page unmapped since
                // makes the send fail with EFAULT, handled below).
                let payload = unsafe { std::slice::from_raw_parts(p.addr as *const u8, p.len) };
                iovs.push(io::IoSlice::new(&datagram[..p.at]));
                iovs.push(io::IoSlice::new(payload));
                iovs.push(io::IoSlice::new(&datagram[p.at + p.len..]));
            }
        }
        iov_ranges.push((start, iovs.len()));
    }
    // Pushed in place: collecting built the vector elsewhere and then moved it, copying
    // its whole inline storage (3 KiB) on every flush.
    let mut batch: SmallVec<[SendGroup<'_>; TX_BATCH]> = SmallVec::new();
    for (&(first, end, seg), &(from, to)) in groups.iter().zip(&iov_ranges) {
        batch.push(SendGroup {
            dest: tx.dests[first],
            iov: &iovs[from..to],
            segment: if end - first > 1 { seg as u16 } else { 0 },
            traffic_class: tx.traffic_classes[first],
        });
    }
    let ngroups = groups.len();
    let mut sent = 0;
    // Bounded retries, as in `send_all`.
    for _ in 0..1000 {
        let offered = (ngroups - sent).min(MAX_BATCH);
        let mut full = false;
        match shared.socket.send_groups(&batch[sent..ngroups]) {
            Ok(k) => {
                sent += k;
                full = k < offered;
            }
            Err(e) if batch[sent].segment > 0 && e.raw_os_error() != Some(libc::EFAULT) => {
                tracing::debug!(error = %e, "UDP GSO refused; sending datagram by datagram");
                shared.gso.store(false, Ordering::Relaxed);
                return groups[sent].0;
            }
            Err(e) => {
                // Counted, never silent: every datagram of the group is lost; RC
                // retransmits them, UC and UD requests complete in error. (EFAULT: the
                // application unmapped a payload's memory after its ICRC was taken; the
                // resend finds the hole and reads it as zeros, as pinned pages would.)
                let (first, end, _) = groups[sent];
                tracing::warn!(error = %e, "sending a datagram failed (drop_send_failed)");
                shared
                    .tx_failed
                    .fetch_add((end - first) as u64, Ordering::Relaxed);
                failed[first..end].fill(true);
                sent += 1;
            }
        }
        if sent >= ngroups {
            break;
        }
        // A call takes at most MAX_BATCH groups: only a full socket buffer is waited for.
        if full {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    n
}

/// Send datagrams as they are (faults already applied).
fn send_now(shared: &Shared, bufs: &mut Vec<(SocketAddr, Vec<u8>)>) {
    // What a fault plan held back leaves with traffic class 0 (the plan keeps no more).
    let batch: Vec<(SocketAddr, &[u8], u8)> =
        bufs.iter().map(|(d, b)| (*d, b.as_slice(), 0)).collect();
    // The device let go of these when the injector took them: failures are only counted.
    send_all(shared, &batch, &mut vec![false; batch.len()]);
    bufs.clear();
}

/// Capture and send `batch`, retrying what a full socket buffer refused; marks in `failed`
/// what the kernel refused.
fn send_all(shared: &Shared, batch: &[(SocketAddr, &[u8], u8)], failed: &mut [bool]) {
    if batch.is_empty() {
        return;
    }
    if let Some(mut capture) = capturing(shared) {
        capture_with(&mut capture, |w| {
            let ts = shared.epoch.elapsed();
            let src = shared.socket.local_addr();
            for (dst, data, _) in batch {
                w.write_roce(ts, src, *dst, data)?;
            }
            Ok(())
        });
    }
    send_uncaptured(shared, batch, failed);
}

/// Send `batch`, retrying what a full socket buffer refused; marks in `failed` what the
/// kernel refused.
fn send_uncaptured(shared: &Shared, batch: &[(SocketAddr, &[u8], u8)], failed: &mut [bool]) {
    if batch.is_empty() {
        return;
    }
    let mut sent = 0;
    // Bounded retries: a full socket buffer drains within milliseconds on loopback.
    for _ in 0..1000 {
        let offered = (batch.len() - sent).min(MAX_BATCH);
        let mut full = false;
        match shared.socket.send_batch(&batch[sent..]) {
            Ok(n) => {
                sent += n;
                full = n < offered;
            }
            Err(e) => {
                // Counted, never silent: RC retransmits it, UC and UD requests complete
                // in error (the device is told in `flush`).
                tracing::warn!(error = %e, "sending a datagram failed (drop_send_failed)");
                shared.tx_failed.fetch_add(1, Ordering::Relaxed);
                if let Some(f) = failed.get_mut(sent) {
                    *f = true;
                }
                sent += 1;
            }
        }
        if sent >= batch.len() {
            break;
        }
        // A call takes at most MAX_BATCH datagrams: only a full socket buffer is waited for.
        if full {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Hand datagrams received at `local` (the device's address, or a multicast group's, which
/// the ICRC covers) with their sources to the device, or, in an owner, those for a guest to
/// that guest. Multicast is never forwarded: every process on the device receives the
/// group on a socket of its own.
fn deliver<'a>(
    shared: &Shared,
    hca: &mut Hca,
    now: Instant,
    local: SocketAddr,
    datagrams: impl IntoIterator<Item = (SocketAddr, &'a [u8], u8)>,
) {
    let router = shared
        .owner
        .get()
        .map(|o| &o.router)
        .filter(|r| r.has_guests() && !local.ip().is_multicast());
    for (src, payload, traffic_class) in datagrams {
        if let Some(r) = router
            && let Some(slot) = r.route(payload)
        {
            r.forward(slot, src, payload);
            continue;
        }
        hca.handle_datagram(
            now,
            IncomingDatagram {
                src,
                dst: local.ip(),
                payload,
                traffic_class,
                ipv4_id: None,
            },
        );
    }
}

/// Receive one batch of waiting datagrams (without blocking), process them and send what
/// they produced. Called with the device locked; returns how many were received.
fn receive_ready(shared: &Shared, hca: &mut Hca) -> usize {
    let forwarded = receive_from_owner(shared, hca);
    let mut n = receive_udp(shared, hca, &shared.socket);
    if let Some(s) = shared.takeover_socket.get() {
        n += receive_udp(shared, hca, s);
    }
    if forwarded > 0 && n == 0 {
        pump(shared, hca, Instant::now());
    }
    forwarded + n
}

/// A guest: take the datagrams the owner forwarded (one batch, without blocking). Returns
/// how many records were read; the owner's exit kills the device here.
fn receive_from_owner(shared: &Shared, hca: &mut Hca) -> usize {
    if !shared.guest_on.load(Ordering::Acquire) {
        return 0;
    }
    let guest = lock(&shared.guest);
    let Some(g) = guest.as_ref() else {
        return 0;
    };
    let mut buf = lock(&shared.guest_rx);
    let now = Instant::now();
    let local = shared.device_addr;
    let mut capture = capturing(shared);
    let ts = shared.epoch.elapsed();
    let (n, lost) = g.receive(&mut buf, MAX_BATCH, |src, payload| {
        if payload.len() > MAX_DATAGRAM {
            shared.rx_oversize.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Some(slot) = capture.as_deref_mut() {
            capture_with(slot, |w| capture_received(w, ts, src, local, payload));
        }
        // The owner forwards the bytes only: a guest sees traffic class 0.
        hca.handle_datagram(
            now,
            IncomingDatagram {
                src,
                dst: local.ip(),
                payload,
                traffic_class: 0,
                ipv4_id: None,
            },
        );
    });
    if lost {
        // The engine takes the port over or joins whoever did (not under the device lock:
        // it waits for the other guests).
        tracing::info!(addr = %local, "the process owning the device exited");
        shared.failover_needed.store(true, Ordering::Release);
        let _ = shared.engine_wake.notify();
        return n + 1;
    }
    n
}

/// The pcap capture, locked, when the device captures and its writer is still open (at
/// exit [`Device::finish_at_exit`] takes the writer out).
fn capturing(
    shared: &Shared,
) -> Option<MutexGuard<'_, Option<CaptureWriter<io::BufWriter<std::fs::File>>>>> {
    shared.capture.as_ref().map(|c| lock(c))
}

/// Capture a received datagram. A socket does not show the IPv4 ID a datagram came with,
/// and GSO senders (we are one) number segments up from 0: the ID the ICRC was computed for
/// is the one the capture shows, so the capture verifies as the wire did.
fn capture_received(
    w: &mut CaptureWriter<io::BufWriter<std::fs::File>>,
    ts: Duration,
    from: SocketAddr,
    local: SocketAddr,
    datagram: &[u8],
) -> io::Result<()> {
    let ep = softroce_wire::icrc::UdpEndpoints::between(from, local);
    match softroce_wire::icrc::verify_udp_socket(&ep, datagram) {
        Ok(softroce_wire::icrc::IcrcCheck::RecoveredIpv4Id {
            id,
            dont_fragment: true,
        }) => w.write_gso_segment(ts, from, local, datagram, id),
        _ => w.write_roce(ts, from, local, datagram),
    }
}

/// Write to the capture with `write`; the first failure (a full disk, `/dev/full`) is said
/// once and ends the capture, rather than every datagram after it failing unseen.
fn capture_with(
    slot: &mut Option<CaptureWriter<io::BufWriter<std::fs::File>>>,
    write: impl FnOnce(&mut CaptureWriter<io::BufWriter<std::fs::File>>) -> io::Result<()>,
) {
    if let Some(w) = slot.as_mut()
        && let Err(e) = write(w)
    {
        eprintln!("softroce: packet capture stopped: writing it failed: {e}");
        *slot = None;
    }
}

/// Receive one batch from a UDP socket (see [`receive_ready`]).
fn receive_udp(shared: &Shared, hca: &mut Hca, socket: &RoceSocket) -> usize {
    let local = socket.local_addr();
    let mut storage = lock(&shared.rx_storage);
    let RxStorage { bufs: slots, meta } = &mut *storage;
    // On the stack, and only as many as the call uses (one for a busy poller's usual
    // empty look): no allocation, no batch set up per poll.
    let mut bufs: SmallVec<[&mut [u8]; MAX_BATCH]> = slots
        .iter_mut()
        .take(socket.batch_wanted())
        .map(|b| b.as_mut_slice())
        .collect();
    let n = match socket.recv_batch(&mut bufs, meta) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "receive failed");
            0
        }
    };
    if n == 0 {
        return 0;
    }
    // Only a thread holding the device lock writes it: no locked read-modify-write.
    let received = shared.received.load(Ordering::Relaxed);
    shared.received.store(received + 1, Ordering::Relaxed);
    let now = Instant::now();
    // GRO hands several datagrams over in one buffer: each is a datagram from here on.
    let datagrams = || {
        (0..n).filter(|&i| !meta[i].truncated).flat_map(|i| {
            let (from, traffic_class) = (meta[i].from, meta[i].traffic_class);
            meta[i]
                .datagrams(bufs[i])
                .map(move |d| (from, d, traffic_class))
        })
    };
    if let Some(mut capture) = capturing(shared) {
        capture_with(&mut capture, |w| {
            let ts = shared.epoch.elapsed();
            for (from, d, _) in datagrams() {
                capture_received(w, ts, from, local, d)?;
            }
            Ok(())
        });
    }
    let oversize = (0..n).filter(|&i| meta[i].truncated).count()
        + datagrams()
            .filter(|(_, d, _)| d.len() > MAX_DATAGRAM)
            .count();
    if oversize > 0 {
        // Counted, not silent: a peer with a larger MTU (jumbo frames) looks like loss.
        shared
            .rx_oversize
            .fetch_add(oversize as u64, Ordering::Relaxed);
        tracing::debug!(
            count = oversize,
            limit = MAX_DATAGRAM,
            "dropped datagrams larger than any RoCEv2 packet"
        );
    }
    let mut faults = shared.fault_plan();
    if let Some(inj) = faults.as_mut().and_then(|f| f.as_mut()) {
        // Receive-side rules see the datagram before the device does (and its ICRC check),
        // in the receive buffer itself.
        let mut passed: Vec<(SocketAddr, &[u8], u8)> = Vec::new();
        for (i, buf) in bufs.iter_mut().enumerate().take(n) {
            if meta[i].truncated {
                continue;
            }
            let (from, traffic_class) = (meta[i].from, meta[i].traffic_class);
            for d in meta[i].datagrams_mut(buf) {
                if d.len() > MAX_DATAGRAM {
                    continue;
                }
                if let Verdict::Pass { len } = inj.filter(now, Direction::Rx, from, local, d) {
                    passed.push((from, &d[..len], traffic_class));
                }
            }
        }
        drop(faults);
        deliver(shared, hca, now, local, passed);
    } else {
        drop(faults);
        let received = datagrams().filter(|(_, d, _)| d.len() <= MAX_DATAGRAM);
        deliver(shared, hca, now, local, received);
    }
    drop(bufs);
    drop(storage);
    pump(shared, hca, now);
    n
}

/// Receive on the group sockets until the device stops: sleep in `poll` on them and on
/// `groups_changed`, and hand what arrives to the device as the engine does its own
/// socket's datagrams.
fn multicast_receiver(shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let groups: Vec<Arc<RoceSocket>> = lock(&shared.groups)
            .iter()
            .map(|(_, s)| Arc::clone(s))
            .collect();
        let mut fds: Vec<libc::pollfd> = std::iter::once(shared.groups_changed.as_raw_fd())
            .chain(groups.iter().map(|s| s.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a live array of `fds.len()` pollfds. The timeout bounds how long
        // a missed wakeup could delay a stop.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "multicast receiver: poll failed");
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        if fds[0].revents != 0 {
            let _ = shared.groups_changed.try_consume();
        }
        for (socket, fd) in groups.iter().zip(&fds[1..]) {
            if fd.revents == 0 {
                continue;
            }
            let mut hca = shared.lock_hca_for_engine();
            // Bounded per wakeup: the lock is the application's too.
            for _ in 0..16 {
                if receive_udp(&shared, &mut hca, socket) == 0 {
                    break;
                }
            }
            wake_engine_for_timers(&shared, &hca);
        }
    }
}

fn engine(shared: Arc<Shared>) {
    // The engine's sleeps end at the device's deadlines (a held ACK, held posts, RC
    // timers): the default 50 us of timer slack would stretch a 30 us doorbell hold
    // almost threefold. Best effort: without it the timers are only later.
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects this thread only.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ENGINE_TIMER_SLACK_NS) };
    // Whether the application also waits by spinning on memory (ib_write_lat), so arrivals
    // need the engine even while a thread busy-polls. Learnt, see `ENGINE_NEEDED_AFTER`.
    let mut watch_while_polled = true;
    let mut needless_wakes = 0u32;
    let mut streaming = false;
    let mut polled_through = 0u32;
    while !shared.stop.load(Ordering::SeqCst) {
        if shared.failover_needed.swap(false, Ordering::AcqRel) {
            fail_over(&shared);
        }
        let now = Instant::now();
        if let Some(ends) = shared.busy_polled(now) {
            // A thread is busy-polling: it fires the timers, and it drains the socket while
            // it holds the device lock. The engine only takes the lock when the poller does
            // not hold it (no futex hand-off), and watches the socket only while arrivals
            // have recently found nobody polling: an engine woken by every datagram is one
            // more runnable thread per packet, which on a small machine costs more than
            // the work itself.
            shared
                .engine_watches_socket
                .store(watch_while_polled, Ordering::Release);
            // A poller that kept polling through the engine's last looks will likely keep
            // on: look again later each time (up to 8 grace periods after its last poll).
            // Each look preempts a poller when the machine has no idle core.
            let patience = BUSY_POLL_GRACE * ((1u32 << polled_through.min(3)) - 1);
            let mut wake_at = shared.epoch + Duration::from_nanos(ends) + patience;
            // The poller does not release what a fault plan holds back: the engine does.
            let release = shared
                .fault_plan()
                .and_then(|f| f.as_ref().and_then(FaultInjector::next_release));
            for t in [shared.held_deadline(), release].into_iter().flatten() {
                wake_at = wake_at.min(t);
            }
            // Verbs run after the poller stopped wake the engine for timers due before this.
            shared
                .engine_wakes_at
                .store(nanos_since(shared.epoch, wake_at), Ordering::SeqCst);
            // A burst held after `wake_at` was planned whose poster did not see the new
            // wake time (a store then a load on each side, both SeqCst: one sees the other).
            if let Some(held) = shared.held_deadline() {
                wake_at = wake_at.min(held);
            }
            let left = wake_at.saturating_duration_since(now);
            let polled_before = shared.polled_at.load(Ordering::Acquire);
            let received_before = shared.received.load(Ordering::Relaxed);
            let readable = engine_sleep(&shared, watch_while_polled, left).unwrap_or(false);
            if shared.held_deadline().is_some_and(|t| t <= Instant::now())
                || shared.transmit_left.load(Ordering::Acquire)
            {
                // A burst's posts the application did not come back for, or the rest of
                // a transmit longer than one pump (UC messages of megabytes, a large
                // READ's responses): the poller does not send it, and waiting for its
                // grace period to end left a UC stream at a twentieth of its rate.
                let mut hca = shared.lock_hca_for_engine();
                pump(&shared, &mut hca, Instant::now());
            }
            release_faults(&shared, Instant::now());
            // The poller polls now, or ran while the engine slept without a datagram to
            // wake it: it takes what arrives.
            let poller_active = shared.polled_within(Instant::now(), POLLER_ACTIVE)
                || (!readable && shared.polled_at.load(Ordering::Acquire) != polled_before);
            polled_through = if poller_active {
                polled_through.saturating_add(1)
            } else {
                0
            };
            if watch_while_polled && readable {
                // A poller holding the lock is about to drain the socket. Queueing on the
                // mutex would turn its unlock into a futex wake (a system call and an
                // inter-processor interrupt on its critical path): the engine looks again
                // instead, and a poller that keeps holding it soon has the engine stop
                // watching (every such look counts as needless).
                let (got, poller_held_it) = match try_lock(&shared.hca) {
                    Some(mut hca) => (receive_ready(&shared, &mut hca), false),
                    None => (0, true),
                };
                if got > 0 && !poller_active && !poller_held_it {
                    needless_wakes = 0;
                } else {
                    needless_wakes += 1;
                    watch_while_polled = needless_wakes < ENGINE_NEEDED_AFTER;
                }
            } else if watch_while_polled
                && poller_active
                && shared.received.load(Ordering::Relaxed) != received_before
            {
                // Datagrams came while the engine watched, and the poller took every one
                // before the engine looked: each woke the engine for nothing (`ppoll` goes
                // back to sleep without returning when the socket is empty again), and
                // each wakeup cost its sender an inter-processor interrupt. The poller
                // takes what arrives; an arrival it leaves is picked up at the next look.
                watch_while_polled = false;
                needless_wakes = ENGINE_NEEDED_AFTER;
            } else if !watch_while_polled && !poller_active {
                // Not watching, and nobody polled for a whole grace period: whatever
                // waits, the application is not coming for it (it spins on memory).
                if let Some(mut hca) = try_lock(&shared.hca)
                    && receive_ready(&shared, &mut hca) > 0
                {
                    watch_while_polled = true;
                    needless_wakes = 0;
                }
            }
            continue;
        }
        watch_while_polled = true;
        needless_wakes = 0;
        polled_through = 0;
        let (timeout, watch_socket) = {
            let hca = shared.lock_hca_for_engine();
            let now = Instant::now();
            let release = shared
                .fault_plan()
                .and_then(|f| f.as_ref().and_then(FaultInjector::next_release));
            let busy = shared.busy_polled(now);
            // While a thread busy-polls it owns the socket and the timers: sleep until its
            // grace period ends (or a fault plan releases a datagram).
            let due = match busy {
                Some(ends) => Some(shared.epoch + Duration::from_nanos(ends)),
                None => next_timer(&shared, &hca),
            };
            let due = [due, release, shared.held_deadline()]
                .into_iter()
                .flatten()
                .min();
            let mut timeout = due.map_or(Duration::from_millis(100), |t| {
                t.saturating_duration_since(now)
                    .min(Duration::from_millis(100))
            });
            shared
                .engine_wakes_at
                .store(nanos_since(shared.epoch, now + timeout), Ordering::SeqCst);
            // As in the busy-poll branch: a burst held while this was planned.
            if let Some(held) = shared.held_deadline() {
                timeout = timeout.min(held.saturating_duration_since(now));
            }
            shared
                .engine_watches_socket
                .store(busy.is_none(), Ordering::Release);
            (timeout, busy.is_none())
        };
        let slept_from = Instant::now();
        let spun = watch_socket && streaming && engine_spin(&shared, timeout.min(ENGINE_SPIN));
        let readable = match if spun {
            Ok(true)
        } else {
            engine_sleep(&shared, watch_socket, timeout)
        } {
            Ok(r) => r,
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "engine poll failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                false
            }
        };
        // Datagrams that keep arriving sooner than a spin lasts: wait for the next ones
        // spinning, not sleeping (see `ENGINE_SPIN`).
        streaming = readable && slept_from.elapsed() < ENGINE_SPIN;
        // Drain the socket in batches (bounded per wakeup so timers still run).
        for _ in 0..64 {
            if !readable {
                break;
            }
            let mut hca = shared.lock_hca_for_engine();
            if receive_ready(&shared, &mut hca) == 0 {
                break;
            }
        }
        let now = Instant::now();
        release_faults(&shared, now);
        let mut hca = shared.lock_hca_for_engine();
        fire_timers(&shared, &mut hca, now);
        pump(&shared, &mut hca, now);
    }
}

/// Send and deliver what the fault plan held back and whose time has come.
fn release_faults(shared: &Shared, now: Instant) {
    let (mut due_tx, mut due_rx, mut events) = (Vec::new(), Vec::new(), Vec::new());
    match shared.fault_plan().as_mut().and_then(|f| f.as_mut()) {
        Some(inj) if inj.next_release().is_some_and(|t| t <= now) => {
            inj.release(now, Direction::Tx, &mut due_tx);
            inj.release(now, Direction::Rx, &mut due_rx);
            events.extend(std::iter::from_fn(|| inj.poll_event(now)));
        }
        _ => return,
    }
    send_now(shared, &mut due_tx);
    if !due_rx.is_empty() || !events.is_empty() {
        let mut hca = shared.lock_hca_for_engine();
        for event in events {
            tracing::info!(event = event.name(), "fault plan: device event");
            match event {
                DeviceEvent::PortDown => hca.set_port_active(false),
                DeviceEvent::PortUp => hca.set_port_active(true),
                DeviceEvent::DeviceFatal => hca.inject_device_fatal(),
            }
        }
        let due = due_rx.iter().map(|(src, d)| (*src, d.as_slice(), 0));
        deliver(shared, &mut hca, now, shared.device_addr, due);
        pump(shared, &mut hca, now);
    }
}

/// An injector for `plan`, in force from now: its device events count from this moment.
fn started_injector(plan: FaultPlan) -> FaultInjector {
    let mut injector = FaultInjector::new(plan);
    injector.start_events(Instant::now());
    injector
}

/// The owner exited: take its port over (this process becomes the owner, keeping its slot,
/// so its QPNs and connections stay valid) or, when another guest was faster, register
/// with that one in the same slot, listens included. Packets in flight meanwhile are lost
/// (RC retransmits). When neither works the device dies here: DEVICE_FATAL, QPs flushed.
fn fail_over(shared: &Shared) {
    let Some(slot) = lock(&shared.guest).as_ref().map(|g| g.slot) else {
        return;
    };
    let addr = shared.device_addr;
    // Read before the guest lock is taken (the CM is locked before it elsewhere).
    let listens: std::collections::BTreeSet<u64> = lock(&shared.cm).endpoint.listeners().collect();
    let mut why = String::from("no owner appeared in time");
    // Bounded: the guest that wins the port needs a moment before it listens.
    for _ in 0..150 {
        match RoceSocket::bind(addr) {
            Ok(socket) => match Owner::start(addr, slot) {
                Ok(owner) => {
                    owner.router.set_own_listens(listens);
                    let _ = shared.takeover_socket.set(socket);
                    let _ = shared.owner.set(owner);
                    *lock(&shared.guest) = None;
                    shared.guest_on.store(false, Ordering::Release);
                    let _ = shared.progress_fd.notify();
                    tracing::info!(%addr, slot, "took over the device's port from its exited owner");
                    return;
                }
                Err(e) => {
                    why = format!("bound {addr} but cannot offer it to other processes: {e}");
                    break;
                }
            },
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => match Guest::join(addr, Some(slot)) {
                Ok(g) => {
                    if let Err(e) = g.sync_listens(&listens) {
                        tracing::warn!(error = %e, "listening again with the new owner");
                    }
                    *lock(&shared.guest) = Some(g);
                    shared.guest_on.store(true, Ordering::Release);
                    let _ = shared.progress_fd.notify();
                    tracing::info!(%addr, slot, "joined the device's new owner");
                    return;
                }
                Err(j) if join_again(&j) => {
                    why = j.to_string();
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(j) => {
                    why = j.to_string();
                    break;
                }
            },
            Err(e) => {
                why = e.to_string();
                break;
            }
        }
    }
    // Fail loudly rather than wait for packets that will never come.
    shared.share_dead.store(true, Ordering::Release);
    let mut hca = shared.lock_hca_for_engine();
    let name = hca.config().name.clone();
    tracing::error!(device = %name, %addr, reason = %why, "the device's owner exited; no takeover");
    eprintln!(
        "softroce: device {name} ({addr}): the process owning the device exited and this one \
         could not take over ({why}); the device is dead here (IBV_EVENT_DEVICE_FATAL)"
    );
    hca.inject_device_fatal();
    hca.set_port_active(false);
    pump(shared, &mut hca, Instant::now());
}

/// The earliest timer of the device and its connection manager.
fn next_timer(shared: &Shared, hca: &Hca) -> Option<Instant> {
    let cm = match shared.cm_deadline.load(Ordering::Relaxed) {
        0 => None,
        at => Some(shared.epoch + Duration::from_nanos(at)),
    };
    match (hca.poll_timeout(), cm) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Fire the device's and the connection manager's timers due at `now` (the caller pumps).
fn fire_timers(shared: &Shared, hca: &mut Hca, now: Instant) {
    if hca.poll_timeout().is_some_and(|t| t <= now) {
        hca.handle_timeout(now);
    }
    let cm_due = shared.cm_deadline.load(Ordering::Relaxed);
    if cm_due != 0 && cm_due <= nanos_since(shared.epoch, now) {
        shared.cm_for_work().handle_timeout(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softroce_emu_core::*;

    /// Transmit scratch with every buffer a whole datagram long, all bound for `dest`.
    fn scratch(dest: SocketAddr) -> TxScratch {
        TxScratch {
            bufs: vec![vec![0; MAX_DATAGRAM]; TX_BATCH],
            coalesced: Vec::new(),
            dests: [dest; TX_BATCH],
            traffic_classes: [0; TX_BATCH],
            lens: [0; TX_BATCH],
            tokens: [None; TX_BATCH],
            payloads: [None; TX_BATCH],
            failed: [false; TX_BATCH],
            n: 0,
        }
    }

    fn start(ip: &str) -> Device {
        let mut cfg = DeviceConfig::new("t", ip.parse().unwrap());
        cfg.hca.udp_port = 0;
        cfg.pcap = None;
        Device::start(cfg).unwrap()
    }

    #[test]
    fn async_fd_becomes_readable_and_blocking_get_returns_the_event() {
        let dev = start("127.0.0.1");
        dev.async_fd().set_nonblocking(true).unwrap();
        assert!(!dev.async_fd().wait_readable(Some(Duration::ZERO)).unwrap());
        dev.with(|h| h.set_port_active(false));
        assert!(
            dev.async_fd()
                .wait_readable(Some(Duration::from_secs(1)))
                .unwrap()
        );
        let ev = dev.get_async_event(Some(Duration::from_secs(1))).unwrap();
        assert_eq!(ev.event_type, EventType::PortErr);
        assert!(
            !dev.async_fd().wait_readable(Some(Duration::ZERO)).unwrap(),
            "drained"
        );
        assert_eq!(
            dev.get_async_event(Some(Duration::from_millis(5)))
                .unwrap_err()
                .errno(),
            libc::EAGAIN
        );
        dev.with(|h| h.ack_async_event(&ev)).unwrap();
    }

    #[test]
    fn oversize_datagrams_are_counted_as_drops() {
        let dev = start("127.0.0.1");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.send_to(&vec![0u8; MAX_DATAGRAM + 1], dev.local_addr())
            .unwrap();
        peer.send_to(&[0u8; 100], dev.local_addr()).unwrap();
        let count = |name: &str| {
            dev.counters()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
        };
        // The engine picks both up on its own; bounded wait. The small one reaches the core,
        // whose ICRC check drops it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while (count("drop_oversize"), count("drop_icrc")) != (Some(1), Some(1))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(count("drop_oversize"), Some(1));
        assert_eq!(count("drop_icrc"), Some(1), "{}", dev.counters_line());
        let line = dev.counters_line();
        assert!(
            line.starts_with("sent_pkts=0 rcvd_pkts=0 ") && line.contains(" drop_oversize=1"),
            "{line}"
        );
    }

    #[test]
    fn a_flush_of_more_groups_than_one_sendmmsg_takes_sends_every_one_in_order() {
        let dev = start("127.0.0.1");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let dest = peer.local_addr().unwrap();
        // Each datagram longer than the one before: no two make one GSO group, so a full
        // transmit batch is TX_BATCH groups, more than a `sendmmsg` call takes.
        let n = TX_BATCH;
        assert!(n > MAX_BATCH);
        let mut tx = scratch(dest);
        for j in 0..n {
            tx.lens[j] = 40 + j;
            tx.bufs[j][0] = j as u8;
        }
        let mut groups = SendGroups::new();
        let mut id0 = [None; TX_BATCH];
        let max = dev.shared.socket.gso_segments();
        gso_groups(dev.local_addr(), max, &mut tx, n, &mut groups, &mut id0);
        assert_eq!(groups.len(), n, "one group per datagram");
        let mut failed = [false; TX_BATCH];
        assert_eq!(
            send_groups(&dev.shared, &mut tx, n, &groups, &mut failed),
            n
        );
        assert!(failed.iter().all(|f| !f), "nothing refused");
        let mut buf = [0u8; 256];
        for j in 0..n {
            let (len, _) = peer.recv_from(&mut buf).expect("every datagram arrives");
            assert_eq!(
                (len, buf[0]),
                (40 + j, j as u8),
                "datagram {j} in its place"
            );
        }

        // Small datagrams make GSO groups (of 72-byte segments, a shorter one closing the
        // last, then of 60), as long as the kernel takes, each sent from its own stretch of
        // one contiguous copy; a socket without GRO receives them one by one, as built.
        for j in 0..n {
            tx.lens[j] = if j < n / 2 { 72 } else { 60 };
            tx.bufs[j][..tx.lens[j]].fill(j as u8);
        }
        let mut groups = SendGroups::new();
        gso_groups(dev.local_addr(), max, &mut tx, n, &mut groups, &mut id0);
        let want: &[(usize, usize, usize)] = if max > n / 2 {
            &[(0, n / 2 + 1, 72), (n / 2 + 1, n, 60)]
        } else {
            assert_eq!((max, n), (64, 128), "the older kernels' limit");
            &[(0, 64, 72), (64, 66, 72), (66, 128, 60)]
        };
        assert_eq!(&groups[..], want);
        let sent: Vec<Vec<u8>> = (0..n).map(|j| tx.bufs[j][..tx.lens[j]].to_vec()).collect();
        assert_eq!(
            send_groups(&dev.shared, &mut tx, n, &groups, &mut failed),
            n
        );
        assert!(failed.iter().all(|f| !f), "nothing refused");
        for (j, want) in sent.iter().enumerate() {
            let (len, _) = peer.recv_from(&mut buf).expect("every segment arrives");
            assert_eq!(&buf[..len], &want[..], "segment {j} as built");
        }
    }

    #[test]
    fn gso_segments_carry_their_ip_ids_icrc_and_get_id_0s_back_to_leave_alone() {
        use softroce_wire::icrc::{UdpEndpoints, compute_for_gso_segment, compute_for_udp_socket};
        let local: SocketAddr = "127.0.0.1:50001".parse().unwrap();
        let peer: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let other: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        // Five datagrams for `peer` (the last shorter), two for `other`, as the core
        // builds them: each with the ICRC of IPv4 ID 0.
        let plan = [(peer, 80), (peer, 80), (peer, 80), (peer, 80), (peer, 40)]
            .into_iter()
            .chain([(other, 80), (other, 80)])
            .collect::<Vec<_>>();
        let mut tx = scratch(peer);
        let body = |j: usize, len: usize| -> Vec<u8> {
            (0..len - 4).map(|b| (b * 31 + j * 7) as u8).collect()
        };
        for (j, &(dest, len)) in plan.iter().enumerate() {
            let ep = UdpEndpoints::between(local, dest);
            let bytes = body(j, len);
            let icrc = compute_for_udp_socket(&ep, &bytes).unwrap();
            tx.bufs[j][..len - 4].copy_from_slice(&bytes);
            tx.bufs[j][len - 4..len].copy_from_slice(&icrc.to_le_bytes());
            tx.dests[j] = dest;
            tx.lens[j] = len;
        }
        let icrc_of = |tx: &TxScratch, j: usize| {
            let len = tx.lens[j];
            u32::from_le_bytes(tx.bufs[j][len - 4..len].try_into().unwrap())
        };

        let mut groups = SendGroups::new();
        let mut id0 = [None; TX_BATCH];
        gso_groups(
            local,
            MAX_GSO_SEGMENTS,
            &mut tx,
            plan.len(),
            &mut groups,
            &mut id0,
        );
        assert_eq!(&groups[..], &[(0, 5, 80), (5, 7, 80)]);
        for &(first, end, _) in &groups {
            for (k, j) in (first..end).enumerate() {
                let ep = UdpEndpoints::between(local, tx.dests[j]);
                let want = compute_for_gso_segment(&ep, &body(j, tx.lens[j]), k as u16);
                assert_eq!(icrc_of(&tx, j), want.unwrap(), "datagram {j}, segment {k}");
            }
        }

        // The kernel refused GSO from datagram 2 on: those leave alone, with ID 0.
        restore_id0_icrcs(&mut tx, 2..plan.len(), &id0);
        for (j, &(dest, len)) in plan.iter().enumerate() {
            let ep = UdpEndpoints::between(local, dest);
            let want = if j < 2 {
                compute_for_gso_segment(&ep, &body(j, len), j as u16)
            } else {
                compute_for_udp_socket(&ep, &body(j, len))
            };
            assert_eq!(icrc_of(&tx, j), want.unwrap(), "datagram {j}");
        }
    }

    #[test]
    fn address_in_use_is_a_clear_error() {
        let dev = start("127.0.0.1");
        let mut cfg = DeviceConfig::new("t2", "127.0.0.1".parse().unwrap());
        cfg.hca.udp_port = dev.local_addr().port();
        // Sharing off: the port's holder does not offer it (see `share` for sharing).
        cfg.share = false;
        let err = Device::start(cfg).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }
}
