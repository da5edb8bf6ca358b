//! Tag matching over the deterministic fabric: an RC sender on A, an RC QP on B attached to
//! a tag matching SRQ (ibv_create_srq_ex(3) `IBV_SRQT_TM`, ibv_post_srq_ops(3)). Messages
//! start with a `struct ibv_tmh`; the wire carries nothing but RC SENDs and READs.

mod common;

use std::time::Duration;

use common::*;
use softroce_emu::core::tm::{Rvh, TMH_LEN, Tmh, TmhOp};
use softroce_emu::core::*;
use softroce_emu::sim::{Fabric, NodeId};
use softroce_wire::{BthRepr, ExtRepr, NakCode, Opcode, Psn, Qpn, RoceRepr, Syndrome};

const LONG: Duration = Duration::from_secs(10);

struct Tm {
    fabric: Fabric<Hca>,
    a: NodeId,
    b: NodeId,
    a_cq: CqHandle,
    a_qp: QpHandle,
    a_mem: Memory,
    b_mem: Memory,
    b_cq: CqHandle,
    b_srq: SrqHandle,
    b_qp: QpHandle,
    b_qpn: Qpn,
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn srq_attr() -> SrqAttr {
    SrqAttr {
        max_wr: 32,
        max_sge: 1,
        srq_limit: 0,
    }
}

fn tmh(op: TmhOp, tag: u64, app_ctx: u32) -> [u8; TMH_LEN] {
    Tmh {
        opcode: op as u8,
        app_ctx,
        tag,
    }
    .emit()
}

fn add(wr_id: u64, tag: u64, mask: u64, sge: Sge) -> TmOp {
    TmOp {
        wr_id,
        kind: TmOpKind::Add {
            recv_wr_id: wr_id,
            sg_list: vec![sge],
            tag,
            mask,
        },
        signaled: true,
        sync: None,
        handle: 0,
    }
}

fn op(wr_id: u64, kind: TmOpKind, sync: Option<u32>) -> TmOp {
    TmOp {
        wr_id,
        kind,
        signaled: true,
        sync,
        handle: 0,
    }
}

impl Tm {
    fn new(seed: u64, max_num_tags: u32) -> Self {
        let mut fabric = Fabric::new(seed);
        let mut ha = device(A_IP, seed);
        let (a_pd, a_cq, a_mem) = end(&mut ha, access());
        let init = |cq, srq| QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap: QpCap::new(32, if srq.is_some() { 0 } else { 32 }),
            qp_type: QpType::Rc,
            sq_sig_all: true,
            qp_context: 0,
        };
        let (a_qp, a_qpn, _) = ha.create_qp(a_pd, init(a_cq, None)).unwrap();
        let mut hb = device(B_IP, seed + 1);
        let (b_pd, b_cq, b_mem) = end(&mut hb, access());
        let (b_srq, _) = hb
            .create_tm_srq(b_pd, b_cq, srq_attr(), max_num_tags, 16, 0)
            .unwrap();
        let (b_qp, b_qpn, _) = hb.create_qp(b_pd, init(b_cq, Some(b_srq))).unwrap();
        bring_up(&mut ha, a_qp, QpType::Rc, B_IP, b_qpn.value());
        bring_up(&mut hb, b_qp, QpType::Rc, A_IP, a_qpn.value());
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
            b_srq,
            b_qp,
            b_qpn,
        }
    }

    fn b(&mut self) -> &mut Hca {
        self.fabric.node_mut(self.b)
    }

    /// Post `ops` on B's SRQ; their handles.
    fn ops(&mut self, mut ops: Vec<TmOp>) -> Result<Vec<u32>, PostError> {
        let srq = self.b_srq;
        self.b().post_srq_ops(srq, &mut ops)?;
        Ok(ops.iter().map(|o| o.handle).collect())
    }

    fn srq_recv(&mut self, wr_id: u64, off: usize, len: usize) {
        let (srq, sge) = (self.b_srq, self.b_mem.sge(off, len));
        let wr = RecvWr {
            wr_id,
            sg_list: vec![sge].into(),
        };
        self.b().post_srq_recv(srq, &[wr]).unwrap();
    }

    /// A sends `header ++ body` from its buffer's start.
    fn send(&mut self, wr_id: u64, header: &[u8], body: &[u8]) {
        self.a_mem.write(0, header);
        self.a_mem.write(header.len(), body);
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![self.a_mem.sge(0, header.len() + body.len())].into();
        post_one(&mut self.fabric, self.a, self.a_qp, wr);
    }

    /// Drive until `cq` of B (or A) has `n` completions.
    fn completions(&mut self, b_side: bool, n: usize) -> Vec<WorkCompletion> {
        let (node, cq) = if b_side {
            (self.b, self.b_cq)
        } else {
            (self.a, self.a_cq)
        };
        drive(&mut self.fabric, node, cq, n, LONG)
    }

    fn one(&mut self, b_side: bool) -> WorkCompletion {
        let w = self.completions(b_side, 1);
        assert_eq!(w.len(), 1, "no completion");
        w[0]
    }
}

