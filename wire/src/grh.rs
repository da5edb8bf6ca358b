//! The 40-byte GRH area at the start of a UD receive buffer (ibv_post_recv(3)).
//!
//! On RoCEv2 the area holds the received network header: for IPv4, 20 zero bytes then the
//! IPv4 header (with a valid checksum); for IPv6, the IPv6 header. libibverbs'
//! `ibv_init_ah_from_wc` tells the two apart the way [`parse_grh`] does.

use std::net::IpAddr;

use crate::Gid;
use crate::error::{Header, Result, WireError, need};
use crate::ip::{IPV4_HEADER_LEN, Ipv4Fields, Ipv6Fields, ipv4_checksum_ok};

/// Size of the GRH area.
pub const GRH_LEN: usize = 40;

/// Fill a GRH area for an IPv4 datagram: 20 zero bytes, then its IPv4 header. A UDP socket
/// does not see the header, so it is rebuilt from what is known (addresses, length, and the ID
/// recovered from the ICRC, or 0), with a valid checksum.
pub fn emit_ipv4(fields: &Ipv4Fields, udp_payload_len: usize, out: &mut [u8; GRH_LEN]) {
    out[..20].fill(0);
    let mut h = [0u8; IPV4_HEADER_LEN];
    fields.emit(udp_payload_len, &mut h);
    out[20..].copy_from_slice(&h);
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
}

/// Read a GRH area like libibverbs does: an IPv6 version nibble at byte 0 means IPv6;
/// otherwise an IPv4 header at byte 20 whose checksum verifies.
pub fn parse_grh(area: &[u8]) -> Result<GrhInfo> {
    need(Header::Grh, area.len(), GRH_LEN)?;
    if area[0] >> 4 == 6 {
        let f = Ipv6Fields::parse(area)?;
        return Ok(GrhInfo {
            sgid: Gid::from_ip(IpAddr::V6(f.src)),
            dgid: Gid::from_ip(IpAddr::V6(f.dst)),
            traffic_class: f.traffic_class,
            hop_limit: f.hop_limit,
        });
    }
    let v4 = &area[20..40];
    if v4[0] >> 4 != 4 {
        return Err(WireError::BadIpVersion(v4[0] >> 4));
    }
    if !ipv4_checksum_ok(v4) {
        return Err(WireError::BadIpv4Checksum);
    }
    let f = Ipv4Fields::parse(v4)?;
    Ok(GrhInfo {
        sgid: Gid::from_ipv4(f.src),
        dgid: Gid::from_ipv4(f.dst),
        traffic_class: f.tos,
        hop_limit: f.ttl,
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
        area[30] ^= 1;
        assert_eq!(parse_grh(&area), Err(WireError::BadIpv4Checksum));
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
