//! Local verbs semantics of the emulated HCA, one rule per story, each asserting the exact
//! errno, status or event the libibverbs man pages promise.

use softroce_emu::core::*;
use softroce_wire::{Gid, Mtu, Psn};

fn device() -> Hca {
    Hca::new(HcaConfig::new("softroce0", "127.0.0.1".parse().unwrap()))
}

struct Buf {
    mem: Vec<u8>,
    mr: MrHandle,
    keys: MrKeys,
}

fn register(hca: &mut Hca, pd: PdHandle, len: usize, access: AccessFlags) -> Buf {
    let mut mem = vec![0u8; len];
    // SAFETY: `mem` lives in the returned Buf for the rest of the test and is never moved
    // (a Vec's heap buffer does not move when the Vec does).
    let (mr, keys) = unsafe { hca.reg_mr(pd, mem.as_mut_ptr(), len, access) }.unwrap();
    Buf { mem, mr, keys }
}

fn sge(buf: &Buf, off: usize, len: u32) -> Sge {
    Sge {
        addr: buf.mem.as_ptr() as u64 + off as u64,
        length: len,
        lkey: buf.keys.lkey,
    }
}

fn rc_qp(hca: &mut Hca, pd: PdHandle, cq: CqHandle, srq: Option<SrqHandle>) -> QpHandle {
    let (qp, _, _) = hca
        .create_qp(
            pd,
            QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq,
                cap: QpCap::new(8, 8).with_sges(2).with_inline(64),
                qp_type: QpType::Rc,
                sq_sig_all: false,
                qp_context: 0,
            },
        )
        .unwrap();
    qp
}

fn to_rts(hca: &mut Hca, qp: QpHandle) {
    let bringup = QpBringup {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        rd_atomic: 4,
        ..QpBringup::new(QpType::Rc)
    };
    let peer = QpPeer {
        qpn: 0x22,
        psn: Psn::new(100),
        av: AhAttr::new(Gid::from_ip("127.0.0.2".parse().unwrap()), 0),
    };
    bringup.to_rts(hca, qp, &peer, Psn::new(200)).unwrap();
}

fn to_err(hca: &mut Hca, qp: QpHandle) {
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    hca.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
}

fn empty_wc() -> WorkCompletion {
    WorkCompletion::success(0, 0, WcOpcode::Send, 0)
}

