//! `scripts/bench.sh --quick` runs end to end and fills every row of its table, so the
//! benchmark cannot rot. Figures are not asserted: a shared machine makes them noise here.

use std::path::PathBuf;
use std::process::Command;

/// The drop-in library cargo built for these tests (a dev-dependency).
fn dropin_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    [
        deps.join("libibverbs.so"),
        deps.parent().expect("profile dir").join("libibverbs.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("libibverbs.so not built next to {}", deps.display()))
}

#[test]
fn quick_bench_prints_every_row() {
    for tool in [
        "fi_pingpong",
        "ib_send_lat",
        "ib_write_lat",
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ss",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{tool} is missing: run scripts/test-all.sh, which installs it"
        );
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Every run inside the script has its own `timeout`, so this ends.
    let out = Command::new("bash")
        .arg(root.join("scripts/bench.sh"))
        .arg("--quick")
        .env("SOFTROCE_BIN", assert_cmd::cargo::cargo_bin("softroce"))
        .env("SOFTROCE_IBVERBS_LIB", dropin_library())
        .env_remove("SOFTROCE_DEVICES")
        .output()
        .expect("running scripts/bench.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{report}");
    for label in [
        "raw UDP busy-poll 8 B half RTT",
        "raw UDP call: send 40 B",
        "raw UDP call: GSO send 2 x 40 B",
        "raw UDP call: empty recv",
        "raw UDP call: empty recvmsg",
        "raw UDP call: recvmsg of 40 B",
        "raw UDP GSO/GRO stream",
        "raw UDP 8 B datagram rate, GSO/GRO",
        "fi_pingpong tcp rdm 8 B half RTT",
        "ib_send_lat 8 B half RTT",
        "ib_write_lat 8 B half RTT",
        "ib_write_bw 1 MiB",
        "ib_write_bw 1 MiB, 1 % loss",
        "ib_write_bw 1 MiB, 1 % loss, adaptive",
        "ib_read_bw 1 MiB",
        "ib_send_bw 1 MiB",
        "ib_write_bw 8 B message rate",
        "ib_write_bw 8 B message rate, 8 QPs",
        "ib_send_bw 64 B rate, completion events",
        "softroce perf write 64 KiB (2 procs)",
        "softroce perf lat 8 B half RTT",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?}:\n{report}"));
        assert!(!row.contains("n/a"), "{row}\n{report}");
    }
}
