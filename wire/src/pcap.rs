//! Reading and writing pcap captures of RoCEv2 traffic.
//!
//! Reading understands classic pcap and pcapng (what Wireshark and dumpcap write), the
//! Ethernet (with VLAN tags), Linux cooked (SLL and SLL2) and raw IP link types, IPv4 and
//! IPv6, and picks out UDP datagrams to port 4791; other frames are classified, not errors. Writing
//! synthesizes Ethernet + IPv4 (ID 0, DF, TTL 64, valid checksum) or IPv6 + UDP headers around
//! our own RoCE packets, exactly what Linux puts on the wire for an unconnected
//! `IP_PMTUDISC_DO` socket, so tshark decodes them as RoCEv2 and their ICRCs verify.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};

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
    /// A record part way through the file is damaged or cut short (as when the capturing
    /// process was killed mid-write); the frames before it were read.
    #[error("{path}: damaged or cut short after {frames} frames: {reason}")]
    Damaged {
        /// The file.
        path: String,
        /// Frames read before the damage.
        frames: u64,
        /// What is wrong with the record.
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
    /// A pcapng interface whose link type we do not understand.
    Unsupported,
}

impl Link {
    fn of(link: DataLink) -> Self {
        match link {
            DataLink::ETHERNET => Self::Ethernet,
            DataLink::LINUX_SLL => Self::LinuxSll,
            DataLink::LINUX_SLL2 => Self::LinuxSll2,
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Self::RawIp,
            _ => Self::Unsupported,
        }
    }
}

/// The first four bytes of a pcapng file (a Section Header Block's type, the same in both
/// byte orders).
const PCAPNG_MAGIC: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];

/// What [`CaptureReader`] reads through: the four magic bytes it looked at, then the rest.
type Peeked<R> = io::Chain<io::Cursor<[u8; 4]>, R>;

enum Format<R: Read> {
    Pcap {
        reader: PcapReader<Peeked<R>>,
        link: Link,
    },
    PcapNg(Box<PcapNgReader<Peeked<R>>>),
}

impl<R: Read> fmt::Debug for Format<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pcap { link, .. } => write!(f, "pcap ({link:?})"),
            Self::PcapNg(reader) => write!(f, "pcapng ({} interfaces)", reader.interfaces().len()),
        }
    }
}

/// A capture file being read: classic pcap (any byte order, micro- or nanosecond) or pcapng
/// (per-interface link types and timestamp resolutions).
///
/// Reading stops at the first damaged record: [`CaptureReader::next_frame`] then returns the
/// error once and `None` afterwards.
#[derive(Debug)]
pub struct CaptureReader<R: Read> {
    format: Format<R>,
    path: String,
    frames: u64,
    failed: bool,
}

/// One frame of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Capture timestamp since the epoch.
    pub timestamp: Duration,
    /// The frame bytes, link header included.
    pub data: Vec<u8>,
    link: Link,
}

