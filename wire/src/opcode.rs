//! BTH opcodes: the IBTA table for RC, UC and UD, plus FLUSH, ATOMIC WRITE and the RoCEv2 CNP.
//!
//! [`Opcode`] wraps the raw byte, so every value — known or not — round-trips losslessly.
//! [`Opcode::info`] gives what the byte implies: its IBTA name, its transport, which extended
//! headers follow the BTH (in order), and where in a message the packet sits.

use core::fmt;

/// The transport service an opcode belongs to (its top three bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connection (0x00–0x1F).
    Rc,
    /// Unreliable connection (0x20–0x3F).
    Uc,
    /// Reliable datagram (0x40–0x5F), not used on RoCE.
    Rd,
    /// Unreliable datagram (0x60–0x7F).
    Ud,
    /// Congestion notification packet (0x80–0x9F; 0x81 is the RoCEv2 CNP).
    Cnp,
    /// Extended reliable connection (0xA0–0xBF).
    Xrc,
    /// Manufacturer-specific (0xC0–0xFF).
    Vendor,
}

impl Transport {
    /// The transport of an opcode byte.
    pub const fn of(opcode: u8) -> Self {
        match opcode >> 5 {
            0 => Self::Rc,
            1 => Self::Uc,
            2 => Self::Rd,
            3 => Self::Ud,
            4 => Self::Cnp,
            5 => Self::Xrc,
            _ => Self::Vendor,
        }
    }
}

/// A set of extended headers, as bits. They always appear in the order of [`ExtHeaders::ORDER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders(u16);

impl ExtHeaders {
    /// No extended header.
    pub const NONE: Self = Self(0);
    /// DETH (8 bytes): UD Q_Key and source QP.
    pub const DETH: Self = Self(1 << 0);
    /// RETH (16 bytes): virtual address, R_Key, DMA length.
    pub const RETH: Self = Self(1 << 1);
    /// FETH (4 bytes): FLUSH placement type and selectivity; precedes the RETH on the wire.
    pub const FETH: Self = Self(1 << 2);
    /// AtomicETH (28 bytes).
    pub const ATOMIC_ETH: Self = Self(1 << 3);
    /// AETH (4 bytes): syndrome and MSN.
    pub const AETH: Self = Self(1 << 4);
    /// AtomicAckETH (8 bytes): the original remote value.
    pub const ATOMIC_ACK_ETH: Self = Self(1 << 5);
    /// ImmDt (4 bytes).
    pub const IMM: Self = Self(1 << 6);
    /// IETH (4 bytes): the R_Key to invalidate.
    pub const IETH: Self = Self(1 << 7);
    /// The 16 reserved bytes of a RoCEv2 CNP.
    pub const CNP: Self = Self(1 << 8);
    /// XRCETH (4 bytes): the XRC SRQ number a request is for; first after the BTH.
    pub const XRCETH: Self = Self(1 << 9);

    /// Wire order of the extended headers.
    pub const ORDER: [Self; 10] = [
        Self::XRCETH,
        Self::DETH,
        Self::FETH,
        Self::RETH,
        Self::ATOMIC_ETH,
        Self::AETH,
        Self::ATOMIC_ACK_ETH,
        Self::IMM,
        Self::IETH,
        Self::CNP,
    ];

    /// Union of two sets.
    pub const fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every header of `other` is in the set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Byte size of one header of the set (which must name exactly one header).
    pub const fn single_len(self) -> usize {
        // By bit: DETH, RETH, FETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, CNP, XRCETH.
        const LEN_BY_BIT: [u8; 10] = [8, 16, 4, 28, 4, 8, 4, 4, 16, 4];
        let bit = self.0.trailing_zeros() as usize;
        if !self.0.is_power_of_two() || bit >= LEN_BY_BIT.len() {
            return 0;
        }
        LEN_BY_BIT[bit] as usize
    }

