//! RC transport stories over the deterministic fabric: every op, every size class, loss,
//! duplication, RNR, retry exhaustion and remote access faults.

mod common;

use std::time::Duration;

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::FilterAction;
use softroce_wire::{
    AtomicEthRepr, BthRepr, ExtRepr, Mtu, NakCode, Opcode, Psn, Qpn, RocePacket, RoceRepr, Syndrome,
};

const LONG: Duration = Duration::from_secs(30);

fn opcode_of(d: &softroce_emu::sim::SimDatagram) -> Opcode {
    Opcode(d.payload[0])
}

fn send_and_check(pair: &mut Pair, len: usize) {
    let data = pattern(len as u8, len);
    pair.a.mem.write(0, &data);
    pair.post_recv('b', 7, 0, len.max(1));
    let wr = pair.send_wr('a', 1, 0, len);
    pair.post_send('a', wr);
    let b = pair.completions('b', 1, LONG);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(b.len(), 1, "receive completion for {len} bytes");
    assert_eq!(b[0].status, WcStatus::Success);
    assert_eq!(b[0].opcode, WcOpcode::Recv);
    assert_eq!(b[0].byte_len as usize, len);
    assert_eq!(b[0].qp_num, pair.b.qpn);
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0].status, a[0].opcode, a[0].wr_id),
        (WcStatus::Success, WcOpcode::Send, 1)
    );
    assert_eq!(pair.b.mem.read(0, len), data, "{len} bytes arrive intact");
}

#[test]
fn rc_send_of_every_size_class_at_every_mtu() {
    for mtu in [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096] {
        let m = mtu.bytes();
        for len in [0, 1, m - 1, m, m + 1, 3 * m + 5] {
            let mut pair = Pair::new(Options {
                mtu,
                mem_len: 1 << 16,
                ..Options::default()
            });
            send_and_check(&mut pair, len);
        }
    }
}

/// ibv_query_qp(3) reports the QP as it is, as rxe (its req.psn and resp.psn) and a HCA's
/// QP context do: after three 2-packet SENDs the sender's `sq_psn` and the receiver's
/// `rq_psn` are 6 past the PSN both started from (across the 24-bit wrap), not what the
/// modify to RTR/RTS set.
#[test]
fn query_qp_reports_the_psns_the_qps_are_at() {
    let mut pair = Pair::new(Options {
        mtu: Mtu::Mtu1024,
        mem_len: 1 << 16,
        ..Options::default()
    });
    let started = Psn::new(0x00ff_fff0);
    let psns = |pair: &mut Pair, side: char| {
        let qp = pair.side(side).qp;
        let (attr, _) = pair.hca(side).query_qp(qp).unwrap();
        (attr.sq_psn, attr.rq_psn)
    };
    assert_eq!(psns(&mut pair, 'a'), (started, started));
    for _ in 0..3 {
        send_and_check(&mut pair, 2000);
    }
    assert_eq!(
        psns(&mut pair, 'a').0,
        started.add(6),
        "the sender's next PSN"
    );
    assert_eq!(
        psns(&mut pair, 'b').1,
        started.add(6),
        "the receiver's expected PSN"
    );
    assert_eq!(psns(&mut pair, 'b').0, started, "the receiver sent nothing");
}

#[test]
fn rc_send_of_one_mebibyte() {
    let mut pair = Pair::new(Options {
        mtu: Mtu::Mtu4096,
        mem_len: 1 << 20,
        ..Options::default()
    });
    send_and_check(&mut pair, 1 << 20);
    assert_eq!(pair.counters('a').retransmitted_pkts, 0);
}

fn size_classes(mtu: Mtu) -> [usize; 6] {
    let m = mtu.bytes();
    [0, 1, m - 1, m, m + 1, 1 << 20]
}

#[test]
fn rc_write_places_data_without_a_receive() {
    for (mtu, len) in [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096]
        .into_iter()
        .flat_map(|m| size_classes(m).map(|l| (m, l)))
    {
        let mut pair = Pair::new(Options {
            mtu,
            mem_len: (1 << 20) + 4096,
            ..Options::default()
        });
        let data = pattern(9, len);
        pair.a.mem.write(0, &data);
        let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 5, 0, 100, len);
        pair.post_send('a', wr);
        let a = pair.completions('a', 1, LONG);
        assert_eq!(
            (a[0].status, a[0].opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        assert_eq!(pair.b.mem.read(100, len), data);
        assert!(
            pair.poll('b').is_empty(),
            "a plain WRITE consumes no receive"
        );
    }
}

#[test]
fn rc_write_with_immediate_delivers_imm_in_network_order() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    pair.post_recv('b', 3, 0, 16);
    let mut wr = pair.rdma_wr('a', WrOpcode::RdmaWriteWithImm, 1, 0, 4096, 3000);
    wr.imm_data = u32::from_ne_bytes([0xde, 0xad, 0xbe, 0xef]);
    pair.post_send('a', wr);
    let b = pair.completions('b', 1, LONG);
    assert_eq!(b[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(b[0].byte_len, 3000);
    assert!(b[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(b[0].imm_data.to_ne_bytes(), [0xde, 0xad, 0xbe, 0xef]);
}

#[test]
fn rc_read_fetches_remote_bytes() {
    for (mtu, len) in [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096]
        .into_iter()
        .flat_map(|m| size_classes(m).map(|l| (m, l)))
    {
        let mut pair = Pair::new(Options {
            mtu,
            mem_len: (1 << 20) + 4096,
            ..Options::default()
        });
        let data = pattern(3, len);
        pair.b.mem.write(2000, &data);
        assert!(2000 + len <= pair.b.mem.len);
        let wr = pair.rdma_wr('a', WrOpcode::RdmaRead, 9, 0, 2000, len);
        pair.post_send('a', wr);
        let a = pair.completions('a', 1, LONG);
        assert_eq!(
            (a[0].status, a[0].opcode),
            (WcStatus::Success, WcOpcode::RdmaRead),
            "{len}"
        );
        assert_eq!(a[0].byte_len as usize, len);
        assert_eq!(pair.a.mem.read(0, len), data);
    }
}

fn atomic_wr(pair: &Pair, op: WrOpcode, roff: usize, compare_add: u64, swap: u64) -> SendWr {
    let mut wr = SendWr::new(11, op);
    wr.sg_list = vec![pair.a.mem.sge(0, 8)].into();
    wr.atomic = AtomicTarget {
        remote_addr: pair.b.mem.addr(roff),
        compare_add,
        swap,
        rkey: pair.b.mem.keys.rkey,
    };
    wr
}

#[test]
fn rc_fetch_add_and_compare_swap_return_the_original_value() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    pair.b.mem.write(64, &40u64.to_ne_bytes());
    let wr = atomic_wr(&pair, WrOpcode::AtomicFetchAndAdd, 64, 2, 0);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(
        (a[0].status, a[0].opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );
    assert_eq!(pair.a.mem.read(0, 8), 40u64.to_ne_bytes());
    assert_eq!(pair.b.mem.read(64, 8), 42u64.to_ne_bytes());
    let wr = atomic_wr(&pair, WrOpcode::AtomicCmpAndSwp, 64, 42, 7);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a[0].opcode, WcOpcode::CompSwap);
    assert_eq!(pair.b.mem.read(64, 8), 7u64.to_ne_bytes());
    let wr = atomic_wr(&pair, WrOpcode::AtomicCmpAndSwp, 64, 1, 99);
    pair.post_send('a', wr);
    pair.completions('a', 1, LONG);
    assert_eq!(
        pair.b.mem.read(64, 8),
        7u64.to_ne_bytes(),
        "compare failed: no swap"
    );
    assert_eq!(pair.a.mem.read(0, 8), 7u64.to_ne_bytes());
}

fn lose_nth_data_packet(pair: &mut Pair, n: usize) {
    let b = pair.b.node;
    lose_to(&mut pair.fabric, b, move |seen| seen == n);
}

#[test]
fn rc_send_survives_losing_its_first_middle_or_last_packet() {
    for lost in [1, 2, 4] {
        let mut pair = Pair::rc(Mtu::Mtu1024);
        lose_nth_data_packet(&mut pair, lost);
        send_and_check(&mut pair, 4000);
        let a = pair.counters('a');
        let b = pair.counters('b');
        assert!(a.retransmitted_pkts > 0, "packet {lost}: retransmitted");
        if lost < 4 {
            // Every packet behind the gap is dropped; the gap is NAKed (and counted) once.
            assert_eq!(
                b.drops_of(DropReason::OutOfSequence),
                4 - lost as u64,
                "packet {lost}"
            );
            assert_eq!(b.out_of_seq_request, 1, "packet {lost}");
            assert_eq!(a.rcvd_seq_err, 1, "one NAK per gap");
        }
    }
}

#[test]
fn rc_write_survives_lost_ack() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let a_ip = pair.fabric.addr(pair.a.node);
    let mut dropped = false;
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() == a_ip && opcode_of(d) == Opcode::RC_ACKNOWLEDGE && !dropped {
            dropped = true;
            return FilterAction::Drop;
        }
        FilterAction::Pass
    });
    let data = pattern(1, 2048);
    pair.a.mem.write(0, &data);
    let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, 2048);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(pair.b.mem.read(0, 2048), data);
    assert!(
        pair.counters('a').completer_retry_err >= 1,
        "timeout retransmission"
    );
    assert!(
        pair.counters('b').duplicate_request >= 1,
        "the resent request is a duplicate"
    );
}

