//! Datagram rsockets (rsocket(7), `SOCK_DGRAM`): UDP semantics over UD queue pairs, with
//! rdma-core's wire protocol (rsocket.c's ds_* functions and its UDP service thread), so
//! they talk to rdma-core's own datagram rsockets (`udpong`).
//!
//! Facts of the protocol this follows:
//!
//! - Every datagram rsocket owns a real UDP socket (its socket number is that socket's fd),
//!   bound where the rsocket is bound. It carries only rsockets' address exchange: a
//!   `struct ds_udp_header` (16 bytes for IPv4, 28 for IPv6: tag 0x55555555 big-endian,
//!   version 4/6, op, header length, a reserved byte, the sender's UD QPN (24 bits,
//!   big-endian), the sender's IP address), followed by the datagram for op DATA (0), or
//!   nothing for op CTRL (7).
//! - A datagram to a destination whose QPN is not yet known goes over UDP (op DATA). Its
//!   receiver finds, or makes, the UD QP of its address that the sender's address routes
//!   from, answers with op CTRL over UDP (announcing that QP's number), makes an address
//!   handle towards the sender (rdma_resolve_addr and rdma_resolve_route, then the path
//!   record's GRH fields), and forwards the datagram to itself through its own UD QP, where
//!   the application reads it as any other. Op CTRL only makes the address handle.
//! - Datagrams to a destination with an address handle go as UD SENDs (Q_Key RDMA_UDP_QKEY)
//!   of a `struct ds_header` (8 bytes for IPv4: version, header length, source port, IPv4
//!   address; 24 for IPv6: version, length, port, flow info, IPv6 address; ports and
//!   addresses in network order) naming the sender's address, then the data. A message is
//!   at most RS_SNDLOWAT (2048) bytes with its header, and one path MTU.
//! - Each UD QP belongs to one local address (the cm_id is bound there, in RDMA_PS_UDP, at
//!   the UDP socket's port); receive buffers are 2048 bytes after a 40-byte GRH area.
//!
//! Differences, none on the wire: the address handle to this QP itself (where forwarded
//! datagrams go) has a GRH (rdma-core's has none, which a RoCE port refuses); receives from
//! a QP this socket never heard of (in a UDP header) are dropped; an unbound socket that
//! sends towards a loopback address takes its device's address as source (softroce's devices
//! live on 127.x addresses, where the kernel's routing picks 127.0.0.1).

use core::ffi::{c_int, c_void};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use libc::{pollfd, sockaddr, socklen_t};
use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::{
    IBV_ACCESS_LOCAL_WRITE, IBV_QPT_UD, IBV_SEND_INLINE, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR,
    IBV_WR_SEND, ibv_ah, ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_mr,
    ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_init_attr, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc,
};

use crate::rsocket::{
    Buffer, QP_MAX_SIZE, RDMA_INLINE, RDMA_RQSIZE, RDMA_SQSIZE, RESOLVE_TIMEOUT_MS, Res, SNDLOWAT,
    SOL_RDMA, arm_cq, check, cm, defaults, errno, fcntl_flags, poll_cq, post_recv_wr, post_send_wr,
    read_int, set_nonblocking, verbs,
};

// ---- protocol constants (rdma-core's rsocket.c) -------------------------------------------

const DS_IPV4_HDR_LEN: usize = 8;
const DS_IPV6_HDR_LEN: usize = 24;
const UDP_TAG: u32 = 0x5555_5555;
const UDP_IPV4_HDR_LEN: usize = 16;
const UDP_IPV6_HDR_LEN: usize = 28;
const OP_DATA: u8 = 0;
const OP_CTRL: u8 = 7;
const GRH_LEN: usize = 40;
const MSG_SIZE: usize = SNDLOWAT as usize;
const RECV_WR_FLAG: u64 = 1 << 63;
/// How long a close waits for its sends to complete.
const CLOSE_DRAIN: Duration = Duration::from_secs(2);

// ---- addresses ------------------------------------------------------------------------------

/// A socket address the caller passed (`len` bytes at `addr`), IPv4 or IPv6.
///
/// # Safety
/// `addr` is NULL or holds `len` readable bytes.
unsafe fn read_sockaddr(addr: *const sockaddr, len: socklen_t) -> Res<SocketAddr> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    let len = len as usize;
    if len < size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least the family's bytes.
    let family = c_int::from(unsafe { (*addr).sa_family });
    match family {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: a sockaddr_in's bytes.
            let a = unsafe { addr.cast::<libc::sockaddr_in>().read_unaligned() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: a sockaddr_in6's bytes.
            let a = unsafe { addr.cast::<libc::sockaddr_in6>().read_unaligned() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            )))
        }
        libc::AF_INET | libc::AF_INET6 => Err(libc::EINVAL),
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// `a` as a sockaddr_storage and its length.
fn to_storage(a: &SocketAddr) -> (libc::sockaddr_storage, socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits the storage.
            unsafe {
                (&mut s as *mut libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in>()
                    .write(sin)
            };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits the storage.
            unsafe {
                (&mut s as *mut libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in6>()
                    .write(sin6)
            };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (s, len as socklen_t)
}

/// Copies `a` into the caller's `addr` of `*len` bytes, truncating, and sets `*len` to its
/// full size (as recvfrom(2) and getsockname(2)).
///
/// # Safety
/// `addr`/`len` are NULL or valid, `addr` holding `*len` writable bytes.
unsafe fn write_sockaddr(a: &SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) -> Res<()> {
    if addr.is_null() || len.is_null() {
        return Err(libc::EFAULT);
    }
    let (s, size) = to_storage(a);
    // SAFETY: the caller's length; min(room, size) bytes of both.
    unsafe {
        let room = *len as usize;
        core::ptr::copy_nonoverlapping(
            (&s as *const libc::sockaddr_storage).cast::<u8>(),
            addr.cast::<u8>(),
            room.min(size as usize),
        );
        *len = size;
    }
    Ok(())
}

/// What getsockname(2) says of `fd`.
fn local_addr(fd: c_int) -> Res<Option<SocketAddr>> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: a valid out buffer and length.
    check(unsafe {
        libc::getsockname(fd, (&mut s as *mut libc::sockaddr_storage).cast(), &mut len)
    })?;
    // SAFETY: the kernel wrote `len` bytes.
    match unsafe { read_sockaddr((&s as *const libc::sockaddr_storage).cast(), len) } {
        Ok(a) => Ok(Some(a)),
        Err(_) => Ok(None),
    }
}

/// rsockets' rs_any_addr: a wildcard or the host's loopback address.
fn any_or_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_unspecified() || v4 == Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6.is_unspecified() || v6 == Ipv6Addr::LOCALHOST,
    }
}

/// `struct ds_header` for a datagram from `a`.
fn ds_header(a: &SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(v4) => {
            let mut h = vec![4, DS_IPV4_HDR_LEN as u8];
            h.extend_from_slice(&v4.port().to_be_bytes());
            h.extend_from_slice(&v4.ip().octets());
            h
        }
        SocketAddr::V6(v6) => {
            let mut h = vec![6, DS_IPV6_HDR_LEN as u8];
            h.extend_from_slice(&v6.port().to_be_bytes());
            h.extend_from_slice(&v6.flowinfo().to_be_bytes());
            h.extend_from_slice(&v6.ip().octets());
            h
        }
    }
}

/// A received `struct ds_header` (rsockets' ds_valid_recv): the source and the header's
/// length, or `None` for anything else.
fn parse_ds_header(b: &[u8]) -> Option<(SocketAddr, usize)> {
    match (*b.first()?, *b.get(1)?) {
        (4, 8) if b.len() >= DS_IPV4_HDR_LEN => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some((SocketAddr::V4(SocketAddrV4::new(ip, port)), DS_IPV4_HDR_LEN))
        }
        (6, 24) if b.len() >= DS_IPV6_HDR_LEN => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[8..24]);
            Some((
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, flow, 0)),
                DS_IPV6_HDR_LEN,
            ))
        }
        _ => None,
    }
}