/// An EAGER message matches the oldest tag with `msg.tag & mask == tag`; it lands without
/// its header in the tag's buffer (three packets here, one lost and resent), completing
/// `IBV_WC_TM_RECV` with `TM_MATCH | TM_DATA_VALID`, the tag's recv_wr_id and tm_info.
#[test]
fn eager_match_strips_the_header_and_reports_tm_info() {
    let mut t = Tm::new(11, 8);
    let sge = t.b_mem.sge(4096, 4096);
    let h = t.ops(vec![add(70, 0x34, 0xff, sge)]).unwrap();
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.status, w.wc_flags),
        (WcOpcode::TmAdd, 70, WcStatus::Success, WcFlags::EMPTY)
    );
    lose_to(&mut t.fabric, t.b, |n| n == 2);
    let body = pattern(3, 2900);
    t.send(1, &tmh(TmhOp::Eager, 0xab34, 0x5150), &body);
    assert_eq!(t.one(false).status, WcStatus::Success);
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.status),
        (WcOpcode::TmRecv, 70, WcStatus::Success)
    );
    assert_eq!(w.wc_flags, WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID);
    assert_eq!((w.tm_tag, w.tm_priv, w.byte_len), (0xab34, 0x5150, 2900));
    assert_eq!(t.b_mem.read(4096, 2900), body);
    // Consumed: deleting it now is a TM_ERR completion.
    t.ops(vec![op(71, TmOpKind::Del { handle: h[0] }, None)])
        .unwrap();
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.status),
        (WcOpcode::TmDel, 71, WcStatus::TmErr)
    );
}

/// A tagged message matching nothing is unexpected: it lands whole, header included, in an
/// ordinary SRQ receive (`IBV_WC_TM_RECV`, no flags, no tm_info). Until software reports it
/// handled (`IBV_OPS_TM_SYNC`), nothing matches and list operations ask for a sync.
#[test]
fn unexpected_messages_stop_matching_until_software_syncs() {
    let mut t = Tm::new(12, 8);
    t.srq_recv(5, 0, 1024);
    t.srq_recv(6, 0, 1024);
    let sge = t.b_mem.sge(4096, 1024);
    t.ops(vec![add(1, 1, !0, sge)]).unwrap();
    assert_eq!(t.one(true).wc_flags, WcFlags::EMPTY);
    let header = tmh(TmhOp::Eager, 2, 0);
    t.send(1, &header, b"unexpected");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags, w.tm_tag),
        (WcOpcode::TmRecv, 5, WcFlags::EMPTY, 0)
    );
    assert_eq!(w.byte_len as usize, TMH_LEN + 10);
    assert_eq!(t.b_mem.read(0, TMH_LEN), header);
    // Out of sync: an ADD completes with SYNC_REQ, and even tag 1 is unexpected.
    let sge = t.b_mem.sge(8192, 1024);
    t.ops(vec![add(2, 3, !0, sge)]).unwrap();
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wc_flags),
        (WcOpcode::TmAdd, WcFlags::TM_SYNC_REQ)
    );
    t.send(2, &tmh(TmhOp::Eager, 1, 0), b"x");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags),
        (WcOpcode::TmRecv, 6, WcFlags::EMPTY)
    );
    // Software handled both: matching resumes.
    t.ops(vec![op(27, TmOpKind::Sync, Some(2))]).unwrap();
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags),
        (WcOpcode::TmSync, 27, WcFlags::EMPTY)
    );
    t.send(3, &tmh(TmhOp::Eager, 1, 0), b"matched");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags),
        (
            WcOpcode::TmRecv,
            1,
            WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID
        )
    );
    assert_eq!(t.b_mem.read(4096, 7), b"matched");
}

