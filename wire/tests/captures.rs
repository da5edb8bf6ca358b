//! Every RoCEv2 packet two Linux rdma_rxe peers exchanged (testdata/captures) parses, its ICRC
//! verifies in both modes, and parse → emit reproduces it byte for byte. The same packets
//! pin down rxe's UDP source ports, the GRH area a UD receiver fills, and that no single bit
//! flip slips past the exact ICRC check.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;

use softroce_wire::grh::{self, GRH_LEN, IPV4_AT};
use softroce_wire::icrc::{self, IcrcCheck, UdpEndpoints};
use softroce_wire::ip::{IPV4_DF, Ipv4Fields};
use softroce_wire::pcap::{CaptureReader, FrameKind};
use softroce_wire::udp_port::{rc_source_port, ud_source_port};
use softroce_wire::{Gid, Opcode, RocePacket, RoceRepr, Transport, WireError};

/// One RoCE packet of a capture, with the headers a UDP socket would not see.
struct Captured {
    file: String,
    index: usize,
    ip_header: Vec<u8>,
    udp_header: Vec<u8>,
    ep: UdpEndpoints,
    roce: Vec<u8>,
}

impl Captured {
    fn label(&self) -> String {
        format!("{} packet {}", self.file, self.index)
    }

    fn packet(&self) -> RocePacket<&[u8]> {
        RocePacket::new_checked(&self.roce[..]).unwrap_or_else(|e| panic!("{}: {e}", self.label()))
    }
}

fn capture_files() -> Vec<PathBuf> {
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

fn roce_packets(path: &PathBuf) -> Vec<Captured> {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let mut reader = CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(frame) = reader.next_frame() {
        let frame = frame.unwrap();
        let FrameKind::Roce(d) = reader.classify(&frame) else {
            continue;
        };
        out.push(Captured {
            file: file.clone(),
            index: out.len() + 1,
            ip_header: d.ip_header.to_vec(),
            udp_header: d.udp_header.to_vec(),
            ep: UdpEndpoints {
                src: d.src,
                dst: d.dst,
                src_port: d.src_port,
                dst_port: d.dst_port,
            },
            roce: d.payload.to_vec(),
        });
    }
    out
}

fn capture(name: &str) -> Vec<Captured> {
    roce_packets(
        &capture_files()
            .into_iter()
            .find(|p| p.ends_with(name))
            .unwrap(),
    )
}

#[test]
fn every_rxe_packet_parses_verifies_and_reemits_identically() {
    let mut total = 0;
    for path in capture_files() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let packets = roce_packets(&path);
        for c in &packets {
            let packet = c.packet();
            assert_eq!(
                icrc::verify_exact(&c.ip_header, &c.udp_header, &c.roce),
                Ok(IcrcCheck::Exact),
                "{}",
                c.label()
            );
            let ip = Ipv4Fields::parse(&c.ip_header).unwrap();
            assert_eq!(
                icrc::verify_udp_socket(&c.ep, &c.roce),
                Ok(IcrcCheck::RecoveredIpv4Id {
                    id: ip.id,
                    dont_fragment: true
                }),
                "{}: the solved IPv4 ID must be the captured one",
                c.label()
            );
            let repr = RoceRepr::parse(&packet).unwrap();
            let mut again = vec![0u8; repr.buffer_len()];
            repr.emit_with_payload(packet.payload(), &mut again)
                .unwrap();
            RocePacket::new_unchecked(&mut again[..]).set_icrc(packet.icrc());
            assert_eq!(again, c.roce, "{} re-emitted", c.label());
        }
        if !name.contains("_oob") {
            assert!(!packets.is_empty(), "{name} holds RoCE traffic");
        }
        total += packets.len();
    }
    assert!(total > 2500, "only {total} RoCE packets found");
}

#[test]
fn any_single_bit_flip_in_a_real_packet_fails_the_exact_icrc() {
    // The first packet of each opcode across the captures: every bit of the IP header, UDP
    // header and RoCE packet that the ICRC covers.
    let mut checked = BTreeSet::new();
    for path in capture_files() {
        for c in roce_packets(&path) {
            let op = c.roce[0];
            if !checked.insert(op) {
                continue;
            }
            let mut whole = [c.ip_header.clone(), c.udp_header.clone(), c.roce.clone()].concat();
            let (ip_len, udp_end) = (c.ip_header.len(), c.ip_header.len() + 8);
            let masked = |at: usize| {
                matches!(at, 1 | 8 | 10 | 11)   // IPv4 TOS, TTL, header checksum
                    || at == ip_len + 6 || at == ip_len + 7 // UDP checksum
                    || at == udp_end + 4 // BTH FECN/BECN/reserved
            };
            for at in (0..whole.len()).filter(|&at| !masked(at)) {
                for bit in 0..8 {
                    whole[at] ^= 1 << bit;
                    let (ip, rest) = whole.split_at(ip_len);
                    let (udp, roce) = rest.split_at(8);
                    // A mismatch, or for the IP version nibble a header that is no IP.
                    let verdict = icrc::verify_exact(ip, udp, roce);
                    assert!(
                        matches!(
                            verdict,
                            Err(WireError::IcrcMismatch { .. }
                                | WireError::BadIpVersion(_)
                                | WireError::Truncated { .. })
                        ),
                        "{}: flipping bit {bit} of byte {at} went unnoticed: {verdict:?}",
                        c.label()
                    );
                    whole[at] ^= 1 << bit;
                }
            }
        }
    }
    assert!(checked.len() >= 15, "only opcodes {checked:x?} were seen");
}

