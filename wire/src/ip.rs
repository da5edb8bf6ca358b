//! The IPv4/IPv6 and UDP headers around a RoCEv2 packet: just what the ICRC, the UD GRH area
//! and pcap synthesis need (RoCEv2 never uses IPv4 options).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Header, Result, WireError, need};

/// IPv4 header length (no options).
pub const IPV4_HEADER_LEN: usize = 20;
/// IPv6 header length.
pub const IPV6_HEADER_LEN: usize = 40;
/// UDP header length.
pub const UDP_HEADER_LEN: usize = 8;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv4 "don't fragment" flag in the flags/fragment-offset word.
pub const IPV4_DF: u16 = 0x4000;

/// The fields of an IPv4 header that RoCEv2 varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Fields {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP and ECN byte.
    pub tos: u8,
    /// Identification.
    pub id: u16,
    /// Flags and fragment offset (rxe: DF only).
    pub flags_frag: u16,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Fields {
    /// What Linux sends from an unconnected UDP socket with `IP_PMTUDISC_DO`: ID 0, DF, TTL 64.
    pub const fn udp_socket_default(src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        Self {
            src,
            dst,
            tos: 0,
            id: 0,
            flags_frag: IPV4_DF,
            ttl: 64,
        }
    }

    /// Write a 20-byte IPv4 header (protocol UDP, valid checksum) for a UDP payload of
    /// `udp_payload_len` bytes.
    pub fn emit(&self, udp_payload_len: usize, out: &mut [u8; IPV4_HEADER_LEN]) {
        let total = (IPV4_HEADER_LEN + UDP_HEADER_LEN + udp_payload_len).min(0xFFFF) as u16;
        out[0] = 0x45;
        out[1] = self.tos;
        out[2..4].copy_from_slice(&total.to_be_bytes());
        out[4..6].copy_from_slice(&self.id.to_be_bytes());
        out[6..8].copy_from_slice(&self.flags_frag.to_be_bytes());
        out[8] = self.ttl;
        out[9] = PROTO_UDP;
        out[10..12].fill(0);
        out[12..16].copy_from_slice(&self.src.octets());
        out[16..20].copy_from_slice(&self.dst.octets());
        let sum = ipv4_checksum(out);
        out[10..12].copy_from_slice(&sum.to_be_bytes());
    }

    /// Parse the fields of a 20-byte IPv4 header (checksum and length not checked here).
    pub fn parse(h: &[u8]) -> Result<Self> {
        need(Header::Ipv4, h.len(), IPV4_HEADER_LEN)?;
        Ok(Self {
            src: Ipv4Addr::new(h[12], h[13], h[14], h[15]),
            dst: Ipv4Addr::new(h[16], h[17], h[18], h[19]),
            tos: h[1],
            id: u16::from_be_bytes([h[4], h[5]]),
            flags_frag: u16::from_be_bytes([h[6], h[7]]),
            ttl: h[8],
        })
    }
}

/// The RFC 791 header checksum of `header` (with its checksum field taken as is; over a
/// header whose checksum field is zero this is the value to store).
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for chunk in header.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], chunk.get(1).copied().unwrap_or(0)]);
        sum += u32::from(word);
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether an IPv4 header's checksum verifies.
pub fn ipv4_checksum_ok(header: &[u8]) -> bool {
    ipv4_checksum(header) == 0
}

/// The fields of an IPv6 header that RoCEv2 varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Fields {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Fields {
    /// Write a 40-byte IPv6 header (next header UDP) for a UDP payload of `udp_payload_len`.
    pub fn emit(&self, udp_payload_len: usize, out: &mut [u8; IPV6_HEADER_LEN]) {
        let first =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000F_FFFF);
        out[0..4].copy_from_slice(&first.to_be_bytes());
        let plen = (UDP_HEADER_LEN + udp_payload_len).min(0xFFFF) as u16;
        out[4..6].copy_from_slice(&plen.to_be_bytes());
        out[6] = PROTO_UDP;
        out[7] = self.hop_limit;
        out[8..24].copy_from_slice(&self.src.octets());
        out[24..40].copy_from_slice(&self.dst.octets());
    }

    /// Parse the fields of a 40-byte IPv6 header.
    pub fn parse(h: &[u8]) -> Result<Self> {
        need(Header::Ipv6, h.len(), IPV6_HEADER_LEN)?;
        let first = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&h[8..24]);
        dst.copy_from_slice(&h[24..40]);
        Ok(Self {
            src: src.into(),
            dst: dst.into(),
            traffic_class: ((first >> 20) & 0xFF) as u8,
            flow_label: first & 0x000F_FFFF,
            hop_limit: h[7],
        })
    }
}

/// Write a UDP header (checksum 0, as rxe sends).
pub fn emit_udp(src_port: u16, dst_port: u16, payload_len: usize, out: &mut [u8; UDP_HEADER_LEN]) {
    out[0..2].copy_from_slice(&src_port.to_be_bytes());
    out[2..4].copy_from_slice(&dst_port.to_be_bytes());
    let len = (UDP_HEADER_LEN + payload_len).min(0xFFFF) as u16;
    out[4..6].copy_from_slice(&len.to_be_bytes());
    out[6..8].fill(0);
}

