//! RoCEv2 GIDs and their IP addresses.
//!
//! A RoCEv2 GID *is* an IPv6 address: an IPv4 address appears as the IPv4-mapped form
//! `::ffff:a.b.c.d` (rxe's GID index 1 on a netdev with one IPv4 address).

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A 128-bit global identifier, stored in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid([u8; 16]);

impl Gid {
    /// The all-zero GID (an empty GID table entry).
    pub const ZERO: Self = Self([0; 16]);

    /// Wrap raw GID bytes (network order).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// A GID written as 32 hex digits (the form the pingpong tools exchange), or `None`
    /// for anything else (another length, a sign, a non-ASCII character).
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(bytes))
    }

    /// The raw bytes (network order).
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The raw bytes (network order), by value.
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0
    }

    /// The RoCEv2 GID of an IP address: IPv4 becomes IPv4-mapped, IPv6 is taken as is.
    pub const fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::from_ipv4(v4),
            IpAddr::V6(v6) => Self(v6.octets()),
        }
    }

    /// The IPv4-mapped GID `::ffff:a.b.c.d`.
    pub const fn from_ipv4(ip: Ipv4Addr) -> Self {
        let o = ip.octets();
        Self([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, o[0], o[1], o[2], o[3],
        ])
    }

    /// The IP address a RoCEv2 packet for this GID uses: IPv4 for IPv4-mapped GIDs, else IPv6.
    pub fn to_ip(self) -> IpAddr {
        // The prefix tested on the bytes as one integer rather than through
        // `Ipv6Addr::to_ipv4_mapped`'s eight segments: every received packet asks (its
        // QP's GID against the datagram's address).
        if self.is_ipv4_mapped() {
            let [.., a, b, c, d] = self.0;
            IpAddr::V4(Ipv4Addr::new(a, b, c, d))
        } else {
            IpAddr::V6(Ipv6Addr::from(self.0))
        }
    }

    /// Whether this GID is IPv4-mapped (`::ffff:a.b.c.d`, so its packets travel over IPv4).
    pub fn is_ipv4_mapped(self) -> bool {
        u128::from_be_bytes(self.0) >> 32 == 0xffff
    }

    /// Whether this GID names a multicast group: an IPv4-mapped multicast address
    /// (224.0.0.0/4), else an IPv6 multicast address (`ff00::/8`), as the kernel's
    /// `rdma_is_multicast_addr` decides.
    pub fn is_multicast(self) -> bool {
        match self.to_ip() {
            IpAddr::V4(v4) => v4.is_multicast(),
            IpAddr::V6(_) => self.0[0] == 0xff,
        }
    }

    /// The link-local IPv6 GID (`fe80::` + EUI-64) rxe puts at index 0 for a MAC address.
    pub const fn link_local_from_mac(mac: [u8; 6]) -> Self {
        Self([
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            mac[0] ^ 0x02,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ])
    }

    /// The subnet prefix (high 64 bits), as `ibv_gid.global.subnet_prefix` holds it.
    pub const fn subnet_prefix(self) -> u64 {
        u64::from_be_bytes([
            self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5], self.0[6], self.0[7],
        ])
    }

    /// The interface ID (low 64 bits).
    pub const fn interface_id(self) -> u64 {
        u64::from_be_bytes([
            self.0[8], self.0[9], self.0[10], self.0[11], self.0[12], self.0[13], self.0[14],
            self.0[15],
        ])
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Self {
        Self::from_ip(ip)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl fmt::Display for Gid {
    /// Formats as an IPv6 address (`::ffff:10.99.0.11` for IPv4-mapped GIDs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_gids_parse_and_anything_else_is_refused() {
        let g = Gid::from_hex("fe800000000000000000000000000001").expect("32 hex digits");
        assert_eq!(g.as_bytes()[0], 0xfe);
        assert_eq!(g.as_bytes()[15], 1);
        for bad in [
            "",
            "fe80",
            "+e800000000000000000000000000001",
            "0\u{e9}00000000000000000000000000000",
            "zz800000000000000000000000000001",
        ] {
            assert_eq!(Gid::from_hex(bad), None, "{bad:?}");
        }
    }

    use super::*;

    #[test]
    fn ipv4_maps_to_rxe_gid_index_1() {
        let gid = Gid::from_ip("10.99.0.11".parse().unwrap());
        assert_eq!(gid.to_string(), "::ffff:10.99.0.11");
        assert!(gid.is_ipv4_mapped());
        assert_eq!(gid.to_ip(), "10.99.0.11".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn multicast_gids_are_ipv4_mapped_class_d_or_ff00() {
        let g = |s: &str| Gid::from_ip(s.parse().unwrap());
        assert!(g("239.79.0.1").is_multicast());
        assert!(g("ff0e::1").is_multicast());
        assert!(!g("127.79.0.1").is_multicast());
        assert!(!g("fe80::1").is_multicast());
        // The kernel's IB-style MGID for IPv4 (ff0e::ffff:a.b.c.d) is an IPv6 multicast GID.
        let mut ib = g("239.79.0.1").to_bytes();
        ib[0] = 0xff;
        ib[1] = 0x0e;
        assert!(Gid::from_bytes(ib).is_multicast());
    }

    #[test]
    fn ipv6_gid_is_the_address() {
        let ip: IpAddr = "fe80::5054:ff:fe99:11".parse().unwrap();
        let gid = Gid::from_ip(ip);
        assert!(!gid.is_ipv4_mapped());
        assert_eq!(gid.to_ip(), ip);
    }

    #[test]
    fn only_the_ffff_prefix_maps_to_ipv4() {
        // Addresses one bit off the ::ffff:0:0/96 prefix are IPv6, as `to_ipv4_mapped` says.
        for s in [
            "::fffe:10.0.0.1",
            "::1:ffff:10.0.0.1",
            "::10.0.0.1",
            "1::ffff:10.0.0.1",
        ] {
            let ip: Ipv6Addr = s.parse().unwrap();
            let gid = Gid::from_bytes(ip.octets());
            assert_eq!(gid.is_ipv4_mapped(), ip.to_ipv4_mapped().is_some(), "{s}");
            assert_eq!(gid.to_ip(), IpAddr::V6(ip), "{s}");
        }
        let gid = Gid::from_bytes("::ffff:0.0.0.0".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(gid.to_ip(), "0.0.0.0".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn link_local_gid_from_mac_matches_rxe0() {
        let gid = Gid::link_local_from_mac([0x52, 0x54, 0x00, 0x99, 0x00, 0x11]);
        assert_eq!(gid.to_string(), "fe80::5054:ff:fe99:11");
        assert_eq!(gid.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(gid.interface_id(), 0x5054_00ff_fe99_0011);
    }
}
