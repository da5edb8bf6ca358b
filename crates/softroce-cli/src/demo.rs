//! `softroce demo`: two emulated devices on loopback in one process, walked through every
//! kind of operation, with real UDP sockets and real fds.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use clap::Args;
use softroce_emu::core::{AtomicTarget, RdmaTarget, SendWr};
use softroce_verbs::{
    Context, EventType, Mtu, QpType, SendFlags, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
use softroce_wire::ROCE_V2_PORT;

/// Arguments of `softroce demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Address of the first device.
    #[arg(long, default_value = "127.0.0.1")]
    a: IpAddr,
    /// Address of the second device.
    #[arg(long, default_value = "127.0.0.2")]
    b: IpAddr,
    /// UDP port of both devices: RoCEv2's 4791, or 0 to pick free ports (captures of
    /// traffic on other ports are not recognised as RoCEv2 by tshark).
    #[arg(long, default_value_t = ROCE_V2_PORT)]
    port: u16,
}

const WAIT: Duration = Duration::from_secs(5);

pub(crate) fn run(args: &DemoArgs) -> ExitCode {
    match demo(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("softroce demo: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn one(cq: &softroce_verbs::CompletionQueue, what: &str) -> anyhow::Result<WorkCompletion> {
    let wcs = cq.poll_wait(1, WAIT)?;
    let Some(wc) = wcs.first().copied() else {
        bail!("{what}: no completion within {WAIT:?}");
    };
    ensure!(
        wc.status == WcStatus::Success,
        "{what}: completed with {} (vendor_err {:#x})",
        wc.status,
        wc.vendor_err
    );
    Ok(wc)
}

fn demo(args: &DemoArgs) -> anyhow::Result<()> {
    let a = Context::open_emulated("softroce0", args.a, args.port).context("device A")?;
    let b = Context::open_emulated("softroce1", args.b, args.port).context("device B")?;
    println!(
        "device A: {} GID[{}] {}",
        a.local_addr()?,
        a.ip_gid_index(),
        a.gid(a.ip_gid_index())?
    );
    println!(
        "device B: {} GID[{}] {}",
        b.local_addr()?,
        b.ip_gid_index(),
        b.gid(b.ip_gid_index())?
    );
    let port = a.query_port(1)?;
    println!(
        "port 1: {:?}, active MTU {}, max MTU {}",
        port.state, port.active_mtu, port.max_mtu
    );

    // ---- RC: SEND, WRITE with immediate, READ, atomics -------------------------------
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cqa, cqb) = (a.create_cq(64, None)?, b.create_cq(64, None)?);
    let (ma, mb) = (pa.allocate(1 << 16)?, pb.allocate(1 << 16)?);
    let qa = pa
        .create_qp(&cqa, &cqa, QpType::Rc)
        .mtu(Mtu::Mtu1024)
        .build()?;
    let qb = pb
        .create_qp(&cqb, &cqb, QpType::Rc)
        .mtu(Mtu::Mtu1024)
        .build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qa = qa.handshake(eb)?;
    let qb = qb.handshake(ea)?;
    println!(
        "RC QPs connected: A qpn={:#x} <-> B qpn={:#x}",
        ea.qpn, eb.qpn
    );

    let msg = b"hello from A over RoCEv2 / UDP 4791".repeat(100);
    ma.write(0, &msg)?;
    // SAFETY: `mb` and `ma` outlive every work request below; each is polled before reuse.
    unsafe { qb.post_receive(&[mb.slice(0..8192)?], 1)? };
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![ma.slice(0..msg.len())?].into();
    // SAFETY: as above.
    unsafe { qa.post_send(&[wr])? };
    one(&cqa, "RC SEND")?;
    let r = one(&cqb, "RC receive")?;
    let mut got = vec![0u8; msg.len()];
    mb.read(0, &mut got)?;
    ensure!(
        got == msg && r.byte_len as usize == msg.len(),
        "SEND payload differs"
    );
    println!(
        "RC SEND: {} bytes in {} packets, data verified",
        msg.len(),
        msg.len().div_ceil(1024)
    );

    // SAFETY: as above.
    unsafe { qb.post_receive(&[mb.slice(0..16)?], 2)? };
    ma.write(4096, &[7u8; 3000])?;
    let mut wr = SendWr::new(2, WrOpcode::RdmaWriteWithImm);
    wr.sg_list = vec![ma.slice(4096..7096)?].into();
    wr.rdma = RdmaTarget {
        remote_addr: mb.addr(20_000),
        rkey: mb.rkey(),
    };
    wr.imm_data = 0xC0FFEEu32.to_be();
    // SAFETY: as above.
    unsafe { qa.post_send(&[wr])? };
    one(&cqa, "RC WRITE_WITH_IMM")?;
    let r = one(&cqb, "WRITE_WITH_IMM receive")?;
    ensure!(
        r.opcode == WcOpcode::RecvRdmaWithImm && u32::from_be(r.imm_data) == 0xC0FFEE,
        "immediate lost"
    );
    let mut got = vec![0u8; 3000];
    mb.read(20_000, &mut got)?;
    ensure!(got == vec![7u8; 3000], "WRITE data differs");
    println!(
        "RC WRITE with immediate: 3000 bytes placed, imm {:#x} delivered",
        u32::from_be(r.imm_data)
    );

    mb.write(30_000, b"remote bytes READ back by A")?;
    let mut wr = SendWr::new(3, WrOpcode::RdmaRead);
    wr.sg_list = vec![ma.slice(40_000..40_027)?].into();
    wr.rdma = RdmaTarget {
        remote_addr: mb.addr(30_000),
        rkey: mb.rkey(),
    };
    // SAFETY: as above.
    unsafe { qa.post_send(&[wr])? };
    one(&cqa, "RC READ")?;
    let mut got = vec![0u8; 27];
    ma.read(40_000, &mut got)?;
    ensure!(&got == b"remote bytes READ back by A", "READ data differs");
    println!("RC READ: {:?}", String::from_utf8_lossy(&got));

    mb.write(48_000, &41u64.to_ne_bytes())?;
    let mut wr = SendWr::new(4, WrOpcode::AtomicFetchAndAdd);
    wr.sg_list = vec![ma.slice(48_000..48_008)?].into();
    wr.atomic = AtomicTarget {
        remote_addr: mb.addr(48_000),
        compare_add: 1,
        swap: 0,
        rkey: mb.rkey(),
    };
    // SAFETY: as above.
    unsafe { qa.post_send(&[wr])? };
    one(&cqa, "FETCH_ADD")?;
    let mut wr = SendWr::new(5, WrOpcode::AtomicCmpAndSwp);
    wr.sg_list = vec![ma.slice(48_008..48_016)?].into();
    wr.atomic = AtomicTarget {
        remote_addr: mb.addr(48_000),
        compare_add: 42,
        swap: 1000,
        rkey: mb.rkey(),
    };
    // SAFETY: as above.
    unsafe { qa.post_send(&[wr])? };
    one(&cqa, "CMP_SWAP")?;
    let mut v = [0u8; 8];
    mb.read(48_000, &mut v)?;
    ensure!(u64::from_ne_bytes(v) == 1000, "atomics did not apply");
    println!("RC atomics: FETCH_ADD 41 -> 42, CMP_SWAP 42 -> 1000");

    // ---- UD with the 40-byte GRH area ---------------------------------------------------
    let ua = pa.create_qp(&cqa, &cqa, QpType::Ud).build()?;
    let ub = pb.create_qp(&cqb, &cqb, QpType::Ud).build()?;
    let (uea, ueb) = (ua.endpoint(), ub.endpoint());
    let ua = ua.handshake(ueb)?;
    let _ub = ub.handshake(uea)?;
    // SAFETY: as above.
    unsafe { _ub.post_receive(&[mb.slice(0..40 + 256)?], 6)? };
    ma.write(0, &[0x55; 256])?;
    let mut wr = SendWr::new(6, WrOpcode::Send);
    wr.sg_list = vec![ma.slice(0..256)?].into();
    wr.ud = Some(ua.ud_target(ueb, 0x1111_1111)?);
    // SAFETY: as above.
    unsafe { ua.post_send(&[wr])? };
    one(&cqa, "UD SEND")?;
    let r = one(&cqb, "UD receive")?;
    let mut grh = [0u8; 40];
    mb.read(0, &mut grh)?;
    let info = softroce_wire::grh::parse_grh(&grh).context("GRH area")?;
    ensure!(
        r.wc_flags.contains(WcFlags::GRH) && r.byte_len == 296 && r.src_qp == uea.qpn,
        "UD completion fields"
    );
    println!(
        "UD SEND: 256 bytes, byte_len {} with the GRH area, source GID {} src_qp {:#x}",
        r.byte_len, info.sgid, r.src_qp
    );

    // ---- SRQ shared by two QPs ---------------------------------------------------------
    let srq = pb.create_srq(16, 1)?;
    for i in 0..4u64 {
        // SAFETY: as above.
        unsafe {
            srq.post_receive(
                &[mb.slice(i as usize * 1024..(i as usize + 1) * 1024)?],
                100 + i,
            )?
        };
    }
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let x = pa.create_qp(&cqa, &cqa, QpType::Rc).build()?;
        let y = pb.create_qp(&cqb, &cqb, QpType::Rc).srq(&srq).build()?;
        let (ex, ey) = (x.endpoint(), y.endpoint());
        pairs.push((x.handshake(ey)?, y.handshake(ex)?));
    }
    for (i, (x, _)) in pairs.iter().enumerate() {
        let mut wr = SendWr::new(10 + i as u64, WrOpcode::Send);
        wr.sg_list = vec![ma.slice(0..100)?].into();
        // SAFETY: as above.
        unsafe { x.post_send(&[wr])? };
    }
    cqa.poll_wait(2, WAIT)?;
    let got = cqb.poll_wait(2, WAIT)?;
    ensure!(
        got.len() == 2 && got.iter().all(|w| w.status == WcStatus::Success),
        "SRQ receives"
    );
    println!(
        "SRQ: two QPs received through one shared queue (wr_ids {} and {})",
        got[0].wr_id, got[1].wr_id
    );

    // ---- completion channel, non-blocking, polled like an event loop ---------------------
    let ch = b.create_comp_channel()?;
    ch.set_nonblocking(true)?;
    let cq_ev = b.create_cq(8, Some(&ch))?;
    let x = pa.create_qp(&cqa, &cqa, QpType::Rc).build()?;
    let y = pb.create_qp(&cq_ev, &cq_ev, QpType::Rc).build()?;
    let (ex, ey) = (x.endpoint(), y.endpoint());
    let (x, y) = (x.handshake(ey)?, y.handshake(ex)?);
    cq_ev.req_notify(false)?;
    ensure!(
        ch.get_cq_event(Some(Duration::ZERO)).is_err(),
        "no event before a completion"
    );
    // SAFETY: as above.
    unsafe { y.post_receive(&[mb.slice(0..64)?], 7)? };
    let mut wr = SendWr::new(7, WrOpcode::Send);
    wr.sg_list = vec![ma.slice(0..10)?].into();
    wr.send_flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
    // SAFETY: as above.
    unsafe { x.post_send(&[wr])? };
    let mut pfd = libc::pollfd {
        fd: ch.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack.
    let ready = unsafe { libc::poll(&mut pfd, 1, WAIT.as_millis() as i32) };
    ensure!(ready == 1, "the channel fd did not become readable");
    let cq_id = ch.get_cq_event(Some(Duration::ZERO))?;
    ensure!(cq_id == cq_ev.raw_handle(), "event names another CQ");
    cq_ev.ack_events(1)?;
    cq_ev.req_notify(false)?;
    let r = one(&cq_ev, "receive after the event")?;
    println!(
        "completion channel: fd {} polled readable, event for the CQ, wr_id {} polled, 1 event acked",
        ch.fd(),
        r.wr_id
    );
    cqa.poll_wait(1, WAIT)?;

    // ---- an induced CQ overrun and its async event --------------------------------------
    let small = b.create_cq(1, None)?;
    let x = pa.create_qp(&cqa, &cqa, QpType::Rc).build()?;
    let y = pb.create_qp(&small, &small, QpType::Rc).build()?;
    let (ex, ey) = (x.endpoint(), y.endpoint());
    let (x, y) = (x.handshake(ey)?, y.handshake(ex)?);
    for i in 0..3u64 {
        // SAFETY: as above.
        unsafe { y.post_receive(&[mb.slice(0..64)?], i)? };
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.sg_list = vec![ma.slice(0..8)?].into();
        // SAFETY: as above.
        unsafe { x.post_send(&[wr])? };
    }
    let ev = b.get_async_event(Some(WAIT))?;
    ensure!(
        ev.event_type == EventType::CqErr,
        "expected IBV_EVENT_CQ_ERR, got {}",
        ev.event_type
    );
    b.ack_async_event(&ev)?;
    let ev2 = b.get_async_event(Some(WAIT))?;
    b.ack_async_event(&ev2)?;
    println!(
        "CQ overrun: {} raised, then {} on the receiving QP (now {:?})",
        ev.event_type,
        ev2.event_type,
        y.state()?
    );
    let _ = cqa.poll_wait(3, Duration::from_millis(200));

    for (name, dev) in [("A", &a), ("B", &b)] {
        if let Some(c) = dev.counters() {
            println!("counters {name}: {c}");
        }
    }
    println!("demo ok");
    Ok(())
}
