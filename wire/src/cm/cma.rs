//! rdma_cm's IP addressing on top of the IB CM: service IDs built from a port space and
//! a port, and the `cma_hdr` that starts the private data of every REQ and SIDR_REQ it
//! sends for an IP (not `AF_IB`) address (`drivers/infiniband/core/cma.c`).
//!
//! ```text
//! byte 0      cma_version (0)
//! byte 1      IP version in bits 7:4 (4 or 6), low nibble reserved
//! byte 2-3    source port
//! byte 4-19   source address (IPv4: bytes 16-19, after 12 zero bytes)
//! byte 20-35  destination address (IPv4: bytes 32-35)
//! ```
//!
//! The destination port is not in the header: it is the low 16 bits of the service ID.
//!
//! ```
//! use softroce_wire::cm::{CmaAddrs, CmaHdr, CmaHdrRepr, PortSpace};
//!
//! assert_eq!(PortSpace::Tcp.service_id(7471), 0x0000_0000_0106_1d2f);
//! assert_eq!(PortSpace::from_service_id(0x0106_1d2f), Some((PortSpace::Tcp, 7471)));
//!
//! let hdr = CmaHdrRepr {
//!     src_port: 40000,
//!     addrs: CmaAddrs::V4 { src: [10, 0, 0, 2].into(), dst: [10, 0, 0, 1].into() },
//! };
//! let mut pd = [0u8; 92];
//! hdr.emit(&mut CmaHdr::new_unchecked(&mut pd[..]));
//! assert_eq!(CmaHdrRepr::parse(&CmaHdr::new_checked(&pd[..]).unwrap()).unwrap(), hdr);
//! ```

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{Header, Result, WireError};
use crate::field::header_view;

/// Length of `struct cma_hdr`.
pub const CMA_HDR_LEN: usize = 36;
/// The only `cma_version` (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;

/// An rdma_cm port space: bytes 4-5 of an IP-based service ID (IBTA annex A11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// `RDMA_PS_IPOIB` (0x0002).
    IpoIb,
    /// `RDMA_PS_TCP` (0x0106): reliable connected QPs, what most applications use.
    Tcp,
    /// `RDMA_PS_UDP` (0x0111): UD QPs, resolved with SIDR.
    Udp,
    /// `RDMA_PS_IB` (0x013F): any QP type.
    Ib,
}

impl PortSpace {
    /// The 16-bit port space value.
    pub const fn value(self) -> u16 {
        match self {
            Self::IpoIb => 0x0002,
            Self::Tcp => 0x0106,
            Self::Udp => 0x0111,
            Self::Ib => 0x013F,
        }
    }

    /// The port space of a 16-bit value, if it is one.
    pub const fn from_value(value: u16) -> Option<Self> {
        match value {
            0x0002 => Some(Self::IpoIb),
            0x0106 => Some(Self::Tcp),
            0x0111 => Some(Self::Udp),
            0x013F => Some(Self::Ib),
            _ => None,
        }
    }

    /// The service ID rdma_cm listens on and connects to for `port` in this port space:
    /// `(ps << 16) + port` (`rdma_get_service_id`), e.g. 0x0000_0000_0106_xxxx for TCP.
    pub const fn service_id(self, port: u16) -> u64 {
        ((self.value() as u64) << 16) | port as u64
    }

    /// Split an IP-based service ID into port space and port: the top 32 bits must be zero
    /// and bits 16-31 a known port space (`RDMA_IB_IP_PS_MASK` keeps the top 48 bits).
    pub const fn from_service_id(service_id: u64) -> Option<(Self, u16)> {
        if service_id >> 32 != 0 {
            return None;
        }
        match Self::from_value((service_id >> 16) as u16) {
            Some(ps) => Some((ps, service_id as u16)),
            None => None,
        }
    }

    /// Lower-case name for summaries (`tcp`, `udp`, `ib`, `ipoib`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::IpoIb => "ipoib",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Ib => "ib",
        }
    }
}

impl fmt::Display for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

