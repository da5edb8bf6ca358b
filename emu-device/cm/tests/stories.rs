//! The CM state machine told as stories: two endpoints, a wire that loses or repeats
//! chosen messages, and virtual time.

mod harness;

use std::time::Duration;

use harness::*;
use softroce_emu_cm::{
    AcceptParams, CmEvent, CmState, ConnectParams, Ece, PathParams, REJ_CONSUMER_DEFINED,
    REJ_INVALID_SERVICE_ID, REJ_STALE_CONN, REJ_VENDOR_OPTION_NOT_SUPPORTED, SIDR_SUCCESS,
    SIDR_UNSUPPORTED, SidrParams, SidrReply, cm_timeout,
};
use softroce_wire::cm::CmAttr;
use softroce_wire::mad::{MAD_LEN, Mad};
use softroce_wire::{CmMessage, Psn, Qpn};

/// How long A waits for an answer to its REQ or DREQ: two packet life times plus the
/// peer's response time (`2 × 256 ms + 4096 ms`).
const A_WAIT: Duration = Duration::from_millis(4608);
/// How long B waits for the RTU: the response time A advertised.
const B_WAIT: Duration = Duration::from_millis(4096);
/// Time-wait after a RoCE connection (ACK timeout exponent 17).
const TIME_WAIT: Duration = Duration::from_millis(512);

#[test]
fn connect_establish_disconnect_and_leave_time_wait() {
    let mut pair = Pair::default();
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);

    // B saw the request with A's QP and PSN, in B's terms.
    let (_, req) = pair.b.find(is_request).unwrap();
    let CmEvent::ConnectRequest {
        id: b_id,
        params,
        private_data,
    } = req
    else {
        unreachable!()
    };
    assert_eq!(params.remote_qpn, Qpn::new(A_QPN).unwrap());
    assert_eq!(params.starting_psn, Psn::new(0x00a0_a0a0));
    assert_eq!((params.responder_resources, params.initiator_depth), (4, 2));
    assert_eq!(params.remote_gid, pair.a.gid);
    assert_eq!(&private_data[..5], b"hello");
    // A saw the reply with B's QP and PSN.
    let (_, rep) = pair
        .a
        .find(|e| matches!(e, CmEvent::ConnectResponse { .. }))
        .unwrap();
    let CmEvent::ConnectResponse {
        params,
        private_data,
        ..
    } = rep
    else {
        unreachable!()
    };
    assert_eq!(params.remote_qpn, Qpn::new(B_QPN).unwrap());
    assert_eq!(params.starting_psn, Psn::new(0x00b0_b0b0));
    assert_eq!((params.responder_resources, params.initiator_depth), (2, 4));
    assert_eq!(&private_data[..7], b"welcome");
    assert_eq!(pair.a.cm.state(a_id), Some(CmState::Established));
    assert_eq!(pair.b.cm.state(b_id), Some(CmState::Established));

    // The REP, RTU answer the REQ's transaction; comm IDs pair up.
    let req = pair.a.sent[0].1;
    let rep = pair.b.sent[0].1;
    let rtu = pair.a.sent[1].1;
    assert_eq!(rep.header.tid, req.header.tid);
    assert_eq!(rtu.header.tid, req.header.tid);
    assert_eq!(rep.message.comm_ids(), Some((b_id.0, a_id.0)));
    assert_eq!(rtu.message.comm_ids(), Some((a_id.0, b_id.0)));

    pair.a.cm.disconnect(pair.now, a_id, b"bye").unwrap();
    let disconnect_at = pair.now;
    pair.run();

    for node in [&pair.a, &pair.b] {
        assert_eq!(node.count(is_disconnected), 1);
        assert_eq!(node.count(is_timewait_exit), 1);
        let (t, _) = node.find(is_timewait_exit).unwrap();
        assert!(t - disconnect_at >= TIME_WAIT, "left time-wait early");
    }
    let kinds = |n: &Node| {
        n.sent
            .iter()
            .map(|(_, m)| m.message.attr())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&pair.a), [CmAttr::Req, CmAttr::Rtu, CmAttr::Dreq]);
    assert_eq!(kinds(&pair.b), [CmAttr::Rep, CmAttr::Drep]);
    assert!(pair.is_clean());
    assert_eq!(pair.a.cm.state(a_id), None);
}