/// A QP moved straight to RESET in the middle of an unexpected message completes nothing:
/// the SRQ receive the message took goes back to the SRQ, and the SRQ's count of unexpected
/// messages drops back too, as software never saw that one to report it handled. Resent
/// whole, the message is unexpected once; software syncs with the one it saw, and matching
/// resumes.
#[test]
fn a_reset_mid_unexpected_message_gives_back_the_receive_and_its_count() {
    let mut t = Tm::new(21, 8);
    t.srq_recv(5, 0, 4096);
    t.srq_recv(6, 0, 4096);
    let sge = t.b_mem.sge(8192, 1024);
    t.ops(vec![add(1, 1, !0, sge)]).unwrap();
    assert_eq!(t.one(true).opcode, WcOpcode::TmAdd);
    lose_to(&mut t.fabric, t.b, |n| n >= 2);
    let header = tmh(TmhOp::Eager, 2, 0);
    let body = pattern(4, 2900);
    t.send(1, &header, &body);
    // Only the FIRST arrives.
    let (b, b_cq, b_qp, srq) = (t.b, t.b_cq, t.b_qp, t.b_srq);
    let w = drive(&mut t.fabric, b, b_cq, 1, Duration::from_millis(2));
    assert_eq!(w, [], "mid-message");
    assert_eq!(t.b().srq_len(srq).unwrap(), 1);
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    t.b().modify_qp(b_qp, &reset, QpAttrMask::STATE).unwrap();
    let w = drive(&mut t.fabric, b, b_cq, 1, Duration::ZERO);
    assert_eq!(w, [], "RESET completes nothing");
    assert_eq!(t.b().srq_len(srq).unwrap(), 2, "receive 5 is back");
    t.fabric.clear_filter();
    let a_qpn = t.fabric.node_mut(t.a).qp_num(t.a_qp).unwrap();
    bring_up(t.b(), b_qp, QpType::Rc, A_IP, a_qpn.value());
    assert_eq!(t.one(false).status, WcStatus::Success);
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags, w.byte_len as usize),
        (WcOpcode::TmRecv, 5, WcFlags::EMPTY, TMH_LEN + 2900)
    );
    t.ops(vec![op(27, TmOpKind::Sync, Some(1))]).unwrap();
    assert_eq!(t.one(true).opcode, WcOpcode::TmSync);
    t.send(3, &tmh(TmhOp::Eager, 1, 0), b"matched");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags),
        (
            WcOpcode::TmRecv,
            1,
            WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID
        ),
        "in sync after one unexpected message"
    );
}

/// NO_TAG is an ordinary receive with its header (`IBV_WC_TM_NO_TAG`); a message shorter
/// than a header is a plain `IBV_WC_RECV`; neither counts as unexpected.
#[test]
fn no_tag_and_short_messages_are_ordinary_receives() {
    let mut t = Tm::new(13, 8);
    t.srq_recv(5, 0, 256);
    t.srq_recv(6, 512, 256);
    let header = tmh(TmhOp::NoTag, 9, 0);
    t.send(1, &header, b"plain");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags, w.tm_tag),
        (WcOpcode::TmNoTag, 5, WcFlags::EMPTY, 0)
    );
    assert_eq!(t.b_mem.read(0, TMH_LEN), header);
    t.send(2, b"", b"short");
    let w = t.one(true);
    assert_eq!((w.opcode, w.wr_id, w.byte_len), (WcOpcode::Recv, 6, 5));
    // Still in sync: an ADD asks for nothing.
    let sge = t.b_mem.sge(4096, 64);
    t.ops(vec![add(1, 1, !0, sge)]).unwrap();
    assert_eq!(t.one(true).wc_flags, WcFlags::EMPTY);
}

