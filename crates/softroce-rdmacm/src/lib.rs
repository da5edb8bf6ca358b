//! A drop-in `librdmacm.so.1`: rdma-core 44's export table (RDMACM_1.0 … RDMACM_1.3, see
//! `exports.txt`) in front of the connection manager that lives in softroce's drop-in
//! `libibverbs.so.1`.
//!
//! Why so thin: the `rdma_cm_id`s hand out the drop-in's own `ibv_context`, `ibv_pd` and
//! `ibv_qp`, and connections run on its devices, so the CM is part of that library (one
//! process state). This library finds the drop-in's table of entry points
//! ([`RdmacmEntryPoints`], through its private export `softroce_rdmacm_entry_points`) on
//! first use and calls through it. When the `libibverbs.so.1` the program loaded is not
//! softroce's, every call fails with ENOSYS and one line on stderr says why.
//!
//! The rsocket calls (rsocket(7)) are here too, built on those entry points and libibverbs'
//! verbs as rdma-core's own rsockets are (`rsocket`): stream sockets with rsockets' wire
//! protocol, with direct placement (riomap/riowrite) and repoll (epoll over rsockets), and
//! datagram sockets over UD queue pairs with rsockets' UDP address exchange
//! (`rsocket_dgram`).
//!
//! No panic crosses the C boundary: every export runs inside `guard`.

use core::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use libc::sockaddr;
use softroce_ibverbs_abi::rdmacm::*;

mod repoll;
mod rsocket;
mod rsocket_dgram;
use softroce_ibverbs_abi::{
    ibv_context, ibv_pd, ibv_qp_attr, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_srq_init_attr,
    ibv_srq_init_attr_ex, rdmacm_entry_points,
};

// Binds every export to its version node (see build.rs). Every module that defines exports
// needs these directives (they apply only within one object file): here, only this one.
// Test builds are executables without the version script, where the nodes do not exist.
#[cfg(not(test))]
core::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/symver.s")));

/// The drop-in's entry points, or why they cannot be had.
static ENTRY_POINTS: OnceLock<Result<&'static RdmacmEntryPoints, String>> = OnceLock::new();

/// The drop-in libibverbs's entry points; `None` (after saying why on stderr, once) when the
/// process has another libibverbs.
fn entry_points() -> Option<&'static RdmacmEntryPoints> {
    match ENTRY_POINTS.get_or_init(|| {
        let found = find_entry_points();
        if let Err(why) = &found {
            eprintln!("softroce librdmacm: {why}; every rdma_* call fails with ENOSYS");
        }
        found
    }) {
        Ok(table) => Some(table),
        Err(_) => None,
    }
}

fn find_entry_points() -> Result<&'static RdmacmEntryPoints, String> {
    let symbol = SOFTROCE_RDMACM_ENTRY_POINTS_SYMBOL;
    // SAFETY: dlsym/dlopen with NUL-terminated names; RTLD_DEFAULT searches the loaded
    // objects, which include the program's libibverbs when it is linked against it.
    let mut address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr()) };
    if address.is_null() {
        // A program that only links librdmacm: load libibverbs.so.1 as the real librdmacm
        // would have (it needs it too).
        // SAFETY: as above; the handle is kept for the life of the process.
        let handle = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            return Err(format!("cannot load libibverbs.so.1: {}", dl_error()));
        }
        // SAFETY: a valid handle and a NUL-terminated name.
        address = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
    }
    if address.is_null() {
        return Err(
            "the libibverbs.so.1 this process loaded is not softroce's drop-in, which holds \
             the connection manager (run the program under `softroce exec`)"
                .to_string(),
        );
    }
    // SAFETY: the drop-in defines the symbol with this type (softroce-ibverbs-abi).
    let get: RdmacmEntryPointsFn = unsafe { core::mem::transmute(address) };
    // SAFETY: the function takes nothing and returns a pointer to a static table or NULL.
    let table = unsafe { get() };
    // SAFETY: non-null pointers point at the drop-in's static table, alive for the process.
    match unsafe { table.as_ref() } {
        Some(table) if table.size == size_of::<RdmacmEntryPoints>() => Ok(table),
        Some(table) => Err(format!(
            "softroce's libibverbs.so.1 comes from another softroce build (entry-point \
             table of {} bytes, this librdmacm expects {})",
            table.size,
            size_of::<RdmacmEntryPoints>()
        )),
        None => Err("softroce's libibverbs.so.1 returned no entry points".to_string()),
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".to_string();
    }
    // SAFETY: non-null and NUL-terminated, see above.
    unsafe { core::ffi::CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = value };
}