#[test]
fn a_lost_req_is_sent_again_after_the_response_timeout() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Req, Some(0), Fate::Drop);
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);

    assert_eq!(pair.a.sent_count(CmAttr::Req), 2);
    let (t, _) = pair.b.find(is_request).unwrap();
    assert_eq!(pair.elapsed(t), A_WAIT + LATENCY);
    assert_eq!(pair.a.cm.counters().retransmitted, 1);
    assert_eq!(pair.a.count(is_established), 1);
}

#[test]
fn a_lost_rep_is_retried_by_the_passive_side() {
    let mut pair = Pair::default();
    pair.rule(Side::B, CmAttr::Rep, Some(0), Fate::Drop);
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);

    // B's REP timer (4096 ms) fires before A's REQ timer (4608 ms).
    assert_eq!(pair.b.sent_count(CmAttr::Rep), 2);
    assert_eq!(pair.a.sent_count(CmAttr::Req), 1);
    let (t, _) = pair.a.find(is_established).unwrap();
    assert_eq!(pair.elapsed(t), LATENCY + B_WAIT + LATENCY);
}

#[test]
fn when_reps_keep_getting_lost_the_retried_req_brings_the_rep_again() {
    let mut pair = Pair::default();
    pair.rule(Side::B, CmAttr::Rep, Some(0), Fate::Drop);
    pair.rule(Side::B, CmAttr::Rep, Some(1), Fate::Drop);
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);

    // REQ retry at 4608 ms meets B in REP_SENT: B answers the duplicate with its REP.
    assert_eq!(pair.a.sent_count(CmAttr::Req), 2);
    assert_eq!(pair.b.sent_count(CmAttr::Rep), 3);
    assert_eq!(pair.b.cm.counters().duplicates, 1);
    assert_eq!(pair.b.count(is_request), 1);
    let (t, _) = pair.a.find(is_established).unwrap();
    assert_eq!(pair.elapsed(t), A_WAIT + 2 * LATENCY);
}

#[test]
fn a_lost_rtu_is_covered_by_data_arriving_first() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Rtu, Some(0), Fate::Drop);
    pair.start_connect();
    pair.run_until(|p| p.a.count(is_established) == 1);
    pair.run_to(pair.now + 10 * LATENCY);

    let b_id = pair.b.find(is_request).unwrap().1.id();
    assert_eq!(pair.b.cm.state(b_id), Some(CmState::RepSent));
    // A's first SEND reaches B's QP: the application reports COMM_EST.
    pair.b.cm.establish(b_id).unwrap();
    assert!(
        pair.b.cm.establish(b_id).is_err(),
        "a second establish is refused"
    );
    pair.run_to(pair.now + B_WAIT * 3);

    assert_eq!(pair.b.count(is_established), 1);
    assert_eq!(
        pair.b.sent_count(CmAttr::Rep),
        1,
        "the REP stopped being retried"
    );
    assert_eq!(pair.b.cm.poll_timeout(), None);
}

#[test]
fn a_lost_rtu_is_sent_again_when_the_rep_is_retried() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Rtu, Some(0), Fate::Drop);
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);

    assert_eq!(pair.b.sent_count(CmAttr::Rep), 2);
    assert_eq!(pair.a.sent_count(CmAttr::Rtu), 2);
    assert_eq!(pair.a.cm.counters().duplicates, 1);
    assert_eq!(pair.a.count(is_established), 1);
}