#[test]
fn device_looks_like_rxe_with_the_ip_gid_at_index_0() {
    let hca = device();
    let a = hca.query_device();
    assert_eq!(
        (a.max_sge, a.max_cqe, a.max_qp_rd_atom, a.atomic_cap),
        (32, MAX_CQE, 128, 1)
    );
    let port = hca.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.active_mtu, Mtu::Mtu1024);
    assert_eq!(port.max_mtu, Mtu::Mtu4096);
    // Only the GID that carries traffic is listed (no link-local GID: see HcaConfig::new),
    // at index 0 where programs look first and at rxe's index 1.
    assert_eq!(port.gid_tbl_len, 2);
    assert_eq!(hca.query_gid(1, 0).unwrap().to_string(), "::ffff:127.0.0.1");
    assert_eq!(hca.query_gid(1, 1).unwrap().to_string(), "::ffff:127.0.0.1");
    assert_eq!(hca.query_gid(1, 2).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(hca.query_pkey(1, 0).unwrap(), 0xFFFF);
    assert_eq!(hca.query_port(2).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn cq_is_created_with_at_least_the_requested_entries() {
    let mut hca = device();
    for want in [1, 2, 3, 100, 1000, 32767, 262_144, MAX_CQE] {
        let (_, got) = hca.create_cq(want, None, 0, 0).unwrap();
        assert!(got >= want, "asked {want}, got {got}");
    }
    assert_eq!(
        hca.create_cq(0, None, 0, 0).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        hca.create_cq(MAX_CQE + 1, None, 0, 0).unwrap_err().errno(),
        libc::EINVAL
    );
}

#[test]
fn comp_vector_beyond_the_device_is_rejected() {
    let mut hca = device();
    let err = hca.create_cq(16, None, 1, 0).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(err.to_string().contains("comp_vector 1"), "{err}");
}

#[test]
fn remote_write_without_local_write_is_rejected_by_reg_mr() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let mut mem = vec![0u8; 64];
    for access in [AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_ATOMIC] {
        // SAFETY: registration fails, so nothing keeps the pointer.
        let err = unsafe { hca.reg_mr(pd, mem.as_mut_ptr(), 64, access) }.unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL);
        assert!(
            err.to_string().contains("requires IBV_ACCESS_LOCAL_WRITE"),
            "{err}"
        );
    }
    // SAFETY: `mem` outlives the registration (deregistered below).
    let (mr, keys) = unsafe {
        hca.reg_mr(
            pd,
            mem.as_mut_ptr(),
            64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
    }
    .unwrap();
    assert_ne!(keys.lkey, 0);
    hca.dereg_mr(mr).unwrap();
}

#[test]
fn keys_are_unpredictable_but_reproducible_from_the_seed() {
    let keys = |seed| {
        let mut cfg = HcaConfig::new("d", "127.0.0.1".parse().unwrap());
        cfg.seed = seed;
        let mut hca = Hca::new(cfg);
        let pd = hca.alloc_pd().unwrap();
        (0..4)
            .map(|_| {
                register(&mut hca, pd, 8, AccessFlags::LOCAL_WRITE)
                    .keys
                    .lkey
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(1), keys(1));
    assert_ne!(keys(1), keys(2));
    let k = keys(3);
    assert!(
        k.windows(2).all(|w| w[1] != w[0] + 1),
        "keys are not sequential: {k:x?}"
    );
}

#[test]
fn busy_objects_refuse_destruction_with_ebusy() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    assert_eq!(hca.dealloc_pd(pd).unwrap_err().errno(), libc::EBUSY);
    let ch = hca.create_comp_channel();
    let (cq, _) = hca.create_cq(4, Some(ch), 0, 7).unwrap();
    assert_eq!(
        hca.destroy_comp_channel(ch).unwrap_err().errno(),
        libc::EBUSY
    );
    let qp = rc_qp(&mut hca, pd, cq, None);
    assert_eq!(hca.destroy_cq(cq).unwrap_err().errno(), libc::EBUSY);
    hca.destroy_qp(qp).unwrap();
    hca.destroy_cq(cq).unwrap();
    hca.destroy_comp_channel(ch).unwrap();
    hca.dereg_mr(buf.mr).unwrap();
    hca.dealloc_pd(pd).unwrap();
}

#[test]
fn stale_handles_are_refused_not_confused_with_new_objects() {
    let mut hca = device();
    let (cq, _) = hca.create_cq(4, None, 0, 0).unwrap();
    hca.destroy_cq(cq).unwrap();
    let (cq2, _) = hca.create_cq(4, None, 0, 0).unwrap();
    let err = hca.poll_cq(cq, &mut [empty_wc()]).unwrap_err();
    assert!(matches!(err, VerbsError::StaleHandle { .. }));
    assert_eq!(err.errno(), libc::EINVAL);
    assert_eq!(hca.poll_cq(cq2, &mut [empty_wc()]).unwrap(), 0);
}

#[test]
fn every_transition_follows_the_ibta_table() {
    use QpState as S;
    let states = [S::Reset, S::Init, S::Rtr, S::Rts, S::Sqd, S::Sqe, S::Err];
    // The kernel's qp_state_table: ERR from any state but RESET.
    let allowed = |t: QpType, cur: QpState, next: QpState| -> bool {
        (cur, next) != (S::Reset, S::Err)
            && matches!(
                (cur, next),
                (_, S::Reset)
                    | (_, S::Err)
                    | (S::Reset, S::Init)
                    | (S::Init, S::Init)
                    | (S::Init, S::Rtr)
                    | (S::Rtr, S::Rts)
                    | (S::Rts, S::Rts)
                    | (S::Rts, S::Sqd)
                    | (S::Sqd, S::Rts)
                    | (S::Sqd, S::Sqd)
            )
            || (cur == S::Sqe && next == S::Rts && t != QpType::Rc)
    };
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for cur in states {
            for next in states {
                let rule = transition_rule(t, cur, next);
                assert_eq!(rule.is_some(), allowed(t, cur, next), "{t} {cur}->{next}");
                match rule {
                    None => assert!(matches!(
                        check_transition(t, cur, next, QpAttrMask::STATE),
                        Err(TransitionError::InvalidTransition { .. })
                    )),
                    Some(r) => {
                        let mask = QpAttrMask::STATE | r.required;
                        assert_eq!(
                            check_transition(t, cur, next, mask),
                            Ok(()),
                            "{t} {cur}->{next}"
                        );
                        assert_eq!(check_transition(t, cur, next, mask | r.optional), Ok(()));
                        for bit in 0..26 {
                            let b = QpAttrMask(1 << bit);
                            if r.required.contains(b) {
                                assert!(matches!(
                                    check_transition(t, cur, next, mask.difference(b)),
                                    Err(TransitionError::MissingAttributes { .. })
                                ));
                            } else if !r.optional.contains(b)
                                && b != QpAttrMask::STATE
                                && b.unknown_bits() == 0
                            {
                                assert!(
                                    matches!(
                                        check_transition(t, cur, next, mask | b),
                                        Err(TransitionError::UnexpectedAttributes { .. })
                                    ),
                                    "{t} {cur}->{next} must refuse {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn illegal_modify_names_the_offending_bits_and_leaves_the_qp_alone() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let qp = rc_qp(&mut hca, pd, cq, None);
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    let err = hca.modify_qp(qp, &rtr, QpAttrMask::STATE).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(
        err.to_string()
            .contains("IBV_QPS_RESET -> IBV_QPS_RTR is not a valid transition"),
        "{err}"
    );
    assert_eq!(hca.qp_state(qp).unwrap(), QpState::Reset);
    let init = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    let err = hca
        .modify_qp(qp, &init, QpAttrMask::STATE | QpAttrMask::PORT)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("requires IBV_QP_ACCESS_FLAGS|IBV_QP_PKEY_INDEX"),
        "{err}"
    );
    let bad_port = QpAttr {
        qp_state: QpState::Init,
        port_num: 2,
        ..QpAttr::default()
    };
    let err = hca
        .modify_qp(
            qp,
            &bad_port,
            QpAttrMask::STATE
                | QpAttrMask::PORT
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap_err();
    assert!(err.to_string().contains("port_num 2"), "{err}");
}

#[test]
fn query_qp_returns_what_was_set() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let (attr, init) = hca.query_qp(qp).unwrap();
    assert_eq!(attr.qp_state, QpState::Rts);
    assert_eq!(attr.path_mtu, Mtu::Mtu1024);
    assert_eq!(attr.dest_qp_num, 0x22);
    assert_eq!((attr.rq_psn, attr.sq_psn), (Psn::new(100), Psn::new(200)));
    assert_eq!(
        (
            attr.timeout,
            attr.retry_cnt,
            attr.rnr_retry,
            attr.min_rnr_timer
        ),
        (14, 7, 7, 12)
    );
    assert_eq!(attr.cap.max_send_wr, 8);
    assert_eq!(init.qp_type, QpType::Rc);
}

#[test]
fn flush_on_err_completes_every_outstanding_wr_in_order() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let buf = register(&mut hca, pd, 256, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let recvs: Vec<RecvWr> = (0..3)
        .map(|i| RecvWr {
            wr_id: 100 + i,
            sg_list: vec![sge(&buf, 0, 64)].into(),
        })
        .collect();
    hca.post_recv(qp, &recvs).unwrap();
    let mut sends: Vec<SendWr> = (0..3)
        .map(|i| {
            let mut wr = SendWr::new(i, WrOpcode::Send);
            wr.sg_list = vec![sge(&buf, 64, 32)].into();
            wr.send_flags = SendFlags::EMPTY; // unsignaled: flushed all the same
            wr
        })
        .collect();
    sends[1].send_flags = SendFlags::SIGNALED;
    // SAFETY: no inline data.
    unsafe { hca.post_send(qp, &sends) }.unwrap();
    to_err(&mut hca, qp);
    let mut wcs = [empty_wc(); 8];
    let n = hca.poll_cq(cq, &mut wcs).unwrap();
    assert_eq!(n, 6);
    let ids: Vec<u64> = wcs[..n].iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        [0, 1, 2, 100, 101, 102],
        "send queue first, each in posting order"
    );
    let qpn = hca.qp_num(qp).unwrap().value();
    for wc in &wcs[..n] {
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        assert_eq!(wc.qp_num, qpn);
        assert_eq!(wc.vendor_err, VendorErr::Flushed as u32);
        assert_eq!(
            (wc.byte_len, wc.imm_data, wc.wc_flags, wc.src_qp),
            (0, 0, WcFlags::EMPTY, 0)
        );
    }
    // A WR posted in ERR is flushed at once.
    hca.post_recv(qp, &recvs[..1]).unwrap();
    assert_eq!(hca.poll_cq(cq, &mut wcs).unwrap(), 1);
    assert_eq!(wcs[0].status, WcStatus::WrFlushErr);
}

/// Destroying a QP takes its completions not yet polled out of its CQs, as mlx4 and mlx5
/// do (rxe leaves them): a program draining a CQ it shares among connections after closing
/// one (libfabric's rxm does, at teardown) is never handed completions whose wr_id names
/// memory it freed with that connection. Another QP's completions stay, in order.
#[test]
fn destroying_a_qp_takes_its_unpolled_completions_out_of_a_shared_cq() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let buf = register(&mut hca, pd, 256, AccessFlags::LOCAL_WRITE);
    let (gone, stays) = (rc_qp(&mut hca, pd, cq, None), rc_qp(&mut hca, pd, cq, None));
    for (qp, first_id) in [(gone, 100), (stays, 200)] {
        to_rts(&mut hca, qp);
        let recvs: Vec<RecvWr> = (0..2)
            .map(|i| RecvWr {
                wr_id: first_id + i,
                sg_list: vec![sge(&buf, 0, 64)].into(),
            })
            .collect();
        hca.post_recv(qp, &recvs).unwrap();
    }
    // A disconnect: both QPs flush their receives into the shared CQ.
    to_err(&mut hca, gone);
    to_err(&mut hca, stays);
    hca.destroy_qp(gone).unwrap();
    let mut wcs = [empty_wc(); 8];
    let n = hca.poll_cq(cq, &mut wcs).unwrap();
    let ids: Vec<u64> = wcs[..n].iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [200, 201], "only the surviving QP's flushes remain");
}

#[test]
fn cq_overrun_raises_cq_err_exactly_once_and_errors_the_receiving_qp() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, size) = hca.create_cq(1, None, 0, 0).unwrap();
    assert_eq!(size, 1);
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let recvs: Vec<RecvWr> = (0..4)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: vec![sge(&buf, 0, 8)].into(),
        })
        .collect();
    hca.post_recv(qp, &recvs).unwrap();
    to_err(&mut hca, qp);
    let ev = hca.get_async_event().unwrap();
    assert_eq!(ev.event_type, EventType::CqErr);
    assert_eq!(ev.element, EventElement::Cq(cq));
    assert!(hca.get_async_event().is_err(), "CQ_ERR is raised once");
    assert_eq!(hca.counters().cqe_overrun_lost, 3);
    let mut wcs = [empty_wc(); 4];
    assert_eq!(
        hca.poll_cq(cq, &mut wcs).unwrap(),
        1,
        "the stored completion survives"
    );
    assert_eq!(wcs[0].wr_id, 0);
    let err = hca.poll_cq(cq, &mut wcs).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    hca.ack_async_event(&ev).unwrap();
}

#[test]
fn one_completion_event_per_arming() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let ch = hca.create_comp_channel();
    let (cq, _) = hca.create_cq(16, Some(ch), 0, 0xc0ffee).unwrap();
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let wr = |i| RecvWr {
        wr_id: i,
        sg_list: vec![sge(&buf, 0, 8)].into(),
    };
    hca.post_recv(qp, &[wr(1), wr(2), wr(3)]).unwrap();
    // Not armed: completions produce no event.
    assert!(matches!(
        hca.get_cq_event(ch),
        Err(VerbsError::WouldBlock { .. })
    ));
    hca.req_notify_cq(cq, false).unwrap();
    to_err(&mut hca, qp);
    assert_eq!(hca.poll_event(), Some(HcaEvent::CompletionEvent(ch)));
    assert_eq!(hca.poll_event(), None, "three completions, one event");
    assert_eq!(hca.get_cq_event(ch).unwrap(), (cq, 0xc0ffee));
    assert_eq!(hca.get_cq_event(ch).unwrap_err().errno(), libc::EAGAIN);
    // Re-arm: the next completion fires again.
    hca.req_notify_cq(cq, true).unwrap();
    hca.post_recv(qp, &[wr(4)]).unwrap(); // flushed at once: an error completion, which counts as solicited
    assert_eq!(hca.get_cq_event(ch).unwrap().0, cq);
    hca.ack_cq_events(cq, 2).unwrap();
    assert_eq!(hca.ack_cq_events(cq, 1).unwrap_err().errno(), libc::EINVAL);
}