/// The list holds max_num_tags entries (ENOMEM beyond); a DEL frees one (TM_DEL), a second
/// DEL of it is TM_ERR, a handle never returned is EINVAL; a deleted tag never matches;
/// operations on an SRQ that is not a tag matching SRQ are EINVAL; an unsignaled ADD
/// completes nothing.
#[test]
fn tag_list_limits_and_deletion() {
    let mut t = Tm::new(14, 2);
    let sge = t.b_mem.sge(4096, 64);
    let mut quiet = add(1, 1, !0, sge);
    quiet.signaled = false;
    let h = t.ops(vec![quiet, add(2, 2, !0, sge)]).unwrap();
    assert_ne!(h[0], h[1]);
    let w = t.completions(true, 2);
    assert_eq!(w.len(), 1, "only the signaled ADD completes: {w:?}");
    let full = t.ops(vec![add(3, 3, !0, sge)]).unwrap_err();
    assert_eq!((full.index, full.error.errno()), (0, error::errno::ENOMEM));
    let never = t
        .ops(vec![op(4, TmOpKind::Del { handle: 2 }, None)])
        .unwrap_err();
    assert_eq!(never.error.errno(), error::errno::EINVAL);
    t.ops(vec![
        op(5, TmOpKind::Del { handle: h[0] }, None),
        op(6, TmOpKind::Del { handle: h[0] }, None),
    ])
    .unwrap();
    let w = t.completions(true, 2);
    assert_eq!(
        (w[0].opcode, w[0].wr_id, w[0].status),
        (WcOpcode::TmDel, 5, WcStatus::Success)
    );
    assert_eq!((w[1].wr_id, w[1].status), (6, WcStatus::TmErr));
    t.srq_recv(9, 0, 256);
    t.send(1, &tmh(TmhOp::Eager, 1, 0), b"deleted");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.wc_flags),
        (WcOpcode::TmRecv, 9, WcFlags::EMPTY)
    );
    // A basic SRQ takes no list operations.
    let b = t.b;
    let pd = t.fabric.node_mut(b).alloc_pd().unwrap();
    let (basic, _) = t.fabric.node_mut(b).create_srq(pd, srq_attr(), 0).unwrap();
    let mut ops = vec![op(1, TmOpKind::Sync, None)];
    let e = t
        .fabric
        .node_mut(b)
        .post_srq_ops(basic, &mut ops)
        .unwrap_err();
    assert_eq!(e.error.errno(), error::errno::EINVAL);
    // Limits of the SRQ itself.
    let (cq, bad) = (
        t.b_cq,
        t.fabric
            .node_mut(b)
            .create_tm_srq(pd, t.b_cq, srq_attr(), 0, 1, 0),
    );
    assert!(bad.is_err(), "max_num_tags 0");
    let caps = t.fabric.node_mut(b).tm_caps();
    let over = t
        .fabric
        .node_mut(b)
        .create_tm_srq(pd, cq, srq_attr(), caps.max_num_tags + 1, 1, 0);
    assert!(over.is_err(), "max_num_tags above tm_caps");
}

