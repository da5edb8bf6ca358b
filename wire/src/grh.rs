//! The 40-byte GRH area at the start of a UD receive buffer (ibv_post_recv(3)).
//!
//! On RoCEv2 the area holds the received network header: for IPv4, 20 zero bytes then the
//! IPv4 header (with a valid checksum); for IPv6, the IPv6 header. libibverbs'
//! `ibv_init_ah_from_wc` tells the two apart the way [`parse_grh`] does.
//!
//! A receiver on a UDP socket never sees the IPv4 header, so [`emit_ipv4`] rebuilds it from
//! what it does know: addresses, UDP payload length, protocol UDP, and the ID (and DF) that
//! [`crate::icrc::verify_udp_socket`] recovered, or ID 0 with DF. TOS 0 and TTL 64 are what
//! rxe peers send ([`Ipv4Fields::udp_socket_default`]); with them the rebuilt header equals
//! the one on the wire byte for byte.

use std::net::IpAddr;

use crate::Gid;
use crate::error::{Header, Result, WireError, need};
use crate::ip::{IPV4_HEADER_LEN, Ipv4Fields, Ipv6Fields, ipv4_checksum_ok};

/// Size of the GRH area.
pub const GRH_LEN: usize = 40;

/// Where an IPv4 header sits in the area (after 20 unused bytes, which rxe zeroes).
pub const IPV4_AT: usize = GRH_LEN - IPV4_HEADER_LEN;

/// Fill a GRH area for an IPv4 datagram: 20 zero bytes, then its IPv4 header. A UDP socket
/// does not see the header, so it is rebuilt from what is known (addresses, length, and the ID
/// recovered from the ICRC, or 0), with a valid checksum.
pub fn emit_ipv4(fields: &Ipv4Fields, udp_payload_len: usize, out: &mut [u8; GRH_LEN]) {
    out[..IPV4_AT].fill(0);
    let mut h = [0u8; IPV4_HEADER_LEN];
    fields.emit(udp_payload_len, &mut h);
    out[IPV4_AT..].copy_from_slice(&h);
}

/// Fill a GRH area for an IPv6 datagram: its IPv6 header.
pub fn emit_ipv6(fields: &Ipv6Fields, udp_payload_len: usize, out: &mut [u8; GRH_LEN]) {
    fields.emit(udp_payload_len, out);
}

/// What a GRH area says about the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhInfo {
    /// Source GID (IPv4-mapped for IPv4).
    pub sgid: Gid,
    /// Destination GID.
    pub dgid: Gid,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// An IPv6 header's Next Header (UDP for RoCEv2, [`IB_NEXT_HEADER`] for RoCE v1);
    /// `None` for IPv4, which is RoCEv2 alone.
    pub next_header: Option<u8>,
}

/// The IPv6 Next Header of a RoCE v1 GRH: an IBA transport header follows, not UDP.
pub const IB_NEXT_HEADER: u8 = 0x1B;

/// Read a GRH area the way libibverbs' `ibv_init_ah_from_wc` decides its IP version
/// (`get_grh_header_version`):
/// - byte 0 does not start with IPv6's version nibble: IPv4 at byte 20 if its version nibble
///   is 4 (its checksum is not looked at), otherwise unsupported;
/// - byte 0 says 6: IPv4 at byte 20 only if its IHL is 5 *and* its checksum verifies (an
///   IPv6 header may look like that by chance), otherwise the area is an IPv6 header.
pub fn parse_grh(area: &[u8]) -> Result<GrhInfo> {
    need(Header::Grh, area.len(), GRH_LEN)?;
    let v4 = &area[IPV4_AT..GRH_LEN];
    let is_ipv4 = if area[0] >> 4 != 6 {
        if v4[0] >> 4 != 4 {
            return Err(WireError::BadIpVersion(v4[0] >> 4));
        }
        true
    } else {
        v4[0] & 0x0F == 5 && ipv4_checksum_ok(v4)
    };
    if is_ipv4 {
        let f = Ipv4Fields::parse(v4)?;
        return Ok(GrhInfo {
            sgid: Gid::from_ipv4(f.src),
            dgid: Gid::from_ipv4(f.dst),
            traffic_class: f.tos,
            hop_limit: f.ttl,
            next_header: None,
        });
    }
    let f = Ipv6Fields::parse(area)?;
    Ok(GrhInfo {
        sgid: Gid::from_ip(IpAddr::V6(f.src)),
        dgid: Gid::from_ip(IpAddr::V6(f.dst)),
        traffic_class: f.traffic_class,
        hop_limit: f.hop_limit,
        next_header: Some(area[6]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_area_is_twenty_zeros_then_a_checksummed_header() {
        let f = Ipv4Fields::udp_socket_default(
            "10.99.0.12".parse().unwrap(),
            "10.99.0.11".parse().unwrap(),
        );
        let mut area = [0xa5u8; GRH_LEN];
        emit_ipv4(&f, 548, &mut area);
        assert!(area[..20].iter().all(|&b| b == 0));
        assert_eq!(area[20], 0x45);
        let info = parse_grh(&area).unwrap();
        assert_eq!(info.sgid.to_string(), "::ffff:10.99.0.12");
        assert_eq!(info.dgid.to_string(), "::ffff:10.99.0.11");
        assert_eq!(info.hop_limit, 64);
        assert_eq!(info.next_header, None, "IPv4 is RoCEv2 alone");
        // Like libibverbs, an area that cannot be IPv6 is taken as IPv4 without a checksum
        // check; a version nibble that is neither is rejected.
        area[30] ^= 1;
        assert_eq!(
            parse_grh(&area).unwrap().sgid.to_string(),
            "::ffff:10.99.0.12"
        );
        area[20] = 0x55;
        assert_eq!(parse_grh(&area), Err(WireError::BadIpVersion(5)));
    }

    #[test]
    fn ipv6_nibble_with_a_valid_ipv4_header_at_20_is_ipv4() {
        let f = Ipv4Fields::udp_socket_default(
            "10.99.0.12".parse().unwrap(),
            "10.99.0.11".parse().unwrap(),
        );
        let mut area = [0u8; GRH_LEN];
        emit_ipv4(&f, 548, &mut area);
        area[0] = 0x60;
        assert_eq!(
            parse_grh(&area).unwrap().sgid.to_string(),
            "::ffff:10.99.0.12"
        );
        // Break the checksum: now it is read as IPv6.
        area[IPV4_AT + 8] ^= 1;
        let as_ipv6 = Ipv6Fields::parse(&area).unwrap();
        let info = parse_grh(&area).unwrap();
        assert_eq!(info.sgid, Gid::from_ip(IpAddr::V6(as_ipv6.src)));
        assert_eq!(info.next_header, Some(area[6]));
        assert!(
            !info.sgid.to_string().starts_with("::ffff:"),
            "{}",
            info.sgid
        );
    }

    #[test]
    fn ipv6_area_is_the_ipv6_header() {
        let f = Ipv6Fields {
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 1,
        };
        let mut area = [0u8; GRH_LEN];
        emit_ipv6(&f, 100, &mut area);
        let info = parse_grh(&area).unwrap();
        assert_eq!(info.sgid.to_string(), "fe80::1");
        assert_eq!(info.hop_limit, 1);
        assert!(parse_grh(&area[..39]).is_err());
    }
}
