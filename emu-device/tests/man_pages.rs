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

fn to_init(hca: &mut Hca, qp: QpHandle) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    hca.modify_qp(qp, &init, mask).unwrap();
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
    too_many_sges.sg_list = vec![p.side('a').mem.sge(0, 1); 5].into();
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
            sg_list: vec![s.mem.sge(0, 64)].into(),
        };
        let bad = RecvWr {
            wr_id: 6,
            sg_list: vec![s.mem.sge(0, 1); 5].into(),
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
    to_init(&mut hca, qp);
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

/// ibv_get_cq_event(3): "destroying a CQ will wait for all completion events to be
/// acknowledged": the core tells that refusal apart from a CQ still in use, so the library
/// waits for the one and fails the other with EBUSY.
#[test]
fn ibv_get_cq_event_unacknowledged_events_are_told_apart_from_users() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let ch = hca.create_comp_channel();
    let (cq, _) = hca.create_cq(16, Some(ch), 0, 0).unwrap();
    let (qp, _, _) = hca.create_qp(pd, qp_init(cq, None, QpType::Rc)).unwrap();
    let err = hca.destroy_cq(cq).unwrap_err();
    assert!(matches!(err, VerbsError::Busy { .. }), "{err:?}");
    // A flushed receive completes into the armed CQ and queues an event.
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    hca.req_notify_cq(cq, false).unwrap();
    let mut mem = vec![0u8; 64];
    // SAFETY: `mem` outlives the device's use of it (the QP is destroyed below).
    let (_, keys) =
        unsafe { hca.reg_mr(pd, mem.as_mut_ptr(), 64, AccessFlags::LOCAL_WRITE) }.unwrap();
    let wr = RecvWr {
        wr_id: 1,
        sg_list: vec![Sge {
            addr: mem.as_ptr() as u64,
            length: 64,
            lkey: keys.lkey,
        }]
        .into(),
    };
    to_init(&mut hca, qp);
    hca.post_recv(qp, &[wr]).unwrap();
    hca.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
    hca.get_cq_event(ch).unwrap();
    hca.destroy_qp(qp).unwrap();
    let err = hca.destroy_cq(cq).unwrap_err();
    assert!(matches!(err, VerbsError::Unacknowledged { .. }), "{err:?}");
    assert_eq!(err.errno(), libc::EBUSY);
    hca.ack_cq_events(cq, 1).unwrap();
    hca.destroy_cq(cq).unwrap();
}

/// ibv_req_notify_cq(3) states no error for a CQ without a completion channel (rdma-core
/// and rxe return 0).
#[test]
fn ibv_req_notify_cq_accepts_a_cq_without_a_channel() {
    let mut hca = device();
    let (cq, _) = hca.create_cq(4, None, 0, 0).unwrap();
    hca.req_notify_cq(cq, false).unwrap();
    hca.req_notify_cq(cq, true).unwrap();
}

/// ibv_modify_srq(3): "If any of the modify attributes is invalid, none of the attributes
/// will be modified"; an armed limit bounds how far max_wr may shrink.
#[test]
fn ibv_modify_srq_max_wr_cannot_drop_below_an_armed_limit() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let attr = SrqAttr {
        max_wr: 16,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = hca.create_srq(pd, attr, 0).unwrap();
    let limit = SrqAttrMask {
        max_wr: false,
        limit: true,
    };
    let resize = SrqAttrMask {
        max_wr: true,
        limit: false,
    };
    let armed = SrqAttr {
        srq_limit: 8,
        ..attr
    };
    hca.modify_srq(srq, armed, limit).unwrap();
    let smaller = SrqAttr { max_wr: 4, ..attr };
    let err = hca.modify_srq(srq, smaller, resize).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(hca.query_srq(srq).unwrap(), armed);
}