thread_local! {
    /// How many calls of this library run on this thread (its service threads count one).
    static DEPTH: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// Whether this call was made from inside another call of this library on this thread (or
/// from one of its service threads): under librspreload, a socket the drop-in opens for
/// itself comes back here as an rsocket call.
fn nested_call() -> bool {
    DEPTH.with(|d| d.get() > 1)
}

/// Counts this thread, for good, as inside the library (its service threads).
fn mark_library_thread() {
    DEPTH.with(|d| d.set(d.get() + 1));
}

/// Leaves the count on drop, panic or not.
struct Depth;

impl Drop for Depth {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs `body`; when it panics, returns `failure` with errno EIO instead of unwinding into C.
fn guard<T>(failure: T, body: impl FnOnce() -> T) -> T {
    DEPTH.with(|d| d.set(d.get() + 1));
    let _depth = Depth;
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            set_errno(libc::EIO);
            failure
        }
    }
}

/// One export per entry of the list, calling through the table.
macro_rules! forward {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $fail:expr; )*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`, in softroce's drop-in libibverbs.")]
            ///
            /// # Safety
            ///
            /// The contract of the librdmacm function of this name (its man page): pointers
            /// are valid for what that function does with them.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                guard($fail, || match entry_points() {
                    // SAFETY: the drop-in's function of the same name and C signature; the
                    // caller keeps the function's contract.
                    Some(table) => unsafe { (table.$name)($($arg),*) },
                    None => {
                        set_errno(libc::ENOSYS);
                        $fail
                    }
                })
            }
        )*
    };
}

rdmacm_entry_points!(forward);

/// An rsocket call's result as C sees it: the value, or `fail` with errno set.
fn ret<T>(result: rsocket::Res<T>, fail: T) -> T {
    match result {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            fail
        }
    }
}

use libc::{fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, socklen_t, ssize_t, timeval};

/// `rsocket` (rsocket(7)): a stream socket over RDMA.
///
/// # Safety
/// None: every argument is a number.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    guard(-1, || ret(rsocket::rsocket(domain, kind, protocol), -1))
}

/// `rbind`.
///
/// # Safety
/// `addr` points at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(unsafe { rsocket::rbind(socket, addr, len) }.map(|()| 0), -1)
    })
}

/// `rlisten`.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    guard(-1, || {
        ret(rsocket::rlisten(socket, backlog).map(|()| 0), -1)
    })
}

/// `raccept`.
///
/// # Safety
/// `addr`/`len` are NULL or as for accept(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn raccept(socket: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(unsafe { rsocket::raccept(socket, addr, len) }, -1)
    })
}

/// `rconnect`.
///
/// # Safety
/// `addr` points at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rconnect(socket: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rconnect(socket, addr, len) }.map(|()| 0),
            -1,
        )
    })
}

/// `rshutdown`.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    guard(-1, || ret(rsocket::rshutdown(socket, how).map(|()| 0), -1))
}

/// `rclose`.
///
/// # Safety
/// None.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rclose(socket: c_int) -> c_int {
    guard(-1, || {
        let closed = repoll::close_instance(socket).unwrap_or_else(|| rsocket::rclose(socket));
        ret(closed.map(|()| 0), -1)
    })
}

/// `rrecv`.
///
/// # Safety
/// `buf` holds `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rrecv(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rrecv(socket, buf.cast(), len, flags) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rrecvfrom` (a stream socket's source is its peer).
///
/// # Safety
/// As recvfrom(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src: *mut sockaddr,
    src_len: *mut socklen_t,
) -> ssize_t {
    guard(-1, || {
        if let Some(d) = rsocket_dgram::lookup(socket) {
            // SAFETY: the caller's contract.
            let n = unsafe { rsocket_dgram::rrecvfrom(&d, buf.cast(), len, flags, src, src_len) };
            return ret(n.map(|n| n as ssize_t), -1);
        }
        // SAFETY: the caller's contract.
        let n = ret(
            unsafe { rsocket::rrecv(socket, buf.cast(), len, flags) }.map(|n| n as ssize_t),
            -1,
        );
        if n > 0 && !src.is_null() && !src_len.is_null() {
            // SAFETY: the caller's buffers.
            let _ = unsafe { rsocket::rgetpeername(socket, src, src_len) };
        }
        n
    })
}

/// `rrecvmsg` (no control messages: ENOTSUP, as rsockets).
///
/// # Safety
/// As recvmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    guard(-1, || {
        // SAFETY: the caller's msghdr.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            set_errno(libc::EFAULT);
            return -1;
        };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            set_errno(libc::ENOTSUP);
            return -1;
        }
        if let Some(d) = rsocket_dgram::lookup(socket) {
            // SAFETY: the caller's msghdr, valid for writing.
            let n = unsafe { rsocket_dgram::rrecvmsg(&d, &mut *msg, flags) };
            return ret(n.map(|n| n as ssize_t), -1);
        }
        // SAFETY: the caller's iovecs.
        ret(
            unsafe { rsocket::rrecvv(socket, m.msg_iov, m.msg_iovlen as c_int, flags) }
                .map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rsend`.
///
/// # Safety
/// `buf` holds `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsend(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rsend(socket, buf.cast(), len, flags) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rsendto`: a stream socket takes no destination (EISCONN, as rsockets).
///
/// # Safety
/// As sendto(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dest: *const sockaddr,
    dest_len: socklen_t,
) -> ssize_t {
    guard(-1, || {
        if let Some(d) = rsocket_dgram::lookup(socket) {
            // SAFETY: the caller's contract.
            let n = unsafe { rsocket_dgram::rsendto(&d, buf.cast(), len, flags, dest, dest_len) };
            return ret(n.map(|n| n as ssize_t), -1);
        }
        if !rsocket::is_stream(socket) {
            set_errno(libc::EBADF);
            return -1;
        }
        if !dest.is_null() || dest_len != 0 {
            set_errno(libc::EISCONN);
            return -1;
        }
        // SAFETY: the caller's contract.
        ret(
            unsafe { rsocket::rsend(socket, buf.cast(), len, flags) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rsendmsg` (no control messages: ENOTSUP, as rsockets).
///
/// # Safety
/// As sendmsg(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    guard(-1, || {
        // SAFETY: the caller's msghdr.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            set_errno(libc::EFAULT);
            return -1;
        };
        if !m.msg_control.is_null() && m.msg_controllen > 0 {
            set_errno(libc::ENOTSUP);
            return -1;
        }
        if let Some(d) = rsocket_dgram::lookup(socket) {
            // SAFETY: the caller's msghdr.
            let n = unsafe { rsocket_dgram::rsendmsg(&d, m, flags) };
            return ret(n.map(|n| n as ssize_t), -1);
        }
        // SAFETY: the caller's iovecs.
        ret(
            unsafe { rsocket::rsendv(socket, m.msg_iov, m.msg_iovlen as c_int, flags) }
                .map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rread`.
///
/// # Safety
/// `buf` holds `count` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rrecv(socket, buf.cast(), count, 0) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rreadv`.
///
/// # Safety
/// `iov` holds `iovcnt` iovecs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rrecvv(socket, iov, iovcnt, 0) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rwrite`.
///
/// # Safety
/// `buf` holds `count` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rsend(socket, buf.cast(), count, 0) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rwritev`.
///
/// # Safety
/// `iov` holds `iovcnt` iovecs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rsendv(socket, iov, iovcnt, 0) }.map(|n| n as ssize_t),
            -1,
        )
    })
}

/// `rpoll`: rsockets and ordinary descriptors together.
///
/// # Safety
/// `fds` holds `nfds` pollfds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(unsafe { rsocket::rpoll(fds, nfds, timeout) }, -1)
    })
}

