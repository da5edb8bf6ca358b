//! The connection manager on the deterministic fabric: two HCAs whose QP1s carry CM MADs
//! (the same glue as a real device, `CmAgent`), an application on each side reacting to
//! its events, and a fabric that loses or repeats chosen CM messages. Retries cost virtual
//! time only, so rdma_cm's 4-second response timeout costs nothing here.

use std::time::Duration;

use softroce_emu::cm::{
    AcceptParams, CmConfig, CmEndpoint, CmEvent, ConnectParams, REJ_INVALID_SERVICE_ID,
};
use softroce_emu::core::{Hca, HcaConfig};
use softroce_emu::driver::cm::{CmAgent, CmHca};
use softroce_emu::sim::{Fabric, FilterAction, NodeId, SimDatagram};
use softroce_wire::cm::CmAttr;
use softroce_wire::mad::Mad;
use softroce_wire::{Gid, Mtu, PortSpace, Psn, Qpn, RocePacket};

const A_IP: &str = "10.0.0.1";
const B_IP: &str = "10.0.0.2";
const SERVICE: u64 = PortSpace::Tcp.service_id(7471);

fn device(ip: &str, seed: u64) -> CmHca {
    let hca = Hca::new(HcaConfig::new("sim", ip.parse().unwrap()));
    let gid = Gid::from_ip(ip.parse().unwrap());
    let cm = CmAgent::new(CmEndpoint::new(CmConfig::new(gid, seed, seed)), 4791);
    CmHca::new(hca, cm)
}

/// The CM message a datagram carries, if it is one.
fn cm_attr(d: &SimDatagram) -> Option<CmAttr> {
    let p = RocePacket::new_checked(&d.payload[..]).ok()?;
    let mad = Mad::new_checked(p.payload()).ok()?;
    CmAttr::from_id(mad.attr_id())
}

/// Two devices, and each application's record of its CM's events.
struct Story {
    fabric: Fabric<CmHca>,
    a: NodeId,
    b: NodeId,
    seen: [Vec<CmEvent>; 2],
}

impl Story {
    fn new(seed: u64) -> Self {
        let mut fabric = Fabric::new(seed);
        let a = fabric.add_node(A_IP.parse().unwrap(), device(A_IP, 0xa));
        let b = fabric.add_node(B_IP.parse().unwrap(), device(B_IP, 0xb));
        Self {
            fabric,
            a,
            b,
            seen: [Vec::new(), Vec::new()],
        }
    }

    /// Lose (or repeat) the `nth` (from 1) CM message of kind `attr`.
    fn hit(&mut self, attr: CmAttr, nth: u32, action: FilterAction) {
        let mut count = 0;
        self.fabric.set_filter(move |d| {
            if cm_attr(d) == Some(attr) {
                count += 1;
                if count == nth {
                    return action;
                }
            }
            FilterAction::Pass
        });
    }

    fn node(&mut self, id: NodeId) -> &mut CmHca {
        self.fabric.node_mut(id)
    }

    fn seen(&self, id: NodeId) -> &[CmEvent] {
        &self.seen[id.0]
    }

    /// A asks B for a connection.
    fn connect(&mut self, service_id: u64) {
        let now = self.fabric.now();
        let b_gid = Gid::from_ip(self.fabric.addr(self.b));
        let a = self.node(self.a);
        let params = ConnectParams {
            ece: Default::default(),
            path: None,
            qp_type: Default::default(),
            remote_gid: b_gid,
            service_id,
            local_qpn: Qpn::new(0x11).unwrap(),
            starting_psn: Psn::new(1),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: Mtu::Mtu1024,
            srq: false,
            flow_control: true,
            private_data: Vec::new(),
        };
        a.cm.endpoint().connect(now, params).unwrap();
        a.pump(now);
    }

