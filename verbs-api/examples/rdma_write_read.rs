//! One-sided RDMA WRITE and READ between two processes, with the remote key exchanged out
//! of band.
//!
//! The story: a `board` process (device on 127.0.0.2) registers a 4 KiB notice board with
//! remote read and write access and publishes three things out of band: its QP endpoint,
//! the board's address and its rkey. A `visitor` (this process, device on 127.0.0.1) READs
//! the notice pinned at offset 0 and WRITEs its reply at offset 1024 — the board's CPU
//! takes no part in either, it posts no receive and sees no completion. Only when the
//! visitor says "done" out of band does the board look at its memory and check the reply.
//! Last, a READ with a wrong rkey shows what the remote side's protection looks like: the
//! visitor's QP fails with a remote access error.
//!
//! Run it with `cargo run -p softroce-verbs --example rdma_write_read`.

mod oob;

use std::time::Duration;

use oob::{BoxError, Peer};
use softroce_verbs::{AccessFlags, Context, QpType, RdmaTarget, SendWr, WcStatus, WrOpcode};

const WAIT: Duration = Duration::from_secs(10);
const NOTICE: &[u8] = b"Board open: write your name at offset 1024.";
const REPLY: &[u8] = b"visitor from 127.0.0.1 was here";

fn main() -> Result<(), BoxError> {
    match std::env::args().nth(1).as_deref() {
        Some("board") => board(),
        _ => visitor(),
    }
}

fn board() -> Result<(), BoxError> {
    let ctx = Context::open_emulated("softroce0", "127.0.0.2".parse()?, 0)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4, None)?;
    // The QP must allow remote READ and WRITE too (the region's flags and the QP's both
    // have to).
    let qp = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .access(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE)
        .build()?;
    let board = pd.allocate_with(
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    )?;
    board.write(0, NOTICE)?;

    // Out of band: endpoint, then "address rkey length" of the board.
    oob::send_to_parent(qp.endpoint())?;
    oob::send_to_parent(format!(
        "{} {} {}",
        board.addr(0),
        board.rkey(),
        board.len()
    ))?;
    let _qp = qp.handshake(oob::recv_from_parent()?.parse()?)?;
    oob::send_to_parent("ready")?;

    // Nothing to do until the visitor says it is done: the RDMA happens without us.
    if oob::recv_from_parent()? != "done" {
        return Err("board: the visitor did not finish".into());
    }
    let mut reply = vec![0u8; REPLY.len()];
    board.read(1024, &mut reply)?;
    if reply != REPLY {
        return Err(format!("board: found {:?}", String::from_utf8_lossy(&reply)).into());
    }
    oob::send_to_parent("reply found")?;
    // Stay up until the visitor has seen its failing READ refused by this device.
    oob::recv_from_parent()?;
    Ok(())
}

fn visitor() -> Result<(), BoxError> {
    let mut board = Peer::spawn("board")?;
    let ctx = Context::open_emulated("softroce0", "127.0.0.1".parse()?, 0)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4, None)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build()?;
    let local = pd.allocate(4096)?;

    let theirs = board.recv()?.parse()?;
    let region = board.recv()?;
    let [addr, rkey, len] = region.split(' ').collect::<Vec<_>>()[..] else {
        return Err(format!("board sent {region:?}, not ADDR RKEY LEN").into());
    };
    let (addr, rkey, len): (u64, u32, u64) = (addr.parse()?, rkey.parse()?, len.parse()?);
    board.send(qp.endpoint())?;
    let qp = qp.handshake(theirs)?;
    if board.recv()? != "ready" {
        return Err("the board did not get ready".into());
    }

    // READ the notice: remote bytes 0..len(NOTICE) land in our local buffer.
    let mut read = SendWr::new(1, WrOpcode::RdmaRead);
    read.sg_list = vec![local.slice(0..NOTICE.len())?].into();
    read.rdma = RdmaTarget {
        remote_addr: addr,
        rkey,
    };
    // SAFETY (this and the posts below): `local` outlives every completion polled here.
    unsafe { qp.post_send(&[read])? };
    expect(&cq, WcStatus::Success, "READ")?;
    let mut notice = vec![0u8; NOTICE.len()];
    local.read(0, &mut notice)?;
    println!(
        "READ from the board: {:?}",
        String::from_utf8_lossy(&notice)
    );

    // WRITE the reply where the notice asks (checked against the length we were told).
    if 1024 + REPLY.len() as u64 > len {
        return Err("the board is too small for the reply".into());
    }
    local.write(2048, REPLY)?;
    let mut write = SendWr::new(2, WrOpcode::RdmaWrite);
    write.sg_list = vec![local.slice(2048..2048 + REPLY.len())?].into();
    write.rdma = RdmaTarget {
        remote_addr: addr + 1024,
        rkey,
    };
    unsafe { qp.post_send(&[write])? };
    // RC: the completion means the bytes are in the board's memory.
    expect(&cq, WcStatus::Success, "WRITE")?;
    board.send("done")?;
    println!(
        "WRITE of {} bytes; the board says: {}",
        REPLY.len(),
        board.recv()?
    );

    // A key the board never handed out: its device refuses, and our QP goes to ERR.
    let mut bad = SendWr::new(3, WrOpcode::RdmaRead);
    bad.sg_list = vec![local.slice(0..8)?].into();
    bad.rdma = RdmaTarget {
        remote_addr: addr,
        rkey: rkey ^ 0x5a5a,
    };
    unsafe { qp.post_send(&[bad])? };
    expect(&cq, WcStatus::RemAccessErr, "READ with a wrong rkey")?;
    println!("READ with a wrong rkey: refused with a remote access error, as it should");
    board.send("bye")?;
    board.finish()
}

fn expect(
    cq: &softroce_verbs::CompletionQueue,
    status: WcStatus,
    what: &str,
) -> Result<(), BoxError> {
    let wc = cq.poll_wait(1, WAIT)?;
    match wc.first() {
        Some(wc) if wc.status == status => Ok(()),
        other => Err(format!("{what}: expected {status}, got {other:?}").into()),
    }
}
