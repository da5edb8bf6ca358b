//! What the simulated fabric finds and shows: a buggy user program caught with the seed
//! that reproduces it, a retry-exceeded path in virtual time, three devices with a fault
//! each, and waits that would hang reported instead.

use std::time::Duration;

use softroce_verbs::sim::{self, Fabric};
use softroce_verbs::{
    CompletionQueue, Context, EventType, MemoryRegion, QpType, QueuePair, SendWr, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

/// Records the shipper sends per run.
const RECORDS: u64 = 40;
/// Bytes of one record: its sequence number and a value derived from it.
const RECORD: usize = 16;

fn empty_wc() -> WorkCompletion {
    WorkCompletion::success(0, 0, WcOpcode::Send, 0)
}

/// Two connected RC QPs, each with its own CQ, on devices `a` and `b`.
struct Link {
    qa: QueuePair,
    ca: CompletionQueue,
    qb: QueuePair,
    cb: CompletionQueue,
    /// Registered memory on each side (kept alive past every completion).
    ma: MemoryRegion,
    mb: MemoryRegion,
}

fn connect(a: &Context, b: &Context, timeout: u8, retry_cnt: u8) -> Result<Link, BoxError> {
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (ca, cb) = (a.create_cq(64, None)?, b.create_cq(64, None)?);
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc)
        .sq_sig_all(true)
        .reliability(timeout, retry_cnt, 7)
        .build()?;
    let qb = pb
        .create_qp(&cb, &cb, QpType::Rc)
        .sq_sig_all(true)
        .reliability(timeout, retry_cnt, 7)
        .build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    Ok(Link {
        qa: qa.handshake(eb)?,
        ca,
        qb: qb.handshake(ea)?,
        cb,
        ma: pa.allocate(4096)?,
        mb: pb.allocate(4096)?,
    })
}

/// How the log shipper treats its two-slot ring of send buffers.
#[derive(Clone, Copy)]
enum Reuse {
    /// The bug: a slot is rewritten two records later, whether or not the send that read it
    /// has completed. A retransmission then reads the newer record's bytes.
    Early,
    /// Correct: a slot is rewritten only after the send that used it completed.
    AfterCompletion,
}

/// A user's log shipper: streams numbered records from `a` to `b` under 5 % loss; `b`
/// checks that they arrive in order and intact.
fn ship_logs(fabric: &Fabric, reuse: Reuse) -> Result<(), BoxError> {
    let a = fabric.device("a", "10.0.0.1".parse()?)?;
    let b = fabric.device("b", "10.0.0.2".parse()?)?;
    fabric.set_link_faults("a", "b", "drop=0.05")?;
    let link = connect(&a, &b, 14, 7)?;
    let slots = 8;
    for slot in 0..slots {
        let sge = link.mb.slice(slot * RECORD..(slot + 1) * RECORD)?;
        // SAFETY: `mb` lives in `link` past every completion.
        unsafe { link.qb.post_receive(&[sge], slot as u64)? };
    }
    let mut run = Shipper {
        link,
        completed: 0,
        received: 0,
    };
    for seq in 0..RECORDS {
        if let Reuse::AfterCompletion = reuse {
            // The send that last used this slot is record seq - 2.
            for _ in 0..100_000 {
                if run.completed + 2 > seq {
                    break;
                }
                run.turn()?;
            }
        }
        let slot = (seq % 2) as usize;
        let mut record = seq.to_le_bytes().to_vec();
        record.extend_from_slice(&(seq * 31 + 7).to_le_bytes());
        let link = &run.link;
        link.ma.write(slot * RECORD, &record)?;
        let mut wr = SendWr::new(seq, WrOpcode::Send);
        wr.sg_list = vec![link.ma.slice(slot * RECORD..(slot + 1) * RECORD)?].into();
        // SAFETY: `ma` outlives the QP. (Reusing the slot early breaks the *data*
        // contract, not memory safety: the region stays allocated.)
        unsafe { link.qa.post_send(&[wr])? };
        run.turn()?;
    }
    for _ in 0..100_000 {
        if run.received == RECORDS && run.completed == RECORDS {
            return Ok(());
        }
        run.turn()?;
    }
    Err(format!(
        "stalled: {} records received, {} sends completed",
        run.received, run.completed
    )
    .into())
}

/// The shipper's state between turns.
struct Shipper {
    link: Link,
    /// Sends completed (in order, as RC completes them).
    completed: u64,
    /// Records received intact, in order.
    received: u64,
}

