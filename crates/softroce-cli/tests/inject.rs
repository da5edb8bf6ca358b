//! `softroce inject SCENARIO` drives each error path between two devices on the real driver
//! and checks every completion and event against the man pages' promise itself; here every
//! scenario must come out as expected, on distinct addresses so they may run in parallel.

use assert_cmd::Command;

fn inject(scenario: &str, a: &str, b: &str) -> String {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["inject", scenario, "--a", a, "--b", b])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("every observation as expected"), "{stdout}");
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    stdout
}

#[test]
fn cq_overrun_raises_cq_err_then_qp_fatal_and_the_cq_fails_with_eio() {
    let out = inject("cq-overrun", "127.0.0.111", "127.0.0.112");
    assert!(out.contains("IBV_EVENT_CQ_ERR on B's CQ"), "{out}");
    assert!(out.contains("fails with EIO"), "{out}");
}

#[test]
fn forced_qp_errors_raise_their_event_flush_and_recover_after_reconnect() {
    for (i, (scenario, event)) in [
        ("qp-fatal", "IBV_EVENT_QP_FATAL"),
        ("qp-req-err", "IBV_EVENT_QP_REQ_ERR"),
        ("qp-access-err", "IBV_EVENT_QP_ACCESS_ERR"),
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (
            format!("127.0.0.{}", 113 + 2 * i),
            format!("127.0.0.{}", 114 + 2 * i),
        );
        let out = inject(scenario, &a, &b);
        assert!(
            out.contains(&format!("async event {event} on B's QP")),
            "{out}"
        );
        assert!(out.contains("IBV_WC_WR_FLUSH_ERR"), "{out}");
        assert!(
            out.contains("after reset and reconnect a SEND completes"),
            "{out}"
        );
    }
}

#[test]
fn port_down_and_up_device_fatal_rnr_retry_exhaustion_and_remote_access() {
    for (i, (scenario, marker)) in [
        ("port-down", "IBV_EVENT_PORT_ACTIVE on port 1"),
        ("device-fatal", "IBV_EVENT_DEVICE_FATAL on the device"),
        ("rnr", "IBV_WC_RNR_RETRY_EXC_ERR"),
        ("retry-exceeded", "exactly once"),
        ("remote-access", "IBV_WC_REM_ACCESS_ERR"),
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (
            format!("127.0.0.{}", 121 + 2 * i),
            format!("127.0.0.{}", 122 + 2 * i),
        );
        let out = inject(scenario, &a, &b);
        assert!(out.contains(marker), "{scenario}: {out}");
    }
}
