//! Issue 13: what bad arguments, bad configuration and an absent peer do to the `softroce`
//! command. Every run is the built binary, bounded in time, on 127.0.0.18x; none may panic
//! or die of a signal.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

fn softroce() -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("softroce"));
    // The tests' own environment must not leak in.
    for var in [
        "SOFTROCE_FAULTS",
        "SOFTROCE_COUNTERS",
        "SOFTROCE_PCAP",
        "RUST_LOG",
    ] {
        c.env_remove(var);
    }
    c
}

/// Run to the end, killing it after `limit`; the exit must be a status, not a signal, and
/// nothing may panic.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning softroce");
    wait_bounded(&mut child, limit);
    let out = child.wait_with_output().expect("output");
    assert_clean_exit(out.status, &out.stderr);
    out
}

/// Wait for `child` to exit, killing it (and failing) after `limit`.
fn wait_bounded(child: &mut std::process::Child, limit: Duration) {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("status").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("softroce still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The exit status, the rest of stdout and stderr of a server whose stdout was partly read.
fn finish(
    mut child: std::process::Child,
    mut stdout: BufReader<std::process::ChildStdout>,
    limit: Duration,
) -> (ExitStatus, String, String) {
    wait_bounded(&mut child, limit);
    let status = child.wait().expect("status");
    let mut out = String::new();
    stdout.read_to_string(&mut out).unwrap();
    let mut err = Vec::new();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    assert_clean_exit(status, &err);
    (status, out, String::from_utf8_lossy(&err).into_owned())
}

fn assert_clean_exit(status: ExitStatus, stderr: &[u8]) {
    let err = String::from_utf8_lossy(stderr);
    assert!(
        status.code().is_some(),
        "killed by a signal: {status}; {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn every_numeric_argument_out_of_range_is_a_usage_error_naming_it_and_its_range() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["pingpong", "-s", "99999999999"],
            "'--size <SIZE>': 99999999999 is not in 0..=8388608",
        ),
        (
            &["pingpong", "-s", "18446744073709551615"],
            "is not in 0..=8388608",
        ),
        (&["pingpong", "-s", "4294967296"], "is not in 0..=8388608"),
        (
            &["pingpong", "-s=-1"],
            "invalid value '-1' for '--size <SIZE>'",
        ),
        (
            &["pingpong", "--timeout", "18446744073709551615"],
            "'--timeout <TIMEOUT>': 18446744073709551615 is not in 1..=86400",
        ),
        (&["pingpong", "--timeout", "0"], "is not in 1..=86400"),
        (
            &["pingpong", "-r", "4294967295"],
            "'--rx-depth <RX_DEPTH>': 4294967295 is not in 1..=16384",
        ),
        (&["pingpong", "-r", "0"], "is not in 1..=16384"),
        (
            &["pingpong", "-n", "0"],
            "'--iters <ITERS>': 0 is not in 1..=1000000000",
        ),
        (
            &["pingpong", "-q", "256"],
            "'--num-qp <NUM_QP>': 256 is not in 1..=255",
        ),
        (
            &["pingpong", "-m", "1000"],
            "'--mtu <MTU>': 1000 is not 256, 512, 1024, 2048 or 4096",
        ),
        (&["pingpong", "-g", "256"], "is not in 0..=255"),
        (&["pingpong", "--qp-timeout", "32"], "is not in 0..=31"),
        (&["pingpong", "--udp-port", "0"], "is not in 1..=65535"),
        (&["pingpong", "-p", "65536"], "--port <PORT>"),
        (
            &["pingpong", "-p", "0", "127.0.0.1"],
            "a client needs the server's TCP port",
        ),
        (
            &["ops", "--max-size", "4294967296"],
            "'--max-size <MAX_SIZE>': 4294967296 is not in 0..=2147483648",
        ),
        (&["ops", "--timeout", "86401"], "is not in 1..=86400"),
        (
            &["ops", "-m", "9000"],
            "is not 256, 512, 1024, 2048 or 4096",
        ),
        (&["ops", "-g", "65536"], "is not in 0..=65535"),
        (
            &["perf", "write", "-s", "0"],
            "'--size <SIZE>': 0 is not in 1..=8388608",
        ),
        (&["perf", "write", "-q", "16385"], "is not in 1..=16384"),
        (&["perf", "write", "-u", "32"], "is not in 0..=31"),
        (
            &["perf", "write", "--depth", "16381"],
            "is not in 1..=16380",
        ),
        (
            &["perf", "write", "-n", "18446744073709551615"],
            "is not in 1..=1000000000",
        ),
        (&["perf", "--lat-iters", "0"], "is not in 1..=1000000000"),
        (&["perf", "write", "--timeout", "0"], "is not in 1..=86400"),
        // 16384 x 200 messages in flight need more than max_cqe (4194303) entries.
        (
            &["perf", "write", "-q", "16384", "--depth", "200"],
            "3276800 messages in flight",
        ),
        // Every QP must carry a message.
        (
            &["perf", "write", "-q", "10000"],
            "-n 2000 messages leave QPs of -q 10000 idle",
        ),
        (&["soak", "-n", "0"], "is not in 1..=1000000000"),
        (
            &["soak", "--drop", "1.5"],
            "'--drop <DROP>': 1.5 is not a probability in 0..=1",
        ),
        (
            &["soak", "--corrupt=-0.1"],
            "-0.1 is not a probability in 0..=1",
        ),
        (
            &["soak", "--processes", "--timeout", "18446744073709551615"],
            "is not in 1..=86400",
        ),
        (&["demo", "--port", "65536"], "--port <PORT>"),
        (&["devinfo", "--udp-port", "70000"], "--udp-port <UDP_PORT>"),
    ];
    for (args, wanted) in cases {
        let out = run(softroce().args(*args), Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(wanted), "{args:?}: wanted {wanted:?} in {err}");
    }
}

#[test]
fn ud_pingpong_refuses_a_message_larger_than_the_port_mtu_up_front() {
    let start = Instant::now();
    let out = run(
        softroce()
            // Loopback's link MTU is 65536: the port's active MTU is 4096, as on rxe.
            .args(["pingpong", "--type", "ud", "-s", "4097", "-p", "0"])
            .args([
                "--bind",
                "127.0.0.181",
                "--udp-port",
                "47181",
                "--timeout",
                "30",
            ])
            .env("SOFTROCE_COUNTERS", "stderr"),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("Requested size larger than port MTU (4096)"),
        "{err}"
    );
    // Before any wait for a peer: no side channel was opened.
    assert!(start.elapsed() < Duration::from_secs(15));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));
    // SOFTROCE_COUNTERS=stderr: the device's counters when it closed.
    assert!(
        err.contains("softroce counters softroce0 127.0.0.181:47181: sent_pkts=0 rcvd_pkts=0 "),
        "{err}"
    );
    // The largest UD message that fits passes the check (and then waits for a client).
    let out = run(
        softroce()
            .args(["pingpong", "--type", "ud", "-s", "1024", "-p", "0"])
            .args([
                "--bind",
                "127.0.0.181",
                "--udp-port",
                "47181",
                "--timeout",
                "1",
            ]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no client connected"), "{err}");
}

/// Start a server, read its `listening on TCP port N` line and return the port.
fn listening_port(child: &mut std::process::Child) -> (u16, BufReader<std::process::ChildStdout>) {
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    // Bounded: the line comes within the server's first few lines.
    for _ in 0..20 {
        let mut line = String::new();
        if out.read_line(&mut line).expect("server stdout") == 0 {
            break;
        }
        if let Some(port) = line.trim().strip_prefix("listening on TCP port ") {
            return (port.parse().expect("a port number"), out);
        }
    }
    panic!("the server never said which port it listens on");
}

#[test]
fn a_server_on_port_0_says_its_port_and_a_client_uses_it() {
    let mut server = softroce()
        .args([
            "pingpong",
            "-p",
            "0",
            "-n",
            "20",
            "--check",
            "--timeout",
            "30",
        ])
        .args(["--bind", "127.0.0.182", "--udp-port", "47182"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server");
    let (port, server_out) = listening_port(&mut server);
    assert_ne!(port, 0);
    let client = run(
        softroce()
            .args(["pingpong", "-p", &port.to_string(), "-n", "20", "--check"])
            .args([
                "--timeout",
                "30",
                "--bind",
                "127.0.0.183",
                "--udp-port",
                "47182",
            ])
            .arg("127.0.0.182"),
        Duration::from_secs(40),
    );
    let (status, rest, err) = finish(server, server_out, Duration::from_secs(40));
    assert!(
        client.status.success() && status.success(),
        "client: {}\nserver: {rest}{err}",
        String::from_utf8_lossy(&client.stderr),
    );
}

#[test]
fn servers_give_up_waiting_for_a_client_after_their_timeout() {
    let cases: &[&[&str]] = &[
        &["pingpong", "--bind", "127.0.0.184", "--udp-port", "47184"],
        &["ops", "--bind", "127.0.0.185", "--udp-port", "47185"],
        &["perf", "write", "--bind", "127.0.0.186"],
    ];
    for args in cases {
        let start = Instant::now();
        let out = run(
            softroce().args(*args).args(["-p", "0", "--timeout", "1"]),
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let port = stdout
            .lines()
            .find_map(|l| l.strip_prefix("listening on TCP port "))
            .unwrap_or_else(|| panic!("{args:?} printed no port: {stdout}"));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "no client connected to TCP port {port} within --timeout 1 s"
            )),
            "{args:?}: {err}"
        );
        assert!(start.elapsed() < Duration::from_secs(15), "{args:?}");
    }
}

#[test]
fn drops_are_visible_in_the_counters_and_the_log_of_a_running_device() {
    let mut server = softroce()
        .args(["pingpong", "-p", "0", "--timeout", "3", "--counters"])
        .args(["--bind", "127.0.0.187", "--udp-port", "47187"])
        .env("RUST_LOG", "softroce_emu_driver=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server");
    // Listening means the device runs: a datagram larger than any RoCEv2 packet arrives.
    let (_, stdout) = listening_port(&mut server);
    let peer = UdpSocket::bind("127.0.0.188:0").unwrap();
    peer.send_to(&[0u8; 5000], "127.0.0.187:47187").unwrap();
    let (status, out, err) = finish(server, stdout, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{err}");
    // --counters prints every counter, also when the run fails.
    let counters = out
        .lines()
        .find_map(|l| l.strip_prefix("counters: "))
        .unwrap_or_else(|| panic!("no counters line: {out}"));
    for name in [
        "sent_pkts=",
        "rcvd_pkts=",
        "duplicate_request=",
        "rcvd_seq_err=",
        "retry_exceeded_err=",
    ] {
        assert!(counters.contains(name), "{name} missing: {counters}");
    }
    assert!(counters.contains("drop_oversize=1"), "{counters}");
    // RUST_LOG reaches the driver's log on stderr.
    assert!(
        err.contains("dropped datagrams larger than any RoCEv2 packet"),
        "{err}"
    );
}

#[test]
fn fault_plans_and_specs_are_bounded_and_their_errors_said_once() {
    let out = run(
        softroce()
            .args([
                "pingpong",
                "--bind",
                "127.0.0.189",
                "--udp-port",
                "47189",
                "--timeout",
                "5",
            ])
            .env("SOFTROCE_FAULTS", "@/dev/zero"),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("SOFTROCE_FAULTS=@/dev/zero: fault plan /dev/zero: not a regular file")
            && err.contains("1048576 bytes"),
        "{err}"
    );
    let out = run(
        softroce()
            .args([
                "pingpong",
                "--bind",
                "127.0.0.189",
                "--udp-port",
                "47189",
                "--timeout",
                "5",
            ])
            .args(["--faults", "bogus"]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("bad fault spec at 'bogus'").count(), 1, "{err}");
    assert!(err.contains("faults bogus: bad fault spec"), "{err}");
}

#[test]
fn devinfo_binds_no_port_and_says_where_counters_are() {
    // Another process owns the device's port: devinfo still answers, binding nothing.
    let owner = UdpSocket::bind("127.0.0.181:4791").unwrap();
    let out = run(
        softroce().args(["devinfo", "--bind", "127.0.0.181", "--udp-port", "4791"]),
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("::ffff:127.0.0.181"));
    drop(owner);
    let out = run(
        softroce().args(["devinfo", "--counters"]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("counters live in the process that runs the device")
            && err.contains("SOFTROCE_COUNTERS=stderr"),
        "{err}"
    );
}

/// What the environment gets wrong is said plainly, once, and briefly: a drop-in library
/// that does not load is named with the loader's reason (not blamed on `--devices`); a
/// misspelt `SOFTROCE_LOG` is said once (not taken for a quiet run); a fault plan whose bad
/// line is most of a megabyte is reported in about a kilobyte, and a variable or option of
/// 120 000 characters in 64 of them.
#[test]
fn a_wrong_environment_is_said_plainly_once_and_briefly() {
    let lib = run(
        softroce()
            .args(["exec", "--devices", "softroce0=127.0.0.187", "--", "true"])
            .env("SOFTROCE_IBVERBS_LIB", "/etc/passwd"),
        Duration::from_secs(20),
    );
    let said = String::from_utf8_lossy(&lib.stderr);
    assert_eq!(lib.status.code(), Some(2), "{said}");
    assert!(
        said.contains("/etc/passwd")
            && said.contains("does not load")
            && said.contains("invalid ELF header")
            && !said.contains("--devices"),
        "{said}"
    );

    let log = run(
        softroce()
            .args([
                "exec",
                "--devices",
                "softroce0=127.0.0.187",
                "--",
                "ibv_devinfo",
                "-l",
            ])
            .env("SOFTROCE_LOG", "verb"),
        Duration::from_secs(20),
    );
    let said = String::from_utf8_lossy(&log.stderr);
    assert!(log.status.success(), "{said}");
    assert_eq!(
        said.matches("SOFTROCE_LOG names \"verb\"").count(),
        1,
        "said once: {said}"
    );

    let dir = std::env::temp_dir().join(format!("softroce-longplan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        format!("[[rule]]\naction = \"{}\"\n", "x".repeat(900_000)),
    )
    .unwrap();
    let long = run(
        softroce()
            .args([
                "exec",
                "--devices",
                "softroce0=127.0.0.187",
                "--",
                "ibv_devinfo",
            ])
            .env("SOFTROCE_FAULTS", format!("@{}", plan.display())),
        Duration::from_secs(20),
    );
    let said = String::from_utf8_lossy(&long.stderr);
    assert!(
        said.contains("unknown action") && said.contains("more bytes") && said.len() < 4096,
        "{} bytes: {}",
        said.len(),
        said.chars().take(300).collect::<String>()
    );
    let _ = std::fs::remove_dir_all(&dir);

    // A variable or option that is most of a megabyte is echoed in 64 characters.
    let huge = "x".repeat(120_000);
    for variable in ["SOFTROCE_COUNTERS", "SOFTROCE_ADAPTIVE_RETRANSMIT"] {
        let out = run(
            softroce()
                .args([
                    "exec",
                    "--devices",
                    "softroce0=127.0.0.187",
                    "--",
                    "ibv_devinfo",
                    "-l",
                ])
                .env(variable, &huge),
            Duration::from_secs(20),
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(variable) && said.contains("x…") && said.len() < 1024,
            "{variable}: {} bytes: {}",
            said.len(),
            said.chars().take(300).collect::<String>()
        );
    }
    let faults = run(
        softroce().args([
            "pingpong",
            "--bind",
            "127.0.0.187",
            "--timeout",
            "2",
            "--faults",
            &huge,
        ]),
        Duration::from_secs(20),
    );
    let said = String::from_utf8_lossy(&faults.stderr);
    assert!(
        !faults.status.success() && said.contains("bad fault spec") && said.len() < 1024,
        "{} bytes: {}",
        said.len(),
        said.chars().take(300).collect::<String>()
    );
}