#[test]
fn duplicated_requests_are_delivered_once_and_atomics_run_once() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let b_ip = pair.fabric.addr(pair.b.node);
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() == b_ip {
            FilterAction::Duplicate
        } else {
            FilterAction::Pass
        }
    });
    pair.b.mem.write(512, &100u64.to_ne_bytes());
    for i in 0..3 {
        pair.post_recv('b', i, 0, 64);
    }
    for i in 0..3 {
        let wr = pair.send_wr('a', i, 1024, 10);
        pair.post_send('a', wr);
    }
    let wr = atomic_wr(&pair, WrOpcode::AtomicFetchAndAdd, 512, 1, 0);
    pair.post_send('a', wr);
    let a = pair.completions('a', 4, LONG);
    assert_eq!(a.len(), 4);
    assert!(a.iter().all(|w| w.status == WcStatus::Success));
    pair.fabric.drive(100_000);
    assert_eq!(pair.poll('b').len(), 3, "each SEND delivered exactly once");
    assert_eq!(
        pair.b.mem.read(512, 8),
        101u64.to_ne_bytes(),
        "FETCH_ADD executed once"
    );
    assert!(pair.counters('b').duplicate_request >= 4);
}

#[test]
fn rnr_nak_then_success_when_a_receive_is_posted() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let wr = pair.send_wr('a', 1, 0, 100);
    pair.post_send('a', wr);
    pair.fabric.advance(Duration::from_millis(1));
    assert!(pair.counters('b').send_rnr_err >= 1);
    assert!(pair.counters('a').rcvd_rnr_err >= 1);
    pair.post_recv('b', 2, 0, 100);
    let b = pair.completions('b', 1, LONG);
    assert_eq!(b[0].status, WcStatus::Success);
    assert_eq!(pair.completions('a', 1, LONG)[0].status, WcStatus::Success);
}

#[test]
fn rnr_retries_exhausted_fail_the_send_and_flush_the_rest() {
    let mut pair = Pair::new(Options {
        rnr_retry: 2,
        ..Options::default()
    });
    for i in 0..3 {
        let wr = pair.send_wr('a', i, 0, 100);
        pair.post_send('a', wr);
    }
    let a = pair.completions('a', 3, LONG);
    assert_eq!(a.len(), 3);
    assert_eq!((a[0].wr_id, a[0].status), (0, WcStatus::RnrRetryExcErr));
    assert_eq!(a[0].vendor_err, VendorErr::RnrRetryExceeded as u32);
    assert!(a[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(
        pair.counters('a').rcvd_rnr_err,
        3,
        "initial try plus two retries"
    );
    assert_eq!(pair.counters('a').retry_rnr_exceeded_err, 1);
    let qp = pair.a.qp;
    assert_eq!(pair.hca('a').qp_state(qp).unwrap(), QpState::Err);
}

#[test]
fn retry_exhaustion_when_the_peer_is_unreachable() {
    let mut pair = Pair::new(Options {
        retry_cnt: 3,
        timeout: 6,
        ..Options::default()
    });
    pair.fabric.partition(pair.a.node, pair.b.node, true);
    let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, 10);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a[0].status, WcStatus::RetryExcErr);
    let c = pair.counters('a');
    assert_eq!(c.completer_retry_err, 3);
    assert_eq!(c.retry_exceeded_err, 1);
    // The whole story took 4 timeouts of 4.096 us * 2^6.
    assert!(pair.fabric.elapsed() >= Duration::from_micros(4 * 262));
}

#[test]
fn remote_access_violations_fail_the_request() {
    type Break = fn(&mut SendWr, &Pair);
    let cases: [(&str, Break); 3] = [
        ("bad rkey", |wr, _| wr.rdma.rkey ^= 0x77),
        ("out of bounds", |wr, p| {
            wr.rdma.remote_addr = p.b.mem.addr(p.b.mem.len - 4)
        }),
        ("below the region", |wr, p| {
            wr.rdma.remote_addr = p.b.mem.addr(0) - 8
        }),
    ];
    for (what, break_it) in cases {
        let mut pair = Pair::rc(Mtu::Mtu1024);
        let mut wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, 16);
        break_it(&mut wr, &pair);
        pair.post_send('a', wr);
        let a = pair.completions('a', 1, LONG);
        assert_eq!(a[0].status, WcStatus::RemAccessErr, "{what}");
        let bqp = pair.b.qp;
        assert_eq!(
            pair.hca('b').qp_state(bqp).unwrap(),
            QpState::Err,
            "{what}: responder errors too"
        );
        let ev = pair.hca('b').get_async_event().unwrap();
        assert_eq!(ev.event_type, EventType::QpAccessErr);
    }
}