#[test]
fn a_lost_dreq_is_retried() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Dreq, Some(0), Fate::Drop);
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);
    pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
    pair.run();

    assert_eq!(pair.a.sent_count(CmAttr::Dreq), 2);
    assert_eq!(pair.b.count(is_disconnected), 1);
    // The retry was answered: not a timed-out disconnect.
    assert_eq!(
        pair.a.find(is_disconnected).map(|(_, e)| e),
        Some(CmEvent::Disconnected {
            id: a_id,
            timed_out: false
        })
    );
    assert_eq!(pair.a.count(is_timewait_exit), 1);
    assert!(pair.is_clean());
}

#[test]
fn a_dreq_nobody_answers_ends_in_a_timed_out_disconnect() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Dreq, None, Fate::Drop);
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);
    pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
    pair.run();

    // Every retry went out and was lost: A reports the disconnect as timed out (rdma_cm's
    // DISCONNECTED with status -ETIMEDOUT) and still passes through time-wait.
    assert!(pair.a.sent_count(CmAttr::Dreq) > 2);
    assert_eq!(
        pair.a.find(is_disconnected).map(|(_, e)| e),
        Some(CmEvent::Disconnected {
            id: a_id,
            timed_out: true
        })
    );
    assert_eq!(pair.a.count(is_timewait_exit), 1);
    // B heard nothing: its connection is still up.
    assert_eq!(pair.b.count(is_disconnected), 0);
}

#[test]
fn a_lost_drep_is_answered_even_after_the_peer_forgot_the_connection() {
    let mut pair = Pair::default();
    pair.rule(Side::B, CmAttr::Drep, Some(0), Fate::Drop);
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);
    pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
    pair.run();

    // B left time-wait (512 ms) long before A retried its DREQ (4608 ms); B still answers
    // (`cm_issue_drep`).
    assert_eq!(pair.a.sent_count(CmAttr::Dreq), 2);
    assert_eq!(pair.b.sent_count(CmAttr::Drep), 2);
    assert_eq!(pair.a.count(is_disconnected), 1);
    assert!(pair.is_clean());
}

#[test]
fn a_duplicate_dreq_in_time_wait_gets_the_drep_again() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Dreq, Some(0), Fate::Duplicate);
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);
    pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
    pair.run();

    assert_eq!(pair.b.sent_count(CmAttr::Drep), 2);
    assert_eq!(pair.b.cm.counters().duplicates, 1);
    assert_eq!(pair.b.count(is_disconnected), 1);
    assert!(pair.is_clean());
}

#[test]
fn a_duplicate_req_makes_no_second_connection() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Req, Some(0), Fate::Duplicate);
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1 && p.a.count(is_established) == 1);
    pair.run_to(pair.now + A_WAIT * 2);

    assert_eq!(pair.b.count(is_request), 1);
    assert_eq!(pair.b.cm.connection_count(), 1);
    assert_eq!(pair.a.cm.connection_count(), 1);
    assert!(pair.b.cm.counters().duplicates >= 1);
    assert_eq!(pair.a.count(is_established), 1);
    assert_eq!(pair.b.count(is_established), 1);
}

#[test]
fn a_consumer_reject_reaches_the_requester_with_its_private_data() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_request) == 1);
    let b_id = pair.b.find(is_request).unwrap().1.id();
    pair.b.cm.reject(pair.now, b_id, b"go away").unwrap();
    pair.run();

    let (_, rejected) = pair
        .a
        .find(|e| matches!(e, CmEvent::Rejected { .. }))
        .unwrap();
    let CmEvent::Rejected {
        id,
        reason,
        private_data,
        ..
    } = rejected
    else {
        unreachable!()
    };
    assert_eq!((id, reason), (a_id, REJ_CONSUMER_DEFINED));
    assert_eq!(&private_data[..7], b"go away");
    assert_eq!(pair.a.sent_count(CmAttr::Req), 1);
    assert!(
        pair.is_clean(),
        "a reject before the REP leaves no time-wait"
    );
}

