//! `softroce pingpong`: rdma-core's `ibv_{rc,uc,ud,srq}_pingpong`, on an emulated device,
//! speaking the same TCP side channel (port 18515, 52-byte `LID:QPN:PSN:GID` messages), so
//! either side can be the real tool on rdma_rxe or a NIC.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use clap::{Args, ValueEnum};
use softroce_emu::core::{QpCap, SendWr, UdTarget};
use softroce_verbs::{Context, Gid, Mtu, QpType, QueuePairEndpoint, WcOpcode, WcStatus, WrOpcode};
use softroce_wire::ROCE_V2_PORT;

use crate::limits::{self, MAX_ITERS, MAX_MSG_SZ, MAX_QP_WR, MAX_TIMEOUT_SECS, ranged};

/// Transport of `softroce pingpong`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// Reliable connection (ibv_rc_pingpong).
    Rc,
    /// Unreliable connection (ibv_uc_pingpong).
    Uc,
    /// Unreliable datagram (ibv_ud_pingpong).
    Ud,
    /// Several RC QPs receiving from one shared receive queue (ibv_srq_pingpong).
    Srq,
}

/// Arguments of `softroce pingpong`.
#[derive(Debug, Args)]
pub(crate) struct PingpongArgs {
    /// Transport.
    #[arg(long = "type", value_enum, default_value = "rc")]
    transport: Transport,
    /// Address of the emulated device (its RoCEv2 GID is made from it).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// UDP port of the device (both sides use the same one: the side channel does not
    /// carry it).
    #[arg(long, default_value_t = ROCE_V2_PORT, value_parser = ranged::<u16>(1..=65535))]
    udp_port: u16,
    /// TCP port of the side channel. A server on port 0 listens on a free port and says
    /// which in the line `listening on TCP port N`, after its `local address` line (as
    /// rdma-core's pingpongs print that first).
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size, 0 to 8 MiB (the device's max_msg_sz); UD: at most the port's active
    /// MTU (4096 on loopback). Default: 4096, or 2048 with `--type ud` (as
    /// ibv_ud_pingpong's, so the two pair with their defaults).
    #[arg(short = 's', long, value_parser = ranged::<usize>(0..=MAX_MSG_SZ))]
    size: Option<usize>,
    /// Iterations (1 to 10^9).
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = ranged::<u64>(1..=MAX_ITERS))]
    iters: u64,
    /// Receive queue depth (1 to 16384, the device's max_qp_wr).
    #[arg(short = 'r', long, default_value_t = 500, value_parser = ranged::<u32>(1..=MAX_QP_WR))]
    rx_depth: u32,
    /// Number of RC QPs sharing the receive queue, 1 to 255 (`--type srq` only; both sides
    /// must agree).
    #[arg(short = 'q', long, default_value_t = 16, value_parser = ranged::<usize>(1..=SRQ_WIRE_MSGS as u64 - 1))]
    num_qp: usize,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024, value_parser = limits::mtu)]
    mtu: usize,
    /// GID index to use, 0 to 255 (accepted for command-line compatibility; softroce uses
    /// the GID of its address).
    #[arg(short = 'g', long, value_parser = ranged::<usize>(0..=255))]
    gid_index: Option<usize>,
    /// Fill sent messages with a pattern and verify every received message.
    #[arg(long)]
    check: bool,
    /// For a peer that is rdma-core's ibv_{rc,uc,ud}_pingpong, which sends from the buffer
    /// it receives into: fill sent messages with a pattern and verify that every received
    /// message is the one this side sent before (a client's first message is its 0x7b fill).
    #[arg(long, conflicts_with = "check")]
    check_echo: bool,
    /// Inject seeded faults into this side's sent datagrams, e.g.
    /// `drop=0.2,dup=0.05,reorder=0.05,corrupt=0.01,delay=MS,seed=N` (default: `SOFTROCE_FAULTS`).
    #[arg(long)]
    faults: Option<String>,
    /// Local ACK timeout exponent of the RC QP, 0 to 31: 4.096 us * 2^N. Default:
    /// rdma-core's 14 (67 ms), or 10 (4 ms) when faults are injected.
    #[arg(long = "qp-timeout", value_parser = ranged::<u8>(0..=31))]
    qp_timeout_exp: Option<u8>,
    /// Give up after this many seconds (1 to 86400), waiting for a client included.
    #[arg(long, default_value_t = 60, value_parser = ranged::<u64>(1..=MAX_TIMEOUT_SECS))]
    timeout: u64,
    /// Print every counter of this side's device at the end (`counters: name=value …`,
    /// rxe's hw_counters names first), also when the run fails.
    #[arg(long)]
    counters: bool,
    /// Server to connect to; without it, wait for a client.
    server: Option<String>,
}