/// A responder QP not enabled for READ, WRITE or atomics does not support them: the
/// requester gets a NAK invalid request (IBV_WC_REM_INV_REQ_ERR), whatever the region
/// allows, and the responder goes to ERR with IBV_EVENT_QP_REQ_ERR (rxe's check_op_valid,
/// which looks at the QP before any key).
#[test]
fn a_qp_not_enabled_for_the_operation_answers_invalid_request() {
    type Post = fn(&Pair) -> SendWr;
    let cases: [(&str, AccessFlags, Post); 3] = [
        ("READ", AccessFlags::REMOTE_READ, |p| {
            p.rdma_wr('a', WrOpcode::RdmaRead, 1, 0, 0, 16)
        }),
        ("WRITE", AccessFlags::REMOTE_WRITE, |p| {
            p.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, 16)
        }),
        ("FETCH_ADD", AccessFlags::REMOTE_ATOMIC, |p| {
            atomic_wr(p, WrOpcode::AtomicFetchAndAdd, 0, 1, 0)
        }),
    ];
    for (what, missing, post) in cases {
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_ATOMIC;
        let mut pair = Pair::new(Options {
            access: all,
            ..Options::default()
        });
        // The region keeps every right; only the responder QP loses one.
        let bqp = pair.b.qp;
        let attr = QpAttr {
            qp_access_flags: all.difference(AccessFlags::LOCAL_WRITE | missing),
            ..QpAttr::default()
        };
        pair.hca('b')
            .modify_qp(bqp, &attr, QpAttrMask::ACCESS_FLAGS)
            .unwrap();
        pair.b.mem.write(0, &[0x11; 16]);
        let wr = post(&pair);
        pair.post_send('a', wr);
        assert_eq!(
            pair.completions('a', 1, LONG)[0].status,
            WcStatus::RemInvReqErr,
            "{what}"
        );
        assert_eq!(
            pair.b.mem.read(0, 16),
            [0x11; 16],
            "{what}: nothing changed"
        );
        assert_eq!(pair.hca('b').qp_state(bqp).unwrap(), QpState::Err, "{what}");
        let ev = pair.hca('b').get_async_event().unwrap();
        assert_eq!(ev.event_type, EventType::QpReqErr, "{what}");
    }
}

/// A QP enabled for READ, on a region registered without REMOTE_READ: the region refuses,
/// a remote access error (NAK remote access error, IBV_EVENT_QP_ACCESS_ERR).
#[test]
fn a_region_without_the_right_answers_remote_access_error() {
    let mut pair = Pair::new(Options {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..Options::default()
    });
    let bqp = pair.b.qp;
    let attr = QpAttr {
        qp_access_flags: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        ..QpAttr::default()
    };
    pair.hca('b')
        .modify_qp(bqp, &attr, QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    let wr = pair.rdma_wr('a', WrOpcode::RdmaRead, 1, 0, 0, 16);
    pair.post_send('a', wr);
    assert_eq!(
        pair.completions('a', 1, LONG)[0].status,
        WcStatus::RemAccessErr
    );
    assert_eq!(pair.hca('b').qp_state(bqp).unwrap(), QpState::Err);
    let ev = pair.hca('b').get_async_event().unwrap();
    assert_eq!(ev.event_type, EventType::QpAccessErr);
}

/// A misaligned atomic target: rxe refuses the post (EINVAL, the QP stays in RTS); a
/// requester that sends one anyway (another stack) gets a NAK invalid request, and the
/// responder changes nothing (IBTA oA19-28; rxe's RESPST_ERR_MISALIGNED_ATOMIC).
#[test]
fn misaligned_atomic_is_refused_at_post_and_naked_as_invalid_on_the_wire() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    pair.b.mem.write(0, &[0x11; 16]);
    let wr = atomic_wr(&pair, WrOpcode::AtomicFetchAndAdd, 4, 1, 0);
    let aqp = pair.a.qp;
    // SAFETY: no inline data.
    let refused = unsafe { pair.hca('a').post_send(aqp, &[wr]) }.unwrap_err();
    assert_eq!((refused.index, refused.error.errno()), (0, libc::EINVAL));
    assert_eq!(pair.hca('a').qp_state(aqp).unwrap(), QpState::Rts);
    assert!(
        pair.completions('a', 1, LONG).is_empty(),
        "nothing was queued"
    );

    let mut bth = BthRepr::new(
        Opcode::RC_FETCH_ADD,
        Qpn::from_wire(pair.b.qpn),
        Psn::new(0x00ff_fff0),
    );
    bth.ack_req = true;
    let ext = ExtRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: pair.b.mem.addr(4),
            rkey: pair.b.mem.keys.rkey,
            swap_add: 1,
            compare: 0,
        }),
        ..ExtRepr::default()
    };
    let (a, b) = (pair.a.node, pair.b.node);
    let answer = inject(&mut pair.fabric, a, b, &RoceRepr::new(bth, ext, 0), &[]);
    assert_eq!(
        answer,
        Some((
            Opcode::RC_ACKNOWLEDGE,
            Some(Syndrome::Nak(NakCode::InvalidRequest))
        ))
    );
    assert_eq!(pair.b.mem.read(0, 16), [0x11; 16], "nothing was added");
    let bqp = pair.b.qp;
    assert_eq!(pair.hca('b').qp_state(bqp).unwrap(), QpState::Err);
    let ev = pair.hca('b').get_async_event().unwrap();
    assert_eq!(ev.event_type, EventType::QpReqErr);
}

#[test]
fn receive_too_small_is_loc_len_err_there_and_rem_inv_req_here() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    pair.post_recv('b', 1, 0, 10);
    let wr = pair.send_wr('a', 2, 0, 100);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    let b = pair.completions('b', 1, LONG);
    assert_eq!(a[0].status, WcStatus::RemInvReqErr);
    assert_eq!((b[0].status, b[0].wr_id), (WcStatus::LocLenErr, 1));
}

#[test]
fn reordered_packets_are_recovered_in_order() {
    let mut pair = Pair::rc(Mtu::Mtu256);
    let b_ip = pair.fabric.addr(pair.b.node);
    let mut n = 0;
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() == b_ip {
            n += 1;
            if n % 3 == 0 {
                return FilterAction::Delay(Duration::from_micros(25));
            }
        }
        FilterAction::Pass
    });
    for i in 0..5 {
        pair.post_recv('b', i, i as usize * 2048, 2048);
    }
    for i in 0..5u8 {
        pair.a.mem.write(i as usize * 2048, &pattern(i, 2000));
        let wr = pair.send_wr('a', u64::from(i), i as usize * 2048, 2000);
        pair.post_send('a', wr);
    }
    let b = pair.completions('b', 5, LONG);
    assert_eq!(
        b.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    for i in 0..5u8 {
        assert_eq!(pair.b.mem.read(i as usize * 2048, 2000), pattern(i, 2000));
    }
}

#[test]
fn lost_read_response_is_re_read_from_the_gap() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let a_ip = pair.fabric.addr(pair.a.node);
    let mut n = 0;
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() == a_ip && opcode_of(d) == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            n += 1;
            if n == 2 {
                return FilterAction::Drop;
            }
        }
        FilterAction::Pass
    });
    let data = pattern(77, 8000);
    pair.b.mem.write(0, &data);
    let wr = pair.rdma_wr('a', WrOpcode::RdmaRead, 1, 0, 0, 8000);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(pair.a.mem.read(0, 8000), data);
    assert!(
        pair.counters('b').duplicate_request >= 1,
        "partial re-read hits the replay path"
    );
}

