//! Testing your own retry logic against loss, RNR and CQ overrun, in the deterministic
//! simulator.
//!
//! The story: an application sends orders over RC. The transport retries lost packets by
//! itself, but only `retry_cnt` times; after that the work request completes with
//! `RETRY_EXC_ERR` (or `RNR_RETRY_EXC_ERR` when the receiver had no buffer posted) and both
//! QPs must be reset and reconnected. The application therefore has its own retry loop,
//! `deliver`, on top — and its receiver drops duplicates by sequence number, because a
//! message whose ACK was lost has arrived although its send failed. Its receive loop,
//! `collect`, must also notice a CQ overrun (the CQ stops, an async event says why) instead
//! of waiting forever.
//!
//! Such paths are rare on a real network and impossible to schedule. Here the very same
//! verbs code runs on a simulated fabric in virtual time: 30 % loss over 100 seeds (each
//! seed loses different packets; a failing one is named and replays with
//! `SOFTROCE_SIM_SEED`), a receiver that posts its buffer late, and a CQ one entry too
//! small. ACK timeouts cost virtual time only, so the whole run takes about a second.
//!
//! Run it with `cargo run -p softroce-verbs --example sim_retry`.

use std::collections::BTreeSet;
use std::time::Duration;

use softroce_verbs::sim::{self, Fabric};
use softroce_verbs::{
    CompletionQueue, Context, EventType, MemoryRegion, QpType, QueuePair, QueuePairEndpoint,
    SendWr, WcOpcode, WcStatus, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

/// How long the application waits for one completion (virtual time in the simulator).
const WAIT: Duration = Duration::from_secs(5);
/// How often `deliver` tries before it gives up.
const ATTEMPTS: u32 = 10;

// ---- The application under test: nothing in it knows about the simulator ----------------

/// One end of the application's RC connection.
struct End {
    ctx: Context,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    endpoint: QueuePairEndpoint,
}

/// Connect `a` to `b` with the transport's retries cut short (ACK timeout 2^10 x 4.096 µs
/// = 4 ms, `retry_cnt` and `rnr_retry` as given), so the application's own retries matter.
fn connect(a: &Context, b: &Context, retry: u8, rnr_retry: u8) -> Result<(End, End), BoxError> {
    let prepare = |ctx: &Context| -> Result<_, BoxError> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(64, None)?;
        let qp = pd
            .create_qp(&cq, &cq, QpType::Rc)
            .reliability(10, retry, rnr_retry)
            .build()?;
        let mr = pd.allocate(4096)?;
        Ok((ctx.clone(), cq, qp, mr))
    };
    let ((ctx_a, cq_a, qp_a, mr_a), (ctx_b, cq_b, qp_b, mr_b)) = (prepare(a)?, prepare(b)?);
    let (ea, eb) = (qp_a.endpoint(), qp_b.endpoint());
    Ok((
        End {
            ctx: ctx_a,
            cq: cq_a,
            qp: qp_a.handshake(eb)?,
            mr: mr_a,
            endpoint: ea,
        },
        End {
            ctx: ctx_b,
            cq: cq_b,
            qp: qp_b.handshake(ea)?,
            mr: mr_b,
            endpoint: eb,
        },
    ))
}

/// The receiving application: a few 64-byte slots, each posted as a receive at most once
/// at a time, and the orders seen so far.
struct Receiver {
    end: End,
    posted: Vec<bool>,
    seen: BTreeSet<u64>,
    duplicates: u32,
}

impl Receiver {
    fn new(end: End, slots: usize) -> Self {
        Self {
            end,
            posted: vec![false; slots],
            seen: BTreeSet::new(),
            duplicates: 0,
        }
    }

    /// Post a receive on every slot that has none.
    fn post_all(&mut self) -> Result<(), BoxError> {
        for (slot, posted) in self.posted.iter_mut().enumerate() {
            if !*posted {
                let sge = self.end.mr.slice(slot * 64..(slot + 1) * 64)?;
                // SAFETY: `mr` lives in the same `End` as the QP, past every completion; a
                // slot is reposted only after its completion was polled, or after a reset
                // discarded its receive.
                unsafe { self.end.qp.post_receive(&[sge], slot as u64)? };
                *posted = true;
            }
        }
        Ok(())
    }

    /// Take what arrived and drop duplicates. An overrun CQ stops delivering completions;
    /// that is reported, not waited on.
    fn collect(&mut self) -> Result<(), BoxError> {
        let mut buf = [softroce_verbs::WorkCompletion::success(0, 0, WcOpcode::Send, 0); 16];
        loop {
            let n = match self.end.cq.poll(&mut buf) {
                Ok(n) => n,
                Err(e) => return Err(self.overrun_or(e.into())),
            };
            if n == 0 {
                return Ok(());
            }
            for wc in &buf[..n] {
                let slot = wc.wr_id as usize;
                self.posted[slot] = false;
                if wc.status != WcStatus::Success {
                    continue; // flushed; the order is sent again
                }
                let mut bytes = [0u8; 8];
                self.end.mr.read(slot * 64, &mut bytes)?;
                if !self.seen.insert(u64::from_le_bytes(bytes)) {
                    self.duplicates += 1;
                }
            }
        }
    }

    /// The peer reset the connection: keep what arrived before, repost the rest (a reset
    /// discards outstanding receives).
    fn after_reset(&mut self) -> Result<(), BoxError> {
        self.collect()?;
        self.posted.fill(false);
        self.post_all()
    }

