//! rdma-core's unmodified `ibv_{rc,uc,ud,srq,xsrq}_pingpong` between two processes on loopback,
//! each on its own emulated device (GID index 0, or rxe's 1: both the RoCEv2 GID of its
//! address).

mod common;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// Runs `tool`'s server and client on device pair `pair` with GID 0, `iters` exchanges
/// (`-n`) and `extra`.
fn run_tool_pair(
    tool: &str,
    pair: u8,
    iters: &str,
    extra: &[&str],
) -> (common::Finished, common::Finished) {
    common::require_tools(&[tool]);
    let (server_dev, client_dev) = common::device_pair(pair);
    let port = common::free_tcp_port().to_string();
    let mut args = vec!["-d", "softroce0", "-g", "0", "-p", &port, "-n", iters];
    args.extend_from_slice(extra);
    common::run_pair(
        tool,
        &server_dev,
        &client_dev,
        &args,
        port.parse().unwrap(),
        LIMIT,
    )
}

/// Run a pingpong pair and check both sides report the whole exchange.
fn pingpong(tool: &str, pair: u8, extra: &[&str]) {
    let sides = run_tool_pair(tool, pair, "500", extra);
    check_sides(pair, sides, "did not report the exchange", |out| {
        out.contains("500 iters in") && out.contains("bytes in")
    });
}

/// Both sides of a run on device pair `pair` say they finished (`finished` of their
/// output, else `not_finished` is the complaint) and show their RoCEv2 GIDs.
fn check_sides(
    pair: u8,
    (s, c): (common::Finished, common::Finished),
    not_finished: &str,
    finished: impl Fn(&str) -> bool,
) {
    for side in [&s, &c] {
        assert!(
            finished(&side.stdout),
            "{} {not_finished}:\n{}",
            side.name,
            side.report()
        );
        assert!(
            side.stdout.contains(&format!("GID ::ffff:127.77.{pair}.")),
            "{} does not show the RoCEv2 GIDs:\n{}",
            side.name,
            side.report()
        );
    }
}

#[test]
fn rc_pingpong_runs_unmodified() {
    pingpong("ibv_rc_pingpong", 10, &[]);
}

#[test]
fn rc_pingpong_with_completion_events_runs_unmodified() {
    pingpong("ibv_rc_pingpong", 11, &["-e"]);
}

#[test]
fn rc_pingpong_with_the_wr_send_api_runs_unmodified() {
    pingpong("ibv_rc_pingpong", 17, &["-N"]);
}

#[test]
fn uc_pingpong_runs_unmodified() {
    pingpong("ibv_uc_pingpong", 12, &[]);
}

#[test]
fn ud_pingpong_runs_unmodified() {
    pingpong("ibv_ud_pingpong", 13, &[]);
}

#[test]
fn srq_pingpong_runs_unmodified() {
    pingpong("ibv_srq_pingpong", 14, &[]);
}

#[test]
fn srq_pingpong_with_completion_events_runs_unmodified() {
    pingpong("ibv_srq_pingpong", 15, &["-e"]);
}

#[test]
fn rc_pingpong_survives_injected_loss_and_is_captured() {
    common::require_tools(&["ibv_rc_pingpong"]);
    let (server_dev, client_dev) = common::device_pair(16);
    let port = common::free_tcp_port();
    let port_s = port.to_string();
    let pcap = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dropin-rc-loss.pcap");
    let _ = std::fs::remove_file(&pcap);
    let pcap_s = pcap.to_str().expect("UTF-8 path");
    // Each side loses 5 % of the SENDs it sends, and no ACK: ibv_rc_pingpong exits as soon
    // as its last completions came, so a lost last ACK would leave the peer resending to a
    // process that is gone until its retries ran out (as it would on any lossy fabric).
    let plan = |seed: u8| {
        let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("dropin-rc-loss-{seed}.toml"));
        let rule = "[[rule]]\naction = \"drop\"\nprobability = 0.05\nopcode = \"send\"\n";
        std::fs::write(&path, format!("seed = {seed}\n{rule}")).expect("plan written");
        path.to_str().expect("UTF-8 path").to_owned()
    };
    let (server_plan, client_plan) = (plan(3), plan(4));
    // GID index 1, where rxe keeps the address GID: scripts written for rxe run unchanged.
    let args = ["-d", "softroce0", "-g", "1", "-p", &port_s, "-n", "200"];
    let (s, c) = common::run_pair_env(
        "ibv_rc_pingpong",
        (
            &server_dev,
            &[
                ("SOFTROCE_FAULTS", server_plan.as_str()),
                ("SOFTROCE_PCAP", pcap_s),
            ],
        ),
        (&client_dev, &[("SOFTROCE_FAULTS", client_plan.as_str())]),
        &args,
        port,
        LIMIT,
    );
    for side in [&s, &c] {
        assert!(side.stdout.contains("200 iters in"), "{}", side.report());
    }
    let bytes = std::fs::read(&pcap).expect("the server wrote its capture");
    // pcap magic, then at least the 200 x 4 data packets the server sent and received.
    assert!(
        bytes.len() > 4
            && u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == 0xa1b2_c3d4,
        "not a pcap file"
    );
    assert!(
        bytes.len() > 200 * 4 * 1000,
        "capture of {} bytes",
        bytes.len()
    );
}

/// `ibv_xsrq_pingpong`: XRC — the server's XRC receive QPs share one XRC SRQ through an
/// XRC domain, the client sends to that SRQ's number; both sides print "success" only when
/// every message arrived where it was addressed.
fn xsrq_pingpong(pair: u8, extra: &[&str]) {
    let sides = run_tool_pair("ibv_xsrq_pingpong", pair, "50", extra);
    check_sides(pair, sides, "did not finish its XRC exchange", |out| {
        out.lines().any(|l| l.trim() == "success")
    });
}

#[test]
fn xsrq_pingpong_runs_unmodified() {
    xsrq_pingpong(18, &[]);
}

#[test]
fn xsrq_pingpong_with_completion_events_runs_unmodified() {
    xsrq_pingpong(19, &["-e", "-s", "64"]);
}
