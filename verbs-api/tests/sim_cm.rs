//! Connection management on the simulated fabric: a user's rdma_cm-style code (listen,
//! connect, accept, send, disconnect) run in virtual time through the same IB CM the real
//! device runs on QP1. The CM's 4-second response timeouts and its fifteen retries cost
//! virtual time only, so the slow paths of connection setup are tested in milliseconds.
//!
//! One thread plays both sides, so each side's blocking call is split in two
//! (`start_connect` / `Connecting::wait`, `start_accept` / `Accepting::wait`,
//! `start_disconnect` / `disconnect`): every wait runs the fabric, and the other side's
//! CM answers on its own, as it would on a real device.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use softroce_verbs::cm::{CmFailure, ConnectOptions, Connection, RDMA_UDP_QKEY};
use softroce_verbs::sim::{self, Fabric};
use softroce_verbs::{
    CompletionQueue, Context, Error, PreparedQueuePair, ProtectionDomain, QpType, QueuePair,
    SendWr, WcStatus, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

const SERVER_IP: &str = "10.0.0.2";
const PORT: u16 = 7471;
/// Generous in virtual time: a lost REQ, REP or RTU costs one CM timeout (about 4 s).
const PATIENCE: Duration = Duration::from_secs(60);

fn server_addr() -> SocketAddr {
    SocketAddr::new(SERVER_IP.parse().unwrap(), PORT)
}

/// A client and a server device on `fabric`.
fn devices(fabric: &Fabric) -> Result<(Context, Context), BoxError> {
    let client = fabric.device("client", "10.0.0.1".parse()?)?;
    let server = fabric.device("server", SERVER_IP.parse()?)?;
    Ok((client, server))
}

/// One end: its connection, and the PD and CQ of its QP.
struct End {
    conn: Connection,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

/// An RC QP in INIT on `ctx`, with its PD and CQ.
fn rc_qp(
    ctx: &Context,
) -> Result<(PreparedQueuePair, ProtectionDomain, CompletionQueue), BoxError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(8, None)?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .sq_sig_all(true)
        .build()?;
    Ok((qp, pd, cq))
}

/// Both sides connected through the CM: the client's REQ, the server's REP, the RTU.
/// Returns the client's end, then the server's.
fn connect_pair(client: &Context, server: &Context) -> Result<(End, End), BoxError> {
    let listener = server.connection_manager()?.listen(server_addr())?;
    let options = ConnectOptions {
        private_data: b"hello server".to_vec(),
        timeout: PATIENCE,
        ..ConnectOptions::default()
    };
    let (cqp, cpd, ccq) = rc_qp(client)?;
    let connecting = client
        .connection_manager()?
        .start_connect(cqp, server_addr(), &options)?;
    let request = listener.get_request(PATIENCE)?;
    assert_eq!(&request.private_data()[..12], b"hello server");
    let (sqp, spd, scq) = rc_qp(server)?;
    let accepting = request.start_accept(sqp, b"welcome")?;
    let conn = connecting.wait()?;
    assert_eq!(&conn.private_data()[..7], b"welcome");
    let c = End {
        conn,
        pd: cpd,
        cq: ccq,
    };
    let s = End {
        conn: accepting.wait(PATIENCE)?,
        pd: spd,
        cq: scq,
    };
    Ok((c, s))
}

/// One SEND from the client to the server over the connected QPs: proves the CM brought
/// both to RTS with matching QP numbers and PSNs.
fn one_message(c: &End, s: &End) -> Result<(), BoxError> {
    let (src, dst) = (c.pd.allocate(16)?, s.pd.allocate(16)?);
    src.write(0, b"over the CM")?;
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        s.conn.qp().post_receive(&[dst.slice(0..16)?], 1)?;
        let mut wr = SendWr::new(2, WrOpcode::Send);
        wr.sg_list = vec![src.slice(0..11)?].into();
        c.conn.qp().post_send(&[wr])?;
    }
    let got = s.cq.poll_wait(1, PATIENCE)?;
    let sent = c.cq.poll_wait(1, PATIENCE)?;
    if got.len() + sent.len() != 2 {
        return Err(format!("completions: received {got:?}, sent {sent:?}").into());
    }
    for wc in got.iter().chain(&sent) {
        if wc.status != WcStatus::Success {
            return Err(format!("completion {wc:?}").into());
        }
    }
    let mut text = [0u8; 11];
    dst.read(0, &mut text)?;
    assert_eq!(&text, b"over the CM");
    Ok(())
}