/// `rselect`.
///
/// # Safety
/// As select(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rselect(nfds, readfds, writefds, exceptfds, timeout) },
            -1,
        )
    })
}

/// `rgetpeername`.
///
/// # Safety
/// As getpeername(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rgetpeername(
    socket: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rgetpeername(socket, addr, len) }.map(|()| 0),
            -1,
        )
    })
}

/// `rgetsockname`.
///
/// # Safety
/// As getsockname(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rgetsockname(
    socket: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rgetsockname(socket, addr, len) }.map(|()| 0),
            -1,
        )
    })
}

/// `rsetsockopt`.
///
/// # Safety
/// `value` holds `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rsetsockopt(socket, level, name, value, len) }.map(|()| 0),
            -1,
        )
    })
}

/// `rgetsockopt`.
///
/// # Safety
/// `value` holds `*len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::rgetsockopt(socket, level, name, value, len) }.map(|()| 0),
            -1,
        )
    })
}

/// `rfcntl`: F_GETFL/F_SETFL (O_NONBLOCK) and F_GETFD/F_SETFD.
///
/// Variadic in C (`int rfcntl(int, int, ...)`); on x86_64 a callee that reads one
/// integer-class argument sees what the caller passed.
///
/// # Safety
/// None: every argument is a number.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: usize) -> c_int {
    guard(-1, || ret(rsocket::rfcntl(socket, cmd, arg), -1))
}

