//! Reading and writing pcap captures of RoCEv2 traffic.
//!
//! Reading understands Ethernet (with VLAN tags), Linux cooked captures (SLL and SLL2) and
//! raw IP link types, IPv4 and IPv6, and picks out UDP datagrams to port 4791. Writing
//! synthesizes Ethernet + IPv4 (ID 0, DF, TTL 64, valid checksum) or IPv6 + UDP headers around
//! our own RoCE packets, exactly what Linux puts on the wire for an unconnected
//! `IP_PMTUDISC_DO` socket, so tshark decodes them as RoCEv2 and their ICRCs verify.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};

use crate::icrc::ROCE_V2_PORT;
use crate::ip::{
    IPV4_HEADER_LEN, IPV6_HEADER_LEN, Ipv4Fields, Ipv6Fields, UDP_HEADER_LEN, UdpDatagram,
    emit_udp, parse_ip_udp,
};

/// Errors reading or writing a capture file.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// The bytes are not a pcap capture this reader understands.
    #[error("{path}: not a readable pcap file: {reason}")]
    Format {
        /// The file.
        path: String,
        /// What the pcap parser said.
        reason: String,
    },
    /// The capture's link type carries no IP packets we can find.
    #[error("{path}: unsupported link type {link:?} (need Ethernet, Linux cooked or raw IP)")]
    UnsupportedLink {
        /// The file.
        path: String,
        /// The link type.
        link: DataLink,
    },
}

/// The link layers we can strip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Ethernet,
    LinuxSll,
    LinuxSll2,
    RawIp,
}

/// A pcap file being read.
#[derive(Debug)]
pub struct CaptureReader<R: Read> {
    inner: PcapReader<R>,
    link: Link,
    path: String,
}

/// One frame of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Capture timestamp since the epoch.
    pub timestamp: Duration,
    /// The frame bytes, link header included.
    pub data: Vec<u8>,
}

/// What a frame turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind<'a> {
    /// A UDP datagram to port 4791: a RoCEv2 packet.
    Roce(UdpDatagram<'a>),
    /// Anything else (another protocol or port), with a short reason.
    Other(&'static str),
}

impl CaptureReader<BufReader<File>> {
    /// Open a pcap file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let path_str = path.as_ref().display().to_string();
        let file = File::open(path.as_ref()).map_err(|source| CaptureError::Io {
            path: path_str.clone(),
            source,
        })?;
        Self::new(BufReader::new(file), path_str)
    }
}

impl<R: Read> CaptureReader<R> {
    /// Read a pcap stream; `name` is used in error messages.
    pub fn new(reader: R, name: impl Into<String>) -> Result<Self, CaptureError> {
        let path = name.into();
        let inner = PcapReader::new(reader).map_err(|e| CaptureError::Format {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let link = match inner.header().datalink {
            DataLink::ETHERNET => Link::Ethernet,
            DataLink::LINUX_SLL => Link::LinuxSll,
            DataLink::LINUX_SLL2 => Link::LinuxSll2,
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Link::RawIp,
            link => return Err(CaptureError::UnsupportedLink { path, link }),
        };
        Ok(Self { inner, link, path })
    }

    /// The next frame, `None` at the end.
    pub fn next_frame(&mut self) -> Option<Result<Frame, CaptureError>> {
        match self.inner.next_packet()? {
            Ok(p) => Some(Ok(Frame {
                timestamp: p.timestamp,
                data: p.data.into_owned(),
            })),
            Err(e) => Some(Err(CaptureError::Format {
                path: self.path.clone(),
                reason: e.to_string(),
            })),
        }
    }

    /// Classify a frame of this capture.
    pub fn classify<'a>(&self, frame: &'a Frame) -> FrameKind<'a> {
        classify(self.link, &frame.data)
    }
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<Frame, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame()
    }
}

fn classify(link: Link, data: &[u8]) -> FrameKind<'_> {
    let ip = match strip_link(link, data) {
        Ok(ip) => ip,
        Err(reason) => return FrameKind::Other(reason),
    };
    match parse_ip_udp(ip) {
        Ok(d) if d.dst_port == ROCE_V2_PORT => FrameKind::Roce(d),
        Ok(_) => FrameKind::Other("UDP, not to port 4791"),
        Err(crate::WireError::NotUdp(_)) => FrameKind::Other("not UDP"),
        Err(_) => FrameKind::Other("malformed IP/UDP"),
    }
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;

fn strip_link(link: Link, data: &[u8]) -> Result<&[u8], &'static str> {
    let (ethertype, rest) = match link {
        Link::RawIp => return Ok(data),
        Link::Ethernet => {
            let mut off = 12;
            loop {
                let et = data.get(off..off + 2).ok_or("truncated Ethernet header")?;
                let et = u16::from_be_bytes([et[0], et[1]]);
                if et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ {
                    off += 4;
                    if off > 32 {
                        return Err("too many VLAN tags");
                    }
                    continue;
                }
                break (et, data.get(off + 2..).ok_or("truncated Ethernet header")?);
            }
        }
        Link::LinuxSll => {
            let et = data.get(14..16).ok_or("truncated Linux cooked header")?;
            (u16::from_be_bytes([et[0], et[1]]), &data[16..])
        }
        Link::LinuxSll2 => {
            let et = data.get(0..2).ok_or("truncated Linux cooked v2 header")?;
            if data.len() < 20 {
                return Err("truncated Linux cooked v2 header");
            }
            (u16::from_be_bytes([et[0], et[1]]), &data[20..])
        }
    };
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(rest),
        _ => Err("not IP"),
    }
}

