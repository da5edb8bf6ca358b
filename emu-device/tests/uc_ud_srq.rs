//! UC, UD and SRQ stories over the deterministic fabric, plus CQ overrun under traffic.

mod common;

use std::time::Duration;

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::FilterAction;
use softroce_wire::grh::{GRH_LEN, parse_grh};
use softroce_wire::{Gid, Mtu, Opcode, Psn};

const LONG: Duration = Duration::from_secs(10);

#[test]
fn uc_send_and_write_need_no_acks() {
    let mut pair = Pair::new(Options {
        qp_type: QpType::Uc,
        ..Options::default()
    });
    let data = pattern(4, 3000);
    pair.a.mem.write(0, &data);
    pair.post_recv('b', 1, 0, 4096);
    let wr = pair.send_wr('a', 1, 0, 3000);
    pair.post_send('a', wr);
    let wr = pair.rdma_wr('a', WrOpcode::RdmaWrite, 2, 0, 8192, 3000);
    pair.post_send('a', wr);
    let a = pair.completions('a', 2, LONG);
    assert!(a.iter().all(|w| w.status == WcStatus::Success));
    let b = pair.completions('b', 1, LONG);
    assert_eq!((b[0].status, b[0].byte_len), (WcStatus::Success, 3000));
    assert_eq!(pair.b.mem.read(0, 3000), data);
    assert_eq!(pair.b.mem.read(8192, 3000), data);
    let acks = pair.counters('b').sent_pkts;
    assert_eq!(acks, 0, "UC responders never send");
}

#[test]
fn uc_loss_drops_the_rest_of_the_message_and_the_next_one_arrives() {
    let mut pair = Pair::new(Options {
        qp_type: QpType::Uc,
        ..Options::default()
    });
    let b = pair.b.node;
    lose_to(&mut pair.fabric, b, |n| n == 2);
    pair.post_recv('b', 1, 0, 4096);
    pair.post_recv('b', 2, 4096, 4096);
    let first = pair.send_wr('a', 1, 0, 3000); // 3 packets, the middle one lost
    pair.post_send('a', first);
    pair.a.mem.write(8192, &pattern(8, 500));
    let second = pair.send_wr('a', 2, 8192, 500);
    pair.post_send('a', second);
    pair.completions('a', 2, LONG);
    pair.fabric.drive(10_000);
    let b = pair.poll('b');
    assert_eq!(b.len(), 1, "only the second message is delivered");
    assert_eq!(
        (b[0].wr_id, b[0].byte_len),
        (1, 500),
        "into the first receive WQE, which was reused"
    );
    assert_eq!(pair.b.mem.read(0, 500), pattern(8, 500));
}

fn ud_pair() -> (Pair, AhHandle, AhHandle) {
    let mut pair = Pair::new(Options {
        qp_type: QpType::Ud,
        mtu: Mtu::Mtu1024,
        ..Options::default()
    });
    let (pa, pb) = (pair.a.pd, pair.b.pd);
    let ah_ab = pair
        .hca('a')
        .create_ah(pa, AhAttr::new(Gid::from_ip(B_IP.parse().unwrap()), 0))
        .unwrap();
    let ah_ba = pair
        .hca('b')
        .create_ah(pb, AhAttr::new(Gid::from_ip(A_IP.parse().unwrap()), 0))
        .unwrap();
    (pair, ah_ab, ah_ba)
}