/// `riomap` (rsocket(7)): map a buffer for direct placement by the peer.
///
/// # Safety
/// `buf` holds `len` bytes that stay valid until riounmap or rclose.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    _flags: c_int,
    offset: off_t,
) -> off_t {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { rsocket::riomap(socket, buf, len, prot, offset) },
            -1,
        )
    })
}

/// `riounmap`.
///
/// # Safety
/// None: the buffer is only compared.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> c_int {
    guard(-1, || {
        ret(rsocket::riounmap(socket, buf, len).map(|()| 0), -1)
    })
}

/// `riowrite`: `count` bytes into the peer's buffer mapped at `offset`; (size_t)-1 on error.
///
/// # Safety
/// `buf` holds `count` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: size_t,
    offset: off_t,
    flags: c_int,
) -> size_t {
    // SAFETY: the caller's contract.
    guard(usize::MAX, || {
        ret(
            unsafe { rsocket::riowrite(socket, buf.cast(), count, offset, flags) },
            usize::MAX,
        )
    })
}

/// `repoll_create` (rsocket(7)): an epoll instance for rsockets and ordinary descriptors,
/// as epoll_create1(2).
///
/// # Safety
/// None: the argument is a number.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn repoll_create(flags: c_int) -> c_int {
    guard(-1, || ret(repoll::repoll_create(flags), -1))
}

/// `repoll_ctl`: as epoll_ctl(2).
///
/// # Safety
/// `event` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn repoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut libc::epoll_event,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { repoll::repoll_ctl(epfd, op, fd, event) }.map(|()| 0),
            -1,
        )
    })
}

/// `repoll_wait`: as epoll_wait(2).
///
/// # Safety
/// `events` holds `maxevents` writable entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn repoll_wait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(-1, || {
        ret(
            unsafe { repoll::repoll_wait(epfd, events, maxevents, timeout) },
            -1,
        )
    })
}
