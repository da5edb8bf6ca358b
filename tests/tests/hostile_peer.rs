//! What a hostile peer can do to a real device with hand-built packets from a plain UDP
//! socket on loopback: it cannot revoke an ordinary memory region; a misaligned atomic, a
//! READ or atomic inside another message and a WRITE with the wrong pad are invalid
//! requests, as rxe and IBTA have them; READ responses that do not fit the READ never
//! complete it; repeated sequence NAKs cannot have a queue resent without end; a repeated
//! long READ cannot keep the application's verbs waiting.

mod common;

use std::time::Duration;

use common::fake_peer::{FAKE_PSN, FakePeer, Reply, reth};
use softroce_verbs::{
    CompletionQueue, Context, EventElement, EventType, MemoryRegion, Mtu, ProtectionDomain,
    QpState, QpType, QueuePair, QueuePairBuilder, SendWr, VendorErr, WcStatus, WrOpcode,
};
use softroce_wire::{AethRepr, AtomicEthRepr, ExtRepr, Msn, NakCode, Opcode, Psn, Syndrome};

/// A device with a registered region and an RC QP connected to a fake peer.
struct Victim {
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qp: QueuePair,
    peer: FakePeer,
}

fn victim(ip: &str, peer_ip: &str, receives: u64) -> Victim {
    victim_with(ip, peer_ip, receives, |b| b)
}

