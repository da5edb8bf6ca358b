//! A per-object critical section that one C call enters and a later one leaves: the man
//! pages make `ibv_wr_start` … `ibv_wr_complete`/`ibv_wr_abort` one per QP (ibv_wr_post(3),
//! CONCURRENCY) and providers make `ibv_start_poll` … `ibv_end_poll` one per CQ, so no
//! guard can live across the calls.

use std::sync::{Condvar, Mutex};
use std::thread::{self, ThreadId};

/// Held by at most one thread between `enter` and `leave`.
#[derive(Debug, Default)]
pub(crate) struct Section {
    holder: Mutex<Option<ThreadId>>,
    free: Condvar,
}

impl Section {
    /// Waits until no other thread holds the section, then holds it. The holder entering
    /// again stays in (a section started over, as `ibv_wr_start` twice): no self-deadlock.
    pub(crate) fn enter(&self) {
        let me = thread::current().id();
        let mut holder = self.holder.lock().unwrap_or_else(|e| e.into_inner());
        // Unbounded by design: the section is the application's to leave.
        loop {
            match *holder {
                None => {
                    *holder = Some(me);
                    return;
                }
                Some(h) if h == me => return,
                Some(_) => holder = self.free.wait(holder).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// Leaves the section if this thread holds it (a stray leave does nothing).
    pub(crate) fn leave(&self) {
        let me = thread::current().id();
        let mut holder = self.holder.lock().unwrap_or_else(|e| e.into_inner());
        if *holder == Some(me) {
            *holder = None;
            self.free.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn one_thread_at_a_time_is_inside() {
        let section = Arc::new(Section::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (section, inside, overlaps) =
                    (section.clone(), inside.clone(), overlaps.clone());
                thread::spawn(move || {
                    for _ in 0..2000 {
                        section.enter();
                        if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        section.leave();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a thread of the test");
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_holder_may_enter_again_and_a_stray_leave_changes_nothing() {
        let section = Section::default();
        section.enter();
        section.enter();
        section.leave();
        // Left: another thread gets in.
        let section = Arc::new(section);
        let other = section.clone();
        thread::spawn(move || {
            other.enter();
            other.leave();
        })
        .join()
        .expect("the other thread");
        // A leave without an enter is ignored.
        section.leave();
        section.enter();
        section.leave();
    }
}
