//! UD multicast in the sans-IO core on the simulated fabric: what leaves (one RoCEv2
//! datagram to the group's IP address, BTH destination QPN 0xFFFFFF), and who takes it on
//! arrival (every attached QP that is ready and has the packet's Q_Key, each counted when
//! it does not).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::FilterAction;
use softroce_wire::grh::{GRH_LEN, parse_grh};
use softroce_wire::{BthRepr, Gid, Mtu, RocePacket};

const LONG: Duration = Duration::from_secs(5);
const QKEY: u32 = 0x1111_1111;

fn group() -> Gid {
    Gid::from_ip("239.79.8.1".parse().unwrap())
}

fn ud_pair() -> Pair {
    Pair::new(Options {
        qp_type: QpType::Ud,
        mtu: Mtu::Mtu1024,
        ..Options::default()
    })
}

/// A send from `a` to the group, from offset 0 of its memory.
fn send_to_group(pair: &mut Pair, wr_id: u64, len: usize) {
    let pa = pair.a.pd;
    let ah = pair
        .hca('a')
        .create_ah(pa, AhAttr::new(group(), 0))
        .unwrap();
    let mut wr = pair.send_wr('a', wr_id, 0, len);
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: MULTICAST_QPN,
        remote_qkey: QKEY,
    });
    pair.post_send('a', wr);
    let sent = pair.completions('a', 1, LONG);
    assert_eq!(sent[0].status, WcStatus::Success);
}

#[test]
fn a_send_to_a_group_is_one_datagram_to_its_ip_address_for_qpn_ffffff() {
    let mut pair = ud_pair();
    let bq = pair.b.qp;
    pair.hca('b').attach_mcast(bq, group(), 0).unwrap();
    let seen: Arc<Mutex<Vec<(std::net::IpAddr, u32)>>> = Arc::default();
    let log = Arc::clone(&seen);
    pair.fabric.set_filter(move |d| {
        let packet = RocePacket::new_checked(&d.payload[..]).unwrap();
        let bth = BthRepr::parse(&packet.bth()).unwrap();
        log.lock().unwrap().push((d.dst.ip(), bth.dest_qpn.value()));
        FilterAction::Pass
    });
    pair.post_recv('b', 1, 0, GRH_LEN + 256);
    pair.a.mem.write(0, &pattern(3, 256));
    send_to_group(&mut pair, 7, 256);
    let got = pair.completions('b', 1, LONG);
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(got[0].src_qp, pair.a.qpn);
    assert!(got[0].wc_flags.contains(WcFlags::GRH));
    let grh = parse_grh(&pair.b.mem.read(0, GRH_LEN)).unwrap();
    assert_eq!(grh.dgid, group(), "the GRH area names the group");
    assert_eq!(grh.sgid, Gid::from_ip(A_IP.parse().unwrap()));
    assert_eq!(pair.b.mem.read(GRH_LEN, 256), pattern(3, 256));
    assert_eq!(
        *seen.lock().unwrap(),
        [("239.79.8.1".parse().unwrap(), MULTICAST_QPN)],
        "one datagram, to the group"
    );
}

#[test]
fn members_not_ready_or_with_another_qkey_are_skipped_and_counted() {
    let mut pair = ud_pair();
    let (bq, bpd, bcq) = (pair.b.qp, pair.b.pd, pair.b.cq);
    let b = pair.hca('b');
    // A second QP attached in INIT (not ready), a third with another Q_Key.
    let mk = |b: &mut Hca| {
        let init = QpInitAttr {
            send_cq: bcq,
            recv_cq: bcq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: QpType::Ud,
            sq_sig_all: false,
            qp_context: 0,
        };
        b.create_qp(bpd, init).unwrap().0
    };
    let idle = mk(b);
    let other = mk(b);
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qkey: QKEY,
        port_num: 1,
        ..QpAttr::default()
    };
    let init_mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    b.modify_qp(idle, &attr, init_mask).unwrap();
    attr.qkey = QKEY ^ 1;
    b.modify_qp(other, &attr, init_mask).unwrap();
    attr.qp_state = QpState::Rtr;
    b.modify_qp(other, &attr, QpAttrMask::STATE).unwrap();
    for qp in [bq, idle, other] {
        b.attach_mcast(qp, group(), 0).unwrap();
    }
    pair.post_recv('b', 1, 0, GRH_LEN + 64);
    send_to_group(&mut pair, 1, 64);
    let got = pair.completions('b', 1, LONG);
    assert_eq!((got.len(), got[0].qp_num), (1, pair.b.qpn));
    let c = pair.counters('b');
    assert_eq!(c.qkey_violation, 1, "{c:?}");
    assert_eq!(
        c.drops[DropReason::ALL
            .iter()
            .position(|r| *r == DropReason::QpNotReady)
            .unwrap()],
        1
    );
    let b = pair.hca('b');
    for qp in [bq, idle, other] {
        b.detach_mcast(qp, group(), 0).unwrap();
    }
}

#[test]
fn a_group_nobody_here_joined_and_qpn_ffffff_to_a_unicast_address_are_dropped() {
    let mut pair = ud_pair();
    pair.post_recv('b', 1, 0, GRH_LEN + 64);
    // Nobody attached: the fabric routes the datagram nowhere.
    send_to_group(&mut pair, 1, 64);
    assert!(
        pair.completions('b', 1, Duration::from_millis(200))
            .is_empty()
    );
    // QPN 0xFFFFFF to b's own address: no group is named, so no QP takes it.
    let pa = pair.a.pd;
    let ah = pair
        .hca('a')
        .create_ah(pa, AhAttr::new(Gid::from_ip(B_IP.parse().unwrap()), 0))
        .unwrap();
    let mut wr = pair.send_wr('a', 2, 0, 64);
    wr.ud = Some(UdTarget {
        ah,
        remote_qpn: MULTICAST_QPN,
        remote_qkey: QKEY,
    });
    pair.post_send('a', wr);
    pair.completions('a', 1, LONG);
    assert!(
        pair.completions('b', 1, Duration::from_millis(200))
            .is_empty()
    );
    let c = pair.counters('b');
    let unknown = DropReason::ALL
        .iter()
        .position(|r| *r == DropReason::UnknownQpn)
        .unwrap();
    assert_eq!(c.drops[unknown], 1, "{c:?}");
}