/// rdma_set_local_ece(3) / rdma_get_remote_ece(3): the requester's ECE offer reaches the
/// responder with its REQ, and the responder's answer comes back with the REP.
#[test]
fn ece_options_ride_the_req_and_the_rep_answers_them() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    pair.b.cm.listen(SERVICE).unwrap();
    let offer = Ece {
        vendor_id: 0x15_b3,
        options: 0xa5a5_0001,
    };
    let params = ConnectParams {
        ece: offer,
        path: None,
        ..pair.connect_params()
    };
    pair.a.cm.connect(pair.now, params).unwrap();
    pair.run_until(|p| p.b.count(is_request) == 1);
    let Some((_, CmEvent::ConnectRequest { id, params, .. })) = pair.b.find(is_request) else {
        unreachable!()
    };
    assert_eq!(params.ece, offer, "the REQ carries the offer");

    let answer = Ece {
        vendor_id: offer.vendor_id,
        options: 0x0000_0001,
    };
    let accept = AcceptParams {
        ece: answer,
        ..pair.b.accept_params()
    };
    pair.b.cm.accept(pair.now, id, accept).unwrap();
    pair.run();
    let (_, response) = pair
        .a
        .find(|e| matches!(e, CmEvent::ConnectResponse { .. }))
        .expect("a REP");
    let CmEvent::ConnectResponse { params, .. } = response else {
        unreachable!()
    };
    assert_eq!(params.ece, answer, "the REP carries the answer");
    assert!(pair.a.find(is_established).is_some());
}

/// A request dropped unanswered (a listener's full backlog) is no refusal: the requester
/// sends its REQ again after its response timeout, and that one is a new request.
#[test]
fn a_dropped_request_comes_back_with_the_requesters_retry() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_request) == 1);
    let first = pair.b.find(is_request).unwrap().1.id();
    pair.b.cm.drop_request(first).unwrap();
    assert_eq!(pair.b.cm.counters().dropped_requests, 1);
    assert!(
        pair.b.cm.reject(pair.now, first, &[]).is_err(),
        "a dropped request is gone"
    );
    pair.b.react.accept = true;
    pair.run_until(|p| p.a.find(is_established).is_some());

    assert_eq!(
        pair.b.count(is_request),
        2,
        "the retried REQ is a new request"
    );
    let (t, _) = pair
        .b
        .events
        .iter()
        .filter(|(_, e)| is_request(e))
        .nth(1)
        .cloned()
        .unwrap();
    assert_eq!(
        pair.elapsed(t),
        A_WAIT + LATENCY,
        "it came with the REQ's retry"
    );
    assert_eq!(pair.a.sent_count(CmAttr::Req), 2);
    assert_eq!(pair.b.sent_count(CmAttr::Rej), 0, "nothing was rejected");
    assert!(
        pair.a
            .find(|e| matches!(e, CmEvent::Established { id } if *id == a_id))
            .is_some()
    );
}

/// A connection without ECE says so: vendor 0, no options, both ways.
#[test]
fn without_ece_the_req_and_rep_carry_none() {
    let mut pair = Pair::default();
    pair.start_connect();
    pair.run();
    let Some((_, CmEvent::ConnectRequest { params, .. })) = pair.b.find(is_request) else {
        panic!("no request")
    };
    assert_eq!(params.ece, Ece::default());
    let Some((_, CmEvent::ConnectResponse { params, .. })) = pair
        .a
        .find(|e| matches!(e, CmEvent::ConnectResponse { .. }))
    else {
        panic!("no response")
    };
    assert_eq!(params.ece, Ece::default());
}

