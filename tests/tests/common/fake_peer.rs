//! A hostile peer: a plain UDP socket on loopback that a real device's RC QP is connected
//! to, sending hand-built RoCEv2 requests with valid ICRCs and reading what comes back.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use softroce_verbs::QueuePairEndpoint;
use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{
    BthRepr, ExtRepr, Gid, NakCode, Opcode, Psn, Qpn, RethRepr, RocePacket, RoceRepr, Syndrome,
};

/// The QPN the fake peer claims.
pub(crate) const FAKE_QPN: u32 = 0x77;
/// The first PSN the fake peer sends (the victim's expected PSN).
pub(crate) const FAKE_PSN: u32 = 1000;

/// A packet received from the device.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) repr: RoceRepr,
    pub(crate) payload: Vec<u8>,
}

impl Reply {
    /// The AETH syndrome, if the packet has one.
    pub(crate) fn syndrome(&self) -> Option<Syndrome> {
        self.repr.ext.aeth.map(|a| a.syndrome)
    }

    /// Whether this is a NAK with `code`.
    pub(crate) fn is_nak(&self, code: NakCode) -> bool {
        self.syndrome() == Some(Syndrome::Nak(code))
    }
}

/// The socket, and where the device it attacks listens.
#[derive(Debug)]
pub(crate) struct FakePeer {
    sock: UdpSocket,
    device: SocketAddr,
    victim_qpn: u32,
}

impl FakePeer {
    /// Bind on `ip` (any port) to attack the device at `device`.
    pub(crate) fn bind(ip: &str, device: SocketAddr) -> Self {
        let sock = UdpSocket::bind((ip, 0)).expect("binding the fake peer");
        Self {
            sock,
            device,
            victim_qpn: 0,
        }
    }

    /// What the victim's QP connects to: this socket as QP [`FAKE_QPN`] sending from
    /// [`FAKE_PSN`].
    pub(crate) fn endpoint(&self) -> QueuePairEndpoint {
        let addr = self.sock.local_addr().expect("fake peer address");
        QueuePairEndpoint {
            qpn: FAKE_QPN,
            psn: FAKE_PSN,
            gid: Gid::from_ip(addr.ip()),
            udp_port: addr.port(),
        }
    }

    /// Ask the kernel to queue up to `bytes` of datagrams for us (capped by rmem_max), so
    /// bursts of responses are not dropped before we read them.
    pub(crate) fn set_recv_buffer(&self, bytes: usize) {
        use std::os::fd::AsRawFd;
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: a live socket and a c_int option value of the right size.
        let r = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const v).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "SO_RCVBUF");
    }

    /// Aim the requests at this QP.
    pub(crate) fn target(&mut self, victim_qpn: u32) {
        self.victim_qpn = victim_qpn;
    }

    /// Send a request with opcode `op` and PSN `psn` (AckReq set) carrying `ext` and
    /// `payload`, with the ICRC the device expects from this socket.
    pub(crate) fn send(&self, op: Opcode, psn: u32, ext: ExtRepr, payload: &[u8]) {
        self.send_altered(op, psn, ext, payload, |_| {});
    }

    /// [`Self::send`], with the packet's bytes (its ICRC's four last, filled in after)
    /// altered by `alter` first: what no well-formed request has.
    pub(crate) fn send_altered(
        &self,
        op: Opcode,
        psn: u32,
        ext: ExtRepr,
        payload: &[u8],
        alter: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut bth = BthRepr::new(op, Qpn::from_wire(self.victim_qpn), Psn::new(psn));
        bth.ack_req = true;
        let repr = RoceRepr::new(bth, ext, payload.len());
        let mut data = vec![0u8; repr.buffer_len()];
        repr.emit_with_payload(payload, &mut data)
            .expect("a well-formed request");
        alter(&mut data);
        let from = self.sock.local_addr().expect("fake peer address");
        icrc::set_icrc_for_udp_socket(&UdpEndpoints::between(from, self.device), &mut data)
            .expect("room for the ICRC");
        self.sock.send_to(&data, self.device).expect("sending");
    }

    /// The next packet from the device, waiting at most `wait`.
    pub(crate) fn recv(&self, wait: Duration) -> Option<Reply> {
        self.sock
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))
            .expect("read timeout");
        let mut buf = vec![0u8; 65536];
        let (n, _) = self.sock.recv_from(&mut buf).ok()?;
        let packet = RocePacket::new_checked(&buf[..n]).expect("the device sends valid packets");
        let repr = RoceRepr::parse(&packet).expect("parsable");
        Some(Reply {
            repr,
            payload: packet.payload().to_vec(),
        })
    }

    /// Packets received until `done` says so, or none came for 5 s; at most `max`.
    pub(crate) fn recv_until(
        &self,
        max: usize,
        mut done: impl FnMut(&Reply) -> bool,
    ) -> Vec<Reply> {
        let mut out = Vec::new();
        for _ in 0..max {
            let Some(r) = self.recv(Duration::from_secs(5)) else {
                break;
            };
            let stop = done(&r);
            out.push(r);
            if stop {
                break;
            }
        }
        out
    }

    /// Throw away what arrives until `quiet` passes without a packet, at most `max`
    /// packets or 60 s; returns how many were thrown away.
    pub(crate) fn drain(&self, quiet: Duration, max: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        while n < max && Instant::now() < deadline && self.recv(quiet).is_some() {
            n += 1;
        }
        n
    }
}

/// A request's extended headers holding just a RETH.
pub(crate) fn reth(va: u64, rkey: u32, dma_len: u32) -> ExtRepr {
    ExtRepr {
        reth: Some(RethRepr { va, rkey, dma_len }),
        ..ExtRepr::default()
    }
}
