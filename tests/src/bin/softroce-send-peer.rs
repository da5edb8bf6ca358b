//! A second process for the multi-process tests: opens an emulated device, prints its RC
//! QP's endpoint on stdout, reads the peer's endpoint from stdin, connects, sends N 8-byte
//! messages (message `i` carries `i` little-endian, wr_id `i`), waits for their completions
//! and exits 0 — or prints why and exits 1.
//!
//! usage: `softroce-send-peer BIND_IP COUNT [PAUSE_EVERY]`

use std::io::{BufRead, Write};
use std::time::Duration;

use softroce_verbs::{Context, QpType, QueuePairEndpoint, SendWr, WcStatus, WrOpcode};

fn main() {
    if let Err(e) = run() {
        // The test may have stopped listening; a failed print must not panic.
        let _ = writeln!(std::io::stdout(), "ERROR {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, ip, count, rest @ ..] = &args[..] else {
        return Err("usage: softroce-send-peer BIND_IP COUNT [PAUSE_EVERY]".into());
    };
    let ip = ip.parse().map_err(|e| format!("address {ip:?}: {e}"))?;
    let count: u64 = count.parse().map_err(|e| format!("count {count:?}: {e}"))?;
    let pause_every: u64 = rest
        .first()
        .map_or(Ok(0), |p| p.parse())
        .map_err(|e| format!("pause: {e}"))?;
    let ctx = Context::open_emulated("peer", ip, 0).map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(256, None).map_err(|e| e.to_string())?;
    let mr = pd
        .allocate(8 * count as usize + 8)
        .map_err(|e| e.to_string())?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .build()
        .map_err(|e| e.to_string())?;
    say(&qp.endpoint().to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading the peer endpoint: {e}"))?;
    let remote: QueuePairEndpoint = line.parse()?;
    let qp = qp.handshake(remote).map_err(|e| e.to_string())?;
    for i in 0..count {
        let at = 8 * i as usize;
        mr.write(at, &i.to_le_bytes()).map_err(|e| e.to_string())?;
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![mr.slice(at..at + 8).map_err(|e| e.to_string())?];
        // SAFETY: `mr` outlives every send; their completions are polled below.
        unsafe { qp.post_send(&[wr]) }.map_err(|e| e.to_string())?;
        if pause_every > 0 && i % pause_every == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let done = cq
        .poll_wait(count as usize, Duration::from_secs(20))
        .map_err(|e| e.to_string())?;
    if let Some(bad) = done.iter().find(|wc| wc.status != WcStatus::Success) {
        return Err(format!("send {} completed with {}", bad.wr_id, bad.status));
    }
    if done.len() as u64 != count {
        return Err(format!("{} of {count} sends completed", done.len()));
    }
    say(&format!("SENT {count}"))
}

fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the test: {e}"))
}
