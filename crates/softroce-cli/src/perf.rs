//! `softroce perf`: bandwidth and latency between two emulated devices on loopback, next to
//! raw UDP doing the same work in the same run, so the figures come as ratios that survive a
//! noisy shared machine.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use clap::Args;
use softroce_emu::core::{QpCap, RdmaTarget, SendWr};
use softroce_verbs::{Context, Mtu, QpType, WcStatus, WrOpcode};

/// Arguments of `softroce perf`.
#[derive(Debug, Args)]
pub(crate) struct PerfArgs {
    /// Message size of the WRITE bandwidth test.
    #[arg(short = 's', long, default_value_t = 65536)]
    size: usize,
    /// WRITEs to complete.
    #[arg(short = 'n', long, default_value_t = 2000)]
    iters: u64,
    /// WRITEs kept in flight.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Path MTU in bytes.
    #[arg(short = 'm', long, default_value_t = 4096)]
    mtu: usize,
    /// Ping-pong round trips of the latency test (8-byte SENDs).
    #[arg(long, default_value_t = 5000)]
    lat_iters: u64,
    /// First device address (the second is the next one).
    #[arg(long, default_value = "127.0.0.31")]
    a: IpAddr,
    /// Second device address.
    #[arg(long, default_value = "127.0.0.32")]
    b: IpAddr,
}

