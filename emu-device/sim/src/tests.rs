use super::*;

/// A toy reliable sender: sends numbered pings, resends after a timeout until echoed.
struct Pinger {
    me: SocketAddr,
    peer: SocketAddr,
    echo: bool,
    to_send: Vec<u32>,
    unacked: Option<(u32, Instant)>,
    received: Vec<u32>,
    resends: u32,
    rto: Duration,
}

impl Pinger {
    fn new(me: &str, peer: &str, echo: bool, count: u32) -> Self {
        Self {
            me: me.parse().unwrap(),
            peer: peer.parse().unwrap(),
            echo,
            to_send: (0..count).rev().collect(),
            unacked: None,
            received: Vec::new(),
            resends: 0,
            rto: Duration::from_millis(1),
        }
    }
}

impl SimNode for Pinger {
    fn handle_datagram(&mut self, _now: Instant, d: &SimDatagram) {
        let n = u32::from_be_bytes(d.payload[..4].try_into().unwrap());
        self.received.push(n);
        if self.echo {
            self.to_send.insert(0, n);
        } else if self.unacked.is_some_and(|(u, _)| u == n) {
            self.unacked = None;
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<SimTransmit> {
        if !self.echo && self.unacked.is_some() {
            return None;
        }
        let n = self.to_send.pop()?;
        if !self.echo {
            self.unacked = Some((n, now + self.rto));
        }
        buf.extend_from_slice(&n.to_be_bytes());
        Some(SimTransmit {
            src: self.me,
            dst: self.peer,
            len: 4,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.unacked.map(|(_, t)| t)
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some((n, t)) = self.unacked
            && t <= now
        {
            self.unacked = None;
            self.to_send.push(n);
            self.resends += 1;
        }
    }
}

fn pair(seed: u64, count: u32) -> (Fabric<Pinger>, NodeId, NodeId) {
    let mut fabric = Fabric::new(seed);
    let a = fabric.add_node(
        "127.0.0.1".parse().unwrap(),
        Pinger::new("127.0.0.1:4791", "127.0.0.2:4791", false, count),
    );
    let b = fabric.add_node(
        "127.0.0.2".parse().unwrap(),
        Pinger::new("127.0.0.2:4791", "127.0.0.1:4791", true, 0),
    );
    (fabric, a, b)
}

#[test]
fn ping_round_trip_takes_two_latencies_of_virtual_time() {
    let (mut fabric, a, _) = pair(1, 1);
    fabric.latency = Duration::from_micros(50);
    assert!(fabric.drive(100));
    assert_eq!(fabric.node(a).received, vec![0]);
    assert_eq!(fabric.elapsed(), Duration::from_micros(100));
    assert_eq!(fabric.stats().delivered, 2);
}

#[test]
fn dropped_ping_is_resent_after_the_timeout() {
    let (mut fabric, a, b) = pair(1, 3);
    fabric.drop_next(1);
    assert!(fabric.drive(1000));
    assert_eq!(fabric.node(a).received, vec![0, 1, 2]);
    assert_eq!(fabric.node(b).received, vec![0, 1, 2]);
    assert_eq!(fabric.node(a).resends, 1);
    assert_eq!(fabric.stats().dropped, 1);
}

#[test]
fn partition_blocks_traffic_until_healed() {
    let (mut fabric, a, b) = pair(1, 1);
    fabric.partition(a, b, true);
    fabric.advance(Duration::from_millis(10));
    assert!(fabric.node(a).received.is_empty());
    assert!(fabric.node(a).resends >= 5);
    fabric.partition(a, b, false);
    assert!(fabric.drive_until(1000, Duration::from_secs(1), |f| {
        !f.node(a).received.is_empty()
    }));
    assert!(fabric.stats().dropped_partition >= 5);
}

#[test]
fn filter_can_duplicate_and_delay() {
    let (mut fabric, _, b) = pair(1, 2);
    fabric.set_filter(|d| {
        if d.payload[..4] == 0u32.to_be_bytes()
            && d.dst.ip() == "127.0.0.2".parse::<IpAddr>().unwrap()
        {
            FilterAction::Duplicate
        } else {
            FilterAction::Pass
        }
    });
    assert!(fabric.drive(1000));
    assert_eq!(fabric.node(b).received, vec![0, 0, 1]);
    assert_eq!(fabric.stats().duplicated, 1);
}

#[test]
fn oversized_datagrams_are_dropped_and_counted() {
    let (mut fabric, a, _) = pair(1, 1);
    fabric.mtu = 3;
    fabric.advance(Duration::from_millis(3));
    assert!(fabric.node(a).received.is_empty());
    assert!(fabric.stats().dropped_mtu >= 1);
}

#[test]
fn same_seed_replays_the_same_lossy_run() {
    let run = |seed| {
        let (mut fabric, a, _) = pair(seed, 200);
        fabric.faults = LinkFaults {
            drop: 0.2,
            duplicate: 0.05,
            reorder: 0.05,
            reorder_delay: Duration::from_micros(30),
            corrupt: 0.0,
        };
        assert!(fabric.drive(100_000));
        (fabric.stats(), fabric.elapsed(), fabric.node(a).resends)
    };
    let first = run(7);
    assert_eq!(first, run(7));
    assert_ne!(first, run(8));
    assert!(first.0.dropped > 0 && first.0.duplicated > 0 && first.0.reordered > 0);
}

#[test]
fn corruption_flips_exactly_one_bit() {
    let (mut fabric, _, b) = pair(3, 1);
    fabric.faults.corrupt = 1.0;
    fabric.advance(Duration::from_micros(15));
    let got = fabric.node(b).received[0];
    assert_eq!(got.count_ones(), 1, "0 with one bit flipped, got {got:#x}");
    // The ping and the echo of the corrupted ping.
    assert_eq!(fabric.stats().corrupted, 2);
}

#[test]
fn a_link_plan_hits_only_its_own_link() {
    let (mut fabric, a, b) = pair(5, 50);
    let c = fabric.add_node(
        "127.0.0.3".parse().unwrap(),
        Pinger::new("127.0.0.3:4791", "127.0.0.4:4791", false, 50),
    );
    let d = fabric.add_node(
        "127.0.0.4".parse().unwrap(),
        Pinger::new("127.0.0.4:4791", "127.0.0.3:4791", true, 0),
    );
    let plan = FaultPlan::parse("drop=0.3,seed=9").unwrap();
    fabric.set_link_plan(a, b, Some(plan));
    assert!(fabric.drive(100_000));
    let on_link = fabric
        .link_fault_counters(b, a)
        .expect("the plan is on a-b");
    assert!(on_link.dropped > 0, "{on_link}");
    assert!(fabric.node(a).resends > 0);
    // c and d talk over a link without a plan: nothing of theirs is lost.
    assert_eq!(fabric.node(c).resends, 0);
    assert_eq!(fabric.node(c).received.len(), 50);
    assert!(fabric.link_fault_counters(c, d).is_none());
}

#[test]
fn the_capture_replays_byte_for_byte_from_the_same_seed() {
    let capture = |seed| {
        let (mut fabric, _, _) = pair(seed, 20);
        fabric.faults.drop = 0.2;
        fabric.set_capture(true);
        assert!(fabric.drive(100_000));
        (fabric.pcap(), fabric.stats().sent)
    };
    let (pcap, sent) = capture(11);
    // A 24-byte file header, then per datagram a 16-byte record header and the frame.
    assert!(pcap.len() > 24 + sent as usize * 16, "{} bytes", pcap.len());
    assert_eq!(capture(11).0, pcap);
    assert_ne!(capture(12).0, pcap);
}
