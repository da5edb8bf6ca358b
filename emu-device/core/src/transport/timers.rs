//! The QPs with a timer armed, ordered by their earliest deadline, so that `poll_timeout`
//! and `handle_timeout` cost the QPs that are due rather than every QP of the device (a
//! device may have ten thousand, and the driver asks for the next deadline on every pump).
//!
//! A QP's timers stay its own fields (`retrans_at`, `rnr_at`, the deferred ACK); the
//! engine calls [`Timers::sync`] after each step that may arm one (a packet handled, a
//! transmit turn, fired timers). A QP whose timers were cleared without a sync (flushed,
//! reset, destroyed) keeps a stale entry until it falls due: one spurious, harmless wakeup.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::handles::QpHandle;
use crate::qp_transport::QpTransport;
use crate::store::Store;

/// Each QP's earliest deadline, under the key recorded in its `QpTransport::timer_key`.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    by_deadline: BTreeSet<(Instant, QpHandle)>,
}

impl QpTransport {
    /// The earliest of the QP's timers.
    fn next_deadline(&self) -> Option<Instant> {
        let held_ack = self.deferred_ack.map(|(_, due)| due);
        let early = self.recovery.early_at;
        [self.retrans_at, self.rnr_at, held_ack, early]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Timers {
    /// Re-file `qp` under its earliest deadline (or take it out when it has none).
    pub(crate) fn sync(&mut self, store: &mut Store, qp: QpHandle) {
        let Some(q) = store.get_mut(qp) else {
            return;
        };
        let want = q.transport.next_deadline();
        if want == q.transport.timer_key {
            return;
        }
        if let Some(old) = q.transport.timer_key {
            self.by_deadline.remove(&(old, qp));
        }
        if let Some(t) = want {
            self.by_deadline.insert((t, qp));
        }
        q.transport.timer_key = want;
    }

    /// The earliest deadline filed.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.by_deadline.first().map(|&(t, _)| t)
    }

    /// Take out the QPs whose deadline is at or before `now`; the caller fires their
    /// timers and syncs them again.
    pub(crate) fn take_due(&mut self, store: &mut Store, now: Instant) -> Vec<QpHandle> {
        let mut due = Vec::new();
        while let Some(&(t, qp)) = self.by_deadline.first()
            && t <= now
        {
            self.by_deadline.pop_first();
            if let Some(q) = store.get_mut(qp)
                && q.transport.timer_key == Some(t)
            {
                q.transport.timer_key = None;
            }
            due.push(qp);
        }
        due
    }
}
