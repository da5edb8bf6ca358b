//! Seeded network faults for a real device and for the simulator.
//!
//! A [`FaultPlan`] is a seed and an ordered list of [`Rule`]s. Each rule matches on the
//! packet (direction, destination QP, opcode class, PSN range, every Nth match) and fires with a
//! probability; the first rule that matches and fires applies its action (drop, duplicate,
//! delay, reorder, corrupt with the ICRC left stale, corrupt with the ICRC recomputed, or
//! truncate) and the rest are skipped. All randomness comes from the seed, so the same
//! traffic meets the same faults.
//!
//! Two written forms, both accepted by `--faults` and `SOFTROCE_FAULTS`:
//! - compact: `drop=P,dup=P,reorder=P,corrupt=P,delay=MS,seed=N[,dir=tx|rx|both]` (P a
//!   probability 0–1; the direction, default `tx`, is relative to the device holding the
//!   plan: its sent or its received datagrams), and device events at set times,
//!   `port_down=MS`, `port_up=MS`, `device_fatal=MS` (milliseconds after the plan takes
//!   effect; each key may repeat: `port_down=2000,port_up=3000` flaps the port for a second);
//! - a TOML file, given as `@path` or a path ending in `.toml`:
//!
//! ```toml
//! seed = 7
//! [[rule]]
//! action = "drop"            # drop | duplicate | delay | reorder | corrupt | corrupt_recompute | truncate
//! probability = 0.5          # default 1
//! direction = "rx"           # tx (default) | rx | both: this device's sent or received datagrams
//! opcode = "ack"             # send | write | read_request | read_response | ack | nak | rnr_nak | atomic | atomic_ack
//! qpn = 17                   # destination QP
//! psn = [100, 200]           # inclusive PSN range
//! every = 3                  # every 3rd matching packet
//! delay_ms = 2.0             # for delay
//! truncate_to = 20           # for truncate
//! [[event]]                  # something that happens to the device itself
//! at_ms = 2000               # after the plan takes effect (the device starts)
//! kind = "port_down"         # port_down | port_up | device_fatal
//! ```
//!
//! A device event is what the hardware reports through `ibv_get_async_event(3)`: the port
//! going down (IBV_EVENT_PORT_ERR; nothing is sent or received until it comes back up)
//! or up again (IBV_EVENT_PORT_ACTIVE), or a catastrophic error (IBV_EVENT_DEVICE_FATAL,
//! every QP in error). A plan in `SOFTROCE_FAULTS` is how a C program under test meets
//! them: the simulator's links take packet faults only.
//!
//! A [`FaultInjector`] applies a plan to datagrams, sans-IO: the driver calls it for every
//! datagram it sends or receives, the simulator for every one it carries.
//!
//! ```
//! use softroce_emu_faults::{Decision, Direction, FaultInjector, FaultPlan};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let plan = FaultPlan::parse("drop=0.3,seed=7")?;
//! let (me, peer) = ("10.0.0.1:4791".parse()?, "10.0.0.2:4791".parse()?);
//! // The fate of 100 datagrams: a pure function of the seed.
//! let fates = || {
//!     let mut injector = FaultInjector::new(plan.clone());
//!     let lost: Vec<bool> = (0..100)
//!         .map(|_| injector.decide(Direction::Tx, me, peer, vec![0; 64]) == Decision::Drop)
//!         .collect();
//!     (lost, injector.counters())
//! };
//! let (lost, counters) = fates();
//! assert_eq!(fates().0, lost, "same seed, same losses");
//! assert_eq!(counters.dropped as usize, lost.iter().filter(|l| **l).count());
//! assert_eq!(counters.seen_tx, 100);
//! # Ok(()) }
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{Aeth, BTH_LEN, Bth, ICRC_LEN, Opcode, Operation, Syndrome};

/// Something that happens to the device itself at a set time (see the crate's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceEvent {
    /// Port 1 goes down: IBV_EVENT_PORT_ERR, and nothing is sent or received.
    PortDown,
    /// Port 1 comes back up: IBV_EVENT_PORT_ACTIVE.
    PortUp,
    /// A catastrophic device error: IBV_EVENT_DEVICE_FATAL, every QP to ERR.
    DeviceFatal,
}

impl DeviceEvent {
    /// The name in both written forms.
    pub fn name(self) -> &'static str {
        match self {
            Self::PortDown => "port_down",
            Self::PortUp => "port_up",
            Self::DeviceFatal => "device_fatal",
        }
    }
}

/// A device event, `after` the plan takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledEvent {
    /// How long after the plan takes effect (the device starts, or the plan is set).
    pub after: Duration,
    /// What happens.
    pub event: DeviceEvent,
}

/// The most device events one plan may schedule: a plan is a test's script, not a log.
pub const MAX_SCHEDULED_EVENTS: usize = 256;

/// The latest a device event may be scheduled (one day, in milliseconds).
pub const MAX_EVENT_AFTER_MS: f64 = 86_400_000.0;

/// `ms` milliseconds as the time of a device event, or why it cannot be one.
fn event_after(ms: f64) -> Result<Duration, String> {
    if (0.0..=MAX_EVENT_AFTER_MS).contains(&ms) {
        Ok(Duration::from_secs_f64(ms / 1000.0))
    } else {
        Err(format!(
            "a device event's time must be within 0..={MAX_EVENT_AFTER_MS} ms (one day)"
        ))
    }
}

/// Add `event` to `events`, within [`MAX_SCHEDULED_EVENTS`].
fn schedule(events: &mut Vec<ScheduledEvent>, event: ScheduledEvent) -> Result<(), String> {
    if events.len() >= MAX_SCHEDULED_EVENTS {
        return Err(format!(
            "more than {MAX_SCHEDULED_EVENTS} device events in one plan"
        ));
    }
    events.push(event);
    Ok(())
}

