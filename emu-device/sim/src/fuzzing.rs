//! A fuzzing harness shared by the cargo-fuzz target and a stable test: arbitrary datagrams
//! (raw, or mutated valid requests with their ICRC repaired so they get past the check) hit a
//! device with live RC, UC and UD QPs and memory regions. It panics if any byte outside the
//! remotely writable region changes, or if the device panics. [`cm`] is the connection
//! managers' harness.

pub mod cm;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{
    AtomicEthRepr, BthRepr, ExtRepr, Gid, Mtu, Opcode, Psn, Qpn, ROCE_V2_PORT, RethRepr, RoceRepr,
};

use softroce_emu_core::*;

const GUARD: usize = 4096;
const WINDOW: usize = 8192;

/// A device under attack and the memory it must not touch.
#[derive(Debug)]
pub struct Target {
    hca: Hca,
    backing: Vec<u8>,
    ptr: *mut u8,
    qpns: Vec<u32>,
    now: Instant,
    buf: Vec<u8>,
    /// The remote key of the writable window (so inputs can aim at it).
    pub rkey: u32,
    /// Its virtual address.
    pub va: u64,
}

const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));
const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

impl Target {
    /// A device at 10.0.0.1 with RC, UC and UD QPs connected to 10.0.0.2, a remotely
    /// writable window surrounded by read-only guard regions, and receives posted.
    pub fn new() -> Self {
        let local = LOCAL;
        let peer = PEER;
        let mut hca = Hca::new(HcaConfig::new("fuzz", local));
        let mut backing = vec![0x5Au8; GUARD * 2 + WINDOW];
        let ptr = backing.as_mut_ptr();
        let mut qpns = Vec::new();
        let mut rkey = 0;
        let mut va = 0;
        if let Ok(pd) = hca.alloc_pd()
            && let Ok((cq, _)) = hca.create_cq(64, None, 0, 0)
        {
            let all = AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC;
            // SAFETY: `backing` lives in the Target next to the device and never moves.
            let window = unsafe { hca.reg_mr(pd, ptr.wrapping_add(GUARD), WINDOW, all) };
            // The guards are registered read-only, so a bug in bounds checks would show.
            // SAFETY: as above.
            let _ = unsafe { hca.reg_mr(pd, ptr, GUARD, AccessFlags::REMOTE_READ) };
            if let Ok((_, keys)) = window {
                rkey = keys.rkey;
                va = ptr as u64 + GUARD as u64;
                for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
                    let init = QpInitAttr {
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: QpCap::new(4, 4),
                        qp_type,
                        sq_sig_all: true,
                        qp_context: 0,
                    };
                    let Ok((qp, qpn, _)) = hca.create_qp(pd, init) else {
                        continue;
                    };
                    let _ = connect(&mut hca, qp, qp_type, peer);
                    for i in 0..4u64 {
                        let sge = Sge {
                            addr: va + i * 1024,
                            length: 1024,
                            lkey: keys.lkey,
                        };
                        let _ = hca.post_recv(
                            qp,
                            &[RecvWr {
                                wr_id: i,
                                sg_list: vec![sge].into(),
                            }],
                        );
                    }
                    qpns.push(qpn.value());
                }
            }
        }
        Self {
            hca,
            backing,
            ptr,
            qpns,
            now: Instant::now(),
            buf: Vec::new(),
            rkey,
            va,
        }
    }

    /// The QP numbers (RC, UC, UD).
    pub fn qpns(&self) -> &[u32] {
        &self.qpns
    }

    /// Deliver one datagram from the peer; when `repair_icrc`, the packet's ICRC is
    /// recomputed first so it passes the check. Then let the device send and time out.
    pub fn deliver(&mut self, data: &[u8], repair_icrc: bool) {
        self.deliver_from(self.peer(), data, repair_icrc);
    }

    /// [`Target::deliver`] from another source address.
    pub fn deliver_from(&mut self, src: SocketAddr, data: &[u8], repair_icrc: bool) {
        self.deliver_then_send(src, data, repair_icrc, 10_000);
    }

    /// Deliver one datagram from `src`, then let the device send at most `sends` datagrams
    /// before time moves on: answers it still owes (READ responses not yet built) stay owed,
    /// so the next datagram meets them.
    pub fn deliver_then_send(
        &mut self,
        src: SocketAddr,
        data: &[u8],
        repair_icrc: bool,
        sends: usize,
    ) {
        let dst = LOCAL;
        let mut data = data.to_vec();
        if repair_icrc {
            let ep = UdpEndpoints {
                src: src.ip(),
                dst,
                src_port: ROCE_V2_PORT,
                dst_port: ROCE_V2_PORT,
            };
            // Too short to carry an ICRC: delivered as it is.
            let _ = icrc::set_icrc_for_udp_socket(&ep, &mut data);
        }
        self.hca.handle_datagram(
            self.now,
            IncomingDatagram {
                src,
                dst,
                payload: &data,
                traffic_class: 0,
                ipv4_id: None,
            },
        );
        for _ in 0..sends {
            if self.hca.poll_transmit(self.now, &mut self.buf).is_none() {
                break;
            }
        }
        self.now += Duration::from_millis(50);
        self.hca.handle_timeout(self.now);
        while self.hca.poll_event().is_some() {}
    }

    /// Where [`Target::deliver`]'s datagrams come from.
    pub fn peer(&self) -> SocketAddr {
        SocketAddr::new(PEER, ROCE_V2_PORT)
    }

    /// The device's own address, where datagrams are delivered.
    pub fn local(&self) -> IpAddr {
        LOCAL
    }

    /// The device, to read counters and events.
    pub fn hca(&mut self) -> &mut Hca {
        &mut self.hca
    }

    /// Panic if a byte outside the writable window changed.
    pub fn check_guards(&self) {
        // SAFETY: reading our own backing buffer through the pointer the device also uses.
        let snapshot = unsafe { std::slice::from_raw_parts(self.ptr, self.backing.len()).to_vec() };
        let guards = [&snapshot[..GUARD], &snapshot[GUARD + WINDOW..]];
        for g in guards {
            assert!(
                g.iter().all(|&b| b == 0x5A),
                "a byte outside the writable region changed"
            );
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Self::new()
    }
}