/// `struct ds_udp_header`: op, QPN and the sender's IP address.
fn udp_header(op: u8, qpn: u32, ip: IpAddr) -> Vec<u8> {
    let mut h = UDP_TAG.to_be_bytes().to_vec();
    match ip {
        IpAddr::V4(v4) => {
            h.extend_from_slice(&[4, op, UDP_IPV4_HDR_LEN as u8, 0]);
            h.extend_from_slice(&(qpn & 0xFF_FFFF).to_be_bytes());
            h.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            h.extend_from_slice(&[6, op, UDP_IPV6_HDR_LEN as u8, 0]);
            h.extend_from_slice(&(qpn & 0xFF_FFFF).to_be_bytes());
            h.extend_from_slice(&v6.octets());
        }
    }
    h
}

/// A valid `ds_udp_header` from `from` (rsockets' udp_svc_valid_udp_hdr, and the length
/// the datagram must have): op, QPN, header length.
fn parse_udp_header(b: &[u8], from: &SocketAddr) -> Option<(u8, u32, usize)> {
    if b.len() < UDP_IPV4_HDR_LEN || u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != UDP_TAG {
        return None;
    }
    let (version, op, len) = (b[4], b[5], usize::from(b[6]));
    let ok = match from {
        SocketAddr::V4(_) => version == 4 && len == UDP_IPV4_HDR_LEN,
        SocketAddr::V6(_) => version == 6 && len == UDP_IPV6_HDR_LEN,
    };
    if !ok || b.len() < len || !matches!(op, OP_DATA | OP_CTRL) {
        return None;
    }
    let qpn = u32::from_be_bytes([b[8], b[9], b[10], b[11]]) & 0xFF_FFFF;
    // QPs 0 and 1 are the special ones: never an rsocket's.
    (qpn > 1).then_some((op, qpn, len))
}

fn mtu_bytes(mtu: u32) -> usize {
    match mtu {
        1 => 256,
        2 => 512,
        4 => 2048,
        5 => 4096,
        _ => 1024,
    }
}

// ---- the socket -----------------------------------------------------------------------------

/// One UD QP of the socket, for one local address (rsockets' `struct ds_qp`).
struct Qp {
    id: *mut rdma_cm_id,
    channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    pd: *mut ibv_pd,
    /// `rq_size` receive buffers of MSG_SIZE bytes, then the GRH area they share.
    rbuf: Option<Buffer>,
    rmr: *mut ibv_mr,
    /// The socket's send buffer registered for this QP's PD.
    smr: *mut ibv_mr,
    local: SocketAddr,
    hdr: Vec<u8>,
    qpn: u32,
    /// The address handle to this QP itself (where forwarded datagrams go).
    self_ah: *mut ibv_ah,
    /// The longest datagram: a message of MSG_SIZE bytes and one MTU, less the header.
    max_payload: usize,
    cq_armed: bool,
    unacked_events: u32,
}

impl Qp {
    fn empty(local: SocketAddr) -> Self {
        Self {
            id: core::ptr::null_mut(),
            channel: core::ptr::null_mut(),
            cq: core::ptr::null_mut(),
            qp: core::ptr::null_mut(),
            pd: core::ptr::null_mut(),
            rbuf: None,
            rmr: core::ptr::null_mut(),
            smr: core::ptr::null_mut(),
            local,
            hdr: ds_header(&local),
            qpn: 0,
            self_ah: core::ptr::null_mut(),
            max_payload: 0,
            cq_armed: false,
            unacked_events: 0,
        }
    }

    fn post_recv(&self, offset: u32) -> Res<()> {
        let Some(rbuf) = self.rbuf.as_ref() else {
            return Err(libc::EINVAL);
        };
        // SAFETY: the MR of `rbuf`.
        let lkey = unsafe { (*self.rmr).lkey };
        let grh_at = rbuf.len - GRH_LEN;
        let mut sge = [
            ibv_sge {
                // SAFETY: inside the buffer.
                addr: unsafe { rbuf.ptr.add(grh_at) } as u64,
                length: GRH_LEN as u32,
                lkey,
            },
            ibv_sge {
                // SAFETY: offsets are multiples of MSG_SIZE below rq_size * MSG_SIZE.
                addr: unsafe { rbuf.ptr.add(offset as usize) } as u64,
                length: MSG_SIZE as u32,
                lkey,
            },
        ];
        let mut wr = ibv_recv_wr {
            wr_id: RECV_WR_FLAG | u64::from(offset),
            next: core::ptr::null_mut(),
            sg_list: sge.as_mut_ptr(),
            num_sge: 2,
        };
        // SAFETY: the socket's QP; SGEs into its registered buffer.
        unsafe { post_recv_wr(self.qp, &mut wr) }
    }

    fn arm(&mut self) {
        if self.cq_armed || self.cq.is_null() {
            return;
        }
        // SAFETY: the QP's CQ.
        if unsafe { arm_cq(self.cq) }.is_ok() {
            self.cq_armed = true;
        }
    }

    /// Takes the completion events its channel holds (the CQ is then unarmed).
    fn take_events(&mut self) {
        let Ok(v) = verbs() else { return };
        if self.channel.is_null() {
            return;
        }
        let mut cq = core::ptr::null_mut();
        let mut ctx = core::ptr::null_mut();
        // SAFETY: the QP's channel, non-blocking.
        while unsafe { (v.get_cq_event)(self.channel, &mut cq, &mut ctx) } == 0 {
            self.unacked_events += 1;
            self.cq_armed = false;
        }
        if self.unacked_events >= 256 {
            // SAFETY: events taken from this CQ.
            unsafe { (v.ack_cq_events)(self.cq, self.unacked_events) };
            self.unacked_events = 0;
        }
    }

    /// Gives everything back (what exists of it).
    fn destroy(&mut self, epfd: c_int) {
        let (Ok(v), Ok(cm)) = (verbs(), cm()) else {
            return;
        };
        // SAFETY: the QP's own objects, each destroyed once, the QP first so the device no
        // longer touches the buffers.
        unsafe {
            if !self.channel.is_null() {
                libc::epoll_ctl(
                    epfd,
                    libc::EPOLL_CTL_DEL,
                    (*self.channel).fd,
                    core::ptr::null_mut(),
                );
            }
            if !self.qp.is_null() {
                (cm.rdma_destroy_qp)(self.id);
                self.qp = core::ptr::null_mut();
            }
            if !self.self_ah.is_null()
                && let Ok(a) = verbs()
            {
                (a.destroy_ah)(self.self_ah);
            }
            for mr in [self.smr, self.rmr] {
                if !mr.is_null() {
                    (v.dereg_mr)(mr);
                }
            }
            if !self.cq.is_null() {
                if self.unacked_events > 0 {
                    (v.ack_cq_events)(self.cq, self.unacked_events);
                }
                (v.destroy_cq)(self.cq);
            }
            if !self.channel.is_null() {
                (v.destroy_comp_channel)(self.channel);
            }
            if !self.id.is_null() {
                (cm.rdma_destroy_id)(self.id);
            }
        }
        self.self_ah = core::ptr::null_mut();
        self.smr = core::ptr::null_mut();
        self.rmr = core::ptr::null_mut();
        self.cq = core::ptr::null_mut();
        self.channel = core::ptr::null_mut();
        self.id = core::ptr::null_mut();
    }
}

/// A destination (rsockets' `struct ds_dest`): the QP it is reached from, and once its
/// QPN is known, the address handle and QPN.
struct Dest {
    qp: usize,
    ah: *mut ibv_ah,
    qpn: u32,
}

/// A received datagram not yet read.
struct RMsg {
    qp: usize,
    offset: u32,
    /// Bytes after the GRH: the ds_header and the data.
    len: u32,
    hdr_len: u32,
    src: SocketAddr,
}

/// What exists once the socket is bound, connected or has sent (rsockets' ds_init_ep).
struct Ep {
    sbuf: Buffer,
    free: Vec<u32>,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sqe_avail: u32,
    rqe_avail: u32,
    qps: Vec<Qp>,
    dests: HashMap<SocketAddr, Dest>,
    /// QPNs announced in UDP headers: the QPs datagrams may come from.
    peers: HashSet<u32>,
    rmsgs: VecDeque<RMsg>,
    next_poll: usize,
}

struct Inner {
    udp: c_int,
    epfd: c_int,
    domain: c_int,
    fs_flags: c_int,
    fd_flags: c_int,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sbuf_size: u32,
    rbuf_size: u32,
    ep: Option<Ep>,
    /// The destination connect(2) set.
    connected: Option<SocketAddr>,
    readable: bool,
    writable: bool,
}

// SAFETY: the raw pointers are the library's own objects, used under the socket's mutex.
unsafe impl Send for Inner {}