/// A parsed fault specification.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultSpec {
    /// Probability a datagram is dropped.
    pub drop: f64,
    /// Probability a datagram is sent twice.
    pub duplicate: f64,
    /// Probability a datagram is held back so later ones overtake it.
    pub reorder: f64,
    /// Probability one random bit is flipped (the ICRC must catch it).
    pub corrupt: f64,
    /// Fixed delay added to every datagram.
    pub delay: Duration,
    /// Seed of every random decision.
    pub seed: u64,
    /// Which datagrams the faults hit (`None`: both directions).
    pub direction: Option<Direction>,
    /// Device events, in the order written.
    pub events: Vec<ScheduledEvent>,
}

/// Seeded random faults the simulator applies to every datagram on a link (the
/// [`FaultSpec`] probabilities, without a direction).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LinkFaults {
    /// Probability a datagram is lost.
    pub drop: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by up to `reorder_delay` extra, overtaking others.
    pub reorder: f64,
    /// The most extra delay a reordered datagram gets.
    pub reorder_delay: Duration,
    /// Probability one random bit of the payload is flipped.
    pub corrupt: f64,
}

/// The way a datagram travels, seen from the device whose plan it meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Sent by this device.
    Tx,
    /// Received by this device (faults apply before the ICRC check).
    Rx,
}

/// A spec that does not parse, with the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec at '{part}' (chars {start}..{end}): {reason}")]
pub struct FaultSpecError {
    /// The offending `key=value` (its first 64 characters: see [`excerpt`]).
    pub part: String,
    /// Its start offset in the spec.
    pub start: usize,
    /// Its end offset.
    pub end: usize,
    /// What is wrong.
    pub reason: String,
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut out = Self {
            direction: Some(Direction::Tx),
            ..Self::default()
        };
        let mut start = 0;
        for part in spec.split(',') {
            let end = start + part.len();
            let err = |reason: String| FaultSpecError {
                part: excerpt(part),
                start,
                end,
                reason,
            };
            let trimmed = part.trim();
            if trimmed.is_empty() {
                start = end + 1;
                continue;
            }
            let Some((key, value)) = trimmed.split_once('=') else {
                return Err(err("expected key=value".into()));
            };
            let prob = |v: &str| -> Result<f64, FaultSpecError> {
                let p: f64 = v
                    .parse()
                    .map_err(|_| err(format!("{v:?} is not a number")))?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(err("probability must be within 0..=1".into()))
                }
            };
            match key.trim() {
                "drop" => out.drop = prob(value)?,
                "dup" | "duplicate" => out.duplicate = prob(value)?,
                "reorder" => out.reorder = prob(value)?,
                "corrupt" => out.corrupt = prob(value)?,
                "delay" => {
                    let ms: f64 = value
                        .parse()
                        .map_err(|_| err(format!("{value:?} is not a number of milliseconds")))?;
                    if !(0.0..=10_000.0).contains(&ms) {
                        return Err(err("delay must be within 0..=10000 ms".into()));
                    }
                    out.delay = Duration::from_secs_f64(ms / 1000.0);
                }
                "seed" => {
                    out.seed = value
                        .parse()
                        .map_err(|_| err(format!("{value:?} is not an unsigned integer")))?
                }
                key @ ("port_down" | "port_up" | "device_fatal") => {
                    let event = match key {
                        "port_down" => DeviceEvent::PortDown,
                        "port_up" => DeviceEvent::PortUp,
                        _ => DeviceEvent::DeviceFatal,
                    };
                    let ms: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| err(format!("{value:?} is not a number of milliseconds")))?;
                    let after = event_after(ms).map_err(&err)?;
                    schedule(&mut out.events, ScheduledEvent { after, event }).map_err(&err)?;
                }
                "dir" | "direction" => {
                    out.direction = match value.trim() {
                        "tx" => Some(Direction::Tx),
                        "rx" => Some(Direction::Rx),
                        "both" => None,
                        v => return Err(err(format!("direction {v:?} is not tx, rx or both"))),
                    }
                }
                other => {
                    return Err(err(format!(
                        "unknown key {other:?} (known: drop, dup, reorder, corrupt, delay, seed, dir, port_down, port_up, device_fatal)"
                    )));
                }
            }
            start = end + 1;
        }
        Ok(out)
    }
}

impl FaultSpec {
    /// The compact form as a plan: one catch-all rule per fault, drop first, delay last.
    pub fn plan(&self) -> FaultPlan {
        let mut rules = Vec::new();
        for (p, action) in [
            (self.drop, Action::Drop),
            (self.corrupt, Action::Corrupt),
            (self.duplicate, Action::Duplicate),
            (self.reorder, Action::Reorder),
        ] {
            if p > 0.0 {
                rules.push(Rule::new(action, p, self.direction));
            }
        }
        if !self.delay.is_zero() {
            rules.push(Rule::new(Action::Delay(self.delay), 1.0, self.direction));
        }
        FaultPlan {
            seed: self.seed,
            rules,
            events: self.events.clone(),
        }
    }

    /// The same faults for the in-memory simulator.
    pub fn link_faults(&self) -> LinkFaults {
        LinkFaults {
            drop: self.drop,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_delay: Duration::from_micros(500).max(self.delay),
            corrupt: self.corrupt,
        }
    }
}

/// Which packets a rule applies to, by their BTH (and AETH for ACK kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpcodeClass {
    /// SEND (any variant, RC/UC/UD).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// Positive ACK.
    Ack,
    /// NAK (sequence error, invalid request, access, operational).
    Nak,
    /// RNR NAK.
    RnrNak,
    /// CMP_SWAP or FETCH_ADD.
    Atomic,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAck,
}