    /// Total byte size of the set: one step per header present (every packet built or
    /// parsed asks, several times).
    pub const fn len(self) -> usize {
        let mut total = 0;
        let mut bits = self.0;
        while bits != 0 {
            total += Self(bits & bits.wrapping_neg()).single_len();
            bits &= bits - 1;
        }
        total
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet.
    Only,
}

/// What kind of operation an opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (any variant).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK, NAK or RNR NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// COMPARE & SWAP.
    CompareSwap,
    /// FETCH & ADD.
    FetchAdd,
    /// FLUSH (IBTA 1.5 memory placement extension).
    Flush,
    /// ATOMIC WRITE (IBTA 1.5 memory placement extension).
    AtomicWrite,
    /// RoCEv2 congestion notification.
    Cnp,
}

/// Everything an opcode implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpcodeInfo {
    /// IBTA-style name, e.g. `RC_SEND_FIRST`.
    pub name: &'static str,
    /// Operation carried.
    pub operation: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extended headers that follow the BTH.
    pub headers: ExtHeaders,
    /// Whether the packet may carry payload bytes.
    pub has_payload: bool,
    /// Payload bytes the opcode requires exactly (ATOMIC WRITE: 8).
    pub fixed_payload: Option<usize>,
}

impl OpcodeInfo {
    /// Byte length of the extended headers.
    pub const fn ext_len(&self) -> usize {
        self.headers.len()
    }

    /// A request (sent by the requester), as opposed to a response or ACK.
    pub const fn is_request(&self) -> bool {
        !matches!(
            self.operation,
            Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        ) && !matches!(self.operation, Operation::Cnp)
    }

    /// A response (READ response, ACK or atomic ACK).
    pub const fn is_response(&self) -> bool {
        matches!(
            self.operation,
            Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }

    /// An atomic request.
    pub const fn is_atomic(&self) -> bool {
        matches!(self.operation, Operation::CompareSwap | Operation::FetchAdd)
    }

    /// First or only packet of a message.
    pub const fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// Last or only packet of a message.
    pub const fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

/// A BTH opcode byte.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Opcode(pub u8);

/// [`Opcode::info`]'s extended headers by opcode byte, `None` where it knows none: every
/// packet built or parsed asks, several times, and a table read is cheaper than the match.
const EXT_HEADERS_BY_OPCODE: [Option<ExtHeaders>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        if let Some(info) = Opcode(i as u8).info() {
            t[i] = Some(info.headers);
        }
        i += 1;
    }
    t
};

impl Opcode {
    /// The extended headers this opcode implies (as [`Opcode::info`] has them), or `None`
    /// for a code point the table does not know.
    pub const fn ext_headers(self) -> Option<ExtHeaders> {
        EXT_HEADERS_BY_OPCODE[self.0 as usize]
    }

