//! What the core costs per packet, through the calls a driver makes: on the responder,
//! `handle_datagram` of one RDMA WRITE (parse, ICRC check, placement into a registered
//! region) and `poll_transmit` of the ACK it owes; on the requester, `post_send` of one
//! WRITE and `poll_transmit` of its datagram. The peer's side of each exchange (the
//! requester's packets, the ACKs back) runs untimed between measured batches.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use softroce_emu_core::*;
use softroce_wire::{Mtu, Psn};

/// Requests measured between two untimed ACK exchanges: within the RC window, so every
/// post produces its packet at once.
const BATCH: u64 = 16;
/// The target region: WRITEs land at successive 4 KiB slots of it.
const REGION: usize = 1 << 20;

/// Two connected RC QPs at MTU 4096, `a` the requester and `b` the responder.
struct Link {
    a: Hca,
    b: Hca,
    qp_a: QpHandle,
    src: Sge,
    remote: RdmaTarget,
    slot: u64,
    packet: Vec<u8>,
    /// The regions, dropped after the HCAs that may write them (fields drop in order).
    _mem: (Vec<u8>, Vec<u8>),
}

impl Link {
    fn new() -> Self {
        let mut mem_a = vec![0x5au8; REGION];
        let mut mem_b = vec![0u8; REGION];
        let mut a = Hca::new(HcaConfig::new("a", "10.0.0.1".parse().expect("literal")));
        let mut b = Hca::new(HcaConfig::new("b", "10.0.0.2".parse().expect("literal")));
        let setup = |h: &mut Hca, mem: &mut [u8]| {
            let pd = h.alloc_pd().expect("a PD");
            let (cq, _) = h.create_cq(256, None, 0, 0).expect("a CQ");
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            // SAFETY: the region lives in `Link::_mem`, dropped after both HCAs.
            let (_, keys) = unsafe { h.reg_mr(pd, mem.as_mut_ptr(), mem.len(), access) }
                .expect("a registered region");
            let init = QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap::new(128, 4),
                qp_type: QpType::Rc,
                sq_sig_all: false,
                qp_context: 0,
            };
            let (qp, qpn, _) = h.create_qp(pd, init).expect("an RC QP");
            (qp, qpn, keys, mem.as_mut_ptr() as u64)
        };
        let (qp_a, qpn_a, keys_a, addr_a) = setup(&mut a, &mut mem_a);
        let (qp_b, qpn_b, keys_b, addr_b) = setup(&mut b, &mut mem_b);
        let peer = |h: &Hca, qpn: softroce_wire::Qpn| {
            let mut av = AhAttr::new(h.query_gid(1, h.ip_gid_index()).expect("a GID"), 0);
            av.udp_port = h.local_addr().port();
            QpPeer {
                qpn: qpn.value(),
                psn: Psn::new(0),
                av,
            }
        };
        let (to_b, to_a) = (peer(&b, qpn_b), peer(&a, qpn_a));
        let rc = QpBringup {
            access: AccessFlags::REMOTE_WRITE,
            mtu: Mtu::Mtu4096,
            timeout: 14,
            ..QpBringup::new(QpType::Rc)
        };
        rc.to_rts(&mut a, qp_a, &to_b, Psn::new(0))
            .expect("a to RTS");
        rc.to_rts(&mut b, qp_b, &to_a, Psn::new(0))
            .expect("b to RTS");
        let mut link = Self {
            a,
            b,
            qp_a,
            src: Sge {
                addr: addr_a,
                length: 0,
                lkey: keys_a.lkey,
            },
            remote: RdmaTarget {
                remote_addr: addr_b,
                rkey: keys_b.rkey,
            },
            slot: 0,
            packet: Vec::new(),
            _mem: (mem_a, mem_b),
        };
        link.check_placement();
        link
    }

    /// One WRITE goes through whole before anything is measured: a bench of packets the
    /// responder drops would measure nothing.
    fn check_placement(&mut self) {
        let now = Instant::now();
        let requests = self.requests(1, 4096, now);
        self.settle(&requests, now);
        let (sent, rcvd) = (self.a.counters(), self.b.counters());
        assert_eq!(
            rcvd.drops.iter().sum::<u64>(),
            0,
            "b dropped nothing: {rcvd:?}"
        );
        assert_eq!(sent.rcvd_pkts, 1, "a got b's ACK");
        assert!(
            self._mem.1[..4096].iter().all(|&x| x == 0x5a),
            "the bytes landed"
        );
    }

    /// Post one unsignaled WRITE of `len` bytes to the next 4 KiB slot of `b`'s region.
    fn post_write(&mut self, len: u32) {
        let mut wr = SendWr::new(self.slot, WrOpcode::RdmaWrite);
        wr.sg_list = SgList::from_slice(&[Sge {
            length: len,
            ..self.src
        }]);
        let slots = (REGION / 4096) as u64;
        wr.rdma = RdmaTarget {
            remote_addr: self.remote.remote_addr + (self.slot % slots) * 4096,
            ..self.remote
        };
        self.slot += 1;
        // SAFETY: the source region lives in `_mem`, past every use by `a`.
        unsafe { self.a.post_send(self.qp_a, &[wr]) }.expect("room in the send queue");
    }

    /// Every datagram `from` has to send, as (source, bytes).
    fn drain(from: &mut Hca, now: Instant, buf: &mut Vec<u8>) -> Vec<(Transmit, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = from.poll_transmit(now, buf) {
            out.push((t, buf[..t.len].to_vec()));
        }
        out
    }

    fn deliver(to: &mut Hca, now: Instant, datagrams: &[(Transmit, Vec<u8>)]) {
        for (t, bytes) in datagrams {
            to.handle_datagram(
                now,
                IncomingDatagram {
                    src: t.source,
                    dst: t.destination.ip(),
                    payload: bytes,
                },
            );
        }
    }

    /// `a` posts `n` WRITEs of `len` bytes; returns their datagrams.
    fn requests(&mut self, n: u64, len: u32, now: Instant) -> Vec<(Transmit, Vec<u8>)> {
        for _ in 0..n {
            self.post_write(len);
        }
        Self::drain(&mut self.a, now, &mut self.packet)
    }

    /// `b` takes `requests` and `a` its ACKs: the send queue empties.
    fn settle(&mut self, requests: &[(Transmit, Vec<u8>)], now: Instant) {
        Self::deliver(&mut self.b, now, requests);
        let acks = Self::drain(&mut self.b, now, &mut self.packet);
        Self::deliver(&mut self.a, now, &acks);
    }
}

fn responder_write(c: &mut Criterion) {
    let mut g = c.benchmark_group("responder");
    for len in [8u32, 4096] {
        g.throughput(Throughput::Bytes(u64::from(len)));
        g.bench_function(
            format!("handle WRITE ONLY {len} B + poll its ACK"),
            |bench| {
                let mut link = Link::new();
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
            let mut link = Link::new();
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
