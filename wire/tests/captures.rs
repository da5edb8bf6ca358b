//! Every RoCEv2 packet two Linux rdma_rxe peers exchanged (testdata/captures) parses, its ICRC
//! verifies in both modes, and parse → emit reproduces it byte for byte.

use std::path::PathBuf;

use softroce_wire::icrc::{self, IcrcCheck, UdpEndpoints};
use softroce_wire::ip::Ipv4Fields;
use softroce_wire::pcap::{CaptureReader, FrameKind};
use softroce_wire::{RocePacket, RoceRepr};

fn captures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/captures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "captures missing from {}", dir.display());
    files
}

#[test]
fn every_rxe_packet_parses_verifies_and_reemits_identically() {
    let mut total = 0;
    for path in captures() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let mut reader = CaptureReader::open(&path).unwrap();
        let mut roce = 0;
        while let Some(frame) = reader.next_frame() {
            let frame = frame.unwrap();
            let FrameKind::Roce(d) = reader.classify(&frame) else {
                continue;
            };
            roce += 1;
            let packet = RocePacket::new_checked(d.payload)
                .unwrap_or_else(|e| panic!("{name} packet {roce}: {e}"));
            assert_eq!(
                icrc::verify_exact(d.ip_header, d.udp_header, d.payload),
                Ok(IcrcCheck::Exact),
                "{name} packet {roce}"
            );
            let ep = UdpEndpoints {
                src: d.src,
                dst: d.dst,
                src_port: d.src_port,
                dst_port: d.dst_port,
            };
            let ip = Ipv4Fields::parse(d.ip_header).unwrap();
            assert_eq!(
                icrc::verify_udp_socket(&ep, d.payload),
                Ok(IcrcCheck::RecoveredIpv4Id {
                    id: ip.id,
                    dont_fragment: true
                }),
                "{name} packet {roce}: the solved IPv4 ID must be the captured one"
            );
            let repr = RoceRepr::parse(&packet).unwrap();
            let mut again = vec![0u8; repr.buffer_len()];
            repr.emit_with_payload(packet.payload(), &mut again)
                .unwrap();
            RocePacket::new_unchecked(&mut again[..]).set_icrc(packet.icrc());
            assert_eq!(again, d.payload, "{name} packet {roce} re-emitted");
        }
        if !name.contains("_oob") {
            assert!(roce > 0, "{name} holds RoCE traffic");
        }
        total += roce;
    }
    assert!(total > 2500, "only {total} RoCE packets found");
}
