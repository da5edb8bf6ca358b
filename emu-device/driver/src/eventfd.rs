//! A pollable notification fd (Linux `eventfd`), the kernel object behind completion channels
//! and the async event queue.
//!
//! The engine thread calls [`EventFd::notify`] once per event; the application side may set the
//! fd non-blocking and poll it with poll/epoll/mio exactly as the `ibv_get_cq_event(3)` example
//! does with a completion channel's `fd`, then [`EventFd::try_consume`] to learn how many events
//! arrived.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An owned eventfd in counter mode.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
    /// Held from a non-blocking consume's look to its read: the fd is blocking (it is the
    /// application's to poll or switch), so two consumes that both saw it readable would
    /// leave the later one's read asleep until the next event.
    consuming: std::sync::Mutex<()>,
}

impl EventFd {
    /// Create a blocking, close-on-exec eventfd with a zero counter.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is an error.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            fd,
            consuming: std::sync::Mutex::new(()),
        })
    }

    /// Add one to the counter, waking pollers.
    pub fn notify(&self) -> io::Result<()> {
        self.add(1)
    }

    /// Add `n` to the counter.
    pub fn add(&self, n: u64) -> io::Result<()> {
        let bytes = n.to_ne_bytes();
        loop {
            // SAFETY: writes 8 bytes from a live stack buffer to our own fd.
            let r = unsafe { libc::write(self.fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
            if r == 8 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                // The counter would overflow (2^64-2 pending): readers are far behind; the
                // event is still signalled because the counter is non-zero.
                io::ErrorKind::WouldBlock => return Ok(()),
                _ => return Err(err),
            }
        }
    }

    /// Read and reset the counter without blocking; `Ok(0)` when nothing is pending.
    pub fn try_consume(&self) -> io::Result<u64> {
        let _only_consumer = self.consuming.lock().unwrap_or_else(|e| e.into_inner());
        if !self.wait_readable(Some(Duration::ZERO))? {
            return Ok(0);
        }
        self.read_counter()
    }

    /// Block until the counter is non-zero (or `timeout` passes), then read and reset it.
    /// Returns `Ok(0)` on timeout.
    pub fn consume_blocking(&self, timeout: Option<Duration>) -> io::Result<u64> {
        if !self.wait_readable(timeout)? {
            return Ok(0);
        }
        self.read_counter()
    }

    fn read_counter(&self) -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        loop {
            // SAFETY: reads 8 bytes into a live stack buffer from our own fd.
            let r =
                unsafe { libc::read(self.fd.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
            if r == 8 {
                return Ok(u64::from_ne_bytes(bytes));
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                // Another reader won the race, or the fd is non-blocking and empty.
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(err),
            }
        }
    }

    /// Block until the counter is non-zero as a `read(2)` of it blocks, and leave it as it
    /// was: a signal interrupts the wait (`ErrorKind::Interrupted`) when its handler was
    /// installed without `SA_RESTART`, and not otherwise (the kernel restarts the read),
    /// which `poll(2)` cannot tell apart. A fd switched to non-blocking meanwhile returns
    /// at once.
    pub fn wait_readable_as_read(&self) -> io::Result<()> {
        let mut bytes = [0u8; 8];
        // SAFETY: reads 8 bytes into a live stack buffer from our own fd.
        let r = unsafe { libc::read(self.fd.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
        if r == 8 {
            // Put the count back: readiness is level-triggered for every other waiter and
            // poller, and the caller takes its event as after any wake-up.
            return self.add(u64::from_ne_bytes(bytes));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock => Ok(()),
            _ => Err(err),
        }
    }

    /// Wait until readable; `None` waits forever. Returns whether the fd is readable.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        poll_readable(self.fd.as_fd(), timeout)
    }

    /// Switch `O_NONBLOCK` on or off (the `fcntl` dance of the ibv_get_cq_event(3) example).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        set_nonblocking(self.fd.as_fd(), nonblocking)
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Poll one fd for readability with an optional timeout.
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let timeout_ms: libc::c_int = match timeout {
        None => -1,
        Some(d) => d.as_millis().min(libc::c_int::MAX as u128) as libc::c_int,
    };
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd on the stack.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r >= 0 {
            return Ok(r > 0 && pfd.revents & libc::POLLIN != 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Set or clear `O_NONBLOCK` on an fd.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, nonblocking: bool) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on an fd we borrow; no pointers involved.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let new = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if new != flags && unsafe { libc::fcntl(raw, libc::F_SETFL, new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_accumulate_until_consumed() {
        let fd = EventFd::new().unwrap();
        assert_eq!(fd.try_consume().unwrap(), 0);
        fd.notify().unwrap();
        fd.notify().unwrap();
        fd.add(3).unwrap();
        assert!(fd.wait_readable(Some(Duration::ZERO)).unwrap());
        assert_eq!(fd.try_consume().unwrap(), 5);
        assert_eq!(fd.try_consume().unwrap(), 0);
    }

    #[test]
    fn nonblocking_fd_reports_nothing_instead_of_blocking() {
        let fd = EventFd::new().unwrap();
        fd.set_nonblocking(true).unwrap();
        assert_eq!(fd.read_counter().unwrap(), 0);
        fd.notify().unwrap();
        assert_eq!(fd.read_counter().unwrap(), 1);
    }

    #[test]
    fn blocking_wait_wakes_when_another_thread_notifies() {
        let fd = std::sync::Arc::new(EventFd::new().unwrap());
        let writer = std::sync::Arc::clone(&fd);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            writer.notify().unwrap();
        });
        assert_eq!(
            fd.consume_blocking(Some(Duration::from_secs(5))).unwrap(),
            1
        );
        t.join().unwrap();
    }

    #[test]
    fn blocking_wait_times_out_with_zero() {
        let fd = EventFd::new().unwrap();
        assert_eq!(
            fd.consume_blocking(Some(Duration::from_millis(10)))
                .unwrap(),
            0
        );
    }
}
