//! `softroce exec` runs unmodified libibverbs programs on the drop-in library.

use std::path::PathBuf;

use assert_cmd::Command;

/// The drop-in library cargo built for these tests (a dev-dependency).
fn dropin_library() -> PathBuf {
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

/// Tests do not install packages: `scripts/test-all.sh` does (ibverbs-utils has ibv_devices).
fn ibv_devices_installed() {
    let ok = std::process::Command::new("sh")
        .args(["-c", "command -v ibv_devices"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "ibv_devices is missing: run scripts/test-all.sh, which installs it"
    );
}

#[test]
fn exec_runs_ibv_devices_on_the_given_devices() {
    ibv_devices_installed();
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .env("SOFTROCE_IBVERBS_LIB", dropin_library())
        .env_remove("SOFTROCE_DEVICES")
        .args([
            "exec",
            "--devices",
            "execdev0=127.77.40.1,execdev1=127.77.40.2",
            "--",
        ])
        .arg("ibv_devices")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("execdev0") && stdout.contains("execdev1"),
        "{stdout}"
    );
}

#[test]
fn exec_without_the_library_says_how_to_build_it() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .env("SOFTROCE_IBVERBS_LIB", "/nonexistent/libibverbs.so")
        .args(["exec", "--", "true"])
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SOFTROCE_IBVERBS_LIB=/nonexistent/libibverbs.so is not a file"),
        "{stderr}"
    );
}