impl Shipper {
    /// One poll of each side: at most one send completion and one record.
    fn turn(&mut self) -> Result<(), BoxError> {
        let link = &self.link;
        let mut wc = [empty_wc()];
        if link.ca.poll(&mut wc)? == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(format!("a: send {} failed: {}", wc[0].wr_id, wc[0].status).into());
            }
            self.completed += 1;
        }
        if link.cb.poll(&mut wc)? == 0 {
            return Ok(());
        }
        let slot = wc[0].wr_id as usize;
        let mut bytes = [0u8; RECORD];
        link.mb.read(slot * RECORD, &mut bytes)?;
        let seq = u64::from_le_bytes(bytes[..8].try_into()?);
        let value = u64::from_le_bytes(bytes[8..].try_into()?);
        let want = self.received;
        if (seq, value) != (want, want * 31 + 7) {
            return Err(format!(
                "b: record #{want} arrived as ({seq}, {value}): its buffer was rewritten before the send completed"
            )
            .into());
        }
        self.received += 1;
        let sge = link.mb.slice(slot * RECORD..(slot + 1) * RECORD)?;
        // SAFETY: `mb` lives in `link` past every completion.
        unsafe { link.qb.post_receive(&[sge], slot as u64)? };
        Ok(())
    }
}

#[test]
fn a_sender_that_reuses_its_buffer_before_the_send_completes_is_caught_with_a_replayable_seed() {
    // Exploring seeds finds a run where a lost packet is retransmitted from a rewritten
    // buffer.
    let failure = sim::explore(0..300, |f| ship_logs(f, Reuse::Early))
        .expect_err("some seed loses a packet whose buffer was reused");
    eprintln!("{failure}");
    assert!(failure.error.contains("buffer was rewritten"), "{failure}");

    // That seed alone fails again, identically: same error, same virtual moment.
    let again = sim::run_seed(failure.seed, |f| ship_logs(f, Reuse::Early))
        .expect_err("the seed reproduces the failure");
    assert_eq!((&again.error, again.at), (&failure.error, failure.at));

    // `check` panics naming the seed and how to replay it.
    let panic = std::panic::catch_unwind(|| sim::check(300, |f| ship_logs(f, Reuse::Early)))
        .expect_err("check reports the failure");
    let message = panic.downcast_ref::<String>().expect("a formatted message");
    assert!(
        message.contains(&format!("{}={}", sim::SEED_ENV, failure.seed)),
        "{message}"
    );

    // The fixed shipper passes every seed up to and including the failing one.
    sim::check(failure.seed + 1, |f| ship_logs(f, Reuse::AfterCompletion));
}

#[test]
fn a_send_into_a_partition_fails_with_retry_exceeded_after_the_retries_in_virtual_time() {
    let fabric = Fabric::new(7);
    let a = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let b = fabric.device("b", "10.0.0.2".parse().unwrap()).unwrap();
    // Timeout 14 is 4.096 µs × 2^14 = 67.1 ms; seven retries.
    let link = connect(&a, &b, 14, 7).unwrap();
    fabric.partition("a", "b");

    let start = fabric.now();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![link.ma.slice(0..64).unwrap()].into();
    // SAFETY: `ma` outlives the completion polled below.
    unsafe { link.qa.post_send(&[wr]).unwrap() };
    let wc = link.ca.poll_wait(1, Duration::from_secs(10)).unwrap();
    let waited = fabric.now() - start;
    eprintln!("retry exceeded after {waited:?} of virtual time");

    assert_eq!(
        wc.len(),
        1,
        "the send completed within 10 s of virtual time"
    );
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);
    // The first transmission and each of the seven retries wait out one timeout: 8 × 67.1 ms,
    // to the nanosecond (virtual time has no jitter).
    let timeout = Duration::from_nanos(4096 * (1 << 14));
    assert_eq!(waited, timeout * 8);
    assert_eq!(fabric.counters("a").retry_exceeded_err, 1);
}

