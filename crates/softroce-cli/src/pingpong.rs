//! `softroce pingpong`: rdma-core's `ibv_{rc,uc,ud}_pingpong`, on an emulated device,
//! speaking the same TCP side channel (port 18515, 52-byte `LID:QPN:PSN:GID` messages), so
//! either side can be the real tool on rdma_rxe or a NIC.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use clap::{Args, ValueEnum};
use softroce_emu::core::{QpCap, SendWr, UdTarget};
use softroce_verbs::{Context, Gid, Mtu, QpType, QueuePairEndpoint, WcOpcode, WcStatus, WrOpcode};

/// Transport of `softroce pingpong`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// Reliable connection (ibv_rc_pingpong).
    Rc,
    /// Unreliable connection (ibv_uc_pingpong).
    Uc,
    /// Unreliable datagram (ibv_ud_pingpong).
    Ud,
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
    /// UDP port of the device.
    #[arg(long, default_value_t = 4791)]
    udp_port: u16,
    /// TCP port of the side channel.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size (UD: at most the MTU minus the 40-byte GRH area is delivered per message).
    #[arg(short = 's', long, default_value_t = 4096)]
    size: usize,
    /// Iterations.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u64,
    /// Receive queue depth.
    #[arg(short = 'r', long, default_value_t = 500)]
    rx_depth: u32,
    /// Path MTU in bytes (256..4096).
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: usize,
    /// GID index to use (accepted for command-line compatibility; softroce uses the GID of
    /// its address).
    #[arg(short = 'g', long)]
    gid_index: Option<usize>,
    /// Fill sent messages with a pattern and verify every received message.
    #[arg(long)]
    check: bool,
    /// Inject seeded faults into this side's sent datagrams, e.g.
    /// `drop=0.2,dup=0.05,reorder=0.05,corrupt=0.01,delay=MS,seed=N` (default: `SOFTROCE_FAULTS`).
    #[arg(long)]
    faults: Option<String>,
    /// Local ACK timeout exponent of the RC QP: 4.096 us * 2^N (rdma-core uses 14).
    #[arg(long, default_value_t = 14)]
    qp_timeout: u8,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Server to connect to; without it, wait for a client.
    server: Option<String>,
}

const MSG_LEN: usize = 52;
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
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
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&parts[3][2 * i..2 * i + 2], 16).context("GID")?;
    }
    Ok(QueuePairEndpoint {
        qpn,
        psn,
        gid: Gid::from_bytes(gid),
        udp_port,
    })
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

