//! A deterministic in-memory network of sans-IO nodes with virtual time.
//!
//! Modelled on quinn-proto's test `Pair`: every node is driven through the same four calls a
//! real driver makes (`handle_datagram`, `poll_transmit`, `poll_timeout`, `handle_timeout`),
//! datagrams travel through a fabric with a one-way latency and an MTU, and time only moves when
//! the fabric advances it to the next delivery or timer. Runs are reproducible from a seed, so a
//! failing test or soak run replays exactly.
//!
//! Faults are one-liners in a test: [`Fabric::drop_next`] for targeted loss, [`Fabric::set_filter`]
//! for a rule of your own, [`Fabric::partition`], and seeded random
//! loss/duplication/reordering/corruption through [`LinkFaults`].
//!
//! Any [`SimNode`] can live on a fabric; the emulator's `Hca` is one (the soak and the
//! verbs API's simulated backend put HCAs there). A node of one's own shows the contract:
//!
//! ```
//! use std::net::SocketAddr;
//! use std::time::{Duration, Instant};
//! use softroce_emu_sim::{Fabric, SimDatagram, SimNode, SimTransmit};
//!
//! /// Sends one greeting to `peer` if it has one, answers what it receives with "pong".
//! struct Node {
//!     me: SocketAddr,
//!     peer: SocketAddr,
//!     outbox: Vec<&'static [u8]>,
//!     inbox: Vec<Vec<u8>>,
//! }
//!
//! impl SimNode for Node {
//!     fn handle_datagram(&mut self, _now: Instant, d: &SimDatagram) {
//!         self.inbox.push(d.payload.clone());
//!         if d.payload == b"ping" {
//!             self.outbox.push(b"pong");
//!         }
//!     }
//!     fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<SimTransmit> {
//!         let bytes = self.outbox.pop()?;
//!         buf.extend_from_slice(bytes);
//!         Some(SimTransmit { src: self.me, dst: self.peer, len: bytes.len() })
//!     }
//!     fn poll_timeout(&self) -> Option<Instant> {
//!         None // no timers
//!     }
//!     fn handle_timeout(&mut self, _now: Instant) {}
//! }
//!
//! let a: SocketAddr = "10.0.0.1:4791".parse().unwrap();
//! let b: SocketAddr = "10.0.0.2:4791".parse().unwrap();
//! let mut fabric = Fabric::new(42); // the seed of every random choice
//! fabric.latency = Duration::from_micros(50);
//! let node = |me, peer, outbox| Node { me, peer, outbox, inbox: vec![] };
//! let na = fabric.add_node(a.ip(), node(a, b, vec![b"ping"]));
//! let nb = fabric.add_node(b.ip(), node(b, a, vec![]));
//! assert!(fabric.drive(100), "went idle within 100 steps");
//! assert_eq!(fabric.node(nb).inbox, vec![b"ping".to_vec()]);
//! assert_eq!(fabric.node(na).inbox, vec![b"pong".to_vec()]);
//! // Two one-way latencies of virtual time passed, exactly; no wall-clock time was spent.
//! assert_eq!(fabric.elapsed(), Duration::from_micros(100));
//! ```

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
pub use softroce_emu_faults::LinkFaults;
use softroce_emu_faults::{Decision, Direction, FaultCounters, FaultInjector, FaultPlan};

/// A datagram in flight between two nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimDatagram {
    /// Sender address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// What a node asks the fabric to send (the payload is in the buffer it was given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimTransmit {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Bytes written to the transmit buffer.
    pub len: usize,
}

/// The calls a real driver makes on a sans-IO device; implemented by the HCA core.
pub trait SimNode {
    /// Deliver one datagram.
    fn handle_datagram(&mut self, now: Instant, datagram: &SimDatagram);
    /// Produce the next datagram to send into `buf` (cleared by the caller), if any.
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SimTransmit>;
    /// When `handle_timeout` must next be called.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Let timers that expired at or before `now` fire.
    fn handle_timeout(&mut self, now: Instant);
    /// Whether the node receives datagrams sent to the multicast address `group` (it has a
    /// QP attached to the group, as a real device then joins the IP group).
    fn receives_multicast(&self, group: IpAddr) -> bool {
        let _ = group;
        false
    }
}

/// Index of a node in a [`Fabric`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// What a filter decides for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterAction {
    /// Deliver normally.
    Pass,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
    /// Deliver it after this extra delay.
    Delay(Duration),
}

