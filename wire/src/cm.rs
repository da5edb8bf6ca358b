//! Communication Management (CM) messages: the MADs of management class 0x07 that the
//! kernel IB CM (`drivers/infiniband/core/cm.c`) and rdma_cm exchange over QP1 to connect,
//! reject and disconnect QPs.
//!
//! Every message is a whole 256-byte [`Mad`]: the 24-byte common header, then the message
//! fields at the offsets of IBTA volume 1 chapter 12 (tables 106-120, as the kernel spells
//! them in `include/rdma/ibta_vol1_c12.h`), then private data up to byte 255. Offsets in
//! this module's docs are *within the class data* (the kernel's `CM_FIELD_*` byte offsets;
//! add 24 for the offset in the MAD); bit numbers use the IBTA `Byte[Bit]` notation, bit 0
//! being the most significant.
//!
//! Each message has a view (`CmReq<T>` …, over the whole MAD) and an owned repr whose
//! `emit` writes all 232 bytes of class data, reserved bits as zero. [`CmMadRepr`] parses
//! any CM MAD by its attribute ID.
//!
//! ```
//! use softroce_wire::cm::{CmMadRepr, CmMessage, CmRtuRepr};
//! use softroce_wire::mad::{Mad, MAD_LEN};
//!
//! let rtu = CmRtuRepr { local_comm_id: 7, remote_comm_id: 9, private_data: [0; 224] };
//! let repr = CmMadRepr::new(0x42, CmMessage::Rtu(rtu));
//! let mut buf = [0u8; MAD_LEN];
//! repr.emit(&mut Mad::new_unchecked(&mut buf[..]));
//! let parsed = CmMadRepr::parse(&Mad::new_checked(&buf[..]).unwrap()).unwrap();
//! assert_eq!(parsed, repr);
//! assert_eq!(parsed.message.to_string(), "RTU lcid=0x7 rcid=0x9 pd=224");
//! ```

mod cma;

use core::fmt;

pub use cma::{CMA_HDR_LEN, CMA_VERSION, CmaAddrs, CmaHdr, CmaHdrRepr, PortSpace};

use crate::error::{Header, Result, WireError};
use crate::field::header_view;
use crate::gid::Gid;
use crate::mad::{MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN, Mad, MadRepr};
use crate::{Psn, Qpn};

/// Start of the class data in a MAD: every CM offset below is relative to it.
const D: usize = MAD_HEADER_LEN;

/// Private data bytes of a REQ (`IB_CM_REQ_PRIVATE_DATA_SIZE`).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data bytes of an MRA.
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Private data bytes of a REJ.
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Length of a REJ's additional rejection information (ARI).
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes of a REP.
pub const REP_PRIVATE_DATA_LEN: usize = 196;
/// Private data bytes of an RTU.
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a DREQ.
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;
/// Private data bytes of a DREP.
pub const DREP_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a SIDR_REQ.
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// Private data bytes of a SIDR_REP.
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
/// Length of a SIDR_REP's additional information (a ClassPortInfo on redirect).
pub const SIDR_REP_INFO_LEN: usize = 72;

/// `width` bits at IBTA bit `bit` (0 = most significant) of `byte`: the kernel's
/// `CM_FIELD_BLOC(struct, byte, bit, width)`.
const fn get_bits(byte: u8, bit: u32, width: u32) -> u8 {
    (byte >> (8 - bit - width)) & (((1u16 << width) - 1) as u8)
}

/// `value` masked to `width` bits and placed at IBTA bit `bit` of a byte.
const fn put_bits(value: u8, bit: u32, width: u32) -> u8 {
    (value & (((1u16 << width) - 1) as u8)) << (8 - bit - width)
}

/// Which CM message a MAD carries: its attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CmAttr {
    /// ClassPortInfo (0x0001).
    ClassPortInfo,
    /// Connection request (0x0010).
    Req,
    /// Message receipt acknowledgement (0x0011).
    Mra,
    /// Reject (0x0012).
    Rej,
    /// Reply to a REQ (0x0013).
    Rep,
    /// Ready to use (0x0014).
    Rtu,
    /// Disconnection request (0x0015).
    Dreq,
    /// Disconnection reply (0x0016).
    Drep,
    /// Service ID resolution request (0x0017).
    SidrReq,
    /// Service ID resolution reply (0x0018).
    SidrRep,
    /// Load alternate path (0x0019).
    Lap,
    /// Alternate path response (0x001A).
    Apr,
}

impl CmAttr {
    /// Every CM attribute, in attribute ID order.
    pub const ALL: [Self; 12] = [
        Self::ClassPortInfo,
        Self::Req,
        Self::Mra,
        Self::Rej,
        Self::Rep,
        Self::Rtu,
        Self::Dreq,
        Self::Drep,
        Self::SidrReq,
        Self::SidrRep,
        Self::Lap,
        Self::Apr,
    ];

    /// The attribute ID on the wire.
    pub const fn id(self) -> u16 {
        match self {
            Self::ClassPortInfo => 0x0001,
            Self::Req => 0x0010,
            Self::Mra => 0x0011,
            Self::Rej => 0x0012,
            Self::Rep => 0x0013,
            Self::Rtu => 0x0014,
            Self::Dreq => 0x0015,
            Self::Drep => 0x0016,
            Self::SidrReq => 0x0017,
            Self::SidrRep => 0x0018,
            Self::Lap => 0x0019,
            Self::Apr => 0x001A,
        }
    }

