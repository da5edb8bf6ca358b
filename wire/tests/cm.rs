//! CM MADs against hand-built bytes placed at the offsets of the kernel's
//! `include/rdma/ibta_vol1_c12.h` (`CM_FIELD*_LOC(struct, byte, width)` and
//! `CM_FIELD_BLOC(struct, byte, bit, width)`; byte offsets there are within the class data,
//! i.e. after the 24-byte `struct ib_mad_hdr`, and bit 0 is the most significant).

use std::net::Ipv4Addr;

use proptest::prelude::*;
use softroce_wire::cm::{
    CmAttr, CmMadRepr, CmMessage, CmMsgResponse, CmaAddrs, CmaHdrRepr, PortSpace,
};
use softroce_wire::mad::{MAD_LEN, Mad};
use softroce_wire::{Gid, Header, Psn, Qpn, WireError};

/// A CM MAD with the kernel's header (class 0x07 version 2, method SEND, TID 0x2a) for
/// `attr`, and `fields` placed at their class-data offsets (+24 in the MAD).
fn mad(attr: u16, fields: &[(usize, &[u8])]) -> [u8; MAD_LEN] {
    let mut b = [0u8; MAD_LEN];
    b[..24].copy_from_slice(&[
        0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    b[16..18].copy_from_slice(&attr.to_be_bytes());
    for &(off, bytes) in fields {
        b[24 + off..24 + off + bytes.len()].copy_from_slice(bytes);
    }
    b
}

fn parse(b: &[u8]) -> Result<CmMadRepr, WireError> {
    CmMadRepr::parse(&Mad::new_checked(b)?)
}

fn emit(r: &CmMadRepr) -> [u8; MAD_LEN] {
    let mut out = [0xa5u8; MAD_LEN];
    r.emit(&mut Mad::new_unchecked(&mut out[..]));
    out
}

fn mapped(ip: [u8; 4]) -> [u8; 16] {
    Gid::from_ipv4(Ipv4Addr::from(ip)).to_bytes()
}

/// rdma_cm's header for 10.0.0.2:40000 -> 10.0.0.1 (see cma.rs for its layout).
const CMA_V4: [u8; 36] = [
    0x00, 0x40, 0x9c, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 10, 0, 0, 1,
];

#[test]
fn req_fields_sit_at_table_106_offsets() {
    let lgid = mapped([10, 0, 0, 2]);
    let rgid = mapped([10, 0, 0, 1]);
    let b = mad(
        0x0010,
        &[
            (0, &[0x11, 0x22, 0x33, 0x44]), // CM_REQ_LOCAL_COMM_ID (0, 32)
            (5, &[0x00, 0x15, 0xb3]),       // CM_REQ_VENDOR_ID (5, 24): ECE's vendor
            (8, &0x0000_0000_0106_9c41u64.to_be_bytes()), // CM_REQ_SERVICE_ID (8)
            (16, &0x0002_c903_00a1_b2c3u64.to_be_bytes()), // CM_REQ_LOCAL_CA_GUID (16)
            (28, &[0x12, 0x34, 0x56, 0x78]), // CM_REQ_LOCAL_Q_KEY (28, 32)
            (32, &[0x00, 0x00, 0x11, 0x10]), // LOCAL_QPN (32, 24), RESPONDER_RESOURCES (35, 8)
            (36, &[0x00, 0x00, 0x07, 0x0f]), // LOCAL_EECN (36, 24), INITIATOR_DEPTH (39, 8)
            // REMOTE_EECN (40, 24); byte 43: REMOTE_CM_RESPONSE_TIMEOUT (43, 5) = 20,
            // TRANSPORT_SERVICE_TYPE (43[5], 2) = 1 (UC), END_TO_END_FLOW_CONTROL (43[7]) = 1.
            (40, &[0x00, 0x00, 0x09, 0b1010_0011]),
            // STARTING_PSN (44, 24); byte 47: LOCAL_CM_RESPONSE_TIMEOUT (47, 5) = 18,
            // RETRY_COUNT (47[5], 3) = 6.
            (44, &[0xab, 0xcd, 0xef, 0b1001_0110]),
            (48, &[0xff, 0xff]), // CM_REQ_PARTITION_KEY (48, 16)
            // Byte 50: PATH_PACKET_PAYLOAD_MTU (50, 4) = 3, RDC_EXISTS (50[4]) = 1,
            // RNR_RETRY_COUNT (50[5], 3) = 7.
            // Byte 51: MAX_CM_RETRIES (51, 4) = 15, SRQ (51[4]) = 1,
            // EXTENDED_TRANSPORT_TYPE (51[5], 3) = 1.
            (50, &[0b0011_1111, 0b1111_1001]),
            (52, &[0xff, 0xff, 0xff, 0xfe]), // PRIMARY_LOCAL/REMOTE_PORT_LID (52, 54)
            (56, &lgid),                     // PRIMARY_LOCAL_PORT_GID (56, 128)
            (72, &rgid),                     // PRIMARY_REMOTE_PORT_GID (72, 128)
            // PRIMARY_FLOW_LABEL (88, 20) = 0x12345, PRIMARY_PACKET_RATE (91[2], 6) = 0x2a.
            (88, &[0x12, 0x34, 0x50, 0x2a]),
            // TRAFFIC_CLASS (92), HOP_LIMIT (93), SL (94, 4) = 3, SUBNET_LOCAL (94[4]) = 1,
            // LOCAL_ACK_TIMEOUT (95, 5) = 14.
            (92, &[0x68, 0x40, 0b0011_1000, 14 << 3]),
            (96, &[0x00, 0x01, 0x00, 0x02]), // ALTERNATE_LOCAL/REMOTE_PORT_LID (96, 98)
            (100, &rgid),                    // ALTERNATE_LOCAL_PORT_GID (100)
            (116, &lgid),                    // ALTERNATE_REMOTE_PORT_GID (116)
            (132, &[0xff, 0xff, 0xf0, 0x3f]), // ALTERNATE_FLOW_LABEL (132, 20), RATE (135[2], 6)
            // ALTERNATE TC (136), HOP_LIMIT (137), SL (138, 4) = 15, SUBNET_LOCAL (138[4]) = 0,
            // LOCAL_ACK_TIMEOUT (139, 5) = 31, SAP_SUPPORTED (139[5]) = 1.
            (136, &[0x01, 0x02, 0xf0, 0b1111_1100]),
            (140, &CMA_V4), // CM_REQ_PRIVATE_DATA (140, 736 bits)
            (231, &[0x99]), // last private data byte
        ],
    );
    let r = parse(&b).unwrap();
    assert_eq!(r.header.tid, 0x2a);
    let CmMessage::Req(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!(m.local_comm_id, 0x1122_3344);
    assert_eq!(m.vendor_id, 0x15b3);
    assert_eq!(m.service_id, PortSpace::Tcp.service_id(40001));
    assert_eq!(m.local_ca_guid, 0x0002_c903_00a1_b2c3);
    assert_eq!(m.local_qkey, 0x1234_5678);
    assert_eq!(m.local_qpn, Qpn::from_wire(0x11));
    assert_eq!(m.responder_resources, 0x10);
    assert_eq!(m.local_eecn, 0x07);
    assert_eq!(m.initiator_depth, 0x0f);
    assert_eq!(m.remote_eecn, 0x09);
    assert_eq!(m.remote_cm_response_timeout, 20);
    assert_eq!(m.transport_service_type, 1);
    assert!(m.end_to_end_flow_control);
    assert_eq!(m.starting_psn, Psn::new(0xabcdef));
    assert_eq!(m.local_cm_response_timeout, 18);
    assert_eq!(m.retry_count, 6);
    assert_eq!(m.pkey, 0xffff);
    assert_eq!(m.path_mtu, 3);
    assert!(m.rdc_exists);
    assert_eq!(m.rnr_retry_count, 7);
    assert_eq!(m.max_cm_retries, 15);
    assert!(m.srq);
    assert_eq!(m.extended_transport_type, 1);
    let p = m.primary_path;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xfffe));
    assert_eq!(p.local_gid.to_string(), "::ffff:10.0.0.2");
    assert_eq!(p.remote_gid.to_string(), "::ffff:10.0.0.1");
    assert_eq!((p.flow_label, p.packet_rate), (0x12345, 0x2a));
    assert_eq!((p.traffic_class, p.hop_limit), (0x68, 0x40));
    assert_eq!((p.sl, p.subnet_local, p.local_ack_timeout), (3, true, 14));
    let a = m.alternate_path;
    assert_eq!((a.local_lid, a.remote_lid), (1, 2));
    assert_eq!(a.local_gid.to_string(), "::ffff:10.0.0.1");
    assert_eq!((a.flow_label, a.packet_rate), (0xfffff, 0x3f));
    assert_eq!((a.traffic_class, a.hop_limit), (1, 2));
    assert_eq!((a.sl, a.subnet_local, a.local_ack_timeout), (15, false, 31));
    assert!(m.sap_supported);
    assert_eq!(m.private_data[..36], CMA_V4);
    assert_eq!(m.private_data[91], 0x99);
    assert_eq!(
        r.message.cma_hdr(),
        Some(CmaHdrRepr {
            src_port: 40000,
            addrs: CmaAddrs::V4 {
                src: Ipv4Addr::new(10, 0, 0, 2),
                dst: Ipv4Addr::new(10, 0, 0, 1)
            }
        })
    );
    assert_eq!(
        r.message.to_string(),
        "REQ lcid=0x11223344 sid=0x0000000001069c41(tcp:40001) qpn=0x11 psn=11259375 \
         qkey=0x12345678 pd=92 cma{src=10.0.0.2:40000 dst=10.0.0.1}"
    );
    assert_eq!(emit(&r), b);
}

#[test]
fn rep_fields_sit_at_table_110_offsets() {
    let b = mad(
        0x0013,
        &[
            (0, &[0, 0, 0, 0x21]),           // CM_REP_LOCAL_COMM_ID (0)
            (4, &[0x11, 0x22, 0x33, 0x44]),  // CM_REP_REMOTE_COMM_ID (4)
            (8, &[0, 0, 0, 0]),              // CM_REP_LOCAL_Q_KEY (8)
            (12, &[0x00, 0x00, 0x12, 0x00]), // CM_REP_LOCAL_QPN (12, 24), VENDOR_ID_H (15)
            (16, &[0x00, 0x00, 0x34, 0x15]), // LOCAL_EE_CONTEXT_NUMBER (16, 24), VENDOR_ID_M
            (20, &[0x65, 0x43, 0x21, 0xb3]), // CM_REP_STARTING_PSN (20, 24), VENDOR_ID_L
            // RESPONDER_RESOURCES (24), INITIATOR_DEPTH (25); byte 26: TARGET_ACK_DELAY
            // (26, 5) = 15, FAILOVER_ACCEPTED (26[5], 2) = 1, END_TO_END_FLOW_CONTROL
            // (26[7]) = 1; byte 27: RNR_RETRY_COUNT (27, 3) = 7, SRQ (27[3]) = 1.
            (24, &[0x01, 0x02, 0b0111_1011, 0b1111_0000]),
            (28, &0x0002_c903_0000_0001u64.to_be_bytes()), // CM_REP_LOCAL_CA_GUID (28)
            (36, &[0xde, 0xad]),                           // CM_REP_PRIVATE_DATA (36)
        ],
    );
    let r = parse(&b).unwrap();
    let CmMessage::Rep(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.local_comm_id, m.remote_comm_id), (0x21, 0x1122_3344));
    assert_eq!(m.local_qkey, 0);
    assert_eq!(m.local_qpn, Qpn::from_wire(0x12));
    assert_eq!(m.local_eecn, 0x34);
    assert_eq!(m.starting_psn, Psn::new(0x654321));
    assert_eq!(m.vendor_id, 0x15b3);
    assert_eq!((m.responder_resources, m.initiator_depth), (1, 2));
    assert_eq!(
        (
            m.target_ack_delay,
            m.failover_accepted,
            m.end_to_end_flow_control
        ),
        (15, 1, true)
    );
    assert_eq!((m.rnr_retry_count, m.srq), (7, true));
    assert_eq!(m.local_ca_guid, 0x0002_c903_0000_0001);
    assert_eq!(m.private_data[..2], [0xde, 0xad]);
    assert_eq!(m.private_data.len(), 196);
    assert_eq!(
        r.message.to_string(),
        "REP lcid=0x21 rcid=0x11223344 qpn=0x12 psn=6636321 pd=196"
    );
    assert_eq!(emit(&r), b);
}

