//! The bound on RC requests in flight to a peer (`HcaConfig::max_outstanding_psns`): busy
//! QPs together never have more request packets unacknowledged at one peer than the bound,
//! however many QPs there are, every QP still finishes its work, and a peer that never
//! answers holds back only the QPs that talk to it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Memory, drive, pattern, register};
use softroce_emu::core::*;
use softroce_emu::sim::{Fabric, FilterAction};

const QPS: usize = 8;
const WRITES_PER_QP: usize = 8;
/// 16 packets at MTU 1024: 128 per QP, a whole per-QP window.
const WRITE: usize = 16 * 1024;
const CAP: u32 = 256;

#[test]
fn busy_qps_together_never_exceed_the_devices_bound_on_requests_in_flight() {
    let mut fabric = Fabric::new(9);
    let len = QPS * WRITES_PER_QP * WRITE;
    let Ends {
        mut a,
        mut b,
        pd_a,
        pd_b,
        cq_a,
        cq_b,
        mem_a,
        mem_b,
    } = ends(10, len);
    let mut qps = Vec::new();
    for _ in 0..QPS {
        let (qa, na, _) = a.create_qp(pd_a, rc(cq_a)).unwrap();
        let (qb, nb, _) = b.create_qp(pd_b, rc(cq_b)).unwrap();
        connect(&mut a, qa, "127.0.0.2", nb.value());
        connect(&mut b, qb, "127.0.0.1", na.value());
        qps.push(qa);
    }
    let data = pattern(5, len);
    mem_a.write(0, &data);
    for (q, &qp) in qps.iter().enumerate() {
        for w in 0..WRITES_PER_QP {
            let off = (q * WRITES_PER_QP + w) * WRITE;
            let wr = write(&mem_a, off, mem_b.keys.rkey, mem_b.addr(off));
            // SAFETY: no inline data.
            unsafe { a.post_send(qp, &[wr]) }.unwrap();
        }
    }
    let node_a = fabric.add_node("127.0.0.1".parse().unwrap(), a);
    fabric.add_node("127.0.0.2".parse().unwrap(), b);

    // b's ACKs are held up 10 ms on the way back: until then nothing is acknowledged, so
    // what a sends in the first 5 ms is everything it lets itself have in flight. Each QP
    // alone may have 128 packets out (its window); the eight together stop at the bound,
    // give or take the one turn (64 packets) a QP takes before its share is counted.
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    let a_ip = fabric.addr(node_a);
    fabric.set_filter(move |d| {
        if d.dst.ip() == a_ip {
            return FilterAction::Delay(Duration::from_millis(10));
        }
        counted.fetch_add(1, Ordering::Relaxed);
        FilterAction::Pass
    });
    let mut in_flight = 0;
    // Read before each step: the step that ends the drive may run what comes after 5 ms.
    fabric.drive_until(1_000_000, Duration::from_millis(5), |f| {
        if f.elapsed() < Duration::from_millis(5) {
            in_flight = requests.load(Ordering::Relaxed);
        }
        false
    });
    assert!(
        in_flight >= CAP as usize && in_flight < CAP as usize + 64,
        "{in_flight} request packets before any ACK (bound {CAP}, windows allow {})",
        QPS * 128
    );

    // With the ACKs flowing again, every WRITE of every QP completes, nothing resent.
    fabric.set_filter(|_| FilterAction::Pass);
    let wcs = drive(
        &mut fabric,
        node_a,
        cq_a,
        QPS * WRITES_PER_QP,
        Duration::from_secs(10),
    );
    assert_eq!(wcs.len(), QPS * WRITES_PER_QP);
    assert!(
        wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    assert_eq!(mem_b.read(0, len), data, "every byte landed");
    let counters = fabric.node_mut(node_a).counters().clone();
    assert_eq!(counters.retransmitted_pkts, 0, "{counters}");
}

/// RTS toward `remote_qpn` at MTU 1024 with rdma-core's ACK timeout (67 ms): longer than
/// the held-up ACKs take.
fn connect(hca: &mut Hca, qp: QpHandle, remote_ip: &str, remote_qpn: u32) {
    let bringup = QpBringup {
        mtu: softroce_wire::Mtu::Mtu1024,
        timeout: 14,
        ..QpBringup::new(QpType::Rc)
    };
    let psn = softroce_wire::Psn::new(0x00ff_fff0);
    let peer = QpPeer {
        qpn: remote_qpn,
        psn,
        av: AhAttr::new(softroce_wire::Gid::from_ip(remote_ip.parse().unwrap()), 0),
    };
    bringup.to_rts(hca, qp, &peer, psn).unwrap();
}

#[test]
fn a_peer_that_never_answers_holds_back_only_the_qps_that_talk_to_it() {
    // Four of a's QPs write to 127.0.0.9, where nothing answers (nothing is there): two
    // windows fill the bound for that peer. a's QP to b, a live peer, is not held back: the
    // bound is what one peer's socket can buffer, not a device-wide budget a dead peer could
    // use up.
    let mut fabric = Fabric::new(11);
    let len = WRITES_PER_QP * WRITE;
    let Ends {
        mut a,
        mut b,
        pd_a,
        pd_b,
        cq_a,
        cq_b,
        mem_a,
        mem_b,
    } = ends(12, len);
    for dead in 0..4 {
        let (qp, _, _) = a.create_qp(pd_a, rc(cq_a)).unwrap();
        connect(&mut a, qp, "127.0.0.9", 0x99 + dead);
        for w in 0..WRITES_PER_QP {
            // SAFETY: no inline data.
            unsafe { a.post_send(qp, &[write(&mem_a, w * WRITE, 0x1234, 0x1000)]) }.unwrap();
        }
    }
    let (qa, na, _) = a.create_qp(pd_a, rc(cq_a)).unwrap();
    let (qb, nb, _) = b.create_qp(pd_b, rc(cq_b)).unwrap();
    connect(&mut a, qa, "127.0.0.2", nb.value());
    connect(&mut b, qb, "127.0.0.1", na.value());
    let data = pattern(7, len);
    mem_a.write(0, &data);
    let node_a = fabric.add_node("127.0.0.1".parse().unwrap(), a);
    fabric.add_node("127.0.0.2".parse().unwrap(), b);
    // The dead peer's QPs go first and fill its bound; then the live one's writes.
    fabric.drive_until(1_000_000, Duration::from_millis(1), |_| false);
    for w in 0..WRITES_PER_QP {
        let wr = write(&mem_a, w * WRITE, mem_b.keys.rkey, mem_b.addr(w * WRITE));
        // SAFETY: no inline data.
        unsafe { fabric.node_mut(node_a).post_send(qa, &[wr]) }.unwrap();
    }
    // Well inside the dead peer's 67 ms ACK timeout: nothing of theirs has moved.
    let wcs = drive(
        &mut fabric,
        node_a,
        cq_a,
        WRITES_PER_QP,
        Duration::from_millis(20),
    );
    assert_eq!(wcs.len(), WRITES_PER_QP, "{wcs:?}");
    assert!(
        wcs.iter()
            .all(|wc| wc.status == WcStatus::Success && wc.qp_num == na.value()),
        "{wcs:?}"
    );
    assert_eq!(mem_b.read(0, len), data);
}

/// Device a (bound [`CAP`] per peer) and device b, each with a PD, a CQ and `len` bytes
/// registered for remote writes, not yet on a fabric.
struct Ends {
    a: Hca,
    b: Hca,
    pd_a: PdHandle,
    pd_b: PdHandle,
    cq_a: CqHandle,
    cq_b: CqHandle,
    mem_a: Memory,
    mem_b: Memory,
}

fn ends(b_seed: u64, len: usize) -> Ends {
    let mut cfg = HcaConfig::new("dev-a", "127.0.0.1".parse().unwrap());
    cfg.link_mtu = 9000;
    cfg.max_outstanding_psns = CAP;
    let mut a = Hca::new(cfg);
    let mut b = common::device("127.0.0.2", b_seed);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, _) = a.create_cq(256, None, 0, 0).unwrap();
    let (cq_b, _) = b.create_cq(256, None, 0, 0).unwrap();
    let mem_a = register(&mut a, pd_a, len, access);
    let mem_b = register(&mut b, pd_b, len, access);
    Ends {
        a,
        b,
        pd_a,
        pd_b,
        cq_a,
        cq_b,
        mem_a,
        mem_b,
    }
}

/// An RC QP on `cq`, every send signaled.
fn rc(cq: CqHandle) -> QpInitAttr {
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::new(64, 4),
        qp_type: QpType::Rc,
        sq_sig_all: true,
        qp_context: 0,
    }
}

/// A WRITE of [`WRITE`] bytes of `mem` at `off` (its wr_id) to `remote` under `rkey`.
fn write(mem: &Memory, off: usize, rkey: u32, remote: u64) -> SendWr {
    let mut wr = SendWr::new(off as u64, WrOpcode::RdmaWrite);
    wr.sg_list = vec![mem.sge(off, WRITE)].into();
    wr.rdma = RdmaTarget {
        remote_addr: remote,
        rkey,
    };
    wr
}