    /// The attribute of an ID, if it is a CM one.
    pub const fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            0x0001 => Self::ClassPortInfo,
            0x0010 => Self::Req,
            0x0011 => Self::Mra,
            0x0012 => Self::Rej,
            0x0013 => Self::Rep,
            0x0014 => Self::Rtu,
            0x0015 => Self::Dreq,
            0x0016 => Self::Drep,
            0x0017 => Self::SidrReq,
            0x0018 => Self::SidrRep,
            0x0019 => Self::Lap,
            0x001A => Self::Apr,
            _ => return None,
        })
    }

    /// The IBTA name (`REQ`, `SIDR_REP`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::ClassPortInfo => "ClassPortInfo",
            Self::Req => "REQ",
            Self::Mra => "MRA",
            Self::Rej => "REJ",
            Self::Rep => "REP",
            Self::Rtu => "RTU",
            Self::Dreq => "DREQ",
            Self::Drep => "DREP",
            Self::SidrReq => "SIDR_REQ",
            Self::SidrRep => "SIDR_REP",
            Self::Lap => "LAP",
            Self::Apr => "APR",
        }
    }
}

impl fmt::Display for CmAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Define a CM message view over a whole MAD, with its private data accessors.
macro_rules! cm_view {
    (
        $(#[$meta:meta])*
        $view:ident, private_data_at = $pd:expr, { $($fields:tt)* }
    ) => {
        header_view! {
            $(#[$meta])*
            $view, Header::Mad, MAD_LEN, { $($fields)* }
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Offset of the private data within the MAD.
            pub const PRIVATE_DATA_OFFSET: usize = D + $pd;

            /// The private data: from its offset to the end of the MAD.
            pub fn private_data(&self) -> &[u8] {
                &self.buffer.as_ref()[Self::PRIVATE_DATA_OFFSET..MAD_LEN]
            }

            /// The 232 bytes of class data.
            pub fn class_data(&self) -> &[u8] {
                &self.buffer.as_ref()[D..MAD_LEN]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            /// The private data, writable.
            pub fn private_data_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[Self::PRIVATE_DATA_OFFSET..MAD_LEN]
            }

            /// The class data, writable.
            pub fn class_data_mut(&mut self) -> &mut [u8] {
                &mut self.buffer.as_mut()[D..MAD_LEN]
            }
        }
    };
}

/// Copy a fixed-size field out of a checked buffer.
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

// ---------------------------------------------------------------------------------------
// Paths (inside the REQ)
// ---------------------------------------------------------------------------------------

/// Length of one path description in a REQ (primary at 52, alternate at 96).
const PATH_LEN: usize = 44;

/// A primary or alternate path of a REQ (IBTA table 106, bytes 52-95 and 96-139).
///
/// ```text
/// +0  local port LID (16)       +2  remote port LID (16)
/// +4  local port GID (128)      +20 remote port GID (128)
/// +36 flow label (20) rsvd (6) packet rate (6)
/// +40 traffic class (8)         +41 hop limit (8)
/// +42 SL (4) subnet local (1) rsvd (3)
/// +43 local ACK timeout (5) rsvd (3)   (alternate: SAP supported at bit 5)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPathRepr {
    /// Local port LID (0xFFFF, "permissive", on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: Gid,
    /// Remote port GID.
    pub remote_gid: Gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, IBTA rate code).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local: the remote port is on the local subnet.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits, 4.096 µs × 2^n).
    pub local_ack_timeout: u8,
}

impl CmPathRepr {
    fn parse_bytes(b: &[u8]) -> Self {
        let word36 = u32::from_be_bytes([b[36], b[37], b[38], b[39]]);
        Self {
            local_lid: u16::from_be_bytes([b[0], b[1]]),
            remote_lid: u16::from_be_bytes([b[2], b[3]]),
            local_gid: Gid::from_bytes(array(&b[4..20])),
            remote_gid: Gid::from_bytes(array(&b[20..36])),
            flow_label: word36 >> 12,
            packet_rate: (word36 & 0x3F) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: get_bits(b[42], 0, 4),
            subnet_local: get_bits(b[42], 4, 1) != 0,
            local_ack_timeout: get_bits(b[43], 0, 5),
        }
    }

    /// Write every byte of the path, reserved bits as zero.
    fn emit_bytes(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.local_lid.to_be_bytes());
        b[2..4].copy_from_slice(&self.remote_lid.to_be_bytes());
        b[4..20].copy_from_slice(self.local_gid.as_bytes());
        b[20..36].copy_from_slice(self.remote_gid.as_bytes());
        let word36 = ((self.flow_label & 0xF_FFFF) << 12) | u32::from(self.packet_rate & 0x3F);
        b[36..40].copy_from_slice(&word36.to_be_bytes());
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = put_bits(self.sl, 0, 4) | put_bits(u8::from(self.subnet_local), 4, 1);
        b[43] = put_bits(self.local_ack_timeout, 0, 5);
    }
}

// ---------------------------------------------------------------------------------------
// REQ
// ---------------------------------------------------------------------------------------

