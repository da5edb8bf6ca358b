//! libfabric's verbs provider (Debian's `libfabric1`, unmodified) on the drop-in under
//! `softroce exec`: `fi_info` finds the emulated device, and `fi_pingpong` moves data it
//! checks (`-c`) between two processes over verbs datagrams (`-e dgram`, UD QPs) and over
//! libfabric's reliable-datagram layer on top of them (`verbs;ofi_rxd`, `-e rdm`).
//!
//!
//! libfabric's reliable-message layer over connected verbs endpoints (`verbs;ofi_rxm`,
//! rdma_cm RC connections) runs as on real hosts with RoCE NICs: libfabric lists
//! `FI_EP_MSG` only for devices whose address sits on an interface other than `lo`, so
//! the devices' addresses are on a tap interface inside a namespace the test creates;
//! both processes share one device, as on one host, or each has its own, as two hosts.
//! Debian's fi_pingpong (no source-address option) binds "localhost" first, which the
//! kernel's rdma_cm takes as a wildcard (no device): libfabric then offers the device's
//! own address to its peer.

mod dropin;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dropin::finish;
use dropin::{Netns, exec_on, require_tools, tcp_listening, tcp_listening_in};

/// The stories take turns, and the guard says so: each runs two libfabric processes with
/// several threads apiece, and on a 2-core machine four pairs at once starve each other's
/// teardown (issue 19 keeps the race that shows then: a shared device's guest finishing a
/// connection while its owner exits).
fn require_libfabric() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    require_tools(&["fi_info", "fi_pingpong"], "libfabric-bin");
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A program under `softroce exec`, whatever provider the environment asked for aside.
fn exec(ip: &str, program: &str, args: &[&str]) -> Command {
    let mut c = exec_on(ip, program, args);
    c.env_remove("FI_PROVIDER");
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn fi_info_finds_the_emulated_device_in_the_verbs_provider() {
    let _turn = require_libfabric();
    let out = finish(
        exec("127.77.64.1", "fi_info", &["-p", "verbs"])
            .spawn()
            .expect("spawning fi_info"),
        Duration::from_secs(60),
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for want in [
        "domain: softroce0-dgram",
        "type: FI_EP_DGRAM",
        "FI_PROTO_IB_UD",
    ] {
        assert!(t.contains(want), "fi_info -p verbs lacks {want:?}:\n{t}");
    }
}

/// fi_pingpong between a server on `server_ip` and a client on `client_ip`; both must
/// succeed, and the client's result table must list every size in `sizes`.
fn pingpong(
    server_ip: &str,
    client_ip: &str,
    provider: &str,
    ep: &str,
    extra: &[&str],
    sizes: &[&str],
) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let port_s = port.to_string();
    let mut server_args = vec!["-p", provider, "-e", ep, "-c", "-B", &port_s];
    server_args.extend_from_slice(extra);
    let server = exec(server_ip, "fi_pingpong", &server_args)
        .spawn()
        .expect("spawning the fi_pingpong server");
    let start = Instant::now();
    while !tcp_listening(port) && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client_args = vec!["-p", provider, "-e", ep, "-c", "-P", &port_s];
    client_args.extend_from_slice(extra);
    client_args.push(server_ip);
    let client = finish(
        exec(client_ip, "fi_pingpong", &client_args)
            .spawn()
            .expect("spawning the fi_pingpong client"),
        Duration::from_secs(120),
    );
    let server = finish(server, Duration::from_secs(10));
    let report = || {
        format!(
            "fi_pingpong -p {provider} -e {ep}\nclient ({}):\n{}\nserver ({}):\n{}",
            client.status,
            text(&client),
            server.status,
            text(&server)
        )
    };
    assert!(
        client.status.success() && server.status.success(),
        "{}",
        report()
    );
    let table = String::from_utf8_lossy(&client.stdout);
    for size in sizes {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(size)),
            "no result row for {size} bytes:\n{}",
            report()
        );
    }
}

/// Datagrams over UD QPs, every size fi_pingpong tries up to the MTU, data checked.
#[test]
fn fi_pingpong_over_verbs_datagrams() {
    let _turn = require_libfabric();
    pingpong(
        "127.77.64.2",
        "127.77.64.3",
        "verbs",
        "dgram",
        &["-I", "100", "-S", "all"],
        &["0", "1", "64", "1k", "4k"],
    );
}

/// libfabric's reliable datagrams (ofi_rxd: its own acks, retransmissions and
/// segmentation) over verbs UD: 8 bytes and 64 KiB messages, data checked.
#[test]
fn fi_pingpong_reliable_datagrams_over_verbs() {
    let _turn = require_libfabric();
    for size in ["8", "65536"] {
        pingpong(
            "127.77.64.4",
            "127.77.64.5",
            "verbs;ofi_rxd",
            "rdm",
            &["-I", "50", "-S", size],
            &[if size == "8" { "8" } else { "64k" }],
        );
    }
}

