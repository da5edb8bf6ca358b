use super::*;
use crate::ext::{NakCode, Syndrome};
use crate::{Msn, Psn, Qpn};
use proptest::prelude::*;

fn ext_for(op: Opcode) -> ExtRepr {
    ext_with(op.info().map_or(ExtHeaders::NONE, |i| i.headers))
}

fn ext_with(h: ExtHeaders) -> ExtRepr {
    ExtRepr {
        xrceth: h.contains(ExtHeaders::XRCETH).then_some(0x00ab_cdef),
        deth: h.contains(ExtHeaders::DETH).then_some(DethRepr {
            qkey: 0x1111_1111,
            reserved: 0,
            src_qpn: Qpn::from_wire(0x13),
        }),
        feth: h.contains(ExtHeaders::FETH).then_some(0x11),
        reth: h.contains(ExtHeaders::RETH).then_some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: 0x1234,
            dma_len: 3000,
        }),
        atomic_eth: h.contains(ExtHeaders::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x7f00_0000_2000,
            rkey: 0x5678,
            swap_add: 7,
            compare: 9,
        }),
        aeth: h.contains(ExtHeaders::AETH).then_some(AethRepr {
            syndrome: Syndrome::ACK,
            msn: Msn::new(3),
        }),
        atomic_ack: h.contains(ExtHeaders::ATOMIC_ACK_ETH).then_some(42),
        imm: h.contains(ExtHeaders::IMM).then_some(0xdead_beef),
        ieth: h.contains(ExtHeaders::IETH).then_some(0x4321),
        cnp: h.contains(ExtHeaders::CNP).then_some([0; 16]),
    }
}

fn build(op: Opcode, payload: &[u8]) -> Vec<u8> {
    let repr = RoceRepr::new(
        BthRepr::new(op, Qpn::from_wire(0x11), Psn::new(100)),
        ext_for(op),
        payload.len(),
    );
    let mut buf = vec![0xa5; repr.buffer_len()];
    repr.emit_with_payload(payload, &mut buf).unwrap();
    buf
}

fn payload_for(op: Opcode) -> Vec<u8> {
    let info = op.info().unwrap();
    match (info.fixed_payload, info.has_payload) {
        (Some(n), _) => vec![0x5a; n],
        (None, true) => (0..5u8).collect(),
        (None, false) => Vec::new(),
    }
}

#[test]
fn the_header_length_is_the_sum_of_the_headers_present_for_every_combination() {
    // Every subset of the ten extended headers, known opcode or not.
    for mask in 0u32..1 << ExtHeaders::ORDER.len() {
        let set = ExtHeaders::ORDER
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .fold(ExtHeaders::NONE, |s, (_, &h)| s.with(h));
        let ext = ext_with(set);
        assert_eq!(ext.headers(), set);
        assert_eq!(ext.len(), set.len(), "headers {set:?}");
        assert_eq!(ext.is_empty(), mask == 0);
    }
}

#[test]
fn every_known_opcode_emits_and_parses_back() {
    for &op in Opcode::KNOWN {
        let payload = payload_for(op);
        let bytes = build(op, &payload);
        let p = RocePacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.opcode(), op);
        assert_eq!(p.payload(), &payload[..], "{op}");
        assert_eq!(p.pad().iter().filter(|&&b| b != 0).count(), 0);
        assert_eq!(bytes.len() % 4, 0, "{op} is 4-byte aligned");
        let repr = RoceRepr::parse(&p).unwrap();
        assert_eq!(repr.ext, ext_for(op), "{op}");
        let mut again = vec![0xa5; repr.buffer_len()];
        repr.emit_with_payload(p.payload(), &mut again).unwrap();
        assert_eq!(again, bytes, "{op}");
    }
}

#[test]
fn send_only_vector_is_byte_exact() {
    let bytes = build(Opcode::RC_SEND_ONLY, &[1, 2, 3]);
    assert_eq!(
        bytes,
        [
            0x04, 0x10, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00,
            0x64, // BTH pad 1
            1, 2, 3, 0, // payload + pad
            0, 0, 0, 0, // ICRC left for the caller
        ]
    );
}

#[test]
fn every_truncated_prefix_of_every_opcode_is_rejected_as_truncated() {
    for &op in Opcode::KNOWN {
        let payload = payload_for(op);
        let bytes = build(op, &payload);
        let pad = RocePacket::new_unchecked(&bytes[..]).pad_len();
        for n in 0..bytes.len() {
            match RocePacket::new_checked(&bytes[..n]) {
                Err(WireError::Truncated { need, got, .. }) => {
                    assert_eq!(got, n);
                    assert!(need > n, "{op}: need {need} got {n}");
                }
                // A shorter packet may still be complete with a smaller payload; otherwise
                // a pad that no longer fits is the reason.
                Err(WireError::BadPadCount { .. }) => assert!(pad > 0, "{op} len {n}"),
                Ok(p) => assert!(n >= p.header_len() + ICRC_LEN, "{op}: accepted {n} bytes"),
                Err(e) => panic!("{op} len {n}: unexpected {e}"),
            }
        }
    }
}

#[test]
fn unknown_opcode_keeps_everything_after_the_bth_as_payload() {
    let mut bytes = vec![0xff, 0x30, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 5];
    bytes.extend_from_slice(&[9, 8, 7, 6, 5]);
    bytes.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
    let p = RocePacket::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.payload(), &[9, 8, 7, 6, 5]);
    assert_eq!(p.pad_len(), 0);
    let repr = RoceRepr::parse(&p).unwrap();
    let mut again = vec![0; repr.buffer_len()];
    repr.emit_with_payload(p.payload(), &mut again).unwrap();
    let n = again.len();
    again[n - 4..].copy_from_slice(&bytes[n - 4..]);
    assert_eq!(again, bytes);
}

