//! The requester: turns send WQEs into packets (segmentation by path MTU, AckReq, window,
//! fence and READ/atomic credits), and completes UC/UD sends once transmitted.

use crate::transport::Dest;
use std::time::Instant;

use softroce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtRepr, Opcode, Psn, Qpn, RethRepr, RoceRepr,
};

use super::super::device::PAYLOAD_BY_REFERENCE_MIN;
use super::super::handles::{PdHandle, QpHandle};
use super::super::memory;
use super::super::objects::{MwBinding, Qp, SendWqe};
use super::super::store::Store;
use super::super::types::{
    AccessFlags, MwType, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode,
};
use super::super::wr::{MwBind, VendorErr, WorkCompletion};
use super::access::LocalFault;
use super::recovery::Window;
use super::{Engine, Outbox, PayloadRef};

/// Packets built per call, so one QP cannot starve the others.
const BUDGET: usize = 64;

/// Requests that take one of the responder's READ/atomic resources: ATOMIC WRITE too (rxe's
/// requester counts it against `max_rd_atomic` and a fence waits for it).
fn is_rd_atomic(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpAndSwp
            | WrOpcode::AtomicFetchAndAdd
            | WrOpcode::AtomicWrite
    )
}

/// Packets a request occupies: one per MTU of payload (at least one); READ counts its
/// response packets; atomics one.
fn packets_for(op: WrOpcode, len: u64, mtu: u64) -> u32 {
    match op {
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 1,
        _ => len.div_ceil(mtu).max(1) as u32,
    }
}

/// Build and queue as many packets of the QP's send queue as the window allows.
pub(super) fn progress(eng: &mut Engine<'_>, now: Instant, qp: QpHandle) {
    for _ in 0..BUDGET {
        match next_packet(eng, now, qp) {
            Step::Sent => continue,
            Step::Stop => break,
        }
    }
    // More work left: come back after the other QPs had their turn.
    if let Some(q) = eng.store.get(qp)
        && q.transport.send_index < q.sq.len()
        && q.transport.rnr_at.is_none()
        && !q.transport.awaiting_room
        && matches!(q.attr.qp_state, QpState::Rts | QpState::Sqd)
    {
        // The PSN the cursor sends next, not `sq_psn`: that is past the whole message once
        // it started, so a message longer than the window would wait for an ACK after
        // every `BUDGET` packets.
        let next_psn =
            q.sq.get(q.transport.send_index)
                .and_then(|w| w.first_psn.map(|first| first.add(w.next_pkt)))
                .unwrap_or(q.transport.sq_psn);
        let window_open = !q.init.qp_type.is_reliable()
            || next_psn.distance_from(q.transport.comp_psn) < q.transport.recovery.window(now).psns;
        if window_open {
            eng.outbox.mark_active(qp);
        }
    }
}

enum Step {
    Sent,
    Stop,
}

/// Why the WQE at the cursor produced no packet.
enum Refusal {
    /// Not now (window, fence, credits, SQD): try again later.
    Wait,
    /// The WQE is bad: complete it with this status.
    Fail(WcStatus),
}

/// A packet ready to queue: its headers, the buffer it leaves in (payload already in place,
/// gathered straight from registered memory), and the WQE's packet index after it.
struct Packet {
    repr: RoceRepr,
    data: Vec<u8>,
    /// The payload left where it lies (`HcaConfig::payload_by_reference`), unwritten in
    /// `data`.
    payload: Option<PayloadRef>,
    next_pkt: u32,
}

