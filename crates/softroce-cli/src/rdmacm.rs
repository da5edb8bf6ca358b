//! `softroce rdma-server` and `softroce rdma-client`: rdma-core's librdmacm examples
//! `rdma_server` / `rdma_client` on an emulated device, on the wire and in their exchange:
//! the client connects through the CM (REQ/REP/RTU on QP1) to port 7471, sends a 16-byte
//! message, and the server answers with 16 bytes; both then disconnect (DREQ/DREP). Either
//! side may be the real tool on rdma_rxe, and either may run on the libibverbs backend
//! (`--backend ibverbs`), where the Rust connection manager drives the system's librdmacm.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use clap::Args;
use softroce_emu::core::QpCap;
use softroce_verbs::cm::ConnectOptions;
use softroce_verbs::{
    CompletionQueue, Context, MemoryRegion, PreparedQueuePair, QpType, SendWr, WcOpcode, WcStatus,
    WrOpcode,
};
use softroce_wire::ROCE_V2_PORT;

use crate::limits::{MAX_TIMEOUT_SECS, ranged};
use crate::ops::BackendChoice;

/// The message size of rdma_server / rdma_client.
const MSG: usize = 16;

/// Arguments shared by both sides.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// Backend of this side: the emulator on `--bind`, or the system's libibverbs with its
    /// librdmacm (`SOFTROCE_LIBRDMACM` names another file).
    #[arg(long, value_enum, default_value = "emulated")]
    backend: BackendChoice,
    /// libibverbs device name (ibverbs backend; default: the first device).
    #[arg(long)]
    device: Option<String>,
    /// GID index, 0 to 65535 (ibverbs backend; default: the device's first IPv4-mapped
    /// RoCEv2 GID).
    #[arg(short = 'g', long, value_parser = ranged::<usize>(0..=u64::from(u16::MAX)))]
    gid_index: Option<usize>,
    /// Address of the emulated device (its RoCEv2 GID is made from it).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// UDP port of the device and of the peer's (both use the same one).
    #[arg(long, default_value_t = ROCE_V2_PORT, value_parser = ranged::<u16>(1..=65535))]
    udp_port: u16,
    /// rdma_cm port (TCP port space), as rdma_server's and rdma_client's `-p`.
    #[arg(short = 'p', long, default_value_t = 7471)]
    port: u16,
    /// Inject seeded faults into this side's sent datagrams (default: `SOFTROCE_FAULTS`).
    #[arg(long)]
    faults: Option<String>,
    /// Give up after this many seconds (1 to 86400), waiting for a client included.
    #[arg(long, default_value_t = 60, value_parser = ranged::<u64>(1..=MAX_TIMEOUT_SECS))]
    timeout: u64,
    /// Print every counter of this side's device at the end, also when the run fails.
    #[arg(long)]
    counters: bool,
}

/// Arguments of `softroce rdma-server`.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    #[command(flatten)]
    common: Common,
}

/// Arguments of `softroce rdma-client`.
#[derive(Debug, Args)]
pub(crate) struct ClientArgs {
    #[command(flatten)]
    common: Common,
    /// The server's address, as rdma_client's `-s`.
    #[arg(short = 's', long, default_value = "127.0.0.1")]
    server: String,
}

fn open(c: &Common) -> anyhow::Result<Context> {
    if c.backend == BackendChoice::Ibverbs {
        return open_ibverbs(c);
    }
    let mut cfg = softroce_emu::driver::DeviceConfig::new("softroce0", c.bind);
    cfg.hca.udp_port = c.udp_port;
    if c.faults.is_some() {
        cfg.faults.clone_from(&c.faults);
    }
    Context::open_emulated_with(cfg).context("starting the device")
}

#[cfg(feature = "ibverbs")]
fn open_ibverbs(c: &Common) -> anyhow::Result<Context> {
    let ctx = Context::open_ibverbs(c.device.as_deref(), c.gid_index)?;
    Ok(ctx)
}

#[cfg(not(feature = "ibverbs"))]
fn open_ibverbs(_: &Common) -> anyhow::Result<Context> {
    anyhow::bail!(
        "this softroce was built without the ibverbs backend \
         (cargo build -p softroce-cli --features ibverbs)"
    )
}

/// The address to listen on: `--bind` on the emulator; on libibverbs, the device's own (the
/// unspecified address of `--bind`'s family, which the connection manager takes as it).
fn listen_addr(c: &Common) -> SocketAddr {
    let ip = match (c.backend, c.bind) {
        (BackendChoice::Emulated, ip) => ip,
        (BackendChoice::Ibverbs, IpAddr::V4(_)) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        (BackendChoice::Ibverbs, IpAddr::V6(_)) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, c.port)
}

