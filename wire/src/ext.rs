//! The extended transport headers: RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH,
//! FETH. Each has a zero-copy view and an owned repr whose `emit` writes every byte.

use core::fmt;

use crate::error::{Header, Result};
use crate::field::header_view;
use crate::{Msn, Qpn};

header_view! {
    /// RDMA extended transport header (16 bytes): virtual address, R_Key, DMA length.
    Reth, Header::Reth, 16, {
        /// Remote virtual address.
        va, set_va: u64 = 0..8;
        /// Remote key.
        rkey, set_rkey: u32 = 8..12;
        /// DMA length in bytes.
        dma_len, set_dma_len: u32 = 12..16;
    }
}

/// An owned RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parse from a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Reth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            va: v.va(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        })
    }
    /// Write every byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Reth<T>) {
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_dma_len(self.dma_len);
    }
}

header_view! {
    /// ACK extended transport header (4 bytes): syndrome and MSN.
    Aeth, Header::Aeth, 4, {
        /// Syndrome byte.
        syndrome_raw, set_syndrome_raw: u8 = 0..1;
        /// Message sequence number (24 bits).
        msn_raw, set_msn_raw: u32 = 1..4;
    }
}

/// NAK codes (AETH syndrome 0b011x_xxxx).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder expected another PSN (carried in the BTH).
    PsnSequenceError,
    /// Invalid request (bad opcode sequence, length error, unsupported operation).
    InvalidRequest,
    /// Remote access error (R_Key, bounds, access rights).
    RemoteAccessError,
    /// Remote operational error.
    RemoteOperationalError,
    /// Invalid RD request.
    InvalidRdRequest,
    /// A reserved NAK code, kept verbatim.
    Reserved(u8),
}

impl NakCode {
    /// From the five low syndrome bits.
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 0x1F {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            other => Self::Reserved(other),
        }
    }
    /// The five low syndrome bits.
    pub const fn bits(self) -> u8 {
        match self {
            Self::PsnSequenceError => 0,
            Self::InvalidRequest => 1,
            Self::RemoteAccessError => 2,
            Self::RemoteOperationalError => 3,
            Self::InvalidRdRequest => 4,
            Self::Reserved(b) => b & 0x1F,
        }
    }
}

/// The AETH syndrome, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive ACK with a credit count code (31 = invalid/unlimited, what rxe sends).
    Ack {
        /// Credit code (0..=31).
        credit: u8,
    },
    /// Receiver not ready: retry after the timer code's delay.
    RnrNak {
        /// RNR timer code (0..=31), see [`rnr_timer_micros`].
        timer: u8,
    },
    /// Negative acknowledge.
    Nak(NakCode),
    /// A reserved syndrome (top bit set or class 0b10), kept verbatim.
    Reserved(u8),
}

impl Syndrome {
    /// rxe's plain ACK: credit code 31 ("no end-to-end credit").
    pub const ACK: Self = Self::Ack { credit: 31 };

    /// Classify a syndrome byte.
    pub const fn from_byte(b: u8) -> Self {
        if b & 0x80 != 0 {
            return Self::Reserved(b);
        }
        match (b >> 5) & 0x3 {
            0 => Self::Ack { credit: b & 0x1F },
            1 => Self::RnrNak { timer: b & 0x1F },
            3 => Self::Nak(NakCode::from_bits(b)),
            _ => Self::Reserved(b),
        }
    }