/// One packet of the WQE at the send cursor: start the request if needed, build the packet,
/// find where it goes, queue it.
fn next_packet(eng: &mut Engine<'_>, now: Instant, qp: QpHandle) -> Step {
    let Some((idx, mtu)) = wqe_at_cursor(eng, qp) else {
        return Step::Stop;
    };
    if eng
        .store
        .get(qp)
        .and_then(|q| q.sq.get(idx))
        .is_some_and(|w| w.wr.opcode.is_local())
    {
        return local_op(eng, qp, idx);
    }
    if let Err(step) = start_request(eng, qp, idx, mtu) {
        return step;
    }
    // An RC packet never sent before counts against the bound at its peer; resends go.
    let cap = eng.device.config().max_outstanding_psns;
    let fresh_rc_room = eng
        .store
        .get(qp)
        .filter(|q| {
            q.init.qp_type.is_reliable()
                && q.sq
                    .get(idx)
                    .is_some_and(|w| !w.all_sent && w.next_pkt >= w.sent_pkts)
        })
        .map(|q| eng.outbox.room(q, cap));
    let mut ask_ack = false;
    if let Some(room) = fresh_rc_room {
        if room == 0 {
            eng.outbox.wait_for_room(eng.store, qp);
            return Step::Stop;
        }
        // Near the bound, this may be the QP's last packet before it waits for room: it
        // asks for an ACK (the responder answers AckReq only), or a QP stopped mid-message
        // would hold its share until the ACK timeout, and with every QP so stopped, nothing
        // moves.
        ask_ack = room <= BUDGET as u32;
    }
    let by_reference = eng.device.config().payload_by_reference && memory::fault_safe();
    // The destination first and the packet built in its final place: moving a built packet
    // through a tuple and patching its header afterwards cost the requester a few
    // store-forwarding stalls per packet (a twentieth of an 8 B message's time, profiled).
    let Some(q) = eng.store.get(qp) else {
        return Step::Stop;
    };
    let refused = match destination(eng.store, q, idx) {
        Ok(dst) => {
            let window = q.transport.recovery.window(now);
            let shape = Shape {
                mtu,
                window,
                by_reference,
                ask_ack,
            };
            match build_packet(eng.store, eng.outbox, q, idx, shape) {
                Ok(packet) => return transmit(eng, now, qp, idx, dst, packet),
                Err(refusal) => refusal,
            }
        }
        Err(refusal) => refusal,
    };
    if let Refusal::Fail(status) = refused {
        fail_send(eng, qp, idx, status, VendorErr::LocalKey);
    }
    Step::Stop
}

/// How [`build_packet`] cuts and marks the packet.
#[derive(Clone, Copy)]
struct Shape {
    mtu: u64,
    window: Window,
    /// Leave a large payload in registered memory (`HcaConfig::payload_by_reference`).
    by_reference: bool,
    /// Ask for an ACK whatever the packet's place in its message.
    ask_ack: bool,
}

/// The index of the WQE at the send cursor if the QP may send now, and the MTU its packets
/// are cut by.
fn wqe_at_cursor(eng: &Engine<'_>, qp: QpHandle) -> Option<(usize, u64)> {
    let q = eng.store.get(qp)?;
    if !matches!(q.attr.qp_state, QpState::Rts | QpState::Sqd) || q.transport.rnr_at.is_some() {
        return None;
    }
    let idx = q.transport.send_index;
    q.sq.get(idx)?;
    // UD has no path MTU attribute: the port's active MTU bounds its messages.
    let mtu = if q.init.qp_type == QpType::Ud {
        eng.device.active_mtu().bytes() as u64
    } else {
        q.attr.path_mtu.bytes() as u64
    };
    Some((idx, mtu))
}

