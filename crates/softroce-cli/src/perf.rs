//! `softroce perf`: bandwidth, message rate and latency.
//!
//! Without a mode it runs two emulated devices on loopback in this process and measures raw
//! UDP doing the same work in the same run, printing ratios that survive a noisy shared
//! machine. With a mode (`write`, `read`, `send`, `atomic`, `lat`) it is a perftest-like
//! tool between two processes: a server (no address given) and a client (the server's
//! address), each with its own device, printing perftest's tables; `--baseline` adds raw
//! UDP figures (per-datagram and GSO) measured in the same run and the ratio.

use std::io::{BufReader, ErrorKind, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use clap::{Args, ValueEnum};
use softroce_emu::driver::socket::probe_gso_segments;
use softroce_verbs::{
    CompletionQueue, Context, MemoryRegion, Mtu, QpCap, QpType, QueuePair, QueuePairEndpoint,
    RdmaTarget, RecvWr, SendFlags, SendWr, SgList, WcOpcode, WorkCompletion, WrOpcode,
};
use softroce_wire::ROCE_V2_PORT;

use crate::completion::check_success;
use crate::limits::{self, MAX_CQE, MAX_ITERS, MAX_MSG_SZ, MAX_QP_WR, MAX_TIMEOUT_SECS, ranged};

/// What `softroce perf` measures between two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// RDMA WRITE bandwidth (ib_write_bw).
    Write,
    /// RDMA READ bandwidth (ib_read_bw).
    Read,
    /// SEND bandwidth (ib_send_bw).
    Send,
    /// FETCH_ADD rate (ib_atomic_bw).
    Atomic,
    /// SEND ping-pong latency (ib_send_lat).
    Lat,
}

/// Arguments of `softroce perf`.
#[derive(Debug, Args)]
pub(crate) struct PerfArgs {
    /// Two-process mode; without it, the in-process report with raw UDP ratios.
    #[arg(value_enum)]
    mode: Option<Mode>,
    /// Server to connect to (two-process mode); without it, wait for a client.
    server: Option<String>,
    /// Address of this side's emulated device (two-process mode).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// TCP port of the side channel (two-process mode). A server on port 0 listens on a
    /// free port and says which: `listening on TCP port N`.
    #[arg(short = 'p', long, default_value_t = 18517)]
    port: u16,
    /// Message size, 1 to 8 MiB (the device's max_msg_sz; atomics: 8).
    #[arg(short = 's', long, default_value_t = 65536, value_parser = ranged::<usize>(1..=MAX_MSG_SZ))]
    size: usize,
    /// Messages to complete (latency: round trips), 1 to 10^9.
    #[arg(short = 'n', long, default_value_t = 2000, value_parser = ranged::<u64>(1..=MAX_ITERS))]
    iters: u64,
    /// Queue pairs the messages are spread over, 1 to 16384; each carries at least one
    /// (`-n` must be at least `-q`).
    #[arg(short = 'q', long, default_value_t = 1, value_parser = ranged::<usize>(1..=MAX_QPS))]
    qps: usize,
    /// Messages kept in flight per QP (1 to 16380: the send queue holds 4 more, up to the
    /// device's max_qp_wr).
    #[arg(long, default_value_t = 16, value_parser = ranged::<usize>(1..=MAX_QP_WR - 4))]
    depth: usize,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 4096, value_parser = limits::mtu)]
    mtu: usize,
    /// Local ACK timeout exponent of this side's RC QPs, 0 to 31: 4.096 us * 2^N (perftest's
    /// `-u`). Default: rdma-core's 14 (67 ms), or 10 (4 ms) when `SOFTROCE_FAULTS` injects
    /// faults.
    #[arg(short = 'u', long = "qp-timeout", value_parser = ranged::<u8>(0..=31))]
    qp_timeout_exp: Option<u8>,
    /// Two-process mode: give up after this many seconds (1 to 86400) waiting for the
    /// client or for the peer on the side channel.
    #[arg(long, default_value_t = 600, value_parser = ranged::<u64>(1..=MAX_TIMEOUT_SECS))]
    timeout: u64,
    /// Two-process mode: print every counter of this side's device at the end
    /// (`counters: name=value …`, rxe's hw_counters names first).
    #[arg(long)]
    counters: bool,
    /// Also measure raw UDP for the same work in this run and print the ratio.
    #[arg(long)]
    baseline: bool,
    /// Ping-pong round trips of the in-process latency test (8-byte SENDs), 1 to 10^9.
    #[arg(long, default_value_t = 5000, value_parser = ranged::<u64>(1..=MAX_ITERS))]
    lat_iters: u64,
    /// Only measure what raw UDP moves on loopback (8 B busy-poll ping-pong, what one send
    /// and one receive call cost, a per-datagram stream and a GSO/GRO stream of
    /// `--mtu`-sized datagrams, and the rate of a GSO/GRO stream of 8 B datagrams) and
    /// print one `name value unit` line each: the limits `scripts/bench.sh` compares the
    /// device with.
    #[arg(long, conflicts_with = "mode")]
    raw_udp: bool,
    /// In-process report: the first device's address (the second is `--b`).
    #[arg(long, default_value = "127.0.0.31")]
    a: IpAddr,
    /// In-process report: the second device's address.
    #[arg(long, default_value = "127.0.0.32")]
    b: IpAddr,
}