#[test]
fn corrupted_packets_are_dropped_by_the_icrc_check_and_recovered() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let b_ip = pair.fabric.addr(pair.b.node);
    let mut corrupted = false;
    pair.fabric.set_filter(move |d| {
        let _ = RocePacket::new_checked(&d.payload[..]);
        if d.dst.ip() == b_ip && !corrupted {
            corrupted = true;
            return FilterAction::Drop;
        }
        FilterAction::Pass
    });
    pair.fabric.faults.corrupt = 0.2;
    for i in 0..20u64 {
        pair.post_recv('b', i, 0, 64);
        let wr = pair.send_wr('a', i, 0, 64);
        pair.post_send('a', wr);
    }
    let b = pair.completions('b', 20, LONG);
    assert_eq!(b.len(), 20);
    let c = pair.counters('b');
    let d = pair.counters('a');
    assert!(c.drops_of(DropReason::IcrcMismatch) + d.drops_of(DropReason::IcrcMismatch) > 0);
}

#[test]
fn rc_messages_survive_a_fault_plan_targeting_acks_and_naks() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let plan = softroce_emu::faults::FaultPlan::from_toml(
        r#"
        seed = 11
        [[rule]]
        action = "drop"
        opcode = "ack"
        every = 3
        [[rule]]
        action = "drop"
        opcode = "nak"
        probability = 0.5
        [[rule]]
        action = "drop"
        opcode = "send"
        probability = 0.1
        "#,
    )
    .unwrap();
    pair.fabric.set_fault_plan(plan);
    for i in 0..30u64 {
        pair.post_recv('b', i, (i as usize % 8) * 4096, 4096);
        let wr = pair.send_wr('a', i, 0, 3000);
        pair.post_send('a', wr);
        let a = pair.completions('a', 1, LONG);
        assert_eq!((a[0].wr_id, a[0].status), (i, WcStatus::Success));
        let b = pair.completions('b', 1, LONG);
        assert_eq!((b[0].wr_id, b[0].byte_len), (i, 3000));
    }
    let injected = pair.fabric.fault_counters().unwrap();
    assert!(injected.dropped >= 10, "{injected}");
}

/// The opcodes `record_opcodes` saw leave `ip`, in order.
fn opcodes_from(
    seen: &std::sync::Mutex<Vec<(std::net::IpAddr, u8)>>,
    ip: std::net::IpAddr,
) -> Vec<u8> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(from, _)| *from == ip)
        .map(|(_, op)| *op)
        .collect()
}

/// Opcodes of every datagram the fabric carries from `from`'s address, in order.
fn record_opcodes(
    pair: &mut Pair,
) -> std::sync::Arc<std::sync::Mutex<Vec<(std::net::IpAddr, u8)>>> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&seen);
    pair.fabric.set_filter(move |d| {
        log.lock()
            .unwrap()
            .push((d.src.ip(), d.payload.first().copied().unwrap_or(0)));
        FilterAction::Pass
    });
    seen
}

#[test]
fn a_deferred_ack_travels_with_the_responders_answer() {
    let mut pair = Pair::new(Options {
        ack_defer: Duration::from_micros(100),
        ..Options::default()
    });
    let seen = record_opcodes(&mut pair);
    let b_ip: std::net::IpAddr = B_IP.parse().unwrap();
    pair.post_recv('b', 1, 0, 64);
    pair.post_recv('a', 2, 0, 64);
    let ping = pair.send_wr('a', 10, 0, 8);
    pair.post_send('a', ping);
    assert_eq!(pair.completions('b', 1, Duration::from_micros(50)).len(), 1);
    assert!(
        !seen
            .lock()
            .unwrap()
            .iter()
            .any(|&(ip, op)| ip == b_ip && op == 0x11),
        "B holds its ACK while it may answer"
    );
    let pong = pair.send_wr('b', 20, 0, 8);
    pair.post_send('b', pong);
    let a = pair.completions('a', 2, Duration::from_millis(5));
    assert_eq!(a.len(), 2, "A's SEND completed and the pong arrived: {a:?}");
    let from_b = opcodes_from(&seen, b_ip);
    assert_eq!(
        from_b[..2],
        [0x04, 0x11],
        "the ACK goes out with the pong, right behind it (one GSO send): {from_b:x?}"
    );
    assert!(pair.counters('b').ack_deferred >= 1);
}

#[test]
fn a_deferred_ack_goes_out_by_its_deadline_when_nothing_else_is_sent() {
    let mut pair = Pair::new(Options {
        ack_defer: Duration::from_micros(100),
        ..Options::default()
    });
    pair.post_recv('b', 1, 0, 64);
    let one_way = pair.send_wr('a', 10, 0, 8);
    pair.post_send('a', one_way);
    let a = pair.completions('a', 1, Duration::from_millis(5));
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status, WcStatus::Success);
    assert_eq!(
        pair.counters('a').retransmitted_pkts,
        0,
        "well before the ACK timeout"
    );
}

/// A ping that B received and holds the ACK of (waiting for an answer): the log of the
/// opcodes the fabric carries (see `record_opcodes`), nothing from B yet.
fn pinged_with_ack_held(
    pair: &mut Pair,
) -> std::sync::Arc<std::sync::Mutex<Vec<(std::net::IpAddr, u8)>>> {
    let seen = record_opcodes(pair);
    pair.post_recv('b', 1, 0, 64);
    let ping = pair.send_wr('a', 10, 0, 8);
    pair.post_send('a', ping);
    assert_eq!(pair.completions('b', 1, Duration::from_micros(50)).len(), 1);
    let b_ip: std::net::IpAddr = B_IP.parse().unwrap();
    assert!(opcodes_from(&seen, b_ip).is_empty(), "B holds its ACK");
    seen
}

fn held_for_100_ms() -> Options {
    Options {
        ack_defer: Duration::from_millis(100),
        // The retransmit timer (4.3 s) is longer than any wait here: no resend stands in
        // for the ACK.
        timeout: 20,
        ..Options::default()
    }
}

/// The CM must not overtake data the device already received: a MAD (a REQ, a DREQ) goes
/// behind the ACKs the device holds, as it would behind ACKs a device sent at once. A DREQ
/// ahead of the ACK of the peer's last SEND would have the peer flush that SEND in error
/// though it arrived; a REQ ahead of it reaches a peer still waiting for that SEND to
/// complete before it listens (perftest `-R`).
#[test]
fn a_mad_leaves_behind_the_acks_its_device_holds() {
    let mut pair = Pair::new(held_for_100_ms());
    let seen = pinged_with_ack_held(&mut pair);
    let a_addr =
        std::net::SocketAddr::new(A_IP.parse().unwrap(), softroce_wire::icrc::ROCE_V2_PORT);
    let mad = [0u8; softroce_wire::mad::MAD_LEN];
    pair.hca('b').send_mad(a_addr, Qpn::new(1).unwrap(), &mad);
    let a = pair.completions('a', 1, Duration::from_millis(1));
    assert_eq!(
        a.len(),
        1,
        "A's SEND completed with the MAD, not 100 ms later"
    );
    assert_eq!(a[0].status, WcStatus::Success);
    let b_ip: std::net::IpAddr = B_IP.parse().unwrap();
    assert_eq!(
        opcodes_from(&seen, b_ip),
        [Opcode::RC_ACKNOWLEDGE.0, Opcode::UD_SEND_ONLY.0],
        "the held ACK first, then the MAD"
    );
}