    /// Whether [`Opcode::info`] knows this code point.
    pub const fn is_known(self) -> bool {
        self.ext_headers().is_some()
    }
}

macro_rules! opcodes {
    ($( $(#[$doc:meta])* $name:ident = $value:expr, $op:ident, $pos:ident, [$($h:ident),*], $payload:expr, $fixed:expr; )*) => {
        impl Opcode {
            $( $(#[$doc])* pub const $name: Self = Self($value); )*

            /// What this opcode implies, or `None` for a code point this table does not know
            /// (its packets are treated as BTH + opaque payload, so they still round-trip).
            pub const fn info(self) -> Option<OpcodeInfo> {
                match self.0 {
                    $( $value => Some(OpcodeInfo {
                        name: stringify!($name),
                        operation: Operation::$op,
                        position: Position::$pos,
                        headers: ExtHeaders::NONE $(.with(ExtHeaders::$h))*,
                        has_payload: $payload,
                        fixed_payload: $fixed,
                    }), )*
                    _ => None,
                }
            }

            /// Every opcode this table knows.
            pub const KNOWN: &'static [Self] = &[$(Self::$name),*];
        }
    };
}

opcodes! {
    /// RC SEND First.
    RC_SEND_FIRST = 0x00, Send, First, [], true, None;
    /// RC SEND Middle.
    RC_SEND_MIDDLE = 0x01, Send, Middle, [], true, None;
    /// RC SEND Last.
    RC_SEND_LAST = 0x02, Send, Last, [], true, None;
    /// RC SEND Last with Immediate.
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Send, Last, [IMM], true, None;
    /// RC SEND Only.
    RC_SEND_ONLY = 0x04, Send, Only, [], true, None;
    /// RC SEND Only with Immediate.
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Send, Only, [IMM], true, None;
    /// RC RDMA WRITE First.
    RC_RDMA_WRITE_FIRST = 0x06, Write, First, [RETH], true, None;
    /// RC RDMA WRITE Middle.
    RC_RDMA_WRITE_MIDDLE = 0x07, Write, Middle, [], true, None;
    /// RC RDMA WRITE Last.
    RC_RDMA_WRITE_LAST = 0x08, Write, Last, [], true, None;
    /// RC RDMA WRITE Last with Immediate.
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Write, Last, [IMM], true, None;
    /// RC RDMA WRITE Only.
    RC_RDMA_WRITE_ONLY = 0x0A, Write, Only, [RETH], true, None;
    /// RC RDMA WRITE Only with Immediate.
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B, Write, Only, [RETH, IMM], true, None;
    /// RC RDMA READ Request.
    RC_RDMA_READ_REQUEST = 0x0C, ReadRequest, Only, [RETH], false, None;
    /// RC RDMA READ response First.
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D, ReadResponse, First, [AETH], true, None;
    /// RC RDMA READ response Middle.
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E, ReadResponse, Middle, [], true, None;
    /// RC RDMA READ response Last.
    RC_RDMA_READ_RESPONSE_LAST = 0x0F, ReadResponse, Last, [AETH], true, None;
    /// RC RDMA READ response Only.
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, ReadResponse, Only, [AETH], true, None;
    /// RC Acknowledge (ACK, NAK, RNR NAK).
    RC_ACKNOWLEDGE = 0x11, Acknowledge, Only, [AETH], false, None;
    /// RC ATOMIC Acknowledge.
    RC_ATOMIC_ACKNOWLEDGE = 0x12, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], false, None;
    /// RC CmpSwap.
    RC_COMPARE_SWAP = 0x13, CompareSwap, Only, [ATOMIC_ETH], false, None;
    /// RC FetchAdd.
    RC_FETCH_ADD = 0x14, FetchAdd, Only, [ATOMIC_ETH], false, None;
    /// RC SEND Last with Invalidate.
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Send, Last, [IETH], true, None;
    /// RC SEND Only with Invalidate.
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Send, Only, [IETH], true, None;
    /// RC FLUSH (IBTA 1.5).
    RC_FLUSH = 0x1C, Flush, Only, [FETH, RETH], false, None;
    /// RC ATOMIC WRITE (IBTA 1.5): RETH plus exactly 8 payload bytes.
    RC_ATOMIC_WRITE = 0x1D, AtomicWrite, Only, [RETH], true, Some(8);
    /// UC SEND First.
    UC_SEND_FIRST = 0x20, Send, First, [], true, None;
    /// UC SEND Middle.
    UC_SEND_MIDDLE = 0x21, Send, Middle, [], true, None;
    /// UC SEND Last.
    UC_SEND_LAST = 0x22, Send, Last, [], true, None;
    /// UC SEND Last with Immediate.
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Send, Last, [IMM], true, None;
    /// UC SEND Only.
    UC_SEND_ONLY = 0x24, Send, Only, [], true, None;
    /// UC SEND Only with Immediate.
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Send, Only, [IMM], true, None;
    /// UC RDMA WRITE First.
    UC_RDMA_WRITE_FIRST = 0x26, Write, First, [RETH], true, None;
    /// UC RDMA WRITE Middle.
    UC_RDMA_WRITE_MIDDLE = 0x27, Write, Middle, [], true, None;
    /// UC RDMA WRITE Last.
    UC_RDMA_WRITE_LAST = 0x28, Write, Last, [], true, None;
    /// UC RDMA WRITE Last with Immediate.
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Write, Last, [IMM], true, None;
    /// UC RDMA WRITE Only.
    UC_RDMA_WRITE_ONLY = 0x2A, Write, Only, [RETH], true, None;
    /// UC RDMA WRITE Only with Immediate.
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B, Write, Only, [RETH, IMM], true, None;
    /// UD SEND Only.
    UD_SEND_ONLY = 0x64, Send, Only, [DETH], true, None;
    /// UD SEND Only with Immediate.
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Send, Only, [DETH, IMM], true, None;
    /// RoCEv2 congestion notification packet.
    CNP = 0x81, Cnp, Only, [CNP], false, None;
    /// XRC SEND First.
    XRC_SEND_FIRST = 0xA0, Send, First, [XRCETH], true, None;
    /// XRC SEND Middle.
    XRC_SEND_MIDDLE = 0xA1, Send, Middle, [XRCETH], true, None;
    /// XRC SEND Last.
    XRC_SEND_LAST = 0xA2, Send, Last, [XRCETH], true, None;
    /// XRC SEND Last with Immediate.
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xA3, Send, Last, [XRCETH, IMM], true, None;
    /// XRC SEND Only.
    XRC_SEND_ONLY = 0xA4, Send, Only, [XRCETH], true, None;
    /// XRC SEND Only with Immediate.
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xA5, Send, Only, [XRCETH, IMM], true, None;
    /// XRC RDMA WRITE First.
    XRC_RDMA_WRITE_FIRST = 0xA6, Write, First, [XRCETH, RETH], true, None;
    /// XRC RDMA WRITE Middle.
    XRC_RDMA_WRITE_MIDDLE = 0xA7, Write, Middle, [XRCETH], true, None;
    /// XRC RDMA WRITE Last.
    XRC_RDMA_WRITE_LAST = 0xA8, Write, Last, [XRCETH], true, None;
    /// XRC RDMA WRITE Last with Immediate.
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xA9, Write, Last, [XRCETH, IMM], true, None;
    /// XRC RDMA WRITE Only.
    XRC_RDMA_WRITE_ONLY = 0xAA, Write, Only, [XRCETH, RETH], true, None;
    /// XRC RDMA WRITE Only with Immediate.
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xAB, Write, Only, [XRCETH, RETH, IMM], true, None;
    /// XRC RDMA READ Request.
    XRC_RDMA_READ_REQUEST = 0xAC, ReadRequest, Only, [XRCETH, RETH], false, None;
    /// XRC RDMA READ response First (responses carry no XRCETH).
    XRC_RDMA_READ_RESPONSE_FIRST = 0xAD, ReadResponse, First, [AETH], true, None;
    /// XRC RDMA READ response Middle.
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xAE, ReadResponse, Middle, [], true, None;
    /// XRC RDMA READ response Last.
    XRC_RDMA_READ_RESPONSE_LAST = 0xAF, ReadResponse, Last, [AETH], true, None;
    /// XRC RDMA READ response Only.
    XRC_RDMA_READ_RESPONSE_ONLY = 0xB0, ReadResponse, Only, [AETH], true, None;
    /// XRC Acknowledge (ACK, NAK, RNR NAK).
    XRC_ACKNOWLEDGE = 0xB1, Acknowledge, Only, [AETH], false, None;
    /// XRC ATOMIC Acknowledge.
    XRC_ATOMIC_ACKNOWLEDGE = 0xB2, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], false, None;
    /// XRC CmpSwap.
    XRC_COMPARE_SWAP = 0xB3, CompareSwap, Only, [XRCETH, ATOMIC_ETH], false, None;
    /// XRC FetchAdd.
    XRC_FETCH_ADD = 0xB4, FetchAdd, Only, [XRCETH, ATOMIC_ETH], false, None;
    /// XRC SEND Last with Invalidate.
    XRC_SEND_LAST_WITH_INVALIDATE = 0xB6, Send, Last, [XRCETH, IETH], true, None;
    /// XRC SEND Only with Invalidate.
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xB7, Send, Only, [XRCETH, IETH], true, None;
}

impl Opcode {
    /// The transport service of this opcode.
    pub const fn transport(self) -> Transport {
        Transport::of(self.0)
    }

    /// The XRC opcode with the same operation (`0xA0 | op`) for an RC opcode this table
    /// knows an XRC twin of; `None` otherwise. The requester builds RC opcodes and an XRC
    /// QP sends their twins.
    pub const fn rc_to_xrc(self) -> Option<Self> {
        let twin = Self(0xA0 | (self.0 & 0x1F));
        if matches!(self.transport(), Transport::Rc) && twin.info().is_some() {
            Some(twin)
        } else {
            None
        }
    }

    /// The RC opcode with the same operation for an XRC opcode this table knows; `None`
    /// otherwise. The responder and completer run XRC packets as RC ones (their headers
    /// are read from the packet, whose layout follows the real opcode).
    pub const fn xrc_to_rc(self) -> Option<Self> {
        if matches!(self.transport(), Transport::Xrc) && self.info().is_some() {
            Some(Self(self.0 & 0x1F))
        } else {
            None
        }
    }

    /// The IBTA name, or `None` for unknown opcodes.
    pub const fn name(self) -> Option<&'static str> {
        match self.info() {
            Some(info) => Some(info.name),
            None => None,
        }
    }
}

impl From<u8> for Opcode {
    fn from(value: u8) -> Self {
        Self(value)
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> Self {
        op.0
    }
}

impl fmt::Display for Opcode {
    /// The IBTA name, or `UNKNOWN_0xNN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "UNKNOWN_{:#04x}", self.0),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_and_formats() {
        for b in 0..=255u8 {
            let op = Opcode::from(b);
            assert_eq!(u8::from(op), b);
            let text = op.to_string();
            assert!(!text.is_empty());
            if op.info().is_none() {
                assert_eq!(text, format!("UNKNOWN_{b:#04x}"));
            }
        }
    }

    #[test]
    fn table_matches_the_ibta_header_layout() {
        let cases: &[(Opcode, usize, &str)] = &[
            (Opcode::RC_SEND_FIRST, 0, "RC_SEND_FIRST"),
            (
                Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                4,
                "RC_SEND_ONLY_WITH_IMMEDIATE",
            ),
            (Opcode::RC_RDMA_WRITE_FIRST, 16, "RC_RDMA_WRITE_FIRST"),
            (
                Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                20,
                "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            ),
            (Opcode::RC_RDMA_READ_REQUEST, 16, "RC_RDMA_READ_REQUEST"),
            (
                Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                4,
                "RC_RDMA_READ_RESPONSE_FIRST",
            ),
            (
                Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                0,
                "RC_RDMA_READ_RESPONSE_MIDDLE",
            ),
            (Opcode::RC_ACKNOWLEDGE, 4, "RC_ACKNOWLEDGE"),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 12, "RC_ATOMIC_ACKNOWLEDGE"),
            (Opcode::RC_COMPARE_SWAP, 28, "RC_COMPARE_SWAP"),
            (Opcode::RC_FETCH_ADD, 28, "RC_FETCH_ADD"),
            (
                Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                4,
                "RC_SEND_ONLY_WITH_INVALIDATE",
            ),
            (Opcode::RC_FLUSH, 20, "RC_FLUSH"),
            (Opcode::RC_ATOMIC_WRITE, 16, "RC_ATOMIC_WRITE"),
            (Opcode::UC_RDMA_WRITE_ONLY, 16, "UC_RDMA_WRITE_ONLY"),
            (Opcode::UD_SEND_ONLY, 8, "UD_SEND_ONLY"),
            (
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
                12,
                "UD_SEND_ONLY_WITH_IMMEDIATE",
            ),
            (Opcode::CNP, 16, "CNP"),
        ];
        for &(op, ext_len, name) in cases {
            let info = op.info().unwrap();
            assert_eq!(info.ext_len(), ext_len, "{name}");
            assert_eq!(info.name, name);
        }
        assert_eq!(Opcode::KNOWN.len(), 63);
        assert_eq!(Opcode(0x15).info(), None, "RESYNC is reserved");
    }

    #[test]
    fn the_header_table_says_what_info_says_for_every_byte() {
        for b in 0..=255u8 {
            let op = Opcode(b);
            assert_eq!(op.ext_headers(), op.info().map(|i| i.headers), "{op:?}");
            assert_eq!(op.is_known(), op.info().is_some(), "{op:?}");
        }
    }

    #[test]
    fn each_extended_header_has_its_ibta_size_and_a_set_the_sum() {
        use ExtHeaders as H;
        let sizes = [
            (H::XRCETH, 4),
            (H::DETH, 8),
            (H::FETH, 4),
            (H::RETH, 16),
            (H::ATOMIC_ETH, 28),
            (H::AETH, 4),
            (H::ATOMIC_ACK_ETH, 8),
            (H::IMM, 4),
            (H::IETH, 4),
            (H::CNP, 16),
        ];
        let mut all = H::NONE;
        for (h, size) in sizes {
            assert_eq!(h.single_len(), size, "{h:?}");
            assert_eq!(h.len(), size, "{h:?}");
            all = all.with(h);
        }
        assert_eq!(all.len(), sizes.iter().map(|&(_, s)| s).sum::<usize>());
        assert_eq!(H::RETH.with(H::IMM).single_len(), 0, "not a single header");
        assert_eq!(H::NONE.len(), 0);
    }

    #[test]
    fn transports_come_from_the_top_three_bits() {
        assert_eq!(Opcode::RC_FETCH_ADD.transport(), Transport::Rc);
        assert_eq!(Opcode::UC_SEND_ONLY.transport(), Transport::Uc);
        assert_eq!(Opcode::UD_SEND_ONLY.transport(), Transport::Ud);
        assert_eq!(Opcode::CNP.transport(), Transport::Cnp);
        for op in Opcode::KNOWN {
            let info = op.info().unwrap();
            let prefix = match op.transport() {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Xrc => "XRC_",
                _ => "CNP",
            };
            assert!(info.name.starts_with(prefix), "{}", info.name);
        }
    }

    /// IBTA 9.2 and table 36: an XRC opcode is `0xA0 | op` with the RC op's meaning; every
    /// request carries the 4-byte XRCETH first, responses carry none.
    #[test]
    fn xrc_opcodes_are_rc_ones_plus_the_xrceth_on_requests() {
        let mut twins = 0;
        for &op in Opcode::KNOWN {
            let Some(x) = op.rc_to_xrc() else { continue };
            twins += 1;
            let (rc, xrc) = (op.info().unwrap(), x.info().unwrap());
            assert_eq!(x.xrc_to_rc(), Some(op));
            assert_eq!(x.transport(), Transport::Xrc);
            assert_eq!(xrc.operation, rc.operation);
            assert_eq!(xrc.position, rc.position);
            assert_eq!(xrc.name.strip_prefix("XRC_"), rc.name.strip_prefix("RC_"));
            let extra = if rc.is_request() { 4 } else { 0 };
            assert_eq!(xrc.ext_len(), rc.ext_len() + extra, "{}", xrc.name);
            assert_eq!(xrc.headers.contains(ExtHeaders::XRCETH), rc.is_request());
        }
        assert_eq!(twins, 23, "every RC opcode but FLUSH and ATOMIC WRITE");
        assert_eq!(Opcode::RC_FLUSH.rc_to_xrc(), None);
        assert_eq!(Opcode::UC_SEND_ONLY.rc_to_xrc(), None);
        assert_eq!(Opcode::RC_SEND_ONLY.xrc_to_rc(), None);
    }

    #[test]
    fn request_and_response_classes() {
        let resp = Opcode::RC_RDMA_READ_RESPONSE_ONLY.info().unwrap();
        assert!(resp.is_response() && !resp.is_request());
        let req = Opcode::RC_RDMA_READ_REQUEST.info().unwrap();
        assert!(req.is_request() && !req.is_response());
        assert!(Opcode::RC_COMPARE_SWAP.info().unwrap().is_atomic());
        assert!(Opcode::RC_SEND_LAST.info().unwrap().ends_message());
        assert!(Opcode::RC_SEND_FIRST.info().unwrap().starts_message());
    }
}