/// A datagram rsocket.
pub(crate) struct DSocket {
    inner: Mutex<Inner>,
    /// The UDP service thread: the eventfd that stops it, and its handle.
    svc: Mutex<Option<crate::rsocket::Service>>,
}

fn table() -> MutexGuard<'static, HashMap<c_int, Arc<DSocket>>> {
    static TABLE: OnceLock<Mutex<HashMap<c_int, Arc<DSocket>>>> = OnceLock::new();
    TABLE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The datagram rsocket numbered `fd`, if it is one.
pub(crate) fn lookup(fd: c_int) -> Option<Arc<DSocket>> {
    table().get(&fd).cloned()
}

fn lock(s: &DSocket) -> MutexGuard<'_, Inner> {
    s.inner.lock().unwrap_or_else(|e| e.into_inner())
}

/// `rsocket(domain, SOCK_DGRAM, protocol)`: a UDP socket and an epoll set for the CQs.
pub(crate) fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> Res<c_int> {
    if protocol != 0 && protocol != libc::IPPROTO_UDP {
        return Err(libc::ENOTSUP);
    }
    // Under librspreload every UDP socket the process opens asks here first, the drop-in's
    // own (its devices' sockets, its address checks) among them: while a call of this
    // library runs on this thread, or on its service threads, those stay kernel sockets.
    if crate::nested_call() {
        return Err(libc::ENOTSUP);
    }
    cm()?;
    verbs()?;
    verbs()?;
    // SAFETY: plain socket calls.
    let udp = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if udp < 0 {
        return Err(errno());
    }
    // SAFETY: as above.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epfd < 0 {
        let e = errno();
        // SAFETY: the socket just made.
        unsafe { libc::close(udp) };
        return Err(e);
    }
    let d = defaults();
    let inner = Inner {
        udp,
        epfd,
        domain,
        fs_flags: if kind & libc::SOCK_NONBLOCK != 0 {
            libc::O_NONBLOCK
        } else {
            0
        },
        fd_flags: if kind & libc::SOCK_CLOEXEC != 0 {
            libc::FD_CLOEXEC
        } else {
            0
        },
        sq_size: d.sq_size,
        rq_size: d.rq_size,
        sq_inline: d.inline,
        sbuf_size: d.wmem,
        rbuf_size: d.mem,
        ep: None,
        connected: None,
        readable: true,
        writable: true,
    };
    table().insert(
        udp,
        Arc::new(DSocket {
            inner: Mutex::new(inner),
            svc: Mutex::new(None),
        }),
    );
    Ok(udp)
}

impl Inner {
    fn nonblock(&self, flags: c_int) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    /// The send buffer and queues' sizes (rsockets' ds_set_qp_size and ds_init_ep).
    fn init_ep(&mut self) -> Res<()> {
        if self.ep.is_some() {
            return Ok(());
        }
        let max = QP_MAX_SIZE;
        let mut sq = self.sq_size.clamp(1, max);
        let mut rq = self.rq_size.clamp(1, max);
        rq = rq.min((self.rbuf_size / SNDLOWAT).max(1));
        sq = sq.min((self.sbuf_size / SNDLOWAT).max(1));
        self.rbuf_size = rq * SNDLOWAT;
        self.sbuf_size = sq * SNDLOWAT;
        self.ep = Some(Ep {
            sbuf: Buffer::new(self.sbuf_size as usize)?,
            free: (0..sq).rev().map(|i| i * SNDLOWAT).collect(),
            sq_size: sq,
            rq_size: rq,
            sq_inline: self.sq_inline,
            sqe_avail: sq,
            rqe_avail: rq,
            qps: Vec::new(),
            dests: HashMap::new(),
            peers: HashSet::new(),
            rmsgs: VecDeque::with_capacity(rq as usize),
            next_poll: 0,
        });
        Ok(())
    }

    /// The source address a datagram to `dst` leaves from (rsockets' ds_get_src_addr): the
    /// socket's own address, or for a wildcard or loopback one, the address rdma_cm
    /// resolves towards `dst` (the routed source on Linux), at the socket's port.
    fn source_for(&self, dst: &SocketAddr) -> Res<SocketAddr> {
        let local = local_addr(self.udp)?.ok_or(libc::EAFNOSUPPORT)?;
        if !any_or_loopback(local.ip()) {
            return Ok(local);
        }
        let ip = cm_source(dst).or_else(|_| routed_source(dst))?;
        Ok(SocketAddr::new(ip, local.port()))
    }

    /// Before an unbound socket's first datagram: when the host would send from another
    /// address than the one rdma_cm takes (its loopback address where softroce's devices are
    /// on 127.x; the destination itself when both devices are addresses of one interface,
    /// as the kernel answers a local destination), bind to the device's address so the UDP
    /// and UD paths name the same source, one a device of this process has.
    fn bind_source_towards(&self, dst: &SocketAddr) {
        let Ok(Some(local)) = local_addr(self.udp) else {
            return;
        };
        if local.port() != 0 {
            return;
        }
        let (Ok(routed), Ok(cm)) = (routed_source(dst), cm_source(dst)) else {
            return;
        };
        if routed != cm {
            let (s, len) = to_storage(&SocketAddr::new(cm, 0));
            // SAFETY: the socket's own fd; a valid address.
            unsafe { libc::bind(self.udp, (&s as *const libc::sockaddr_storage).cast(), len) };
        }
    }

    /// The destination `addr`, found or made, with the QP of the address it is reached from
    /// (rsockets' ds_get_dest and ds_get_qp).
    fn get_dest(&mut self, addr: &SocketAddr) -> Res<()> {
        if self
            .ep
            .as_ref()
            .is_some_and(|ep| ep.dests.contains_key(addr))
        {
            return Ok(());
        }
        let src = self.source_for(addr)?;
        let found = self
            .ep
            .as_ref()
            .and_then(|ep| ep.qps.iter().position(|q| q.local == src));
        let qp = match found {
            Some(i) => i,
            None => self.create_qp(src)?,
        };
        let ep = self.ep.as_mut().ok_or(libc::EINVAL)?;
        ep.dests.entry(*addr).or_insert(Dest {
            qp,
            ah: core::ptr::null_mut(),
            qpn: 0,
        });
        Ok(())
    }

