//! perftest's unmodified `ib_{write,read,send,atomic}_{bw,lat}` between two processes on
//! loopback, each on its own emulated device (default TCP exchange, GID index 0, `-F`: the
//! CPU-frequency check means nothing on a shared machine). The figures must be present and
//! consistent; how large they are is for benchmarks, not tests.

mod common;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// The numbers of the result row under perftest's `#bytes` header.
fn result_row(out: &str) -> Option<Vec<f64>> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next()?;
    let row = lines.find(|l| !l.trim().is_empty())?;
    row.split_whitespace().map(|f| f.parse().ok()).collect()
}

fn run(
    tool: &str,
    pair: u8,
    iterations: &str,
    extra: &[&str],
) -> (common::Finished, common::Finished) {
    common::require_tools(&[tool]);
    let (server_dev, client_dev) = common::device_pair(pair);
    let port = common::free_tcp_port();
    let port_s = port.to_string();
    let args = [
        "-d",
        "softroce0",
        "-x",
        "0",
        "-F",
        "-p",
        &port_s,
        "-n",
        iterations,
    ];
    let args: Vec<&str> = args.iter().chain(extra).copied().collect();
    common::run_pair(tool, &server_dev, &client_dev, &args, port, LIMIT)
}

/// Bandwidth tools: `#bytes #iterations BW-peak BW-average MsgRate` on the client.
fn bandwidth(tool: &str, pair: u8, bytes: f64) {
    bandwidth_with(tool, pair, bytes, &[]);
}

/// [`bandwidth`] with more of perftest's options.
fn bandwidth_with(tool: &str, pair: u8, bytes: f64, extra: &[&str]) {
    let (s, c) = run(tool, pair, "1000", extra);
    let row = result_row(&c.stdout)
        .unwrap_or_else(|| panic!("no result row:\n{}\n{}", c.report(), s.report()));
    assert_eq!(row.len(), 5, "{}", c.report());
    assert_eq!(row[0], bytes, "message size\n{}", c.report());
    assert_eq!(row[1], 1000.0, "iterations\n{}", c.report());
    assert!(
        row[3] > 0.0 && row[4] > 0.0,
        "no bandwidth:\n{}",
        c.report()
    );
}

/// Latency tools: `#bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9`.
fn latency(tool: &str, pair: u8, bytes: f64) {
    let (s, c) = run(tool, pair, "500", &[]);
    let row = result_row(&c.stdout)
        .unwrap_or_else(|| panic!("no result row:\n{}\n{}", c.report(), s.report()));
    assert_eq!(row.len(), 9, "{}", c.report());
    assert_eq!(row[0], bytes, "message size\n{}", c.report());
    assert_eq!(row[1], 500.0, "iterations\n{}", c.report());
    let (min, max, avg) = (row[2], row[3], row[5]);
    assert!(
        min > 0.0 && min <= avg && avg <= max,
        "inconsistent latencies {row:?}:\n{}",
        c.report()
    );
}

#[test]
fn ib_write_bw_runs_unmodified() {
    bandwidth("ib_write_bw", 20, 65536.0);
}

#[test]
fn ib_read_bw_runs_unmodified() {
    bandwidth("ib_read_bw", 21, 65536.0);
}

#[test]
fn ib_send_bw_runs_unmodified() {
    bandwidth("ib_send_bw", 22, 65536.0);
}

#[test]
fn ib_atomic_bw_runs_unmodified() {
    bandwidth("ib_atomic_bw", 23, 8.0);
}

#[test]
fn ib_write_lat_runs_unmodified() {
    latency("ib_write_lat", 24, 2.0);
}

#[test]
fn ib_read_lat_runs_unmodified() {
    latency("ib_read_lat", 25, 2.0);
}

#[test]
fn ib_send_lat_runs_unmodified() {
    latency("ib_send_lat", 26, 2.0);
}

#[test]
fn ib_atomic_lat_runs_unmodified() {
    latency("ib_atomic_lat", 27, 8.0);
}

/// `-c XRC`: XRC initiator QPs sending to XRC SRQs through target QPs. perftest sets every
/// RC attribute in its modify masks; the kernel's uverbs drops those an XRC QP ignores
/// before checking the transition, and so does the drop-in (it failed INIT -> RTR).
#[test]
fn ib_write_bw_and_ib_send_bw_run_over_xrc() {
    bandwidth_with("ib_write_bw", 28, 65536.0, &["-c", "XRC"]);
    bandwidth_with("ib_send_bw", 29, 65536.0, &["-c", "XRC"]);
}