#[test]
fn source_ports_follow_rxe_rules_for_every_packet() {
    let mut rc_uc = 0;
    let mut ud = 0;
    for path in capture_files() {
        let packets = roce_packets(&path);
        // The QPNs that live at an address: those its peers send to.
        let mut qpns_at: BTreeMap<IpAddr, BTreeSet<u32>> = BTreeMap::new();
        for c in &packets {
            let dqpn = c.packet().bth().dest_qpn().value();
            qpns_at.entry(c.ep.dst).or_default().insert(dqpn);
        }
        for c in &packets {
            let p = c.packet();
            let port = c.ep.src_port;
            match p.opcode().transport() {
                Transport::Rc | Transport::Uc => {
                    // The sender's QPN is not in an RC/UC packet; one of the QPNs at its
                    // address must give the port with the destination QPN.
                    let remote = p.bth().dest_qpn().value();
                    let locals = &qpns_at[&c.ep.src];
                    assert!(
                        locals.iter().any(|&l| rc_source_port(l, remote) == port),
                        "{}: port {port} from QPNs {locals:x?} to {remote:#x}",
                        c.label()
                    );
                    rc_uc += 1;
                }
                Transport::Ud => {
                    let src_qp = p.deth().unwrap().src_qpn().value();
                    assert_eq!(ud_source_port(src_qp), port, "{}", c.label());
                    ud += 1;
                }
                other => panic!("{}: unexpected transport {other:?}", c.label()),
            }
        }
    }
    assert!(rc_uc > 2000 && ud > 0, "rc/uc {rc_uc}, ud {ud}");
}

#[test]
fn ud_receiver_rebuilds_the_exact_ipv4_header_rxe_sent_into_the_grh_area() {
    let packets = capture("ud_pingpong.pcap");
    let c = packets
        .iter()
        .find(|c| c.packet().opcode() == Opcode::UD_SEND_ONLY)
        .expect("a UD SEND in ud_pingpong.pcap");
    // What a UDP-socket receiver knows: addresses, ports, the datagram, and the ICRC.
    let Ok(IcrcCheck::RecoveredIpv4Id { id, dont_fragment }) =
        icrc::verify_udp_socket(&c.ep, &c.roce)
    else {
        panic!("{}: ICRC did not verify", c.label())
    };
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (c.ep.src, c.ep.dst) else {
        panic!("{}: not IPv4", c.label())
    };
    let fields = Ipv4Fields {
        id,
        flags_frag: if dont_fragment { IPV4_DF } else { 0 },
        ..Ipv4Fields::udp_socket_default(src, dst)
    };
    let mut area = [0xa5u8; GRH_LEN];
    grh::emit_ipv4(&fields, c.roce.len(), &mut area);
    assert_eq!(&area[..IPV4_AT], &[0u8; IPV4_AT][..]);
    assert_eq!(&area[IPV4_AT..], &c.ip_header[..], "{}", c.label());

    let info = grh::parse_grh(&area).unwrap();
    assert_eq!(info.sgid, Gid::from_ip(c.ep.src));
    assert_eq!(info.sgid.to_string(), "::ffff:10.99.0.12");
    assert_eq!(info.dgid, Gid::from_ip(c.ep.dst));
    assert_eq!(info.hop_limit, 64);
}

#[test]
fn pcapng_written_by_wireshark_reads_like_the_pcap_it_came_from() {
    // testdata/pcapng/ud_pingpong_first6.pcapng is `editcap -F pcapng -r ud_pingpong.pcap
    // x 1-6`: the same frames in the format Wireshark and dumpcap write by default.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let ng: Vec<_> = CaptureReader::open(root.join("pcapng/ud_pingpong_first6.pcapng"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let classic: Vec<_> = CaptureReader::open(root.join("captures/ud_pingpong.pcap"))
        .unwrap()
        .take(6)
        .map(Result::unwrap)
        .collect();
    assert_eq!(ng.len(), 6);
    assert_eq!(ng, classic);
    for frame in &ng {
        let FrameKind::Roce(d) = frame.classify() else {
            panic!("not RoCE: {frame:?}")
        };
        assert_eq!(
            icrc::verify_exact(d.ip_header, d.udp_header, d.payload),
            Ok(IcrcCheck::Exact)
        );
    }
}

#[test]
fn linux_cooked_captures_yield_the_same_roce_packets_as_ethernet() {
    // send_lat's first two frames rewritten with Linux cooked headers (what `tcpdump -i any`
    // writes: SLL, or SLL2 in newer libpcap). They are also seeds of the capture fuzz corpus.
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/capture");
    let ethernet: Vec<Vec<u8>> = capture("send_lat.pcap")
        .into_iter()
        .take(2)
        .map(|c| c.roce)
        .collect();
    for name in ["send_lat_first2_sll.pcap", "send_lat_first2_sll2.pcap"] {
        let mut roce = Vec::new();
        for frame in CaptureReader::open(corpus.join(name)).unwrap() {
            let frame = frame.unwrap();
            let FrameKind::Roce(d) = frame.classify() else {
                panic!("{name}: not RoCE: {:?}", frame.classify())
            };
            assert_eq!(
                icrc::verify_exact(d.ip_header, d.udp_header, d.payload),
                Ok(IcrcCheck::Exact),
                "{name}"
            );
            roce.push(d.payload.to_vec());
        }
        assert_eq!(roce, ethernet, "{name}");
    }
}
