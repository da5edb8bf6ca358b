//! The RoCEv2 invariant CRC, computed exactly as Linux rdma_rxe does.
//!
//! ICRC = CRC-32 (zlib/Ethernet) over `8 × 0xFF` (the masked IB LRH) ‖ the IP header with its
//! variant fields set to ones (IPv4: TOS, TTL, checksum; IPv6: traffic class, flow label, hop
//! limit) ‖ the UDP header with checksum 0xFFFF ‖ the BTH with byte 4 (FECN/BECN/resv) 0xFF ‖
//! everything after the BTH up to the ICRC. It is stored least-significant byte first.
//!
//! # Two ways to verify
//! - [`verify_exact`]: the whole IP header is known (pcap, raw sockets, IPv6). A single
//!   corrupted bit is always caught.
//! - [`verify_udp_socket`]: the datagram as a UDP socket sees it. For IPv4 the 16-bit
//!   Identification (and the flags word) is covered by the ICRC but invisible to `recvfrom`.
//!   The CRC is affine over GF(2) in those 16 bits, so the ID that makes the ICRC valid is
//!   solved for in closed form (never 65 536 trials). The price is honesty about strength:
//!   a random corruption passes with probability 2⁻¹⁶ instead of 2⁻³², which
//!   [`IcrcCheck::RecoveredIpv4Id`] reports.
#![cfg_attr(
    fuzzing,
    doc = "# Fuzzing\nUnder `cfg(fuzzing)` verification always succeeds so fuzzers reach the deeper layers."
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Header, Result, WireError, need};
use crate::ip::{IPV4_DF, IPV4_HEADER_LEN, IPV6_HEADER_LEN, PROTO_UDP, UDP_HEADER_LEN};
use crate::packet::{BTH_LEN, ICRC_LEN};

/// The UDP destination port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;

const LRH_MASK: [u8; 8] = [0xFF; 8];

/// Mask the variant fields of an IPv4 header (20 bytes).
fn masked_ipv4(h: &[u8]) -> [u8; IPV4_HEADER_LEN] {
    let mut m = [0u8; IPV4_HEADER_LEN];
    m.copy_from_slice(&h[..IPV4_HEADER_LEN]);
    m[1] = 0xFF;
    m[8] = 0xFF;
    m[10] = 0xFF;
    m[11] = 0xFF;
    m
}

/// Mask the variant fields of an IPv6 header (40 bytes).
fn masked_ipv6(h: &[u8]) -> [u8; IPV6_HEADER_LEN] {
    let mut m = [0u8; IPV6_HEADER_LEN];
    m.copy_from_slice(&h[..IPV6_HEADER_LEN]);
    m[0] |= 0x0F;
    m[1] = 0xFF;
    m[2] = 0xFF;
    m[3] = 0xFF;
    m[7] = 0xFF;
    m
}

fn masked_udp(h: &[u8]) -> [u8; UDP_HEADER_LEN] {
    let mut m = [0u8; UDP_HEADER_LEN];
    m.copy_from_slice(&h[..UDP_HEADER_LEN]);
    m[6] = 0xFF;
    m[7] = 0xFF;
    m
}

fn masked_bth(roce: &[u8]) -> [u8; BTH_LEN] {
    let mut m = [0u8; BTH_LEN];
    m.copy_from_slice(&roce[..BTH_LEN]);
    m[4] = 0xFF;
    m
}

/// Compute the ICRC from the raw IP header (20 bytes IPv4 or 40 bytes IPv6, chosen by its
/// version nibble), the UDP header and the RoCE packet *without* its ICRC.
pub fn compute(ip_header: &[u8], udp_header: &[u8], roce_without_icrc: &[u8]) -> Result<u32> {
    need(Header::Ipv4, ip_header.len(), 1)?;
    need(Header::Udp, udp_header.len(), UDP_HEADER_LEN)?;
    need(Header::Bth, roce_without_icrc.len(), BTH_LEN)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&LRH_MASK);
    match ip_header[0] >> 4 {
        4 => {
            need(Header::Ipv4, ip_header.len(), IPV4_HEADER_LEN)?;
            h.update(&masked_ipv4(ip_header));
        }
        6 => {
            need(Header::Ipv6, ip_header.len(), IPV6_HEADER_LEN)?;
            h.update(&masked_ipv6(ip_header));
        }
        v => return Err(WireError::BadIpVersion(v)),
    }
    h.update(&masked_udp(udp_header));
    h.update(&masked_bth(roce_without_icrc));
    h.update(&roce_without_icrc[BTH_LEN..]);
    Ok(h.finalize())
}