    /// Both applications take their events and answer as an rdma_cm program does: B
    /// accepts requests, A sends the RTU on a reply, a peer's DREQ is answered.
    fn react(&mut self) {
        let now = self.fabric.now();
        for id in [self.a, self.b] {
            let n = self.fabric.node_mut(id);
            while let Some(ev) = n.cm.take_event() {
                let ep = n.cm.endpoint();
                match &ev {
                    CmEvent::ConnectRequest { id, .. } => {
                        let params = AcceptParams {
                            ece: Default::default(),
                            xrc: false,
                            local_qpn: Qpn::new(0x22).unwrap(),
                            starting_psn: Psn::new(2),
                            responder_resources: 1,
                            initiator_depth: 1,
                            rnr_retry_count: 7,
                            srq: false,
                            flow_control: true,
                            private_data: Vec::new(),
                        };
                        ep.accept(now, *id, params).unwrap();
                    }
                    CmEvent::ConnectResponse { id, .. } => ep.send_rtu(*id, &[]).unwrap(),
                    CmEvent::Disconnected { id, .. } => {
                        // Our own DREQ's answer needs nothing; a peer's DREQ gets its DREP.
                        let _ = ep.disconnect(now, *id, &[]);
                    }
                    _ => {}
                }
                self.seen[id.0].push(ev);
                n.pump(now);
            }
        }
    }

    /// Run (reacting) until `done` holds; bounded in steps and in virtual time.
    fn run_until(&mut self, mut done: impl FnMut(&mut Self) -> bool) {
        for _ in 0..100_000 {
            self.react();
            if done(self) {
                return;
            }
            let moved = self.fabric.elapsed() < Duration::from_secs(600) && self.fabric.step();
            if !moved {
                let at = self.fabric.elapsed();
                let a_saw = format!("{:?}", self.seen(self.a));
                let b_saw = format!("{:?}", self.seen(self.b));
                panic!("the story stalled at {at:?}: A saw {a_saw}, B saw {b_saw}");
            }
        }
        panic!("no end within 100 000 steps");
    }

    fn count(&mut self, id: NodeId, f: fn(&CmEvent) -> bool) -> usize {
        self.seen(id).iter().filter(|e| f(e)).count()
    }

    fn established_both(&mut self) -> bool {
        let (a, b) = (self.a, self.b);
        self.count(a, is_established) == 1 && self.count(b, is_established) == 1
    }

    fn disconnect_a(&mut self) {
        let now = self.fabric.now();
        let id = self
            .seen(self.a)
            .iter()
            .find_map(|e| matches!(e, CmEvent::Established { .. }).then(|| e.id()))
            .unwrap();
        let a = self.node(self.a);
        a.cm.endpoint().disconnect(now, id, &[]).unwrap();
        a.pump(now);
    }

    fn both_left_time_wait(&mut self) -> bool {
        let (a, b) = (self.a, self.b);
        self.count(a, is_timewait_exit) == 1 && self.count(b, is_timewait_exit) == 1
    }
}

fn is_established(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Established { .. })
}
fn is_request(e: &CmEvent) -> bool {
    matches!(e, CmEvent::ConnectRequest { .. })
}
fn is_disconnected(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Disconnected { .. })
}
fn is_timewait_exit(e: &CmEvent) -> bool {
    matches!(e, CmEvent::TimeWaitExit { .. })
}

/// The whole life of one connection with `attr`'s `nth` message hit by `action`: it is
/// established exactly once on each side, torn down, and both sides leave time-wait with
/// nothing remembered.
fn life_with(attr: Option<(CmAttr, FilterAction)>) -> Story {
    let mut s = Story::new(1);
    if let Some((attr, action)) = attr {
        s.hit(attr, 1, action);
    }
    s.node(s.b).cm.endpoint().listen(SERVICE).unwrap();
    s.connect(SERVICE);
    s.run_until(Story::established_both);
    s.disconnect_a();
    s.run_until(Story::both_left_time_wait);
    let (a, b) = (s.a, s.b);
    assert_eq!(
        s.count(b, is_request),
        1,
        "one request reached the application"
    );
    assert_eq!(s.count(a, is_established), 1);
    assert_eq!(s.count(b, is_established), 1);
    assert_eq!(s.count(a, is_disconnected), 1);
    assert_eq!(s.count(b, is_disconnected), 1);
    assert_eq!(s.node(a).cm.endpoint().connection_count(), 0);
    assert_eq!(s.node(b).cm.endpoint().connection_count(), 0);
    s
}

