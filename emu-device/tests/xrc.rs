//! XRC over the deterministic fabric: an initiator on A, a target QP and XRC SRQs on B. The
//! initiator is an RC requester (PSNs, ACKs, retries) whose requests name an SRQ; the
//! target serves each with the SRQ named, its PD and its CQ.

mod common;

use std::time::Duration;

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::Fabric;
use softroce_wire::{BthRepr, ExtRepr, NakCode, Opcode, Psn, Qpn, RethRepr, RoceRepr, Syndrome};

const LONG: Duration = Duration::from_secs(10);

struct Xrc {
    fabric: Fabric<Hca>,
    a: softroce_emu::sim::NodeId,
    b: softroce_emu::sim::NodeId,
    a_cq: CqHandle,
    a_qp: QpHandle,
    a_mem: Memory,
    b_mem: Memory,
    b_cq: CqHandle,
    b_pd: PdHandle,
    b_xrcd: XrcdHandle,
    b_srq: SrqHandle,
    b_srqn: u32,
    b_qp: QpHandle,
    b_tgt: Qpn,
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

impl Xrc {
    fn new(seed: u64) -> Self {
        let mut fabric = Fabric::new(seed);
        let mut ha = device(A_IP, seed);
        let (a_pd, a_cq, a_mem) = end(&mut ha, access());
        let (a_qp, a_qpn, _) = ha
            .create_qp(
                a_pd,
                QpInitAttr {
                    send_cq: a_cq,
                    recv_cq: a_cq,
                    srq: None,
                    cap: QpCap::new(32, 0).with_sges(2),
                    qp_type: QpType::XrcSend,
                    sq_sig_all: true,
                    qp_context: 0,
                },
            )
            .unwrap();
        let mut hb = device(B_IP, seed + 1);
        let (b_pd, b_cq, b_mem) = end(&mut hb, access());
        let b_xrcd = hb.open_xrcd().unwrap();
        let srq_attr = SrqAttr {
            max_wr: 32,
            max_sge: 2,
            srq_limit: 0,
        };
        let (b_srq, _) = hb.create_xrc_srq(b_pd, b_xrcd, b_cq, srq_attr, 0).unwrap();
        let b_srqn = hb.srq_num(b_srq).unwrap();
        let (b_qp, b_tgt) = hb.create_xrc_recv_qp(b_xrcd, 0).unwrap();
        bring_up(&mut ha, a_qp, QpType::XrcSend, B_IP, b_tgt.value());
        bring_up(&mut hb, b_qp, QpType::XrcRecv, A_IP, a_qpn.value());
        let a = fabric.add_node(A_IP.parse().unwrap(), ha);
        let b = fabric.add_node(B_IP.parse().unwrap(), hb);
        Self {
            fabric,
            a,
            b,
            a_cq,
            a_qp,
            a_mem,
            b_mem,
            b_cq,
            b_pd,
            b_xrcd,
            b_srq,
            b_srqn,
            b_qp,
            b_tgt,
        }
    }

    /// Post a receive of B's `len` bytes at `off` to the XRC SRQ.
    fn srq_recv(&mut self, wr_id: u64, off: usize, len: usize) {
        let (srq, sge) = (self.b_srq, self.b_mem.sge(off, len));
        let recv = RecvWr {
            wr_id,
            sg_list: vec![sge].into(),
        };
        self.fabric
            .node_mut(self.b)
            .post_srq_recv(srq, &[recv])
            .unwrap();
    }

    fn post(&mut self, wr: SendWr) {
        post_one(&mut self.fabric, self.a, self.a_qp, wr);
    }

