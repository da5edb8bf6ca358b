//! A server that receives from many queue pairs through one shared receive queue (SRQ).
//!
//! The story: a log `server` (127.0.0.2) connects one RC queue pair to each of three client
//! devices (127.0.0.11-13). Rather than keeping receive buffers on every QP — memory that
//! grows with the number of clients, mostly idle — it posts 8 buffers to one SRQ that all
//! three QPs draw from. Each client sends 20 lines. The server tells senders apart by the
//! completion's `qp_num`, copies each line out and reposts the buffer at once, so 8 buffers
//! carry 60 messages. The SRQ limit event (`IBV_EVENT_SRQ_LIMIT_REACHED`) warns it when the
//! queue runs low, as a server would use it to post more. (Four devices in one process, for
//! brevity: `rc_pingpong` shows two processes.)
//!
//! Run it with `cargo run -p softroce-verbs --example srq_server`.

use std::collections::HashMap;
use std::time::Duration;

use softroce_verbs::{Context, EventType, QpType, SendWr, WcOpcode, WcStatus, WrOpcode};

type BoxError = Box<dyn std::error::Error>;

const WAIT: Duration = Duration::from_secs(10);
const CLIENTS: usize = 3;
const LINES: usize = 20;
const BUFFERS: usize = 8;
const SLOT: usize = 64;

fn main() -> Result<(), BoxError> {
    let server = Context::open_emulated("server", "127.0.0.2".parse()?, 0)?;
    let spd = server.alloc_pd()?;
    let scq = server.create_cq(64, None)?;
    let srq = spd.create_srq(BUFFERS as u32, 1)?;
    let pool = spd.allocate(BUFFERS * SLOT)?;
    for slot in 0..BUFFERS {
        // SAFETY (this and every post below): `pool` and the clients' buffers live to the
        // end of main, after every completion was polled; a slot is reposted only after its
        // receive completed and its bytes were copied out.
        unsafe { srq.post_receive(&[pool.slice(slot * SLOT..(slot + 1) * SLOT)?], slot as u64)? };
    }
    // Warn when fewer than 2 buffers remain (the event fires once per arming).
    srq.arm_limit(2)?;

    // Each client: its own device, CQ, QP and buffer; the server side of each connection
    // takes its receives from the SRQ.
    let mut clients = Vec::new();
    let mut names = HashMap::new();
    for i in 0..CLIENTS {
        let ctx = Context::open_emulated("client", format!("127.0.0.{}", 11 + i).parse()?, 0)?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(LINES as u32, None)?;
        let mr = pd.allocate(LINES * SLOT)?;
        let cqp = pd.create_qp(&cq, &cq, QpType::Rc).build()?;
        let sqp = spd.create_qp(&scq, &scq, QpType::Rc).srq(&srq).build()?;
        let (ce, se) = (cqp.endpoint(), sqp.endpoint());
        names.insert(se.qpn, format!("client {i}"));
        clients.push((ctx, cq, mr, cqp.handshake(se)?, sqp.handshake(ce)?));
    }

    // All clients send all their lines at once.
    for (i, (_, _, mr, qp, _)) in clients.iter().enumerate() {
        let wrs: Vec<SendWr> = (0..LINES)
            .map(|n| {
                let line = format!("client {i} line {n}");
                mr.write(n * SLOT, line.as_bytes())?;
                let mut wr = SendWr::new(n as u64, WrOpcode::Send);
                wr.sg_list = vec![mr.slice(n * SLOT..n * SLOT + line.len())?].into();
                Ok(wr)
            })
            .collect::<Result<_, BoxError>>()?;
        unsafe { qp.post_send(&wrs)? };
    }

    // The server: take each message, note who sent it, repost the buffer.
    let mut received: HashMap<String, Vec<String>> = HashMap::new();
    for _ in 0..CLIENTS * LINES {
        let wc = scq.poll_wait(1, WAIT)?;
        let wc = wc.first().ok_or("server: a message did not arrive")?;
        if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
            return Err(format!("server: {wc:?}").into());
        }
        let slot = wc.wr_id as usize;
        let mut text = vec![0u8; wc.byte_len as usize];
        pool.read(slot * SLOT, &mut text)?;
        unsafe { srq.post_receive(&[pool.slice(slot * SLOT..(slot + 1) * SLOT)?], wc.wr_id)? };
        let from = names
            .get(&wc.qp_num)
            .ok_or("a message from an unknown QP")?;
        received
            .entry(from.clone())
            .or_default()
            .push(String::from_utf8(text)?);
    }

    // Every client's lines arrived, each QP's in order (RC keeps order per QP).
    for i in 0..CLIENTS {
        let lines = &received[&format!("client {i}")];
        let want: Vec<String> = (0..LINES).map(|n| format!("client {i} line {n}")).collect();
        if *lines != want {
            return Err(format!("client {i}: {lines:?}").into());
        }
    }
    for (i, (_, cq, ..)) in clients.iter().enumerate() {
        if cq.poll_wait(LINES, WAIT)?.len() != LINES {
            return Err(format!("client {i}: not every send was acknowledged").into());
        }
    }
    println!(
        "SRQ: {} messages from {CLIENTS} QPs through {BUFFERS} shared buffers, each QP's in order",
        CLIENTS * LINES
    );
    // Did the queue run low while the clients sent faster than we reposted?
    match server.get_async_event(Some(Duration::ZERO)) {
        Ok(ev) if ev.event_type == EventType::SrqLimitReached => {
            server.ack_async_event(&ev)?;
            println!("the SRQ ran low once: {}", ev.event_type);
        }
        Ok(ev) => return Err(format!("unexpected async event {}", ev.event_type).into()),
        Err(_) => println!("the SRQ never ran below 2 buffers"),
    }
    Ok(())
}