cm_view! {
    /// A view of a REQ MAD (IBTA table 106). Bit fields are read whole by the repr.
    CmReq, private_data_at = 140, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Vendor ID (5, 24 bits): ECE's vendor, the options ride in the MAD header's
        /// attribute modifier (the kernel's `cm_format_req`).
        vendor_id, set_vendor_id: u32 = D + 5..D + 8;
        /// Service ID (8).
        service_id, set_service_id: u64 = D + 8..D + 16;
        /// Local CA GUID (16).
        local_ca_guid, set_local_ca_guid: u64 = D + 16..D + 24;
        /// Local Q_Key (28).
        local_qkey, set_local_qkey: u32 = D + 28..D + 32;
        /// Local QPN (32, 24 bits).
        local_qpn_raw, set_local_qpn_raw: u32 = D + 32..D + 35;
        /// Responder resources (35).
        responder_resources, set_responder_resources: u8 = D + 35..D + 36;
        /// Local EECN (36, 24 bits).
        local_eecn, set_local_eecn: u32 = D + 36..D + 39;
        /// Initiator depth (39).
        initiator_depth, set_initiator_depth: u8 = D + 39..D + 40;
        /// Remote EECN (40, 24 bits).
        remote_eecn, set_remote_eecn: u32 = D + 40..D + 43;
        /// Byte 43: remote CM response timeout (5), transport service type (2), end-to-end
        /// flow control (1).
        byte43, set_byte43: u8 = D + 43..D + 44;
        /// Starting PSN (44, 24 bits).
        starting_psn_raw, set_starting_psn_raw: u32 = D + 44..D + 47;
        /// Byte 47: local CM response timeout (5), retry count (3).
        byte47, set_byte47: u8 = D + 47..D + 48;
        /// Partition key (48).
        pkey, set_pkey: u16 = D + 48..D + 50;
        /// Byte 50: path packet payload MTU (4), RDC exists (1), RNR retry count (3).
        byte50, set_byte50: u8 = D + 50..D + 51;
        /// Byte 51: max CM retries (4), SRQ (1), extended transport type (3).
        byte51, set_byte51: u8 = D + 51..D + 52;
    }
}

impl<T: AsRef<[u8]>> CmReq<T> {
    /// Local QPN.
    pub fn local_qpn(&self) -> Qpn {
        Qpn::from_wire(self.local_qpn_raw())
    }
    /// Starting PSN.
    pub fn starting_psn(&self) -> Psn {
        Psn::new(self.starting_psn_raw())
    }
}

/// An owned REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmReqRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Vendor ID (24 bits): the requester's ECE vendor, 0 without ECE.
    pub vendor_id: u32,
    /// Service ID (for rdma_cm: port space and port, see [`PortSpace::service_id`]).
    pub service_id: u64,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Local QPN.
    pub local_qpn: Qpn,
    /// Responder resources (RDMA READ / atomic depth offered).
    pub responder_resources: u8,
    /// Local EECN (24 bits; XRC and RD only).
    pub local_eecn: u32,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// Remote CM response timeout (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: 0 RC, 1 UC, 3 extended, see
    /// `extended_transport_type`).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// Starting PSN.
    pub starting_psn: Psn,
    /// Local CM response timeout (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path packet payload MTU (4 bits, IBTA code: 1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// The requester uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; 1 = XRC).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary_path: CmPathRepr,
    /// Alternate path (all zero when there is none).
    pub alternate_path: CmPathRepr,
    /// SAP supported (byte 139, bit 5).
    pub sap_supported: bool,
    /// Private data (rdma_cm puts its [`CmaHdrRepr`] first).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl CmReqRepr {
    /// Parse a REQ from a whole MAD (the common header is not looked at).
    pub fn parse<T: AsRef<[u8]>>(v: &CmReq<T>) -> Result<Self> {
        v.check_len()?;
        let d = v.class_data();
        let (b43, b47, b50, b51) = (v.byte43(), v.byte47(), v.byte50(), v.byte51());
        let alternate = &d[96..96 + PATH_LEN];
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            vendor_id: v.vendor_id(),
            service_id: v.service_id(),
            local_ca_guid: v.local_ca_guid(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            responder_resources: v.responder_resources(),
            local_eecn: v.local_eecn(),
            initiator_depth: v.initiator_depth(),
            remote_eecn: v.remote_eecn(),
            remote_cm_response_timeout: get_bits(b43, 0, 5),
            transport_service_type: get_bits(b43, 5, 2),
            end_to_end_flow_control: get_bits(b43, 7, 1) != 0,
            starting_psn: v.starting_psn(),
            local_cm_response_timeout: get_bits(b47, 0, 5),
            retry_count: get_bits(b47, 5, 3),
            pkey: v.pkey(),
            path_mtu: get_bits(b50, 0, 4),
            rdc_exists: get_bits(b50, 4, 1) != 0,
            rnr_retry_count: get_bits(b50, 5, 3),
            max_cm_retries: get_bits(b51, 0, 4),
            srq: get_bits(b51, 4, 1) != 0,
            extended_transport_type: get_bits(b51, 5, 3),
            primary_path: CmPathRepr::parse_bytes(&d[52..52 + PATH_LEN]),
            alternate_path: CmPathRepr::parse_bytes(alternate),
            sap_supported: get_bits(alternate[43], 5, 1) != 0,
            private_data: array(v.private_data()),
        })
    }

    /// Write the 232 bytes of class data (reserved bits zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmReq<T>) {
        v.class_data_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_vendor_id(self.vendor_id & 0x00FF_FFFF);
        v.set_service_id(self.service_id);
        v.set_local_ca_guid(self.local_ca_guid);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn_raw(self.local_qpn.value());
        v.set_responder_resources(self.responder_resources);
        v.set_local_eecn(self.local_eecn);
        v.set_initiator_depth(self.initiator_depth);
        v.set_remote_eecn(self.remote_eecn);
        v.set_byte43(
            put_bits(self.remote_cm_response_timeout, 0, 5)
                | put_bits(self.transport_service_type, 5, 2)
                | put_bits(u8::from(self.end_to_end_flow_control), 7, 1),
        );
        v.set_starting_psn_raw(self.starting_psn.value());
        v.set_byte47(
            put_bits(self.local_cm_response_timeout, 0, 5) | put_bits(self.retry_count, 5, 3),
        );
        v.set_pkey(self.pkey);
        v.set_byte50(
            put_bits(self.path_mtu, 0, 4)
                | put_bits(u8::from(self.rdc_exists), 4, 1)
                | put_bits(self.rnr_retry_count, 5, 3),
        );
        v.set_byte51(
            put_bits(self.max_cm_retries, 0, 4)
                | put_bits(u8::from(self.srq), 4, 1)
                | put_bits(self.extended_transport_type, 5, 3),
        );
        let d = v.class_data_mut();
        self.primary_path.emit_bytes(&mut d[52..52 + PATH_LEN]);
        self.alternate_path.emit_bytes(&mut d[96..96 + PATH_LEN]);
        d[139] |= put_bits(u8::from(self.sap_supported), 5, 1);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

