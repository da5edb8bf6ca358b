//! Arbitrary and adversarial datagrams against a device with live QPs and memory regions:
//! never a panic, no byte outside the remotely writable region ever changes, and what the
//! device builds ahead stays bounded.

use proptest::prelude::*;
use softroce_emu::sim::fuzzing::{Target, datagram};
use softroce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, ExtRepr, Msn, Opcode, Psn, Qpn,
    RethRepr, RoceRepr, Syndrome,
};

fn build(
    op: Opcode,
    qpn: u32,
    psn: u32,
    va: u64,
    rkey: u32,
    dma_len: u32,
    payload: &[u8],
) -> Vec<u8> {
    let h = op.info().map_or(ExtHeaders::NONE, |i| i.headers);
    let ext = ExtRepr {
        xrceth: h.contains(ExtHeaders::XRCETH).then_some(1),
        deth: h.contains(ExtHeaders::DETH).then_some(DethRepr {
            qkey: 0x1111_1111,
            reserved: 0,
            src_qpn: Qpn::from_wire(0x33),
        }),
        feth: h.contains(ExtHeaders::FETH).then_some(0),
        reth: h
            .contains(ExtHeaders::RETH)
            .then_some(RethRepr { va, rkey, dma_len }),
        atomic_eth: h.contains(ExtHeaders::ATOMIC_ETH).then_some(AtomicEthRepr {
            va,
            rkey,
            swap_add: 1,
            compare: 0,
        }),
        aeth: h.contains(ExtHeaders::AETH).then_some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(0),
        }),
        atomic_ack: h.contains(ExtHeaders::ATOMIC_ACK_ETH).then_some(0),
        imm: h.contains(ExtHeaders::IMM).then_some(1),
        ieth: h.contains(ExtHeaders::IETH).then_some(rkey),
        cnp: h.contains(ExtHeaders::CNP).then_some([0; 16]),
    };
    let payload = match op.info() {
        Some(i) if !i.has_payload => &[][..],
        Some(i) if i.fixed_payload.is_some() => &payload[..payload.len().min(8)],
        _ => payload,
    };
    let repr = RoceRepr::new(
        BthRepr::new(op, Qpn::from_wire(qpn), Psn::new(psn)),
        ext,
        payload.len(),
    );
    let mut out = vec![0u8; repr.buffer_len()];
    if repr.emit_with_payload(payload, &mut out).is_err() {
        return Vec::new();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn crafted_requests_never_write_outside_the_writable_region(
        op in proptest::sample::select(Opcode::KNOWN.to_vec()),
        which_qp in 0usize..3,
        psn in 95u32..110,
        va_off in -5000i64..13000,
        dma_len in prop_oneof![Just(0u32), 1u32..600, Just(u32::MAX), Just(1 << 31)],
        good_key in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        let mut t = Target::new();
        let qpn = t.qpns()[which_qp];
        let rkey = if good_key { t.rkey } else { t.rkey ^ 0x100 };
        let va = (t.va as i64 + va_off) as u64;
        let mut packet = build(op, qpn, psn, va, rkey, dma_len, &payload);
        for (i, x) in flips {
            if !packet.is_empty() {
                let at = i.index(packet.len());
                packet[at] ^= x;
            }
        }
        t.deliver(&packet, true);
        t.check_guards();
    }

    #[test]
    fn reads_and_atomics_met_by_answers_still_owed_stay_in_bounds(
        steps in proptest::collection::vec(
            (0usize..5, 100u32..140, -300i64..8500, 0u32..9000, 0usize..40),
            1..12,
        ),
    ) {
        let mut t = Target::new();
        let qpn = t.qpns()[0];
        for (what, psn, off, len, sends) in steps {
            // Mostly READs, new or duplicate, so replays meet answers still being built.
            let op = [
                Opcode::RC_RDMA_READ_REQUEST,
                Opcode::RC_RDMA_READ_REQUEST,
                Opcode::RC_RDMA_READ_REQUEST,
                Opcode::RC_FETCH_ADD,
                Opcode::RC_COMPARE_SWAP,
            ][what];
            let va = (t.va as i64 + off) as u64;
            let packet = build(op, qpn, psn, va, t.rkey, len, &[]);
            let peer = t.peer();
            t.deliver_then_send(peer, &packet, true, sends);
            // At most one batch of 256-byte responses is ever built ahead.
            prop_assert!(t.hca().transmit_backlog() <= 80 * 400);
        }
        t.check_guards();
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        datagram(&data);
    }
}
