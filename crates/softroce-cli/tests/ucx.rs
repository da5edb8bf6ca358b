//! UCX (Debian's `ucx-utils`, unmodified) runs on the drop-in under `softroce exec`:
//! `ucx_info -d` lists rc_verbs and ud_verbs on the emulated device, and `ucx_perftest`
//! passes between two processes on two emulated devices over each transport; UCX's
//! client/server API (`io_demo`) connects through rdma_cm, i.e. softroce's drop-in librdmacm.

mod dropin;

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use dropin::{exec_on, require_tools, tcp_listening};

fn require_ucx() {
    require_tools(&["ucx_info", "ucx_perftest", "io_demo"], "ucx-utils");
}

/// A program under `softroce exec` with UCX limited to `tls` on the emulated device.
fn exec(ip: &str, tls: &str, program: &str, args: &[&str]) -> Command {
    let mut c = exec_on(ip, program, args);
    c.env("UCX_TLS", tls)
        .env("UCX_NET_DEVICES", "softroce0:1")
        // Prints the lanes each endpoint chose (ep_cfg), which the tests check.
        .env("UCX_LOG_LEVEL", "info");
    c
}

/// Wait (bounded) for `child`, killing it at the deadline.
fn finish(child: Child, limit: Duration, what: &str) -> Output {
    let (out, timed_out) = dropin::finish_draining(child, limit);
    assert!(
        !timed_out,
        "{what} did not finish within {limit:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One ucx_perftest run: server on `server_ip`, client on `client_ip`, both must pass and
/// every endpoint must have chosen `transport` on softroce0. Returns the client's "Final:"
/// line.
fn perftest(server_ip: &str, client_ip: &str, tls: &str, transport: &str, test: &[&str]) -> String {
    let port = free_tcp_port().to_string();
    let mut args = vec!["-p", &port, "-n", "300", "-w", "30"];
    args.extend_from_slice(test);
    let server = exec(server_ip, tls, "ucx_perftest", &args)
        .spawn()
        .expect("spawning the ucx_perftest server");
    let start = Instant::now();
    while !tcp_listening(port.parse().unwrap()) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the ucx_perftest server did not listen on {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    args.push("127.0.0.1");
    let client = exec(client_ip, tls, "ucx_perftest", &args)
        .spawn()
        .expect("spawning the ucx_perftest client");
    let what = format!("ucx_perftest {} over {tls}", test.join(" "));
    let cout = finish(client, Duration::from_secs(90), &what);
    let sout = finish(server, Duration::from_secs(30), &what);
    let (cstdout, sstdout) = (
        String::from_utf8_lossy(&cout.stdout),
        String::from_utf8_lossy(&sout.stdout),
    );
    let report = || {
        format!(
            "{what}\nclient ({}):\n{cstdout}\n{}\nserver ({}):\n{sstdout}\n{}",
            cout.status,
            String::from_utf8_lossy(&cout.stderr),
            sout.status,
            String::from_utf8_lossy(&sout.stderr)
        )
    };
    assert!(
        cout.status.success() && sout.status.success(),
        "{}",
        report()
    );
    let lane = format!("{transport}/softroce0:1");
    for out in [&cstdout, &sstdout] {
        let cfgs: Vec<&str> = out.lines().filter(|l| l.contains("ep_cfg[")).collect();
        assert!(
            !cfgs.is_empty() && cfgs.iter().all(|l| l.contains(&lane)),
            "an endpoint did not use {lane}: {cfgs:#?}\n{}",
            report()
        );
    }
    let last = cstdout
        .lines()
        .find(|l| l.starts_with("Final:"))
        .unwrap_or_else(|| panic!("no Final: line\n{}", report()))
        .to_string();
    // Shown with --nocapture: the numbers behind the README's table.
    eprintln!("{what}: {last}");
    last
}

/// The UCP tests of the issue: tag matching, RMA, active messages, streams, atomics.
const TESTS: [&[&str]; 9] = [
    &["-t", "tag_lat"],
    &["-t", "tag_bw"],
    // Rendezvous: the receiver reads 1 MiB with RDMA READ (rc) or gets it in UD segments.
    &["-t", "tag_bw", "-s", "1048576", "-n", "20"],
    &["-t", "ucp_put_bw"],
    &["-t", "ucp_get"],
    &["-t", "ucp_am_lat"],
    &["-t", "stream_bw"],
    &["-t", "ucp_fadd"],
    &["-t", "ucp_cswap"],
];

#[test]
fn ucx_info_lists_rc_verbs_and_ud_verbs_on_the_emulated_device() {
    require_ucx();
    let child = exec("127.77.60.1", "all", "ucx_info", &["-d"])
        .spawn()
        .expect("spawning ucx_info");
    let out = finish(child, Duration::from_secs(60), "ucx_info -d");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for tl in ["rc_verbs", "ud_verbs"] {
        let listed = text.lines().zip(text.lines().skip(1)).any(|(a, b)| {
            a.ends_with(&format!("Transport: {tl}")) && b.ends_with("Device: softroce0:1")
        });
        assert!(
            listed,
            "ucx_info -d does not list {tl} on softroce0:1 (missing /dev/infiniband \
             node or sysfs files?):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("softroce:"),
        "the drop-in is quiet by default:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ucx_perftest_passes_over_rc_verbs() {
    require_ucx();
    // rc_v: rc_verbs for every lane, ud_verbs only to set the connections up (UCX's alias).
    for t in TESTS {
        perftest("127.77.61.1", "127.77.61.2", "rc_v", "rc_verbs", t);
    }
}

#[test]
fn ucx_perftest_passes_over_ud_verbs() {
    require_ucx();
    for t in TESTS {
        perftest("127.77.62.1", "127.77.62.2", "ud_verbs", "ud_verbs", t);
    }
}

/// UCX's client/server API (io_demo: a listener on an address, clients that connect to it)
/// wires its endpoints up through rdma_cm, the only connection manager it may use here
/// (`UCX_SOCKADDR_TLS_PRIORITY=rdmacm`: softroce's drop-in librdmacm, the CM on QP1), then
/// moves IO requests, reads and writes whose data io_demo checks (`-q`), over rc_verbs and
/// over ud_verbs.
#[test]
fn ucx_connects_through_rdma_cm_and_moves_checked_data() {
    require_ucx();
    for (tls, server_ip, client_ip) in [
        ("rc_verbs", "127.77.63.1", "127.77.63.2"),
        ("ud_verbs", "127.77.63.3", "127.77.63.4"),
    ] {
        // The client may be refused at first (its REQ can beat the server's rdma_listen:
        // REJ, invalid service ID, as the kernel answers) and then retries every 250 ms.
        // (UCX's UD teardown also receives into pool memory it has already unmapped,
        // registration still live, in about one exit in fifteen: that costs
        // `unmapped_bytes` now, not the client's life — emu-device/driver/src/guarded_copy.rs.)
        let (cout, sout) = io_demo_pair(tls, server_ip, client_ip);
        let (cstdout, cstderr) = (
            String::from_utf8_lossy(&cout.stdout).into_owned(),
            String::from_utf8_lossy(&cout.stderr).into_owned(),
        );
        let report = format!(
            "io_demo over rdmacm and {tls}\nclient ({}):\n{cstdout}\n{cstderr}\nserver:\n{}\n{}",
            cout.status,
            String::from_utf8_lossy(&sout.stdout),
            String::from_utf8_lossy(&sout.stderr)
        );
        assert!(
            cout.status.success() && cstdout.contains("Client exit with status 'OK'"),
            "{report}"
        );
        let lane = format!("{tls}/softroce0:1");
        let cfgs: Vec<&str> = cstdout.lines().filter(|l| l.contains("ep_cfg[")).collect();
        assert!(
            !cfgs.is_empty() && cfgs.iter().all(|l| l.contains(&lane)),
            "an endpoint did not use {lane}: {cfgs:#?}\n{}",
            report
        );
        // The device's counters at exit: the connection was made by CM MADs on QP1.
        let mads_sent = cstderr
            .split_whitespace()
            .find_map(|w| w.strip_prefix("mad_sent=")?.parse::<u64>().ok());
        assert!(
            mads_sent.is_some_and(|n| n > 0),
            "no CM datagrams sent: {}",
            report
        );
    }
}

/// One io_demo server on `server_ip` and one client on `client_ip` over `tls`, wired up
/// through rdma_cm: (client, server) output.
fn io_demo_pair(tls: &str, server_ip: &str, client_ip: &str) -> (Output, Output) {
    let port = free_tcp_port().to_string();
    let server = exec(server_ip, tls, "io_demo", &["-p", &port, "-q"])
        .env("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm")
        .spawn()
        .expect("spawning the io_demo server");
    // The server runs until killed below; its output is read meanwhile.
    let server = dropin::Drained::new(server);
    // The client retries (every 250 ms, 40 times) until the server listens.
    let client_args = [
        "-p",
        &port,
        "-q",
        "-i",
        "200",
        "-o",
        "read,write",
        "-c",
        "40",
        "-y",
        "0.25s",
        server_ip,
    ];
    let client = exec(client_ip, tls, "io_demo", &client_args)
        .env("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm")
        .env("SOFTROCE_COUNTERS", "stderr")
        .spawn()
        .expect("spawning the io_demo client");
    let cout = dropin::finish(client, Duration::from_secs(90));
    (cout, server.finish_within(Duration::ZERO).0)
}

/// A process under `softroce exec` writing its output to files the test can read while it
/// runs.
struct Watched {
    child: Child,
    out: std::path::PathBuf,
}

impl Watched {
    fn spawn(mut cmd: Command, name: &str) -> Self {
        let out = std::env::temp_dir().join(format!("ucx-{}-{name}.log", std::process::id()));
        let file = std::fs::File::create(&out).expect("a log file");
        cmd.stdout(file.try_clone().expect("log fd")).stderr(file);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
        Self { child, out }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Wait (at most `limit`) until the output has a line for which `found` holds.
    fn wait_for(&self, limit: Duration, found: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.text().lines().any(&found) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Wait (at most `limit`) for the process to end; kill it at the deadline.
    fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("status") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

/// Whether an io_demo report line shows data moving (a non-zero read rate).
fn moving(line: &str) -> bool {
    line.contains(" read ") && !line.contains(" read 0 MBs") && line.contains("MBs")
}

/// The peer of a UCX connection is killed (SIGKILL: nothing is said on the wire) while data
/// moves. On hardware the survivor's RC QP runs out of retries (retry_cnt 7 means seven, as
/// ibv_modify_qp(3) says — rxe would retry forever) and UCX reports the endpoint failed;
/// over UD, UCX's own timeout does it. The survivor never hangs: a server closes the dead
/// connection and serves the next client; a client gives up and exits with an error.
#[test]
fn ucx_survivor_of_a_killed_peer_gets_an_error_and_goes_on() {
    require_ucx();
    for (tls, ips) in [
        ("rc_verbs", ["127.77.65.1", "127.77.65.2"]),
        ("ud_verbs", ["127.77.65.3", "127.77.65.4"]),
    ] {
        // Shorter than UCX's defaults (1 s per RC retry, 30 s for UD) to keep the test short.
        let timeouts = |mut c: Command| {
            match tls {
                "rc_verbs" => c.env("UCX_RC_VERBS_TIMEOUT", "200ms"),
                _ => c.env("UCX_UD_VERBS_TIMEOUT", "5s"),
            };
            c.env("UCX_SOCKADDR_TLS_PRIORITY", "rdmacm");
            c
        };
        let server_at = |port: &str| {
            let c = exec(ips[0], tls, "io_demo", &["-p", port, "-q"]);
            Watched::spawn(timeouts(c), &format!("server-{tls}"))
        };
        let client_of = |port: &str, iterations: &str, name: &str| {
            let args = [
                "-p",
                port,
                "-q",
                "-o",
                "read,write",
                "-i",
                iterations,
                "-c",
                "1",
                "-y",
                "0.25s",
                "-n",
                "3",
                ips[0],
            ];
            Watched::spawn(timeouts(exec(ips[1], tls, "io_demo", &args)), name)
        };
        // io_demo listens through rdma_cm (no TCP socket to look for): it says when.
        let listening = |port: &str, server: &Watched| {
            assert!(
                server.wait_for(Duration::from_secs(30), |l| l.contains("started listener")),
                "{tls}: io_demo never listened on {port}:\n{}",
                server.text()
            );
        };

        // 1. The client dies: the server is told and serves a second client.
        let port = free_tcp_port().to_string();
        let server = server_at(&port);
        listening(&port, &server);
        let mut doomed = client_of(&port, "100000000", "doomed-client");
        assert!(
            server.wait_for(Duration::from_secs(30), moving),
            "{tls}: no data moved\nserver:\n{}\nclient:\n{}",
            server.text(),
            doomed.text()
        );
        doomed.child.kill().expect("killing the client");
        let _ = doomed.child.wait();
        assert!(
            server.wait_for(Duration::from_secs(40), |l| {
                l.contains("disconnecting connection") && l.contains("with status")
            }),
            "{tls}: the server was never told its client died:\n{}",
            server.text()
        );
        let mut next = client_of(&port, "200", "next-client");
        let status = next.exit_within(Duration::from_secs(60));
        assert!(
            status.is_some_and(|s| s.success())
                && next.text().contains("Client exit with status 'OK'"),
            "{tls}: a client after the dead one ({status:?}):\n{}\nserver:\n{}",
            next.text(),
            server.text()
        );
        drop(server);

        // 2. The server dies: the client is told, retries once, and exits with an error.
        let port = free_tcp_port().to_string();
        let mut server = server_at(&port);
        listening(&port, &server);
        let mut client = client_of(&port, "100000000", "orphaned-client");
        assert!(
            client.wait_for(Duration::from_secs(30), moving),
            "{tls}: no data moved\nclient:\n{}",
            client.text()
        );
        server.child.kill().expect("killing the server");
        let _ = server.child.wait();
        // The error reaches the client; over rc_verbs it then gives up and exits. Over
        // ud_verbs io_demo (UCX 1.13.1) now and then spins in its own code after
        // force-closing the endpoint (a busy loop outside UCX and the drop-in, seen with gdb
        // on a loaded machine), so there only the error is required.
        assert!(
            client.wait_for(Duration::from_secs(60), |l| l.contains("detected error")),
            "{tls}: the client of a dead server was never told:\n{}",
            client.text()
        );
        if tls == "rc_verbs" {
            let status = client.exit_within(Duration::from_secs(60));
            let text = client.text();
            assert!(
                status.is_some_and(|s| !s.success()) && text.contains("Client exit with status"),
                "{tls}: the client of a dead server ({status:?}):\n{text}"
            );
        }
    }
}