#[test]
fn connections_are_made_used_and_torn_down_under_loss_across_seeds() {
    let mut retransmitted = 0;
    let passed = sim::explore(0..1000, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        fabric.set_link_faults("client", "server", "drop=0.1,reorder=0.05,dup=0.02")?;
        let (c, s) = connect_pair(&client, &server)?;
        one_message(&c, &s)?;
        // The client hangs up; the server's application answers the DREQ.
        c.conn.start_disconnect()?;
        s.conn.wait_disconnected(PATIENCE)?;
        c.conn.disconnect(PATIENCE)?;
        let (ccm, scm) = (client.connection_manager()?, server.connection_manager()?);
        drop((c, s));
        // Time-wait passes in virtual time; then neither CM remembers anything.
        fabric.run_for(Duration::from_secs(120));
        assert_eq!((ccm.connection_count(), scm.connection_count()), (0, 0));
        retransmitted += ccm.counters().retransmitted + scm.counters().retransmitted;
        Ok(())
    });
    match passed {
        Ok(n) => assert_eq!(n, 1000),
        Err(failure) => panic!("{failure}"),
    }
    assert!(
        retransmitted > 0,
        "the lossy link made the CMs retransmit somewhere in 1000 seeds"
    );
}

#[test]
fn a_connect_into_a_partition_times_out_with_the_reason_in_virtual_time() {
    let wall = Instant::now();
    sim::check(5, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        let _listener = server.connection_manager()?.listen(server_addr())?;
        fabric.partition("client", "server");
        // rdma_cm's defaults: a 30 s timeout, CM retries every ~4 s.
        let err = client
            .connection_manager()?
            .connect(rc_qp(&client)?.0, server_addr(), &ConnectOptions::default())
            .expect_err("nothing crosses a partition");
        assert!(
            matches!(&err, Error::ConnectFailed { failure: CmFailure::TimedOut(t), .. }
                if *t == Duration::from_secs(30)),
            "{err}"
        );
        assert_eq!(err.errno(), libc::ETIMEDOUT);
        assert_eq!(
            err.to_string(),
            format!("connect to {}: no answer within 30s", server_addr())
        );
        assert!(fabric.now() >= Duration::from_secs(30));
        Ok(())
    });
    eprintln!(
        "5 partitioned connects, 30 s of virtual time each, took {:?}",
        wall.elapsed()
    );
}

#[test]
fn every_req_retry_lost_makes_the_peer_unreachable() {
    sim::check(3, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        let _listener = server.connection_manager()?.listen(server_addr())?;
        fabric.partition("client", "server");
        let options = ConnectOptions {
            timeout: Duration::from_secs(600),
            ..ConnectOptions::default()
        };
        let cm = client.connection_manager()?;
        let err = cm
            .connect(rc_qp(&client)?.0, server_addr(), &options)
            .expect_err("nothing crosses a partition");
        assert!(
            matches!(
                &err,
                Error::ConnectFailed {
                    failure: CmFailure::Unreachable,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.errno(), libc::EHOSTUNREACH);
        // rdma_cm's CMA_MAX_CM_RETRIES: the REQ went out sixteen times in all.
        assert_eq!(cm.counters().retransmitted, 15);
        let log = fabric.log();
        assert!(
            log.iter().any(|e| e.what == "client: CM UNREACHABLE"),
            "{log:?}"
        );
        Ok(())
    });
}

#[test]
fn a_connect_once_the_partition_heals_succeeds_after_req_retries() {
    sim::check(20, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        fabric.partition("client", "server");
        fabric.at(Duration::from_secs(10), |f| f.heal("client", "server"));
        let (c, s) = connect_pair(&client, &server)?;
        one_message(&c, &s)?;
        assert!(client.connection_manager()?.counters().retransmitted >= 2);
        Ok(())
    });
}