/// An application that turns to connection management (rdma_cm resolves an address, or
/// listens) is not about to answer on its QPs: `send_held_acks` sends what they hold.
#[test]
fn held_acks_go_at_once_when_the_application_turns_to_connection_management() {
    let mut pair = Pair::new(held_for_100_ms());
    let seen = pinged_with_ack_held(&mut pair);
    pair.hca('b').send_held_acks();
    let a = pair.completions('a', 1, Duration::from_millis(1));
    assert_eq!(a.len(), 1, "A's SEND completed at once, not 100 ms later");
    let b_ip: std::net::IpAddr = B_IP.parse().unwrap();
    assert_eq!(opcodes_from(&seen, b_ip), [Opcode::RC_ACKNOWLEDGE.0]);
    // Nothing is left to send at the deadline.
    let later = pair.completions('a', 1, Duration::from_millis(150));
    assert!(later.is_empty());
    assert_eq!(
        opcodes_from(&seen, b_ip).len(),
        1,
        "one ACK, not a second at the deadline"
    );
}

#[test]
fn a_stream_with_fewer_requests_in_flight_than_the_held_ack_bound_never_waits_for_its_deadline() {
    // One second of ACK deferral: any ACK that waited for it would show. The retransmit
    // timer (timeout 20: 4.3 s) is longer, so no resend stands in for a late ACK.
    let mut pair = Pair::new(Options {
        ack_defer: Duration::from_secs(1),
        timeout: 20,
        ..Options::default()
    });
    let start = pair.fabric.elapsed();
    for round in 0..4u64 {
        // Eight signaled WRITEs in flight, as a sender with a send queue of eight keeps.
        for i in 0..8u64 {
            let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, round * 8 + i, 0, 0, 8);
            pair.post_send('a', wr);
        }
        let a = pair.completions('a', 8, Duration::from_millis(10));
        assert_eq!(a.len(), 8, "round {round}: every WRITE completed: {a:?}");
        assert!(a.iter().all(|wc| wc.status == WcStatus::Success));
    }
    let took = pair.fabric.elapsed() - start;
    assert!(
        took < Duration::from_millis(10),
        "32 WRITEs took {took:?}: their ACKs waited for the deadline"
    );
}

#[test]
fn one_ack_for_a_burst_of_writes_completes_each_in_post_order_and_stops_the_ack_timer() {
    // The responder holds its ACKs (as the UDP driver's devices do), so a burst of sixteen
    // WRITEs is answered by far fewer ACKs, each retiring several requests at once.
    let mut pair = Pair::new(Options {
        ack_defer: Duration::from_millis(1),
        timeout: 20,
        ..Options::default()
    });
    for i in 0..16u64 {
        let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, i, 0, i as usize * 8, 8);
        pair.post_send('a', wr);
    }
    let done = pair.completions('a', 16, Duration::from_millis(50));
    let ids: Vec<u64> = done.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(
        ids,
        (0..16).collect::<Vec<_>>(),
        "every WRITE, in post order"
    );
    assert!(
        done.iter().all(|wc| wc.status == WcStatus::Success),
        "{done:?}"
    );
    let acks = pair.counters('a').rcvd_pkts;
    assert!(acks < 16, "the ACKs were coalesced ({acks} for 16 WRITEs)");
    // Nothing is outstanding: the retransmit timer is off, or a needless resend would
    // follow in 4 s (timeout 20).
    assert_eq!(
        pair.hca('a').poll_timeout(),
        None,
        "the requester keeps no timer once its queue is empty"
    );
}

#[test]
fn a_one_way_senders_acks_stop_waiting_for_answers_until_the_responder_answers_again() {
    let defer = Duration::from_millis(100);
    // The retransmit timer (timeout 20: 4.3 s) is longer than any wait here: no resend
    // stands in for an ACK.
    let mut pair = Pair::new(Options {
        ack_defer: defer,
        timeout: 20,
        ..Options::default()
    });
    let seen = record_opcodes(&mut pair);
    let b_ip: std::net::IpAddr = B_IP.parse().unwrap();
    let send_and_wait = |pair: &mut Pair, id: u64| {
        pair.post_recv('b', id, 0, 64);
        let start = pair.fabric.elapsed();
        let wr = pair.send_wr('a', id, 0, 8);
        pair.post_send('a', wr);
        let a = pair.completions('a', 1, 2 * defer);
        assert_eq!(a.len(), 1, "SEND {id} completed");
        assert_eq!(
            pair.completions('b', 1, defer).len(),
            1,
            "SEND {id} arrived"
        );
        pair.fabric.elapsed() - start
    };
    // The first SEND's ACK is held for an answer that never comes: it goes at its deadline.
    let first = send_and_wait(&mut pair, 1);
    assert!(first >= defer, "the first ACK came after {first:?}");
    // B does not answer: from now on its ACKs go at once.
    for id in 2..6 {
        let took = send_and_wait(&mut pair, id);
        assert!(took < defer / 10, "SEND {id} waited {took:?} for its ACK");
    }
    // B answers: holding pays again, and its next ACK travels with its next answer. (A
    // holds its ACK of the answer for one of its own, which never comes: B waits.)
    pair.post_recv('a', 100, 0, 64);
    let answer = pair.send_wr('b', 100, 0, 8);
    pair.post_send('b', answer);
    assert_eq!(
        pair.completions('b', 1, 2 * defer).len(),
        1,
        "B's answer completed"
    );
    assert_eq!(pair.completions('a', 1, defer).len(), 1, "A got B's answer");
    seen.lock().unwrap().clear();
    pair.post_recv('a', 101, 0, 64);
    pair.post_recv('b', 6, 0, 64);
    let ping = pair.send_wr('a', 6, 0, 8);
    pair.post_send('a', ping);
    assert_eq!(pair.completions('b', 1, defer / 10).len(), 1);
    let pong = pair.send_wr('b', 101, 0, 8);
    pair.post_send('b', pong);
    assert_eq!(
        pair.completions('a', 2, defer / 10).len(),
        2,
        "ping done, pong in"
    );
    let from_b = opcodes_from(&seen, b_ip);
    assert_eq!(
        from_b[..2],
        [0x04, 0x11],
        "the ACK waited for B's answer and went right behind it: {from_b:x?}"
    );
}

#[test]
fn destroying_the_responder_qp_sends_the_ack_it_held() {
    let mut pair = Pair::new(Options {
        ack_defer: Duration::from_secs(1),
        ..Options::default()
    });
    pair.post_recv('b', 1, 0, 64);
    let last = pair.send_wr('a', 10, 0, 8);
    pair.post_send('a', last);
    assert_eq!(pair.completions('b', 1, Duration::from_micros(50)).len(), 1);
    let qp = pair.side('b').qp;
    pair.hca('b').destroy_qp(qp).unwrap();
    let a = pair.completions('a', 1, Duration::from_millis(1));
    assert_eq!(
        a.len(),
        1,
        "the peer's last SEND completes although the QP is gone"
    );
    assert_eq!(a[0].status, WcStatus::Success);
}

