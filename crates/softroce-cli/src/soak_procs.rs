//! `softroce soak --processes`: the soak between two processes over the real UDP driver.
//!
//! This process is the requester; it starts a second `softroce` as the responder. Both
//! devices get the same fault plan. The mix of operations (SEND, WRITE with immediate, READ,
//! FETCH_ADD) and every size and byte follow from the seed, so each side knows what it must
//! see: the requester checks that its completions arrive in posting order, that every READ
//! brought the responder's bytes and that the n-th FETCH_ADD returned n times the addend
//! (each executed exactly once); the responder checks that every SEND and WRITE with
//! immediate arrived once, in order, byte for byte. The endpoints go over the child's stdin
//! and stdout.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use softroce_emu::driver::DeviceConfig;
use softroce_verbs::{
    AccessFlags, Context, QpCap, QpType, QueuePairEndpoint, RecvWr, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// Largest message of the mix.
const MAX_LEN: usize = 4096;
/// Receives the responder keeps posted.
const RQ_DEPTH: usize = 128;
/// Slots WRITE with immediate cycles through at the responder, by the message's place
/// among those that take a receive (SEND and WRITE with immediate; READs and atomics take
/// none): at most `RQ_DEPTH` of those are unchecked at the responder (it posts a receive
/// again only after checking) and `WINDOW` more in flight, so a slot is rewritten only
/// after its previous message was checked.
const WRITE_SLOTS: usize = 2 * RQ_DEPTH + 1;
const _: () = assert!(WRITE_SLOTS > RQ_DEPTH + WINDOW);
/// Requests the requester keeps in flight.
const WINDOW: usize = 32;
/// What every FETCH_ADD adds.
const ADD: u64 = 3;

/// The four operations of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    WriteImm,
    Read,
    FetchAdd,
}

/// A 64-bit mix of the seed and the message index (splitmix64).
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed
        .wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn op_of(seed: u64, i: u64) -> Op {
    match mix(seed, i) % 4 {
        0 => Op::Send,
        1 => Op::WriteImm,
        2 => Op::Read,
        _ => Op::FetchAdd,
    }
}

fn len_of(seed: u64, i: u64) -> usize {
    1 + (mix(seed ^ 0x5555, i) % MAX_LEN as u64) as usize
}

/// Byte `j` of message `i`.
fn byte(i: u64, j: usize) -> u8 {
    (i.wrapping_mul(131).wrapping_add(j as u64 * 7)) as u8
}

/// Byte `p` of the responder's READ area.
fn read_byte(p: usize) -> u8 {
    (p.wrapping_mul(13) + 7) as u8
}

fn open(ip: IpAddr, faults: Option<&str>) -> anyhow::Result<Context> {
    let mut cfg = DeviceConfig::new("soak", ip);
    cfg.hca.udp_port = 0;
    cfg.faults = faults.map(str::to_string);
    // A soak is about recovering from faults, however many in a row its seed brings: its
    // QPs retry forever on retry_cnt 7, as rxe's do (by the man page 7 means seven retries,
    // which a fifth of the datagrams lost each way exhausts now and then).
    cfg.hca.retry_cnt_7_is_infinite = true;
    Ok(Context::open_emulated_with(cfg)?)
}

fn caps() -> QpCap {
    QpCap::new(WINDOW as u32 + 4, RQ_DEPTH as u32 + 4)
}

/// Figures of a finished two-process soak.
pub(crate) struct Figures {
    pub messages: u64,
    pub by_op: [u64; 4],
    pub elapsed: Duration,
    pub requester: String,
    pub responder: String,
}

