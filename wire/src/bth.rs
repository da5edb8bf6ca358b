//! The 12-byte base transport header.
//!
//! ```text
//! byte 0   opcode
//! byte 1   SE(1) M(1) PadCnt(2) TVer(4)
//! byte 2-3 P_Key
//! byte 4   FECN(1) BECN(1) resv6   (masked to 0xFF in the ICRC)
//! byte 5-7 destination QP
//! byte 8   AckReq(1) resv7
//! byte 9-11 PSN
//! ```

use crate::error::{Header, Result, WireError};
use crate::field::header_view;
use crate::{Opcode, Psn, Qpn};

header_view! {
    /// A view of a BTH in a buffer.
    Bth, Header::Bth, 12, {
        /// The raw opcode byte.
        opcode_raw, set_opcode_raw: u8 = 0..1;
        /// Byte 1: SE, M, pad count, transport version.
        flags_byte, set_flags_byte: u8 = 1..2;
        /// Partition key.
        pkey, set_pkey: u16 = 2..4;
        /// Byte 4: FECN, BECN and six reserved bits.
        byte4, set_byte4: u8 = 4..5;
        /// Destination QP number (24 bits).
        dest_qpn_raw, set_dest_qpn_raw: u32 = 5..8;
        /// Byte 8: AckReq and seven reserved bits.
        ack_byte, set_ack_byte: u8 = 8..9;
        /// Packet sequence number (24 bits).
        psn_raw, set_psn_raw: u32 = 9..12;
    }
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.opcode_raw())
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.flags_byte() & 0x80 != 0
    }
    /// Migration state.
    pub fn mig_req(&self) -> bool {
        self.flags_byte() & 0x40 != 0
    }
    /// Pad count (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.flags_byte() >> 4) & 0x3
    }
    /// Transport header version (0 on RoCEv2).
    pub fn tver(&self) -> u8 {
        self.flags_byte() & 0x0F
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.byte4() & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.byte4() & 0x40 != 0
    }
    /// Destination QP.
    pub fn dest_qpn(&self) -> Qpn {
        Qpn::from_wire(self.dest_qpn_raw())
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.ack_byte() & 0x80 != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(self.psn_raw())
    }
}

/// An owned BTH. Reserved bits are kept so parse → emit reproduces the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration state.
    pub mig_req: bool,
    /// Pad count (0..=3).
    pub pad_count: u8,
    /// Transport header version (must be 0).
    pub tver: u8,
    /// Partition key (0xFFFF by default).
    pub pkey: u16,
    /// Byte 4 verbatim: FECN (0x80), BECN (0x40) and reserved bits.
    pub byte4: u8,
    /// Destination QP.
    pub dest_qpn: Qpn,
    /// Acknowledge request.
    pub ack_req: bool,
    /// The seven reserved bits after AckReq.
    pub resv7: u8,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// Header length.
    pub const LEN: usize = 12;

    /// A BTH with rxe's defaults: P_Key 0xFFFF, no flags, version 0.
    pub const fn new(opcode: Opcode, dest_qpn: Qpn, psn: Psn) -> Self {
        Self {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xFFFF,
            byte4: 0,
            dest_qpn,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }

    /// Parse a BTH, rejecting transport versions other than 0.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self> {
        bth.check_len()?;
        if bth.tver() != 0 {
            return Err(WireError::BadTver(bth.tver()));
        }
        Ok(Self {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            tver: bth.tver(),
            pkey: bth.pkey(),
            byte4: bth.byte4(),
            dest_qpn: bth.dest_qpn(),
            ack_req: bth.ack_req(),
            resv7: bth.ack_byte() & 0x7F,
            psn: bth.psn(),
        })
    }

    /// Write every byte of the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode_raw(self.opcode.0);
        bth.set_flags_byte(
            (u8::from(self.solicited) << 7)
                | (u8::from(self.mig_req) << 6)
                | ((self.pad_count & 0x3) << 4)
                | (self.tver & 0x0F),
        );
        bth.set_pkey(self.pkey);
        bth.set_byte4(self.byte4);
        bth.set_dest_qpn_raw(self.dest_qpn.value());
        bth.set_ack_byte((u8::from(self.ack_req) << 7) | (self.resv7 & 0x7F));
        bth.set_psn_raw(self.psn.value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RC_SEND_ONLY to QP 0x11, PSN 0x5e4a3c, AckReq, from a real rxe capture's layout.
    static BTH_BYTES: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x5e, 0x4a, 0x3c,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            ack_req: true,
            ..BthRepr::new(
                Opcode::RC_SEND_ONLY,
                Qpn::from_wire(0x11),
                Psn::new(0x5e4a3c),
            )
        }
    }

    #[test]
    fn deconstruct() {
        let bth = Bth::new_checked(&BTH_BYTES[..]).unwrap();
        assert_eq!(bth.opcode(), Opcode::RC_SEND_ONLY);
        assert!(!bth.solicited());
        assert_eq!(bth.pad_count(), 0);
        assert_eq!(bth.tver(), 0);
        assert_eq!(bth.pkey(), 0xffff);
        assert_eq!(bth.dest_qpn(), Qpn::from_wire(0x11));
        assert!(bth.ack_req());
        assert_eq!(bth.psn(), Psn::new(0x5e4a3c));
    }

    #[test]
    fn parse_and_emit_into_a5_buffer() {
        let parsed = BthRepr::parse(&Bth::new_unchecked(&BTH_BYTES[..])).unwrap();
        assert_eq!(parsed, repr());
        let mut buf = [0xa5u8; 12];
        repr().emit(&mut Bth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BTH_BYTES);
    }

    #[test]
    fn flags_and_reserved_bits_round_trip() {
        let mut bytes = BTH_BYTES;
        bytes[1] = 0xE0; // SE, M, pad 2
        bytes[4] = 0xC1; // FECN, BECN, a reserved bit
        bytes[8] = 0x85; // AckReq + reserved bits
        let r = BthRepr::parse(&Bth::new_unchecked(&bytes[..])).unwrap();
        assert!(r.solicited && r.mig_req);
        assert_eq!(r.pad_count, 2);
        let mut out = [0xa5u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn nonzero_transport_version_is_rejected() {
        let mut bytes = BTH_BYTES;
        bytes[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&bytes[..])),
            Err(WireError::BadTver(1))
        );
    }

    #[test]
    fn every_truncated_prefix_is_rejected() {
        for n in 0..12 {
            assert_eq!(
                Bth::new_checked(&BTH_BYTES[..n]).unwrap_err(),
                WireError::Truncated {
                    header: Header::Bth,
                    need: 12,
                    got: n
                }
            );
        }
    }
}
