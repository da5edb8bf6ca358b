//! `softroce ops`: every verb the pingpong tools do not cover — RC SEND/SEND_IMM/WRITE/
//! WRITE_IMM/READ/CMP_SWAP/FETCH_ADD/ATOMIC_WRITE, WRITE/READ through a type 2 memory window
//! the responder binds (and, refused, a WRITE outside its bounds and a READ it grants no
//! right for), UC SEND/WRITE, UD SEND with its GRH area, SRQ receives — at the sizes that
//! matter (0, 1, MTU, MTU+1, 64 KiB, 1 MiB), between two processes, each verified byte for
//! byte on both sides.
//!
//! The client is the requester of every cell; the server is the responder. Both run on any
//! backend, so `softroce ops --backend ibverbs` on rdma_rxe against `softroce ops` on the
//! emulator tests each direction by choosing which side is the client.
//!
//! Control channel (TCP, one text line per message): both sides send `HELLO key=value…`
//! with their QPs and memory; then per cell the client sends `CELL op size seed`, the server
//! prepares (posts a receive, fills or clears memory, binds a window) and answers `READY`
//! (memory window cells: `READY mw=RKEY:ADDR`, the window's key and start), the client runs
//! the work request and checks its completion, sends `CHECK`, and the server answers `PASS`
//! or `FAIL reason` after checking its side. `BYE` ends. The cells the responder must refuse
//! run on the `mw` QP pair, which each side reconnects (RESET → RTS) for every such cell:
//! the client before its `CELL`, the server before its `READY`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufReader, Write};
use std::net::{IpAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use clap::{Args, ValueEnum};
use softroce_emu::core::{QpCap, SendWr, UdTarget};
use softroce_verbs::{
    AccessFlags, CompletionQueue, Context, Gid, MemoryRegion, MemoryWindow, Mtu, MwType,
    ProtectionDomain, QpType, QueuePair, QueuePairEndpoint, SharedReceiveQueue, WcFlags, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
use softroce_wire::ROCE_V2_PORT;

use crate::completion::check_success;
use crate::limits::{self, IBTA_MAX_MSG, MAX_TIMEOUT_SECS, ranged};

/// Which verbs implementation runs this side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendChoice {
    /// The softroce emulator on `--bind`.
    Emulated,
    /// The system's libibverbs (real hardware or rdma_rxe); needs the `ibverbs` feature.
    Ibverbs,
}

/// Arguments of `softroce ops`.
#[derive(Debug, Args)]
pub(crate) struct OpsArgs {
    /// Backend of this side.
    #[arg(long, value_enum, default_value = "emulated")]
    backend: BackendChoice,
    /// Address of the emulated device.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// UDP port of the emulated device.
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    udp_port: u16,
    /// libibverbs device name (ibverbs backend; default: the first device).
    #[arg(long)]
    device: Option<String>,
    /// GID index, 0 to 65535 (ibverbs backend; default: the device's first IPv4-mapped
    /// RoCEv2 GID).
    #[arg(short = 'g', long, value_parser = ranged::<usize>(0..=u64::from(u16::MAX)))]
    gid_index: Option<usize>,
    /// TCP port of the control channel. A server on port 0 listens on a free port and says
    /// which: `listening on TCP port N`.
    #[arg(short = 'p', long, default_value_t = 18516)]
    port: u16,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096 (the client's choice is used by
    /// both sides).
    #[arg(short = 'm', long, default_value_t = 1024, value_parser = limits::mtu)]
    mtu: usize,
    /// Largest message size to test (client), 0 to 2^31; sizes above it are left out.
    #[arg(long, default_value_t = 1 << 20, value_parser = ranged::<usize>(0..=IBTA_MAX_MSG))]
    max_size: usize,
    /// Only these operations (comma-separated names, e.g. `rc-read,ud-send`; all of:
    /// rc-send, rc-send-imm, rc-write, rc-write-imm, rc-read, rc-cmp-swap, rc-fetch-add,
    /// rc-atomic-write, rc-mw-write, rc-mw-read, rc-mw-write-outside, rc-mw-read-no-rights,
    /// uc-send, uc-write, ud-send, srq-send).
    #[arg(long)]
    only: Option<String>,
    /// Give up on the client's connection, or on one completion, after this many seconds
    /// (1 to 86400).
    #[arg(long, default_value_t = 20, value_parser = ranged::<u64>(1..=MAX_TIMEOUT_SECS))]
    timeout: u64,
    /// Print every counter of this side's device at the end (`counters: name=value …`,
    /// rxe's hw_counters names first; emulated backend).
    #[arg(long)]
    counters: bool,
    /// Server to connect to (this side is then the requester); without it, serve one client.
    server: Option<String>,
}

/// The operation of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    RcSend,
    RcSendImm,
    RcWrite,
    RcWriteImm,
    RcRead,
    RcCmpSwap,
    RcFetchAdd,
    RcAtomicWrite,
    RcMwWrite,
    RcMwRead,
    /// A WRITE through a window reaching past its bounds (inside the region under it).
    RcMwWriteOutside,
    /// A READ, inside the window, through a window bound for REMOTE_WRITE only.
    RcMwReadNoRights,
    UcSend,
    UcWrite,
    UdSend,
    SrqSend,
}

const ALL_OPS: [Op; 16] = [
    Op::RcSend,
    Op::RcSendImm,
    Op::RcWrite,
    Op::RcWriteImm,
    Op::RcRead,
    Op::RcCmpSwap,
    Op::RcFetchAdd,
    Op::RcAtomicWrite,
    Op::RcMwWrite,
    Op::RcMwRead,
    Op::RcMwWriteOutside,
    Op::RcMwReadNoRights,
    Op::UcSend,
    Op::UcWrite,
    Op::UdSend,
    Op::SrqSend,
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::RcSend => "rc-send",
            Self::RcSendImm => "rc-send-imm",
            Self::RcWrite => "rc-write",
            Self::RcWriteImm => "rc-write-imm",
            Self::RcRead => "rc-read",
            Self::RcCmpSwap => "rc-cmp-swap",
            Self::RcFetchAdd => "rc-fetch-add",
            Self::RcAtomicWrite => "rc-atomic-write",
            Self::RcMwWrite => "rc-mw-write",
            Self::RcMwRead => "rc-mw-read",
            Self::RcMwWriteOutside => "rc-mw-write-outside",
            Self::RcMwReadNoRights => "rc-mw-read-no-rights",
            Self::UcSend => "uc-send",
            Self::UcWrite => "uc-write",
            Self::UdSend => "ud-send",
            Self::SrqSend => "srq-send",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        ALL_OPS.into_iter().find(|op| op.name() == name)
    }

    fn is_atomic(self) -> bool {
        matches!(self, Self::RcCmpSwap | Self::RcFetchAdd)
    }

    /// Whether the requester reaches the responder through a window it bound for the cell.
    fn uses_window(self) -> bool {
        matches!(
            self,
            Self::RcMwWrite | Self::RcMwRead | Self::RcMwWriteOutside | Self::RcMwReadNoRights
        )
    }

    /// Whether the responder must refuse the access (the requester's WR completes with
    /// IBV_WC_REM_ACCESS_ERR, nothing is placed or returned). The error ends both QPs, so
    /// these cells run on a QP pair of their own, which both sides reconnect for each.
    fn refused(self) -> bool {
        matches!(self, Self::RcMwWriteOutside | Self::RcMwReadNoRights)
    }

    /// Whether the requester reads the responder's memory (it checks the data itself).
    fn reads(self) -> bool {
        matches!(self, Self::RcRead | Self::RcMwRead)
    }

    /// Whether the responder sees a receive completion.
    fn consumes_receive(self) -> bool {
        matches!(
            self,
            Self::RcSend
                | Self::RcSendImm
                | Self::RcWriteImm
                | Self::UcSend
                | Self::UdSend
                | Self::SrqSend
        )
    }

    fn carries_imm(self) -> bool {
        matches!(self, Self::RcSendImm | Self::RcWriteImm)
    }

    fn wr_opcode(self) -> WrOpcode {
        match self {
            Self::RcSend | Self::UcSend | Self::UdSend | Self::SrqSend => WrOpcode::Send,
            Self::RcSendImm => WrOpcode::SendWithImm,
            Self::RcWrite | Self::UcWrite | Self::RcMwWrite | Self::RcMwWriteOutside => {
                WrOpcode::RdmaWrite
            }
            Self::RcWriteImm => WrOpcode::RdmaWriteWithImm,
            Self::RcRead | Self::RcMwRead | Self::RcMwReadNoRights => WrOpcode::RdmaRead,
            Self::RcCmpSwap => WrOpcode::AtomicCmpAndSwp,
            Self::RcFetchAdd => WrOpcode::AtomicFetchAndAdd,
            Self::RcAtomicWrite => WrOpcode::AtomicWrite,
        }
    }

    fn send_wc_opcode(self) -> WcOpcode {
        match self.wr_opcode() {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
            _ => WcOpcode::Send,
        }
    }

    /// Message sizes of this op at path MTU `mtu` (UD: the port's active MTU `ud_mtu`).
    fn sizes(self, mtu: usize, ud_mtu: usize) -> Vec<usize> {
        if self.is_atomic() || self == Self::RcAtomicWrite {
            vec![8]
        } else if self.refused() {
            // One packet and several (see `request_refused` for where each goes).
            vec![1, mtu + 1]
        } else if self.uses_window() {
            // Within the window; 0 bytes would not check the key at all.
            vec![1, mtu, mtu + 1, MW_LEN]
        } else if self == Self::UdSend {
            // A UD message is one packet of at most the port's MTU.
            vec![0, 1, ud_mtu]
        } else {
            vec![0, 1, mtu, mtu + 1, 64 << 10, 1 << 20]
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const GRH: usize = 40;
/// Room for the largest message plus the UD GRH area.
const MR_LEN: usize = (1 << 20) + 4096;
const QKEY: u32 = 0x1111_1111;
const IMM: u32 = 0x1234_5678;
const ATOMIC_START: u64 = 0x0102_0304_0506_0708;
const ATOMIC_ADD: u64 = 0x10_0000_0001;
/// The memory window cells' window: `MW_LEN` bytes from `MW_OFF` of a region of their own,
/// with guard bytes on either side (`MW_OFF` and 4096 bytes after the window: an access
/// just outside the window stays inside the region, so only the window's bounds refuse it).
const MW_OFF: usize = 4096;
const MW_LEN: usize = 64 << 10;
/// A guard byte: memory no access may change.
const GUARD: u8 = 0xA5;

/// What an ATOMIC WRITE of the cell seeded `seed` stores.
fn atomic_write_value(seed: u32) -> u64 {
    !ATOMIC_START ^ (u64::from(seed) << 32)
}

/// Deterministic payload byte `i` of a cell seeded `seed`.
fn pattern(seed: u32, i: usize) -> u8 {
    (seed as usize)
        .wrapping_mul(31)
        .wrapping_add(i.wrapping_mul(7))
        .wrapping_add(i / 251) as u8
}

fn fill(mr: &MemoryRegion, offset: usize, len: usize, seed: u32) -> anyhow::Result<()> {
    let data: Vec<u8> = (0..len).map(|i| pattern(seed, i)).collect();
    Ok(mr.write(offset, &data)?)
}

/// The first byte that differs from the pattern, if any.
fn verify(mr: &MemoryRegion, offset: usize, len: usize, seed: u32) -> anyhow::Result<()> {
    let mut data = vec![0u8; len];
    mr.read(offset, &mut data)?;
    if let Some(i) = (0..len).find(|&i| data[i] != pattern(seed, i)) {
        bail!(
            "byte {i} of {len} is {:#04x}, expected {:#04x}",
            data[i],
            pattern(seed, i)
        );
    }
    Ok(())
}

fn read_u64(mr: &MemoryRegion, offset: usize) -> anyhow::Result<u64> {
    let mut b = [0u8; 8];
    mr.read(offset, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// One side's objects.
struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    /// Responder: the window of the current memory window cell (dropped before its region).
    mw: RefCell<Option<MemoryWindow>>,
    /// Responder: the region its windows are bound to (it needs IBV_ACCESS_MW_BIND).
    mw_mr: Option<MemoryRegion>,
    rc: QueuePair,
    uc: QueuePair,
    ud: QueuePair,
    /// Server: an RC QP on the SRQ; client: a plain RC QP to pair with it.
    srq_qp: QueuePair,
    /// The RC QP of the refused window cells (`Op::refused`), reconnected for each.
    mw_qp: QueuePair,
    _srq: Option<SharedReceiveQueue>,
    ud_peer: UdTarget,
    peer: Hello,
    timeout: Duration,
}

/// What each side tells the other.
#[derive(Debug, Clone)]
struct Hello {
    gid: Gid,
    udp_port: u16,
    addr: u64,
    rkey: u32,
    mtu: usize,
    qps: HashMap<String, (u32, u32)>,
}

impl Hello {
    fn line(&self) -> String {
        let gid: String = self
            .gid
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut s = format!(
            "HELLO gid={gid} udp={} addr={:x} rkey={:x} mtu={}",
            self.udp_port, self.addr, self.rkey, self.mtu
        );
        let mut names: Vec<_> = self.qps.keys().collect();
        names.sort();
        for name in names {
            let (qpn, psn) = self.qps[name];
            s.push_str(&format!(" {name}={qpn:x}:{psn:x}"));
        }
        s
    }

    fn parse(line: &str) -> anyhow::Result<Self> {
        let mut words = line.split_whitespace();
        ensure!(
            words.next() == Some("HELLO"),
            "expected HELLO, got {line:?}"
        );
        let mut kv = HashMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .with_context(|| format!("{w:?} in HELLO is not key=value"))?;
            kv.insert(k.to_string(), v.to_string());
        }
        let get = |k: &str| {
            kv.get(k)
                .cloned()
                .with_context(|| format!("HELLO lacks {k}="))
        };
        let gid_hex = get("gid")?;
        let gid = Gid::from_hex(&gid_hex)
            .with_context(|| format!("gid={gid_hex:?} is not 32 hex digits"))?;
        let mut qps = HashMap::new();
        for name in QP_NAMES {
            let v = get(name)?;
            let (q, p) = v
                .split_once(':')
                .with_context(|| format!("{name}={v} is not QPN:PSN"))?;
            qps.insert(
                name.to_string(),
                (
                    u32::from_str_radix(q, 16).context("QPN")?,
                    u32::from_str_radix(p, 16).context("PSN")?,
                ),
            );
        }
        Ok(Self {
            gid,
            udp_port: get("udp")?.parse().context("udp")?,
            addr: u64::from_str_radix(&get("addr")?, 16).context("addr")?,
            rkey: u32::from_str_radix(&get("rkey")?, 16).context("rkey")?,
            mtu: get("mtu")?.parse().context("mtu")?,
            qps,
        })
    }

    fn endpoint(&self, name: &str) -> QueuePairEndpoint {
        let (qpn, psn) = self.qps.get(name).copied().unwrap_or_default();
        QueuePairEndpoint {
            qpn,
            psn,
            gid: self.gid,
            udp_port: self.udp_port,
        }
    }
}

/// The QPs each side announces in its HELLO.
const QP_NAMES: [&str; 5] = ["rc", "uc", "ud", "srq", "mw"];

struct Line {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// How long one line may take to come.
    limit: Duration,
}

impl Line {
    fn new(stream: TcpStream, timeout: Duration) -> anyhow::Result<Self> {
        let _ = stream.set_nodelay(true);
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            limit: timeout * 3,
        })
    }
    fn send(&mut self, line: &str) -> anyhow::Result<()> {
        writeln!(self.writer, "{line}").context("writing to the peer")?;
        Ok(())
    }
    fn recv(&mut self) -> anyhow::Result<String> {
        crate::sidechannel::read_line(&mut self.reader, self.limit)
            .context("reading from the peer")?
            .context("the peer closed the control connection")
    }
}

pub(crate) fn run(args: &OpsArgs) -> ExitCode {
    match ops(args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!("softroce ops: {failed} cell(s) failed");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("softroce ops: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn open(args: &OpsArgs) -> anyhow::Result<Context> {
    match args.backend {
        BackendChoice::Emulated => Context::open_emulated("softroce0", args.bind, args.udp_port)
            .with_context(|| format!("emulated device on {}:{}", args.bind, args.udp_port)),
        BackendChoice::Ibverbs => open_ibverbs(args),
    }
}

#[cfg(feature = "ibverbs")]
fn open_ibverbs(args: &OpsArgs) -> anyhow::Result<Context> {
    Ok(Context::open_ibverbs(
        args.device.as_deref(),
        args.gid_index,
    )?)
}

#[cfg(not(feature = "ibverbs"))]
fn open_ibverbs(_: &OpsArgs) -> anyhow::Result<Context> {
    bail!(
        "this softroce was built without the ibverbs backend \
         (cargo build -p softroce-cli --features ibverbs)"
    )
}

/// The operations `--only` names (all without it).
fn selected_ops(args: &OpsArgs) -> anyhow::Result<Vec<Op>> {
    match args.only.as_deref() {
        None => Ok(ALL_OPS.to_vec()),
        Some(list) => list
            .split(',')
            .map(|n| {
                if n.trim().is_empty() {
                    anyhow::bail!(
                        "--only {:?}: an empty name between commas",
                        softroce_emu::faults::excerpt(list)
                    );
                }
                let shown = softroce_emu::faults::excerpt(n);
                Op::parse(n.trim()).with_context(|| format!("--only: unknown operation {shown:?}"))
            })
            .collect(),
    }
}

fn ops(args: &OpsArgs) -> anyhow::Result<usize> {
    selected_ops(args)?;
    let ctx = open(args)?;
    let result = ops_on(args, &ctx);
    if args.counters {
        // Also after a failure: the counters are what tells a drop from a timeout.
        match ctx.counters_line() {
            Some(line) => println!("counters: {line}"),
            None => println!(
                "counters: none kept by the {} backend",
                ctx.backend().kind()
            ),
        }
    }
    result
}

fn ops_on(args: &OpsArgs, ctx: &Context) -> anyhow::Result<usize> {
    let timeout = Duration::from_secs(args.timeout);
    let stream = match &args.server {
        Some(host) => crate::sidechannel::connect_retrying(host, args.port, timeout)?,
        None => {
            let listener = crate::sidechannel::listen(args.port)?;
            crate::sidechannel::accept_until(
                &listener,
                std::time::Instant::now() + timeout,
                args.timeout,
            )?
        }
    };
    let mut line = Line::new(stream, timeout)?;
    let is_client = args.server.is_some();

    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(256, None)?;
    let mr = pd.allocate(MR_LEN)?;
    let caps = QpCap::new(16, 16);
    let srq = (!is_client)
        .then(|| pd.create_srq(16, 1))
        .transpose()
        .context("creating the SRQ")?;

    // The client proposes the MTU; the server adopts it.
    let mtu_bytes = if is_client {
        args.mtu
    } else {
        0 // learnt from the client's HELLO
    };
    // Only a requester that will post ATOMIC WRITE asks for it: on libibverbs that QP is made
    // with ibv_create_qp_ex, and the other cells keep the plain ibv_create_qp.
    let atomic_write = is_client && selected_ops(args)?.contains(&Op::RcAtomicWrite);
    let build = |qp_type: QpType, on_srq: bool, mtu: Mtu, atomic_write: bool| {
        // A 268 ms ACK timeout: a peer in a busy emulated VM may answer a 1 MiB message
        // slower than rdma-core's 67 ms, and a needless resend only adds noise.
        let b = pd
            .create_qp(&cq, &cq, qp_type)
            .caps(caps)
            .mtu(mtu)
            .qkey(QKEY)
            .reliability(16, 7, 7)
            .atomic_write(atomic_write);
        match (&srq, on_srq) {
            (Some(s), true) => b.srq(s).build(),
            _ => b.build(),
        }
    };
    let hello_of = |prepared: &[(&str, QueuePairEndpoint)], mtu: usize| -> anyhow::Result<Hello> {
        let first = prepared.first().map(|p| p.1).context("no QPs")?;
        Ok(Hello {
            gid: first.gid,
            udp_port: first.udp_port,
            addr: mr.addr(0),
            rkey: mr.rkey(),
            mtu,
            qps: prepared
                .iter()
                .map(|(n, ep)| (n.to_string(), (ep.qpn, ep.psn)))
                .collect(),
        })
    };

    // Exchange: the client speaks first so the server learns the MTU before building QPs.
    let (peer, rc, uc, ud, srq_qp, mw_qp) = if is_client {
        let mtu = Mtu::from_bytes(mtu_bytes)
            .with_context(|| format!("--mtu {mtu_bytes} is not 256, 512, 1024, 2048 or 4096"))?;
        let (rc, uc, ud, sq, mw) = (
            build(QpType::Rc, false, mtu, atomic_write)?,
            build(QpType::Uc, false, mtu, false)?,
            build(QpType::Ud, false, mtu, false)?,
            build(QpType::Rc, false, mtu, false)?,
            build(QpType::Rc, false, mtu, false)?,
        );
        let hello = hello_of(
            &[
                ("rc", rc.endpoint()),
                ("uc", uc.endpoint()),
                ("ud", ud.endpoint()),
                ("srq", sq.endpoint()),
                ("mw", mw.endpoint()),
            ],
            mtu_bytes,
        )?;
        line.send(&hello.line())?;
        let peer = Hello::parse(&line.recv()?)?;
        (peer, rc, uc, ud, sq, mw)
    } else {
        let peer = Hello::parse(&line.recv()?)?;
        let mtu = Mtu::from_bytes(peer.mtu)
            .with_context(|| format!("client MTU {} is not a valid path MTU", peer.mtu))?;
        let (rc, uc, ud, sq, mw) = (
            build(QpType::Rc, false, mtu, false)?,
            build(QpType::Uc, false, mtu, false)?,
            build(QpType::Ud, false, mtu, false)?,
            build(QpType::Rc, true, mtu, false)?,
            build(QpType::Rc, false, mtu, false)?,
        );
        let hello = hello_of(
            &[
                ("rc", rc.endpoint()),
                ("uc", uc.endpoint()),
                ("ud", ud.endpoint()),
                ("srq", sq.endpoint()),
                ("mw", mw.endpoint()),
            ],
            peer.mtu,
        )?;
        line.send(&hello.line())?;
        (peer, rc, uc, ud, sq, mw)
    };
    let rc = rc.handshake(peer.endpoint("rc"))?;
    let uc = uc.handshake(peer.endpoint("uc"))?;
    let ud = ud.handshake(peer.endpoint("ud"))?;
    let srq_qp = srq_qp.handshake(peer.endpoint("srq"))?;
    let mw_qp = mw_qp.handshake(peer.endpoint("mw"))?;
    let ud_peer = ud.ud_target(peer.endpoint("ud"), QKEY)?;
    let mw_mr = (!is_client)
        .then(|| {
            pd.allocate_with(
                MW_OFF + MW_LEN + 4096,
                AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::MW_BIND,
            )
        })
        .transpose()
        .context("registering the memory window region")?;
    let side = Side {
        ctx: ctx.clone(),
        pd,
        cq,
        mr,
        mw: RefCell::new(None),
        mw_mr,
        rc,
        uc,
        ud,
        srq_qp,
        mw_qp,
        _srq: srq,
        ud_peer,
        peer,
        timeout,
    };
    if is_client {
        client(&side, &mut line, args)
    } else {
        server(&side, &mut line)
    }
}

fn client(side: &Side, line: &mut Line, args: &OpsArgs) -> anyhow::Result<usize> {
    let only = selected_ops(args)?;
    let mut failed = 0;
    let mut seed = 1u32;
    println!(
        "# softroce ops: requester {} ({}) -> responder {}, MTU {}",
        side.ctx.name(),
        side.ctx.backend().kind(),
        side.peer.gid,
        args.mtu
    );
    let ud_mtu = side.ctx.query_port(1)?.active_mtu.bytes().min(args.mtu);
    for op in ALL_OPS {
        if !only.contains(&op) {
            continue;
        }
        for size in op.sizes(args.mtu, ud_mtu) {
            if size > args.max_size {
                continue;
            }
            seed = seed.wrapping_add(1);
            let outcome = run_cell(side, line, op, size, seed);
            match outcome {
                Ok(()) => println!("PASS {op} {size}"),
                Err(e) => {
                    failed += 1;
                    println!("FAIL {op} {size}: {e:#}");
                    // A QP left in error makes the remaining cells of its transport
                    // meaningless; say so once and stop rather than cascade.
                    if matches!(side.rc.state(), Ok(s) if s != softroce_verbs::QpState::Rts) {
                        println!("# the RC QP left RTS; stopping");
                        let _ = line.send("BYE");
                        return Ok(failed);
                    }
                }
            }
        }
    }
    line.send("BYE")?;
    Ok(failed)
}

fn run_cell(side: &Side, line: &mut Line, op: Op, size: usize, seed: u32) -> anyhow::Result<()> {
    if op.refused() {
        // The previous refused cell left the pair in ERR; the responder reconnects its end
        // when it reads the CELL, before it answers.
        side.mw_qp
            .reconnect(side.peer.endpoint("mw"))
            .context("reconnecting the window cells' QP")?;
    }
    line.send(&format!("CELL {} {size} {seed}", op.name()))?;
    let ready = line.recv()?;
    if let Some(reason) = ready.strip_prefix("FAIL ") {
        bail!("responder could not prepare: {reason}");
    }
    let window = match ready.strip_prefix("READY") {
        Some("") => None,
        Some(rest) => Some(parse_window(rest.trim())?),
        None => bail!("expected READY, got {ready:?}"),
    };
    ensure!(
        window.is_some() == op.uses_window(),
        "{op}: READY {} a memory window",
        if window.is_some() { "names" } else { "lacks" }
    );
    if let Err(e) = request(side, op, size, seed, window) {
        // Keep the control channel in step: the responder reports and moves on.
        line.send("ABORT")?;
        let _ = line.recv()?;
        return Err(e);
    }
    line.send("CHECK")?;
    let verdict = line.recv()?;
    if let Some(reason) = verdict.strip_prefix("FAIL ") {
        bail!("responder: {reason}");
    }
    ensure!(verdict == "PASS", "expected PASS, got {verdict:?}");
    Ok(())
}

/// `mw=RKEY:ADDR` (hex) of a memory window cell's READY.
fn parse_window(s: &str) -> anyhow::Result<(u32, u64)> {
    let (key, addr) = s
        .strip_prefix("mw=")
        .and_then(|kv| kv.split_once(':'))
        .with_context(|| format!("{s:?} is not mw=RKEY:ADDR"))?;
    Ok((
        u32::from_str_radix(key, 16).with_context(|| format!("window R_Key {key:?}"))?,
        u64::from_str_radix(addr, 16).with_context(|| format!("window address {addr:?}"))?,
    ))
}

/// The requester's half of a cell: post, complete, check what came back. `window`: the
/// R_Key and start of the responder's window (memory window cells).
fn request(
    side: &Side,
    op: Op,
    size: usize,
    seed: u32,
    window: Option<(u32, u64)>,
) -> anyhow::Result<()> {
    if let (true, Some(window)) = (op.refused(), window) {
        return request_refused(side, op, size, seed, window);
    }
    let mr = &side.mr;
    if op.is_atomic() {
        mr.write(0, &0u64.to_ne_bytes())?;
    } else if op == Op::RcAtomicWrite {
        mr.write(0, &atomic_write_value(seed).to_ne_bytes())?;
    } else if op.reads() {
        mr.write(0, &vec![0u8; size])?;
    } else {
        fill(mr, 0, size, seed)?;
    }
    let mut wr = SendWr::new(1000 + u64::from(seed), op.wr_opcode());
    wr.sg_list = vec![mr.slice(0..size)?].into();
    if size == 0 {
        wr.sg_list.clear();
    }
    if op.carries_imm() {
        wr.imm_data = IMM.to_be();
    }
    wr.rdma.remote_addr = side.peer.addr;
    wr.rdma.rkey = side.peer.rkey;
    wr.atomic.remote_addr = side.peer.addr;
    wr.atomic.rkey = side.peer.rkey;
    if let Some((rkey, start)) = window {
        wr.rdma.remote_addr = start;
        wr.rdma.rkey = rkey;
    }
    match op {
        Op::RcCmpSwap => {
            wr.atomic.compare_add = ATOMIC_START;
            wr.atomic.swap = !ATOMIC_START;
        }
        Op::RcFetchAdd => wr.atomic.compare_add = ATOMIC_ADD,
        _ => {}
    }
    let qp = match op {
        Op::UcSend | Op::UcWrite => &side.uc,
        Op::UdSend => {
            wr.ud = Some(side.ud_peer);
            &side.ud
        }
        Op::SrqSend => &side.srq_qp,
        _ => &side.rc,
    };
    // SAFETY: `mr` lives until the end of the program and is not touched until the
    // completion below is polled.
    unsafe { qp.post_send(std::slice::from_ref(&wr)) }?;
    let wc = one_completion(side, "send")?;
    check_success(&wc, "send")?;
    ensure!(
        wc.wr_id == wr.wr_id && wc.opcode == op.send_wc_opcode(),
        "send completion is wr_id {} {:?}, expected {} {:?}",
        wc.wr_id,
        wc.opcode,
        wr.wr_id,
        op.send_wc_opcode()
    );
    if op.reads() {
        ensure!(
            wc.byte_len as usize == size,
            "READ completion byte_len {} != {size}",
            wc.byte_len
        );
        verify(mr, 0, size, seed).context("READ data")?;
    }
    if op.is_atomic() {
        let old = read_u64(mr, 0)?;
        ensure!(
            old == ATOMIC_START,
            "{op} returned {old:#x}, expected the original {ATOMIC_START:#x}"
        );
    }
    Ok(())
}

/// The requester's half of a cell the responder must refuse, through the window
/// (`rkey`, `start`): the WR completes with IBV_WC_REM_ACCESS_ERR, a READ brings nothing back.
fn request_refused(
    side: &Side,
    op: Op,
    size: usize,
    seed: u32,
    (rkey, start): (u32, u64),
) -> anyhow::Result<()> {
    let mr = &side.mr;
    if op.reads() {
        mr.write(0, &vec![0u8; size])?;
    } else {
        fill(mr, 0, size, seed)?;
    }
    let mut wr = SendWr::new(1000 + u64::from(seed), op.wr_opcode());
    wr.sg_list = vec![mr.slice(0..size)?].into();
    wr.rdma.rkey = rkey;
    let (remote_addr, what) = match (op, size) {
        (Op::RcMwWriteOutside, 1) => (start - 1, "a WRITE of the byte before the window"),
        // Its first half inside the window: the whole WRITE is refused, none of it placed.
        (Op::RcMwWriteOutside, _) => (
            start + (MW_LEN - size / 2) as u64,
            "a WRITE across the window's end",
        ),
        _ => (start, "a READ through a window bound for REMOTE_WRITE only"),
    };
    wr.rdma.remote_addr = remote_addr;
    // SAFETY: `mr` lives until the end of the program and is not touched until the
    // completion below is polled.
    unsafe { side.mw_qp.post_send(std::slice::from_ref(&wr)) }?;
    let wc = one_completion(side, "send")?;
    ensure!(
        wc.wr_id == wr.wr_id,
        "completion of wr_id {}, expected {}",
        wc.wr_id,
        wr.wr_id
    );
    ensure!(
        wc.status == WcStatus::RemAccessErr,
        "{what} completed with {}, expected IBV_WC_REM_ACCESS_ERR",
        wc.status
    );
    if op.reads() {
        let mut back = vec![0u8; size];
        mr.read(0, &mut back)?;
        ensure!(
            back.iter().all(|&b| b == 0),
            "{what} was refused, yet data arrived"
        );
    }
    Ok(())
}

fn server(side: &Side, line: &mut Line) -> anyhow::Result<usize> {
    let mut failed = 0;
    loop {
        let msg = line.recv()?;
        if msg == "BYE" {
            return Ok(failed);
        }
        let words: Vec<&str> = msg.split_whitespace().collect();
        let [_, name, size, seed] = words[..] else {
            bail!("expected CELL op size seed, got {msg:?}");
        };
        ensure!(words[0] == "CELL", "expected CELL, got {msg:?}");
        let op = Op::parse(name).with_context(|| format!("unknown op {name:?}"))?;
        let size: usize = size.parse().context("size")?;
        let seed: u32 = seed.parse().context("seed")?;
        let ready = match prepare(side, op, size, seed) {
            Ok(None) => "READY".to_string(),
            Ok(Some((rkey, start))) => format!("READY mw={rkey:x}:{start:x}"),
            Err(e) => {
                line.send(&format!("FAIL {e:#}"))?;
                failed += 1;
                continue;
            }
        };
        line.send(&ready)?;
        let check = line.recv()?;
        if check == "ABORT" {
            println!("FAIL {op} {size} (requester failed; see its output)");
            failed += 1;
            line.send("ABORTED")?;
            continue;
        }
        ensure!(check == "CHECK", "expected CHECK, got {check:?}");
        match respond_check(side, op, size, seed) {
            Ok(()) => {
                println!("PASS {op} {size} (responder)");
                line.send("PASS")?;
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {op} {size} (responder): {e:#}");
                line.send(&format!("FAIL {e:#}"))?;
            }
        }
    }
}

/// The responder's preparation of a cell; memory window cells: the window's R_Key and start.
fn prepare(side: &Side, op: Op, size: usize, seed: u32) -> anyhow::Result<Option<(u32, u64)>> {
    ensure!(size <= MR_LEN - GRH, "size {size} exceeds the region");
    let mr = &side.mr;
    if op.is_atomic() || op == Op::RcAtomicWrite {
        mr.write(0, &ATOMIC_START.to_ne_bytes())?;
        mr.write(8, &[GUARD])?;
        return Ok(None);
    }
    if op.uses_window() {
        return bind_window(side, op, size, seed).map(Some);
    }
    if op == Op::RcRead {
        return fill(mr, 0, size, seed).map(|()| None);
    }
    // Clear what the message lands in, plus a guard byte that must stay untouched.
    let span = if op == Op::UdSend { GRH + size } else { size };
    mr.write(0, &vec![0u8; span + 1])?;
    mr.write(span, &[GUARD])?;
    if op.consumes_receive() {
        let sges = if span == 0 {
            Vec::new()
        } else {
            vec![mr.slice(0..span)?]
        };
        let wr_id = 7;
        // SAFETY: `mr` lives until the end of the program; the receive completes (or the
        // QP is destroyed) before it is reused.
        unsafe {
            match op {
                Op::UcSend => side.uc.post_receive(&sges, wr_id),
                Op::UdSend => side.ud.post_receive(&sges, wr_id),
                Op::SrqSend => match &side._srq {
                    Some(srq) => srq.post_receive(&sges, wr_id),
                    None => bail!("no SRQ on this side"),
                },
                _ => side.rc.post_receive(&sges, wr_id),
            }
        }?;
    }
    Ok(None)
}

/// A fresh type 2 window over `MW_LEN` bytes of the window region, bound on the RC QP (so
/// only the requester's RC QP may use its key; refused cells: on their own QP, reconnected
/// first), the region around it cleared or filled.
fn bind_window(side: &Side, op: Op, size: usize, seed: u32) -> anyhow::Result<(u32, u64)> {
    ensure!(
        size <= MW_LEN,
        "size {size} exceeds the {MW_LEN}-byte window"
    );
    let region = side
        .mw_mr
        .as_ref()
        .context("no window region on this side")?;
    // The previous cell's window goes first: a type 2 window is bound once.
    side.mw.borrow_mut().take();
    let qp = if op.refused() {
        side.mw_qp
            .reconnect(side.peer.endpoint("mw"))
            .context("reconnecting the window cells' QP")?;
        // A refused access may change nothing: every byte is a guard but what a READ
        // would return.
        region.write(0, &vec![GUARD; region.len()])?;
        &side.mw_qp
    } else {
        region.write(0, &vec![0u8; region.len()])?;
        region.write(MW_OFF - 1, &[GUARD])?;
        region.write(MW_OFF + size, &[GUARD])?;
        &side.rc
    };
    if matches!(op, Op::RcMwRead | Op::RcMwReadNoRights) {
        fill(region, MW_OFF, size, seed)?;
    }
    let mw = side.pd.alloc_mw(MwType::Type2)?;
    // RcMwReadNoRights: a write-only window, READ through it.
    let access = match op {
        Op::RcMwRead => AccessFlags::REMOTE_READ,
        _ => AccessFlags::REMOTE_WRITE,
    };
    let (wr, rkey) = mw.bind_wr(9, region, MW_OFF, MW_LEN, access);
    // SAFETY: the region outlives the window, which is dropped before it (`Side`).
    unsafe { qp.post_send(std::slice::from_ref(&wr)) }?;
    let wc = one_completion(side, "bind")?;
    check_success(&wc, "bind")?;
    ensure!(
        wc.wr_id == 9 && wc.opcode == WcOpcode::BindMw,
        "bind completion is wr_id {} {:?}",
        wc.wr_id,
        wc.opcode
    );
    *side.mw.borrow_mut() = Some(mw);
    Ok((rkey, region.addr(MW_OFF)))
}

fn respond_check(side: &Side, op: Op, size: usize, seed: u32) -> anyhow::Result<()> {
    let mr = &side.mr;
    // A READ's data was checked by the requester; the responder's memory is unchanged.
    if op == Op::RcRead {
        return Ok(());
    }
    if op.refused() {
        let region = side
            .mw_mr
            .as_ref()
            .context("no window region on this side")?;
        side.mw.borrow_mut().take();
        let mut now = vec![0u8; region.len()];
        region.read(0, &mut now)?;
        let read_back = op == Op::RcMwReadNoRights;
        let want = |i: usize| match i.checked_sub(MW_OFF) {
            Some(k) if read_back && k < size => pattern(seed, k),
            _ => GUARD,
        };
        if let Some(i) = (0..now.len()).find(|&i| now[i] != want(i)) {
            bail!(
                "the refused {op} changed byte {i} of the window's region (offset {} from \
                 the window) to {:#04x}",
                i as i64 - MW_OFF as i64,
                now[i]
            );
        }
        return Ok(());
    }
    if op.uses_window() {
        let region = side
            .mw_mr
            .as_ref()
            .context("no window region on this side")?;
        side.mw.borrow_mut().take();
        if op == Op::RcMwWrite {
            verify(region, MW_OFF, size, seed).context("data written through the window")?;
        }
        let mut guards = [0u8; 2];
        region.read(MW_OFF - 1, &mut guards[..1])?;
        region.read(MW_OFF + size, &mut guards[1..])?;
        ensure!(
            guards == [GUARD; 2],
            "a byte next to the window's data was overwritten"
        );
        return Ok(());
    }
    if op == Op::RcAtomicWrite {
        let now = read_u64(mr, 0)?;
        let want = atomic_write_value(seed);
        ensure!(now == want, "{op} left {now:#x}, expected {want:#x}");
        let mut guard = [0u8; 1];
        mr.read(8, &mut guard)?;
        ensure!(guard[0] == GUARD, "the byte after the 8 was overwritten");
        return Ok(());
    }
    if op.is_atomic() {
        let now = read_u64(mr, 0)?;
        let want = match op {
            Op::RcCmpSwap => !ATOMIC_START,
            _ => ATOMIC_START.wrapping_add(ATOMIC_ADD),
        };
        ensure!(now == want, "{op} left {now:#x}, expected {want:#x}");
        return Ok(());
    }
    let data_at = if op == Op::UdSend { GRH } else { 0 };
    if op.consumes_receive() {
        let wc = one_completion(side, "receive")?;
        check_success(&wc, "receive")?;
        let want_len = size + data_at;
        ensure!(
            wc.byte_len as usize == want_len,
            "receive byte_len {} != {want_len}",
            wc.byte_len
        );
        let want_opcode = if op == Op::RcWriteImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        ensure!(
            wc.opcode == want_opcode,
            "receive opcode {:?} != {want_opcode:?}",
            wc.opcode
        );
        ensure!(
            wc.wc_flags.contains(WcFlags::WITH_IMM) == op.carries_imm(),
            "receive IBV_WC_WITH_IMM is {}, expected {}",
            wc.wc_flags.contains(WcFlags::WITH_IMM),
            op.carries_imm()
        );
        if op.carries_imm() {
            ensure!(
                u32::from_be(wc.imm_data) == IMM,
                "immediate {:#x} != {IMM:#x}",
                u32::from_be(wc.imm_data)
            );
        }
        if op == Op::UdSend {
            ensure!(
                wc.wc_flags.contains(WcFlags::GRH),
                "UD receive lacks IBV_WC_GRH"
            );
            let peer_ud = side.peer.endpoint("ud").qpn;
            ensure!(
                wc.src_qp == peer_ud,
                "UD src_qp {:#x} != {peer_ud:#x}",
                wc.src_qp
            );
            check_grh(side, mr)?;
        }
    }
    if op == Op::UcWrite {
        // UC has no ACK: the requester's completion means sent, not placed, so the data may
        // still be on its way.
        let deadline = std::time::Instant::now() + side.timeout;
        while verify(mr, data_at, size, seed).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    verify(mr, data_at, size, seed).context("received data")?;
    let mut guard = [0u8; 1];
    mr.read(data_at + size, &mut guard)?;
    ensure!(
        guard[0] == GUARD,
        "the byte after the message was overwritten"
    );
    Ok(())
}

/// The 40-byte GRH area of a RoCEv2 UD receive: for IPv4 the last 20 bytes are the IPv4
/// header (libibverbs' layout), whose source must be the sender's address.
fn check_grh(side: &Side, mr: &MemoryRegion) -> anyhow::Result<()> {
    let mut grh = [0u8; GRH];
    mr.read(0, &mut grh)?;
    match side.peer.gid.to_ip() {
        IpAddr::V4(src) => {
            let ip = &grh[20..];
            ensure!(
                ip[0] == 0x45,
                "GRH area byte 20 is {:#04x}, not an IPv4 header",
                ip[0]
            );
            let got = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            ensure!(got == src, "GRH area IPv4 source {got} != sender {src}");
        }
        IpAddr::V6(_) => {
            let sgid = Gid::from_bytes(grh[8..24].try_into().unwrap_or([0; 16]));
            ensure!(
                sgid == side.peer.gid,
                "GRH SGID {sgid} != sender {}",
                side.peer.gid
            );
        }
    }
    Ok(())
}

fn one_completion(side: &Side, what: &str) -> anyhow::Result<WorkCompletion> {
    let got = side.cq.poll_wait(1, side.timeout)?;
    got.first()
        .copied()
        .with_context(|| format!("no {what} completion within {:?}", side.timeout))
}
