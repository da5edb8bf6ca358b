//! Completions and async events awaited in tokio (feature `tokio`), between two emulated
//! devices on loopback over real UDP: an echo, a dropped future that loses nothing, a burst
//! of completions that costs one wake-up, async events as a stream, and the simulator
//! refused with a reason.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use softroce_verbs::{
    AsyncCq, Context, EventType, MemoryRegion, QpType, QueuePair, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
use tokio::time::timeout;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every test gives up after this (a hang bound, not a performance claim).
const BOUND: Duration = Duration::from_secs(30);

/// One side of a connected RC pair: its device, CQ, QP and 64 KiB of registered memory.
struct Side {
    _ctx: Context,
    cq: AsyncCq,
    qp: QueuePair,
    mr: MemoryRegion,
}

/// Two devices on `ip_a` and `ip_b` (any free UDP port) with a connected RC QP each.
fn connect(ip_a: &str, ip_b: &str) -> Result<(Side, Side), BoxError> {
    let a = Context::open_emulated("async-a", ip_a.parse()?, 0)?;
    let b = Context::open_emulated("async-b", ip_b.parse()?, 0)?;
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ca, cb) = (a.create_async_cq(256)?, b.create_async_cq(256)?);
    let qa = pa.create_qp(ca.cq(), ca.cq(), QpType::Rc).build()?;
    let qb = pb.create_qp(cb.cq(), cb.cq(), QpType::Rc).build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, qb) = (qa.handshake(eb)?, qb.handshake(ea)?);
    let (ma, mb) = (pa.allocate(65536)?, pb.allocate(65536)?);
    Ok((
        Side {
            _ctx: a,
            cq: ca,
            qp: qa,
            mr: ma,
        },
        Side {
            _ctx: b,
            cq: cb,
            qp: qb,
            mr: mb,
        },
    ))
}

/// Post a receive of 64 bytes at slot `slot` of `side`'s memory.
fn post_recv(side: &Side, slot: usize) -> Result<(), BoxError> {
    let sge = side.mr.slice(slot * 64..(slot + 1) * 64)?;
    // SAFETY: `mr` lives as long as the QP; a slot is reused only after its completion.
    unsafe { side.qp.post_receive(&[sge], slot as u64)? };
    Ok(())
}

/// A SEND of `len` bytes from slot `slot` of `side`'s memory, with wr_id `id`.
fn send_wr(side: &Side, slot: usize, len: usize, id: u64) -> Result<SendWr, BoxError> {
    let mut wr = SendWr::new(id, WrOpcode::Send);
    wr.sg_list = vec![side.mr.slice(slot * 64..slot * 64 + len)?].into();
    Ok(wr)
}

fn expect_ok(wc: &WorkCompletion, what: &str) -> Result<(), BoxError> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!("{what}: {wc:?}").into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echo_server_task_answers_every_message_with_its_bytes_reversed() {
    let (client, server) = connect("127.0.0.61", "127.0.0.62").expect("devices");
    const MESSAGES: usize = 200;

    // The server task: receive into slot 0, echo the bytes reversed from slot 1.
    let server_task = tokio::spawn(async move {
        let mut server = server;
        for _ in 0..MESSAGES {
            post_recv(&server, 0)?;
            // Wait for the request (other completions are our own sends' acknowledgements).
            let request = loop {
                let wc = server.cq.next().await?;
                expect_ok(&wc, "server")?;
                if wc.opcode == WcOpcode::Recv {
                    break wc;
                }
            };
            let mut bytes = vec![0u8; request.byte_len as usize];
            server.mr.read(0, &mut bytes)?;
            bytes.reverse();
            server.mr.write(64, &bytes)?;
            let reply = send_wr(&server, 1, bytes.len(), 7)?;
            // SAFETY: slot 1 is rewritten only after the next request, which the client sends
            // only once this reply arrived.
            unsafe { server.qp.post_send(&[reply])? };
        }
        // The last reply's completion, so the server's memory outlives it.
        loop {
            let wc = server.cq.next().await?;
            expect_ok(&wc, "server")?;
            if wc.opcode == WcOpcode::Send {
                return Ok::<_, BoxError>(server);
            }
        }
    });

    let client_side = async {
        let mut client = client;
        for i in 0..MESSAGES {
            let text = format!("message {i} of {MESSAGES}");
            post_recv(&client, 0)?;
            client.mr.write(64, text.as_bytes())?;
            let wr = send_wr(&client, 1, text.len(), i as u64)?;
            // SAFETY: slot 1 is rewritten only after this send's completion (awaited below).
            unsafe { client.qp.post_send(&[wr])? };
            // Our send's completion and the reply, in either order.
            let (mut sent, mut reply) = (false, None);
            while !sent || reply.is_none() {
                let wc = client.cq.next().await?;
                expect_ok(&wc, "client")?;
                match wc.opcode {
                    WcOpcode::Send => sent = true,
                    WcOpcode::Recv => reply = Some(wc.byte_len as usize),
                    other => return Err(format!("client: unexpected {other:?}").into()),
                }
            }
            let mut got = vec![0u8; text.len()];
            client.mr.read(0, &mut got)?;
            let want: Vec<u8> = text.bytes().rev().collect();
            if reply != Some(text.len()) || got != want {
                return Err(
                    format!("reply to {text:?}: {:?}", String::from_utf8_lossy(&got)).into(),
                );
            }
        }
        Ok::<_, BoxError>(client)
    };
    let client = timeout(BOUND, client_side)
        .await
        .expect("client finished within the bound")
        .expect("client");
    let server = timeout(BOUND, server_task)
        .await
        .expect("server finished within the bound")
        .expect("server task")
        .expect("server");
    // Far fewer wake-ups than completions would be nice but depends on scheduling; that the
    // CQs slept at all (took events) is what shows there is no busy loop.
    assert!(client.cq.events() > 0 && server.cq.events() > 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_wait_loses_no_completion_and_no_wakeup() {
    let (mut a, mut b) = connect("127.0.0.63", "127.0.0.64").expect("devices");
    for slot in 0..2 {
        post_recv(&b, slot).expect("receive");
    }

    // b waits for a message, then gives up (nothing was sent): the future is dropped while
    // the CQ is armed and its waker registered.
    assert!(
        timeout(Duration::from_millis(20), b.cq.next())
            .await
            .is_err()
    );

    // The message completes while nobody waits: the CQ raises its event into the channel.
    a.mr.write(0, b"first").expect("write");
    let wr = send_wr(&a, 0, 5, 1).expect("wr");
    // SAFETY: `a.mr` outlives the completion awaited next.
    unsafe { a.qp.post_send(&[wr]).expect("send") };
    let sent = timeout(BOUND, a.cq.next())
        .await
        .expect("bound")
        .expect("wc");
    expect_ok(&sent, "send").expect("send completes");

    // A new wait finds the completion.
    let wc = timeout(BOUND, b.cq.next())
        .await
        .expect("bound")
        .expect("wc");
    assert_eq!((wc.wr_id, wc.byte_len, wc.opcode), (0, 5, WcOpcode::Recv));

    // The event of that completion is still queued (stale). The next wait takes it, re-arms,
    // finds the CQ empty and sleeps; it must still wake for the second message. A lost
    // wake-up would hang here until BOUND.
    let wc = {
        let mut wait = pin!(b.cq.next());
        let first =
            std::future::poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx).is_pending())).await;
        assert!(first, "the second message was not sent yet");
        a.mr.write(64, b"second!").expect("write");
        let wr = send_wr(&a, 1, 7, 2).expect("wr");
        // SAFETY: as above.
        unsafe { a.qp.post_send(&[wr]).expect("send") };
        timeout(BOUND, wait).await.expect("bound").expect("wc")
    };
    assert_eq!((wc.wr_id, wc.byte_len), (1, 7));
    let mut got = [0u8; 7];
    b.mr.read(64, &mut got).expect("read");
    assert_eq!(&got, b"second!");
}