/// ibv_modify_cq(3) with IBV_CQ_ATTR_MODERATE, "number of completions per event" and a
/// period "in micro seconds": an armed CQ's event waits for the count, or for the period
/// after its first completion, in the device's time (here virtual: the core reads no clock).
#[test]
fn cq_event_moderation_holds_the_event_for_its_count_or_its_period() {
    let mut hca = device();
    let t0 = std::time::Instant::now();
    hca.advance_clock(t0);
    let pd = hca.alloc_pd().unwrap();
    let ch = hca.create_comp_channel();
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    let recv = |i| RecvWr {
        wr_id: i,
        sg_list: vec![sge(&buf, 0, 8)].into(),
    };
    let max = hca.query_device().max_cq_moderation_period;
    assert!(max > 0 && hca.query_device().max_cq_moderation_count == u16::MAX);

    // By count: two completions of three hold the event; the third sends it.
    let (cq, _) = hca.create_cq(16, Some(ch), 0, 7).unwrap();
    assert_eq!(
        hca.modify_cq_moderation(cq, 0, max + 1)
            .unwrap_err()
            .errno(),
        libc::EINVAL,
        "a period beyond the device's"
    );
    hca.modify_cq_moderation(cq, 3, 0).unwrap();
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    hca.post_recv(qp, &[recv(1), recv(2)]).unwrap();
    hca.req_notify_cq(cq, false).unwrap();
    to_err(&mut hca, qp);
    assert_eq!(hca.poll_event(), None, "two completions of three: held");
    assert_eq!(hca.poll_timeout(), None, "no period, no timer");
    hca.post_recv(qp, &[recv(3)]).unwrap(); // flushed at once: the third completion
    assert_eq!(hca.poll_event(), Some(HcaEvent::CompletionEvent(ch)));
    assert_eq!(hca.get_cq_event(ch).unwrap(), (cq, 7));
    hca.ack_cq_events(cq, 1).unwrap();

    // Loosening the count while completions are held weighs them at once.
    hca.modify_cq_moderation(cq, 10, 0).unwrap();
    hca.req_notify_cq(cq, false).unwrap();
    hca.post_recv(qp, &[recv(4), recv(5)]).unwrap();
    assert_eq!(hca.poll_event(), None, "two of ten");
    hca.modify_cq_moderation(cq, 2, 0).unwrap();
    assert_eq!(hca.poll_event(), Some(HcaEvent::CompletionEvent(ch)));
    hca.get_cq_event(ch).unwrap();
    hca.ack_cq_events(cq, 1).unwrap();

    // Both zero: no moderation, the next completion fires.
    hca.modify_cq_moderation(cq, 0, 0).unwrap();
    hca.req_notify_cq(cq, false).unwrap();
    hca.post_recv(qp, &[recv(6)]).unwrap();
    assert_eq!(hca.poll_event(), Some(HcaEvent::CompletionEvent(ch)));
    hca.get_cq_event(ch).unwrap();
    hca.ack_cq_events(cq, 1).unwrap();

    // By period: the event goes 100 us after the first completion, not a moment before;
    // an unarmed CQ starts no timer.
    hca.modify_cq_moderation(cq, 0, 100).unwrap();
    hca.post_recv(qp, &[recv(7)]).unwrap();
    assert_eq!(hca.poll_timeout(), None, "not armed: nothing to time");
    hca.req_notify_cq(cq, false).unwrap();
    let t1 = t0 + std::time::Duration::from_millis(5);
    hca.advance_clock(t1);
    hca.post_recv(qp, &[recv(8), recv(9)]).unwrap();
    let due = t1 + std::time::Duration::from_micros(100);
    assert_eq!(hca.poll_timeout(), Some(due));
    hca.handle_timeout(due - std::time::Duration::from_micros(1));
    assert_eq!(hca.poll_event(), None, "1 us before the period ends");
    hca.handle_timeout(due);
    assert_eq!(hca.poll_event(), Some(HcaEvent::CompletionEvent(ch)));
    assert_eq!(hca.poll_timeout(), None);
    hca.get_cq_event(ch).unwrap();
    hca.ack_cq_events(cq, 1).unwrap();
    let mut wcs = [empty_wc(); 16];
    assert_eq!(
        hca.poll_cq(cq, &mut wcs).unwrap(),
        9,
        "every completion is there"
    );

    // A CQ destroyed while its event is held takes its timer with it.
    hca.req_notify_cq(cq, false).unwrap();
    hca.post_recv(qp, &[recv(10)]).unwrap();
    assert!(hca.poll_timeout().is_some());
    hca.destroy_qp(qp).unwrap();
    hca.destroy_cq(cq).unwrap();
    assert_eq!(hca.poll_timeout(), None);
}