/// A signaled 1 MiB WRITE from `a` to `b` at MTU 4096 (256 packets); returns how long it
/// took to complete, in virtual time.
fn write_one_mebibyte(pair: &mut Pair) -> Duration {
    let len = 1 << 20;
    let data = pattern(3, len);
    pair.a.mem.write(0, &data);
    let start = pair.fabric.elapsed();
    let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, len);
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(
        (a.len(), a[0].status),
        (1, WcStatus::Success),
        "the WRITE completes"
    );
    assert_eq!(pair.b.mem.read(0, len), data, "1 MiB arrives intact");
    pair.fabric.elapsed() - start
}

/// Timeout 14: 4.096 µs × 2^14, about 67 ms, far longer than a 1 MiB WRITE takes.
const TIMEOUT_14: Duration = Duration::from_nanos(4096 << 14);

fn one_mebibyte_pair() -> Pair {
    Pair::new(Options {
        mtu: Mtu::Mtu4096,
        mem_len: 1 << 20,
        timeout: 14,
        ..Options::default()
    })
}

#[test]
fn a_lost_middle_packet_is_resent_on_the_sequence_nak_long_before_the_ack_timeout() {
    let clean = write_one_mebibyte(&mut one_mebibyte_pair());

    // Packet 100 of 256 is lost: b NAKs packet 101 (sequence error, three times for the
    // gap: the others are taken for the first's echoes) and a goes back to packet 100 at once, as
    // IBTA 9.7.5.2.1 and rxe do.
    let mut pair = one_mebibyte_pair();
    lose_nth_data_packet(&mut pair, 100);
    let lossy = write_one_mebibyte(&mut pair);
    eprintln!("1 MiB WRITE: {clean:?} loss-free, {lossy:?} with packet 100 lost");

    let (a, b) = (pair.counters('a'), pair.counters('b'));
    let behind_the_gap = b.drops_of(DropReason::OutOfSequence);
    assert!(
        behind_the_gap > 0,
        "packets behind the gap arrived out of order"
    );
    assert_eq!(b.out_of_seq_request, 1, "one gap NAKed");
    assert_eq!(a.rcvd_seq_err, 1, "one NAK for the gap");
    assert_eq!(a.completer_retry_err, 1, "one go-back, caused by that NAK");
    // Go-back-N from the NAK's PSN resends exactly what b dropped: the lost packet and the
    // ones that arrived behind the gap, nothing that b had already placed.
    assert_eq!(a.retransmitted_pkts, behind_the_gap + 1);
    assert_eq!(a.sent_pkts, 256 + a.retransmitted_pkts);
    // The NAK, not the timer, drove recovery: the loss cost one more pass over what was in
    // flight and a narrower window for the rest of the message (a quarter of the full one:
    // see a_lossy_path_narrows_the_send_window_...), nowhere near one ACK timeout.
    assert!(lossy < clean * 5, "{lossy:?} against {clean:?} loss-free");
    assert!(
        lossy < TIMEOUT_14 / 10,
        "{lossy:?} against a {TIMEOUT_14:?} timeout"
    );
}

#[test]
fn a_lost_last_packet_has_no_later_packet_to_nak_it_and_waits_out_the_ack_timeout() {
    // Tail loss: nothing follows packet 256 to reveal the gap, so only a's ACK timer finds
    // it (IBTA 9.7.6.1.3; rxe the same).
    let mut pair = one_mebibyte_pair();
    lose_nth_data_packet(&mut pair, 256);
    let took = write_one_mebibyte(&mut pair);
    eprintln!("1 MiB WRITE with its last packet lost: {took:?}");

    let a = pair.counters('a');
    assert_eq!(a.rcvd_seq_err, 0, "no NAK: b never saw a gap");
    assert_eq!(a.completer_retry_err, 1, "one timeout");
    // a goes back to the last ACK it had: b acknowledged packet 192, the last before 256
    // to ask for an ACK (AckReq every 64 packets, as rxe), so 193..=256 go again.
    assert_eq!(a.retransmitted_pkts, 64);
    assert!(took >= TIMEOUT_14, "{took:?}");
    assert!(took < TIMEOUT_14 + TIMEOUT_14 / 10, "{took:?}");
}

#[test]
fn a_sequence_nak_restarts_the_ack_timer_for_the_resend_even_when_it_acknowledges_nothing_new() {
    // Packet 65 is the first after b's ACK of packet 64 (AckReq every 64): its NAK
    // acknowledges nothing new. a still gives the resend a whole timeout from the NAK, as
    // rxe does (its completer re-arms the timer after every response), rather than what
    // was left of the timer armed at that ACK.
    let mut pair = one_mebibyte_pair();
    lose_nth_data_packet(&mut pair, 65);
    let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, 1 << 20);
    pair.post_send('a', wr);
    for _ in 0..100_000 {
        if pair.counters('a').rcvd_seq_err == 1 {
            break;
        }
        pair.fabric.step();
    }
    assert_eq!(pair.counters('a').rcvd_seq_err, 1, "the NAK arrived");
    let nak_at = pair.fabric.now();
    assert_eq!(pair.hca('a').poll_timeout(), Some(nak_at + TIMEOUT_14));
    assert_eq!(pair.completions('a', 1, LONG)[0].status, WcStatus::Success);
}

#[test]
fn early_resends_never_hasten_retry_exceeded_a_dead_peer_still_gets_every_ack_timeout() {
    // With adaptive retransmission on (HcaConfig::adaptive_retransmit; off, the default,
    // ibv_modify_qp(3)'s timeout is the least a QP waits before any resend): packet 65 is
    // lost, b NAKs 66, then b goes dark for good. The path has shown loss, so a resends
    // early three times (each after twice the wait before), and from then on only its ACK
    // timer acts: retry_cnt 3 means three retries (the NAK's resend the first, as rxe and
    // IBTA count them), then IBV_WC_RETRY_EXC_ERR, no sooner than three full timeouts
    // after the NAK, as without adaptive resends.
    let mut pair = Pair::new(Options {
        mtu: Mtu::Mtu4096,
        mem_len: 1 << 20,
        timeout: 14,
        retry_cnt: 3,
        adaptive_retransmit: true,
        ..Options::default()
    });
    let b = pair.b.node;
    lose_to(&mut pair.fabric, b, |seen| seen == 65 || seen > 66);
    let start = pair.fabric.elapsed();
    let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, 1 << 20);
    pair.post_send('a', wr);
    let wc = pair.completions('a', 1, LONG);
    let took = pair.fabric.elapsed() - start;
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);
    let a = pair.counters('a');
    assert_eq!(a.rcvd_seq_err, 1, "{a}");
    assert_eq!(a.early_retransmits, 3, "{a}");
    assert_eq!(
        a.completer_retry_err,
        1 + 2,
        "the NAK's go-back, then 2 timeouts' (the third fails): {a}"
    );
    assert_eq!(a.retry_exceeded_err, 1);
    assert!(took >= TIMEOUT_14 * 3, "{took:?}");
}

