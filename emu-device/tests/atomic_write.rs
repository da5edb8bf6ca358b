//! RDMA ATOMIC WRITE (IBTA 1.5; `IBV_WR_ATOMIC_WRITE`, `ibv_wr_atomic_write` in rdma-core
//! 44's verbs.h) between two emulated devices, as rxe runs it (Linux 6.2 rxe_req.c,
//! rxe_resp.c, rxe_comp.c): one RC_ATOMIC_WRITE packet (RETH + 8 bytes) answered by a READ
//! RESPONSE ONLY without data; the 8 bytes land in one store; the responder refuses what
//! rxe refuses, with the NAK rxe sends.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::FilterAction;
use softroce_wire::{
    BthRepr, ExtRepr, Mtu, NakCode, Opcode, Psn, Qpn, RethRepr, RoceRepr, Syndrome,
};

const LONG: Duration = Duration::from_secs(30);

/// An ATOMIC WRITE of the 8 bytes at `a`'s offset 0 to `remote_addr` with `rkey`.
fn atomic_write(pair: &Pair, remote_addr: u64, rkey: u32) -> SendWr {
    let mut wr = SendWr::new(21, WrOpcode::AtomicWrite);
    wr.sg_list = vec![pair.a.mem.sge(0, 8)].into();
    wr.rdma = RdmaTarget { remote_addr, rkey };
    wr
}

/// Post `wr` on `a` and return its completion.
fn run(pair: &mut Pair, wr: SendWr) -> WorkCompletion {
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a.len(), 1, "one completion");
    a[0]
}

#[test]
fn an_atomic_write_stores_eight_bytes_and_is_answered_by_an_empty_read_response() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    pair.fabric.set_filter(move |d| {
        log.lock()
            .unwrap()
            .push((Opcode(d.payload[0]), d.payload.len()));
        FilterAction::Pass
    });
    assert_ne!(
        pair.hca('b').query_device().device_cap_flags_ex & DEVICE_ATOMIC_WRITE,
        0,
        "advertised as rxe does (IB_UVERBS_DEVICE_ATOMIC_WRITE)"
    );
    pair.b.mem.write(64, &[0xAA; 8]);
    pair.a.mem.write(0, &0x0123_4567_89AB_CDEFu64.to_ne_bytes());
    let wr = atomic_write(&pair, pair.b.mem.addr(64), pair.b.mem.keys.rkey);
    let wc = run(&mut pair, wr);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len, wc.wr_id),
        (WcStatus::Success, WcOpcode::AtomicWrite, 8, 21)
    );
    assert_eq!(
        pair.b.mem.read(64, 8),
        0x0123_4567_89AB_CDEFu64.to_ne_bytes()
    );
    assert_eq!(pair.b.mem.read(56, 8), [0; 8], "nothing before it");
    assert_eq!(pair.b.mem.read(72, 8), [0; 8], "nothing after it");
    // BTH 12 + RETH 16 + 8 bytes + ICRC 4; the answer BTH 12 + AETH 4 + ICRC 4.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Opcode::RC_ATOMIC_WRITE, 40),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 20)
        ]
    );
}

#[test]
fn a_duplicated_atomic_write_is_answered_twice_and_completes_once() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let b_ip = pair.fabric.addr(pair.b.node);
    let answers = Arc::new(Mutex::new(0));
    let count = Arc::clone(&answers);
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() == b_ip {
            return FilterAction::Duplicate;
        }
        if Opcode(d.payload[0]) == Opcode::RC_RDMA_READ_RESPONSE_ONLY {
            *count.lock().unwrap() += 1;
        }
        FilterAction::Pass
    });
    pair.a.mem.write(0, &7u64.to_ne_bytes());
    let wr = atomic_write(&pair, pair.b.mem.addr(128), pair.b.mem.keys.rkey);
    let wc = run(&mut pair, wr);
    assert_eq!(wc.status, WcStatus::Success);
    pair.completions('a', 1, Duration::from_millis(100));
    assert_eq!(pair.poll('a').len(), 0, "completed once");
    assert_eq!(
        *answers.lock().unwrap(),
        2,
        "the duplicate is acknowledged again"
    );
    assert_eq!(pair.b.mem.read(128, 8), 7u64.to_ne_bytes());
    assert_eq!(pair.counters('b').duplicate_request, 1);
}

#[test]
fn a_misaligned_target_is_an_invalid_request_and_nothing_is_written() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    pair.a.mem.write(0, &[1; 8]);
    let wr = atomic_write(&pair, pair.b.mem.addr(66), pair.b.mem.keys.rkey);
    let wc = run(&mut pair, wr);
    // rxe: RESPST_ERR_MISALIGNED_ATOMIC, a NAK invalid request.
    assert_eq!(wc.status, WcStatus::RemInvReqErr);
    assert_eq!(pair.b.mem.read(64, 16), [0; 16]);
    let qp = pair.b.qp;
    assert_eq!(pair.hca('b').qp_state(qp).unwrap(), QpState::Err);
}