/// Run the requester here and the responder in a child process.
pub(crate) fn run(
    messages: u64,
    seed: u64,
    faults: Option<&str>,
    ips: (IpAddr, IpAddr),
    timeout: Duration,
) -> anyhow::Result<Figures> {
    let exe = std::env::current_exe().context("locating the softroce binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["soak", "--responder", "--bind", &ips.1.to_string()])
        .args(["-n", &messages.to_string(), "--seed", &seed.to_string()])
        .env_remove("SOFTROCE_FAULTS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if let Some(f) = faults {
        cmd.args(["--faults", f]);
    }
    let mut child = cmd.spawn().context("starting the responder process")?;
    let result = requester(&mut child, messages, seed, faults, ips.0, timeout);
    if result.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().context("waiting for the responder")?;
    let figures = result?;
    ensure!(status.success(), "the responder process failed ({status})");
    Ok(figures)
}

fn requester(
    child: &mut std::process::Child,
    messages: u64,
    seed: u64,
    faults: Option<&str>,
    ip: IpAddr,
    timeout: Duration,
) -> anyhow::Result<Figures> {
    let mut out = BufReader::new(child.stdout.take().context("responder stdout")?);
    let mut input = child.stdin.take().context("responder stdin")?;
    let ctx = open(ip, faults)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(256, None)?;
    let mr = pd.allocate(WINDOW * MAX_LEN)?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .caps(caps())
        .mtu(softroce_verbs::Mtu::Mtu4096)
        // A 4 ms ACK timeout (loopback answers in microseconds; rdma-core's default, 67 ms,
        // would only make the soak slow); retries forever (see `open`).
        .reliability(10, 7, 7)
        .build()?;
    let mut hello = String::new();
    out.read_line(&mut hello)
        .context("reading the responder's endpoint")?;
    let mut words = hello.split_whitespace();
    let remote: QueuePairEndpoint = words
        .next()
        .context("the responder said nothing")?
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let hex = |w: Option<&str>| -> anyhow::Result<u64> {
        Ok(u64::from_str_radix(
            w.context("responder line too short")?,
            16,
        )?)
    };
    let (write_addr, write_rkey) = (hex(words.next())?, hex(words.next())? as u32);
    let (read_addr, read_rkey) = (hex(words.next())?, hex(words.next())? as u32);
    let (atomic_addr, atomic_rkey) = (hex(words.next())?, hex(words.next())? as u32);
    writeln!(input, "{}", qp.endpoint()).context("answering the responder")?;
    let qp = qp.handshake(remote)?;

    let start = Instant::now();
    let deadline = start + timeout;
    let mut by_op = [0u64; 4];
    let mut fetch_adds = 0u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 32];
    let mut fetch_add_index = Vec::with_capacity(WINDOW);
    // SENDs and WRITEs with immediate posted so far: a WRITE's slot is its place among them.
    let mut receivers = 0usize;
    while done < messages {
        while posted < messages && posted - done < WINDOW as u64 {
            let i = posted;
            let slot = (i as usize % WINDOW) * MAX_LEN;
            let (op, len) = (op_of(seed, i), len_of(seed, i));
            let wr = match op {
                Op::Send | Op::WriteImm => {
                    let data: Vec<u8> = (0..len).map(|j| byte(i, j)).collect();
                    mr.write(slot, &data)?;
                    let mut wr = SendWr::new(
                        i,
                        if op == Op::Send {
                            WrOpcode::Send
                        } else {
                            WrOpcode::RdmaWriteWithImm
                        },
                    );
                    wr.sg_list = vec![mr.slice(slot..slot + len)?].into();
                    wr.imm_data = (i as u32).to_be();
                    wr.rdma.remote_addr = write_addr + ((receivers % WRITE_SLOTS) * MAX_LEN) as u64;
                    wr.rdma.rkey = write_rkey;
                    receivers += 1;
                    wr
                }
                Op::Read => {
                    mr.write(slot, &vec![0u8; len])?;
                    let mut wr = SendWr::new(i, WrOpcode::RdmaRead);
                    wr.sg_list = vec![mr.slice(slot..slot + len)?].into();
                    wr.rdma.remote_addr = read_addr + (i as usize % MAX_LEN) as u64;
                    wr.rdma.rkey = read_rkey;
                    wr
                }
                Op::FetchAdd => {
                    let mut wr = SendWr::new(i, WrOpcode::AtomicFetchAndAdd);
                    wr.sg_list = vec![mr.slice(slot..slot + 8)?].into();
                    wr.atomic.remote_addr = atomic_addr;
                    wr.atomic.rkey = atomic_rkey;
                    wr.atomic.compare_add = ADD;
                    fetch_add_index.push((i, fetch_adds));
                    fetch_adds += 1;
                    wr
                }
            };
            // SAFETY: `mr` outlives the loop; slot `i % WINDOW` is rewritten only after
            // request `i` completed (at most WINDOW in flight).
            unsafe { qp.post_send(std::slice::from_ref(&wr))? };
            posted += 1;
        }
        ensure!(
            Instant::now() < deadline,
            "timed out after {done} of {messages} messages ({:?})",
            timeout
        );
        // The responder leaves only after DONE: gone before, it failed (and said why), and
        // nothing would answer until the timeout.
        if let Some(status) = child.try_wait().context("watching the responder")? {
            bail!("the responder process ended ({status}) after {done} of {messages} messages");
        }
        let mut batch = cq.poll_wait(1, Duration::from_millis(200))?;
        if !batch.is_empty() {
            let more = cq.poll(&mut wcs)?;
            batch.extend_from_slice(&wcs[..more]);
        }
        for wc in batch {
            let i = done;
            ensure!(
                wc.status == WcStatus::Success,
                "message {} completed with {} (vendor_err {:#x})",
                wc.wr_id,
                wc.status,
                wc.vendor_err
            );
            ensure!(
                wc.wr_id == i,
                "the completion of message {} came when message {i} was due",
                wc.wr_id
            );
            let slot = (i as usize % WINDOW) * MAX_LEN;
            let op = op_of(seed, i);
            match op {
                Op::Read => {
                    let len = len_of(seed, i);
                    let mut data = vec![0u8; len];
                    mr.read(slot, &mut data)?;
                    let base = i as usize % MAX_LEN;
                    if let Some(j) = (0..len).find(|&j| data[j] != read_byte(base + j)) {
                        bail!("READ {i}: byte {j} of {len} is wrong");
                    }
                }
                Op::FetchAdd => {
                    let (index, nth) = fetch_add_index.remove(0);
                    ensure!(index == i, "FETCH_ADD bookkeeping out of step at {i}");
                    let mut old = [0u8; 8];
                    mr.read(slot, &mut old)?;
                    let old = u64::from_ne_bytes(old);
                    ensure!(
                        old == nth * ADD,
                        "FETCH_ADD {i} (the {nth}th) returned {old}, expected {}: executed twice or lost",
                        nth * ADD
                    );
                }
                Op::Send | Op::WriteImm => {}
            }
            by_op[op as usize] += 1;
            done += 1;
        }
    }
    let elapsed = start.elapsed();
    writeln!(input, "DONE").ok();
    let mut responder = String::new();
    out.read_line(&mut responder)
        .context("reading the responder's figures")?;
    let c = ctx.counters().unwrap_or_default();
    Ok(Figures {
        messages,
        by_op,
        elapsed,
        requester: format!(
            "retransmitted_pkts={} rcvd_seq_err={} completer_retry_err={} {}",
            c.retransmitted_pkts,
            c.rcvd_seq_err,
            c.completer_retry_err,
            ctx.fault_counters().unwrap_or_default()
        ),
        responder: responder.trim().to_string(),
    })
}