    /// A UD QP for local address `src` (rsockets' ds_create_qp): its cm_id bound there in
    /// RDMA_PS_UDP, its CQ armed in the socket's epoll set, its receives posted.
    fn create_qp(&mut self, src: SocketAddr) -> Res<usize> {
        let (v, cm, a) = (verbs()?, cm()?, verbs()?);
        let epfd = self.epfd;
        let ep = self.ep.as_mut().ok_or(libc::EINVAL)?;
        let mut q = Qp::empty(src);
        let made = (|| -> Res<()> {
            // SAFETY: a synchronous id (no channel).
            check(unsafe {
                (cm.rdma_create_id)(
                    core::ptr::null_mut(),
                    &mut q.id,
                    core::ptr::null_mut(),
                    RDMA_PS_UDP,
                )
            })?;
            let (mut s, _) = to_storage(&src);
            // SAFETY: the id and an address.
            if unsafe { (cm.rdma_bind_addr)(q.id, (&mut s as *mut libc::sockaddr_storage).cast()) }
                != 0
            {
                // The port is only a name here (the UDP socket holds the real one).
                let (mut s, _) = to_storage(&SocketAddr::new(src.ip(), 0));
                // SAFETY: as above.
                check(unsafe {
                    (cm.rdma_bind_addr)(q.id, (&mut s as *mut libc::sockaddr_storage).cast())
                })?;
            }
            // SAFETY: a bound id has its device.
            let (ctx, port, sgid) = unsafe {
                (
                    (*q.id).verbs,
                    (*q.id).port_num,
                    (*q.id).route.addr.ibaddr.sgid,
                )
            };
            if ctx.is_null() {
                return Err(libc::ENODEV);
            }
            // SAFETY: a live context.
            q.channel = unsafe { (v.create_comp_channel)(ctx) };
            if q.channel.is_null() {
                return Err(errno());
            }
            // SAFETY: the channel just made.
            set_nonblocking(unsafe { (*q.channel).fd }, true)?;
            // SAFETY: a live context and channel.
            q.cq = unsafe {
                (v.create_cq)(
                    ctx,
                    (ep.sq_size + ep.rq_size) as c_int,
                    core::ptr::null_mut(),
                    q.channel,
                    0,
                )
            };
            if q.cq.is_null() {
                return Err(errno());
            }
            let mut attr = ibv_qp_init_attr {
                qp_context: core::ptr::null_mut(),
                send_cq: q.cq,
                recv_cq: q.cq,
                srq: core::ptr::null_mut(),
                cap: softroce_ibverbs_abi::ibv_qp_cap {
                    max_send_wr: ep.sq_size,
                    max_recv_wr: ep.rq_size,
                    max_send_sge: 1,
                    max_recv_sge: 2,
                    max_inline_data: ep.sq_inline,
                },
                qp_type: IBV_QPT_UD,
                sq_sig_all: 1,
            };
            // SAFETY: the id and a valid attribute block.
            check(unsafe { (cm.rdma_create_qp)(q.id, core::ptr::null_mut(), &mut attr) })?;
            ep.sq_inline = attr.cap.max_inline_data;
            // SAFETY: rdma_create_qp set the QP.
            unsafe {
                q.qp = (*q.id).qp;
                q.pd = (*q.qp).pd;
                q.qpn = (*q.qp).qp_num;
            }
            let rbuf = Buffer::new(ep.rq_size as usize * MSG_SIZE + GRH_LEN)?;
            let local = IBV_ACCESS_LOCAL_WRITE as c_int;
            // SAFETY: the buffers outlive their registrations (deregistered in destroy).
            unsafe {
                q.rmr = (v.reg_mr)(q.pd, rbuf.ptr.cast(), rbuf.len, local);
                q.smr = (v.reg_mr)(q.pd, ep.sbuf.ptr.cast(), ep.sbuf.len, local);
            }
            q.rbuf = Some(rbuf);
            if q.rmr.is_null() || q.smr.is_null() {
                return Err(errno());
            }
            // SAFETY: all-zero is a valid ibv_port_attr.
            let mut pa: ibv_port_attr = unsafe { core::mem::zeroed() };
            // SAFETY: a live context; a full attribute block.
            let mtu = if unsafe { (a.query_port)(ctx, port, &mut pa) } == 0 {
                mtu_bytes(pa.active_mtu)
            } else {
                1024
            };
            q.max_payload = MSG_SIZE.min(mtu) - q.hdr.len();
            // To itself: a GRH to its own GID (RoCE needs one).
            // SAFETY: all-zero is a valid ibv_ah_attr.
            let mut ah: ibv_ah_attr = unsafe { core::mem::zeroed() };
            ah.is_global = 1;
            ah.grh.dgid = sgid;
            ah.grh.sgid_index = gid_index(ctx, port, &sgid);
            ah.grh.hop_limit = 64;
            ah.port_num = port;
            // SAFETY: the QP's PD and a valid attribute block.
            q.self_ah = unsafe { (a.create_ah)(q.pd, &mut ah) };
            if q.self_ah.is_null() {
                return Err(errno());
            }
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: ep.qps.len() as u64,
            };
            // SAFETY: the socket's epoll set and the channel's fd.
            check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, (*q.channel).fd, &mut ev) })?;
            q.arm();
            for i in 0..ep.rq_size {
                q.post_recv(i * SNDLOWAT)?;
            }
            Ok(())
        })();
        if let Err(e) = made {
            q.destroy(epfd);
            return Err(e);
        }
        let index = ep.qps.len();
        let (local, qpn, self_ah) = (q.local, q.qpn, q.self_ah);
        ep.qps.push(q);
        // As rsockets, the QP's own address is a destination: reached through itself.
        ep.dests.insert(
            local,
            Dest {
                qp: index,
                ah: self_ah,
                qpn,
            },
        );
        Ok(index)
    }

    /// Takes completions of every QP, round robin (rsockets' ds_poll_cqs): receives that
    /// are valid and fit become readable datagrams, the rest are posted again; sends give
    /// their slots back. Polling stops while no datagram could be kept and a send slot is
    /// free, so the CQ keeps what the queue cannot.
    fn progress(&mut self) {
        let Some(ep) = self.ep.as_mut() else { return };
        let n = ep.qps.len();
        if n == 0 {
            return;
        }
        let mut wcs = [ibv_wc::default(); 16];
        let mut idle = 0;
        let mut i = ep.next_poll % n;
        // Bounded: every pass over the QPs takes at least one completion or ends.
        for _ in 0..(4 * (ep.sq_size + ep.rq_size) as usize + n) {
            if ep.rqe_avail == 0 && ep.sqe_avail > 0 {
                break;
            }
            let cq = ep.qps[i].cq;
            let want = (ep.rqe_avail.max(1) as usize).min(wcs.len());
            // SAFETY: the QP's CQ.
            let Ok(got) = (unsafe { poll_cq(cq, &mut wcs[..want]) }) else {
                return;
            };
            if got == 0 {
                idle += 1;
                i = (i + 1) % n;
                if idle >= n {
                    break;
                }
                continue;
            }
            idle = 0;
            for wc in &wcs[..got] {
                if wc.wr_id & RECV_WR_FLAG != 0 {
                    let offset = (wc.wr_id & 0xFFFF_FFFF) as u32;
                    if offset % SNDLOWAT != 0 || offset >= ep.rq_size * SNDLOWAT {
                        continue;
                    }
                    let q = &ep.qps[i];
                    let kept = (wc.status == IBV_WC_SUCCESS && ep.rqe_avail > 0)
                        .then(|| valid_recv(q, &ep.peers, wc, offset))
                        .flatten();
                    match kept {
                        Some((src, hdr_len, len)) => {
                            ep.rqe_avail -= 1;
                            ep.rmsgs.push_back(RMsg {
                                qp: i,
                                offset,
                                len,
                                hdr_len,
                                src,
                            });
                        }
                        None if wc.status != IBV_WC_WR_FLUSH_ERR => {
                            let _ = q.post_recv(offset);
                        }
                        None => {}
                    }
                } else {
                    let offset = (wc.wr_id & 0xFFFF_FFFF) as u32;
                    if offset % SNDLOWAT == 0
                        && offset < ep.sq_size * SNDLOWAT
                        && ep.sqe_avail < ep.sq_size
                    {
                        ep.free.push(offset);
                        ep.sqe_avail += 1;
                    }
                }
            }
            i = (i + 1) % n;
        }
        ep.next_poll = i;
    }

    fn have_rdata(&self) -> bool {
        self.ep.as_ref().is_some_and(|ep| !ep.rmsgs.is_empty())
    }

    fn can_send(&self) -> bool {
        self.ep.as_ref().is_none_or(|ep| ep.sqe_avail > 0)
    }

    /// Arms every CQ; whether a completion may have come before (look again then).
    fn arm(&mut self) {
        if let Some(ep) = self.ep.as_mut() {
            for q in &mut ep.qps {
                q.arm();
            }
        }
    }

    fn take_events(&mut self) {
        if let Some(ep) = self.ep.as_mut() {
            for q in &mut ep.qps {
                q.take_events();
            }
        }
    }

    /// Sends `data` to `to` (rsockets' dsend): through UDP while the destination's QPN is
    /// unknown, else as a UD SEND from a send slot. `None`: no slot free.
    fn send_to(&mut self, to: &SocketAddr, data: &[u8], nonblock: bool) -> Res<Option<usize>> {
        let udp = self.udp;
        let ep = self.ep.as_mut().ok_or(libc::EINVAL)?;
        let (qi, ah, qpn) = {
            let d = ep.dests.get(to).ok_or(libc::EINVAL)?;
            (d.qp, d.ah, d.qpn)
        };
        let (max, own_qpn, own_ip, hdr) = {
            let q = &ep.qps[qi];
            (q.max_payload, q.qpn, q.local.ip(), q.hdr.clone())
        };
        if data.len() > max {
            return Err(libc::EMSGSIZE);
        }
        if ah.is_null() {
            let h = udp_header(OP_DATA, own_qpn, own_ip);
            return udp_send(udp, to, &h, data, nonblock).map(Some);
        }
        let Some(slot) = ep.free.pop() else {
            return Ok(None);
        };
        ep.sqe_avail -= 1;
        if let Err(e) = post_ud_send(ep, qi, slot, &hdr, data, ah, qpn) {
            ep.free.push(slot);
            ep.sqe_avail += 1;
            return Err(e);
        }
        Ok(Some(data.len()))
    }
}