#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_completions_raises_one_event_and_one_wait_drains_it() {
    let (mut a, mut b) = connect("127.0.0.65", "127.0.0.66").expect("devices");
    const BURST: usize = 64;
    for slot in 0..BURST {
        post_recv(&b, slot).expect("receive");
    }
    let mut got = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); BURST];
    {
        let mut wait = pin!(b.cq.next_batch(&mut got));
        // The first poll arms the CQ, finds it empty and registers with the reactor.
        let first =
            std::future::poll_fn(|cx| Poll::Ready(wait.as_mut().poll(cx).is_pending())).await;
        assert!(first, "nothing was sent yet");

        // 64 messages in one post; once all are acknowledged, b holds all 64 completions.
        let wrs: Vec<SendWr> = (0..BURST)
            .map(|i| {
                a.mr.write(i * 64, &[i as u8; 8]).expect("write");
                send_wr(&a, i, 8, i as u64).expect("wr")
            })
            .collect();
        // SAFETY: `a.mr` outlives the completions awaited below.
        unsafe { a.qp.post_send(&wrs).expect("send") };
        let mut acked = 0;
        while acked < BURST {
            let wc = timeout(BOUND, a.cq.next())
                .await
                .expect("bound")
                .expect("wc");
            expect_ok(&wc, "send").expect("send completes");
            acked += 1;
        }
        let n = timeout(BOUND, wait).await.expect("bound").expect("batch");
        assert_eq!(n, BURST, "one wait hands out everything that was there");
    }
    for (i, wc) in got.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.byte_len), (i as u64, 8));
    }
    // The CQ was armed once, so the 64 completions raised one event. It is taken by the next
    // wait (which then re-arms and sleeps until we give up).
    assert!(
        timeout(Duration::from_millis(20), b.cq.next())
            .await
            .is_err()
    );
    assert_eq!(b.cq.events(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn async_events_arrive_as_a_stream_and_a_dropped_wait_loses_none() {
    let ctx = Context::open_emulated("async-ev", "127.0.0.67".parse().unwrap(), 0).unwrap();
    let mut events = ctx.async_events().expect("event stream");
    assert!(
        timeout(Duration::from_millis(20), events.next())
            .await
            .is_err()
    );

    // Port down and up again while nobody waits: both events are kept, in order.
    ctx.set_port_active(false).expect("port down");
    ctx.set_port_active(true).expect("port up");
    let first = timeout(BOUND, events.next()).await.expect("bound").unwrap();
    let second = timeout(BOUND, events.next()).await.expect("bound").unwrap();
    assert_eq!(
        (first.event_type, second.event_type),
        (EventType::PortErr, EventType::PortActive)
    );
    // Both were acknowledged: nothing is left.
    assert!(
        timeout(Duration::from_millis(20), events.next())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_simulator_is_refused_because_nothing_would_move_it() {
    let fabric = softroce_verbs::sim::Fabric::new(1);
    let dev = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let err = dev.create_async_cq(8).unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "{err}");
    assert!(err.to_string().contains("simulated"), "{err}");
}