#[test]
fn unacknowledged_cq_events_block_destroy() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let ch = hca.create_comp_channel();
    let (cq, _) = hca.create_cq(16, Some(ch), 0, 0).unwrap();
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    hca.post_recv(
        qp,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![sge(&buf, 0, 8)].into(),
        }],
    )
    .unwrap();
    hca.req_notify_cq(cq, false).unwrap();
    to_err(&mut hca, qp);
    hca.get_cq_event(ch).unwrap();
    hca.destroy_qp(qp).unwrap();
    let err = hca.destroy_cq(cq).unwrap_err();
    assert_eq!(err.errno(), libc::EBUSY);
    assert!(err.to_string().contains("not acknowledged"), "{err}");
    hca.ack_cq_events(cq, 1).unwrap();
    hca.destroy_cq(cq).unwrap();
}

#[test]
fn unacknowledged_async_events_block_destroying_their_object() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    hca.force_qp_error(qp, EventType::QpFatal).unwrap();
    assert_eq!(hca.qp_state(qp).unwrap(), QpState::Err);
    let ev = hca.get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::QpFatal, EventElement::Qp(qp))
    );
    assert_eq!(hca.destroy_qp(qp).unwrap_err().errno(), libc::EBUSY);
    hca.ack_async_event(&ev).unwrap();
    assert_eq!(
        hca.ack_async_event(&ev).unwrap_err().errno(),
        libc::EINVAL,
        "one ack per event"
    );
    hca.destroy_qp(qp).unwrap();
    assert_eq!(
        hca.force_qp_error(qp, EventType::QpFatal)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
}

