//! `softroce rdma-server` and `softroce rdma-client` (rdma-core's rdma_server/rdma_client
//! exchange through the CM) between two processes on loopback; and a client with nobody to
//! talk to is refused at once, saying why.

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
