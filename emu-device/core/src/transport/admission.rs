//! A bound on the RC request PSNs a device has in flight to each peer
//! (`HcaConfig::max_outstanding_psns`).
//!
//! Each RC QP may have 256 PSNs unacknowledged (twice rxe's window); sixty-four busy QPs are
//! then 16384 packets in flight, far more than a peer's socket can buffer while it is descheduled
//! for a moment. What overflows is lost, and go-back-N resends the whole window into the
//! same full buffer: under load some QP met `retry_cnt` timeouts in a row and failed with
//! IBV_WC_RETRY_EXC_ERR although nothing was wrong but the load. Bounding the sum per peer
//! keeps what is in flight within what that peer can hold (lossless, as RoCE fabrics are
//! made to be with PFC); a QP that would exceed it waits for the ACKs of the others. The
//! bound is per peer because the buffer is: a dead or slow peer holds back only the QPs
//! that talk to it. Resends always go: they repair what is already counted.

use std::collections::VecDeque;
use std::net::SocketAddr;

use foldhash::HashMap;
use slab::Slab;

use super::Outbox;
use super::recovery::FULL_WINDOW;
use crate::handles::QpHandle;
use crate::objects::Qp;
use crate::store::Store;
use crate::types::QpState;

/// Entries for peers with nothing outstanding kept while the map is this small: a
/// ping-pong's one peer goes idle at every ACK and busy again at the next request, and
/// dropping and adding its entry each time cost two map updates per round trip.
const IDLE_PEERS_KEPT: usize = 64;

/// What each peer has outstanding, and the QPs waiting for room there. A peer has an entry
/// while something is outstanding or waiting, and idle ones stay while there are at most
/// [`IDLE_PEERS_KEPT`] entries, so there are as many as peers currently busy plus a few
/// (the QPs' own destinations, never a packet's claim).
///
/// Entries live in a slab, found by address through `index`; each QP remembers the slot
/// of its peer's entry (`QpTransport::admission_slot`, checked against the address before
/// use), so the per-packet checks of a streaming QP hash nothing: hashing the address
/// twice per packet was a tenth of the requester's time in an 8 B message stream.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    index: HashMap<SocketAddr, usize>,
    entries: Slab<Peer>,
}

#[derive(Debug)]
struct Peer {
    addr: SocketAddr,
    /// The sum of the `QpTransport::inflight_share`s counted against this peer.
    outstanding: u32,
    /// QPs refused for lack of room, woken (made active) when enough comes back.
    waiting: VecDeque<QpHandle>,
}

impl Admission {
    /// The slot of `peer`'s entry: `hint` when it still holds that peer, else looked up.
    fn find(&self, peer: SocketAddr, hint: usize) -> Option<usize> {
        if self.entries.get(hint).is_some_and(|p| p.addr == peer) {
            return Some(hint);
        }
        self.index.get(&peer).copied()
    }

    /// The slot of `peer`'s entry, made if there is none.
    fn find_or_insert(&mut self, peer: SocketAddr, hint: usize) -> usize {
        if let Some(slot) = self.find(peer, hint) {
            return slot;
        }
        let slot = self.entries.insert(Peer {
            addr: peer,
            outstanding: 0,
            waiting: VecDeque::new(),
        });
        self.index.insert(peer, slot);
        slot
    }

    fn remove(&mut self, slot: usize) {
        if let Some(p) = self.entries.try_remove(slot) {
            self.index.remove(&p.addr);
        }
    }

    /// Entries kept (busy peers and a few idle ones).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Outbox {
    /// How many request packets never sent before `q` may still send its peer under the
    /// bound `cap`. No room while other QPs wait for it there: they go first, all of them
    /// together once an eighth of the bound is free (see [`Outbox::account`]). Room freed
    /// by one QP's ACKs taken at once by whichever QP came next would leave the waiting
    /// ones only the leftovers: 64 QPs writing 64 KiB messages through the bound completed
    /// 956 to 2265 messages each in one run.
    pub(crate) fn room(&self, q: &Qp, cap: u32) -> u32 {
        self.admission
            .find(q.peer, q.transport.admission_slot)
            .and_then(|slot| self.admission.entries.get(slot))
            .map_or(cap, |p| {
                if p.waiting.is_empty() {
                    cap.saturating_sub(p.outstanding)
                } else {
                    0
                }
            })
    }

