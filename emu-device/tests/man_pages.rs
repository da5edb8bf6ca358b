//! Rules the libibverbs man pages (rdma-core 44) state, one test per rule, named after the
//! page: what a conformance test built against `<infiniband/verbs.h>` checks.

mod common;

use std::time::Duration;

use common::{A_IP, B_IP, Options, Pair};
use softroce_emu::core::*;
use softroce_wire::Gid;

fn device() -> Hca {
    Hca::new(HcaConfig::new("softroce0", A_IP.parse().unwrap()))
}

fn qp_init(cq: CqHandle, srq: Option<SrqHandle>, qp_type: QpType) -> QpInitAttr {
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq,
        cap: QpCap::new(8, 8).with_sges(2),
        qp_type,
        sq_sig_all: false,
        qp_context: 0,
    }
}

/// ibv_post_send(3): posting "stops processing WRs from this list at the first failure …
/// and returns this failing WR through bad_wr": the WRs before it were posted, so they
/// execute and complete.
#[test]
fn ibv_post_send_wrs_before_bad_wr_are_posted_and_complete() {
    let mut p = Pair::new(Options::default());
    p.post_recv('b', 1, 0, 64);
    let good = p.send_wr('a', 10, 0, 16);
    let mut too_many_sges = p.send_wr('a', 11, 0, 16);
    too_many_sges.sg_list = vec![p.side('a').mem.sge(0, 1); 5];
    let qp = p.side('a').qp;
    // SAFETY: no inline data.
    let err = unsafe { p.hca('a').post_send(qp, &[good, too_many_sges]) }.unwrap_err();
    assert_eq!((err.index, err.error.errno()), (1, libc::EINVAL));
    let wcs = p.completions('a', 1, Duration::from_secs(5));
    assert_eq!(wcs.len(), 1, "WR 1 was posted and must complete");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (10, WcStatus::Success),
        "{wcs:?}"
    );
    let wcs = p.completions('b', 1, Duration::from_secs(1));
    assert_eq!((wcs.len(), wcs[0].byte_len), (1, 16));
}

/// ibv_post_recv(3) and ibv_post_srq_recv(3): the same rule for receive lists: the WRs
/// before `bad_wr` are posted (and consumed by arriving messages).
#[test]
fn ibv_post_recv_and_post_srq_recv_wrs_before_bad_wr_are_posted() {
    for srq in [false, true] {
        let mut p = Pair::new(Options {
            srq,
            ..Options::default()
        });
        let s = p.side('b');
        let (qp, srq_h) = (s.qp, s.srq);
        let good = RecvWr {
            wr_id: 5,
            sg_list: vec![s.mem.sge(0, 64)],
        };
        let bad = RecvWr {
            wr_id: 6,
            sg_list: vec![s.mem.sge(0, 1); 5],
        };
        let err = match srq_h {
            Some(h) => p.hca('b').post_srq_recv(h, &[good, bad]),
            None => p.hca('b').post_recv(qp, &[good, bad]),
        }
        .unwrap_err();
        assert_eq!(
            (err.index, err.error.errno()),
            (1, libc::EINVAL),
            "srq {srq}"
        );
        let wr = p.send_wr('a', 1, 0, 8);
        p.post_send('a', wr);
        let wcs = p.completions('b', 1, Duration::from_secs(5));
        assert_eq!(wcs.len(), 1, "srq {srq}: the first receive WR was posted");
        assert_eq!((wcs[0].wr_id, wcs[0].status), (5, WcStatus::Success));
    }
}

/// ibv_create_qp(3) NOTES: "ibv_create_qp() will fail if it is asked to create QP of a
/// type other than IBV_QPT_RC or IBV_QPT_UD associated with an SRQ."
#[test]
fn ibv_create_qp_only_rc_and_ud_qps_take_an_srq() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = hca.create_srq(pd, attr, 0).unwrap();
    let err = hca
        .create_qp(pd, qp_init(cq, Some(srq), QpType::Uc))
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(err.to_string().contains("only RC and UD"), "{err}");
    for t in [QpType::Rc, QpType::Ud] {
        hca.create_qp(pd, qp_init(cq, Some(srq), t)).unwrap();
    }
    // The refused QP holds no reference: two users remain.
    assert_eq!(hca.destroy_srq(srq).unwrap_err().errno(), libc::EBUSY);
}

/// ibv_query_port(3)/ibv_query_gid(3): every GID the port advertises carries traffic. A UD
/// datagram sent from each index of the table arrives.
#[test]
fn ibv_query_gid_every_advertised_gid_carries_traffic() {
    let mut p = Pair::new(Options {
        qp_type: QpType::Ud,
        ..Options::default()
    });
    let len = p.hca('a').query_port(1).unwrap().gid_tbl_len;
    assert!(len >= 1);
    let pd = p.side('a').pd;
    let bqpn = p.side('b').qpn;
    for index in 0..len {
        let sgid = p.hca('a').query_gid(1, index as usize).unwrap();
        assert_ne!(sgid, Gid::ZERO);
        let ah = p
            .hca('a')
            .create_ah(
                pd,
                AhAttr::new(Gid::from_ip(B_IP.parse().unwrap()), index as u8),
            )
            .unwrap();
        p.post_recv('b', u64::from(index), 0, 64 + 40);
        let mut wr = p.send_wr('a', 100 + u64::from(index), 0, 32);
        wr.ud = Some(UdTarget {
            ah,
            remote_qpn: bqpn,
            remote_qkey: QpBringup::new(QpType::Ud).qkey,
        });
        p.post_send('a', wr);
        let wcs = p.completions('b', 1, Duration::from_secs(2));
        assert_eq!(
            wcs.len(),
            1,
            "nothing arrived from GID index {index} ({sgid})"
        );
        assert_eq!(wcs[0].status, WcStatus::Success);
    }
}

/// A destination the device cannot reach is refused when the address vector is made (as
/// the kernel's route resolution refuses it), never accepted and then lost: an IPv6 or
/// link-local GID from an IPv4 device, a remote host from a loopback device.
#[test]
fn ibv_create_ah_and_ibv_modify_qp_refuse_destinations_no_packet_can_reach() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let (qp, _, _) = hca.create_qp(pd, qp_init(cq, None, QpType::Rc)).unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    hca.modify_qp(
        qp,
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let link_local = Gid::link_local_from_mac([0x02, 0, 127, 0, 0, 2]);
    for dgid in [
        link_local,
        Gid::from_ip("::1".parse().unwrap()),
        Gid::from_ip("10.1.2.3".parse().unwrap()),
    ] {
        let av = AhAttr::new(dgid, 0);
        let err = hca.create_ah(pd, av).unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL, "{dgid}");
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: av,
            dest_qp_num: 0x20,
            path_mtu: softroce_wire::Mtu::Mtu1024,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER;
        let err = hca.modify_qp(qp, &rtr, mask).unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL, "{dgid}");
        assert_eq!(hca.qp_state(qp).unwrap(), QpState::Init);
    }
}
