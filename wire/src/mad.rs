//! Management datagrams (MADs): the 256-byte messages QP0 and QP1 carry, here for the
//! Communication Management class that rdma_cm speaks over QP1.
//!
//! On RoCEv2 a MAD travels as the payload of a UD SEND to QP1 (BTH + DETH, Q_Key
//! [`QP1_QKEY`]). Its first 24 bytes are the common header (`struct ib_mad_hdr` in the
//! kernel's `include/rdma/ib_mad.h`):
//!
//! ```text
//! byte 0      base version (1)
//! byte 1      management class (0x07 = CM)
//! byte 2      class version (2 for CM)
//! byte 3      method (R bit 0x80 + method; CM sends with SEND = 0x03)
//! byte 4-5    status
//! byte 6-7    class specific
//! byte 8-15   transaction ID
//! byte 16-17  attribute ID (which CM message)
//! byte 18-19  reserved
//! byte 20-23  attribute modifier
//! byte 24-255 class data (232 bytes)
//! ```
//!
//! ```
//! use softroce_wire::mad::{Mad, MadRepr, MAD_LEN};
//!
//! let repr = MadRepr::cm_send(0x0010, 0x1234);
//! let mut buf = [0u8; MAD_LEN];
//! repr.emit(&mut Mad::new_unchecked(&mut buf[..]));
//! let mad = Mad::new_checked(&buf[..]).unwrap();
//! assert_eq!(MadRepr::parse(&mad).unwrap(), repr);
//! assert_eq!(mad.data().len(), 232);
//! ```

use crate::error::{Header, Result, WireError};
use crate::field::header_view;

/// Length of every (non-OPA) MAD.
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Length of the class data after the common header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// The only MAD base version InfiniBand (and so RoCE) uses.
pub const BASE_VERSION: u8 = 1;
/// Management class of Communication Management.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version (IBTA 1.2, `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;

/// Method GET.
pub const METHOD_GET: u8 = 0x01;
/// Method SET.
pub const METHOD_SET: u8 = 0x02;
/// Method SEND: every CM protocol message uses it.
pub const METHOD_SEND: u8 = 0x03;
/// The response bit of the method byte.
pub const METHOD_RESP: u8 = 0x80;
/// Method GET response.
pub const METHOD_GET_RESP: u8 = METHOD_GET | METHOD_RESP;

/// The well-known Q_Key of QP1 (`IB_QP1_QKEY`).
pub const QP1_QKEY: u32 = 0x8001_0000;

header_view! {
    /// A view of a whole 256-byte MAD; the getters cover the 24-byte common header.
    Mad, Header::Mad, MAD_LEN, {
        /// Base version (1).
        base_version, set_base_version: u8 = 0..1;
        /// Management class.
        mgmt_class, set_mgmt_class: u8 = 1..2;
        /// Class version.
        class_version, set_class_version: u8 = 2..3;
        /// Method, response bit included.
        method, set_method: u8 = 3..4;
        /// Status.
        status, set_status: u16 = 4..6;
        /// Class-specific word.
        class_specific, set_class_specific: u16 = 6..8;
        /// Transaction ID.
        tid, set_tid: u64 = 8..16;
        /// Attribute ID.
        attr_id, set_attr_id: u16 = 16..18;
        /// Reserved (zero on emit).
        reserved, set_reserved: u16 = 18..20;
        /// Attribute modifier.
        attr_mod, set_attr_mod: u32 = 20..24;
    }
}

impl<T: AsRef<[u8]>> Mad<T> {
    /// The 232 bytes of class data after the common header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[MAD_HEADER_LEN..MAD_LEN]
    }

    /// The whole MAD.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..MAD_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    /// The class data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[MAD_HEADER_LEN..MAD_LEN]
    }

    /// The whole MAD, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[..MAD_LEN]
    }
}

