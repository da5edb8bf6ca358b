//! What the connection manager stories share: emulated devices with fast CM retries, the
//! address a listener takes, and connect options.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use softroce_verbs::Context;
use softroce_verbs::cm::ConnectOptions;

/// How long any one step of a story may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// An emulated device named `name` at `ip` (UDP 4791 as RoCEv2 wants it, on an address of
/// its own per test: the CM reaches a peer's device on its own port), no capture, no faults.
pub fn device(name: &str, ip: &str) -> Context {
    let mut cfg = softroce_emu::driver::DeviceConfig::new(name, ip.parse().unwrap());
    cfg.pcap = None;
    cfg.faults = None;
    // Lost CM messages are retried after 64 ms instead of rdma_cm's 4 s.
    cfg.cm_response_timeout = 14;
    Context::open_emulated_with(cfg).unwrap()
}

/// `port` at the device's own address.
pub fn listen_addr(ctx: &Context, port: u16) -> SocketAddr {
    SocketAddr::new(ctx.local_addr().unwrap().ip(), port)
}

/// Connect options carrying `private_data`, waiting at most [`WAIT`].
pub fn options(private_data: &[u8]) -> ConnectOptions {
    ConnectOptions {
        private_data: private_data.to_vec(),
        timeout: WAIT,
        ..ConnectOptions::default()
    }
}
