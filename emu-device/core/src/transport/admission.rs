//! A bound on the RC request PSNs a device has in flight to each peer
//! (`HcaConfig::max_outstanding_psns`).
//!
//! Each RC QP may have 128 PSNs unacknowledged (rxe's window); sixty-four busy QPs are then
//! 8192 packets in flight, far more than a peer's socket can buffer while it is descheduled
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

use super::Outbox;
use super::recovery::FULL_WINDOW;
use crate::handles::QpHandle;
use crate::store::Store;
use crate::types::QpState;

/// Entries for peers with nothing outstanding kept while the map is this small: a
/// ping-pong's one peer goes idle at every ACK and busy again at the next request, and
/// dropping and adding its entry each time cost two map updates per round trip.
const IDLE_PEERS_KEPT: usize = 64;

/// What each peer has outstanding, and the QPs waiting for room there. A peer is in the
/// map while something is outstanding or waiting, and idle ones stay while there are at
/// most [`IDLE_PEERS_KEPT`] entries, so the map is as large as the set of peers currently
/// busy plus a few (the QPs' own destinations, never a packet's claim).
#[derive(Debug, Default)]
pub(crate) struct Admission {
    peers: HashMap<SocketAddr, Peer>,
}

#[derive(Debug, Default)]
struct Peer {
    /// The sum of the `QpTransport::inflight_share`s counted against this peer.
    outstanding: u32,
    /// QPs refused for lack of room, woken (made active) when enough comes back.
    waiting: VecDeque<QpHandle>,
}

impl Outbox {
    /// How many request packets never sent before QPs may still send `peer` under the
    /// bound `cap`.
    pub(crate) fn room(&self, peer: SocketAddr, cap: u32) -> u32 {
        self.admission
            .peers
            .get(&peer)
            .map_or(cap, |p| cap.saturating_sub(p.outstanding))
    }

    /// `qp` was refused for lack of room at `peer`: make it active again once there is.
    pub(crate) fn wait_for_room(&mut self, store: &mut Store, qp: QpHandle, peer: SocketAddr) {
        if let Some(q) = store.get_mut(qp)
            && !q.transport.awaiting_room
        {
            q.transport.awaiting_room = true;
            self.admission
                .peers
                .entry(peer)
                .or_default()
                .waiting
                .push_back(qp);
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
        if let Some((was, counted)) = old
            && was == peer
        {
            // The usual step: one lookup, the share replaced in place, and nothing more
            // when no QP waits there.
            if let Some(p) = self.admission.peers.get_mut(&peer) {
                p.outstanding = p.outstanding.saturating_sub(counted) + share;
                if p.waiting.is_empty() && self.admission.peers.len() <= IDLE_PEERS_KEPT {
                    return;
                }
            }
        } else {
            self.subtract(old);
            if share > 0 {
                self.admission.peers.entry(peer).or_default().outstanding += share;
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
        if let Some(p) = self.admission.peers.get_mut(&peer) {
            p.outstanding = p.outstanding.saturating_sub(counted);
        }
    }

    /// Wake the QPs waiting at `peer` if there is room, and drop the peer's entry once it
    /// holds nothing (unless few entries are kept, see [`IDLE_PEERS_KEPT`]).
    fn wake(&mut self, store: &mut Store, cap: u32, peer: SocketAddr) {
        let Some(p) = self.admission.peers.get_mut(&peer) else {
            return;
        };
        if p.outstanding <= cap - cap / 8 {
            let woken = std::mem::take(&mut p.waiting);
            if p.outstanding == 0 && self.admission.peers.len() > IDLE_PEERS_KEPT {
                self.admission.peers.remove(&peer);
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
            assert_eq!(o.room(peer(0), 1024), 1023);
            in_flight(&mut o, &mut store, qps[0], 0);
            assert_eq!(o.room(peer(0), 1024), 1024);
        }
        // Two hundred peers busy at once: each has its entry.
        for (i, &qp) in qps.iter().enumerate() {
            in_flight(&mut o, &mut store, qp, 4);
            assert_eq!(o.room(peer(i as u32), 1024), 1020);
        }
        assert_eq!(o.admission.peers.len(), 200);
        // All acknowledged: the map shrinks back to the idle entries it may keep.
        for &qp in &qps {
            in_flight(&mut o, &mut store, qp, 0);
        }
        assert!(
            o.admission.peers.len() <= IDLE_PEERS_KEPT,
            "{} idle peers remembered",
            o.admission.peers.len()
        );
        assert!((0..200).all(|i| o.room(peer(i), 1024) == 1024));
        // A QP waiting for room at a full peer is woken when its peer drains.
        let cap = 8;
        let waiter = rc_qp(&mut store, 0x400, peer(7));
        let q = store.get_mut(qps[7]).expect("the QP");
        q.transport.sent_psn = q.transport.comp_psn.add(8);
        o.account(&mut store, cap, qps[7]);
        assert_eq!(o.room(peer(7), cap), 0);
        o.wait_for_room(&mut store, waiter, peer(7));
        while o.next_active().is_some() {}
        let q = store.get_mut(qps[7]).expect("the QP");
        q.transport.sent_psn = q.transport.comp_psn;
        o.account(&mut store, cap, qps[7]);
        assert_eq!(o.next_active(), Some(waiter));
    }
}
