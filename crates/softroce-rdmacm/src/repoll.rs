//! repoll (rsocket(7): `repoll_create`, `repoll_ctl`, `repoll_wait`): epoll over rsockets
//! and ordinary descriptors together, as `rpoll` is poll over both.
//!
//! The calls follow epoll_create1(2), epoll_ctl(2) and epoll_wait(2), the socket calls
//! they are named after: -1 with errno on failure, the same errors (EBADF, EINVAL, EEXIST,
//! ENOENT, EPERM, EFAULT), at most `maxevents` events per wait, an interest list that other
//! threads may change while one waits, EPOLLERR and EPOLLHUP always reported, EPOLLONESHOT
//! honoured, and a closed descriptor leaving the list by itself. An instance is a real epoll
//! descriptor (so its number is reserved and `close` releases it); the interest list lives
//! here, and a wait polls it with `rpoll` in slices so that a change made meanwhile is seen.
//! EPOLLET is taken as level-triggered: a descriptor is reported for as long as it is
//! ready, which an edge-triggered program (reading until EAGAIN) takes as spurious wakeups
//! and never misses an event by.

use core::ffi::c_int;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libc::{epoll_event, pollfd};

use crate::rsocket::{self, Res};

/// How long one slice of a wait polls before it looks at the interest list again.
const SLICE: Duration = Duration::from_millis(50);

/// One descriptor of an interest list.
#[derive(Clone, Copy)]
struct Interest {
    fd: c_int,
    /// The epoll events asked for (`EPOLLIN`, ..., `EPOLLONESHOT`); 0 once a one-shot fired.
    events: u32,
    data: u64,
}

#[derive(Default)]
struct Instance {
    interests: Vec<Interest>,
    /// Where the next wait starts looking, so that more ready descriptors than `maxevents`
    /// take turns (epoll's ready list is round-robin too).
    cursor: usize,
}

/// Every instance, by its descriptor.
fn instances() -> MutexGuard<'static, BTreeMap<c_int, Instance>> {
    static INSTANCES: Mutex<BTreeMap<c_int, Instance>> = Mutex::new(BTreeMap::new());
    INSTANCES.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether `fd` is an open descriptor.
fn is_open(fd: c_int) -> bool {
    // SAFETY: F_GETFD reads flags only.
    fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0
}

pub(crate) fn repoll_create(flags: c_int) -> Res<c_int> {
    // epoll_create1(2): EPOLL_CLOEXEC is the only flag.
    if flags & !libc::EPOLL_CLOEXEC != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: no pointers.
    let fd = unsafe { libc::epoll_create1(flags) };
    if fd < 0 {
        return Err(errno());
    }
    // A number reused after a plain close of an earlier instance starts empty.
    instances().insert(fd, Instance::default());
    Ok(fd)
}

/// # Safety
/// `event` is NULL or readable.
pub(crate) unsafe fn repoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *const epoll_event,
) -> Res<()> {
    if !is_open(epfd) || !is_open(fd) {
        return Err(libc::EBADF);
    }
    let mut all = instances();
    if epfd == fd || !all.contains_key(&epfd) {
        return Err(libc::EINVAL);
    }
    // Nesting instances is not supported: the inner one's readiness lives here, not in
    // its descriptor.
    if all.contains_key(&fd) {
        return Err(libc::EINVAL);
    }
    let wanted = if op == libc::EPOLL_CTL_DEL {
        None
    } else {
        if event.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: non-NULL from the caller; epoll_event is packed, read unaligned.
        let e = unsafe { event.read_unaligned() };
        Some((e.events, e.u64))
    };
    if op == libc::EPOLL_CTL_ADD && !pollable(fd) {
        // epoll_ctl(2): a regular file or directory cannot be watched.
        return Err(libc::EPERM);
    }
    let inst = all.get_mut(&epfd).ok_or(libc::EINVAL)?;
    let at = inst.interests.iter().position(|i| i.fd == fd);
    match (op, at, wanted) {
        (libc::EPOLL_CTL_ADD, Some(_), _) => Err(libc::EEXIST),
        (libc::EPOLL_CTL_ADD, None, Some((events, data))) => {
            inst.interests.push(Interest { fd, events, data });
            Ok(())
        }
        (libc::EPOLL_CTL_MOD, Some(i), Some((events, data))) => {
            if events & libc::EPOLLEXCLUSIVE as u32 != 0 {
                // epoll_ctl(2): EPOLLEXCLUSIVE only with EPOLL_CTL_ADD.
                return Err(libc::EINVAL);
            }
            inst.interests[i] = Interest { fd, events, data };
            Ok(())
        }
        (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None, _) => Err(libc::ENOENT),
        (libc::EPOLL_CTL_DEL, Some(i), _) => {
            inst.interests.remove(i);
            Ok(())
        }
        _ => Err(libc::EINVAL),
    }
}

