//! UD address resolution, rdma_cm's `RDMA_PS_UDP`: a server listens on an address and UDP
//! port and answers each request with a UD QP of its own (a SIDR_REP naming its QPN and
//! Q_Key), a client resolves the address and port to that QP and gets an address handle
//! for it. No connection is made: the exchange ends with the answer.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use softroce_emu::cm::{CmEvent, ConnId, SIDR_SUCCESS, SidrParams, SidrReply};
use softroce_emu::cm::{cma_sidr_private_data, split_cma_private_data};
use softroce_emu::core::{QpType, UdTarget};
use softroce_wire::cm::CmaAddrs;
use softroce_wire::{Gid, PortSpace, Qpn};

use super::{CmFailure, ConnectOptions, ConnectionManager, cm_error, lock};
use crate::error::{Error, Result};
use crate::qp::{QueuePair, QueuePairEndpoint};

/// The Q_Key rdma_cm gives the UD QPs of `RDMA_PS_UDP` (`RDMA_UDP_QKEY`), which its
/// SIDR_REP names: build UD QPs with it (`.qkey(RDMA_UDP_QKEY)`) to talk to rdma_cm peers.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Application private data a SIDR_REQ carries after rdma_cm's header.
const SIDR_REQ_USER_DATA: usize = 180;

impl ConnectionManager {
    /// `rdma_bind_addr` + `rdma_listen` in the UDP port space (`RDMA_PS_UDP`): take the
    /// UD address resolution requests for `addr`'s port (its address must be the
    /// device's, or unspecified) and answer each with a UD QP ([`UdRequest::accept`]).
    pub fn listen_ud(&self, addr: SocketAddr) -> Result<UdListener> {
        let (service_id, addr) = self.listen_in(PortSpace::Udp, addr)?;
        Ok(UdListener {
            cm: self.clone(),
            service_id,
            addr,
        })
    }

    /// `rdma_connect` on an id of `RDMA_PS_UDP`: resolve the UD listener at `to` (IP
    /// address and UDP-space port) to its QP with a SIDR_REQ carrying
    /// `options.private_data` (at most 180 bytes), waiting at most `options.timeout` for
    /// the answer. The [`UdPeer`] names the listener's QPN and Q_Key and holds an address
    /// handle to it made on `qp`'s PD (for `SendWr::ud` on `qp`, a UD QP). A refusal is
    /// [`CmFailure::UdRejected`] (status 1: nobody listens on the port; 2: the
    /// application rejected), no answer [`CmFailure::TimedOut`] or, once every retry went
    /// unanswered, [`CmFailure::Unreachable`] ([`Error::ConnectFailed`]). The other fields
    /// of `options` do not apply, `device_port` aside.
    ///
    /// On a simulated fabric the listener's side must answer while this waits, so a
    /// single-threaded test uses [`ConnectionManager::start_resolve_ud`] instead.
    pub fn resolve_ud(
        &self,
        qp: &QueuePair,
        to: SocketAddr,
        options: &ConnectOptions,
    ) -> Result<UdPeer> {
        self.start_resolve_ud(qp, to, options)?.wait()
    }

