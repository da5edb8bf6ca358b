//! Issue 15, "Scale": ten thousand connected RC QPs on one device, in the deterministic
//! simulator. What a QP costs the emulator in memory is measured by counting this test
//! thread's heap allocations (a counting global allocator), and bounded at 16 KiB; then
//! every one of the QPs carries traffic both ways, and every byte is checked.
//!
//! The bytes counted are everything the two devices and the simulated fabric hold beyond
//! the application's regions, divided by the QPs: the fabric's queues (which keep the
//! capacity of the largest burst, 160 000 datagrams here) make it an upper bound.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use common::{Memory, pattern, register};
use softroce_emu::core::*;
use softroce_emu::sim::{Fabric, NodeId};
use softroce_wire::{Gid, Mtu, Psn};

/// Heap bytes live, counted per thread: the tests of this binary run side by side, and
/// each measures only what its own thread (and so its own devices) allocated.
struct CountingAllocator;

thread_local! {
    // `const` and without a destructor: touching it never allocates, as an allocator must.
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: a thread's last frees may come after its thread-locals are gone.
    let _ = LIVE_BYTES.try_with(|b| b.set(b.get() + delta));
}

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter moves.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live_bytes() -> isize {
    LIVE_BYTES.with(Cell::get)
}

/// Issue 15's scale: QPs per device.
const QPS: usize = 10_000;
/// Issue 15's bound on the emulator's state per QP.
const MAX_BYTES_PER_QP: isize = 16 * 1024;
/// Each QP's send and receive queue depth: what a connection that keeps a few messages in
/// flight asks for (`softroce perf`'s default keeps 16).
const DEPTH: u32 = 16;
/// Bytes each QP moves each way, in a slot of its own.
const MSG: usize = 64;
/// Each side's region: QP `i` sends from slot `i` of the first half and its peer's data
/// lands in slot `i` of the second.
const MEM: usize = 2 * QPS * MSG;
const IN: usize = QPS * MSG;
const A_IP: &str = "127.0.0.1";
const B_IP: &str = "127.0.0.2";

/// One device with `QPS` RC QPs on one PD and one CQ, and a region of two slots per QP.
struct Side {
    node: NodeId,
    cq: CqHandle,
    mem: Memory,
    qps: Vec<(QpHandle, u32)>,
}

/// Two devices whose QPs are connected pairwise: A's `i`-th to B's `i`-th.
struct Fleet {
    fabric: Fabric<Hca>,
    a: Side,
    b: Side,
}

fn open_side(fabric: &mut Fabric<Hca>, ip: &str, seed: u64) -> Side {
    let mut cfg = HcaConfig::new(format!("scale-{ip}"), ip.parse().unwrap());
    cfg.seed = seed;
    let node = fabric.add_node(ip.parse().unwrap(), Hca::new(cfg));
    let hca = fabric.node_mut(node);
    let pd = hca.alloc_pd().unwrap();
    // Every QP's send and receive completions fit at once.
    let (cq, _) = hca.create_cq(2 * QPS as u32, None, 0, 0).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mem = register(hca, pd, MEM, access);
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::new(DEPTH, DEPTH),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
    };
    let qps = (0..QPS)
        .map(|_| {
            let (qp, qpn, _) = hca.create_qp(pd, init).unwrap();
            (qp, qpn.value())
        })
        .collect();
    Side { node, cq, mem, qps }
}

fn connect_all(hca: &mut Hca, ours: &[(QpHandle, u32)], theirs: &[(QpHandle, u32)], ip: &str) {
    let bringup = QpBringup {
        access: AccessFlags::REMOTE_WRITE,
        mtu: Mtu::Mtu1024,
        ..QpBringup::new(QpType::Rc)
    };
    for (&(qp, _), &(_, peer_qpn)) in ours.iter().zip(theirs) {
        let peer = QpPeer {
            qpn: peer_qpn,
            psn: Psn::new(0),
            av: AhAttr::new(Gid::from_ip(ip.parse().unwrap()), 0),
        };
        bringup.to_rts(hca, qp, &peer, Psn::new(0)).unwrap();
    }
}

impl Fleet {
    fn connected(seed: u64) -> Self {
        let mut fabric = Fabric::new(seed);
        let a = open_side(&mut fabric, A_IP, seed);
        let b = open_side(&mut fabric, B_IP, seed + 1);
        connect_all(fabric.node_mut(a.node), &a.qps, &b.qps, B_IP);
        connect_all(fabric.node_mut(b.node), &b.qps, &a.qps, A_IP);
        Self { fabric, a, b }
    }

