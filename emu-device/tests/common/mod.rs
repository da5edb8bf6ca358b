//! A two-device harness over the deterministic fabric: each side has a PD, a CQ, a
//! registered buffer and one QP, connected to the other side.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softroce_emu::core::*;
use softroce_emu::sim::{Fabric, FilterAction, NodeId};
use softroce_wire::icrc::{self, ROCE_V2_PORT, UdpEndpoints};
use softroce_wire::{Gid, Mtu, Opcode, Psn, RocePacket, RoceRepr, Syndrome};

pub const A_IP: &str = "127.0.0.1";
pub const B_IP: &str = "127.0.0.2";

/// Application memory registered with a device, accessed only through raw pointers (the
/// device writes it through its own pointer, as DMA would).
pub struct Memory {
    _backing: Vec<u8>,
    pub ptr: *mut u8,
    pub len: usize,
    pub mr: MrHandle,
    pub keys: MrKeys,
}

impl Memory {
    pub fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        let mut out = vec![0u8; len];
        // SAFETY: in bounds of the live backing buffer.
        unsafe { std::ptr::copy(self.ptr.add(off), out.as_mut_ptr(), len) };
        out
    }
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds of the live backing buffer.
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.add(off), data.len()) };
    }
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr(off),
            length: len as u32,
            lkey: self.keys.lkey,
        }
    }
}

pub struct Side {
    pub node: NodeId,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub qp: QpHandle,
    pub qpn: u32,
    pub mem: Memory,
    pub srq: Option<SrqHandle>,
}

pub struct Pair {
    pub fabric: Fabric<Hca>,
    pub a: Side,
    pub b: Side,
}

#[derive(Clone, Copy)]
pub struct Options {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub mem_len: usize,
    pub cqe: u32,
    pub srq: bool,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub access: AccessFlags,
    pub seed: u64,
    pub max_wr: u32,
    pub ack_defer: Duration,
    pub adaptive_retransmit: bool,
    pub payload_by_reference: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            mem_len: 1 << 16,
            cqe: 256,
            srq: false,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            seed: 1,
            max_wr: 256,
            ack_defer: Duration::ZERO,
            adaptive_retransmit: false,
            payload_by_reference: false,
        }
    }
}

pub fn register(hca: &mut Hca, pd: PdHandle, len: usize, access: AccessFlags) -> Memory {
    let mut backing = vec![0u8; len];
    let ptr = backing.as_mut_ptr();
    // SAFETY: the backing Vec lives in the returned Memory, which tests keep until the
    // device is dropped; its heap buffer never moves.
    let (mr, keys) = unsafe { hca.reg_mr(pd, ptr, len, access) }.unwrap();
    Memory {
        _backing: backing,
        ptr,
        len,
        mr,
        keys,
    }
}

fn make_side(fabric: &mut Fabric<Hca>, ip: &str, o: &Options, seed: u64) -> Side {
    let mut cfg = HcaConfig::new(format!("dev-{ip}"), ip.parse().unwrap());
    cfg.seed = seed;
    cfg.link_mtu = 9000;
    cfg.ack_defer = o.ack_defer;
    cfg.adaptive_retransmit = o.adaptive_retransmit;
    cfg.payload_by_reference = o.payload_by_reference;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(o.cqe, None, 0, 0).unwrap();
    let mem = register(&mut hca, pd, o.mem_len, o.access);
    let srq = o.srq.then(|| {
        hca.create_srq(
            pd,
            SrqAttr {
                max_wr: o.max_wr,
                max_sge: 4,
                srq_limit: 0,
            },
            0,
        )
        .unwrap()
        .0
    });
    let (qp, qpn, _) = hca
        .create_qp(
            pd,
            QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq,
                cap: QpCap::new(o.max_wr, o.max_wr).with_sges(4).with_inline(128),
                qp_type: o.qp_type,
                sq_sig_all: false,
                qp_context: 0,
            },
        )
        .unwrap();
    let node = fabric.add_node(ip.parse::<IpAddr>().unwrap(), hca);
    Side {
        node,
        pd,
        cq,
        qp,
        qpn: qpn.value(),
        mem,
        srq,
    }
}

/// Bring `qp` to RTS connected to `remote_qpn` at `remote_ip`.
pub fn connect(hca: &mut Hca, qp: QpHandle, remote_ip: &str, remote_qpn: u32, o: &Options) {
    let bringup = QpBringup {
        access: o.access.difference(AccessFlags::LOCAL_WRITE),
        mtu: o.mtu,
        min_rnr_timer: o.min_rnr_timer,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        ..QpBringup::new(o.qp_type)
    };
    // PSNs near the 24-bit wrap so every run crosses it.
    let first_psn = Psn::new(0x00ff_fff0);
    let peer = QpPeer {
        qpn: remote_qpn,
        psn: first_psn,
        av: AhAttr::new(Gid::from_ip(remote_ip.parse().unwrap()), 0),
    };
    bringup.to_rts(hca, qp, &peer, first_psn).unwrap();
}