header_view! {
    /// A view of an rdma_cm private-data header (`struct cma_hdr`).
    CmaHdr, Header::CmaHdr, CMA_HDR_LEN, {
        /// `cma_version` (0).
        cma_version, set_cma_version: u8 = 0..1;
        /// Byte 1: IP version in bits 7:4.
        ip_version_byte, set_ip_version_byte: u8 = 1..2;
        /// Source (active side) port.
        src_port, set_src_port: u16 = 2..4;
    }
}

impl<T: AsRef<[u8]>> CmaHdr<T> {
    /// The IP version nibble (4 or 6 when valid).
    pub fn ip_version(&self) -> u8 {
        self.ip_version_byte() >> 4
    }
    /// The 16-byte source address union.
    pub fn src_addr_raw(&self) -> &[u8] {
        &self.buffer.as_ref()[4..20]
    }
    /// The 16-byte destination address union.
    pub fn dst_addr_raw(&self) -> &[u8] {
        &self.buffer.as_ref()[20..36]
    }
}

/// The addresses of a `cma_hdr`, one family for both (the version nibble covers both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmaAddrs {
    /// IP version 4.
    V4 {
        /// Source (active side) address.
        src: Ipv4Addr,
        /// Destination (passive side) address.
        dst: Ipv4Addr,
    },
    /// IP version 6.
    V6 {
        /// Source (active side) address.
        src: Ipv6Addr,
        /// Destination (passive side) address.
        dst: Ipv6Addr,
    },
}

impl CmaAddrs {
    /// The source address.
    pub const fn src(&self) -> IpAddr {
        match *self {
            Self::V4 { src, .. } => IpAddr::V4(src),
            Self::V6 { src, .. } => IpAddr::V6(src),
        }
    }
    /// The destination address.
    pub const fn dst(&self) -> IpAddr {
        match *self {
            Self::V4 { dst, .. } => IpAddr::V4(dst),
            Self::V6 { dst, .. } => IpAddr::V6(dst),
        }
    }
}

/// An owned `cma_hdr`. The IPv4 pad words and the reserved nibble are not kept: emit
/// writes zeros there, as the kernel's zeroed private data buffer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdrRepr {
    /// Source (active side) port.
    pub src_port: u16,
    /// Source and destination addresses.
    pub addrs: CmaAddrs,
}

impl CmaHdrRepr {
    /// Parse, rejecting `cma_version` other than 0 and IP versions other than 4 and 6.
    pub fn parse<T: AsRef<[u8]>>(v: &CmaHdr<T>) -> Result<Self> {
        v.check_len()?;
        if v.cma_version() != CMA_VERSION {
            return Err(WireError::BadCmaVersion(v.cma_version()));
        }
        let (src, dst) = (v.src_addr_raw(), v.dst_addr_raw());
        let addrs = match v.ip_version() {
            4 => CmaAddrs::V4 {
                src: Ipv4Addr::new(src[12], src[13], src[14], src[15]),
                dst: Ipv4Addr::new(dst[12], dst[13], dst[14], dst[15]),
            },
            6 => CmaAddrs::V6 {
                src: Ipv6Addr::from(octets16(src)),
                dst: Ipv6Addr::from(octets16(dst)),
            },
            other => return Err(WireError::BadIpVersion(other)),
        };
        Ok(Self {
            src_port: v.src_port(),
            addrs,
        })
    }

    /// Write the 36 header bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmaHdr<T>) {
        v.set_cma_version(CMA_VERSION);
        v.set_src_port(self.src_port);
        let b = &mut v.buffer.as_mut()[..CMA_HDR_LEN];
        b[4..36].fill(0);
        match self.addrs {
            CmaAddrs::V4 { src, dst } => {
                b[1] = 4 << 4;
                b[16..20].copy_from_slice(&src.octets());
                b[32..36].copy_from_slice(&dst.octets());
            }
            CmaAddrs::V6 { src, dst } => {
                b[1] = 6 << 4;
                b[4..20].copy_from_slice(&src.octets());
                b[20..36].copy_from_slice(&dst.octets());
            }
        }
    }
}

