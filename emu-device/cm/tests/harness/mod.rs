//! Two CM endpoints on a deterministic wire with virtual time: MADs cross in one
//! millisecond, and chosen ones can be dropped or duplicated.
//!
//! Each side runs a small "application" that reacts to events the way an rdma_cm program
//! does (accept requests, send the RTU after the REP, answer a DREQ with `disconnect`);
//! tests switch those reactions off to play the application themselves.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use softroce_emu_cm::{
    AcceptParams, CmConfig, CmEndpoint, CmEvent, CmQpType, CmState, ConnId, ConnectParams,
};
use softroce_wire::cm::CmAttr;
use softroce_wire::{CmMadRepr, Gid, Mtu, PortSpace, Psn, Qpn};

/// One-way delay of the wire.
pub const LATENCY: Duration = Duration::from_millis(1);
/// How much later the second copy of a duplicated MAD arrives.
pub const DUPLICATE_GAP: Duration = Duration::from_micros(500);
/// The service both sides use (rdma_cm TCP port space, port 7471).
pub const SERVICE: u64 = PortSpace::Tcp.service_id(7471);
/// A's and B's RC QPs.
pub const A_QPN: u32 = 0x11;
pub const B_QPN: u32 = 0x22;
/// Steps `run` takes before declaring the pair stuck.
pub const MAX_STEPS: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub const fn other(self) -> Self {
        match self {
            Self::A => Self::B,
            Self::B => Self::A,
        }
    }
}

/// What the wire does with one MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
}

/// Drop or duplicate the `nth` (0-based; `None`: every) MAD of type `attr` sent by `from`.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub from: Side,
    pub attr: CmAttr,
    pub nth: Option<usize>,
    pub fate: Fate,
}

/// How a side's application reacts to events.
#[derive(Debug, Clone, Copy)]
pub struct Reactions {
    /// Accept every `ConnectRequest`.
    pub accept: bool,
    /// Send the RTU on `ConnectResponse`.
    pub rtu: bool,
    /// Answer a peer's DREQ (`Disconnected` while in DREQ_RCVD) with `disconnect`.
    pub answer_dreq: bool,
}

impl Default for Reactions {
    fn default() -> Self {
        Self {
            accept: true,
            rtu: true,
            answer_dreq: true,
        }
    }
}

pub struct Node {
    pub cm: CmEndpoint,
    pub gid: Gid,
    pub qpn: Qpn,
    pub react: Reactions,
    /// The side's QP is an XRC initiator (A) or target (B).
    pub xrc: bool,
    /// Every event, with the time it was polled.
    pub events: Vec<(Instant, CmEvent)>,
    /// Every MAD sent, with the time it left.
    pub sent: Vec<(Instant, CmMadRepr)>,
}