/// [`victim`] with its QP's attributes set by `configure` (MTU, timeout, retries).
fn victim_with(
    ip: &str,
    peer_ip: &str,
    receives: u64,
    configure: impl FnOnce(QueuePairBuilder<'_>) -> QueuePairBuilder<'_>,
) -> Victim {
    let ctx = Context::open_emulated("victim", ip.parse().unwrap(), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.allocate(4096).unwrap();
    let prepared = configure(pd.create_qp(&cq, &cq, QpType::Rc))
        .build()
        .unwrap();
    for i in 0..receives {
        // Receives land in the second half, away from the bytes READs check.
        // SAFETY: `mr` lives in the Victim with the QP; receives complete or are flushed.
        unsafe {
            prepared
                .post_receive(&[mr.slice(2048..2112).unwrap()], i)
                .unwrap()
        };
    }
    let mut peer = FakePeer::bind(peer_ip, ctx.local_addr().unwrap());
    let qp = prepared.handshake(peer.endpoint()).unwrap();
    peer.target(qp.qpn());
    Victim {
        ctx,
        _pd: pd,
        cq,
        mr,
        qp,
        peer,
    }
}

impl Victim {
    fn reply(&self) -> Reply {
        self.peer
            .recv(Duration::from_secs(5))
            .expect("the device answers")
    }

    fn expect_event(&self, what: EventType) {
        let ev = self
            .ctx
            .get_async_event(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(ev.event_type, what);
        assert!(matches!(ev.element, EventElement::Qp(h) if h.to_raw() == self.qp.raw_handle()));
        self.ctx.ack_async_event(&ev).unwrap();
    }

    /// The first NAK the device sends (ACKs before it passed over).
    fn first_nak(&self) -> Reply {
        self.peer
            .recv_until(8, |r| matches!(r.syndrome(), Some(Syndrome::Nak(_))))
            .pop()
            .expect("the device answers")
    }

    /// READ `len` bytes at the region's start with its rkey, as request `psn`.
    fn read_back(&self, psn: u32, len: u32) -> Reply {
        let ext = reth(self.mr.addr(0), self.mr.rkey(), len);
        self.peer.send(Opcode::RC_RDMA_READ_REQUEST, psn, ext, &[]);
        self.reply()
    }
}

#[test]
fn a_send_with_invalidate_naming_an_ordinary_region_is_refused_and_the_rkey_lives_on() {
    let v = victim("127.0.13.1", "127.0.13.2", 2);
    v.mr.write(0, b"still readable").unwrap();

    // The attack: SEND_WITH_INVALIDATE carrying the rkey of an ibv_reg_mr region.
    let ext = ExtRepr {
        ieth: Some(v.mr.rkey()),
        ..ExtRepr::default()
    };
    v.peer.send(
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        FAKE_PSN,
        ext,
        b"revoke",
    );

    // Refused: an invalid-request NAK for that PSN, never an ACK.
    let nak = v.reply();
    assert!(nak.is_nak(NakCode::InvalidRequest), "{nak:?}");
    assert_eq!(nak.repr.bth.psn, Psn::new(FAKE_PSN));

    // The receive it consumed completes in error, the QP stops, the owner is told.
    let wcs = v.cq.poll_wait(2, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].vendor_err),
        (
            0,
            WcStatus::RemInvReqErr,
            VendorErr::RemoteInvalidRequest as u32
        )
    );
    assert_eq!((wcs[1].wr_id, wcs[1].status), (1, WcStatus::WrFlushErr));
    assert_eq!(v.qp.state().unwrap(), QpState::Err);
    v.expect_event(EventType::QpReqErr);

    // The victim recovers; its region was never revoked: the same rkey still reads.
    v.qp.reconnect(v.peer.endpoint()).unwrap();
    let read = v.read_back(FAKE_PSN, 14);
    assert_eq!(read.repr.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(read.syndrome(), Some(Syndrome::ACK));
    assert_eq!(read.payload, b"still readable");
}

#[test]
fn a_misaligned_atomic_is_an_invalid_request_and_leaves_memory_alone() {
    let v = victim("127.0.13.3", "127.0.13.4", 0);
    v.mr.write(0, &[0u8; 16]).unwrap();
    let fetch_add = |psn: u32, offset: usize| {
        let ext = ExtRepr {
            atomic_eth: Some(AtomicEthRepr {
                va: v.mr.addr(offset),
                rkey: v.mr.rkey(),
                swap_add: 5,
                compare: 0,
            }),
            ..ExtRepr::default()
        };
        v.peer.send(Opcode::RC_FETCH_ADD, psn, ext, &[]);
        v.reply()
    };

    // An aligned one works: the original value comes back.
    let ok = fetch_add(FAKE_PSN, 8);
    assert_eq!(ok.repr.bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(ok.repr.ext.atomic_ack, Some(0));

    // Four bytes off: an invalid request (IBTA oA19-28, rxe's MISALIGNED_ATOMIC), which a
    // requester reports as IBV_WC_REM_INV_REQ_ERR; not a remote access error.
    let nak = fetch_add(FAKE_PSN + 1, 4);
    assert!(nak.is_nak(NakCode::InvalidRequest), "{nak:?}");
    assert_eq!(nak.repr.bth.psn, Psn::new(FAKE_PSN + 1));

    let mut mem = [0u8; 16];
    v.mr.read(0, &mut mem).unwrap();
    assert_eq!(
        u64::from_ne_bytes(mem[8..].try_into().unwrap()),
        5,
        "only the aligned add happened"
    );
    assert_eq!(&mem[..8], &[0; 8]);
    assert_eq!(v.qp.state().unwrap(), QpState::Err);
    v.expect_event(EventType::QpReqErr);
}

/// The victim as requester: it READs `len` bytes of the peer into its region's start; the
/// READ request the peer receives.
fn victim_reads(v: &Victim, len: u32) -> softroce_wire::BthRepr {
    let mut wr = SendWr::new(7, WrOpcode::RdmaRead);
    wr.sg_list = vec![v.mr.slice(0..len as usize).unwrap()].into();
    wr.rdma.remote_addr = 0x1000;
    wr.rdma.rkey = 0x99;
    // SAFETY: the region lives in the Victim until the end of the test.
    unsafe { v.qp.post_send(&[wr]).unwrap() };
    let request = v.reply();
    assert_eq!(request.repr.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    request.repr.bth
}

/// A READ response's extended headers: an AETH with `syndrome` where the opcode has one.
fn aeth(syndrome: Syndrome) -> ExtRepr {
    ExtRepr {
        aeth: Some(AethRepr {
            syndrome,
            msn: Msn::new(1),
        }),
        ..ExtRepr::default()
    }
}

#[test]
fn read_responses_of_the_wrong_length_or_place_never_complete_a_read() {
    // A 3000-byte READ at MTU 1024 is answered FIRST (1024), MIDDLE (1024), LAST (952).
    // Responses that would leave bytes of the local buffer unwritten, or carry a NAK where
    // data belongs, are dropped: the READ completes only when the right ones come, and
    // then with the right bytes everywhere.
    let v = victim_with("127.0.13.5", "127.0.13.6", 0, |b| {
        b.mtu(Mtu::Mtu1024).reliability(18, 7, 7)
    });
    v.mr.write(0, &[0xEE; 3000]).unwrap();
    let psn = victim_reads(&v, 3000).psn.value();
    let full = [0x11u8; 1024];
    let send = |op: Opcode, psn: u32, ext: ExtRepr, payload: &[u8]| {
        v.peer.send(op, psn, ext, payload);
    };
    let ack = || aeth(Syndrome::ACK);
    // Forgeries first: a short MIDDLE, a short LAST, an ONLY for a three-packet READ, a
    // FIRST whose AETH is a NAK, a LAST longer than what is left.
    send(Opcode::RC_RDMA_READ_RESPONSE_FIRST, psn, ack(), &full);
    send(
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        psn + 1,
        ExtRepr::default(),
        &full[..100],
    );
    send(
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        psn + 2,
        ack(),
        &full[..100],
    );
    send(
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        psn + 2,
        ack(),
        &full[..952],
    );
    send(Opcode::RC_RDMA_READ_RESPONSE_LAST, psn + 2, ack(), &full);
    send(
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        psn + 1,
        ExtRepr::default(),
        &[0x22; 1024],
    );
    send(
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        psn + 2,
        aeth(Syndrome::Nak(NakCode::InvalidRequest)),
        &[0x33; 952],
    );
    assert!(
        v.cq.poll_wait(1, Duration::from_millis(300))
            .unwrap()
            .is_empty(),
        "a READ completed on responses that do not fit it"
    );
    // The right LAST: the READ completes, every byte from the peer.
    send(
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        psn + 2,
        ack(),
        &[0x33; 952],
    );
    let wc = v.cq.poll_wait(1, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (7, WcStatus::Success, 3000)
    );
    let mut got = vec![0u8; 3000];
    v.mr.read(0, &mut got).unwrap();
    assert!(got[..1024].iter().all(|&b| b == 0x11), "FIRST's bytes");
    assert!(got[1024..2048].iter().all(|&b| b == 0x22), "MIDDLE's bytes");
    assert!(got[2048..].iter().all(|&b| b == 0x33), "LAST's bytes");
    assert_eq!(v.qp.state().unwrap(), QpState::Rts);
}

#[test]
fn a_read_or_atomic_inside_a_write_is_an_invalid_request() {
    // WRITE_FIRST opens a message; a READ request where its MIDDLE or LAST belongs means
    // the message lost its end (IBTA, rxe's check_op_seq): NAK invalid request, the QP
    // stops. The READ is never answered.
    let v = victim_with("127.0.13.7", "127.0.13.8", 0, |b| b.mtu(Mtu::Mtu1024));
    v.peer.send(
        Opcode::RC_RDMA_WRITE_FIRST,
        FAKE_PSN,
        reth(v.mr.addr(1024), v.mr.rkey(), 2048),
        &[0u8; 1024],
    );
    v.peer.send(
        Opcode::RC_RDMA_READ_REQUEST,
        FAKE_PSN + 1,
        reth(v.mr.addr(0), v.mr.rkey(), 16),
        &[],
    );
    // (The FIRST, asking for one, is acknowledged before.)
    let replies = v
        .peer
        .recv_until(8, |r| matches!(r.syndrome(), Some(Syndrome::Nak(_))));
    assert!(
        replies
            .iter()
            .all(|r| r.repr.bth.opcode == Opcode::RC_ACKNOWLEDGE),
        "the READ was answered: {replies:?}"
    );
    let nak = replies.last().expect("the device answers");
    assert!(nak.is_nak(NakCode::InvalidRequest), "{nak:?}");
    assert_eq!(nak.repr.bth.psn, Psn::new(FAKE_PSN + 1));
    assert_eq!(v.qp.state().unwrap(), QpState::Err);
    v.expect_event(EventType::QpReqErr);

    // The same for an atomic inside a WRITE: memory is left alone.
    v.qp.reconnect(v.peer.endpoint()).unwrap();
    v.mr.write(0, &[0u8; 8]).unwrap();
    v.peer.send(
        Opcode::RC_RDMA_WRITE_FIRST,
        FAKE_PSN,
        reth(v.mr.addr(1024), v.mr.rkey(), 2048),
        &[0u8; 1024],
    );
    let ext = ExtRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: v.mr.addr(0),
            rkey: v.mr.rkey(),
            swap_add: 5,
            compare: 0,
        }),
        ..ExtRepr::default()
    };
    v.peer.send(Opcode::RC_FETCH_ADD, FAKE_PSN + 1, ext, &[]);
    let nak = v.first_nak();
    assert!(nak.is_nak(NakCode::InvalidRequest), "{nak:?}");
    let mut word = [0u8; 8];
    v.mr.read(0, &mut word).unwrap();
    assert_eq!(word, [0; 8], "the atomic did not run");
}

#[test]
fn repeated_sequence_naks_resend_once_and_use_up_the_retry_count() {
    // The victim WRITEs 4 packets; the peer answers each packet it gets with a NAK
    // (sequence error) for the first PSN. The first NAK has the victim resend from there
    // (a retry), the next two are taken for its echoes (softroce's responders NAK a gap
    // three times); repeats of
    // the same NAK resend again, uncounted, three times at most, then only the ACK
    // timeouts resend, each a retry (retry_cnt 2): the WRITE fails with
    // IBV_WC_RETRY_EXC_ERR instead of being resent forever, a few packets per NAK.
    let v = victim_with("127.0.13.9", "127.0.13.10", 0, |b| {
        b.mtu(Mtu::Mtu1024).reliability(12, 2, 7)
    });
    let mut wr = SendWr::new(9, WrOpcode::RdmaWrite);
    wr.sg_list = vec![v.mr.slice(0..4096).unwrap()].into();
    wr.rdma.remote_addr = 0x1000;
    wr.rdma.rkey = 0x99;
    // SAFETY: the region lives in the Victim until the end of the test.
    unsafe { v.qp.post_send(&[wr]).unwrap() };
    let first = v.reply().repr.bth.psn.value();
    let nak = || aeth(Syndrome::Nak(NakCode::PsnSequenceError));
    let mut received = 1;
    let mut naks = 0;
    // Bounded: at most 200 packets, each waited for at most 5 s (the ACK timeout, 16 ms,
    // brings the next resend).
    let mut wc = Vec::new();
    for _ in 0..200 {
        v.peer.send(Opcode::RC_ACKNOWLEDGE, first, nak(), &[]);
        naks += 1;
        wc = v.cq.poll_wait(1, Duration::from_millis(1)).unwrap();
        if !wc.is_empty() {
            break;
        }
        if v.peer.recv(Duration::from_secs(5)).is_some() {
            received += 1;
        }
    }
    if wc.is_empty() {
        wc = v.cq.poll_wait(1, Duration::from_secs(5)).unwrap();
    }
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::RetryExcErr));
    // Six sendings of four packets at most (the first, two retries and three uncounted
    // resends), whatever the number of NAKs.
    assert!(
        received <= 6 * 4,
        "{received} packets sent for {naks} NAKs of one 4-packet WRITE"
    );
    assert_eq!(v.qp.state().unwrap(), QpState::Err);
}

