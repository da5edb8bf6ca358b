//! Remote atomics: a shared ticket counter and a spin lock in another device's memory.
//!
//! The story: a `server` device (127.0.0.2) holds two 8-byte words, a ticket counter and a
//! lock. Four clients, each its own RC queue pair from a `clients` device (127.0.0.1), take
//! 50 tickets each with FETCH_AND_ADD: every ticket from 0 to 199 is handed out exactly once,
//! whatever the interleaving, because the responder applies each atomic as one step. Then
//! each client takes the lock with COMPARE_AND_SWAP (0 -> its id), sees who holds it when it
//! loses, and releases it (its id -> 0). The server's CPU does nothing but look at the final
//! values. (Two devices in one process, for brevity: `rc_pingpong` shows two processes.)
//!
//! Run it with `cargo run -p softroce-verbs --example atomics`.

use std::time::Duration;

use softroce_verbs::{
    AccessFlags, AtomicTarget, CompletionQueue, Context, MemoryRegion, QpType, QueuePair, SendWr,
    WcStatus, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

const WAIT: Duration = Duration::from_secs(10);
const CLIENTS: usize = 4;
const TICKETS_EACH: usize = 50;

fn main() -> Result<(), BoxError> {
    let server = Context::open_emulated("server", "127.0.0.2".parse()?, 0)?;
    let clients = Context::open_emulated("clients", "127.0.0.1".parse()?, 0)?;
    let (sp, cp) = (server.alloc_pd()?, clients.alloc_pd()?);
    let (scq, ccq) = (server.create_cq(16, None)?, clients.create_cq(256, None)?);
    // Atomics need 8-byte aligned targets (allocate's buffers are) and REMOTE_ATOMIC access
    // on the region and the QP.
    let words = sp.allocate_with(16, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC)?;
    let (counter, lock) = (words.addr(0), words.addr(8));
    // Each client's landing zone for the old values the atomics return.
    let results = cp.allocate(CLIENTS * TICKETS_EACH * 8 + CLIENTS * 8)?;

    let mut qps = Vec::new();
    let mut server_qps = Vec::new();
    for _ in 0..CLIENTS {
        let c = cp.create_qp(&ccq, &ccq, QpType::Rc).build()?;
        let s = sp
            .create_qp(&scq, &scq, QpType::Rc)
            .access(AccessFlags::REMOTE_ATOMIC)
            .build()?;
        let (ce, se) = (c.endpoint(), s.endpoint());
        qps.push(c.handshake(se)?);
        server_qps.push(s.handshake(ce)?);
    }

    // Tickets: all four clients post their FETCH_AND_ADDs at once.
    for (i, qp) in qps.iter().enumerate() {
        let wrs: Vec<SendWr> = (0..TICKETS_EACH)
            .map(|t| {
                let slot = (i * TICKETS_EACH + t) * 8;
                atomic(
                    WrOpcode::AtomicFetchAndAdd,
                    &results,
                    slot,
                    counter,
                    &words,
                    1,
                    0,
                )
            })
            .collect::<Result<_, _>>()?;
        // SAFETY (this and the posts below): `results` lives to the end of main, after every
        // completion was polled.
        unsafe { qp.post_send(&wrs)? };
    }
    wait_ok(&ccq, CLIENTS * TICKETS_EACH, "FETCH_AND_ADD")?;
    let mut tickets: Vec<u64> = (0..CLIENTS * TICKETS_EACH)
        .map(|k| read_u64(&results, k * 8))
        .collect::<Result<_, _>>()?;
    tickets.sort_unstable();
    if tickets != (0..(CLIENTS * TICKETS_EACH) as u64).collect::<Vec<_>>() {
        return Err(format!("tickets handed out twice or never: {tickets:?}").into());
    }
    println!(
        "FETCH_AND_ADD: {CLIENTS} clients took {} tickets, each number exactly once; counter = {}",
        tickets.len(),
        read_u64(&words, 0)?
    );

    // The lock: each client in turn tries 0 -> id while the previous holder still has it,
    // then the holder releases it and the next one gets it.
    let base = CLIENTS * TICKETS_EACH * 8;
    let mut holder = 0u64;
    for (i, qp) in qps.iter().enumerate() {
        let id = i as u64 + 1;
        let old = compare_swap(qp, &ccq, &results, base + i * 8, lock, &words, 0, id)?;
        if old != holder {
            return Err(format!("client {id}: lock word was {old}, expected {holder}").into());
        }
        if holder != 0 {
            println!("COMPARE_AND_SWAP 0 -> {id}: lost, client {old} holds the lock");
            // The holder releases: id -> 0 succeeds only for the holder.
            let prev = &qps[holder as usize - 1];
            compare_swap(prev, &ccq, &results, base + i * 8, lock, &words, holder, 0)?;
            let again = compare_swap(qp, &ccq, &results, base + i * 8, lock, &words, 0, id)?;
            if again != 0 {
                return Err(format!("client {id}: lock still held by {again}").into());
            }
        }
        println!("COMPARE_AND_SWAP 0 -> {id}: client {id} holds the lock");
        holder = id;
    }
    if read_u64(&words, 8)? != CLIENTS as u64 {
        return Err("the lock word does not name the last holder".into());
    }
    println!("atomics ok");
    Ok(())
}

/// An atomic work request whose old value lands at `slot` of `results`.
fn atomic(
    opcode: WrOpcode,
    results: &MemoryRegion,
    slot: usize,
    remote_addr: u64,
    remote: &MemoryRegion,
    compare_add: u64,
    swap: u64,
) -> Result<SendWr, BoxError> {
    let mut wr = SendWr::new(slot as u64, opcode);
    wr.sg_list = vec![results.slice(slot..slot + 8)?].into();
    // The rkey travels out of band in real programs; here both devices are ours.
    wr.atomic = AtomicTarget {
        remote_addr,
        compare_add,
        swap,
        rkey: remote.rkey(),
    };
    Ok(wr)
}

/// COMPARE_AND_SWAP `compare -> swap`; returns the value the word had.
#[allow(clippy::too_many_arguments)]
fn compare_swap(
    qp: &QueuePair,
    cq: &CompletionQueue,
    results: &MemoryRegion,
    slot: usize,
    addr: u64,
    remote: &MemoryRegion,
    compare: u64,
    swap: u64,
) -> Result<u64, BoxError> {
    let wr = atomic(
        WrOpcode::AtomicCmpAndSwp,
        results,
        slot,
        addr,
        remote,
        compare,
        swap,
    )?;
    unsafe { qp.post_send(&[wr])? };
    wait_ok(cq, 1, "COMPARE_AND_SWAP")?;
    read_u64(results, slot)
}

fn wait_ok(cq: &CompletionQueue, n: usize, what: &str) -> Result<(), BoxError> {
    let wcs = cq.poll_wait(n, WAIT)?;
    if wcs.len() != n || wcs.iter().any(|wc| wc.status != WcStatus::Success) {
        return Err(format!("{what}: {} of {n} completed: {wcs:?}", wcs.len()).into());
    }
    Ok(())
}

/// Atomics work on host-endian 64-bit words, as on a NIC.
fn read_u64(mr: &MemoryRegion, offset: usize) -> Result<u64, BoxError> {
    let mut b = [0u8; 8];
    mr.read(offset, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}
