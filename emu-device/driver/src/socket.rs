//! The RoCEv2 UDP socket of one emulated device, with batched receive and send.
//!
//! Why the options matter:
//! - `IP_PMTUDISC_DO` on an *unconnected* socket makes Linux send DF packets with IPv4 ID 0, so
//!   the whole IPv4 header, which the ICRC covers, is predictable when we compute it.
//! - `UDP_NO_CHECK6_RX`: rxe sends UDP/IPv6 with a zero checksum, which Linux drops unless the
//!   receiving socket opts in.
//! - Large kernel buffers absorb the bursts a window of RC packets produces.
//! - `UDP_GRO`: the kernel may hand several datagrams of one flow over as one buffer (and a
//!   GSO send on loopback arrives whole), which [`Received::segment`] describes; one receive
//!   then moves up to 64 KiB. [`RoceSocket::send_groups`] is the sending half (`UDP_SEGMENT`).

use crate::parent_only::ParentOnly;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Kernel socket buffer size requested for both directions.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// `UDP_NO_CHECK6_RX` from `<linux/udp.h>` (not exported by libc on every version).
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// The largest datagram a RoCEv2 packet can be: 4096 B payload plus headers, rounded up.
pub const MAX_DATAGRAM: usize = 4096 + 256;

/// The largest buffer one receive fills: a UDP datagram, or datagrams coalesced by GRO.
pub const MAX_RECEIVE: usize = 65535;

/// The most bytes one GSO send carries (an IPv4 datagram's largest UDP payload).
pub const MAX_GSO_BYTES: usize = 65535 - 20 - 8;

/// The most datagrams one GSO send carries: Linux's `UDP_MAX_SEGMENTS`, 128 on newer
/// kernels (a small-message stream's sends, and their cost per call, halve), 64 before
/// ([`RoceSocket::gso_segments`] says which this one takes).
pub const MAX_GSO_SEGMENTS: usize = softroce_wire::icrc::UDP_MAX_SEGMENTS;

/// `UDP_MAX_SEGMENTS` of the kernels that take fewer than [`MAX_GSO_SEGMENTS`].
const OLD_MAX_GSO_SEGMENTS: usize = 64;

/// `<linux/udp.h>`, not exported by libc on every target.
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Room for one control message carrying an `int` (`CMSG_SPACE(sizeof(int))` on Linux).
const CMSG_INT_SPACE: usize = 24;
/// Room for two: a GSO or GRO segment size and a traffic class.
const CMSG_TWO_SPACE: usize = 2 * CMSG_INT_SPACE;

/// A bound, non-blocking UDP socket carrying RoCEv2 datagrams.
#[derive(Debug)]
pub struct RoceSocket {
    /// A forked child does not keep it (the port would stay taken after the parent).
    socket: ParentOnly<Socket>,
    local: SocketAddr,
    /// How many datagrams the next `recv_batch` asks for (see there).
    wanted: AtomicUsize,
    /// The most datagrams one GSO send may carry here (see [`RoceSocket::gso_segments`]).
    gso_segments: usize,
}

/// One received datagram's metadata (its bytes are in the caller's buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Bytes written into the buffer.
    pub len: usize,
    /// Sender address and port.
    pub from: SocketAddr,
    /// The datagram did not fit the buffer and was cut (`MSG_TRUNC`).
    pub truncated: bool,
    /// 0 for one datagram; else the buffer holds datagrams coalesced by GRO, each this
    /// long but the last (which may be shorter).
    pub segment: usize,
    /// The IPv4 TOS / IPv6 traffic class byte the datagram arrived with (GRO coalesces
    /// only datagrams whose IP headers agree on it).
    pub traffic_class: u8,
}

impl Received {
    /// The datagrams in `buf` (the buffer this metadata describes), in arrival order.
    pub fn datagrams<'a>(&self, buf: &'a [u8]) -> std::slice::Chunks<'a, u8> {
        let data = &buf[..self.len.min(buf.len())];
        data.chunks(self.datagram_len(data.len()))
    }

    /// The datagrams in `buf`, to change in place (a fault plan corrupting one).
    pub fn datagrams_mut<'a>(&self, buf: &'a mut [u8]) -> std::slice::ChunksMut<'a, u8> {
        let len = self.len.min(buf.len());
        let data = &mut buf[..len];
        data.chunks_mut(self.datagram_len(len))
    }

    /// How long each datagram of a buffer holding `len` bytes is (the last may be shorter).
    fn datagram_len(&self, len: usize) -> usize {
        if self.segment == 0 {
            len.max(1)
        } else {
            self.segment
        }
    }
}