impl fmt::Display for CmaHdrRepr {
    /// `src=ADDR:PORT dst=ADDR` (the destination port is in the service ID).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "src={} dst={}",
            SocketAddr::new(self.addrs.src(), self.src_port),
            self.addrs.dst()
        )
    }
}

fn octets16(b: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&b[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_match_rdma_ib_ip_ps_constants() {
        // RDMA_IB_IP_PS_TCP / _UDP / _IB from include/rdma/rdma_cm.h, port 0.
        assert_eq!(PortSpace::Tcp.service_id(0), 0x0000_0000_0106_0000);
        assert_eq!(PortSpace::Udp.service_id(0), 0x0000_0000_0111_0000);
        assert_eq!(PortSpace::Ib.service_id(0), 0x0000_0000_013F_0000);
        assert_eq!(PortSpace::IpoIb.service_id(0xffff), 0x0000_0000_0002_ffff);
        for ps in [
            PortSpace::IpoIb,
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::Ib,
        ] {
            for port in [0, 1, 7471, 0xffff] {
                assert_eq!(
                    PortSpace::from_service_id(ps.service_id(port)),
                    Some((ps, port))
                );
            }
        }
        assert_eq!(PortSpace::from_service_id(0x0000_0001_0106_1d2f), None);
        assert_eq!(PortSpace::from_service_id(0x0000_0000_0107_1d2f), None);
    }

    /// `struct cma_hdr` for 10.0.0.2:40000 -> 10.0.0.1: version 0 at 0, 0x40 at 1, port at
    /// 2-3, IPv4 source at 16-19 and destination at 32-35 (`union cma_ip_addr`'s `ip4.addr`
    /// after `pad[3]`).
    const V4_HDR: [u8; 36] = [
        0x00, 0x40, 0x9c, 0x40, // version, ip version 4, port 40000
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2, // src
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1, // dst
    ];

    #[test]
    fn ipv4_addresses_sit_in_the_last_word_of_each_union() {
        let r = CmaHdrRepr::parse(&CmaHdr::new_checked(&V4_HDR[..]).unwrap()).unwrap();
        assert_eq!(r.src_port, 40000);
        assert_eq!(
            r.addrs,
            CmaAddrs::V4 {
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst: Ipv4Addr::new(10, 0, 0, 1)
            }
        );
        assert_eq!(r.to_string(), "src=10.0.0.2:40000 dst=10.0.0.1");
        let mut out = [0xa5u8; 36];
        r.emit(&mut CmaHdr::new_unchecked(&mut out[..]));
        assert_eq!(out, V4_HDR);
    }

    #[test]
    fn ipv6_addresses_fill_the_unions() {
        let src: Ipv6Addr = "fe80::1".parse().unwrap();
        let dst: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let r = CmaHdrRepr {
            src_port: 1,
            addrs: CmaAddrs::V6 { src, dst },
        };
        let mut out = [0u8; 36];
        r.emit(&mut CmaHdr::new_unchecked(&mut out[..]));
        assert_eq!(out[..4], [0x00, 0x60, 0x00, 0x01]);
        assert_eq!(out[4..20], src.octets());
        assert_eq!(out[20..36], dst.octets());
        assert_eq!(
            CmaHdrRepr::parse(&CmaHdr::new_unchecked(&out[..])).unwrap(),
            r
        );
        assert_eq!(r.to_string(), "src=[fe80::1]:1 dst=2001:db8::2");
    }

    #[test]
    fn bad_versions_and_short_headers_are_rejected() {
        let mut b = V4_HDR;
        b[0] = 1;
        assert_eq!(
            CmaHdrRepr::parse(&CmaHdr::new_unchecked(&b[..])),
            Err(WireError::BadCmaVersion(1))
        );
        let mut b = V4_HDR;
        b[1] = 0x50;
        assert_eq!(
            CmaHdrRepr::parse(&CmaHdr::new_unchecked(&b[..])),
            Err(WireError::BadIpVersion(5))
        );
        assert_eq!(
            CmaHdr::new_checked(&V4_HDR[..35]).unwrap_err(),
            WireError::Truncated {
                header: Header::CmaHdr,
                need: 36,
                got: 35
            }
        );
    }
}
