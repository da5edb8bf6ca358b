//! Queue pairs: a builder, the two-phase connect of rust-ibverbs (prepare, exchange
//! endpoints, handshake), posting and queries. Failed modifies are explained with the shared
//! QP state table.

use std::sync::Arc;

use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, MwType, QpAttr, QpAttrMask, QpBringup, QpCap, QpHandle,
    QpInitAttr, QpPeer, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, UdTarget,
};
use softroce_wire::{Gid, Mtu, Psn, Qpn};

use crate::backend::Backend;
use crate::context::{
    CompletionQueue, CqInner, MemoryRegion, MemoryWindow, PdInner, ProtectionDomain,
    SharedReceiveQueue, XrcDomain, XrcdInner,
};
use crate::error::{Error, Result};

/// What a peer needs to connect to a queue pair (exchange it out of band).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueuePairEndpoint {
    /// QP number.
    pub qpn: u32,
    /// First PSN it sends.
    pub psn: u32,
    /// Its RoCEv2 GID.
    pub gid: Gid,
    /// Its device's UDP port (4791 unless a private setup chose another).
    pub udp_port: u16,
}

impl std::fmt::Display for QueuePairEndpoint {
    /// `QPN:PSN:GID:UDP_PORT` in hex (GID as 32 digits), decimal port: a line to exchange
    /// out of band; [`str::parse`] reads it back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:06x}:{:06x}:", self.qpn, self.psn)?;
        for b in self.gid.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ":{}", self.udp_port)
    }
}

impl std::str::FromStr for QueuePairEndpoint {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let parts: Vec<&str> = s.trim().split(':').collect();
        let [qpn, psn, gid, port] = parts[..] else {
            return Err(format!("{s:?} is not QPN:PSN:GID:UDP_PORT"));
        };
        let hex32 = |what: &str, v: &str| {
            u32::from_str_radix(v, 16).map_err(|e| format!("{what} {v:?} in {s:?}: {e}"))
        };
        let gid = Gid::from_hex(gid)
            .ok_or_else(|| format!("GID {gid:?} in {s:?} is not 32 hex digits"))?;
        Ok(Self {
            qpn: hex32("QPN", qpn)?,
            psn: hex32("PSN", psn)?,
            gid,
            udp_port: port
                .parse()
                .map_err(|e| format!("UDP port {port:?} in {s:?}: {e}"))?,
        })
    }
}

/// Builds a QP: `pd.create_qp(&cq, &cq, QpType::Rc).caps(..).build()`.
#[derive(Debug)]
pub struct QueuePairBuilder<'a> {
    pd: &'a ProtectionDomain,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    srq: Option<&'a SharedReceiveQueue>,
    cap: QpCap,
    sq_sig_all: bool,
    atomic_write: bool,
    bringup: QpBringup,
}

impl ProtectionDomain {
    /// Start building a queue pair.
    pub fn create_qp<'a>(
        &'a self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        qp_type: QpType,
    ) -> QueuePairBuilder<'a> {
        QueuePairBuilder {
            pd: self,
            send_cq: Arc::clone(&send_cq.inner),
            recv_cq: Arc::clone(&recv_cq.inner),
            srq: None,
            cap: QpCap::new(64, 64).with_sges(4).with_inline(64),
            sq_sig_all: false,
            atomic_write: false,
            bringup: QpBringup::new(qp_type),
        }
    }
}

