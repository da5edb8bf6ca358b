//! XRC over the deterministic fabric: an initiator on A, a target QP and XRC SRQs on B. The
//! initiator is an RC requester (PSNs, ACKs, retries) whose requests name an SRQ; the
//! target serves each with the SRQ named, its PD and its CQ.

mod common;

use std::time::Duration;

use common::*;
use softroce_emu::core::*;
use softroce_emu::sim::{Fabric, FilterAction};
use softroce_wire::Qpn;

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
    b_xrcd: XrcdHandle,
    b_srq: SrqHandle,
    b_srqn: u32,
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
        let b_xrcd = hb.open_xrcd();
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
            b_xrcd,
            b_srq,
            b_srqn,
            b_tgt,
        }
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
    let b_ip = x.fabric.addr(x.b);
    let mut n = 0;
    x.fabric.set_filter(move |d| {
        if d.dst.ip() == b_ip {
            n += 1;
            if n == 2 {
                return FilterAction::Drop;
            }
        }
        FilterAction::Pass
    });
    let (srq, sge) = (x.b_srq, x.b_mem.sge(0, 4096));
    let recv = RecvWr {
        wr_id: 9,
        sg_list: vec![sge],
    };
    x.fabric.node_mut(x.b).post_srq_recv(srq, &[recv]).unwrap();
    let data = pattern(5, 3000);
    x.a_mem.write(0, &data);
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![x.a_mem.sge(0, 3000)];
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
    read.sg_list = vec![x.a_mem.sge(0, 2500)];
    read.rdma = RdmaTarget {
        remote_addr: x.b_mem.addr(100),
        rkey: x.b_mem.keys.rkey,
    };
    read.xrc_remote_srqn = x.b_srqn;
    x.post(read);
    let mut add = SendWr::new(2, WrOpcode::AtomicFetchAndAdd);
    add.sg_list = vec![x.a_mem.sge(4096, 8)];
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
    let other = x.fabric.node_mut(b).open_xrcd();
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
    wr.sg_list = vec![x.a_mem.sge(0, 8)];
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
    wr.sg_list = vec![x.a_mem.sge(0, 9)];
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

