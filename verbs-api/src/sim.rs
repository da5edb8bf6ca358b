//! Deterministic simulation testing of your own RDMA code: devices on one simulated fabric,
//! in virtual time, with seeded faults, that your code drives through ordinary
//! [`Context`]s.
//!
//! ```
//! use std::time::Duration;
//! use softroce_verbs::{sim, QpType};
//!
//! sim::check(20, |fabric| -> Result<(), softroce_verbs::Error> {
//!     let a = fabric.device("a", "10.0.0.1".parse().unwrap())?;
//!     let b = fabric.device("b", "10.0.0.2".parse().unwrap())?;
//!     fabric.set_link_faults("a", "b", "drop=0.05,reorder=0.05")?;
//!     fabric.at(Duration::from_millis(1), |f| f.partition("a", "b"));
//!     fabric.at(Duration::from_millis(150), |f| f.heal("a", "b"));
//!     // ... ordinary softroce-verbs code on `a` and `b` ...
//!     # let _ = (a, b, QpType::Rc);
//!     Ok(())
//! });
//! ```
//!
//! # How time passes
//! Nothing runs by itself: the fabric moves only when something drives it, in the calling
//! thread. The verbs that wait drive it: [`CompletionQueue::poll`](crate::CompletionQueue::poll)
//! that finds nothing takes one step (the next delivery, timer or scheduled action), so a
//! busy-poll loop makes progress; `poll_wait`, `get_cq_event` and `get_async_event` run the
//! fabric until what they wait for happens or their timeout passes in *virtual* time.
//! Posting only queues work; the next step transmits it. ACK timeouts, retries and RNR waits
//! cost virtual time only, so a test of a 500 ms retry-exceeded path takes microseconds.
//! The test itself drives it with [`Fabric::run_for`] and [`Fabric::run_until`].
//!
//! # Connection management
//! Every simulated device runs the IB CM on its QP1, as an emulated device does, so
//! [`Context::connection_manager`] works here too: listen, connect, accept, reject and
//! disconnect in virtual time, with the CM's response timeouts (about 4 s) and fifteen
//! retries costing none of yours. A lost REQ, a partition or a port nobody listens on
//! behave as on a real fabric (retried, [`CmFailure::TimedOut`] or
//! [`CmFailure::Unreachable`], [`CmFailure::Rejected`] with reason 8). One thread plays
//! both sides with the split calls: `start_connect` then `get_request` and
//! `start_accept`, then `Connecting::wait` and `Accepting::wait` (see
//! `tests/sim_cm.rs` and the `sim_request_response` example).
//!
//! [`CmFailure::TimedOut`]: crate::cm::CmFailure::TimedOut
//! [`CmFailure::Unreachable`]: crate::cm::CmFailure::Unreachable
//! [`CmFailure::Rejected`]: crate::cm::CmFailure::Rejected
//!
//! # Determinism
//! A run is a function of the seed and of the code under test: device keys, QP numbers,
//! initial PSNs, every fault decision and the order of events all come from the seed, so
//! the same seed replays the same trace byte for byte ([`Fabric::pcap`]). Several threads
//! may share one fabric (every call takes its lock), but the interleaving is then the
//! threads' own: determinism needs the threads to be deterministic too. Single-threaded
//! tests are the supported mode.
//!
//! # File descriptors
//! Completion channels and the async event queue have real eventfds, readable exactly
//! while an event waits, as on the emulated backend. They only change when the fabric runs,
//! so never block on them in `poll(2)` without a timeout: use `get_cq_event` /
//! `get_async_event` (which run the fabric) instead.
//!
//! # Devices
//! Devices follow the man pages where rxe differs (as emulated devices do): `retry_cnt` 7
//! means seven retries, not "forever" (see [`HcaConfig::retry_cnt_7_is_infinite`]). Every
//! device receives on UDP port 4791 and is reached by its IP address.

