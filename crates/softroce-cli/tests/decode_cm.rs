//! `softroce decode` on a capture of an rdma_cm connection's CM MADs (UD SENDs to QP1),
//! built here with the wire crate's emitters and pcap writer.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use assert_cmd::Command;
use softroce_wire::cm::{
    CmDreqRepr, CmMadRepr, CmMessage, CmPathRepr, CmRepRepr, CmReqRepr, CmRtuRepr, CmaAddrs,
    CmaHdr, CmaHdrRepr, PortSpace,
};
use softroce_wire::ext::DethRepr;
use softroce_wire::icrc::{self, ROCE_V2_PORT, UdpEndpoints};
use softroce_wire::mad::{MAD_LEN, Mad, QP1_QKEY};
use softroce_wire::pcap::CaptureWriter;
use softroce_wire::{BthRepr, ExtRepr, Gid, Opcode, Psn, Qpn, RoceRepr};

const CLIENT: [u8; 4] = [10, 99, 0, 12];
const SERVER: [u8; 4] = [10, 99, 0, 11];

/// A UD SEND to QP1 carrying `message`, ICRC set for the frame the pcap writer builds.
fn qp1_packet(psn: u32, src: SocketAddr, dst: SocketAddr, message: CmMessage) -> Vec<u8> {
    let mut mad = [0u8; MAD_LEN];
    CmMadRepr::new(0x0000_0001_0000_0001 + u64::from(psn), message)
        .emit(&mut Mad::new_unchecked(&mut mad[..]));
    let ext = ExtRepr {
        deth: Some(DethRepr {
            qkey: QP1_QKEY,
            reserved: 0,
            src_qpn: Qpn::GSI,
        }),
        ..ExtRepr::default()
    };
    let repr = RoceRepr::new(
        BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::GSI, Psn::new(psn)),
        ext,
        MAD_LEN,
    );
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(&mad, &mut buf).unwrap();
    let ep = UdpEndpoints {
        src: src.ip(),
        dst: dst.ip(),
        src_port: src.port(),
        dst_port: dst.port(),
    };
    icrc::set_icrc_for_udp_socket(&ep, &mut buf).unwrap();
    buf
}

fn req() -> CmReqRepr {
    let mut private_data = [0u8; 92];
    CmaHdrRepr {
        src_port: 40000,
        addrs: CmaAddrs::V4 {
            src: CLIENT.into(),
            dst: SERVER.into(),
        },
    }
    .emit(&mut CmaHdr::new_unchecked(&mut private_data[..]));
    CmReqRepr {
        local_comm_id: 0x1c2d_3e4f,
        vendor_id: 0,
        service_id: PortSpace::Tcp.service_id(20000),
        local_ca_guid: 0x5054_00ff_fe99_0012,
        local_qkey: 0,
        local_qpn: Qpn::from_wire(0x11),
        responder_resources: 16,
        local_eecn: 0,
        initiator_depth: 16,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: true,
        starting_psn: Psn::new(0x5e4a3c),
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary_path: CmPathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: Gid::from_ipv4(Ipv4Addr::from(CLIENT)),
            remote_gid: Gid::from_ipv4(Ipv4Addr::from(SERVER)),
            hop_limit: 64,
            local_ack_timeout: 18,
            ..CmPathRepr::default()
        },
        alternate_path: CmPathRepr::default(),
        sap_supported: false,
        private_data,
    }
}

