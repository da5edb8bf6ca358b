//! Why a packet or header was rejected.

use core::fmt;

/// Which header or area an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Header {
    /// Base transport header (12 bytes).
    Bth,
    /// RDMA extended transport header (16 bytes).
    Reth,
    /// ACK extended transport header (4 bytes).
    Aeth,
    /// Atomic extended transport header (28 bytes).
    AtomicEth,
    /// Atomic acknowledge extended transport header (8 bytes).
    AtomicAckEth,
    /// Immediate data (4 bytes).
    ImmDt,
    /// Invalidate extended transport header (4 bytes).
    Ieth,
    /// Datagram extended transport header (8 bytes).
    Deth,
    /// FLUSH extended transport header (4 bytes).
    Feth,
    /// The 16 reserved bytes of a RoCEv2 CNP.
    Cnp,
    /// XRC extended transport header (4 bytes).
    XrcEth,
    /// The payload an opcode requires (e.g. ATOMIC WRITE's 8 bytes).
    Payload,
    /// The pad bytes announced by the BTH pad count.
    Pad,
    /// The 4-byte invariant CRC.
    Icrc,
    /// An IPv4 header.
    Ipv4,
    /// An IPv6 header.
    Ipv6,
    /// A UDP header.
    Udp,
    /// An Ethernet or Linux cooked-capture link header.
    Link,
    /// The 40-byte GRH area of a UD receive buffer.
    Grh,
    /// A 256-byte management datagram (MAD).
    Mad,
    /// The 36-byte rdma_cm private-data header (`struct cma_hdr`).
    CmaHdr,
}

impl Header {
    /// A short name for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Bth => "BTH",
            Self::Reth => "RETH",
            Self::Aeth => "AETH",
            Self::AtomicEth => "AtomicETH",
            Self::AtomicAckEth => "AtomicAckETH",
            Self::ImmDt => "ImmDt",
            Self::Ieth => "IETH",
            Self::Deth => "DETH",
            Self::Feth => "FETH",
            Self::Cnp => "CNP",
            Self::XrcEth => "XRCETH",
            Self::Payload => "payload",
            Self::Pad => "pad",
            Self::Icrc => "ICRC",
            Self::Ipv4 => "IPv4",
            Self::Ipv6 => "IPv6",
            Self::Udp => "UDP",
            Self::Link => "link header",
            Self::Grh => "GRH",
            Self::Mad => "MAD",
            Self::CmaHdr => "rdma_cm header",
        }
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A malformed or inconsistent packet. Small, `Copy`, and never allocates, so the receive
/// path can log and count exactly why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the header needs.
    Truncated {
        /// The header that did not fit.
        header: Header,
        /// Bytes needed from the start of the buffer.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// BTH transport header version is not 0.
    BadTver(u8),
    /// The extended headers given do not match what the opcode requires.
    BadOpcodeForHeaders {
        /// The opcode byte.
        opcode: u8,
    },
    /// The BTH pad count is larger than the payload it pads.
    BadPadCount {
        /// The pad count from the BTH.
        pad: u8,
        /// Payload bytes including the pad.
        payload_len: usize,
    },
    /// The ICRC does not match the packet.
    IcrcMismatch {
        /// The CRC computed over the packet.
        expected: u32,
        /// The CRC carried in the packet.
        found: u32,
    },
    /// The IP version nibble is neither 4 nor 6.
    BadIpVersion(u8),
    /// An IPv4 header length (IHL) other than 5 words, which RoCEv2 never uses.
    BadIpv4HeaderLen(u8),
    /// The IP header's length field disagrees with the bytes present.
    BadIpLength {
        /// Length the header claims.
        claimed: usize,
        /// Bytes available.
        got: usize,
    },
    /// An IPv4 header checksum that does not verify.
    BadIpv4Checksum,
    /// The IP protocol / next header is not UDP (17).
    NotUdp(u8),
    /// The UDP length field disagrees with the bytes present.
    BadUdpLength {
        /// Length the header claims.
        claimed: usize,
        /// Bytes available.
        got: usize,
    },
    /// A MAD whose base version is not 1 (IBTA; OPA's 0x80 is not spoken here).
    BadMadBaseVersion(u8),
    /// A MAD that is not Communication Management (class 0x07, class version 2).
    NotCmMad {
        /// The management class byte.
        mgmt_class: u8,
        /// The class version byte.
        class_version: u8,
    },
    /// A CM MAD whose attribute ID names no CM message.
    UnknownCmAttribute(u16),
    /// An rdma_cm private-data header whose `cma_version` is not 0.
    BadCmaVersion(u8),
    /// A message larger than fits in the buffer given to emit into.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { header, need, got } => {
                write!(f, "{header} truncated: need {need} bytes, got {got}")
            }
            Self::BadTver(v) => write!(f, "BTH transport version {v} is not 0"),
            Self::BadOpcodeForHeaders { opcode } => write!(
                f,
                "extended headers do not match opcode {:#04x} ({})",
                opcode,
                crate::Opcode(opcode)
            ),
            Self::BadPadCount { pad, payload_len } => write!(
                f,
                "BTH pad count {pad} exceeds the {payload_len} payload bytes"
            ),
            Self::IcrcMismatch { expected, found } => write!(
                f,
                "ICRC mismatch: computed {expected:#010x}, packet carries {found:#010x}"
            ),
            Self::BadIpVersion(v) => write!(f, "IP version {v} is neither 4 nor 6"),
            Self::BadIpv4HeaderLen(ihl) => {
                write!(
                    f,
                    "IPv4 header length {ihl} words is not 5 (options unsupported)"
                )
            }
            Self::BadIpLength { claimed, got } => {
                write!(f, "IP length field says {claimed} bytes, {got} present")
            }
            Self::BadIpv4Checksum => f.write_str("IPv4 header checksum does not verify"),
            Self::NotUdp(p) => write!(f, "IP protocol {p} is not UDP"),
            Self::BadUdpLength { claimed, got } => {
                write!(f, "UDP length field says {claimed} bytes, {got} present")
            }
            Self::BadMadBaseVersion(v) => write!(f, "MAD base version {v} is not 1"),
            Self::NotCmMad {
                mgmt_class,
                class_version,
            } => write!(
                f,
                "MAD class {mgmt_class:#04x} version {class_version} is not CM (0x07 version 2)"
            ),
            Self::UnknownCmAttribute(id) => write!(f, "CM attribute ID {id:#06x} is unknown"),
            Self::BadCmaVersion(v) => write!(f, "rdma_cm header version {v} is not 0"),
            Self::BufferTooSmall { need, got } => {
                write!(f, "buffer too small: need {need} bytes, got {got}")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// Result of wire operations.
pub type Result<T> = core::result::Result<T, WireError>;

/// Check that `buf` holds at least `need` bytes for `header`.
pub(crate) const fn need(header: Header, buf_len: usize, need: usize) -> Result<()> {
    if buf_len < need {
        Err(WireError::Truncated {
            header,
            need,
            got: buf_len,
        })
    } else {
        Ok(())
    }
}
