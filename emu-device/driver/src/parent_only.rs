//! Sockets only the process that made them may hold.
//!
//! A child of `fork()` inherits every fd. Had it kept the device's UDP port, the owner's
//! registry socket or the unix connections between processes sharing a device, then once
//! the parent exited nobody could take the port over (the child holds it and reads
//! nothing), guests would not see their owner go, and an owner would keep a gone guest's
//! slot for as long as the child lived. Such fds are listed here, and a fork handler points
//! each at `/dev/null` in the child: the number stays taken there, so nothing of the
//! parent's that the child inherited (and never drops) can close a file the child opened
//! later under the same number.

use std::ops::Deref;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};

/// More than the sockets of every device a process can open (each has a few).
const SLOTS: usize = 4096;

static LISTED: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static FORK_HANDLER: Once = Once::new();

fn list(fd: RawFd) {
    FORK_HANDLER.call_once(|| {
        // SAFETY: registers a handler that makes only async-signal-safe calls.
        unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
    });
    // A full list leaves the fd inherited, as every fd was before.
    for slot in &LISTED {
        if slot
            .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

fn unlist(fd: RawFd) {
    for slot in &LISTED {
        if slot
            .compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Runs in the child right after `fork()`, alone: only async-signal-safe calls.
extern "C" fn in_forked_child() {
    // SAFETY: a NUL-terminated path.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if null < 0 {
        return;
    }
    for slot in &LISTED {
        let fd = slot.load(Ordering::Acquire);
        if fd >= 0 && fd != null {
            // SAFETY: replaces a listed fd of this process; dup3 closes the socket first.
            unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
        }
    }
    // SAFETY: our own fd.
    unsafe { libc::close(null) };
}

/// A socket (or any fd owner) that a forked child does not keep.
#[derive(Debug)]
pub struct ParentOnly<T: AsRawFd>(T);

impl<T: AsRawFd> ParentOnly<T> {
    /// List `fd`'s owner for the fork handler.
    pub fn new(fd: T) -> Self {
        list(fd.as_raw_fd());
        Self(fd)
    }
}

impl<T: AsRawFd> Drop for ParentOnly<T> {
    fn drop(&mut self) {
        // Off the list before the fd closes (the field drops after this), so a fork
        // meanwhile never points a reused number at /dev/null.
        unlist(self.0.as_raw_fd());
    }
}

impl<T: AsRawFd> Deref for ParentOnly<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: AsRawFd> AsRawFd for ParentOnly<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl<T: AsRawFd + AsFd> AsFd for ParentOnly<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
