//! READ responses built a packet at a time still carry the whole, right data: a peer on a
//! plain UDP socket reads 4 MiB from a real device, loses a response on purpose, and
//! re-reads from the PSN in the middle where the gap is, as a requester does; the replay goes
//! on from that PSN with MIDDLE responses, as rxe's.

mod common;

use std::time::Duration;

use common::fake_peer::{FAKE_PSN, FakePeer, reth};
use softroce_verbs::{Context, QpType};
use softroce_wire::{Mtu, Opcode, Psn, Syndrome};

const LEN: usize = 4 << 20;
const MTU: usize = 1024;
const PACKETS: usize = LEN / MTU;
/// The response the peer pretends it never received.
const LOST: usize = 1000;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

#[test]
fn a_long_read_arrives_whole_even_when_a_response_is_lost_and_re_read_from_the_middle() {
    let ctx = Context::open_emulated("victim", "127.0.14.3".parse().unwrap(), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mr = pd.allocate(LEN).unwrap();
    let data = pattern(LEN);
    mr.write(0, &data).unwrap();
    let prepared = pd
        .create_qp(&cq, &cq, QpType::Rc)
        .mtu(Mtu::Mtu1024)
        .build()
        .unwrap();
    let mut peer = FakePeer::bind("127.0.14.4", ctx.local_addr().unwrap());
    peer.set_recv_buffer(8 << 20);
    let qp = prepared.handshake(peer.endpoint()).unwrap();
    peer.target(qp.qpn());

    let mut got: Vec<Option<Vec<u8>>> = vec![None; PACKETS];
    let mut re_reads = Vec::new();
    let mut first_pass = true;
    // Each round asks for everything from the first missing response on.
    for _ in 0..100 {
        let Some(gap) = got.iter().position(Option::is_none) else {
            break;
        };
        if !first_pass {
            re_reads.push(gap);
        }
        let off = gap * MTU;
        let ext = reth(mr.addr(off), mr.rkey(), (LEN - off) as u32);
        // The original READ, then duplicates of it: its PSN plus the packets already had.
        peer.send(
            Opcode::RC_RDMA_READ_REQUEST,
            FAKE_PSN + gap as u32,
            ext,
            &[],
        );
        let mut opened = false;
        for _ in 0..PACKETS + 1 {
            let Some(r) = peer.recv(Duration::from_millis(500)) else {
                break;
            };
            let i = r.repr.bth.psn.diff(Psn::new(FAKE_PSN)) as usize;
            if !opened {
                // Every answer starts at the requested PSN: the READ's with a FIRST carrying
                // an ACK, a re-read from the middle with a MIDDLE (no AETH), as rxe replays.
                assert_eq!(i, gap);
                if first_pass {
                    assert_eq!(r.repr.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_FIRST);
                    assert_eq!(r.syndrome(), Some(Syndrome::ACK));
                } else {
                    assert_eq!(r.repr.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE);
                    assert_eq!(r.syndrome(), None);
                }
                opened = true;
            }
            if first_pass && i == LOST {
                continue;
            }
            got[i] = Some(r.payload);
        }
        first_pass = false;
    }

    assert_eq!(
        re_reads.first(),
        Some(&LOST),
        "the lost response was re-read"
    );
    let whole: Vec<u8> = got
        .into_iter()
        .map(|p| p.expect("every response arrived"))
        .collect::<Vec<_>>()
        .concat();
    assert!(whole == data, "4 MiB arrive intact");
}