    /// Every QP of A SENDs its slot to B (received into the QP's incoming slot there),
    /// and every QP of B WRITEs its slot to the QP's incoming slot at A: traffic on all of
    /// them, each way. Returns each side's completions.
    fn exchange_on_every_qp(&mut self) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
        for i in 0..QPS {
            self.a.mem.write(i * MSG, &slot_data('a', i));
            self.b.mem.write(i * MSG, &slot_data('b', i));
        }
        let (a, b) = (&self.a, &self.b);
        let hb = self.fabric.node_mut(b.node);
        for (i, &(qp, _)) in b.qps.iter().enumerate() {
            let recv = RecvWr {
                wr_id: i as u64,
                sg_list: vec![b.mem.sge(IN + i * MSG, MSG)].into(),
            };
            hb.post_recv(qp, &[recv]).unwrap();
            let mut write = SendWr::new(i as u64, WrOpcode::RdmaWrite);
            write.sg_list = vec![b.mem.sge(i * MSG, MSG)].into();
            write.rdma = RdmaTarget {
                remote_addr: a.mem.addr(IN + i * MSG),
                rkey: a.mem.keys.rkey,
            };
            // SAFETY: the slot lives in `b.mem` until the fleet is dropped.
            unsafe { hb.post_send(qp, &[write]) }.unwrap();
        }
        let ha = self.fabric.node_mut(a.node);
        for (i, &(qp, _)) in a.qps.iter().enumerate() {
            let mut send = SendWr::new(i as u64, WrOpcode::Send);
            send.sg_list = vec![a.mem.sge(i * MSG, MSG)].into();
            // SAFETY: as above.
            unsafe { ha.post_send(qp, &[send]) }.unwrap();
        }
        // A: its SENDs. B: its WRITEs and its receives.
        let (want_a, want_b) = (QPS, 2 * QPS);
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        let (cq_a, cq_b, node_a, node_b) = (a.cq, b.cq, a.node, b.node);
        let mut buf = vec![WorkCompletion::success(0, 0, WcOpcode::Send, 0); 256];
        let mut poll = |hca: &mut Hca, cq, into: &mut Vec<WorkCompletion>| {
            // Bounded: each round takes a full batch or ends the polling.
            for _ in 0..=(2 * QPS / buf.len()) {
                let n = hca.poll_cq(cq, &mut buf).unwrap();
                into.extend_from_slice(&buf[..n]);
                if n < buf.len() {
                    break;
                }
            }
        };
        // Virtual time and steps both bound the run; no packet is lost, so no retry is due.
        self.fabric
            .drive_until(1_000_000, Duration::from_secs(10), |f| {
                poll(f.node_mut(node_a), cq_a, &mut got_a);
                poll(f.node_mut(node_b), cq_b, &mut got_b);
                got_a.len() >= want_a && got_b.len() >= want_b
            });
        (got_a, got_b)
    }
}

/// What QP `i` of side `side` sends: its side and number, then a pattern of both.
fn slot_data(side: char, i: usize) -> Vec<u8> {
    let mut d = pattern(i as u8 ^ side as u8, MSG);
    d[0] = side as u8;
    d[1..5].copy_from_slice(&(i as u32).to_le_bytes());
    d
}

impl Fleet {
    /// Fill every queue: each QP of A posts `DEPTH` 8-byte WRITEs (the last signaled) and
    /// each QP of B `DEPTH` receives, which stay posted. Nothing moves yet.
    fn fill_queues(&mut self) {
        let (a, b) = (&self.a, &self.b);
        let hb = self.fabric.node_mut(b.node);
        for (i, &(qp, _)) in b.qps.iter().enumerate() {
            let recvs: Vec<RecvWr> = (0..DEPTH)
                .map(|k| RecvWr {
                    wr_id: u64::from(k),
                    sg_list: vec![b.mem.sge(IN + i * MSG, MSG)].into(),
                })
                .collect();
            hb.post_recv(qp, &recvs).unwrap();
        }
        let ha = self.fabric.node_mut(a.node);
        for (i, &(qp, _)) in a.qps.iter().enumerate() {
            let writes: Vec<SendWr> = (0..DEPTH)
                .map(|k| {
                    let mut w = SendWr::new(i as u64, WrOpcode::RdmaWrite);
                    w.sg_list = vec![a.mem.sge(i * MSG, 8)].into();
                    w.rdma = RdmaTarget {
                        remote_addr: b.mem.addr(IN + i * MSG),
                        rkey: b.mem.keys.rkey,
                    };
                    if k + 1 < DEPTH {
                        w.send_flags = SendFlags::EMPTY;
                    }
                    w
                })
                .collect();
            // SAFETY: the slots live in `a.mem` until the fleet is dropped.
            unsafe { ha.post_send(qp, &writes) }.unwrap();
        }
    }

