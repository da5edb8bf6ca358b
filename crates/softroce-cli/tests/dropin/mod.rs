//! The drop-in library the `softroce exec` tests run programs on.

use std::io::Read;
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

/// Whether some socket listens on TCP `port` (from /proc/net/tcp and tcp6), without
/// connecting: servers such as ucx_perftest's and fi_pingpong's take the first connection
/// as their peer.
#[allow(dead_code)] // not every test binary waits for a server
pub(crate) fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        let mut text = String::new();
        std::fs::File::open(f)
            .and_then(|mut h| h.read_to_string(&mut text))
            .is_ok()
            && text.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
    })
}
