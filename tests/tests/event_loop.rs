//! An application written the way event-driven RDMA code is: completion-channel and async
//! event fds set non-blocking and registered with mio; events drained until EAGAIN and
//! acknowledged in batches; a CQ overrun arrives through the async fd as IBV_EVENT_CQ_ERR.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use softroce_emu::core::SendWr;
use softroce_verbs::{Context, EventType, QpType, WcStatus, WrOpcode};

const CHANNEL: Token = Token(0);
const ASYNC: Token = Token(1);

#[test]
fn mio_event_loop_drains_completion_events_and_acks_in_batches() {
    let a = Context::open_emulated("loop-a", "127.0.0.51".parse().unwrap(), 0).unwrap();
    let b = Context::open_emulated("loop-b", "127.0.0.52".parse().unwrap(), 0).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cqa = a.create_cq(64, None).unwrap();
    let ch = b.create_comp_channel().unwrap();
    ch.set_nonblocking(true).unwrap();
    let cqb = b.create_cq(64, Some(&ch)).unwrap();
    let (ma, mb) = (pa.allocate(4096).unwrap(), pb.allocate(4096).unwrap());
    let x = pa.create_qp(&cqa, &cqa, QpType::Rc).build().unwrap();
    let y = pb.create_qp(&cqb, &cqb, QpType::Rc).build().unwrap();
    let (ex, ey) = (x.endpoint(), y.endpoint());
    let (x, y) = (x.handshake(ey).unwrap(), y.handshake(ex).unwrap());

    let mut poll = Poll::new().unwrap();
    let fd: RawFd = ch.fd();
    poll.registry()
        .register(&mut SourceFd(&fd), CHANNEL, Interest::READABLE)
        .unwrap();
    const MESSAGES: u64 = 40;
    for i in 0..MESSAGES {
        // SAFETY: `mb` outlives every receive; all are polled below.
        unsafe { y.post_receive(&[mb.slice(0..64).unwrap()], i).unwrap() };
    }
    cqb.req_notify(false).unwrap();
    let sender = std::thread::spawn(move || {
        for i in 0..MESSAGES {
            let mut wr = SendWr::new(i, WrOpcode::Send);
            wr.sg_list = vec![ma.slice(0..8).unwrap()];
            // SAFETY: `ma` moves into this thread and outlives the sends (completions polled).
            unsafe { x.post_send(&[wr]).unwrap() };
            if i % 8 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let done = cqa
            .poll_wait(MESSAGES as usize, Duration::from_secs(10))
            .unwrap();
        assert_eq!(done.len() as u64, MESSAGES);
    });

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
    sender.join().unwrap();
    assert_eq!(received, (0..MESSAGES).collect::<Vec<_>>());
    assert!(
        (2..=MESSAGES).contains(&wakeups),
        "one wakeup per arming at most: {wakeups}"
    );
    drop(y);
}

#[test]
fn cq_overrun_arrives_on_the_async_fd_as_cq_err() {
    let a = Context::open_emulated("ovr-a", "127.0.0.53".parse().unwrap(), 0).unwrap();
    let b = Context::open_emulated("ovr-b", "127.0.0.54".parse().unwrap(), 0).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let cqa = a.create_cq(16, None).unwrap();
    let tiny = b.create_cq(1, None).unwrap();
    let (ma, mb) = (pa.allocate(64).unwrap(), pb.allocate(64).unwrap());
    let x = pa.create_qp(&cqa, &cqa, QpType::Rc).build().unwrap();
    let y = pb.create_qp(&tiny, &tiny, QpType::Rc).build().unwrap();
    let (ex, ey) = (x.endpoint(), y.endpoint());
    let (x, y) = (x.handshake(ey).unwrap(), y.handshake(ex).unwrap());

    let mut poll = Poll::new().unwrap();
    let fd: RawFd = b.async_fd();
    poll.registry()
        .register(&mut SourceFd(&fd), ASYNC, Interest::READABLE)
        .unwrap();
    for i in 0..3 {
        // SAFETY: `mb`/`ma` outlive the work requests.
        unsafe { y.post_receive(&[mb.slice(0..8).unwrap()], i).unwrap() };
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![ma.slice(0..8).unwrap()];
        // SAFETY: as above.
        unsafe { x.post_send(&[wr]).unwrap() };
    }
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
