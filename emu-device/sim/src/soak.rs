//! A seeded soak: many RC messages of mixed operations between two devices over a lossy,
//! duplicating, reordering, corrupting fabric, each one verified byte for byte, exactly once,
//! in order.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use softroce_wire::{Gid, Mtu, Psn};

use super::{Fabric, LinkFaults};
use softroce_emu_core::*;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoakConfig {
    /// Messages to complete.
    pub messages: u64,
    /// Seed of the fabric and devices.
    pub seed: u64,
    /// Faults on every datagram.
    pub faults: LinkFaults,
    /// Path MTU.
    pub mtu: Mtu,
    /// Operations in flight.
    pub window: usize,
    /// Largest SEND/WRITE/READ payload.
    pub max_len: usize,
}

impl Default for SoakConfig {
    fn default() -> Self {
        Self {
            messages: 10_000,
            seed: 1,
            faults: LinkFaults {
                drop: 0.2,
                duplicate: 0.05,
                reorder: 0.05,
                reorder_delay: Duration::from_micros(50),
                corrupt: 0.01,
            },
            mtu: Mtu::Mtu1024,
            window: 16,
            max_len: 3000,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoakReport {
    /// Messages completed and verified.
    pub messages: u64,
    /// Of which SENDs, WRITE_WITH_IMMs, READs, FETCH_ADDs.
    pub by_op: [u64; 4],
    /// Virtual time the run took.
    pub virtual_time: Duration,
    /// Fabric statistics.
    pub fabric: super::FabricStats,
    /// Requester-side counters.
    pub requester: Counters,
    /// Responder-side counters.
    pub responder: Counters,
}

/// Why a soak failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("soak failed after {completed} messages: {reason}")]
pub struct SoakFailure {
    /// Messages verified before the failure.
    pub completed: u64,
    /// What went wrong.
    pub reason: String,
}

const SLOT: usize = 4096;
const RECV_SLOTS: usize = 64;
const WRITE_SLOTS: usize = 64;

struct Region {
    _backing: Vec<u8>,
    ptr: *mut u8,
    keys: MrKeys,
}

impl Region {
    fn new(hca: &mut Hca, pd: PdHandle, len: usize) -> Result<Self, VerbsError> {
        let mut backing = vec![0u8; len];
        let ptr = backing.as_mut_ptr();
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        // SAFETY: `backing` is owned by the Region, which outlives every use by the device
        // (the fabric holding the device is dropped first in `run`).
        let (_, keys) = unsafe { hca.reg_mr(pd, ptr, len, access)? };
        Ok(Self {
            _backing: backing,
            ptr,
            keys,
        })
    }
    fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }
    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        // SAFETY: callers stay inside the region.
        unsafe { std::ptr::copy(self.ptr.add(off), out.as_mut_ptr(), len) };
        out
    }
    fn write(&self, off: usize, data: &[u8]) {
        // SAFETY: callers stay inside the region.
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.add(off), data.len()) };
    }
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr(off),
            length: len as u32,
            lkey: self.keys.lkey,
        }
    }
    /// (Re)post the receive of slot `slot` on `qp`.
    fn post_slot(&self, hca: &mut Hca, qp: QpHandle, slot: usize) -> Result<(), PostError> {
        let wr = RecvWr {
            wr_id: slot as u64,
            sg_list: vec![self.sge(slot * SLOT, SLOT)].into(),
        };
        hca.post_recv(qp, &[wr])
    }
}

