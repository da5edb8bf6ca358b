//! rdma-core's own rdma_cm programs (rdmacm-utils), unmodified, between
//! two processes under `softroce exec`: the drop-in librdmacm.so.1 connects them through the
//! IB CM on the devices' QP1, and the data they check arrives.
//!
//! A client that starts before its server listens is refused (as on a real device), so a
//! refused client is started again, a bounded number of times, while the server runs.

mod dropin;

use std::process::{Child, Command, Output, Stdio};

use dropin::require_tools;
use std::time::{Duration, Instant};

/// `softroce exec --devices softroce0=ADDR -- PROGRAM ARGS…` (exec becomes the program, so
/// killing the child kills the program).
fn on_device(addr: &str, program: &str, args: &[&str]) -> Command {
    require_tools(&[program], "rdmacm-utils and perftest");
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("softroce"));
    cmd.args(["exec", "--devices", &format!("softroce0={addr}"), "--"])
        .arg(program)
        .args(args)
        .env_remove("SOFTROCE_LOG")
        .env_remove("SOFTROCE_FAULTS");
    cmd
}

/// Runs `cmd` to its end, killing it after 60 s.
fn bounded(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning a program");
    dropin::finish(child, Duration::from_secs(60))
}

/// What both sides printed.
struct Pair {
    server: Output,
    client: Output,
}

impl Pair {
    fn text(o: &Output) -> String {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    }

    fn report(&self) -> String {
        format!(
            "server ({}):\n{}\nclient ({}):\n{}",
            self.server.status,
            Self::text(&self.server),
            self.client.status,
            Self::text(&self.client)
        )
    }
}