#[test]
fn nobody_listening_or_a_rejecting_server_refuses_the_connection() {
    sim::check(10, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        let cm = client.connection_manager()?;
        let options = ConnectOptions::default();
        // No listener on the port: the server's CM answers REJ reason 8 by itself.
        server.connection_manager()?;
        let err = cm
            .connect(rc_qp(&client)?.0, server_addr(), &options)
            .expect_err("nobody listens");
        assert!(
            matches!(
                &err,
                Error::ConnectFailed {
                    failure: CmFailure::Rejected { reason: 8, .. },
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.errno(), libc::ECONNREFUSED);

        // A listener whose application says no, with a reason of its own.
        let listener = server.connection_manager()?.listen(server_addr())?;
        let connecting = cm.start_connect(rc_qp(&client)?.0, server_addr(), &options)?;
        listener.get_request(PATIENCE)?.reject(b"full")?;
        match connecting.wait() {
            Err(Error::ConnectFailed {
                failure:
                    CmFailure::Rejected {
                        reason: 28,
                        private_data,
                    },
                ..
            }) => assert_eq!(&private_data[..4], b"full"),
            other => panic!("expected a consumer-defined reject, got {other:?}"),
        }
        Ok(())
    });
}

#[test]
fn the_same_seed_replays_the_same_connection_byte_for_byte() {
    let run = |seed| {
        let fabric = Fabric::new(seed);
        fabric.capture(true);
        let (client, server) = devices(&fabric).unwrap();
        fabric
            .set_link_faults("client", "server", "drop=0.2")
            .unwrap();
        let (c, s) = connect_pair(&client, &server).unwrap();
        one_message(&c, &s).unwrap();
        (fabric.pcap(), fabric.log())
    };
    let (pcap, log) = run(7);
    assert_eq!(run(7), (pcap.clone(), log), "same seed, same trace");
    assert_ne!(run(8).0, pcap, "another seed, other faults");
}

/// A UD QP in RTS with rdma_cm's Q_Key, with its PD and CQ.
fn ud_qp(ctx: &Context) -> Result<(QueuePair, ProtectionDomain, CompletionQueue), BoxError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(8, None)?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Ud)
        .qkey(RDMA_UDP_QKEY)
        .sq_sig_all(true)
        .build()?;
    let e = qp.endpoint();
    Ok((qp.handshake(e)?, pd, cq))
}

/// UD address resolution over a lossy, reordering, duplicating link: a lost SIDR_REQ is
/// retried by the client's CM, a lost SIDR_REP makes the retried request reach the server's
/// application again (as with the kernel's CM, which forgets a request once answered), and
/// the server answers every request it gets. The client ends with the server's QP, and a
/// datagram sent to it (the link healed) arrives from the client's QP.
#[test]
fn ud_resolution_survives_loss_across_seeds() {
    let mut retransmitted = 0;
    let passed = sim::explore(0..300, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        fabric.set_link_faults("client", "server", "drop=0.2,reorder=0.05,dup=0.05")?;
        let listener = server.connection_manager()?.listen_ud(server_addr())?;
        let (sqp, spd, scq) = ud_qp(&server)?;
        let (cqp, cpd, ccq) = ud_qp(&client)?;
        let cm = client.connection_manager()?;
        let options = ConnectOptions {
            private_data: b"resolve me".to_vec(),
            timeout: Duration::from_secs(600),
            ..ConnectOptions::default()
        };
        let resolving = cm.start_resolve_ud(&cqp, server_addr(), &options)?;
        // Bounded: the client's CM sends at most sixteen SIDR_REQs, about 4 s apart (and
        // the link duplicates some); a quiet spell longer than all of them means it has
        // its answer, or gave up.
        let mut answered = 0;
        for _ in 0..64 {
            let Ok(req) = listener.get_request(Duration::from_secs(80)) else {
                break;
            };
            assert_eq!(&req.private_data()[..10], b"resolve me");
            req.accept(&sqp, b"here")?;
            answered += 1;
        }
        assert!(answered >= 1);
        let peer = resolving.wait()?;
        assert_eq!((peer.qpn(), peer.qkey()), (sqp.qpn(), RDMA_UDP_QKEY));
        assert_eq!(&peer.private_data()[..4], b"here");
        retransmitted += cm.counters().retransmitted;

        fabric.clear_link_faults("client", "server");
        let (src, dst) = (cpd.allocate(16)?, spd.allocate(64)?);
        src.write(0, b"over UD")?;
        // SAFETY: both regions outlive the completions polled below.
        unsafe {
            sqp.post_receive(&[dst.slice(0..64)?], 1)?;
            let mut wr = SendWr::new(2, WrOpcode::Send);
            wr.sg_list = vec![src.slice(0..7)?].into();
            wr.ud = Some(peer.target());
            cqp.post_send(&[wr])?;
        }
        let got = scq.poll_wait(1, PATIENCE)?;
        let sent = ccq.poll_wait(1, PATIENCE)?;
        if got.len() != 1 || sent.len() != 1 || got[0].status != WcStatus::Success {
            return Err(format!("completions: received {got:?}, sent {sent:?}").into());
        }
        assert_eq!(
            got[0].src_qp,
            cqp.qpn(),
            "the datagram names the client's QP"
        );
        let mut text = [0u8; 7];
        dst.read(40, &mut text)?;
        assert_eq!(&text, b"over UD");
        assert_eq!(cm.connection_count(), 0);
        Ok(())
    });
    match passed {
        Ok(n) => assert_eq!(n, 300),
        Err(failure) => panic!("{failure}"),
    }
    assert!(
        retransmitted > 0,
        "somewhere in 300 seeds a SIDR_REQ was retried"
    );
}