/// Copies `hdr` and `data` into send slot `slot` and posts it from QP `qi` to `ah`/`qpn`.
fn post_ud_send(
    ep: &Ep,
    qi: usize,
    slot: u32,
    hdr: &[u8],
    data: &[u8],
    ah: *mut ibv_ah,
    qpn: u32,
) -> Res<()> {
    let q = &ep.qps[qi];
    let total = hdr.len() + data.len();
    if total > MSG_SIZE || slot as usize + MSG_SIZE > ep.sbuf.len {
        return Err(libc::EMSGSIZE);
    }
    // SAFETY: the slot's MSG_SIZE bytes lie inside the send buffer; nothing else uses the
    // slot until its completion.
    unsafe {
        let at = ep.sbuf.ptr.add(slot as usize);
        core::ptr::copy_nonoverlapping(hdr.as_ptr(), at, hdr.len());
        core::ptr::copy_nonoverlapping(data.as_ptr(), at.add(hdr.len()), data.len());
    }
    let mut sge = ibv_sge {
        // SAFETY: as above.
        addr: unsafe { ep.sbuf.ptr.add(slot as usize) } as u64,
        length: total as u32,
        // SAFETY: the send buffer's MR for this QP.
        lkey: unsafe { (*q.smr).lkey },
    };
    // SAFETY: all-zero is a valid ibv_send_wr.
    let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
    wr.wr_id = u64::from(slot);
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = if total as u32 <= ep.sq_inline {
        IBV_SEND_INLINE
    } else {
        0
    };
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
    // SAFETY: the socket's QP; the SGE points at its registered send buffer.
    unsafe { post_send_wr(q.qp, &mut wr) }
}

/// A receive completion's datagram, if it is one (rsockets' ds_valid_recv, and from a QP
/// this socket knows): its source, header length and length after the GRH.
fn valid_recv(
    q: &Qp,
    peers: &HashSet<u32>,
    wc: &ibv_wc,
    offset: u32,
) -> Option<(SocketAddr, u32, u32)> {
    let len = (wc.byte_len as usize).checked_sub(GRH_LEN)?;
    if !(DS_IPV4_HDR_LEN..=MSG_SIZE).contains(&len) {
        return None;
    }
    if wc.src_qp != q.qpn && !peers.contains(&wc.src_qp) {
        return None;
    }
    let rbuf = q.rbuf.as_ref()?;
    // SAFETY: `len` bytes at the receive's offset, inside the buffer.
    let bytes = unsafe { core::slice::from_raw_parts(rbuf.ptr.add(offset as usize), len) };
    let (src, hdr_len) = parse_ds_header(bytes)?;
    (hdr_len <= len).then_some((src, hdr_len as u32, len as u32))
}

/// Sends `hdr` then `data` to `to` on the UDP socket.
fn udp_send(udp: c_int, to: &SocketAddr, hdr: &[u8], data: &[u8], nonblock: bool) -> Res<usize> {
    let (s, len) = to_storage(to);
    let mut iov = [
        libc::iovec {
            iov_base: hdr.as_ptr().cast_mut().cast(),
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        },
    ];
    // SAFETY: all-zero is a valid msghdr.
    let mut m: libc::msghdr = unsafe { core::mem::zeroed() };
    m.msg_name = (&s as *const libc::sockaddr_storage).cast_mut().cast();
    m.msg_namelen = len;
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = if data.is_empty() { 1 } else { 2 };
    // SAFETY: a valid message of local buffers.
    let flags = libc::MSG_NOSIGNAL | if nonblock { libc::MSG_DONTWAIT } else { 0 };
    let n = unsafe { libc::sendmsg(udp, &m, flags) };
    if n < 0 {
        return Err(errno());
    }
    Ok((n as usize).saturating_sub(hdr.len()))
}

/// The GID index of `gid` on the port (rsockets' udp_svc_sgid_index: the first 16).
fn gid_index(ctx: *mut ibv_context, port: u8, gid: &ibv_gid) -> u8 {
    let Ok(a) = verbs() else { return 0 };
    // SAFETY: both views of a GID are its 16 bytes.
    let want = unsafe { gid.raw };
    for i in 0..16 {
        let mut g = ibv_gid { raw: [0; 16] };
        // SAFETY: a live context; a GID out buffer.
        if unsafe { (a.query_gid)(ctx, port, i, &mut g) } == 0 && unsafe { g.raw } == want {
            return i as u8;
        }
    }
    0
}

/// A synchronous cm_id resolved towards `dst` (from `src` when given); destroyed by the
/// caller.
fn resolved_id(src: Option<SocketAddr>, dst: &SocketAddr, route: bool) -> Res<*mut rdma_cm_id> {
    let cm = cm()?;
    let mut id = core::ptr::null_mut();
    // SAFETY: a synchronous id (no channel).
    check(unsafe {
        (cm.rdma_create_id)(
            core::ptr::null_mut(),
            &mut id,
            core::ptr::null_mut(),
            RDMA_PS_UDP,
        )
    })?;
    let done = (|| {
        let mut s = src.map(|a| to_storage(&a).0);
        let (mut d, _) = to_storage(dst);
        let sp = s.as_mut().map_or(core::ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: the id; addresses that outlive the call (synchronous).
        check(unsafe {
            (cm.rdma_resolve_addr)(
                id,
                sp,
                (&mut d as *mut libc::sockaddr_storage).cast(),
                RESOLVE_TIMEOUT_MS,
            )
        })?;
        if route {
            // SAFETY: the id, its address resolved.
            check(unsafe { (cm.rdma_resolve_route)(id, RESOLVE_TIMEOUT_MS) })?;
        }
        Ok(())
    })();
    if let Err(e) = done {
        // SAFETY: the id just made.
        unsafe { (cm.rdma_destroy_id)(id) };
        return Err(e);
    }
    Ok(id)
}

/// The source address rdma_cm resolves towards `dst`.
fn cm_source(dst: &SocketAddr) -> Res<IpAddr> {
    let id = resolved_id(None, dst, false)?;
    // SAFETY: a resolved id's source address.
    let src = unsafe {
        let s = (*id).route.addr.src.storage;
        read_sockaddr(
            (&s as *const libc::sockaddr_storage).cast(),
            size_of_val(&s) as socklen_t,
        )
    };
    // SAFETY: the id made above.
    unsafe { (cm()?.rdma_destroy_id)(id) };
    src.map(|a| a.ip())
}

/// The source address the host routes a datagram to `dst` from.
fn routed_source(dst: &SocketAddr) -> Res<IpAddr> {
    let any: SocketAddr = if dst.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let io = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EINVAL);
    let s = std::net::UdpSocket::bind(any).map_err(io)?;
    s.connect(dst).map_err(io)?;
    s.local_addr().map(|a| a.ip()).map_err(io)
}

/// The attributes of an address handle from `local` to `dst` (rsockets' udp_svc_create_ah:
/// rdma_cm's route, its path record's GRH fields).
fn remote_ah_attr(local: &SocketAddr, dst: &SocketAddr) -> Res<ibv_ah_attr> {
    let id = resolved_id(Some(SocketAddr::new(local.ip(), 0)), dst, true)?;
    // SAFETY: a resolved route: the id's device and its path record.
    let attr = unsafe {
        let path = (*id).route.path_rec;
        if path.is_null() || (*id).verbs.is_null() {
            None
        } else {
            let p = &*path;
            let mut attr: ibv_ah_attr = core::mem::zeroed();
            if p.hop_limit > 1 {
                attr.is_global = 1;
                attr.grh.dgid = p.dgid;
                attr.grh.flow_label = u32::from_be(p.flow_label);
                attr.grh.sgid_index = gid_index((*id).verbs, (*id).port_num, &p.sgid);
                attr.grh.hop_limit = p.hop_limit;
                attr.grh.traffic_class = p.traffic_class;
            }
            attr.dlid = u16::from_be(p.dlid);
            attr.sl = p.sl;
            attr.static_rate = p.rate;
            attr.port_num = (*id).port_num;
            Some(attr)
        }
    };
    // SAFETY: the id made above.
    unsafe { (cm()?.rdma_destroy_id)(id) };
    attr.ok_or(libc::EHOSTUNREACH)
}

// ---- the UDP service ------------------------------------------------------------------------