#[test]
fn post_send_reports_the_index_of_the_first_bad_work_request() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let buf = register(&mut hca, pd, 256, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    let mut good = SendWr::new(1, WrOpcode::Send);
    good.sg_list = vec![sge(&buf, 0, 16)].into();
    // SAFETY: no inline data.
    let err = unsafe { hca.post_send(qp, std::slice::from_ref(&good)) }.unwrap_err();
    assert_eq!(err.index, 0);
    assert!(matches!(
        err.error,
        VerbsError::BadQpState {
            state: QpState::Reset,
            ..
        }
    ));
    to_rts(&mut hca, qp);
    // A bad lkey or a range outside its region is not among these: it posts, and completes
    // with IBV_WC_LOC_PROT_ERR when the data moves (ibv_poll_cq(3); the C program
    // man_local_protection.c checks it).
    let mut too_many_sges = good.clone();
    too_many_sges.sg_list = vec![sge(&buf, 0, 1); 3].into();
    let mut too_much_inline = good.clone();
    too_much_inline.send_flags = SendFlags::INLINE;
    too_much_inline.sg_list = vec![sge(&buf, 0, 65)].into();
    let mut atomic_wrong_len = SendWr::new(9, WrOpcode::AtomicFetchAndAdd);
    atomic_wrong_len.sg_list = vec![sge(&buf, 0, 4)].into();
    for (bad, what) in [
        (too_many_sges, "exceeds max_send_sge"),
        (too_much_inline, "exceed max_inline_data"),
        (atomic_wrong_len, "exactly one 8-byte"),
    ] {
        // SAFETY: inline SGEs point into `buf`.
        let err = unsafe { hca.post_send(qp, &[good.clone(), bad, good.clone()]) }.unwrap_err();
        assert_eq!(err.index, 1, "{what}");
        assert_eq!(err.error.errno(), libc::EINVAL);
        assert!(err.to_string().contains(what), "{err}");
    }
    // Fill the send queue: the 9th WR is refused with ENOMEM.
    let wrs = vec![good.clone(); 9];
    // SAFETY: no inline data.
    let _ = unsafe { hca.post_send(qp, &wrs[..2]) };
    let queued = 3 + 2; // one good WR per refused batch above, plus these two
    // SAFETY: no inline data.
    let err = unsafe { hca.post_send(qp, &wrs) }.unwrap_err();
    assert_eq!(err.index, 8 - queued);
    assert_eq!(err.error.errno(), libc::ENOMEM);
}

