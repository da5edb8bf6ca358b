//! The core's side of a send the host refuses (`HcaConfig::transmit_feedback`): a UD
//! request waits for the driver's word on its packet; `handle_sent` completes it,
//! `handle_send_failure` completes it with IBV_WC_LOC_QP_OP_ERR (rxe's status when
//! `rxe_xmit_packet` fails), counts `send_err` instead of `sent_pkts`, and moves the QP to
//! SQE with the WRs behind it flushed. Multicast sends are UD sends like any other. An RC
//! packet is only counted: its retransmission recovers it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use softroce_emu::core::*;
use softroce_wire::{Gid, Mtu};

const QKEY: u32 = 0x1111_1111;

/// A device that waits for transmit reports, with a UD QP in RTS sending to a group.
fn ud_sender() -> (Hca, CqHandle, QpHandle, Memory, UdTarget) {
    let mut cfg = HcaConfig::new("refused", "127.0.0.1".parse().unwrap());
    cfg.transmit_feedback = true;
    let mut hca = Hca::new(cfg);
    let (pd, cq, mem) = end(&mut hca, AccessFlags::LOCAL_WRITE);
    let (qp, _, _) = hca
        .create_qp(
            pd,
            QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap::new(8, 8).with_sges(1),
                qp_type: QpType::Ud,
                sq_sig_all: true,
                qp_context: 0,
            },
        )
        .unwrap();
    let bringup = QpBringup {
        qkey: QKEY,
        ..QpBringup::new(QpType::Ud)
    };
    let peer = QpPeer {
        qpn: 0,
        psn: softroce_wire::Psn::new(0),
        av: AhAttr::new(Gid::ZERO, 0),
    };
    bringup
        .to_rts(&mut hca, qp, &peer, softroce_wire::Psn::new(0))
        .unwrap();
    let group = Gid::from_ip("239.79.9.1".parse().unwrap());
    let ah = hca.create_ah(pd, AhAttr::new(group, 0)).unwrap();
    let to = UdTarget {
        ah,
        remote_qpn: MULTICAST_QPN,
        remote_qkey: QKEY,
    };
    (hca, cq, qp, mem, to)
}

fn send(hca: &mut Hca, qp: QpHandle, mem: &Memory, to: UdTarget, wr_id: u64) {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.sg_list = vec![mem.sge(0, 64)].into();
    wr.ud = Some(to);
    // SAFETY: no inline data; the memory outlives the device.
    unsafe { hca.post_send(qp, &[wr]) }.unwrap();
}

fn poll(hca: &mut Hca, cq: CqHandle) -> Vec<(u64, WcStatus, u32)> {
    let mut out = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 8];
    let n = hca.poll_cq(cq, &mut out).unwrap();
    out[..n]
        .iter()
        .map(|w| (w.wr_id, w.status, w.vendor_err))
        .collect()
}

/// Every packet the device has to send now, with its token.
fn handed_out(hca: &mut Hca, now: Instant) -> Vec<Option<TransmitToken>> {
    let mut buf = Vec::new();
    let mut tokens = Vec::new();
    for _ in 0..64 {
        let Some(t) = hca.poll_transmit(now, &mut buf) else {
            break;
        };
        tokens.push(t.token);
    }
    tokens
}

#[test]
fn a_multicast_send_completes_when_its_packet_left_and_in_error_when_it_could_not() {
    let (mut hca, cq, qp, mem, to) = ud_sender();
    let now = Instant::now();

    send(&mut hca, qp, &mem, to, 1);
    let tokens = handed_out(&mut hca, now);
    assert_eq!(tokens.len(), 1);
    assert!(
        poll(&mut hca, cq).is_empty(),
        "handed out is not sent: the WR waits for the driver's word"
    );
    hca.handle_sent(now, tokens[0].expect("a UD packet carries a token"));
    assert_eq!(poll(&mut hca, cq), [(1, WcStatus::Success, 0)]);

    // Two sends in one batch; the host refuses the first.
    send(&mut hca, qp, &mem, to, 2);
    send(&mut hca, qp, &mem, to, 3);
    let tokens = handed_out(&mut hca, now);
    assert_eq!(tokens.len(), 2);
    let sent_before = hca.counters().sent_pkts;
    hca.handle_send_failure(now, tokens[0]);
    // The second's report comes after the QP left RTS: its WR was flushed already.
    hca.handle_sent(now, tokens[1].unwrap());
    assert_eq!(
        poll(&mut hca, cq),
        [
            (2, WcStatus::LocQpOpErr, VendorErr::NotSent as u32),
            (3, WcStatus::WrFlushErr, VendorErr::Flushed as u32),
        ]
    );
    assert_eq!(hca.counters().send_err, 1);
    assert_eq!(
        hca.counters().sent_pkts,
        sent_before - 1,
        "what failed was not sent"
    );
    assert_eq!(hca.query_qp(qp).unwrap().0.qp_state, QpState::Sqe);

    // SQE -> RTS, and the QP sends again.
    let attr = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    hca.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
    send(&mut hca, qp, &mem, to, 4);
    let tokens = handed_out(&mut hca, now);
    hca.handle_sent(now, tokens[0].unwrap());
    assert_eq!(poll(&mut hca, cq), [(4, WcStatus::Success, 0)]);
}

#[test]
fn an_rc_packet_the_host_refuses_is_counted_and_sent_again() {
    let mut pair = Pair::new(Options {
        qp_type: QpType::Rc,
        mtu: Mtu::Mtu1024,
        ..Options::default()
    });
    pair.post_recv('b', 7, 0, 64);
    let wr = pair.send_wr('a', 1, 0, 64);
    pair.post_send('a', wr);
    // Before the fabric runs: the request is refused once by the host.
    let now = pair.fabric.now();
    let mut buf = Vec::new();
    let t = pair
        .hca('a')
        .poll_transmit(now, &mut buf)
        .expect("the request");
    assert_eq!(t.token, None, "RC needs no word: it retransmits");
    pair.hca('a').handle_send_failure(now, None);
    assert_eq!(pair.counters('a').send_err, 1);
    // The retransmit timer sends it again and the message arrives.
    let got = pair.completions('a', 1, Duration::from_secs(30));
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(pair.completions('b', 1, Duration::from_secs(1))[0].wr_id, 7);
}