/// A request not sent before: check SQD, fence, READ/atomic credits and the UD length, then
/// give it its PSNs. `Err` carries what the caller's step comes to.
fn start_request(eng: &mut Engine<'_>, qp: QpHandle, idx: usize, mtu: u64) -> Result<(), Step> {
    let q = eng.store.get(qp).ok_or(Step::Stop)?;
    let wqe = q.sq.get(idx).ok_or(Step::Stop)?;
    if wqe.first_psn.is_some() {
        return Ok(());
    }
    if q.attr.qp_state == QpState::Sqd {
        return Err(Step::Stop);
    }
    let op = wqe.wr.opcode;
    let len = wqe.len();
    let fenced = wqe.wr.send_flags.contains(SendFlags::FENCE);
    if fenced || is_rd_atomic(op) {
        // Counted only for the WQEs that ask: the queue ahead can be long (a scan per
        // plain SEND or WRITE cost a small-message burst most of its time).
        let outstanding_rd =
            q.sq.iter()
                .take(idx)
                .filter(|w| is_rd_atomic(w.wr.opcode) && w.first_psn.is_some())
                .count();
        if fenced && outstanding_rd > 0 {
            return Err(Step::Stop);
        }
        if is_rd_atomic(op) && outstanding_rd >= usize::from(q.attr.max_rd_atomic.max(1)) {
            return Err(Step::Stop);
        }
    }
    if q.init.qp_type == QpType::Ud && len > mtu {
        // IBTA: a UD message larger than the path MTU is a local length error.
        fail_send(eng, qp, idx, WcStatus::LocLenErr, VendorErr::RecvTooSmall);
        return Err(Step::Sent);
    }
    let npkts = packets_for(op, len, mtu);
    let q = eng.store.get_mut(qp).ok_or(Step::Stop)?;
    let first = q.transport.sq_psn;
    q.transport.sq_psn = first.add(npkts);
    if let Some(w) = q.sq.get_mut(idx) {
        w.first_psn = Some(first);
        w.npkts = npkts;
        w.next_pkt = 0;
    }
    Ok(())
}

/// The next packet of the started WQE `idx`, if the RC window lets it go.
fn build_packet(
    store: &Store,
    outbox: &mut Outbox,
    q: &Qp,
    idx: usize,
    shape: Shape,
) -> Result<Packet, Refusal> {
    let Shape {
        mtu,
        window,
        by_reference,
        ask_ack,
    } = shape;
    let wqe = q.sq.get(idx).ok_or(Refusal::Wait)?;
    let psn = wqe.first_psn.unwrap_or_default().add(wqe.next_pkt);
    if q.init.qp_type.is_reliable() && psn.distance_from(q.transport.comp_psn) >= window.psns {
        return Err(Refusal::Wait);
    }
    let dest = Qpn::from_wire(q.attr.dest_qp_num);
    let (mut repr, next_pkt, payload_at) = match wqe.wr.opcode {
        WrOpcode::RdmaRead => (read_request(wqe, dest, psn, mtu), wqe.npkts, None),
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            (atomic_request(wqe, dest, psn), 1, None)
        }
        _ => {
            let (repr, offset) = data_packet(q, wqe, dest, psn, mtu, window.pkts_per_ack)?;
            (repr, wqe.next_pkt + 1, Some(offset))
        }
    };
    if q.init.qp_type == QpType::XrcSend {
        super::to_xrc(&mut repr, Some(wqe.wr.xrc_remote_srqn));
    }
    repr.bth.ack_req |= ask_ack;
    let mut data = outbox.buffer(repr.buffer_len());
    let mut in_place = None;
    if let Some(offset) = payload_at {
        let start = repr.header_len();
        let len = repr.payload_len;
        if by_reference && wqe.inline.is_none() && len >= PAYLOAD_BY_REFERENCE_MIN {
            in_place = store
                .payload_in_place(q.pd, &wqe.wr.sg_list, offset, len)
                .map(|addr| PayloadRef {
                    at: start,
                    addr,
                    len,
                });
        }
        let payload = &mut data[start..start + len];
        let gathered = match &wqe.inline {
            _ if in_place.is_some() => Ok(()),
            Some(inline) => {
                let from = offset as usize;
                payload.copy_from_slice(&inline[from..from + payload.len()]);
                Ok(())
            }
            None => store.gather(q.pd, &wqe.wr.sg_list, offset, payload),
        };
        gathered.map_err(|fault| {
            Refusal::Fail(match fault {
                LocalFault::Protection => WcStatus::LocProtErr,
                LocalFault::TooLong => WcStatus::LocLenErr,
            })
        })?;
    }
    Ok(Packet {
        repr,
        data,
        payload: in_place,
        next_pkt,
    })
}

