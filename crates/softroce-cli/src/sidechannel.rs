//! The TCP side channel the two-process commands exchange endpoints over.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// Connect to `host:port`, retrying until `limit` (the command's `--timeout`) has passed:
/// the server may still be starting.
pub(crate) fn connect_retrying(
    host: &str,
    port: u16,
    limit: Duration,
) -> anyhow::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .collect();
    let deadline = Instant::now() + limit;
    let mut last = None;
    // Bounded by the deadline; the count only guards against a clock that stands still.
    for _ in 0..1_000_000 {
        for a in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(a, left.min(Duration::from_secs(2))) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    bail!(
        "connecting to {host}:{port} within --timeout {} s: {}",
        limit.as_secs(),
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

/// A reader whose reads can be bounded in time (the side channel's socket).
pub(crate) trait ReadTimeout {
    fn set_read_timeout(&self, limit: Option<Duration>) -> std::io::Result<()>;
}

impl ReadTimeout for TcpStream {
    fn set_read_timeout(&self, limit: Option<Duration>) -> std::io::Result<()> {
        Self::set_read_timeout(self, limit)
    }
}

/// One line from the side channel without its line end, `None` at the end of the stream.
/// The whole line must come within `limit` (TimedOut otherwise: a peer sending a byte now
/// and then cannot hold this side past its `--timeout`), and at most [`MAX_LINE`] bytes
/// are read for it (InvalidData beyond, and for a line that is not UTF-8: a peer that
/// never ends its line cannot grow this process without bound).
pub(crate) fn read_line<R: Read + ReadTimeout>(
    r: &mut BufReader<R>,
    limit: Duration,
) -> std::io::Result<Option<String>> {
    let deadline = Instant::now() + limit;
    let mut buf = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no whole line from the peer within {} s", limit.as_secs()),
            ));
        }
        r.get_ref().set_read_timeout(Some(left))?;
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if buf.is_empty() {
                return Ok(None);
            }
            break;
        }
        let (take, ended) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..take]);
        r.consume(take);
        if buf.len() as u64 > MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the peer sent a line longer than {} MiB", MAX_LINE >> 20),
            ));
        }
        if ended {
            break;
        }
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

    /// In-memory input that is never slow.
    struct Memory<R>(R);
    impl<R: Read> Read for Memory<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl<R> ReadTimeout for Memory<R> {
        fn set_read_timeout(&self, _: Option<Duration>) -> std::io::Result<()> {
            Ok(())
        }
    }
    const LIMIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_line_is_read_up_to_its_end_and_an_endless_one_is_refused() {
        let mut two = BufReader::new(Memory(&b"HELLO gid=1\nBYE\n"[..]));
        assert_eq!(
            read_line(&mut two, LIMIT).unwrap().as_deref(),
            Some("HELLO gid=1")
        );
        assert_eq!(read_line(&mut two, LIMIT).unwrap().as_deref(), Some("BYE"));
        assert_eq!(read_line(&mut two, LIMIT).unwrap(), None);
        // A last line without its end is still a line.
        let mut unended = BufReader::new(Memory(&b"BYE"[..]));
        assert_eq!(
            read_line(&mut unended, LIMIT).unwrap().as_deref(),
            Some("BYE")
        );
        // Endless input without a line end: refused after the limit, not read to the end.
        let mut endless = BufReader::new(Memory(std::io::repeat(b'x')));
        let e = read_line(&mut endless, LIMIT).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let mut binary = BufReader::new(Memory(&[0xff, 0xfe, b'\n'][..]));
        assert_eq!(
            read_line(&mut binary, LIMIT).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    /// A peer that sends a byte every 100 ms, never a line end: each read returns in
    /// time, but the line as a whole is refused once its time is up.
    #[test]
    fn a_peer_trickling_bytes_cannot_outlast_the_limit() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let trickler = std::thread::spawn(move || {
            use std::io::Write as _;
            let mut s = TcpStream::connect(addr).unwrap();
            for _ in 0..50 {
                if s.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (stream, _) = listener.accept().unwrap();
        // Without the line's own deadline this read would end with the trickle, at its
        // close after five seconds, as a line of 50 bytes.
        let e = read_line(&mut BufReader::new(stream), Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        trickler.join().unwrap();
    }
}