#[test]
fn rtu_dreq_drep_fields_sit_at_tables_111_to_113_offsets() {
    // RTU: LOCAL_COMM_ID (0), REMOTE_COMM_ID (4), PRIVATE_DATA (8, 1792 bits).
    let b = mad(0x0014, &[(0, &[0, 0, 0, 1]), (4, &[0, 0, 0, 2]), (8, &[7])]);
    let r = parse(&b).unwrap();
    let CmMessage::Rtu(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!(
        (m.local_comm_id, m.remote_comm_id, m.private_data[0]),
        (1, 2, 7)
    );
    assert_eq!(m.private_data.len(), 224);
    assert_eq!(emit(&r), b);

    // DREQ: REMOTE_QPN_EECN (8, 24), PRIVATE_DATA (12, 1760 bits).
    let b = mad(
        0x0015,
        &[
            (0, &[0, 0, 0, 3]),
            (4, &[0, 0, 0, 4]),
            (8, &[0x00, 0x00, 0x13]),
            (12, &[8]),
        ],
    );
    let r = parse(&b).unwrap();
    let CmMessage::Dreq(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.local_comm_id, m.remote_comm_id), (3, 4));
    assert_eq!(m.remote_qpn, Qpn::from_wire(0x13));
    assert_eq!((m.private_data[0], m.private_data.len()), (8, 220));
    assert_eq!(
        r.message.to_string(),
        "DREQ lcid=0x3 rcid=0x4 rqpn=0x13 pd=220"
    );
    assert_eq!(emit(&r), b);

    // DREP: PRIVATE_DATA (8, 1792 bits).
    let b = mad(0x0016, &[(0, &[0, 0, 0, 4]), (4, &[0, 0, 0, 3]), (8, &[9])]);
    let r = parse(&b).unwrap();
    let CmMessage::Drep(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.local_comm_id, m.remote_comm_id), (4, 3));
    assert_eq!((m.private_data[0], m.private_data.len()), (9, 224));
    assert_eq!(r.message.to_string(), "DREP lcid=0x4 rcid=0x3 pd=224");
    assert_eq!(emit(&r), b);
}