#[test]
fn ud_receive_starts_with_the_40_byte_grh_area() {
    let (mut pair, ah, _) = ud_pair();
    pair.post_recv('b', 5, 0, 40 + 512);
    let data = pattern(2, 512);
    pair.a.mem.write(0, &data);
    let mut wr = pair.send_wr('a', 9, 0, 512);
    wr.opcode = WrOpcode::SendWithImm;
    wr.imm_data = 0x1234_5678;
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: pair.b.qpn,
        remote_qkey: 0x1111_1111,
    });
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a[0].status, WcStatus::Success);
    let b = pair.completions('b', 1, LONG);
    assert_eq!(b[0].status, WcStatus::Success);
    assert_eq!(b[0].byte_len as usize, GRH_LEN + 512);
    assert!(b[0].wc_flags.contains(WcFlags::GRH) && b[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(b[0].src_qp, pair.a.qpn);
    assert_eq!(b[0].imm_data, 0x1234_5678);
    let area = pair.b.mem.read(0, GRH_LEN);
    assert!(
        area[..20].iter().all(|&x| x == 0),
        "IPv4: 20 zero bytes first"
    );
    let grh = parse_grh(&area).unwrap();
    assert_eq!(grh.sgid, Gid::from_ip(A_IP.parse().unwrap()));
    assert_eq!(grh.dgid, Gid::from_ip(B_IP.parse().unwrap()));
    assert_eq!(pair.b.mem.read(GRH_LEN, 512), data);
    // ibv_query_qp: each side is at the PSN after its one message (rxe's req.psn and
    // resp.psn; a UD QP checks none).
    let (aqp, bqp) = (pair.a.qp, pair.b.qp);
    let a_at = pair.hca('a').query_qp(aqp).unwrap().0.sq_psn;
    let b_at = pair.hca('b').query_qp(bqp).unwrap().0.rq_psn;
    assert_eq!(
        b_at, a_at,
        "the receiver expects the PSN the sender sends next"
    );
}

#[test]
fn a_ud_qp_in_rtr_receives_without_a_comm_est_event() {
    let (mut pair, ah, _) = ud_pair();
    // B back to RTR: it receives there, and COMM_EST is an event of connected QPs only.
    let bqp = pair.b.qp;
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    pair.hca('b')
        .modify_qp(bqp, &reset, QpAttrMask::STATE)
        .unwrap();
    let peer = QpPeer {
        qpn: pair.a.qpn,
        psn: Psn::new(0),
        av: AhAttr::new(Gid::from_ip(A_IP.parse().unwrap()), 0),
    };
    QpBringup::new(QpType::Ud)
        .to_rtr(pair.hca('b'), bqp, &peer)
        .unwrap();
    pair.post_recv('b', 5, 0, 40 + 64);
    let mut wr = pair.send_wr('a', 9, 0, 64);
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: pair.b.qpn,
        remote_qkey: 0x1111_1111,
    });
    pair.post_send('a', wr);
    let b = pair.completions('b', 1, LONG);
    assert_eq!(b[0].status, WcStatus::Success, "received in RTR");
    assert!(
        pair.hca('b').get_async_event().is_err(),
        "no IBV_EVENT_COMM_EST for a UD QP"
    );
}

#[test]
fn ud_with_a_wrong_qkey_is_dropped_and_counted() {
    let (mut pair, ah, _) = ud_pair();
    pair.post_recv('b', 5, 0, 600);
    let mut wr = pair.send_wr('a', 9, 0, 100);
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: pair.b.qpn,
        remote_qkey: 0x2222,
    });
    pair.post_send('a', wr);
    pair.completions('a', 1, LONG);
    pair.fabric.drive(1000);
    assert!(pair.poll('b').is_empty());
    assert_eq!(pair.counters('b').drops_of(DropReason::BadQkey), 1);
    assert_eq!(pair.counters('b').qkey_violation, 1);
}

#[test]
fn ud_message_larger_than_the_mtu_fails_locally() {
    let (mut pair, ah, _) = ud_pair();
    let mut wr = pair.send_wr('a', 9, 0, 4097); // the port's active MTU is 4096
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: pair.b.qpn,
        remote_qkey: 0x1111_1111,
    });
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(a[0].status, WcStatus::LocLenErr);
    let qp = pair.a.qp;
    assert_eq!(
        pair.hca('a').qp_state(qp).unwrap(),
        QpState::Sqe,
        "UD send errors move the QP to SQE"
    );

    // In SQE the send queue stays in error: a send posted there is flushed, not held for
    // the QP's return to RTS.
    let mut wr = pair.send_wr('a', 10, 0, 100);
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: pair.b.qpn,
        remote_qkey: 0x1111_1111,
    });
    pair.post_send('a', wr);
    let a = pair.completions('a', 1, LONG);
    assert_eq!(
        (a.len(), a[0].wr_id, a[0].status),
        (1, 10, WcStatus::WrFlushErr)
    );
    let back = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    pair.hca('a')
        .modify_qp(qp, &back, QpAttrMask::STATE)
        .unwrap();
    pair.fabric.drive(1000);
    assert!(
        pair.poll('a').is_empty(),
        "nothing was held to be sent or completed later"
    );
    assert_eq!(
        pair.counters('b').rcvd_pkts,
        0,
        "the flushed send never left"
    );
}