// ---------------------------------------------------------------------------------------
// MRA
// ---------------------------------------------------------------------------------------

/// Which message an MRA acknowledges or a REJ rejects (2 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMsgResponse {
    /// The REQ (0).
    Req,
    /// The REP (1).
    Rep,
    /// Another message: a LAP (2).
    Other,
    /// The reserved value 3, kept.
    Reserved,
}

impl CmMsgResponse {
    /// From the 2-bit field.
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 0x3 {
            0 => Self::Req,
            1 => Self::Rep,
            2 => Self::Other,
            _ => Self::Reserved,
        }
    }
    /// The 2-bit field.
    pub const fn bits(self) -> u8 {
        match self {
            Self::Req => 0,
            Self::Rep => 1,
            Self::Other => 2,
            Self::Reserved => 3,
        }
    }
}

impl fmt::Display for CmMsgResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Req => "REQ",
            Self::Rep => "REP",
            Self::Other => "OTHER",
            Self::Reserved => "RESERVED",
        })
    }
}

cm_view! {
    /// A view of an MRA MAD (IBTA table 107).
    CmMra, private_data_at = 10, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Remote communication ID (4).
        remote_comm_id, set_remote_comm_id: u32 = D + 4..D + 8;
        /// Byte 8: message MRAed (2), reserved (6).
        byte8, set_byte8: u8 = D + 8..D + 9;
        /// Byte 9: service timeout (5), reserved (3).
        byte9, set_byte9: u8 = D + 9..D + 10;
    }
}

/// An owned MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMraRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The message acknowledged.
    pub message_mraed: CmMsgResponse,
    /// Service timeout (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl CmMraRepr {
    /// Parse an MRA from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmMra<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_mraed: CmMsgResponse::from_bits(get_bits(v.byte8(), 0, 2)),
            service_timeout: get_bits(v.byte9(), 0, 5),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data (reserved bits zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmMra<T>) {
        v.class_data_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_byte8(put_bits(self.message_mraed.bits(), 0, 2));
        v.set_byte9(put_bits(self.service_timeout, 0, 5));
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

// ---------------------------------------------------------------------------------------
// REJ
// ---------------------------------------------------------------------------------------

cm_view! {
    /// A view of a REJ MAD (IBTA table 108).
    CmRej, private_data_at = 84, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Remote communication ID (4).
        remote_comm_id, set_remote_comm_id: u32 = D + 4..D + 8;
        /// Byte 8: message REJected (2), reserved (6).
        byte8, set_byte8: u8 = D + 8..D + 9;
        /// Byte 9: reject info length (7), reserved (1).
        byte9, set_byte9: u8 = D + 9..D + 10;
        /// Reason (10).
        reason, set_reason: u16 = D + 10..D + 12;
    }
}

impl<T: AsRef<[u8]>> CmRej<T> {
    /// Additional rejection information (12, 72 bytes).
    pub fn ari(&self) -> &[u8] {
        &self.buffer.as_ref()[D + 12..D + 12 + REJ_ARI_LEN]
    }
}

