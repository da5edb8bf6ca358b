//! RC ping-pong between two processes, each with its own emulated device on loopback.
//!
//! The story: `ping` (this process, device on 127.0.0.1) starts `pong` (the same program
//! again, device on 127.0.0.2). Each builds a protection domain, a completion queue, an RC
//! queue pair and a registered buffer; they swap QP endpoints out of band (see `oob`), bring
//! their QPs to RTS, and bounce a message back and forth, each side checking every byte.
//! Every packet between them is real RoCEv2 over UDP.
//!
//! Run it with `cargo run -p softroce-verbs --example rc_pingpong [ROUNDS]`.

mod oob;

use std::time::{Duration, Instant};

use oob::{BoxError, Peer};
use softroce_verbs::{
    CompletionQueue, Context, MemoryRegion, QpType, QueuePair, SendWr, WcOpcode, WcStatus, WrOpcode,
};

/// How long either side waits for a completion before giving up.
const WAIT: Duration = Duration::from_secs(10);
/// Bytes of one message.
const SIZE: usize = 64;

fn main() -> Result<(), BoxError> {
    match std::env::args().nth(1).as_deref() {
        Some("pong") => pong(),
        rounds => ping(rounds.map_or(Ok(1000), str::parse)?),
    }
}

/// What both sides build: a device, and on it a CQ, an RC QP in INIT and a buffer whose
/// first half is for receiving and second half for sending.
struct Side {
    _ctx: Context,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn open(ip: &str) -> Result<(Side, softroce_verbs::PreparedQueuePair), BoxError> {
    // Port 0: any free UDP port; it travels with the endpoint.
    let ctx = Context::open_emulated("softroce0", ip.parse()?, 0)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build()?;
    let mr = pd.allocate(2 * SIZE)?;
    // Post the first receive before telling the peer about us, so its first message
    // never meets an empty receive queue.
    // SAFETY (this and every post below): `mr` lives until the end of the function that
    // posts, after the last completion was polled; a half is reused only after its
    // completion.
    unsafe { qp.post_receive(&[mr.slice(0..SIZE)?], 0)? };
    Ok((Side { _ctx: ctx, cq, mr }, qp))
}

/// Send the second half of the buffer as one message.
fn send(qp: &QueuePair, side: &Side) -> Result<(), BoxError> {
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![side.mr.slice(SIZE..2 * SIZE)?].into();
    unsafe { qp.post_send(&[wr])? };
    Ok(())
}

/// Wait for our send's completion and the peer's message (in either order), then post the
/// next receive; returns the message.
fn exchange(qp: &QueuePair, side: &Side) -> Result<Vec<u8>, BoxError> {
    let wcs = side.cq.poll_wait(2, WAIT)?;
    if wcs.len() != 2 || wcs.iter().any(|wc| wc.status != WcStatus::Success) {
        return Err(format!("expected a send and a receive completion, got {wcs:?}").into());
    }
    if !wcs.iter().any(|wc| wc.opcode == WcOpcode::Recv) {
        return Err(format!("no message arrived: {wcs:?}").into());
    }
    let mut message = vec![0u8; SIZE];
    side.mr.read(0, &mut message)?;
    unsafe { qp.post_receive(&[side.mr.slice(0..SIZE)?], 0)? };
    Ok(message)
}

fn message(round: u32) -> Vec<u8> {
    let mut m = format!("ping-pong round {round}").into_bytes();
    m.resize(SIZE, b'.');
    m
}

fn ping(rounds: u32) -> Result<(), BoxError> {
    let mut pong = Peer::spawn("pong")?;
    let (side, qp) = open("127.0.0.1")?;
    // Out of band: their endpoint for ours, then connect (INIT -> RTR -> RTS).
    let theirs = pong.recv()?.parse()?;
    pong.send(qp.endpoint())?;
    pong.send(rounds)?;
    let qp = qp.handshake(theirs)?;
    // pong says when its QP can receive; a message sent before would be dropped and
    // retransmitted only after the ACK timeout.
    if pong.recv()? != "ready" {
        return Err("pong did not get ready".into());
    }

    let start = Instant::now();
    for round in 0..rounds {
        side.mr.write(SIZE, &message(round))?;
        send(&qp, &side)?;
        let back = exchange(&qp, &side)?;
        if back != message(round) {
            return Err(format!("round {round}: {:?}", String::from_utf8_lossy(&back)).into());
        }
    }
    let elapsed = start.elapsed();
    pong.finish()?;
    println!(
        "{rounds} round trips of {SIZE} bytes between two processes, every byte checked; {:.1} µs per round trip",
        elapsed.as_secs_f64() * 1e6 / f64::from(rounds.max(1))
    );
    Ok(())
}

fn pong() -> Result<(), BoxError> {
    let (side, qp) = open("127.0.0.2")?;
    oob::send_to_parent(qp.endpoint())?;
    let qp = qp.handshake(oob::recv_from_parent()?.parse()?)?;
    let rounds: u32 = oob::recv_from_parent()?.parse()?;
    oob::send_to_parent("ready")?;
    // Echo each message; our previous answer's send completion may come before or after
    // the next message.
    let mut sent = 0;
    for _ in 0..rounds {
        loop {
            let wc = side.cq.poll_wait(1, WAIT)?;
            let wc = wc.first().ok_or("pong: no message within the wait")?;
            if wc.status != WcStatus::Success {
                return Err(format!("pong: {wc:?}").into());
            }
            if wc.opcode == WcOpcode::Recv {
                break;
            }
            sent += 1;
        }
        let mut message = vec![0u8; SIZE];
        side.mr.read(0, &mut message)?;
        unsafe { qp.post_receive(&[side.mr.slice(0..SIZE)?], 0)? };
        side.mr.write(SIZE, &message)?;
        send(&qp, &side)?;
    }
    // The last answers' completions, so nothing is in flight when the device closes.
    let left = rounds - sent;
    if (side.cq.poll_wait(left as usize, WAIT)?.len() as u32) < left {
        return Err("pong: the last answer was not acknowledged".into());
    }
    Ok(())
}