#[test]
fn srq_feeds_receives_and_fires_its_limit_once_per_arming() {
    let mut pair = Pair::new(Options {
        srq: true,
        ..Options::default()
    });
    for i in 0..4 {
        pair.post_recv('b', i, i as usize * 128, 128);
    }
    let srq = pair.b.srq.unwrap();
    pair.hca('b')
        .modify_srq(
            srq,
            SrqAttr {
                srq_limit: 3,
                ..SrqAttr::default()
            },
            SrqAttrMask {
                limit: true,
                max_wr: false,
            },
        )
        .unwrap();
    for i in 0..3 {
        let wr = pair.send_wr('a', i, 0, 64);
        pair.post_send('a', wr);
    }
    let b = pair.completions('b', 3, LONG);
    assert_eq!(b.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2]);
    let ev = pair.hca('b').get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::SrqLimitReached, EventElement::Srq(srq))
    );
    assert!(
        pair.hca('b').get_async_event().is_err(),
        "fires once, then disarmed"
    );
    assert_eq!(pair.hca('b').query_srq(srq).unwrap().srq_limit, 0);
    pair.hca('b').ack_async_event(&ev).unwrap();
}

/// ibv_modify_qp(3): a QP moved to ERR completes its outstanding WRs with
/// IBV_WC_WR_FLUSH_ERR — the receive an SRQ-attached QP took for a message it was in the
/// middle of too (taken from the SRQ, it is no longer the SRQ's to keep), before its
/// LAST_WQE_REACHED; the SRQ's other receives stay posted.
#[test]
fn a_receive_taken_from_the_srq_mid_message_is_flushed_with_the_qp() {
    let mut pair = Pair::new(Options {
        srq: true,
        ..Options::default()
    });
    pair.post_recv('b', 1, 0, 4096);
    pair.post_recv('b', 2, 4096, 4096);
    let b = pair.b.node;
    lose_to(&mut pair.fabric, b, |n| n >= 2);
    let wr = pair.send_wr('a', 9, 0, 3000);
    pair.post_send('a', wr);
    // The FIRST arrives (its ACK is coalesced away), the rest never does.
    let _ = pair.completions('b', 1, Duration::from_millis(2));
    let (qp, srq) = (pair.b.qp, pair.b.srq.unwrap());
    pair.move_to_err('b');
    let w = pair.poll('b');
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (1, WcStatus::WrFlushErr, WcOpcode::Recv)
    );
    let ev = pair.hca('b').get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::QpLastWqeReached, EventElement::Qp(qp))
    );
    assert_eq!(pair.hca('b').srq_len(srq).unwrap(), 1);
}

/// ibv_modify_qp(3): a QP moved straight to RESET completes nothing, but the receive it
/// took from the SRQ for a message it was in the middle of belongs to the SRQ: it goes back
/// to the SRQ's head, uncompleted, and the next message takes it. The SRQ counts it again,
/// so its limit fires when the SRQ really runs low, not one receive early.
#[test]
fn a_receive_taken_from_the_srq_mid_message_goes_back_when_the_qp_is_reset() {
    let o = Options {
        srq: true,
        ..Options::default()
    };
    let mut pair = Pair::new(o);
    for i in 1..=3 {
        pair.post_recv('b', i, i as usize * 4096, 4096);
    }
    let (qp, srq) = (pair.b.qp, pair.b.srq.unwrap());
    let limit = SrqAttr {
        srq_limit: 2,
        ..SrqAttr::default()
    };
    let mask = SrqAttrMask {
        limit: true,
        max_wr: false,
    };
    pair.hca('b').modify_srq(srq, limit, mask).unwrap();
    let b = pair.b.node;
    lose_to(&mut pair.fabric, b, |n| n >= 2);
    let data = pattern(3, 3000);
    pair.a.mem.write(0, &data);
    let wr = pair.send_wr('a', 9, 0, 3000);
    pair.post_send('a', wr);
    // The FIRST arrives and takes receive 1, the rest never does.
    let _ = pair.completions('b', 1, Duration::from_millis(2));
    assert_eq!(pair.hca('b').srq_len(srq).unwrap(), 2);
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    pair.hca('b')
        .modify_qp(qp, &reset, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(pair.poll('b'), [], "RESET completes nothing");
    assert_eq!(pair.hca('b').srq_len(srq).unwrap(), 3, "receive 1 is back");
    assert!(
        pair.hca('b').get_async_event().is_err(),
        "no LAST_WQE_REACHED, and the SRQ never ran below its limit"
    );
    // Back to RTS at the PSN A still retransmits the message from.
    pair.fabric.clear_filter();
    let aqpn = pair.a.qpn;
    connect(pair.hca('b'), qp, A_IP, aqpn, &o);
    let a = pair.completions('a', 1, LONG);
    assert_eq!((a[0].wr_id, a[0].status), (9, WcStatus::Success));
    let w = pair.completions('b', 1, LONG);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].byte_len),
        (1, WcStatus::Success, 3000),
        "the retransmitted message lands in the receive the SRQ got back"
    );
    assert_eq!(pair.b.mem.read(4096, 3000), data);
    assert!(
        pair.hca('b').get_async_event().is_err(),
        "two receives left"
    );
    let wr = pair.send_wr('a', 10, 0, 100);
    pair.post_send('a', wr);
    let w = pair.completions('b', 1, LONG);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    let ev = pair.hca('b').get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::SrqLimitReached, EventElement::Srq(srq)),
        "one receive left, below the limit of 2"
    );
    pair.hca('b').ack_async_event(&ev).unwrap();
}