pub(crate) fn run(args: &PerfArgs) -> ExitCode {
    let result = match args.mode {
        None if args.raw_udp => raw_udp_limits(args),
        None => report(args),
        Some(mode) => two_process(args, mode),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce perf: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The most QPs one run spreads its messages over: issue 15's 10 000 connected QPs, with
/// room.
const MAX_QPS: u64 = 16384;
/// The most memory one side's message slots take. Past it, messages share slots (QP `q`'s
/// `k`-th in-flight message uses slot `(q * depth + k) % slots`): nothing checks their
/// bytes, and `-q 10000 -s 65536` would otherwise want 10 GiB per side.
const MAX_REGION_BYTES: u64 = 256 << 20;

impl PerfArgs {
    /// What clap cannot check one argument at a time.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_shape(self.qps, self.depth, self.iters_for_shape())
    }

    /// The messages `-q` is checked against: latency runs use one QP whatever `-q` says.
    fn iters_for_shape(&self) -> u64 {
        match self.mode {
            Some(Mode::Lat) => u64::MAX,
            _ => self.iters,
        }
    }

    /// The RC QPs' local ACK timeout exponent (see `--qp-timeout`).
    fn qp_timeout(&self) -> u8 {
        self.qp_timeout_exp
            .unwrap_or_else(|| limits::default_qp_timeout(limits::faults_from_env()))
    }
}

/// The CQ must hold `-q` × `--depth` messages in flight, and every QP must carry at least
/// one of the `iters` messages. (The server checks the client's choice with this too.)
fn check_shape(qps: usize, depth: usize, iters: u64) -> Result<(), String> {
    let in_flight = qps as u64 * depth as u64;
    let max_in_flight = (MAX_CQE - 16) / 2;
    if in_flight > max_in_flight {
        return Err(format!(
            "-q {qps} x --depth {depth} = {in_flight} messages in flight; the CQ (2 entries each, \
             max_cqe {MAX_CQE}) holds at most {max_in_flight}"
        ));
    }
    if iters < qps as u64 {
        return Err(format!(
            "-n {iters} messages leave QPs of -q {qps} idle: give -n {qps} or more"
        ));
    }
    Ok(())
}

/// How many message slots of `slot` bytes one side's region holds (see
/// [`MAX_REGION_BYTES`]): one per message in flight, or fewer, shared, but at least one.
fn slot_count(qps: usize, depth: usize, slot: usize) -> usize {
    let fit = (MAX_REGION_BYTES / slot as u64).max(1) as usize;
    (qps * depth).min(fit)
}

fn check_args(args: &PerfArgs) -> anyhow::Result<Mtu> {
    args.check().map_err(|e| anyhow!(e))?;
    Mtu::from_bytes(args.mtu).with_context(|| format!("--mtu {} is not an IBTA MTU", args.mtu))
}

// ---------------------------------------------------------------------------------------
// Shared measurement code

/// Connected RC QPs on one side, with one region of message slots (see [`slot_count`]).
struct Side {
    /// First to go (fields drop in order): a side that gives up mid-run must not leave
    /// its QPs answering the peer's WRITEs with access errors for a region already gone.
    qps: Vec<QueuePair>,
    ctx: Context,
    cq: CompletionQueue,
    mr: MemoryRegion,
    slot: usize,
    slots: usize,
    /// How long creating and connecting the QPs took, the peer's part included.
    setup: Duration,
}

impl Side {
    /// The byte offset of the slot of QP `q`'s in-flight message `k` (of `depth`).
    fn slot_offset(&self, q: usize, k: usize, depth: usize) -> usize {
        ((q * depth + k % depth) % self.slots) * self.slot
    }
}

fn open_side(
    ctx: Context,
    qps: usize,
    depth: usize,
    size: usize,
    mtu: Mtu,
    qp_timeout: u8,
    connect: impl FnOnce(&[QueuePairEndpoint], u64, u32) -> anyhow::Result<Vec<QueuePairEndpoint>>,
) -> anyhow::Result<Side> {
    let start = Instant::now();
    let pd = ctx.alloc_pd()?;
    let cq = ctx
        .create_cq((qps * depth * 2 + 16) as u32, None)
        .with_context(|| format!("a CQ for {qps} QPs x {depth} messages"))?;
    let slot = size.max(8).next_multiple_of(8);
    let slots = slot_count(qps, depth, slot);
    let mr = pd
        .allocate(slot * slots)
        .with_context(|| format!("{slots} message slots of {slot} bytes"))?;
    let cap = QpCap::new(depth as u32 + 4, depth as u32 + 4).with_inline(64);
    let prepared = (0..qps)
        .map(|_| {
            pd.create_qp(&cq, &cq, QpType::Rc)
                .caps(cap)
                .mtu(mtu)
                .reliability(qp_timeout, 7, 7)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("creating {qps} RC QPs"))?;
    let local: Vec<_> = prepared.iter().map(|p| p.endpoint()).collect();
    let remote = connect(&local, mr.addr(0), mr.rkey())?;
    ensure!(
        remote.len() == prepared.len(),
        "peer has {} QPs, this side {}",
        remote.len(),
        prepared.len()
    );
    let qps = prepared
        .into_iter()
        .zip(remote)
        .map(|(p, r)| p.handshake(r))
        .collect::<Result<Vec<_>, _>>()
        .context("connecting the QPs")?;
    Ok(Side {
        ctx,
        cq,
        mr,
        qps,
        slot,
        slots,
        setup: start.elapsed(),
    })
}

/// Where the peer's region is.
#[derive(Debug, Clone, Copy)]
struct Remote {
    addr: u64,
    rkey: u32,
}

/// Outcome of a bandwidth run: bytes moved, time, and the best span (see [`PEAK_WINDOW`]).
struct BwFigures {
    bytes: u64,
    iters: u64,
    elapsed: Duration,
    peak_bps: f64,
    /// QPs, and the fewest and most messages one of them completed (fairness).
    per_qp: (usize, u64, u64),
}

impl BwFigures {
    fn avg_bps(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    fn msg_rate(&self) -> f64 {
        self.iters as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The shortest span the peak bandwidth is taken over. A span also covers twice the
/// messages in flight: with thousands of QPs a backlog of completions is read from the CQ
/// in one burst, which is not bandwidth (a tenth of the run's messages made a peak of
/// 1.8 TB/s at `-q 10000`).
const PEAK_WINDOW: Duration = Duration::from_millis(50);

/// Busy-poll (up to `timeout`) until completions arrive and take up to `max` of them
/// (none: the time ran out), as perftest's bandwidth tests poll. Not "sleep until `max`":
/// a pipeline refilled only every `max` completions keeps that many fewer messages in
/// flight, and a sleep and wakeup per completion sets the engine thread against the
/// peer's on a small machine (with both, the 1 MiB WRITE bandwidth was a quarter below
/// its peak).
fn take_completions(
    cq: &CompletionQueue,
    max: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<WorkCompletion>> {
    let deadline = Instant::now() + timeout;
    let mut buf = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 64];
    let want = max.clamp(1, buf.len());
    loop {
        let k = cq.poll(&mut buf[..want])?;
        if k > 0 || Instant::now() >= deadline {
            return Ok(buf[..k].to_vec());
        }
    }
}

/// Post `iters` requests of `op` over every QP, `depth` in flight per QP, polling their
/// completions; the peer's region is the target.
fn requester_bw(
    side: &Side,
    op: WrOpcode,
    size: usize,
    iters: u64,
    depth: usize,
    remote: Remote,
) -> anyhow::Result<BwFigures> {
    let nqp = side.qps.len();
    // Message `k` of QP `q` (request `i` overall) uses slot `k % depth` of the QP's `depth`.
    let post = |i: u64, q: usize, k: u64| -> anyhow::Result<()> {
        let slot = side.slot_offset(q, k as usize, depth);
        let len = if op == WrOpcode::AtomicFetchAndAdd {
            8
        } else {
            size
        };
        let mut wr = SendWr::new(i, op);
        wr.sg_list = SgList::from_slice(&[side.mr.slice(slot..slot + len)?]);
        wr.rdma = RdmaTarget {
            remote_addr: remote.addr + slot as u64,
            rkey: remote.rkey,
        };
        wr.atomic.remote_addr = remote.addr + slot as u64;
        wr.atomic.rkey = remote.rkey;
        wr.atomic.compare_add = 1;
        // SAFETY: the region outlives the run, which polls every completion.
        unsafe { side.qps[q].post_send(std::slice::from_ref(&wr))? };
        Ok(())
    };
    let start = Instant::now();
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut window_start = start;
    let mut window_done = 0u64;
    let window_msgs = 2 * (depth * nqp) as u64;
    let mut peak_bps = 0.0f64;
    let mut per_qp = vec![0u64; nqp];
    let index_of: std::collections::HashMap<u32, usize> = side
        .qps
        .iter()
        .enumerate()
        .map(|(i, q)| (q.qpn(), i))
        .collect();
    while posted < (depth * nqp) as u64 && posted < iters {
        let q = posted as usize % nqp;
        post(posted, q, per_qp[q])?;
        per_qp[q] += 1;
        posted += 1;
    }
    let deadline = start + Duration::from_secs(300);
    while done < iters {
        ensure!(
            Instant::now() < deadline,
            "stalled after {done} of {iters} completions"
        );
        let want = ((iters - done) as usize).min(64);
        let wcs = take_completions(&side.cq, want, Duration::from_secs(10))?;
        ensure!(!wcs.is_empty(), "no completion for 10 s after {done}");
        for wc in wcs {
            check_success(&wc, "request")?;
            done += 1;
            if posted < iters {
                // Refill the QP that completed: QPs finish at different paces, and
                // round-robin refills would overflow the send queue of a slower one.
                let q = *index_of
                    .get(&wc.qp_num)
                    .with_context(|| format!("completion for unknown QPN {:#x}", wc.qp_num))?;
                post(posted, q, per_qp[q])?;
                per_qp[q] += 1;
                posted += 1;
            }
        }
        let now = Instant::now();
        if now - window_start >= PEAK_WINDOW && done - window_done >= window_msgs {
            let bytes = (done - window_done) * size as u64;
            peak_bps = peak_bps.max(bytes as f64 / (now - window_start).as_secs_f64());
            (window_start, window_done) = (now, done);
        }
    }
    let elapsed = start.elapsed();
    let fewest = per_qp.iter().copied().min().unwrap_or(0);
    let most = per_qp.iter().copied().max().unwrap_or(0);
    Ok(BwFigures {
        bytes: size as u64 * iters,
        iters,
        elapsed,
        peak_bps,
        per_qp: (nqp, fewest, most),
    })
}

/// Keep `depth` receives posted on every QP and count `iters` arrivals.
fn receiver_bw(side: &Side, size: usize, iters: u64, depth: usize) -> anyhow::Result<BwFigures> {
    let post = |q: usize, k: usize| -> anyhow::Result<()> {
        let slot = side.slot_offset(q, k, depth);
        let wr = RecvWr {
            wr_id: (q * depth + k) as u64,
            sg_list: SgList::from_slice(&[side.mr.slice(slot..slot + size)?]),
        };
        // SAFETY: the region outlives the run; receives complete before it ends or the
        // QPs are destroyed first.
        unsafe { side.qps[q].post_receives(std::slice::from_ref(&wr))? };
        Ok(())
    };
    for q in 0..side.qps.len() {
        for k in 0..depth {
            post(q, k)?;
        }
    }
    let mut start = None;
    let mut done = 0u64;
    let deadline = Instant::now() + Duration::from_secs(300);
    while done < iters {
        ensure!(Instant::now() < deadline, "stalled after {done} receives");
        let wcs = take_completions(&side.cq, 64, Duration::from_secs(10))?;
        ensure!(!wcs.is_empty(), "no receive for 10 s after {done}");
        start.get_or_insert_with(Instant::now);
        for wc in wcs {
            check_success(&wc, "receive")?;
            done += 1;
            let id = wc.wr_id as usize;
            post(id / depth, id % depth)?;
        }
    }
    let elapsed = start.map_or(Duration::ZERO, |s| s.elapsed());
    Ok(BwFigures {
        bytes: size as u64 * iters,
        iters,
        elapsed,
        peak_bps: 0.0,
        // Arrivals are not counted per QP here.
        per_qp: (side.qps.len(), 0, 0),
    })
}

/// Half round trips of a SEND ping-pong on the first QP: this side starts when `initiator`.
fn pingpong(
    side: &Side,
    size: usize,
    iters: u64,
    initiator: bool,
) -> anyhow::Result<Vec<Duration>> {
    let qp = &side.qps[0];
    let sge = side.mr.slice(0..size)?;
    let recv = RecvWr {
        wr_id: 0,
        sg_list: SgList::from_slice(&[sge]),
    };
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = SgList::from_slice(&[sge]);
    // Unsignaled sends: only arrivals complete, so every wait is one message.
    send.send_flags = if size <= 64 {
        SendFlags::INLINE
    } else {
        SendFlags::EMPTY
    };
    let post_recv = || -> anyhow::Result<()> {
        // SAFETY: the region outlives the run.
        unsafe { qp.post_receives(std::slice::from_ref(&recv))? };
        Ok(())
    };
    for _ in 0..8 {
        post_recv()?;
    }
    let send_one = || -> anyhow::Result<()> {
        // SAFETY: as above; inline data is read during the call.
        unsafe { qp.post_send(std::slice::from_ref(&send))? };
        Ok(())
    };
    // Busy-polling, as perftest's latency tests do: a sleep and wakeup per message would be
    // what this measures otherwise.
    let wait_one = |what: &str| -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut wc = [WorkCompletion::success(0, 0, WcOpcode::Send, 0)];
        loop {
            if side.cq.poll(&mut wc)? == 1 {
                return check_success(&wc[0], what);
            }
            anyhow::ensure!(Instant::now() < deadline, "{what} lost (10 s)");
        }
    };
    // The first exchange lets both sides reach the loop before timing starts.
    if initiator {
        send_one()?;
        wait_one("warm-up pong")?;
    } else {
        wait_one("warm-up ping")?;
        post_recv()?;
        send_one()?;
    }
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t = Instant::now();
        if initiator {
            send_one()?;
            wait_one("pong")?;
            post_recv()?;
        } else {
            wait_one("ping")?;
            post_recv()?;
            send_one()?;
        }
        samples.push(t.elapsed() / 2);
    }
    Ok(samples)
}

// ---------------------------------------------------------------------------------------
// Raw UDP baselines

/// `UDP_GRO` from `<linux/udp.h>` (not exported by libc for every target).
const UDP_GRO: libc::c_int = 104;

fn set_udp_opt(
    sock: &UdpSocket,
    name: libc::c_int,
    value: usize,
    what: &str,
) -> anyhow::Result<()> {
    let v = libc::c_int::try_from(value)?;
    // SAFETY: setsockopt with a valid int option on an open socket.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            name,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    ensure!(rc == 0, "{what}: {}", std::io::Error::last_os_error());
    Ok(())
}

/// Raw UDP goodput for `total` payload bytes in `mtu`-byte datagrams between two threads;
/// with `gso`, the sender hands the kernel 64 KiB at a time to segment (UDP_SEGMENT) and
/// the receiver takes them coalesced again (UDP_GRO): the most loopback UDP can move.
fn udp_goodput(total: u64, mtu: usize, gso: bool) -> anyhow::Result<f64> {
    let rx = UdpSocket::bind("127.0.0.33:0")?;
    let tx = UdpSocket::bind("127.0.0.34:0")?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let dst: SocketAddr = rx.local_addr()?;
    // Each datagram carries the RoCE headers' worth of extra bytes, like our packets.
    let dgram = mtu + 64;
    if gso {
        set_udp_opt(&tx, libc::UDP_SEGMENT, dgram, "UDP_SEGMENT")?;
        set_udp_opt(&rx, UDP_GRO, 1, "UDP_GRO")?;
    }
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut got = 0u64;
        let start = Instant::now();
        let mut last = start;
        while let Ok(n) = rx.recv(&mut buf) {
            // A coalesced (GRO) read holds several datagrams, each with its headers.
            let segments = n.div_ceil(dgram).max(1);
            got += n.saturating_sub(64 * segments) as u64;
            last = Instant::now();
            if got >= total {
                break;
            }
        }
        (got, last.duration_since(start))
    });
    let datagrams = total.div_ceil(mtu as u64);
    // A GSO send carries at most what the kernel takes (more is EINVAL), which bounds
    // small datagrams before the 64 KiB does.
    let per_send = if gso {
        (65000 / dgram).clamp(1, probe_gso_segments(dst.ip()))
    } else {
        1
    };
    let payload = vec![0x5Au8; dgram * per_send];
    let mut sent = 0u64;
    while sent < datagrams {
        let k = per_send.min((datagrams - sent) as usize);
        // Loopback drops what the receiver cannot take; the receiver counts what arrived.
        let _ = tx.send_to(&payload[..dgram * k], dst);
        sent += k as u64;
    }
    let (got, took) = receiver
        .join()
        .map_err(|_| anyhow!("UDP receiver thread panicked"))?;
    Ok(got as f64 / took.as_secs_f64().max(1e-9))
}

/// Raw UDP ping-pong half round trip, `size`-byte datagrams between two threads.
fn udp_latency(size: usize, iters: u64) -> anyhow::Result<Duration> {
    let a = UdpSocket::bind("127.0.0.35:0")?;
    let b = UdpSocket::bind("127.0.0.36:0")?;
    a.set_read_timeout(Some(Duration::from_secs(1)))?;
    b.set_read_timeout(Some(Duration::from_secs(1)))?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iters {
            let Ok(n) = b.recv(&mut buf) else { break };
            let _ = b.send_to(&buf[..n], aa);
        }
    });
    let msg = vec![1u8; size.max(1)];
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    for _ in 0..iters {
        a.send_to(&msg, ba)?;
        a.recv(&mut buf).context("UDP pong lost")?;
    }
    let half = start.elapsed() / (2 * iters as u32).max(1);
    echo.join()
        .map_err(|_| anyhow!("UDP echo thread panicked"))?;
    Ok(half)
}

