//! Every forced error path through the real driver with the requester in a second process
//! (`softroce-send-peer`): the exact work completions on both sides (status, vendor_err,
//! only the fields ibv_poll_cq(3) makes valid), async events with their element and their
//! acknowledgement, and the QP state afterwards. (`softroce inject` drives the same paths in
//! one process and adds recovery by reset and reconnect.)

mod common;

use std::time::Duration;

use common::Peer;
use softroce_verbs::{
    AccessFlags, CompletionQueue, Context, EventElement, EventType, MemoryRegion,
    PreparedQueuePair, ProtectionDomain, QpState, QpType, VendorErr, WcStatus, WorkCompletion,
};

/// The receiving side, in this process.
struct Receiver {
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qp: PreparedQueuePair,
}

fn receiver(ip: &str, access: AccessFlags) -> Receiver {
    let ctx = Context::open_emulated("victim", ip.parse().unwrap(), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.allocate_with(4096, access).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    Receiver {
        ctx,
        _pd: pd,
        cq,
        mr,
        qp,
    }
}

const ALL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// Short retries so exhaustion comes within milliseconds: 4.096 us * 2^8 per try.
const QUICK: [&str; 6] = ["--retry", "1", "--rnr-retry", "1", "--timeout", "8"];

fn wcs(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    cq.poll_wait(n, Duration::from_secs(10)).unwrap()
}

/// The peer's completion lines, e.g. `WC 0 IBV_WC_RETRY_EXC_ERR 0x104`.
fn peer_wcs(peer: &mut Peer) -> Vec<String> {
    let (lines, ok) = peer.finish();
    assert!(ok, "peer failed: {lines:?}");
    assert_eq!(lines.last().map(String::as_str), Some("DONE"), "{lines:?}");
    lines.into_iter().filter(|l| l.starts_with("WC ")).collect()
}

fn post_receives(r: &Receiver, n: u64) {
    for i in 0..n {
        // SAFETY: `r.mr` outlives the receives (completed or flushed below).
        unsafe { r.qp.post_receive(&[r.mr.slice(0..64).unwrap()], i).unwrap() };
    }
}

fn assert_flushed(wcs: &[WorkCompletion], ids: &[u64], qpn: u32) {
    let got: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(got, ids, "flush order: {wcs:?}");
    for w in wcs {
        assert_eq!(w.status, WcStatus::WrFlushErr, "{w:?}");
        assert_eq!(w.vendor_err, VendorErr::Flushed as u32, "{w:?}");
        assert_eq!(w.qp_num, qpn, "{w:?}");
        // Only wr_id, status, qp_num and vendor_err are valid for an error completion.
        assert_eq!(
            (w.byte_len, w.imm_data, w.src_qp, w.wc_flags.is_empty()),
            (0, 0, 0, true),
            "{w:?}"
        );
    }
}

#[test]
fn forced_qp_access_error_flushes_receives_and_the_remote_sender_runs_out_of_retries() {
    let r = receiver("127.0.0.91", ALL);
    let (mut peer, peer_ep) = Peer::start("127.0.0.92", 1, &QUICK);
    post_receives(&r, 2);
    let qp = r.qp.handshake(peer_ep).unwrap();
    qp.force_error(EventType::QpAccessErr).unwrap();
    let ev = r.ctx.get_async_event(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(ev.event_type, EventType::QpAccessErr);
    assert!(matches!(ev.element, EventElement::Qp(h) if h.to_raw() == qp.raw_handle()));
    r.ctx.ack_async_event(&ev).unwrap();
    assert_eq!(
        r.ctx.ack_async_event(&ev).unwrap_err().errno(),
        libc::EINVAL,
        "one acknowledgement per event"
    );
    assert_flushed(&wcs(&r.cq, 2), &[0, 1], qp.qpn());
    assert_eq!(qp.state().unwrap(), QpState::Err);
    // The peer's SEND meets a QP in ERR, which answers nothing.
    peer.connect(qp.endpoint(), None);
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_RETRY_EXC_ERR 0x104"]);
}

#[test]
fn port_down_loses_traffic_with_port_err_and_port_active_comes_back() {
    let r = receiver("127.0.0.93", ALL);
    let (mut peer, peer_ep) = Peer::start("127.0.0.94", 1, &QUICK);
    post_receives(&r, 1);
    let qp = r.qp.handshake(peer_ep).unwrap();
    r.ctx.set_port_active(false).unwrap();
    let ev = r.ctx.get_async_event(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::PortErr, EventElement::Port(1))
    );
    r.ctx.ack_async_event(&ev).unwrap();
    assert_eq!(
        r.ctx.query_port(1).unwrap().state,
        softroce_emu::core::PortState::Down
    );
    peer.connect(qp.endpoint(), None);
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_RETRY_EXC_ERR 0x104"]);
    assert!(
        r.cq.poll_wait(1, Duration::from_millis(50))
            .unwrap()
            .is_empty()
    );
    r.ctx.set_port_active(true).unwrap();
    let ev = r.ctx.get_async_event(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::PortActive, EventElement::Port(1))
    );
    r.ctx.ack_async_event(&ev).unwrap();
    assert_eq!(
        qp.state().unwrap(),
        QpState::Rts,
        "the receiver's QP never saw an error"
    );
}

