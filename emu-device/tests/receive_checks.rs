//! The receive checks rxe makes before anything is delivered, each dropping the packet and
//! counting why: ICRC, P_Key, destination QP, opcode for the QP type, source address, Q_Key.

use std::net::SocketAddr;

use softroce_emu::core::*;
use softroce_emu::sim::fuzzing::Target;
use softroce_wire::{BthRepr, DethRepr, ExtRepr, Opcode, Psn, Qpn, RoceRepr, icrc};

fn packet(op: Opcode, qpn: u32, pkey: u16, ext: ExtRepr, payload: usize) -> Vec<u8> {
    let mut bth = BthRepr::new(op, Qpn::from_wire(qpn), Psn::new(100));
    bth.pkey = pkey;
    bth.ack_req = true;
    let repr = RoceRepr::new(bth, ext, payload);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(&vec![7u8; payload], &mut out)
        .unwrap();
    out
}

fn send_only(qpn: u32) -> Vec<u8> {
    packet(Opcode::RC_SEND_ONLY, qpn, 0xFFFF, ExtRepr::default(), 16)
}

fn drops(t: &mut Target, reason: DropReason) -> u64 {
    t.hca().counters().drops_of(reason)
}

#[test]
fn a_valid_send_is_accepted_and_raises_comm_est_in_rtr() {
    let mut t = Target::new();
    let rc = t.qpns()[0];
    t.deliver(&send_only(rc), true);
    assert_eq!(t.hca().counters().rcvd_pkts, 1);
    let ev = t.hca().get_async_event().unwrap();
    assert_eq!(ev.event_type, EventType::CommEst, "first packet in RTR");
}

#[test]
fn bad_icrc_is_dropped_silently() {
    let mut t = Target::new();
    let rc = t.qpns()[0];
    t.deliver(&send_only(rc), false);
    assert_eq!(drops(&mut t, DropReason::IcrcMismatch), 1);
    assert_eq!(
        t.hca().counters().sent_pkts,
        0,
        "no NAK for a bad ICRC (rxe)"
    );
}

/// `data` with the ICRC it carries when it leaves `src` for the target as segment `id` of a
/// GSO send (IPv4 ID `id`, which the target's UDP socket does not show).
fn sent_with_ipv4_id(t: &Target, src: SocketAddr, mut data: Vec<u8>, id: u16) -> Vec<u8> {
    let ep = icrc::UdpEndpoints {
        src: src.ip(),
        dst: t.local(),
        src_port: icrc::ROCE_V2_PORT,
        dst_port: icrc::ROCE_V2_PORT,
    };
    let body = data.len() - 4;
    let crc = icrc::compute_for_gso_segment(&ep, &data[..body], id).unwrap();
    data[body..].copy_from_slice(&crc.to_le_bytes());
    data
}

#[test]
fn once_a_sender_numbers_its_sends_from_zero_a_datagram_only_a_large_ipv4_id_explains_is_dropped() {
    let mut t = Target::new();
    let (rc, peer) = (t.qpns()[0], t.peer());
    // A softroce peer's GSO sends of 8 datagrams: IDs 0..8, again and again. All pass.
    for id in (0..6).flat_map(|_| 0..8u16) {
        let d = sent_with_ipv4_id(&t, peer, send_only(rc), id);
        t.deliver_from(peer, &d, false);
    }
    assert_eq!(drops(&mut t, DropReason::IcrcMismatch), 0);
    // Corruption that the ICRC would take for ID 21 000 (before, the solved ID was taken
    // whatever it was: one bit flip in 32 768 reached the application).
    let corrupted = sent_with_ipv4_id(&t, peer, send_only(rc), 21_000);
    t.deliver_from(peer, &corrupted, false);
    assert_eq!(drops(&mut t, DropReason::IcrcMismatch), 1);
    // The peer's next datagram passes.
    let next = sent_with_ipv4_id(&t, peer, send_only(rc), 0);
    t.deliver_from(peer, &next, false);
    assert_eq!(drops(&mut t, DropReason::IcrcMismatch), 1);
}

#[test]
fn a_sender_counting_its_ipv4_ids_up_as_rxe_does_is_believed_through_the_wrap() {
    let mut t = Target::new();
    let (rc, peer) = (t.qpns()[0], t.peer());
    for id in (65_400..=u16::MAX).chain(0..400) {
        let d = sent_with_ipv4_id(&t, peer, send_only(rc), id);
        t.deliver_then_send(peer, &d, false, 4);
    }
    assert_eq!(drops(&mut t, DropReason::IcrcMismatch), 0);
}

#[test]
fn wrong_pkey_is_dropped_and_counted() {
    let mut t = Target::new();
    let rc = t.qpns()[0];
    t.deliver(
        &packet(Opcode::RC_SEND_ONLY, rc, 0x1234, ExtRepr::default(), 8),
        true,
    );
    assert_eq!(drops(&mut t, DropReason::BadPkey), 1);
    assert_eq!(t.hca().query_port(1).unwrap().bad_pkey_cntr, 1);
}

#[test]
fn unknown_destination_qp_is_dropped() {
    let mut t = Target::new();
    t.deliver(&send_only(0x00ab_cdef), true);
    assert_eq!(drops(&mut t, DropReason::UnknownQpn), 1);
}

#[test]
fn an_opcode_of_another_transport_is_dropped() {
    let mut t = Target::new();
    let rc = t.qpns()[0];
    t.deliver(
        &packet(Opcode::UC_SEND_ONLY, rc, 0xFFFF, ExtRepr::default(), 8),
        true,
    );
    assert_eq!(drops(&mut t, DropReason::OpcodeForQpType), 1);
}

#[test]
fn rc_packets_from_an_address_other_than_the_peer_are_dropped() {
    let mut t = Target::new();
    let rc = t.qpns()[0];
    let stranger: SocketAddr = "10.0.0.9:4791".parse().unwrap();
    t.deliver_from(stranger, &send_only(rc), true);
    assert_eq!(drops(&mut t, DropReason::AddressMismatch), 1);
}

#[test]
fn ud_with_the_wrong_qkey_is_a_qkey_violation() {
    let mut t = Target::new();
    let ud = t.qpns()[2];
    let ext = ExtRepr {
        deth: Some(DethRepr {
            qkey: 0xBAD,
            reserved: 0,
            src_qpn: Qpn::from_wire(0x33),
        }),
        ..ExtRepr::default()
    };
    t.deliver(&packet(Opcode::UD_SEND_ONLY, ud, 0xFFFF, ext, 8), true);
    assert_eq!(drops(&mut t, DropReason::BadQkey), 1);
    assert_eq!(t.hca().query_port(1).unwrap().qkey_viol_cntr, 1);
}

#[test]
fn device_fatal_errors_every_qp() {
    let mut t = Target::new();
    t.hca().inject_device_fatal();
    let ev = t.hca().get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::DeviceFatal, EventElement::Device)
    );
    for qpn in t.qpns().to_vec() {
        let qp = t.hca().qp_by_number(Qpn::from_wire(qpn)).unwrap();
        assert_eq!(t.hca().qp_state(qp).unwrap(), QpState::Err);
    }
    t.hca().ack_async_event(&ev).unwrap();
}