fn pattern(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn len_for(seq: u64, max: usize) -> usize {
    (seq.wrapping_mul(2_654_435_761) % (max as u64 + 1)) as usize
}

fn fail(completed: u64, reason: impl Into<String>) -> SoakFailure {
    SoakFailure {
        completed,
        reason: reason.into(),
    }
}

/// Run a soak; bounded by 64 × `messages` fabric steps and 1 hour of virtual time.
pub fn run(cfg: SoakConfig) -> Result<SoakReport, SoakFailure> {
    let e = |e: VerbsError| fail(0, e.to_string());
    let mut fabric: Fabric<Hca> = Fabric::new(cfg.seed);
    fabric.faults = cfg.faults;
    let ips: [IpAddr; 2] = [
        "127.0.0.1".parse().map_err(|_| fail(0, "ip"))?,
        "127.0.0.2".parse().map_err(|_| fail(0, "ip"))?,
    ];
    let mut regions = Vec::new();
    let mut sides = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut c = HcaConfig::new(format!("soak{i}"), *ip);
        c.seed = cfg.seed.wrapping_add(i as u64);
        c.link_mtu = 9000;
        // A soak is about recovering from faults however many in a row its seed brings: its
        // QPs retry forever on retry_cnt 7, as rxe's do (by the man page 7 means seven
        // retries, which a fifth of the datagrams lost each way exhausts now and then).
        c.retry_cnt_7_is_infinite = true;
        let mut hca = Hca::new(c);
        let pd = hca.alloc_pd().map_err(e)?;
        let (cq, _) = hca.create_cq(4096, None, 0, 0).map_err(e)?;
        let region = Region::new(&mut hca, pd, SLOT * (RECV_SLOTS + WRITE_SLOTS + 2)).map_err(e)?;
        let init = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap::new(256, 256),
            qp_type: QpType::Rc,
            sq_sig_all: true,
            qp_context: 0,
        };
        let (qp, qpn, _) = hca.create_qp(pd, init).map_err(e)?;
        let node = fabric.add_node(*ip, hca);
        regions.push(region);
        sides.push((node, cq, qp, qpn.value()));
    }
    // PSNs near the 24-bit wrap so every soak crosses it.
    let first_psn = Psn::new(0xFF_FF00);
    let bringup = QpBringup {
        mtu: cfg.mtu,
        min_rnr_timer: 1,
        timeout: 8,
        ..QpBringup::new(QpType::Rc)
    };
    for (i, &(node, _, qp, _)) in sides.iter().enumerate() {
        let peer = QpPeer {
            qpn: sides[1 - i].3,
            psn: first_psn,
            av: AhAttr::new(Gid::from_ip(ips[1 - i]), 0),
        };
        bringup
            .to_rts(fabric.node_mut(node), qp, &peer, first_psn)
            .map_err(e)?;
    }
    let (a_node, a_cq, a_qp, _) = sides[0];
    let (b_node, b_cq, b_qp, _) = sides[1];
    let (ra, rb) = (&regions[0], &regions[1]);
    // b's static READ source and its atomic counter.
    let read_base = SLOT * (RECV_SLOTS + WRITE_SLOTS);
    let counter_off = read_base + SLOT;
    rb.write(read_base, &pattern(u64::MAX, SLOT));
    rb.write(counter_off, &0u64.to_ne_bytes());
    // Keep every receive slot posted on b.
    for slot in 0..RECV_SLOTS {
        rb.post_slot(fabric.node_mut(b_node), b_qp, slot)
            .map_err(|e| fail(0, e.to_string()))?;
    }
    let mut next_seq = 0u64;
    let mut done = 0u64;
    let mut outstanding: VecDeque<u64> = VecDeque::new();
    let mut expect_send = 0u64; // next SEND seq b must see
    let mut expect_write = 1u64; // next WRITE_WITH_IMM seq b must see (seq % 4 == 1)
    let mut last_faa: Option<u64> = None;
    let mut by_op = [0u64; 4];
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 64];
    let start = fabric.now();
    let max_steps = cfg.messages.saturating_mul(64).max(10_000);
    for _ in 0..max_steps {
        // Post new work.
        while outstanding.len() < cfg.window && next_seq < cfg.messages {
            let seq = next_seq;
            next_seq += 1;
            let len = len_for(seq, cfg.max_len.min(SLOT - 8));
            let op = seq % 4;
            let staging = (seq % 64) as usize * SLOT;
            let mut wr;
            match op {
                0 => {
                    let mut data = seq.to_le_bytes().to_vec();
                    data.extend(pattern(seq, len));
                    ra.write(staging, &data);
                    wr = SendWr::new(seq, WrOpcode::Send);
                    wr.sg_list = vec![ra.sge(staging, data.len())].into();
                }
                1 => {
                    ra.write(staging, &pattern(seq, len));
                    wr = SendWr::new(seq, WrOpcode::RdmaWriteWithImm);
                    wr.sg_list = vec![ra.sge(staging, len)].into();
                    wr.imm_data = (seq as u32).to_be();
                    wr.rdma = RdmaTarget {
                        remote_addr: rb.addr((RECV_SLOTS + (seq as usize % WRITE_SLOTS)) * SLOT),
                        rkey: rb.keys.rkey,
                    };
                }
                2 => {
                    wr = SendWr::new(seq, WrOpcode::RdmaRead);
                    let off = (seq as usize * 7) % (SLOT - len).max(1);
                    wr.sg_list = vec![ra.sge(staging, len)].into();
                    wr.rdma = RdmaTarget {
                        remote_addr: rb.addr(read_base + off),
                        rkey: rb.keys.rkey,
                    };
                }
                _ => {
                    wr = SendWr::new(seq, WrOpcode::AtomicFetchAndAdd);
                    wr.sg_list = vec![ra.sge(staging, 8)].into();
                    wr.atomic = AtomicTarget {
                        remote_addr: rb.addr(counter_off),
                        compare_add: 1,
                        swap: 0,
                        rkey: rb.keys.rkey,
                    };
                }
            }
            // SAFETY: no inline data.
            unsafe { fabric.node_mut(a_node).post_send(a_qp, &[wr]) }
                .map_err(|e| fail(done, e.to_string()))?;
            outstanding.push_back(seq);
        }
        if done >= cfg.messages {
            break;
        }
        if !fabric.step() {
            return Err(fail(done, "the fabric went idle with work outstanding"));
        }
        if fabric.now() - start > Duration::from_secs(3600) {
            return Err(fail(done, "one hour of virtual time passed"));
        }
        // Responder side: check in-order, exactly-once delivery and repost.
        let n = fabric
            .node_mut(b_node)
            .poll_cq(b_cq, &mut wcs)
            .map_err(|e| fail(done, e.to_string()))?;
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(fail(done, format!("responder completion {wc:?}")));
            }
            match wc.opcode {
                WcOpcode::Recv => {
                    let slot = wc.wr_id as usize;
                    let head = rb.read(slot * SLOT, 8);
                    let seq = u64::from_le_bytes(head.try_into().map_err(|_| fail(done, "short"))?);
                    if seq != expect_send {
                        return Err(fail(
                            done,
                            format!("SEND {seq} arrived, expected {expect_send}"),
                        ));
                    }
                    expect_send += 4;
                    let len = wc.byte_len as usize - 8;
                    if rb.read(slot * SLOT + 8, len) != pattern(seq, len) {
                        return Err(fail(done, format!("SEND {seq} payload corrupted")));
                    }
                    rb.post_slot(fabric.node_mut(b_node), b_qp, slot)
                        .map_err(|e| fail(done, e.to_string()))?;
                }
                WcOpcode::RecvRdmaWithImm => {
                    let seq = u64::from(u32::from_be(wc.imm_data));
                    if seq != expect_write & 0xFFFF_FFFF {
                        return Err(fail(
                            done,
                            format!("WRITE_IMM {seq} arrived, expected {expect_write}"),
                        ));
                    }
                    let slot = RECV_SLOTS + (expect_write as usize % WRITE_SLOTS);
                    if rb.read(slot * SLOT, wc.byte_len as usize)
                        != pattern(expect_write, wc.byte_len as usize)
                    {
                        return Err(fail(done, format!("WRITE {expect_write} data corrupted")));
                    }
                    expect_write += 4;
                    rb.post_slot(fabric.node_mut(b_node), b_qp, wc.wr_id as usize)
                        .map_err(|e| fail(done, e.to_string()))?;
                }
                other => {
                    return Err(fail(
                        done,
                        format!("unexpected responder completion {other}"),
                    ));
                }
            }
        }
        // Requester side: completions in posting order.
        let n = fabric
            .node_mut(a_node)
            .poll_cq(a_cq, &mut wcs)
            .map_err(|e| fail(done, e.to_string()))?;
        for wc in &wcs[..n] {
            let Some(seq) = outstanding.pop_front() else {
                return Err(fail(done, "completion with nothing outstanding"));
            };
            if wc.wr_id != seq || wc.status != WcStatus::Success {
                return Err(fail(done, format!("completion {wc:?} for seq {seq}")));
            }
            let staging = (seq % 64) as usize * SLOT;
            let len = len_for(seq, cfg.max_len.min(SLOT - 8));
            match seq % 4 {
                2 => {
                    let off = (seq as usize * 7) % (SLOT - len).max(1);
                    if ra.read(staging, len) != pattern(u64::MAX, SLOT)[off..off + len] {
                        return Err(fail(done, format!("READ {seq} returned wrong data")));
                    }
                }
                3 => {
                    let v = u64::from_ne_bytes(
                        ra.read(staging, 8)
                            .try_into()
                            .map_err(|_| fail(done, "short"))?,
                    );
                    if last_faa.is_some_and(|l| v != l + 1) || (last_faa.is_none() && v != 0) {
                        return Err(fail(
                            done,
                            format!("FETCH_ADD {seq} returned {v} after {last_faa:?}"),
                        ));
                    }
                    last_faa = Some(v);
                }
                _ => {}
            }
            by_op[(seq % 4) as usize] += 1;
            done += 1;
        }
    }
    if done < cfg.messages {
        return Err(fail(done, "step budget exhausted"));
    }
    // Let the last completions reach the responder side.
    fabric.drive(100_000);
    let counter = u64::from_ne_bytes(
        rb.read(counter_off, 8)
            .try_into()
            .map_err(|_| fail(done, "short"))?,
    );
    if counter != by_op[3] {
        return Err(fail(
            done,
            format!("counter is {counter} after {} FETCH_ADDs", by_op[3]),
        ));
    }
    let report = SoakReport {
        messages: done,
        by_op,
        virtual_time: fabric.now() - start,
        fabric: fabric.stats(),
        requester: fabric.node(a_node).counters().clone(),
        responder: fabric.node(b_node).counters().clone(),
    };
    drop(fabric);
    drop(regions);
    Ok(report)
}

/// How long a soak took on the wall clock, for reports.
pub fn timed(cfg: SoakConfig) -> (Result<SoakReport, SoakFailure>, Duration) {
    let t = Instant::now();
    let r = run(cfg);
    (r, t.elapsed())
}
