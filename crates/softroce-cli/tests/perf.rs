//! `softroce perf MODE` between two processes prints perftest's tables (bandwidth modes
//! with peak/average/message rate, latency with percentiles), and `--baseline` adds raw UDP
//! measured in the same run as ratios. Figures are not asserted: only that they exist.

mod common;

use std::process::Command;

use common::{server_and_client, softroce};

fn run_perf(mode: &str, server_ip: &str, client_ip: &str, port: u16, extra: &[&str]) -> String {
    server_and_client(
        Command::new(softroce()).args(["perf", mode, "--bind", server_ip, "-p", &port.to_string()]),
        Command::new(softroce())
            .args(["perf", mode, "--bind", client_ip, "-p", &port.to_string()])
            .args(extra)
            .arg(server_ip),
    )
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
