//! The sans-IO core stays sans-IO: its crate reaches no socket, thread, clock or C library,
//! neither through its dependencies nor through its own source.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

#[test]
fn the_cores_dependency_tree_holds_no_io_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "softroce-emu-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        crates.contains(&"softroce-wire"),
        "unexpected tree:\n{tree}"
    );
    for io in [
        "libc",
        "socket2",
        "mio",
        "getrandom",
        "tokio",
        "serde",
        "toml",
        "nix",
    ] {
        assert!(
            !crates.contains(&io),
            "softroce-emu-core depends on {io}, an I/O or OS crate:\n{tree}"
        );
    }
}

#[test]
fn the_cores_source_calls_no_socket_thread_clock_or_file() {
    let forbidden = [
        "Instant::now",
        "SystemTime",
        "std::net::UdpSocket",
        "std::net::TcpStream",
        "std::thread",
        "std::fs",
        "std::process",
        "std::env",
    ];
    let mut stack = vec![workspace_root().join("emu-device/core/src")];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("core source readable") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).expect("source is UTF-8");
            for word in forbidden {
                assert!(
                    !text.contains(word),
                    "{} uses {word}: the core takes time and I/O as arguments",
                    path.display()
                );
            }
        }
    }
    assert!(files > 5, "found only {files} core source files");
}