#[test]
fn cm_mads_on_qp1_show_type_comm_ids_qpns_psn_service_id_and_private_data_length() {
    let client = SocketAddr::new(Ipv4Addr::from(CLIENT).into(), 49152);
    let server = SocketAddr::new(Ipv4Addr::from(SERVER).into(), ROCE_V2_PORT);
    let back = SocketAddr::new(Ipv4Addr::from(SERVER).into(), 49153);
    let to_client = SocketAddr::new(Ipv4Addr::from(CLIENT).into(), ROCE_V2_PORT);
    let rep = CmRepRepr {
        local_comm_id: 0x99aa_bbcc,
        remote_comm_id: 0x1c2d_3e4f,
        local_qkey: 0,
        local_qpn: Qpn::from_wire(0x12),
        local_eecn: 0,
        starting_psn: Psn::new(0x123456),
        vendor_id: 0,
        responder_resources: 16,
        initiator_depth: 16,
        target_ack_delay: 20,
        failover_accepted: 0,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x5054_00ff_fe99_0011,
        private_data: [0; 196],
    };
    let packets = [
        (client, server, CmMessage::Req(req())),
        (back, to_client, CmMessage::Rep(rep)),
        (
            client,
            server,
            CmMessage::Rtu(CmRtuRepr {
                local_comm_id: 0x1c2d_3e4f,
                remote_comm_id: 0x99aa_bbcc,
                private_data: [0; 224],
            }),
        ),
        (
            client,
            server,
            CmMessage::Dreq(CmDreqRepr {
                local_comm_id: 0x1c2d_3e4f,
                remote_comm_id: 0x99aa_bbcc,
                remote_qpn: Qpn::from_wire(0x12),
                private_data: [0; 220],
            }),
        ),
    ];

    let dir = std::env::temp_dir().join(format!("softroce-decode-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cm.pcap");
    let mut w = CaptureWriter::create(&path).unwrap();
    for (i, (src, dst, message)) in packets.into_iter().enumerate() {
        let roce = qp1_packet(i as u32, src, dst, message);
        w.write_roce(Duration::from_millis(i as u64), src, dst, &roce)
            .unwrap();
    }
    drop(w.into_inner());

    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode", "--stats"])
        .arg(&path)
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].ends_with(
            " UD_SEND_ONLY dqpn=0x1 psn=0 deth{qkey=0x80010000 srcqp=0x1} payload=256 \
             cm{REQ lcid=0x1c2d3e4f sid=0x0000000001064e20(tcp:20000) qpn=0x11 \
             psn=6179388 qkey=0x0 pd=92 cma{src=10.99.0.12:40000 dst=10.99.0.11}} icrc=ok"
        ),
        "{stdout}"
    );
    assert!(
        lines[1].contains(" cm{REP lcid=0x99aabbcc rcid=0x1c2d3e4f qpn=0x12 psn=1193046 pd=196} "),
        "{stdout}"
    );
    assert!(
        lines[2].contains(" cm{RTU lcid=0x1c2d3e4f rcid=0x99aabbcc pd=224} "),
        "{stdout}"
    );
    assert!(
        lines[3].contains(" cm{DREQ lcid=0x1c2d3e4f rcid=0x99aabbcc rqpn=0x12 pd=220} "),
        "{stdout}"
    );
    for needed in ["cm REQ 1\n", "cm REP 1\n", "cm RTU 1\n", "cm DREQ 1\n"] {
        assert!(stdout.contains(needed), "{stdout}");
    }
    assert!(
        stdout.ends_with("packets=4 roce=4 icrc_ok=4 icrc_bad=0 malformed=0\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_short_mad_on_qp1_is_reported_without_failing_the_packet() {
    let client = SocketAddr::new(Ipv4Addr::from(CLIENT).into(), 49152);
    let server = SocketAddr::new(Ipv4Addr::from(SERVER).into(), ROCE_V2_PORT);
    let ext = ExtRepr {
        deth: Some(DethRepr {
            qkey: QP1_QKEY,
            reserved: 0,
            src_qpn: Qpn::GSI,
        }),
        ..ExtRepr::default()
    };
    let repr = RoceRepr::new(
        BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::GSI, Psn::new(0)),
        ext,
        24,
    );
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(&[1u8; 24], &mut buf).unwrap();
    let ep = UdpEndpoints {
        src: client.ip(),
        dst: server.ip(),
        src_port: client.port(),
        dst_port: server.port(),
    };
    icrc::set_icrc_for_udp_socket(&ep, &mut buf).unwrap();
    let dir = std::env::temp_dir().join(format!("softroce-decode-cm-short-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.pcap");
    let mut w = CaptureWriter::create(&path).unwrap();
    w.write_roce(Duration::ZERO, client, server, &buf).unwrap();
    drop(w.into_inner());
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode"])
        .arg(&path)
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        stdout.contains(" mad=malformed(MAD truncated: need 256 bytes, got 24) icrc=ok"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