/// Raw UDP 8-byte ping-pong half round trip with both threads spinning on non-blocking
/// sockets: no sleep and no wakeup, the floor for any busy-polling datapath.
fn udp_busy_latency(iters: u64) -> anyhow::Result<Duration> {
    let a = UdpSocket::bind("127.0.0.35:0")?;
    let b = UdpSocket::bind("127.0.0.36:0")?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    // Both spinners give up at this deadline, so a lost datagram cannot hang the run.
    let deadline = Instant::now() + Duration::from_secs(10);
    let spin_recv = move |s: &UdpSocket, buf: &mut [u8]| -> Option<usize> {
        loop {
            match s.recv(buf) {
                Ok(n) => return Some(n),
                Err(_) if Instant::now() < deadline => std::hint::spin_loop(),
                Err(_) => return None,
            }
        }
    };
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..iters {
            let Some(n) = spin_recv(&b, &mut buf) else {
                break;
            };
            let _ = b.send_to(&buf[..n], aa);
        }
    });
    let msg = [1u8; 8];
    let mut buf = [0u8; 64];
    let start = Instant::now();
    for _ in 0..iters {
        a.send_to(&msg, ba)?;
        spin_recv(&a, &mut buf).context("UDP pong lost")?;
    }
    let half = start.elapsed() / (2 * iters as u32).max(1);
    echo.join()
        .map_err(|_| anyhow!("UDP echo thread panicked"))?;
    Ok(half)
}