#[test]
fn three_devices_with_loss_a_partition_at_two_seconds_and_a_cq_overrun_each_show_their_fault() {
    let fabric = Fabric::new(2024);
    let a = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let b = fabric.device("b", "10.0.0.2".parse().unwrap()).unwrap();
    let c = fabric.device("c", "10.0.0.3".parse().unwrap()).unwrap();
    fabric.set_link_faults("a", "b", "drop=0.05").unwrap();
    fabric.at(Duration::from_secs(2), |f| f.partition("a", "b"));
    let ab = connect(&a, &b, 14, 7).unwrap();
    let bc = connect(&b, &c, 14, 7).unwrap();
    let send = |qp: &QueuePair, mr: &MemoryRegion, id| {
        let mut wr = SendWr::new(id, WrOpcode::Send);
        wr.sg_list = vec![mr.slice(0..32).unwrap()].into();
        // SAFETY: the regions live in the links, past every completion.
        unsafe { qp.post_send(&[wr]).unwrap() };
    };
    let receive = |qp: &QueuePair, mr: &MemoryRegion, id| {
        // SAFETY: as above.
        unsafe { qp.post_receive(&[mr.slice(0..32).unwrap()], id).unwrap() };
    };

    // Before the partition, a's messages reach b despite the loss.
    for id in 0..20 {
        receive(&ab.qb, &ab.mb, id);
        send(&ab.qa, &ab.ma, id);
        let wc = ab.cb.poll_wait(1, Duration::from_secs(1)).unwrap();
        assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    }
    assert!(ab.ca.poll_wait(20, Duration::from_secs(1)).unwrap().len() == 20);

    // c's CQ holds one completion; two arrive: CQ_ERR.
    bc.cb.limit_depth(Some(1)).unwrap();
    for id in 0..2 {
        receive(&bc.qb, &bc.mb, id);
        send(&bc.qa, &bc.ma, id);
    }
    let event = c.get_async_event(Some(Duration::from_secs(1))).unwrap();
    assert_eq!(event.event_type, EventType::CqErr);
    c.ack_async_event(&event).unwrap();

    // After t = 2 s the link a-b is cut: a's next send exhausts its retries.
    fabric.run_for(Duration::from_secs(2).saturating_sub(fabric.now()));
    receive(&ab.qb, &ab.mb, 99);
    send(&ab.qa, &ab.ma, 99);
    let wc = ab.ca.poll_wait(1, Duration::from_secs(5)).unwrap();
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);

    let log: Vec<String> = fabric.log().iter().map(ToString::to_string).collect();
    assert!(
        log.iter()
            .any(|l| l.contains("2000.000000 ms  partition a | b")),
        "{log:#?}"
    );
    assert!(fabric.link_fault_counters("a", "b").unwrap().dropped > 0);
}

#[test]
fn waiting_forever_on_an_idle_fabric_is_an_error_and_a_timeout_costs_only_virtual_time() {
    let fabric = Fabric::new(1);
    let a = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let channel = a.create_comp_channel().unwrap();
    let cq = a.create_cq(4, Some(&channel)).unwrap();
    cq.req_notify(false).unwrap();

    let err = channel.get_cq_event(None).unwrap_err();
    assert!(
        matches!(
            err,
            softroce_verbs::Error::SimIdle {
                verb: "get_cq_event",
                ..
            }
        ),
        "{err}"
    );

    let before = fabric.now();
    let err = channel
        .get_cq_event(Some(Duration::from_secs(30)))
        .unwrap_err();
    assert_eq!(err.errno(), libc::EAGAIN, "{err}");
    assert_eq!(fabric.now() - before, Duration::from_secs(30));
}

#[test]
fn a_slow_distant_link_delays_a_send_by_its_serialization_and_latency_in_virtual_time() {
    let fabric = Fabric::new(3);
    let a = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let b = fabric.device("b", "10.0.0.2".parse().unwrap()).unwrap();
    // 100 Mbit/s each way and 5 ms one-way: a WAN link, not the fabric's 10 µs.
    fabric.set_link_speed("a", "b", Duration::from_millis(5), Some(100_000_000));
    let link = connect(&a, &b, 20, 7).unwrap();
    let start = fabric.now();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![link.ma.slice(0..4096).unwrap()].into();
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        link.qb
            .post_receive(&[link.mb.slice(0..4096).unwrap()], 2)
            .unwrap();
        link.qa.post_send(&[wr]).unwrap();
    }
    let wc = link.ca.poll_wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!(wc[0].status, WcStatus::Success);
    let took = fabric.now() - start;
    eprintln!("4 KiB SEND acknowledged after {took:?} of virtual time");
    // The request's packets cross the link at 100 Mbit/s (4 KiB of payload alone: 328 µs)
    // and 5 ms away; the ACK comes back 5 ms later.
    let serialization = Duration::from_nanos(4096 * 8 * 10);
    assert!(
        took >= Duration::from_millis(10) + serialization,
        "{took:?}"
    );
    // Nothing else delays it: no loss, no retry (timeout 20 is about 4 s).
    assert!(took < Duration::from_millis(11), "{took:?}");
    assert_eq!(fabric.counters("a").retransmitted_pkts, 0);
}

#[test]
fn a_link_plan_naming_a_device_event_is_refused_with_what_to_call_instead() {
    let fabric = Fabric::new(4);
    let _a = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let _b = fabric.device("b", "10.0.0.2".parse().unwrap()).unwrap();
    for result in [
        fabric.set_link_faults("a", "b", "drop=0.1,port_down=100"),
        fabric.set_faults("device_fatal=5"),
    ] {
        let err = result.unwrap_err().to_string();
        assert!(
            err.contains("device event") && err.contains("Fabric::set_port_active"),
            "{err}"
        );
    }
}
