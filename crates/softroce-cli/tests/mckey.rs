//! rdma-core's `mckey` (rdmacm-utils), unmodified, under `softroce exec`: two receivers and
//! a sender, each its own process on its own emulated device, join an IPv4 multicast group
//! through the drop-in librdmacm and the sender's messages reach both receivers, counted by
//! the devices.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GROUP: &str = "239.79.4.1";
const MESSAGES: u32 = 10;

/// `softroce exec --devices NAME=ADDR -- mckey -m GROUP -b ADDR -C MESSAGES EXTRA…`, with
/// the device's counters printed when it exits.
fn mckey(name: &str, addr: &str, extra: &[&str]) -> Child {
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
        .args(["mckey", "-m", GROUP, "-b", addr, "-C", &count])
        .args(extra)
        .env("SOFTROCE_COUNTERS", "stderr")
        .env_remove("SOFTROCE_FAULTS")
        .env_remove("SOFTROCE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning mckey")
}

/// Waits for `child` for at most `limit`, then kills it.
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("mckey status").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().expect("mckey output")
}

fn text(o: &Output) -> String {
    format!(
        "({})\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How many UDP sockets are bound to `GROUP`:4791 (`/proc/net/udp`): one per device that
/// joined, so the receivers are known to be members before the sender starts.
fn group_sockets() -> usize {
    // 239.79.4.1 as the kernel prints it (little-endian hex), port 4791 = 0x12B7.
    let needle = " 01044FEF:12B7 ";
    std::fs::read_to_string("/proc/net/udp")
        .map(|t| t.lines().filter(|l| l.contains(needle)).count())
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

#[test]
fn mckey_sender_reaches_two_receivers_on_other_devices() {
    let before = group_sockets();
    let receivers = [
        mckey("rx1", "127.79.4.2", &[]),
        mckey("rx2", "127.79.4.3", &[]),
    ];
    // Bounded: both receivers join within 30 s (each joins the IP group with its QP).
    let deadline = Instant::now() + Duration::from_secs(30);
    while group_sockets() < before + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        group_sockets() >= before + 2,
        "the receivers did not join {GROUP}"
    );
    let sender = finish(mckey("tx", "127.79.4.1", &["-s"]), Duration::from_secs(60));
    let receivers = receivers.map(|r| finish(r, Duration::from_secs(60)));
    let report = format!(
        "sender {}\nreceiver 1 {}\nreceiver 2 {}",
        text(&sender),
        text(&receivers[0]),
        text(&receivers[1])
    );
    for o in [&sender, &receivers[0], &receivers[1]] {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success()
                && out.contains("joined dgid: ::ffff:239.79.4.1")
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
    // Its own copies come back to the sender's device (a member of the IP group) and are
    // refused by its QP, created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.
    assert_eq!(counter(&sender, "rcvd_pkts"), Some(0), "{report}");
    for r in &receivers {
        assert_eq!(
            counter(r, "rcvd_pkts"),
            Some(u64::from(MESSAGES)),
            "{report}"
        );
        assert_eq!(counter(r, "drop_no_receive_wqe"), Some(0), "{report}");
    }
}