/// ibv_wr_post(3): a failing `ibv_wr_complete` aborts the entire posting — the good WR
/// before the bad one is not queued, unlike with `ibv_post_send`.
#[test]
fn all_or_nothing_post_queues_nothing_when_one_wr_fails() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let buf = register(&mut hca, pd, 256, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let mut good = SendWr::new(1, WrOpcode::Send);
    good.sg_list = vec![sge(&buf, 0, 16)].into();
    let mut bad = good.clone();
    bad.sg_list = vec![sge(&buf, 0, 1); 3].into();
    // SAFETY: no inline data.
    let err = unsafe { hca.post_send_all_or_nothing(qp, &[good.clone(), bad]) }.unwrap_err();
    assert_eq!((err.index, err.error.errno()), (1, libc::EINVAL));
    // Only the max_send_wr good WRs fit now if nothing of the failed posting was queued.
    let wrs = vec![good; 8];
    // SAFETY: no inline data.
    unsafe { hca.post_send_all_or_nothing(qp, &wrs) }.expect("the queue is empty");
}

#[test]
fn ud_qp_refuses_rdma_and_needs_an_address_handle() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let (qp, _, _) = hca
        .create_qp(
            pd,
            QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap::new(4, 4),
                qp_type: QpType::Ud,
                sq_sig_all: true,
                qp_context: 0,
            },
        )
        .unwrap();
    QpBringup::new(QpType::Ud)
        .to_rts(&mut hca, qp, &QpPeer::default(), Psn::new(0))
        .unwrap();
    // SAFETY: no inline data.
    let err = unsafe { hca.post_send(qp, &[SendWr::new(1, WrOpcode::RdmaWrite)]) }.unwrap_err();
    assert!(
        err.to_string()
            .contains("IBV_WR_RDMA_WRITE is not valid on a IBV_QPT_UD QP"),
        "{err}"
    );
    // SAFETY: no inline data.
    let err = unsafe { hca.post_send(qp, &[SendWr::new(1, WrOpcode::Send)]) }.unwrap_err();
    assert!(err.to_string().contains("needs an address handle"), "{err}");
    let no_grh = AhAttr {
        is_global: false,
        ..AhAttr::new(Gid::from_ip("127.0.0.2".parse().unwrap()), 0)
    };
    assert!(
        hca.create_ah(pd, no_grh)
            .unwrap_err()
            .to_string()
            .contains("need a GRH")
    );
}