/// Starts the socket's UDP service thread (rsockets' udp_svc) once.
fn start_svc(sock: &Arc<DSocket>, udp: c_int) -> Res<()> {
    let mut svc = sock.svc.lock().unwrap_or_else(|e| e.into_inner());
    if svc.is_some() {
        return Ok(());
    }
    let me = Arc::clone(sock);
    *svc = Some(crate::rsocket::start_service(
        "rsocket-udp-svc",
        move |stop| {
            svc_run(&me, udp, stop);
        },
    )?);
    Ok(())
}

fn stop_svc(sock: &DSocket) {
    let taken = sock.svc.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(svc) = taken {
        crate::rsocket::stop_service(svc);
    }
}

fn svc_run(sock: &DSocket, udp: c_int, stop: c_int) {
    let mut buf = vec![0u8; MSG_SIZE];
    loop {
        let mut p = [
            pollfd {
                fd: udp,
                events: libc::POLLIN,
                revents: 0,
            },
            pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds.
        let rc = unsafe { libc::poll(p.as_mut_ptr(), 2, 1000) };
        if p[1].revents != 0 {
            return;
        }
        if rc <= 0 || p[0].revents == 0 {
            continue;
        }
        // A bounded batch, then look at the stop event again.
        for _ in 0..64 {
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut from: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
            let mut from_len = size_of::<libc::sockaddr_storage>() as socklen_t;
            // SAFETY: a local buffer and address.
            let n = unsafe {
                libc::recvfrom(
                    udp,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_storage).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                break;
            }
            // SAFETY: the kernel's address of `from_len` bytes.
            let Ok(from) = (unsafe {
                read_sockaddr((&from as *const libc::sockaddr_storage).cast(), from_len)
            }) else {
                continue;
            };
            svc_process(sock, &buf[..n as usize], &from);
        }
    }
}

/// One datagram of the UDP socket (rsockets' udp_svc_process_rs).
fn svc_process(sock: &DSocket, buf: &[u8], from: &SocketAddr) {
    let Some((op, qpn, hdr_len)) = parse_udp_header(buf, from) else {
        return;
    };
    let data = &buf[hdr_len..];
    let (need_ah, local, pd) = {
        let mut g = lock(sock);
        if g.ep.is_none() || g.get_dest(from).is_err() {
            return;
        }
        let udp = g.udp;
        let Some(ep) = g.ep.as_mut() else { return };
        ep.peers.insert(qpn);
        let Some(dest) = ep.dests.get(from) else {
            return;
        };
        let q = &ep.qps[dest.qp];
        if op == OP_DATA {
            // Tell the sender this side's QPN.
            let _ = udp_send(
                udp,
                from,
                &udp_header(OP_CTRL, q.qpn, q.local.ip()),
                &[],
                true,
            );
        }
        (dest.ah.is_null() || dest.qpn != qpn, q.local, q.pd)
    };
    if need_ah {
        // The route is resolved without the socket's lock.
        let attr = remote_ah_attr(&local, from);
        let mut g = lock(sock);
        if let (Ok(mut attr), Ok(a), Some(ep)) = (attr, verbs(), g.ep.as_mut())
            && let Some(dest) = ep.dests.get_mut(from)
        {
            // SAFETY: the destination's QP's PD and a valid attribute block.
            let ah = unsafe { (a.create_ah)(pd, &mut attr) };
            if !ah.is_null() {
                let self_ah = ep.qps[dest.qp].self_ah;
                if !dest.ah.is_null() && dest.ah != self_ah {
                    // SAFETY: the destination's previous handle, replaced.
                    unsafe { (a.destroy_ah)(dest.ah) };
                }
                dest.ah = ah;
                dest.qpn = qpn;
            }
        }
    }
    if op == OP_DATA {
        forward(sock, from, data);
    }
}

/// Puts a datagram that came over UDP into the receive queue of the QP its sender's
/// address maps to, through that QP (rsockets' udp_svc_forward): it is read as any other.
fn forward(sock: &DSocket, from: &SocketAddr, data: &[u8]) {
    let mut g = lock(sock);
    if g.ep.as_ref().is_none_or(|ep| ep.sqe_avail == 0) {
        g.progress();
    }
    let Some(ep) = g.ep.as_mut() else { return };
    let Some(qi) = ep.dests.get(from).map(|d| d.qp) else {
        return;
    };
    let q = &ep.qps[qi];
    let hdr = ds_header(from);
    if data.len() + hdr.len() > MSG_SIZE.min(q.max_payload + q.hdr.len()) {
        return;
    }
    let (ah, qpn) = (q.self_ah, q.qpn);
    // No free slot: dropped, as a full socket buffer drops a UDP datagram.
    let Some(slot) = ep.free.pop() else { return };
    ep.sqe_avail -= 1;
    if post_ud_send(ep, qi, slot, &hdr, data, ah, qpn).is_err() {
        ep.free.push(slot);
        ep.sqe_avail += 1;
    }
}

// ---- the calls --------------------------------------------------------------------------

/// Waits (unless `nonblock`) until `test` holds, taking completions meanwhile (rsockets'
/// ds_get_comp). Returns the guard again.
fn wait<'a>(
    mut g: MutexGuard<'a, Inner>,
    sock: &'a DSocket,
    nonblock: bool,
    test: fn(&Inner) -> bool,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    let started = Instant::now();
    loop {
        g.progress();
        if test(&g) {
            return (g, Ok(()));
        }
        if nonblock {
            return (g, Err(libc::EAGAIN));
        }
        if started.elapsed() < defaults().polling {
            continue;
        }
        g.arm();
        // A completion that came before arming raises no event: look again.
        g.progress();
        if test(&g) {
            return (g, Ok(()));
        }
        let epfd = g.epfd;
        drop(g);
        let mut p = pollfd {
            fd: epfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        let rc = unsafe { libc::poll(&mut p, 1, defaults().wake_up_ms) };
        let e = errno();
        g = lock(sock);
        if rc < 0 && e != libc::EINTR {
            return (g, Err(e));
        }
        g.take_events();
    }
}

fn ensure_ep(sock: &Arc<DSocket>, g: &mut Inner) -> Res<()> {
    if g.ep.is_none() {
        g.init_ep()?;
    }
    start_svc(sock, g.udp)
}

/// # Safety
/// `addr` points at `len` readable bytes.
pub(crate) unsafe fn rbind(sock: &Arc<DSocket>, addr: *const sockaddr, len: socklen_t) -> Res<()> {
    let mut g = lock(sock);
    // SAFETY: the caller's address.
    let a = unsafe { read_sockaddr(addr, len) }?;
    if (a.is_ipv4() && g.domain != libc::AF_INET) || (a.is_ipv6() && g.domain != libc::AF_INET6) {
        return Err(libc::EAFNOSUPPORT);
    }
    ensure_ep(sock, &mut g)?;
    let (s, slen) = to_storage(&a);
    // SAFETY: the socket's own fd; a valid address.
    check(unsafe { libc::bind(g.udp, (&s as *const libc::sockaddr_storage).cast(), slen) })
}

/// # Safety
/// `addr` points at `len` readable bytes.
pub(crate) unsafe fn rconnect(
    sock: &Arc<DSocket>,
    addr: *const sockaddr,
    len: socklen_t,
) -> Res<()> {
    let mut g = lock(sock);
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: at least the family (checked by read_sockaddr for the rest).
    if len as usize >= size_of::<libc::sa_family_t>()
        && c_int::from(unsafe { (*addr).sa_family }) == libc::AF_UNSPEC
    {
        // Dissolves the association, as connect(2) on a UDP socket.
        // SAFETY: the socket's own fd; the caller's address.
        check(unsafe { libc::connect(g.udp, addr, len) })?;
        g.connected = None;
        return Ok(());
    }
    // SAFETY: the caller's address.
    let a = unsafe { read_sockaddr(addr, len) }?;
    if (a.is_ipv4() && g.domain != libc::AF_INET) || (a.is_ipv6() && g.domain != libc::AF_INET6) {
        return Err(libc::EAFNOSUPPORT);
    }
    ensure_ep(sock, &mut g)?;
    g.bind_source_towards(&a);
    let (s, slen) = to_storage(&a);
    // SAFETY: the socket's own fd; a valid address.
    check(unsafe { libc::connect(g.udp, (&s as *const libc::sockaddr_storage).cast(), slen) })?;
    g.get_dest(&a)?;
    g.connected = Some(a);
    Ok(())
}

/// sendto(2) of a datagram rsocket; `to` None: the connected destination.
pub(crate) fn sendto(
    sock: &Arc<DSocket>,
    data: &[u8],
    flags: c_int,
    to: Option<SocketAddr>,
) -> Res<usize> {
    let mut g = lock(sock);
    if !g.writable {
        return Err(libc::EPIPE);
    }
    let to = match to {
        Some(a) => a,
        None => g.connected.ok_or(libc::EDESTADDRREQ)?,
    };
    if (to.is_ipv4() && g.domain != libc::AF_INET) || (to.is_ipv6() && g.domain != libc::AF_INET6) {
        return Err(libc::EAFNOSUPPORT);
    }
    if to.port() == 0 || to.ip().is_unspecified() {
        return Err(libc::EINVAL);
    }
    ensure_ep(sock, &mut g)?;
    g.bind_source_towards(&to);
    g.get_dest(&to)?;
    let nonblock = g.nonblock(flags);
    // Bounded: a wait ends with a free slot (or an error), which the next try takes.
    for _ in 0..1000 {
        if let Some(n) = g.send_to(&to, data, nonblock)? {
            return Ok(n);
        }
        let (g2, r) = wait(g, sock, nonblock, Inner::can_send);
        g = g2;
        r?;
    }
    Err(libc::EAGAIN)
}

/// # Safety
/// `dest` is NULL or holds `dest_len` readable bytes; `buf` holds `len` readable bytes.
pub(crate) unsafe fn rsendto(
    sock: &Arc<DSocket>,
    buf: *const u8,
    len: usize,
    flags: c_int,
    dest: *const sockaddr,
    dest_len: socklen_t,
) -> Res<usize> {
    let to = if dest.is_null() {
        None
    } else {
        // SAFETY: the caller's address.
        Some(unsafe { read_sockaddr(dest, dest_len) }?)
    };
    if len > 0 && buf.is_null() {
        return Err(libc::EFAULT);
    }
    let data = if len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's `len` bytes.
        unsafe { core::slice::from_raw_parts(buf, len) }
    };
    sendto(sock, data, flags, to)
}