impl OpcodeClass {
    fn of(packet: &[u8]) -> Option<Self> {
        let info = Opcode(*packet.first()?).info()?;
        Some(match info.operation {
            Operation::Send => Self::Send,
            Operation::Write => Self::Write,
            Operation::ReadRequest => Self::ReadRequest,
            Operation::ReadResponse => Self::ReadResponse,
            Operation::Acknowledge => {
                let aeth = packet
                    .get(BTH_LEN..)
                    .and_then(|rest| Aeth::new_checked(rest).ok());
                match aeth.map(|a| Syndrome::from_byte(a.syndrome_raw())) {
                    Some(Syndrome::RnrNak { .. }) => Self::RnrNak,
                    Some(Syndrome::Nak(_)) => Self::Nak,
                    _ => Self::Ack,
                }
            }
            Operation::AtomicAcknowledge => Self::AtomicAck,
            Operation::CompareSwap | Operation::FetchAdd => Self::Atomic,
            Operation::Flush | Operation::AtomicWrite | Operation::Cnp => return None,
        })
    }
}

/// What a rule does to a matching packet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Lose it.
    Drop,
    /// Send it twice.
    Duplicate,
    /// Send it after this delay.
    Delay(Duration),
    /// Hold it 100–1000 µs so later packets overtake it.
    Reorder,
    /// Flip one random bit; the ICRC is left stale, so the receiver must drop it.
    Corrupt,
    /// Flip one random bit after the BTH and recompute the ICRC, to test higher layers.
    CorruptRecompute,
    /// Cut it to this many bytes.
    Truncate(usize),
}

/// One rule of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// What happens.
    pub action: Action,
    /// Probability the rule fires when it matches.
    pub probability: f64,
    /// Only packets of this class.
    pub opcode: Option<OpcodeClass>,
    /// Only packets to this destination QP.
    pub qpn: Option<u32>,
    /// Only PSNs in this inclusive range.
    pub psn: Option<(u32, u32)>,
    /// Only every Nth matching packet.
    pub every: Option<u64>,
    /// Only datagrams going this way (`None`: both).
    pub direction: Option<Direction>,
}

impl Rule {
    fn new(action: Action, probability: f64, direction: Option<Direction>) -> Self {
        Self {
            action,
            probability,
            direction,
            opcode: None,
            qpn: None,
            psn: None,
            every: None,
        }
    }

    fn matches(&self, direction: Direction, packet: &[u8]) -> bool {
        if self.direction.is_some_and(|d| d != direction) {
            return false;
        }
        if let Some(class) = self.opcode
            && OpcodeClass::of(packet) != Some(class)
        {
            return false;
        }
        let bth = Bth::new_checked(packet).ok();
        if let Some(qpn) = self.qpn
            && bth.as_ref().map(|b| b.dest_qpn().value()) != Some(qpn)
        {
            return false;
        }
        if let Some((lo, hi)) = self.psn {
            match bth.map(|b| b.psn().value()) {
                Some(psn) if psn >= lo && psn <= hi => {}
                _ => return false,
            }
        }
        true
    }
}

/// A seed and ordered rules.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultPlan {
    /// Seed of every random decision.
    pub seed: u64,
    /// Rules, first match wins.
    pub rules: Vec<Rule>,
    /// Device events, in the order they happen (those at the same time in the order
    /// written).
    pub events: Vec<ScheduledEvent>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    #[serde(default)]
    seed: u64,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleFile>,
    #[serde(default, rename = "event")]
    events: Vec<EventFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EventFile {
    at_ms: f64,
    kind: DeviceEvent,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    action: String,
    probability: Option<f64>,
    opcode: Option<OpcodeClass>,
    qpn: Option<u32>,
    psn: Option<(u32, u32)>,
    every: Option<u64>,
    delay_ms: Option<f64>,
    truncate_to: Option<usize>,
    direction: Option<String>,
}