/// RNDV: the match completes at once (`TM_MATCH`, tm_info), the device READs the RVH's
/// buffer into the tag's, completes `TM_DATA_VALID`, then sends a FIN (TMH opcode FIN, the
/// tag) that A receives as an ordinary SEND after its own SEND completed. A tag buffer too
/// small for the RVH's length completes `IBV_WC_TM_RNDV_INCOMPLETE` without a READ.
#[test]
fn rendezvous_reads_the_senders_buffer_then_sends_fin() {
    let mut t = Tm::new(15, 8);
    let data = pattern(9, 5000);
    t.a_mem.write(8192, &data);
    let a_qp = t.a_qp;
    let fin_buf = t.a_mem.sge(32768, 64);
    t.fabric
        .node_mut(t.a)
        .post_recv(
            a_qp,
            &[RecvWr {
                wr_id: 44,
                sg_list: vec![fin_buf].into(),
            }],
        )
        .unwrap();
    let sge = t.b_mem.sge(4096, 8192);
    t.ops(vec![add(7, 0x77, !0, sge)]).unwrap();
    t.one(true);
    let mut rvh = [0u8; 16];
    let r = Rvh {
        va: t.a_mem.addr(8192),
        rkey: t.a_mem.keys.rkey,
        len: 5000,
    };
    rvh[0..8].copy_from_slice(&r.va.to_be_bytes());
    rvh[8..12].copy_from_slice(&r.rkey.to_be_bytes());
    rvh[12..16].copy_from_slice(&r.len.to_be_bytes());
    t.send(1, &tmh(TmhOp::Rndv, 0x77, 3), &rvh);
    let a = t.completions(false, 2);
    assert_eq!(
        (a[0].opcode, a[0].wr_id, a[0].status),
        (WcOpcode::Send, 1, WcStatus::Success)
    );
    assert_eq!(
        (a[1].opcode, a[1].wr_id, a[1].byte_len),
        (WcOpcode::Recv, 44, TMH_LEN as u32)
    );
    assert_eq!(t.a_mem.read(32768, TMH_LEN), tmh(TmhOp::Fin, 0x77, 0));
    let b = t.completions(true, 2);
    assert_eq!(
        (b[0].opcode, b[0].wr_id, b[0].wc_flags),
        (WcOpcode::TmRecv, 7, WcFlags::TM_MATCH)
    );
    assert_eq!((b[0].tm_tag, b[0].tm_priv), (0x77, 3));
    assert_eq!(
        (b[1].opcode, b[1].wr_id, b[1].wc_flags),
        (WcOpcode::TmRecv, 7, WcFlags::TM_DATA_VALID)
    );
    assert_eq!((b[1].byte_len, b[1].tm_tag), (5000, 0));
    assert_eq!(t.b_mem.read(4096, 5000), data);
    assert_eq!(
        Rvh::parse(&[tmh(TmhOp::Rndv, 0, 0).as_slice(), &rvh].concat()),
        Some(r)
    );
    // Too small a buffer: the tag completes incomplete; software takes over.
    let small = t.b_mem.sge(20000, 100);
    t.ops(vec![add(8, 0x78, !0, small)]).unwrap();
    t.one(true);
    t.send(2, &tmh(TmhOp::Rndv, 0x78, 0), &rvh);
    let b = t.completions(true, 2);
    assert_eq!((b[0].wr_id, b[0].wc_flags), (8, WcFlags::TM_MATCH));
    assert_eq!((b[1].wr_id, b[1].status), (8, WcStatus::TmRndvIncomplete));
}

/// A rendezvous READ the sender refuses (a bad rkey) completes the tag in error on the SRQ's
/// CQ (`IBV_WC_TM_RECV` with the READ's status); the device's own WRs never show up as send
/// completions, and no FIN is sent.
#[test]
fn a_refused_rendezvous_read_completes_the_tag_in_error() {
    let mut t = Tm::new(16, 8);
    let sge = t.b_mem.sge(4096, 4096);
    t.ops(vec![add(7, 0x77, !0, sge)]).unwrap();
    t.one(true);
    let mut rvh = [0u8; 16];
    rvh[0..8].copy_from_slice(&t.a_mem.addr(8192).to_be_bytes());
    rvh[8..12].copy_from_slice(&(t.a_mem.keys.rkey ^ 0x5a5a).to_be_bytes());
    rvh[12..16].copy_from_slice(&100u32.to_be_bytes());
    t.send(1, &tmh(TmhOp::Rndv, 0x77, 0), &rvh);
    let b = t.completions(true, 3);
    assert_eq!(b.len(), 2, "MATCH and the failed READ only: {b:?}");
    assert_eq!((b[0].wr_id, b[0].wc_flags), (7, WcFlags::TM_MATCH));
    assert_eq!(
        (b[1].opcode, b[1].wr_id, b[1].status),
        (WcOpcode::TmRecv, 7, WcStatus::RemAccessErr)
    );
    let a = t.completions(false, 2);
    assert_eq!(a.len(), 1, "the SEND only, no FIN: {a:?}");
    assert_eq!(a[0].status, WcStatus::Success);
}

