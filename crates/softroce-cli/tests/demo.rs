//! The README's main command: `softroce demo` runs two emulated devices over real UDP
//! sockets on loopback and verifies every step itself.

use assert_cmd::Command;

#[test]
fn demo_walks_through_every_operation_and_succeeds() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .arg("demo")
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    for step in [
        "RC SEND: 3500 bytes in 4 packets, data verified",
        "RC WRITE with immediate: 3000 bytes placed, imm 0xc0ffee delivered",
        "RC READ: \"remote bytes READ back by A\"",
        "RC atomics: FETCH_ADD 41 -> 42, CMP_SWAP 42 -> 1000",
        "UD SEND: 256 bytes, byte_len 296 with the GRH area",
        "SRQ: two QPs received through one shared queue",
        "completion channel: fd",
        "CQ overrun: IBV_EVENT_CQ_ERR raised, then IBV_EVENT_QP_FATAL",
        "demo ok",
    ] {
        assert!(stdout.contains(step), "missing {step:?} in:\n{stdout}");
    }
}

#[test]
fn demo_on_an_address_in_use_fails_with_one_clear_line() {
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["demo", "--port", &port, "--b", "127.0.0.3"])
        .assert()
        .code(1);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(
        stderr.contains("Address already in use") || stderr.contains("in use"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn devinfo_shows_a_roce_device_with_its_ipv4_mapped_gid() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["devinfo", "--bind", "127.0.0.21"])
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    for want in [
        "hca_id:\tsoftroce0",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "::ffff:127.0.0.21, RoCE v2",
        "max_sge:",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
}

#[test]
fn perf_prints_softroce_next_to_raw_udp_as_ratios() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args([
            "perf",
            "-n",
            "50",
            "-s",
            "8192",
            "--lat-iters",
            "50",
            "--a",
            "127.0.0.41",
            "--b",
            "127.0.0.42",
        ])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        stdout.contains("RC WRITE 8192 B, MTU 4096, depth 16"),
        "{stdout}"
    );
    assert!(
        stdout.contains("RC SEND 8 B ping-pong, half RTT"),
        "{stdout}"
    );
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l
            .split_whitespace()
            .last()
            .unwrap()
            .parse::<f64>()
            .is_ok()),
        "{stdout}"
    );
}

/// A mistyped `SOFTROCE_COUNTERS` is said once, however many devices the process starts
/// (the demo starts two; it was said for each), and changes nothing else.
#[test]
fn a_mistyped_counters_variable_is_said_once() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .arg("demo")
        .env("SOFTROCE_COUNTERS", "stdout")
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(
        stderr
            .matches("SOFTROCE_COUNTERS=\"stdout\" is not \"stderr\"")
            .count(),
        1,
        "{stderr}"
    );
}