/// One `fi_pingpong -p verbs;ofi_rxm -e rdm -c` of 20 `size`-byte messages in `ns`: the
/// server on `server_device` listening at `server_ip`, the client on `client_device`. Both
/// must succeed and print the result row `row` with 20 messages sent, all acknowledged.
fn rxm_pingpong(
    ns: &Netns,
    (server_device, server_ip): (&str, &str),
    client_device: &str,
    size: &str,
    row: &str,
) {
    // The namespace is the test's own: a fixed port meets no one else's.
    let port = "47593";
    let args = |more: &[&str]| {
        [
            "-p",
            "verbs;ofi_rxm",
            "-e",
            "rdm",
            "-c",
            "-I",
            "20",
            "-S",
            size,
        ]
        .iter()
        .chain(more)
        .map(|s| s.to_string())
        .collect::<Vec<String>>()
    };
    let server_args = args(&["-B", port]);
    let server_args: Vec<&str> = server_args.iter().map(String::as_str).collect();
    let mut server = ns.exec(server_device, "fi_pingpong", &server_args);
    server.env_remove("FI_PROVIDER");
    let server = server.spawn().expect("spawning the fi_pingpong server");
    let start = Instant::now();
    while !tcp_listening_in(server.id(), port.parse().expect("a port"))
        && start.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let client_args = args(&["-P", port, server_ip]);
    let client_args: Vec<&str> = client_args.iter().map(String::as_str).collect();
    let mut client = ns.exec(client_device, "fi_pingpong", &client_args);
    client.env_remove("FI_PROVIDER");
    let client = finish(
        client.spawn().expect("spawning the fi_pingpong client"),
        Duration::from_secs(120),
    );
    let server = finish(server, Duration::from_secs(20));
    let report = format!(
        "fi_pingpong -p verbs;ofi_rxm -e rdm -S {size}\nclient ({}):\n{}\nserver ({}):\n{}",
        client.status,
        text(&client),
        server.status,
        text(&server)
    );
    assert!(
        client.status.success() && server.status.success(),
        "{report}"
    );
    for side in [&client, &server] {
        let table = String::from_utf8_lossy(&side.stdout);
        assert!(
            table.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 2 && cols[0] == row && cols[1] == "20" && cols[2] == "=20"
            }),
            "no result row for {row} bytes, 20 sent and acknowledged:\n{report}"
        );
    }
}

/// `verbs;ofi_rxm -e rdm` between two hosts: each process has its own device, both on the
/// namespace's tap. rxm offers the address libfabric found for its device; when binding
/// "localhost" gave an id the device (not the kernel's wildcard), that address was
/// 127.0.0.1 and the client's connection went to its own device, refused forever.
#[test]
fn fi_pingpong_reliable_messages_between_two_devices() {
    let _turn = require_libfabric();
    let ns = Netns::new(
        "fi-rxm2",
        &[
            &["tuntap", "add", "dev", "tap0", "mode", "tap"],
            &["addr", "add", "10.92.0.1/24", "dev", "tap0"],
            &["addr", "add", "10.92.0.2/24", "dev", "tap0"],
            &["link", "set", "tap0", "up"],
        ],
    );
    rxm_pingpong(
        &ns,
        ("softroce0=10.92.0.1", "10.92.0.1"),
        "softroce0=10.92.0.2",
        "4096",
        "4k",
    );
}

/// `verbs;ofi_rxm -e rdm`: rxm opens a connected verbs endpoint per peer (rdma_create_ep,
/// rdma_migrate_id onto its event queue, rdma_connect / rdma_accept) and moves 8-byte
/// eager messages, 128 KiB ones in segments and 1 MiB ones by rendezvous (the receiver
/// RDMA READs the sender's buffer, over a connection both sides made with RDMA_MAX_*
/// depths), data checked. Both processes share the
/// device 10.91.0.1 (the first owns it, the second is its guest), as two processes share
/// the one HCA of a host.
#[test]
fn fi_pingpong_reliable_messages_over_rdma_cm_connections() {
    let _turn = require_libfabric();
    let ns = Netns::new(
        "fi-rxm",
        &[
            &["tuntap", "add", "dev", "tap0", "mode", "tap"],
            &["addr", "add", "10.91.0.1/24", "dev", "tap0"],
            &["link", "set", "tap0", "up"],
        ],
    );
    let device = "softroce0=10.91.0.1";
    for (size, row) in [("8", "8"), ("131072", "128k"), ("1048576", "1m")] {
        rxm_pingpong(&ns, (device, "10.91.0.1"), device, size, row);
    }
}