use std::fmt;
use std::net::IpAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use softroce_emu::cm::{CmConfig, CmEndpoint, CmEvent};
use softroce_emu::core::{ChannelHandle, Counters, Hca, HcaConfig, HcaEvent};
use softroce_emu::driver::EventFd;
use softroce_emu::driver::cm::{CmAgent, CmHca};
use softroce_emu::faults::{FaultCounters, FaultPlan};
pub use softroce_emu::sim::FabricStats;
use softroce_emu::sim::NodeId;

use crate::backend::Simulated;
use crate::context::Context;
use crate::error::{Error, Result};

/// The environment variable that makes [`check`] run exactly one seed.
pub const SEED_ENV: &str = "SOFTROCE_SIM_SEED";

/// How far an idle fabric's clock moves when a poll finds nothing to do, so that code
/// waiting for the virtual clock still sees it move.
const IDLE_TICK: Duration = Duration::from_millis(1);

/// The most events one wait or `run_*` call processes: far beyond any sane test, it turns
/// a livelock (two devices retrying forever) into a panic naming the seed.
const MAX_STEPS: u64 = 50_000_000;

/// One entry of the event log: what happened, at which virtual time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimEvent {
    /// Virtual time since the fabric was created.
    pub at: Duration,
    /// What happened.
    pub what: String,
}

impl fmt::Display for SimEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>12.6} ms  {}", self.at.as_secs_f64() * 1e3, self.what)
    }
}

/// An action scheduled with [`Fabric::at`].
type Action = Box<dyn FnOnce(&Fabric) + Send>;

struct Scheduled {
    at: Duration,
    seq: u64,
    action: Action,
}

/// A device on the fabric: its node and the fds its verbs signal.
pub(crate) struct DeviceSlot {
    name: String,
    pub(crate) node: NodeId,
    pub(crate) async_fd: Arc<EventFd>,
    pub(crate) channel_fds: Vec<(ChannelHandle, Arc<EventFd>)>,
}

/// Everything behind the fabric's lock.
pub(crate) struct World {
    fabric: softroce_emu::sim::Fabric<CmHca>,
    pub(crate) devices: Vec<DeviceSlot>,
    scheduled: Vec<Scheduled>,
    next_seq: u64,
    log: Vec<SimEvent>,
    /// Draws so far of initial PSNs, the input of the next one.
    psn_draws: u64,
}

impl World {
    pub(crate) fn hca(&mut self, dev: usize) -> &mut Hca {
        &mut self.fabric.node_mut(self.devices[dev].node).hca
    }

    /// Device `dev`'s connection manager.
    pub(crate) fn cm(&mut self, dev: usize) -> &mut CmAgent {
        &mut self.fabric.node_mut(self.devices[dev].node).cm
    }

    /// The virtual clock as the devices see it.
    pub(crate) fn instant(&self) -> std::time::Instant {
        self.fabric.now()
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.fabric.elapsed()
    }

    pub(crate) fn log(&mut self, what: impl Into<String>) {
        let at = self.elapsed();
        self.log.push(SimEvent {
            at,
            what: what.into(),
        });
    }

    /// Turn what the HCAs raised into fd signals (as the real driver's engine does), and
    /// what the fabric lost into log lines.
    pub(crate) fn pump(&mut self) {
        for loss in self.fabric.take_losses() {
            let name = |ip: IpAddr| {
                self.devices
                    .iter()
                    .find(|d| self.fabric.addr(d.node) == ip)
                    .map_or_else(|| ip.to_string(), |d| d.name.clone())
            };
            let packet = match softroce_wire::Bth::new_checked(&loss.head[..]) {
                Ok(bth) => format!(
                    "{} QP {:#x} PSN {}",
                    bth.opcode(),
                    bth.dest_qpn().value(),
                    bth.psn().value()
                ),
                Err(_) => format!("{}-byte datagram", loss.head.len()),
            };
            let what = format!(
                "{} -> {}: {packet} lost ({})",
                name(loss.src.ip()),
                name(loss.dst.ip()),
                loss.reason
            );
            self.log.push(SimEvent { at: loss.at, what });
        }
        let now = self.fabric.now();
        for dev in 0..self.devices.len() {
            let node = self.devices[dev].node;
            // MADs between QP1 and the CM, COMM_EST to the CM, as the driver's pump does.
            self.fabric.node_mut(node).pump(now);
            // Bounded: each HCA queues at most a few notifications per verb or step.
            for _ in 0..1_000_000 {
                let Some(event) = self.fabric.node_mut(node).poll_event() else {
                    break;
                };
                let slot = &self.devices[dev];
                match event {
                    HcaEvent::CompletionEvent(ch) => {
                        if let Some((_, fd)) = slot.channel_fds.iter().find(|(c, _)| *c == ch) {
                            let _ = fd.notify();
                        }
                    }
                    HcaEvent::ChannelEmptied(ch) => {
                        if let Some((_, fd)) = slot.channel_fds.iter().find(|(c, _)| *c == ch) {
                            let _ = fd.try_consume();
                        }
                    }
                    HcaEvent::AsyncEventQueued => {
                        let _ = slot.async_fd.notify();
                        let what = format!("{}: async event queued", slot.name);
                        self.log(what);
                    }
                    HcaEvent::AsyncQueueEmptied => {
                        let _ = slot.async_fd.try_consume();
                    }
                    // Taken by the device's CM in `CmHca::pump`.
                    HcaEvent::CommEst(_) => {}
                }
            }
        }
    }