/// Addresses and ports of a datagram, as a UDP socket knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpEndpoints {
    /// Source IP.
    pub src: IpAddr,
    /// Destination IP.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

/// The masked headers a sender through an unconnected `IP_PMTUDISC_DO` socket produces
/// (IPv4: ID `ip_id`, flags `flags_frag`), in ICRC order, for a RoCE packet of `roce_len`
/// bytes including the ICRC. Returns the buffer and how many bytes of it are used.
fn masked_headers(
    ep: &UdpEndpoints,
    roce_len: usize,
    ip_id: u16,
    flags_frag: u16,
) -> ([u8; 56], usize) {
    let mut out = [0u8; 56];
    out[..8].copy_from_slice(&LRH_MASK);
    let udp_len = (UDP_HEADER_LEN + roce_len).min(0xFFFF) as u16;
    let ip_len = match (ep.src, ep.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (IPV4_HEADER_LEN + UDP_HEADER_LEN + roce_len).min(0xFFFF) as u16;
            let h = &mut out[8..28];
            h[0] = 0x45;
            h[1] = 0xFF;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&ip_id.to_be_bytes());
            h[6..8].copy_from_slice(&flags_frag.to_be_bytes());
            h[8] = 0xFF;
            h[9] = PROTO_UDP;
            h[10] = 0xFF;
            h[11] = 0xFF;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            IPV4_HEADER_LEN
        }
        (s, d) => {
            let s = to_v6(s);
            let d = to_v6(d);
            let h = &mut out[8..48];
            h[..4].copy_from_slice(&[0x6F, 0xFF, 0xFF, 0xFF]);
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = PROTO_UDP;
            h[7] = 0xFF;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            IPV6_HEADER_LEN
        }
    };
    let u = &mut out[8 + ip_len..8 + ip_len + UDP_HEADER_LEN];
    u[0..2].copy_from_slice(&ep.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&ep.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6] = 0xFF;
    u[7] = 0xFF;
    (out, 8 + ip_len + UDP_HEADER_LEN)
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V6(v6) => v6,
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
    }
}

/// The ICRC a packet sent through our UDP socket must carry: IPv4 with ID 0 and DF (what
/// Linux sends from an unconnected socket with `IP_PMTUDISC_DO`), or IPv6.
/// `roce_without_icrc` is the packet up to (not including) its ICRC.
pub fn compute_for_udp_socket(ep: &UdpEndpoints, roce_without_icrc: &[u8]) -> Result<u32> {
    need(Header::Bth, roce_without_icrc.len(), BTH_LEN)?;
    let (hdr, n) = masked_headers(ep, roce_without_icrc.len() + ICRC_LEN, 0, IPV4_DF);
    let mut h = crc32fast::Hasher::new();
    h.update(&hdr[..n]);
    h.update(&masked_bth(roce_without_icrc));
    h.update(&roce_without_icrc[BTH_LEN..]);
    Ok(h.finalize())
}

/// How strong a successful ICRC check was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcCheck {
    /// Every covered byte was known: a random corruption passes with probability 2⁻³².
    Exact,
    /// IPv4 seen through a UDP socket: the Identification field was solved from the ICRC.
    /// A random corruption passes with probability 2⁻¹⁶.
    RecoveredIpv4Id {
        /// The IPv4 Identification that makes the ICRC valid.
        id: u16,
        /// Whether the solution assumed DF set (rxe always sets it).
        dont_fragment: bool,
    },
}

