//! What the wire crate costs per received packet: the ICRC alone over a 4 KiB RDMA WRITE,
//! and parsing that packet's headers. The core's benches add the responder's work on top.

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RethRepr, RocePacket, RoceRepr};

/// A whole RC RDMA WRITE ONLY datagram of `len` payload bytes, its ICRC as our socket
/// sends it.
fn write_only(ep: &UdpEndpoints, len: usize) -> Vec<u8> {
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: 0x7f00_0000_0000,
            rkey: 0x1234,
            dma_len: len as u32,
        }),
        ..ExtRepr::default()
    };
    let bth = BthRepr::new(
        Opcode::RC_RDMA_WRITE_ONLY,
        Qpn::from_wire(0x11),
        Psn::new(7),
    );
    let repr = RoceRepr::new(bth, ext, len);
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf)
        .expect("a WRITE ONLY carries exactly a RETH");
    let header = repr.header_len();
    buf[header..header + len].fill(0xa5);
    icrc::set_icrc_for_udp_socket(ep, &mut buf).expect("longer than a BTH and an ICRC");
    buf
}

fn endpoints() -> UdpEndpoints {
    let src: SocketAddr = "10.0.0.1:49152".parse().expect("a literal address");
    let dst: SocketAddr = "10.0.0.2:4791".parse().expect("a literal address");
    UdpEndpoints::between(src, dst)
}

fn icrc_4k(c: &mut Criterion) {
    let ep = endpoints();
    let packet = write_only(&ep, 4096);
    let mut g = c.benchmark_group("icrc");
    g.throughput(Throughput::Bytes(packet.len() as u64));
    let body = &packet[..packet.len() - softroce_wire::ICRC_LEN];
    g.bench_function("compute 4 KiB WRITE", |b| {
        b.iter(|| icrc::compute_for_udp_socket(black_box(&ep), black_box(body)))
    });
    // The receive check over IPv4, which also solves the ID a UDP socket hides.
    g.bench_function("verify 4 KiB WRITE (IPv4)", |b| {
        b.iter(|| icrc::verify_udp_socket(black_box(&ep), black_box(&packet)))
    });
    g.finish();
}

fn parse(c: &mut Criterion) {
    let ep = endpoints();
    let mut g = c.benchmark_group("parse");
    for len in [8, 4096] {
        let packet = write_only(&ep, len);
        g.bench_function(format!("WRITE ONLY, {len} B payload"), |b| {
            b.iter(|| {
                let p = RocePacket::new_checked(black_box(&packet[..]))?;
                RoceRepr::parse(&p)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, icrc_4k, parse);
criterion_main!(benches);
