//! Connection management told as stories: two emulated devices on loopback connect through
//! their CMs (REQ, REP, RTU on QP1 over real UDP), exchange data over the QPs the CM brought
//! up, and disconnect; refusals say why; loss on CM traffic costs retries, never a second
//! connection; connecting over and over leaks nothing.

mod common;

use std::time::Duration;

use common::{WAIT, device, listen_addr, options};
use softroce_verbs::cm::{CmFailure, Connection, ConnectionManager};
use softroce_verbs::{
    CompletionQueue, Context, Error, MemoryRegion, QpState, QpType, SendWr, WcOpcode, WcStatus,
    WrOpcode,
};

const PORT: u16 = 7471;

/// A QP with its CQ and a 64-byte buffer, one receive posted into its first 16 bytes.
struct Endpoint {
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn endpoint(ctx: &Context) -> (Endpoint, softroce_verbs::PreparedQueuePair) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let mr = pd.allocate(64).unwrap();
    // SAFETY: `mr` lives in the returned Endpoint, which outlives the QP's completions.
    unsafe { qp.post_receive(&[mr.slice(0..16).unwrap()], 1).unwrap() };
    (Endpoint { cq, mr }, qp)
}

/// Send `msg` (16 bytes at offset 32 of the buffer) and wait for its completion and for
/// the receive posted earlier.
fn send_and_receive(conn: &Connection, ep: &Endpoint, msg: &[u8; 16]) -> Vec<u8> {
    ep.mr.write(32, msg).unwrap();
    let mut wr = SendWr::new(2, WrOpcode::Send);
    wr.sg_list = vec![ep.mr.slice(32..48).unwrap()].into();
    // SAFETY: the buffer stays registered until the completion is polled below.
    unsafe { conn.qp().post_send(&[wr]).unwrap() };
    let wcs = ep.cq.poll_wait(2, WAIT).unwrap();
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let recv = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
    assert_eq!(recv.byte_len, 16);
    let mut got = vec![0u8; 16];
    ep.mr.read(0, &mut got).unwrap();
    got
}

#[test]
fn a_client_connects_exchanges_data_and_disconnects_and_both_sides_see_it() {
    let (server, client) = (device("cm", "127.0.14.1"), device("cm", "127.0.14.2"));
    let listener = server
        .connection_manager()
        .unwrap()
        .listen(listen_addr(&server, PORT))
        .unwrap();
    let server_side = {
        let server = server.clone();
        std::thread::spawn(move || {
            let req = listener.get_request(WAIT).unwrap();
            assert_eq!(&req.private_data()[..5], b"hello");
            assert_eq!(req.peer_addr().ip().to_string(), "127.0.14.2");
            let (ep, qp) = endpoint(&server);
            let conn = req.accept(qp, b"welcome", WAIT).unwrap();
            // Echo what the client sends (as rdma-core's rdma_server does).
            let mut first = [0u8; 16];
            let wcs = ep.cq.poll_wait(1, WAIT).unwrap();
            assert_eq!(wcs[0].status, WcStatus::Success);
            ep.mr.read(0, &mut first).unwrap();
            ep.mr.write(32, &first).unwrap();
            let mut wr = SendWr::new(2, WrOpcode::Send);
            wr.sg_list = vec![ep.mr.slice(32..48).unwrap()].into();
            // SAFETY: the buffer stays registered until the completion is polled below.
            unsafe { conn.qp().post_send(&[wr]).unwrap() };
            assert_eq!(
                ep.cq.poll_wait(1, WAIT).unwrap()[0].status,
                WcStatus::Success
            );
            conn.wait_disconnected(WAIT).unwrap();
            assert_eq!(conn.qp().state().unwrap(), QpState::Err);
            first
        })
    };

    let (ep, qp) = endpoint(&client);
    let cm = client.connection_manager().unwrap();
    let conn = cm
        .connect(qp, listen_addr(&server, PORT), &options(b"hello"))
        .unwrap();
    assert_eq!(&conn.private_data()[..7], b"welcome");
    assert_eq!(conn.qp().state().unwrap(), QpState::Rts);
    let echo = send_and_receive(&conn, &ep, b"sixteen bytes!!\0");
    assert_eq!(&echo, b"sixteen bytes!!\0");
    conn.disconnect(WAIT).unwrap();
    assert_eq!(conn.qp().state().unwrap(), QpState::Err);
    assert_eq!(&server_side.join().unwrap(), b"sixteen bytes!!\0");

    // The CM exchange went through QP1 and the device counters: REQ, RTU, DREQ out;
    // REP, DREP in.
    let c = client.counters().unwrap();
    assert_eq!((c.mad_sent, c.mad_rcvd), (3, 2), "{c}");
}

#[test]
fn connecting_to_a_port_nobody_listens_on_is_refused_at_once() {
    let (server, client) = (device("cm", "127.0.14.3"), device("cm", "127.0.14.4"));
    let (_ep, qp) = endpoint(&client);
    let err = client
        .connection_manager()
        .unwrap()
        .connect(qp, listen_addr(&server, PORT), &options(&[]))
        .unwrap_err();
    match &err {
        Error::ConnectFailed {
            failure: CmFailure::Rejected { reason, .. },
            ..
        } => assert_eq!(*reason, 8, "invalid service ID"),
        other => panic!("expected a REJ, not {other}"),
    }
    assert_eq!(err.errno(), libc::ECONNREFUSED);
    assert!(err.to_string().contains("nobody listens"), "{err}");
}