/// Verify the ICRC of a packet whose full IP and UDP headers are known.
pub fn verify_exact(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<IcrcCheck> {
    need(Header::Icrc, roce.len(), BTH_LEN + ICRC_LEN)?;
    let (body, tail) = roce.split_at(roce.len() - ICRC_LEN);
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let expected = compute(ip_header, udp_header, body)?;
    if cfg!(fuzzing) || expected == found {
        Ok(IcrcCheck::Exact)
    } else {
        Err(WireError::IcrcMismatch { expected, found })
    }
}

/// Verify the ICRC of a datagram as a UDP socket received it. IPv6 (and IPv4-mapped pairs
/// that are not both IPv4) is checked exactly; IPv4 solves the hidden Identification, first
/// assuming DF set, then clear.
pub fn verify_udp_socket(ep: &UdpEndpoints, roce: &[u8]) -> Result<IcrcCheck> {
    need(Header::Icrc, roce.len(), BTH_LEN + ICRC_LEN)?;
    let (body, tail) = roce.split_at(roce.len() - ICRC_LEN);
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if !matches!((ep.src, ep.dst), (IpAddr::V4(_), IpAddr::V4(_))) {
        let expected = compute_for_udp_socket(ep, body)?;
        return if cfg!(fuzzing) || expected == found {
            Ok(IcrcCheck::Exact)
        } else {
            Err(WireError::IcrcMismatch { expected, found })
        };
    }
    // The state the CRC register must hold right after the masked headers for the packet to
    // end with `found`: run the CRC backwards over everything after the headers.
    let mut state = !found;
    state = unwind(state, &body[BTH_LEN..]);
    state = unwind(state, &masked_bth(body));
    let needed = !state;
    for (flags, df) in [(IPV4_DF, true), (0, false)] {
        if let Some(id) = solve_ip_id(ep, roce.len(), flags, needed) {
            return Ok(IcrcCheck::RecoveredIpv4Id {
                id,
                dont_fragment: df,
            });
        }
    }
    if cfg!(fuzzing) {
        return Ok(IcrcCheck::Exact);
    }
    Err(WireError::IcrcMismatch {
        expected: compute_for_udp_socket(ep, body)?,
        found,
    })
}

/// Solve `crc32(headers(id)) == needed` for the 16-bit `id` by Gaussian elimination over GF(2).
fn solve_ip_id(ep: &UdpEndpoints, roce_len: usize, flags: u16, needed: u32) -> Option<u16> {
    let crc_for = |id: u16| {
        let (hdr, n) = masked_headers(ep, roce_len, id, flags);
        crc32fast::hash(&hdr[..n])
    };
    let base = crc_for(0);
    // Reduced basis: (pivot bit, vector, which id bits produce it).
    let mut basis: [(u32, u32, u16); 16] = [(0, 0, 0); 16];
    let mut rank = 0;
    for bit in 0..16 {
        let mut v = crc_for(1 << bit) ^ base;
        let mut combo = 1u16 << bit;
        for &(pivot, bv, bc) in &basis[..rank] {
            if v & pivot != 0 {
                v ^= bv;
                combo ^= bc;
            }
        }
        if v == 0 {
            continue;
        }
        let pivot = 1u32 << (31 - v.leading_zeros());
        for entry in &mut basis[..rank] {
            if entry.1 & pivot != 0 {
                entry.1 ^= v;
                entry.2 ^= combo;
            }
        }
        basis[rank] = (pivot, v, combo);
        rank += 1;
    }
    let mut target = needed ^ base;
    let mut id = 0u16;
    for &(pivot, bv, bc) in &basis[..rank] {
        if target & pivot != 0 {
            target ^= bv;
            id ^= bc;
        }
    }
    (target == 0).then_some(id)
}

/// The reflected CRC-32 table (polynomial 0xEDB88320).
const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// For each top byte of a table entry, the index that produced it (the top bytes of the
/// CRC-32 table are a permutation, which is what makes the CRC step invertible).
const TOP_BYTE_INDEX: [u8; 256] = {
    let mut r = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        r[(TABLE[i] >> 24) as usize] = i as u8;
        i += 1;
    }
    r
};

/// Run the raw CRC register backwards over `bytes` (last byte first).
fn unwind(mut state: u32, bytes: &[u8]) -> u32 {
    for &b in bytes.iter().rev() {
        // Forward: new = (old >> 8) ^ T[(old ^ b) & 0xFF].
        let idx = TOP_BYTE_INDEX[(state >> 24) as usize];
        let shifted = state ^ TABLE[idx as usize];
        state = (shifted << 8) | u32::from(idx ^ b);
    }
    state
}

