//! The TCP side channel the two-process commands exchange endpoints over.

use std::io::{BufRead, Read as _};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// Connect to `host:port`, retrying for about ten seconds: the server may still be starting.
pub(crate) fn connect_retrying(host: &str, port: u16) -> anyhow::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .collect();
    let mut last = None;
    for _ in 0..100 {
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "connecting to {host}:{port}: {}",
        last.map_or_else(|| "no address".into(), |e| e.to_string())
    )
}

/// Listen on TCP `port` of every address, IPv4 and IPv6 (0: a free port the system picks)
/// and print `listening on TCP port N` with the port in use, so a client (or a script) can
/// find a server started with `-p 0`.
pub(crate) fn listen(port: u16) -> anyhow::Result<TcpListener> {
    // IPv4 only where the host has no IPv6.
    let listener = dual_stack(port)
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("listening on TCP port {port}"))?;
    let port = listener.local_addr()?.port();
    // stdout is line-buffered: the line is out before the wait for a client begins.
    println!("listening on TCP port {port}");
    Ok(listener)
}

/// A listener on `[::]:port` that takes IPv4 clients too (as IPv4-mapped addresses).
fn dual_stack(port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, None)?;
    socket.set_only_v6(false)?;
    // As std's TcpListener::bind: a restarted server may reuse the port at once.
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)).into())?;
    socket.listen(128)?;
    Ok(socket.into())
}

/// Accept one client before `deadline`, the end of the command's `--timeout` of
/// `timeout_secs`: a server must not wait forever for a client that never comes.
pub(crate) fn accept_until(
    listener: &TcpListener,
    deadline: Instant,
    timeout_secs: u64,
) -> anyhow::Result<TcpStream> {
    let port = listener.local_addr()?.port();
    // Bounded: each round sleeps until a client knocks or the deadline passes.
    for _ in 0..1_000_000 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("waiting for a client");
        }
        if r > 0 {
            return Ok(listener.accept().context("accepting the client")?.0);
        }
    }
    bail!("no client connected to TCP port {port} within --timeout {timeout_secs} s")
}

/// The longest line the side channel takes: a perf run's endpoint list (tens of bytes per
/// QP, up to tens of thousands of QPs) fits many times over, and a peer that never ends
/// its line costs at most this.
const MAX_LINE: u64 = 16 << 20;

/// One line from the side channel without its line end, `None` at the end of the stream.
/// At most [`MAX_LINE`] bytes are read for it (InvalidData beyond, and for a line that is
/// not UTF-8): a peer that never ends its line cannot grow this process without bound.
pub(crate) fn read_line(r: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = r.by_ref().take(MAX_LINE + 1).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() as u64 > MAX_LINE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the peer sent a line longer than {} MiB", MAX_LINE >> 20),
        ));
    }
    let line = String::from_utf8(buf).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the peer sent a line that is not UTF-8",
        )
    })?;
    Ok(Some(line.trim_end().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_read_up_to_its_end_and_an_endless_one_is_refused() {
        let mut two = std::io::Cursor::new(b"HELLO gid=1\nBYE\n".to_vec());
        assert_eq!(read_line(&mut two).unwrap().as_deref(), Some("HELLO gid=1"));
        assert_eq!(read_line(&mut two).unwrap().as_deref(), Some("BYE"));
        assert_eq!(read_line(&mut two).unwrap(), None);
        // Endless input without a line end: refused after the limit, not read to the end.
        let mut endless = std::io::BufReader::new(std::io::repeat(b'x'));
        let e = read_line(&mut endless).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let mut binary = std::io::Cursor::new(vec![0xff, 0xfe, b'\n']);
        assert_eq!(
            read_line(&mut binary).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }
}
