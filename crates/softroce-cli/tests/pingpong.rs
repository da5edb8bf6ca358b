//! `softroce pingpong` between two processes on loopback (127.0.0.x ↔ 127.0.0.y), every
//! transport, with --check verifying every message.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("softroce")
}

fn run_pair(transport: &str, server_ip: &str, client_ip: &str, tcp_port: u16, size: &str) {
    run_pair_with(transport, server_ip, client_ip, tcp_port, size, &[]);
}

fn run_pair_with(
    transport: &str,
    server_ip: &str,
    client_ip: &str,
    tcp_port: u16,
    size: &str,
    extra: &[&str],
) {
    let mut server = Command::new(bin())
        .args([
            "pingpong",
            "--type",
            transport,
            "--bind",
            server_ip,
            "-p",
            &tcp_port.to_string(),
        ])
        .args(["-s", size, "-n", "300", "--check", "--timeout", "30"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new(bin())
        .args([
            "pingpong",
            "--type",
            transport,
            "--bind",
            client_ip,
            "-p",
            &tcp_port.to_string(),
        ])
        .args([
            "-s",
            size,
            "-n",
            "300",
            "--check",
            "--timeout",
            "30",
            server_ip,
        ])
        .args(extra)
        .output()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(40);
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "server did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut server_out = String::new();
    std::io::Read::read_to_string(server.stdout.as_mut().unwrap(), &mut server_out).unwrap();
    let mut server_err = String::new();
    std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut server_err).unwrap();
    let client_out = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success(),
        "{transport} client: {client_out}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(
        status.success(),
        "{transport} server: {server_out}\n{server_err}"
    );
    for out in [&*client_out, &server_out] {
        assert!(out.contains("300 iters in"), "{out}");
        assert!(out.contains("retransmission counters:"), "{out}");
    }
}

#[test]
fn rc_pingpong_between_two_processes_with_checked_data() {
    run_pair("rc", "127.0.0.11", "127.0.0.12", 18611, "4096");
}

#[test]
fn uc_pingpong_between_two_processes_with_checked_data() {
    run_pair("uc", "127.0.0.13", "127.0.0.14", 18612, "4096");
}

#[test]
fn ud_pingpong_between_two_processes_with_checked_data() {
    run_pair("ud", "127.0.0.15", "127.0.0.16", 18613, "1024");
}

#[test]
fn srq_pingpong_shares_one_receive_queue_among_qps_with_checked_data() {
    // 5 QPs over one SRQ, each message checked against its QP's own pattern; the side
    // channel pads to 256 address messages as ibv_srq_pingpong does.
    run_pair_with(
        "srq",
        "127.0.0.27",
        "127.0.0.28",
        18616,
        "2000",
        &["-q", "5", "-r", "40"],
    );
}

#[test]
fn srq_pingpong_refuses_a_peer_with_a_different_qp_count() {
    let server = Command::new(bin())
        .args(["pingpong", "--type", "srq", "--bind", "127.0.0.29"])
        .args(["-p", "18617", "-q", "3", "-n", "10", "--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new(bin())
        .args(["pingpong", "--type", "srq", "--bind", "127.0.0.30"])
        .args(["-p", "18617", "-q", "4", "-n", "10", "--timeout", "20"])
        .arg("127.0.0.29")
        .output()
        .unwrap();
    let server_out = server.wait_with_output().unwrap();
    assert_eq!(server_out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&server_out.stderr);
    assert!(
        err.contains("the peer offers more QPs than this side's 3: use the same -q on both sides"),
        "{err}"
    );
    assert!(!client.status.success());
}

#[test]
fn pingpong_refuses_a_bad_mtu_with_one_line() {
    let out = Command::new(bin())
        .args(["pingpong", "-m", "1000"])
        .output()
        .unwrap();
    // A usage error from clap (exit status 2, like every argument out of range).
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "invalid value '1000' for '--mtu <MTU>': 1000 is not 256, 512, 1024, 2048 or 4096"
        ),
        "{err}"
    );
}

#[test]
fn rc_pingpong_survives_seeded_loss_duplication_reordering_and_corruption() {
    // retry_cnt 7 allows eight tries per packet (ibv_modify_qp(3)): with a tenth of the
    // datagrams lost each way, a try fails about a fifth of the time, so a message fails for
    // good about once in 300 000. The ACK timeout (--qp-timeout 10: 4 ms) is long enough that
    // a loaded machine's scheduling delays do not burn the retries on top of that.
    let faults = "drop=0.1,dup=0.05,reorder=0.05,corrupt=0.01";
    let mut server = Command::new(bin())
        .args([
            "pingpong",
            "--bind",
            "127.0.0.17",
            "-p",
            "18614",
            "-n",
            "200",
            "--check",
            "--qp-timeout",
            "10",
            "--timeout",
            "30",
        ])
        .args(["--faults", &format!("{faults},seed=1")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new(bin())
        .args([
            "pingpong",
            "--bind",
            "127.0.0.18",
            "-p",
            "18614",
            "-n",
            "200",
            "--check",
            "--qp-timeout",
            "10",
            "--timeout",
            "30",
        ])
        .args(["--faults", &format!("{faults},seed=2"), "127.0.0.17"])
        .output()
        .unwrap();
    let status = server.wait().unwrap();
    let out = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success() && status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(out.contains("200 iters in"), "{out}");
    let injected = out
        .lines()
        .find(|l| l.starts_with("injected:"))
        .expect("fault counters printed");
    assert!(!injected.contains("dropped=0 "), "{injected}");
    let retx = out
        .lines()
        .find(|l| l.starts_with("retransmission counters:"))
        .unwrap();
    assert!(
        !retx.contains("retransmitted_pkts=0 "),
        "losses were recovered by retransmission: {retx}"
    );
}

#[test]
fn an_invalid_fault_spec_is_refused_pointing_at_the_bad_part() {
    let out = Command::new(bin())
        .args([
            "pingpong",
            "--bind",
            "127.0.0.19",
            "--faults",
            "drop=0.1,dup=7",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad fault spec at 'dup=7' (chars 9..14): probability must be within 0..=1"),
        "{err}"
    );
}

#[test]
fn a_toml_fault_plan_file_drives_the_real_device() {
    let dir = std::env::temp_dir().join(format!("softroce-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        "seed = 4\n[[rule]]\naction = \"drop\"\nopcode = \"ack\"\nevery = 4\n",
    )
    .unwrap();
    let spec = format!("@{}", plan.display());
    let mut server = Command::new(bin())
        .args([
            "pingpong",
            "--bind",
            "127.0.0.25",
            "-p",
            "18615",
            "-n",
            "100",
            "--check",
            "--qp-timeout",
            "12",
            "--timeout",
            "30",
        ])
        .args(["--faults", &spec])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::new(bin())
        .args([
            "pingpong",
            "--bind",
            "127.0.0.26",
            "-p",
            "18615",
            "-n",
            "100",
            "--check",
            "--qp-timeout",
            "12",
            "--timeout",
            "30",
            "127.0.0.25",
        ])
        .output()
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(server.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(
        server.wait().unwrap().success() && client.status.success(),
        "{out}"
    );
    let injected = out
        .lines()
        .find(|l| l.starts_with("injected:"))
        .expect("server reports its faults");
    assert!(!injected.contains("dropped=0 "), "{injected}");
    std::fs::remove_dir_all(&dir).unwrap();
}
