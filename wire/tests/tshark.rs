//! What our pcap writer synthesizes is RoCEv2 to Wireshark: tshark dissects the BTH of
//! IPv4 and IPv6 frames with the fields we wrote. tshark must be installed
//! (scripts/test-all.sh installs it); a missing tool fails the test instead of skipping it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use softroce_wire::icrc::{self, IcrcCheck, UdpEndpoints};
use softroce_wire::pcap::{CaptureReader, CaptureWriter, FrameKind};
use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RoceRepr};

fn roce_packet(src: SocketAddr, dst: SocketAddr, opcode: Opcode, qpn: u32, psn: u32) -> Vec<u8> {
    let mut bth = BthRepr::new(opcode, Qpn::from_wire(qpn), Psn::new(psn));
    bth.ack_req = true;
    let repr = RoceRepr::new(bth, ExtRepr::default(), 6);
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(b"hello!", &mut buf).unwrap();
    icrc::set_icrc_for_udp_socket(&UdpEndpoints::between(src, dst), &mut buf).unwrap();
    buf
}

#[test]
fn tshark_dissects_our_ipv4_and_ipv6_frames_as_infiniband_bth() {
    let flows: [(&str, &str, Opcode, u32, u32); 2] = [
        (
            "127.0.0.1:49441",
            "127.0.0.2:4791",
            Opcode::RC_SEND_ONLY,
            0x11,
            7,
        ),
        (
            "[::1]:50000",
            "[::1]:4791",
            Opcode::UC_SEND_ONLY,
            0xabcd,
            0x123456,
        ),
    ];
    let dir = std::env::temp_dir().join(format!("softroce-wire-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ours.pcap");
    let mut writer = CaptureWriter::create(&path).unwrap();
    for (i, &(src, dst, op, qpn, psn)) in flows.iter().enumerate() {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let packet = roce_packet(src, dst, op, qpn, psn);
        writer
            .write_roce(Duration::from_millis(i as u64), src, dst, &packet)
            .unwrap();
    }
    drop(writer.into_inner());

    // Our reader verifies both ICRCs against the headers the writer synthesized.
    let mut frames = 0;
    for frame in CaptureReader::open(&path).unwrap() {
        let frame = frame.unwrap();
        let FrameKind::Roce(d) = frame.classify() else {
            panic!("not RoCE: {frame:?}")
        };
        assert_eq!(
            icrc::verify_exact(d.ip_header, d.udp_header, d.payload),
            Ok(IcrcCheck::Exact)
        );
        frames += 1;
    }
    assert_eq!(frames, flows.len());

    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"])
        .args(["-e", "infiniband.bth.psn", "-e", "infiniband.bth.a"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run tshark ({e}): run scripts/test-all.sh, which installs it")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let expected: Vec<String> = flows
        .iter()
        .map(|&(_, _, op, qpn, psn)| format!("{},{qpn:#08x},{psn},1", op.0))
        .collect();
    assert_eq!(lines, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
