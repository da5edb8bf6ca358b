//! `softroce perf MODE` between two processes prints perftest's tables (bandwidth modes
//! with peak/average/message rate, latency with percentiles), and `--baseline` adds raw UDP
//! measured in the same run as ratios. Figures are not asserted: only that they exist.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("softroce")
}

fn run_perf(mode: &str, server_ip: &str, client_ip: &str, port: u16, extra: &[&str]) -> String {
    let mut server = Command::new(bin())
        .args(["perf", mode, "--bind", server_ip, "-p", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the perf server");
    let client = Command::new(bin())
        .args(["perf", mode, "--bind", client_ip, "-p", &port.to_string()])
        .args(extra)
        .arg(server_ip)
        .output()
        .expect("running the perf client");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if server.try_wait().expect("server status").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            panic!("perf server did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let srv = server.wait_with_output().expect("server output");
    let out = String::from_utf8_lossy(&client.stdout).into_owned();
    assert!(
        client.status.success() && srv.status.success(),
        "client:\n{out}\n{}\nserver:\n{}\n{}",
        String::from_utf8_lossy(&client.stderr),
        String::from_utf8_lossy(&srv.stdout),
        String::from_utf8_lossy(&srv.stderr)
    );
    out
}

#[test]
fn write_bandwidth_over_two_qps_prints_perftests_table_and_udp_ratios() {
    let out = run_perf(
        "write",
        "127.0.0.81",
        "127.0.0.82",
        18681,
        &["-n", "300", "-s", "8192", "-q", "2", "--baseline"],
    );
    assert!(out.contains("BW average[MB/sec]"), "{out}");
    assert!(out.contains(" 8192 "), "{out}");
    assert!(out.contains("GSO (ratio"), "{out}");
}

#[test]
fn send_latency_prints_percentiles() {
    let out = run_perf(
        "lat",
        "127.0.0.83",
        "127.0.0.84",
        18683,
        &["-n", "200", "-s", "8"],
    );
    assert!(out.contains("99.9% percentile[usec]"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("8 ")),
        "{out}"
    );
}

#[test]
fn the_server_adopts_the_clients_parameters_for_send_and_atomics() {
    for (mode, port) in [("send", 18685), ("atomic", 18687), ("read", 18689)] {
        let out = run_perf(
            mode,
            "127.0.0.85",
            "127.0.0.86",
            port,
            &["-n", "200", "-s", "2048"],
        );
        assert!(out.contains("MsgRate[Mpps]"), "{mode}: {out}");
    }
}