    /// Drive until `cq` of `node` has `n` completions.
    fn completions(&mut self, b_side: bool, n: usize) -> Vec<WorkCompletion> {
        let (node, cq) = if b_side {
            (self.b, self.b_cq)
        } else {
            (self.a, self.a_cq)
        };
        drive(&mut self.fabric, node, cq, n, LONG)
    }
}

/// A three-packet SEND through a lossy link: the initiator retries as RC does, and the
/// message lands whole in the XRC SRQ it named, completing on the SRQ's CQ with the target
/// QP's number.
#[test]
fn a_send_survives_loss_and_lands_in_the_named_srq() {
    let mut x = Xrc::new(3);
    lose_to(&mut x.fabric, x.b, |n| n == 2);
    x.srq_recv(9, 0, 4096);
    let data = pattern(5, 3000);
    x.a_mem.write(0, &data);
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![x.a_mem.sge(0, 3000)].into();
    wr.xrc_remote_srqn = x.b_srqn;
    x.post(wr);
    let a = x.completions(false, 1);
    assert_eq!(a[0].status, WcStatus::Success);
    let b = x.completions(true, 1);
    assert_eq!(
        (b[0].status, b[0].wr_id, b[0].byte_len, b[0].qp_num),
        (WcStatus::Success, 9, 3000, x.b_tgt.value())
    );
    assert_eq!(x.b_mem.read(0, 3000), data);
    assert!(x.fabric.node_mut(x.a).counters().retransmitted_pkts > 0);
}

/// READ and FETCH_ADD over XRC: the rkey is checked against the named SRQ's PD, and the
/// responses come back as XRC responses the initiator completes.
#[test]
fn read_and_atomics_use_the_named_srqs_pd() {
    let mut x = Xrc::new(4);
    x.b_mem.write(100, &pattern(7, 2500));
    x.b_mem.write(8192, &41u64.to_ne_bytes());
    let mut read = SendWr::new(1, WrOpcode::RdmaRead);
    read.sg_list = vec![x.a_mem.sge(0, 2500)].into();
    read.rdma = RdmaTarget {
        remote_addr: x.b_mem.addr(100),
        rkey: x.b_mem.keys.rkey,
    };
    read.xrc_remote_srqn = x.b_srqn;
    x.post(read);
    let mut add = SendWr::new(2, WrOpcode::AtomicFetchAndAdd);
    add.sg_list = vec![x.a_mem.sge(4096, 8)].into();
    add.atomic = AtomicTarget {
        remote_addr: x.b_mem.addr(8192),
        compare_add: 1,
        swap: 0,
        rkey: x.b_mem.keys.rkey,
    };
    add.xrc_remote_srqn = x.b_srqn;
    x.post(add);
    let a = x.completions(false, 2);
    assert!(a.iter().all(|w| w.status == WcStatus::Success), "{a:?}");
    assert_eq!(x.a_mem.read(0, 2500), pattern(7, 2500));
    assert_eq!(x.a_mem.read(4096, 8), 41u64.to_ne_bytes());
    assert_eq!(x.b_mem.read(8192, 8), 42u64.to_ne_bytes());
}

/// A request naming no SRQ of the target's domain is an invalid request: the initiator's
/// WR completes with IBV_WC_REM_INV_REQ_ERR; the domain stays busy while its SRQ and target
/// QP exist.
#[test]
fn an_srq_outside_the_domain_is_an_invalid_request() {
    let mut x = Xrc::new(5);
    let b = x.b;
    let (pd_b, cq_b) = (x.fabric.node_mut(b).alloc_pd().unwrap(), x.b_cq);
    let other = x.fabric.node_mut(b).open_xrcd().unwrap();
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let (foreign, _) = x
        .fabric
        .node_mut(b)
        .create_xrc_srq(pd_b, other, cq_b, attr, 0)
        .unwrap();
    let foreign_srqn = x.fabric.node_mut(b).srq_num(foreign).unwrap();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![x.a_mem.sge(0, 8)].into();
    wr.xrc_remote_srqn = foreign_srqn;
    x.post(wr);
    let a = x.completions(false, 1);
    assert_eq!(a[0].status, WcStatus::RemInvReqErr);
    let busy = x.fabric.node_mut(b).close_xrcd(x.b_xrcd);
    assert!(matches!(busy, Err(VerbsError::Busy { .. })), "{busy:?}");
}

/// The rkey of an RDMA WRITE over XRC must name a region of the named SRQ's PD: a region of
/// another PD of the same device is a remote access error, and nothing is written.
#[test]
fn a_write_to_a_region_outside_the_srqs_pd_is_a_remote_access_error() {
    let mut x = Xrc::new(6);
    let b = x.b;
    let other_pd = x.fabric.node_mut(b).alloc_pd().unwrap();
    let elsewhere = register(x.fabric.node_mut(b), other_pd, 4096, access());
    x.a_mem.write(0, b"xrc-write");
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite);
    wr.sg_list = vec![x.a_mem.sge(0, 9)].into();
    wr.rdma = RdmaTarget {
        remote_addr: elsewhere.addr(0),
        rkey: elsewhere.keys.rkey,
    };
    wr.xrc_remote_srqn = x.b_srqn;
    x.post(wr);
    let a = x.completions(false, 1);
    assert_eq!(a[0].status, WcStatus::RemAccessErr);
    assert_eq!(elsewhere.read(0, 9), vec![0; 9]);
}

