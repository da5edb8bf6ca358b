//! The C boundary: panics stop here, errno is set here, failures are reported here.

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
