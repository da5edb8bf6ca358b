//! The safe API on the emulated backend: raw registrations, multi-request posts with their
//! `bad_wr` index, and what the backend reports about itself.

use std::time::Duration;

use softroce_verbs::backend::BackendKind;
use softroce_verbs::{
    AccessFlags, Context, Mtu, QpType, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

fn device(ip: &str) -> Context {
    Context::open_emulated("api", ip.parse().expect("ip"), 0).expect("device")
}

#[test]
fn raw_registration_of_caller_memory_receives_a_send() {
    let (a, b) = (device("127.0.0.41"), device("127.0.0.42"));
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(8, None).unwrap(), b.create_cq(8, None).unwrap());
    let qa = pa.create_qp(&ca, &ca, QpType::Rc).build().unwrap();
    let qb = pb.create_qp(&cb, &cb, QpType::Rc).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, qb) = (qa.handshake(eb).unwrap(), qb.handshake(ea).unwrap());

    let mut mine = vec![0u8; 64];
    // SAFETY: `mine` outlives the region and is only touched through it until the
    // receive completed.
    let raw = unsafe {
        pb.register_raw(mine.as_mut_ptr(), mine.len(), AccessFlags::LOCAL_WRITE)
            .unwrap()
    };
    let src = pa.allocate(64).unwrap();
    src.write(0, b"into caller memory").unwrap();
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        qb.post_receive(&[raw.slice(0..64).unwrap()], 5).unwrap();
        let mut wr = SendWr::new(6, WrOpcode::Send);
        wr.sg_list = vec![src.slice(0..18).unwrap()].into();
        qa.post_send(&[wr]).unwrap();
    }
    let wc = cb.poll_wait(1, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (5, WcStatus::Success, 18)
    );
    drop(raw);
    assert_eq!(&mine[..18], b"into caller memory");
}

#[test]
fn posting_several_receives_reports_the_index_of_the_first_bad_one() {
    let a = device("127.0.0.43");
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(8, None).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let mr = pd.allocate(64).unwrap();
    let good = RecvWr {
        wr_id: 1,
        sg_list: vec![mr.slice(0..32).unwrap()].into(),
    };
    let mut bad = good.clone();
    bad.wr_id = 2;
    // More SGEs than the QP takes (lkeys are checked when a message lands, not here).
    bad.sg_list = vec![mr.slice(0..1).unwrap(); 64].into();
    // SAFETY: `mr` outlives the QP (dropped after it at the end of the test).
    let err = unsafe { qp.post_receives(&[good.clone(), bad, good]) }.unwrap_err();
    assert_eq!(err.bad_wr(), Some(1), "{err}");
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
}

#[test]
fn the_emulated_backend_reports_its_kind_name_counters_and_gid() {
    let a = device("127.0.0.44");
    assert_eq!(a.backend().kind(), BackendKind::Emulated);
    assert_eq!(a.name(), "api");
    assert!(a.with_hca(|h| h.counters().rcvd_pkts).is_ok());
    assert!(a.counters().is_some());
    assert_eq!(
        a.gid(a.ip_gid_index()).unwrap().to_ip().to_string(),
        "127.0.0.44"
    );
}