/// The responder process: prints its endpoint and memory, serves until every SEND and WRITE
/// with immediate of the mix arrived (each checked in order, byte for byte), then prints its
/// figures after the requester says `DONE`.
pub(crate) fn responder(
    messages: u64,
    seed: u64,
    faults: Option<&str>,
    ip: IpAddr,
    timeout: Duration,
) -> anyhow::Result<()> {
    let ctx = open(ip, faults)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(512, None)?;
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let recv = pd.allocate_with(RQ_DEPTH * MAX_LEN, all)?;
    let writes = pd.allocate_with(WRITE_SLOTS * MAX_LEN, all)?;
    let reads = pd.allocate_with(2 * MAX_LEN, all)?;
    let atomic = pd.allocate_with(8, all)?;
    let area: Vec<u8> = (0..2 * MAX_LEN).map(read_byte).collect();
    reads.write(0, &area)?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .caps(caps())
        .mtu(softroce_verbs::Mtu::Mtu4096)
        .build()?;
    let recv_wr = |slot: usize| -> anyhow::Result<RecvWr> {
        Ok(RecvWr {
            wr_id: slot as u64,
            sg_list: vec![recv.slice(slot * MAX_LEN..(slot + 1) * MAX_LEN)?].into(),
        })
    };
    for slot in 0..RQ_DEPTH {
        // SAFETY: `recv` outlives the QP's use of it (dropped after the QP).
        unsafe { qp.post_receives(&[recv_wr(slot)?])? };
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{} {:x} {:x} {:x} {:x} {:x} {:x}",
        qp.endpoint(),
        writes.addr(0),
        writes.rkey(),
        reads.addr(0),
        reads.rkey(),
        atomic.addr(0),
        atomic.rkey()
    )?;
    stdout.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let remote: QueuePairEndpoint = line.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let qp = qp.handshake(remote)?;

    let expected: Vec<u64> = (0..messages)
        .filter(|&i| matches!(op_of(seed, i), Op::Send | Op::WriteImm))
        .collect();
    let deadline = Instant::now() + timeout;
    let mut next = 0usize;
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 32];
    while next < expected.len() {
        ensure!(
            Instant::now() < deadline,
            "timed out after {next} of {} receives",
            expected.len()
        );
        let mut batch = cq.poll_wait(1, Duration::from_millis(200))?;
        if !batch.is_empty() {
            let more = cq.poll(&mut wcs)?;
            batch.extend_from_slice(&wcs[..more]);
        }
        for wc in batch {
            let i = expected[next];
            ensure!(
                wc.status == WcStatus::Success,
                "receive for message {i} completed with {} (vendor_err {:#x})",
                wc.status,
                wc.vendor_err
            );
            let len = len_of(seed, i);
            let slot = wc.wr_id as usize;
            let data = match op_of(seed, i) {
                Op::Send => {
                    ensure!(
                        wc.opcode == WcOpcode::Recv && wc.byte_len as usize == len,
                        "message {i}: a SEND of {len} bytes was due, got {:?} of {}",
                        wc.opcode,
                        wc.byte_len
                    );
                    let mut d = vec![0u8; len];
                    recv.read(slot * MAX_LEN, &mut d)?;
                    d
                }
                _ => {
                    let imm = u32::from_be(wc.imm_data);
                    ensure!(
                        wc.opcode == WcOpcode::RecvRdmaWithImm && imm == i as u32,
                        "message {i}: a WRITE with immediate {i} was due, got {:?} imm {imm}",
                        wc.opcode
                    );
                    let mut d = vec![0u8; len];
                    writes.read((next % WRITE_SLOTS) * MAX_LEN, &mut d)?;
                    d
                }
            };
            if let Some(j) = (0..len).find(|&j| data[j] != byte(i, j)) {
                bail!("message {i}: byte {j} of {len} is wrong");
            }
            // SAFETY: as above; the slot was just checked.
            unsafe { qp.post_receives(&[recv_wr(slot)?])? };
            next += 1;
        }
    }
    // Stay until the requester is done: its READs and atomics still need this device.
    line.clear();
    std::io::stdin().lock().read_line(&mut line)?;
    let c = ctx.counters().unwrap_or_default();
    writeln!(
        stdout,
        "received={} duplicate_request={} out_of_seq_request={} rcvd_seq_err={} {}",
        expected.len(),
        c.duplicate_request,
        c.out_of_seq_request,
        c.rcvd_seq_err,
        ctx.fault_counters().unwrap_or_default()
    )?;
    stdout.flush()?;
    Ok(())
}