#[test]
fn rej_and_mra_fields_sit_at_tables_107_and_108_offsets() {
    // REJ: MESSAGE_REJECTED (8, 2) = 1 (REP), REJECTED_INFO_LENGTH (9, 7) = 16,
    // REASON (10, 16) = 28, ARI (12, 576 bits), PRIVATE_DATA (84, 1184 bits).
    let b = mad(
        0x0012,
        &[
            (0, &[0, 0, 0, 5]),
            (4, &[0, 0, 0, 6]),
            (8, &[0b0100_0000, 16 << 1, 0x00, 28]),
            (12, &[0xaa; 72]),
            (84, &[0xbb]),
        ],
    );
    let r = parse(&b).unwrap();
    let CmMessage::Rej(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.local_comm_id, m.remote_comm_id), (5, 6));
    assert_eq!(m.message_rejected, CmMsgResponse::Rep);
    assert_eq!((m.reject_info_len, m.reason), (16, 28));
    assert_eq!(m.ari, [0xaa; 72]);
    assert_eq!((m.private_data[0], m.private_data.len()), (0xbb, 148));
    assert_eq!(
        r.message.to_string(),
        "REJ lcid=0x5 rcid=0x6 rejected=REP reason=28 pd=148"
    );
    assert_eq!(emit(&r), b);

    // MRA: MESSAGE_MRAED (8, 2) = 2 (other), SERVICE_TIMEOUT (9, 5) = 23,
    // PRIVATE_DATA (10, 1776 bits).
    let b = mad(
        0x0011,
        &[
            (0, &[0, 0, 0, 7]),
            (4, &[0, 0, 0, 8]),
            (8, &[0b1000_0000, 23 << 3, 0xcc]),
        ],
    );
    let r = parse(&b).unwrap();
    let CmMessage::Mra(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.local_comm_id, m.remote_comm_id), (7, 8));
    assert_eq!(
        (m.message_mraed, m.service_timeout),
        (CmMsgResponse::Other, 23)
    );
    assert_eq!((m.private_data[0], m.private_data.len()), (0xcc, 222));
    assert_eq!(emit(&r), b);
}