#[test]
fn a_server_rejects_with_private_data_and_the_client_reads_it() {
    let (server, client) = (device("cm", "127.0.14.5"), device("cm", "127.0.14.6"));
    let listener = server
        .connection_manager()
        .unwrap()
        .listen(listen_addr(&server, PORT))
        .unwrap();
    let server_side = std::thread::spawn(move || {
        let req = listener.get_request(WAIT).unwrap();
        req.reject(b"server full").unwrap();
    });
    let (_ep, qp) = endpoint(&client);
    let err = client
        .connection_manager()
        .unwrap()
        .connect(qp, listen_addr(&server, PORT), &options(&[]))
        .unwrap_err();
    let Error::ConnectFailed {
        failure: CmFailure::Rejected {
            reason,
            private_data,
        },
        ..
    } = &err
    else {
        panic!("expected a REJ, not {err}");
    };
    assert_eq!(*reason, 28, "consumer defined");
    assert_eq!(&private_data[..11], b"server full");
    assert!(err.to_string().contains("rejected"), "{err}");
    server_side.join().unwrap();
}

/// A fault plan dropping 20 % of everything sent to QP1 (CM traffic only), in both
/// directions of the device holding it.
fn lossy_cm_plan(seed: u64) -> String {
    let path = std::env::temp_dir().join(format!(
        "softroce-cm-loss-{}-{seed}.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!(
            "seed = {seed}\n[[rule]]\naction = \"drop\"\nprobability = 0.2\ndirection = \"both\"\nqpn = 1\n"
        ),
    )
    .unwrap();
    format!("@{}", path.display())
}

#[test]
fn twenty_percent_loss_on_cm_traffic_still_connects_exactly_once_and_data_flows() {
    let (server, client) = (device("cm", "127.0.14.7"), device("cm", "127.0.14.8"));
    server.set_faults(Some(&lossy_cm_plan(3))).unwrap();
    client.set_faults(Some(&lossy_cm_plan(4))).unwrap();
    let listener = server
        .connection_manager()
        .unwrap()
        .listen(listen_addr(&server, PORT))
        .unwrap();
    const ROUNDS: usize = 10;
    let server_side = {
        let server = server.clone();
        std::thread::spawn(move || {
            let mut accepted = 0;
            for _ in 0..ROUNDS {
                let req = listener.get_request(WAIT).unwrap();
                let (ep, qp) = endpoint(&server);
                let conn = req.accept(qp, &[], WAIT).unwrap();
                let wcs = ep.cq.poll_wait(1, WAIT).unwrap();
                assert_eq!(wcs[0].status, WcStatus::Success);
                accepted += 1;
                conn.wait_disconnected(WAIT).unwrap();
            }
            // Duplicated REQs (retries) never became a second request.
            assert!(listener.get_request(Duration::from_millis(300)).is_err());
            accepted
        })
    };
    let cm = client.connection_manager().unwrap();
    for i in 0..ROUNDS {
        let (ep, qp) = endpoint(&client);
        let conn = cm
            .connect(qp, listen_addr(&server, PORT), &options(&[]))
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
        ep.mr.write(32, &[i as u8; 16]).unwrap();
        let mut wr = SendWr::new(2, WrOpcode::Send);
        wr.sg_list = vec![ep.mr.slice(32..48).unwrap()].into();
        // SAFETY: the buffer stays registered until the completion is polled below.
        unsafe { conn.qp().post_send(&[wr]).unwrap() };
        assert_eq!(
            ep.cq.poll_wait(1, WAIT).unwrap()[0].status,
            WcStatus::Success
        );
        conn.disconnect(WAIT).unwrap();
    }
    assert_eq!(server_side.join().unwrap(), ROUNDS);
    let dropped =
        client.fault_counters().unwrap().dropped + server.fault_counters().unwrap().dropped;
    assert!(dropped > 0, "the plan dropped CM messages");
    let retransmitted = client
        .connection_manager()
        .unwrap()
        .counters()
        .retransmitted
        + server
            .connection_manager()
            .unwrap()
            .counters()
            .retransmitted;
    assert!(retransmitted > 0, "lost CM messages were retried");
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn three_hundred_connect_disconnect_cycles_leak_no_qps_or_fds() {
    let (server, client) = (device("cm", "127.0.14.9"), device("cm", "127.0.14.10"));
    let listener = server
        .connection_manager()
        .unwrap()
        .listen(listen_addr(&server, PORT))
        .unwrap();
    const CYCLES: usize = 300;
    let server_side = {
        let server = server.clone();
        std::thread::spawn(move || {
            for _ in 0..CYCLES {
                let req = listener.get_request(WAIT).unwrap();
                let (_ep, qp) = endpoint(&server);
                let conn = req.accept(qp, &[], WAIT).unwrap();
                conn.wait_disconnected(WAIT).unwrap();
            }
        })
    };
    let cm: ConnectionManager = client.connection_manager().unwrap();
    let qps_before = client.with_hca(|h| h.qp_count()).unwrap();
    let mut fds_after_first = 0;
    for i in 0..CYCLES {
        let (_ep, qp) = endpoint(&client);
        let conn = cm
            .connect(qp, listen_addr(&server, PORT), &options(&[]))
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        conn.disconnect(WAIT).unwrap();
        drop(conn);
        if i == 0 {
            fds_after_first = open_fds();
        }
    }
    server_side.join().unwrap();
    assert_eq!(client.with_hca(|h| h.qp_count()).unwrap(), qps_before);
    assert_eq!(server.with_hca(|h| h.qp_count()).unwrap(), 0);
    // Other tests of this binary run in parallel threads and open fds of their own, so
    // compare against a bound, not an exact count: a leak per cycle would be 300.
    assert!(
        open_fds() < fds_after_first + 50,
        "fds grew from {fds_after_first} to {}",
        open_fds()
    );
    assert_eq!(client.connection_manager().unwrap().connection_count(), 0);
}
