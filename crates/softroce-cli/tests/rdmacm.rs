//! `softroce rdma-server` and `softroce rdma-client` (rdma-core's rdma_server/rdma_client
//! exchange through the CM) between two processes on loopback, either of them also on the
//! libibverbs backend (the drop-in libraries, the Rust CM over librdmacm); and a client
//! with nobody to talk to is refused at once, saying why.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("softroce")
}

#[test]
fn the_client_connects_sends_16_bytes_gets_16_back_and_both_disconnect() {
    let mut server = Command::new(bin())
        .args([
            "rdma-server",
            "--bind",
            "127.0.17.1",
            "--timeout",
            "20",
            "--counters",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client must not come before the listener (it would get a REJ, as the real one).
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let listening = line.starts_with("listening on 127.0.17.1:7471");
        seen.push(line);
        if listening {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.starts_with("listening on")),
        "{seen:?}"
    );
    let client = Command::new(bin())
        .args(["rdma-client", "--bind", "127.0.17.2", "-s", "127.0.17.1"])
        .args(["--timeout", "20", "--counters"])
        .output()
        .unwrap();
    let client_out = String::from_utf8_lossy(&client.stdout);
    assert!(
        client.status.success(),
        "client: {client_out}{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert!(client_out.contains("rdma_client: end 0"), "{client_out}");
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = server.wait().unwrap();
    assert!(status.success(), "server: {seen:?} {rest:?}");
    assert!(rest.iter().any(|l| l == "rdma_server: end 0"), "{rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.starts_with("connected to 127.0.17.2:")),
        "{rest:?}"
    );
    // The CM's MADs went through QP1: the client's REQ, RTU and DREQ at least.
    let counters = client_out
        .lines()
        .find(|l| l.starts_with("counters: "))
        .unwrap();
    let mad_sent: u64 = counters
        .split(' ')
        .find_map(|kv| kv.strip_prefix("mad_sent="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(mad_sent >= 3, "{counters}");
}

#[test]
fn a_client_with_no_server_is_refused_and_says_why() {
    // A device is up at the address, but nobody listens on port 7471: the REJ comes back
    // at once (the tool's own --timeout is far longer than the test tolerates).
    let server_dev = Command::new(bin())
        .args([
            "rdma-server",
            "--bind",
            "127.0.17.3",
            "-p",
            "7000",
            "--timeout",
            "20",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server_dev = server_dev;
    let mut lines = BufReader::new(server_dev.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("listening on") {
            break;
        }
    }
    let client = Command::new(bin())
        .args(["rdma-client", "--bind", "127.0.17.4", "-s", "127.0.17.3"])
        .args(["--timeout", "60"])
        .output()
        .unwrap();
    let _ = server_dev.kill();
    let _ = server_dev.wait();
    assert!(!client.status.success());
    let err = String::from_utf8_lossy(&client.stderr);
    assert!(
        err.contains("rejected with reason 8") && err.contains("nobody listens"),
        "{err}"
    );
}

/// The drop-in libibverbs.so cargo built for these tests (librdmacm.so is next to it, where
/// the ibverbs backend's connection manager looks for it).
fn dropin_libibverbs() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    [deps.join("libibverbs.so"), deps.join("../libibverbs.so")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("libibverbs.so not built next to {}", deps.display()))
}

/// One side on the libibverbs backend (device `hw0` at `ip` of the drop-in).
fn on_ibverbs(cmd: &mut Command, ip: &str) {
    cmd.env("SOFTROCE_LIBIBVERBS", dropin_libibverbs())
        .env("SOFTROCE_DEVICES", format!("hw0={ip}"))
        .args(["--backend", "ibverbs", "--device", "hw0"]);
}

/// Start `server` and wait for its "listening on" line; then run `client` to its end and
/// return its stdout and stderr and all of the server's lines; both must exit 0.
fn run_pair(server: &mut Command, client: &mut Command) -> (String, String, Vec<String>) {
    let mut server = server
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let listening = line.starts_with("listening on");
        seen.push(line);
        if listening {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.starts_with("listening on")),
        "{seen:?}"
    );
    let client = client.output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&client.stdout).into_owned(),
        String::from_utf8_lossy(&client.stderr).into_owned(),
    );
    assert!(client.status.success(), "client: {out}{err}");
    seen.extend(lines.map(|l| l.unwrap()));
    assert!(server.wait().unwrap().success(), "server: {seen:?}");
    (out, err, seen)
}

#[test]
fn the_server_on_the_ibverbs_backend_serves_an_emulated_client() {
    let mut server = Command::new(bin());
    server.args(["rdma-server", "--timeout", "20"]);
    on_ibverbs(&mut server, "127.0.17.5");
    let mut client = Command::new(bin());
    client.args(["rdma-client", "--bind", "127.0.17.6", "-s", "127.0.17.5"]);
    client.args(["--timeout", "20"]);
    let (out, _, server_lines) = run_pair(&mut server, &mut client);
    assert!(out.contains("rdma_client: end 0"), "{out}");
    assert!(
        server_lines
            .iter()
            .any(|l| l == "listening on 127.0.17.5:7471"),
        "{server_lines:?}"
    );
    assert!(
        server_lines
            .iter()
            .any(|l| l.starts_with("connected to 127.0.17.6:")),
        "{server_lines:?}"
    );
    assert!(
        server_lines.iter().any(|l| l == "rdma_server: end 0"),
        "{server_lines:?}"
    );
}

#[test]
fn the_client_on_the_ibverbs_backend_reaches_an_emulated_server() {
    let mut server = Command::new(bin());
    server.args(["rdma-server", "--bind", "127.0.17.7", "--timeout", "20"]);
    let mut client = Command::new(bin());
    client.args(["rdma-client", "-s", "127.0.17.7", "--timeout", "20"]);
    on_ibverbs(&mut client, "127.0.17.8");
    let (out, _, server_lines) = run_pair(&mut server, &mut client);
    assert!(out.contains("rdma_client: end 0"), "{out}");
    assert!(
        server_lines
            .iter()
            .any(|l| l.starts_with("connected to 127.0.17.8:")),
        "{server_lines:?}"
    );
}