const MSG_LEN: usize = 52;
/// ibv_srq_pingpong (rdma-core v44) always exchanges this many address messages, whatever
/// its `-q`: one per QP, then zero-filled ones (`0000:000000:000000:000…0`).
const SRQ_WIRE_MSGS: usize = 256;
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The low bits of a work request ID say whether it is a send or a receive; SRQ receives
/// carry their buffer slot above them.
const KIND_MASK: u64 = 3;
const KIND_BITS: u32 = 2;
const GRH: usize = 40;

fn encode(ep: &QueuePairEndpoint) -> [u8; MSG_LEN] {
    let gid: String = ep
        .gid
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let text = format!("{:04x}:{:06x}:{:06x}:{}", 0, ep.qpn, ep.psn, gid);
    let mut out = [0u8; MSG_LEN];
    out[..text.len().min(MSG_LEN - 1)]
        .copy_from_slice(&text.as_bytes()[..text.len().min(MSG_LEN - 1)]);
    out
}

fn decode(msg: &[u8], udp_port: u16) -> anyhow::Result<QueuePairEndpoint> {
    let text = std::str::from_utf8(msg.split(|&b| b == 0).next().unwrap_or_default())
        .context("peer message is not text")?;
    let parts: Vec<&str> = text.split(':').collect();
    ensure!(
        parts.len() == 4 && parts[3].len() == 32,
        "peer message {text:?} is not LID:QPN:PSN:GID"
    );
    let qpn = u32::from_str_radix(parts[1], 16).context("QPN")?;
    let psn = u32::from_str_radix(parts[2], 16).context("PSN")?;
    let gid = Gid::from_hex(parts[3]).with_context(|| format!("GID {:?}", parts[3]))?;
    Ok(QueuePairEndpoint {
        qpn,
        psn,
        gid,
        udp_port,
    })
}

/// The peer's endpoints for our `wanted` QPs out of its `wire` messages; the peer must offer
/// exactly as many QPs as we have (`-q` on both sides).
fn decode_all(wire: &[u8], wanted: usize, udp_port: u16) -> anyhow::Result<Vec<QueuePairEndpoint>> {
    let mut remotes = Vec::with_capacity(wanted);
    for (i, msg) in wire.chunks_exact(MSG_LEN).enumerate() {
        let ep = decode(msg, udp_port).with_context(|| format!("peer address message {i}"))?;
        if i < wanted {
            ensure!(
                ep.qpn != 0,
                "the peer offers only {i} QPs, this side has {wanted}: use the same -q on both sides"
            );
            remotes.push(ep);
        } else {
            ensure!(
                ep.qpn == 0,
                "the peer offers more QPs than this side's {wanted}: use the same -q on both sides"
            );
        }
    }
    Ok(remotes)
}

impl PingpongArgs {
    /// What clap cannot check one argument at a time.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.server.is_some() && self.port == 0 {
            return Err(
                "a client needs the server's TCP port: -p 0 only makes a server pick one".into(),
            );
        }
        Ok(())
    }

    /// The RC QP's local ACK timeout exponent (see `--qp-timeout`).
    fn qp_timeout(&self) -> u8 {
        let faulty = self.faults.is_some() || limits::faults_from_env();
        self.qp_timeout_exp
            .unwrap_or_else(|| limits::default_qp_timeout(faulty))
    }
}