/// rdma_reject_ece: the requester learns the refusal was about its ECE options (IBTA reason
/// 35, "vendor option not supported").
#[test]
fn a_request_refused_for_its_ece_options_is_rejected_with_reason_35() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_request) == 1);
    let b_id = pair.b.find(is_request).unwrap().1.id();
    pair.b.cm.reject_ece(pair.now, b_id, b"no ece").unwrap();
    pair.run();
    let rejected = pair
        .a
        .find(|e| matches!(e, CmEvent::Rejected { .. }))
        .map(|(_, e)| e);
    assert!(
        matches!(
            rejected,
            Some(CmEvent::Rejected { id, reason: REJ_VENDOR_OPTION_NOT_SUPPORTED, .. }) if id == a_id
        ),
        "{rejected:?}"
    );
    assert_eq!(REJ_VENDOR_OPTION_NOT_SUPPORTED, 35);
    assert!(pair.is_clean());
}

#[test]
fn a_request_to_a_service_nobody_listens_on_is_rejected_within_a_round_trip() {
    let mut pair = Pair::default();
    let params = pair.connect_params();
    let a_id = pair.a.cm.connect(pair.now, params).unwrap();
    pair.run();

    let (t, rejected) = pair
        .a
        .find(|e| matches!(e, CmEvent::Rejected { .. }))
        .unwrap();
    assert!(matches!(
        rejected,
        CmEvent::Rejected { id, reason: REJ_INVALID_SERVICE_ID, .. } if id == a_id
    ));
    assert_eq!(pair.elapsed(t), 2 * LATENCY);
    assert_eq!(pair.a.sent_count(CmAttr::Req), 1);
    assert_eq!(pair.b.cm.counters().rejected_no_listener, 1);
    assert!(pair.is_clean());
}

#[test]
fn a_requester_gives_up_after_max_cm_retries() {
    let mut pair = Pair::default();
    pair.rule(Side::A, CmAttr::Req, None, Fate::Drop);
    let a_id = pair.start_connect();
    pair.run();

    assert_eq!(pair.a.sent_count(CmAttr::Req), 16, "the REQ and 15 retries");
    let (t, unreachable) = pair
        .a
        .find(|e| matches!(e, CmEvent::Unreachable { .. }))
        .unwrap();
    assert_eq!(unreachable.id(), a_id);
    assert_eq!(pair.elapsed(t), A_WAIT * 16);
    assert!(pair.is_clean());
}

#[test]
fn an_mra_makes_the_requester_wait_longer() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_request) == 1);
    let b_id = pair.b.find(is_request).unwrap().1.id();
    // 4.096 µs × 2^24 ≈ 65 s more.
    pair.b.cm.delay_response(b_id, 24, &[]).unwrap();
    pair.run_to(pair.now + Duration::from_secs(30));

    assert_eq!(pair.a.cm.state(a_id), Some(CmState::MraReqRcvd));
    assert_eq!(
        pair.a.sent_count(CmAttr::Req),
        1,
        "no REQ retry while the MRA holds"
    );
    let params = pair.b.accept_params();
    pair.b.cm.accept(pair.now, b_id, params).unwrap();
    pair.run_until(|p| p.b.count(is_established) == 1);
    assert_eq!(pair.a.count(is_established), 1);
    assert_eq!(cm_timeout(24), Duration::from_millis(65536));
}

#[test]
fn a_restarted_peer_reusing_its_qp_gets_a_stale_connection_reject() {
    let mut pair = Pair::default();
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);

    // A reboots: same GID, CA GUID and QPN, a fresh CM that remembers nothing.
    pair.a = Node::new(Side::A, 99);
    let a2_id = pair.start_connect();
    pair.run();

    let rejected = pair
        .a
        .find(|e| matches!(e, CmEvent::Rejected { .. }))
        .unwrap()
        .1;
    assert!(matches!(
        rejected,
        CmEvent::Rejected { id, reason: REJ_STALE_CONN, .. } if id == a2_id
    ));
    // B tore the old connection down: DREQ, answered by the new A's CM, then time-wait.
    assert_eq!(pair.b.sent_count(CmAttr::Dreq), 1);
    assert_eq!(pair.b.count(is_disconnected), 1);
    assert_eq!(pair.b.count(is_timewait_exit), 1);
    assert!(pair.is_clean());

    // Now the QP is free again.
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 2);
    assert_eq!(pair.a.count(is_established), 1);
}