/// A READ request for the rest of the data: a retry after loss re-reads only what is
/// missing, starting at the first missing response PSN.
fn read_request(wqe: &SendWqe, dest: Qpn, psn: Psn, mtu: u64) -> RoceRepr {
    let off = u64::from(wqe.next_pkt) * mtu;
    let reth = RethRepr {
        va: wqe.wr.rdma.remote_addr.wrapping_add(off),
        rkey: wqe.wr.rdma.rkey,
        dma_len: wqe.len().saturating_sub(off) as u32,
    };
    let mut bth = BthRepr::new(Opcode::RC_RDMA_READ_REQUEST, dest, psn);
    bth.ack_req = true;
    let ext = ExtRepr {
        reth: Some(reth),
        ..ExtRepr::default()
    };
    RoceRepr::new(bth, ext, 0)
}

fn atomic_request(wqe: &SendWqe, dest: Qpn, psn: Psn) -> RoceRepr {
    let a = wqe.wr.atomic;
    let (opcode, swap_add, compare) = if wqe.wr.opcode == WrOpcode::AtomicCmpAndSwp {
        (Opcode::RC_COMPARE_SWAP, a.swap, a.compare_add)
    } else {
        (Opcode::RC_FETCH_ADD, a.compare_add, 0)
    };
    let mut bth = BthRepr::new(opcode, dest, psn);
    bth.ack_req = true;
    let ext = ExtRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: a.remote_addr,
            rkey: a.rkey,
            swap_add,
            compare,
        }),
        ..ExtRepr::default()
    };
    RoceRepr::new(bth, ext, 0)
}

/// The headers of a SEND or WRITE packet (one MTU of the message's data, with the headers
/// its position in the message and the QP type call for), and where in the message its
/// payload starts.
fn data_packet(
    q: &Qp,
    wqe: &SendWqe,
    dest: Qpn,
    psn: Psn,
    mtu: u64,
    pkts_per_ack: u32,
) -> Result<(RoceRepr, u64), Refusal> {
    let op = wqe.wr.opcode;
    let qp_type = q.init.qp_type;
    let len = wqe.len();
    let (i, npkts) = (wqe.next_pkt, wqe.npkts);
    let last = i + 1 == npkts;
    let off = u64::from(i) * mtu;
    let n = (len - off.min(len)).min(mtu) as usize;
    let mut bth = BthRepr::new(data_opcode(qp_type, op, i, npkts), dest, psn);
    let mut ext = ExtRepr::default();
    if last {
        bth.solicited = wqe.wr.send_flags.contains(SendFlags::SOLICITED);
        if matches!(op, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm) {
            ext.imm = Some(u32::from_be_bytes(wqe.wr.imm_data.to_ne_bytes()));
        }
        if op == WrOpcode::SendWithInv {
            ext.ieth = Some(wqe.wr.invalidate_rkey);
        }
    }
    if matches!(
        op,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::AtomicWrite
    ) && i == 0
    {
        ext.reth = Some(RethRepr {
            va: wqe.wr.rdma.remote_addr,
            rkey: wqe.wr.rdma.rkey,
            dma_len: len as u32,
        });
    }
    if qp_type.is_reliable() {
        bth.ack_req = last || (i + 1) % pkts_per_ack == 0;
    }
    if qp_type == QpType::Ud {
        let ud = wqe.wr.ud.ok_or(Refusal::Fail(WcStatus::LocQpOpErr))?;
        bth.dest_qpn = Qpn::from_wire(ud.remote_qpn);
        ext.deth = Some(DethRepr {
            // IBTA 10.2.5: a Q_Key with the high bit set means "use the QP's".
            qkey: if ud.remote_qkey & 0x8000_0000 != 0 {
                q.attr.qkey
            } else {
                ud.remote_qkey
            },
            reserved: 0,
            src_qpn: q.qpn,
        });
    }
    Ok((RoceRepr::new(bth, ext, n), off))
}

/// Where the WQE's packets go: a UD WQE's address handle, else the QP's path.
fn destination(store: &Store, q: &Qp, idx: usize) -> Result<Dest, Refusal> {
    if q.init.qp_type != QpType::Ud {
        return Ok(Dest {
            addr: q.peer,
            traffic_class: q.attr.ah_attr.traffic_class,
        });
    }
    q.sq.get(idx)
        .and_then(|w| w.wr.ud)
        .and_then(|ud| store.get(ud.ah))
        .map(|ah| Dest {
            addr: ah.attr.destination(),
            traffic_class: ah.attr.traffic_class,
        })
        .ok_or(Refusal::Fail(WcStatus::LocQpOpErr))
}