/// The most a configuration file (`SOFTROCE_CONFIG`, a fault plan) may hold: far more
/// than any real one, and small enough that pointing the variable at `/dev/zero` or a huge
/// file fails at once instead of filling memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// At most 64 characters of `text`, for a message that echoes what the user gave (an
/// environment variable or option may be megabytes long): the rest is cut and marked `…`.
pub fn excerpt(text: &str) -> String {
    let mut shown: String = text.chars().take(64).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// Read the configuration file at `path` as text: it must be a regular file (a FIFO or
/// device could block or never end) of at most `limit` bytes. The error says which of these
/// failed, with the limit; the caller adds the variable and path it came from.
pub fn read_config_file(path: &std::path::Path, limit: u64) -> Result<String, String> {
    use std::io::Read as _;
    // Looked at before it is opened: opening a FIFO for reading blocks until a writer
    // comes, which may be never.
    let before = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !before.is_file() {
        return Err(format!(
            "not a regular file (configuration files must be regular files of at most {limit} bytes)"
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!(
            "not a regular file (configuration files must be regular files of at most {limit} bytes)"
        ));
    }
    let mut text = String::new();
    // Read one byte past the limit: the size in the metadata can change (a growing file, a
    // file in /proc that reports 0), so the read itself is what is bounded.
    let n = file
        .take(limit.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if n as u64 > limit {
        return Err(format!("larger than the limit of {limit} bytes"));
    }
    Ok(text)
}

/// A plan that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultPlanError {
    /// The compact form is wrong.
    #[error(transparent)]
    Spec(#[from] FaultSpecError),
    /// The plan file cannot be read.
    #[error("fault plan {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

impl FaultPlan {
    /// Parse the compact form, or read a TOML plan from `@path` / `*.toml`.
    pub fn parse(spec: &str) -> Result<Self, FaultPlanError> {
        let spec = spec.trim();
        let path = spec
            .strip_prefix('@')
            .or_else(|| spec.ends_with(".toml").then_some(spec));
        match path {
            Some(path) => {
                let text = read_config_file(std::path::Path::new(path), MAX_CONFIG_BYTES).map_err(
                    |reason| FaultPlanError::File {
                        path: path.into(),
                        reason,
                    },
                )?;
                Self::from_toml(&text).map_err(|reason| FaultPlanError::File {
                    path: path.into(),
                    reason,
                })
            }
            None => {
                let mut plan = spec.parse::<FaultSpec>()?.plan();
                plan.events.sort_by_key(|e| e.after);
                Ok(plan)
            }
        }
    }

    /// Parse the TOML form.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let file: PlanFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut rules = Vec::new();
        for (i, r) in file.rules.into_iter().enumerate() {
            let bad = |why: String| format!("rule #{}: {why}", i + 1);
            let p = r.probability.unwrap_or(1.0);
            if !(0.0..=1.0).contains(&p) {
                return Err(bad(format!("probability {p} is not within 0..=1")));
            }
            let action = match r.action.as_str() {
                "drop" => Action::Drop,
                "duplicate" | "dup" => Action::Duplicate,
                "reorder" => Action::Reorder,
                "corrupt" => Action::Corrupt,
                "corrupt_recompute" => Action::CorruptRecompute,
                "delay" => {
                    let ms = r
                        .delay_ms
                        .ok_or_else(|| bad("delay needs delay_ms".into()))?;
                    if !(0.0..=10_000.0).contains(&ms) {
                        return Err(bad(format!("delay_ms {ms} is not within 0..=10000")));
                    }
                    Action::Delay(Duration::from_secs_f64(ms / 1000.0))
                }
                "truncate" => Action::Truncate(
                    r.truncate_to
                        .ok_or_else(|| bad("truncate needs truncate_to".into()))?,
                ),
                other => {
                    return Err(bad(format!(
                        "unknown action {other:?} (drop, duplicate, delay, reorder, corrupt, corrupt_recompute, truncate)"
                    )));
                }
            };
            if r.every == Some(0) {
                return Err(bad("every must be at least 1".into()));
            }
            let direction = match r.direction.as_deref() {
                None | Some("tx") => Some(Direction::Tx),
                Some("rx") => Some(Direction::Rx),
                Some("both") => None,
                Some(other) => {
                    return Err(bad(format!("direction {other:?} is not tx, rx or both")));
                }
            };
            rules.push(Rule {
                direction,
                action,
                probability: p,
                opcode: r.opcode,
                qpn: r.qpn,
                psn: r.psn,
                every: r.every,
            });
        }
        let mut events = Vec::new();
        for (i, e) in file.events.into_iter().enumerate() {
            let bad = |why: String| format!("event #{}: {why}", i + 1);
            let after = event_after(e.at_ms).map_err(bad)?;
            schedule(
                &mut events,
                ScheduledEvent {
                    after,
                    event: e.kind,
                },
            )
            .map_err(bad)?;
        }
        events.sort_by_key(|e| e.after);
        Ok(Self {
            seed: file.seed,
            rules,
            events,
        })
    }
}

/// What an injector did (actions counted over both directions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultCounters {
    /// Sent datagrams seen.
    pub seen_tx: u64,
    /// Received datagrams seen.
    pub seen_rx: u64,
    /// Dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Held back to be overtaken.
    pub reordered: u64,
    /// Bit-flipped (ICRC left stale).
    pub corrupted: u64,
    /// Bit-flipped with the ICRC recomputed.
    pub corrupted_recomputed: u64,
    /// Delayed.
    pub delayed: u64,
    /// Truncated.
    pub truncated: u64,
    /// Lost because the datagrams held back (delayed, reordered, duplicated) were at
    /// their bound ([`MAX_HELD_DATAGRAMS`], [`MAX_HELD_BYTES`]), as a full netem queue
    /// drops.
    pub held_overflow: u64,
}

/// The most datagrams a device's plan holds back at once (netem's default queue limit).
pub const MAX_HELD_DATAGRAMS: usize = 1000;

/// The most bytes a device's plan holds back at once: a peer that makes the device send
/// fast (a long READ) under a long delay must not fill memory.
pub const MAX_HELD_BYTES: usize = 16 << 20;

impl fmt::Display for FaultCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected: seen_tx={} seen_rx={} dropped={} duplicated={} reordered={} corrupted={} corrupted_recomputed={} delayed={} truncated={} held_overflow={}",
            self.seen_tx,
            self.seen_rx,
            self.dropped,
            self.duplicated,
            self.reordered,
            self.corrupted,
            self.corrupted_recomputed,
            self.delayed,
            self.truncated,
            self.held_overflow
        )
    }
}

/// Applies a [`FaultPlan`] to datagrams; sans-IO (time comes in as arguments).
#[derive(Debug)]
pub struct FaultInjector {
    plan: FaultPlan,
    matched: Vec<u64>,
    rng: ChaCha8Rng,
    /// Delayed datagrams: due time, direction, the peer (destination when sent, source
    /// when received), bytes.
    held: Vec<(Instant, Direction, SocketAddr, Vec<u8>)>,
    /// The bytes in `held`.
    held_bytes: usize,
    /// The plan's device events still to happen, soonest first, once
    /// [`FaultInjector::start_events`] gave them a time.
    events_due: std::collections::VecDeque<(Instant, DeviceEvent)>,
    counters: FaultCounters,
}

/// The fate of one datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Send these bytes (possibly modified) after `delay`, `copies` times.
    Deliver {
        /// The bytes.
        data: Vec<u8>,
        /// How many copies.
        copies: u32,
        /// Extra delay.
        delay: Duration,
    },
    /// Lose it.
    Drop,
}

/// What [`FaultInjector::filter`] did with a datagram left in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Pass on the buffer's first `len` bytes now (possibly changed in place).
    Pass {
        /// How many bytes (fewer than the buffer's when truncated).
        len: usize,
    },
    /// Pass on nothing now: lost, or held until [`FaultInjector::release`] gives it back.
    Withhold,
}