#[test]
fn both_sides_disconnecting_at_once_end_in_time_wait() {
    let mut pair = Pair::default();
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);
    let b_id = pair.b.find(is_request).unwrap().1.id();
    pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
    pair.b.cm.disconnect(pair.now, b_id, &[]).unwrap();
    pair.run();

    for node in [&pair.a, &pair.b] {
        assert_eq!(node.count(is_disconnected), 1);
        assert_eq!(node.count(is_timewait_exit), 1);
        assert_eq!(node.sent_count(CmAttr::Dreq), 1);
    }
    assert!(pair.is_clean());
}

#[test]
fn destroying_a_pending_request_rejects_it_at_the_peer() {
    let mut pair = Pair::default();
    pair.rule(Side::B, CmAttr::Rep, None, Fate::Drop);
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_request) == 1);
    pair.run_to(pair.now + LATENCY);
    pair.a.cm.destroy(a_id).unwrap();
    pair.run();

    // The REJ (reason IB_CM_REJ_TIMEOUT, 4 in ib_cm.h; our CA GUID in the ARI) finds B's
    // half-open connection.
    assert!(
        pair.b
            .find(|e| matches!(e, CmEvent::Rejected { reason: 4, .. }))
            .is_some(),
        "B saw {:?}",
        pair.b.event_list()
    );
    assert!(
        pair.a
            .event_list()
            .iter()
            .all(|e| !matches!(e, CmEvent::Unreachable { .. }))
    );
    assert!(pair.is_clean());
}

#[test]
fn a_thousand_connections_come_and_go_without_a_trace() {
    let mut pair = Pair::default();
    for cycle in 0..1000 {
        let a_id = pair.start_connect();
        pair.run_until(|p| p.b.count(is_established) == cycle + 1);
        pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
        pair.run();
        assert!(pair.is_clean(), "cycle {cycle} left state behind");
    }
    assert_eq!(pair.a.count(is_established), 1000);
    assert_eq!(pair.b.count(is_timewait_exit), 1000);
    assert!(pair.b.cm.is_listening(SERVICE));
    let counters = pair.a.cm.counters();
    assert_eq!(counters.retransmitted + counters.duplicates, 0);
}

#[test]
fn sidr_resolves_a_service_to_a_ud_qp() {
    let mut pair = Pair::default();
    pair.b.cm.listen(SERVICE).unwrap();
    pair.rule(Side::A, CmAttr::SidrReq, Some(0), Fate::Drop);
    let params = SidrParams {
        remote_gid: pair.b.gid,
        service_id: SERVICE,
        private_data: b"who serves?".to_vec(),
    };
    let a_id = pair.a.cm.sidr_resolve(pair.now, params).unwrap();
    pair.run_until(|p| p.b.count(|e| matches!(e, CmEvent::SidrRequest { .. })) == 1);
    let b_id = pair.b.events[0].1.id();
    let reply = SidrReply {
        status: SIDR_SUCCESS,
        qpn: Qpn::new(0x77).unwrap(),
        qkey: 0x1234_5678,
        private_data: Vec::new(),
    };
    pair.b.cm.sidr_reply(b_id, reply).unwrap();
    pair.run();

    assert_eq!(
        pair.a.sent_count(CmAttr::SidrReq),
        2,
        "the lost SIDR_REQ was retried"
    );
    assert!(matches!(
        pair.a.events[0].1,
        CmEvent::SidrResponse { id, status: SIDR_SUCCESS, qkey: 0x1234_5678, .. } if id == a_id
    ));
    assert!(pair.is_clean());

    // Nobody listens on another service: answered at once with status "unsupported".
    let params = SidrParams {
        remote_gid: pair.b.gid,
        service_id: SERVICE + 1,
        private_data: Vec::new(),
    };
    pair.a.cm.sidr_resolve(pair.now, params).unwrap();
    pair.run();
    assert!(matches!(
        pair.a.events[1].1,
        CmEvent::SidrResponse {
            status: SIDR_UNSUPPORTED,
            ..
        }
    ));
    assert!(pair.is_clean());
}