impl Pair {
    pub fn new(o: Options) -> Self {
        let mut fabric = Fabric::new(o.seed);
        let mut a = make_side(&mut fabric, A_IP, &o, o.seed);
        let mut b = make_side(&mut fabric, B_IP, &o, o.seed + 1);
        let (aqpn, bqpn) = (a.qpn, b.qpn);
        connect(fabric.node_mut(a.node), a.qp, B_IP, bqpn, &o);
        connect(fabric.node_mut(b.node), b.qp, A_IP, aqpn, &o);
        a.srq = a.srq.take();
        b.srq = b.srq.take();
        Self { fabric, a, b }
    }

    pub fn rc(mtu: Mtu) -> Self {
        Self::new(Options {
            mtu,
            ..Options::default()
        })
    }

    pub fn hca(&mut self, side: char) -> &mut Hca {
        let node = if side == 'a' {
            self.a.node
        } else {
            self.b.node
        };
        self.fabric.node_mut(node)
    }

    pub fn side(&self, side: char) -> &Side {
        if side == 'a' { &self.a } else { &self.b }
    }

    /// Post a receive of `len` bytes at `off` of the side's memory.
    pub fn post_recv(&mut self, side: char, wr_id: u64, off: usize, len: usize) {
        let s = self.side(side);
        let (qp, srq, sge) = (s.qp, s.srq, s.mem.sge(off, len));
        let wr = RecvWr {
            wr_id,
            sg_list: vec![sge].into(),
        };
        match srq {
            Some(srq) => self.hca(side).post_srq_recv(srq, &[wr]).unwrap(),
            None => self.hca(side).post_recv(qp, &[wr]).unwrap(),
        }
    }

    /// Move the side's QP to ERR (as a disconnect does), flushing its work.
    pub fn move_to_err(&mut self, side: char) {
        let qp = self.side(side).qp;
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.hca(side)
            .modify_qp(qp, &attr, QpAttrMask::STATE)
            .unwrap();
    }

    pub fn post_send(&mut self, side: char, wr: SendWr) {
        let qp = self.side(side).qp;
        // SAFETY: tests only use inline data from live test memory.
        unsafe { self.hca(side).post_send(qp, &[wr]) }.unwrap();
    }

    /// A signaled SEND of `len` bytes from `off`.
    pub fn send_wr(&self, side: char, wr_id: u64, off: usize, len: usize) -> SendWr {
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![self.side(side).mem.sge(off, len)].into();
        wr
    }

    /// A signaled RDMA WRITE/READ of `len` bytes from local `off` to the peer's `roff`.
    pub fn rdma_wr(
        &self,
        side: char,
        op: WrOpcode,
        wr_id: u64,
        off: usize,
        roff: usize,
        len: usize,
    ) -> SendWr {
        let peer = self.side(if side == 'a' { 'b' } else { 'a' });
        let mut wr = SendWr::new(wr_id, op);
        wr.sg_list = vec![self.side(side).mem.sge(off, len)].into();
        wr.rdma = RdmaTarget {
            remote_addr: peer.mem.addr(roff),
            rkey: peer.mem.keys.rkey,
        };
        wr
    }

    pub fn poll(&mut self, side: char) -> Vec<WorkCompletion> {
        let cq = self.side(side).cq;
        let mut out = Vec::new();
        let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 32];
        for _ in 0..10_000 {
            let n = self.hca(side).poll_cq(cq, &mut wcs).unwrap_or(0);
            out.extend_from_slice(&wcs[..n]);
            if n < wcs.len() {
                break;
            }
        }
        out
    }

    /// Drive the fabric until `side` has `n` completions (polled and returned) or virtual
    /// time runs out.
    pub fn completions(&mut self, side: char, n: usize, limit: Duration) -> Vec<WorkCompletion> {
        let mut got = self.poll(side);
        let deadline = self.fabric.elapsed() + limit;
        for _ in 0..2_000_000 {
            if got.len() >= n || self.fabric.elapsed() > deadline {
                break;
            }
            let more = self.fabric.step();
            got.extend(self.poll(side));
            if !more {
                break;
            }
        }
        got
    }

    pub fn counters(&mut self, side: char) -> Counters {
        self.hca(side).counters().clone()
    }
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A device at `ip` as the fixtures that build their own QPs make it (a 9000-byte link).
pub fn device(ip: &str, seed: u64) -> Hca {
    let mut cfg = HcaConfig::new(format!("dev-{ip}"), ip.parse().unwrap());
    cfg.seed = seed;
    cfg.link_mtu = 9000;
    Hca::new(cfg)
}