impl Xrc {
    /// A second XRC SRQ of B's domain (B's PD, a CQ of its own), one 4 KiB receive posted
    /// at `off`: its handle, number and CQ.
    fn second_srq(&mut self, wr_id: u64, off: usize) -> (SrqHandle, u32, CqHandle) {
        let (b, pd, xrcd) = (self.b, self.b_pd, self.b_xrcd);
        let sge = self.b_mem.sge(off, 4096);
        let h = self.fabric.node_mut(b);
        let (cq, _) = h.create_cq(16, None, 0, 0).unwrap();
        let attr = SrqAttr {
            max_wr: 4,
            max_sge: 1,
            srq_limit: 0,
        };
        let (srq, _) = h.create_xrc_srq(pd, xrcd, cq, attr, 0).unwrap();
        let srqn = h.srq_num(srq).unwrap();
        let recv = RecvWr {
            wr_id,
            sg_list: vec![sge].into(),
        };
        h.post_srq_recv(srq, &[recv]).unwrap();
        (srq, srqn, cq)
    }

    /// Hand B's target QP an XRC request from A (`payload_len` bytes of 0x5a) at `psn`,
    /// naming `srqn`: B's answer, if it gave one.
    fn inject(&mut self, op: Opcode, psn: Psn, srqn: u32, payload_len: usize) -> Option<Syndrome> {
        let mut bth = BthRepr::new(op, self.b_tgt, psn);
        bth.ack_req = true;
        let ext = ExtRepr {
            xrceth: Some(srqn),
            ..ExtRepr::default()
        };
        let repr = RoceRepr::new(bth, ext, payload_len);
        let payload = vec![0x5a; payload_len];
        inject(&mut self.fabric, self.a, self.b, &repr, &payload)?.1
    }
}

/// The packets of one SEND name one XRC SRQ: a LAST naming another SRQ of the domain than
/// its FIRST did is a malformed continuation (NAK invalid request, the target QP in ERR, as
/// for a LAST without a FIRST); nothing completes successfully, the receive the FIRST took
/// completes in error on its own SRQ's CQ, and the other SRQ (with a CQ of its own) keeps
/// its receive and sees nothing.
#[test]
fn a_send_whose_packets_name_different_srqs_is_an_invalid_request() {
    let mut x = Xrc::new(7);
    let srqn = x.b_srqn;
    x.srq_recv(1, 0, 4096);
    let (other, other_n, other_cq) = x.second_srq(2, 8192);
    let psn = Psn::new(0x00ff_fff0);
    assert_eq!(
        x.inject(Opcode::XRC_SEND_FIRST, psn, srqn, 1024),
        Some(Syndrome::ACK)
    );
    assert_eq!(
        x.inject(Opcode::XRC_SEND_LAST, psn.next(), other_n, 100),
        Some(Syndrome::Nak(NakCode::InvalidRequest))
    );
    let qp = x.b_qp;
    assert_eq!(x.fabric.node_mut(x.b).qp_state(qp).unwrap(), QpState::Err);
    let b = x.completions(true, 2);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(
        (b[0].wr_id, b[0].status, b[0].qp_num),
        (1, WcStatus::RemInvReqErr, x.b_tgt.value())
    );
    let h = x.fabric.node_mut(x.b);
    assert_eq!(h.srq_len(other).unwrap(), 1);
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 2];
    assert_eq!(
        h.poll_cq(other_cq, &mut wcs).unwrap(),
        0,
        "nothing on its CQ"
    );
    assert_eq!(
        x.b_mem.read(1024, 100),
        vec![0; 100],
        "the LAST was not placed"
    );
    assert_eq!(x.b_mem.read(8192, 100), vec![0; 100]);
}

/// The same SRQ named by every packet is an ordinary three-packet SEND (the check above
/// refuses only a change).
#[test]
fn a_send_whose_packets_name_one_srq_is_received() {
    let mut x = Xrc::new(8);
    let srqn = x.b_srqn;
    x.srq_recv(1, 0, 4096);
    let psn = Psn::new(0x00ff_fff0);
    assert_eq!(
        x.inject(Opcode::XRC_SEND_FIRST, psn, srqn, 1024),
        Some(Syndrome::ACK)
    );
    let middle = x.inject(Opcode::XRC_SEND_MIDDLE, psn.next(), srqn, 1024);
    assert_eq!(middle, Some(Syndrome::ACK));
    let last = x.inject(Opcode::XRC_SEND_LAST, psn.next().next(), srqn, 100);
    assert_eq!(last, Some(Syndrome::ACK));
    let b = x.completions(true, 1);
    assert_eq!(
        (b[0].wr_id, b[0].status, b[0].byte_len),
        (1, WcStatus::Success, 2148)
    );
    assert_eq!(x.b_mem.read(0, 2148), vec![0x5a; 2148]);
}

