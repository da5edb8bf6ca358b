//! QP1 (GSI): a MAD sent by one device's core arrives at another's as the kernel's MAD
//! layer + rxe would carry it, and hostile QP1 traffic is counted and dropped, never queued
//! without bound.

use std::net::SocketAddr;
use std::time::Instant;

use softroce_emu::core::*;
use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::mad::{MAD_LEN, QP1_QKEY};
use softroce_wire::{ICRC_LEN, Opcode, Qpn, RocePacket};

const A: &str = "127.0.0.1:4791";
const B: &str = "127.0.0.2:4791";

fn hca(addr: &str) -> Hca {
    let addr: SocketAddr = addr.parse().unwrap();
    Hca::new(HcaConfig::new("gsi", addr.ip()))
}

fn a_mad(seed: u8) -> Box<[u8; MAD_LEN]> {
    let mut m = Box::new([0u8; MAD_LEN]);
    for (i, b) in m.iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    m[..4].copy_from_slice(&[1, 0x07, 2, 3]); // base version 1, class CM, version 2, SEND
    m
}

/// Everything `hca` has to send.
fn drain(hca: &mut Hca) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..1000 {
        let Some(t) = hca.poll_transmit(Instant::now(), &mut buf) else {
            break;
        };
        out.push((t.destination, buf[..t.len].to_vec()));
    }
    out
}

fn deliver(to: &mut Hca, from: &str, bytes: &[u8]) {
    let src: SocketAddr = from.parse().unwrap();
    let dst = to.local_addr().ip();
    to.handle_datagram(
        Instant::now(),
        IncomingDatagram {
            src,
            dst,
            payload: bytes,
            traffic_class: 0,
            ipv4_id: None,
        },
    );
}

/// Recompute the ICRC after a test edited the packet, so only the edit is "wrong".
fn reseal(bytes: &mut [u8], from: &str, to: &str) {
    let (s, d): (SocketAddr, SocketAddr) = (from.parse().unwrap(), to.parse().unwrap());
    let ep = UdpEndpoints {
        src: s.ip(),
        dst: d.ip(),
        src_port: s.port(),
        dst_port: d.port(),
    };
    let body = bytes.len() - ICRC_LEN;
    let crc = icrc::compute_for_udp_socket(&ep, &bytes[..body]).unwrap();
    RocePacket::new_unchecked(bytes).set_icrc(crc);
}

#[test]
fn a_mad_travels_from_qp1_to_qp1_as_the_kernel_sends_it() {
    let (mut a, mut b) = (hca(A), hca(B));
    let dst: SocketAddr = B.parse().unwrap();
    a.send_mad(dst, Qpn::from_wire(1), &a_mad(7));
    a.send_mad(dst, Qpn::from_wire(1), &a_mad(8));
    let sent = drain(&mut a);
    assert_eq!(sent.len(), 2);
    let (to, bytes) = &sent[0];
    assert_eq!(*to, dst);
    // BTH: UD SEND_ONLY, no SE/M, pad 0, TVer 0, P_Key 0xFFFF, dest QP 1, AckReq, PSN 0;
    // DETH: Q_Key 0x80010000, source QP 1; then the 256-byte MAD and the ICRC.
    assert_eq!(bytes.len(), 12 + 8 + MAD_LEN + ICRC_LEN);
    assert_eq!(
        &bytes[..20],
        &[
            0x64, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01, 0x80, 0x00, 0x00, 0x00, 0x80, 0x01,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x01
        ]
    );
    assert_eq!(&bytes[20..20 + MAD_LEN], &a_mad(7)[..]);
    // The PSN counts per MAD sent, as QP1's send queue does.
    assert_eq!(&sent[1].1[8..12], &[0x80, 0, 0, 1]);
    assert_eq!(a.counters().mad_sent, 2);
    assert_eq!(a.counters().sent_pkts, 2);

    for (_, bytes) in &sent {
        deliver(&mut b, A, bytes);
    }
    let got = b.poll_mad().expect("the MAD is queued for the CM");
    assert_eq!(got.src, A.parse::<SocketAddr>().unwrap());
    assert_eq!(got.sgid.to_ip(), got.src.ip());
    assert_eq!(got.src_qpn.value(), 1);
    assert_eq!(got.pkey, 0xffff);
    assert_eq!(got.mad, a_mad(7));
    assert_eq!(b.poll_mad().unwrap().mad, a_mad(8));
    assert!(b.poll_mad().is_none());
    assert_eq!(b.counters().mad_rcvd, 2);
    assert_eq!(b.counters().rcvd_pkts, 2);
}

#[test]
fn hostile_qp1_traffic_is_dropped_and_counted() {
    let (mut a, mut b) = (hca(A), hca(B));
    a.send_mad(B.parse().unwrap(), Qpn::from_wire(1), &a_mad(1));
    let good = drain(&mut a).remove(0).1;

    // Wrong Q_Key: a Q_Key violation, as rxe counts it.
    assert_eq!(&good[12..16], &QP1_QKEY.to_be_bytes());
    let mut bad_qkey = good.clone();
    bad_qkey[12..16].copy_from_slice(&0x1111_1111u32.to_be_bytes());
    reseal(&mut bad_qkey, A, B);
    deliver(&mut b, A, &bad_qkey);
    assert_eq!(b.counters().qkey_violation, 1);
    assert_eq!(b.counters().drops_of(DropReason::BadQkey), 1);

    // An RC opcode to QP1.
    let mut rc = good.clone();
    rc[0] = Opcode::RC_SEND_ONLY.0;
    reseal(&mut rc, A, B);
    deliver(&mut b, A, &rc);
    assert_eq!(b.counters().drops_of(DropReason::OpcodeForQpType), 1);

    // A short "MAD" (a UD SEND of 100 bytes) is not a MAD.
    let mut short = good[..20 + 100].to_vec();
    short.extend_from_slice(&[0; ICRC_LEN]);
    reseal(&mut short, A, B);
    deliver(&mut b, A, &short);
    assert_eq!(b.counters().drops_of(DropReason::Malformed), 1);

    // A bad ICRC never reaches QP1.
    let mut corrupt = good.clone();
    corrupt[40] ^= 1;
    deliver(&mut b, A, &corrupt);
    assert_eq!(b.counters().drops_of(DropReason::IcrcMismatch), 1);
    assert!(b.poll_mad().is_none(), "nothing hostile was queued");
    assert_eq!(b.counters().mad_rcvd, 0);

    // A flood nobody takes: the queue stays bounded, the rest is counted.
    let limit = transport::gsi::GSI_RX_QUEUE_LEN;
    for _ in 0..limit + 10 {
        deliver(&mut b, A, &good);
    }
    assert_eq!(b.counters().mad_rcvd, limit as u64);
    assert_eq!(b.counters().mad_rx_overflow, 10);
    let mut taken = 0;
    while b.poll_mad().is_some() {
        taken += 1;
    }
    assert_eq!(taken, limit);
}
