//! rdma-core's `mckey` (rdmacm-utils), unmodified, under `softroce exec`: two receivers and
//! a sender, each its own process on its own emulated device, join an IPv4 multicast group
//! through the drop-in librdmacm and the sender's messages reach both receivers, counted by
//! the devices.

mod dropin;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use dropin::finish;

const MESSAGES: u32 = 10;

/// `softroce exec --devices NAME=ADDR -- mckey -m GROUP -b ADDR -C MESSAGES EXTRA…`, with
/// the device's counters printed when it exits.
fn mckey(group: &str, name: &str, addr: &str, extra: &[&str]) -> Child {
    let found = Command::new("sh")
        .args(["-c", "command -v mckey >/dev/null"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "mckey is missing: run scripts/test-all.sh as root, which installs rdmacm-utils"
    );
    let count = MESSAGES.to_string();
    Command::new(assert_cmd::cargo::cargo_bin("softroce"))
        .args(["exec", "--devices", &format!("{name}={addr}"), "--"])
        .args(["mckey", "-m", group, "-b", addr, "-C", &count])
        .args(extra)
        .env("SOFTROCE_COUNTERS", "stderr")
        .env_remove("SOFTROCE_FAULTS")
        .env_remove("SOFTROCE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning mckey")
}

fn text(o: &Output) -> String {
    format!(
        "({})\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How many UDP sockets are bound to `group`:4791 (`/proc/net/udp`): one per device that
/// joined, so the receivers are known to be members before the sender starts.
fn group_sockets(group: &str) -> usize {
    let ip: std::net::Ipv4Addr = group.parse().expect("an IPv4 group");
    // As the kernel prints it: the address's bytes as a native (little-endian) word, and
    // port 4791 = 0x12B7.
    let needle = format!(" {:08X}:12B7 ", u32::from_le_bytes(ip.octets()));
    std::fs::read_to_string("/proc/net/udp")
        .map(|t| t.lines().filter(|l| l.contains(&needle)).count())
        .unwrap_or(0)
}

/// The value of counter `name` in the line `SOFTROCE_COUNTERS=stderr` printed.
fn counter(o: &Output, name: &str) -> Option<u64> {
    let stderr = String::from_utf8_lossy(&o.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("softroce counters"))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
}

/// What one run printed: the sender's and each receiver's output.
struct Run {
    sender: Output,
    receivers: Vec<Output>,
    report: String,
}

/// Receivers on `receivers` (plain `mckey -m GROUP -b ADDR`), started first and known to
/// have joined, then the sender on `sender` with `-s` and `sender_args`; all must end well,
/// having joined `group` and moved their messages.
fn run(group: &str, receivers: &[&str], sender: &str, sender_args: &[&str]) -> Run {
    let before = group_sockets(group);
    let started: Vec<Child> = receivers
        .iter()
        .enumerate()
        .map(|(i, addr)| mckey(group, &format!("rx{i}"), addr, &[]))
        .collect();
    // Bounded: the receivers join within 30 s (each joins the IP group with its QP).
    let deadline = Instant::now() + Duration::from_secs(30);
    while group_sockets(group) < before + receivers.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if group_sockets(group) < before + receivers.len() {
        let outputs: Vec<String> = started
            .into_iter()
            .map(|r| text(&finish(r, Duration::from_secs(1))))
            .collect();
        panic!(
            "the receivers did not join {group}:\n{}",
            outputs.join("\n")
        );
    }
    let mut args = vec!["-s"];
    args.extend_from_slice(sender_args);
    let sender = finish(mckey(group, "tx", sender, &args), Duration::from_secs(60));
    let receivers: Vec<Output> = started
        .into_iter()
        .map(|r| finish(r, Duration::from_secs(60)))
        .collect();
    let mut report = format!("sender {}", text(&sender));
    for (i, r) in receivers.iter().enumerate() {
        report += &format!("\nreceiver {i} {}", text(r));
    }
    for o in std::iter::once(&sender).chain(&receivers) {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success()
                && out.contains(&format!("joined dgid: ::ffff:{group}"))
                && out.contains("data transfers complete"),
            "{report}"
        );
    }
    // The sender's device sent each message once, to the group; each receiver's device
    // took in exactly that many (mckey's receiver waits for MESSAGES completions).
    assert_eq!(
        counter(&sender, "sent_pkts"),
        Some(u64::from(MESSAGES)),
        "{report}"
    );
    for r in &receivers {
        assert_eq!(
            counter(r, "rcvd_pkts"),
            Some(u64::from(MESSAGES)),
            "{report}"
        );
        assert_eq!(counter(r, "drop_no_receive_wqe"), Some(0), "{report}");
    }
    Run {
        sender,
        receivers,
        report,
    }
}

#[test]
fn mckey_sender_reaches_two_receivers_on_other_devices() {
    let run = run(
        "239.79.4.1",
        &["127.79.4.2", "127.79.4.3"],
        "127.79.4.1",
        &[],
    );
    assert_eq!(run.receivers.len(), 2);
    // The sender's device is a member of the IP group too and gets its own messages back,
    // as rxe joined through rdma_cm does; mckey's sender QP (no `-l`: it does not block
    // its own multicast) has no receives posted, so each copy that comes back before it
    // leaves is dropped there, counted; none is taken.
    let back = counter(&run.sender, "rcvd_pkts").expect("sender counters");
    assert!(back <= u64::from(MESSAGES), "{}", run.report);
    assert_eq!(
        counter(&run.sender, "drop_no_receive_wqe"),
        Some(back),
        "{}",
        run.report
    );
}

/// `mckey -l` creates its QP with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: the copies the
/// sender's device gets back never reach that QP.
#[test]
fn mckey_sender_with_l_blocks_its_own_multicast() {
    let run = run("239.79.4.2", &["127.79.4.5"], "127.79.4.4", &["-l"]);
    assert_eq!(counter(&run.sender, "rcvd_pkts"), Some(0), "{}", run.report);
    assert_eq!(
        counter(&run.sender, "drop_no_receive_wqe"),
        Some(0),
        "{}",
        run.report
    );
}
