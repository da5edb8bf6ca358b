//! The second process of the multi-process tests (`softroce-send-peer`), driven over its
//! stdin and stdout.

// Each test file uses a different part of this helper.
#![allow(dead_code)]

pub(crate) mod fake_peer;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use softroce_verbs::QueuePairEndpoint;

/// The sending process.
pub(crate) struct Peer {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Peer {
    /// Start it on `ip` to send `count` requests, with extra options (and `env` faults).
    pub(crate) fn start(ip: &str, count: u64, options: &[&str]) -> (Self, QueuePairEndpoint) {
        Self::start_with_env(ip, count, options, None)
    }

    /// As [`Peer::start`], with `SOFTROCE_FAULTS` set for the peer's device.
    pub(crate) fn start_with_env(
        ip: &str,
        count: u64,
        options: &[&str],
        faults: Option<&str>,
    ) -> (Self, QueuePairEndpoint) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_softroce-send-peer"));
        cmd.args([ip, &count.to_string()])
            .args(options)
            .env_remove("SOFTROCE_FAULTS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(f) = faults {
            cmd.env("SOFTROCE_FAULTS", f);
        }
        let mut child = cmd.spawn().expect("spawning softroce-send-peer");
        let mut out = BufReader::new(child.stdout.take().expect("peer stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("peer endpoint");
        let ep = line
            .parse()
            .unwrap_or_else(|e| panic!("peer said {line:?}: {e}"));
        (Self { child, out }, ep)
    }

    /// Tell the peer our endpoint (and for WRITEs the target address and rkey): it starts.
    pub(crate) fn connect(&mut self, ours: QueuePairEndpoint, target: Option<(u64, u32)>) {
        let stdin = self.child.stdin.as_mut().expect("peer stdin");
        let extra = target.map_or(String::new(), |(a, k)| format!(" {a:x} {k:x}"));
        writeln!(stdin, "{ours}{extra}").expect("writing to the peer");
    }

    /// The peer's remaining output lines and whether it exited 0, waiting at most 40 s.
    pub(crate) fn finish(&mut self) -> (Vec<String>, bool) {
        let deadline = Instant::now() + Duration::from_secs(40);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("peer status") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("peer did not finish within 40 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        (rest.lines().map(str::to_string).collect(), status.success())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Never leave the process behind, whatever the test's outcome.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
