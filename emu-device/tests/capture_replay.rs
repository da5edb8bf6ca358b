//! Replays the requests two Linux rdma_rxe peers exchanged (testdata/captures) into a softroce
//! core playing the server, and checks that its acknowledgements match what rxe sent: same
//! opcodes, PSNs, MSNs and syndromes, valid ICRCs — including rxe 6.1's spurious whole-message
//! retransmissions, which must be re-ACKed without delivering twice.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Instant;

use softroce_emu::core::*;
use softroce_wire::icrc::{self, IcrcCheck, UdpEndpoints};
use softroce_wire::pcap::{CaptureReader, FrameKind};
use softroce_wire::{Gid, Opcode, Psn, RocePacket};

struct Captured {
    src: SocketAddr,
    dst: IpAddr,
    payload: Vec<u8>,
}

fn load(name: &str) -> Vec<Captured> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/captures")
        .join(name);
    let mut reader = CaptureReader::open(&path).unwrap();
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.unwrap();
        if let FrameKind::Roce(d) = reader.classify(&frame) {
            out.push(Captured {
                src: SocketAddr::new(d.src, d.src_port),
                dst: d.dst,
                payload: d.payload.to_vec(),
            });
        }
    }
    out
}

/// (opcode, psn, aeth syndrome byte, msn) of an acknowledgement.
fn ack_fields(payload: &[u8]) -> (Opcode, Psn, u8, u32) {
    let p = RocePacket::new_checked(payload).unwrap();
    let aeth = p.aeth().unwrap();
    (
        p.opcode(),
        p.bth().psn(),
        aeth.syndrome_raw(),
        aeth.msn_raw(),
    )
}

struct Server {
    hca: Hca,
    cq: CqHandle,
    _mem: Vec<u8>,
}

/// A device at the capture's server address with one RC QP numbered as rxe's was,
/// connected to the client, `receives` receive WQEs of 4 KiB posted.
fn server(
    server_ip: IpAddr,
    server_qpn: u32,
    client_ip: IpAddr,
    client_qpn: u32,
    first_psn: Psn,
    receives: usize,
) -> Server {
    let mut cfg = HcaConfig::new("replay", server_ip);
    cfg.first_qpn = server_qpn;
    cfg.link_mtu = 1500;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(4096, None, 0, 0).unwrap();
    let len = receives * 4096;
    let mut mem = vec![0u8; len];
    // SAFETY: `mem` lives in the returned Server next to the device.
    let (_, keys) =
        unsafe { hca.reg_mr(pd, mem.as_mut_ptr(), len, AccessFlags::LOCAL_WRITE) }.unwrap();
    let init = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap::new(16, receives as u32),
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
    };
    let (qp, qpn, _) = hca.create_qp(pd, init).unwrap();
    assert_eq!(qpn.value(), server_qpn);
    let bringup = QpBringup {
        access: AccessFlags::EMPTY,
        ..QpBringup::new(QpType::Rc)
    };
    let client = QpPeer {
        qpn: client_qpn,
        psn: first_psn,
        av: AhAttr::new(Gid::from_ip(client_ip), 0),
    };
    bringup.to_rtr(&mut hca, qp, &client).unwrap();
    for i in 0..receives {
        let sge = Sge {
            addr: mem.as_ptr() as u64 + (i * 4096) as u64,
            length: 4096,
            lkey: keys.lkey,
        };
        hca.post_recv(
            qp,
            &[RecvWr {
                wr_id: i as u64,
                sg_list: vec![sge].into(),
            }],
        )
        .unwrap();
    }
    Server { hca, cq, _mem: mem }
}

fn replay_send_capture(name: &str) {
    let packets = load(name);
    let first = &packets[0];
    let client_ip = first.src.ip();
    let server_ip = first.dst;
    let p0 = RocePacket::new_checked(&first.payload[..]).unwrap();
    assert_eq!(p0.opcode().transport(), softroce_wire::Transport::Rc);
    // The client's QPN is the destination of the server's packets.
    let client_qpn = packets
        .iter()
        .find(|p| p.src.ip() == server_ip)
        .map(|p| {
            RocePacket::new_checked(&p.payload[..])
                .unwrap()
                .bth()
                .dest_qpn()
                .value()
        })
        .unwrap();
    let server_qpn = p0.bth().dest_qpn().value();
    let mut srv = server(
        server_ip,
        server_qpn,
        client_ip,
        client_qpn,
        p0.bth().psn(),
        1024,
    );
    let now = Instant::now();
    let mut ours = Vec::new();
    let mut buf = Vec::new();
    let mut requests = 0;
    for p in packets.iter().filter(|p| p.src.ip() == client_ip) {
        let op = Opcode(p.payload[0]);
        if op == Opcode::RC_ACKNOWLEDGE {
            continue; // acknowledgements of the server's own sends: not ours to replay
        }
        requests += 1;
        srv.hca.handle_datagram(
            now,
            IncomingDatagram {
                src: p.src,
                dst: server_ip,
                payload: &p.payload,
                traffic_class: 0,
                ipv4_id: None,
            },
        );
        while let Some(t) = srv.hca.poll_transmit(now, &mut buf) {
            let ep = UdpEndpoints {
                src: t.source.ip(),
                dst: t.destination.ip(),
                src_port: t.source.port(),
                dst_port: t.destination.port(),
            };
            assert!(matches!(
                icrc::verify_udp_socket(&ep, &buf),
                Ok(IcrcCheck::RecoveredIpv4Id { id: 0, .. })
            ));
            assert_eq!(t.destination, SocketAddr::new(client_ip, 4791));
            ours.push(ack_fields(&buf));
        }
    }
    let theirs: Vec<_> = packets
        .iter()
        .filter(|p| p.src.ip() == server_ip && Opcode(p.payload[0]) == Opcode::RC_ACKNOWLEDGE)
        .map(|p| ack_fields(&p.payload))
        .collect();
    assert!(requests > 50, "{name}: {requests} requests");
    assert_eq!(ours.len(), theirs.len(), "{name}: as many ACKs as rxe sent");
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(o, t, "{name}: ACK #{i} differs from rxe's");
    }
    let c = srv.hca.counters();
    assert_eq!(c.drops_of(DropReason::IcrcMismatch), 0);
    // Every message delivered exactly once, even where rxe 6.1 retransmitted it whole.
    let mut wcs = vec![WorkCompletion::success(0, 0, WcOpcode::Send, 0); 2048];
    let n = srv.hca.poll_cq(srv.cq, &mut wcs).unwrap();
    let messages = theirs.iter().map(|a| a.3).max().unwrap_or(0) as usize;
    assert_eq!(n, messages, "{name}: one receive completion per message");
    assert!(wcs[..n].iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn rc_pingpong_requests_get_the_same_acks_rxe_sent() {
    replay_send_capture("rc_pingpong.pcap");
}

#[test]
fn send_bw_requests_get_the_same_acks_rxe_sent() {
    replay_send_capture("send_bw.pcap");
}

#[test]
fn send_lat_requests_get_the_same_acks_rxe_sent() {
    replay_send_capture("send_lat.pcap");
}