#[test]
fn sidr_fields_sit_at_tables_119_and_120_offsets() {
    // SIDR_REQ: REQUESTID (0), PARTITION_KEY (4, 16), SERVICEID (8), PRIVATE_DATA (16).
    let b = mad(
        0x0017,
        &[
            (0, &[0, 0, 0, 9]),
            (4, &[0x80, 0x01]),
            (8, &0x0000_0000_0111_04d2u64.to_be_bytes()),
            (16, &CMA_V4),
        ],
    );
    let r = parse(&b).unwrap();
    let CmMessage::SidrReq(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.request_id, m.pkey), (9, 0x8001));
    assert_eq!(
        PortSpace::from_service_id(m.service_id),
        Some((PortSpace::Udp, 1234))
    );
    assert_eq!(m.private_data.len(), 216);
    assert!(r.message.cma_hdr().is_some());
    assert_eq!(emit(&r), b);

    // SIDR_REP: STATUS (4, 8), ADDITIONAL_INFORMATION_LENGTH (5, 8), QPN (8, 24),
    // SERVICEID (12), Q_KEY (20, 32), ADDITIONAL_INFORMATION (24, 576 bits),
    // PRIVATE_DATA (96, 1088 bits).
    let b = mad(
        0x0018,
        &[
            (0, &[0, 0, 0, 9]),
            (4, &[0x00, 72]),
            (8, &[0x00, 0x00, 0x42]),
            (12, &0x0000_0000_0111_04d2u64.to_be_bytes()),
            (20, &[0x12, 0x34, 0x56, 0x78]),
            (24, &[0x11; 72]),
            (96, &[0x22]),
        ],
    );
    let r = parse(&b).unwrap();
    let CmMessage::SidrRep(m) = r.message else {
        panic!("{r:?}")
    };
    assert_eq!((m.request_id, m.status, m.additional_info_len), (9, 0, 72));
    assert_eq!(m.qpn, Qpn::from_wire(0x42));
    assert_eq!(m.service_id, 0x0111_04d2);
    assert_eq!(m.qkey, 0x1234_5678);
    assert_eq!(m.additional_info, [0x11; 72]);
    assert_eq!((m.private_data[0], m.private_data.len()), (0x22, 136));
    assert_eq!(
        r.message.to_string(),
        "SIDR_REP reqid=0x9 status=0 qpn=0x42 qkey=0x12345678 sid=0x00000000011104d2(udp:1234) \
         pd=136"
    );
    assert_eq!(emit(&r), b);
}

