//! Building and queueing packets, and ACKs: the held (deferred) positive ACK of each QP, the
//! ACKs and NAKs sent at once, and the bounded queue of answers a QP owes behind READ
//! responses still to be built.

use crate::transport::Dest;
use std::time::Instant;

use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RocePacket, RoceRepr, Syndrome};

use super::super::handles::QpHandle;
use super::super::memory;
use super::super::qp_transport::{AckKind, AckReply, Reply};
use super::super::types::QpState;
use super::{Engine, OutPacket, PayloadRef};

/// PSNs past the last ACK sent at which a held ACK goes at once: a quarter of rxe's window
/// of unacknowledged PSNs (RXE_MAX_UNACKED_PSNS, 128; ours is 256, and 64 on a lossy path,
/// see `recovery::Window`), so a stream (of small messages, or of a long
/// one's packets, which ask for an ACK every 64, or 16 on a lossy path) is
/// acknowledged as it flows, while a ping-pong still gets its ACK with the next packet.
const MAX_PSNS_HELD: u32 = 32;

/// Positive ACKs a responder sends twice after each sequence gap it sees. On a lossy path
/// one ACK often answers a requester's whole window (held ACKs cover many packets): when
/// that one is lost the requester, its window full, has nothing to send that would draw
/// another, and waits out its ACK timeout (67 ms for rdma-core's default; three of them
/// took a fifth of a second-long 1 MiB WRITE run under 1 % loss). A second copy makes that
/// take two losses; a requester ignores the copy (an ACK for what is already
/// acknowledged), as it must the network's duplicates. A loss-free path never pays.
pub(crate) const ACKS_TWICE_AFTER_GAP: u16 = 1024;

/// Entries the list of QPs holding ACKs may reach before those that no longer hold one
/// are dropped from it.
const HOLDING_LIST_MIN: usize = 64;