/// What one call of each kind a RoCE datapath over UDP makes costs on this machine (a
/// send, a GSO send of a request with its piggybacked ACK, an empty look, a receive), in
/// nanoseconds. The floor under every latency ratio: a half round trip is at least one
/// send and one receive, and kernels with speculation mitigations charge most of it per
/// call. Timed in runs of [`SYSCALL_RUN`] calls (the clock is read twice per run).
fn udp_syscall_costs(iters: u64) -> anyhow::Result<Vec<(&'static str, f64)>> {
    let tx = UdpSocket::bind("127.0.0.37:0")?;
    let tx_gso = UdpSocket::bind("127.0.0.37:0")?;
    let rx = UdpSocket::bind("127.0.0.38:0")?;
    for s in [&tx, &tx_gso, &rx] {
        s.set_nonblocking(true)?;
    }
    // The receiver is set up as a device's socket is (coalesced reads); the GSO sender
    // cuts every send into 40-byte datagrams, an 8 B WRITE's length.
    set_udp_opt(&rx, UDP_GRO, 1, "UDP_GRO")?;
    set_udp_opt(&tx_gso, libc::UDP_SEGMENT, SMALL_DATAGRAM, "UDP_SEGMENT")?;
    let dst = rx.local_addr()?;
    let datagram = [0x5Au8; 2 * SMALL_DATAGRAM];
    let mut buf = vec![0u8; 65536];
    let runs = iters.div_ceil(SYSCALL_RUN).max(1);
    let drain = |buf: &mut [u8]| {
        // Bounded: a run sends SYSCALL_RUN datagrams at most (two per GSO send).
        for _ in 0..4 * SYSCALL_RUN {
            if rx.recv(buf).is_err() {
                break;
            }
        }
    };
    // Each run's sends are timed, then taken off the receiver untimed (a full receive
    // buffer would turn sends into drops).
    let timed_sends = |sock: &UdpSocket, len: usize, buf: &mut [u8]| -> anyhow::Result<f64> {
        let mut took = Duration::ZERO;
        for _ in 0..runs {
            let start = Instant::now();
            for _ in 0..SYSCALL_RUN {
                sock.send_to(&datagram[..len], dst)
                    .with_context(|| format!("sending {len} bytes on loopback UDP to {dst}"))?;
            }
            took += start.elapsed();
            drain(buf);
        }
        Ok(took.as_nanos() as f64 / (runs * SYSCALL_RUN) as f64)
    };
    let send_one = timed_sends(&tx, SMALL_DATAGRAM, &mut buf)?;
    let gso_two = timed_sends(&tx_gso, 2 * SMALL_DATAGRAM, &mut buf)?;
    drain(&mut buf);
    let start = Instant::now();
    for _ in 0..runs * SYSCALL_RUN {
        ensure!(rx.recv(&mut buf).is_err(), "a datagram nobody sent arrived");
    }
    let empty_recv = start.elapsed().as_nanos() as f64 / (runs * SYSCALL_RUN) as f64;
    let empty_recvmsg = {
        let start = Instant::now();
        for _ in 0..runs * SYSCALL_RUN {
            ensure!(
                recvmsg_with_control(&rx, &mut buf)? == 0,
                "a datagram nobody sent arrived"
            );
        }
        start.elapsed().as_nanos() as f64 / (runs * SYSCALL_RUN) as f64
    };
    let (mut took, mut calls) = (Duration::ZERO, 0u64);
    for _ in 0..runs {
        for _ in 0..SYSCALL_RUN {
            tx.send_to(&datagram[..SMALL_DATAGRAM], dst)
                .with_context(|| format!("sending a datagram on loopback UDP to {dst}"))?;
        }
        // Loopback hands them over one per call; a kernel that coalesced some would take
        // fewer calls, each counted.
        let (mut bytes, want) = (0, SYSCALL_RUN as usize * SMALL_DATAGRAM);
        let start = Instant::now();
        while bytes < want {
            let got = recvmsg_with_control(&rx, &mut buf)?;
            ensure!(got > 0, "a datagram sent on loopback did not arrive");
            bytes += got;
            calls += 1;
        }
        took += start.elapsed();
    }
    let recvmsg_one = took.as_nanos() as f64 / calls.max(1) as f64;
    Ok(vec![
        ("udp_syscall_send_one_40B", send_one),
        ("udp_syscall_gso_send_two_40B", gso_two),
        ("udp_syscall_empty_recv", empty_recv),
        ("udp_syscall_empty_recvmsg", empty_recvmsg),
        ("udp_syscall_recvmsg_one_40B", recvmsg_one),
    ])
}