#[test]
fn a_write_whose_pad_does_not_end_it_on_four_bytes_is_an_invalid_request() {
    // A 5-byte WRITE ONLY must carry a pad of 3 (BTH PadCnt: the message ends on a 4-byte
    // boundary); one sent with none is malformed (rxe's check_rkey: a length error), and
    // nothing of it is written.
    let v = victim("127.0.13.11", "127.0.13.12", 0);
    v.mr.write(0, &[0u8; 8]).unwrap();
    v.peer.send_altered(
        Opcode::RC_RDMA_WRITE_ONLY,
        FAKE_PSN,
        reth(v.mr.addr(0), v.mr.rkey(), 5),
        b"hello",
        |p| {
            // Drop the three pad bytes before the ICRC and say there are none.
            let end = p.len() - 4;
            p.drain(end - 3..end);
            p[1] &= !0x30;
        },
    );
    let nak = v.first_nak();
    assert!(nak.is_nak(NakCode::InvalidRequest), "{nak:?}");
    let mut mem = [0u8; 8];
    v.mr.read(0, &mut mem).unwrap();
    assert_eq!(mem, [0; 8], "nothing written");
    assert_eq!(v.qp.state().unwrap(), QpState::Err);
    v.expect_event(EventType::QpReqErr);
}

#[test]
fn a_send_first_shorter_than_the_mtu_fails_the_receive_it_opened() {
    // A SEND FIRST carries exactly one MTU. One that does not is an invalid request, and
    // (as rxe takes the receive before it checks the length) the receive the message
    // opened completes with IBV_WC_REM_INV_REQ_ERR, the others are flushed.
    let v = victim_with("127.0.13.13", "127.0.13.14", 2, |b| b.mtu(Mtu::Mtu1024));
    v.peer.send(
        Opcode::RC_SEND_FIRST,
        FAKE_PSN,
        ExtRepr::default(),
        &[7; 40],
    );
    let nak = v.first_nak();
    assert!(nak.is_nak(NakCode::InvalidRequest), "{nak:?}");
    let wcs = v.cq.poll_wait(2, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[1].wr_id, wcs[1].status),
        (0, WcStatus::RemInvReqErr, 1, WcStatus::WrFlushErr)
    );
    assert_eq!(v.qp.state().unwrap(), QpState::Err);
    v.expect_event(EventType::QpReqErr);
}