    fn node_of(&self, name: &str) -> NodeId {
        match self.devices.iter().find(|d| d.name == name) {
            Some(d) => d.node,
            None => {
                let known: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
                panic!("no device named {name:?} on this fabric (devices: {known:?})")
            }
        }
    }

    fn device_index(&self, name: &str) -> usize {
        let node = self.node_of(name);
        self.devices
            .iter()
            .position(|d| d.node == node)
            .unwrap_or(0)
    }

    fn next_action_at(&self) -> Option<Duration> {
        self.scheduled
            .iter()
            .map(|s| (s.at, s.seq))
            .min()
            .map(|k| k.0)
    }

    fn take_next_action(&mut self) -> Option<Scheduled> {
        let i = (0..self.scheduled.len()).min_by_key(|&i| {
            let s = &self.scheduled[i];
            (s.at, s.seq)
        })?;
        Some(self.scheduled.swap_remove(i))
    }

    /// Let the fabric's clock reach `at` (nothing is due before it).
    fn advance_to(&mut self, at: Duration) {
        let now = self.elapsed();
        if at > now {
            self.fabric.advance(at - now);
            self.pump();
        }
    }
}

struct Shared {
    seed: u64,
    world: Mutex<World>,
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Delivered datagrams or fired timers.
    Event,
    /// Ran a scheduled action.
    Action,
    /// The next thing happens after the limit; the clock is now at the limit.
    Limit,
    /// Nothing is left to happen: no datagram in flight, no timer, no scheduled action.
    Idle,
}