impl Frame {
    /// Classify this frame: a RoCEv2 datagram, or something else and why.
    pub fn classify(&self) -> FrameKind<'_> {
        classify(self.link, &self.data)
    }
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
    /// Open a pcap or pcapng file.
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
    /// Read a pcap or pcapng stream; `name` is used in error messages.
    pub fn new(mut reader: R, name: impl Into<String>) -> Result<Self, CaptureError> {
        let path = name.into();
        let format_error = |path: &str, e: pcap_file::PcapError| CaptureError::Format {
            path: path.to_string(),
            reason: describe(&e, "shorter than a file header"),
        };
        let mut magic = [0u8; 4];
        reader.read_exact(&mut magic).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => CaptureError::Format {
                path: path.clone(),
                reason: "shorter than a file header".into(),
            },
            _ => CaptureError::Io {
                path: path.clone(),
                source: e,
            },
        })?;
        let peeked = io::Cursor::new(magic).chain(reader);
        let format = if magic == PCAPNG_MAGIC {
            let reader = PcapNgReader::new(peeked).map_err(|e| format_error(&path, e))?;
            Format::PcapNg(Box::new(reader))
        } else {
            let reader = PcapReader::new(peeked).map_err(|e| format_error(&path, e))?;
            let datalink = reader.header().datalink;
            let link = Link::of(datalink);
            if link == Link::Unsupported {
                return Err(CaptureError::UnsupportedLink {
                    path,
                    link: datalink,
                });
            }
            Format::Pcap { reader, link }
        };
        Ok(Self {
            format,
            path,
            frames: 0,
            failed: false,
        })
    }

    /// The next frame, `None` at the end (or after an error was returned).
    pub fn next_frame(&mut self) -> Option<Result<Frame, CaptureError>> {
        if self.failed {
            return None;
        }
        let next = match &mut self.format {
            Format::Pcap { reader, link } => reader.next_packet().map(|p| {
                p.map(|p| Frame {
                    timestamp: p.timestamp,
                    data: p.data.into_owned(),
                    link: *link,
                })
            }),
            Format::PcapNg(reader) => next_pcapng_frame(reader),
        };
        match next? {
            Ok(frame) => {
                self.frames += 1;
                Some(Ok(frame))
            }
            Err(e) => {
                // pcap-file does not move past a record it rejected: stop here.
                self.failed = true;
                Some(Err(CaptureError::Damaged {
                    path: self.path.clone(),
                    frames: self.frames,
                    reason: describe(&e, "a record runs past the end of the file"),
                }))
            }
        }
    }

    /// Classify a frame of this capture (the same as [`Frame::classify`]).
    pub fn classify<'a>(&self, frame: &'a Frame) -> FrameKind<'a> {
        frame.classify()
    }
}

/// Say what a pcap-file error means here; `at_eof` explains an unexpected end of file.
fn describe(e: &pcap_file::PcapError, at_eof: &str) -> String {
    use pcap_file::PcapError;
    match e {
        PcapError::IoError(io) if io.kind() == io::ErrorKind::UnexpectedEof => at_eof.into(),
        PcapError::IncompleteBuffer => at_eof.into(),
        PcapError::IoError(io) => io.to_string(),
        PcapError::InvalidField(what) => (*what).into(),
        other => other.to_string(),
    }
}

/// The next packet block of a pcapng stream, skipping the other kinds of blocks.
fn next_pcapng_frame<R: Read>(
    reader: &mut PcapNgReader<R>,
) -> Option<Result<Frame, pcap_file::PcapError>> {
    loop {
        let block = match reader.next_block()? {
            Ok(block) => block,
            Err(e) => return Some(Err(e)),
        };
        let packet = match block {
            // pcap-file stores the raw 64-bit tick count as if it were nanoseconds.
            Block::EnhancedPacket(p) => {
                Some((p.interface_id, p.timestamp.as_nanos(), p.data.into_owned()))
            }
            Block::SimplePacket(p) => Some((0, 0, p.data.into_owned())),
            Block::Packet(p) => Some((
                u32::from(p.interface_id),
                u128::from(p.timestamp),
                p.data.into_owned(),
            )),
            _ => None,
        };
        let Some((interface_id, raw_ticks, data)) = packet else {
            // The reader keeps every interface of a section: a file of nothing else would
            // hold twice its size in memory. Captures name a few.
            if reader.interfaces().len() > MAX_INTERFACES {
                return Some(Err(pcap_file::PcapError::InvalidField(
                    "more than 4096 interfaces in one section (a capture names a few)",
                )));
            }
            continue;
        };
        let interface = usize::try_from(interface_id)
            .ok()
            .and_then(|i| reader.interfaces().get(i));
        let (link, resolution) = match interface {
            Some(i) => (Link::of(i.linktype), tick_resolution(&i.options)),
            None => (Link::Unsupported, DEFAULT_TSRESOL),
        };
        return Some(Ok(Frame {
            timestamp: ticks_to_duration(raw_ticks, resolution),
            data,
            link,
        }));
    }
}

/// The most interfaces one pcapng section may describe (see [`next_pcapng_frame`]).
const MAX_INTERFACES: usize = 4096;

/// pcapng's default timestamp unit: 10⁻⁶ s.
const DEFAULT_TSRESOL: u8 = 6;

fn tick_resolution(options: &[InterfaceDescriptionOption<'_>]) -> u8 {
    options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
            _ => None,
        })
        .unwrap_or(DEFAULT_TSRESOL)
}

