//! rdma-core's own test suite (v44.0 `tests/`, vendored in `third_party/rdma-core-tests`) run
//! with Debian's `python3-pyverbs` through the drop-in, under `softroce exec`, with the
//! suite's default arguments (GID index 0) and with `--gid 1`, as a new user would run it.
//!
//! The outcome must be exactly the known state below: every test passes, or skips for a
//! reason listed in [`ALLOWED_SKIPS`], or is one of [`KNOWN_FAILURES`]; a new failure, an
//! unlisted skip, a hang, or a listed failure that now passes fails this test (the last so
//! the list shrinks as softroce grows).

mod dropin;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dropin::dropin_library;

/// A test blocked this long is a hang (the watchdog in `run_suite.py` ends the run).
const PER_TEST_TIMEOUT_S: u32 = 60;
/// The whole run (about 10 s today); past it the run is killed and reported as hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Skips that are allowed: vendor-only tests (any id naming mlx5 or EFA) and these reasons
/// (a substring of the skip message), each with why softroce skips them.
const ALLOWED_SKIPS: &[(&str, &str)] = &[
    // Genuinely hardware.
    (
        "Allocating dmabuf is not supported",
        "dmabuf needs a GPU DRM render node",
    ),
    (
        "Create QP type 8 is not supported",
        "raw packet QPs need an Ethernet NIC",
    ),
    (
        "Create Raw Packet QP",
        "raw packet QPs need an Ethernet NIC",
    ),
    (
        "cuda-python 12.0+ must be installed",
        "CUDA needs an NVIDIA GPU",
    ),
    (
        "There are no huge pages of size 2M allocated",
        "the host has no 2M huge pages",
    ),
    (
        "Importing a device is not supported",
        "ibv_import_device needs a kernel uverbs fd",
    ),
    (
        "Some object imports are not supported",
        "ibv_import_dm and the other imports need a kernel uverbs fd",
    ),
    (
        "Converting timestamp to nanoseconds is not supported",
        "mlx5dv_ts_to_ns is mlx5's direct-verbs API",
    ),
    // The suite's own bad-flow test cannot run when the table is full, as ours is.
    (
        "All gid indices populated, cannot check bad flow",
        "every GID index the port reports is populated",
    ),
];

/// Tests expected to fail or error today, with why (none: rdma-core's rdma_cm tests, which
/// fork two processes that share the device and connect over 127.0.0.1, pass since a forked
/// child starts a device of its own and 127.0.0.1 without a device is the kernel's loopback).
const KNOWN_FAILURES: &[(&str, &str)] = &[];

/// At least this many tests pass with either GID index (77 when the runner was added, 85
/// with memory windows, 89 with ibv_rereg_mr, 94 with parent domains, 105 with explicit
/// on-demand paging, 108 with UD multicast: test_rdmacm's three multicast tests, 118 with
/// device memory, 121 with implicit on-demand paging, 126 with completion timestamps and
/// atomic write, 133 with test_rdmacm's forked connections, 143 with XRC: the XRC tests of
/// test_atomic, test_cqex, test_odp and test_qpex, 147 with tag matching: test_tag_matching's
/// traffic, unexpected, no-tag and rendezvous tests; three more where 2 MiB huge pages are
/// reserved, as test-all does).
const MIN_PASSING: usize = 147;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Tests do not install packages: `scripts/test-all.sh` does.
fn pyverbs_installed() {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import pyverbs.device"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "Debian's python3-pyverbs is missing: run scripts/test-all.sh, which installs it"
    );
}

#[derive(Debug, Default)]
struct Run {
    /// Test id → (outcome, reason).
    results: BTreeMap<String, (String, String)>,
    /// Tests started without a result (the last one hung).
    unfinished: Vec<String>,
    stderr: String,
}