#[test]
fn srq_is_shared_by_several_qps() {
    let o = Options {
        srq: true,
        ..Options::default()
    };
    let mut pair = Pair::new(o);
    // A second connected QP pair sharing b's SRQ and CQ.
    let (bpd, bcq, bsrq) = (pair.b.pd, pair.b.cq, pair.b.srq);
    let (apd, acq) = (pair.a.pd, pair.a.cq);
    let init = |cq, srq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap::new(8, 8),
        qp_type: QpType::Rc,
        sq_sig_all: true,
        qp_context: 0,
    };
    let (a2, a2n, _) = pair.hca('a').create_qp(apd, init(acq, None)).unwrap();
    let (b2, b2n, _) = pair.hca('b').create_qp(bpd, init(bcq, bsrq)).unwrap();
    connect(pair.hca('a'), a2, B_IP, b2n.value(), &o);
    connect(pair.hca('b'), b2, A_IP, a2n.value(), &o);
    for i in 0..2 {
        pair.post_recv('b', i, i as usize * 256, 256);
    }
    let wr = pair.send_wr('a', 1, 0, 10);
    pair.post_send('a', wr);
    let mut wr2 = pair.send_wr('a', 2, 0, 20);
    wr2.send_flags = SendFlags::SIGNALED;
    // SAFETY: no inline data.
    unsafe { pair.hca('a').post_send(a2, &[wr2]) }.unwrap();
    let b = pair.completions('b', 2, LONG);
    let mut qps: Vec<u32> = b.iter().map(|w| w.qp_num).collect();
    qps.sort();
    let mut want = vec![pair.b.qpn, b2n.value()];
    want.sort();
    assert_eq!(qps, want, "both QPs drew from the shared queue");
}

#[test]
fn cq_overrun_mid_traffic_raises_cq_err_and_errors_the_responder() {
    let mut pair = Pair::new(Options {
        cqe: 3,
        ..Options::default()
    });
    for i in 0..6 {
        pair.post_recv('b', i, 0, 64);
    }
    for i in 0..6 {
        let wr = pair.send_wr('a', i, 0, 8);
        pair.post_send('a', wr);
    }
    pair.fabric.drive(100_000);
    let ev = pair.hca('b').get_async_event().unwrap();
    assert_eq!(ev.event_type, EventType::CqErr);
    let ev2 = pair.hca('b').get_async_event().unwrap();
    assert_eq!(
        ev2.event_type,
        EventType::QpFatal,
        "the responder QP is moved to error (rxe)"
    );
    let bqp = pair.b.qp;
    assert_eq!(pair.hca('b').qp_state(bqp).unwrap(), QpState::Err);
    assert!(pair.counters('b').cqe_overrun_lost >= 1);
}

#[test]
fn solicited_flag_is_set_only_on_the_last_packet() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let b_ip = pair.fabric.addr(pair.b.node);
    let se_seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = se_seen.clone();
    pair.fabric.set_filter(move |d| {
        if d.dst.ip() == b_ip
            && Opcode(d.payload[0]) != Opcode::RC_ACKNOWLEDGE
            && d.payload[1] & 0x80 != 0
        {
            assert_eq!(Opcode(d.payload[0]), Opcode::RC_SEND_LAST);
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        FilterAction::Pass
    });
    pair.post_recv('b', 1, 0, 4096);
    let mut wr = pair.send_wr('a', 1, 0, 3000);
    wr.send_flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
    pair.post_send('a', wr);
    pair.completions('b', 1, LONG);
    assert_eq!(se_seen.load(std::sync::atomic::Ordering::Relaxed), 1);
}