#[test]
fn srq_attached_qp_refuses_post_recv_and_raises_last_wqe_reached_in_err() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    let (srq, attr) = hca
        .create_srq(
            pd,
            SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
            0,
        )
        .unwrap();
    assert_eq!(attr.max_wr, 4);
    let qp = rc_qp(&mut hca, pd, cq, Some(srq));
    to_rts(&mut hca, qp);
    let wr = RecvWr {
        wr_id: 1,
        sg_list: vec![sge(&buf, 0, 8)].into(),
    };
    let err = hca.post_recv(qp, std::slice::from_ref(&wr)).unwrap_err();
    assert_eq!(err.error.errno(), libc::EINVAL);
    assert!(err.to_string().contains("post_srq_recv"), "{err}");
    let err = hca.post_srq_recv(srq, &vec![wr.clone(); 5]).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (4, libc::ENOMEM));
    assert_eq!(hca.destroy_srq(srq).unwrap_err().errno(), libc::EBUSY);
    to_err(&mut hca, qp);
    let ev = hca.get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::QpLastWqeReached, EventElement::Qp(qp))
    );
    assert_eq!(
        hca.srq_len(srq).unwrap(),
        4,
        "the shared queue is not flushed"
    );
    hca.ack_async_event(&ev).unwrap();
    let mut wcs = [empty_wc(); 4];
    assert_eq!(hca.poll_cq(cq, &mut wcs).unwrap(), 0);
    // A WR posted to the QP in ERR is flushed; the last WQE was reached once, not again.
    let send = SendWr::new(2, WrOpcode::Send);
    // SAFETY: no SGEs.
    unsafe { hca.post_send(qp, std::slice::from_ref(&send)) }.unwrap();
    assert_eq!(hca.poll_cq(cq, &mut wcs).unwrap(), 1);
    assert_eq!(wcs[0].status, WcStatus::WrFlushErr);
    assert!(
        hca.get_async_event().is_err(),
        "one LAST_WQE_REACHED per entry into ERR"
    );
}

/// ibv_get_async_event(3): destroying an object drops its queued events, and the driver is
/// told when that empties the queue (its async fd must not stay readable).
#[test]
fn destroying_a_qp_takes_its_unread_events_and_says_the_queue_emptied() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let (srq, _) = hca.create_srq(pd, attr, 0).unwrap();
    let qp = rc_qp(&mut hca, pd, cq, Some(srq));
    to_rts(&mut hca, qp);
    to_err(&mut hca, qp);
    while hca.poll_event().is_some() {}
    assert!(hca.async_event_pending());
    hca.destroy_qp(qp).unwrap();
    assert!(!hca.async_event_pending());
    assert_eq!(hca.poll_event(), Some(HcaEvent::AsyncQueueEmptied));
}

#[test]
fn srq_limit_must_fit_max_wr() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (srq, _) = hca
        .create_srq(
            pd,
            SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
            0,
        )
        .unwrap();
    let err = hca
        .modify_srq(
            srq,
            SrqAttr {
                srq_limit: 5,
                ..SrqAttr::default()
            },
            SrqAttrMask {
                limit: true,
                max_wr: false,
            },
        )
        .unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    hca.modify_srq(
        srq,
        SrqAttr {
            srq_limit: 2,
            ..SrqAttr::default()
        },
        SrqAttrMask {
            limit: true,
            max_wr: false,
        },
    )
    .unwrap();
    assert_eq!(hca.query_srq(srq).unwrap().srq_limit, 2);
}

#[test]
fn entering_sqd_with_notification_raises_sq_drained() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let sqd = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    hca.modify_qp(
        qp,
        &sqd,
        QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY,
    )
    .unwrap();
    let ev = hca.get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::SqDrained, EventElement::Qp(qp))
    );
    hca.ack_async_event(&ev).unwrap();
    let back = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    hca.modify_qp(qp, &back, QpAttrMask::STATE).unwrap();
    assert_eq!(hca.qp_state(qp).unwrap(), QpState::Rts);
}

