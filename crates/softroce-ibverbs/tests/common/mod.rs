//! What the tests of the drop-in library share: the built library in a directory of its
//! own, the Debian tools, child processes with time limits, free ports.
#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The drop-in library cargo built for these tests (`target/<profile>/libibverbs.so`).
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash>
    let deps = exe.parent().expect("deps dir");
    let profile = deps.parent().expect("profile dir");
    // deps/ first: that is the copy cargo built for this test run.
    for p in [deps.join("libibverbs.so"), profile.join("libibverbs.so")] {
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "libibverbs.so not found in {} (cargo builds the cdylib before the package's tests)",
        profile.display()
    );
}

/// A directory holding only `libibverbs.so.1` → the built library, for LD_LIBRARY_PATH.
pub fn library_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("dropin-lib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating the library dir");
        let link = dir.join("libibverbs.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built_library(), &link).expect("linking libibverbs.so.1");
        dir
    })
}

/// Fail with a clear message unless every one of `tools` is on the PATH. Tests never install
/// packages: `scripts/test-all.sh` installs rdma-core's tools, perftest, binutils and gcc.
pub fn require_tools(tools: &[&str]) {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {t}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "missing {missing:?}: run scripts/test-all.sh as root, which installs them"
    );
}

/// Compile `tests/c/NAME.c` against the installed `<infiniband/verbs.h>` and link it with
/// the system libibverbs, as applications are built; returns the executable.
pub fn compile_c(name: &str) -> PathBuf {
    require_tools(&["gcc"]);
    assert!(
        Path::new("/usr/include/infiniband/verbs.h").exists(),
        "libibverbs-dev is missing: run scripts/test-all.sh as root"
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("running gcc");
    assert!(
        out.status.success(),
        "gcc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A TCP port nobody listens on right now (for the tools' side channel).
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding an ephemeral port")
        .port()
}

/// A running child whose output is collected in the background.
pub struct Running {
    pub name: String,
    child: Child,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

/// How a child ended.
pub struct Finished {
    pub name: String,
    /// `None`: killed at the time limit.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    pub fn report(&self) -> String {
        format!(
            "--- {} ({}) stdout:\n{}\n--- {} stderr:\n{}",
            self.name,
            match self.status {
                Some(s) => format!("{s}"),
                None => "killed at its time limit".into(),
            },
            self.stdout,
            self.name,
            self.stderr
        )
    }
}

fn collect(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    })
}

/// Start `program args` on the drop-in library with `devices` as SOFTROCE_DEVICES.
pub fn spawn(name: &str, devices: &str, program: &str, args: &[&str]) -> Running {
    spawn_env(name, devices, program, args, &[])
}

/// [`spawn`] with more environment variables (SOFTROCE_FAULTS, SOFTROCE_PCAP …).
pub fn spawn_env(
    name: &str,
    devices: &str,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .env_remove("SOFTROCE_FAULTS")
        .env_remove("SOFTROCE_PCAP")
        .envs(env.iter().copied())
        .env("LD_LIBRARY_PATH", library_dir())
        .env("SOFTROCE_DEVICES", devices)
        .env_remove("SOFTROCE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"));
    let out = child.stdout.take().map(collect);
    let err = child.stderr.take().map(collect);
    Running {
        name: name.to_string(),
        child,
        out,
        err,
    }
}

impl Running {
    /// Wait up to `limit`, killing the child when it runs over.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        Finished {
            name: self.name.clone(),
            status,
            stdout: self
                .out
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default(),
            stderr: self
                .err
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default(),
        }
    }

    /// Whether the child has exited already.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that fails part way must not leave its children behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether some socket listens on TCP `port` (read from /proc, so the tool's single accept
/// is not used up by probing).
fn tcp_listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            })
        })
    })
}

/// Run a server/client pair of a tool that exchanges its addresses over TCP `port`: the
/// server on `server_devices`, the client on `client_devices` connecting to 127.0.0.1.
/// Returns both outcomes; panics with both outputs when either fails.
pub fn run_pair(
    tool: &str,
    server_devices: &str,
    client_devices: &str,
    args: &[&str],
    port: u16,
    limit: Duration,
) -> (Finished, Finished) {
    run_pair_env(
        tool,
        (server_devices, &[]),
        (client_devices, &[]),
        args,
        port,
        limit,
    )
}

/// The devices and extra environment of one side of a pair.
pub type Side<'a> = (&'a str, &'a [(&'a str, &'a str)]);

/// [`run_pair`] with extra environment variables for each side.
pub fn run_pair_env(
    tool: &str,
    server: Side<'_>,
    client: Side<'_>,
    args: &[&str],
    port: u16,
    limit: Duration,
) -> (Finished, Finished) {
    let (server_devices, server_env) = server;
    let (client_devices, client_env) = client;
    let mut server = spawn_env(
        &format!("{tool} server"),
        server_devices,
        tool,
        args,
        server_env,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tcp_listening(port) {
        if server.exited() || Instant::now() > deadline {
            let s = server.finish(Duration::from_secs(1));
            panic!(
                "{tool} server never listened on TCP {port}:\n{}",
                s.report()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client_args = args.to_vec();
    client_args.push("127.0.0.1");
    let client = spawn_env(
        &format!("{tool} client"),
        client_devices,
        tool,
        &client_args,
        client_env,
    );
    let c = client.finish(limit);
    let s = server.finish(if c.ok() {
        limit
    } else {
        Duration::from_secs(2)
    });
    assert!(
        s.ok() && c.ok(),
        "{tool} {args:?} failed:\n{}\n{}",
        s.report(),
        c.report()
    );
    (s, c)
}

/// The devices of test number `n`: a private pair of loopback addresses, so tests running in
/// parallel (and other users of 127.0.0.1:4791) never share a UDP socket.
pub fn device_pair(n: u8) -> (String, String) {
    (
        format!("softroce0=127.77.{n}.1"),
        format!("softroce0=127.77.{n}.2"),
    )
}