impl<'a> QueuePairBuilder<'a> {
    /// Queue capacities.
    pub fn caps(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }
    /// Receive from a shared receive queue.
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }
    /// Every send generates a completion.
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }
    /// An RC QP that can post [`WrOpcode::AtomicWrite`](softroce_emu::core::WrOpcode):
    /// on libibverbs it is created with `ibv_create_qp_ex` and
    /// `IBV_QP_EX_WITH_ATOMIC_WRITE`, which ATOMIC WRITE needs there
    /// ([`Backend::create_qp_atomic_write`]); the emulator needs nothing.
    pub fn atomic_write(mut self, on: bool) -> Self {
        self.atomic_write = on;
        self
    }
    /// Remote access the responder grants (RC/UC).
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.bringup.access = access;
        self
    }
    /// Path MTU (RC/UC).
    pub fn mtu(mut self, mtu: Mtu) -> Self {
        self.bringup.mtu = mtu;
        self
    }
    /// Local ACK timeout exponent, retry count and RNR retry count (RC).
    pub fn reliability(mut self, timeout: u8, retry_cnt: u8, rnr_retry: u8) -> Self {
        self.bringup.timeout = timeout;
        self.bringup.retry_cnt = retry_cnt;
        self.bringup.rnr_retry = rnr_retry;
        self
    }
    /// Q_Key (UD).
    pub fn qkey(mut self, qkey: u32) -> Self {
        self.bringup.qkey = qkey;
        self
    }

    /// Create the QP and move it to INIT (UD: to RTS, ready to send).
    pub fn build(self) -> Result<PreparedQueuePair> {
        let dev = &self.pd.pd.dev;
        let init = QpInitAttr {
            send_cq: self.send_cq.cq,
            recv_cq: self.recv_cq.cq,
            srq: self.srq.map(|s| s.srq),
            cap: self.cap,
            qp_type: self.bringup.qp_type,
            sq_sig_all: self.sq_sig_all,
            qp_context: 0,
        };
        let (qp, qpn) = if self.atomic_write {
            dev.create_qp_atomic_write(self.pd.pd.pd, init)?
        } else {
            dev.create_qp(self.pd.pd.pd, init)?
        };
        let inner = QpInner {
            dev: Arc::clone(dev),
            pd: Some(Arc::clone(&self.pd.pd)),
            _xrcd: None,
            qp,
            _cqs: Some((self.send_cq, self.recv_cq)),
            ahs: std::sync::Mutex::new(Vec::new()),
        };
        PreparedQueuePair::new(inner, qpn, self.bringup)
    }
}

impl PreparedQueuePair {
    /// A created QP (`inner`) numbered `qpn`, moved to INIT with its first PSN chosen.
    fn new(inner: QpInner, qpn: Qpn, bringup: QpBringup) -> Result<Self> {
        let dev = Arc::clone(&inner.dev);
        move_to_init(&bringup, dev.as_ref(), inner.qp)?;
        // A random initial PSN (IBTA 9.7.1 asks for one): derived from the address and QPN,
        // anyone who can send to the port could inject a packet the QP accepts in sequence.
        // A simulated fabric draws it from its seed instead, so a run replays exactly.
        let psn = dev
            .initial_psn(qpn)
            .map_or_else(initial_psn, |p| Psn::new(p).value());
        let gid = dev.query_gid(1, dev.sgid_index())?;
        let port = dev.udp_port();
        Ok(Self {
            inner,
            endpoint: QueuePairEndpoint {
                qpn: qpn.value(),
                psn,
                gid,
                udp_port: port,
            },
            bringup,
        })
    }
}

/// A QP's first PSN: 24 bits of OS entropy.
fn initial_psn() -> u32 {
    Psn::new(softroce_emu::driver::entropy::random_u64() as u32).value()
}

#[derive(Debug)]
struct QpInner {
    dev: Arc<dyn Backend>,
    /// `None` for an XRC target QP, which has no PD.
    pd: Option<Arc<PdInner>>,
    /// An XRC target QP's domain, kept open while the QP is.
    _xrcd: Option<Arc<XrcdInner>>,
    qp: QpHandle,
    _cqs: Option<(Arc<CqInner>, Arc<CqInner>)>,
    /// Address handles made by `ud_target`, destroyed with the QP that sends through them.
    ahs: std::sync::Mutex<Vec<AhHandle>>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let _ = self.dev.destroy_qp(self.qp);
        let ahs = std::mem::take(self.ahs.get_mut().unwrap_or_else(|e| e.into_inner()));
        for ah in ahs {
            let _ = self.dev.destroy_ah(ah);
        }
    }
}