#[test]
fn malformed_and_unsupported_mads_are_counted_and_dropped() {
    let mut pair = Pair::default();
    let id = pair.start_connect();
    let req = pair.a.cm.poll_transmit().unwrap().mad;
    let now = pair.now;
    let from = pair.a.gid;
    let b = &mut pair.b.cm;

    b.handle_mad_bytes(now, from, &[0u8; 40]);
    let mut lap = [0u8; MAD_LEN];
    req.emit(&mut Mad::new_unchecked(&mut lap[..]));
    lap[17] = 0x19; // attribute LAP
    b.handle_mad_bytes(now, from, &lap);
    let mut wrong_attr = req;
    wrong_attr.header.attr_id = CmAttr::Rtu.id();
    b.handle_mad(now, from, wrong_attr);
    let mut get = req;
    get.header.method = 0x01;
    b.handle_mad(now, from, get);
    let mut rtu_for_nobody = req;
    rtu_for_nobody.message = CmMessage::Rtu(softroce_wire::cm::CmRtuRepr {
        local_comm_id: 5,
        remote_comm_id: 6,
        private_data: [0; 224],
    });
    rtu_for_nobody.header.attr_id = CmAttr::Rtu.id();
    b.handle_mad(now, from, rtu_for_nobody);

    let c = b.counters();
    assert_eq!(c.received, 5);
    assert_eq!(c.dropped_malformed, 2);
    assert_eq!(c.dropped_unsupported, 2);
    assert_eq!(c.dropped_unmatched, 1);
    assert!(b.poll_transmit().is_none() && b.poll_event().is_none());
    assert_eq!(b.connection_count(), 0);
    assert_eq!(pair.a.cm.state(id), Some(CmState::ReqSent));
}

#[test]
fn messages_carry_the_fields_the_kernel_cm_reads() {
    let mut pair = Pair::default();
    let params = pair.connect_params();
    let a_id = pair.a.cm.connect(pair.now, params).unwrap();
    pair.run();

    let req = pair.a.sent[0].1;
    let CmMessage::Req(r) = req.message else {
        panic!("first message is not a REQ")
    };
    assert_eq!(r.local_comm_id, a_id.0);
    assert_eq!(
        req.header.tid & 0xffff_ffff,
        u64::from(a_id.0),
        "cm_form_tid"
    );
    assert_eq!(
        (r.local_cm_response_timeout, r.remote_cm_response_timeout),
        (20, 20)
    );
    assert_eq!((r.max_cm_retries, r.transport_service_type), (15, 0));
    assert_eq!(r.primary_path.local_ack_timeout, 17);
    assert_eq!(r.primary_path.local_lid, 0xffff);
    assert_eq!(r.primary_path.local_gid, pair.a.gid);
    assert_eq!(r.primary_path.remote_gid, pair.b.gid);
    assert_eq!(r.pkey, 0xffff);

    // `cm_issue_rej`: the REQ's TID, its comm ID echoed, no local comm ID, REQ rejected.
    let rej = pair.b.sent[0].1;
    let CmMessage::Rej(j) = rej.message else {
        panic!("B did not answer with a REJ")
    };
    assert_eq!(rej.header.tid, req.header.tid);
    assert_eq!((j.local_comm_id, j.remote_comm_id), (0, a_id.0));
    assert_eq!(j.message_rejected, softroce_wire::cm::CmMsgResponse::Req);
    assert_eq!(j.reason, REJ_INVALID_SERVICE_ID);
}