/// A datagram the fabric lost, for event logs (see [`Fabric::record_losses`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostDatagram {
    /// Virtual time since the fabric was created.
    pub at: Duration,
    /// Sender address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// The first bytes of the payload (a RoCE datagram's BTH).
    pub head: Vec<u8>,
    /// Why: `partition`, `fault` (plan, filter, `drop_next` or random loss), `mtu` or
    /// `unroutable`.
    pub reason: &'static str,
}

/// A user rule evaluated for every datagram before the random faults.
pub type Filter = Box<dyn FnMut(&SimDatagram) -> FilterAction + Send>;

/// What the fabric did, for assertions and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FabricStats {
    /// Datagrams nodes sent.
    pub sent: u64,
    /// Datagrams handed to a node.
    pub delivered: u64,
    /// Lost to `drop_next`, filters or random loss.
    pub dropped: u64,
    /// Lost because they exceeded the fabric MTU.
    pub dropped_mtu: u64,
    /// Lost to a partition.
    pub dropped_partition: u64,
    /// Addressed to no node.
    pub unroutable: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Held back to overtake.
    pub reordered: u64,
    /// Bit-flipped.
    pub corrupted: u64,
}

impl fmt::Display for FabricStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent={} delivered={} dropped={} dropped_mtu={} dropped_partition={} unroutable={} duplicated={} reordered={} corrupted={}",
            self.sent,
            self.delivered,
            self.dropped,
            self.dropped_mtu,
            self.dropped_partition,
            self.unroutable,
            self.duplicated,
            self.reordered,
            self.corrupted
        )
    }
}

struct Slot<N> {
    addr: IpAddr,
    node: N,
}