/// Runs the suite on a fresh device at `addr` with `args` after the suite's own defaults.
fn run_suite(addr: &str, args: &[&str]) -> Run {
    let root = repo_root();
    let mut child = Command::new(env!("CARGO_BIN_EXE_softroce"))
        .env("SOFTROCE_IBVERBS_LIB", dropin_library())
        .env_remove("SOFTROCE_DEVICES")
        .env_remove("SOFTROCE_LOG")
        .args(["exec", "--devices", &format!("softroce0={addr}"), "--"])
        .arg("/usr/bin/python3")
        .arg(root.join("scripts/pyverbs/run_suite.py"))
        .arg(root.join("third_party/rdma-core-tests/tests"))
        .args(["--per-test-timeout", &PER_TEST_TIMEOUT_S.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a hung run ends with the players it forked.
        .process_group(0)
        .spawn()
        .expect("spawning softroce exec");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let mut killed = false;
    while child.try_wait().expect("waiting for the suite").is_none() {
        if start.elapsed() > RUN_TIMEOUT {
            let pgid = i32::try_from(child.id()).expect("pid fits pid_t");
            // SAFETY: kill has no memory preconditions; the group is the one we created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.wait();
    let out = out_reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    let mut run = Run {
        stderr,
        ..Run::default()
    };
    for l in out.lines() {
        if let Some(id) = l.strip_prefix("START ") {
            run.unfinished.push(id.to_string());
        } else if let Some(rest) = l.strip_prefix("RESULT ") {
            let mut parts = rest.splitn(3, ' ');
            let id = parts.next().unwrap_or_default().to_string();
            let outcome = parts.next().unwrap_or_default().to_string();
            let reason = parts.next().unwrap_or_default().to_string();
            run.unfinished.retain(|u| *u != id);
            run.results.insert(id, (outcome, reason));
        }
    }
    assert!(
        !killed || !run.unfinished.is_empty(),
        "the suite ran past {RUN_TIMEOUT:?} between tests\n{}",
        run.stderr
    );
    run
}

fn vendor_only(id: &str) -> bool {
    let id = id.to_ascii_lowercase();
    id.contains("mlx5") || id.contains("efa")
}

/// Every way `run` departs from the known state, one line each.
fn departures(run: &Run) -> Vec<String> {
    let mut bad = Vec::new();
    for id in &run.unfinished {
        bad.push(format!(
            "{id}: HANG (no result within {PER_TEST_TIMEOUT_S} s; stacks above)"
        ));
    }
    for (id, (outcome, reason)) in &run.results {
        let known = KNOWN_FAILURES.iter().find(|(k, _)| k == id);
        match (outcome.as_str(), known) {
            ("ok", None) => {}
            ("ok", Some(_)) => bad.push(format!("{id}: passes now; remove it from KNOWN_FAILURES")),
            ("skip", _) if vendor_only(id) => {}
            ("skip", _) => {
                if !ALLOWED_SKIPS.iter().any(|(r, _)| reason.contains(r)) {
                    bad.push(format!("{id}: unexpected skip: {reason}"));
                }
            }
            ("fail" | "error", Some(_)) => {}
            (o, _) => bad.push(format!("{id}: {o}: {reason}")),
        }
    }
    bad
}

fn check(addr: &str, args: &[&str]) {
    pyverbs_installed();
    let run = run_suite(addr, args);
    let count = |o: &str| run.results.values().filter(|(x, _)| x == o).count();
    eprintln!(
        "rdma-core tests {args:?}: {} run, {} ok, {} skipped, {} failed, {} errors, {} hung",
        run.results.len() + run.unfinished.len(),
        count("ok"),
        count("skip"),
        count("fail"),
        count("error"),
        run.unfinished.len()
    );
    let bad = departures(&run);
    assert!(
        bad.is_empty(),
        "rdma-core's tests {args:?} departed from the known state:\n  {}\n--- stderr ---\n{}",
        bad.join("\n  "),
        run.stderr
    );
    assert!(
        count("ok") >= MIN_PASSING,
        "only {} tests passed (at least {MIN_PASSING} did before)\n{}",
        count("ok"),
        run.stderr
    );
    // A suite that loads nothing (a broken vendoring) must not pass.
    assert!(run.results.len() >= 273, "{} tests ran", run.results.len());
}

#[test]
fn rdma_core_tests_with_the_default_gid() {
    check("127.77.30.8", &[]);
}

#[test]
fn rdma_core_tests_with_gid_1() {
    check("127.77.30.9", &["--gid", "1"]);
}
