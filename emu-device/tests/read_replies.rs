//! READ responses are built a bounded batch at a time, when the transmit path asks: a READ
//! of any length holds a cursor, not its packets; a duplicate restarts the cursor from its
//! PSN; answers to later requests wait behind the READ responses owed before them; a READ
//! beyond the answers a QP may owe is left unseen and served when it comes again.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::FilterAction;
use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{
    BthRepr, ExtRepr, Mtu, Opcode, Psn, Qpn, ROCE_V2_PORT, RethRepr, RocePacket, RoceRepr,
};

const LOCAL: &str = "10.0.0.1";
const PEER: &str = "10.0.0.2";
const PEER_QPN: u32 = 0x33;

/// A bare device (no fabric) whose RC QP is connected to a peer we play by hand.
struct Responder {
    hca: Hca,
    qpn: u32,
    mem: Memory,
    first_psn: Psn,
    now: Instant,
}

impl Responder {
    fn new(mtu: Mtu, mem_len: usize) -> Self {
        let o = Options {
            mtu,
            ..Options::default()
        };
        let mut hca = Hca::new(HcaConfig::new("responder", LOCAL.parse().unwrap()));
        let pd = hca.alloc_pd().unwrap();
        let (cq, _) = hca.create_cq(16, None, 0, 0).unwrap();
        let mem = register(&mut hca, pd, mem_len, o.access);
        let init = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::new(4, 4),
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
        };
        let (qp, qpn, _) = hca.create_qp(pd, init).unwrap();
        connect(&mut hca, qp, PEER, PEER_QPN, &o);
        Self {
            hca,
            qpn: qpn.value(),
            mem,
            first_psn: Psn::new(0x00ff_fff0),
            now: Instant::now(),
        }
    }

    /// The peer asks to READ `len` bytes at `off` with request PSN first + `psn_off`.
    fn read_request(&mut self, psn_off: u32, off: usize, len: u32) {
        let bth = BthRepr::new(
            Opcode::RC_RDMA_READ_REQUEST,
            Qpn::from_wire(self.qpn),
            self.first_psn.add(psn_off),
        );
        let ext = ExtRepr {
            reth: Some(RethRepr {
                va: self.mem.addr(off),
                rkey: self.mem.keys.rkey,
                dma_len: len,
            }),
            ..ExtRepr::default()
        };
        let repr = RoceRepr::new(bth, ext, 0);
        let mut data = vec![0u8; repr.buffer_len()];
        repr.emit_with_payload(&[], &mut data).unwrap();
        let src = SocketAddr::new(PEER.parse().unwrap(), ROCE_V2_PORT);
        let dst: IpAddr = LOCAL.parse().unwrap();
        let ep = UdpEndpoints::between(src, SocketAddr::new(dst, ROCE_V2_PORT));
        icrc::set_icrc_for_udp_socket(&ep, &mut data).unwrap();
        self.hca.handle_datagram(
            self.now,
            IncomingDatagram {
                src,
                dst,
                payload: &data,
                traffic_class: 0,
                ipv4_id: None,
            },
        );
    }

    /// Up to `n` packets the device sends, as (opcode, PSN offset, payload); checks after
    /// each that only a bounded batch is ever built ahead.
    fn take(&mut self, n: usize, bound: usize) -> Vec<(Opcode, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for _ in 0..n {
            let Some(t) = self.hca.poll_transmit(self.now, &mut buf) else {
                break;
            };
            assert!(
                self.hca.transmit_backlog() <= bound,
                "{} bytes built ahead",
                self.hca.transmit_backlog()
            );
            let p = RocePacket::new_checked(&buf[..t.len]).unwrap();
            let bth = BthRepr::parse(&p.bth()).unwrap();
            let psn_off = bth.psn.diff(self.first_psn) as u32;
            out.push((bth.opcode, psn_off, p.payload().to_vec()));
        }
        out
    }
}

