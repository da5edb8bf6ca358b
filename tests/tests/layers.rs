//! The sans-IO crates stay sans-IO: the HCA core and the CM reach no socket, thread, clock or
//! C library, neither through their dependencies nor through their own source.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// The sans-IO crates and their source directories.
const SANS_IO_CRATES: [(&str, &str); 2] = [
    ("softroce-emu-core", "emu-device/core/src"),
    ("softroce-emu-cm", "emu-device/cm/src"),
];

#[test]
fn no_sans_io_crate_depends_on_an_io_crate() {
    for (krate, _) in SANS_IO_CRATES {
        check_dependency_tree(krate);
    }
}

fn check_dependency_tree(krate: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            krate,
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
            "{krate} depends on {io}, an I/O or OS crate:\n{tree}"
        );
    }
}

#[test]
fn no_sans_io_crate_calls_a_socket_thread_clock_or_file() {
    for (_, dir) in SANS_IO_CRATES {
        check_source(dir);
    }
}

fn check_source(dir: &str) {
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
    let mut stack = vec![workspace_root().join(dir)];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("source readable") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            files += 1;
            let text = std::fs::read_to_string(&path).expect("source is UTF-8");
            // Comments may name what the code must not do, and doc examples, run as the
            // caller, may read the clock; only code lines count.
            let code: String = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            for word in forbidden {
                assert!(
                    !code.contains(word),
                    "{} uses {word}: a sans-IO crate takes time and I/O as arguments",
                    path.display()
                );
            }
        }
    }
    assert!(files > 3, "found only {files} source files in {dir}");
}