/// ibv_create_qp(3), ibv_get_async_event(3): a QP whose receives come from SRQs raises
/// IBV_EVENT_QP_LAST_WQE_REACHED when it enters ERR — an XRC target as well (its XRC SRQs
/// are shared, not flushed), once per entry into ERR.
#[test]
fn an_xrc_target_entering_err_raises_last_wqe_reached() {
    let mut x = Xrc::new(9);
    let (b, qp) = (x.b, x.b_qp);
    let h = x.fabric.node_mut(b);
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    h.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
    let ev = h.get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::QpLastWqeReached, EventElement::Qp(qp))
    );
    h.ack_async_event(&ev).unwrap();
    h.modify_qp(qp, &attr, QpAttrMask::STATE).unwrap();
    assert!(h.get_async_event().is_err(), "once per entry into ERR");
    // An invalid request moves a target to ERR too: its QP_REQ_ERR, then LAST_WQE_REACHED.
    let mut x = Xrc::new(10);
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![x.a_mem.sge(0, 8)].into();
    wr.xrc_remote_srqn = 0x00ab_cdef;
    x.post(wr);
    assert_eq!(x.completions(false, 1)[0].status, WcStatus::RemInvReqErr);
    let (b, qp) = (x.b, x.b_qp);
    let h = x.fabric.node_mut(b);
    let events: Vec<_> = (0..4)
        .map_while(|_| h.get_async_event().ok())
        .map(|e| (e.event_type, e.element))
        .collect();
    assert_eq!(
        events,
        [
            (EventType::QpReqErr, EventElement::Qp(qp)),
            (EventType::QpLastWqeReached, EventElement::Qp(qp))
        ]
    );
}

/// The same rule for an RDMA WRITE of several packets: a MIDDLE naming another XRC SRQ of
/// the domain than its FIRST did is NAKed as an invalid request and not written.
#[test]
fn a_write_whose_packets_name_different_srqs_is_an_invalid_request() {
    let mut x = Xrc::new(11);
    let (_, other_n, _) = x.second_srq(2, 8192);
    let psn = Psn::new(0x00ff_fff0);
    let first = {
        let mut bth = BthRepr::new(Opcode::XRC_RDMA_WRITE_FIRST, x.b_tgt, psn);
        bth.ack_req = true;
        let ext = ExtRepr {
            xrceth: Some(x.b_srqn),
            reth: Some(RethRepr {
                va: x.b_mem.addr(16384),
                rkey: x.b_mem.keys.rkey,
                dma_len: 3000,
            }),
            ..ExtRepr::default()
        };
        RoceRepr::new(bth, ext, 1024)
    };
    let (a, b) = (x.a, x.b);
    let ack = inject(&mut x.fabric, a, b, &first, &[0x5a; 1024]).and_then(|(_, s)| s);
    assert_eq!(ack, Some(Syndrome::ACK));
    assert_eq!(
        x.inject(Opcode::XRC_RDMA_WRITE_MIDDLE, psn.next(), other_n, 1024),
        Some(Syndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(x.b_mem.read(16384, 1024), vec![0x5a; 1024], "the FIRST");
    assert_eq!(x.b_mem.read(17408, 1024), vec![0; 1024], "not the MIDDLE");
    let qp = x.b_qp;
    assert_eq!(x.fabric.node_mut(b).qp_state(qp).unwrap(), QpState::Err);
}

/// ibv_modify_qp(3): an XRC target moved to ERR in the middle of a SEND completes the
/// receive that SEND took with IBV_WC_WR_FLUSH_ERR on the CQ of the SRQ its FIRST named
/// (not of an SRQ a stray later packet named), then raises LAST_WQE_REACHED.
#[test]
fn a_target_moved_to_err_mid_message_flushes_the_receive_it_took() {
    let mut x = Xrc::new(12);
    x.srq_recv(1, 0, 4096);
    let (_, other_n, other_cq) = x.second_srq(2, 8192);
    let psn = Psn::new(0x00ff_fff0);
    let first = x.inject(Opcode::XRC_SEND_FIRST, psn, x.b_srqn, 1024);
    assert_eq!(first, Some(Syndrome::ACK));
    // Out of sequence, naming the other SRQ: NAKed for its PSN, and no say in the message.
    let stray = x.inject(Opcode::XRC_SEND_LAST, psn.add(5), other_n, 100);
    assert_eq!(stray, Some(Syndrome::Nak(NakCode::PsnSequenceError)));
    let (b, qp) = (x.b, x.b_qp);
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    x.fabric
        .node_mut(b)
        .modify_qp(qp, &attr, QpAttrMask::STATE)
        .unwrap();
    let w = x.completions(true, 2);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].qp_num),
        (1, WcStatus::WrFlushErr, x.b_tgt.value())
    );
    let h = x.fabric.node_mut(b);
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 2];
    assert_eq!(h.poll_cq(other_cq, &mut wcs).unwrap(), 0);
    let ev = h.get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::QpLastWqeReached, EventElement::Qp(qp))
    );
}