/// An owned REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRejRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The message rejected.
    pub message_rejected: CmMsgResponse,
    /// Bytes of `ari` that are meaningful (7 bits).
    pub reject_info_len: u8,
    /// Reason (`enum ib_cm_rej_reason`; 28 = consumer reject, 8 = invalid service ID).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; REJ_ARI_LEN],
    /// Private data.
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl CmRejRepr {
    /// Parse a REJ from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmRej<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            message_rejected: CmMsgResponse::from_bits(get_bits(v.byte8(), 0, 2)),
            reject_info_len: get_bits(v.byte9(), 0, 7),
            reason: v.reason(),
            ari: array(v.ari()),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data (reserved bits zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmRej<T>) {
        v.class_data_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_byte8(put_bits(self.message_rejected.bits(), 0, 2));
        v.set_byte9(put_bits(self.reject_info_len, 0, 7));
        v.set_reason(self.reason);
        v.class_data_mut()[12..12 + REJ_ARI_LEN].copy_from_slice(&self.ari);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

// ---------------------------------------------------------------------------------------
// REP
// ---------------------------------------------------------------------------------------

cm_view! {
    /// A view of a REP MAD (IBTA table 110).
    CmRep, private_data_at = 36, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Remote communication ID (4).
        remote_comm_id, set_remote_comm_id: u32 = D + 4..D + 8;
        /// Local Q_Key (8).
        local_qkey, set_local_qkey: u32 = D + 8..D + 12;
        /// Local QPN (12, 24 bits).
        local_qpn_raw, set_local_qpn_raw: u32 = D + 12..D + 15;
        /// Vendor ID, high byte (15).
        vendor_id_high, set_vendor_id_high: u8 = D + 15..D + 16;
        /// Local EE context number (16, 24 bits).
        local_eecn, set_local_eecn: u32 = D + 16..D + 19;
        /// Vendor ID, middle byte (19).
        vendor_id_middle, set_vendor_id_middle: u8 = D + 19..D + 20;
        /// Starting PSN (20, 24 bits).
        starting_psn_raw, set_starting_psn_raw: u32 = D + 20..D + 23;
        /// Vendor ID, low byte (23).
        vendor_id_low, set_vendor_id_low: u8 = D + 23..D + 24;
        /// Responder resources (24).
        responder_resources, set_responder_resources: u8 = D + 24..D + 25;
        /// Initiator depth (25).
        initiator_depth, set_initiator_depth: u8 = D + 25..D + 26;
        /// Byte 26: target ACK delay (5), failover accepted (2), end-to-end flow control (1).
        byte26, set_byte26: u8 = D + 26..D + 27;
        /// Byte 27: RNR retry count (3), SRQ (1), reserved (4).
        byte27, set_byte27: u8 = D + 27..D + 28;
        /// Local CA GUID (28).
        local_ca_guid, set_local_ca_guid: u64 = D + 28..D + 36;
    }
}

impl<T: AsRef<[u8]>> CmRep<T> {
    /// Local QPN.
    pub fn local_qpn(&self) -> Qpn {
        Qpn::from_wire(self.local_qpn_raw())
    }
    /// Starting PSN.
    pub fn starting_psn(&self) -> Psn {
        Psn::new(self.starting_psn_raw())
    }
    /// Vendor ID (24 bits, in three bytes).
    pub fn vendor_id(&self) -> u32 {
        u32::from_be_bytes([
            0,
            self.vendor_id_high(),
            self.vendor_id_middle(),
            self.vendor_id_low(),
        ])
    }
}

/// An owned REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRepRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID (the REQ's local one).
    pub remote_comm_id: u32,
    /// Local Q_Key.
    pub local_qkey: u32,
    /// Local QPN.
    pub local_qpn: Qpn,
    /// Local EE context number (24 bits; the XRC target's QPN for XRC).
    pub local_eecn: u32,
    /// Starting PSN.
    pub starting_psn: Psn,
    /// Vendor ID (24 bits): ECE's vendor (librdmacm answers with the REQ's), 0 without
    /// ECE.
    pub vendor_id: u32,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The responder uses an SRQ.
    pub srq: bool,
    /// Local CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl CmRepRepr {
    /// Parse a REP from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmRep<T>) -> Result<Self> {
        v.check_len()?;
        let (b26, b27) = (v.byte26(), v.byte27());
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            local_qkey: v.local_qkey(),
            local_qpn: v.local_qpn(),
            local_eecn: v.local_eecn(),
            starting_psn: v.starting_psn(),
            vendor_id: v.vendor_id(),
            responder_resources: v.responder_resources(),
            initiator_depth: v.initiator_depth(),
            target_ack_delay: get_bits(b26, 0, 5),
            failover_accepted: get_bits(b26, 5, 2),
            end_to_end_flow_control: get_bits(b26, 7, 1) != 0,
            rnr_retry_count: get_bits(b27, 0, 3),
            srq: get_bits(b27, 3, 1) != 0,
            local_ca_guid: v.local_ca_guid(),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data (reserved bits zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmRep<T>) {
        v.class_data_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_local_qkey(self.local_qkey);
        v.set_local_qpn_raw(self.local_qpn.value());
        v.set_local_eecn(self.local_eecn);
        v.set_starting_psn_raw(self.starting_psn.value());
        let [_, high, middle, low] = self.vendor_id.to_be_bytes();
        v.set_vendor_id_high(high);
        v.set_vendor_id_middle(middle);
        v.set_vendor_id_low(low);
        v.set_responder_resources(self.responder_resources);
        v.set_initiator_depth(self.initiator_depth);
        v.set_byte26(
            put_bits(self.target_ack_delay, 0, 5)
                | put_bits(self.failover_accepted, 5, 2)
                | put_bits(u8::from(self.end_to_end_flow_control), 7, 1),
        );
        v.set_byte27(put_bits(self.rnr_retry_count, 0, 3) | put_bits(u8::from(self.srq), 3, 1));
        v.set_local_ca_guid(self.local_ca_guid);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

// ---------------------------------------------------------------------------------------
// RTU, DREQ, DREP
// ---------------------------------------------------------------------------------------

cm_view! {
    /// A view of an RTU MAD (IBTA table 111).
    CmRtu, private_data_at = 8, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Remote communication ID (4).
        remote_comm_id, set_remote_comm_id: u32 = D + 4..D + 8;
    }
}

/// An owned RTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmRtuRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

impl CmRtuRepr {
    /// Parse an RTU from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmRtu<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data; `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmRtu<T>) {
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

cm_view! {
    /// A view of a DREQ MAD (IBTA table 112).
    CmDreq, private_data_at = 12, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Remote communication ID (4).
        remote_comm_id, set_remote_comm_id: u32 = D + 4..D + 8;
        /// Remote QPN/EECN (8, 24 bits).
        remote_qpn_raw, set_remote_qpn_raw: u32 = D + 8..D + 11;
    }
}

/// An owned DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDreqRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The remote QPN (or EECN) being disconnected.
    pub remote_qpn: Qpn,
    /// Private data.
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl CmDreqRepr {
    /// Parse a DREQ from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmDreq<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            remote_qpn: Qpn::from_wire(v.remote_qpn_raw()),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data (reserved byte 11 zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmDreq<T>) {
        v.class_data_mut().fill(0);
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.set_remote_qpn_raw(self.remote_qpn.value());
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

cm_view! {
    /// A view of a DREP MAD (IBTA table 113).
    CmDrep, private_data_at = 8, {
        /// Local communication ID (0).
        local_comm_id, set_local_comm_id: u32 = D..D + 4;
        /// Remote communication ID (4).
        remote_comm_id, set_remote_comm_id: u32 = D + 4..D + 8;
    }
}

/// An owned DREP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmDrepRepr {
    /// Local communication ID.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; DREP_PRIVATE_DATA_LEN],
}

impl CmDrepRepr {
    /// Parse a DREP from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmDrep<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            local_comm_id: v.local_comm_id(),
            remote_comm_id: v.remote_comm_id(),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data; `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmDrep<T>) {
        v.set_local_comm_id(self.local_comm_id);
        v.set_remote_comm_id(self.remote_comm_id);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

// ---------------------------------------------------------------------------------------
// SIDR
// ---------------------------------------------------------------------------------------

cm_view! {
    /// A view of a SIDR_REQ MAD (IBTA table 119).
    CmSidrReq, private_data_at = 16, {
        /// Request ID (0).
        request_id, set_request_id: u32 = D..D + 4;
        /// Partition key (4).
        pkey, set_pkey: u16 = D + 4..D + 6;
        /// Service ID (8).
        service_id, set_service_id: u64 = D + 8..D + 16;
    }
}

/// An owned SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmSidrReqRepr {
    /// Request ID.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// Service ID.
    pub service_id: u64,
    /// Private data (rdma_cm puts its [`CmaHdrRepr`] first).
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl CmSidrReqRepr {
    /// Parse a SIDR_REQ from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmSidrReq<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            request_id: v.request_id(),
            pkey: v.pkey(),
            service_id: v.service_id(),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data (reserved bytes 6-7 zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmSidrReq<T>) {
        v.class_data_mut().fill(0);
        v.set_request_id(self.request_id);
        v.set_pkey(self.pkey);
        v.set_service_id(self.service_id);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

cm_view! {
    /// A view of a SIDR_REP MAD (IBTA table 120).
    CmSidrRep, private_data_at = 96, {
        /// Request ID (0).
        request_id, set_request_id: u32 = D..D + 4;
        /// Status (4; 0 = QP valid).
        status, set_status: u8 = D + 4..D + 5;
        /// Additional information length (5).
        additional_info_len, set_additional_info_len: u8 = D + 5..D + 6;
        /// QPN (8, 24 bits).
        qpn_raw, set_qpn_raw: u32 = D + 8..D + 11;
        /// Service ID (12).
        service_id, set_service_id: u64 = D + 12..D + 20;
        /// Q_Key (20).
        qkey, set_qkey: u32 = D + 20..D + 24;
    }
}

impl<T: AsRef<[u8]>> CmSidrRep<T> {
    /// Additional information (24, 72 bytes): a ClassPortInfo when the status redirects.
    pub fn additional_info(&self) -> &[u8] {
        &self.buffer.as_ref()[D + 24..D + 24 + SIDR_REP_INFO_LEN]
    }
}

/// An owned SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmSidrRepRepr {
    /// Request ID (the SIDR_REQ's).
    pub request_id: u32,
    /// Status (`enum ib_cm_sidr_status`; 0 = valid).
    pub status: u8,
    /// Bytes of `additional_info` that are meaningful.
    pub additional_info_len: u8,
    /// The UD QPN serving the service.
    pub qpn: Qpn,
    /// Service ID.
    pub service_id: u64,
    /// Q_Key of that QP.
    pub qkey: u32,
    /// Additional information (ClassPortInfo on redirect).
    pub additional_info: [u8; SIDR_REP_INFO_LEN],
    /// Private data.
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl CmSidrRepRepr {
    /// Parse a SIDR_REP from a whole MAD.
    pub fn parse<T: AsRef<[u8]>>(v: &CmSidrRep<T>) -> Result<Self> {
        v.check_len()?;
        Ok(Self {
            request_id: v.request_id(),
            status: v.status(),
            additional_info_len: v.additional_info_len(),
            qpn: Qpn::from_wire(v.qpn_raw()),
            service_id: v.service_id(),
            qkey: v.qkey(),
            additional_info: array(v.additional_info()),
            private_data: array(v.private_data()),
        })
    }

    /// Write the class data (reserved bytes 6-7 and 11 zero); `v` must hold a whole MAD.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut CmSidrRep<T>) {
        v.class_data_mut().fill(0);
        v.set_request_id(self.request_id);
        v.set_status(self.status);
        v.set_additional_info_len(self.additional_info_len);
        v.set_qpn_raw(self.qpn.value());
        v.set_service_id(self.service_id);
        v.set_qkey(self.qkey);
        v.class_data_mut()[24..24 + SIDR_REP_INFO_LEN].copy_from_slice(&self.additional_info);
        v.private_data_mut().copy_from_slice(&self.private_data);
    }
}

// ---------------------------------------------------------------------------------------
// Any CM MAD
// ---------------------------------------------------------------------------------------

/// The message a CM MAD carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// Connection request.
    Req(CmReqRepr),
    /// Message receipt acknowledgement.
    Mra(CmMraRepr),
    /// Reject.
    Rej(CmRejRepr),
    /// Reply.
    Rep(CmRepRepr),
    /// Ready to use.
    Rtu(CmRtuRepr),
    /// Disconnection request.
    Dreq(CmDreqRepr),
    /// Disconnection reply.
    Drep(CmDrepRepr),
    /// Service ID resolution request.
    SidrReq(CmSidrReqRepr),
    /// Service ID resolution reply.
    SidrRep(CmSidrRepRepr),
    /// ClassPortInfo, LAP or APR: a valid CM attribute whose fields are not modelled; the
    /// class data is kept verbatim.
    Other {
        /// Which attribute (never one of the modelled messages above when parsed).
        attr: CmAttr,
        /// The 232 bytes of class data.
        data: [u8; MAD_DATA_LEN],
    },
}

impl CmMessage {
    /// The attribute this message is sent as.
    pub const fn attr(&self) -> CmAttr {
        match self {
            Self::Req(_) => CmAttr::Req,
            Self::Mra(_) => CmAttr::Mra,
            Self::Rej(_) => CmAttr::Rej,
            Self::Rep(_) => CmAttr::Rep,
            Self::Rtu(_) => CmAttr::Rtu,
            Self::Dreq(_) => CmAttr::Dreq,
            Self::Drep(_) => CmAttr::Drep,
            Self::SidrReq(_) => CmAttr::SidrReq,
            Self::SidrRep(_) => CmAttr::SidrRep,
            Self::Other { attr, .. } => *attr,
        }
    }

    /// Local and remote communication IDs (the request ID twice for SIDR; `None` for
    /// unmodelled attributes). The remote ID of a REQ is 0: it is not yet known.
    pub const fn comm_ids(&self) -> Option<(u32, u32)> {
        Some(match self {
            Self::Req(m) => (m.local_comm_id, 0),
            Self::Mra(m) => (m.local_comm_id, m.remote_comm_id),
            Self::Rej(m) => (m.local_comm_id, m.remote_comm_id),
            Self::Rep(m) => (m.local_comm_id, m.remote_comm_id),
            Self::Rtu(m) => (m.local_comm_id, m.remote_comm_id),
            Self::Dreq(m) => (m.local_comm_id, m.remote_comm_id),
            Self::Drep(m) => (m.local_comm_id, m.remote_comm_id),
            Self::SidrReq(m) => (m.request_id, m.request_id),
            Self::SidrRep(m) => (m.request_id, m.request_id),
            Self::Other { .. } => return None,
        })
    }

    /// The private data (empty for unmodelled attributes).
    pub fn private_data(&self) -> &[u8] {
        match self {
            Self::Req(m) => &m.private_data,
            Self::Mra(m) => &m.private_data,
            Self::Rej(m) => &m.private_data,
            Self::Rep(m) => &m.private_data,
            Self::Rtu(m) => &m.private_data,
            Self::Dreq(m) => &m.private_data,
            Self::Drep(m) => &m.private_data,
            Self::SidrReq(m) => &m.private_data,
            Self::SidrRep(m) => &m.private_data,
            Self::Other { .. } => &[],
        }
    }

    /// The rdma_cm header at the start of a REQ's or SIDR_REQ's private data, if the
    /// service ID is an IP-based rdma_cm one and the header parses.
    pub fn cma_hdr(&self) -> Option<CmaHdrRepr> {
        let (sid, pd): (u64, &[u8]) = match self {
            Self::Req(m) => (m.service_id, &m.private_data),
            Self::SidrReq(m) => (m.service_id, &m.private_data),
            _ => return None,
        };
        PortSpace::from_service_id(sid)?;
        CmaHdrRepr::parse(&CmaHdr::new_checked(pd).ok()?).ok()
    }

    /// Parse the message of a whole MAD whose attribute ID is `attr`.
    pub fn parse<T: AsRef<[u8]>>(attr: CmAttr, mad: &Mad<T>) -> Result<Self> {
        mad.check_len()?;
        let b = mad.as_bytes();
        Ok(match attr {
            CmAttr::Req => Self::Req(CmReqRepr::parse(&CmReq::new_unchecked(b))?),
            CmAttr::Mra => Self::Mra(CmMraRepr::parse(&CmMra::new_unchecked(b))?),
            CmAttr::Rej => Self::Rej(CmRejRepr::parse(&CmRej::new_unchecked(b))?),
            CmAttr::Rep => Self::Rep(CmRepRepr::parse(&CmRep::new_unchecked(b))?),
            CmAttr::Rtu => Self::Rtu(CmRtuRepr::parse(&CmRtu::new_unchecked(b))?),
            CmAttr::Dreq => Self::Dreq(CmDreqRepr::parse(&CmDreq::new_unchecked(b))?),
            CmAttr::Drep => Self::Drep(CmDrepRepr::parse(&CmDrep::new_unchecked(b))?),
            CmAttr::SidrReq => Self::SidrReq(CmSidrReqRepr::parse(&CmSidrReq::new_unchecked(b))?),
            CmAttr::SidrRep => Self::SidrRep(CmSidrRepRepr::parse(&CmSidrRep::new_unchecked(b))?),
            CmAttr::ClassPortInfo | CmAttr::Lap | CmAttr::Apr => Self::Other {
                attr,
                data: array(&b[D..MAD_LEN]),
            },
        })
    }

    /// Write the 232 bytes of class data into a whole MAD (the header is untouched).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) {
        let b = mad.as_bytes_mut();
        match self {
            Self::Req(m) => m.emit(&mut CmReq::new_unchecked(b)),
            Self::Mra(m) => m.emit(&mut CmMra::new_unchecked(b)),
            Self::Rej(m) => m.emit(&mut CmRej::new_unchecked(b)),
            Self::Rep(m) => m.emit(&mut CmRep::new_unchecked(b)),
            Self::Rtu(m) => m.emit(&mut CmRtu::new_unchecked(b)),
            Self::Dreq(m) => m.emit(&mut CmDreq::new_unchecked(b)),
            Self::Drep(m) => m.emit(&mut CmDrep::new_unchecked(b)),
            Self::SidrReq(m) => m.emit(&mut CmSidrReq::new_unchecked(b)),
            Self::SidrRep(m) => m.emit(&mut CmSidrRep::new_unchecked(b)),
            Self::Other { data, .. } => b[D..MAD_LEN].copy_from_slice(data),
        }
    }
}

impl fmt::Display for CmMessage {
    /// One line: message type, communication IDs, QPNs, starting PSN, service ID and the
    /// private data length; for IP-based rdma_cm requests, the addresses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.attr().name())?;
        let sid = |f: &mut fmt::Formatter<'_>, sid: u64| -> fmt::Result {
            write!(f, " sid={sid:#018x}")?;
            if let Some((ps, port)) = PortSpace::from_service_id(sid) {
                write!(f, "({ps}:{port})")?;
            }
            Ok(())
        };
        match self {
            Self::Req(m) => {
                write!(f, " lcid={:#x}", m.local_comm_id)?;
                sid(f, m.service_id)?;
                write!(
                    f,
                    " qpn={} psn={} qkey={:#x}",
                    m.local_qpn, m.starting_psn, m.local_qkey
                )?;
            }
            Self::Rep(m) => write!(
                f,
                " lcid={:#x} rcid={:#x} qpn={} psn={}",
                m.local_comm_id, m.remote_comm_id, m.local_qpn, m.starting_psn
            )?,
            Self::Rej(m) => write!(
                f,
                " lcid={:#x} rcid={:#x} rejected={} reason={}",
                m.local_comm_id, m.remote_comm_id, m.message_rejected, m.reason
            )?,
            Self::Mra(m) => write!(
                f,
                " lcid={:#x} rcid={:#x} mraed={} timeout={}",
                m.local_comm_id, m.remote_comm_id, m.message_mraed, m.service_timeout
            )?,
            Self::Dreq(m) => write!(
                f,
                " lcid={:#x} rcid={:#x} rqpn={}",
                m.local_comm_id, m.remote_comm_id, m.remote_qpn
            )?,
            Self::Rtu(_) | Self::Drep(_) => {
                if let Some((l, r)) = self.comm_ids() {
                    write!(f, " lcid={l:#x} rcid={r:#x}")?;
                }
            }
            Self::SidrReq(m) => {
                write!(f, " reqid={:#x} pkey={:#06x}", m.request_id, m.pkey)?;
                sid(f, m.service_id)?;
            }
            Self::SidrRep(m) => {
                write!(
                    f,
                    " reqid={:#x} status={} qpn={} qkey={:#x}",
                    m.request_id, m.status, m.qpn, m.qkey
                )?;
                sid(f, m.service_id)?;
            }
            Self::Other { data, .. } => return write!(f, " len={}", data.len()),
        }
        write!(f, " pd={}", self.private_data().len())?;
        if let Some(h) = self.cma_hdr() {
            write!(f, " cma{{{h}}}")?;
        }
        Ok(())
    }
}

/// An owned CM MAD: the common header and the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMadRepr {
    /// The common MAD header; its attribute ID matches `message` (emit enforces it).
    pub header: MadRepr,
    /// The message.
    pub message: CmMessage,
}

impl CmMadRepr {
    /// A CM message with the header the kernel CM sends it with (method SEND).
    pub const fn new(tid: u64, message: CmMessage) -> Self {
        Self {
            header: MadRepr::cm_send(message.attr().id(), tid),
            message,
        }
    }

    /// Parse a whole CM MAD: base version 1, class 0x07 version 2, a CM attribute ID.
    pub fn parse<T: AsRef<[u8]>>(mad: &Mad<T>) -> Result<Self> {
        let header = MadRepr::parse(mad)?;
        if !header.is_cm() {
            return Err(WireError::NotCmMad {
                mgmt_class: header.mgmt_class,
                class_version: header.class_version,
            });
        }
        let attr =
            CmAttr::from_id(header.attr_id).ok_or(WireError::UnknownCmAttribute(header.attr_id))?;
        Ok(Self {
            header,
            message: CmMessage::parse(attr, mad)?,
        })
    }

    /// Write all 256 bytes; the attribute ID written is the message's.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut Mad<T>) {
        self.header.emit(mad);
        mad.set_attr_id(self.message.attr().id());
        self.message.emit(mad);
    }
}