#[test]
fn ud_resolution_is_refused_by_a_port_nobody_listens_on_or_a_rejecting_server() {
    sim::check(10, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        let (cqp, _cpd, _ccq) = ud_qp(&client)?;
        let cm = client.connection_manager()?;
        let options = ConnectOptions::default();
        server.connection_manager()?;
        // The server's CM answers status 1 itself, at once.
        let err = cm
            .resolve_ud(&cqp, server_addr(), &options)
            .expect_err("nobody listens");
        assert!(
            matches!(
                &err,
                Error::ConnectFailed {
                    failure: CmFailure::UdRejected { status: 1, .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(fabric.now() < Duration::from_secs(1), "{:?}", fabric.now());

        let listener = server.connection_manager()?.listen_ud(server_addr())?;
        let resolving = cm.start_resolve_ud(&cqp, server_addr(), &options)?;
        listener.get_request(PATIENCE)?.reject(b"no UD today")?;
        match resolving.wait() {
            Err(Error::ConnectFailed {
                failure:
                    CmFailure::UdRejected {
                        status: 2,
                        private_data,
                    },
                ..
            }) => assert_eq!(&private_data[..11], b"no UD today"),
            other => panic!("expected a SIDR reject, got {other:?}"),
        }
        Ok(())
    });
}

#[test]
fn ud_resolution_into_a_partition_times_out_then_becomes_unreachable() {
    sim::check(3, |fabric| -> Result<(), BoxError> {
        let (client, server) = devices(fabric)?;
        let _listener = server.connection_manager()?.listen_ud(server_addr())?;
        fabric.partition("client", "server");
        let (cqp, _cpd, _ccq) = ud_qp(&client)?;
        let cm = client.connection_manager()?;
        let err = cm
            .resolve_ud(&cqp, server_addr(), &ConnectOptions::default())
            .expect_err("nothing crosses a partition");
        assert!(
            matches!(&err, Error::ConnectFailed { failure: CmFailure::TimedOut(t), .. }
                if *t == Duration::from_secs(30)),
            "{err}"
        );
        let patient = ConnectOptions {
            timeout: Duration::from_secs(600),
            ..ConnectOptions::default()
        };
        let before = cm.counters().retransmitted;
        let err = cm
            .resolve_ud(&cqp, server_addr(), &patient)
            .expect_err("nothing crosses a partition");
        assert!(
            matches!(
                &err,
                Error::ConnectFailed {
                    failure: CmFailure::Unreachable,
                    ..
                }
            ),
            "{err}"
        );
        // rdma_cm's CMA_MAX_CM_RETRIES: the SIDR_REQ went out sixteen times in all.
        assert_eq!(cm.counters().retransmitted - before, 15);
        assert_eq!(cm.connection_count(), 0);
        Ok(())
    });
}

/// `listen` on port 0 picks a free port of the ephemeral range, as `rdma_bind_addr` does,
/// says which, and a client reaches the listener there.
#[test]
fn listening_on_port_0_picks_a_free_ephemeral_port_a_client_can_reach() -> Result<(), BoxError> {
    let fabric = Fabric::new(5);
    let (client, server) = devices(&fabric)?;
    let any = SocketAddr::new(SERVER_IP.parse()?, 0);
    let first = server.connection_manager()?.listen(any)?;
    let second = server.connection_manager()?.listen(any)?;
    let (p1, p2) = (first.local_addr().port(), second.local_addr().port());
    assert!(
        (32768..=60999).contains(&p1) && (32768..=60999).contains(&p2),
        "{p1} {p2}"
    );
    assert_ne!(p1, p2, "two listeners, two ports");

    let options = ConnectOptions {
        timeout: PATIENCE,
        ..ConnectOptions::default()
    };
    let (cqp, _cpd, _ccq) = rc_qp(&client)?;
    let connecting =
        client
            .connection_manager()?
            .start_connect(cqp, second.local_addr(), &options)?;
    let request = second.get_request(PATIENCE)?;
    let (sqp, _spd, _scq) = rc_qp(&server)?;
    let accepting = request.start_accept(sqp, b"")?;
    connecting.wait()?;
    accepting.wait(PATIENCE)?;
    Ok(())
}
