//! Entry points shared by the cargo-fuzz targets and by the stable test that replays their
//! corpus, so CI exercises the same code the fuzzer does.

use std::fmt::Write as _;

use crate::cm::{CmMadRepr, CmaHdr, CmaHdrRepr};
use crate::icrc::{self, UdpEndpoints};
use crate::ip::parse_ip_udp;
use crate::mad::{MAD_LEN, Mad, MadRepr};
use crate::pcap::{CaptureReader, FrameKind};
use crate::pretty::{GsiSummary, Summary};
use crate::{RocePacket, RoceRepr, grh};

/// Feed arbitrary bytes, as an IP datagram and as a bare RoCE packet, through every parser,
/// the pretty printer, the ICRC verifiers and parse → emit. Panics only if an invariant breaks
/// (parse → emit must reproduce the headers).
pub fn packet(data: &[u8]) {
    if let Ok(d) = parse_ip_udp(data) {
        let _ = icrc::verify_exact(d.ip_header, d.udp_header, d.payload);
        roce(d.payload);
    }
    roce(data);
    let _ = grh::parse_grh(data);
    mad(data);
}

/// Feed arbitrary bytes as a MAD (the payload of a UD SEND to QP1) through the MAD and CM
/// parsers, the rdma_cm header parser and the summary. Panics only if an invariant breaks:
/// whatever parses must emit to bytes that parse back to the same repr, and the common
/// header must come back byte for byte.
pub fn mad(data: &[u8]) {
    let _ = GsiSummary(data).to_string();
    if let Ok(h) = CmaHdr::new_checked(data).and_then(|v| CmaHdrRepr::parse(&v)) {
        let mut out = [0u8; crate::cm::CMA_HDR_LEN];
        h.emit(&mut CmaHdr::new_unchecked(&mut out[..]));
        assert_eq!(
            CmaHdrRepr::parse(&CmaHdr::new_unchecked(&out[..])),
            Ok(h),
            "cma_hdr parse -> emit -> parse changed it"
        );
    }
    let Ok(view) = Mad::new_checked(data) else {
        return;
    };
    if let Ok(header) = MadRepr::parse(&view) {
        let mut out = [0u8; MAD_LEN];
        header.emit(&mut Mad::new_unchecked(&mut out[..]));
        assert_eq!(out[..18], data[..18], "MAD header parse -> emit changed it");
        assert_eq!(
            out[20..24],
            data[20..24],
            "MAD header parse -> emit changed it"
        );
    }
    let Ok(cm) = CmMadRepr::parse(&view) else {
        return;
    };
    let _ = cm.message.to_string();
    let mut out = [0u8; MAD_LEN];
    cm.emit(&mut Mad::new_unchecked(&mut out[..]));
    assert_eq!(
        CmMadRepr::parse(&Mad::new_unchecked(&out[..])),
        Ok(cm),
        "CM parse -> emit -> parse changed the message"
    );
}

fn roce(data: &[u8]) {
    let ep = UdpEndpoints {
        src: [10, 99, 0, 12].into(),
        dst: [10, 99, 0, 11].into(),
        src_port: 49441,
        dst_port: icrc::ROCE_V2_PORT,
    };
    let _ = icrc::verify_udp_socket(&ep, data);
    let Ok(p) = RocePacket::new_checked(data) else {
        return;
    };
    let mut line = String::new();
    let _ = write!(line, "{}", Summary(&p));
    let Ok(repr) = RoceRepr::parse(&p) else {
        return;
    };
    let mut again = vec![0u8; repr.buffer_len()];
    if repr.emit_with_payload(p.payload(), &mut again).is_ok() {
        let keep = again.len() - crate::ICRC_LEN - p.pad_len();
        assert_eq!(
            &again[..keep],
            &data[..keep],
            "parse -> emit changed the packet"
        );
    }
}

/// Feed arbitrary bytes as a capture file (pcap or pcapng) through the reader, classify every
/// frame and run RoCE frames through [`packet`]'s checks. Never panics.
pub fn capture(data: &[u8]) {
    let Ok(reader) = CaptureReader::new(data, "fuzz") else {
        return;
    };
    // The reader ends after its first error, and every frame consumes input: bounded.
    for frame in reader {
        let Ok(frame) = frame else {
            break;
        };
        if let FrameKind::Roce(d) = frame.classify() {
            let _ = icrc::verify_exact(d.ip_header, d.udp_header, d.payload);
            roce(d.payload);
        }
    }
}