/// XRC through the CM as the kernel's cm.c runs it: the REQ says transport 3 (extended)
/// with extended type 1 (XRC); the REP names the target QP in its local EECN (its local
/// QPN 0) with the SRQ bit set, and the initiator takes its destination from there.
#[test]
fn an_xrc_connection_names_the_target_in_the_local_eecn() {
    let mut pair = Pair::default();
    pair.a.xrc = true;
    pair.b.xrc = true;
    pair.start_connect();
    pair.run_until(|p| p.b.count(is_established) == 1);
    let (_, req) = pair.b.find(is_request).unwrap();
    let CmEvent::ConnectRequest { params, .. } = req else {
        unreachable!()
    };
    assert_eq!(params.transport_service_type, 3);
    let CmMessage::Req(req) = pair.a.sent[0].1.message else {
        panic!("A's first MAD is its REQ")
    };
    assert_eq!(
        (req.transport_service_type, req.extended_transport_type),
        (3, 1)
    );
    let CmMessage::Rep(rep) = pair.b.sent[0].1.message else {
        panic!("B's first MAD is its REP")
    };
    assert_eq!((rep.local_qpn.value(), rep.local_eecn), (0, B_QPN));
    assert!(rep.srq);
    let (_, response) = pair
        .a
        .find(|e| matches!(e, CmEvent::ConnectResponse { .. }))
        .unwrap();
    let CmEvent::ConnectResponse { params, .. } = response else {
        unreachable!()
    };
    assert_eq!(params.remote_qpn, Qpn::new(B_QPN).unwrap());
}

#[test]
fn the_request_carries_the_route_and_the_passive_side_reads_it_back() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    pair.b.cm.listen(SERVICE).unwrap();
    let mut params = pair.connect_params();
    // rdma_cm's route: TOS 32, a flow label from the ports, an ACK timeout of 14 set
    // before the route (packet life time 13).
    params.path = Some(PathParams {
        traffic_class: 32,
        flow_label: 0x12345,
        hop_limit: 64,
        sl: 3,
        packet_life_time: 13,
    });
    pair.a.cm.connect(pair.now, params).unwrap();
    pair.run_until(|p| p.b.count(is_request) == 1);

    let Some((_, CmEvent::ConnectRequest { params, .. })) = pair.b.find(is_request) else {
        unreachable!()
    };
    // The REQ's Local ACK Timeout is cm_ack_timeout(ack delay 15, 13) = 16; the passive
    // side's packet life time one less (the kernel's cm_format_paths_from_req).
    assert_eq!(params.local_ack_timeout, 16);
    assert_eq!(
        params.path,
        PathParams {
            traffic_class: 32,
            flow_label: 0x12345,
            hop_limit: 64,
            sl: 3,
            packet_life_time: 15,
        }
    );
}

#[test]
fn a_slow_acceptor_asks_for_more_time_and_the_connection_still_comes_up() {
    let mut pair = Pair::default();
    pair.b.react.accept = false;
    let a_id = pair.start_connect();
    pair.run_until(|p| p.b.count(is_request) == 1);
    let b_id = pair.b.find(is_request).unwrap().1.id();
    // B's application takes 100 s to accept: longer than A's fifteen REQ retries last
    // (about 77 s). A's first retry finds B's request unanswered, and B answers it with
    // rdma_cm's MRA (service timeout 24, about 69 s), so A keeps waiting.
    pair.run_to(pair.now + Duration::from_secs(100));
    assert!(pair.b.sent_count(CmAttr::Mra) >= 1);
    assert_eq!(pair.b.cm.state(b_id), Some(CmState::MraReqSent));
    assert!(
        pair.a
            .event_list()
            .iter()
            .all(|e| !matches!(e, CmEvent::Unreachable { .. }))
    );
    let accept = pair.b.accept_params();
    pair.b.cm.accept(pair.now, b_id, accept).unwrap();
    pair.run_until(|p| p.b.count(is_established) == 1);
    assert_eq!(pair.a.cm.state(a_id), Some(CmState::Established));
}