/// Whether poll can watch `fd` (not a regular file or directory, which epoll refuses).
fn pollable(fd: c_int) -> bool {
    // SAFETY: an out struct for fstat.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a valid out pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return true;
    }
    !matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR)
}

/// poll(2) and epoll(7) names of the same readiness: epoll asks for the first four, and
/// always reports the last two.
const POLL_EPOLL: [(i16, c_int); 6] = [
    (libc::POLLIN, libc::EPOLLIN),
    (libc::POLLOUT, libc::EPOLLOUT),
    (libc::POLLPRI, libc::EPOLLPRI),
    (libc::POLLRDHUP, libc::EPOLLRDHUP),
    (libc::POLLERR, libc::EPOLLERR),
    (libc::POLLHUP, libc::EPOLLHUP),
];

/// The poll events an epoll mask asks for.
fn poll_events(epoll: u32) -> i16 {
    POLL_EPOLL
        .iter()
        .filter(|(_, e)| epoll & *e as u32 != 0)
        .fold(0, |acc, (p, _)| acc | p)
}

/// The epoll events for what poll reported.
fn epoll_events(revents: i16) -> u32 {
    POLL_EPOLL
        .iter()
        .filter(|(p, _)| revents & *p != 0)
        .fold(0, |acc, (_, e)| acc | *e as u32)
}

/// # Safety
/// `events` holds `maxevents` writable entries.
pub(crate) unsafe fn repoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> Res<c_int> {
    if !is_open(epfd) {
        return Err(libc::EBADF);
    }
    if !instances().contains_key(&epfd) || maxevents <= 0 {
        return Err(libc::EINVAL);
    }
    if events.is_null() {
        return Err(libc::EFAULT);
    }
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        // The interest list as it is now; a one-shot that fired is not polled (not even for
        // errors) until EPOLL_CTL_MOD arms it again.
        let snapshot: Vec<Interest> = match instances().get(&epfd) {
            Some(inst) => inst.interests.clone(),
            None => return Err(libc::EBADF),
        };
        let mut fds: Vec<pollfd> = snapshot
            .iter()
            .map(|i| pollfd {
                fd: if i.events == 0 { -1 } else { i.fd },
                events: poll_events(i.events),
                revents: 0,
            })
            .collect();
        let slice_ms = match deadline {
            None => SLICE.as_millis() as c_int,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .min(SLICE)
                .as_millis() as c_int,
        };
        if fds.iter().all(|p| p.fd < 0) {
            // Nothing to watch until another thread adds something.
            std::thread::sleep(Duration::from_millis(slice_ms as u64));
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(0);
            }
            continue;
        }
        // SAFETY: a local array of `fds.len()` entries.
        let ready =
            unsafe { rsocket::rpoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, slice_ms) }?;
        if ready > 0 {
            // SAFETY: the caller's array of `maxevents`.
            let n = unsafe { collect(epfd, &snapshot, &fds, events, maxevents) };
            if n > 0 {
                return Ok(n);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(0);
        }
    }
}

/// Writes the events of the ready descriptors (at most `maxevents`, starting at the
/// instance's cursor) and updates the list: closed descriptors leave it, one-shots are
/// disarmed. Returns how many were written.
///
/// # Safety
/// `out` holds `maxevents` writable entries.
unsafe fn collect(
    epfd: c_int,
    snapshot: &[Interest],
    polled: &[pollfd],
    out: *mut epoll_event,
    maxevents: c_int,
) -> c_int {
    let mut all = instances();
    let Some(inst) = all.get_mut(&epfd) else {
        return 0;
    };
    let len = polled.len();
    let start = inst.cursor % len.max(1);
    let mut written = 0;
    for k in 0..len {
        if written >= maxevents {
            break;
        }
        let i = (start + k) % len;
        let (was, p) = (snapshot[i], polled[i]);
        // The list may have changed while polling: report only what is still asked.
        let Some(now) = inst.interests.iter_mut().find(|x| x.fd == was.fd) else {
            continue;
        };
        if p.revents & libc::POLLNVAL != 0 {
            // A closed descriptor leaves an epoll set by itself.
            let fd = was.fd;
            inst.interests.retain(|x| x.fd != fd);
            continue;
        }
        if now.events != was.events || now.events == 0 || p.revents == 0 {
            continue;
        }
        let ev = epoll_event {
            events: epoll_events(p.revents),
            u64: now.data,
        };
        // SAFETY: `written < maxevents`, within the caller's array; packed, so unaligned.
        unsafe { out.add(written as usize).write_unaligned(ev) };
        written += 1;
        if now.events & libc::EPOLLONESHOT as u32 != 0 {
            now.events = 0;
        }
        inst.cursor = i + 1;
    }
    written
}

/// `rclose` of an instance: `Some` if `fd` is one.
pub(crate) fn close_instance(fd: c_int) -> Option<Res<()>> {
    instances().remove(&fd)?;
    // SAFETY: the instance's own descriptor.
    if unsafe { libc::close(fd) } != 0 {
        return Some(Err(errno()));
    }
    Some(Ok(()))
}