/// Every class-data byte set, parsed and emitted: exactly the reserved bits of the IBTA
/// tables come back as zero, so every field bit is read and written and nothing else is.
#[test]
fn only_reserved_bits_are_dropped() {
    // (attribute, [(class-data offset, bits that survive)]) for every byte that is not
    // wholly a field.
    let cases: [(u16, &[(usize, u8)]); 9] = [
        (
            0x0010,
            &[
                (4, 0),  // rsvd4 (5-7: the vendor ID)
                (24, 0), // rsvd24
                (25, 0),
                (26, 0),
                (27, 0),
                (90, 0xf0),  // flow label low nibble, then 4 reserved bits
                (91, 0x3f),  // 2 reserved bits, packet rate
                (94, 0xf8),  // SL, subnet local, 3 reserved
                (95, 0xf8),  // local ACK timeout, 3 reserved
                (134, 0xf0), // the same for the alternate path
                (135, 0x3f),
                (138, 0xf8),
                (139, 0xfc), // local ACK timeout, SAP supported, 2 reserved
            ],
        ),
        (0x0011, &[(8, 0xc0), (9, 0xf8)]),
        (0x0012, &[(8, 0xc0), (9, 0xfe)]),
        (0x0013, &[(27, 0xf0)]),
        (0x0014, &[]),
        (0x0015, &[(11, 0)]),
        (0x0016, &[]),
        (0x0017, &[(6, 0), (7, 0)]),
        (0x0018, &[(6, 0), (7, 0), (11, 0)]),
    ];
    for (attr, kept) in cases {
        let mut b = mad(attr, &[]);
        b[24..].fill(0xff);
        let out = emit(&parse(&b).unwrap());
        let mut want = b;
        for &(off, mask) in kept {
            want[24 + off] = mask;
        }
        assert_eq!(
            out.to_vec(),
            want.to_vec(),
            "attribute {attr:#06x}: emit(parse(0xff..)) differs"
        );
    }
}

