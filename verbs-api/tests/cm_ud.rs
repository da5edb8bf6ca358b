//! UD address resolution told as stories (rdma_cm's `RDMA_PS_UDP`): two emulated devices
//! on loopback (127.0.23.x), a UD listener answering each SIDR_REQ with a QP of its own, a
//! client resolving the listener's address and port to that QP and sending to it. Private
//! data goes both ways; a port nobody listens on, a rejecting server, a peer that never
//! answers each end the resolution with an error that says which.

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{WAIT, device, listen_addr, options};
use softroce_verbs::cm::{CmFailure, ConnectOptions, RDMA_UDP_QKEY};
use softroce_verbs::grh::{GRH_LEN, parse_grh};
use softroce_verbs::{
    CompletionQueue, Context, Error, Gid, MemoryRegion, QpType, QueuePair, QueuePairEndpoint,
    SendWr, WcOpcode, WcStatus, WrOpcode,
};

const PORT: u16 = 7174;

/// A UD QP with rdma_cm's Q_Key, in RTS, its CQ and a buffer: receives (GRH area and
/// 64 bytes each) in the first four slots, sends from offset 512.
struct Ud {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

const SLOT: usize = GRH_LEN + 64;

fn ud(ctx: &Context) -> Ud {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mr = pd.allocate(1024).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Ud)
        .qkey(RDMA_UDP_QKEY)
        .build()
        .unwrap();
    let e = qp.endpoint();
    let qp = qp.handshake(e).unwrap();
    for i in 0..4 {
        // SAFETY: the region lives in the returned Ud, which outlives the completions.
        unsafe { qp.post_receive(&[mr.slice(i * SLOT..(i + 1) * SLOT).unwrap()], i as u64) }
            .unwrap();
    }
    Ud { qp, cq, mr }
}

/// Send `msg` from `from` to `target` and wait for the send's completion.
fn send(from: &Ud, target: softroce_verbs::UdTarget, msg: &[u8]) {
    from.mr.write(512, msg).unwrap();
    let mut wr = SendWr::new(9, WrOpcode::Send);
    wr.sg_list = vec![from.mr.slice(512..512 + msg.len()).unwrap()].into();
    wr.ud = Some(target);
    // SAFETY: the region outlives the completion polled below.
    unsafe { from.qp.post_send(&[wr]).unwrap() };
    let wcs = from.cq.poll_wait(1, WAIT).unwrap();
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
}

/// Wait for one receive on `to`: its source QPN, the GRH's source GID, the payload.
fn receive(to: &Ud) -> (u32, Gid, Vec<u8>) {
    let wcs = to.cq.poll_wait(1, WAIT).unwrap();
    assert_eq!(wcs.len(), 1, "no datagram arrived");
    let wc = wcs[0];
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
    let mut area = vec![0u8; wc.byte_len as usize];
    to.mr.read(wc.wr_id as usize * SLOT, &mut area).unwrap();
    let grh = parse_grh(&area[..GRH_LEN]).unwrap();
    (wc.src_qp, grh.sgid, area[GRH_LEN..].to_vec())
}