/// RESET -> INIT.
fn move_to_init(bringup: &QpBringup, dev: &dyn Backend, qp: QpHandle) -> Result<()> {
    let (attr, mask) = bringup.init();
    dev.modify_qp(qp, &attr, mask)
}

/// INIT -> RTR -> RTS towards `remote`, sending from `local_psn`.
fn move_to_rts(
    bringup: &QpBringup,
    dev: &dyn Backend,
    qp: QpHandle,
    local_psn: u32,
    remote: QueuePairEndpoint,
) -> Result<()> {
    let mut av = AhAttr::new(remote.gid, dev.sgid_index() as u8);
    av.udp_port = remote.udp_port;
    let peer = QpPeer {
        qpn: remote.qpn,
        psn: Psn::new(remote.psn),
        av,
    };
    for (attr, mask) in [bringup.rtr(&peer), bringup.rts(Psn::new(local_psn))] {
        dev.modify_qp(qp, &attr, mask)?;
    }
    Ok(())
}

/// What a connection manager chose for a QP's RTR and RTS (rdma_cm's `rdma_init_qp_attr`
/// from the REQ or REP).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CmTransition {
    /// The peer's QP, device address and port (its `psn` is not used: see below).
    pub(crate) remote: QueuePairEndpoint,
    /// The first PSN we receive and the first we send. The kernel's CM (and so rdma_cm)
    /// sends the active side's receive PSN in the REQ and the passive side's in the REP:
    /// each side sends from the PSN the other one advertised.
    pub(crate) rq_psn: Psn,
    pub(crate) sq_psn: Psn,
    pub(crate) mtu: Mtu,
    /// `max_dest_rd_atomic`.
    pub(crate) responder_resources: u8,
    /// `max_rd_atomic`.
    pub(crate) initiator_depth: u8,
    /// Local ACK timeout exponent.
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
}

/// A QP in INIT, waiting for its peer's endpoint.
#[derive(Debug)]
pub struct PreparedQueuePair {
    inner: QpInner,
    endpoint: QueuePairEndpoint,
    /// How it was brought up, kept for reconnecting.
    bringup: QpBringup,
}

impl PreparedQueuePair {
    /// What the peer needs to connect to this QP.
    pub fn endpoint(&self) -> QueuePairEndpoint {
        self.endpoint
    }