/// An EAGER message longer than its matched tag's buffer completes that tag with
/// `IBV_WC_LOC_LEN_ERR` as an `IBV_WC_TM_RECV`, and the sender is told (invalid request).
#[test]
fn an_eager_message_too_long_for_its_tag() {
    let mut t = Tm::new(17, 8);
    let sge = t.b_mem.sge(4096, 8);
    t.ops(vec![add(7, 0x77, !0, sge)]).unwrap();
    t.one(true);
    t.send(1, &tmh(TmhOp::Eager, 0x77, 0), b"nine bytes");
    let w = t.one(true);
    assert_eq!(
        (w.opcode, w.wr_id, w.status),
        (WcOpcode::TmRecv, 7, WcStatus::LocLenErr)
    );
    assert_eq!(t.one(false).status, WcStatus::RemInvReqErr);
}

/// A rendezvous request's headers: the TMH of `tag` and the RVH of A's `len` bytes at
/// `off`.
fn rndv_headers(t: &Tm, tag: u64, app_ctx: u32, off: usize, len: u32) -> Vec<u8> {
    let mut h = tmh(TmhOp::Rndv, tag, app_ctx).to_vec();
    h.extend_from_slice(&t.a_mem.addr(off).to_be_bytes());
    h.extend_from_slice(&t.a_mem.keys.rkey.to_be_bytes());
    h.extend_from_slice(&len.to_be_bytes());
    h
}

impl Tm {
    /// Add `tag` (every bit matched) with B's `len` bytes at `off` as its buffer; take the
    /// ADD's completion.
    fn tag(&mut self, wr_id: u64, tag: u64, off: usize, len: usize) {
        let sge = self.b_mem.sge(off, len);
        self.ops(vec![add(wr_id, tag, !0, sge)]).unwrap();
        self.one(true);
    }
}

/// A rendezvous request longer than one packet (TMH, RVH and an application header past
/// the path MTU: FIRST, MIDDLE, LAST, one of them lost and resent) is served as a
/// one-packet one: the headers of its FIRST packet match the tag (`TM_MATCH`), the rest of
/// the message is acknowledged and dropped as the application header a matched rendezvous
/// never delivers, then the device READs the RVH's buffer (`TM_DATA_VALID`) and sends the
/// FIN — not an unexpected message in an SRQ receive.
#[test]
fn a_rendezvous_request_of_several_packets_is_served_as_one() {
    let mut t = Tm::new(18, 8);
    lose_to(&mut t.fabric, t.b, |n| n == 2);
    let data = pattern(4, 3000);
    t.a_mem.write(16384, &data);
    let a_qp = t.a_qp;
    let fin_buf = t.a_mem.sge(32768, 64);
    let fin = RecvWr {
        wr_id: 44,
        sg_list: vec![fin_buf].into(),
    };
    t.fabric.node_mut(t.a).post_recv(a_qp, &[fin]).unwrap();
    // An ordinary receive too: were the request taken as unexpected, it would land here.
    t.srq_recv(50, 40000, 4096);
    t.tag(7, 0x77, 4096, 8192);
    let header = rndv_headers(&t, 0x77, 5, 16384, 3000);
    t.send(1, &header, &pattern(1, 2100));
    let a = t.completions(false, 2);
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!((a[0].wr_id, a[0].status), (1, WcStatus::Success));
    assert_eq!((a[1].wr_id, a[1].byte_len), (44, TMH_LEN as u32));
    assert_eq!(t.a_mem.read(32768, TMH_LEN), tmh(TmhOp::Fin, 0x77, 0));
    let b = t.completions(true, 2);
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(
        (
            b[0].opcode,
            b[0].wr_id,
            b[0].wc_flags,
            b[0].tm_tag,
            b[0].tm_priv
        ),
        (WcOpcode::TmRecv, 7, WcFlags::TM_MATCH, 0x77, 5)
    );
    assert_eq!(
        (b[1].opcode, b[1].wr_id, b[1].wc_flags, b[1].byte_len),
        (WcOpcode::TmRecv, 7, WcFlags::TM_DATA_VALID, 3000)
    );
    assert_eq!(t.b_mem.read(4096, 3000), data);
    let srq = t.b_srq;
    assert_eq!(
        t.b().srq_len(srq).unwrap(),
        1,
        "the SRQ receive is untouched"
    );
}

