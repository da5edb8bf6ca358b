//! The C boundary: panics stop here, errno is set here, failures are reported here.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Run `f`, turning a panic into `on_panic` (after saying so on stderr) so that it never
/// unwinds into C code.
pub(crate) fn guard<T>(verb: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            eprintln!("softroce: {verb}: internal error ({msg}); returning an error to the caller");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// A verb returning 0 or an errno value (errno set as well).
pub(crate) fn guard_errno(verb: &str, f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(verb, libc::EIO, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    })
}

/// A verb returning 0, or -1 with errno set (as rdma-core's `ibv_destroy_comp_channel`,
/// `ibv_get_cq_event`, `ibv_query_gid` … do).
pub(crate) fn guard_status(verb: &str, f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(verb, -1, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// A verb returning a pointer: NULL with errno set on failure.
pub(crate) fn guard_ptr<T>(verb: &str, f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    guard(verb, std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// Set the calling thread's errno.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Report a failed verb: errno set, one line on stderr saying which check failed (unless
/// `SOFTROCE_QUIET` is set), the errno returned.
pub(crate) fn fail(verb: &str, errno: i32, why: impl std::fmt::Display) -> i32 {
    if std::env::var_os("SOFTROCE_QUIET").is_none() {
        eprintln!("softroce: {verb}: {why}");
    }
    set_errno(errno);
    errno
}

/// A failed verb that returns a pointer: NULL with errno set.
pub(crate) fn fail_null<T>(verb: &str, errno: i32, why: impl std::fmt::Display) -> *mut T {
    fail(verb, errno, why);
    std::ptr::null_mut()
}

/// An all-zero C struct.
pub(crate) fn zeroed<T: Copy>() -> T {
    // SAFETY: only used for the plain-data verbs structs (integers, raw pointers, optional
    // function pointers and unions of those), for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}