    /// Post receives before connecting (as rdma-core's pingpong does), so none of the
    /// peer's first messages meet an empty queue; `Error::bad_wr` on refusal.
    ///
    /// # Safety
    /// As [`QueuePair::post_receive`], for every request.
    pub unsafe fn post_receives(&self, wrs: &[RecvWr]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.dev.post_recv(self.inner.qp, wrs) }
    }

    /// Post one receive into `sges` before connecting.
    ///
    /// # Safety
    /// As [`QueuePair::post_receive`].
    pub unsafe fn post_receive(&self, sges: &[Sge], wr_id: u64) -> Result<()> {
        let wr = RecvWr {
            wr_id,
            sg_list: sges.into(),
        };
        // SAFETY: forwarded contract.
        unsafe { self.post_receives(&[wr]) }
    }

    /// The backend and this QP's handle in it (for a connection manager that moves the QP
    /// with attributes of its own, librdmacm's `rdma_init_qp_attr`).
    #[cfg_attr(not(feature = "ibverbs"), allow(dead_code))]
    pub(crate) fn backend_handle(&self) -> (&Arc<dyn Backend>, QpHandle) {
        (&self.inner.dev, self.inner.qp)
    }

    /// The QP once a connection manager moved it to RTS itself, sending from `sq_psn`.
    #[cfg_attr(not(feature = "ibverbs"), allow(dead_code))]
    pub(crate) fn into_connected(self, sq_psn: u32) -> QueuePair {
        QueuePair {
            inner: self.inner,
            endpoint: QueuePairEndpoint {
                psn: sq_psn,
                ..self.endpoint
            },
            bringup: self.bringup,
        }
    }

    /// INIT → RTR → RTS with what a connection manager negotiated.
    pub(crate) fn handshake_cm(self, t: &CmTransition) -> Result<QueuePair> {
        let dev = Arc::clone(&self.inner.dev);
        let mut bringup = self.bringup;
        bringup.mtu = t.mtu;
        bringup.timeout = t.timeout;
        bringup.retry_cnt = t.retry_cnt;
        bringup.rnr_retry = t.rnr_retry;
        let mut av = AhAttr::new(t.remote.gid, dev.sgid_index() as u8);
        av.udp_port = t.remote.udp_port;
        let peer = QpPeer {
            qpn: t.remote.qpn,
            psn: t.rq_psn,
            av,
        };
        let (mut rtr, rtr_mask) = bringup.rtr(&peer);
        rtr.max_dest_rd_atomic = t.responder_resources;
        let (mut rts, rts_mask) = bringup.rts(t.sq_psn);
        rts.max_rd_atomic = t.initiator_depth;
        dev.modify_qp(self.inner.qp, &rtr, rtr_mask)?;
        dev.modify_qp(self.inner.qp, &rts, rts_mask)?;
        Ok(QueuePair {
            inner: self.inner,
            endpoint: QueuePairEndpoint {
                psn: t.sq_psn.value(),
                ..self.endpoint
            },
            bringup,
        })
    }

    /// Connect to `remote` (RC/UC: INIT → RTR → RTS; UD: RTR → RTS, the peer is chosen
    /// per send).
    pub fn handshake(self, remote: QueuePairEndpoint) -> Result<QueuePair> {
        let dev = Arc::clone(&self.inner.dev);
        move_to_rts(
            &self.bringup,
            dev.as_ref(),
            self.inner.qp,
            self.endpoint.psn,
            remote,
        )?;
        Ok(QueuePair {
            inner: self.inner,
            endpoint: self.endpoint,
            bringup: self.bringup,
        })
    }
}

/// A connected (or UD-ready) queue pair.
#[derive(Debug)]
pub struct QueuePair {
    inner: QpInner,
    endpoint: QueuePairEndpoint,
    /// How it was brought up, kept for reconnecting.
    bringup: QpBringup,
}

impl QueuePair {
    /// This QP's endpoint.
    pub fn endpoint(&self) -> QueuePairEndpoint {
        self.endpoint
    }

    /// The backend and this QP's handle in it (for error injection).
    pub(crate) fn backend_handle(&self) -> (&Arc<dyn Backend>, QpHandle) {
        (&self.inner.dev, self.inner.qp)
    }

    /// Recover from ERR (or start over): RESET, then INIT, RTR and RTS towards `remote`
    /// with the parameters the QP was built with, sending from its original PSN. Both ends
    /// must do it (the peer's expected PSN starts over too). Outstanding work requests are
    /// gone (flushed before, or discarded by RESET).
    pub fn reconnect(&self, remote: QueuePairEndpoint) -> Result<()> {
        let dev = self.inner.dev.as_ref();
        let reset = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        dev.modify_qp(self.inner.qp, &reset, QpAttrMask::STATE)?;
        move_to_init(&self.bringup, dev, self.inner.qp)?;
        move_to_rts(&self.bringup, dev, self.inner.qp, self.endpoint.psn, remote)
    }

    /// Move the QP to ERR (outstanding work requests complete flushed), as rdma_cm does
    /// on a disconnect.
    pub(crate) fn to_error(&self) -> Result<()> {
        let err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.inner
            .dev
            .modify_qp(self.inner.qp, &err, QpAttrMask::STATE)
    }

    /// The handle value async events name this QP by (`EventElement::Qp`).
    pub fn raw_handle(&self) -> u64 {
        self.inner.qp.to_raw()
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.endpoint.qpn
    }

    /// `ibv_query_qp`: the current state.
    pub fn state(&self) -> Result<QpState> {
        self.inner.dev.qp_state(self.inner.qp)
    }

