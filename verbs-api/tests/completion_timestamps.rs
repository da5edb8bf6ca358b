//! Completion timestamps through the safe API (ibv_create_cq_ex(3)'s
//! `ibv_wc_read_completion_ts`, ibv_query_rt_values_ex(3)'s raw clock,
//! ibv_query_device_ex(3)'s `hca_core_clock`): every completion carries the device clock
//! of the moment it was generated, in nanoseconds; on the simulator that clock is virtual
//! time since the fabric began.

use std::time::Duration;

use softroce_verbs::sim::Fabric;
use softroce_verbs::{
    CompletionQueue, Context, MemoryRegion, QpType, QueuePair, RdmaTarget, SendWr, WcStatus,
    WrOpcode,
};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

/// Two connected RC QPs, each with its own CQ, and 256 registered bytes on each side.
fn connect(
    a: &Context,
    b: &Context,
) -> (
    QueuePair,
    CompletionQueue,
    MemoryRegion,
    QueuePair,
    CompletionQueue,
    MemoryRegion,
) {
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (
        a.create_cq(16, None).unwrap(),
        b.create_cq(16, None).unwrap(),
    );
    let qa = pa.create_qp(&ca, &ca, QpType::Rc).build().unwrap();
    let qb = pb.create_qp(&cb, &cb, QpType::Rc).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (ma, mb) = (pa.allocate(256).unwrap(), pb.allocate(256).unwrap());
    (
        qa.handshake(eb).unwrap(),
        ca,
        ma,
        qb.handshake(ea).unwrap(),
        cb,
        mb,
    )
}

#[test]
fn on_the_simulator_a_send_and_its_receive_are_stamped_with_the_virtual_time_they_completed() {
    let fabric = Fabric::new(7);
    let a = fabric.device("a", "10.0.0.1".parse().unwrap()).unwrap();
    let b = fabric.device("b", "10.0.0.2".parse().unwrap()).unwrap();
    assert_eq!(a.query_device().unwrap().hca_core_clock, 1_000_000, "1 GHz");
    // 5 ms each way: the receive completes 5 ms after the post, the send 5 ms later.
    fabric.set_link_speed("a", "b", Duration::from_millis(5), None);
    let (qa, ca, ma, qb, cb, mb) = connect(&a, &b);

    let posted = fabric.now();
    assert_eq!(
        a.raw_clock(),
        Some(nanos(posted)),
        "the raw clock is virtual time"
    );
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![ma.slice(0..64).unwrap()].into();
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        qb.post_receive(&[mb.slice(0..64).unwrap()], 2).unwrap();
        qa.post_send(&[wr]).unwrap();
    }
    let recv = cb.poll_wait(1, Duration::from_secs(1)).unwrap()[0];
    let send = ca.poll_wait(1, Duration::from_secs(1)).unwrap()[0];
    assert_eq!(
        (recv.status, send.status),
        (WcStatus::Success, WcStatus::Success)
    );
    let arrived = recv.completion_ts - nanos(posted);
    let acked = send.completion_ts - nanos(posted);
    assert!(
        (nanos(Duration::from_millis(5))..nanos(Duration::from_millis(6))).contains(&arrived),
        "the receive completed {arrived} ns after the post, one 5 ms crossing"
    );
    assert!(
        (nanos(Duration::from_millis(10))..nanos(Duration::from_millis(11))).contains(&acked),
        "the send completed {acked} ns after the post, when the ACK came back"
    );
    assert!(send.completion_ts <= a.raw_clock().unwrap());
}

#[test]
fn on_the_emulator_timestamps_rise_and_lie_between_raw_clock_readings() {
    let a = Context::open_emulated("ts-a", "127.77.31.21".parse().unwrap(), 0).unwrap();
    let b = Context::open_emulated("ts-b", "127.77.31.22".parse().unwrap(), 0).unwrap();
    let (qa, ca, src, _qb, _cb, dst) = connect(&a, &b);

    let before = a.raw_clock().expect("the emulator has a clock");
    let wrs: Vec<SendWr> = (0..4)
        .map(|i| {
            let mut wr = SendWr::new(i, WrOpcode::RdmaWrite);
            wr.sg_list = vec![src.slice(64 * i as usize..64 * (i as usize + 1)).unwrap()].into();
            wr.rdma = RdmaTarget {
                remote_addr: dst.addr(64 * i as usize),
                rkey: dst.rkey(),
            };
            wr
        })
        .collect();
    // SAFETY: both regions outlive the completions polled below.
    unsafe { qa.post_send(&wrs).unwrap() };
    let wcs = ca.poll_wait(4, Duration::from_secs(5)).unwrap();
    let after = a.raw_clock().unwrap();
    assert_eq!(wcs.len(), 4);
    for pair in wcs.windows(2) {
        assert!(pair[0].completion_ts <= pair[1].completion_ts, "{pair:?}");
    }
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success);
        assert!(
            (before..=after).contains(&wc.completion_ts),
            "wr {} stamped {} outside the readings {before}..={after}",
            wc.wr_id,
            wc.completion_ts
        );
    }
}
