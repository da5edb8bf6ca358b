//! The safe API on the emulated backend: raw registrations, multi-request posts with their
//! `bad_wr` index, and what the backend reports about itself.

use std::time::Duration;

use softroce_verbs::backend::BackendKind;
use softroce_verbs::{AccessFlags, Context, QpType, RecvWr, SendWr, WcStatus, WrOpcode};

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
        wr.sg_list = vec![src.slice(0..18).unwrap()];
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
        sg_list: vec![mr.slice(0..32).unwrap()],
    };
    let mut bad = good.clone();
    bad.wr_id = 2;
    // More SGEs than the QP takes (lkeys are checked when a message lands, not here).
    bad.sg_list = vec![mr.slice(0..1).unwrap(); 64];
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