    /// `ibv_modify_qp`; a refusal names the offending attribute bits (state table).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        self.inner.dev.modify_qp(self.inner.qp, attr, mask)
    }

    /// `ibv_post_send` of several work requests; a refusal reports the index of the first
    /// rejected one (`bad_wr`), the ones before it were posted.
    ///
    /// # Safety
    /// Every memory region referenced by the work requests must stay alive, and its buffer
    /// must not be reused by the application, until the work request's completion has been
    /// polled (READ and atomic results land there at any time before that). For
    /// `IBV_SEND_INLINE`, the scatter/gather addresses must be readable during this call.
    pub unsafe fn post_send(&self, wrs: &[SendWr]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.dev.post_send(self.inner.qp, wrs) }
    }

    /// `ibv_bind_mw`: bind type 1 window `mw` to `len` bytes of `mr` from byte `offset` with
    /// `access` (remote rights, and `ZERO_BASED`; `len` 0 unbinds, which is how a type 1
    /// window is invalidated). The bind is posted to this QP's send queue and completes
    /// there in order (`wr_id`, `send_flags`); the window's new R_Key is returned and kept in
    /// `mw` (ibv_bind_mw(3)). A type 2 window is EINVAL: post [`MemoryWindow::bind_wr`].
    ///
    /// # Safety
    /// Once bound, a peer may read or write the window's range of `mr` at any time until
    /// the window is unbound or deallocated: the application must treat it as posted
    /// memory, as for [`QueuePair::post_send`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn bind_mw(
        &self,
        mw: &MemoryWindow,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        access: AccessFlags,
        wr_id: u64,
        send_flags: SendFlags,
    ) -> Result<u32> {
        if mw.mw_type() != MwType::Type1 {
            return Err(Error::Invalid {
                what: "bind_mw",
                reason: "a type 2 window is bound by posting IBV_WR_BIND_MW (ibv_bind_mw(3))"
                    .into(),
            });
        }
        let rkey = MemoryWindow::next_rkey(mw.rkey());
        let bind = mw.bind_of(mr, offset, len, access, rkey);
        let rkey = self
            .inner
            .dev
            .bind_mw(self.inner.qp, wr_id, send_flags, bind)?;
        mw.set_rkey(rkey);
        Ok(rkey)
    }

    /// Post one receive into `sges`.
    ///
    /// # Safety
    /// The memory regions behind `sges` must stay alive and unused by the application until
    /// the receive's completion has been polled.
    pub unsafe fn post_receive(&self, sges: &[Sge], wr_id: u64) -> Result<()> {
        let wr = RecvWr {
            wr_id,
            sg_list: sges.into(),
        };
        // SAFETY: forwarded contract.
        unsafe { self.inner.dev.post_recv(self.inner.qp, &[wr]) }
    }

    /// `ibv_post_recv` of several receive work requests; a refusal reports the index of the
    /// first rejected one (`Error::bad_wr`), the ones before it were posted.
    ///
    /// # Safety
    /// As [`QueuePair::post_receive`], for every request.
    pub unsafe fn post_receives(&self, wrs: &[RecvWr]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.dev.post_recv(self.inner.qp, wrs) }
    }

    /// `ibv_attach_mcast`: this UD QP receives what is sent to the multicast group `mgid`
    /// (an IPv4-mapped multicast address such as `::ffff:239.1.2.3`, or an IPv6 one); see
    /// [`QueuePair::multicast_target`] for sending to it. A QP must be detached before it is
    /// destroyed (dropping an attached QP fails, as `ibv_destroy_qp` does with EBUSY).
    pub fn attach_mcast(&self, mgid: Gid) -> Result<()> {
        self.inner.dev.attach_mcast(self.inner.qp, mgid)
    }

    /// `ibv_detach_mcast`.
    pub fn detach_mcast(&self, mgid: Gid) -> Result<()> {
        self.inner.dev.detach_mcast(self.inner.qp, mgid)
    }

    /// A UD destination that is the multicast group `mgid`: its packets go to every QP
    /// attached to the group (QPN 0xFFFFFF), which takes those with its Q_Key `qkey`.
    pub fn multicast_target(&self, mgid: Gid, qkey: u32) -> Result<UdTarget> {
        let udp_port = self.inner.dev.udp_port();
        self.ud_target(
            QueuePairEndpoint {
                qpn: softroce_emu::core::MULTICAST_QPN,
                psn: 0,
                gid: mgid,
                udp_port,
            },
            qkey,
        )
    }

    /// A UD destination: an address handle to `remote` plus its QPN and Q_Key, for
    /// `SendWr::ud`.
    pub fn ud_target(&self, remote: QueuePairEndpoint, qkey: u32) -> Result<UdTarget> {
        let dev = &self.inner.dev;
        let sgid_index = dev.sgid_index() as u8;
        let mut av = AhAttr::new(remote.gid, sgid_index);
        av.udp_port = remote.udp_port;
        self.ud_target_with(av, remote.qpn, qkey)
    }

    /// A UD destination through an address handle made from `av` on this QP's PD (kept
    /// until the QP goes).
    pub(crate) fn ud_target_with(&self, av: AhAttr, qpn: u32, qkey: u32) -> Result<UdTarget> {
        let Some(pd) = &self.inner.pd else {
            return Err(Error::Invalid {
                what: "ud_target",
                reason: "an XRC target QP has no PD to make an address handle on".into(),
            });
        };
        let ah: AhHandle = self.inner.dev.create_ah(pd.pd, av)?;
        self.inner
            .ahs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ah);
        Ok(UdTarget {
            ah,
            remote_qpn: qpn,
            remote_qkey: qkey,
        })
    }

    /// The Q_Key the QP was built with (UD: the one it receives with).
    pub(crate) fn qkey(&self) -> u32 {
        self.bringup.qkey
    }

    /// The QP's transport type.
    pub(crate) fn qp_type(&self) -> QpType {
        self.bringup.qp_type
    }
}