fn retransmitted(s: &mut Story, id: NodeId) -> u64 {
    s.node(id).cm.endpoint().counters().retransmitted
}

#[test]
fn a_connection_lives_and_ends_on_a_clean_fabric() {
    let mut s = life_with(None);
    let (a, b) = (s.a, s.b);
    assert_eq!(retransmitted(&mut s, a) + retransmitted(&mut s, b), 0);
    // REQ, RTU, DREQ from A; REP, DREP from B: five MADs through the QP1s.
    assert_eq!(s.node(a).hca.counters().mad_sent, 3);
    assert_eq!(s.node(b).hca.counters().mad_sent, 2);
}

#[test]
fn a_lost_req_is_retried() {
    let mut s = life_with(Some((CmAttr::Req, FilterAction::Drop)));
    let a = s.a;
    assert_eq!(retransmitted(&mut s, a), 1);
}

#[test]
fn a_lost_rep_is_retried() {
    let mut s = life_with(Some((CmAttr::Rep, FilterAction::Drop)));
    let b = s.b;
    assert_eq!(retransmitted(&mut s, b), 1);
}

#[test]
fn a_lost_rtu_is_made_good_by_the_repeated_rep() {
    let mut s = life_with(Some((CmAttr::Rtu, FilterAction::Drop)));
    let (a, b) = (s.a, s.b);
    assert_eq!(retransmitted(&mut s, b), 1, "B repeated its REP");
    assert!(
        s.node(a).cm.endpoint().counters().duplicates >= 1,
        "A answered it with the RTU again"
    );
}

#[test]
fn a_lost_dreq_is_retried() {
    let mut s = life_with(Some((CmAttr::Dreq, FilterAction::Drop)));
    let a = s.a;
    assert_eq!(retransmitted(&mut s, a), 1);
}

#[test]
fn a_duplicated_req_makes_one_connection() {
    let mut s = life_with(Some((CmAttr::Req, FilterAction::Duplicate)));
    let b = s.b;
    assert!(s.node(b).cm.endpoint().counters().duplicates >= 1);
}

#[test]
fn time_wait_holds_the_connection_until_it_ends() {
    let mut s = Story::new(2);
    s.node(s.b).cm.endpoint().listen(SERVICE).unwrap();
    s.connect(SERVICE);
    s.run_until(Story::established_both);
    s.disconnect_a();
    let (a, b) = (s.a, s.b);
    s.run_until(|s| s.count(a, is_disconnected) == 1 && s.count(b, is_disconnected) == 1);
    // Disconnected on both sides, but the IDs stay out of reuse in time-wait...
    assert_eq!(s.node(a).cm.endpoint().connection_count(), 1);
    assert_eq!(s.node(b).cm.endpoint().connection_count(), 1);
    let disconnected_at = s.fabric.elapsed();
    s.run_until(Story::both_left_time_wait);
    // ...until their time-wait (the path's ACK timeout) ran out in virtual time.
    assert!(s.fabric.elapsed() > disconnected_at);
    assert_eq!(s.node(a).cm.endpoint().connection_count(), 0);
    assert_eq!(s.node(b).cm.endpoint().connection_count(), 0);
}

#[test]
fn a_request_for_a_service_nobody_listens_on_is_rejected() {
    let mut s = Story::new(3);
    s.connect(SERVICE);
    let a = s.a;
    s.run_until(|s| !s.seen(a).is_empty());
    match &s.seen(a)[0] {
        CmEvent::Rejected { reason, .. } => assert_eq!(*reason, REJ_INVALID_SERVICE_ID),
        other => panic!("expected a REJ, got {other:?}"),
    }
}