/// Receives one datagram into `out` (rsockets' ds_recvfrom): the bytes copied, the
/// datagram's full length, and its source. A longer datagram is cut to `out` (the rest is
/// gone unless MSG_PEEK), as UDP does.
pub(crate) fn recv(
    sock: &Arc<DSocket>,
    out: &mut [u8],
    flags: c_int,
) -> Res<(usize, usize, SocketAddr)> {
    let mut g = lock(sock);
    ensure_ep(sock, &mut g)?;
    if !g.readable {
        return Err(libc::EINVAL);
    }
    let nonblock = g.nonblock(flags);
    let (mut g, r) = wait(g, sock, nonblock, Inner::have_rdata);
    r?;
    let ep = g.ep.as_mut().ok_or(libc::EINVAL)?;
    let m = ep.rmsgs.front().ok_or(libc::EAGAIN)?;
    let q = &ep.qps[m.qp];
    let rbuf = q.rbuf.as_ref().ok_or(libc::EIO)?;
    let full = (m.len - m.hdr_len) as usize;
    let n = full.min(out.len());
    // SAFETY: the datagram lies inside the receive buffer (checked when it was kept).
    unsafe {
        core::ptr::copy_nonoverlapping(
            rbuf.ptr.add((m.offset + m.hdr_len) as usize),
            out.as_mut_ptr(),
            n,
        );
    }
    let src = m.src;
    if flags & libc::MSG_PEEK == 0 {
        let (qi, offset) = (m.qp, m.offset);
        ep.rmsgs.pop_front();
        ep.rqe_avail += 1;
        let _ = ep.qps[qi].post_recv(offset);
    }
    Ok((n, full, src))
}

/// recvfrom(2) of a datagram rsocket.
///
/// # Safety
/// `buf` holds `len` writable bytes; `src`/`src_len` are NULL or as for recvfrom(2).
pub(crate) unsafe fn rrecvfrom(
    sock: &Arc<DSocket>,
    buf: *mut u8,
    len: usize,
    flags: c_int,
    src: *mut sockaddr,
    src_len: *mut socklen_t,
) -> Res<usize> {
    if len > 0 && buf.is_null() {
        return Err(libc::EFAULT);
    }
    let out = if len == 0 {
        &mut [][..]
    } else {
        // SAFETY: the caller's `len` bytes.
        unsafe { core::slice::from_raw_parts_mut(buf, len) }
    };
    let (n, full, from) = recv(sock, out, flags)?;
    if !src.is_null() && !src_len.is_null() {
        // SAFETY: the caller's buffers.
        unsafe { write_sockaddr(&from, src, src_len) }?;
    }
    Ok(if flags & libc::MSG_TRUNC != 0 {
        full
    } else {
        n
    })
}

/// sendmsg(2): the iovecs gathered into one datagram, to `msg_name` or the connected peer.
///
/// # Safety
/// `m` is a valid msghdr.
pub(crate) unsafe fn rsendmsg(sock: &Arc<DSocket>, m: &libc::msghdr, flags: c_int) -> Res<usize> {
    // SAFETY: the caller's vectors.
    let data = unsafe { gather(m.msg_iov, m.msg_iovlen) }?;
    let to = if m.msg_name.is_null() {
        None
    } else {
        // SAFETY: the caller's address.
        Some(unsafe { read_sockaddr(m.msg_name.cast(), m.msg_namelen) }?)
    };
    sendto(sock, &data, flags, to)
}

/// recvmsg(2): one datagram scattered over the iovecs; `msg_name` and MSG_TRUNC set.
///
/// # Safety
/// `m` is a valid msghdr.
pub(crate) unsafe fn rrecvmsg(
    sock: &Arc<DSocket>,
    m: &mut libc::msghdr,
    flags: c_int,
) -> Res<usize> {
    let mut tmp = vec![0u8; MSG_SIZE];
    let (n, full, from) = recv(sock, &mut tmp, flags)?;
    // SAFETY: the caller's vectors.
    let copied = unsafe { scatter(m.msg_iov, m.msg_iovlen, &tmp[..n]) }?;
    m.msg_flags = if copied < full { libc::MSG_TRUNC } else { 0 };
    if !m.msg_name.is_null() {
        let mut l = m.msg_namelen;
        // SAFETY: the caller's name buffer.
        unsafe { write_sockaddr(&from, m.msg_name.cast(), &mut l) }?;
        m.msg_namelen = l;
    }
    Ok(if flags & libc::MSG_TRUNC != 0 {
        full
    } else {
        copied
    })
}

/// # Safety
/// `iov` is NULL with `count` 0 or holds `count` iovecs of readable memory.
pub(crate) unsafe fn gather(iov: *const libc::iovec, count: usize) -> Res<Vec<u8>> {
    if count > 0 && iov.is_null() {
        return Err(libc::EFAULT);
    }
    if count > libc::UIO_MAXIOV as usize {
        return Err(libc::EINVAL);
    }
    let mut data = Vec::new();
    for i in 0..count {
        // SAFETY: the caller's vectors.
        let v = unsafe { *iov.add(i) };
        if v.iov_len == 0 {
            continue;
        }
        if v.iov_base.is_null() {
            return Err(libc::EFAULT);
        }
        if data.len() + v.iov_len > MSG_SIZE {
            return Err(libc::EMSGSIZE);
        }
        // SAFETY: as above.
        data.extend_from_slice(unsafe {
            core::slice::from_raw_parts(v.iov_base.cast(), v.iov_len)
        });
    }
    Ok(data)
}

/// # Safety
/// `iov` is NULL with `count` 0 or holds `count` iovecs of writable memory.
pub(crate) unsafe fn scatter(iov: *const libc::iovec, count: usize, data: &[u8]) -> Res<usize> {
    if count > 0 && iov.is_null() {
        return Err(libc::EFAULT);
    }
    let mut at = 0;
    for i in 0..count.min(libc::UIO_MAXIOV as usize) {
        if at == data.len() {
            break;
        }
        // SAFETY: the caller's vectors.
        let v = unsafe { *iov.add(i) };
        let n = v.iov_len.min(data.len() - at);
        if n == 0 {
            continue;
        }
        if v.iov_base.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: `n` bytes of the caller's vector.
        unsafe { core::ptr::copy_nonoverlapping(data[at..].as_ptr(), v.iov_base.cast(), n) };
        at += n;
    }
    Ok(at)
}

