//! What the core costs per packet, through the calls a driver makes: on the responder,
//! `handle_datagram` of one RDMA WRITE (parse, ICRC check, placement into a registered
//! region) and `poll_transmit` of the ACK it owes; on the requester, `post_send` of one
//! WRITE and `poll_transmit` of its datagram. The peer's side of each exchange (the
//! requester's packets, the ACKs back) runs untimed between measured batches.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

mod common;
use common::{BATCH, Link};

fn responder_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("responder");
    for len in [8u32, 4096] {
        g.throughput(Throughput::Bytes(u64::from(len)));
        g.bench_function(
            format!("handle WRITE ONLY {len} B + poll its ACK"),
            |bench| {
                let mut link = Link::new(Duration::ZERO);
                bench.iter_custom(|iters| {
                    let mut measured = Duration::ZERO;
                    let mut done = 0;
                    while done < iters {
                        let n = BATCH.min(iters - done);
                        let now = Instant::now();
                        let requests = link.requests(n, len, now);
                        assert_eq!(requests.len() as u64, n, "one datagram per WRITE");
                        let start = Instant::now();
                        Link::deliver(&mut link.b, now, black_box(&requests));
                        let acks = Link::drain(&mut link.b, now, &mut link.packet);
                        measured += start.elapsed();
                        Link::deliver(&mut link.a, now, &acks);
                        done += n;
                    }
                    measured
                });
            },
        );
    }
    g.finish();
}

fn requester_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("requester");
    for len in [8u32, 4096] {
        g.throughput(Throughput::Bytes(u64::from(len)));
        g.bench_function(format!("post WRITE {len} B + poll its datagram"), |bench| {
            let mut link = Link::new(Duration::ZERO);
            bench.iter_custom(|iters| {
                let mut measured = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    let n = BATCH.min(iters - done);
                    let now = Instant::now();
                    let start = Instant::now();
                    let requests = link.requests(n, len, now);
                    measured += start.elapsed();
                    assert_eq!(requests.len() as u64, n, "one datagram per WRITE");
                    link.settle(&requests, now);
                    done += n;
                }
                measured
            });
        });
    }
    g.finish();
}

criterion_group!(benches, responder_write, requester_write);
criterion_main!(benches);
