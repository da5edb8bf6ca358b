//! The drop-in library the `softroce exec` tests run programs on.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The drop-in library cargo built for these tests (a dev-dependency).
pub(crate) fn dropin_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    for p in [
        deps.join("libibverbs.so"),
        deps.parent().expect("profile dir").join("libibverbs.so"),
    ] {
        if p.is_file() {
            return p;
        }
    }
    panic!("libibverbs.so not built next to {}", deps.display());
}

/// Whether some socket listens on TCP `port` (from /proc/net/tcp and tcp6), without
/// connecting: servers such as ucx_perftest's and fi_pingpong's take the first connection
/// as their peer.
#[allow(dead_code)] // not every test binary waits for a server
pub(crate) fn tcp_listening(port: u16) -> bool {
    tcp_listening_at("/proc/net", port)
}

/// `tcp_listening` in the network namespace of process `pid` (its /proc/PID/net).
#[allow(dead_code)]
pub(crate) fn tcp_listening_in(pid: u32, port: u16) -> bool {
    tcp_listening_at(&format!("/proc/{pid}/net"), port)
}

fn tcp_listening_at(dir: &str, port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["tcp", "tcp6"].iter().any(|f| {
        let f = format!("{dir}/{f}");
        let mut text = String::new();
        std::fs::File::open(&f)
            .and_then(|mut h| h.read_to_string(&mut text))
            .is_ok()
            && text.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
    })
}

/// Fails with a clear message unless every one of `tools` is on the PATH: tests never
/// install packages; `scripts/test-all.sh` installs `package`.
#[allow(dead_code)] // not every test binary runs outside programs
pub(crate) fn require_tools(tools: &[&str], package: &str) {
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool} >/dev/null")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{tool} is missing: install {package} (scripts/test-all.sh does, as root)"
        );
    }
}

/// `softroce exec --devices softroce0=IP -- PROGRAM ARGS` on the drop-in cargo built, with
/// the output captured.
#[allow(dead_code)] // not every test binary runs outside programs
pub(crate) fn exec_on(ip: &str, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("softroce"));
    c.env("SOFTROCE_IBVERBS_LIB", dropin_library())
        .env_remove("SOFTROCE_DEVICES")
        .args([
            "exec",
            "--devices",
            &format!("softroce0={ip}"),
            "--",
            program,
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A network namespace a test creates (root: `ip netns add`), with `lo` up and whatever
/// `setup` adds (each entry the arguments of one `ip -n NAME …` command); deleted on drop.
/// Addresses in it reach nothing outside.
#[allow(dead_code)] // not every test binary needs a namespace
pub(crate) struct Netns {
    pub(crate) name: String,
}

#[allow(dead_code)]
impl Netns {
    pub(crate) fn new(story: &str, setup: &[&[&str]]) -> Self {
        require_tools(&["ip"], "iproute2");
        let name = format!("softroce-{story}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        Self::ip(&["netns", "add", &name]);
        let ns = Self { name };
        Self::ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        for args in setup {
            let mut all = vec!["-n", ns.name.as_str()];
            all.extend_from_slice(args);
            Self::ip(&all);
        }
        ns
    }

    fn ip(args: &[&str]) {
        let o = Command::new("ip").args(args).output().expect("running ip");
        assert!(
            o.status.success(),
            "ip {}: {} (the tests run as root, as scripts/test-all.sh does)",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `softroce exec --devices DEVICES -- PROGRAM ARGS` inside the namespace, on the drop-in
    /// cargo built, output captured.
    pub(crate) fn exec(&self, devices: &str, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .arg(assert_cmd::cargo::cargo_bin("softroce"))
            .args(["exec", "--devices", devices, "--", program])
            .args(args)
            .env("SOFTROCE_IBVERBS_LIB", dropin_library())
            .env_remove("SOFTROCE_DEVICES")
            .env_remove("SOFTROCE_LOG")
            .env_remove("SOFTROCE_FAULTS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A child whose piped stdout and stderr are read while it runs, each by a thread of its
/// own. Output read only at the end would leave a chatty program blocked in `write` once a
/// pipe's 64 KiB is full (io_demo's client logs a retry line a few microseconds apart
/// between connect attempts, filled its pipe in ~60 ms and never retried: a pair that
/// looked like a server refusing every connect).
#[allow(dead_code)] // not every test binary runs outside programs
pub(crate) struct Drained {
    child: std::process::Child,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

#[allow(dead_code)]
impl Drained {
    pub(crate) fn new(mut child: std::process::Child) -> Self {
        fn reader(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut buf);
                }
                buf
            })
        }
        let (stdout, stderr) = (reader(child.stdout.take()), reader(child.stderr.take()));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    /// Whether the child has ended.
    pub(crate) fn ended(&mut self) -> bool {
        self.child.try_wait().expect("child status").is_some()
    }

    /// Wait (at most `limit`) for the child, and kill it at the deadline: its output, and
    /// whether it was still running then.
    pub(crate) fn finish_within(
        mut self,
        limit: std::time::Duration,
    ) -> (std::process::Output, bool) {
        let deadline = std::time::Instant::now() + limit;
        while !self.ended() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let timed_out = !self.ended();
        let _ = self.child.kill();
        let status = self.child.wait().expect("child status");
        // The readers end at the pipes' end of file: the child (and, as `softroce exec`
        // replaces itself with the program, the program) is gone.
        let output = std::process::Output {
            status,
            stdout: self.stdout.join().expect("stdout reader"),
            stderr: self.stderr.join().expect("stderr reader"),
        };
        (output, timed_out)
    }
}

/// Wait (at most `limit`) for `child`, reading its output meanwhile ([`Drained`]), and
/// kill it at the deadline: its output, and whether it was still running then.
#[allow(dead_code)]
pub(crate) fn finish_draining(
    child: std::process::Child,
    limit: std::time::Duration,
) -> (std::process::Output, bool) {
    Drained::new(child).finish_within(limit)
}

/// [`finish_draining`]'s output alone.
#[allow(dead_code)]
pub(crate) fn finish(
    child: std::process::Child,
    limit: std::time::Duration,
) -> std::process::Output {
    finish_draining(child, limit).0
}