/// ibv_modify_qp(3): an XRC target moved straight to RESET in the middle of a SEND
/// completes nothing; the receive that SEND took goes back to the head of the SRQ its FIRST
/// named (not of an SRQ a stray later packet named), and the next SEND to that SRQ takes it.
#[test]
fn a_target_reset_mid_message_gives_the_receive_back_to_its_srq() {
    let mut x = Xrc::new(13);
    x.srq_recv(1, 0, 4096);
    x.srq_recv(2, 4096, 4096);
    let (b, qp, srq) = (x.b, x.b_qp, x.b_srq);
    let limit = SrqAttr {
        srq_limit: 1,
        ..SrqAttr::default()
    };
    let mask = SrqAttrMask {
        limit: true,
        max_wr: false,
    };
    x.fabric.node_mut(b).modify_srq(srq, limit, mask).unwrap();
    let (other, other_n, other_cq) = x.second_srq(3, 8192);
    let psn = Psn::new(0x00ff_fff0);
    let first = x.inject(Opcode::XRC_SEND_FIRST, psn, x.b_srqn, 1024);
    assert_eq!(first, Some(Syndrome::ACK));
    let stray = x.inject(Opcode::XRC_SEND_LAST, psn.add(5), other_n, 100);
    assert_eq!(stray, Some(Syndrome::Nak(NakCode::PsnSequenceError)));
    assert_eq!(x.fabric.node_mut(b).srq_len(srq).unwrap(), 1);
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    let h = x.fabric.node_mut(b);
    h.modify_qp(qp, &reset, QpAttrMask::STATE).unwrap();
    let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 2];
    assert_eq!(
        h.poll_cq(x.b_cq, &mut wcs).unwrap(),
        0,
        "RESET completes nothing"
    );
    assert_eq!(h.poll_cq(other_cq, &mut wcs).unwrap(), 0);
    assert_eq!(h.srq_len(srq).unwrap(), 2, "receive 1 is back");
    assert_eq!(h.srq_len(other).unwrap(), 1);
    assert!(h.get_async_event().is_err(), "no event, no SRQ limit");
    // The real initiator, still at the PSN the injected FIRST used, sends to a target
    // brought back up.
    let a_qpn = x.fabric.node_mut(x.a).qp_num(x.a_qp).unwrap();
    bring_up(
        x.fabric.node_mut(b),
        qp,
        QpType::XrcRecv,
        A_IP,
        a_qpn.value(),
    );
    for (wr_id, off) in [(7, 0), (8, 64)] {
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![x.a_mem.sge(off, 64)].into();
        wr.xrc_remote_srqn = x.b_srqn;
        x.post(wr);
    }
    let a = x.completions(false, 2);
    assert!(a.iter().all(|w| w.status == WcStatus::Success), "{a:?}");
    let w = x.completions(true, 2);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)],
        "the first SEND after the reset takes the receive given back"
    );
    let h = x.fabric.node_mut(b);
    let ev = h.get_async_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.element),
        (EventType::SrqLimitReached, EventElement::Srq(srq)),
        "fired once the SRQ ran empty, below its limit of 1"
    );
    h.ack_async_event(&ev).unwrap();
    assert_eq!(h.poll_cq(other_cq, &mut wcs).unwrap(), 0);
}

/// XRC domains are bounded as every other object of a device: a program opening them in a
/// loop gets ENOMEM at `MAX_XRCDS`, not a device that grows without end; closing one lets
/// one more open.
#[test]
fn opening_xrc_domains_stops_at_the_device_limit() {
    let mut hca = Hca::new(HcaConfig::new("xrcds", "10.0.0.9".parse().unwrap()));
    let mut open = Vec::with_capacity(MAX_XRCDS);
    for _ in 0..MAX_XRCDS {
        open.push(hca.open_xrcd().expect("below the limit"));
    }
    let refused = hca.open_xrcd().expect_err("one past the limit");
    assert_eq!(refused.errno(), libc::ENOMEM, "{refused}");
    hca.close_xrcd(open.pop().unwrap()).unwrap();
    hca.open_xrcd().expect("one closed, one opens");
}