    /// Drive the fabric until every QP of A completed its signaled WRITE.
    fn drain_writes(&mut self) -> usize {
        let (cq, node) = (self.a.cq, self.a.node);
        let mut buf = vec![WorkCompletion::success(0, 0, WcOpcode::Send, 0); 256];
        let mut done = 0;
        self.fabric
            .drive_until(4_000_000, Duration::from_secs(10), |f| {
                // Bounded: each round takes a full batch or ends the polling.
                for _ in 0..=(QPS / buf.len()) {
                    let n = f.node_mut(node).poll_cq(cq, &mut buf).unwrap();
                    assert!(buf[..n].iter().all(|wc| wc.status == WcStatus::Success));
                    done += n;
                    if n < buf.len() {
                        break;
                    }
                }
                done >= QPS
            });
        done
    }
}

#[test]
fn ten_thousand_connected_rc_qps_take_at_most_16_kib_of_emulator_state_each() {
    let before = live_bytes();
    let mut fleet = Fleet::connected(15);
    let per_qp = |bytes: isize| bytes / (2 * QPS as isize);
    // The regions are the application's memory (one slot per QP), not the emulator's.
    let app = 2 * MEM as isize;
    let connected = per_qp(live_bytes() - before - app);
    println!("emulator state per connected RC QP: {connected} bytes");
    assert!(
        connected <= MAX_BYTES_PER_QP,
        "{connected} bytes per connected QP, more than {MAX_BYTES_PER_QP}"
    );
    // Queues grow with use: the state after every QP moved a message each way counts too.
    let (a, b) = fleet.exchange_on_every_qp();
    assert_eq!(
        (a.len(), b.len()),
        (QPS, 2 * QPS),
        "every message completed"
    );
    drop((a, b));
    let used = per_qp(live_bytes() - before - app);
    println!("emulator state per RC QP after traffic: {used} bytes");
    assert!(
        used <= MAX_BYTES_PER_QP,
        "{used} bytes per QP after traffic, more than {MAX_BYTES_PER_QP}"
    );
    // At its largest: every send and receive queue full.
    fleet.fill_queues();
    let full = per_qp(live_bytes() - before - app);
    println!(
        "emulator state per RC QP with {DEPTH} sends and {DEPTH} receives queued: {full} bytes"
    );
    assert!(
        full <= MAX_BYTES_PER_QP,
        "{full} bytes per QP with full queues, more than {MAX_BYTES_PER_QP}"
    );
    assert_eq!(fleet.drain_writes(), QPS, "every QP's WRITEs completed");
    let drained = per_qp(live_bytes() - before - app);
    println!("emulator state per RC QP once its WRITEs completed: {drained} bytes");
    assert!(
        drained <= MAX_BYTES_PER_QP,
        "{drained} bytes per QP after the WRITEs, more than {MAX_BYTES_PER_QP}"
    );
}

#[test]
fn every_one_of_ten_thousand_rc_qps_carries_a_message_each_way_intact() {
    let mut fleet = Fleet::connected(16);
    let (a, b) = fleet.exchange_on_every_qp();

    let qpn_index = |side: &Side| -> std::collections::HashMap<u32, usize> {
        side.qps
            .iter()
            .enumerate()
            .map(|(i, &(_, n))| (n, i))
            .collect()
    };
    let (index_a, index_b) = (qpn_index(&fleet.a), qpn_index(&fleet.b));
    // A: one successful SEND completion per QP, on that QP.
    let mut sent = vec![false; QPS];
    for wc in &a {
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Send));
        assert_eq!(index_a[&wc.qp_num], wc.wr_id as usize, "SEND on its own QP");
        assert!(!std::mem::replace(&mut sent[wc.wr_id as usize], true));
    }
    // B: one WRITE and one receive completion per QP, the receive with the whole slot.
    let (mut written, mut received) = (vec![false; QPS], vec![false; QPS]);
    for wc in &b {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        let i = wc.wr_id as usize;
        assert_eq!(index_b[&wc.qp_num], i, "completion on its own QP");
        let seen = match wc.opcode {
            WcOpcode::RdmaWrite => &mut written,
            WcOpcode::Recv => {
                assert_eq!(wc.byte_len as usize, MSG);
                &mut received
            }
            other => panic!("unexpected completion {other:?}"),
        };
        assert!(
            !std::mem::replace(&mut seen[i], true),
            "one completion each"
        );
    }
    assert!(sent.iter().all(|&s| s), "every QP of A sent");
    assert!(written.iter().all(|&w| w), "every QP of B wrote");
    assert!(received.iter().all(|&r| r), "every QP of B received");
    // Every incoming slot holds what the QP's peer sent.
    for i in 0..QPS {
        assert_eq!(
            fleet.b.mem.read(IN + i * MSG, MSG),
            slot_data('a', i),
            "QP {i} at B"
        );
        assert_eq!(
            fleet.a.mem.read(IN + i * MSG, MSG),
            slot_data('b', i),
            "QP {i} at A"
        );
    }
    // No QP needed a retry: a lossless fabric delivers each packet once.
    let counters = fleet.fabric.node(fleet.a.node).counters().clone();
    assert_eq!(counters.completer_retry_err, 0);
}