/// A datagram's fate under the plan, before anyone copies it.
enum Fate {
    Pass,
    Drop,
    Duplicate,
    Delay(Duration),
}

impl FaultInjector {
    /// An injector for `plan`.
    pub fn new(plan: FaultPlan) -> Self {
        Self {
            matched: vec![0; plan.rules.len()],
            rng: ChaCha8Rng::seed_from_u64(plan.seed),
            plan,
            held: Vec::new(),
            held_bytes: 0,
            events_due: std::collections::VecDeque::new(),
            counters: FaultCounters::default(),
        }
    }

    /// The plan takes effect on a device `now`: its device events fall due from now on
    /// ([`FaultInjector::poll_event`]). Called again, the schedule starts over.
    pub fn start_events(&mut self, now: Instant) {
        self.events_due = self
            .plan
            .events
            .iter()
            .map(|e| (now + e.after, e.event))
            .collect();
    }

    /// The next device event whose time has come by `now`, if any (call until `None`).
    pub fn poll_event(&mut self, now: Instant) -> Option<DeviceEvent> {
        match self.events_due.front() {
            Some(&(at, event)) if at <= now => {
                self.events_due.pop_front();
                Some(event)
            }
            _ => None,
        }
    }

    /// What was injected so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Decide what happens to one datagram from `src` to `dst` going `direction`.
    pub fn decide(
        &mut self,
        direction: Direction,
        src: SocketAddr,
        dst: SocketAddr,
        mut data: Vec<u8>,
    ) -> Decision {
        let (fate, len) = self.fate(direction, src, dst, &mut data);
        data.truncate(len);
        let (copies, delay) = match fate {
            Fate::Drop => return Decision::Drop,
            Fate::Pass => (1, Duration::ZERO),
            Fate::Duplicate => (2, Duration::ZERO),
            Fate::Delay(d) => (1, d),
        };
        Decision::Deliver {
            data,
            copies,
            delay,
        }
    }

    /// Whether the plan can only drop datagrams (or pass them): it then reads no more of a
    /// datagram than its headers, and never keeps or changes the bytes.
    pub fn only_drops(&self) -> bool {
        self.plan.rules.iter().all(|r| r.action == Action::Drop)
    }

    /// Apply the plan to one datagram going `direction` that stays in the caller's buffer
    /// (the driver's send and receive buffers: no copy for what passes, and the common
    /// case, no fault, costs a rule check). A corruption changes `data` in place; the
    /// copies the plan adds or delays are the injector's, out of [`FaultInjector::release`]
    /// when due (a duplicate at once: `next_release` is then `now`).
    pub fn filter(
        &mut self,
        now: Instant,
        direction: Direction,
        src: SocketAddr,
        dst: SocketAddr,
        data: &mut [u8],
    ) -> Verdict {
        let (fate, len) = self.fate(direction, src, dst, data);
        let peer = match direction {
            Direction::Tx => dst,
            Direction::Rx => src,
        };
        let full = self.held.len() >= MAX_HELD_DATAGRAMS
            || self.held_bytes.saturating_add(len) > MAX_HELD_BYTES;
        match fate {
            Fate::Pass => Verdict::Pass { len },
            Fate::Drop => Verdict::Withhold,
            Fate::Duplicate if full => {
                self.counters.held_overflow += 1;
                Verdict::Pass { len }
            }
            Fate::Delay(_) if full => {
                self.counters.held_overflow += 1;
                Verdict::Withhold
            }
            Fate::Duplicate => {
                self.hold(now, direction, peer, &data[..len]);
                Verdict::Pass { len }
            }
            Fate::Delay(d) => {
                self.hold(now + d, direction, peer, &data[..len]);
                Verdict::Withhold
            }
        }
    }

    /// Keep a copy of `data` until `due`.
    fn hold(&mut self, due: Instant, direction: Direction, peer: SocketAddr, data: &[u8]) {
        self.held_bytes += data.len();
        self.held.push((due, direction, peer, data.to_vec()));
    }

    /// The first rule that matches and fires decides: counted, bytes changed in place, and
    /// the length to pass on (a truncation shortens it).
    fn fate(
        &mut self,
        direction: Direction,
        src: SocketAddr,
        dst: SocketAddr,
        data: &mut [u8],
    ) -> (Fate, usize) {
        match direction {
            Direction::Tx => self.counters.seen_tx += 1,
            Direction::Rx => self.counters.seen_rx += 1,
        }
        let mut chosen = None;
        for (i, rule) in self.plan.rules.iter().enumerate() {
            if !rule.matches(direction, data) {
                continue;
            }
            self.matched[i] += 1;
            if rule.every.is_some_and(|n| self.matched[i] % n != 0) {
                continue;
            }
            if rule.probability >= 1.0
                || (rule.probability > 0.0 && self.rng.gen_bool(rule.probability))
            {
                chosen = Some(rule.action);
                break;
            }
        }
        let len = data.len();
        let Some(action) = chosen else {
            return (Fate::Pass, len);
        };
        let fate = match action {
            Action::Drop => {
                self.counters.dropped += 1;
                Fate::Drop
            }
            Action::Duplicate => {
                self.counters.duplicated += 1;
                Fate::Duplicate
            }
            Action::Delay(d) => {
                self.counters.delayed += 1;
                Fate::Delay(d)
            }
            Action::Reorder => {
                self.counters.reordered += 1;
                Fate::Delay(Duration::from_micros(self.rng.gen_range(100..=1000)))
            }
            Action::Corrupt if !data.is_empty() => {
                let bit = self.rng.gen_range(0..len * 8);
                data[bit / 8] ^= 1 << (bit % 8);
                self.counters.corrupted += 1;
                Fate::Pass
            }
            // Flip a bit after the BTH and before the ICRC, then make the ICRC valid again.
            Action::CorruptRecompute if len > BTH_LEN + ICRC_LEN => {
                let bit = self.rng.gen_range(BTH_LEN * 8..(len - ICRC_LEN) * 8);
                data[bit / 8] ^= 1 << (bit % 8);
                let _ = icrc::set_icrc_for_udp_socket(&UdpEndpoints::between(src, dst), data);
                self.counters.corrupted_recomputed += 1;
                Fate::Pass
            }
            Action::Truncate(n) => {
                self.counters.truncated += 1;
                return (Fate::Pass, n.min(len));
            }
            // Too short to corrupt: pass unchanged.
            Action::Corrupt | Action::CorruptRecompute => Fate::Pass,
        };
        (fate, len)
    }