#[test]
fn lap_apr_and_class_port_info_are_valid_and_kept_verbatim() {
    for attr in [CmAttr::ClassPortInfo, CmAttr::Lap, CmAttr::Apr] {
        let mut b = mad(attr.id(), &[]);
        for (i, x) in b[24..].iter_mut().enumerate() {
            *x = i as u8;
        }
        let r = parse(&b).unwrap();
        assert_eq!(r.message.attr(), attr);
        assert!(matches!(r.message, CmMessage::Other { .. }));
        assert_eq!(r.message.comm_ids(), None);
        assert_eq!(emit(&r), b);
    }
}

#[test]
fn short_unknown_and_foreign_mads_are_rejected() {
    let b = mad(0x0010, &[]);
    for n in [0, 24, 100, 255] {
        assert_eq!(
            parse(&b[..n]),
            Err(WireError::Truncated {
                header: Header::Mad,
                need: 256,
                got: n
            })
        );
    }
    for id in [0x0000, 0x0002, 0x000f, 0x001b, 0xffff] {
        assert_eq!(parse(&mad(id, &[])), Err(WireError::UnknownCmAttribute(id)));
    }
    let mut sa = mad(0x0010, &[]);
    sa[1] = 0x03; // subnet administration
    assert_eq!(
        parse(&sa),
        Err(WireError::NotCmMad {
            mgmt_class: 0x03,
            class_version: 2
        })
    );
    let mut v1 = mad(0x0010, &[]);
    v1[2] = 1;
    assert_eq!(
        parse(&v1).unwrap_err().to_string(),
        "MAD class 0x07 version 1 is not CM (0x07 version 2)"
    );
    let mut opa = mad(0x0010, &[]);
    opa[0] = 0x80;
    assert_eq!(parse(&opa), Err(WireError::BadMadBaseVersion(0x80)));
    // A longer buffer (a UD receive with room to spare) parses its first 256 bytes.
    let mut long = [0u8; 300].to_vec();
    long[..256].copy_from_slice(&mad(0x0014, &[]));
    assert!(parse(&long).is_ok());
}

#[test]
fn attribute_ids_follow_ib_cm_h() {
    let ids: Vec<u16> = CmAttr::ALL.iter().map(|a| a.id()).collect();
    assert_eq!(
        ids,
        [
            0x0001, 0x0010, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0017, 0x0018, 0x0019,
            0x001a
        ]
    );
    for a in CmAttr::ALL {
        assert_eq!(CmAttr::from_id(a.id()), Some(a));
    }
}

const MODELLED: [u16; 9] = [
    0x0010, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0017, 0x0018,
];

proptest! {
    /// Any class data under a valid header: parse → emit gives the input back with only the
    /// reserved bits cleared (the mask is what 0xff.. survives, checked above), and parsing
    /// that again gives the same repr.
    #[test]
    fn parse_emit_is_the_input_minus_reserved_bits(
        which in 0usize..MODELLED.len(),
        body in proptest::collection::vec(any::<u8>(), 232),
        tid in any::<u64>(),
        status in any::<u16>(),
    ) {
        let attr = MODELLED[which];
        let mut ones = mad(attr, &[]);
        ones[24..].fill(0xff);
        let mask = emit(&parse(&ones).unwrap());
        let mut b = mad(attr, &[]);
        b[8..16].copy_from_slice(&tid.to_be_bytes());
        b[4..6].copy_from_slice(&status.to_be_bytes());
        b[24..].copy_from_slice(&body);
        let r = parse(&b).unwrap();
        let out = emit(&r);
        for i in 24..MAD_LEN {
            prop_assert_eq!(out[i], b[i] & mask[i], "byte {}", i);
        }
        prop_assert_eq!(out[..24].to_vec(), b[..24].to_vec());
        prop_assert_eq!(parse(&out).unwrap(), r);
    }

    /// Arbitrary bytes never panic the parser, and whatever parses emits back to itself.
    #[test]
    fn arbitrary_mads_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(r) = parse(&bytes) {
            let again = parse(&emit(&r)).unwrap();
            prop_assert_eq!(again, r);
            let _ = r.message.to_string();
        }
    }

    /// Port space and port survive the trip through a service ID.
    #[test]
    fn service_ids_round_trip(port in any::<u16>(), which in 0usize..4) {
        let ps = [PortSpace::IpoIb, PortSpace::Tcp, PortSpace::Udp, PortSpace::Ib][which];
        let sid = ps.service_id(port);
        prop_assert_eq!(sid >> 32, 0);
        prop_assert_eq!(PortSpace::from_service_id(sid), Some((ps, port)));
    }
}