/// Queue the packet and move the WQE's cursor past it; an RC request arms the retransmit
/// timer, a UC/UD one completes with its last packet.
fn transmit(
    eng: &mut Engine<'_>,
    now: Instant,
    qp: QpHandle,
    idx: usize,
    dst: Dest,
    packet: Packet,
) -> Step {
    let Some(retransmit) = eng.store.get(qp).and_then(|q| {
        let w = q.sq.get(idx)?;
        Some(w.all_sent || w.next_pkt < w.sent_pkts)
    }) else {
        return Step::Stop;
    };
    let psn = packet.repr.bth.psn;
    let next_pkt = packet.next_pkt;
    eng.queue_built_from(dst, &packet.repr, packet.data, packet.payload);
    let feedback = eng.device.config().transmit_feedback;
    let unreliable = eng
        .store
        .get(qp)
        .is_some_and(|q| !q.init.qp_type.is_reliable());
    if feedback
        && unreliable
        && let Some(p) = eng.outbox.packets.back_mut()
    {
        p.token = Some(super::TransmitToken { qp, psn });
    }
    if retransmit {
        eng.counters.retransmitted_pkts += 1;
    }
    let Some(q) = eng.store.get_mut(qp) else {
        return Step::Stop;
    };
    let mut message_sent = false;
    if let Some(w) = q.sq.get_mut(idx) {
        w.next_pkt = next_pkt;
        w.sent_pkts = w.sent_pkts.max(next_pkt);
        if next_pkt >= w.npkts {
            w.all_sent = true;
            message_sent = true;
            q.transport.send_index = idx + 1;
        }
    }
    if q.init.qp_type.is_reliable() {
        if !retransmit {
            q.transport.recovery.on_first_send(psn, now);
            // A READ request's PSNs are its responses, all on their way once it left.
            let end =
                q.sq.get(idx)
                    .and_then(|w| w.first_psn)
                    .map_or_else(|| psn.next(), |first| first.add(next_pkt));
            if q.transport.sent_psn.is_before(end) {
                q.transport.sent_psn = end;
            }
        }
        if q.transport.retrans_at.is_none() {
            q.transport.arm_retransmit(now, q.attr.timeout);
        }
    } else if message_sent && !feedback {
        complete_unreliable(eng, qp, idx);
    }
    Step::Sent
}

/// The WQE of the UC/UD QP `token` names that its packet belongs to.
fn token_wqe(eng: &Engine<'_>, token: super::TransmitToken) -> Option<usize> {
    let q = eng.store.get(token.qp)?;
    if q.init.qp_type.is_reliable() {
        return None;
    }
    q.sq.iter().position(|w| {
        w.first_psn
            .is_some_and(|first| token.psn.in_range(first, w.npkts))
    })
}

/// The host sent the packet `token` names: a request whose last packet it was completes.
pub(crate) fn on_sent(eng: &mut Engine<'_>, token: super::TransmitToken) {
    let Some(idx) = token_wqe(eng, token) else {
        return;
    };
    let last = eng
        .store
        .get(token.qp)
        .and_then(|q| q.sq.get(idx))
        .is_some_and(|w| {
            w.all_sent
                && w.first_psn
                    .is_some_and(|first| token.psn.distance_from(first) + 1 == w.npkts)
        });
    if last {
        complete_unreliable(eng, token.qp, idx);
        retire_local_ops(eng, token.qp);
    }
}

/// The host refused to send a packet (the socket call failed): rxe's `send_err` counts it
/// and, as rxe's requester does when `rxe_xmit_packet` fails, the UC/UD request it belongs
/// to completes with IBV_WC_LOC_QP_OP_ERR; the QP then enters SQE, as any UC/UD send
/// error moves it (`fail_send`). An RC packet (`token` `None`) is only counted: the
/// retransmit timer sends it again, up to RETRY_EXC.
pub(crate) fn on_send_failure(eng: &mut Engine<'_>, token: Option<super::TransmitToken>) {
    eng.counters.sent_pkts = eng.counters.sent_pkts.saturating_sub(1);
    match token.and_then(|t| Some((t.qp, token_wqe(eng, t)?))) {
        Some((qp, idx)) => fail_send(eng, qp, idx, WcStatus::LocQpOpErr, VendorErr::NotSent),
        None => eng.counters.send_err += 1,
    }
}

