//! A second process for the multi-process tests: opens an emulated device, prints its RC
//! QP's endpoint on stdout, reads the peer's endpoint (and, for WRITEs, the target address
//! and rkey) from stdin, connects, posts COUNT 8-byte SENDs or WRITEs (request `i` carries
//! `i` little-endian, wr_id `i`), then prints one `WC wr_id status vendor_err` line per
//! completion and `DONE`, and exits 0 — or prints `ERROR why` and exits 1. Faults come from
//! `SOFTROCE_FAULTS` like for any program on the device.
//!
//! usage: `softroce-send-peer BIND_IP COUNT [--op send|write] [--pause-every K]
//! [--retry N] [--rnr-retry N] [--timeout EXP]`; stdin: `ENDPOINT [ADDR_HEX RKEY_HEX]`

use std::io::{BufRead, Write};
use std::time::Duration;

use softroce_verbs::{Context, QpType, QueuePairEndpoint, SendWr, WrOpcode};

fn main() {
    if let Err(e) = run() {
        // The test may have stopped listening; a failed print must not panic.
        let _ = writeln!(std::io::stdout(), "ERROR {e}");
        std::process::exit(1);
    }
}

struct Options {
    ip: std::net::IpAddr,
    count: u64,
    write: bool,
    pause_every: u64,
    retry: u8,
    rnr_retry: u8,
    timeout: u8,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ip, count, rest @ ..] = &args[..] else {
        return Err("usage: softroce-send-peer BIND_IP COUNT [options]".into());
    };
    let mut o = Options {
        ip: ip.parse().map_err(|e| format!("address {ip:?}: {e}"))?,
        count: count.parse().map_err(|e| format!("count {count:?}: {e}"))?,
        write: false,
        pause_every: 0,
        retry: 7,
        rnr_retry: 7,
        timeout: 14,
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v:?}: {e}"));
        match flag.as_str() {
            "--op" => o.write = value == "write",
            "--pause-every" => o.pause_every = num(value)?,
            "--retry" => o.retry = num(value)? as u8,
            "--rnr-retry" => o.rnr_retry = num(value)? as u8,
            "--timeout" => o.timeout = num(value)? as u8,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn run() -> Result<(), String> {
    let o = options()?;
    let ctx = Context::open_emulated("peer", o.ip, 0).map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(256, None).map_err(|e| e.to_string())?;
    let mr = pd
        .allocate(8 * o.count as usize + 8)
        .map_err(|e| e.to_string())?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .reliability(o.timeout, o.retry, o.rnr_retry)
        .build()
        .map_err(|e| e.to_string())?;
    say(&qp.endpoint().to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("reading the peer endpoint: {e}"))?;
    let mut words = line.split_whitespace();
    let remote: QueuePairEndpoint = words.next().ok_or("no endpoint given")?.parse()?;
    let hex =
        |w: Option<&str>| u64::from_str_radix(w.unwrap_or("0"), 16).map_err(|e| e.to_string());
    let (addr, rkey) = (hex(words.next())?, hex(words.next())? as u32);
    let qp = qp.handshake(remote).map_err(|e| e.to_string())?;
    for i in 0..o.count {
        let at = 8 * i as usize;
        mr.write(at, &i.to_le_bytes()).map_err(|e| e.to_string())?;
        let op = if o.write {
            WrOpcode::RdmaWrite
        } else {
            WrOpcode::Send
        };
        let mut wr = SendWr::new(i, op);
        wr.sg_list = vec![mr.slice(at..at + 8).map_err(|e| e.to_string())?].into();
        wr.rdma.remote_addr = addr + at as u64;
        wr.rdma.rkey = rkey;
        // SAFETY: `mr` outlives every request; their completions are polled below.
        unsafe { qp.post_send(&[wr]) }.map_err(|e| e.to_string())?;
        if o.pause_every > 0 && i % o.pause_every == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let done = cq
        .poll_wait(o.count as usize, Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    for wc in &done {
        say(&format!(
            "WC {} {} {:#x}",
            wc.wr_id, wc.status, wc.vendor_err
        ))?;
    }
    say("DONE")
}

fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the test: {e}"))
}