    /// The first half of [`ConnectionManager::resolve_ud`]: send the SIDR_REQ and return
    /// at once. [`Resolving::wait`] (or `Resolving::finish` with the `tokio` feature)
    /// waits for the answer; dropping the [`Resolving`] abandons the attempt.
    pub fn start_resolve_ud<'q>(
        &self,
        qp: &'q QueuePair,
        to: SocketAddr,
        options: &ConnectOptions,
    ) -> Result<Resolving<'q>> {
        if qp.qp_type() != QpType::Ud {
            return Err(Error::Invalid {
                what: "resolve_ud",
                reason: format!(
                    "QP {:#x} is {:?}: UD address resolution is for UD QPs",
                    qp.qpn(),
                    qp.qp_type()
                ),
            });
        }
        if options.private_data.len() > SIDR_REQ_USER_DATA {
            return Err(Error::Invalid {
                what: "resolve_ud private data",
                reason: format!(
                    "{} bytes (at most {SIDR_REQ_USER_DATA})",
                    options.private_data.len()
                ),
            });
        }
        let (ip, hdr) = self.cma_hdr("resolve_ud address", to)?;
        let shared = &self.shared;
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = shared.dev.hardware() {
            hw.check_ud_qp("resolve_ud", qp)?;
            let id = {
                // Filed before any event for it can be taken from the channel.
                let mut d = lock(&shared.dispatch);
                let id = hw.resolve_ud(ip, to, options.private_data.clone(), options.timeout)?;
                d.mailboxes.insert(id, VecDeque::new());
                id
            };
            return Ok(self.resolving(id, qp, to, softroce_wire::ROCE_V2_PORT, options));
        }
        let _ = ip;
        let private_data = cma_sidr_private_data(&hdr, &options.private_data)
            .map_err(|e| cm_error("resolve_ud", e))?;
        let params = SidrParams {
            remote_gid: Gid::ZERO,
            service_id: PortSpace::Udp.service_id(to.port()),
            private_data,
        };
        let device_port = options
            .device_port
            .unwrap_or_else(|| self.ctx.backend().udp_port());
        let id = {
            // Filed before any event for it can be taken from the device.
            let mut d = lock(&shared.dispatch);
            let id = shared
                .dev
                .sidr_resolve(SocketAddr::new(to.ip(), device_port), params)
                .map_err(|e| cm_error("resolve_ud", e))?;
            d.mailboxes.insert(id, VecDeque::new());
            id
        };
        Ok(self.resolving(id, qp, to, device_port, options))
    }

    fn resolving<'q>(
        &self,
        id: ConnId,
        qp: &'q QueuePair,
        to: SocketAddr,
        device_port: u16,
        options: &ConnectOptions,
    ) -> Resolving<'q> {
        Resolving {
            cm: self.clone(),
            id: Some(id),
            qp,
            to,
            device_port,
            timeout: options.timeout,
            started: self.shared.now(),
        }
    }
}

/// A UD address resolution on its way (the SIDR_REQ sent, no answer taken yet): see
/// [`ConnectionManager::start_resolve_ud`].
#[derive(Debug)]
pub struct Resolving<'q> {
    pub(super) cm: ConnectionManager,
    /// `None` once concluded.
    id: Option<ConnId>,
    qp: &'q QueuePair,
    to: SocketAddr,
    device_port: u16,
    timeout: Duration,
    /// When the SIDR_REQ left, in the device's time.
    started: Duration,
}

impl Resolving<'_> {
    /// Where the request goes.
    pub fn peer_addr(&self) -> SocketAddr {
        self.to
    }

    pub(super) fn time_left(&self) -> Duration {
        let spent = self.cm.shared.now().saturating_sub(self.started);
        self.timeout.saturating_sub(spent)
    }

    pub(super) fn res_id(&self) -> ConnId {
        match self.id {
            Some(id) => id,
            None => unreachable!("a resolution is concluded once, by value"),
        }
    }

    /// Wait for the answer (at most what is left of `ConnectOptions::timeout`), then do
    /// as [`ConnectionManager::resolve_ud`] does.
    pub fn wait(self) -> Result<UdPeer> {
        let (id, left) = (self.res_id(), self.time_left());
        let ev = self.cm.shared.next_event(id, left);
        self.conclude(ev)
    }

    /// Conclude with the resolution's event (`None`: the timeout passed).
    pub(super) fn conclude(mut self, ev: Option<CmEvent>) -> Result<UdPeer> {
        let id = self.res_id();
        let to = self.to;
        // A step of librdmacm's resolution that failed says which and why.
        #[cfg(feature = "ibverbs")]
        if let (Some(hw), Some(CmEvent::Unreachable { .. })) = (self.cm.shared.dev.hardware(), &ev)
        {
            if let Some(e) = hw.failure(id) {
                return Err(e);
            }
        }
        let fail = |failure: CmFailure| Err(Error::ConnectFailed { to, failure });
        let (qpn, qkey, private_data) = match ev {
            Some(CmEvent::SidrResponse {
                status: SIDR_SUCCESS,
                qpn,
                qkey,
                private_data,
                ..
            }) => (qpn, qkey, private_data),
            Some(CmEvent::SidrResponse {
                status,
                private_data,
                ..
            }) => {
                return fail(CmFailure::UdRejected {
                    status,
                    private_data,
                });
            }
            Some(CmEvent::SidrUnreachable { .. } | CmEvent::Unreachable { .. }) => {
                return fail(CmFailure::Unreachable);
            }
            Some(_) => return fail(CmFailure::Disconnected),
            None => return fail(CmFailure::TimedOut(self.timeout)),
        };
        let endpoint = QueuePairEndpoint {
            qpn: qpn.value(),
            psn: 0,
            gid: Gid::from_ip(to.ip()),
            udp_port: self.device_port,
        };
        // librdmacm's address vector (its GID index, hop limit, traffic class) on the
        // libibverbs backend; ours towards the peer's address elsewhere.
        #[cfg(feature = "ibverbs")]
        let av = self
            .cm
            .shared
            .dev
            .hardware()
            .and_then(|hw| hw.take_ud_ah(id));
        #[cfg(not(feature = "ibverbs"))]
        let av: Option<softroce_emu::core::AhAttr> = None;
        let target = match av {
            Some(av) => self.qp.ud_target_with(av, endpoint.qpn, qkey)?,
            None => self.qp.ud_target(endpoint, qkey)?,
        };
        // The exchange is over: the id goes (on librdmacm, rdma_destroy_id).
        self.id = None;
        self.cm.shared.forget(id);
        Ok(UdPeer {
            addr: to,
            endpoint,
            qkey,
            target,
            private_data,
        })
    }
}