pub(crate) fn run(args: &PerfArgs) -> ExitCode {
    match perf(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce perf: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn perf(args: &PerfArgs) -> anyhow::Result<()> {
    let mtu = Mtu::from_bytes(args.mtu)
        .with_context(|| format!("--mtu {} is not an IBTA MTU", args.mtu))?;
    ensure!(
        args.depth >= 1 && args.size >= 1,
        "--depth and --size must be at least 1"
    );
    let (write_bps, half_rtt) = softroce_figures(args, mtu)?;
    let udp_bps = udp_goodput(args.size as u64 * args.iters, args.mtu)?;
    let udp_half_rtt = udp_latency(args.lat_iters)?;
    let msg_rate = write_bps / args.size as f64;
    println!(
        "{:<34} {:>14} {:>14} {:>8}",
        "test", "softroce", "raw UDP", "ratio"
    );
    println!(
        "{:<34} {:>11.1} MB/s {:>11.1} MB/s {:>8.3}",
        format!(
            "RC WRITE {} B, MTU {}, depth {}",
            args.size, args.mtu, args.depth
        ),
        write_bps / 1e6,
        udp_bps / 1e6,
        write_bps / udp_bps
    );
    println!(
        "{:<34} {:>11.1} us {:>13.1} us {:>8.3}",
        "RC SEND 8 B ping-pong, half RTT",
        half_rtt.as_secs_f64() * 1e6,
        udp_half_rtt.as_secs_f64() * 1e6,
        half_rtt.as_secs_f64() / udp_half_rtt.as_secs_f64()
    );
    println!(
        "{:<34} {:>9.0} msg/s",
        format!("RC WRITE {} B message rate", args.size),
        msg_rate
    );
    Ok(())
}

fn softroce_figures(args: &PerfArgs, mtu: Mtu) -> anyhow::Result<(f64, Duration)> {
    let a = Context::open_emulated("perf0", args.a, 0)?;
    let b = Context::open_emulated("perf1", args.b, 0)?;
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cqa, cqb) = (a.create_cq(4096, None)?, b.create_cq(4096, None)?);
    let ma = pa.allocate(args.size * args.depth)?;
    let mb = pb.allocate(args.size * args.depth)?;
    let cap = QpCap {
        max_send_wr: args.depth as u32 + 4,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qa = pa
        .create_qp(&cqa, &cqa, QpType::Rc)
        .caps(cap)
        .mtu(mtu)
        .build()?;
    let qb = pb
        .create_qp(&cqb, &cqb, QpType::Rc)
        .caps(cap)
        .mtu(mtu)
        .build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, qb) = (qa.handshake(eb)?, qb.handshake(ea)?);
    // WRITE bandwidth with `depth` in flight.
    let post = |i: u64| -> anyhow::Result<()> {
        let slot = (i as usize % args.depth) * args.size;
        let mut wr = SendWr::new(i, WrOpcode::RdmaWrite);
        wr.sg_list = vec![ma.slice(slot..slot + args.size)?];
        wr.rdma = RdmaTarget {
            remote_addr: mb.addr(slot),
            rkey: mb.rkey(),
        };
        // SAFETY: `ma`/`mb` outlive the loop, which polls every completion.
        unsafe { qa.post_send(&[wr])? };
        Ok(())
    };
    let start = Instant::now();
    let mut posted = 0;
    let mut done = 0;
    while posted < args.depth as u64 && posted < args.iters {
        post(posted)?;
        posted += 1;
    }
    let deadline = start + Duration::from_secs(120);
    while done < args.iters {
        ensure!(
            Instant::now() < deadline,
            "WRITE test stalled after {done} completions"
        );
        let wcs = cqa.poll_wait(1, Duration::from_secs(5))?;
        for wc in wcs {
            ensure!(
                wc.status == WcStatus::Success,
                "WRITE completed with {}",
                wc.status
            );
            done += 1;
            if posted < args.iters {
                post(posted)?;
                posted += 1;
            }
        }
    }
    let bps = (args.size as u64 * args.iters) as f64 / start.elapsed().as_secs_f64();
    // SEND ping-pong latency.
    let sge_a = ma.slice(0..8)?;
    let sge_b = mb.slice(0..8)?;
    for _ in 0..32 {
        // SAFETY: as above.
        unsafe {
            qa.post_receive(&[sge_a], 0)?;
            qb.post_receive(&[sge_b], 0)?;
        }
    }
    // Unsignaled: only receive completions land in the CQs, so each wait is one arrival.
    let send = |qp: &softroce_verbs::QueuePair, sge| -> anyhow::Result<()> {
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = vec![sge];
        wr.send_flags = softroce_verbs::SendFlags::EMPTY;
        // SAFETY: as above.
        unsafe { qp.post_send(&[wr])? };
        Ok(())
    };
    let start = Instant::now();
    for _ in 0..args.lat_iters {
        send(&qa, sge_a)?;
        ensure!(
            cqb.poll_wait(1, Duration::from_secs(5))?.len() == 1,
            "ping lost"
        );
        // SAFETY: as above.
        unsafe { qb.post_receive(&[sge_b], 0)? };
        send(&qb, sge_b)?;
        ensure!(
            cqa.poll_wait(1, Duration::from_secs(5))?.len() == 1,
            "pong lost"
        );
        // SAFETY: as above.
        unsafe { qa.post_receive(&[sge_a], 0)? };
    }
    let half = start.elapsed() / (2 * args.lat_iters as u32).max(1);
    Ok((bps, half))
}

/// Raw UDP goodput for `total` bytes in MTU-sized datagrams between two threads.
fn udp_goodput(total: u64, mtu: usize) -> anyhow::Result<f64> {
    let rx = UdpSocket::bind("127.0.0.33:0")?;
    let tx = UdpSocket::bind("127.0.0.34:0")?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let dst: SocketAddr = rx.local_addr()?;
    let payload = vec![0x5Au8; mtu + 64];
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut got = 0u64;
        let start = Instant::now();
        let mut last = start;
        while let Ok(n) = rx.recv(&mut buf) {
            got += (n - 64) as u64;
            last = Instant::now();
            if got >= total {
                break;
            }
        }
        (got, last.duration_since(start))
    });
    let datagrams = total.div_ceil(mtu as u64);
    for _ in 0..datagrams {
        // Loopback drops when the receiver falls behind: pace lightly on EAGAIN-free sends.
        let _ = tx.send_to(&payload, dst);
    }
    let (got, took) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))?;
    Ok(got as f64 / took.as_secs_f64().max(1e-9))
}

/// Raw UDP ping-pong half round trip, 8-byte datagrams between two threads.
fn udp_latency(iters: u64) -> anyhow::Result<Duration> {
    let a = UdpSocket::bind("127.0.0.35:0")?;
    let b = UdpSocket::bind("127.0.0.36:0")?;
    a.set_read_timeout(Some(Duration::from_secs(1)))?;
    b.set_read_timeout(Some(Duration::from_secs(1)))?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..iters {
            if b.recv(&mut buf).is_err() {
                break;
            }
            let _ = b.send_to(&buf[..8], aa);
        }
    });
    let mut buf = [0u8; 64];
    let start = Instant::now();
    for _ in 0..iters {
        a.send_to(&[1u8; 8], ba)?;
        a.recv(&mut buf).context("UDP pong lost")?;
    }
    let half = start.elapsed() / (2 * iters as u32).max(1);
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
    Ok(half)
}