/// Convert pcapng timestamp ticks to a duration: `if_tsresol` is 10^-v seconds, or 2^-v
/// when its top bit is set. Absurd resolutions saturate instead of overflowing.
fn ticks_to_duration(ticks: u128, tsresol: u8) -> Duration {
    let exponent = u32::from(tsresol & 0x7F);
    let per_second: u128 = if tsresol & 0x80 != 0 {
        1u128.checked_shl(exponent).unwrap_or(u128::MAX)
    } else {
        10u128.checked_pow(exponent).unwrap_or(u128::MAX)
    };
    let secs = ticks / per_second;
    let nanos = (ticks % per_second).saturating_mul(1_000_000_000) / per_second;
    Duration::new(
        u64::try_from(secs).unwrap_or(u64::MAX),
        u32::try_from(nanos).unwrap_or(0),
    )
}

impl<R: Read> Iterator for CaptureReader<R> {
    type Item = Result<Frame, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame()
    }
}

fn classify(link: Link, data: &[u8]) -> FrameKind<'_> {
    if link == Link::Unsupported {
        return FrameKind::Other("unsupported link type");
    }
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
        Link::Unsupported => return Err("unsupported link type"),
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
    /// Create (truncate) a pcap file. A FIFO is refused: opening one for writing blocks until
    /// a reader comes, which may be never (capture to a pipe reader through a regular
    /// file, or a [`CaptureWriter::new`] over the writer).
    pub fn create(path: impl AsRef<Path>) -> Result<Self, CaptureError> {
        let path_str = path.as_ref().display().to_string();
        if let Ok(meta) = std::fs::metadata(path.as_ref()) {
            use std::os::unix::fs::FileTypeExt as _;
            if meta.file_type().is_fifo() {
                return Err(CaptureError::Io {
                    path: path_str,
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a FIFO (opening it would wait for a reader)",
                    ),
                });
            }
        }
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
        self.write_gso_segment(timestamp, src, dst, roce, 0)
    }

    /// [`CaptureWriter::write_roce`] for the `index`th segment (from 0) of one UDP GSO
    /// send, which Linux sends with IPv4 ID `index` (see
    /// [`crate::icrc::compute_for_gso_segment`]).
    pub fn write_gso_segment(
        &mut self,
        timestamp: Duration,
        src: SocketAddr,
        dst: SocketAddr,
        roce: &[u8],
        index: u16,
    ) -> io::Result<()> {
        let frame = synthesize(src, dst, roce, index);
        self.inner
            .write_packet(&PcapPacket::new(timestamp, frame.len() as u32, &frame))
            .map(|_| ())
            // The I/O error itself (ENOSPC, EPIPE ...): the crate's own text for it is
            // "Error reading bytes", even when writing.
            .map_err(|e| match e {
                pcap_file::PcapError::IoError(io) => io,
                other => io::Error::other(other.to_string()),
            })
    }

    /// Flush and give the writer back.
    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}

/// Build an Ethernet frame around a RoCE UDP payload the way Linux would send it from an
/// unconnected `IP_PMTUDISC_DO` socket (IPv4 ID 0, DF, TTL 64; UDP checksum 0).
pub fn synthesize_frame(src: SocketAddr, dst: SocketAddr, roce: &[u8]) -> Vec<u8> {
    synthesize(src, dst, roce, 0)
}

