//! The drop-in library the `softroce exec` tests run programs on.

use std::path::PathBuf;

/// The drop-in library cargo built for these tests (a dev-dependency).
pub(crate) fn dropin_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    for p in [
        deps.join("libibverbs.so"),
        deps.parent().expect("profile dir").join("libibverbs.so"),
    ] {
        if p.is_file() {
            return p;
        }
    }
    panic!("libibverbs.so not built next to {}", deps.display());
}
