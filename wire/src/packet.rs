//! The whole RoCEv2 UDP payload: BTH, the extended headers its opcode implies, payload, pad
//! and the 4-byte ICRC.
//!
//! For opcodes the table does not know, nothing after the BTH is interpreted: those bytes are
//! all payload (and the pad count is not applied), so such packets still round-trip exactly.

use crate::bth::{Bth, BthRepr};
use crate::error::{Header, Result, WireError, need};
use crate::ext::{
    Aeth, AethRepr, AtomicAckEth, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth, Ieth, ImmDt,
    Reth, RethRepr, XrcEth,
};
use crate::opcode::{ExtHeaders, Opcode};

/// Length of the invariant CRC at the end of every packet.
pub const ICRC_LEN: usize = 4;

/// Length of the BTH.
pub const BTH_LEN: usize = 12;

/// Offset of header `which` after the BTH within the extended headers `set`, if present.
const fn ext_offset(set: ExtHeaders, which: ExtHeaders) -> Option<usize> {
    if !set.contains(which) {
        return None;
    }
    let mut off = BTH_LEN;
    let mut i = 0;
    while i < ExtHeaders::ORDER.len() {
        let h = ExtHeaders::ORDER[i];
        if h.bits() == which.bits() {
            return Some(off);
        }
        if set.contains(h) {
            off += h.single_len();
        }
        i += 1;
    }
    None
}