/// Lose a's 65th WRITE packet to b and its first resend.
fn lose_packet_65_and_its_resend(pair: &mut Pair) {
    let b_ip = pair.fabric.addr(pair.b.node);
    let (mut seen, mut lost_psn, mut losses) = (0, None, 0);
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() != b_ip {
            return FilterAction::Pass;
        }
        // Everything a sends b is a WRITE packet; its PSN is the BTH's last 24 bits.
        let p = &d.payload;
        let psn = u32::from_be_bytes([0, p[9], p[10], p[11]]);
        seen += 1;
        if seen == 65 {
            lost_psn = Some(psn);
        }
        if lost_psn == Some(psn) && losses < 2 {
            losses += 1;
            return FilterAction::Drop;
        }
        FilterAction::Pass
    });
}

#[test]
fn a_lost_resend_is_nakked_again_when_the_rest_of_the_resend_arrives_without_it() {
    // Packet 65 is lost, and so is its resend after b's NAK. rxe NAKs a gap once and drops
    // what follows silently, leaving only a's ACK timer (67 ms here) to find the second
    // loss. b instead sees the resend's next packet arrive at a PSN it has already seen
    // past the gap (a went back, and the missing packet is missing again) and NAKs once
    // more: a goes back again at once, a retry as the first NAK's was, with no timeout
    // and no resend of its own before one (ibv_modify_qp(3)'s timeout is the least a QP
    // waits without an ACK or NAK).
    let mut pair = one_mebibyte_pair();
    lose_packet_65_and_its_resend(&mut pair);
    let took = write_one_mebibyte(&mut pair);
    eprintln!("1 MiB WRITE with packet 65 and its resend lost: {took:?}");
    let (a, b) = (pair.counters('a'), pair.counters('b'));
    assert_eq!((b.out_of_seq_request, b.seq_nak_repeated), (1, 1), "{b}");
    assert_eq!(
        a.rcvd_seq_err, 2,
        "the gap's NAK and the lost resend's: {a}"
    );
    assert_eq!(a.completer_retry_err, 2, "two go-backs, both on a NAK: {a}");
    assert_eq!(a.early_retransmits, 0, "{a}");
    assert!(
        took < TIMEOUT_14 / 10,
        "{took:?} against a {TIMEOUT_14:?} timeout"
    );
}

#[test]
fn a_packet_overtaken_behind_a_gap_is_no_lost_resend() {
    // Packet 100 is lost and packet 120 arrives after 121..=125 (the network reordered
    // it). One packet below the highest seen is no resend: b NAKs the gap (three times) and
    // nothing more, and a goes back once.
    let mut pair = one_mebibyte_pair();
    let b_ip = pair.fabric.addr(pair.b.node);
    let mut seen = 0;
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() != b_ip {
            return FilterAction::Pass;
        }
        seen += 1;
        match seen {
            100 => FilterAction::Drop,
            120 => FilterAction::Delay(Duration::from_nanos(1)),
            _ => FilterAction::Pass,
        }
    });
    write_one_mebibyte(&mut pair);
    let (a, b) = (pair.counters('a'), pair.counters('b'));
    assert_eq!((b.out_of_seq_request, b.seq_nak_repeated), (1, 0), "{b}");
    assert_eq!((a.rcvd_seq_err, a.completer_retry_err), (1, 1), "{a}");
}

/// Loses the `n`th datagram to `to` (counting from 1) and passes the others to it; says
/// nothing of datagrams to anyone else.
struct LoseNth {
    to: std::net::IpAddr,
    n: u32,
    seen: u32,
}

impl LoseNth {
    fn new(to: std::net::IpAddr, n: u32) -> Self {
        Self { to, n, seen: 0 }
    }

    /// The fate of `d` when it goes to `to`.
    fn fate(&mut self, d: &softroce_emu::sim::SimDatagram) -> Option<FilterAction> {
        if d.dst.ip() != self.to {
            return None;
        }
        self.seen += 1;
        Some(if self.seen == self.n {
            FilterAction::Drop
        } else {
            FilterAction::Pass
        })
    }
}

#[test]
fn a_lost_nak_is_covered_by_its_copies_and_three_lost_leave_the_gap_to_the_ack_timeout() {
    // b NAKs a gap three times, back to back: losing the first or the first two still has
    // a go back at once (the next copy starts the resend instead of being taken for an
    // echo). Losing all three (1 in a million at 1 % loss; losing two, as often as 1 in
    // 10 000, stalled a stream of 8 000 gaps a second once a second) leaves a to its ACK
    // timeout.
    for naks_lost in [1, 2, 3] {
        let mut pair = one_mebibyte_pair();
        let (a_ip, b_ip) = (pair.fabric.addr(pair.a.node), pair.fabric.addr(pair.b.node));
        let (mut to_b, mut naks_seen) = (LoseNth::new(b_ip, 100), 0);
        pair.fabric.set_filter(move |d| {
            if let Some(fate) = to_b.fate(d) {
                return fate;
            }
            let Ok(p) = RocePacket::new_checked(&d.payload[..]) else {
                return FilterAction::Pass;
            };
            let nak = p.aeth().is_some_and(|aeth| {
                Syndrome::from_byte(aeth.syndrome_raw()) == Syndrome::Nak(NakCode::PsnSequenceError)
            });
            if d.dst.ip() == a_ip && nak {
                naks_seen += 1;
                if naks_seen <= naks_lost {
                    return FilterAction::Drop;
                }
            }
            FilterAction::Pass
        });
        let took = write_one_mebibyte(&mut pair);
        eprintln!("1 MiB WRITE, packet 100 and {naks_lost} NAK(s) lost: {took:?}");
        let a = pair.counters('a');
        if naks_lost < 3 {
            assert_eq!(a.rcvd_seq_err, 1, "a copy: {a}");
            assert_eq!(a.completer_retry_err, 1, "{a}");
            assert!(took < TIMEOUT_14 / 10, "{took:?}");
        } else {
            assert_eq!(a.rcvd_seq_err, 0, "{a}");
            assert_eq!(a.completer_retry_err, 1, "one timeout: {a}");
            assert!(took >= TIMEOUT_14, "{took:?}");
        }
    }
}

