//! The TCP side channel the two-process commands exchange endpoints over.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

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
