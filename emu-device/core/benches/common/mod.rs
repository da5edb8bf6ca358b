//! Two connected HCAs in one process, for the per-packet benchmarks (`per_packet`) and the
//! instruction counts (`examples/hot_path.rs`): one RC QP each, MTU 4096, `a` writing
//! into a registered region of `b`, datagrams handed between them by the caller.

// Each user takes the parts it needs.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use softroce_emu_core::*;
use softroce_wire::{Mtu, Psn};

/// Requests measured between two untimed ACK exchanges: within the RC window, so every
/// post produces its packet at once.
pub(crate) const BATCH: u64 = 16;
/// The target region: WRITEs land at successive 4 KiB slots of it.
const REGION: usize = 1 << 20;

/// Two connected RC QPs at MTU 4096, `a` the requester and `b` the responder.
pub(crate) struct Link {
    pub(crate) a: Hca,
    pub(crate) b: Hca,
    qp_a: QpHandle,
    cq_a: CqHandle,
    completions: Vec<WorkCompletion>,
    src: Sge,
    remote: RdmaTarget,
    slot: u64,
    pub(crate) packet: Vec<u8>,
    /// The regions, dropped after the HCAs that may write them (fields drop in order).
    _mem: (Vec<u8>, Vec<u8>),
}

impl Link {
    /// `ack_defer`: how long the responder may hold an ACK ([`HcaConfig::ack_defer`]; the
    /// UDP driver's devices hold them 100 µs, coalescing a burst's ACKs into one).
    pub(crate) fn new(ack_defer: Duration) -> Self {
        let mut mem_a = vec![0x5au8; REGION];
        let mut mem_b = vec![0u8; REGION];
        let config = |name: &str, ip: &str| {
            let mut c = HcaConfig::new(name, ip.parse().expect("literal"));
            c.ack_defer = ack_defer;
            c
        };
        let mut a = Hca::new(config("a", "10.0.0.1"));
        let mut b = Hca::new(config("b", "10.0.0.2"));
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
            (qp, qpn, keys, mem.as_mut_ptr() as u64, cq)
        };
        let (qp_a, qpn_a, keys_a, addr_a, cq_a) = setup(&mut a, &mut mem_a);
        let (qp_b, qpn_b, keys_b, addr_b, _) = setup(&mut b, &mut mem_b);
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
            cq_a,
            completions: vec![
                WorkCompletion::success(
                    0,
                    0,
                    WcOpcode::for_send(WrOpcode::RdmaWrite),
                    0
                );
                BATCH as usize
            ],
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
        Self::deliver(&mut self.b, now, &requests);
        // A held ACK (`ack_defer`) goes now rather than at its deadline.
        self.b.send_held_acks();
        let acks = Self::drain(&mut self.b, now, &mut self.packet);
        Self::deliver(&mut self.a, now, &acks);
        let (sent, rcvd) = (self.a.counters(), self.b.counters());
        assert_eq!(
            rcvd.drops.iter().sum::<u64>(),
            0,
            "b dropped nothing: {rcvd:?}"
        );
        assert_eq!(sent.rcvd_pkts, 1, "a got b's ACK");
        assert_eq!(self.poll_completions(), 1, "a's WRITE completed");
        assert!(
            self._mem.1[..4096].iter().all(|&x| x == 0x5a),
            "the bytes landed"
        );
    }

    /// Slots of `b`'s region whose first `len` bytes are `a`'s (every WRITE of that length
    /// landed there).
    pub(crate) fn slots_written(&self, len: usize) -> usize {
        self._mem
            .1
            .chunks(4096)
            .filter(|slot| slot[..len].iter().all(|&x| x == 0x5a))
            .count()
    }

    /// Post one WRITE of `len` bytes to the next 4 KiB slot of `b`'s region; unsignaled
    /// unless `signaled` (a streaming application asks for one completion in many, as
    /// perftest does).
    pub(crate) fn post_write(&mut self, len: u32, signaled: bool) {
        let mut wr = SendWr::new(self.slot, WrOpcode::RdmaWrite);
        if !signaled {
            wr.send_flags = SendFlags::EMPTY;
        }
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
        // Handed over as the drop-in hands its converted requests (no copy of the request).
        // SAFETY: the source region lives in `_mem`, past every use by `a`.
        unsafe { self.a.post_send_owned(self.qp_a, &mut [wr]) }.expect("room in the send queue");
    }

    /// Every datagram `from` has to send, as (its addresses, bytes).
    pub(crate) fn drain(
        from: &mut Hca,
        now: Instant,
        buf: &mut Vec<u8>,
    ) -> Vec<(Transmit, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(t) = from.poll_transmit(now, buf) {
            out.push((t, buf[..t.len].to_vec()));
        }
        out
    }

    pub(crate) fn deliver(to: &mut Hca, now: Instant, datagrams: &[(Transmit, Vec<u8>)]) {
        for (t, bytes) in datagrams {
            to.handle_datagram(
                now,
                IncomingDatagram {
                    src: t.source,
                    dst: t.destination.ip(),
                    payload: bytes,
                    traffic_class: 0,
                    ipv4_id: None,
                },
            );
        }
    }

    /// `a` posts `n` WRITEs of `len` bytes, the last signaled; returns their datagrams.
    pub(crate) fn requests(&mut self, n: u64, len: u32, now: Instant) -> Vec<(Transmit, Vec<u8>)> {
        for i in 0..n {
            self.post_write(len, i + 1 == n);
        }
        Self::drain(&mut self.a, now, &mut self.packet)
    }

    /// `b` takes `requests` and `a` its ACKs: the send queue empties, and its completions
    /// are polled.
    pub(crate) fn settle(&mut self, requests: &[(Transmit, Vec<u8>)], now: Instant) {
        Self::deliver(&mut self.b, now, requests);
        let acks = Self::drain(&mut self.b, now, &mut self.packet);
        Self::deliver(&mut self.a, now, &acks);
        self.poll_completions();
    }

    /// Poll `a`'s CQ empty: the successful completions taken.
    pub(crate) fn poll_completions(&mut self) -> usize {
        let mut ok = 0;
        // Bounded: the CQ holds at most its 256 entries.
        for _ in 0..=256 / BATCH {
            let n = self
                .a
                .poll_cq(self.cq_a, &mut self.completions)
                .expect("a's CQ");
            ok += self.completions[..n]
                .iter()
                .filter(|wc| wc.status == WcStatus::Success)
                .count();
            if n < self.completions.len() {
                break;
            }
        }
        ok
    }
}

/// Datagrams in flight between the two HCAs, in buffers kept from one batch to the next (a
/// measurement of the core allocates nothing of its own).
#[derive(Default)]
pub(crate) struct Wire {
    datagrams: Vec<(Transmit, Vec<u8>)>,
    len: usize,
}

impl Wire {
    /// Take every datagram `from` has to send, replacing what the wire held.
    pub(crate) fn fill(&mut self, from: &mut Hca, now: Instant, buf: &mut Vec<u8>) {
        self.len = 0;
        while let Some(t) = from.poll_transmit(now, buf) {
            if self.len == self.datagrams.len() {
                self.datagrams.push((t, Vec::new()));
            }
            let (slot, bytes) = &mut self.datagrams[self.len];
            *slot = t;
            bytes.clear();
            bytes.extend_from_slice(&buf[..t.len]);
            self.len += 1;
        }
    }

    /// Hand what the wire holds to `to`.
    pub(crate) fn deliver(&self, to: &mut Hca, now: Instant) {
        Link::deliver(to, now, &self.datagrams[..self.len]);
    }

    /// Datagrams on the wire.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}
