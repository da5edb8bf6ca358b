//! Devices on IPv6 addresses: RoCEv2 over IPv6 (ICRC over the IPv6 pseudo-header, a GRH
//! that is an IPv6 header, rdma_cm with AF_INET6 addresses) between two processes, with
//! rdma-core's programs unmodified under `softroce exec`.
//!
//! The addresses live in a network namespace this test creates (root: `ip netns add`), on
//! its own loopback, and the namespace goes with the test: nothing reaches the host's
//! network. Each story uses its own namespace, so the stories run in parallel.

mod dropin;

use std::process::{Child, Command, Output};
use std::time::Duration;

use dropin::{Netns, require_tools};

/// The two device addresses, unique local (fd00::/8) inside the namespace.
const SERVER: &str = "fd53:6f66::1";
const CLIENT: &str = "fd53:6f66::2";

/// A namespace with SERVER and CLIENT on its loopback.
fn namespace(story: &str) -> Netns {
    let addr = |a: &str| format!("{a}/128");
    let (s, c) = (addr(SERVER), addr(CLIENT));
    Netns::new(
        &format!("v6-{story}"),
        &[
            &["-6", "addr", "add", &s, "dev", "lo", "nodad"],
            &["-6", "addr", "add", &c, "dev", "lo", "nodad"],
        ],
    )
}

/// `PROGRAM ARGS` on device `dev`=`addr` under `softroce exec`, inside the namespace.
fn on_device(ns: &Netns, dev: &str, addr: &str, program: &str, args: &[&str]) -> Command {
    ns.exec(&format!("{dev}={addr}"), program, args)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for `child` at most `secs` seconds, then kills it.
fn finish(child: Child, secs: u64) -> Output {
    dropin::finish(child, Duration::from_secs(secs))
}

/// Starts `server`, then runs `client` until it succeeds (at most 20 tries while the server
/// runs: a client that starts before its server listens is refused), then waits for the
/// server. Returns (server, client) output.
fn pair(mut server: Command, mut client: impl FnMut() -> Command) -> (Output, Output) {
    let mut srv = server.spawn().expect("spawning the server");
    std::thread::sleep(Duration::from_millis(300));
    let mut out = None;
    for _ in 0..20 {
        let o = finish(client().spawn().expect("spawning the client"), 60);
        let ok = o.status.success();
        out = Some(o);
        if ok || srv.try_wait().expect("server status").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let client = out.expect("the client ran");
    let wait = if client.status.success() { 60 } else { 2 };
    (finish(srv, wait), client)
}

#[test]
fn rc_pingpong_over_ipv6_gids_verifies_every_byte_and_every_icrc() {
    require_tools(&["ibv_rc_pingpong"], "ibverbs-utils");
    let ns = namespace("rc");
    let pcap = std::env::temp_dir().join(format!("softroce-v6-rc-{}.pcap", std::process::id()));
    let _ = std::fs::remove_file(&pcap);
    let args = ["-g", "0", "-n", "200", "-s", "4096", "-c"];
    let mut server = on_device(&ns, "softroce0", SERVER, "ibv_rc_pingpong", &args);
    server.env("SOFTROCE_PCAP", &pcap);
    let (srv, cli) = pair(server, || {
        // The side channel is TCP on the namespace's 127.0.0.1; the data path is IPv6.
        let mut a = vec!["-d", "softroce1"];
        a.extend_from_slice(&args);
        a.push("127.0.0.1");
        on_device(&ns, "softroce1", CLIENT, "ibv_rc_pingpong", &a)
    });
    let report = format!("server:\n{}\nclient:\n{}", text(&srv), text(&cli));
    assert!(srv.status.success() && cli.status.success(), "{report}");
    for side in [&srv, &cli] {
        assert!(text(side).contains("200 iters"), "{report}");
    }
    assert!(
        text(&cli).contains(&format!("GID {SERVER}")),
        "the client saw the server's IPv6 GID\n{report}"
    );
    // Every packet of the capture is RoCEv2 over IPv6 whose ICRC verifies exactly.
    let decoded = Command::new(assert_cmd::cargo::cargo_bin("softroce"))
        .arg("decode")
        .arg(&pcap)
        .output()
        .expect("softroce decode");
    let _ = std::fs::remove_file(&pcap);
    let out = String::from_utf8_lossy(&decoded.stdout);
    assert!(decoded.status.success(), "{out}");
    let summary = out.lines().last().unwrap_or_default();
    assert!(summary.ends_with("icrc_bad=0 malformed=0"), "{summary}");
    assert!(
        out.lines().any(
            |l| l.contains(&format!("[{CLIENT}]:4791 > [{SERVER}]:4791"))
                || l.contains(&format!("{CLIENT}:4791 > {SERVER}:4791"))
        ),
        "packets from the client's IPv6 address:\n{}",
        out.lines().take(5).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn ud_pingpong_over_ipv6_delivers_datagrams_with_an_ipv6_grh() {
    require_tools(&["ibv_ud_pingpong"], "ibverbs-utils");
    let ns = namespace("ud");
    let args = ["-g", "0", "-n", "100", "-s", "1024"];
    let (srv, cli) = pair(
        on_device(&ns, "softroce0", SERVER, "ibv_ud_pingpong", &args),
        || {
            let mut a = vec!["-d", "softroce1"];
            a.extend_from_slice(&args);
            a.push("127.0.0.1");
            on_device(&ns, "softroce1", CLIENT, "ibv_ud_pingpong", &a)
        },
    );
    let report = format!("server:\n{}\nclient:\n{}", text(&srv), text(&cli));
    assert!(srv.status.success() && cli.status.success(), "{report}");
    for side in [&srv, &cli] {
        assert!(text(side).contains("100 iters"), "{report}");
    }
}

#[test]
fn rping_connects_through_rdma_cm_on_ipv6_addresses_and_validates_the_data() {
    require_tools(&["rping"], "rdmacm-utils");
    let ns = namespace("cm");
    let (srv, cli) = pair(
        on_device(
            &ns,
            "softroce0",
            SERVER,
            "rping",
            &["-s", "-a", SERVER, "-C", "10", "-V", "-v"],
        ),
        || {
            on_device(
                &ns,
                "softroce1",
                CLIENT,
                "rping",
                &["-c", "-a", SERVER, "-C", "10", "-V", "-v"],
            )
        },
    );
    let report = format!("server:\n{}\nclient:\n{}", text(&srv), text(&cli));
    assert!(srv.status.success() && cli.status.success(), "{report}");
    assert_eq!(
        text(&cli).matches("ping data: rdma-ping-").count(),
        10,
        "{report}"
    );
    assert_eq!(
        text(&srv).matches("server ping data: rdma-ping-").count(),
        10,
        "{report}"
    );
}