impl Node {
    pub fn new(side: Side, seed: u64) -> Self {
        let (ip, guid, qpn) = match side {
            Side::A => ([10, 0, 0, 1], 0x0002_c903_00aa_0001, A_QPN),
            Side::B => ([10, 0, 0, 2], 0x0002_c903_00bb_0002, B_QPN),
        };
        let gid = Gid::from_ipv4(ip.into());
        Self {
            cm: CmEndpoint::new(CmConfig::new(gid, guid, seed)),
            gid,
            qpn: Qpn::new(qpn).unwrap(),
            react: Reactions::default(),
            xrc: false,
            events: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// How many MADs of type `attr` this side sent.
    pub fn sent_count(&self, attr: CmAttr) -> usize {
        self.sent
            .iter()
            .filter(|(_, m)| m.message.attr() == attr)
            .count()
    }

    /// The events, without their times.
    pub fn event_list(&self) -> Vec<CmEvent> {
        self.events.iter().map(|(_, e)| e.clone()).collect()
    }

    /// How many events match `pred`.
    pub fn count(&self, pred: impl Fn(&CmEvent) -> bool) -> usize {
        self.events.iter().filter(|(_, e)| pred(e)).count()
    }

    /// The first event matching `pred`, with its time.
    pub fn find(&self, pred: impl Fn(&CmEvent) -> bool) -> Option<(Instant, CmEvent)> {
        self.events.iter().find(|(_, e)| pred(e)).cloned()
    }

    pub fn accept_params(&self) -> AcceptParams {
        AcceptParams {
            ece: Default::default(),
            xrc: self.xrc,
            local_qpn: self.qpn,
            starting_psn: Psn::new(0x00b0_b0b0),
            responder_resources: 4,
            initiator_depth: 2,
            rnr_retry_count: 7,
            srq: false,
            flow_control: true,
            private_data: b"welcome".to_vec(),
        }
    }
}

struct InFlight {
    at: Instant,
    seq: u64,
    to: Side,
    from: Gid,
    mad: CmMadRepr,
}

pub type Chooser = Box<dyn FnMut(Side, &CmMadRepr) -> Fate>;

pub struct Pair {
    pub a: Node,
    pub b: Node,
    pub epoch: Instant,
    pub now: Instant,
    pub rules: Vec<Rule>,
    /// Consulted for MADs no rule matches (random faults); `None` delivers.
    pub chooser: Option<Chooser>,
    in_flight: Vec<InFlight>,
    seq: u64,
    sent_per_kind: BTreeMap<(Side, CmAttr), usize>,
}

impl Default for Pair {
    fn default() -> Self {
        Self::new(1, 2)
    }
}

impl Pair {
    pub fn new(seed_a: u64, seed_b: u64) -> Self {
        let epoch = Instant::now();
        Self {
            a: Node::new(Side::A, seed_a),
            b: Node::new(Side::B, seed_b),
            epoch,
            now: epoch,
            rules: Vec::new(),
            chooser: None,
            in_flight: Vec::new(),
            seq: 0,
            sent_per_kind: BTreeMap::new(),
        }
    }

    /// Milliseconds of virtual time since the start.
    pub fn elapsed(&self, t: Instant) -> Duration {
        t - self.epoch
    }

    pub fn node(&mut self, side: Side) -> &mut Node {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    pub fn rule(&mut self, from: Side, attr: CmAttr, nth: Option<usize>, fate: Fate) {
        self.rules.push(Rule {
            from,
            attr,
            nth,
            fate,
        });
    }

    /// A REQ from A to B's service, as rdma_cm would build it (less the `cma_hdr`).
    pub fn connect_params(&self) -> ConnectParams {
        ConnectParams {
            ece: Default::default(),
            path: None,
            qp_type: if self.a.xrc {
                CmQpType::Xrc
            } else {
                CmQpType::Rc
            },
            remote_gid: self.b.gid,
            service_id: SERVICE,
            local_qpn: self.a.qpn,
            starting_psn: Psn::new(0x00a0_a0a0),
            responder_resources: 2,
            initiator_depth: 4,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: Mtu::Mtu1024,
            srq: false,
            flow_control: true,
            private_data: b"hello".to_vec(),
        }
    }

    /// B listens, A connects; returns A's connection.
    pub fn start_connect(&mut self) -> ConnId {
        if !self.b.cm.is_listening(SERVICE) {
            self.b.cm.listen(SERVICE).unwrap();
        }
        let params = self.connect_params();
        self.a.cm.connect(self.now, params).unwrap()
    }

    /// Move queued MADs onto the wire and let the applications react, until quiet.
    fn settle(&mut self) {
        loop {
            let mut busy = false;
            for side in [Side::A, Side::B] {
                busy |= self.flush_transmits(side);
                busy |= self.react(side);
            }
            if !busy {
                return;
            }
        }
    }

    fn flush_transmits(&mut self, side: Side) -> bool {
        let now = self.now;
        let mut any = false;
        while let Some(t) = self.node(side).cm.poll_transmit() {
            any = true;
            let from = self.node(side).gid;
            self.node(side).sent.push((now, t.mad));
            let attr = t.mad.message.attr();
            let nth = {
                let n = self.sent_per_kind.entry((side, attr)).or_insert(0);
                *n += 1;
                *n - 1
            };
            let fate = self
                .rules
                .iter()
                .find(|r| r.from == side && r.attr == attr && r.nth.is_none_or(|k| k == nth))
                .map(|r| r.fate)
                .or_else(|| self.chooser.as_mut().map(|c| c(side, &t.mad)))
                .unwrap_or(Fate::Deliver);
            let copies = match fate {
                Fate::Deliver => 1,
                Fate::Drop => 0,
                Fate::Duplicate => 2,
            };
            for copy in 0..copies {
                self.seq += 1;
                self.in_flight.push(InFlight {
                    at: now + LATENCY + DUPLICATE_GAP * copy,
                    seq: self.seq,
                    to: side.other(),
                    from,
                    mad: t.mad,
                });
            }
        }
        any
    }

    fn react(&mut self, side: Side) -> bool {
        let now = self.now;
        let node = self.node(side);
        let mut any = false;
        while let Some(event) = node.cm.poll_event() {
            any = true;
            node.events.push((now, event.clone()));
            match event {
                CmEvent::ConnectRequest { id, .. } if node.react.accept => {
                    let params = node.accept_params();
                    node.cm.accept(now, id, params).unwrap();
                }
                CmEvent::ConnectResponse { id, .. } if node.react.rtu => {
                    node.cm.send_rtu(id, b"thanks").unwrap();
                }
                CmEvent::Disconnected { id, .. }
                    if node.react.answer_dreq && node.cm.state(id) == Some(CmState::DreqRcvd) =>
                {
                    node.cm.disconnect(now, id, &[]).unwrap();
                }
                _ => {}
            }
        }
        any
    }

    /// When something happens next: a delivery or a timer.
    fn next_wakeup(&self) -> Option<Instant> {
        let arrivals = self.in_flight.iter().map(|m| m.at);
        arrivals
            .chain(self.a.cm.poll_timeout())
            .chain(self.b.cm.poll_timeout())
            .min()
    }

    /// Advance to the next wakeup and handle it; false when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.settle();
        let Some(at) = self.next_wakeup() else {
            return false;
        };
        self.now = self.now.max(at);
        let now = self.now;
        let mut due: Vec<InFlight> = Vec::new();
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].at <= now {
                due.push(self.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|m| (m.at, m.seq));
        for m in due {
            self.node(m.to).cm.handle_mad(now, m.from, m.mad);
        }
        self.a.cm.handle_timeout(now);
        self.b.cm.handle_timeout(now);
        self.settle();
        true
    }

    /// Run until nothing is left to happen; panics if that takes more than `MAX_STEPS`.
    pub fn run(&mut self) {
        for _ in 0..MAX_STEPS {
            if !self.step() {
                return;
            }
        }
        panic!("the pair did not go quiet in {MAX_STEPS} steps");
    }

    /// Run until `done` holds (checked between steps); false if the pair went quiet first.
    pub fn run_until(&mut self, mut done: impl FnMut(&Self) -> bool) -> bool {
        for _ in 0..MAX_STEPS {
            self.settle();
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        panic!("condition not reached in {MAX_STEPS} steps");
    }

    /// Handle everything due up to `t`, then move the clock to `t`.
    pub fn run_to(&mut self, t: Instant) {
        for _ in 0..MAX_STEPS {
            self.settle();
            match self.next_wakeup() {
                Some(at) if at <= t => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(t);
                    return;
                }
            }
        }
        panic!("run_to did not reach its time in {MAX_STEPS} steps");
    }

    /// Both endpoints hold no connection and run no timer.
    pub fn is_clean(&self) -> bool {
        self.a.cm.connection_count() == 0
            && self.b.cm.connection_count() == 0
            && self.a.cm.poll_timeout().is_none()
            && self.b.cm.poll_timeout().is_none()
    }
}

pub fn is_established(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Established { .. })
}
pub fn is_request(e: &CmEvent) -> bool {
    matches!(e, CmEvent::ConnectRequest { .. })
}
pub fn is_disconnected(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Disconnected { .. })
}
pub fn is_timewait_exit(e: &CmEvent) -> bool {
    matches!(e, CmEvent::TimeWaitExit { .. })
}
