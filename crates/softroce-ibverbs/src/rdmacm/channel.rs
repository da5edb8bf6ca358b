//! Event channels and events (`rdma_create_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`).
//!
//! A channel's fd is an eventfd in semaphore mode whose count is the number of queued
//! events: it polls readable while an event is pending, a read takes one, and a user who
//! sets O_NONBLOCK on it gets EAGAIN from `rdma_get_cm_event` (rdma_get_cm_event(3): "the
//! default synchronous behavior of this routine can be changed by modifying the file
//! descriptor").
//!
//! Events taken out of the queue unread (an id destroyed or migrated, a group left) take
//! their counts with them, but never by a read that could block: a thread waiting in
//! `rdma_get_cm_event` may already have taken the count, and a blocking read under the
//! queue's lock would wait for that thread while it waits for the lock. A count that cannot
//! be taken safely is owed (`Queue::owed`) and paid by the next reader that finds the queue
//! empty.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::{Condvar, Mutex, MutexGuard};

use softroce_ibverbs_abi::rdmacm::*;

/// An event as the application holds it between get and ack: the C struct first, then what
/// its pointers refer to.
#[repr(C)]
pub(crate) struct Event {
    pub(crate) c: rdma_cm_event,
    /// The private data `c.param.{conn,ud}.private_data` points into.
    pub(crate) private_data: Vec<u8>,
    /// A multicast join whose QP is attached when the application retrieves the event.
    pub(crate) join: Option<super::mcast::PendingAttach>,
}

impl Event {
    /// An event of `kind` for `id` with `status`, no parameters.
    pub(crate) fn new(id: *mut rdma_cm_id, kind: c_int, status: c_int) -> Box<Self> {
        Box::new(Self {
            c: rdma_cm_event {
                id,
                listen_id: std::ptr::null_mut(),
                event: kind,
                status,
                // SAFETY: plain data (pointers, integers) for which zero is valid.
                param: unsafe { std::mem::zeroed() },
            },
            private_data: Vec::new(),
            join: None,
        })
    }
}

/// A channel; `c` is first, so the `*mut rdma_event_channel` handed out is the channel.
#[repr(C)]
pub(crate) struct Channel {
    pub(crate) c: rdma_event_channel,
    queue: Mutex<Queue>,
    /// Signalled whenever an event of this channel is acknowledged.
    acked: Condvar,
}

/// The queued events and the eventfd's bookkeeping. Invariant: the fd's count plus the
/// counts readers took without having the lock yet equals `events.len() + owed`.
#[derive(Default)]
struct Queue {
    // Boxed: an event's address is what the application gets, so it must not move.
    #[allow(clippy::vec_box)]
    events: VecDeque<Box<Event>>,
    /// Counts of events taken out unread that are still in the fd.
    owed: usize,
    /// Threads in `pop` that may read, or have read, a count and not yet taken the lock.
    readers: usize,
}

// SAFETY: the queued events' raw pointers name ids and data the channel does not
// dereference; all mutable state is behind the mutex.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Channel {
    /// A new channel with its eventfd.
    pub(crate) fn new() -> Result<Box<Self>, c_int> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        Ok(Box::new(Self {
            c: rdma_event_channel { fd },
            queue: Mutex::new(Queue::default()),
            acked: Condvar::new(),
        }))
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `event` and makes the fd readable for it.
    pub(crate) fn push(&self, event: Box<Event>) {
        self.queue().events.push_back(event);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to our eventfd. It cannot fail short of
        // 2^64 - 2 pending events.
        unsafe { libc::write(self.c.fd, (&raw const one).cast(), 8) };
    }

    /// The next event: waits for one unless the fd is non-blocking (then EAGAIN).
    pub(crate) fn pop(&self) -> Result<Box<Event>, c_int> {
        // Bounded by the events other threads take out meanwhile: each turn pays one count
        // they owed, and a blocking read then waits for a new event.
        loop {
            self.queue().readers += 1;
            let mut count = 0u64;
            // SAFETY: reading 8 bytes into a live u64 from our eventfd; it blocks only when
            // the application left the fd blocking.
            let n = unsafe { libc::read(self.c.fd, (&raw mut count).cast(), 8) };
            let read_error = std::io::Error::last_os_error();
            let mut queue = self.queue();
            queue.readers -= 1;
            if n != 8 {
                return Err(read_error.raw_os_error().unwrap_or(libc::EIO));
            }
            if let Some(event) = queue.events.pop_front() {
                return Ok(event);
            }
            // The count was one of an event taken out unread (see `Queue`).
            queue.owed = queue.owed.saturating_sub(1);
        }
    }

    /// Takes the queued events of `id` out of this channel (their counts too), in order.
    // Boxed: an event's address is what the application gets, so it must not move.
    #[allow(clippy::vec_box)]
    pub(crate) fn take_events_of(&self, id: *mut rdma_cm_id) -> Vec<Box<Event>> {
        self.take_events_where(|e| e.c.id == id || e.c.listen_id == id)
    }

    /// Takes the queued events `which` picks out of this channel (their counts too), in
    /// order.
    #[allow(clippy::vec_box)]
    pub(crate) fn take_events_where(&self, which: impl Fn(&Event) -> bool) -> Vec<Box<Event>> {
        let mut queue = self.queue();
        let mut taken = Vec::new();
        let mut kept = VecDeque::new();
        for event in queue.events.drain(..) {
            if which(&event) {
                taken.push(event);
            } else {
                kept.push_back(event);
            }
        }
        queue.events = kept;
        queue.owed += taken.len();
        // A read cannot block while the fd holds more than the readers in `pop` can take
        // first: by the invariant it holds at least events + owed - readers.
        while queue.owed > 0 && queue.events.len() + queue.owed > queue.readers {
            let mut count = 0u64;
            // SAFETY: as in `pop`; a count is there (above), so the read does not block.
            unsafe { libc::read(self.c.fd, (&raw mut count).cast(), 8) };
            queue.owed -= 1;
        }
        taken
    }

    /// How many queued events `which` picks.
    pub(crate) fn count_where(&self, which: impl Fn(&Event) -> bool) -> usize {
        self.queue().events.iter().filter(|e| which(e)).count()
    }

    /// Whether any event is queued.
    pub(crate) fn has_events(&self) -> bool {
        !self.queue().events.is_empty()
    }

    /// Wakes the threads waiting in [`Channel::wait_until`].
    pub(crate) fn notify_acked(&self) {
        let _queue = self.queue();
        self.acked.notify_all();
    }

    /// Waits (on acknowledgements of this channel's events) until `done` holds.
    pub(crate) fn wait_until(&self, mut done: impl FnMut() -> bool) {
        let mut queue = self.queue();
        while !done() {
            queue = self.acked.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: our eventfd, closed once.
        unsafe { libc::close(self.c.fd) };
    }
}
