//! An application written the way event-driven RDMA code is: completion-channel and async
//! event fds set non-blocking and registered with mio; events drained until EAGAIN and
//! acknowledged in batches; a CQ overrun arrives through the async fd as IBV_EVENT_CQ_ERR.
//! The sender is a second process (`softroce-send-peer`), over real UDP on loopback.

mod common;

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use common::Peer;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use softroce_verbs::{Context, EventType, QpType, WcStatus};

const CHANNEL: Token = Token(0);
const ASYNC: Token = Token(1);

#[test]
fn mio_event_loop_drains_completion_events_and_acks_in_batches() {
    const MESSAGES: u64 = 40;
    let (mut peer, peer_ep) = Peer::start("127.0.0.51", MESSAGES, &["--pause-every", "8"]);
    let b = Context::open_emulated("loop-b", "127.0.0.52".parse().unwrap(), 0).unwrap();
    let pb = b.alloc_pd().unwrap();
    let ch = b.create_comp_channel().unwrap();
    ch.set_nonblocking(true).unwrap();
    let cqb = b.create_cq(64, Some(&ch)).unwrap();
    let mb = pb.allocate(8 * MESSAGES as usize).unwrap();
    let y = pb.create_qp(&cqb, &cqb, QpType::Rc).build().unwrap();
    for i in 0..MESSAGES {
        let at = 8 * i as usize;
        // SAFETY: `mb` outlives every receive; all are polled below.
        unsafe { y.post_receive(&[mb.slice(at..at + 8).unwrap()], i).unwrap() };
    }
    let ours = y.endpoint();
    let y = y.handshake(peer_ep).unwrap();
    cqb.req_notify(false).unwrap();
    peer.connect(ours, None);

    let mut poll = Poll::new().unwrap();
    let fd: RawFd = ch.fd();
    poll.registry()
        .register(&mut SourceFd(&fd), CHANNEL, Interest::READABLE)
        .unwrap();
    let mut events = Events::with_capacity(8);
    let mut received = Vec::new();
    let mut unacked = 0u32;
    let mut wakeups = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while (received.len() as u64) < MESSAGES {
        assert!(
            Instant::now() < deadline,
            "stuck after {} receives",
            received.len()
        );
        poll.poll(&mut events, Some(Duration::from_millis(200)))
            .unwrap();
        if events.is_empty() {
            continue;
        }
        wakeups += 1;
        // Drain every pending event (the fd is non-blocking: EAGAIN ends the batch).
        while let Ok(cq_id) = ch.get_cq_event(Some(Duration::ZERO)) {
            assert_eq!(cq_id, cqb.raw_handle());
            unacked += 1;
        }
        // ibv_get_cq_event(3): re-arm, then poll, so no completion slips between them.
        cqb.req_notify(false).unwrap();
        let mut wcs =
            [softroce_verbs::WorkCompletion::success(0, 0, softroce_verbs::WcOpcode::Send, 0); 16];
        loop {
            let n = cqb.poll(&mut wcs).unwrap();
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                assert_eq!(wc.status, WcStatus::Success);
                received.push(wc.wr_id);
            }
        }
        // Acknowledge in batches, as the man page recommends for speed.
        if unacked >= 4 {
            cqb.ack_events(unacked).unwrap();
            unacked = 0;
        }
    }
    cqb.ack_events(unacked).unwrap();
    let (lines, ok) = peer.finish();
    assert!(
        ok && lines.last().is_some_and(|l| l == "DONE"),
        "peer: {lines:?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("IBV_WC_SUCCESS"))
            .count() as u64,
        MESSAGES,
        "peer: {lines:?}"
    );
    assert_eq!(received, (0..MESSAGES).collect::<Vec<_>>());
    for i in 0..MESSAGES {
        let mut got = [0u8; 8];
        mb.read(8 * i as usize, &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), i, "payload of message {i}");
    }
    assert!(
        (2..=MESSAGES).contains(&wakeups),
        "one wakeup per arming at most: {wakeups}"
    );
    drop(y);
}

#[test]
fn cq_overrun_arrives_on_the_async_fd_as_cq_err() {
    // Three messages into a one-entry CQ: the second one overruns it.
    let (mut peer, peer_ep) = Peer::start("127.0.0.53", 3, &[]);
    let b = Context::open_emulated("ovr-b", "127.0.0.54".parse().unwrap(), 0).unwrap();
    let pb = b.alloc_pd().unwrap();
    let tiny = b.create_cq(1, None).unwrap();
    let mb = pb.allocate(64).unwrap();
    let y = pb.create_qp(&tiny, &tiny, QpType::Rc).build().unwrap();
    for i in 0..3 {
        // SAFETY: `mb` outlives the receives.
        unsafe { y.post_receive(&[mb.slice(0..8).unwrap()], i).unwrap() };
    }
    let ours = y.endpoint();
    let _y = y.handshake(peer_ep).unwrap();

    let mut poll = Poll::new().unwrap();
    let fd: RawFd = b.async_fd();
    poll.registry()
        .register(&mut SourceFd(&fd), ASYNC, Interest::READABLE)
        .unwrap();
    peer.connect(ours, None);
    let mut events = Events::with_capacity(4);
    let deadline = Instant::now() + Duration::from_secs(10);
    let ev = loop {
        assert!(Instant::now() < deadline, "no async event");
        poll.poll(&mut events, Some(Duration::from_millis(200)))
            .unwrap();
        if let Ok(ev) = b.get_async_event(Some(Duration::ZERO)) {
            break ev;
        }
    };
    assert_eq!(ev.event_type, EventType::CqErr);
    b.ack_async_event(&ev).unwrap();
    // The peer's sends stall or fail once the receiving QP is in error; it is only the
    // trigger here.
    drop(peer);
}

#[test]
fn memory_region_misuse_is_an_error_not_a_panic() {
    let ctx = Context::open_emulated("misuse", "127.0.0.55".parse().unwrap(), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.allocate(64).unwrap();
    let err = mr.slice(60..70).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(
        err.to_string()
            .contains("60+10 lies outside the 64-byte region"),
        "{err}"
    );
    assert!(mr.write(63, &[1, 2]).is_err());
    assert!(mr.read(usize::MAX, &mut [0u8; 2]).is_err());
    mr.write(62, &[1, 2]).unwrap();
    let mut two = [0u8; 2];
    mr.read(62, &mut two).unwrap();
    assert_eq!(two, [1, 2]);
}