    /// `qp` was refused for lack of room at its peer: make it active again once there is.
    pub(crate) fn wait_for_room(&mut self, store: &mut Store, qp: QpHandle) {
        if let Some(q) = store.get_mut(qp)
            && !q.transport.awaiting_room
        {
            q.transport.awaiting_room = true;
            let slot = self
                .admission
                .find_or_insert(q.peer, q.transport.admission_slot);
            q.transport.admission_slot = slot;
            self.admission.entries[slot].waiting.push_back(qp);
        }
    }

    /// Count `qp`'s share again after a step that may have sent or acknowledged requests
    /// or changed its state or its peer, and wake the QPs waiting at that peer when an
    /// eighth of the bound is free there (not at every single ACK: each wakeup is a turn
    /// for every waiting QP).
    pub(crate) fn account(&mut self, store: &mut Store, cap: u32, qp: QpHandle) {
        let Some(q) = store.get_mut(qp) else {
            return;
        };
        let sending =
            q.init.qp_type.is_reliable() && matches!(q.attr.qp_state, QpState::Rts | QpState::Sqd);
        let (sent, acked) = (q.transport.sent_psn, q.transport.comp_psn);
        let share = if sending && acked.is_before(sent) {
            sent.distance_from(acked).min(FULL_WINDOW.psns)
        } else {
            0
        };
        let peer = q.peer;
        let old = q.transport.inflight_share.take();
        q.transport.inflight_share = (share > 0).then_some((peer, share));
        if old.is_none() && share == 0 {
            // Nothing counted before or now (a QP that only receives): no change, and no
            // room freed for the QPs waiting there.
            return;
        }
        let hint = q.transport.admission_slot;
        if let Some((was, counted)) = old
            && was == peer
        {
            // The usual step: the share replaced in place, and nothing more when no QP
            // waits there.
            if let Some(slot) = self.admission.find(peer, hint) {
                q.transport.admission_slot = slot;
                let kept = self.admission.entries.len();
                let p = &mut self.admission.entries[slot];
                p.outstanding = p.outstanding.saturating_sub(counted) + share;
                if p.waiting.is_empty() && kept <= IDLE_PEERS_KEPT {
                    return;
                }
            }
        } else {
            self.subtract(old);
            if share > 0 {
                let slot = self.admission.find_or_insert(peer, hint);
                q.transport.admission_slot = slot;
                self.admission.entries[slot].outstanding += share;
            }
        }
        if let Some((was, _)) = old
            && was != peer
        {
            self.wake(store, cap, was);
        }
        self.wake(store, cap, peer);
    }

    /// A QP's share (`QpTransport::inflight_share`, taken out of it) is no longer in
    /// flight: the QP is destroyed or reset. The QPs waiting at its peer may go.
    pub(crate) fn forget(&mut self, store: &mut Store, cap: u32, share: Option<(SocketAddr, u32)>) {
        self.subtract(share);
        if let Some((peer, _)) = share {
            self.wake(store, cap, peer);
        }
    }

    fn subtract(&mut self, share: Option<(SocketAddr, u32)>) {
        let Some((peer, counted)) = share else {
            return;
        };
        if let Some(slot) = self.admission.find(peer, usize::MAX) {
            let p = &mut self.admission.entries[slot];
            p.outstanding = p.outstanding.saturating_sub(counted);
        }
    }