impl Drop for Resolving<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.cm.shared.forget(id);
        }
    }
}

/// A resolved UD peer (`RDMA_CM_EVENT_ESTABLISHED` of a UDP id, its `param.ud`): the
/// listener's QP and an address handle to it.
#[derive(Debug, Clone)]
pub struct UdPeer {
    addr: SocketAddr,
    endpoint: QueuePairEndpoint,
    qkey: u32,
    target: UdTarget,
    private_data: Vec<u8>,
}

impl UdPeer {
    /// The address and port resolved.
    pub fn peer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The peer's UD QP number.
    pub fn qpn(&self) -> u32 {
        self.endpoint.qpn
    }

    /// The peer QP's Q_Key ([`RDMA_UDP_QKEY`] for rdma_cm peers).
    pub fn qkey(&self) -> u32 {
        self.qkey
    }

    /// The peer's QP as an endpoint (its QPN, its device's GID and UDP port).
    pub fn endpoint(&self) -> QueuePairEndpoint {
        self.endpoint
    }

    /// The destination for `SendWr::ud` on the QP the resolution was made with: an address
    /// handle (destroyed with that QP), the peer's QPN and Q_Key.
    pub fn target(&self) -> UdTarget {
        self.target
    }

    /// The SIDR_REP's private data (136 bytes, zero padded).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }
}

/// A UD listening port (`rdma_listen` on an id of `RDMA_PS_UDP`); stops listening when
/// dropped, refusing the requests not taken.
#[derive(Debug)]
pub struct UdListener {
    pub(super) cm: ConnectionManager,
    pub(super) service_id: u64,
    addr: SocketAddr,
}

impl UdListener {
    /// The address and port listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next UD address resolution request (`RDMA_CM_EVENT_CONNECT_REQUEST` on a UDP
    /// id), waiting up to `timeout`.
    pub fn get_request(&self, timeout: Duration) -> Result<UdRequest> {
        let service = self.service_id;
        let ev = self
            .cm
            .shared
            .wait(timeout, |d| d.listeners.get_mut(&service)?.pop_front())
            .ok_or_else(|| Error::Cm {
                what: "get_request",
                reason: format!(
                    "no UD address resolution request for {} within {timeout:?}",
                    self.addr
                ),
                errno: libc::ETIMEDOUT,
            })?;
        Ok(self.request(ev))
    }

