//! What a hostile peer can do to a real device with hand-built packets from a plain UDP
//! socket on loopback (issue 13): it cannot revoke an ordinary memory region, and a
//! misaligned atomic is refused as an invalid request, as rxe and IBTA do.

mod common;

use std::time::Duration;

use common::fake_peer::{FAKE_PSN, FakePeer, Reply, reth};
use softroce_verbs::{
    CompletionQueue, Context, EventElement, EventType, MemoryRegion, ProtectionDomain, QpState,
    QpType, QueuePair, VendorErr, WcStatus,
};
use softroce_wire::{AtomicEthRepr, ExtRepr, NakCode, Opcode, Psn, Syndrome};

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
    let ctx = Context::open_emulated("victim", ip.parse().unwrap(), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let mr = pd.allocate(4096).unwrap();
    let prepared = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
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