/// [`synthesize_frame`] with IPv4 ID `ip_id`.
fn synthesize(src: SocketAddr, dst: SocketAddr, roce: &[u8], ip_id: u16) -> Vec<u8> {
    let mut frame = Vec::with_capacity(14 + IPV6_HEADER_LEN + UDP_HEADER_LEN + roce.len());
    frame.extend_from_slice(&fake_mac(dst.ip()));
    frame.extend_from_slice(&fake_mac(src.ip()));
    let mut udp = [0u8; UDP_HEADER_LEN];
    emit_udp(src.port(), dst.port(), roce.len(), &mut udp);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let mut ip = [0u8; IPV4_HEADER_LEN];
            Ipv4Fields {
                id: ip_id,
                ..Ipv4Fields::udp_socket_default(s, d)
            }
            .emit(roce.len(), &mut ip);
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

    /// A pcapng stream with two interfaces: Ethernet in nanosecond ticks, and USB.
    fn pcapng_with_two_interfaces(frame: &[u8]) -> Vec<u8> {
        use pcap_file::pcapng::PcapNgWriter;
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        use std::borrow::Cow;

        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        let mut eth = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0);
        eth.options.push(InterfaceDescriptionOption::IfTsResol(9));
        w.write_pcapng_block(eth).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::USB_LINUX, 0))
            .unwrap();
        for (interface_id, ticks) in [(0, 1_500_000_000u64), (1, 2_000_000)] {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id,
                // pcap-file writes this Duration's nanosecond count as the raw tick count.
                timestamp: Duration::from_nanos(ticks),
                original_len: frame.len() as u32,
                data: Cow::Borrowed(frame),
                options: vec![],
            })
            .unwrap();
        }
        w.into_inner()
    }

    #[test]
    fn pcapng_frames_use_their_interface_link_type_and_tick_resolution() {
        let src: SocketAddr = "127.0.0.1:49441".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let roce = [0x11u8; 20];
        let frame = synthesize_frame(src, dst, &roce);
        let bytes = pcapng_with_two_interfaces(&frame);
        let mut r = CaptureReader::new(&bytes[..], "two.pcapng").unwrap();
        let eth = r.next_frame().unwrap().unwrap();
        assert_eq!(eth.timestamp, Duration::from_millis(1500));
        assert!(matches!(eth.classify(), FrameKind::Roce(d) if d.payload == roce));
        let usb = r.next_frame().unwrap().unwrap();
        // No if_tsresol: microsecond ticks.
        assert_eq!(usb.timestamp, Duration::from_secs(2));
        assert_eq!(usb.classify(), FrameKind::Other("unsupported link type"));
        assert!(r.next_frame().is_none());
    }

    #[test]
    fn a_section_of_endless_interfaces_is_refused_not_kept() {
        use pcap_file::pcapng::PcapNgWriter;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        for _ in 0..=MAX_INTERFACES + 1 {
            w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0))
                .unwrap();
        }
        let bytes = w.into_inner();
        let mut r = CaptureReader::new(&bytes[..], "idbs.pcapng").unwrap();
        let refused = r.next_frame().expect("an answer").expect_err("refused");
        assert!(refused.to_string().contains("4096 interfaces"), "{refused}");
    }

    #[test]
    fn tick_resolutions_convert_exactly_and_never_overflow() {
        assert_eq!(
            ticks_to_duration(1_234_567, 6),
            Duration::new(1, 234_567_000)
        );
        assert_eq!(
            ticks_to_duration(1_234_567_891, 9),
            Duration::new(1, 234_567_891)
        );
        assert_eq!(
            ticks_to_duration(3 << 20, 0x80 | 20),
            Duration::from_secs(3)
        );
        assert_eq!(ticks_to_duration(1, 0x80 | 1), Duration::from_millis(500));
        let _ = ticks_to_duration(u128::MAX, 0x7F);
        let _ = ticks_to_duration(u128::MAX, 0);
        let _ = ticks_to_duration(u128::from(u64::MAX), 0xFF);
    }

    #[test]
    fn damaged_record_is_reported_once_then_reading_stops() {
        let src: SocketAddr = "127.0.0.1:49441".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let mut w = CaptureWriter::new(Vec::new(), "mem").unwrap();
        for ms in 0..3 {
            w.write_roce(Duration::from_millis(ms), src, dst, &[0x22; 16])
                .unwrap();
        }
        let mut bytes = w.into_inner();
        // Claim the second record is larger than the snap length.
        let second = 24 + 16 + synthesize_frame(src, dst, &[0x22; 16]).len();
        bytes[second + 8..second + 12].copy_from_slice(&0x00FF_FFFFu32.to_le_bytes());
        let mut r = CaptureReader::new(&bytes[..], "bad.pcap").unwrap();
        assert!(r.next_frame().unwrap().is_ok());
        let err = r.next_frame().unwrap().unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad.pcap: damaged or cut short after 1 frames: a record runs past the end of the file"
        );
        assert!(r.next_frame().is_none());
    }

    #[test]
    fn too_short_for_a_header_says_so() {
        let err = CaptureReader::new(&b"\xd4\xc3"[..], "tiny.pcap").unwrap_err();
        assert_eq!(
            err.to_string(),
            "tiny.pcap: not a readable pcap file: shorter than a file header"
        );
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