#[test]
fn port_down_and_up_raise_port_events() {
    let mut hca = device();
    hca.set_port_active(false);
    assert_eq!(hca.query_port(1).unwrap().state, PortState::Down);
    hca.set_port_active(true);
    let a = hca.get_async_event().unwrap();
    let b = hca.get_async_event().unwrap();
    assert_eq!(
        (a.event_type, a.element),
        (EventType::PortErr, EventElement::Port(1))
    );
    assert_eq!(
        (b.event_type, b.element),
        (EventType::PortActive, EventElement::Port(1))
    );
    hca.ack_async_event(&a).unwrap();
    hca.ack_async_event(&b).unwrap();
}

#[test]
fn resize_cq_cannot_drop_held_completions() {
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(8, None, 0, 0).unwrap();
    let buf = register(&mut hca, pd, 64, AccessFlags::LOCAL_WRITE);
    let qp = rc_qp(&mut hca, pd, cq, None);
    to_rts(&mut hca, qp);
    let wr = RecvWr {
        wr_id: 1,
        sg_list: vec![sge(&buf, 0, 8)].into(),
    };
    hca.post_recv(qp, &[wr.clone(), wr.clone(), wr]).unwrap();
    to_err(&mut hca, qp);
    assert_eq!(hca.cq_len(cq).unwrap(), 3);
    assert_eq!(hca.resize_cq(cq, 2).unwrap_err().errno(), libc::EINVAL);
    let grown = hca.resize_cq(cq, 100).unwrap();
    assert!(grown >= 100);
    assert_eq!(hca.cq_capacity(cq).unwrap(), grown);
}

/// `ibv_query_rt_values_ex`'s raw clock reads the time since the device's epoch and never
/// goes back: a caller that read the time before another took the device comes late.
#[test]
fn the_device_clock_reads_time_since_its_epoch_and_never_goes_back() {
    use std::time::{Duration, Instant};
    let epoch = Instant::now();
    let mut cfg = HcaConfig::new("softroce0", "127.0.0.1".parse().unwrap());
    cfg.clock_epoch = Some(epoch);
    let mut hca = Hca::new(cfg);
    assert_eq!(hca.clock(), 0, "no time given yet");
    hca.advance_clock(epoch + Duration::from_micros(5));
    assert_eq!(hca.clock(), 5_000);
    hca.advance_clock(epoch + Duration::from_micros(3));
    assert_eq!(hca.clock(), 5_000, "an earlier time leaves the clock be");
    hca.advance_clock(epoch + Duration::from_millis(2));
    assert_eq!(hca.clock(), 2_000_000);

    // Without an epoch the clock starts at the first time given.
    let mut hca = device();
    hca.advance_clock(epoch);
    assert_eq!(hca.clock(), 0);
    hca.advance_clock(epoch + Duration::from_nanos(700));
    assert_eq!(hca.clock(), 700);
}

#[test]
fn max_ah_address_handles_exist_and_one_more_is_refused() {
    // ibv_query_device(3)'s max_ah is the most AHs the device has (rxe's AH pool is capped
    // at it): all of them can be made, the next is ENOMEM, and one destroyed makes room.
    let mut hca = device();
    let pd = hca.alloc_pd().unwrap();
    let max = hca.query_device().max_ah as usize;
    let attr = AhAttr::new(Gid::from_ip("127.0.0.2".parse().unwrap()), 0);
    let ahs: Vec<_> = (0..max).map(|_| hca.create_ah(pd, attr).unwrap()).collect();
    let err = hca.create_ah(pd, attr).unwrap_err();
    assert_eq!(err.errno(), libc::ENOMEM, "{err}");
    assert!(err.to_string().contains("max_ah"), "{err}");
    hca.destroy_ah(ahs[0]).unwrap();
    hca.create_ah(pd, attr).unwrap();
}

#[test]
fn a_process_sharing_the_device_advertises_the_qps_its_slot_can_number() {
    // A process on a shared device numbers its QPs from its slot's 2^18 QPNs: max_qp says
    // so (it said a million, and QP 262 128 failed).
    let mut config = HcaConfig::new("softroce0", "127.0.0.1".parse().unwrap());
    config.qpn_slot = Some(3);
    let hca = Hca::new(config);
    let slot = qpn_slot_range(3);
    assert_eq!(hca.query_device().max_qp, slot.end - slot.start);
    assert_eq!(device().query_device().max_qp, 0x10_0000 - 0x11);
}