    /// The syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Self::Ack { credit } => credit & 0x1F,
            Self::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Self::Nak(code) => 0x60 | code.bits(),
            Self::Reserved(b) => b,
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Ack { credit } => write!(f, "ACK credit={credit}"),
            Self::RnrNak { timer } => {
                write!(f, "RNR_NAK timer={timer} ({} us)", rnr_timer_micros(timer))
            }
            Self::Nak(code) => match code {
                NakCode::PsnSequenceError => f.write_str("NAK PSN_SEQUENCE_ERROR"),
                NakCode::InvalidRequest => f.write_str("NAK INVALID_REQUEST"),
                NakCode::RemoteAccessError => f.write_str("NAK REMOTE_ACCESS_ERROR"),
                NakCode::RemoteOperationalError => f.write_str("NAK REMOTE_OPERATIONAL_ERROR"),
                NakCode::InvalidRdRequest => f.write_str("NAK INVALID_RD_REQUEST"),
                NakCode::Reserved(b) => write!(f, "NAK reserved code {b}"),
            },
            Self::Reserved(b) => write!(f, "reserved syndrome {b:#04x}"),
        }
    }
}

/// The IBTA RNR NAK timer table (IBTA 9.7.5.2.8), in microseconds; code 0 is the longest.
pub const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// Delay of an RNR timer code (the low five bits are used).
pub const fn rnr_timer_micros(code: u8) -> u32 {
    RNR_TIMER_MICROS[(code & 0x1F) as usize]
}

/// Number of messages an AETH credit code grants (IBTA 9.7.5.1.3); `None` for code 31
/// ("invalid": no end-to-end flow control, which rxe always sends).
pub const fn ack_credits(code: u8) -> Option<u32> {
    const TABLE: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    ];
    let c = code & 0x1F;
    if c == 31 {
        None
    } else {
        Some(TABLE[c as usize])
    }
}

/// An owned AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number.
    pub msn: Msn,
}

impl AethRepr {
    /// Parse from a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Aeth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            syndrome: Syndrome::from_byte(v.syndrome_raw()),
            msn: Msn::new(v.msn_raw()),
        })
    }
    /// Write every byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Aeth<T>) {
        v.set_syndrome_raw(self.syndrome.to_byte());
        v.set_msn_raw(self.msn.value());
    }
}

header_view! {
    /// Atomic extended transport header (28 bytes).
    AtomicEth, Header::AtomicEth, 28, {
        /// Remote virtual address (8-byte aligned for a valid request).
        va, set_va: u64 = 0..8;
        /// Remote key.
        rkey, set_rkey: u32 = 8..12;
        /// Swap value (CMP_SWAP) or add value (FETCH_ADD).
        swap_add, set_swap_add: u64 = 12..20;
        /// Compare value (CMP_SWAP).
        compare, set_compare: u64 = 20..28;
    }
}

/// An owned AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap or add value.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parse from a view.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicEth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            va: v.va(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        })
    }
    /// Write every byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut AtomicEth<T>) {
        v.set_va(self.va);
        v.set_rkey(self.rkey);
        v.set_swap_add(self.swap_add);
        v.set_compare(self.compare);
    }
}

header_view! {
    /// Atomic acknowledge extended transport header (8 bytes).
    AtomicAckEth, Header::AtomicAckEth, 8, {
        /// The remote value before the atomic operation.
        orig, set_orig: u64 = 0..8;
    }
}

header_view! {
    /// Immediate data (4 bytes), kept in network order as ibv_wc's `imm_data` is.
    ImmDt, Header::ImmDt, 4, {
        /// The immediate value read big-endian.
        imm, set_imm: u32 = 0..4;
    }
}

header_view! {
    /// Invalidate extended transport header (4 bytes).
    Ieth, Header::Ieth, 4, {
        /// The R_Key to invalidate.
        rkey, set_rkey: u32 = 0..4;
    }
}

header_view! {
    /// XRC extended transport header (4 bytes): a reserved byte and the XRC SRQ number
    /// (24 bits) the request is for; first after the BTH in every XRC request.
    XrcEth, Header::XrcEth, 4, {
        /// Reserved byte.
        reserved, set_reserved: u8 = 0..1;
        /// XRC SRQ number (24 bits).
        srqn, set_srqn: u32 = 1..4;
    }
}

