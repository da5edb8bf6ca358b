//! Open MPI (Debian's openmpi-bin, unmodified) runs an MPI program over UCX on emulated
//! devices: each rank is its own host (`softroce exec` with a device of its own), UCX's
//! rc_verbs carries point-to-point messages (pml ucx) and one-sided operations (osc ucx,
//! which opens the device a second time in the same process).

mod dropin;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use dropin::{dropin_library, require_tools};

fn compile_story() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mpi_story.c");
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mpi_story");
    let out = Command::new("mpicc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running mpicc");
    assert!(
        out.status.success(),
        "mpicc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn an_mpi_program_runs_over_ucx_rc_verbs_between_two_emulated_hosts() {
    require_tools(&["mpirun", "mpicc"], "openmpi-bin and libopenmpi-dev");
    let story = compile_story();
    let softroce = assert_cmd::cargo::cargo_bin("softroce");
    // Rank r runs on its own device, 127.77.67.(1+r), as on its own host.
    let rank = format!(
        "exec {} exec --devices softroce0=127.77.67.$((1+OMPI_COMM_WORLD_RANK)) -- {}",
        softroce.display(),
        story.display()
    );
    let mut mpirun = Command::new("mpirun");
    mpirun
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        // UCX for messages and one-sided operations; no shared memory or TCP byte transport.
        .args([
            "--mca", "pml", "ucx", "--mca", "osc", "ucx", "--mca", "btl", "self",
        ])
        .args([
            "-x",
            "UCX_TLS",
            "-x",
            "UCX_NET_DEVICES",
            "-x",
            "SOFTROCE_IBVERBS_LIB",
        ])
        .args(["-x", "UCX_LOG_LEVEL"])
        .args(["sh", "-c", &rank])
        // rc_v: rc_verbs for every lane, ud_verbs for the wire-up (UCX's alias).
        .env("UCX_TLS", "rc_v")
        .env("UCX_NET_DEVICES", "softroce0:1")
        .env("SOFTROCE_IBVERBS_LIB", dropin_library())
        // Prints the lanes each endpoint chose (ep_cfg), checked below.
        .env("UCX_LOG_LEVEL", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // UCX logs at info level: its output is read while mpirun runs (dropin::Drained).
    let child = mpirun.spawn().expect("spawning mpirun");
    let out = dropin::finish(child, Duration::from_secs(120));
    let report = format!(
        "mpirun ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.contains("mpi story: 2 ranks, 0 failures"),
        "{report}"
    );
    let lanes: Vec<&str> = report.lines().filter(|l| l.contains("ep_cfg[")).collect();
    assert!(
        lanes.iter().any(|l| l.contains("rc_verbs/softroce0:1")),
        "no endpoint used rc_verbs on softroce0: {lanes:#?}\n{report}"
    );
}