/// An owned common MAD header. The reserved word is not kept: emit writes zeros there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadRepr {
    /// Base version (1).
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// Method, response bit included.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific word.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID.
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadRepr {
    /// The header of a CM protocol message the way the kernel CM sends it: class 0x07
    /// version 2, method SEND, status 0.
    pub const fn cm_send(attr_id: u16, tid: u64) -> Self {
        Self {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Whether this is a Communication Management MAD of the version we speak.
    pub const fn is_cm(&self) -> bool {
        self.mgmt_class == MGMT_CLASS_CM && self.class_version == CM_CLASS_VERSION
    }

    /// Parse the common header of a whole MAD, rejecting base versions other than 1.
    pub fn parse<T: AsRef<[u8]>>(mad: &Mad<T>) -> Result<Self> {
        mad.check_len()?;
        if mad.base_version() != BASE_VERSION {
            return Err(WireError::BadMadBaseVersion(mad.base_version()));
        }
        Ok(Self {
            base_version: mad.base_version(),
            mgmt_class: mad.mgmt_class(),
            class_version: mad.class_version(),
            method: mad.method(),
            status: mad.status(),
            class_specific: mad.class_specific(),
            tid: mad.tid(),
            attr_id: mad.attr_id(),
            attr_mod: mad.attr_mod(),
        })
    }

    /// Write the 24 header bytes (the reserved word as zero); the class data is untouched.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) {
        mad.set_base_version(self.base_version);
        mad.set_mgmt_class(self.mgmt_class);
        mad.set_class_version(self.class_version);
        mad.set_method(self.method);
        mad.set_status(self.status);
        mad.set_class_specific(self.class_specific);
        mad.set_tid(self.tid);
        mad.set_attr_id(self.attr_id);
        mad.set_reserved(0);
        mad.set_attr_mod(self.attr_mod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A REQ header as the kernel CM builds it: `ib_mad_hdr` offsets 0..24.
    fn req_header_bytes() -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        b[..24].copy_from_slice(&[
            0x01, 0x07, 0x02, 0x03, // base version, class, class version, method SEND
            0x00, 0x00, 0x00, 0x00, // status, class specific
            0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x10, 0x01, // tid
            0x00, 0x10, 0x00, 0x00, // attr id REQ, reserved
            0x00, 0x00, 0x00, 0x00, // attr mod
        ]);
        b
    }

    #[test]
    fn header_fields_sit_at_ib_mad_hdr_offsets() {
        let b = req_header_bytes();
        let mad = Mad::new_checked(&b[..]).unwrap();
        let r = MadRepr::parse(&mad).unwrap();
        assert_eq!(r, MadRepr::cm_send(0x0010, 0x0000_002a_0000_1001));
        assert!(r.is_cm());
        let mut out = [0xa5u8; MAD_LEN];
        r.emit(&mut Mad::new_unchecked(&mut out[..]));
        assert_eq!(out[..24], b[..24]);
        // The class data is left alone.
        assert!(out[24..].iter().all(|&x| x == 0xa5));
    }

    #[test]
    fn reserved_word_and_all_fields_round_trip() {
        let mut b = req_header_bytes();
        b[4..8].copy_from_slice(&[0x00, 0x1c, 0xbe, 0xef]);
        b[18..20].copy_from_slice(&[0xff, 0xff]); // reserved: dropped
        b[20..24].copy_from_slice(&[1, 2, 3, 4]);
        b[3] = METHOD_GET_RESP;
        let r = MadRepr::parse(&Mad::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            (r.status, r.class_specific, r.attr_mod),
            (0x1c, 0xbeef, 0x0102_0304)
        );
        let mut out = [0u8; MAD_LEN];
        r.emit(&mut Mad::new_unchecked(&mut out[..]));
        b[18..20].copy_from_slice(&[0, 0]);
        assert_eq!(out, b);
    }

    #[test]
    fn short_mads_and_other_base_versions_are_rejected() {
        let b = req_header_bytes();
        for n in [0, 23, 24, 255] {
            assert_eq!(
                Mad::new_checked(&b[..n]).unwrap_err(),
                WireError::Truncated {
                    header: Header::Mad,
                    need: MAD_LEN,
                    got: n
                }
            );
        }
        let mut opa = b;
        opa[0] = 0x80;
        assert_eq!(
            MadRepr::parse(&Mad::new_unchecked(&opa[..])),
            Err(WireError::BadMadBaseVersion(0x80))
        );
    }
}