#[test]
fn mismatched_extension_headers_are_refused_on_emit() {
    let repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, Qpn::from_wire(1), Psn::new(0)),
        ExtRepr::default(),
        0,
    );
    let mut buf = vec![0; 64];
    assert_eq!(
        repr.emit(&mut buf),
        Err(WireError::BadOpcodeForHeaders { opcode: 0x0a })
    );
}

#[test]
fn pad_larger_than_payload_is_rejected() {
    let mut bytes = build(Opcode::RC_SEND_ONLY, &[]);
    bytes[1] = 0x30; // pad 3 but no payload
    assert_eq!(
        RocePacket::new_checked(&bytes[..]),
        Err(WireError::BadPadCount {
            pad: 3,
            payload_len: 0
        })
    );
}

#[test]
fn icrc_is_stored_least_significant_byte_first() {
    let mut bytes = build(Opcode::RC_ACKNOWLEDGE, &[]);
    let mut p = RocePacket::new_unchecked(&mut bytes[..]);
    p.set_icrc(0x4c8f_c521);
    assert_eq!(&bytes[bytes.len() - 4..], &[0x21, 0xc5, 0x8f, 0x4c]);
    assert_eq!(RocePacket::new_unchecked(&bytes[..]).icrc(), 0x4c8f_c521);
}

#[test]
fn nak_syndrome_survives_the_packet_round_trip() {
    let repr = RoceRepr::new(
        BthRepr::new(Opcode::RC_ACKNOWLEDGE, Qpn::from_wire(0x11), Psn::new(7)),
        ExtRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: Msn::new(2),
            }),
            ..ExtRepr::default()
        },
        0,
    );
    let mut buf = vec![0; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    assert_eq!(buf[12], 0x60);
    let back = RoceRepr::parse(&RocePacket::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(back, repr);
}

fn arb_opcode() -> impl Strategy<Value = Opcode> {
    prop_oneof![
        proptest::sample::select(Opcode::KNOWN.to_vec()),
        any::<u8>().prop_map(Opcode)
    ]
}

proptest! {
    #[test]
    fn random_bytes_never_panic_and_reemit_identically(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(p) = RocePacket::new_checked(&bytes[..]) {
            let _ = p.payload();
            let _ = p.icrc();
            if let Ok(repr) = RoceRepr::parse(&p) {
                let mut again = vec![0; repr.buffer_len()];
                repr.emit_with_payload(p.payload(), &mut again).unwrap();
                let n = again.len();
                // Pad bytes are zeroed on emit; everything else must be identical.
                let pad = p.pad_len();
                prop_assert_eq!(&again[..n - 4 - pad], &bytes[..n - 4 - pad]);
            }
        }
    }

    #[test]
    fn random_reprs_round_trip(op in arb_opcode(), psn in 0u32..0x100_0000, qpn in 0u32..0x100_0000,
                               se in any::<bool>(), ack in any::<bool>(), pkey in any::<u16>(),
                               payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let payload = match op.info() {
            Some(i) if !i.has_payload => Vec::new(),
            Some(i) if i.fixed_payload.is_some() => vec![1; 8],
            _ => payload,
        };
        let mut bth = BthRepr::new(op, Qpn::from_wire(qpn), Psn::new(psn));
        bth.solicited = se;
        bth.ack_req = ack;
        bth.pkey = pkey;
        let repr = RoceRepr::new(bth, ext_for(op), payload.len());
        let mut buf = vec![0xa5; repr.buffer_len()];
        repr.emit_with_payload(&payload, &mut buf).unwrap();
        let p = RocePacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(RoceRepr::parse(&p).unwrap(), repr);
        prop_assert_eq!(p.payload(), &payload[..]);
    }
}

/// An XRC request carries the XRCETH right after the BTH, before its RETH; a packet cut
/// inside the XRCETH is refused as a truncated XRCETH, and responses have none.
#[test]
fn xrc_write_has_the_xrceth_before_the_reth() {
    let buf = build(Opcode::XRC_RDMA_WRITE_ONLY, b"hey");
    assert_eq!(&buf[BTH_LEN..BTH_LEN + 4], &[0, 0xab, 0xcd, 0xef]);
    let p = RocePacket::new_checked(&buf[..]).unwrap();
    assert_eq!(p.xrceth().unwrap().srqn(), 0xab_cdef);
    assert_eq!(p.reth().unwrap().rkey(), 0x1234);
    assert_eq!(p.payload(), b"hey");
    assert_eq!(
        RocePacket::new_checked(&buf[..BTH_LEN + 3]),
        Err(WireError::Truncated {
            header: Header::XrcEth,
            need: BTH_LEN + 4,
            got: BTH_LEN + 3
        })
    );
    let ack = build(Opcode::XRC_ACKNOWLEDGE, &[]);
    let p = RocePacket::new_checked(&ack[..]).unwrap();
    assert!(p.xrceth().is_none() && p.aeth().is_some());
    let p = RocePacket::new_checked(&buf[..]).unwrap();
    assert_eq!(
        crate::pretty::Summary(&p).to_string(),
        "XRC_RDMA_WRITE_ONLY dqpn=0x11 psn=100 xrceth{srqn=0xabcdef} \
         reth{va=0x7f0000001000 rkey=0x1234 len=3000} payload=3 pad=1"
    );
}