/// What `events` of the socket hold now (rsockets' rs_poll_rs for datagrams).
pub(crate) fn poll_events(sock: &DSocket, events: i16) -> i16 {
    let mut g = lock(sock);
    g.progress();
    let mut revents = 0;
    if events & libc::POLLIN != 0 && g.have_rdata() {
        revents |= libc::POLLIN;
    }
    if events & libc::POLLOUT != 0 && g.writable && g.can_send() {
        revents |= libc::POLLOUT;
    }
    revents
}

/// Arms the socket's CQs and says what to sleep on: its epoll set (a completion on any QP,
/// including one made meanwhile, wakes it). `None`: ready already.
pub(crate) fn arm_for_wait(sock: &DSocket, events: i16) -> Option<c_int> {
    {
        let mut g = lock(sock);
        g.arm();
    }
    if poll_events(sock, events) != 0 {
        return None;
    }
    Some(lock(sock).epfd)
}

/// After a sleep that `arm_for_wait`'s descriptor ended: the events taken.
pub(crate) fn after_wait(sock: &DSocket) {
    lock(sock).take_events();
}

pub(crate) fn rshutdown(sock: &DSocket, how: c_int) -> Res<()> {
    let mut g = lock(sock);
    match how {
        libc::SHUT_RD => g.readable = false,
        libc::SHUT_WR => g.writable = false,
        libc::SHUT_RDWR => {
            g.readable = false;
            g.writable = false;
        }
        _ => return Err(libc::EINVAL),
    }
    Ok(())
}

/// rclose (rsockets' ds_shutdown and ds_free): the service thread stopped, the sends
/// completed (a bounded wait), everything given back.
pub(crate) fn rclose(fd: c_int) -> Res<()> {
    let sock = table().remove(&fd).ok_or(libc::EBADF)?;
    stop_svc(&sock);
    let mut g = lock(&sock);
    let deadline = Instant::now() + CLOSE_DRAIN;
    while g.ep.as_ref().is_some_and(|ep| ep.sqe_avail < ep.sq_size) && Instant::now() < deadline {
        g.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let epfd = g.epfd;
    if let Some(mut ep) = g.ep.take() {
        let mut ahs = HashSet::new();
        for d in ep.dests.values() {
            if !d.ah.is_null() && d.ah != ep.qps[d.qp].self_ah {
                ahs.insert(d.ah as usize);
            }
        }
        if let Ok(a) = verbs() {
            for ah in ahs {
                // SAFETY: handles of this socket, each destroyed once.
                unsafe { (a.destroy_ah)(ah as *mut ibv_ah) };
            }
        }
        for q in &mut ep.qps {
            q.destroy(epfd);
        }
    }
    // SAFETY: the socket's own descriptors, closed once.
    unsafe {
        libc::close(g.epfd);
        libc::close(g.udp);
    }
    Ok(())
}

/// # Safety
/// As getsockname(2).
pub(crate) unsafe fn rgetsockname(
    sock: &DSocket,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Res<()> {
    let g = lock(sock);
    let a = local_addr(g.udp)?.ok_or(libc::EINVAL)?;
    // SAFETY: the caller's buffers.
    unsafe { write_sockaddr(&a, addr, len) }
}

/// # Safety
/// As getpeername(2).
pub(crate) unsafe fn rgetpeername(
    sock: &DSocket,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Res<()> {
    let g = lock(sock);
    let a = g.connected.ok_or(libc::ENOTCONN)?;
    // SAFETY: the caller's buffers.
    unsafe { write_sockaddr(&a, addr, len) }
}

/// rsetsockopt (rsockets: every level but SOL_RDMA goes to the UDP socket first; the
/// buffer sizes and SOL_RDMA's queue sizes count until the first QP exists).
///
/// # Safety
/// `value` holds `len` readable bytes.
pub(crate) unsafe fn rsetsockopt(
    sock: &DSocket,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> Res<()> {
    let mut g = lock(sock);
    if level != SOL_RDMA {
        // SAFETY: the socket's own fd; the caller's option.
        check(unsafe { libc::setsockopt(g.udp, level, name, value, len) })?;
        if level == libc::SOL_SOCKET {
            match name {
                libc::SO_RCVBUF if g.ep.is_none() => {
                    g.rbuf_size = (read_int(value, len)?.max(0) as u32)
                        .saturating_mul(2)
                        .clamp(SNDLOWAT, 1 << 30);
                }
                libc::SO_SNDBUF if g.ep.is_none() => {
                    g.sbuf_size = (read_int(value, len)?.max(0) as u32)
                        .saturating_mul(2)
                        .clamp(SNDLOWAT << 1, 1 << 30);
                }
                _ => {}
            }
        }
        return Ok(());
    }
    if g.ep.is_some() {
        return Err(libc::EINVAL);
    }
    let v = (read_int(value, len)?.max(0) as u32).min(QP_MAX_SIZE);
    match name {
        RDMA_SQSIZE => g.sq_size = v,
        RDMA_RQSIZE => g.rq_size = v,
        RDMA_INLINE => g.sq_inline = v,
        _ => return Err(libc::ENOTSUP),
    }
    Ok(())
}

/// # Safety
/// `value` holds `*len` writable bytes.
pub(crate) unsafe fn rgetsockopt(
    sock: &DSocket,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) -> Res<()> {
    let g = lock(sock);
    if value.is_null() || len.is_null() {
        return Err(libc::EFAULT);
    }
    let int = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_DGRAM,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.sbuf_size as c_int,
        (SOL_RDMA, RDMA_SQSIZE) => g.sq_size as c_int,
        (SOL_RDMA, RDMA_RQSIZE) => g.rq_size as c_int,
        (SOL_RDMA, RDMA_INLINE) => g.sq_inline as c_int,
        (SOL_RDMA, _) => return Err(libc::ENOTSUP),
        // SAFETY: the socket's own fd; the caller's buffers.
        _ => return check(unsafe { libc::getsockopt(g.udp, level, name, value, len) }),
    };
    // SAFETY: the caller's length.
    if (unsafe { *len } as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: room for an int.
    unsafe {
        value.cast::<c_int>().write_unaligned(int);
        *len = size_of::<c_int>() as socklen_t;
    }
    Ok(())
}

pub(crate) fn rfcntl(sock: &DSocket, cmd: c_int, arg: usize) -> Res<c_int> {
    let g = &mut *lock(sock);
    fcntl_flags(&mut g.fs_flags, &mut g.fd_flags, cmd, arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_hostile_ones_are_refused() {
        let v4: SocketAddr = "10.1.2.3:7174".parse().unwrap();
        let h = ds_header(&v4);
        assert_eq!(h, [4, 8, 0x1c, 0x06, 10, 1, 2, 3]);
        assert_eq!(parse_ds_header(&h), Some((v4, 8)));
        let v6: SocketAddr = "[fd99::11]:9".parse().unwrap();
        let h6 = ds_header(&v6);
        assert_eq!(h6.len(), 24);
        assert_eq!(parse_ds_header(&h6), Some((v6, 24)));
        assert_eq!(parse_ds_header(&[4, 24, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(parse_ds_header(&h6[..20]), None);
        assert_eq!(parse_ds_header(&[]), None);

        let u = udp_header(OP_DATA, 0x12_3456, v4.ip());
        assert_eq!(
            u,
            [
                0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0x12, 0x34, 0x56, 10, 1, 2, 3
            ]
        );
        assert_eq!(parse_udp_header(&u, &v4), Some((OP_DATA, 0x12_3456, 16)));
        // IPv4 header from an IPv6 sender, bad tag, unknown op, QP 1, short datagrams.
        assert_eq!(parse_udp_header(&u, &v6), None);
        let mut bad = u.clone();
        bad[0] = 0x54;
        assert_eq!(parse_udp_header(&bad, &v4), None);
        let mut bad = u.clone();
        bad[5] = 3;
        assert_eq!(parse_udp_header(&bad, &v4), None);
        let qp1 = udp_header(OP_CTRL, 1, v4.ip());
        assert_eq!(parse_udp_header(&qp1, &v4), None);
        assert_eq!(parse_udp_header(&u[..15], &v4), None);
        let u6 = udp_header(OP_CTRL, 77, v6.ip());
        assert_eq!(u6.len(), 28);
        assert_eq!(parse_udp_header(&u6, &v6), Some((OP_CTRL, 77, 28)));
        assert_eq!(parse_udp_header(&u6[..20], &v6), None);
    }
}
