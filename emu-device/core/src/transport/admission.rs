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
use super::requester::MAX_UNACKED_PSNS;
use crate::handles::QpHandle;
use crate::store::Store;
use crate::types::QpState;

/// What each peer has outstanding, and the QPs waiting for room there. A peer is in the
/// map only while something is outstanding or waiting, so the map is as large as the set
/// of peers currently busy (the QPs' own destinations, never a packet's claim).
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
            sent.distance_from(acked).min(MAX_UNACKED_PSNS)
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
            // The usual step: one lookup, the share replaced in place.
            if let Some(p) = self.admission.peers.get_mut(&peer) {
                p.outstanding = p.outstanding.saturating_sub(counted) + share;
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
    /// holds nothing.
    fn wake(&mut self, store: &mut Store, cap: u32, peer: SocketAddr) {
        let Some(p) = self.admission.peers.get_mut(&peer) else {
            return;
        };
        if p.outstanding <= cap - cap / 8 {
            let woken = std::mem::take(&mut p.waiting);
            if p.outstanding == 0 {
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