impl Engine<'_> {
    /// Where packets of a QP go: its address vector's GID and UDP port, with its traffic
    /// class.
    pub(crate) fn qp_peer(&self, qp: QpHandle) -> Option<Dest> {
        let q = self.store.get(qp)?;
        Some(Dest {
            addr: q.peer,
            traffic_class: q.attr.ah_attr.traffic_class,
        })
    }

    /// Build a packet from a repr and payload bytes, fill its ICRC for our UDP socket, and
    /// queue it.
    pub(crate) fn queue_packet(&mut self, dst: Dest, repr: &RoceRepr, payload: &[u8]) {
        let mut data = self.outbox.buffer(repr.buffer_len());
        if payload.len() != repr.payload_len {
            // A bug in the engine, never input-driven: count it rather than panic.
            self.counters.send_err += 1;
            return;
        }
        let start = repr.header_len();
        data[start..start + payload.len()].copy_from_slice(payload);
        self.queue_built(dst, repr, data);
    }

    /// Queue a packet whose payload is in place in `data` (a buffer of
    /// [`RoceRepr::buffer_len`] bytes from the outbox): the headers, pad and ICRC go around it.
    pub(crate) fn queue_built(&mut self, dst: Dest, repr: &RoceRepr, data: Vec<u8>) {
        self.queue_built_from(dst, repr, data, None);
    }

    /// [`Engine::queue_built`] for a packet whose payload may be left in registered memory
    /// (`payload`, unwritten in `data`): its ICRC is computed over the memory in place. When
    /// a page of it is gone by now, the payload is copied in after all, the fault-safe way
    /// (zeros for the hole, counted), and the packet leaves whole.
    pub(crate) fn queue_built_from(
        &mut self,
        dst: Dest,
        repr: &RoceRepr,
        mut data: Vec<u8>,
        mut payload: Option<PayloadRef>,
    ) {
        if data.len() != repr.buffer_len() || repr.emit(&mut data).is_err() {
            // A bug in the engine, never input-driven: count it rather than panic.
            self.counters.send_err += 1;
            return;
        }
        let src = self.device.source_addr();
        let ep = UdpEndpoints {
            src: src.ip(),
            dst: dst.addr.ip(),
            src_port: src.port(),
            dst_port: dst.addr.port(),
        };
        let body = data.len() - softroce_wire::ICRC_LEN;
        let in_place = payload.and_then(|p| in_place_icrc(&ep, &data[..body], p));
        if in_place.is_none()
            && let Some(p) = payload.take()
        {
            // SAFETY: `payload_in_place` checked the range against a live registration.
            unsafe { memory::read_app(p.addr, &mut data[p.at..p.at + p.len]) };
        }
        let Some(crc) = in_place.or_else(|| icrc::compute_for_udp_socket(&ep, &data[..body]).ok())
        else {
            self.counters.send_err += 1;
            return;
        };
        RocePacket::new_unchecked(&mut data[..]).set_icrc(crc);
        self.counters.sent_pkts += 1;
        self.outbox.packets.push_back(OutPacket {
            dst,
            data,
            token: None,
            payload,
        });
    }

    /// Queue an ACK or NAK now (a held positive ACK goes first, keeping PSN order).
    pub(crate) fn queue_ack(&mut self, qp: QpHandle, psn: Psn, syndrome: Syndrome) {
        self.flush_deferred_ack(qp);
        self.queue_ack_now(qp, psn, syndrome);
    }

    /// A positive ACK for `psn`, received at `now`: held back up to `ack_defer` for the
    /// QP's next packet, or sent at once when deferral is off.
    ///
    /// Held only while holding may pay: an ACK that a request of this QP's (the
    /// application's answer) can carry is a packet and a send saved. A requester waiting
    /// for it to complete its own work gets it once the packets that came with this one
    /// are handled (one ACK for them all) when the QP is streaming (a second request
    /// asked before the first was answered) or never answers (its last held ACK went out
    /// alone at its deadline): held, each would wait `ack_defer`, and a sender with fewer
    /// requests in flight than `MAX_PSNS_HELD` would move that few per `ack_defer`.
    pub(crate) fn ack(&mut self, now: Instant, qp: QpHandle, psn: Psn) {
        let defer = self.device.config().ack_defer;
        if defer.is_zero() {
            return self.queue_ack(qp, psn, Syndrome::ACK);
        }
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        if q.transport.deferred_ack.is_none() {
            self.outbox.holding_acks.push(qp);
        }
        let due = q.transport.deferred_ack.map_or(now + defer, |(_, due)| due);
        q.transport.deferred_ack = Some((psn, due));
        q.transport.deferred_ack_reqs += 1;
        // Listed once per held ACK: at its first request when the QP does not answer, at
        // its second when it streams.
        let prompt_at = if q.transport.ack_unanswered { 1 } else { 2 };
        if q.transport.deferred_ack_reqs == prompt_at {
            self.outbox.prompt_acks.push(qp);
        }
        self.counters.ack_deferred += 1;
        let covered = q
            .transport
            .last_ack_sent
            .map_or(1, |last| psn.distance_from(last));
        if covered >= MAX_PSNS_HELD {
            // A streaming requester must not stall on the held ACK.
            self.flush_deferred_ack(qp);
        }
        self.forget_sent_held_acks();
    }

    /// Keeps the list of QPs holding ACKs to the QPs that still hold one once it has
    /// grown past twice what held one at the last count: bounded by the QPs, at a
    /// constant cost per ACK held.
    fn forget_sent_held_acks(&mut self) {
        let list = &mut self.outbox.holding_acks;
        if list.len() < self.outbox.holding_acks_bound.max(HOLDING_LIST_MIN) {
            return;
        }
        let store = &*self.store;
        list.retain(|&qp| {
            store
                .get(qp)
                .is_some_and(|q| q.transport.deferred_ack.is_some())
        });
        // A QP held, sent and held again is listed as often.
        list.sort_unstable();
        list.dedup();
        self.outbox.holding_acks_bound = 2 * list.len();
    }

    /// Sends every held ACK now: before a MAD, as a device that acknowledges at once would
    /// have. The CM must not overtake data already received: a peer's DREQ ahead of the
    /// ACK for its last SEND would flush that SEND with an error though it arrived, and a
    /// REQ sent right after a message arrived must not reach the peer before that
    /// message's completion can (perftest `-R` connects its test QP so).
    pub(crate) fn flush_held_acks(&mut self) {
        let list = std::mem::take(&mut self.outbox.holding_acks);
        for &qp in &list {
            self.flush_deferred_ack(qp);
            // Its timer for the ACK goes with it.
            self.settle(qp);
        }
        self.outbox.holding_acks = list;
        self.outbox.holding_acks.clear();
        self.outbox.holding_acks_bound = 0;
    }

    /// Send the QP's held ACK, if any (before its next packet, or when it is due).
    pub(crate) fn flush_deferred_ack(&mut self, qp: QpHandle) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let Some((psn, _)) = q.transport.deferred_ack.take() else {
            return;
        };
        q.transport.deferred_ack_reqs = 0;
        q.transport.last_ack_sent = Some(psn);
        if matches!(q.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.queue_ack_now(qp, psn, Syndrome::ACK);
        }
    }

    fn queue_ack_now(&mut self, qp: QpHandle, psn: Psn, syndrome: Syndrome) {
        let twice = matches!(syndrome, Syndrome::Ack { .. })
            && self.store.get_mut(qp).is_some_and(|q| {
                let left = &mut q.transport.acks_twice_left;
                *left = left.saturating_sub(1);
                *left > 0
            });
        self.queue_response(qp, psn, syndrome, AckKind::Plain);
        if twice {
            self.queue_response(qp, psn, syndrome, AckKind::Plain);
        }
    }

    /// An ACK, NAK or atomic (write) ACK carrying the QP's MSN now: built at
    /// once, or owed behind the READ responses still to send, so the peer sees answers in
    /// request order.
    pub(crate) fn queue_response(
        &mut self,
        qp: QpHandle,
        psn: Psn,
        syndrome: Syndrome,
        kind: AckKind,
    ) {
        let Some(q) = self.store.get(qp) else {
            return;
        };
        let ack = AckReply {
            psn,
            syndrome,
            msn: q.transport.msn,
            kind,
        };
        if q.transport.replies.is_empty() {
            self.emit_response(qp, &ack);
        } else {
            self.owe(qp, Reply::Ack(ack));
        }
    }

    /// Build and queue an ACK, NAK or atomic ACK.
    pub(crate) fn emit_response(&mut self, qp: QpHandle, ack: &AckReply) {
        let Some(q) = self.store.get(qp) else {
            return;
        };
        let dest = Qpn::from_wire(q.attr.dest_qp_num);
        let Some(dst) = self.qp_peer(qp) else {
            return;
        };
        let (opcode, atomic_ack) = match ack.kind {
            AckKind::Plain => (Opcode::RC_ACKNOWLEDGE, None),
            AckKind::Atomic(orig) => (Opcode::RC_ATOMIC_ACKNOWLEDGE, Some(orig)),
            AckKind::AtomicWrite => (Opcode::RC_RDMA_READ_RESPONSE_ONLY, None),
        };
        let xrc = q.init.qp_type == super::super::types::QpType::XrcRecv;
        let mut repr = RoceRepr::new(
            BthRepr::new(opcode, dest, ack.psn),
            ExtRepr {
                aeth: Some(softroce_wire::AethRepr {
                    syndrome: ack.syndrome,
                    msn: softroce_wire::Msn::new(ack.msn),
                }),
                atomic_ack,
                ..ExtRepr::default()
            },
            0,
        );
        if xrc {
            super::to_xrc(&mut repr, None);
        }
        self.queue_packet(dst, &repr, &[]);
    }

    /// Owe the peer `reply` after what the QP already owes. A positive ACK replaces one
    /// just before it (it acknowledges as much and more). The queue is bounded by the
    /// responder resources: past that the reply is dropped, as if lost on the wire (the
    /// requester retries; duplicates are answered from the resources), so a peer cannot
    /// make the queue grow.
    pub(crate) fn owe(&mut self, qp: QpHandle, reply: Reply) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let replies = &mut q.transport.replies;
        if let (Reply::Ack(new), Some(Reply::Ack(last))) = (&reply, replies.back_mut())
            && new.kind == AckKind::Plain
            && last.kind == AckKind::Plain
            && new.syndrome == Syndrome::ACK
            && last.syndrome == Syndrome::ACK
        {
            *last = *new;
            return;
        }
        if replies.len() >= replies_cap(q.attr.max_dest_rd_atomic) {
            self.counters.replies_dropped += 1;
            return;
        }
        replies.push_back(reply);
        self.outbox.mark_active(qp);
    }
}