/// The opcode of data packet `i` of `n` for a SEND or WRITE.
fn data_opcode(qp_type: QpType, op: WrOpcode, i: u32, n: u32) -> Opcode {
    let uc = qp_type == QpType::Uc;
    let pick = |rc: Opcode, uc_op: Opcode| if uc { uc_op } else { rc };
    let only = n == 1;
    let first = i == 0;
    let last = i + 1 == n;
    match op {
        // Always one packet: 8 bytes.
        WrOpcode::AtomicWrite => Opcode::RC_ATOMIC_WRITE,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
            let imm = op == WrOpcode::RdmaWriteWithImm;
            match (only, first, last, imm) {
                (true, _, _, false) => pick(Opcode::RC_RDMA_WRITE_ONLY, Opcode::UC_RDMA_WRITE_ONLY),
                (true, _, _, true) => pick(
                    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                    Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                ),
                (_, true, _, _) => pick(Opcode::RC_RDMA_WRITE_FIRST, Opcode::UC_RDMA_WRITE_FIRST),
                (_, _, true, false) => pick(Opcode::RC_RDMA_WRITE_LAST, Opcode::UC_RDMA_WRITE_LAST),
                (_, _, true, true) => pick(
                    Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                ),
                _ => pick(Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::UC_RDMA_WRITE_MIDDLE),
            }
        }
        _ if qp_type == QpType::Ud => {
            if op == WrOpcode::SendWithImm {
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            } else {
                Opcode::UD_SEND_ONLY
            }
        }
        _ => {
            let imm = op == WrOpcode::SendWithImm;
            let inv = op == WrOpcode::SendWithInv;
            match (only, first, last) {
                (true, _, _) if imm => pick(
                    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                    Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
                ),
                (true, _, _) if inv => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                (true, _, _) => pick(Opcode::RC_SEND_ONLY, Opcode::UC_SEND_ONLY),
                (_, true, _) => pick(Opcode::RC_SEND_FIRST, Opcode::UC_SEND_FIRST),
                (_, _, true) if imm => pick(
                    Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                    Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
                ),
                (_, _, true) if inv => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
                (_, _, true) => pick(Opcode::RC_SEND_LAST, Opcode::UC_SEND_LAST),
                _ => pick(Opcode::RC_SEND_MIDDLE, Opcode::UC_SEND_MIDDLE),
            }
        }
    }
}

/// Execute the bind or local invalidate at the cursor, in the send queue's order: it uses no
/// PSN, and completes once every request before it has (`retire_local_ops`). A refused one
/// completes in error and stops the QP, as a failed request does.
fn local_op(eng: &mut Engine<'_>, qp: QpHandle, idx: usize) -> Step {
    let Some(q) = eng.store.get(qp) else {
        return Step::Stop;
    };
    let Some(w) = q.sq.get(idx) else {
        return Step::Stop;
    };
    if w.first_psn.is_some() {
        // Executed before a go-back-N rewind: never twice.
        if let Some(q) = eng.store.get_mut(qp) {
            q.transport.send_index = idx + 1;
        }
        return Step::Sent;
    }
    let outstanding_rd =
        q.sq.iter()
            .take(idx)
            .any(|w| is_rd_atomic(w.wr.opcode) && w.first_psn.is_some());
    if w.wr.send_flags.contains(SendFlags::FENCE) && outstanding_rd {
        return Step::Stop;
    }
    let pd = q.pd;
    let result = match (w.wr.opcode, w.wr.bind.as_deref().copied()) {
        (WrOpcode::BindMw, Some(bind)) => bind_mw(eng.store, pd, qp, &bind),
        (WrOpcode::LocalInv, _) => {
            let rkey = w.wr.invalidate_rkey;
            if eng.store.invalidate_mw(pd, rkey, None) {
                Ok(())
            } else {
                Err(WcStatus::LocQpOpErr)
            }
        }
        _ => Err(WcStatus::LocQpOpErr),
    };
    if let Err(status) = result {
        fail_send(eng, qp, idx, status, VendorErr::LocalOp);
        return Step::Stop;
    }
    let Some(q) = eng.store.get_mut(qp) else {
        return Step::Stop;
    };
    let psn = q.transport.sq_psn;
    if let Some(w) = q.sq.get_mut(idx) {
        w.first_psn = Some(psn);
        w.npkts = 0;
        w.all_sent = true;
    }
    q.transport.send_index = idx + 1;
    retire_local_ops(eng, qp);
    Step::Sent
}