/// Runs `server`, then `client` until it succeeds (at most 20 tries while the server runs
/// and `retry` says the failure was the server not listening yet), then waits for the
/// server (60 s after a client that succeeded, or 2 s for a tool that never ends by itself
/// or when the client failed) and kills it.
fn pair_retrying(
    mut server: Command,
    mut client: impl FnMut() -> Command,
    server_ends: bool,
    retry: impl Fn(&str) -> bool,
) -> Pair {
    let mut srv = dropin::Drained::new(
        server
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the server"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut out: Option<Output> = None;
    for _ in 0..20 {
        let o = bounded(client());
        let again = !o.status.success() && retry(&Pair::text(&o));
        out = Some(o);
        if !again || srv.ended() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let client_ok = out.as_ref().is_some_and(|o| o.status.success());
    let wait = if server_ends && client_ok { 60 } else { 2 };
    Pair {
        server: srv.finish_within(Duration::from_secs(wait)).0,
        client: out.expect("the client ran"),
    }
}

/// [`pair_retrying`] for tools whose every failure before the server listens is a refusal.
fn pair(server: Command, client: impl FnMut() -> Command, server_ends: bool) -> Pair {
    pair_retrying(server, client, server_ends, |_| true)
}

/// rdma_server/rdma_client, and rdma_xserver/rdma_xclient over RC and over XRC.
#[test]
fn rdma_server_and_xserver_examples_end_cleanly() {
    for (server, client, server_addr, client_addr, server_args, client_args) in [
        (
            "rdma_server",
            "rdma_client",
            "127.77.42.1",
            "127.77.42.2",
            &["-s", "127.77.42.1", "-p", "7471"][..],
            &["-s", "127.77.42.1", "-p", "7471"][..],
        ),
        (
            "rdma_xserver",
            "rdma_xclient",
            "127.77.42.19",
            "127.77.42.20",
            &["-c", "r"][..],
            &["-s", "127.77.42.19", "-c", "r"][..],
        ),
        // XRC (`-c x`): an XRC_RECV id with an XRC SRQ whose number the server accepts
        // with; the client's XRC_SEND QP sends to it (RDMA_PS_IB, the REQ's transport XRC).
        (
            "rdma_xserver",
            "rdma_xclient",
            "127.77.42.31",
            "127.77.42.32",
            &["-c", "x"][..],
            &["-s", "127.77.42.31", "-c", "x"][..],
        ),
    ] {
        let p = pair(
            on_device(server_addr, server, server_args),
            || on_device(client_addr, client, client_args),
            true,
        );
        assert!(
            p.server.status.success() && p.client.status.success(),
            "{server}: {}",
            p.report()
        );
        for (tool, side) in [(client, &p.client), (server, &p.server)] {
            assert!(
                Pair::text(side).contains(&format!("{tool}: end 0")),
                "{tool}: {}",
                p.report()
            );
        }
    }
}

/// rping to 127.0.1.1, the name Debian's /etc/hosts gives the host: like all of 127/8 (the
/// kernel's cma_loopback_addr) an address no device has is this host, so the client's id
/// takes its device and reaches the listener there, a server on the same device bound to
/// the wildcard (the REQ went to 127.0.1.1's port 4791, where nobody listens, forever).
#[test]
fn rping_to_any_loopback_address_reaches_the_hosts_own_listener() {
    let device = "127.77.47.1";
    let p = pair(
        on_device(
            device,
            "rping",
            &["-s", "-a", "0.0.0.0", "-p", "18960", "-C", "2", "-v"],
        ),
        || {
            on_device(
                device,
                "rping",
                &["-c", "-a", "127.0.1.1", "-p", "18960", "-C", "2", "-v"],
            )
        },
        true,
    );
    assert!(
        p.server.status.success() && p.client.status.success(),
        "{}",
        p.report()
    );
    assert!(
        Pair::text(&p.client).contains("ping data: rdma-ping-1: "),
        "{}",
        p.report()
    );
}

/// rping: RDMA READ and WRITE of the ping buffer each round, verified by both sides (-v).
#[test]
fn rping_verifies_ten_rounds_of_rdma_read_and_write() {
    let p = pair(
        on_device(
            "127.77.42.3",
            "rping",
            &["-s", "-a", "127.77.42.3", "-C", "10", "-v"],
        ),
        || {
            on_device(
                "127.77.42.4",
                "rping",
                &["-c", "-a", "127.77.42.3", "-C", "10", "-v"],
            )
        },
        true,
    );
    assert!(
        p.server.status.success() && p.client.status.success(),
        "{}",
        p.report()
    );
    let client = Pair::text(&p.client);
    assert!(
        client.contains("ping data: rdma-ping-9: "),
        "{}",
        p.report()
    );
    assert!(
        Pair::text(&p.server).contains("server ping data: rdma-ping-9: "),
        "{}",
        p.report()
    );
}

/// ucmatose (RC: connections with private data, sends both ways, disconnects) and udaddy
/// (UD in the UDP port space: SIDR resolves the remote QP, replies go to the address the
/// receive completion's GRH area names): both sides end with "return status 0".
#[test]
fn ucmatose_and_udaddy_connect_transfer_and_end_cleanly() {
    for (tool, server_addr, client_addr, extra) in [
        ("ucmatose", "127.77.42.5", "127.77.42.6", &["-c", "4"][..]),
        ("udaddy", "127.77.42.7", "127.77.42.8", &[][..]),
    ] {
        let server_args: Vec<&str> = ["-b", server_addr].iter().chain(extra).copied().collect();
        let client_args: Vec<&str> = ["-s", server_addr].iter().chain(extra).copied().collect();
        let p = pair(
            on_device(server_addr, tool, &server_args),
            || on_device(client_addr, tool, &client_args),
            true,
        );
        assert!(
            p.server.status.success() && p.client.status.success(),
            "{tool}: {}",
            p.report()
        );
        for side in [&p.server, &p.client] {
            assert!(
                Pair::text(side).contains("return status 0"),
                "{tool}: {}",
                p.report()
            );
        }
    }
}

/// cmtime: 100 connections set up and torn down at once; the client reports each step.
#[test]
fn cmtime_connects_and_disconnects_a_hundred_times() {
    let p = pair(
        on_device(
            "127.77.42.13",
            "cmtime",
            &["-b", "127.77.42.13", "-c", "100"],
        ),
        || {
            on_device(
                "127.77.42.14",
                "cmtime",
                &["-s", "127.77.42.13", "-c", "100"],
            )
        },
        // cmtime's server serves until it is stopped.
        false,
    );
    assert!(p.client.status.success(), "{}", p.report());
    let client = Pair::text(&p.client);
    for step in ["connect", "disconnect", "destroy"] {
        assert!(
            client.lines().any(|l| l.starts_with(step)),
            "{step}: {}",
            p.report()
        );
    }
}

/// perftest connected by rdma_cm (`-R`: its side channel is an rdma_cm connection too), as
/// `ib_write_bw -R` and `ib_send_lat -R` measure over softroce: both sides print results.
///
/// perftest races itself twice. Its client is refused ("Unexpected CM event ... 8") when it
/// starts before the server listens: that client is started again. And after the
/// side-channel handshake the client connects the test QP at once while the server is
/// still waiting for its handshake SEND to complete, then binding and listening; a client
/// that wins is refused (REJ reason 8, as the kernel's CM would refuse it) and perftest's
/// own retry reuses ids it has just destroyed. A loaded machine can lose that race (debug
/// builds on two cores: up to one pair in three, one in twenty with every ACK sent at once;
/// release builds: about one in thirteen either way), so such a run is repeated, a bounded
/// number of times, each time on fresh addresses; any other failure fails the test.
#[test]
fn perftest_connects_through_rdma_cm() {
    for (tool, subnet, extra) in [
        ("ib_write_bw", "127.77.44", &["-s", "65536"][..]),
        ("ib_send_lat", "127.77.45", &["-s", "8"][..]),
    ] {
        let common = ["-R", "-d", "softroce0", "-F", "-n", "200"];
        let server_args: Vec<&str> = common.iter().chain(extra).copied().collect();
        let mut last = None;
        for attempt in 0..5 {
            // Each attempt on fresh addresses: nothing a killed attempt left behind (its
            // server's device, its half-made connections) meets the next one.
            let server_addr = format!("{subnet}.{}", 2 * attempt + 1);
            let client_addr = format!("{subnet}.{}", 2 * attempt + 2);
            let mut client_args = server_args.clone();
            client_args.push(&server_addr);
            let p = pair_retrying(
                on_device(&server_addr, tool, &server_args),
                || on_device(&client_addr, tool, &client_args),
                true,
                |client| client.contains("Unexpected CM event bl blka 8"),
            );
            let ok = p.server.status.success() && p.client.status.success();
            let lost_the_race = Pair::text(&p.client).contains("RDMA_CM_EVENT_REJECTED; error: 8");
            last = Some(p);
            if ok || !lost_the_race {
                break;
            }
            eprintln!("{tool}: the client won perftest's connect race; running the pair again");
        }
        let p = last.expect("ran once");
        assert!(
            p.server.status.success() && p.client.status.success(),
            "{tool}: {}",
            p.report()
        );
        for side in [&p.server, &p.client] {
            let text = Pair::text(side);
            assert!(
                text.contains("rdma_cm QPs\t : ON") && text.contains("#bytes"),
                "{tool} connected by rdma_cm and reported: {}",
                p.report()
            );
        }
    }
}

/// Nobody listens on the port: the client is refused (a REJ), not left to time out.
#[test]
fn a_client_without_a_listener_is_refused() {
    // The device at the server address exists (a server on another port), nothing on 7999.
    let mut server = on_device(
        "127.77.42.15",
        "rdma_server",
        &["-s", "127.77.42.15", "-p", "7471"],
    );
    let mut srv = server
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the server");
    std::thread::sleep(Duration::from_millis(500));
    let out = bounded(on_device(
        "127.77.42.16",
        "rdma_client",
        &["-s", "127.77.42.15", "-p", "7999"],
    ));
    let _ = srv.kill();
    let _ = srv.wait();
    let text = Pair::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("Connection refused"),
        "refused, not timed out: {text}"
    );
}

/// A fifth of the CM's datagrams (QP1) lost, in both directions on both sides: ucmatose's
/// four connections still come up and go down (lost REQs, REPs, RTUs and DREQs are sent
/// again on the CM's timers), and each is made once: the server answers exactly four
/// connections with a REP, however often their REQs arrive.
#[test]
fn connections_survive_a_fifth_of_the_cm_traffic_lost() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cm-loss");
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        "seed = 3\n[[rule]]\naction = \"drop\"\nprobability = 0.2\ndirection = \"both\"\nqpn = 1\n",
    )
    .expect("writing the fault plan");
    let server_pcap = dir.join("server.pcap");
    let lossy = |mut cmd: Command, pcap: Option<&std::path::Path>| {
        cmd.env("SOFTROCE_FAULTS", format!("@{}", plan.display()))
            .env("SOFTROCE_COUNTERS", "stderr");
        if let Some(pcap) = pcap {
            cmd.env("SOFTROCE_PCAP", pcap);
        }
        cmd
    };
    let p = pair(
        lossy(
            on_device(
                "127.77.42.17",
                "ucmatose",
                &["-b", "127.77.42.17", "-c", "4"],
            ),
            Some(&server_pcap),
        ),
        || {
            lossy(
                on_device(
                    "127.77.42.18",
                    "ucmatose",
                    &["-s", "127.77.42.17", "-c", "4"],
                ),
                None,
            )
        },
        true,
    );
    assert!(
        p.server.status.success() && p.client.status.success(),
        "{}",
        p.report()
    );
    let dropped: u64 = [&p.server, &p.client]
        .iter()
        .flat_map(|o| {
            Pair::text(o)
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("dropped=")?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum();
    assert!(dropped > 0, "the plan dropped CM datagrams: {}", p.report());
    let decoded = Command::new(assert_cmd::cargo::cargo_bin("softroce"))
        .arg("decode")
        .arg(&server_pcap)
        .output()
        .expect("running softroce decode");
    let text = String::from_utf8_lossy(&decoded.stdout);
    let mut replies: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("cm{REP lcid=").nth(1)?.split_whitespace().next())
        .collect();
    replies.sort_unstable();
    replies.dedup();
    assert_eq!(
        replies.len(),
        4,
        "one REP connection per client connection:\n{text}"
    );
}

