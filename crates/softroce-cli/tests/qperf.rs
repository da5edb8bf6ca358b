//! qperf (Debian's `qperf` 0.4.11), unmodified, between two processes under `softroce exec`,
//! each on its own device: its RC tests over rdma_cm (`-cm1`; without it qperf addresses
//! its peer by LID alone, which RoCE refuses as rxe does) move their data and report
//! figures that agree with what was sent.

mod dropin;

use std::process::{Output, Stdio};
use std::time::Duration;

use dropin::{Drained, exec_on, require_tools};

const SERVER: &str = "127.77.49.1";
const CLIENT: &str = "127.77.49.2";

/// Runs the qperf client against the server on `port` with `args`; a connect refused
/// because the server had not listened yet is tried again (qperf 0.4.11 tells its client
/// the port before it listens, a race upstream fixed later, which a loaded machine
/// widens), at most 10 times.
fn client(port: &str, args: &[&str]) -> Output {
    let mut all = vec![SERVER, "-lp", port, "-cm1", "-t", "1"];
    all.extend_from_slice(args);
    let mut last = None;
    for _ in 0..10 {
        let out = Drained::new(
            exec_on(CLIENT, "qperf", &all)
                .spawn()
                .expect("spawning the qperf client"),
        )
        .finish_within(Duration::from_secs(60))
        .0;
        // qperf says "unexpected event from RDMA CM: Event rejected".
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .to_ascii_lowercase();
        let refused = !out.status.success() && text.contains("rejected");
        last = Some(out);
        if !refused {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    last.expect("the client ran")
}

fn report(o: &Output) -> String {
    format!(
        "({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The figure of `name` (`bw`, `latency`, `msg_rate`, …) in qperf's output, with its unit.
fn figure<'a>(text: &'a str, name: &str) -> Option<(f64, &'a str)> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        if k.trim() != name {
            return None;
        }
        let mut parts = v.split_whitespace();
        let value = parts.next()?.replace(',', "").parse().ok()?;
        Some((value, parts.next().unwrap_or("")))
    })
}

#[test]
fn qperf_rc_tests_over_rdma_cm_move_their_data() {
    require_tools(&["qperf"], "qperf");
    let port = "19766";
    let server = Drained::new(
        exec_on(SERVER, "qperf", &["-lp", port])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawning the qperf server"),
    );
    // qperf's server listens on its TCP control port before any RDMA.
    for _ in 0..200 {
        if dropin::tcp_listening(port.parse().unwrap()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let mut failures = Vec::new();
    // Each test with a message size (none for the atomics), and whether it counts the
    // messages the server received (SENDs do; RDMA READ, WRITE and atomics are one-sided).
    for (test, size, counts_receives) in [
        ("rc_bw", Some("65536"), true),
        ("rc_bi_bw", Some("4096"), true),
        ("rc_lat", Some("64"), true),
        ("rc_rdma_read_bw", Some("1048576"), false),
        ("rc_rdma_write_bw", Some("65536"), false),
        ("rc_rdma_write_lat", Some("8"), false),
        ("rc_compare_swap_mr", None, false),
        ("ver_rc_fetch_add", None, false),
    ] {
        let mut args = vec!["-vvs"];
        if let Some(size) = size {
            args.extend(["-m", size]);
        }
        args.push(test);
        let out = client(port, &args);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let rate = figure(&text, "bw")
            .or_else(|| figure(&text, "latency"))
            .or_else(|| figure(&text, "msg_rate"));
        // `send_msgs`/`recv_msgs`, or `loc_…` and `rem_…` for a two-way test: the least.
        let least = |what: &str| {
            ["", "loc_", "rem_"]
                .iter()
                .filter_map(|side| figure(&text, &format!("{side}{what}")).map(|(n, _)| n))
                .reduce(f64::min)
        };
        let (sent, received) = (least("send_msgs"), least("recv_msgs"));
        let ok = out.status.success()
            && rate.is_some_and(|(v, _)| v > 0.0)
            && (!counts_receives
                || (sent.is_some_and(|n| n > 0.0) && received.is_some_and(|n| n > 0.0)));
        if !ok {
            failures.push(format!("{test} {args:?} {}", report(&out)));
        }
    }
    let (server_out, _) = server.finish_within(Duration::from_millis(100));
    assert!(
        failures.is_empty(),
        "qperf tests failed:\n{}\n--- server {}",
        failures.join("\n"),
        report(&server_out)
    );
}
