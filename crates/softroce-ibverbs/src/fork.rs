//! `fork()` and the library's process-wide locks.
//!
//! A child of `fork()` has only the thread that forked: a lock another thread held at that
//! moment stays held in the child for good, and the child's first verb that needs it never
//! returns (`ibv_open_device` in a child forked while the parent's async-event router, or
//! another of its threads opening or closing a device, held the list of open contexts).
//! So, as glibc does for `malloc`, the forking thread takes each process-wide lock just
//! before the fork, in the order the library nests them, and lets go of them in both
//! processes after it; the child then finds every one free. Nothing here runs in a signal
//! handler: `pthread_atfork` handlers run in the thread that called `fork()`.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Mutex, TryLockError};

use crate::ffi::guard;

/// Locks held across a `fork()`, as guards (boxed: they are of many types).
pub(crate) type Held = Vec<Box<dyn Any>>;

thread_local! {
    /// The guards the forking thread took in [`before_fork`], for [`after_fork`].
    static HELD: RefCell<Held> = const { RefCell::new(Vec::new()) };
}

/// How long [`take`] tries for one lock. A lock another thread holds is let go within
/// microseconds; one still held after this is held by the forking thread itself (a signal
/// handler that forks while its thread was inside a verb), which waiting would deadlock:
/// that lock is left as it is.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Takes `lock` for the fork into `held` (see [`LOCK_PATIENCE`]).
pub(crate) fn take<T: 'static>(lock: &'static Mutex<T>, held: &mut Held) {
    let until = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        match lock.try_lock() {
            Ok(guard) => return held.push(Box::new(guard)),
            Err(TryLockError::Poisoned(e)) => return held.push(Box::new(e.into_inner())),
            Err(TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            Err(TryLockError::WouldBlock) => return,
        }
    }
}

/// Outermost first: a lock is only ever taken while holding locks listed before it (the
/// connection manager's routes and registry, then a device entry's start, then the async
/// event routing and the list of open contexts), so taking them all cannot deadlock with a
/// thread that nests some of them.
fn take_all() {
    let mut held = Held::new();
    crate::rdmacm::hold_for_fork(&mut held);
    crate::objects::hold_for_fork(&mut held);
    crate::devices::hold_for_fork(&mut held);
    crate::context::hold_for_fork(&mut held);
    HELD.with(|h| *h.borrow_mut() = held);
}

fn release_all() {
    let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    // Innermost first.
    for guard in held.into_iter().rev() {
        drop(guard);
    }
}

extern "C" fn before_fork() {
    guard("fork", (), take_all);
}

extern "C" fn after_fork() {
    guard("fork", (), release_all);
}

fn register() {
    // SAFETY: registers plain `extern "C" fn()`s that stay valid while the library is
    // loaded (glibc forgets them when it is unloaded).
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
}

extern "C" fn register_at_load() {
    guard("loading libibverbs", (), register);
}

/// Registered when the library is loaded, before any thread of ours exists.
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER_AT_LOAD: extern "C" fn() = register_at_load;