/// The Rust connection manager's UD address resolution against udaddy (rdmacm-utils,
/// unmodified, under `softroce exec`): the Rust side is an emulated device of this
/// process on its own loopback address.
mod rust_ud {
    use std::net::SocketAddr;

    use softroce_verbs::cm::{CmFailure, ConnectOptions, RDMA_UDP_QKEY};
    use softroce_verbs::grh::{GRH_LEN, parse_grh};
    use softroce_verbs::{
        CompletionQueue, Context, Error, MemoryRegion, QpType, QueuePair, QueuePairEndpoint,
        SendWr, WcOpcode, WcStatus, WrOpcode,
    };

    use super::*;

    const WAIT: Duration = Duration::from_secs(20);
    /// udaddy's defaults: ten messages of 100 bytes, port 7174.
    const MESSAGES: usize = 10;
    const SIZE: usize = 100;
    const SLOT: usize = GRH_LEN + SIZE;
    const PORT: u16 = 7174;

    fn emulated(ip: &str) -> Context {
        let mut cfg = softroce_emu::driver::DeviceConfig::new("udaddy-peer", ip.parse().unwrap());
        cfg.pcap = None;
        cfg.faults = None;
        Context::open_emulated_with(cfg).unwrap()
    }

    /// A UD QP with rdma_cm's Q_Key (udaddy's QPs have it), its CQ and a buffer: a receive
    /// posted per message (GRH area and 100 bytes each), sends from the end.
    struct Ud {
        qp: QueuePair,
        cq: CompletionQueue,
        mr: MemoryRegion,
    }