    /// The [`UdRequest`] for a request event filed with this listener.
    pub(super) fn request(&self, ev: CmEvent) -> UdRequest {
        let CmEvent::SidrRequest {
            id,
            remote_gid,
            private_data,
            ..
        } = ev
        else {
            unreachable!("only SIDR requests are filed with UD listeners")
        };
        let (peer_addr, user_data) = match split_cma_private_data(&private_data) {
            Some((hdr, user)) => {
                let ip = match hdr.addrs {
                    CmaAddrs::V4 { src, .. } => IpAddr::V4(src),
                    CmaAddrs::V6 { src, .. } => IpAddr::V6(src),
                };
                (SocketAddr::new(ip, hdr.src_port), user.to_vec())
            }
            // Not rdma_cm (a bare IB CM peer): the GID's address, the whole private data.
            None => (SocketAddr::new(remote_gid.to_ip(), 0), private_data),
        };
        UdRequest {
            cm: self.cm.clone(),
            id: Some(id),
            peer_addr,
            private_data: user_data,
        }
    }
}

impl Drop for UdListener {
    fn drop(&mut self) {
        self.cm.stop_listening(self.service_id);
    }
}

/// A UD address resolution request: answer it with a UD QP ([`UdRequest::accept`]) or
/// refuse it ([`UdRequest::reject`]); dropping it refuses it.
#[derive(Debug)]
pub struct UdRequest {
    cm: ConnectionManager,
    id: Option<ConnId>,
    peer_addr: SocketAddr,
    private_data: Vec<u8>,
}

impl UdRequest {
    /// The requester's address and source port (from rdma_cm's header).
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// The requester's private data (after rdma_cm's header; the wire carries no length,
    /// so it is zero padded to 180 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// `rdma_accept` of a UDP id: a SIDR_REP naming `qp` (a UD QP of this context) and its
    /// Q_Key, with `private_data` (at most 136 bytes). Nothing more follows: the requester
    /// sends to `qp` from then on. On the libibverbs backend librdmacm names
    /// [`RDMA_UDP_QKEY`], so `qp` must have been built with it.
    pub fn accept(mut self, qp: &QueuePair, private_data: &[u8]) -> Result<()> {
        if qp.qp_type() != QpType::Ud {
            return Err(Error::Invalid {
                what: "accept",
                reason: format!(
                    "QP {:#x} is {:?}: a UD address resolution is answered with a UD QP",
                    qp.qpn(),
                    qp.qp_type()
                ),
            });
        }
        let Some(id) = self.id.take() else {
            unreachable!("a request is answered once")
        };
        let shared = Arc::clone(&self.cm.shared);
        #[cfg(feature = "ibverbs")]
        if let Some(hw) = shared.dev.hardware() {
            let checked = hw.check_ud_qp("accept", qp).and_then(|()| {
                if qp.qkey() == RDMA_UDP_QKEY {
                    return Ok(());
                }
                Err(Error::Invalid {
                    what: "accept",
                    reason: format!(
                        "QP {:#x} has Q_Key {:#x}, but librdmacm answers with RDMA_UDP_QKEY \
                         ({RDMA_UDP_QKEY:#x}): build it with .qkey(RDMA_UDP_QKEY)",
                        qp.qpn(),
                        qp.qkey()
                    ),
                })
            });
            if let Err(e) = checked {
                let _ = hw.reject(id, &[]);
                return Err(e);
            }
            return hw.accept_ud(id, qp.qpn(), private_data);
        }
        let reply = SidrReply {
            status: SIDR_SUCCESS,
            qpn: Qpn::from_wire(qp.qpn()),
            qkey: qp.qkey(),
            private_data: private_data.to_vec(),
        };
        shared
            .dev
            .with_cm(|cm, _| cm.sidr_reply(id, reply))
            .map_err(|e| {
                // Refused (too much private data): the requester is told.
                let _ = shared.dev.reject_ud(id, &[]);
                cm_error("accept", e)
            })
    }

    /// `rdma_reject` of a UDP id: a SIDR_REP with status reject (2) and `private_data`
    /// (at most 136 bytes): the requester's resolution fails with
    /// [`CmFailure::UdRejected`] carrying it.
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let Some(id) = self.id.take() else {
            unreachable!("a request is answered once")
        };
        let r = self.cm.shared.dev.reject_ud(id, private_data);
        if r.is_err() {
            // Refused (too much private data): the requester is still told.
            let _ = self.cm.shared.dev.reject_ud(id, &[]);
        }
        r
    }
}

impl Drop for UdRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.cm.shared.dev.reject_ud(id, &[]);
        }
    }
}