header_view! {
    /// Datagram extended transport header (8 bytes).
    Deth, Header::Deth, 8, {
        /// Queue key.
        qkey, set_qkey: u32 = 0..4;
        /// Reserved byte.
        reserved, set_reserved: u8 = 4..5;
        /// Source QP (24 bits).
        src_qpn_raw, set_src_qpn_raw: u32 = 5..8;
    }
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Source QP.
    pub fn src_qpn(&self) -> Qpn {
        Qpn::from_wire(self.src_qpn_raw())
    }
}

/// An owned DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Reserved byte, kept verbatim.
    pub reserved: u8,
    /// Source QP.
    pub src_qpn: Qpn,
}

impl DethRepr {
    /// Parse from a view.
    pub fn parse<T: AsRef<[u8]>>(v: &Deth<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            qkey: v.qkey(),
            reserved: v.reserved(),
            src_qpn: v.src_qpn(),
        })
    }
    /// Write every byte.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Deth<T>) {
        v.set_qkey(self.qkey);
        v.set_reserved(self.reserved);
        v.set_src_qpn_raw(self.src_qpn.value());
    }
}

header_view! {
    /// FLUSH extended transport header (4 bytes, IBTA 1.5): reserved bits, selectivity level
    /// (bits 5:4 of the last byte) and placement type (bits 3:0).
    Feth, Header::Feth, 4, {
        /// The whole 32-bit field.
        raw, set_raw: u32 = 0..4;
    }
}

