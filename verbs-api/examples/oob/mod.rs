//! Out of band: how the two-process examples hand each other what RDMA needs before it can
//! start (QP endpoints, a remote address and key). Here the parent starts the example a
//! second time as its peer and they swap text lines over the child's stdin and stdout; real
//! programs use a TCP socket (as rdma-core's `ibv_rc_pingpong` does) or rdma_cm.

// Each example uses the half of this it needs.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub(crate) type BoxError = Box<dyn std::error::Error>;

/// The parent's handle on its peer process.
pub(crate) struct Peer {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

impl Peer {
    /// Run this example again with `role` as its argument.
    pub(crate) fn spawn(role: &str) -> Result<Self, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let to = child.stdin.take().ok_or("no stdin pipe")?;
        let from = BufReader::new(child.stdout.take().ok_or("no stdout pipe")?);
        Ok(Self { child, to, from })
    }

    /// Send one line to the peer.
    pub(crate) fn send(&mut self, line: impl std::fmt::Display) -> Result<(), BoxError> {
        writeln!(self.to, "{line}")?;
        Ok(self.to.flush()?)
    }

    /// The peer's next line (an error if it exited instead).
    pub(crate) fn recv(&mut self) -> Result<String, BoxError> {
        read_line(&mut self.from)
    }

    /// Wait for the peer to exit; an error unless it succeeded.
    pub(crate) fn finish(mut self) -> Result<(), BoxError> {
        drop(self.to);
        let status = self.child.wait()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the peer process failed: {status}").into())
        }
    }
}

/// In the child: send one line to the parent.
pub(crate) fn send_to_parent(line: impl std::fmt::Display) -> Result<(), BoxError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    Ok(out.flush()?)
}

/// In the child: the parent's next line.
pub(crate) fn recv_from_parent() -> Result<String, BoxError> {
    read_line(&mut std::io::stdin().lock())
}

fn read_line(from: &mut impl BufRead) -> Result<String, BoxError> {
    let mut line = String::new();
    if from.read_line(&mut line)? == 0 {
        return Err("the other process closed the line without answering".into());
    }
    Ok(line.trim_end().to_string())
}