#[test]
fn device_fatal_moves_every_qp_to_err_and_flushes() {
    let r = receiver("127.0.0.95", ALL);
    let (mut peer, peer_ep) = Peer::start("127.0.0.96", 1, &QUICK);
    post_receives(&r, 3);
    let qp = r.qp.handshake(peer_ep).unwrap();
    r.ctx.inject_device_fatal().unwrap();
    let ev = r.ctx.get_async_event(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::DeviceFatal, EventElement::Device)
    );
    r.ctx.ack_async_event(&ev).unwrap();
    assert_flushed(&wcs(&r.cq, 3), &[0, 1, 2], qp.qpn());
    assert_eq!(qp.state().unwrap(), QpState::Err);
    peer.connect(qp.endpoint(), None);
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_RETRY_EXC_ERR 0x104"]);
}

#[test]
fn withheld_receives_make_the_remote_sender_exhaust_its_rnr_retries() {
    let r = receiver("127.0.0.97", ALL);
    let (mut peer, peer_ep) = Peer::start("127.0.0.98", 1, &QUICK);
    let qp = r.qp.handshake(peer_ep).unwrap();
    peer.connect(qp.endpoint(), None);
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_RNR_RETRY_EXC_ERR 0x105"]);
    assert_eq!(
        qp.state().unwrap(),
        QpState::Rts,
        "RNR is the requester's error"
    );
    assert!(r.ctx.counters().unwrap().send_rnr_err >= 1);
}

#[test]
fn rnr_with_infinite_retries_delivers_once_a_receive_is_posted() {
    let r = receiver("127.0.0.99", ALL);
    let (mut peer, peer_ep) = Peer::start("127.0.0.100", 1, &["--rnr-retry", "7"]);
    let qp = r.qp.handshake(peer_ep).unwrap();
    peer.connect(qp.endpoint(), None);
    std::thread::sleep(Duration::from_millis(60));
    // SAFETY: `r.mr` outlives the receive, polled below.
    unsafe { qp.post_receive(&[r.mr.slice(0..64).unwrap()], 7).unwrap() };
    let got = wcs(&r.cq, 1);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (7, WcStatus::Success, 8)
    );
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_SUCCESS 0x0"]);
    assert!(
        r.ctx.counters().unwrap().send_rnr_err >= 1,
        "RNR NAKs were sent meanwhile"
    );
}

#[test]
fn lost_acks_exhaust_the_remote_senders_retries_but_deliver_exactly_once() {
    let r = receiver("127.0.0.101", ALL);
    // The peer loses everything it receives: our ACKs never reach it.
    let (mut peer, peer_ep) = Peer::start_with_env("127.0.0.102", 1, &QUICK, Some("drop=1,dir=rx"));
    post_receives(&r, 2);
    let qp = r.qp.handshake(peer_ep).unwrap();
    peer.connect(qp.endpoint(), None);
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_RETRY_EXC_ERR 0x104"]);
    let got = wcs(&r.cq, 1);
    assert_eq!((got[0].wr_id, got[0].status), (0, WcStatus::Success));
    assert!(
        r.cq.poll_wait(1, Duration::from_millis(50))
            .unwrap()
            .is_empty(),
        "retransmissions were re-ACKed, not delivered twice"
    );
    assert!(r.ctx.counters().unwrap().duplicate_request >= 1);
}

#[test]
fn remote_write_without_access_is_nakked_and_the_responder_qp_reports_access_error() {
    let r = receiver("127.0.0.103", AccessFlags::LOCAL_WRITE);
    let (mut peer, peer_ep) = Peer::start("127.0.0.104", 1, &["--op", "write"]);
    let qp = r.qp.handshake(peer_ep).unwrap();
    peer.connect(qp.endpoint(), Some((r.mr.addr(0), r.mr.rkey())));
    assert_eq!(peer_wcs(&mut peer), ["WC 0 IBV_WC_REM_ACCESS_ERR 0x107"]);
    let ev = r.ctx.get_async_event(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(ev.event_type, EventType::QpAccessErr);
    r.ctx.ack_async_event(&ev).unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Err);
    assert_eq!(r.mr.to_vec()[..8], [0u8; 8], "nothing was written");
}

#[test]
fn receive_side_faults_set_through_the_api_still_deliver_every_message_in_order() {
    // Within the default receive queue (64 WRs).
    const N: u64 = 60;
    let r = receiver("127.0.0.105", ALL);
    r.ctx
        .set_faults(Some(
            "drop=0.2,dup=0.05,reorder=0.05,corrupt=0.01,dir=rx,seed=4",
        ))
        .unwrap();
    assert!(
        r.ctx
            .set_faults(Some("drop=2"))
            .unwrap_err()
            .to_string()
            .contains("'drop=2'"),
        "a bad spec names the bad part"
    );
    let (mut peer, peer_ep) = Peer::start("127.0.0.106", N, &[]);
    for i in 0..N {
        let at = (8 * i as usize) % 4096;
        // SAFETY: `r.mr` outlives the receives, all polled below.
        unsafe {
            r.qp.post_receive(&[r.mr.slice(at..at + 8).unwrap()], i)
                .unwrap()
        };
    }
    let qp = r.qp.handshake(peer_ep).unwrap();
    peer.connect(qp.endpoint(), None);
    let got = r.cq.poll_wait(N as usize, Duration::from_secs(30)).unwrap();
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..N).collect::<Vec<_>>());
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    let lines = peer_wcs(&mut peer);
    assert_eq!(lines.len() as u64, N);
    let injected = r.ctx.fault_counters().unwrap();
    assert!(injected.seen_rx > N && injected.dropped > 0, "{injected}");
    assert!(
        injected.corrupted > 0,
        "corrupted arrivals were caught by the ICRC: {injected}"
    );
}