/// A simulated fabric: devices, links between every pair of them, a virtual clock, seeded
/// faults. Clone it freely: clones are handles to the same fabric.
#[derive(Clone)]
pub struct Fabric {
    shared: Arc<Shared>,
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.lock();
        f.debug_struct("Fabric")
            .field("seed", &self.shared.seed)
            .field("now", &w.elapsed())
            .field(
                "devices",
                &w.devices.iter().map(|d| &d.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// SplitMix64: turns a seed and a counter into well-spread, reproducible bits.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Fabric {
    /// An empty fabric whose every random choice comes from `seed`: 10 µs one-way latency,
    /// no faults, the clock at zero.
    pub fn new(seed: u64) -> Self {
        let mut fabric = softroce_emu::sim::Fabric::new(mix(seed));
        fabric.record_losses(true);
        Self {
            shared: Arc::new(Shared {
                seed,
                world: Mutex::new(World {
                    fabric,
                    devices: Vec::new(),
                    scheduled: Vec::new(),
                    next_seq: 0,
                    log: Vec::new(),
                    psn_draws: 0,
                }),
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        // A panic in user code while holding the lock leaves the world consistent enough
        // to report (the check helper reads the log after a failure).
        self.shared.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The seed this fabric runs from.
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// Add a device named `name` reachable at `ip`, and open it: the [`Context`] your code
    /// uses. Its keys and QP numbers come from the fabric's seed.
    pub fn device(&self, name: &str, ip: IpAddr) -> Result<Context> {
        self.device_with(HcaConfig::new(name, ip))
    }

    /// Add a device with a full configuration (its `seed` is replaced by one drawn from
    /// the fabric's, so runs still follow the fabric's seed).
    pub fn device_with(&self, mut cfg: HcaConfig) -> Result<Context> {
        let mut w = self.lock();
        if w.devices.iter().any(|d| d.name == cfg.name) {
            return Err(Error::Invalid {
                what: "device name",
                reason: format!("{:?} is already on this fabric", cfg.name),
            });
        }
        for d in &w.devices {
            if w.fabric.addr(d.node) == cfg.ip {
                return Err(Error::Invalid {
                    what: "device address",
                    reason: format!("{} already belongs to device {:?}", cfg.ip, d.name),
                });
            }
        }
        let index = w.devices.len() as u64;
        cfg.seed = mix(self.shared.seed ^ mix(index + 1));
        // Completion timestamps count virtual nanoseconds since the fabric began.
        cfg.clock_epoch = Some(w.instant() - w.elapsed());
        let async_fd = EventFd::new().map_err(|e| Error::io("creating the async event fd", e))?;
        let (name, ip) = (cfg.name.clone(), cfg.ip);
        // As a real device: copies that survive unmapped pages (and implicit ODP).
        softroce_emu::driver::guarded_copy::install();
        let hca = Hca::new(cfg);
        // The CM's IDs and transaction IDs from the device's seed, as on a real device.
        let cm = CmConfig::new(
            hca.gids()[hca.ip_gid_index()],
            hca.query_device().node_guid,
            mix(hca.config().seed ^ 0x636d),
        );
        let cm = CmAgent::new(CmEndpoint::new(cm), hca.config().udp_port);
        let node = w.fabric.add_node(ip, CmHca::new(hca, cm));
        w.devices.push(DeviceSlot {
            name: name.clone(),
            node,
            async_fd: Arc::new(async_fd),
            channel_fds: Vec::new(),
        });
        w.log(format!("device {name} at {ip}"));
        let dev = w.devices.len() - 1;
        drop(w);
        Ok(Context::with_backend(Arc::new(Simulated::new(
            self.clone(),
            dev,
            name,
        ))))
    }

    /// Virtual time since the fabric was created.
    pub fn now(&self) -> Duration {
        self.lock().elapsed()
    }

    /// Set the one-way latency of every link (default 10 µs; [`Fabric::set_link_speed`] sets
    /// one link's).
    pub fn set_latency(&self, latency: Duration) {
        let mut w = self.lock();
        w.fabric.latency = latency;
        w.log(format!("latency {latency:?}"));
    }

    /// Give the link between devices `a` and `b` a one-way latency of its own and, if
    /// `bits_per_second` is set, a bandwidth each way: a datagram then occupies the link
    /// for its size at that rate, queued behind the ones before it, so large transfers
    /// take their serialization time (in virtual time).
    ///
    /// # Panics
    /// If no device is named `a` or `b`.
    pub fn set_link_speed(
        &self,
        a: &str,
        b: &str,
        latency: Duration,
        bits_per_second: Option<u64>,
    ) {
        let mut w = self.lock();
        let (na, nb) = (w.node_of(a), w.node_of(b));
        let shape = softroce_emu::sim::LinkShape {
            latency,
            bits_per_second,
        };
        w.fabric.set_link_shape(na, nb, Some(shape));
        let rate = bits_per_second.map_or_else(|| "unlimited".into(), |b| format!("{b} bit/s"));
        w.log(format!("link {a} <-> {b}: latency {latency:?}, {rate}"));
    }

    /// Put a fault plan on the link between devices `a` and `b`, both ways, in the
    /// language of `SOFTROCE_FAULTS`: `"drop=0.05,reorder=0.1,dup=0.01,corrupt=0.01"`, or
    /// `@plan.toml`. The link behaves as if both devices ran with that plan for their
    /// traffic with each other. The plan's `seed=` is mixed with the fabric's seed, so each
    /// fabric seed meets different faults. A bad spec is refused with the part at fault.
    ///
    /// # Panics
    /// If no device is named `a` or `b` (a typo in the test).
    pub fn set_link_faults(&self, a: &str, b: &str, spec: &str) -> Result<()> {
        let mut plan = parse_plan(spec)?;
        let mut w = self.lock();
        let (na, nb) = (w.node_of(a), w.node_of(b));
        plan.seed = mix(plan.seed
            ^ mix(self.shared.seed)
            ^ mix((na.0.min(nb.0) as u64) << 32 | na.0.max(nb.0) as u64));
        w.fabric.set_link_plan(na, nb, Some(plan));
        w.log(format!("faults {a} <-> {b}: {spec}"));
        Ok(())
    }

    /// Remove the fault plan of the link between `a` and `b`.
    ///
    /// # Panics
    /// If no device is named `a` or `b`.
    pub fn clear_link_faults(&self, a: &str, b: &str) {
        let mut w = self.lock();
        let (na, nb) = (w.node_of(a), w.node_of(b));
        w.fabric.set_link_plan(na, nb, None);
        w.log(format!("faults {a} <-> {b} cleared"));
    }

    /// Put a fault plan on every link (as [`Fabric::set_link_faults`]; link plans apply
    /// after it).
    pub fn set_faults(&self, spec: &str) -> Result<()> {
        let mut plan = parse_plan(spec)?;
        plan.seed = mix(plan.seed ^ mix(self.shared.seed) ^ 0xFAB);
        let mut w = self.lock();
        w.fabric.set_fault_plan(plan);
        w.log(format!("faults everywhere: {spec}"));
        Ok(())
    }

    /// What the plan of the link between `a` and `b` injected so far.
    ///
    /// # Panics
    /// If no device is named `a` or `b`.
    pub fn link_fault_counters(&self, a: &str, b: &str) -> Option<FaultCounters> {
        let w = self.lock();
        w.fabric.link_fault_counters(w.node_of(a), w.node_of(b))
    }

    /// Cut the link between `a` and `b`, both ways: everything sent across is lost until
    /// [`Fabric::heal`].
    ///
    /// # Panics
    /// If no device is named `a` or `b`.
    pub fn partition(&self, a: &str, b: &str) {
        let mut w = self.lock();
        let (na, nb) = (w.node_of(a), w.node_of(b));
        w.fabric.partition(na, nb, true);
        w.log(format!("partition {a} | {b}"));
    }

    /// Restore the link between `a` and `b`.
    ///
    /// # Panics
    /// If no device is named `a` or `b`.
    pub fn heal(&self, a: &str, b: &str) {
        let mut w = self.lock();
        let (na, nb) = (w.node_of(a), w.node_of(b));
        w.fabric.partition(na, nb, false);
        w.log(format!("heal {a} - {b}"));
    }

    /// Take device `name`'s port down (IBV_EVENT_PORT_ERR; nothing is sent or received) or
    /// bring it back up (IBV_EVENT_PORT_ACTIVE).
    ///
    /// # Panics
    /// If no device is named `name`.
    pub fn set_port_active(&self, name: &str, active: bool) {
        let mut w = self.lock();
        let dev = w.device_index(name);
        w.hca(dev).set_port_active(active);
        w.log(format!(
            "{name}: port {}",
            if active { "up" } else { "down" }
        ));
        w.pump();
    }

    /// A catastrophic error on device `name`: IBV_EVENT_DEVICE_FATAL, every QP to ERR.
    ///
    /// # Panics
    /// If no device is named `name`.
    pub fn inject_device_fatal(&self, name: &str) {
        let mut w = self.lock();
        let dev = w.device_index(name);
        w.hca(dev).inject_device_fatal();
        w.log(format!("{name}: device fatal"));
        w.pump();
    }

    /// Run `action` when the virtual clock reaches `at` (since the fabric was created; a
    /// time already past runs at the next step). Actions at the same time run in the order
    /// they were scheduled, before the fabric's own events of that moment.
    pub fn at(&self, at: Duration, action: impl FnOnce(&Self) + Send + 'static) {
        let mut w = self.lock();
        let seq = w.next_seq;
        w.next_seq += 1;
        w.scheduled.push(Scheduled {
            at,
            seq,
            action: Box::new(action),
        });
    }

    /// Take one step: run the next scheduled action, or deliver the next datagrams and fire
    /// the timers due at the next moment something happens. `false`: nothing was left to
    /// happen.
    pub fn step(&self) -> bool {
        self.step_until(None) != Step::Idle
    }

    /// One step that does not move the clock past `limit` (virtual time since creation).
    pub(crate) fn step_until(&self, limit: Option<Duration>) -> Step {
        let action = {
            let mut w = self.lock();
            // Actions due now run before anything is sent now: "partition at t" holds for
            // the packets of moment t.
            let action_next = w.next_action_at();
            let fabric_next = if action_next.is_some_and(|a| a <= w.elapsed()) {
                None
            } else {
                w.fabric.poll_next_event()
            };
            let fabric_next =
                fabric_next.map(|t| t.saturating_duration_since(w.fabric.now()) + w.elapsed());
            let next = match (fabric_next, action_next) {
                (Some(f), Some(a)) => f.min(a),
                (f, a) => match f.or(a) {
                    Some(t) => t,
                    None => return Step::Idle,
                },
            };
            if let Some(limit) = limit
                && next > limit
            {
                w.advance_to(limit);
                return Step::Limit;
            }
            // Ties go to the action, for the same reason.
            if action_next.is_some_and(|a| a <= next) {
                let Some(s) = w.take_next_action() else {
                    return Step::Idle;
                };
                w.advance_to(s.at);
                w.log(format!("scheduled action #{} (due {:?})", s.seq, s.at));
                s.action
            } else {
                w.fabric.step();
                w.pump();
                return Step::Event;
            }
        };
        // Outside the lock: the action calls the fabric's methods.
        action(self);
        Step::Action
    }

    /// Let `d` of virtual time pass, processing everything due meanwhile.
    ///
    /// # Panics
    /// If more than 50 million events happen meanwhile (a livelock in the code under test).
    pub fn run_for(&self, d: Duration) {
        let limit = self.now() + d;
        for _ in 0..MAX_STEPS {
            match self.step_until(Some(limit)) {
                Step::Event | Step::Action => {}
                Step::Limit => return,
                Step::Idle => {
                    self.lock().advance_to(limit);
                    return;
                }
            }
        }
        panic!("run_for({d:?}): more than {MAX_STEPS} events; is something retrying forever?");
    }

    /// Run until `done` holds (checked before each step), at most `limit` of virtual time,
    /// or until nothing is left to happen. Returns whether `done` became true.
    ///
    /// # Panics
    /// If more than 50 million events happen meanwhile.
    pub fn run_until(&self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let limit = self.now() + limit;
        for _ in 0..MAX_STEPS {
            if done(self) {
                return true;
            }
            match self.step_until(Some(limit)) {
                Step::Event | Step::Action => {}
                Step::Limit | Step::Idle => return done(self),
            }
        }
        panic!("run_until: more than {MAX_STEPS} events; is something retrying forever?");
    }

    /// Run until `take` returns something or `timeout` of virtual time passes (`None`:
    /// until nothing is left to happen, which is an error: waiting forever would hang).
    pub(crate) fn wait<R>(
        &self,
        verb: &'static str,
        timeout: Option<Duration>,
        mut take: impl FnMut(&mut World) -> Option<Result<R>>,
    ) -> Result<R> {
        let limit = timeout.map(|t| self.now() + t);
        for _ in 0..MAX_STEPS {
            {
                let mut w = self.lock();
                if let Some(r) = take(&mut w) {
                    return r;
                }
                if limit.is_some_and(|l| w.elapsed() >= l) {
                    return Err(softroce_emu::core::VerbsError::WouldBlock { verb }.into());
                }
            }
            match self.step_until(limit) {
                Step::Event | Step::Action | Step::Limit => {}
                Step::Idle => match limit {
                    Some(l) => self.lock().advance_to(l),
                    None => {
                        let at = self.now();
                        let mut w = self.lock();
                        if let Some(r) = take(&mut w) {
                            return r;
                        }
                        w.log(format!("{verb}: would wait forever"));
                        return Err(Error::SimIdle { verb, at });
                    }
                },
            }
        }
        panic!(
            "{verb}: more than {MAX_STEPS} events while waiting; is something retrying forever?"
        );
    }

    /// Let an idle fabric's clock move a little (after a poll found nothing to do).
    pub(crate) fn idle_tick(&self) {
        let mut w = self.lock();
        let to = w.elapsed() + IDLE_TICK;
        w.advance_to(to);
    }

    /// The next initial PSN (24 bits) from the seed.
    pub(crate) fn draw_psn(&self) -> u32 {
        (self.draw() & 0x00FF_FFFF) as u32
    }

    /// The next random number from the seed (for choices the API makes: PSNs, ports).
    pub(crate) fn draw(&self) -> u64 {
        let mut w = self.lock();
        w.psn_draws += 1;
        mix(self.shared.seed ^ mix(w.psn_draws ^ 0x7053_4e00))
    }

    /// Run `f` on device `dev`'s connection manager at the current virtual time, then
    /// queue what it sends and its events.
    pub(crate) fn with_cm<R>(
        &self,
        dev: usize,
        f: impl FnOnce(&mut CmAgent, std::time::Instant) -> R,
    ) -> R {
        let mut w = self.lock();
        let now = w.instant();
        let r = f(w.cm(dev), now);
        w.pump();
        r
    }

    /// Take device `dev`'s oldest CM event, logging it.
    pub(crate) fn take_cm_event(&self, dev: usize) -> Option<CmEvent> {
        let mut w = self.lock();
        let ev = w.cm(dev).take_event()?;
        let what = format!("{}: CM {}", w.devices[dev].name, cm_event_name(&ev));
        w.log(what);
        Some(ev)
    }

    /// Run the fabric until device `dev`'s CM has an event for the application or
    /// `timeout` of virtual time passed. `false`: the time passed.
    pub(crate) fn wait_cm_event(&self, dev: usize, timeout: Duration) -> bool {
        self.wait("CM event", Some(timeout), |w| {
            w.cm(dev).events_pending().then_some(Ok(()))
        })
        .is_ok()
    }

    /// What the fabric did: datagrams sent, delivered, lost (and why), duplicated.
    pub fn stats(&self) -> FabricStats {
        self.lock().fabric.stats()
    }

    /// Device `name`'s counters (rxe's hw_counters: retransmissions, RNR NAKs …).
    ///
    /// # Panics
    /// If no device is named `name`.
    pub fn counters(&self, name: &str) -> Counters {
        let mut w = self.lock();
        let dev = w.device_index(name);
        w.hca(dev).counters().clone()
    }

    /// Start recording every datagram sent on the fabric, for [`Fabric::pcap`] (or stop,
    /// forgetting the recording).
    pub fn capture(&self, on: bool) {
        self.lock().fabric.set_capture(on);
    }

    /// The recording as a pcap stream (open it with Wireshark or `tshark`): every datagram
    /// as sent, before faults, stamped with virtual time.
    pub fn pcap(&self) -> Vec<u8> {
        self.lock().fabric.pcap()
    }

    /// Write the recording to a pcap file.
    pub fn write_pcap(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.pcap())
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))
    }

    /// The event log: devices added, faults, partitions, scheduled actions, port and device
    /// events, async events and error completions, in virtual time.
    pub fn log(&self) -> Vec<SimEvent> {
        self.lock().log.clone()
    }

    /// Add a line of your own to the event log.
    pub fn note(&self, what: impl Into<String>) {
        self.lock().log(what);
    }

    fn log_tail(&self, n: usize) -> String {
        let w = self.lock();
        let skip = w.log.len().saturating_sub(n);
        let mut out = String::new();
        if skip > 0 {
            out.push_str(&format!("  ... {skip} earlier events\n"));
        }
        for e in &w.log[skip..] {
            out.push_str(&format!("  {e}\n"));
        }
        out
    }
}

/// A CM event as rdma_cm names it, for the event log.
fn cm_event_name(ev: &CmEvent) -> &'static str {
    match ev {
        CmEvent::ConnectRequest { .. } => "CONNECT_REQUEST",
        CmEvent::ConnectResponse { .. } => "CONNECT_RESPONSE",
        CmEvent::Established { .. } => "ESTABLISHED",
        CmEvent::Rejected { .. } => "REJECTED",
        CmEvent::Unreachable { .. } => "UNREACHABLE",
        CmEvent::Disconnected { .. } => "DISCONNECTED",
        CmEvent::TimeWaitExit { .. } => "TIMEWAIT_EXIT",
        _ => "other event",
    }
}

/// A link's plan: packet faults only. Device events are a device's (in the simulator,
/// [`Fabric::set_port_active`] and [`Fabric::inject_device_fatal`] at the step the test
/// chooses), so a plan naming one is refused rather than half applied.
fn parse_plan(spec: &str) -> Result<FaultPlan> {
    let plan = FaultPlan::parse(spec).map_err(|e| Error::Invalid {
        what: "fault plan",
        reason: e.to_string(),
    })?;
    if let Some(e) = plan.events.first() {
        return Err(Error::Invalid {
            what: "fault plan",
            reason: format!(
                "{} is a device event, which a simulated link cannot carry: call \
                 Fabric::set_port_active or Fabric::inject_device_fatal at the step you want",
                e.event.name()
            ),
        });
    }
    Ok(plan)
}

/// A seed whose run failed, with what went wrong and how to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The error the test body returned, or its panic message.
    pub error: String,
    /// Virtual time when it failed.
    pub at: Duration,
    /// The end of the event log.
    pub log_tail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "simulation failed with seed {seed} at {at:?} of virtual time: {error}\n\
             replay exactly this run with {SEED_ENV}={seed}\n\
             last events:\n{log}",
            seed = self.seed,
            at = self.at,
            error = self.error,
            log = self.log_tail,
        )
    }
}