impl Engine<'_> {
    /// Whether a READ or atomic arriving now finds no room for its answer, room for the
    /// NAKs of the gap leaving it makes kept (see `responder`, which then leaves it
    /// unseen).
    pub(crate) fn owes_all_it_may(&self, qp: QpHandle) -> bool {
        self.store.get(qp).is_some_and(|q| {
            q.transport.replies.len() + usize::from(super::responder::NAK_COPIES)
                >= replies_cap(q.attr.max_dest_rd_atomic)
        })
    }
}

/// How many answers a QP may owe: a READ or atomic per responder resource, each followed
/// by an ACK or NAK, and a few more (a requester within its credits never reaches it).
fn replies_cap(max_dest_rd_atomic: u8) -> usize {
    2 * usize::from(max_dest_rd_atomic.max(1)) + 8
}

/// The ICRC of a packet whose payload `p` lies in registered memory, `body` being the packet
/// without its ICRC (the payload's bytes in it unwritten): headers, the memory in place,
/// then the pad. `None` when a page of the memory is gone.
fn in_place_icrc(ep: &UdpEndpoints, body: &[u8], p: PayloadRef) -> Option<u32> {
    let roce_len = body.len() + softroce_wire::ICRC_LEN;
    let head = icrc::head_crc_for_udp_socket(ep, roce_len, body.get(..p.at)?).ok()?;
    // SAFETY: `payload_in_place` checked the range against a live registration.
    let with_payload = unsafe { memory::crc_app(head, p.addr, p.len) }?;
    Some(icrc::continue_crc(with_payload, body.get(p.at + p.len..)?))
}