/// A QP like rdma_create_ep's for these tools (one send and one receive, 16 bytes
/// inline), its CQ, and a buffer: receive at 0, send from 16.
struct Side {
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn side(ctx: &Context) -> anyhow::Result<(Side, PreparedQueuePair)> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(2, None)?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .caps(QpCap::new(1, 1).with_sges(1).with_inline(MSG as u32))
        .sq_sig_all(true)
        .build()?;
    let mr = pd.allocate(2 * MSG)?;
    // SAFETY: `mr` lives in the returned Side, which the caller keeps past the QP's
    // completions.
    unsafe { qp.post_receive(&[mr.slice(0..MSG)?], 1)? };
    Ok((Side { cq, mr }, qp))
}

/// Wait for the one completion of `opcode`, checking its status.
fn completion(s: &Side, what: &str, timeout: Duration) -> anyhow::Result<u32> {
    let wcs = s.cq.poll_wait(1, timeout)?;
    let wc = wcs
        .first()
        .with_context(|| format!("no {what} completion within {timeout:?}"))?;
    ensure!(
        wc.status == WcStatus::Success,
        "{what} completed with {:?}",
        wc.status
    );
    Ok(wc.byte_len)
}

fn send(conn: &softroce_verbs::cm::Connection, s: &Side, msg: &[u8]) -> anyhow::Result<()> {
    s.mr.write(MSG, msg)?;
    let mut wr = SendWr::new(2, WrOpcode::Send);
    wr.sg_list = vec![s.mr.slice(MSG..2 * MSG)?].into();
    // SAFETY: the buffer stays registered until the completion is polled.
    unsafe { conn.qp().post_send(&[wr])? };
    Ok(())
}

fn finish(name: &str, ctx: &Context, counters: bool, r: anyhow::Result<()>) -> ExitCode {
    if counters {
        println!("counters: {}", ctx.counters_line().unwrap_or_default());
    }
    match r {
        Ok(()) => {
            println!("{name}: end 0");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e:#}");
            println!("{name}: end 1");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn server(args: &ServerArgs) -> ExitCode {
    let c = &args.common;
    let ctx = match open(c) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("rdma_server: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("rdma_server: start");
    let r = run_server(c, &ctx);
    finish("rdma_server", &ctx, c.counters, r)
}

fn run_server(c: &Common, ctx: &Context) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(c.timeout);
    let listener = ctx.connection_manager()?.listen(listen_addr(c))?;
    println!("listening on {}", listener.local_addr());
    let req = listener.get_request(timeout)?;
    let (s, qp) = side(ctx)?;
    let conn = req.accept(qp, &[], timeout)?;
    println!("connected to {}", conn.peer_addr());
    let len = completion(&s, "receive", timeout)?;
    ensure!(len as usize == MSG, "received {len} bytes, not {MSG}");
    // rdma_server answers with its own 16-byte buffer; echoing what came is as valid.
    let mut got = [0u8; MSG];
    s.mr.read(0, &mut got)?;
    send(&conn, &s, &got)?;
    completion(&s, "send", timeout)?;
    conn.disconnect(timeout)?;
    Ok(())
}

pub(crate) fn client(args: &ClientArgs) -> ExitCode {
    let c = &args.common;
    let ctx = match open(c) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("rdma_client: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    println!("rdma_client: start");
    let r = run_client(args, &ctx);
    finish("rdma_client", &ctx, c.counters, r)
}

fn run_client(args: &ClientArgs, ctx: &Context) -> anyhow::Result<()> {
    let c = &args.common;
    let timeout = Duration::from_secs(c.timeout);
    let to = (args.server.as_str(), c.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", args.server))?
        .find(|a| a.is_ipv4() == c.bind.is_ipv4())
        .with_context(|| format!("{} has no address of {}'s family", args.server, c.bind))?;
    let (s, qp) = side(ctx)?;
    let options = ConnectOptions {
        timeout,
        ..ConnectOptions::default()
    };
    let conn = ctx.connection_manager()?.connect(qp, to, &options)?;
    let msg: [u8; MSG] = *b"softroce rdma_cm";
    send(&conn, &s, &msg)?;
    // One send and one receive complete, in either order.
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let wcs = s.cq.poll_wait(1, timeout)?;
        let wc = wcs.first().context("a completion within the timeout")?;
        ensure!(
            wc.status == WcStatus::Success,
            "{:?} completed with {:?}",
            wc.opcode,
            wc.status
        );
        kinds.push(wc.opcode);
    }
    ensure!(
        kinds.contains(&WcOpcode::Recv) && kinds.contains(&WcOpcode::Send),
        "expected a send and a receive completion, got {kinds:?}"
    );
    conn.disconnect(timeout)?;
    Ok(())
}