impl std::error::Error for Failure {}

/// Run `body` on a fresh fabric for one seed; its error or panic becomes a [`Failure`].
pub fn run_seed<E: fmt::Display>(
    seed: u64,
    body: impl FnOnce(&Fabric) -> std::result::Result<(), E>,
) -> std::result::Result<(), Failure> {
    let fabric = Fabric::new(seed);
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&fabric)));
    let error = match outcome {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e.to_string(),
        Err(panic) => panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .map_or_else(|| "panicked".to_string(), |m| format!("panicked: {m}")),
    };
    Err(Failure {
        seed,
        error,
        at: fabric.now(),
        log_tail: fabric.log_tail(30),
    })
}

/// Run `body` for each seed in turn, stopping at the first failure. `Ok`: how many passed.
pub fn explore<E: fmt::Display>(
    seeds: impl IntoIterator<Item = u64>,
    mut body: impl FnMut(&Fabric) -> std::result::Result<(), E>,
) -> std::result::Result<u64, Failure> {
    let mut passed = 0;
    for seed in seeds {
        run_seed(seed, &mut body)?;
        passed += 1;
    }
    Ok(passed)
}

/// Run `body` over seeds `0..n_seeds`, each on a fresh fabric; panic at the first failure
/// (so the smallest failing seed: the shortest way to a replay) with its seed, its error
/// and the end of its event log. With `SOFTROCE_SIM_SEED=<n>` set,
/// run exactly seed `n` (to replay a failure, under a debugger or with more logging).
///
/// # Panics
/// On the first failing seed, or if `SOFTROCE_SIM_SEED` is not an unsigned integer.
pub fn check<E: fmt::Display>(
    n_seeds: u64,
    body: impl FnMut(&Fabric) -> std::result::Result<(), E>,
) {
    let seeds: Vec<u64> = match std::env::var(SEED_ENV) {
        Ok(v) => match v.trim().parse() {
            Ok(seed) => vec![seed],
            Err(e) => panic!("{SEED_ENV}={v:?} is not an unsigned integer seed: {e}"),
        },
        Err(_) => (0..n_seeds).collect(),
    };
    if let Err(failure) = explore(seeds, body) {
        panic!("{failure}");
    }
}
