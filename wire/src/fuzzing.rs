//! Entry points shared by the cargo-fuzz targets and by the stable test that replays their
//! corpus, so CI exercises the same code the fuzzer does.

use std::fmt::Write as _;

use crate::icrc::{self, UdpEndpoints};
use crate::ip::parse_ip_udp;
use crate::pcap::{CaptureReader, FrameKind};
use crate::pretty::Summary;
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