    /// Wake the QPs waiting at `peer` if there is room, and drop the peer's entry once it
    /// holds nothing (unless few entries are kept, see [`IDLE_PEERS_KEPT`]).
    fn wake(&mut self, store: &mut Store, cap: u32, peer: SocketAddr) {
        let Some(slot) = self.admission.find(peer, usize::MAX) else {
            return;
        };
        let kept = self.admission.entries.len();
        let p = &mut self.admission.entries[slot];
        if p.outstanding <= cap - cap / 8 {
            let woken = std::mem::take(&mut p.waiting);
            if p.outstanding == 0 && kept > IDLE_PEERS_KEPT {
                self.admission.remove(slot);
            }
            // Bounded by the waiting QPs, each queued once.
            for w in woken {
                if let Some(q) = store.get_mut(w) {
                    q.transport.awaiting_room = false;
                }
                self.mark_active(w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::handles::{CqHandle, PdHandle};
    use crate::objects::{Qp, QpAttr, QpCap, QpInitAttr};
    use crate::types::QpType;

    /// An RC QP in RTS that talks to `peer`, nothing in flight yet.
    fn rc_qp(store: &mut Store, qpn: u32, peer: SocketAddr) -> QpHandle {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        };
        store.insert_qp(Qp {
            qpn: softroce_wire::Qpn::new(qpn).expect("a valid QPN"),
            pd: PdHandle::NONE,
            xrcd: None,
            opens: 1,
            init: QpInitAttr {
                send_cq: CqHandle::NONE,
                recv_cq: CqHandle::NONE,
                srq: None,
                cap: QpCap::default(),
                qp_type: QpType::Rc,
                sq_sig_all: false,
                qp_context: 0,
            },
            attr,
            peer,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            async_unacked: 0,
            sqd_notify_pending: false,
            transport: Default::default(),
        })
    }

    /// The room `qp` has at its peer.
    fn room(o: &Outbox, store: &Store, qp: QpHandle, cap: u32) -> u32 {
        o.room(store.get(qp).expect("the QP"), cap)
    }

    /// `qp` has `n` request PSNs unacknowledged; the outbox counts them.
    fn in_flight(o: &mut Outbox, store: &mut Store, qp: QpHandle, n: u32) {
        let q = store.get_mut(qp).expect("the QP");
        q.transport.sent_psn = q.transport.comp_psn.add(n);
        o.account(store, 1024, qp);
    }

    #[test]
    fn idle_peers_are_remembered_only_up_to_a_bound_and_busy_ones_always() {
        let mut store = Store::new(0x100, 0x100..0x10000);
        let mut o = Outbox::default();
        let peer = |i: u32| SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 4791));
        let qps: Vec<QpHandle> = (0..200)
            .map(|i| rc_qp(&mut store, 0x100 + i, peer(i)))
            .collect();
        // A ping-pong's peer: busy, idle, busy again, and counted right each time.
        for _ in 0..3 {
            in_flight(&mut o, &mut store, qps[0], 1);
            assert_eq!(room(&o, &store, qps[0], 1024), 1023);
            in_flight(&mut o, &mut store, qps[0], 0);
            assert_eq!(room(&o, &store, qps[0], 1024), 1024);
        }
        // Two hundred peers busy at once: each has its entry.
        for &qp in &qps {
            in_flight(&mut o, &mut store, qp, 4);
            assert_eq!(room(&o, &store, qp, 1024), 1020);
        }
        assert_eq!(o.admission.len(), 200);
        // All acknowledged: the map shrinks back to the idle entries it may keep.
        for &qp in &qps {
            in_flight(&mut o, &mut store, qp, 0);
        }
        assert!(
            o.admission.len() <= IDLE_PEERS_KEPT,
            "{} idle peers remembered",
            o.admission.len()
        );
        assert!(qps.iter().all(|&qp| room(&o, &store, qp, 1024) == 1024));
        // A QP waiting for room at a full peer is woken when its peer drains.
        let cap = 8;
        let waiter = rc_qp(&mut store, 0x400, peer(7));
        let q = store.get_mut(qps[7]).expect("the QP");
        q.transport.sent_psn = q.transport.comp_psn.add(8);
        o.account(&mut store, cap, qps[7]);
        assert_eq!(room(&o, &store, qps[7], cap), 0);
        // A QP of the same peer that never sent finds the entry by its address.
        let waiter_room = room(&o, &store, waiter, cap);
        assert_eq!(waiter_room, 0);
        o.wait_for_room(&mut store, waiter);
        while o.next_active().is_some() {}
        let q = store.get_mut(qps[7]).expect("the QP");
        q.transport.sent_psn = q.transport.comp_psn;
        o.account(&mut store, cap, qps[7]);
        assert_eq!(o.next_active(), Some(waiter));
    }

    #[test]
    fn room_freed_while_qps_wait_goes_to_them_before_a_qp_that_comes_later() {
        let mut store = Store::new(0x100, 0x100..0x10000);
        let mut o = Outbox::default();
        let peer = SocketAddr::from(([10, 2, 0, 1], 4791));
        let cap = 16;
        let [busy, waiter, late] = [0x100, 0x101, 0x102].map(|n| rc_qp(&mut store, n, peer));
        let set_in_flight = |o: &mut Outbox, store: &mut Store, n: u32| {
            let q = store.get_mut(busy).expect("the QP");
            q.transport.sent_psn = q.transport.comp_psn.add(n);
            o.account(store, cap, busy);
        };
        // The bound is full: the waiter queues for room.
        set_in_flight(&mut o, &mut store, cap);
        assert_eq!(room(&o, &store, waiter, cap), 0);
        o.wait_for_room(&mut store, waiter);
        while o.next_active().is_some() {}
        // One ACK frees a PSN: not enough to wake anyone (an eighth of the bound must be
        // free), and the QP that comes now may not take it past the one waiting.
        set_in_flight(&mut o, &mut store, cap - 1);
        assert_eq!(o.next_active(), None);
        assert_eq!(
            room(&o, &store, late, cap),
            0,
            "the late QP jumped the queue"
        );
        assert_eq!(
            room(&o, &store, busy, cap),
            0,
            "the ACKed QP jumped the queue"
        );
        // An eighth free: the waiter is woken, and from then on the room is anyone's.
        set_in_flight(&mut o, &mut store, cap - cap / 8);
        assert_eq!(o.next_active(), Some(waiter));
        assert_eq!(room(&o, &store, waiter, cap), cap / 8);
        assert_eq!(room(&o, &store, late, cap), cap / 8);
    }

    #[test]
    fn a_qp_never_reads_the_entry_that_took_over_its_peers_dropped_slot() {
        let mut store = Store::new(0x100, 0x100..0x10000);
        let mut o = Outbox::default();
        let peer = |i: u32| SocketAddr::from(([10, 1, (i >> 8) as u8, i as u8], 4791));
        // More peers than idle ones are kept: going idle drops some entries.
        let old: Vec<QpHandle> = (0..100)
            .map(|i| rc_qp(&mut store, 0x100 + i, peer(i)))
            .collect();
        for &qp in &old {
            in_flight(&mut o, &mut store, qp, 4);
        }
        for &qp in &old {
            in_flight(&mut o, &mut store, qp, 0);
        }
        // New peers take the freed slots, each with 16 PSNs out.
        let new: Vec<QpHandle> = (100..200)
            .map(|i| rc_qp(&mut store, 0x100 + i, peer(i)))
            .collect();
        for &qp in &new {
            in_flight(&mut o, &mut store, qp, 16);
        }
        let slot = |qp: QpHandle| store.get(qp).expect("the QP").transport.admission_slot;
        assert!(
            old.iter().any(|&a| new.iter().any(|&b| slot(a) == slot(b))),
            "some old QP remembers a slot a new peer now holds"
        );
        assert!(old.iter().all(|&qp| room(&o, &store, qp, 1024) == 1024));
        assert!(new.iter().all(|&qp| room(&o, &store, qp, 1024) == 1008));
    }
}
