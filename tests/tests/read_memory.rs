//! Issue 13, READ memory amplification: a 40-byte READ request for 256 MiB, and duplicates
//! of a 64 MiB one, from a hostile peer's plain UDP socket, must not make the responder hold
//! their answers in memory (it used to: 288 MB and 644 MB of RSS, never given back). The
//! only test in its binary, so the process's memory is the device's.

mod common;

use std::time::{Duration, Instant};

use common::fake_peer::{FAKE_PSN, FakePeer, reth};
use softroce_verbs::{Context, QpType};
use softroce_wire::{Mtu, Opcode};

const MIB: u64 = 1 << 20;

/// A `kB` line of /proc/self/status (VmRSS now, VmHWM the peak so far), in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

/// Forget the peak so far (Linux: writing 5 to clear_refs resets VmHWM to VmRSS).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// Wait until the device has sent `n` packets since `from`, or its count stood still for
/// 2 s (duplicates restart each other, so how many go out is not fixed); at most 120 s.
fn wait_sent(ctx: &Context, from: u64, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = (from, Instant::now());
    for _ in 0..1_000_000 {
        let sent = ctx.counters().unwrap().sent_pkts;
        if sent - from >= n || Instant::now() > deadline {
            return sent;
        }
        if sent != last.0 {
            last = (sent, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(2) {
            return sent;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    last.0
}

#[test]
fn huge_and_duplicated_reads_are_answered_without_buffering_their_data() {
    let ctx = Context::open_emulated("victim", "127.0.14.1".parse().unwrap(), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    // Zeroed and never written: its pages cost no memory even while the device reads them,
    // so what the process gains below is what the device buffers.
    let big = pd.allocate(256 << 20).unwrap();
    let prepared = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .mtu(Mtu::Mtu4096)
        .build()
        .unwrap();
    let mut peer = FakePeer::bind("127.0.14.2", ctx.local_addr().unwrap());
    let qp = prepared.handshake(peer.endpoint()).unwrap();
    peer.target(qp.qpn());

    // One READ of the whole 256 MiB: 65536 responses of 4 KiB, which the peer never reads.
    let before = status_bytes("VmRSS:");
    reset_peak();
    let sent = ctx.counters().unwrap().sent_pkts;
    peer.send(
        Opcode::RC_RDMA_READ_REQUEST,
        FAKE_PSN,
        reth(big.addr(0), big.rkey(), 256 << 20),
        &[],
    );
    let after = wait_sent(&ctx, sent, 65536);
    assert_eq!(after - sent, 65536, "every response went out");
    let peak = status_bytes("VmHWM:").saturating_sub(before);
    eprintln!("256 MiB READ: peak growth {} KiB", peak / 1024);
    assert!(
        peak < 32 * MIB,
        "a 256 MiB READ grew memory by {peak} bytes"
    );
    assert_eq!(ctx.with_hca(|h| h.transmit_backlog()).unwrap(), 0);

    // A 64 MiB READ and eight duplicates of it: each restarts the answer, none adds one.
    let before = status_bytes("VmRSS:");
    reset_peak();
    let psn = FAKE_PSN + 65536;
    let read = reth(big.addr(0), big.rkey(), 64 << 20);
    for _ in 0..9 {
        peer.send(Opcode::RC_RDMA_READ_REQUEST, psn, read, &[]);
    }
    let from = after;
    let after = wait_sent(&ctx, from, u64::MAX);
    assert!(after - from >= 16384, "at least one whole answer went out");
    let peak = status_bytes("VmHWM:").saturating_sub(before);
    eprintln!(
        "64 MiB READ and 8 duplicates: {} packets, peak growth {} KiB",
        after - from,
        peak / 1024
    );
    assert!(
        peak < 32 * MIB,
        "duplicated READs grew memory by {peak} bytes"
    );
}