/// A rendezvous request of several packets that never ends (its FIRST matched, the rest
/// lost) holds its tag until the QP stops: moved to ERR, the tag completes
/// `IBV_WC_WR_FLUSH_ERR` on the SRQ's CQ; nothing was READ.
#[test]
fn a_broken_rendezvous_request_completes_its_tag_in_error() {
    let mut t = Tm::new(19, 8);
    t.tag(7, 0x77, 4096, 8192);
    let header = rndv_headers(&t, 0x77, 0, 16384, 3000);
    t.a_mem.write(16384, &pattern(2, 3000));
    // Everything after the FIRST is lost.
    lose_to(&mut t.fabric, t.b, |n| n >= 2);
    t.send(1, &header, &pattern(1, 2100));
    let b = t.completions(true, 1);
    assert_eq!(
        (b[0].opcode, b[0].wr_id, b[0].wc_flags),
        (WcOpcode::TmRecv, 7, WcFlags::TM_MATCH)
    );
    let b_qp = t.b_qp;
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    t.b().modify_qp(b_qp, &attr, QpAttrMask::STATE).unwrap();
    let b = t.completions(true, 1);
    assert_eq!(
        (b[0].opcode, b[0].wr_id, b[0].status),
        (WcOpcode::TmRecv, 7, WcStatus::WrFlushErr)
    );
    assert_eq!(t.b_mem.read(4096, 16), [0; 16], "nothing was READ");
}

/// A rendezvous request of several packets broken by a malformed continuation (a second
/// FIRST where its MIDDLE or LAST should be) is an invalid request like any other: NAKed,
/// B's QP in ERR, and its matched tag completes with `IBV_WC_REM_INV_REQ_ERR` on the SRQ's
/// CQ after its `TM_MATCH`; nothing is READ.
#[test]
fn a_malformed_rendezvous_continuation_completes_its_tag_in_error() {
    let mut t = Tm::new(20, 8);
    t.tag(7, 0x77, 4096, 8192);
    let mut first = rndv_headers(&t, 0x77, 0, 16384, 3000);
    first.resize(1024, 0);
    let psn = Psn::new(0x00ff_fff0);
    let (a, b, qpn) = (t.a, t.b, t.b_qpn);
    let mut send = |psn: Psn| {
        let mut bth = BthRepr::new(Opcode::RC_SEND_FIRST, qpn, psn);
        bth.ack_req = true;
        let repr = RoceRepr::new(bth, ExtRepr::default(), first.len());
        inject(&mut t.fabric, a, b, &repr, &first).and_then(|(_, s)| s)
    };
    assert_eq!(send(psn), Some(Syndrome::ACK));
    assert_eq!(
        send(psn.next()),
        Some(Syndrome::Nak(NakCode::InvalidRequest))
    );
    let b_qp = t.b_qp;
    assert_eq!(t.b().qp_state(b_qp).unwrap(), QpState::Err);
    let w = t.completions(true, 3);
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!((w[0].wr_id, w[0].wc_flags), (7, WcFlags::TM_MATCH));
    assert_eq!(
        (w[1].opcode, w[1].wr_id, w[1].status),
        (WcOpcode::TmRecv, 7, WcStatus::RemInvReqErr)
    );
    assert_eq!(t.b_mem.read(4096, 16), [0; 16], "nothing was READ");
}