/// A pcap file being written, Ethernet link type.
#[derive(Debug)]
pub struct CaptureWriter<W: Write> {
    inner: PcapWriter<W>,
}

impl CaptureWriter<BufWriter<File>> {
    /// Create (truncate) a pcap file.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let path_str = path.as_ref().display().to_string();
        let file = File::create(path.as_ref()).map_err(|source| CaptureError::Io {
            path: path_str.clone(),
            source,
        })?;
        Self::new(BufWriter::new(file), path_str)
    }
}

impl<W: Write> CaptureWriter<W> {
    /// Start a pcap stream with an Ethernet link type.
    pub fn new(writer: W, name: impl Into<String>) -> Result<Self, CaptureError> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65_535,
            ..PcapHeader::default()
        };
        let inner = PcapWriter::with_header(writer, header).map_err(|e| CaptureError::Format {
            path: name.into(),
            reason: e.to_string(),
        })?;
        Ok(Self { inner })
    }

    /// Append one RoCE packet (a whole UDP payload, ICRC included) sent from `src` to `dst`,
    /// wrapped in synthesized Ethernet, IP and UDP headers.
    pub fn write_roce(
        &mut self,
        timestamp: Duration,
        src: SocketAddr,
        dst: SocketAddr,
        roce: &[u8],
    ) -> io::Result<()> {
        let frame = synthesize_frame(src, dst, roce);
        self.inner
            .write_packet(&PcapPacket::new(timestamp, frame.len() as u32, &frame))
            .map(|_| ())
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Flush and give the writer back.
    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}

/// Build an Ethernet frame around a RoCE UDP payload the way Linux would send it from an
/// unconnected `IP_PMTUDISC_DO` socket (IPv4 ID 0, DF, TTL 64; UDP checksum 0).
pub fn synthesize_frame(src: SocketAddr, dst: SocketAddr, roce: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(14 + IPV6_HEADER_LEN + UDP_HEADER_LEN + roce.len());
    frame.extend_from_slice(&fake_mac(dst.ip()));
    frame.extend_from_slice(&fake_mac(src.ip()));
    let mut udp = [0u8; UDP_HEADER_LEN];
    emit_udp(src.port(), dst.port(), roce.len(), &mut udp);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let mut ip = [0u8; IPV4_HEADER_LEN];
            Ipv4Fields::udp_socket_default(s, d).emit(roce.len(), &mut ip);
            frame.extend_from_slice(&ip);
        }
        (s, d) => {
            frame.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let mut ip = [0u8; IPV6_HEADER_LEN];
            Ipv6Fields {
                src: to_v6(s),
                dst: to_v6(d),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            }
            .emit(roce.len(), &mut ip);
            frame.extend_from_slice(&ip);
        }
    }
    frame.extend_from_slice(&udp);
    frame.extend_from_slice(roce);
    frame
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V6(v6) => v6,
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
    }
}

/// A locally administered MAC derived from an IP address, so captures show distinct hosts.
fn fake_mac(ip: IpAddr) -> [u8; 6] {
    let o = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let b = v6.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::{IcrcCheck, UdpEndpoints, compute_for_udp_socket, verify_exact};

    #[test]
    fn written_capture_reads_back_and_its_icrc_verifies_exactly() {
        let src: SocketAddr = "127.0.0.1:49441".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut roce = vec![
            0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 1, 2, 3, 4,
        ];
        let ep = UdpEndpoints {
            src: src.ip(),
            dst: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
        };
        let icrc = compute_for_udp_socket(&ep, &roce).unwrap();
        roce.extend_from_slice(&icrc.to_le_bytes());
        let mut w = CaptureWriter::new(Vec::new(), "mem").unwrap();
        w.write_roce(Duration::from_millis(5), src, dst, &roce)
            .unwrap();
        let bytes = w.into_inner();
        let mut r = CaptureReader::new(&bytes[..], "mem").unwrap();
        let frame = r.next_frame().unwrap().unwrap();
        assert_eq!(frame.timestamp, Duration::from_millis(5));
        let FrameKind::Roce(d) = r.classify(&frame) else {
            panic!("not RoCE")
        };
        assert_eq!(d.payload, &roce[..]);
        assert_eq!(
            verify_exact(d.ip_header, d.udp_header, d.payload),
            Ok(IcrcCheck::Exact)
        );
        assert!(r.next_frame().is_none());
    }

    #[test]
    fn text_is_not_a_pcap() {
        let err =
            CaptureReader::new(&b"hello, this is not a capture"[..], "notes.txt").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("notes.txt: not a readable pcap file"),
            "{err}"
        );
    }
}