/// Bind a window as `bind` asks, or say why not (`IBV_WC_MW_BIND_ERR`): the window and
/// region of the QP's PD, a type 2 window unbound (invalidated) first, the new R_Key keeping
/// the window's index, only remote rights (and ZERO_BASED; LOCAL_WRITE is ignored), the region allowing MW_BIND and,
/// for remote write or atomic rights, local write (ibv_bind_mw(3)), the range inside the
/// region. A zero-length bind unbinds (how a type 1 window is invalidated).
fn bind_mw(store: &mut Store, pd: PdHandle, qp: QpHandle, bind: &MwBind) -> Result<(), WcStatus> {
    const ERR: WcStatus = WcStatus::MwBindErr;
    let w = store.get(bind.mw).ok_or(ERR)?;
    let mw_type = w.mw_type;
    if w.pd != pd
        || (mw_type == MwType::Type2 && w.binding.is_some())
        || bind.rkey >> 8 != w.rkey >> 8
    {
        return Err(ERR);
    }
    // LOCAL_WRITE means nothing for a window; rxe and mlx5 accept it (and rdma-core's tests
    // pass it), so it is ignored rather than refused.
    let rights = AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::ZERO_BASED
        | AccessFlags::LOCAL_WRITE;
    if !rights.contains(bind.access) {
        return Err(ERR);
    }
    let binding = if bind.length == 0 {
        None
    } else {
        let mr_handle = bind.mr.ok_or(ERR)?;
        let mr = store.get(mr_handle).ok_or(ERR)?;
        let needs_local_write = bind
            .access
            .intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC);
        if mr.pd != pd
            || !mr.access.contains(AccessFlags::MW_BIND)
            || (needs_local_write && !mr.access.contains(AccessFlags::LOCAL_WRITE))
            || !mr.contains(bind.addr, bind.length)
        {
            return Err(ERR);
        }
        Some(MwBinding {
            mr: mr_handle,
            // The window's range as process addresses (the bind names it by the region's
            // iova).
            addr: mr.local(bind.addr),
            va: bind.addr,
            len: bind.length,
            access: bind.access,
            qp: (mw_type == MwType::Type2).then_some(qp),
        })
    };
    store.unbind_mw(bind.mw);
    if let Some(b) = binding {
        store.add_mr_windows(b.mr, 1);
    }
    if let Some(w) = store.get_mut(bind.mw) {
        w.rkey = bind.rkey;
        w.binding = binding;
    }
    Ok(())
}

/// Complete the executed binds and local invalidates at the front of the send queue: they
/// wait only for the requests posted before them.
pub(super) fn retire_local_ops(eng: &mut Engine<'_>, qp: QpHandle) {
    loop {
        let Some(q) = eng.store.get_mut(qp) else {
            return;
        };
        if !q
            .sq
            .front()
            .is_some_and(|w| w.wr.opcode.is_local() && w.all_sent)
        {
            break;
        }
        let Some(w) = q.sq.pop_front() else {
            return;
        };
        q.transport.send_index = q.transport.send_index.saturating_sub(1);
        if q.sq.front().is_none_or(|w| w.first_psn.is_none()) {
            q.transport.disarm_retransmit();
        }
        let (qpn, cq) = (q.qpn.value(), q.init.send_cq);
        if w.signaled {
            let wc = WorkCompletion::success(w.wr.wr_id, qpn, WcOpcode::for_send(w.wr.opcode), 0);
            let _ = eng.push_completion(cq, wc, false);
        }
        eng.check_sq_drained(qp);
    }
}

