//! The core's hot path for a stream of 8 B RDMA WRITEs, without sockets: HCA `a` posts
//! them and builds their packets, `b` takes them in and acknowledges (holding its ACK as
//! the UDP driver's devices do, so each batch of 16 is acknowledged once), `a` takes the
//! ACKs. The WRITEs' bytes are checked where they land, and nothing may be dropped.
//!
//! Each stage is a function of its own so that `scripts/instructions.sh` can count its
//! instructions under valgrind's callgrind: exact and repeatable, where timings on a
//! shared VM swing by a quarter from run to run.
//!
//! `cargo run --release -p softroce-emu-core --example hot_path [MESSAGES]`

#[path = "../benches/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{BATCH, Link, Wire};

/// What the UDP driver's devices hold an ACK for (`softroce_emu_driver::ACK_DEFER`).
const ACK_DEFER: Duration = Duration::from_micros(100);
/// The payload of each WRITE.
const LEN: u32 = 8;
/// More would only take longer to count: the per-message figure settles long before.
const MAX_MESSAGES: u64 = 10_000_000;

/// `a` posts a batch of WRITEs, the last signaled, and builds their datagrams.
#[inline(never)]
fn requester_posts(link: &mut Link, wire: &mut Wire, now: Instant) {
    for i in 0..BATCH {
        link.post_write(LEN, i + 1 == BATCH);
    }
    wire.fill(&mut link.a, now, &mut link.packet);
}

/// `b` takes the batch in (parse, ICRC check, placement) and builds its ACK.
#[inline(never)]
fn responder_receives(link: &mut Link, wire: &Wire, acks: &mut Wire, now: Instant) {
    wire.deliver(&mut link.b, now);
    acks.fill(&mut link.b, now, &mut link.packet);
}

/// `a` takes the ACK: the batch's send queue entries retire, and the application polls
/// the one completion it asked for. Returns the completions polled.
#[inline(never)]
fn requester_takes_acks(link: &mut Link, acks: &Wire, now: Instant) -> usize {
    acks.deliver(&mut link.a, now);
    link.poll_completions()
}

fn main() -> ExitCode {
    let messages = match std::env::args().nth(1).map(|a| a.parse::<u64>()) {
        None => 16_000,
        Some(Ok(n)) if (1..=MAX_MESSAGES).contains(&n) => n.div_ceil(BATCH) * BATCH,
        Some(_) => {
            eprintln!("hot_path: MESSAGES must be a whole number from 1 to {MAX_MESSAGES}");
            return ExitCode::from(2);
        }
    };
    let mut link = Link::new(ACK_DEFER);
    let (mut wire, mut acks) = (Wire::default(), Wire::default());
    let mut datagrams = 0;
    let mut ack_datagrams = 0;
    let mut completions = 0;
    for _ in 0..messages / BATCH {
        let now = Instant::now();
        requester_posts(&mut link, &mut wire, now);
        datagrams += wire.len();
        responder_receives(&mut link, &wire, &mut acks, now);
        ack_datagrams += acks.len();
        completions += requester_takes_acks(&mut link, &acks, now);
    }
    let (sent, rcvd) = (link.a.counters(), link.b.counters());
    let dropped = sent.drops.iter().sum::<u64>() + rcvd.drops.iter().sum::<u64>();
    let slots = link.slots_written(LEN as usize);
    println!(
        "{messages} WRITEs of {LEN} B: {datagrams} request datagrams, {ack_datagrams} ACKs, \
         {completions} completions, {dropped} dropped, {slots} slots of the target written"
    );
    // Message k lands in slot k mod 256 (after the setup's check, which fills slot 0).
    let expected_slots = (messages as usize).clamp(1, 256);
    if datagrams as u64 != messages
        || ack_datagrams == 0
        || completions as u64 != messages / BATCH
        || dropped != 0
        || slots < expected_slots
    {
        eprintln!("hot_path: the stream did not go through whole (see the line above)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