#[test]
fn the_target_region_needs_remote_write_not_remote_atomic() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let pd = pair.b.pd;
    let atomic_only = register(
        pair.hca('b'),
        pd,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    pair.a.mem.write(0, &[2; 8]);
    let wr = atomic_write(&pair, atomic_only.addr(0), atomic_only.keys.rkey);
    let wc = run(&mut pair, wr);
    // rxe's check_rkey asks the region for IB_ACCESS_REMOTE_WRITE: a remote access error.
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    assert_eq!(atomic_only.read(0, 8), [0; 8]);
}

#[test]
fn a_qp_without_remote_write_refuses_it_as_an_invalid_request() {
    let mut pair = Pair::new(Options {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        ..Options::default()
    });
    pair.a.mem.write(0, &[3; 8]);
    let wr = atomic_write(&pair, pair.b.mem.addr(0), pair.b.mem.keys.rkey);
    let wc = run(&mut pair, wr);
    // rxe's check_op_valid: RESPST_ERR_UNSUPPORTED_OPCODE, a NAK invalid request.
    assert_eq!(wc.status, WcStatus::RemInvReqErr);
    assert_eq!(pair.b.mem.read(0, 8), [0; 8]);
}

#[test]
fn posting_anything_but_eight_bytes_is_refused_at_post_time() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let mut wr = atomic_write(&pair, pair.b.mem.addr(0), pair.b.mem.keys.rkey);
    wr.sg_list = vec![pair.a.mem.sge(0, 4)].into();
    let qp = pair.a.qp;
    // SAFETY: the SGE lies in live test memory.
    let err = unsafe { pair.hca('a').post_send(qp, &[wr]) }.unwrap_err();
    assert_eq!((err.index, err.error.errno()), (0, libc::EINVAL), "{err}");
    assert!(err.error.to_string().contains("exactly 8 bytes"), "{err}");
}

/// A hand-made ATOMIC WRITE from `a` to `b`'s QP at the PSN `b` expects, with `dma_len` in
/// its RETH and `payload` bytes: `b`'s answer.
fn crafted(pair: &mut Pair, dma_len: u32, payload: usize) -> (Opcode, Syndrome) {
    let mut bth = BthRepr::new(
        Opcode::RC_ATOMIC_WRITE,
        Qpn::from_wire(pair.b.qpn),
        Psn::new(0x00ff_fff0),
    );
    bth.ack_req = true;
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: pair.b.mem.addr(0),
            rkey: pair.b.mem.keys.rkey,
            dma_len,
        }),
        ..ExtRepr::default()
    };
    let repr = RoceRepr::new(bth, ext, payload);
    let (a, b) = (pair.a.node, pair.b.node);
    let (opcode, syndrome) =
        inject(&mut pair.fabric, a, b, &repr, &vec![9u8; payload]).expect("an answer");
    (opcode, syndrome.expect("an AETH"))
}

#[test]
fn a_request_that_is_not_exactly_eight_bytes_is_naked_as_invalid() {
    let nak = (
        Opcode::RC_ACKNOWLEDGE,
        Syndrome::Nak(NakCode::InvalidRequest),
    );
    // The RETH asks for 4 bytes while 8 travel (rxe: RESPST_ERR_LENGTH).
    let mut pair = Pair::rc(Mtu::Mtu1024);
    assert_eq!(crafted(&mut pair, 4, 8), nak);
    assert_eq!(pair.b.mem.read(0, 8), [0; 8]);
    let qp = pair.b.qp;
    assert_eq!(pair.hca('b').qp_state(qp).unwrap(), QpState::Err);
    // 16 bytes asked for and sent: ATOMIC WRITE is 8 bytes, never more.
    let mut pair = Pair::rc(Mtu::Mtu1024);
    assert_eq!(crafted(&mut pair, 16, 16), nak);
    assert_eq!(pair.b.mem.read(0, 16), [0; 16]);
    // 4 bytes asked for and sent: too short, NAKed as well (rxe: RESPST_ERR_LENGTH), not
    // dropped as if the packet were malformed; the responder QP goes to ERR (IBTA: an
    // invalid request is fatal to an RC responder).
    let mut pair = Pair::rc(Mtu::Mtu1024);
    assert_eq!(crafted(&mut pair, 4, 4), nak);
    assert_eq!(pair.b.mem.read(0, 8), [0; 8]);
    let qp = pair.b.qp;
    assert_eq!(pair.hca('b').qp_state(qp).unwrap(), QpState::Err);
    // 8 bytes asked for, fewer (or none) sent: the same.
    for short in [4, 0] {
        let mut pair = Pair::rc(Mtu::Mtu1024);
        assert_eq!(crafted(&mut pair, 8, short), nak, "{short} payload bytes");
        assert_eq!(pair.b.mem.read(0, 8), [0; 8]);
        let qp = pair.b.qp;
        assert_eq!(pair.hca('b').qp_state(qp).unwrap(), QpState::Err);
    }
    // The well-formed one, for contrast, is stored and answered.
    let mut pair = Pair::rc(Mtu::Mtu1024);
    assert_eq!(
        crafted(&mut pair, 8, 8),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, Syndrome::ACK)
    );
    assert_eq!(pair.b.mem.read(0, 8), [9; 8]);
}