impl<T: AsRef<[u8]>> Feth<T> {
    /// Placement type bits (persistence / global visibility).
    pub fn placement_type(&self) -> u8 {
        (self.raw() & 0xF) as u8
    }
    /// Selectivity level (0 = MR range, 1 = whole MR).
    pub fn selectivity(&self) -> u8 {
        ((self.raw() >> 4) & 0x3) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WireError;

    fn truncations(full: &[u8], header: Header, check: impl Fn(&[u8]) -> Result<()>) {
        for n in 0..full.len() {
            assert_eq!(
                check(&full[..n]).err(),
                Some(WireError::Truncated {
                    header,
                    need: full.len(),
                    got: n
                }),
                "{header} prefix {n}"
            );
        }
    }

    #[test]
    fn reth_vector() {
        let bytes = [
            0x00, 0x00, 0x55, 0x8e, 0x3c, 0x2a, 0x10, 0x00, 0x00, 0x01, 0x23, 0x45, 0x00, 0x00,
            0x10, 0x00,
        ];
        let r = RethRepr::parse(&Reth::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x0000_558e_3c2a_1000,
                rkey: 0x0001_2345,
                dma_len: 4096
            }
        );
        let mut out = [0xa5u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        truncations(&bytes, Header::Reth, |b| Reth::new_checked(b).map(|_| ()));
    }

    #[test]
    fn aeth_vector_ack_from_rxe() {
        // rxe ACK: syndrome 0x1F, MSN 5.
        let bytes = [0x1f, 0x00, 0x00, 0x05];
        let r = AethRepr::parse(&Aeth::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(r.syndrome, Syndrome::ACK);
        assert_eq!(r.msn, Msn::new(5));
        let mut out = [0xa5u8; 4];
        r.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        truncations(&bytes, Header::Aeth, |b| Aeth::new_checked(b).map(|_| ()));
    }

    #[test]
    fn every_syndrome_byte_round_trips_and_classifies() {
        for b in 0..=255u8 {
            let s = Syndrome::from_byte(b);
            assert_eq!(s.to_byte(), b, "{b:#04x}");
            let class = (b >> 5) & 0x3;
            match s {
                Syndrome::Ack { .. } => assert_eq!(class, 0),
                Syndrome::RnrNak { .. } => assert_eq!(class, 1),
                Syndrome::Nak(_) => assert_eq!(class, 3),
                Syndrome::Reserved(_) => assert!(b & 0x80 != 0 || class == 2),
            }
        }
        assert_eq!(
            Syndrome::from_byte(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_byte(0x61),
            Syndrome::Nak(NakCode::InvalidRequest)
        );
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from_byte(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from_byte(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
    }

    #[test]
    fn rnr_timer_table_matches_ibta() {
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(rnr_timer_micros(1), 10);
        assert_eq!(rnr_timer_micros(12), 640);
        assert_eq!(rnr_timer_micros(25), 61_440);
        assert_eq!(rnr_timer_micros(31), 491_520);
        assert_eq!(ack_credits(31), None);
        assert_eq!(ack_credits(0), Some(0));
        assert_eq!(ack_credits(30), Some(32768));
    }

    #[test]
    fn atomic_eth_vector_fetch_add_one() {
        let mut bytes = [0u8; 28];
        bytes[..8].copy_from_slice(&0x5601_0000_1000u64.to_be_bytes());
        bytes[8..12].copy_from_slice(&0x1234u32.to_be_bytes());
        bytes[12..20].copy_from_slice(&1u64.to_be_bytes());
        let r = AtomicEthRepr::parse(&AtomicEth::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(r.swap_add, 1);
        assert_eq!(r.compare, 0);
        let mut out = [0xa5u8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        truncations(&bytes, Header::AtomicEth, |b| {
            AtomicEth::new_checked(b).map(|_| ())
        });
    }

    #[test]
    fn deth_vector_from_ud_pingpong() {
        // Q_Key 0x11111111, source QP 0x13.
        let bytes = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x13];
        let r = DethRepr::parse(&Deth::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(r.qkey, 0x1111_1111);
        assert_eq!(r.src_qpn, Qpn::from_wire(0x13));
        let mut out = [0xa5u8; 8];
        r.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        truncations(&bytes, Header::Deth, |b| Deth::new_checked(b).map(|_| ()));
    }

    #[test]
    fn small_headers_read_and_write() {
        let mut buf = [0xa5u8; 8];
        AtomicAckEth::new_unchecked(&mut buf[..]).set_orig(0x0102_0304_0506_0708);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
        let mut imm = [0xa5u8; 4];
        ImmDt::new_unchecked(&mut imm[..]).set_imm(0xdead_beef);
        assert_eq!(imm, [0xde, 0xad, 0xbe, 0xef]);
        let mut ieth = [0xa5u8; 4];
        Ieth::new_unchecked(&mut ieth[..]).set_rkey(0x0000_1234);
        assert_eq!(Ieth::new_checked(&ieth[..]).unwrap().rkey(), 0x1234);
        let feth = [0, 0, 0, 0x12];
        let v = Feth::new_checked(&feth[..]).unwrap();
        assert_eq!(v.selectivity(), 1);
        assert_eq!(v.placement_type(), 2);
        truncations(&[0u8; 8], Header::AtomicAckEth, |b| {
            AtomicAckEth::new_checked(b).map(|_| ())
        });
        truncations(&[0u8; 4], Header::ImmDt, |b| {
            ImmDt::new_checked(b).map(|_| ())
        });
        truncations(&[0u8; 4], Header::Ieth, |b| {
            Ieth::new_checked(b).map(|_| ())
        });
        truncations(&[0u8; 4], Header::Feth, |b| {
            Feth::new_checked(b).map(|_| ())
        });
    }

    #[test]
    fn xrceth_is_a_reserved_byte_and_a_24_bit_srq_number() {
        let mut x = [0xa5u8; 4];
        let mut v = XrcEth::new_unchecked(&mut x[..]);
        v.set_reserved(0);
        v.set_srqn(0x12_3456);
        assert_eq!(x, [0, 0x12, 0x34, 0x56]);
        assert_eq!(XrcEth::new_checked(&x[..]).unwrap().srqn(), 0x12_3456);
        truncations(&x, Header::XrcEth, |b| XrcEth::new_checked(b).map(|_| ()));
    }
}