/// A parsed IP + UDP datagram carrying a UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    /// The IP header bytes (20 for IPv4, 40 for IPv6).
    pub ip_header: &'a [u8],
    /// The UDP header bytes.
    pub udp_header: &'a [u8],
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// Parse an IPv4 or IPv6 packet carrying UDP (trailing link padding is ignored).
pub fn parse_ip_udp(packet: &[u8]) -> Result<UdpDatagram<'_>> {
    need(Header::Ipv4, packet.len(), 1)?;
    let (ip_len, src, dst, end) = match packet[0] >> 4 {
        4 => {
            need(Header::Ipv4, packet.len(), IPV4_HEADER_LEN)?;
            let ihl = packet[0] & 0x0F;
            if ihl != 5 {
                return Err(WireError::BadIpv4HeaderLen(ihl));
            }
            if packet[9] != PROTO_UDP {
                return Err(WireError::NotUdp(packet[9]));
            }
            let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
            if total < IPV4_HEADER_LEN || total > packet.len() {
                return Err(WireError::BadIpLength {
                    claimed: total,
                    got: packet.len(),
                });
            }
            let f = Ipv4Fields::parse(packet)?;
            (IPV4_HEADER_LEN, IpAddr::V4(f.src), IpAddr::V4(f.dst), total)
        }
        6 => {
            need(Header::Ipv6, packet.len(), IPV6_HEADER_LEN)?;
            if packet[6] != PROTO_UDP {
                return Err(WireError::NotUdp(packet[6]));
            }
            let plen = usize::from(u16::from_be_bytes([packet[4], packet[5]]));
            let total = IPV6_HEADER_LEN + plen;
            if total > packet.len() {
                return Err(WireError::BadIpLength {
                    claimed: total,
                    got: packet.len(),
                });
            }
            let f = Ipv6Fields::parse(packet)?;
            (IPV6_HEADER_LEN, IpAddr::V6(f.src), IpAddr::V6(f.dst), total)
        }
        v => return Err(WireError::BadIpVersion(v)),
    };
    need(Header::Udp, end, ip_len + UDP_HEADER_LEN)?;
    let udp = &packet[ip_len..ip_len + UDP_HEADER_LEN];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < UDP_HEADER_LEN || ip_len + udp_len > end {
        return Err(WireError::BadUdpLength {
            claimed: udp_len,
            got: end - ip_len,
        });
    }
    Ok(UdpDatagram {
        ip_header: &packet[..ip_len],
        udp_header: udp,
        src,
        dst,
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        payload: &packet[ip_len + UDP_HEADER_LEN..ip_len + udp_len],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_has_a_valid_checksum_and_round_trips() {
        let f = Ipv4Fields::udp_socket_default(
            "10.99.0.1".parse().unwrap(),
            "10.99.0.11".parse().unwrap(),
        );
        let mut h = [0xa5u8; 20];
        f.emit(100, &mut h);
        assert!(ipv4_checksum_ok(&h));
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 128);
        assert_eq!(Ipv4Fields::parse(&h).unwrap(), f);
    }

    #[test]
    fn ip_udp_parse_rejects_what_is_not_roce_transport() {
        let f = Ipv4Fields::udp_socket_default(
            "127.0.0.1".parse().unwrap(),
            "127.0.0.2".parse().unwrap(),
        );
        let mut pkt = vec![0u8; 20 + 8 + 4];
        let mut h = [0u8; 20];
        f.emit(4, &mut h);
        pkt[..20].copy_from_slice(&h);
        let mut u = [0u8; 8];
        emit_udp(1234, 4791, 4, &mut u);
        pkt[20..28].copy_from_slice(&u);
        let d = parse_ip_udp(&pkt).unwrap();
        assert_eq!((d.src_port, d.dst_port, d.payload.len()), (1234, 4791, 4));
        let mut tcp = pkt.clone();
        tcp[9] = 6;
        assert_eq!(parse_ip_udp(&tcp), Err(WireError::NotUdp(6)));
        assert!(matches!(
            parse_ip_udp(&pkt[..25]),
            Err(WireError::BadIpLength { .. })
        ));
        assert_eq!(parse_ip_udp(&[0x55]), Err(WireError::BadIpVersion(5)));
        for n in 0..pkt.len() {
            assert!(parse_ip_udp(&pkt[..n]).is_err());
        }
    }

    #[test]
    fn ipv6_header_round_trips() {
        let f = Ipv6Fields {
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            traffic_class: 0x12,
            flow_label: 0xabcde,
            hop_limit: 64,
        };
        let mut h = [0u8; 40];
        f.emit(20, &mut h);
        assert_eq!(Ipv6Fields::parse(&h).unwrap(), f);
        assert_eq!(u16::from_be_bytes([h[4], h[5]]), 28);
    }
}