/// A pending delivery; ordered by time then by sequence so equal times stay FIFO.
struct Pending {
    at: Instant,
    seq: u64,
    to: usize,
    datagram: SimDatagram,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The speed of one link ([`Fabric::set_link_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkShape {
    /// One-way delay (instead of the fabric's [`Fabric::latency`]).
    pub latency: Duration,
    /// Bits per second each way (`None`: unlimited). A datagram occupies its direction of
    /// the link for its size at this rate; datagrams queue behind each other.
    pub bits_per_second: Option<u64>,
}

/// The in-memory network.
pub struct Fabric<N> {
    nodes: Vec<Slot<N>>,
    in_flight: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    epoch: Instant,
    now: Instant,
    /// One-way delay of every datagram.
    pub latency: Duration,
    /// Largest UDP payload carried; bigger ones are dropped (and counted).
    pub mtu: usize,
    /// Seeded random faults.
    pub faults: LinkFaults,
    rng: ChaCha8Rng,
    drop_next: u32,
    filter: Option<Filter>,
    partitions: HashSet<(usize, usize)>,
    stats: FabricStats,
    tx_buf: Vec<u8>,
    plan: Option<FaultInjector>,
    /// Plans of single links, keyed by the node pair in ascending order.
    link_plans: BTreeMap<(usize, usize), FaultInjector>,
    /// Latency and bandwidth of single links, keyed as `link_plans`.
    link_shapes: BTreeMap<(usize, usize), LinkShape>,
    /// When each direction (sender, receiver) of a bandwidth-limited link is free again.
    wire_free_at: BTreeMap<(usize, usize), Instant>,
    /// Every datagram sent, when capturing, with its virtual time since the epoch.
    captured: Option<Vec<(Duration, SimDatagram)>>,
    /// Datagrams lost since the last [`Fabric::take_losses`], when recording.
    losses: Option<Vec<LostDatagram>>,
}

impl<N> fmt::Debug for Fabric<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric")
            .field("nodes", &self.nodes.len())
            .field("elapsed", &(self.now - self.epoch))
            .field("in_flight", &self.in_flight.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<N: SimNode> Fabric<N> {
    /// An empty fabric: 10 µs latency, 64 KiB MTU, no faults, randomness from `seed`.
    pub fn new(seed: u64) -> Self {
        // Virtual time starts at an arbitrary real instant; only differences matter.
        let epoch = Instant::now();
        Self {
            nodes: Vec::new(),
            in_flight: BinaryHeap::new(),
            seq: 0,
            epoch,
            now: epoch,
            latency: Duration::from_micros(10),
            mtu: 65_536,
            faults: LinkFaults::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            drop_next: 0,
            filter: None,
            partitions: HashSet::new(),
            stats: FabricStats::default(),
            tx_buf: Vec::with_capacity(8192),
            plan: None,
            link_plans: BTreeMap::new(),
            link_shapes: BTreeMap::new(),
            wire_free_at: BTreeMap::new(),
            captured: None,
            losses: None,
        }
    }

    /// Attach a node reachable at `addr`.
    pub fn add_node(&mut self, addr: IpAddr, node: N) -> NodeId {
        self.nodes.push(Slot { addr, node });
        NodeId(self.nodes.len() - 1)
    }

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Virtual time elapsed since the fabric was created.
    pub fn elapsed(&self) -> Duration {
        self.now - self.epoch
    }

    /// A node, to inspect it.
    pub fn node(&self, id: NodeId) -> &N {
        &self.nodes[id.0].node
    }

    /// A node, to call verbs on it. Call [`Fabric::drive`] afterwards so it gets to send.
    pub fn node_mut(&mut self, id: NodeId) -> &mut N {
        &mut self.nodes[id.0].node
    }

    /// The address a node was attached with.
    pub fn addr(&self, id: NodeId) -> IpAddr {
        self.nodes[id.0].addr
    }

    /// What the fabric has done so far.
    pub fn stats(&self) -> FabricStats {
        self.stats
    }

    /// Lose the next `n` datagrams sent by any node.
    pub fn drop_next(&mut self, n: u32) {
        self.drop_next += n;
    }

    /// Install a rule evaluated for every datagram (replaces the previous one).
    pub fn set_filter(
        &mut self,
        filter: impl FnMut(&SimDatagram) -> FilterAction + Send + 'static,
    ) {
        self.filter = Some(Box::new(filter));
    }

    /// Apply a fault plan (the same rules a real device takes with `--faults`) to every
    /// datagram, after the filter and before the random [`LinkFaults`]. Its packet rules
    /// only: the network has no port for its device events to act on (the nodes' HCAs
    /// take those directly, at the step a test chooses).
    pub fn set_fault_plan(&mut self, plan: FaultPlan) {
        self.plan = Some(FaultInjector::new(plan));
    }

    /// What the fault plan injected so far.
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        self.plan.as_ref().map(|p| p.counters())
    }

    /// Apply a fault plan to the datagrams between `a` and `b` only, both ways (`None`
    /// removes it). The link behaves as if both of its nodes held the plan for their traffic
    /// with each other: a datagram meets the sender's transmit rules, then the receiver's
    /// receive rules, after the fabric-wide plan. Packet rules only, as
    /// [`Fabric::set_fault_plan`].
    pub fn set_link_plan(&mut self, a: NodeId, b: NodeId, plan: Option<FaultPlan>) {
        let key = (a.0.min(b.0), a.0.max(b.0));
        match plan {
            Some(plan) => {
                self.link_plans.insert(key, FaultInjector::new(plan));
            }
            None => {
                self.link_plans.remove(&key);
            }
        }
    }

    /// Give the link between `a` and `b` a latency and a bandwidth of its own (`None`: back
    /// to the fabric's latency, unlimited bandwidth).
    pub fn set_link_shape(&mut self, a: NodeId, b: NodeId, shape: Option<LinkShape>) {
        let key = (a.0.min(b.0), a.0.max(b.0));
        match shape {
            Some(shape) => {
                self.link_shapes.insert(key, shape);
            }
            None => {
                self.link_shapes.remove(&key);
            }
        }
    }

    /// When a datagram of `len` bytes sent now from `from` to `to` arrives, before faults:
    /// after the link's latency, and after its serialization behind what the link already
    /// carries that way when its bandwidth is limited.
    fn arrival(&mut self, from: usize, to: usize, len: usize) -> Instant {
        let Some(shape) = self.link_shapes.get(&(from.min(to), from.max(to))).copied() else {
            return self.now + self.latency;
        };
        let Some(bps) = shape.bits_per_second.filter(|&b| b > 0) else {
            return self.now + shape.latency;
        };
        let free = self.wire_free_at.entry((from, to)).or_insert(self.now);
        let start = (*free).max(self.now);
        let nanos = (len as u128 * 8 * 1_000_000_000).div_ceil(u128::from(bps));
        let done = start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        *free = done;
        done + shape.latency
    }

    /// What the plan of the link between `a` and `b` injected so far.
    pub fn link_fault_counters(&self, a: NodeId, b: NodeId) -> Option<FaultCounters> {
        let key = (a.0.min(b.0), a.0.max(b.0));
        self.link_plans.get(&key).map(FaultInjector::counters)
    }

    /// Whether traffic from `a` to `b` is cut.
    pub fn is_partitioned(&self, a: NodeId, b: NodeId) -> bool {
        self.partitions.contains(&(a.0, b.0))
    }

    /// How many nodes are attached.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Start (or stop) recording every datagram the nodes send, for [`Fabric::pcap`].
    /// Stopping forgets what was recorded.
    pub fn set_capture(&mut self, on: bool) {
        match (on, self.captured.is_some()) {
            (true, false) => self.captured = Some(Vec::new()),
            (false, true) => self.captured = None,
            _ => {}
        }
    }

    /// Start (or stop) recording the datagrams the fabric loses, for
    /// [`Fabric::take_losses`].
    pub fn record_losses(&mut self, on: bool) {
        self.losses = on.then(Vec::new);
    }

    /// The datagrams lost since the last call (empty when not recording).
    pub fn take_losses(&mut self) -> Vec<LostDatagram> {
        self.losses.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Note a lost datagram (its head was saved before faults could take the payload).
    fn lost(&mut self, datagram: &SimDatagram, head: &[u8], reason: &'static str) {
        let at = self.now - self.epoch;
        if let Some(losses) = self.losses.as_mut() {
            losses.push(LostDatagram {
                at,
                src: datagram.src,
                dst: datagram.dst,
                head: head.to_vec(),
                reason,
            });
        }
    }

    /// Everything recorded since capture started, as a pcap stream (Ethernet link type,
    /// timestamps in virtual time since the fabric was created). Datagrams appear as sent,
    /// before faults: a lost one shows, followed by its retransmission.
    pub fn pcap(&self) -> Vec<u8> {
        let Ok(mut writer) = softroce_wire::pcap::CaptureWriter::new(Vec::new(), "fabric") else {
            return Vec::new();
        };
        for (at, d) in self.captured.iter().flatten() {
            // Writing to a Vec cannot fail.
            let _ = writer.write_roce(*at, d.src, d.dst, &d.payload);
        }
        writer.into_inner()
    }
    /// Remove the filter.
    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    /// Cut (or with `false`, restore) both directions between two nodes.
    pub fn partition(&mut self, a: NodeId, b: NodeId, cut: bool) {
        for pair in [(a.0, b.0), (b.0, a.0)] {
            if cut {
                self.partitions.insert(pair);
            } else {
                self.partitions.remove(&pair);
            }
        }
    }

    /// Collect every datagram the nodes want to send and schedule its delivery.
    fn collect_transmits(&mut self) {
        for from in 0..self.nodes.len() {
            // Bounded so a node that always has something to send cannot hang the fabric.
            for _ in 0..100_000 {
                self.tx_buf.clear();
                let Some(tx) = self.nodes[from]
                    .node
                    .poll_transmit(self.now, &mut self.tx_buf)
                else {
                    break;
                };
                let len = tx.len.min(self.tx_buf.len());
                let datagram = SimDatagram {
                    src: tx.src,
                    dst: tx.dst,
                    payload: self.tx_buf[..len].to_vec(),
                };
                self.route(from, datagram);
            }
        }
    }

    fn route(&mut self, from: usize, datagram: SimDatagram) {
        self.stats.sent += 1;
        if let Some(captured) = self.captured.as_mut() {
            captured.push((self.now - self.epoch, datagram.clone()));
        }
        // A BTH's worth, kept for the loss log (a fault plan may consume the payload).
        let head_len = if self.losses.is_some() { 12 } else { 0 };
        let head = datagram.payload[..head_len.min(datagram.payload.len())].to_vec();
        let group = datagram.dst.ip();
        if group.is_multicast() {
            // One copy per member (the sender too when it is one, as the host loops
            // multicast back to its own members); each copy meets the link's faults.
            let members: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].node.receives_multicast(group))
                .collect();
            if members.is_empty() {
                self.stats.unroutable += 1;
                self.lost(&datagram, &head, "unroutable");
            }
            for to in members {
                self.route_to(from, to, datagram.clone(), &head);
            }
            return;
        }
        let Some(to) = self.nodes.iter().position(|s| s.addr == datagram.dst.ip()) else {
            self.stats.unroutable += 1;
            self.lost(&datagram, &head, "unroutable");
            return;
        };
        self.route_to(from, to, datagram, &head);
    }

    /// [`Fabric::route`] to node `to`: the link's faults, then the flight.
    fn route_to(&mut self, from: usize, to: usize, mut datagram: SimDatagram, head: &[u8]) {
        let head = head.to_vec();
        if datagram.payload.len() > self.mtu {
            self.stats.dropped_mtu += 1;
            self.lost(&datagram, &head, "mtu");
            return;
        }
        if self.partitions.contains(&(from, to)) {
            self.stats.dropped_partition += 1;
            self.lost(&datagram, &head, "partition");
            return;
        }
        if self.drop_next > 0 {
            self.drop_next -= 1;
            self.stats.dropped += 1;
            self.lost(&datagram, &head, "fault");
            return;
        }
        let mut at = self.arrival(from, to, datagram.payload.len());
        let mut copies = 1;
        match self
            .filter
            .as_mut()
            .map_or(FilterAction::Pass, |f| f(&datagram))
        {
            FilterAction::Pass => {}
            FilterAction::Drop => {
                self.stats.dropped += 1;
                self.lost(&datagram, &head, "fault");
                return;
            }
            FilterAction::Duplicate => {
                copies = 2;
                self.stats.duplicated += 1;
            }
            FilterAction::Delay(extra) => at += extra,
        }
        if let Some(plan) = self.plan.as_mut()
            && !apply_plan(plan, &mut datagram, &mut copies, &mut at, &mut self.stats)
        {
            self.lost(&datagram, &head, "fault");
            return;
        }
        if let Some(plan) = self.link_plans.get_mut(&(from.min(to), from.max(to)))
            && !apply_plan(plan, &mut datagram, &mut copies, &mut at, &mut self.stats)
        {
            self.lost(&datagram, &head, "fault");
            return;
        }
        let faults = self.faults;
        if faults.drop > 0.0 && self.rng.gen_bool(faults.drop.min(1.0)) {
            self.stats.dropped += 1;
            self.lost(&datagram, &head, "fault");
            return;
        }
        if faults.duplicate > 0.0 && self.rng.gen_bool(faults.duplicate.min(1.0)) {
            copies += 1;
            self.stats.duplicated += 1;
        }
        if faults.reorder > 0.0
            && !faults.reorder_delay.is_zero()
            && self.rng.gen_bool(faults.reorder.min(1.0))
        {
            let extra = self.rng.gen_range(Duration::ZERO..=faults.reorder_delay);
            at += extra;
            self.stats.reordered += 1;
        }
        if faults.corrupt > 0.0
            && !datagram.payload.is_empty()
            && self.rng.gen_bool(faults.corrupt.min(1.0))
        {
            let bit = self.rng.gen_range(0..datagram.payload.len() * 8);
            datagram.payload[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        for _ in 1..copies {
            self.seq += 1;
            self.in_flight.push(Reverse(Pending {
                at,
                seq: self.seq,
                to,
                datagram: datagram.clone(),
            }));
        }
        self.seq += 1;
        self.in_flight.push(Reverse(Pending {
            at,
            seq: self.seq,
            to,
            datagram,
        }));
    }

    /// The next moment something happens: a delivery or a node timer.
    fn next_event(&self) -> Option<Instant> {
        let delivery = self.in_flight.peek().map(|Reverse(p)| p.at);
        let timer = self
            .nodes
            .iter()
            .filter_map(|s| s.node.poll_timeout())
            .min();
        match (delivery, timer) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        }
    }

    /// Send what the nodes have queued and say when the next thing happens (a delivery or
    /// a node timer), without advancing time.
    pub fn poll_next_event(&mut self) -> Option<Instant> {
        self.collect_transmits();
        self.next_event()
    }

    /// Send what the nodes have queued, then advance virtual time to the next event and
    /// process everything due then. Returns `false` when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.collect_transmits();
        let Some(next) = self.next_event() else {
            return false;
        };
        if next > self.now {
            self.now = next;
        }
        let now = self.now;
        while self.in_flight.peek().is_some_and(|Reverse(p)| p.at <= now) {
            let Some(Reverse(p)) = self.in_flight.pop() else {
                break;
            };
            self.stats.delivered += 1;
            self.nodes[p.to].node.handle_datagram(now, &p.datagram);
        }
        for slot in &mut self.nodes {
            if slot.node.poll_timeout().is_some_and(|t| t <= now) {
                slot.node.handle_timeout(now);
            }
        }
        self.collect_transmits();
        true
    }

    /// Step until nothing is left to happen or `max_steps` steps were taken. Returns `true`
    /// if the fabric went idle.
    pub fn drive(&mut self, max_steps: usize) -> bool {
        for _ in 0..max_steps {
            if !self.step() {
                return true;
            }
        }
        false
    }

    /// Step until `done` holds, the fabric idles, `max_steps` steps pass, or virtual time
    /// passes `deadline` from now. Returns whether `done` became true.
    pub fn drive_until(
        &mut self,
        max_steps: usize,
        deadline: Duration,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> bool {
        let limit = self.now + deadline;
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Let virtual time pass by `d`, processing everything due meanwhile.
    pub fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        // Bounded: each iteration processes at least one event or ends.
        for _ in 0..10_000_000 {
            self.collect_transmits();
            match self.next_event() {
                Some(next) if next <= target => {
                    if !self.step() {
                        break;
                    }
                }
                _ => break,
            }
        }
        if self.now < target {
            self.now = target;
        }
    }
}

/// Put `datagram` through `plan` as its sender's transmit rules, then its receiver's
/// receive rules (every device holds the plan, as if each process had it). `false`: lost.
fn apply_plan(
    plan: &mut FaultInjector,
    datagram: &mut SimDatagram,
    copies: &mut u32,
    at: &mut Instant,
    stats: &mut FabricStats,
) -> bool {
    let mut payload = std::mem::take(&mut datagram.payload);
    for direction in [Direction::Tx, Direction::Rx] {
        match plan.decide(direction, datagram.src, datagram.dst, payload) {
            Decision::Drop => {
                stats.dropped += 1;
                return false;
            }
            Decision::Deliver {
                data,
                copies: extra,
                delay,
            } => {
                payload = data;
                if extra > 1 {
                    *copies += extra - 1;
                    stats.duplicated += u64::from(extra - 1);
                }
                *at += delay;
            }
        }
    }
    datagram.payload = payload;
    true
}

#[doc(hidden)]
pub mod fuzzing;
pub mod soak;

#[cfg(test)]
mod tests;

/// `SimNode` for a type with the core's four calls (`handle_datagram` taking an
/// `IncomingDatagram`, `poll_transmit` giving a `Transmit`, the two timer calls).
macro_rules! sans_io_node {
    ($ty:ty) => {
        impl SimNode for $ty {
            fn handle_datagram(&mut self, now: Instant, datagram: &SimDatagram) {
                <$ty>::handle_datagram(
                    self,
                    now,
                    softroce_emu_core::IncomingDatagram {
                        src: datagram.src,
                        dst: datagram.dst.ip(),
                        payload: &datagram.payload,
                        traffic_class: 0,
                        // The simulated network sends every datagram with ID 0, as an
                        // unconnected socket does: checked exactly.
                        ipv4_id: Some(0),
                    },
                );
            }

            fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SimTransmit> {
                let t = <$ty>::poll_transmit(self, now, buf)?;
                if let Some(payload) = t.payload {
                    // The fabric carries bytes: a payload left in registered memory is
                    // copied into its place.
                    // SAFETY: reg_mr's contract keeps registered memory valid until
                    // deregistration.
                    unsafe { payload.fill(buf) };
                }
                Some(SimTransmit {
                    src: t.source,
                    dst: t.destination,
                    len: t.len,
                })
            }

            fn poll_timeout(&self) -> Option<Instant> {
                <$ty>::poll_timeout(self)
            }

            fn handle_timeout(&mut self, now: Instant) {
                <$ty>::handle_timeout(self, now);
            }

            fn receives_multicast(&self, group: IpAddr) -> bool {
                <$ty>::multicast_groups(self).contains(&softroce_wire::Gid::from_ip(group))
            }
        }
    };
}

sans_io_node!(softroce_emu_core::Hca);
// A device with its connection manager: the HCA and the CM glue a real device runs.
sans_io_node!(softroce_emu_driver::cm::CmHca);