/// Up to RTR: inputs only reach the device, which answers them as a responder.
fn connect(hca: &mut Hca, qp: QpHandle, qp_type: QpType, peer: IpAddr) -> VerbsResult<()> {
    let bringup = QpBringup {
        mtu: Mtu::Mtu256,
        min_rnr_timer: 1,
        rd_atomic: 4,
        ..QpBringup::new(qp_type)
    };
    let peer = QpPeer {
        qpn: 0x33,
        psn: Psn::new(100),
        av: AhAttr::new(Gid::from_ip(peer), 0),
    };
    bringup.to_rtr(hca, qp, &peer)
}

/// The fuzz entry point: first byte picks raw vs ICRC-repaired delivery; the rest is the
/// datagram.
pub fn datagram(data: &[u8]) {
    let mut t = Target::new();
    if let Some((&mode, rest)) = data.split_first() {
        t.deliver(rest, mode & 1 == 1);
    }
    t.check_guards();
}

/// One record: a kind byte (low 3 bits: what; high 5: how many datagrams the device may send
/// after it, in fours), five argument bytes, and for raw datagrams the bytes themselves.
fn responder_request(t: &Target, kind: u8, arg: [u8; 5], raw: &[u8]) -> Vec<u8> {
    let qpn = Qpn::from_wire(t.qpns().first().copied().unwrap_or(0));
    let psn = Psn::new(100 + u32::from(arg[0] % 64));
    // Offsets reach a little outside the window on both sides.
    let va = (t.va as i64 + i64::from(u16::from_le_bytes([arg[1], arg[2]])) - 4096) as u64;
    let len = u32::from(u16::from_le_bytes([arg[3], arg[4]]));
    let (op, ext) = match kind & 7 {
        0..=2 => (
            Opcode::RC_RDMA_READ_REQUEST,
            ExtRepr {
                reth: Some(RethRepr {
                    va,
                    rkey: t.rkey,
                    dma_len: len,
                }),
                ..ExtRepr::default()
            },
        ),
        3 | 4 => (
            if kind & 7 == 3 {
                Opcode::RC_FETCH_ADD
            } else {
                Opcode::RC_COMPARE_SWAP
            },
            ExtRepr {
                atomic_eth: Some(AtomicEthRepr {
                    va,
                    rkey: t.rkey,
                    swap_add: u64::from(len),
                    compare: 0,
                }),
                ..ExtRepr::default()
            },
        ),
        _ => return raw.to_vec(),
    };
    let repr = RoceRepr::new(BthRepr::new(op, qpn, psn), ext, 0);
    let mut out = vec![0u8; repr.buffer_len()];
    let _ = repr.emit_with_payload(&[], &mut out);
    out
}

/// Sequences of requests against the RC responder, the device sending only part of what it
/// owes between them: new and duplicate READs from any PSN and offset (so replays restart
/// answers still being built), atomics and their replays, raw datagrams. Shared by the
/// `responder` cargo-fuzz target and the stable replay of its corpus. Panics if a byte
/// outside the writable region changes.
pub fn responder_sequence(data: &[u8]) {
    let mut t = Target::new();
    let mut rest = data;
    for _ in 0..64 {
        let Some((&kind, tail)) = rest.split_first() else {
            break;
        };
        let mut arg = [0u8; 5];
        let n = tail.len().min(5);
        arg[..n].copy_from_slice(&tail[..n]);
        let tail = &tail[n..];
        let raw_len = usize::from(arg[0]).min(tail.len());
        let (raw, tail) = if kind & 7 >= 5 {
            tail.split_at(raw_len)
        } else {
            (&[][..], tail)
        };
        rest = tail;
        let packet = responder_request(&t, kind, arg, raw);
        let sends = usize::from(kind >> 3) * 4;
        t.deliver_then_send(t.peer(), &packet, true, sends);
    }
    t.check_guards();
}