#[test]
fn a_sixty_four_mebibyte_read_holds_a_cursor_not_its_packets() {
    const LEN: usize = 64 << 20;
    let mut r = Responder::new(Mtu::Mtu4096, LEN);
    r.mem.write(LEN - 4096, &pattern(9, 4096));
    r.read_request(0, 0, LEN as u32);
    assert_eq!(
        r.hca.transmit_backlog(),
        0,
        "nothing is built before it is asked for"
    );

    // Built a batch per turn of the QP: never more than 64 packets of 4 KiB ahead.
    let got = r.take(20_000, 64 * 4200);
    assert_eq!(got.len(), LEN / 4096, "every response, then nothing more");
    assert_eq!(got[0].0, Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    assert!(
        got[1..got.len() - 1]
            .iter()
            .all(|p| p.0 == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE)
    );
    assert!(
        got.iter().enumerate().all(|(i, p)| p.1 == i as u32),
        "consecutive PSNs"
    );
    let last = got.last().unwrap();
    assert_eq!(last.0, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    assert_eq!(last.2, pattern(9, 4096), "the data is read as it is sent");
}

#[test]
fn a_duplicate_read_restarts_its_answer_from_the_psn_it_names() {
    let mut r = Responder::new(Mtu::Mtu1024, 1 << 20);
    let data = pattern(5, 256 * 1024);
    r.mem.write(0, &data);
    r.read_request(0, 0, 256 * 1024);
    // Responses 0..10 went out; the rest of the first batch of 64 is already built.
    let first = r.take(10, usize::MAX);
    assert_eq!(first.len(), 10);

    // Responses from 5 on were "lost": the requester re-reads from PSN 5 while the answer is
    // still being sent. The built batch goes out, then the answer starts over at 5, once:
    // 64..256 is never built from the first request.
    r.read_request(5, 5 * 1024, 251 * 1024);
    let rest = r.take(1000, usize::MAX);
    let psns: Vec<u32> = rest.iter().map(|p| p.1).collect();
    let expected: Vec<u32> = (10..64).chain(5..256).collect();
    assert_eq!(psns, expected);
    let restart = &rest[54..];
    // Past the READ's first PSN a replay goes on as rxe's does: MIDDLE … LAST, no FIRST.
    assert_eq!(restart[0].0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE);
    assert_eq!(
        restart.last().unwrap().0,
        Opcode::RC_RDMA_READ_RESPONSE_LAST
    );
    let replayed: Vec<u8> = restart.iter().flat_map(|p| p.2.clone()).collect();
    assert_eq!(replayed, data[5 * 1024..]);
    assert_eq!(r.hca.counters().duplicate_request, 1);
}

/// A requester with more READs in flight than the responder resources it was given
/// (ibv_modify_qp(3): its max_rd_atomic above our max_dest_rd_atomic, 16 here): what the
/// QP may owe (two answers a resource and a few more) fills, the READ that finds no room is
/// left unseen, its PSN not taken, and the next is NAKed out of sequence at it; once the
/// answers ahead are sent, the same READ arriving again is served. None is answered from a
/// recycled resource or lost.
#[test]
fn a_read_beyond_what_the_qp_may_owe_is_left_unseen_and_served_when_it_comes_again() {
    let mut r = Responder::new(Mtu::Mtu1024, 1 << 16);
    let data = pattern(6, 64 * 64);
    r.mem.write(0, &data);
    // 16 resources: 2 * 16 + 8 = 40 answers at most, three kept for a gap's NAKs.
    for i in 0..39 {
        r.read_request(i, 64 * i as usize, 64);
    }
    assert_eq!(r.hca.counters().replies_dropped, 1, "READ 37 found no room");
    assert_eq!(
        r.hca.counters().out_of_seq_request,
        1,
        "READ 38 opened a gap at 37"
    );
    let sent = r.take(100, usize::MAX);
    let answers: Vec<(Opcode, u32)> = sent.iter().map(|p| (p.0, p.1)).collect();
    let mut want: Vec<(Opcode, u32)> = (0..37)
        .map(|i| (Opcode::RC_RDMA_READ_RESPONSE_ONLY, i))
        .collect();
    want.extend([(Opcode::RC_ACKNOWLEDGE, 37); 3]);
    assert_eq!(answers, want, "37 READs answered, then the NAKs for 37");
    for (i, p) in sent.iter().take(37).enumerate() {
        assert_eq!(p.2, data[64 * i..64 * (i + 1)], "READ {i}'s bytes");
    }
    // The requester goes back to 37 on the NAK: both READs are served now.
    r.read_request(37, 64 * 37, 64);
    r.read_request(38, 64 * 38, 64);
    let again = r.take(10, usize::MAX);
    let psns: Vec<(Opcode, u32)> = again.iter().map(|p| (p.0, p.1)).collect();
    assert_eq!(
        psns,
        [
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 37),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 38)
        ]
    );
    assert_eq!(again[0].2, data[64 * 37..64 * 38]);
    assert_eq!(
        r.hca.counters().duplicate_request,
        0,
        "nothing was taken twice"
    );
}

#[test]
fn a_sends_ack_waits_behind_the_read_responses_owed_before_it() {
    let mut pair = Pair::rc(Mtu::Mtu1024);
    let b_ip = pair.fabric.addr(pair.b.node);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&seen);
    pair.fabric.set_filter(move |d| {
        if d.src.ip() == b_ip {
            log.lock().unwrap().push(Opcode(d.payload[0]));
        }
        FilterAction::Pass
    });
    let data = pattern(4, 32 * 1024);
    pair.b.mem.write(0, &data);
    pair.post_recv('b', 1, 40_000, 64);
    // A READ and a SEND back to back: B gets both before it sends anything.
    let read = pair.rdma_wr('a', WrOpcode::RdmaRead, 1, 0, 0, 32 * 1024);
    pair.post_send('a', read);
    let mut send = pair.send_wr('a', 2, 0, 8);
    send.send_flags |= SendFlags::SIGNALED;
    pair.post_send('a', send);

    let a = pair.completions('a', 2, Duration::from_secs(5));
    assert_eq!(
        a.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(pair.a.mem.read(0, 32 * 1024), data);
    assert_eq!(
        pair.counters('a').retransmitted_pkts,
        0,
        "nothing was retried"
    );
    let from_b = seen.lock().unwrap().clone();
    let last_response = from_b
        .iter()
        .position(|&op| op == Opcode::RC_RDMA_READ_RESPONSE_LAST)
        .unwrap();
    let ack = from_b
        .iter()
        .position(|&op| op == Opcode::RC_ACKNOWLEDGE)
        .unwrap();
    assert!(
        last_response < ack,
        "B answers in request order: {from_b:?}"
    );
}