#[test]
fn a_client_resolves_a_ud_listener_and_its_send_arrives_from_its_own_qp() {
    let (server, client) = (device("cmud", "127.0.23.1"), device("cmud", "127.0.23.2"));
    let listener = server
        .connection_manager()
        .unwrap()
        .listen_ud(listen_addr(&server, PORT))
        .unwrap();
    assert_eq!(listener.local_addr(), listen_addr(&server, PORT));
    let (qpn_tx, qpn_rx) = mpsc::channel();
    let server_side = {
        let server = server.clone();
        std::thread::spawn(move || {
            let req = listener.get_request(WAIT).unwrap();
            assert_eq!(&req.private_data()[..10], b"who serves");
            assert_eq!(req.private_data().len(), 180, "zero padded, as on the wire");
            assert_eq!(req.peer_addr().ip().to_string(), "127.0.23.2");
            let s = ud(&server);
            qpn_tx.send(s.qp.qpn()).unwrap();
            req.accept(&s.qp, b"UD served here").unwrap();
            // The client's datagram, from its own QP and address.
            let (src_qp, sgid, data) = receive(&s);
            assert_eq!(&data, b"a datagram after SIDR");
            // Answer it where it came from (as udaddy's server does, from the completion).
            let back =
                s.qp.ud_target(
                    QueuePairEndpoint {
                        qpn: src_qp,
                        psn: 0,
                        gid: sgid,
                        udp_port: 4791,
                    },
                    RDMA_UDP_QKEY,
                )
                .unwrap();
            send(&s, back, b"and one back");
            (src_qp, sgid)
        })
    };
    let c = ud(&client);
    let cm = client.connection_manager().unwrap();
    let peer = cm
        .resolve_ud(&c.qp, listen_addr(&server, PORT), &options(b"who serves"))
        .unwrap();
    assert_eq!(peer.qpn(), qpn_rx.recv().unwrap(), "the server's QP");
    assert_eq!(peer.qkey(), RDMA_UDP_QKEY);
    assert_eq!(peer.peer_addr(), listen_addr(&server, PORT));
    assert_eq!(&peer.private_data()[..14], b"UD served here");
    assert_eq!(peer.private_data().len(), 136);
    send(&c, peer.target(), b"a datagram after SIDR");
    let (src_qp, sgid) = server_side.join().unwrap();
    assert_eq!(src_qp, c.qp.qpn(), "the receive names the sender's QP");
    assert_eq!(sgid, Gid::from_ip(listen_addr(&client, PORT).ip()));
    let (from, _, data) = receive(&c);
    assert_eq!((from, data.as_slice()), (peer.qpn(), &b"and one back"[..]));
    // Nothing stays behind: SIDR exchanges end with their answer.
    assert_eq!(cm.connection_count(), 0);
    assert_eq!(server.connection_manager().unwrap().connection_count(), 0);
}

#[test]
fn resolving_a_port_nobody_listens_on_is_refused_at_once() {
    let (server, client) = (device("cmud", "127.0.23.3"), device("cmud", "127.0.23.4"));
    let c = ud(&client);
    let cm = client.connection_manager().unwrap();
    // A TCP-space listener on the port is not a UDP one.
    let _rc = server
        .connection_manager()
        .unwrap()
        .listen(listen_addr(&server, PORT))
        .unwrap();
    let started = Instant::now();
    let err = cm
        .resolve_ud(&c.qp, listen_addr(&server, PORT), &options(b"anyone?"))
        .unwrap_err();
    match &err {
        Error::ConnectFailed {
            failure: CmFailure::UdRejected { status: 1, .. },
            ..
        } => {}
        other => panic!("expected a SIDR_REP with status 1, got {other:?} ({other})"),
    }
    assert!(err.to_string().contains("nobody listens"), "{err}");
    assert_eq!(err.errno(), libc::ECONNREFUSED);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(cm.connection_count(), 0);
}

#[test]
fn a_server_that_rejects_sends_its_private_data_back() {
    let (server, client) = (device("cmud", "127.0.23.5"), device("cmud", "127.0.23.6"));
    let listener = server
        .connection_manager()
        .unwrap()
        .listen_ud(listen_addr(&server, PORT))
        .unwrap();
    let rejecter = std::thread::spawn(move || {
        let req = listener.get_request(WAIT).unwrap();
        assert_eq!(&req.private_data()[..6], b"let me");
        req.reject(b"members only").unwrap();
        // A request dropped unanswered is refused too.
        drop(listener.get_request(WAIT).unwrap());
    });
    let c = ud(&client);
    let cm = client.connection_manager().unwrap();
    for (ask, want) in [(&b"let me in"[..], &b"members only"[..]), (b"again", b"")] {
        let err = cm
            .resolve_ud(&c.qp, listen_addr(&server, PORT), &options(ask))
            .unwrap_err();
        match err {
            Error::ConnectFailed {
                failure:
                    CmFailure::UdRejected {
                        status: 2,
                        private_data,
                    },
                ..
            } => assert_eq!(&private_data[..want.len()], want),
            other => panic!("expected a SIDR_REP with status 2, got {other:?}"),
        }
    }
    rejecter.join().unwrap();
    assert_eq!(cm.connection_count(), 0);
}