pub(crate) fn run(args: &PingpongArgs) -> ExitCode {
    match pingpong(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce pingpong: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn pattern(iter: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(7).wrapping_add(iter) as u8)
        .collect()
}

/// Message `k` of the QP at `qp_index` (SRQ): differs between QPs, so a message delivered
/// to the wrong QP is caught too (an odd multiplier keeps 255 QPs apart).
fn srq_pattern(qp_index: usize, k: u64, len: usize) -> Vec<u8> {
    pattern(k.wrapping_add((qp_index as u64).wrapping_mul(97)), len)
}

impl PingpongArgs {
    /// `-s`, or the default of rdma-core's pingpong of the same type.
    fn msg_size(&self) -> usize {
        self.size.unwrap_or(if self.transport == Transport::Ud {
            2048
        } else {
            4096
        })
    }
}

fn print_address(which: &str, ep: &QueuePairEndpoint) {
    println!(
        "  {which} address: LID 0x0000, QPN {:#08x}, PSN {:#08x}, GID {}",
        ep.qpn, ep.psn, ep.gid
    );
}

fn pingpong(args: &PingpongArgs) -> anyhow::Result<()> {
    let mtu = Mtu::from_bytes(args.mtu)
        .with_context(|| format!("--mtu {} is not 256, 512, 1024, 2048 or 4096", args.mtu))?;
    let mut cfg = softroce_emu::driver::DeviceConfig::new("softroce0", args.bind);
    cfg.hca.udp_port = args.udp_port;
    if args.faults.is_some() {
        cfg.faults.clone_from(&args.faults);
    }
    let ctx = Context::open_emulated_with(cfg).context("starting the device")?;
    let result = run_on(args, &ctx, mtu);
    if args.counters {
        // Also after a failure: the counters are what tells a drop from a timeout.
        println!("counters: {}", ctx.counters_line().unwrap_or_default());
    }
    result
}

fn run_on(args: &PingpongArgs, ctx: &Context, mtu: Mtu) -> anyhow::Result<()> {
    if args.transport == Transport::Ud {
        // IBTA: a UD message is one packet, so at most the port's active MTU; refused here
        // as ibv_ud_pingpong does, not by a LOC_LEN_ERR after the peer connected.
        let port_mtu = ctx.query_port(1)?.active_mtu.bytes();
        ensure!(
            args.msg_size() <= port_mtu,
            "Requested size larger than port MTU ({port_mtu}): -s {} with --type ud",
            args.msg_size()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let secs = match args.transport {
        Transport::Srq => srq_pingpong(args, ctx, mtu, deadline)?,
        _ => single_qp_pingpong(args, ctx, mtu, deadline)?,
    };
    let bytes = args.msg_size() as f64 * args.iters as f64 * 2.0;
    println!(
        "{} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as u64,
        bytes * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        args.iters,
        secs * 1e6 / args.iters as f64
    );
    let Some(c) = ctx.counters() else {
        return Ok(());
    };
    println!(
        "retransmission counters: retransmitted_pkts={} completer_retry_err={} rcvd_seq_err={} duplicate_request={} out_of_seq_request={}",
        c.retransmitted_pkts,
        c.completer_retry_err,
        c.rcvd_seq_err,
        c.duplicate_request,
        c.out_of_seq_request
    );
    if let Some(f) = ctx.fault_counters() {
        println!(
            "{f} drop_icrc={}",
            c.drops_of(softroce_emu::core::DropReason::IcrcMismatch)
        );
    }
    Ok(())
}

/// Polling takes the device lock; after a run of empty polls, back off so the engine thread
/// (which may share the core) can deliver what we are waiting for.
fn back_off(idle: &mut u32) {
    *idle += 1;
    if *idle > 64 {
        std::thread::sleep(Duration::from_micros(20));
    } else {
        std::thread::yield_now();
    }
}

/// The peer may still be waiting for the acknowledgement of its last message (lost on the
/// way): keep the QPs answering retransmissions for a few ACK timeouts before leaving.
fn linger(args: &PingpongArgs) {
    let ack_timeout = Duration::from_nanos(4096u64 << args.qp_timeout().min(31));
    std::thread::sleep((ack_timeout * 8).clamp(Duration::from_millis(100), Duration::from_secs(2)));
}

/// What received message `k` must hold: with `--check` the peer's `k`-th pattern; with
/// `--check-echo` our own previous message, which rdma-core's pingpong sends back from its
/// receive buffer (a client's first message is the buffer's initial 0x7b fill).
fn expected_message(args: &PingpongArgs, client: bool, k: u64) -> (Vec<u8>, &'static str) {
    if !args.check_echo {
        (pattern(k, args.msg_size()), "what the peer sent")
    } else if client {
        (
            pattern(k, args.msg_size()),
            "the echo of our message of the same number",
        )
    } else if k == 0 {
        (vec![0x7b; args.msg_size()], "rdma-core's initial 0x7b fill")
    } else {
        (
            pattern(k - 1, args.msg_size()),
            "the echo of our previous message",
        )
    }
}

/// ibv_{rc,uc,ud}_pingpong: one QP, one message in flight each way. Returns the seconds the
/// exchange took.
fn single_qp_pingpong(
    args: &PingpongArgs,
    ctx: &Context,
    mtu: Mtu,
    deadline: Instant,
) -> anyhow::Result<f64> {
    let ud = args.transport == Transport::Ud;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(args.rx_depth + 1, None)?;
    let buf_len = args.msg_size() + if ud { GRH } else { 0 };
    let send_mr = pd.allocate(buf_len.max(1))?;
    let recv_mr = pd.allocate(buf_len.max(1))?;
    let qp_type = match args.transport {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Ud => QpType::Ud,
        Transport::Srq => bail!("SRQ pingpong has its own loop"),
    };
    let cap = QpCap::new(1, args.rx_depth);
    let prepared = pd
        .create_qp(&cq, &cq, qp_type)
        .caps(cap)
        .mtu(mtu)
        .reliability(args.qp_timeout(), 7, 7)
        .build()?;
    let local = prepared.endpoint();
    print_address("local ", &local);
    // Receives go up before the addresses are exchanged, as rdma-core's pingpong does: the
    // peer may send the moment it knows ours, and UC has no retransmission.
    let recv_sge = recv_mr.slice(0..buf_len.max(1))?;
    let mut routs = 0;
    for _ in 0..args.rx_depth {
        // SAFETY: `recv_mr` lives until the end of this function, after the last poll.
        unsafe { prepared.post_receive(&[recv_sge], RECV_WRID)? };
        routs += 1;
    }
    let (qp, remote) = exchange(args, &[local], 1, deadline, |remotes| {
        let remote = remotes[0];
        print_address("remote", &remote);
        Ok((prepared.handshake(remote)?, remote))
    })?;
    let target: Option<UdTarget> = if ud {
        Some(qp.ud_target(remote, 0x1111_1111)?)
    } else {
        None
    };
    let client = args.server.is_some();
    let send = |iter: u64| -> anyhow::Result<()> {
        let off = if ud { GRH } else { 0 };
        if args.check || args.check_echo {
            send_mr.write(off, &pattern(iter, args.msg_size()))?;
        }
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send);
        wr.sg_list = vec![send_mr.slice(off..off + args.msg_size())?].into();
        wr.ud = target;
        // SAFETY: `send_mr` lives until the end of the function, after the last poll.
        unsafe { qp.post_send(&[wr])? };
        Ok(())
    };
    let mut pending = RECV_WRID;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let start = Instant::now();
    if client {
        send(0)?;
        pending |= SEND_WRID;
    }
    let mut wcs = [softroce_verbs::WorkCompletion::success(0, 0, WcOpcode::Send, 0); 16];
    let mut idle = 0u32;
    // Our last message's ACK may be lost after the peer already left (rdma-core's tools exit
    // the moment they are done), and then no retransmission can complete it. With every
    // receive in, wait a few ACK timeouts for it, then finish: for a client the peer's last
    // answer proves delivery; for a server the peer's own exit status tells.
    let mut last_ack_grace: Option<Instant> = None;
    while rcnt < args.iters || scnt < args.iters {
        if Instant::now() > deadline {
            bail!("timed out after {scnt} sends and {rcnt} receives");
        }
        if rcnt == args.iters && scnt + 1 == args.iters {
            let grace = Duration::from_nanos(4096u64 << args.qp_timeout().min(31)) * 4;
            let until = *last_ack_grace.get_or_insert_with(|| Instant::now() + grace);
            if Instant::now() > until {
                println!(
                    "note: the last send's ACK never came; {}",
                    if client {
                        "the peer answered it, so it was delivered"
                    } else {
                        "the peer has left (its exit status tells whether the message arrived)"
                    }
                );
                break;
            }
        }
        let n = cq.poll(&mut wcs)?;
        if n == 0 {
            back_off(&mut idle);
            continue;
        }
        idle = 0;
        for wc in &wcs[..n] {
            ensure!(
                wc.status == WcStatus::Success,
                "{} for wr_id {} (vendor_err {:#x})",
                wc.status,
                wc.wr_id,
                wc.vendor_err
            );
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    if args.check || args.check_echo {
                        let off = if ud { GRH } else { 0 };
                        let mut got = vec![0u8; args.msg_size()];
                        recv_mr.read(off, &mut got)?;
                        let (expected, what) = expected_message(args, client, rcnt);
                        if let Some(at) = got.iter().zip(&expected).position(|(a, b)| a != b) {
                            bail!(
                                "message {rcnt} differs from {what} at byte {at}: {:#04x}, expected {:#04x}",
                                got[at],
                                expected[at]
                            );
                        }
                    }
                    rcnt += 1;
                    routs -= 1;
                    if routs <= 1 {
                        let refill = args.rx_depth - routs;
                        for _ in 0..refill {
                            // SAFETY: as above.
                            unsafe { qp.post_receive(&[recv_sge], RECV_WRID)? };
                        }
                        routs += refill;
                    }
                }
                other => bail!("completion for unknown wr_id {other}"),
            }
            pending &= !wc.wr_id;
            if scnt < args.iters && pending == 0 {
                send(scnt)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    linger(args);
    Ok(secs)
}

/// ibv_srq_pingpong: `-q` RC QPs whose receives all come from one shared receive queue,
/// each QP with one message in flight each way; `-n` counts messages over all QPs (rdma-core
/// stops posting once that many sends completed, so a few more may cross). Returns the
/// seconds the exchange took.
fn srq_pingpong(
    args: &PingpongArgs,
    ctx: &Context,
    mtu: Mtu,
    deadline: Instant,
) -> anyhow::Result<f64> {
    let num_qp = args.num_qp;
    ensure!(
        !args.check_echo,
        "--check-echo needs a peer with a buffer per QP; ibv_srq_pingpong shares one among its QPs"
    );
    ensure!(
        (1..SRQ_WIRE_MSGS).contains(&num_qp),
        "-q {num_qp}: ibv_srq_pingpong takes 1 to {} QPs",
        SRQ_WIRE_MSGS - 1
    );
    let rx_depth = args.rx_depth as usize;
    ensure!(
        num_qp <= rx_depth,
        "--rx-depth {rx_depth} is too small for {num_qp} QPs: each QP needs at least one receive"
    );
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(args.rx_depth + num_qp as u32, None)?;
    let srq = pd.create_srq(args.rx_depth, 1)?;
    // With --check every posted receive gets its own slot (messages of different QPs land
    // at the same time) and every QP its own send buffer; without it all share one buffer,
    // as in rdma-core.
    let stride = args.msg_size().max(1);
    let slots = if args.check { rx_depth } else { 1 };
    let recv_mr = pd.allocate(slots * stride)?;
    let send_mr = pd.allocate(if args.check { num_qp } else { 1 } * stride)?;
    // Receives come from the SRQ.
    let cap = QpCap {
        max_recv_sge: 0,
        ..QpCap::new(1, 0)
    };
    let mut prepared = Vec::with_capacity(num_qp);
    for _ in 0..num_qp {
        prepared.push(
            pd.create_qp(&cq, &cq, QpType::Rc)
                .srq(&srq)
                .caps(cap)
                .mtu(mtu)
                .reliability(args.qp_timeout(), 7, 7)
                .build()?,
        );
    }
    let mut free_slots: Vec<usize> = (0..slots).rev().collect();
    let post_recv = |free_slots: &mut Vec<usize>| -> anyhow::Result<()> {
        let slot = if args.check {
            free_slots
                .pop()
                .context("no free receive slot: more receives outstanding than --rx-depth")?
        } else {
            0
        };
        let sge = recv_mr.slice(slot * stride..slot * stride + args.msg_size())?;
        // SAFETY: `recv_mr` lives until the end of this function, after the last poll.
        unsafe { srq.post_receive(&[sge], ((slot as u64) << KIND_BITS) | RECV_WRID)? };
        Ok(())
    };
    // Like rdma-core, receives are ready before the peer learns the QPs.
    for _ in 0..rx_depth {
        post_recv(&mut free_slots)?;
    }
    let mut routs = rx_depth;
    let locals: Vec<QueuePairEndpoint> = prepared.iter().map(|p| p.endpoint()).collect();
    for local in &locals {
        print_address("local ", local);
    }
    let qps = exchange(args, &locals, SRQ_WIRE_MSGS, deadline, |remotes| {
        let mut qps = Vec::with_capacity(num_qp);
        for (p, remote) in prepared.into_iter().zip(remotes) {
            print_address("remote", remote);
            qps.push(p.handshake(*remote)?);
        }
        Ok(qps)
    })?;
    let index_of: HashMap<u32, usize> = qps.iter().enumerate().map(|(i, q)| (q.qpn(), i)).collect();
    let mut sent = vec![0u64; num_qp];
    let mut received = vec![0u64; num_qp];
    let send = |idx: usize, k: u64| -> anyhow::Result<()> {
        let off = if args.check { idx * stride } else { 0 };
        if args.check {
            send_mr.write(off, &srq_pattern(idx, k, args.msg_size()))?;
        }
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send);
        wr.sg_list = vec![send_mr.slice(off..off + args.msg_size())?].into();
        // SAFETY: `send_mr` lives until the end of the function, after the last poll.
        unsafe { qps[idx].post_send(&[wr])? };
        Ok(())
    };
    let mut pending = vec![RECV_WRID; num_qp];
    if args.server.is_some() {
        for (idx, p) in pending.iter_mut().enumerate() {
            send(idx, 0)?;
            sent[idx] = 1;
            *p |= SEND_WRID;
        }
    }
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let start = Instant::now();
    let mut wcs = [softroce_verbs::WorkCompletion::success(0, 0, WcOpcode::Send, 0); 64];
    let mut idle = 0u32;
    while rcnt < args.iters || scnt < args.iters {
        if Instant::now() > deadline {
            bail!("timed out after {scnt} sends and {rcnt} receives");
        }
        let n = cq.poll(&mut wcs)?;
        if n == 0 {
            back_off(&mut idle);
            continue;
        }
        idle = 0;
        for wc in &wcs[..n] {
            ensure!(
                wc.status == WcStatus::Success,
                "{} for wr_id {} on QPN {:#x} (vendor_err {:#x})",
                wc.status,
                wc.wr_id,
                wc.qp_num,
                wc.vendor_err
            );
            let idx = *index_of
                .get(&wc.qp_num)
                .with_context(|| format!("completion for unknown QPN {:#x}", wc.qp_num))?;
            let kind = wc.wr_id & KIND_MASK;
            match kind {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    let slot = (wc.wr_id >> KIND_BITS) as usize;
                    if args.check {
                        let mut got = vec![0u8; args.msg_size()];
                        recv_mr.read(slot * stride, &mut got)?;
                        let k = received[idx];
                        ensure!(
                            got == srq_pattern(idx, k, args.msg_size()),
                            "message {k} on QP {idx} (QPN {:#x}) differs from what was sent",
                            wc.qp_num
                        );
                        free_slots.push(slot);
                    }
                    received[idx] += 1;
                    rcnt += 1;
                    routs -= 1;
                    if routs <= num_qp {
                        for _ in routs..rx_depth {
                            post_recv(&mut free_slots)?;
                        }
                        routs = rx_depth;
                    }
                }
                _ => bail!("completion for unknown wr_id {}", wc.wr_id),
            }
            pending[idx] &= !kind;
            if scnt < args.iters && pending[idx] == 0 {
                send(idx, sent[idx])?;
                sent[idx] += 1;
                pending[idx] = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    linger(args);
    Ok(secs)
}

/// The side channel of rdma-core's pingpong examples: the client sends its `wire_msgs`
/// address messages (ours, then zero-filled), reads the server's and answers `done`; the
/// server reads, connects its QPs (`connect`) before it answers, so the client's first
/// message finds them ready, and waits for `done`.
fn exchange<T>(
    args: &PingpongArgs,
    locals: &[QueuePairEndpoint],
    wire_msgs: usize,
    deadline: Instant,
    connect: impl FnOnce(&[QueuePairEndpoint]) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let unused = QueuePairEndpoint {
        qpn: 0,
        psn: 0,
        gid: Gid::from_bytes([0; 16]),
        udp_port: args.udp_port,
    };
    let mine: Vec<u8> = (0..wire_msgs)
        .flat_map(|i| encode(locals.get(i).unwrap_or(&unused)))
        .collect();
    let mut theirs = vec![0u8; wire_msgs * MSG_LEN];
    match &args.server {
        Some(server) => {
            let addr: SocketAddr = (server.as_str(), args.port)
                .to_socket_addrs()
                .with_context(|| format!("resolving {server}"))?
                .next()
                .with_context(|| format!("{server} has no address"))?;
            let mut s = loop {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                    Ok(s) => break s,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(e).with_context(|| format!("connecting to {addr}")),
                }
            };
            s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now())))?;
            s.write_all(&mine)?;
            s.read_exact(&mut theirs)
                .context("reading the server's addresses")?;
            s.write_all(b"done\0")?;
            connect(&decode_all(&theirs, locals.len(), args.udp_port)?)
        }
        None => {
            let listener = crate::sidechannel::listen(args.port)?;
            let mut s = crate::sidechannel::accept_until(&listener, deadline, args.timeout)?;
            s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now())))?;
            s.read_exact(&mut theirs)
                .context("reading the client's addresses")?;
            let connected = connect(&decode_all(&theirs, locals.len(), args.udp_port)?)?;
            s.write_all(&mine)?;
            let mut done = [0u8; 5];
            s.read_exact(&mut done)
                .context("waiting for the client's done")?;
            Ok(connected)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_channel_messages_match_rdma_core() {
        let ep = QueuePairEndpoint {
            qpn: 0x11,
            psn: 0x5e4a3c,
            gid: Gid::from_ip("10.99.0.11".parse().unwrap()),
            udp_port: ROCE_V2_PORT,
        };
        let msg = encode(&ep);
        assert_eq!(
            &msg[..51],
            b"0000:000011:5e4a3c:00000000000000000000ffff0a63000b"
        );
        assert_eq!(msg[51], 0);
        assert_eq!(decode(&msg, ROCE_V2_PORT).unwrap(), ep);
        assert!(decode(b"garbage", ROCE_V2_PORT).is_err());
    }

    #[test]
    fn srq_side_channel_pads_to_256_messages_and_needs_matching_qp_counts() {
        let ep = |qpn| QueuePairEndpoint {
            qpn,
            psn: 1,
            gid: Gid::from_ip("10.99.0.1".parse().unwrap()),
            udp_port: ROCE_V2_PORT,
        };
        let unused = encode(&QueuePairEndpoint {
            qpn: 0,
            psn: 0,
            gid: Gid::from_bytes([0; 16]),
            udp_port: ROCE_V2_PORT,
        });
        assert_eq!(
            &unused[..51],
            b"0000:000000:000000:00000000000000000000000000000000"
        );
        let mut wire: Vec<u8> = [ep(0x11), ep(0x12)].iter().flat_map(encode).collect();
        wire.extend((2..SRQ_WIRE_MSGS).flat_map(|_| unused));
        assert_eq!(wire.len(), 256 * 52);
        let remotes = decode_all(&wire, 2, ROCE_V2_PORT).unwrap();
        assert_eq!(remotes, vec![ep(0x11), ep(0x12)]);
        let fewer = decode_all(&wire, 3, ROCE_V2_PORT).unwrap_err().to_string();
        assert!(
            fewer.contains("the peer offers only 2 QPs, this side has 3"),
            "{fewer}"
        );
        let more = decode_all(&wire, 1, ROCE_V2_PORT).unwrap_err().to_string();
        assert!(more.contains("more QPs than this side's 1"), "{more}");
    }
}