/// A view of a RoCEv2 UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Wrap a buffer without checking it (accessors may then panic).
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wrap received bytes after checking every length the opcode implies.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check that the BTH, the extended headers, the pad and the ICRC are present; no
    /// accessor panics after this succeeds.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        need(Header::Bth, len, BTH_LEN)?;
        let headers = self.ext_headers();
        let mut end = BTH_LEN;
        for h in ExtHeaders::ORDER {
            if headers.contains(h) {
                end += h.single_len();
                need(header_of(h), len, end)?;
            }
        }
        need(Header::Icrc, len, end + ICRC_LEN)?;
        let payload_with_pad = len - end - ICRC_LEN;
        let pad = self.pad_len();
        if pad > payload_with_pad {
            return Err(WireError::BadPadCount {
                pad: pad as u8,
                payload_len: payload_with_pad,
            });
        }
        // A payload of the wrong length for its opcode (an ATOMIC WRITE of 4 bytes) is still
        // a well-formed packet: the responder refuses it with an invalid-request NAK, as rxe.
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole packet.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The BTH view.
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..BTH_LEN])
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[0])
    }

    /// The extended headers present, as the opcode implies (none for unknown opcodes).
    pub fn ext_headers(&self) -> ExtHeaders {
        self.opcode().ext_headers().unwrap_or(ExtHeaders::NONE)
    }

    /// BTH plus extended headers: the offset of the payload.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.ext_headers().len()
    }

    /// Pad bytes before the ICRC (the BTH pad count; 0 for unknown opcodes).
    pub fn pad_len(&self) -> usize {
        if self.opcode().is_known() {
            usize::from((self.buffer.as_ref()[1] >> 4) & 0x3)
        } else {
            0
        }
    }

    fn ext(&self, which: ExtHeaders) -> Option<&[u8]> {
        let off = ext_offset(self.ext_headers(), which)?;
        Some(&self.buffer.as_ref()[off..off + which.single_len()])
    }

    /// The XRCETH, if the opcode carries one (XRC requests).
    pub fn xrceth(&self) -> Option<XrcEth<&[u8]>> {
        self.ext(ExtHeaders::XRCETH).map(XrcEth::new_unchecked)
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<Deth<&[u8]>> {
        self.ext(ExtHeaders::DETH).map(Deth::new_unchecked)
    }
    /// The FETH, if the opcode carries one.
    pub fn feth(&self) -> Option<Feth<&[u8]>> {
        self.ext(ExtHeaders::FETH).map(Feth::new_unchecked)
    }
    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<Reth<&[u8]>> {
        self.ext(ExtHeaders::RETH).map(Reth::new_unchecked)
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEth<&[u8]>> {
        self.ext(ExtHeaders::ATOMIC_ETH)
            .map(AtomicEth::new_unchecked)
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth<&[u8]>> {
        self.ext(ExtHeaders::AETH).map(Aeth::new_unchecked)
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth<&[u8]>> {
        self.ext(ExtHeaders::ATOMIC_ACK_ETH)
            .map(AtomicAckEth::new_unchecked)
    }
    /// The immediate data, if the opcode carries it.
    pub fn imm(&self) -> Option<ImmDt<&[u8]>> {
        self.ext(ExtHeaders::IMM).map(ImmDt::new_unchecked)
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth<&[u8]>> {
        self.ext(ExtHeaders::IETH).map(Ieth::new_unchecked)
    }
    /// The 16 reserved bytes of a CNP.
    pub fn cnp_reserved(&self) -> Option<&[u8]> {
        self.ext(ExtHeaders::CNP)
    }

    /// The payload, without pad and ICRC.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - self.pad_len();
        &b[self.header_len()..end]
    }

    /// Payload length without pad.
    pub fn payload_len(&self) -> usize {
        self.buffer.as_ref().len() - ICRC_LEN - self.pad_len() - self.header_len()
    }

    /// The pad bytes.
    pub fn pad(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - ICRC_LEN - self.pad_len()..b.len() - ICRC_LEN]
    }

    /// Everything the ICRC covers after the UDP header: the packet without its ICRC.
    pub fn without_icrc(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..b.len() - ICRC_LEN]
    }

    /// The ICRC value (stored least-significant byte first on the wire).
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let t = &b[b.len() - ICRC_LEN..];
        u32::from_le_bytes([t[0], t[1], t[2], t[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RocePacket<T> {
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let pad = self.pad_len();
        let b = self.buffer.as_mut();
        let end = b.len() - ICRC_LEN - pad;
        &mut b[start..end]
    }

    /// Store the ICRC (least-significant byte first).
    pub fn set_icrc(&mut self, icrc: u32) {
        let b = self.buffer.as_mut();
        let n = b.len();
        b[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    }
}

/// The bytes of header `h` at `*off`, moving `*off` past them.
fn header_range(off: &mut usize, h: ExtHeaders) -> std::ops::Range<usize> {
    let at = *off;
    *off += h.single_len();
    at..*off
}

const fn header_of(h: ExtHeaders) -> Header {
    match h.bits() {
        x if x == ExtHeaders::DETH.bits() => Header::Deth,
        x if x == ExtHeaders::RETH.bits() => Header::Reth,
        x if x == ExtHeaders::FETH.bits() => Header::Feth,
        x if x == ExtHeaders::ATOMIC_ETH.bits() => Header::AtomicEth,
        x if x == ExtHeaders::AETH.bits() => Header::Aeth,
        x if x == ExtHeaders::ATOMIC_ACK_ETH.bits() => Header::AtomicAckEth,
        x if x == ExtHeaders::IMM.bits() => Header::ImmDt,
        x if x == ExtHeaders::IETH.bits() => Header::Ieth,
        x if x == ExtHeaders::XRCETH.bits() => Header::XrcEth,
        _ => Header::Cnp,
    }
}

/// The owned extended headers of a packet; which are present must match the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtRepr {
    /// XRCETH (XRC requests), raw 32 bits: the reserved byte, then the XRC SRQ number in
    /// the low 24 bits.
    pub xrceth: Option<u32>,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH), raw 32 bits.
    pub feth: Option<u32>,
    /// RETH (WRITE first/only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CMP_SWAP, FETCH_ADD).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACK, READ response first/last/only, atomic ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: the original remote value.
    pub atomic_ack: Option<u64>,
    /// Immediate data (read big-endian, as on the wire).
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// CNP reserved bytes.
    pub cnp: Option<[u8; 16]>,
}

impl ExtRepr {
    /// The set of headers present.
    pub const fn headers(&self) -> ExtHeaders {
        let mut s = ExtHeaders::NONE;
        if self.xrceth.is_some() {
            s = s.with(ExtHeaders::XRCETH);
        }
        if self.deth.is_some() {
            s = s.with(ExtHeaders::DETH);
        }
        if self.feth.is_some() {
            s = s.with(ExtHeaders::FETH);
        }
        if self.reth.is_some() {
            s = s.with(ExtHeaders::RETH);
        }
        if self.atomic_eth.is_some() {
            s = s.with(ExtHeaders::ATOMIC_ETH);
        }
        if self.aeth.is_some() {
            s = s.with(ExtHeaders::AETH);
        }
        if self.atomic_ack.is_some() {
            s = s.with(ExtHeaders::ATOMIC_ACK_ETH);
        }
        if self.imm.is_some() {
            s = s.with(ExtHeaders::IMM);
        }
        if self.ieth.is_some() {
            s = s.with(ExtHeaders::IETH);
        }
        if self.cnp.is_some() {
            s = s.with(ExtHeaders::CNP);
        }
        s
    }

    /// Byte size of the headers present: `headers().len()`, summed without building the
    /// set (every packet built asks for it several times).
    pub const fn len(&self) -> usize {
        const fn n(present: bool, header: ExtHeaders) -> usize {
            present as usize * header.single_len()
        }
        n(self.xrceth.is_some(), ExtHeaders::XRCETH)
            + n(self.deth.is_some(), ExtHeaders::DETH)
            + n(self.feth.is_some(), ExtHeaders::FETH)
            + n(self.reth.is_some(), ExtHeaders::RETH)
            + n(self.atomic_eth.is_some(), ExtHeaders::ATOMIC_ETH)
            + n(self.aeth.is_some(), ExtHeaders::AETH)
            + n(self.atomic_ack.is_some(), ExtHeaders::ATOMIC_ACK_ETH)
            + n(self.imm.is_some(), ExtHeaders::IMM)
            + n(self.ieth.is_some(), ExtHeaders::IETH)
            + n(self.cnp.is_some(), ExtHeaders::CNP)
    }

    /// Whether no extended header is present.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An owned, validated RoCEv2 packet header stack plus payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr {
    /// The BTH (its pad count is what `emit` writes).
    pub bth: BthRepr,
    /// The extended headers.
    pub ext: ExtRepr,
    /// Payload bytes, without pad.
    pub payload_len: usize,
}

impl RoceRepr {
    /// A repr for a payload of `payload_len` bytes, with the BTH pad count set to align the
    /// packet to 4 bytes.
    pub fn new(mut bth: BthRepr, ext: ExtRepr, payload_len: usize) -> Self {
        bth.pad_count = if bth.opcode.is_known() {
            ((4 - payload_len % 4) % 4) as u8
        } else {
            0
        };
        Self {
            bth,
            ext,
            payload_len,
        }
    }

    /// Parse a checked packet view.
    pub fn parse<T: AsRef<[u8]>>(p: &RocePacket<T>) -> Result<Self> {
        p.check_len()?;
        let bth = BthRepr::parse(&p.bth())?;
        let ext = ExtRepr {
            xrceth: p
                .xrceth()
                .map(|v| (u32::from(v.reserved()) << 24) | v.srqn()),
            deth: p.deth().map(|v| DethRepr::parse(&v)).transpose()?,
            feth: p.feth().map(|v| v.raw()),
            reth: p.reth().map(|v| RethRepr::parse(&v)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|v| AtomicEthRepr::parse(&v))
                .transpose()?,
            aeth: p.aeth().map(|v| AethRepr::parse(&v)).transpose()?,
            atomic_ack: p.atomic_ack_eth().map(|v| v.orig()),
            imm: p.imm().map(|v| v.imm()),
            ieth: p.ieth().map(|v| v.rkey()),
            cnp: p.cnp_reserved().map(|b| {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                a
            }),
        };
        Ok(Self {
            bth,
            ext,
            payload_len: p.payload_len(),
        })
    }

    /// The pad bytes this repr emits.
    pub fn pad_len(&self) -> usize {
        if self.bth.opcode.is_known() {
            usize::from(self.bth.pad_count & 0x3)
        } else {
            0
        }
    }

    /// BTH plus extended headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.ext.len()
    }

    /// The whole UDP payload: headers, payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + self.pad_len() + ICRC_LEN
    }

    /// Write the BTH and extended headers and zero the pad into `buf`, which must be exactly
    /// [`RoceRepr::buffer_len`] bytes. The caller fills the payload (at
    /// [`RoceRepr::header_len`]) and then the ICRC. Fails if the extended headers do not
    /// match the opcode.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let expected = self.bth.opcode.ext_headers().unwrap_or(ExtHeaders::NONE);
        if expected != self.ext.headers() {
            return Err(WireError::BadOpcodeForHeaders {
                opcode: self.bth.opcode.0,
            });
        }
        if buf.len() != self.buffer_len() {
            return Err(WireError::BufferTooSmall {
                need: self.buffer_len(),
                got: buf.len(),
            });
        }
        self.bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
        // The headers present are the opcode's (checked above), in wire order
        // (`ExtHeaders::ORDER`): each written straight from its field, no walk over the
        // order with a lookup per header (a tenth of building an 8 B WRITE).
        let mut off = BTH_LEN;
        let mut take = |h: ExtHeaders| header_range(&mut off, h);
        let ext = &self.ext;
        if let Some(raw) = ext.xrceth {
            let mut v = XrcEth::new_unchecked(&mut buf[take(ExtHeaders::XRCETH)]);
            v.set_reserved((raw >> 24) as u8);
            v.set_srqn(raw & 0x00FF_FFFF);
        }
        if let Some(d) = ext.deth {
            d.emit(&mut Deth::new_unchecked(&mut buf[take(ExtHeaders::DETH)]));
        }
        if let Some(raw) = ext.feth {
            Feth::new_unchecked(&mut buf[take(ExtHeaders::FETH)]).set_raw(raw);
        }
        if let Some(r) = ext.reth {
            r.emit(&mut Reth::new_unchecked(&mut buf[take(ExtHeaders::RETH)]));
        }
        if let Some(a) = ext.atomic_eth {
            a.emit(&mut AtomicEth::new_unchecked(
                &mut buf[take(ExtHeaders::ATOMIC_ETH)],
            ));
        }
        if let Some(a) = ext.aeth {
            a.emit(&mut Aeth::new_unchecked(&mut buf[take(ExtHeaders::AETH)]));
        }
        if let Some(orig) = ext.atomic_ack {
            AtomicAckEth::new_unchecked(&mut buf[take(ExtHeaders::ATOMIC_ACK_ETH)]).set_orig(orig);
        }
        if let Some(imm) = ext.imm {
            ImmDt::new_unchecked(&mut buf[take(ExtHeaders::IMM)]).set_imm(imm);
        }
        if let Some(rkey) = ext.ieth {
            Ieth::new_unchecked(&mut buf[take(ExtHeaders::IETH)]).set_rkey(rkey);
        }
        if let Some(reserved) = ext.cnp {
            buf[take(ExtHeaders::CNP)].copy_from_slice(&reserved);
        }
        let pad_start = off + self.payload_len;
        buf[pad_start..pad_start + self.pad_len()].fill(0);
        Ok(())
    }

    /// Emit headers, copy `payload` in, and leave the ICRC zero: a convenience for tests and
    /// tools (the data path copies the payload straight from memory instead).
    pub fn emit_with_payload(&self, payload: &[u8], buf: &mut [u8]) -> Result<()> {
        if payload.len() != self.payload_len {
            return Err(WireError::BufferTooSmall {
                need: self.payload_len,
                got: payload.len(),
            });
        }
        self.emit(buf)?;
        let start = self.header_len();
        buf[start..start + payload.len()].copy_from_slice(payload);
        let n = buf.len();
        buf[n - ICRC_LEN..].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