#[test]
fn a_resolution_nobody_answers_times_out_or_becomes_unreachable() {
    // No device at 127.0.23.9: the SIDR_REQs go unanswered.
    let client = device("cmud", "127.0.23.8");
    let c = ud(&client);
    let cm = client.connection_manager().unwrap();
    let nobody: SocketAddr = "127.0.23.9:7174".parse().unwrap();
    let started = Instant::now();
    let short = ConnectOptions {
        timeout: Duration::from_millis(300),
        ..options(&[])
    };
    let err = cm.resolve_ud(&c.qp, nobody, &short).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConnectFailed { failure: CmFailure::TimedOut(t), .. } if t == short.timeout
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(cm.connection_count(), 0, "the abandoned attempt is gone");
    // Given time, the fifteen retries (64 ms apart here) run out first.
    let err = cm.resolve_ud(&c.qp, nobody, &options(&[])).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConnectFailed {
                failure: CmFailure::Unreachable,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.errno(), libc::EHOSTUNREACH);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn only_ud_qps_resolve_and_answer() {
    let (server, client) = (device("cmud", "127.0.23.10"), device("cmud", "127.0.23.11"));
    let listener = server
        .connection_manager()
        .unwrap()
        .listen_ud(listen_addr(&server, PORT))
        .unwrap();
    let pd = client.alloc_pd().unwrap();
    let cq = client.create_cq(4, None).unwrap();
    let rc = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let e = rc.endpoint();
    let rc = rc.handshake(e).unwrap();
    let cm = client.connection_manager().unwrap();
    let err = cm
        .resolve_ud(&rc, listen_addr(&server, PORT), &options(&[]))
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    let too_much = options(&[0; 181]);
    let c = ud(&client);
    let err = cm
        .resolve_ud(&c.qp, listen_addr(&server, PORT), &too_much)
        .unwrap_err();
    assert!(err.to_string().contains("at most 180"), "{err}");
    // A server answering with an RC QP is refused, and the requester learns of it.
    let answer = std::thread::spawn(move || {
        let req = listener.get_request(WAIT).unwrap();
        let spd = server.alloc_pd().unwrap();
        let scq = server.create_cq(4, None).unwrap();
        let src = spd.create_qp(&scq, &scq, QpType::Rc).build().unwrap();
        let e = src.endpoint();
        let src = src.handshake(e).unwrap();
        let err = req.accept(&src, &[]).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    });
    let err = cm
        .resolve_ud(&c.qp, server_addr_of("127.0.23.10"), &options(&[]))
        .unwrap_err();
    answer.join().unwrap();
    assert!(
        matches!(
            err,
            Error::ConnectFailed {
                failure: CmFailure::UdRejected { status: 2, .. },
                ..
            }
        ),
        "{err:?}"
    );
}

fn server_addr_of(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), PORT)
}

/// The async calls: a listener awaits its request and answers, a client awaits its
/// resolution, both on one runtime thread.
#[cfg(feature = "tokio")]
#[test]
fn resolution_is_awaitable_on_tokio() {
    let (server, client) = (device("cmud", "127.0.23.12"), device("cmud", "127.0.23.13"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = server
        .connection_manager()
        .unwrap()
        .listen_ud(listen_addr(&server, PORT))
        .unwrap();
    let (s, c) = (ud(&server), ud(&client));
    let cm = client.connection_manager().unwrap();
    let opts = options(b"async");
    rt.block_on(async {
        let (answered, resolved) = tokio::join!(
            async {
                let req = tokio::time::timeout(WAIT, listener.next_request())
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(&req.private_data()[..5], b"async");
                req.accept(&s.qp, b"awaited")
            },
            cm.resolve_ud_async(&c.qp, listen_addr(&server, PORT), &opts)
        );
        answered.unwrap();
        let peer = resolved.unwrap();
        assert_eq!(peer.qpn(), s.qp.qpn());
        assert_eq!(&peer.private_data()[..7], b"awaited");
    });
}