/// A peer asking for a long READ again and again (each duplicate restarts the response,
/// as IBTA has it) keeps the device busy, but not the application's verbs waiting: the
/// engine sends in turns and gives way to a verb between them. (An `ibv_alloc_pd` used
/// to wait out the whole flood, tens of seconds.)
#[test]
fn a_peer_repeating_a_long_read_does_not_keep_verbs_waiting() {
    let v = victim_with("127.0.13.21", "127.0.13.22", 0, |b| b.mtu(Mtu::Mtu4096));
    // 256 MiB of untouched memory: read as zero pages, never resident.
    let big = v._pd.allocate(256 << 20).unwrap();
    let ext = reth(big.addr(0), big.rkey(), 256 << 20);
    v.peer.set_recv_buffer(1 << 16);
    let flood_for = Duration::from_secs(2);
    let slowest = std::thread::scope(|s| {
        s.spawn(|| {
            let start = std::time::Instant::now();
            // The first is new, every later one a duplicate of it.
            for _ in 0..4000 {
                if start.elapsed() > flood_for {
                    break;
                }
                v.peer
                    .send(Opcode::RC_RDMA_READ_REQUEST, FAKE_PSN, ext, &[]);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let start = std::time::Instant::now();
        let mut slowest = Duration::ZERO;
        for _ in 0..100 {
            if start.elapsed() > flood_for {
                break;
            }
            let t = std::time::Instant::now();
            let pd = v.ctx.alloc_pd().unwrap();
            drop(pd);
            slowest = slowest.max(t.elapsed());
            std::thread::sleep(Duration::from_millis(50));
        }
        slowest
    });
    // Generous: a pump of a few milliseconds is what a verb may wait behind.
    assert!(
        slowest < Duration::from_secs(1),
        "ibv_alloc_pd waited {slowest:?} behind the READ flood"
    );
    let c = v.ctx.counters().unwrap();
    assert!(
        c.sent_pkts > 10_000,
        "the device did answer the READs: {c:?}"
    );
    assert!(
        c.duplicate_request > 0,
        "and took the repeats as duplicates: {c:?}"
    );
}