/// Calls timed together in [`udp_syscall_costs`].
const SYSCALL_RUN: u64 = 32;

/// An 8 B RDMA WRITE's datagram: BTH, RETH, payload and ICRC.
const SMALL_DATAGRAM: usize = 40;

/// One `recvmsg` with room for the sender's address and a control message, as a receiver
/// that reads GRO segment sizes must make; the bytes received, 0 when nothing waited.
fn recvmsg_with_control(sock: &UdpSocket, buf: &mut [u8]) -> anyhow::Result<usize> {
    let mut addr = std::mem::MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` refers to a live local buffer of the stated length.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    if n >= 0 {
        return Ok(n as usize);
    }
    let err = std::io::Error::last_os_error();
    if err.kind() == ErrorKind::WouldBlock {
        return Ok(0);
    }
    Err(err).context("recvmsg on a loopback UDP socket")
}

/// `softroce perf --raw-udp`: loopback UDP's limits, one `name value unit` line each.
fn raw_udp_limits(args: &PerfArgs) -> anyhow::Result<()> {
    let total = (args.size as u64 * args.iters).max(1 << 20);
    let lat = udp_busy_latency(args.lat_iters)?;
    println!(
        "udp_busy_pingpong_8B_half_rtt {:.2} us",
        lat.as_secs_f64() * 1e6
    );
    for (name, ns) in udp_syscall_costs(args.lat_iters)? {
        println!("{name} {ns:.0} ns");
    }
    let per = udp_goodput(total, args.mtu, false)?;
    println!(
        "udp_stream_{}B_per_datagram {:.1} MB/s",
        args.mtu,
        per / 1e6
    );
    let gso = udp_goodput(total, args.mtu, true)?;
    println!("udp_stream_{}B_gso_gro {:.1} MB/s", args.mtu, gso / 1e6);
    // The message-rate limit: 8-byte payloads (with the streams' 64 bytes standing for the
    // headers) streamed with GSO and GRO, a hundred per latency round trip asked for.
    let small = SMALL_PAYLOAD as u64 * args.lat_iters.saturating_mul(100).max(10_000);
    let rate = udp_goodput(small, SMALL_PAYLOAD, true)? / SMALL_PAYLOAD as f64;
    println!(
        "udp_stream_{SMALL_PAYLOAD}B_gso_gro_rate {:.2} Mdgram/s",
        rate / 1e6
    );
    Ok(())
}

/// The payload of the raw UDP message-rate limit: an 8 B message's.
const SMALL_PAYLOAD: usize = 8;

// ---------------------------------------------------------------------------------------
// In-process report

fn report(args: &PerfArgs) -> anyhow::Result<()> {
    let mtu = check_args(args)?;
    let a = Context::open_emulated("perf0", args.a, 0)?;
    let b = Context::open_emulated("perf1", args.b, 0)?;
    // The two sides connect directly: both are in this process.
    let (tx_a, rx_a) = std::sync::mpsc::channel();
    let (tx_b, rx_b) = std::sync::mpsc::channel();
    let mut remote = None;
    let sides = std::thread::scope(|s| {
        let hb = s.spawn(move || {
            open_side(
                b,
                args.qps,
                args.depth,
                args.size,
                mtu,
                args.qp_timeout(),
                |local, addr, rkey| {
                    tx_b.send((local.to_vec(), addr, rkey))
                        .map_err(|_| anyhow!("peer gone"))?;
                    let (remote, _, _) = rx_a.recv().map_err(|_| anyhow!("peer gone"))?;
                    Ok(remote)
                },
            )
        });
        let sa = open_side(
            a,
            args.qps,
            args.depth,
            args.size,
            mtu,
            args.qp_timeout(),
            |local, addr, rkey| {
                tx_a.send((local.to_vec(), addr, rkey))
                    .map_err(|_| anyhow!("peer gone"))?;
                let (remote_eps, raddr, rrkey) = rx_b.recv().map_err(|_| anyhow!("peer gone"))?;
                remote = Some(Remote {
                    addr: raddr,
                    rkey: rrkey,
                });
                Ok(remote_eps)
            },
        );
        let sb = hb.join().map_err(|_| anyhow!("side B panicked"))?;
        Ok::<_, anyhow::Error>((sa?, sb?))
    })?;
    let (sa, sb) = sides;
    let remote = remote.context("peer region unknown")?;

    let write = requester_bw(
        &sa,
        WrOpcode::RdmaWrite,
        args.size,
        args.iters,
        args.depth,
        remote,
    )?;
    let small = requester_bw(
        &sa,
        WrOpcode::RdmaWrite,
        8,
        args.iters.max(2000),
        args.depth,
        remote,
    )?;
    let lat = in_process_latency(&sa, &sb, args.lat_iters)?;
    let udp = udp_goodput(write.bytes, args.mtu, false)?;
    let udp_gso = udp_goodput(write.bytes, args.mtu, true)?;
    let udp_lat = udp_latency(8, args.lat_iters)?;

    println!(
        "{:<40} {:>14} {:>14} {:>8}",
        "test", "softroce", "raw UDP", "ratio"
    );
    let label = format!(
        "RC WRITE {} B, MTU {}, depth {}",
        args.size, args.mtu, args.depth
    );
    for (what, base) in [("", udp), (" vs UDP GSO", udp_gso)] {
        println!(
            "{:<40} {:>9.1} MB/s {:>9.1} MB/s {:>8.3}",
            format!("{label}{what}"),
            write.avg_bps() / 1e6,
            base / 1e6,
            write.avg_bps() / base
        );
    }
    println!(
        "{:<40} {:>11.1} us {:>11.1} us {:>8.3}",
        "RC SEND 8 B ping-pong, half RTT",
        lat.as_secs_f64() * 1e6,
        udp_lat.as_secs_f64() * 1e6,
        lat.as_secs_f64() / udp_lat.as_secs_f64()
    );
    println!(
        "{:<40} {:>9.0} msg/s",
        "RC WRITE 8 B message rate",
        small.msg_rate()
    );
    drop((sa, sb));
    Ok(())
}

/// 8-byte SEND ping-pong between the two in-process sides, from one thread.
fn in_process_latency(a: &Side, b: &Side, iters: u64) -> anyhow::Result<Duration> {
    let setup = |s: &Side| -> anyhow::Result<(SendWr, RecvWr)> {
        let sge = s.mr.slice(0..8)?;
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = SgList::from_slice(&[sge]);
        wr.send_flags = SendFlags::INLINE;
        let rw = RecvWr {
            wr_id: 0,
            sg_list: SgList::from_slice(&[sge]),
        };
        for _ in 0..8 {
            // SAFETY: the region outlives the run.
            unsafe { s.qps[0].post_receives(std::slice::from_ref(&rw))? };
        }
        Ok((wr, rw))
    };
    let (wa, ra) = setup(a)?;
    let (wb, rb) = setup(b)?;
    let hop = |from: &Side, wr: &SendWr, to: &Side, rw: &RecvWr| -> anyhow::Result<()> {
        // SAFETY: the regions outlive the run; inline data is read during the call.
        unsafe { from.qps[0].post_send(std::slice::from_ref(wr))? };
        let wcs = to.cq.poll_wait(1, Duration::from_secs(5))?;
        check_success(wcs.first().context("message lost (5 s)")?, "receive")?;
        // SAFETY: as above.
        unsafe { to.qps[0].post_receives(std::slice::from_ref(rw))? };
        Ok(())
    };
    let start = Instant::now();
    for _ in 0..iters {
        hop(a, &wa, b, &rb)?;
        hop(b, &wb, a, &ra)?;
    }
    Ok(start.elapsed() / (2 * iters as u32).max(1))
}

// ---------------------------------------------------------------------------------------
// Two processes

fn encode_hello(eps: &[QueuePairEndpoint], addr: u64, rkey: u32) -> String {
    let mut s = format!("HELLO {addr:x} {rkey:x}");
    for ep in eps {
        s.push_str(&format!(" {ep}"));
    }
    s
}

fn decode_hello(line: &str) -> anyhow::Result<(Vec<QueuePairEndpoint>, Remote)> {
    let mut w = line.split_whitespace();
    ensure!(w.next() == Some("HELLO"), "expected HELLO, got {line:?}");
    let addr =
        u64::from_str_radix(w.next().context("HELLO lacks the address")?, 16).context("address")?;
    let rkey =
        u32::from_str_radix(w.next().context("HELLO lacks the rkey")?, 16).context("rkey")?;
    let eps = w
        .map(|ep| ep.parse().map_err(|e: String| anyhow!(e)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((eps, Remote { addr, rkey }))
}

fn two_process(args: &PerfArgs, mode: Mode) -> anyhow::Result<()> {
    check_args(args)?;
    let ctx = Context::open_emulated("softroce0", args.bind, ROCE_V2_PORT)
        .with_context(|| format!("emulated device on {}", args.bind))?;
    let result = two_process_on(args, mode, ctx.clone());
    if args.counters {
        // Also after a failure: the counters are what tells a drop from a timeout.
        println!("counters: {}", ctx.counters_line().unwrap_or_default());
    }
    result
}

fn two_process_on(args: &PerfArgs, mode: Mode, ctx: Context) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout);
    let stream = match &args.server {
        Some(host) => crate::sidechannel::connect_retrying(host, args.port, timeout)?,
        None => {
            let l = crate::sidechannel::listen(args.port)?;
            crate::sidechannel::accept_until(&l, Instant::now() + timeout, args.timeout)?
        }
    };
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let is_client = args.server.is_some();
    // The client's parameters rule; the server adopts them (and says so).
    let mut p = Params {
        mode,
        size: if mode == Mode::Atomic { 8 } else { args.size },
        iters: args.iters,
        qps: args.qps,
        depth: args.depth,
        mtu: args.mtu,
    };
    if is_client {
        writeln!(writer, "{}", p.line())?;
    } else {
        let line = read_line(&mut reader, timeout)?;
        let theirs = Params::parse(&line)?;
        ensure!(
            theirs.mode == mode,
            "the client runs {:?}, this server {mode:?}",
            theirs.mode
        );
        p = theirs;
    }
    let mode = p.mode;
    let size = p.size;
    ensure!(size >= 1, "-s must be at least 1");
    let mtu =
        Mtu::from_bytes(p.mtu).with_context(|| format!("MTU {} is not an IBTA MTU", p.mtu))?;
    let mut remote = None;
    let side = open_side(
        ctx,
        p.qps,
        p.depth,
        size,
        mtu,
        args.qp_timeout(),
        |local, addr, rkey| {
            writeln!(writer, "{}", encode_hello(local, addr, rkey))?;
            let (eps, r) = decode_hello(&read_line(&mut reader, timeout)?)?;
            remote = Some(r);
            Ok(eps)
        },
    )?;
    let remote = remote.context("no peer region")?;
    // Both sides connected before the client starts.
    let mut sync = |what: &str| -> anyhow::Result<()> {
        writeln!(writer, "{what}")?;
        let l = read_line(&mut reader, timeout)?;
        ensure!(l == what, "peer sent {l:?}, expected {what}");
        Ok(())
    };
    sync("READY")?;
    println!(
        "# softroce perf {mode:?}: {} on {}, {} QP(s), depth {}, MTU {}",
        if is_client { "client" } else { "server" },
        side.ctx.name(),
        p.qps,
        p.depth,
        p.mtu
    );
    println!(
        "# {} RC QP(s) created and connected in {:.2} s",
        p.qps,
        side.setup.as_secs_f64()
    );
    match mode {
        Mode::Lat => {
            let mut samples = pingpong(&side, size, p.iters, is_client)?;
            sync("DONE")?;
            if is_client {
                print_lat(size, &mut samples, args.baseline.then_some(p.iters))?;
            }
        }
        Mode::Send if !is_client => {
            let f = receiver_bw(&side, size, p.iters, p.depth)?;
            sync("DONE")?;
            print_bw(size, &f, None);
        }
        _ if !is_client => {
            // A passive target: the device serves WRITE/READ/atomics without this thread.
            sync("DONE")?;
        }
        _ => {
            let op = match mode {
                Mode::Write => WrOpcode::RdmaWrite,
                Mode::Read => WrOpcode::RdmaRead,
                Mode::Atomic => WrOpcode::AtomicFetchAndAdd,
                _ => WrOpcode::Send,
            };
            let f = requester_bw(&side, op, size, p.iters, p.depth, remote)?;
            sync("DONE")?;
            let base = if args.baseline && mode != Mode::Atomic {
                Some((
                    udp_goodput(f.bytes, p.mtu.min(size), false)?,
                    udp_goodput(f.bytes, p.mtu.min(size), true)?,
                ))
            } else {
                None
            };
            print_bw(size, &f, base);
        }
    }
    Ok(())
}

/// The parameters both sides run with (the client's).
struct Params {
    mode: Mode,
    size: usize,
    iters: u64,
    qps: usize,
    depth: usize,
    mtu: usize,
}

impl Params {
    fn line(&self) -> String {
        format!(
            "PARAMS {:?} {} {} {} {} {}",
            self.mode, self.size, self.iters, self.qps, self.depth, self.mtu
        )
    }

    fn parse(line: &str) -> anyhow::Result<Self> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [_, mode, size, iters, qps, depth, mtu] = w[..] else {
            bail!("expected PARAMS mode size iters qps depth mtu, got {line:?}");
        };
        let mode = [Mode::Write, Mode::Read, Mode::Send, Mode::Atomic, Mode::Lat]
            .into_iter()
            .find(|m| format!("{m:?}") == mode)
            .with_context(|| format!("unknown mode {mode:?}"))?;
        let p = Self {
            mode,
            size: size.parse().context("size")?,
            iters: iters.parse().context("iterations")?,
            qps: qps.parse().context("QPs")?,
            depth: depth.parse().context("depth")?,
            mtu: mtu.parse().context("MTU")?,
        };
        ensure!(
            (1..=MAX_QPS as usize).contains(&p.qps)
                && (1..=MAX_QP_WR as usize - 4).contains(&p.depth)
                && (1..=MAX_ITERS).contains(&p.iters)
                && (1..=MAX_MSG_SZ as usize).contains(&p.size),
            "client parameters out of range: {line:?}"
        );
        let iters = if p.mode == Mode::Lat {
            u64::MAX
        } else {
            p.iters
        };
        check_shape(p.qps, p.depth, iters)
            .map_err(|e| anyhow!("client parameters {line:?}: {e}"))?;
        Ok(p)
    }
}

/// One line of the side channel; the peer closing it is an error that says so.
fn read_line(r: &mut BufReader<std::net::TcpStream>, timeout: Duration) -> anyhow::Result<String> {
    match crate::sidechannel::read_line(r, timeout) {
        Ok(Some(l)) => Ok(l),
        Ok(None) => bail!("the peer closed the side channel (see its output)"),
        // Say which limit ran out rather than EAGAIN.
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            bail!(
                "the peer sent no whole line on the side channel within --timeout {} s",
                timeout.as_secs()
            )
        }
        Err(e) => Err(e).context("reading the side channel"),
    }
}

fn print_bw(size: usize, f: &BwFigures, base: Option<(f64, f64)>) {
    println!(
        " {:<10} {:<12} {:<18} {:<20} {:<14}",
        "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]"
    );
    // No window may have been timed apart from posting (a run shorter than one window, or
    // one whose messages all fit in flight at once): the whole run is a span too.
    let peak = f.peak_bps.max(f.avg_bps());
    println!(
        " {:<10} {:<12} {:<18.2} {:<20.2} {:<14.6}",
        size,
        f.iters,
        peak / 1e6,
        f.avg_bps() / 1e6,
        f.msg_rate() / 1e6
    );
    let (nqp, fewest, most) = f.per_qp;
    if nqp > 1 {
        let spread = if most > 0 {
            format!(", {fewest} to {most} messages per QP")
        } else {
            String::new()
        };
        println!(
            " per QP ({nqp}): {:.2} KB/s, {:.1} msg/s average{spread}",
            f.avg_bps() / 1e3 / nqp as f64,
            f.msg_rate() / nqp as f64
        );
    }
    if let Some((udp, gso)) = base {
        println!(
            " raw UDP in this run: {:.2} MB/s per datagram (ratio {:.3}), {:.2} MB/s GSO (ratio {:.3})",
            udp / 1e6,
            f.avg_bps() / udp,
            gso / 1e6,
            f.avg_bps() / gso
        );
    }
}

fn print_lat(size: usize, samples: &mut [Duration], baseline: Option<u64>) -> anyhow::Result<()> {
    ensure!(!samples.is_empty(), "no latency samples");
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    let avg = samples.iter().map(|d| us(*d)).sum::<f64>() / n as f64;
    let var = samples.iter().map(|d| (us(*d) - avg).powi(2)).sum::<f64>() / n as f64;
    let pct = |p: f64| samples[((n as f64 * p) as usize).min(n - 1)];
    println!(
        " {:<8} {:<12} {:<12} {:<12} {:<16} {:<12} {:<14} {:<22} {:<22}",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]"
    );
    println!(
        " {:<8} {:<12} {:<12.2} {:<12.2} {:<16.2} {:<12.2} {:<14.2} {:<22.2} {:<22.2}",
        size,
        n,
        us(samples[0]),
        us(samples[n - 1]),
        us(samples[n / 2]),
        avg,
        var.sqrt(),
        us(pct(0.99)),
        us(pct(0.999))
    );
    if let Some(iters) = baseline {
        let udp = udp_latency(size, iters)?;
        println!(
            " raw UDP ping-pong in this run: {:.2} usec half RTT (ratio of typical {:.3})",
            us(udp),
            us(samples[n / 2]) / us(udp)
        );
    }
    Ok(())
}