/// One end of such a fixture: a PD, a 64-entry CQ and 64 KiB registered with `access`.
pub fn end(hca: &mut Hca, access: AccessFlags) -> (PdHandle, CqHandle, Memory) {
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(64, None, 0, 0).unwrap();
    let mem = register(hca, pd, 1 << 16, access);
    (pd, cq, mem)
}

/// Bring `qp` (of `qp_type`) to RTS at MTU 1024 toward `remote_qpn` at `remote_ip`, PSNs
/// near the 24-bit wrap, the QP's access flags as `QpBringup` sets them.
pub fn bring_up(hca: &mut Hca, qp: QpHandle, qp_type: QpType, remote_ip: &str, remote_qpn: u32) {
    let bringup = QpBringup {
        mtu: Mtu::Mtu1024,
        timeout: 8,
        ..QpBringup::new(qp_type)
    };
    let psn = Psn::new(0x00ff_fff0);
    let peer = QpPeer {
        qpn: remote_qpn,
        psn,
        av: AhAttr::new(Gid::from_ip(remote_ip.parse().unwrap()), 0),
    };
    bringup.to_rts(hca, qp, &peer, psn).unwrap();
}

/// Post one WR (no inline data) on `qp` of `node`.
pub fn post_one(fabric: &mut Fabric<Hca>, node: NodeId, qp: QpHandle, wr: SendWr) {
    // SAFETY: callers post no inline data.
    unsafe { fabric.node_mut(node).post_send(qp, &[wr]) }.unwrap();
}

/// Drive `fabric` until `cq` of `node` has `n` completions (polled and returned), nothing is
/// left to run, or `limit` of virtual time has passed.
pub fn drive(
    fabric: &mut Fabric<Hca>,
    node: NodeId,
    cq: CqHandle,
    n: usize,
    limit: Duration,
) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 8];
    let deadline = fabric.elapsed() + limit;
    for _ in 0..2_000_000 {
        if got.len() >= n || fabric.elapsed() >= deadline {
            break;
        }
        let k = fabric.node_mut(node).poll_cq(cq, &mut wcs).unwrap();
        got.extend_from_slice(&wcs[..k]);
        if k == 0 && !fabric.step() {
            break;
        }
    }
    got
}

/// Hand `to` a request made by hand as if `from` sent it (`payload` after the headers of
/// `repr`, ICRC set), at the fabric's time: the opcode and AETH syndrome of `to`'s answer,
/// if it gave one at once.
pub fn inject(
    fabric: &mut Fabric<Hca>,
    from: NodeId,
    to: NodeId,
    repr: &RoceRepr,
    payload: &[u8],
) -> Option<(Opcode, Option<Syndrome>)> {
    let (src, dst) = (fabric.addr(from), fabric.addr(to));
    let mut data = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(payload, &mut data).unwrap();
    let ep = UdpEndpoints {
        src,
        dst,
        src_port: ROCE_V2_PORT,
        dst_port: ROCE_V2_PORT,
    };
    icrc::set_icrc_for_udp_socket(&ep, &mut data).unwrap();
    let now = fabric.now();
    let hca = fabric.node_mut(to);
    hca.handle_datagram(
        now,
        IncomingDatagram {
            src: SocketAddr::new(src, ROCE_V2_PORT),
            dst,
            payload: &data,
            traffic_class: 0,
            ipv4_id: None,
        },
    );
    let mut out = Vec::new();
    let _answer = hca.poll_transmit(now, &mut out)?;
    let answer = RocePacket::new_checked(&out[..]).unwrap();
    let syndrome = answer.aeth().map(|a| Syndrome::from_byte(a.syndrome_raw()));
    Some((answer.bth().opcode(), syndrome))
}

/// Lose the datagrams to `to` whose number (from 1, in the order the fabric carries them)
/// `lost` picks; the rest pass.
pub fn lose_to(
    fabric: &mut Fabric<Hca>,
    to: NodeId,
    lost: impl Fn(usize) -> bool + Send + 'static,
) {
    let ip = fabric.addr(to);
    let mut n = 0;
    fabric.set_filter(move |d| {
        if d.dst.ip() != ip {
            return FilterAction::Pass;
        }
        n += 1;
        if lost(n) {
            FilterAction::Drop
        } else {
            FilterAction::Pass
        }
    });
}