/// The ICRC endpoints of an IPv4 pair, for callers that only have addresses.
pub const fn ipv4_endpoints(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16) -> UdpEndpoints {
    UdpEndpoints {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        src_port,
        dst_port: ROCE_V2_PORT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{Ipv4Fields, emit_udp};

    /// The NOTES.md example: tshark shows the raw bytes 21 c5 8f 4c; the CRC value is
    /// 0x4c8fc521. Rebuild a packet, compute, and check byte order end to end.
    fn sample(ep: &UdpEndpoints) -> Vec<u8> {
        let mut roce = vec![
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x07,
        ];
        roce.extend_from_slice(&[0x42; 64]);
        let icrc = compute_for_udp_socket(ep, &roce).unwrap();
        roce.extend_from_slice(&icrc.to_le_bytes());
        roce
    }

    fn ep() -> UdpEndpoints {
        ipv4_endpoints(
            "10.99.0.1".parse().unwrap(),
            "10.99.0.11".parse().unwrap(),
            49441,
        )
    }

    #[test]
    fn unwind_inverts_the_forward_crc() {
        let data = b"123456789 the quick brown fox";
        let mut h = crc32fast::Hasher::new();
        h.update(&data[..10]);
        let mid = !h.clone().finalize();
        h.update(&data[10..]);
        let end = !h.finalize();
        assert_eq!(unwind(end, &data[10..]), mid);
        // The check value of CRC-32 over "123456789".
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn udp_socket_packet_verifies_exactly_with_the_header_linux_sends() {
        let ep = ep();
        let roce = sample(&ep);
        let mut ip = [0u8; 20];
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
            unreachable!()
        };
        Ipv4Fields::udp_socket_default(s, d).emit(roce.len(), &mut ip);
        let mut udp = [0u8; 8];
        emit_udp(ep.src_port, ep.dst_port, roce.len(), &mut udp);
        assert_eq!(verify_exact(&ip, &udp, &roce), Ok(IcrcCheck::Exact));
        // TTL, TOS and the IP checksum are masked: changing them changes nothing.
        ip[1] = 0x2e;
        ip[8] = 1;
        assert_eq!(verify_exact(&ip, &udp, &roce), Ok(IcrcCheck::Exact));
    }

    #[test]
    fn hidden_ipv4_id_is_recovered_for_any_id() {
        let ep = ep();
        let mut roce = sample(&ep);
        let n = roce.len();
        for id in [0u16, 1, 0x1234, 0xbeef, 0xffff] {
            let mut hdr_ip = [0u8; 20];
            let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
                unreachable!()
            };
            Ipv4Fields {
                id,
                ..Ipv4Fields::udp_socket_default(s, d)
            }
            .emit(n, &mut hdr_ip);
            let mut udp = [0u8; 8];
            emit_udp(ep.src_port, ep.dst_port, n, &mut udp);
            let icrc = compute(&hdr_ip, &udp, &roce[..n - 4]).unwrap();
            roce[n - 4..].copy_from_slice(&icrc.to_le_bytes());
            assert_eq!(
                verify_udp_socket(&ep, &roce),
                Ok(IcrcCheck::RecoveredIpv4Id {
                    id,
                    dont_fragment: true
                })
            );
        }
    }

    #[test]
    fn corrupted_bits_are_caught_in_exact_mode_and_mostly_in_socket_mode() {
        let ep = ep();
        let roce = sample(&ep);
        let mut ip = [0u8; 20];
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
            unreachable!()
        };
        Ipv4Fields::udp_socket_default(s, d).emit(roce.len(), &mut ip);
        let mut udp = [0u8; 8];
        emit_udp(ep.src_port, ep.dst_port, roce.len(), &mut udp);
        let mut socket_mode_accepts = 0;
        for bit in 0..roce.len() * 8 {
            if bit / 8 == 4 {
                continue; // BTH byte 4 is masked: ECN bits may change in flight.
            }
            let mut bad = roce.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(
                    verify_exact(&ip, &udp, &bad),
                    Err(WireError::IcrcMismatch { .. })
                ),
                "bit {bit}"
            );
            if verify_udp_socket(&ep, &bad).is_ok() {
                socket_mode_accepts += 1;
            }
        }
        // Roughly 2^-16 of corruptions pass in socket mode; with ~700 flips expect none or
        // very few, never a large share.
        assert!(socket_mode_accepts <= 2, "{socket_mode_accepts}");
    }

    #[test]
    fn ipv6_is_always_exact() {
        let ep = UdpEndpoints {
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            src_port: 50000,
            dst_port: ROCE_V2_PORT,
        };
        let mut roce = sample(&ep);
        assert_eq!(verify_udp_socket(&ep, &roce), Ok(IcrcCheck::Exact));
        roce[20] ^= 1;
        assert!(verify_udp_socket(&ep, &roce).is_err());
    }

    #[test]
    fn short_inputs_are_errors_not_panics() {
        let ep = ep();
        for n in 0..16 {
            assert!(verify_udp_socket(&ep, &vec![0u8; n]).is_err());
            assert!(verify_exact(&[0x45; 20], &[0; 8], &vec![0u8; n]).is_err());
        }
        assert!(compute(&[], &[0; 8], &[0; 12]).is_err());
        assert!(compute(&[0x45; 10], &[0; 8], &[0; 12]).is_err());
    }
}