impl XrcDomain {
    /// A handle to target QP `qp` of this domain: no PD, CQs or queues of its own; it keeps
    /// the domain open.
    fn target_qp(&self, qp: QpHandle) -> QpInner {
        QpInner {
            dev: Arc::clone(&self.inner.dev),
            pd: None,
            _xrcd: Some(Arc::clone(&self.inner)),
            qp,
            _cqs: None,
            ahs: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// `ibv_create_qp_ex` of an XRC target QP (`IBV_QPT_XRC_RECV`) in this domain, moved to
    /// INIT: it has no PD, CQs or queues of its own; each request it receives is served by
    /// the XRC SRQ of this domain the request names, completing on that SRQ's CQ. Connect
    /// it to the initiator with [`PreparedQueuePair::handshake`].
    pub fn create_target_qp(&self) -> Result<PreparedQueuePair> {
        let (qp, qpn) = self.inner.dev.create_xrc_recv_qp(self.inner.xrcd)?;
        PreparedQueuePair::new(self.target_qp(qp), qpn, QpBringup::new(QpType::XrcRecv))
    }

    /// `ibv_open_qp`: another handle to this domain's XRC target QP `qpn` (made by
    /// [`XrcDomain::create_target_qp`], here or through another handle to the domain). The
    /// QP lives until its last handle is dropped. The handle's endpoint carries PSN 0:
    /// the PSNs are the creator's business.
    pub fn open_qp(&self, qpn: u32) -> Result<QueuePair> {
        let dev = &self.inner.dev;
        let qp = dev.open_xrc_recv_qp(self.inner.xrcd, qpn)?;
        let inner = self.target_qp(qp);
        Ok(QueuePair {
            inner,
            endpoint: QueuePairEndpoint {
                qpn,
                psn: 0,
                gid: dev.query_gid(1, dev.sgid_index())?,
                udp_port: dev.udp_port(),
            },
            bringup: QpBringup::new(QpType::XrcRecv),
        })
    }
}