    /// Held datagrams going `direction` whose time has come, with their peer.
    pub fn release(
        &mut self,
        now: Instant,
        direction: Direction,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].0 <= now && self.held[i].1 == direction {
                let (_, _, peer, d) = self.held.swap_remove(i);
                self.held_bytes -= d.len();
                out.push((peer, d));
            } else {
                i += 1;
            }
        }
    }

    /// When the injector next needs the driver: a held datagram falls due
    /// ([`FaultInjector::release`]) or a device event ([`FaultInjector::poll_event`]).
    pub fn next_release(&self) -> Option<Instant> {
        let event = self.events_due.front().map(|e| e.0);
        self.held.iter().map(|h| h.0).chain(event).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softroce_wire::{AethRepr, BthRepr, ExtRepr, Msn, Psn, Qpn, RoceRepr};

    #[test]
    fn a_plan_flaps_the_port_and_kills_the_device_at_the_times_it_names() {
        let plan =
            FaultPlan::parse("drop=0.1,device_fatal=5000,port_down=2000,port_up=3000.5").unwrap();
        let ms = Duration::from_millis;
        assert_eq!(
            plan.events,
            [
                (ms(2000), DeviceEvent::PortDown),
                (Duration::from_micros(3_000_500), DeviceEvent::PortUp),
                (ms(5000), DeviceEvent::DeviceFatal),
            ]
            .map(|(after, event)| ScheduledEvent { after, event }),
            "soonest first, whatever order they were written in"
        );
        let toml = FaultPlan::from_toml(
            "[[event]]\nat_ms = 3000.5\nkind = \"port_up\"\n\
             [[event]]\nat_ms = 2000\nkind = \"port_down\"\n\
             [[event]]\nat_ms = 5000\nkind = \"device_fatal\"\n\
             [[rule]]\naction = \"drop\"\nprobability = 0.1\n",
        )
        .unwrap();
        assert_eq!(toml.events, plan.events, "the TOML form says the same");

        // Nothing happens before the plan takes effect, then each event once, on time.
        let mut inj = FaultInjector::new(plan);
        assert_eq!(
            inj.next_release(),
            None,
            "not started: no time to be due at"
        );
        let t0 = Instant::now();
        inj.start_events(t0);
        assert_eq!(inj.next_release(), Some(t0 + ms(2000)));
        assert_eq!(inj.poll_event(t0 + ms(1999)), None);
        assert_eq!(inj.poll_event(t0 + ms(2000)), Some(DeviceEvent::PortDown));
        assert_eq!(
            inj.poll_event(t0 + ms(2000)),
            None,
            "each event happens once"
        );
        let late = t0 + ms(9000);
        assert_eq!(inj.poll_event(late), Some(DeviceEvent::PortUp));
        assert_eq!(inj.poll_event(late), Some(DeviceEvent::DeviceFatal));
        assert_eq!(inj.poll_event(late), None);
        assert_eq!(inj.next_release(), None);
    }

    #[test]
    fn a_long_delay_holds_a_bounded_queue_and_counts_what_it_loses() {
        let mut inj = FaultInjector::new(FaultPlan::parse("delay=10000").unwrap());
        let (me, peer) = (
            "10.0.0.1:4791".parse().unwrap(),
            "10.0.0.2:4791".parse().unwrap(),
        );
        let now = Instant::now();
        let mut packet = vec![0u8; 4096];
        // A peer's long READ makes the device send far faster than 10 s drains.
        for _ in 0..10 * MAX_HELD_DATAGRAMS {
            let v = inj.filter(now, Direction::Tx, me, peer, &mut packet);
            assert_eq!(v, Verdict::Withhold);
        }
        let c = inj.counters();
        assert!(inj.held.len() <= MAX_HELD_DATAGRAMS);
        assert!(inj.held_bytes <= MAX_HELD_BYTES);
        assert_eq!(c.delayed, 10 * MAX_HELD_DATAGRAMS as u64);
        assert_eq!(
            c.held_overflow as usize,
            10 * MAX_HELD_DATAGRAMS - inj.held.len()
        );
        // Once due they go, and the queue takes new ones again.
        let mut out = Vec::new();
        inj.release(now + Duration::from_secs(11), Direction::Tx, &mut out);
        assert_eq!(out.len(), MAX_HELD_DATAGRAMS.min(MAX_HELD_BYTES / 4096));
        assert_eq!((inj.held.len(), inj.held_bytes), (0, 0));
        assert_eq!(
            inj.filter(now, Direction::Tx, me, peer, &mut packet),
            Verdict::Withhold
        );
        assert_eq!(inj.held.len(), 1);
    }

    #[test]
    fn device_events_that_cannot_be_scheduled_are_refused_with_the_reason() {
        for (spec, why) in [
            ("port_down=-1", "within 0..="),
            ("port_down=86400001", "one day"),
            ("port_up=soon", "not a number of milliseconds"),
            ("port_flap=100", "port_down, port_up, device_fatal"),
        ] {
            let e = FaultPlan::parse(spec).unwrap_err().to_string();
            assert!(e.contains(why), "{spec}: {e}");
        }
        let many = vec!["port_down=1"; MAX_SCHEDULED_EVENTS + 1].join(",");
        let e = FaultPlan::parse(&many).unwrap_err().to_string();
        assert!(e.contains("more than 256 device events"), "{e}");
        let e =
            FaultPlan::from_toml("[[event]]\nat_ms = 1\nkind = \"port_sideways\"\n").unwrap_err();
        assert!(e.contains("port_sideways"), "{e}");
        let e = FaultPlan::from_toml("[[event]]\nat_ms = -5\nkind = \"port_up\"\n").unwrap_err();
        assert!(e.contains("event #1"), "{e}");
    }

    #[test]
    fn a_plan_only_drops_when_every_rule_drops() {
        let only_drops = |spec: &str| {
            let spec: FaultSpec = spec.parse().unwrap();
            FaultInjector::new(spec.plan()).only_drops()
        };
        assert!(only_drops("drop=0.1"));
        assert!(only_drops("seed=3"), "no rule: nothing kept or changed");
        assert!(!only_drops("drop=0.1,dup=0.1"));
        assert!(!only_drops("reorder=0.1"));
        assert!(!only_drops("corrupt=0.1"));
        assert!(!only_drops("delay=1"));
    }

    #[test]
    fn compact_spec_parses() {
        let s: FaultSpec = "drop=0.2,dup=0.05,reorder=0.05,corrupt=0.01,delay=3,seed=9"
            .parse()
            .unwrap();
        assert_eq!(
            (s.drop, s.duplicate, s.reorder, s.corrupt),
            (0.2, 0.05, 0.05, 0.01)
        );
        assert_eq!((s.delay, s.seed), (Duration::from_millis(3), 9));
    }

    #[test]
    fn errors_point_at_the_bad_part() {
        let e = "drop=0.1,dup=1.5".parse::<FaultSpec>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad fault spec at 'dup=1.5' (chars 9..16): probability must be within 0..=1"
        );
        let e = "drop=0.1,jitter=2".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("unknown key \"jitter\""), "{e}");
        let e = "drop".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("expected key=value"), "{e}");
        let e = "seed=-1".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("not an unsigned integer"), "{e}");
    }

    #[test]
    fn drop_rate_is_near_the_probability_and_replays_from_the_seed() {
        let run = || {
            let mut inj =
                FaultInjector::new("drop=0.2,seed=5".parse::<FaultSpec>().unwrap().plan());
            let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
            let now = Instant::now();
            let mut sent = 0;
            for _ in 0..20_000 {
                let verdict = inj.filter(now, Direction::Tx, dst, dst, &mut [1, 2, 3]);
                sent += usize::from(verdict == Verdict::Pass { len: 3 });
            }
            (inj.counters(), sent)
        };
        let (c, sent) = run();
        assert!((3_600..4_400).contains(&c.dropped), "{c}");
        assert_eq!(sent as u64, 20_000 - c.dropped);
        assert_eq!(run(), (c, sent));
    }

    fn ack(qpn: u32, psn: u32, syndrome: u8) -> Vec<u8> {
        let aeth = AethRepr {
            syndrome: Syndrome::from_byte(syndrome),
            msn: Msn::new(1),
        };
        let repr = RoceRepr::new(
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, Qpn::from_wire(qpn), Psn::new(psn)),
            ExtRepr {
                aeth: Some(aeth),
                ..ExtRepr::default()
            },
            0,
        );
        let mut p = vec![0; repr.buffer_len()];
        repr.emit(&mut p).unwrap();
        p
    }

    #[test]
    fn toml_rules_match_on_class_qpn_psn_and_every_nth() {
        let plan = FaultPlan::from_toml(
            r#"
            seed = 3
            [[rule]]
            action = "drop"
            opcode = "ack"
            qpn = 17
            every = 2
            [[rule]]
            action = "truncate"
            truncate_to = 4
            opcode = "nak"
            psn = [10, 20]
            "#,
        )
        .unwrap();
        let mut inj = FaultInjector::new(plan);
        let a: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let fates: Vec<bool> = (0..6)
            .map(|i| inj.decide(Direction::Tx, a, a, ack(17, i, 0x1f)) == Decision::Drop)
            .collect();
        assert_eq!(
            fates,
            [false, true, false, true, false, true],
            "every 2nd ACK to QP 17"
        );
        assert_eq!(
            inj.decide(Direction::Tx, a, a, ack(18, 1, 0x1f)),
            Decision::Deliver {
                data: ack(18, 1, 0x1f),
                copies: 1,
                delay: Duration::ZERO
            }
        );
        let Decision::Deliver { data, .. } = inj.decide(Direction::Tx, a, a, ack(17, 15, 0x60))
        else {
            panic!()
        };
        assert_eq!(data.len(), 4, "NAK in the PSN range truncated");
        let Decision::Deliver { data, .. } = inj.decide(Direction::Tx, a, a, ack(17, 25, 0x60))
        else {
            panic!()
        };
        assert_eq!(data.len(), 20, "NAK outside the range untouched");
        assert_eq!(inj.counters().truncated, 1);
    }

    #[test]
    fn direction_picks_sent_or_received_datagrams_and_tx_is_the_default() {
        let a: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let drops = |spec: &str, dir: Direction| {
            let mut inj = FaultInjector::new(FaultPlan::parse(spec).unwrap());
            (0..10)
                .filter(|&i| inj.decide(dir, a, a, ack(17, i, 0x1f)) == Decision::Drop)
                .count()
        };
        assert_eq!(drops("drop=1", Direction::Tx), 10);
        assert_eq!(
            drops("drop=1", Direction::Rx),
            0,
            "compact form: tx by default"
        );
        assert_eq!(drops("drop=1,dir=rx", Direction::Rx), 10);
        assert_eq!(drops("drop=1,dir=rx", Direction::Tx), 0);
        assert_eq!(drops("drop=1,dir=both", Direction::Rx), 10);
        assert_eq!(drops("drop=1,dir=both", Direction::Tx), 10);
        let plan =
            FaultPlan::from_toml("[[rule]]\naction = \"drop\"\ndirection = \"rx\"\n").unwrap();
        let mut inj = FaultInjector::new(plan);
        assert_eq!(
            inj.decide(Direction::Rx, a, a, ack(1, 1, 0x1f)),
            Decision::Drop
        );
        assert_ne!(
            inj.decide(Direction::Tx, a, a, ack(1, 1, 0x1f)),
            Decision::Drop
        );
        assert_eq!((inj.counters().seen_rx, inj.counters().seen_tx), (1, 1));
        let e = "drop=1,dir=sideways".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("'dir=sideways'"), "{e}");
        let e =
            FaultPlan::from_toml("[[rule]]\naction = \"drop\"\ndirection = \"up\"\n").unwrap_err();
        assert!(e.contains("rule #1: direction \"up\""), "{e}");
    }

    #[test]
    fn received_datagrams_held_for_delay_come_back_as_received() {
        let src: SocketAddr = "127.0.0.9:4791".parse().unwrap();
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut inj = FaultInjector::new(FaultPlan::parse("delay=1,dir=rx").unwrap());
        let now = Instant::now();
        let mut out = Vec::new();
        let verdict = inj.filter(now, Direction::Rx, src, dst, &mut [7]);
        assert_eq!(verdict, Verdict::Withhold);
        let later = now + Duration::from_millis(2);
        inj.release(later, Direction::Tx, &mut out);
        assert!(out.is_empty(), "not a sent datagram");
        inj.release(later, Direction::Rx, &mut out);
        assert_eq!(out, vec![(src, vec![7])], "released with its source");
    }

    #[test]
    fn corrupt_recompute_keeps_the_icrc_valid() {
        let plan = FaultPlan::from_toml("[[rule]]\naction = \"corrupt_recompute\"\n").unwrap();
        let mut inj = FaultInjector::new(plan);
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut p = ack(17, 1, 0x1f);
        let ep = UdpEndpoints::between(src, dst);
        icrc::set_icrc_for_udp_socket(&ep, &mut p).unwrap();
        let Decision::Deliver { data, .. } = inj.decide(Direction::Tx, src, dst, p.clone()) else {
            panic!()
        };
        assert_ne!(data, p);
        assert!(icrc::verify_udp_socket(&ep, &data).is_ok());
    }

    #[test]
    fn plan_file_errors_name_the_rule() {
        let e = FaultPlan::from_toml("[[rule]]\naction = \"explode\"\n").unwrap_err();
        assert!(e.contains("rule #1: unknown action \"explode\""), "{e}");
        let e = FaultPlan::from_toml("[[rule]]\naction = \"delay\"\n").unwrap_err();
        assert!(e.contains("delay needs delay_ms"), "{e}");
        let e =
            FaultPlan::from_toml("[[rule]]\naction = \"drop\"\nprobability = 2.0\n").unwrap_err();
        assert!(e.contains("probability 2 is not within 0..=1"), "{e}");
        let e = FaultPlan::parse("@/nonexistent/plan.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("fault plan /nonexistent/plan.toml:"),
            "{e}"
        );
    }

    #[test]
    fn plan_files_must_be_small_regular_files() {
        let e = FaultPlan::parse("@/dev/zero").unwrap_err().to_string();
        assert!(
            e.starts_with("fault plan /dev/zero: not a regular file") && e.contains("1048576"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("softroce-faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = FaultPlan::parse(&format!("@{}", big.display()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than the limit of 1048576 bytes"), "{e}");
        let at_limit = dir.join("ok.toml");
        let mut text = b"seed = 3\n".to_vec();
        text.resize(MAX_CONFIG_BYTES as usize, b'\n');
        std::fs::write(&at_limit, text).unwrap();
        assert_eq!(
            FaultPlan::parse(&format!("@{}", at_limit.display()))
                .unwrap()
                .seed,
            3
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn delayed_datagrams_come_out_when_due() {
        let mut inj = FaultInjector::new("delay=2".parse::<FaultSpec>().unwrap().plan());
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let now = Instant::now();
        let mut out = Vec::new();
        let verdict = inj.filter(now, Direction::Tx, dst, dst, &mut [9]);
        assert_eq!(verdict, Verdict::Withhold);
        assert_eq!(inj.next_release(), Some(now + Duration::from_millis(2)));
        inj.release(now + Duration::from_millis(1), Direction::Tx, &mut out);
        assert!(out.is_empty());
        inj.release(now + Duration::from_millis(2), Direction::Tx, &mut out);
        assert_eq!(out, vec![(dst, vec![9])]);
    }

    #[test]
    fn a_filtered_datagram_stays_in_its_buffer_and_only_added_copies_are_the_injectors() {
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let now = Instant::now();
        let mut dup = FaultInjector::new("dup=1".parse::<FaultSpec>().unwrap().plan());
        let mut data = [1, 2, 3];
        assert_eq!(
            dup.filter(now, Direction::Tx, dst, dst, &mut data),
            Verdict::Pass { len: 3 }
        );
        // The second copy is due at once.
        assert_eq!(dup.next_release(), Some(now));
        let mut out = Vec::new();
        dup.release(now, Direction::Tx, &mut out);
        assert_eq!(out, vec![(dst, vec![1, 2, 3])]);
        let truncate = FaultPlan::from_toml("[[rule]]\naction = \"truncate\"\ntruncate_to = 2\n");
        let mut cut = FaultInjector::new(truncate.unwrap());
        assert_eq!(
            cut.filter(now, Direction::Tx, dst, dst, &mut data),
            Verdict::Pass { len: 2 }
        );
        assert_eq!(cut.next_release(), None);
    }
}