/// UC/UD: a request (WQE `idx`) is complete once its last packet is sent.
fn complete_unreliable(eng: &mut Engine<'_>, qp: QpHandle, idx: usize) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let Some(wqe) = q.sq.remove(idx) else {
        return;
    };
    q.transport.send_index = q.transport.send_index.saturating_sub(1);
    let qpn = q.qpn.value();
    let cq = q.init.send_cq;
    if wqe.signaled {
        let len = wqe.len();
        let wc = WorkCompletion::success(
            wqe.wr.wr_id,
            qpn,
            WcOpcode::for_send(wqe.wr.opcode),
            len as u32,
        );
        let _ = eng.push_completion(cq, wc, false);
    }
    eng.check_sq_drained(qp);
}

/// Complete WQE `idx` with an error and move the QP to ERR (RC) — or, for UC/UD, to SQE
/// with the rest of the send queue flushed (IBTA 10.3.1).
pub(super) fn fail_send(
    eng: &mut Engine<'_>,
    qp: QpHandle,
    idx: usize,
    status: WcStatus,
    vendor: VendorErr,
) {
    let idx = complete_held(eng, qp, idx);
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let Some(wqe) = q.sq.remove(idx) else {
        return;
    };
    let qpn = q.qpn.value();
    let cq = q.init.send_cq;
    let qp_type = q.init.qp_type;
    let wc = WorkCompletion::error(
        wqe.wr.wr_id,
        qpn,
        status,
        WcOpcode::for_send(wqe.wr.opcode),
        vendor as u32,
    );
    if let Some((cq, wc)) = super::tm_rndv::error_target(&wqe, cq, wc) {
        let _ = eng.push_completion(cq, wc, false);
    }
    eng.counters.send_err += 1;
    if qp_type.is_reliable() {
        eng.qp_to_error(qp, None);
    } else {
        eng.qp_to_sqe(qp);
    }
}

/// UC/UD under transmit feedback: the requests before WQE `idx` were handed out and wait
/// for the driver's word. Before `idx` completes in error they complete as sent (and the
/// binds behind them retire), so completions keep the send queue's order. Returns where
/// WQE `idx` is now.
fn complete_held(eng: &mut Engine<'_>, qp: QpHandle, mut idx: usize) -> usize {
    if eng
        .store
        .get(qp)
        .is_none_or(|q| q.init.qp_type.is_reliable())
    {
        return idx;
    }
    // Bounded: each round retires at least one WQE before `idx`, or stops.
    while idx > 0 {
        let len = |eng: &Engine<'_>| eng.store.get(qp).map_or(0, |q| q.sq.len());
        let before = len(eng);
        retire_local_ops(eng, qp);
        idx = idx.saturating_sub(before - len(eng));
        let held = eng
            .store
            .get(qp)
            .and_then(|q| q.sq.front())
            .is_some_and(|w| w.all_sent && !w.wr.opcode.is_local());
        if idx == 0 || !held {
            break;
        }
        complete_unreliable(eng, qp, 0);
        idx -= 1;
    }
    idx
}

/// Rewind the send cursor so everything from `psn` on is sent again (go-back-N).
pub(super) fn rewind_to(eng: &mut Engine<'_>, qp: QpHandle, psn: Psn) {
    let Some(q) = eng.store.get_mut(qp) else {
        return;
    };
    let mut found = None;
    for (i, w) in q.sq.iter_mut().enumerate() {
        let Some(first) = w.first_psn else {
            break;
        };
        match found {
            None if psn.in_range(first, w.npkts) => {
                w.next_pkt = psn.distance_from(first);
                found = Some(i);
            }
            None if psn.is_before(first) => {
                w.next_pkt = 0;
                found = Some(i);
            }
            Some(_) => w.next_pkt = 0,
            None => {}
        }
    }
    if let Some(i) = found {
        q.transport.send_index = i;
    }
    q.transport.recovery.on_resend();
    eng.outbox.mark_active(qp);
}