    fn ud(ctx: &Context) -> Ud {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64, None).unwrap();
        let mr = pd.allocate((MESSAGES + 1) * SLOT).unwrap();
        let qp = pd
            .create_qp(&cq, &cq, QpType::Ud)
            .qkey(RDMA_UDP_QKEY)
            .sq_sig_all(true)
            .build()
            .unwrap();
        let e = qp.endpoint();
        let qp = qp.handshake(e).unwrap();
        for i in 0..MESSAGES {
            let slot = mr.slice(i * SLOT..(i + 1) * SLOT).unwrap();
            // SAFETY: the region lives in the returned Ud, which outlives the completions.
            unsafe { qp.post_receive(&[slot], i as u64) }.unwrap();
        }
        Ud { qp, cq, mr }
    }

    /// `n` receive completions on `ud`'s CQ (send completions are counted and skipped),
    /// within the bound.
    fn receives(ud: &Ud, n: usize) -> Vec<softroce_verbs::WorkCompletion> {
        let mut got = Vec::new();
        let deadline = Instant::now() + WAIT;
        // Bounded by the deadline.
        while got.len() < n && Instant::now() < deadline {
            for wc in ud.cq.poll_wait(1, Duration::from_millis(200)).unwrap() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                if wc.opcode == WcOpcode::Recv {
                    got.push(wc);
                }
            }
        }
        assert_eq!(got.len(), n, "receives");
        got
    }

    /// The udaddy process's output once it ended (killed after the bound).
    fn finish(child: Child) -> String {
        let out = dropin::finish(child, Duration::from_secs(60));
        format!("{}: {}", out.status, Pair::text(&out))
    }

    /// udaddy's server answers the Rust client's resolution with its QP; the client sends
    /// udaddy's ten messages (SEND with immediate data: its QPN, as udaddy's own client
    /// does), udaddy answers each where it came from, and ends with "return status 0".
    #[test]
    fn a_rust_ud_client_resolves_udaddys_server_and_trades_its_messages() {
        let server = on_device("127.77.42.30", "udaddy", &["-b", "127.77.42.30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ctx = emulated("127.77.42.31");
        let c = ud(&ctx);
        let cm = ctx.connection_manager().unwrap();
        let to: SocketAddr = "127.77.42.30:7174".parse().unwrap();
        let opts = ConnectOptions {
            timeout: WAIT,
            ..ConnectOptions::default()
        };
        // udaddy listens a moment after it starts: until then its device refuses (status
        // 1). Bounded: 40 tries.
        let mut peer = None;
        for _ in 0..40 {
            match cm.resolve_ud(&c.qp, to, &opts) {
                Ok(p) => {
                    peer = Some(p);
                    break;
                }
                Err(Error::ConnectFailed {
                    failure: CmFailure::UdRejected { status: 1, .. },
                    ..
                }) => std::thread::sleep(Duration::from_millis(250)),
                Err(e) => panic!("{e}\n{}", finish(server)),
            }
        }
        let Some(peer) = peer else {
            panic!("udaddy never listened: {}", finish(server));
        };
        assert_eq!(peer.qkey(), RDMA_UDP_QKEY);
        for i in 0..MESSAGES {
            let at = MESSAGES * SLOT;
            c.mr.write(at, &[i as u8; SIZE]).unwrap();
            let mut wr = SendWr::new(100 + i as u64, WrOpcode::SendWithImm);
            wr.sg_list = vec![c.mr.slice(at..at + SIZE).unwrap()].into();
            wr.imm_data = c.qp.qpn().to_be();
            wr.ud = Some(peer.target());
            // SAFETY: the region outlives the completion, polled with the receives.
            unsafe { c.qp.post_send(&[wr]).unwrap() };
        }
        let replies = receives(&c, MESSAGES);
        for wc in &replies {
            assert_eq!(wc.src_qp, peer.qpn(), "a reply from udaddy's QP");
            assert_eq!(
                u32::from_be(wc.imm_data),
                peer.qpn(),
                "its QPN as immediate"
            );
            assert_eq!(wc.byte_len as usize, SLOT);
        }
        let text = finish(server);
        assert!(text.contains("return status 0"), "{text}");
        assert_eq!(cm.connection_count(), 0);
    }

    /// udaddy's client resolves a Rust UD listener, which answers with its QP: udaddy's ten
    /// messages arrive from the QP they name in their immediate data, the listener replies to
    /// each where it came from (the GRH's source, as udaddy's server does), and udaddy ends
    /// with "return status 0" once it has the replies.
    #[test]
    fn udaddys_client_resolves_a_rust_ud_listener_and_its_messages_arrive() {
        let ctx = emulated("127.77.42.32");
        let listener = ctx
            .connection_manager()
            .unwrap()
            .listen_ud(SocketAddr::new("127.77.42.32".parse().unwrap(), PORT))
            .unwrap();
        let s = ud(&ctx);
        let client = on_device("127.77.42.33", "udaddy", &["-s", "127.77.42.32"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let req = match listener.get_request(WAIT) {
            Ok(r) => r,
            Err(e) => panic!("{e}: {}", finish(client)),
        };
        assert_eq!(req.peer_addr().ip().to_string(), "127.77.42.33");
        req.accept(&s.qp, b"rust").unwrap();
        let got = receives(&s, MESSAGES);
        for wc in &got {
            assert_eq!(
                wc.src_qp,
                u32::from_be(wc.imm_data),
                "the sender names its QP"
            );
            assert_eq!(wc.byte_len as usize, SLOT);
        }
        let mut grh = [0u8; GRH_LEN];
        s.mr.read(got[0].wr_id as usize * SLOT, &mut grh).unwrap();
        let sgid = parse_grh(&grh).unwrap().sgid;
        assert_eq!(sgid.to_ip().to_string(), "127.77.42.33");
        let back =
            s.qp.ud_target(
                QueuePairEndpoint {
                    qpn: got[0].src_qp,
                    psn: 0,
                    gid: sgid,
                    udp_port: 4791,
                },
                RDMA_UDP_QKEY,
            )
            .unwrap();
        for i in 0..MESSAGES {
            let at = MESSAGES * SLOT;
            let mut wr = SendWr::new(100 + i as u64, WrOpcode::Send);
            wr.sg_list = vec![s.mr.slice(at..at + SIZE).unwrap()].into();
            wr.ud = Some(back);
            // SAFETY: the region outlives the completions polled below.
            unsafe { s.qp.post_send(&[wr]).unwrap() };
        }
        let sent = s.cq.poll_wait(MESSAGES, WAIT).unwrap();
        assert!(
            sent.iter().all(|w| w.status == WcStatus::Success),
            "{sent:?}"
        );
        let text = finish(client);
        assert!(text.contains("return status 0"), "{text}");
    }
}

/// rstream (rsockets, rsocket(7)), unmodified on both sides: blocking (`b`), non-blocking
/// (`n`) and rpoll-driven (`a`) sockets move data rstream checks byte by byte (`v`), at sizes
/// sent inline, copied through the send ring, and spanning many transfers and the ring's
/// wrap; each side prints its result line.
#[test]
fn rstream_moves_verified_data_over_rsockets_blocking_nonblocking_and_polled() {
    let mut port = 18_801;
    for mode in ["b", "n", "a"] {
        for (size, count) in [("64", "2000"), ("3000", "300"), ("200000", "40")] {
            port += 1;
            rsockets_tool_checks_its_data(
                "rstream",
                ("127.77.44.1", "127.77.44.2"),
                port,
                &["-T", mode, "-S", size, "-C", count],
            );
        }
    }
}

/// Runs rdma-core's rsockets test `tool` (rstream, riostream) between a server on the
/// first address and a client on the second with `-T v` (each side checks every byte it
/// receives and fails on a wrong one) and `args`; both must end well and print their result
/// line.
fn rsockets_tool_checks_its_data(
    tool: &str,
    (server, client): (&str, &str),
    port: u16,
    args: &[&str],
) {
    let port_arg = port.to_string();
    let common: Vec<&str> = ["-p", &port_arg, "-T", "v"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    let server_args: Vec<&str> = ["-b", server].iter().chain(&common).copied().collect();
    let client_args: Vec<&str> = ["-s", server].iter().chain(&common).copied().collect();
    let p = pair(
        on_device(server, tool, &server_args),
        || on_device(client, tool, &client_args),
        true,
    );
    let what = format!("{tool} {}", common.join(" "));
    assert!(
        p.server.status.success() && p.client.status.success(),
        "{what}: {}",
        p.report()
    );
    for side in [&p.server, &p.client] {
        assert!(
            Pair::text(side)
                .lines()
                .any(|l| l.starts_with("custom") && l.split_whitespace().count() == 8),
            "{what}: {}",
            p.report()
        );
    }
}

/// udpong (rsockets' datagram sockets, rsocket(7) SOCK_DGRAM), unmodified on both sides:
/// its client logs in, then each run's datagrams go through rsockets' UDP address exchange
/// first and straight over UD queue pairs after. Echo runs (`-T e`: the server returns every
/// datagram, the client resends one that does not come back and takes only the answer
/// with its sequence number) must report exactly twice their count of transfers, in
/// blocking (`b`), non-blocking (`n`) and rpoll-driven (`a`) sockets; a bandwidth run (no
/// echo: the server counts what arrived, and UDP may drop) reports its result. udpong's
/// server never ends by itself: it runs until it is killed, after logging the client in.
#[test]
fn udpong_trades_datagrams_over_rsockets() {
    use std::os::unix::process::ExitStatusExt;
    let (server, client) = ("127.77.44.11", "127.77.44.12");
    let runs: [(&str, &[&str], Option<&str>); 4] = [
        ("b", &["-T", "e", "-S", "64", "-C", "200"], Some("400")),
        ("n", &["-T", "e", "-S", "1000", "-C", "200"], Some("400")),
        ("a", &["-T", "e", "-S", "1536", "-C", "100"], Some("200")),
        ("n", &["-S", "512", "-C", "500"], None),
    ];
    for (i, (mode, args, transfers)) in runs.into_iter().enumerate() {
        let port = (18_890 + i).to_string();
        // Line-buffered, so what the server printed survives its being killed.
        require_tools(&["udpong"], "rdmacm-utils");
        let server_args = ["-oL", "udpong", "-b", server, "-p", &port, "-T", mode];
        let client_args: Vec<&str> = ["-s", server, "-p", &port, "-T", mode]
            .iter()
            .chain(args)
            .copied()
            .collect();
        let p = pair(
            on_device(server, "stdbuf", &server_args),
            || on_device(client, "udpong", &client_args),
            false,
        );
        let what = format!("udpong {}", client_args.join(" "));
        assert!(p.client.status.success(), "{what}: {}", p.report());
        assert_eq!(
            p.server.status.signal(),
            Some(libc::SIGKILL),
            "{what}: the server ended before it was killed: {}",
            p.report()
        );
        assert!(
            Pair::text(&p.server).contains(&format!("client login from {client}")),
            "{what}: {}",
            p.report()
        );
        // name bytes xfers total time Gb/sec usec/xfer
        let text = Pair::text(&p.client);
        let line = text
            .lines()
            .find(|l| l.starts_with("custom") && l.split_whitespace().count() == 7);
        let Some(line) = line else {
            panic!("{what}: no result line: {}", p.report());
        };
        let xfers = line.split_whitespace().nth(2).unwrap_or_default();
        match transfers {
            Some(want) => assert_eq!(xfers, want, "{what}: {}", p.report()),
            None => assert!(
                xfers.parse::<u32>().is_ok_and(|n| n > 0),
                "{what}: {}",
                p.report()
            ),
        }
    }
}

/// udpong between two devices that are two addresses of one ordinary interface (a tap in a
/// namespace the test makes): the kernel routes the client's UDP socket, connected to a
/// destination on this host, from the destination's own address, which is the other
/// device's; rsockets then found no device for its UD QP ("No RDMA devices were detected").
/// The socket is bound to its own device's address first, as on `lo`.
#[test]
fn udpong_between_two_devices_on_one_ordinary_interface() {
    require_tools(&["udpong"], "rdmacm-utils");
    let ns = dropin::Netns::new(
        "udpong-if",
        &[
            &["tuntap", "add", "dev", "tap0", "mode", "tap"],
            &["addr", "add", "10.93.0.1/24", "dev", "tap0"],
            &["addr", "add", "10.93.0.2/24", "dev", "tap0"],
            &["link", "set", "tap0", "up"],
        ],
    );
    let server = ["-oL", "udpong", "-b", "10.93.0.1", "-p", "18961", "-T", "b"];
    let client = [
        "-s",
        "10.93.0.1",
        "-p",
        "18961",
        "-T",
        "b",
        "-T",
        "e",
        "-S",
        "64",
        "-C",
        "50",
    ];
    let p = pair(
        ns.exec("softroce0=10.93.0.1", "stdbuf", &server),
        || ns.exec("softroce0=10.93.0.2", "udpong", &client),
        false,
    );
    assert!(p.client.status.success(), "{}", p.report());
    let text = Pair::text(&p.client);
    let xfers = text
        .lines()
        .find(|l| l.starts_with("custom") && l.split_whitespace().count() == 7)
        .and_then(|l| l.split_whitespace().nth(2).map(str::to_string));
    assert_eq!(xfers.as_deref(), Some("100"), "{}", p.report());
}

/// rcopy (rsockets): a 3 MB file copied to the server arrives identical.
#[test]
fn rcopy_copies_a_file_over_rsockets() {
    let dir = std::env::temp_dir().join(format!("softroce-rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let src = dir.join("source.bin");
    let dst = dir.join("copy.bin");
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).expect("writing the source file");
    let target = format!("127.77.44.3:{}", dst.display());
    let src_arg = src.display().to_string();
    let p = pair(
        on_device("127.77.44.3", "rcopy", &["-p", "18850"]),
        || on_device("127.77.44.4", "rcopy", &[&src_arg, &target, "-p", "18850"]),
        false,
    );
    assert!(p.client.status.success(), "{}", p.report());
    let copied = std::fs::read(&dst).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        copied == data,
        "the copy differs ({} of {} bytes): {}",
        copied.len(),
        data.len(),
        p.report()
    );
}

/// rsocket(7)'s preload library, Debian's.
const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

/// The ordinary TCP program `tests/rsockets/NAME.c`, compiled: its path. Fails unless
/// librspreload is installed too.
fn tcp_program_for_the_preload(name: &str) -> String {
    assert!(
        std::path::Path::new(PRELOAD).exists(),
        "{PRELOAD} is missing: run scripts/test-all.sh as root (it installs librdmacm1)"
    );
    require_tools(&["gcc"], "gcc");
    let src = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/rsockets/{name}.c"));
    let exe = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let out = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running gcc");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe.display().to_string()
}

/// rsocket(7)'s preload library: an ordinary TCP program, unmodified, under
/// `LD_PRELOAD=librspreload.so` on both sides runs over rsockets (no TCP connection: the
/// client's connect(2) never reaches the kernel) and gets its megabyte echoed intact.
#[test]
fn an_ordinary_tcp_program_runs_over_rsockets_with_librspreload() {
    require_tools(&["strace"], "strace");
    let exe = tcp_program_for_the_preload("tcp_echo");
    let preload_var = format!("LD_PRELOAD={PRELOAD}");
    let with_preload = |addr: &str, args: &[&str]| {
        let mut all = vec![preload_var.as_str()];
        all.extend_from_slice(args);
        on_device(addr, "env", &all)
    };
    let p = pair(
        with_preload("127.77.44.5", &[&exe, "server", "127.77.44.5", "18860"]),
        || {
            with_preload(
                "127.77.44.6",
                &[
                    "strace",
                    "-f",
                    "-e",
                    "trace=connect",
                    &exe,
                    "client",
                    "127.77.44.5",
                    "18860",
                ],
            )
        },
        true,
    );
    assert!(
        p.client.status.success() && p.server.status.success(),
        "{}",
        p.report()
    );
    let client = Pair::text(&p.client);
    assert!(
        client.contains("client: echo matches (1048576)"),
        "{}",
        p.report()
    );
    assert!(
        !client.contains("connect(") || !client.contains("18860"),
        "the client's connect went to the kernel (TCP), not rsockets: {}",
        p.report()
    );
    assert!(
        Pair::text(&p.server).contains("server echoed 1048576"),
        "{}",
        p.report()
    );
}

/// riostream (rsockets' direct placement, riomap/riowrite), unmodified on both sides: each
/// side maps its buffer into the peer's iomap table and the peer writes into it with plain
/// RDMA WRITEs, which the receiver finds by spinning on the buffer's last byte; `-T v`
/// checks every byte. Small transfers go inline, large ones through the send ring.
#[test]
fn riostream_writes_verified_data_into_the_peers_mapped_buffer() {
    for (i, (size, count)) in [("100", "20"), ("65536", "40")].into_iter().enumerate() {
        rsockets_tool_checks_its_data(
            "riostream",
            ("127.77.44.7", "127.77.44.8"),
            18_871 + i as u16,
            &["-S", size, "-C", count],
        );
    }
}

/// A client that crashed (SIGKILL) and is started again on the same device connects at
/// once: its new QPs are numbered afresh, as a kernel's host-wide pool numbers them, so the
/// server's CM, which still holds the crashed client's connection, does not take the new
/// one for it (every process began at QPN 0x11, and the restarted client was refused as a
/// stale connection, REJ 10, until the old one timed out seconds later).
#[test]
fn rping_client_restarted_after_a_crash_connects_at_once() {
    use std::io::{BufRead, BufReader};
    let (server_addr, client_addr, port) = ("127.77.48.1", "127.77.48.2", "18961");
    let mut server = on_device(
        server_addr,
        "rping",
        &["-s", "-P", "-a", server_addr, "-p", port, "-C", "1000000"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawning the rping server");
    // The first client: connected once it prints its first ping (started again while the
    // server is not listening yet; at most 50 tries).
    let mut connected = None;
    for _ in 0..50 {
        let mut first = on_device(
            client_addr,
            "rping",
            &["-c", "-a", server_addr, "-p", port, "-C", "1000000", "-v"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the first client");
        let out = first.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pinged = BufReader::new(out)
                .lines()
                .take(10_000)
                .map_while(Result::ok)
                .any(|l| l.contains("ping data"));
            let _ = tx.send(pinged);
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(true) => {
                connected = Some(first);
                break;
            }
            _ => {
                let _ = first.kill();
                let _ = first.wait();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let Some(mut first) = connected else {
        let _ = server.kill();
        let _ = server.wait();
        panic!("the first client never connected");
    };
    // The crash: no disconnect reaches the server.
    first.kill().expect("SIGKILL to the first client");
    first.wait().expect("reaping the first client");
    let again = bounded(on_device(
        client_addr,
        "rping",
        &["-c", "-a", server_addr, "-p", port, "-C", "3", "-v"],
    ));
    let _ = server.kill();
    let _ = server.wait();
    let text = Pair::text(&again);
    assert!(
        again.status.success() && text.contains("ping data: rdma-ping-2: "),
        "the restarted client ({}):\n{text}",
        again.status
    );
}

/// librspreload's select(2), as iperf3 and ncat wait: a server that selects on its
/// listener, accepts a connection that was established meanwhile, then selects on the
/// accepted socket sees that very fd marked readable and reads every byte. (The accepted
/// rsocket's number was the one it got when it connected in the background, older than
/// the fd the preload's accept() hands out, and the preload's select() marked that older
/// number instead: the server waited for data forever.)
#[test]
fn select_under_librspreload_marks_the_accepted_socket() {
    let exe = tcp_program_for_the_preload("select_after_accept");
    let with_preload = |addr: &str, role: &str| {
        let preload_var = format!("LD_PRELOAD={PRELOAD}");
        on_device(
            addr,
            "env",
            &[&preload_var, &exe, role, "127.77.44.9", "18880"],
        )
    };
    let p = pair(
        with_preload("127.77.44.9", "server"),
        || with_preload("127.77.44.10", "client"),
        true,
    );
    assert!(
        p.server.status.success()
            && Pair::text(&p.server).contains("server got 65536 bytes through select"),
        "{}",
        p.report()
    );
}