/// Posts in quick succession are a burst whose later packets wait for the application's
/// next verb (one doorbell per burst): a program that posts a burst and then calls no verb
/// at all, spinning on memory for the data to land (as `ib_write_lat` does), must still
/// see every WRITE arrive, sent by the device on its own.
#[test]
fn a_burst_of_writes_lands_even_when_the_poster_never_calls_another_verb() {
    const WRITES: usize = 40;
    let (a, b) = (device("127.0.0.45"), device("127.0.0.46"));
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (
        a.create_cq(64, None).unwrap(),
        b.create_cq(8, None).unwrap(),
    );
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc)
        .caps(softroce_verbs::QpCap::new(64, 4))
        .build()
        .unwrap();
    let qb = pb.create_qp(&cb, &cb, QpType::Rc).build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, _qb) = (qa.handshake(eb).unwrap(), qb.handshake(ea).unwrap());
    let src = pa.allocate(WRITES).unwrap();
    let dst = pb.allocate(WRITES).unwrap();
    let bytes: Vec<u8> = (1..=WRITES as u8).collect();
    src.write(0, &bytes).unwrap();
    for i in 0..WRITES {
        let mut wr = SendWr::new(i as u64, WrOpcode::RdmaWrite);
        wr.sg_list = vec![src.slice(i..i + 1).unwrap()].into();
        wr.rdma.remote_addr = dst.addr(i);
        wr.rdma.rkey = dst.rkey();
        // Only the last one is signaled: nothing needs a poll in between.
        if i + 1 < WRITES {
            wr.send_flags = wr
                .send_flags
                .difference(softroce_verbs::SendFlags::SIGNALED);
        }
        // SAFETY: both regions outlive the completion polled below.
        unsafe { qa.post_send(&[wr]).unwrap() };
    }
    // No verb on A from here on: watch B's memory (bounded: 5 s).
    let mut seen = vec![0u8; WRITES];
    for _ in 0..5000 {
        dst.read(0, &mut seen).unwrap();
        if seen == bytes {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(seen, bytes, "every WRITE of the burst landed");
    let wc = ca.poll_wait(1, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (WRITES as u64 - 1, WcStatus::Success)
    );
}

/// UC messages of many turns' worth of packets each (8 MiB, the largest message, at a
/// 256-byte MTU: 32 768 packets; a device sends 4 096 per turn of its lock) complete while
/// the application busy-polls the CQ, as perftest's `ib_send_bw -c UC` does: the device
/// goes on sending the rest at once. (The poller takes arrivals and timers, not transmits:
/// the rest waited for the next timer the poller fired, about a second a turn, and perftest
/// moved 8 MiB UC messages at 0.2 GB/s, their bursts overflowing the peer's socket.) Eight
/// messages, 64 turns: the bound below is a minute of such waits; without them it takes a
/// fraction of a second.
#[test]
fn uc_messages_longer_than_a_turn_of_sending_complete_while_the_poster_busy_polls() {
    const LEN: usize = 8 << 20;
    const MESSAGES: usize = 8;
    let (a, b) = (device("127.0.0.47"), device("127.0.0.48"));
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (
        a.create_cq(16, None).unwrap(),
        b.create_cq(8, None).unwrap(),
    );
    let qa = pa
        .create_qp(&ca, &ca, QpType::Uc)
        .mtu(Mtu::Mtu256)
        .caps(softroce_verbs::QpCap::new(16, 1))
        .build()
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Uc)
        .mtu(Mtu::Mtu256)
        .build()
        .unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let (qa, _qb) = (qa.handshake(eb).unwrap(), qb.handshake(ea).unwrap());
    let src = pa.allocate(LEN).unwrap();
    let dst = pb.allocate(LEN).unwrap();
    let wrs: Vec<SendWr> = (0..MESSAGES as u64)
        .map(|id| {
            let mut wr = SendWr::new(id, WrOpcode::RdmaWrite);
            wr.sg_list = vec![src.slice(0..LEN).unwrap()].into();
            wr.rdma.remote_addr = dst.addr(0);
            wr.rdma.rkey = dst.rkey();
            wr
        })
        .collect();
    // SAFETY: both regions outlive the completions polled below.
    unsafe { qa.post_send(&wrs).unwrap() };
    let mut wc = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 16];
    let mut done = Vec::new();
    let started = std::time::Instant::now();
    while done.len() < MESSAGES && started.elapsed() < Duration::from_secs(60) {
        let n = ca.poll(&mut wc).unwrap();
        done.extend(wc[..n].iter().map(|c| (c.wr_id, c.status)));
    }
    let want: Vec<(u64, WcStatus)> = (0..MESSAGES as u64)
        .map(|id| (id, WcStatus::Success))
        .collect();
    assert_eq!(
        done, want,
        "every UC WRITE completed while its poster busy-polled"
    );
    assert_eq!(
        a.counters().map(|c| c.sent_pkts),
        Some((MESSAGES * LEN / 256) as u64),
        "every packet of the messages left"
    );
}