    /// Name a CQ overrun when the device reported one, else pass `other` on.
    fn overrun_or(&self, other: BoxError) -> BoxError {
        match self.end.ctx.get_async_event(Some(Duration::ZERO)) {
            Ok(ev) if ev.event_type == EventType::CqErr => {
                let _ = self.end.ctx.ack_async_event(&ev);
                "the receive CQ overran (IBV_EVENT_CQ_ERR): completions were lost".into()
            }
            _ => other,
        }
    }
}

/// Send order `seq` until it is acknowledged: the application's retry loop. After a failed
/// attempt the sender's QP is in ERR; both QPs are reset and reconnected (a real program
/// asks its peer to do its half out of band) and the order is sent again. Returns how many
/// attempts it took.
fn deliver(from: &End, to: &mut Receiver, seq: u64) -> Result<u32, BoxError> {
    for attempt in 1..=ATTEMPTS {
        from.mr.write(2048, &seq.to_le_bytes())?;
        let mut wr = SendWr::new(seq, WrOpcode::Send);
        wr.sg_list = vec![from.mr.slice(2048..2056)?].into();
        // SAFETY: `mr` lives in `from`, past the completion polled next.
        unsafe { from.qp.post_send(&[wr])? };
        let wc = from.cq.poll_wait(1, WAIT)?;
        let wc = wc.first().ok_or("no send completion within the wait")?;
        match wc.status {
            WcStatus::Success => return Ok(attempt),
            WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => {
                from.qp.reconnect(to.end.endpoint)?;
                to.end.qp.reconnect(from.endpoint)?;
                to.after_reset()?;
            }
            other => return Err(format!("order {seq}: send failed with {other}").into()),
        }
    }
    Err(format!("order {seq}: not delivered in {ATTEMPTS} attempts").into())
}

// ---- The tests: the same code, with faults the simulator places ---------------------------

/// 30 % loss and one transport retry: some orders exhaust the transport's retries, the
/// application's loop gets them through, and none is seen twice.
fn lossy_link(fabric: &Fabric) -> Result<(u32, u32), BoxError> {
    let a = fabric.device("a", "10.0.0.1".parse()?)?;
    let b = fabric.device("b", "10.0.0.2".parse()?)?;
    fabric.set_link_faults("a", "b", "drop=0.3")?;
    let (sender, receiver) = connect(&a, &b, 1, 7)?;
    let mut receiver = Receiver::new(receiver, 4);
    receiver.post_all()?;
    let mut retries = 0;
    for seq in 0..20 {
        retries += deliver(&sender, &mut receiver, seq)? - 1;
        receiver.collect()?;
        receiver.post_all()?;
    }
    if receiver.seen != (0..20).collect() {
        return Err(format!("orders lost: received {:?}", receiver.seen).into());
    }
    Ok((retries, receiver.duplicates))
}

/// A receiver that posts its buffer only when asked again, and a sender that does not wait
/// for it (`rnr_retry` 0): the first attempt fails with RNR_RETRY_EXC_ERR, the retry
/// succeeds.
fn late_receiver(fabric: &Fabric) -> Result<u32, BoxError> {
    let a = fabric.device("a", "10.0.0.1".parse()?)?;
    let b = fabric.device("b", "10.0.0.2".parse()?)?;
    let (sender, receiver) = connect(&a, &b, 7, 0)?;
    let mut receiver = Receiver::new(receiver, 1);
    let attempts = deliver(&sender, &mut receiver, 1)?;
    receiver.collect()?;
    if receiver.seen != BTreeSet::from([1]) {
        return Err(format!("order 1 not received: {:?}", receiver.seen).into());
    }
    Ok(attempts)
}

/// A receive CQ that holds 2 completions and a receiver that polls only after 3 orders:
/// `collect` must say so rather than hang or lose orders quietly.
fn small_cq(fabric: &Fabric) -> Result<String, BoxError> {
    let a = fabric.device("a", "10.0.0.1".parse()?)?;
    let b = fabric.device("b", "10.0.0.2".parse()?)?;
    let (sender, receiver) = connect(&a, &b, 7, 7)?;
    receiver.cq.limit_depth(Some(2))?;
    let mut receiver = Receiver::new(receiver, 3);
    receiver.post_all()?;
    for seq in 0..3 {
        // The third order overruns the CQ; whether its send still succeeds is the
        // device's business, what matters is what the receiver learns.
        let _ = deliver(&sender, &mut receiver, seq);
    }
    match receiver.collect() {
        Err(e) => Ok(e.to_string()),
        Ok(()) => Err(format!("the overrun went unnoticed; received {:?}", receiver.seen).into()),
    }
}

fn main() -> Result<(), BoxError> {
    // Loss: 100 seeds; `check` panics naming the seed if any fails.
    sim::check(100, |f| lossy_link(f).map(|_| ()));
    let fabric = Fabric::new(7);
    let (retries, duplicates) = lossy_link(&fabric)?;
    println!(
        "loss: 100 seeds pass; seed 7 needed {retries} application retries, dropped {duplicates} duplicates, took {:?} of virtual time",
        fabric.now()
    );
    if retries == 0 {
        return Err("seed 7 was expected to exhaust the transport's retries at least once".into());
    }

    let fabric = Fabric::new(1);
    let attempts = late_receiver(&fabric)?;
    if attempts != 2 {
        return Err(format!("RNR: expected 2 attempts, took {attempts}").into());
    }
    println!("RNR: the first attempt found no receive buffer, the retry got through");

    let fabric = Fabric::new(1);
    let why = small_cq(&fabric)?;
    println!("CQ overrun: the receiver reports {why:?}");
    Ok(())
}