fn pingpong(args: &PingpongArgs) -> anyhow::Result<()> {
    let mtu = Mtu::from_bytes(args.mtu)
        .with_context(|| format!("--mtu {} is not 256, 512, 1024, 2048 or 4096", args.mtu))?;
    let ud = args.transport == Transport::Ud;
    ensure!(
        !ud || args.size + GRH <= 4096,
        "UD messages must fit one MTU: --size {} is too large",
        args.size
    );
    let mut cfg = softroce_emu::driver::DeviceConfig::new("softroce0", args.bind);
    cfg.hca.udp_port = args.udp_port;
    if args.faults.is_some() {
        cfg.faults.clone_from(&args.faults);
    }
    ensure!(
        args.qp_timeout <= 31,
        "--qp-timeout {} exceeds 31",
        args.qp_timeout
    );
    let ctx = Context::open_emulated_with(cfg).context("starting the device")?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(args.rx_depth + 1, None)?;
    let buf_len = args.size + if ud { GRH } else { 0 };
    let send_mr = pd.allocate(buf_len.max(1))?;
    let recv_mr = pd.allocate(buf_len.max(1))?;
    let qp_type = match args.transport {
        Transport::Rc => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Ud => QpType::Ud,
    };
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: args.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let prepared = pd
        .create_qp(&cq, &cq, qp_type)
        .caps(cap)
        .mtu(mtu)
        .reliability(args.qp_timeout, 7, 7)
        .build()?;
    let local = prepared.endpoint();
    println!(
        "  local address:  LID 0x0000, QPN {:#08x}, PSN {:#08x}, GID {}",
        local.qpn, local.psn, local.gid
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let remote = exchange(args, &local, deadline)?;
    println!(
        "  remote address: LID 0x0000, QPN {:#08x}, PSN {:#08x}, GID {}",
        remote.qpn, remote.psn, remote.gid
    );
    let qp = prepared.handshake(remote)?;
    let target: Option<UdTarget> = if ud {
        Some(qp.ud_target(remote, 0x1111_1111)?)
    } else {
        None
    };
    let recv_sge = recv_mr.slice(0..buf_len.max(1))?;
    let mut routs = 0;
    for _ in 0..args.rx_depth {
        // SAFETY: `recv_mr` lives until the end of this function, after the last poll.
        unsafe { qp.post_receive(&[recv_sge], RECV_WRID)? };
        routs += 1;
    }
    let client = args.server.is_some();
    let send = |iter: u64| -> anyhow::Result<()> {
        let off = if ud { GRH } else { 0 };
        if args.check {
            send_mr.write(off, &pattern(iter, args.size))?;
        }
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send);
        wr.sg_list = vec![send_mr.slice(off..off + args.size)?];
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
    while rcnt < args.iters || scnt < args.iters {
        if Instant::now() > deadline {
            bail!("timed out after {scnt} sends and {rcnt} receives");
        }
        let n = cq.poll(&mut wcs)?;
        if n == 0 {
            // Polling takes the device lock; back off so the engine thread (which may share
            // the core) can deliver what we are waiting for.
            idle += 1;
            if idle > 64 {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::thread::yield_now();
            }
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
                    if args.check {
                        let off = if ud { GRH } else { 0 };
                        let mut got = vec![0u8; args.size];
                        recv_mr.read(off, &mut got)?;
                        ensure!(
                            got == pattern(rcnt, args.size),
                            "message {rcnt} differs from what was sent"
                        );
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
    // The peer may still be waiting for the acknowledgement of its last message (lost on the
    // way): keep the device answering retransmissions for a few ACK timeouts before leaving.
    let ack_timeout = Duration::from_nanos(4096u64 << args.qp_timeout.min(31));
    std::thread::sleep((ack_timeout * 8).clamp(Duration::from_millis(100), Duration::from_secs(2)));
    let bytes = args.size as f64 * args.iters as f64 * 2.0;
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

/// The side channel of rdma-core's pingpong examples.
fn exchange(
    args: &PingpongArgs,
    local: &QueuePairEndpoint,
    deadline: Instant,
) -> anyhow::Result<QueuePairEndpoint> {
    let mine = encode(local);
    let mut theirs = [0u8; MSG_LEN];
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
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(e).with_context(|| format!("connecting to {addr}")),
                }
            };
            s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now())))?;
            s.write_all(&mine)?;
            s.read_exact(&mut theirs)
                .context("reading the server's address")?;
            s.write_all(b"done\0")?;
        }
        None => {
            let listener = TcpListener::bind((IpAddr::from([0, 0, 0, 0]), args.port))
                .with_context(|| format!("listening on TCP port {}", args.port))?;
            let (mut s, _) = listener.accept()?;
            s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now())))?;
            s.read_exact(&mut theirs)
                .context("reading the client's address")?;
            s.write_all(&mine)?;
            let mut done = [0u8; 5];
            s.read_exact(&mut done)
                .context("waiting for the client's done")?;
        }
    }
    decode(&theirs, args.udp_port)
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
            udp_port: 4791,
        };
        let msg = encode(&ep);
        assert_eq!(
            &msg[..51],
            b"0000:000011:5e4a3c:00000000000000000000ffff0a63000b"
        );
        assert_eq!(msg[51], 0);
        assert_eq!(decode(&msg, 4791).unwrap(), ep);
        assert!(decode(b"garbage", 4791).is_err());
    }
}