/// Datagrams for one destination, sent as one: with `segment` > 0 the kernel cuts the
/// bytes of `iov` into datagrams of `segment` bytes (the last may be shorter) with UDP GSO;
/// with 0, `iov` is one datagram.
#[derive(Debug, Clone, Copy)]
pub struct SendGroup<'a> {
    /// Where the datagrams go.
    pub dest: SocketAddr,
    /// Their bytes, gathered in order.
    pub iov: &'a [IoSlice<'a>],
    /// Each datagram's length (0: one datagram).
    pub segment: u16,
    /// The IPv4 TOS / IPv6 traffic class byte they leave with (0: the socket's default).
    pub traffic_class: u8,
}

impl RoceSocket {
    /// Bind to `addr` (an IPv4 or IPv6 address and a port, 4791 by default) with the options
    /// above; the socket is non-blocking.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let domain = Domain::for_address(addr);
        let socket = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
        match addr {
            SocketAddr::V4(_) => set_int_opt(
                &socket,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?,
            SocketAddr::V6(_) => {
                socket.set_only_v6(true)?;
                set_int_opt(
                    &socket,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MTU_DISCOVER,
                    libc::IPV6_PMTUDISC_DO,
                )?;
                set_int_opt(&socket, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
            }
        }
        size_buffers(&socket);
        socket.bind(&SockAddr::from(addr)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind RoCEv2 UDP socket to {addr}: {e}"),
            )
        })?;
        socket.set_nonblocking(true)?;
        // Best effort (Linux 5.0+): without it every datagram is its own receive.
        let _ = set_int_opt(&socket, libc::SOL_UDP, UDP_GRO, 1);
        receive_traffic_class(&socket, addr);
        // Multicast leaves on the interface of the device's address (loopback for 127.x),
        // never by the default route: a group is reached where the device lives.
        match addr.ip() {
            std::net::IpAddr::V4(v4) => socket.set_multicast_if_v4(&v4)?,
            std::net::IpAddr::V6(v6) => {
                if let Some(index) = interface_index(v6.into()) {
                    let _ = socket.set_multicast_if_v6(index);
                }
            }
        }
        let local = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("bound socket has no IP address"))?;
        Ok(Self {
            socket: ParentOnly::new(socket),
            local,
            wanted: AtomicUsize::new(MAX_BATCH),
            gso_segments: probe_gso_segments(local.ip()),
        })
    }

    /// A socket receiving the multicast group `group` (an address and the device's port)
    /// on the interface of `device_ip`: bound to the group with `SO_REUSEADDR`, so every
    /// device and process on the host that joins the group gets its own copy, and a member
    /// of it (`IP_ADD_MEMBERSHIP` / `IPV6_JOIN_GROUP`) until dropped.
    pub fn bind_group(group: SocketAddr, device_ip: std::net::IpAddr) -> io::Result<Self> {
        let domain = Domain::for_address(group);
        let socket = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        size_buffers(&socket);
        match (group.ip(), device_ip) {
            (std::net::IpAddr::V4(g), std::net::IpAddr::V4(ours)) => {
                socket.bind(&SockAddr::from(group))?;
                socket.join_multicast_v4(&g, &ours)?;
            }
            (std::net::IpAddr::V6(g), std::net::IpAddr::V6(ours)) => {
                socket.set_only_v6(true)?;
                set_int_opt(&socket, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
                socket.bind(&SockAddr::from(group))?;
                let index = interface_index(ours.into()).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::AddrNotAvailable,
                        format!("no interface holds {ours}"),
                    )
                })?;
                socket.join_multicast_v6(&g, index)?;
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "group {group} and device address {device_ip} are of different IP families"
                    ),
                ));
            }
        }
        socket.set_nonblocking(true)?;
        let _ = set_int_opt(&socket, libc::SOL_UDP, UDP_GRO, 1);
        receive_traffic_class(&socket, group);
        Ok(Self {
            socket: ParentOnly::new(socket),
            local: group,
            wanted: AtomicUsize::new(MAX_BATCH),
            // It only receives.
            gso_segments: OLD_MAX_GSO_SEGMENTS,
        })
    }

    /// The receive buffer the kernel granted, in its accounting (twice what was asked).
    pub fn recv_buffer_bytes(&self) -> usize {
        self.socket.recv_buffer_size().unwrap_or(0)
    }

    /// The bound address (with the real port when 0 was requested).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The most datagrams one GSO send through this socket may carry: [`MAX_GSO_SEGMENTS`]
    /// where the kernel takes that many, else 64 (a longer send would be refused).
    pub fn gso_segments(&self) -> usize {
        self.gso_segments
    }

    /// How many buffers the next [`RoceSocket::recv_batch`] uses (see there). A caller
    /// need not set up more.
    pub fn batch_wanted(&self) -> usize {
        self.wanted.load(Ordering::Relaxed)
    }

    /// Receive up to `bufs.len()` datagrams with one `recvmmsg` call. Returns how many were
    /// received (metadata in `meta[..n]`); `Ok(0)` when none is waiting.
    ///
    /// After a call that found nothing, the next asks for one datagram only: a busy poller
    /// mostly finds nothing, and a look for one costs the kernel and us one message header
    /// instead of a batch's. After one that found some, the next asks for twice as many
    /// (up to [`MAX_BATCH`]): a ping-pong's look after its one arrival sets up two
    /// headers, not a batch's (with GRO a whole GSO send is one buffer), while a stream's
    /// batches grow back within a few calls.
    pub fn recv_batch(&self, bufs: &mut [&mut [u8]], meta: &mut [Received]) -> io::Result<usize> {
        let n = bufs
            .len()
            .min(meta.len())
            .min(self.wanted.load(Ordering::Relaxed).clamp(1, MAX_BATCH));
        if n == 0 {
            return Ok(0);
        }
        let mut iovs: [MaybeUninit<libc::iovec>; MAX_BATCH] = [MaybeUninit::uninit(); MAX_BATCH];
        // Only the first `n` entries are set up: an empty poll (a busy poller's usual
        // result) should not pay for clearing 32 address buffers.
        let mut addrs: [MaybeUninit<libc::sockaddr_storage>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        let mut msgs: [MaybeUninit<libc::mmsghdr>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        // u64s: control buffers must be aligned for cmsghdr. Set up as far as used.
        let mut cmsgs: [MaybeUninit<[u64; CMSG_TWO_SPACE / 8]>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        for i in 0..n {
            let cmsg = cmsgs[i].write([0u64; CMSG_TWO_SPACE / 8]);
            iovs[i].write(libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: bufs[i].len(),
            });
            let addr = addrs[i].as_mut_ptr();
            // SAFETY: writes the family field of an owned, suitably aligned storage: an
            // address the kernel did not fill reads as AF_UNSPEC.
            unsafe { (&raw mut (*addr).ss_family).write(libc::AF_UNSPEC as libc::sa_family_t) };
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let msg = msgs[i].write(unsafe { std::mem::zeroed() });
            let hdr = &mut msg.msg_hdr;
            hdr.msg_name = addr.cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = iovs[i].as_mut_ptr();
            hdr.msg_iovlen = 1;
            hdr.msg_control = cmsg.as_mut_ptr().cast();
            hdr.msg_controllen = CMSG_TWO_SPACE as _;
        }
        let got = loop {
            // SAFETY: `msgs[..n]` point at live iovecs/addresses/buffers for the whole call.
            let r = unsafe {
                mmsg_syscall(
                    libc::SYS_recvmmsg,
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr().cast(),
                    n as libc::c_uint,
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    self.wanted.store(1, Ordering::Relaxed);
                    return Ok(0);
                }
                _ => return Err(err),
            }
        };
        self.wanted
            .store((2 * got).clamp(1, MAX_BATCH), Ordering::Relaxed);
        for i in 0..got {
            // SAFETY: the kernel filled the address of each received message (its family
            // was set above), and `msgs[..n]` were initialised above.
            let (from, msg) = unsafe {
                (
                    sockaddr_to_std(addrs[i].as_ptr()),
                    msgs[i].assume_init_ref(),
                )
            };
            let (segment, traffic_class) = received_controls(&msg.msg_hdr);
            meta[i] = Received {
                len: (msg.msg_len as usize).min(bufs[i].len()),
                from: from.unwrap_or(self.local),
                truncated: msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                segment,
                traffic_class,
            };
        }
        Ok(got)
    }

    /// Send each `(destination, bytes, traffic class)` with one `sendmmsg` call; returns
    /// how many went out (the rest should be retried when the socket is writable).
    pub fn send_batch(&self, datagrams: &[(SocketAddr, &[u8], u8)]) -> io::Result<usize> {
        let n = datagrams.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        let mut iovs: [MaybeUninit<libc::iovec>; MAX_BATCH] = [MaybeUninit::uninit(); MAX_BATCH];
        let mut addrs: [MaybeUninit<SockAddr>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut cmsgs = [[0u64; CMSG_INT_SPACE / 8]; MAX_BATCH];
        for (i, (dest, bytes, traffic_class)) in datagrams.iter().take(n).enumerate() {
            iovs[i].write(libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            });
            let addr = addrs[i].write(SockAddr::from(*dest));
            let hdr = &mut msgs[i].msg_hdr;
            hdr.msg_name = addr.as_ptr().cast_mut().cast();
            hdr.msg_namelen = addr.len();
            hdr.msg_iov = iovs[i].as_mut_ptr();
            hdr.msg_iovlen = 1;
            if *traffic_class != 0 {
                hdr.msg_control = cmsgs[i].as_mut_ptr().cast();
                hdr.msg_controllen = CMSG_INT_SPACE as _;
                // SAFETY: the control buffer holds one CMSG_SPACE(sizeof(int)).
                let used = unsafe { put_traffic_class(hdr, 0, dest, *traffic_class) };
                hdr.msg_controllen = used as _;
            }
        }
        let sent = loop {
            // SAFETY: `msgs[..n]` point at live iovecs/addresses/buffers for the whole call;
            // sendmmsg only reads the payload.
            let r = unsafe {
                mmsg_syscall(
                    libc::SYS_sendmmsg,
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr().cast(),
                    n as libc::c_uint,
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => break 0,
                _ => return Err(err),
            }
        };
        for addr in addrs.iter_mut().take(n) {
            // SAFETY: the first `n` entries were initialised above.
            unsafe { addr.assume_init_drop() };
        }
        Ok(sent)
    }
}

/// `recvmmsg` or `sendmmsg` (`nr`) of `msgs[..n]` on `fd` with `MSG_DONTWAIT` (and, for
/// `recvmmsg`, no timeout: the fifth argument is null, and `sendmmsg` ignores it) as a bare
/// system call. libc's wrappers make each call a thread cancellation point, switching
/// cancellation on and off around it: a busy poller's every look paid for that (some 5 % of
/// an empty `ibv_poll_cq`), and an application's `pthread_cancel` has no business
/// unwinding through the device anyway.
///
/// # Safety
/// As `recvmmsg(2)`/`sendmmsg(2)`: `msgs[..n]` must point at live headers, buffers and
/// addresses for the whole call.
unsafe fn mmsg_syscall(
    nr: libc::c_long,
    fd: libc::c_int,
    msgs: *mut libc::mmsghdr,
    n: libc::c_uint,
) -> isize {
    // SAFETY: forwarded contract.
    unsafe {
        libc::syscall(
            nr,
            libc::c_long::from(fd),
            msgs,
            libc::c_long::from(n),
            libc::c_long::from(libc::MSG_DONTWAIT),
            std::ptr::null_mut::<libc::timespec>(),
        ) as isize
    }
}

impl RoceSocket {
    /// Send each group (see [`SendGroup`]) with one `sendmmsg` call; returns how many groups
    /// went out (the rest should be retried when the socket is writable). An error on the
    /// first group is returned: `EINVAL` or `EIO` for a segmented one means the kernel or
    /// the route cannot do UDP GSO.
    pub fn send_groups(&self, groups: &[SendGroup<'_>]) -> io::Result<usize> {
        let n = groups.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        let mut addrs: [MaybeUninit<SockAddr>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        // Set up as far as used: a ping-pong sends one group per call, and clearing 32
        // headers and control buffers for it cost more than the rest of the setup.
        let mut msgs: [MaybeUninit<libc::mmsghdr>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        let mut cmsgs: [MaybeUninit<[u64; CMSG_TWO_SPACE / 8]>; MAX_BATCH] =
            [const { MaybeUninit::uninit() }; MAX_BATCH];
        for (i, g) in groups.iter().take(n).enumerate() {
            let addr = addrs[i].write(SockAddr::from(g.dest));
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let msg = msgs[i].write(unsafe { std::mem::zeroed() });
            let hdr = &mut msg.msg_hdr;
            hdr.msg_name = addr.as_ptr().cast_mut().cast();
            hdr.msg_namelen = addr.len();
            // IoSlice is guaranteed ABI-compatible with iovec on Unix.
            hdr.msg_iov = g.iov.as_ptr().cast_mut().cast();
            hdr.msg_iovlen = g.iov.len() as _;
            if g.segment > 0 || g.traffic_class != 0 {
                let cmsg = cmsgs[i].write([0u64; CMSG_TWO_SPACE / 8]);
                hdr.msg_control = cmsg.as_mut_ptr().cast();
                hdr.msg_controllen = CMSG_TWO_SPACE as _;
                let mut used = 0;
                if g.segment > 0 {
                    // SAFETY: the control buffer is two CMSG_SPACE(sizeof(int)) aligned
                    // bytes, so the first header and its payload lie inside it.
                    unsafe {
                        let c = libc::CMSG_FIRSTHDR(hdr);
                        (*c).cmsg_level = libc::SOL_UDP;
                        (*c).cmsg_type = UDP_SEGMENT;
                        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                        libc::CMSG_DATA(c).cast::<u16>().write_unaligned(g.segment);
                    }
                    used = CMSG_INT_SPACE;
                }
                if g.traffic_class != 0 {
                    // SAFETY: room for a second CMSG_SPACE(sizeof(int)) after `used`.
                    used = unsafe { put_traffic_class(hdr, used, &g.dest, g.traffic_class) };
                }
                hdr.msg_controllen = used as _;
            }
        }
        let sent = loop {
            // SAFETY: `msgs[..n]` point at live iovecs/addresses/control buffers for the
            // whole call; sendmmsg only reads the payload.
            let r = unsafe {
                mmsg_syscall(
                    libc::SYS_sendmmsg,
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr().cast(),
                    n as libc::c_uint,
                )
            };
            if r >= 0 {
                break Ok(r as usize);
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => break Ok(0),
                _ => break Err(err),
            }
        };
        for addr in addrs.iter_mut().take(n) {
            // SAFETY: the first `n` entries were initialised above.
            unsafe { addr.assume_init_drop() };
        }
        sent
    }
}

/// The GRO segment size (0: none) and the traffic class a received message's control data
/// carries.
fn received_controls(hdr: &libc::msghdr) -> (usize, u8) {
    let (mut segment, mut traffic_class) = (0, 0);
    // SAFETY: `hdr` is a msghdr the kernel filled, its control buffer still live; the
    // CMSG_* walk stays inside msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, UDP_GRO) => {
                    segment = libc::CMSG_DATA(c)
                        .cast::<libc::c_int>()
                        .read_unaligned()
                        .max(0) as usize;
                }
                // IP_TOS arrives as one byte, IPV6_TCLASS as an int.
                (libc::IPPROTO_IP, libc::IP_TOS) => traffic_class = *libc::CMSG_DATA(c),
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                    traffic_class = libc::CMSG_DATA(c).cast::<libc::c_int>().read_unaligned() as u8;
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    (segment, traffic_class)
}

/// Writes an IP_TOS (IPv4) or IPV6_TCLASS (IPv6) control message for `dest` at byte
/// `offset` of `hdr`'s control buffer; returns the bytes used up to its end.
///
/// # Safety
/// `hdr.msg_control` holds at least `offset + CMSG_INT_SPACE` aligned bytes, `offset` a
/// multiple of the alignment.
unsafe fn put_traffic_class(
    hdr: &mut libc::msghdr,
    offset: usize,
    dest: &SocketAddr,
    traffic_class: u8,
) -> usize {
    let (level, kind) = if dest.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_TOS)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    };
    // SAFETY: the caller's contract.
    unsafe {
        let c = hdr
            .msg_control
            .cast::<u8>()
            .add(offset)
            .cast::<libc::cmsghdr>();
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        libc::CMSG_DATA(c)
            .cast::<libc::c_int>()
            .write_unaligned(libc::c_int::from(traffic_class));
    }
    offset + CMSG_INT_SPACE
}

/// Asks for each datagram's traffic class (best effort: without it they read as 0).
fn receive_traffic_class(socket: &Socket, addr: SocketAddr) {
    let _ = if addr.is_ipv4() {
        set_int_opt(socket, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    } else {
        set_int_opt(socket, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
    };
}

/// How many datagrams one batched syscall moves at most. Half a GSO send's worth: a burst's
/// first datagrams reach the peer while the rest are built (16 and 64 both measured
/// slower on ib_write_bw's 8 B message rate).
pub const MAX_BATCH: usize = 32;

impl AsRawFd for RoceSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for RoceSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// The index of the interface holding `ip` (0 is no interface).
fn interface_index(ip: std::net::IpAddr) -> Option<u32> {
    let name = crate::link::interface_of(ip)?;
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// How many datagrams one GSO send may carry on this kernel, found by trying: a send of
/// [`MAX_GSO_SEGMENTS`] one-byte segments between two throwaway sockets on the device's
/// address (nothing reaches the device; refused, or any step failing, means the older
/// limit). The kernel's version would not tell: distributions backport.
pub fn probe_gso_segments(ip: std::net::IpAddr) -> usize {
    let probe = || -> io::Result<()> {
        let from = SockAddr::from(SocketAddr::new(ip, 0));
        let rx = Socket::new(from.domain(), Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
        rx.bind(&from)?;
        let tx = Socket::new(from.domain(), Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
        tx.bind(&from)?;
        set_int_opt(&tx, libc::SOL_UDP, UDP_SEGMENT, 1)?;
        tx.set_nonblocking(true)?;
        tx.send_to(&[0; MAX_GSO_SEGMENTS], &rx.local_addr()?)?;
        Ok(())
    };
    match probe() {
        Ok(()) => MAX_GSO_SEGMENTS,
        Err(e) => {
            tracing::debug!(error = %e, "GSO sends of {MAX_GSO_SEGMENTS} datagrams refused; {OLD_MAX_GSO_SEGMENTS} at most");
            OLD_MAX_GSO_SEGMENTS
        }
    }
}

/// Give the socket [`SOCKET_BUFFER_BYTES`] each way: past rmem_max/wmem_max where the process
/// may (CAP_NET_ADMIN: root, as CI jobs and containers often run), else what those limits
/// allow (Debian's default is 208 KiB: a few dozen packets). Best effort either way.
fn size_buffers(socket: &Socket) {
    let bytes = libc::c_int::try_from(SOCKET_BUFFER_BYTES).unwrap_or(libc::c_int::MAX);
    if set_int_opt(socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_err() {
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
    }
    if set_int_opt(socket, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes).is_err() {
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    }
}

fn set_int_opt(
    socket: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// # Safety
/// `storage` points at a socket address whose family is set and, for AF_INET and
/// AF_INET6, whose `sockaddr_in`/`sockaddr_in6` is initialised.
unsafe fn sockaddr_to_std(storage: *const libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the family is set (contract).
    match unsafe { (*storage).ss_family } as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin: &libc::sockaddr_in = unsafe { &*(storage as *const _ as *const _) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                u32::from_be(sin.sin_addr.s_addr).into(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6: &libc::sockaddr_in6 = unsafe { &*(storage as *const _ as *const _) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                sin6.sin6_addr.s6_addr.into(),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Buffers of `buf_len` bytes received (within 5 s) until `enough` says so.
    fn recv_until(
        sock: &RoceSocket,
        buf_len: usize,
        enough: impl Fn(&[(Vec<u8>, Received)]) -> bool,
    ) -> Vec<(Vec<u8>, Received)> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !enough(&out) && Instant::now() < deadline {
            let mut storage = vec![vec![0u8; buf_len]; 8];
            let mut bufs: Vec<&mut [u8]> = storage.iter_mut().map(|b| b.as_mut_slice()).collect();
            let mut meta = [Received {
                len: 0,
                from: sock.local_addr(),
                truncated: false,
                segment: 0,
                traffic_class: 0,
            }; 8];
            let n = sock.recv_batch(&mut bufs, &mut meta).unwrap();
            for i in 0..n {
                out.push((bufs[i][..meta[i].len].to_vec(), meta[i]));
            }
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        out
    }

    fn recv_some(sock: &RoceSocket, want: usize) -> Vec<(Vec<u8>, Received)> {
        recv_until(sock, MAX_DATAGRAM, |got| got.len() >= want)
    }

    /// At least `want` datagrams, those coalesced by GRO cut apart, each with its sender.
    fn recv_datagrams(sock: &RoceSocket, want: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        let count = |got: &[(Vec<u8>, Received)]| -> usize {
            got.iter().map(|(b, m)| m.datagrams(b).count()).sum()
        };
        recv_until(sock, MAX_RECEIVE, |got| count(got) >= want)
            .iter()
            .flat_map(|(b, m)| m.datagrams(b).map(|d| (d.to_vec(), m.from)))
            .collect()
    }

    #[test]
    fn batch_of_datagrams_crosses_loopback_in_order() {
        let a = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100 + i as usize]).collect();
        let batch: Vec<(SocketAddr, &[u8], u8)> = payloads
            .iter()
            .map(|p| (b.local_addr(), p.as_slice(), 0))
            .collect();
        assert_eq!(a.send_batch(&batch).unwrap(), 5);
        let got = recv_some(&b, 5);
        assert_eq!(got.len(), 5);
        for (i, (bytes, meta)) in got.iter().enumerate() {
            assert_eq!(bytes, &payloads[i]);
            assert_eq!(meta.from, a.local_addr());
            assert!(!meta.truncated);
        }
    }

    #[test]
    fn a_gso_send_of_as_many_segments_as_the_probe_found_goes_and_one_more_is_refused() {
        let a = RoceSocket::bind("127.78.15.3:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("127.78.15.4:0".parse().unwrap()).unwrap();
        let max = a.gso_segments();
        assert!(
            max == MAX_GSO_SEGMENTS || max == OLD_MAX_GSO_SEGMENTS,
            "{max} is one of the kernels' limits"
        );
        let send = |segments: usize| {
            let bytes: Vec<u8> = (0..segments * 40).map(|i| (i / 40) as u8).collect();
            let iov = [IoSlice::new(&bytes)];
            let group = SendGroup {
                dest: b.local_addr(),
                iov: &iov,
                segment: 40,
                traffic_class: 0,
            };
            a.send_groups(&[group])
        };
        assert_eq!(send(max).unwrap(), 1, "{max} segments in one send");
        let refused = send(max + 1).expect_err("one more than the kernel takes");
        assert_eq!(refused.raw_os_error(), Some(libc::EINVAL));
        // What went arrives, every segment in order (one GRO buffer or several).
        let got: Vec<u8> = recv_datagrams(&b, max).iter().map(|d| d.0[0]).collect();
        let want: Vec<u8> = (0..max).map(|k| k as u8).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_gso_send_arrives_as_the_datagrams_it_was_cut_into() {
        let a = RoceSocket::bind("127.78.15.1:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("127.78.15.2:0".parse().unwrap()).unwrap();
        // Three full segments and a short last one, gathered from pieces that do not
        // follow segment boundaries; then a plain datagram in the same call.
        let bytes: Vec<u8> = (0..3 * 1000 + 300).map(|i| (i % 251) as u8).collect();
        let (x, y) = bytes.split_at(1500);
        let gso = [IoSlice::new(x), IoSlice::new(y)];
        let plain = [IoSlice::new(b"after")];
        let groups = [
            SendGroup {
                dest: b.local_addr(),
                iov: &gso,
                segment: 1000,
                traffic_class: 0,
            },
            SendGroup {
                dest: b.local_addr(),
                iov: &plain,
                segment: 0,
                traffic_class: 0,
            },
        ];
        assert_eq!(a.send_groups(&groups).unwrap(), 2);
        let got: Vec<Vec<u8>> = recv_datagrams(&b, 5)
            .into_iter()
            .map(|(bytes, from)| {
                assert_eq!(from, a.local_addr());
                bytes
            })
            .collect();
        let mut want: Vec<Vec<u8>> = bytes.chunks(1000).map(<[u8]>::to_vec).collect();
        want.push(b"after".to_vec());
        assert_eq!(got, want);
    }

    #[test]
    fn ipv6_loopback_socket_binds_with_zero_checksum_rx_enabled() {
        let a = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("[::1]:0".parse().unwrap()).unwrap();
        assert_eq!(a.send_batch(&[(b.local_addr(), b"hello", 0)]).unwrap(), 1);
        let got = recv_some(&b, 1);
        assert_eq!(got[0].0, b"hello");
    }

    #[test]
    fn binding_an_address_in_use_names_the_address() {
        let a = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let err = RoceSocket::bind(a.local_addr()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(
            err.to_string().contains(&a.local_addr().to_string()),
            "{err}"
        );
    }

    #[test]
    fn the_batch_asked_for_shrinks_to_one_when_idle_and_doubles_while_datagrams_come() {
        let a = RoceSocket::bind("127.78.16.1:0".parse().unwrap()).unwrap();
        let b = RoceSocket::bind("127.78.16.2:0".parse().unwrap()).unwrap();
        let mut storage = vec![vec![0u8; MAX_RECEIVE]; MAX_BATCH];
        let mut meta = [Received {
            len: 0,
            from: b.local_addr(),
            truncated: false,
            segment: 0,
            traffic_class: 0,
        }; MAX_BATCH];
        let mut look = |sock: &RoceSocket| {
            let mut bufs: Vec<&mut [u8]> = storage
                .iter_mut()
                .take(sock.batch_wanted())
                .map(|b| b.as_mut_slice())
                .collect();
            sock.recv_batch(&mut bufs, &mut meta).unwrap()
        };
        assert_eq!(
            b.batch_wanted(),
            MAX_BATCH,
            "a new socket takes a whole batch"
        );
        assert_eq!(look(&b), 0);
        assert_eq!(b.batch_wanted(), 1, "after an empty look, a look for one");
        // 40 plain datagrams wait (no GSO: each is a buffer of its own).
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 64]).collect();
        let batch: Vec<(SocketAddr, &[u8], u8)> = payloads
            .iter()
            .map(|p| (b.local_addr(), p.as_slice(), 0))
            .collect();
        assert_eq!(a.send_batch(&batch[..MAX_BATCH]).unwrap(), MAX_BATCH);
        assert_eq!(a.send_batch(&batch[MAX_BATCH..]).unwrap(), 40 - MAX_BATCH);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut first = 0;
        while first == 0 && Instant::now() < deadline {
            first = look(&b);
        }
        assert_eq!(first, 1, "the look after an idle one asks for one");
        let mut taken = vec![first];
        while taken.iter().sum::<usize>() < 40 && Instant::now() < deadline {
            let got = look(&b);
            if got > 0 {
                taken.push(got);
            }
        }
        // Each look asks for twice what the last one found, up to a batch.
        assert_eq!(&taken[..6], &[1, 2, 4, 8, 16, 9], "{taken:?}");
        assert_eq!(b.batch_wanted(), 18);
        assert_eq!(look(&b), 0);
        assert_eq!(b.batch_wanted(), 1);
    }

    #[test]
    fn empty_socket_receives_nothing_without_blocking() {
        let a = RoceSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut storage = vec![0u8; MAX_DATAGRAM];
        let mut bufs = [storage.as_mut_slice()];
        let mut meta = [Received {
            len: 0,
            from: a.local_addr(),
            truncated: false,
            segment: 0,
            traffic_class: 0,
        }];
        assert_eq!(a.recv_batch(&mut bufs, &mut meta).unwrap(), 0);
    }

    /// The traffic class a datagram is sent with is its IP header's TOS, and the receiver
    /// reads it back: a plain datagram, one GSO group (every segment), IPv6 too.
    #[test]
    fn the_traffic_class_leaves_in_the_ip_header_and_is_read_back() {
        for (ip_a, ip_b) in [("127.78.15.3:0", "127.78.15.4:0"), ("[::1]:0", "[::1]:0")] {
            let a = RoceSocket::bind(ip_a.parse().unwrap()).unwrap();
            let b = RoceSocket::bind(ip_b.parse().unwrap()).unwrap();
            let plain: &[u8] = b"plain";
            assert_eq!(a.send_batch(&[(b.local_addr(), plain, 0xb8)]).unwrap(), 1);
            let got = recv_some(&b, 1);
            assert_eq!(got.len(), 1, "{ip_a}");
            assert_eq!((got[0].0.as_slice(), got[0].1.traffic_class), (plain, 0xb8));
            let bytes = vec![7u8; 3 * 500];
            let gso = [IoSlice::new(&bytes)];
            let group = SendGroup {
                dest: b.local_addr(),
                iov: &gso,
                segment: 500,
                traffic_class: 0x22,
            };
            assert_eq!(a.send_groups(&[group]).unwrap(), 1);
            let got = recv_some(&b, 1);
            assert!(!got.is_empty(), "{ip_a}: the GSO send arrived");
            assert!(
                got.iter().all(|(_, m)| m.traffic_class == 0x22),
                "{ip_a}: every segment carries the class: {got:?}"
            );
            // And without one, 0.
            assert_eq!(a.send_batch(&[(b.local_addr(), plain, 0)]).unwrap(), 1);
            let got = recv_some(&b, 1);
            assert_eq!(got[0].1.traffic_class, 0, "{ip_a}");
        }
    }
}