#[test]
fn after_a_gap_each_ack_has_a_twin_so_losing_one_copy_of_every_ack_stalls_nothing() {
    // A lossy path's ACK often answers a's whole window: lost, a has nothing left to send
    // that would draw another and waits out its ACK timeout. Once b has seen a gap, it
    // sends each ACK twice: here the first copy of every ACK after the gap is lost, and
    // the WRITE still completes at once, with the one resend the gap cost.
    let mut pair = one_mebibyte_pair();
    let (a_ip, b_ip) = (pair.fabric.addr(pair.a.node), pair.fabric.addr(pair.b.node));
    let (mut to_b, mut gap_naked) = (LoseNth::new(b_ip, 100), false);
    let mut last_lost_ack = None::<Psn>;
    let copies = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Psn>::new()));
    let copies_seen = std::sync::Arc::clone(&copies);
    pair.fabric.set_filter(move |d| {
        if let Some(fate) = to_b.fate(d) {
            return fate;
        }
        let Ok(p) = RocePacket::new_checked(&d.payload[..]) else {
            return FilterAction::Pass;
        };
        let Some(aeth) = p.aeth() else {
            return FilterAction::Pass;
        };
        match Syndrome::from_byte(aeth.syndrome_raw()) {
            Syndrome::Nak(NakCode::PsnSequenceError) => gap_naked = true,
            Syndrome::Ack { .. } if gap_naked && d.dst.ip() == a_ip => {
                let psn = p.bth().psn();
                copies_seen.lock().unwrap().push(psn);
                if last_lost_ack != Some(psn) {
                    last_lost_ack = Some(psn);
                    return FilterAction::Drop;
                }
            }
            _ => {}
        }
        FilterAction::Pass
    });
    let took = write_one_mebibyte(&mut pair);
    let acks = copies.lock().unwrap().clone();
    eprintln!(
        "1 MiB WRITE, packet 100 and one copy of each later ACK lost: {took:?}, ACKs {acks:?}"
    );
    assert!(!acks.is_empty(), "b acknowledged after the gap");
    assert!(
        acks.chunks(2).all(|c| c.len() == 2 && c[0] == c[1]),
        "each ACK after the gap went twice: {acks:?}"
    );
    let a = pair.counters('a');
    assert_eq!(
        (a.rcvd_seq_err, a.completer_retry_err),
        (1, 1),
        "the gap's resend alone: {a}"
    );
    assert!(took < TIMEOUT_14 / 10, "no ACK timeout: {took:?}");
}

/// What a's WRITE packets to b looked like: each packet's PSN, whether it asked for an
/// ACK, and how many PSNs were unacknowledged (as of the last ACK b had sent) when it left.
#[derive(Debug, Clone, Copy)]
struct Sent {
    psn: Psn,
    ack_req: bool,
    outstanding: u32,
}

/// Lose a's 100th WRITE packet once, and record every packet a sends b (and whether it
/// left after b's sequence NAK) in `log`.
fn lose_packet_100_and_log(
    pair: &mut Pair,
    log: std::sync::Arc<std::sync::Mutex<Vec<(Sent, bool)>>>,
) {
    let b_ip = pair.fabric.addr(pair.b.node);
    let (mut seen, mut acked, mut naked) = (0, None::<Psn>, false);
    pair.fabric.set_filter(move |d| {
        let Ok(p) = RocePacket::new_checked(&d.payload[..]) else {
            return FilterAction::Pass;
        };
        let psn = p.bth().psn();
        if d.dst.ip() != b_ip {
            // b's ACKs and its NAK: the BTH PSN is the last one b has.
            if let Some(aeth) = p.aeth() {
                naked |= matches!(
                    Syndrome::from_byte(aeth.syndrome_raw()),
                    Syndrome::Nak(NakCode::PsnSequenceError)
                );
                acked = Some(psn);
            }
            return FilterAction::Pass;
        }
        seen += 1;
        let first = log.lock().unwrap().first().map_or(psn, |(s, _)| s.psn);
        let last_acked = acked.unwrap_or_else(|| first.sub(1));
        let sent = Sent {
            psn,
            ack_req: p.bth().ack_req(),
            outstanding: psn.distance_from(last_acked),
        };
        log.lock().unwrap().push((sent, naked));
        if seen == 100 {
            return FilterAction::Drop;
        }
        FilterAction::Pass
    });
}

#[test]
fn a_lossy_path_narrows_the_send_window_with_or_without_adaptive_retransmission() {
    // Go-back-N resends all a requester sent after a lost packet, and it sends its whole
    // window before the NAK can come back: so, once a path has shown loss, a requester
    // keeps 64 PSNs unacknowledged instead of the full window's 256, and asks for an ACK
    // every 16 packets of a long message instead of every 64 (rxe's). How much is in
    // flight is the requester's own business (no man page speaks of it): adaptive
    // retransmission or not, the same.
    for adaptive_retransmit in [false, true] {
        let mut pair = Pair::new(Options {
            mtu: Mtu::Mtu4096,
            mem_len: 1 << 20,
            timeout: 14,
            adaptive_retransmit,
            ..Options::default()
        });
        // A link slower than a's sending: its window, not its pace, bounds what it has out,
        // and b's last ACK is what a knows when it sends.
        pair.fabric.latency = Duration::from_micros(100);
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        lose_packet_100_and_log(&mut pair, log.clone());
        write_one_mebibyte(&mut pair);
        assert_eq!(pair.counters('a').rcvd_seq_err, 1, "packet 100 was NAKed");

        let log = log.lock().unwrap();
        let first = log[0].0.psn;
        let npkts = 256;
        let (before, after): (Vec<Sent>, Vec<Sent>) = {
            let before = log.iter().filter(|(_, naked)| !naked).map(|(s, _)| *s);
            let after = log.iter().filter(|(_, naked)| *naked).map(|(s, _)| *s);
            (before.collect(), after.collect())
        };
        assert!(!after.is_empty(), "a resent after the NAK");
        let asks_every = |sent: &[Sent], every: u32| {
            sent.iter().all(|s| {
                let i = s.psn.distance_from(first);
                s.ack_req == ((i + 1) % every == 0 || i + 1 == npkts)
            })
        };
        let most_outstanding = |sent: &[Sent]| sent.iter().map(|s| s.outstanding).max();

        // Before the loss, both keep the full window: 256 PSNs, an ACK asked every 64.
        assert!(asks_every(&before, 64), "{before:?}");
        assert_eq!(most_outstanding(&before), Some(256), "{before:?}");
        assert!(asks_every(&after, 16), "{after:?}");
        assert!(most_outstanding(&after) <= Some(64), "{after:?}");
    }
}

/// A program may destroy a QP while the completion of a send the peer acknowledged is
/// still unpolled: libfabric's rxm closes a connection from its connection manager thread
/// as soon as the peer disconnects, drains the CQ, and reports every request it does not
/// find there as flushed. The finished send stays for it; the receive the disconnect
/// flushed goes with the QP (its buffer belongs to a closed connection).
#[test]
fn destroying_a_qp_keeps_its_finished_sends_and_takes_its_flushed_receives() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    pair.post_recv('b', 7, 0, 64);
    pair.post_recv('a', 8, 64, 64);
    let wr = pair.send_wr('a', 1, 0, 64);
    pair.post_send('a', wr);
    assert_eq!(
        pair.completions('b', 1, LONG).len(),
        1,
        "B receives the SEND"
    );
    // B's ACK reaches A (held ACKs included): the fabric runs until nothing is left.
    for _ in 0..1_000_000 {
        if !pair.fabric.step() {
            break;
        }
    }
    let (qp, cq) = (pair.a.qp, pair.a.cq);
    pair.move_to_err('a');
    pair.hca('a').destroy_qp(qp).unwrap();
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Recv, 0); 8];
    let n = pair.hca('a').poll_cq(cq, &mut wcs).unwrap();
    let left: Vec<_> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode))
        .collect();
    assert_eq!(
        left,
        [(1, WcStatus::Success, WcOpcode::Send)],
        "the acknowledged SEND's completion stays, the flushed receive goes"
    );
}
