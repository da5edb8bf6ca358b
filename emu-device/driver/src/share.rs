//! Several processes on one device, as on a real host where every process shares the HCA.
//!
//! The first process to open a device binds its address and port (the **owner**). A later
//! one finds the port taken and becomes a **guest**: it sends from a UDP socket of its own
//! on an ephemeral port (the RoCEv2 source port is free entropy; peers, rxe included,
//! answer to 4791) and registers with the owner over a unix socket in the abstract
//! namespace (`\0softroce/<ADDR>:<port>`), which gives it a **slot**. The slot is in the
//! top bits of its QPNs and of its CM communication IDs, so the owner routes what arrives
//! on the port: a datagram for a guest's QPN, a CM MAD answering a guest's connection, a
//! REQ or SIDR_REQ for a service a guest listens on go to that guest over a second unix
//! connection, with the datagram's source address; the guest's core takes it as if it
//! came from the wire.
//!
//! No daemon, no root: the owner is an ordinary process of the user, and only processes of
//! the same user may register (`SO_PEERCRED`). Everything read from a unix socket is
//! checked; a message that does not parse closes that connection and is counted, never
//! trusted. Toward a guest that does not read, the kernel's socket buffer is the queue: a
//! datagram it refuses is dropped and counted (RC retransmits).
//!
//! Why two connections per guest: registration and listens are request/response on the
//! control connection (a LISTEN is in force when the guest's `listen` returns, so a REQ
//! right after it is not refused), while forwarded datagrams stream on the data
//! connection, which the guest's receive path drains with its UDP socket. The data
//! connection proves it belongs to the slot with a random nonce from the WELCOME.
//!
//! The owner's exit closes both connections: each guest's data connection reads EOF, and
//! its engine tries to bind the port. The first to succeed becomes the owner in its own
//! slot; the others register with it again asking for their slots, so QPNs and CM IDs stay
//! valid (datagrams in flight meanwhile are lost; RC retransmits). A guest that can do
//! neither raises `IBV_EVENT_DEVICE_FATAL` (its QPs flush to the error state, its port goes
//! down) rather than wait for packets that will never come.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::parent_only::ParentOnly;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};
use softroce_emu_cm::comm_id_slot;
use softroce_emu_core::{MAX_SLOTS, qpn_slot};
use softroce_wire::RocePacket;
use softroce_wire::cm::{CmMadRepr, CmMessage};
use softroce_wire::mad::Mad;

use super::eventfd::EventFd;

/// The abstract unix socket name of the device receiving on `addr`.
pub fn socket_name(addr: SocketAddr) -> String {
    format!("\0softroce/{addr}")
}

/// How long a new owner keeps newcomers waiting for a slot: the guests of an owner that
/// died come back in their own slots first (they notice at once, and take a few
/// milliseconds to ask), so no newcomer is given a slot whose QPNs a guest still uses.
const REJOIN_GRACE: Duration = Duration::from_millis(300);

/// How long a guest waits for the owner's answer to a control request.
#[cfg(not(test))]
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// Short in the unit tests, which wait it out on purpose.
#[cfg(test)]
const CONTROL_TIMEOUT: Duration = Duration::from_millis(200);

/// Connections not yet registered that the owner keeps (older ones are closed first).
const MAX_PENDING: usize = 16;

/// Largest control message (a REFUSE's reason is cut to fit).
const MAX_CONTROL: usize = 256;

/// Kernel buffer toward each guest: the bound on what waits for a slow guest. A READ
/// response stream arrives at the owner as fast as the peer sends it (4 MiB of a UCX get
/// in a burst); a guest busy meanwhile loses what does not fit, and RC waits out its
/// timeout to resend it (4 MiB: a guest's gets ran at a sixth of the owner's).
const GUEST_BUFFER_BYTES: usize = 16 << 20;

/// A message on a unix connection between processes sharing a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Guest → owner, first on the control connection: register, in `slot` if free
    /// (`None`: any).
    Hello {
        /// The slot asked for.
        slot: Option<u8>,
    },
    /// Guest → owner, first on the data connection: it belongs to `slot`.
    Join {
        /// The guest's slot.
        slot: u8,
        /// The nonce of its WELCOME.
        nonce: u64,
    },
    /// Owner → guest: registered (or joined) in `slot`.
    Welcome {
        /// The slot.
        slot: u8,
        /// Proves the data connection's origin.
        nonce: u64,
    },
    /// Owner → guest: refused, and why.
    Refuse(String),
    /// Guest → owner: route REQs and SIDR_REQs for this service ID here.
    Listen(u64),
    /// Guest → owner: no longer.
    Unlisten(u64),
    /// Owner → guest: the answer to a `Listen` or `Unlisten` (false: another process
    /// listens on it).
    Ack(bool),
}

const TAG_HELLO: &[u8; 4] = b"SRH1";
const TAG_JOIN: &[u8; 4] = b"SRJ1";
const TAG_WELCOME: &[u8; 4] = b"SRW1";
const TAG_REFUSE: &[u8; 4] = b"SRR1";
const TAG_LISTEN: &[u8; 4] = b"SRL1";
const TAG_UNLISTEN: &[u8; 4] = b"SRU1";
const TAG_ACK: &[u8; 4] = b"SRA1";
/// A forwarded datagram: tag, address family (4 or 6), source port, source address, bytes.
const TAG_DATAGRAM: u8 = b'D';

/// Why a message was not understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed softroce sharing message: {0}")]
pub struct BadMessage(&'static str);

impl Message {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        match self {
            Self::Hello { slot } => {
                out.extend_from_slice(TAG_HELLO);
                out.push(slot.unwrap_or(u8::MAX));
            }
            Self::Join { slot, nonce } => {
                out.extend_from_slice(TAG_JOIN);
                out.push(*slot);
                out.extend_from_slice(&nonce.to_le_bytes());
            }
            Self::Welcome { slot, nonce } => {
                out.extend_from_slice(TAG_WELCOME);
                out.push(*slot);
                out.extend_from_slice(&nonce.to_le_bytes());
            }
            Self::Refuse(why) => {
                out.extend_from_slice(TAG_REFUSE);
                let mut end = why.len().min(MAX_CONTROL - 4);
                while !why.is_char_boundary(end) {
                    end -= 1;
                }
                out.extend_from_slice(&why.as_bytes()[..end]);
            }
            Self::Listen(sid) => {
                out.extend_from_slice(TAG_LISTEN);
                out.extend_from_slice(&sid.to_le_bytes());
            }
            Self::Unlisten(sid) => {
                out.extend_from_slice(TAG_UNLISTEN);
                out.extend_from_slice(&sid.to_le_bytes());
            }
            Self::Ack(ok) => {
                out.extend_from_slice(TAG_ACK);
                out.push(u8::from(*ok));
            }
        }
        out
    }

    /// Parse a control message; anything else (a datagram, garbage) is an error.
    pub fn decode(b: &[u8]) -> Result<Self, BadMessage> {
        let (tag, rest) = b.split_at_checked(4).ok_or(BadMessage("too short"))?;
        let u64_of = |r: &[u8]| -> Result<u64, BadMessage> {
            let a: [u8; 8] = r.try_into().map_err(|_| BadMessage("bad length"))?;
            Ok(u64::from_le_bytes(a))
        };
        let slot_of = |s: u8| -> Result<u8, BadMessage> {
            if usize::from(s) < MAX_SLOTS {
                Ok(s)
            } else {
                Err(BadMessage("slot out of range"))
            }
        };
        match tag {
            t if t == TAG_HELLO => match rest {
                [u8::MAX] => Ok(Self::Hello { slot: None }),
                [s] => Ok(Self::Hello {
                    slot: Some(slot_of(*s)?),
                }),
                _ => Err(BadMessage("bad HELLO length")),
            },
            t if t == TAG_JOIN || t == TAG_WELCOME => {
                let [s, nonce @ ..] = rest else {
                    return Err(BadMessage("bad length"));
                };
                let (slot, nonce) = (slot_of(*s)?, u64_of(nonce)?);
                Ok(if t == TAG_JOIN {
                    Self::Join { slot, nonce }
                } else {
                    Self::Welcome { slot, nonce }
                })
            }
            t if t == TAG_REFUSE => Ok(Self::Refuse(String::from_utf8_lossy(rest).into_owned())),
            t if t == TAG_LISTEN => Ok(Self::Listen(u64_of(rest)?)),
            t if t == TAG_UNLISTEN => Ok(Self::Unlisten(u64_of(rest)?)),
            t if t == TAG_ACK => match rest {
                [0] => Ok(Self::Ack(false)),
                [1] => Ok(Self::Ack(true)),
                _ => Err(BadMessage("bad ACK")),
            },
            _ => Err(BadMessage("unknown tag")),
        }
    }
}

/// The header of a forwarded datagram from `src`.
fn datagram_header(src: SocketAddr, out: &mut [u8; 20]) -> usize {
    out[0] = TAG_DATAGRAM;
    out[2..4].copy_from_slice(&src.port().to_be_bytes());
    match src.ip() {
        IpAddr::V4(v4) => {
            out[1] = 4;
            out[4..8].copy_from_slice(&v4.octets());
            8
        }
        IpAddr::V6(v6) => {
            out[1] = 6;
            out[4..20].copy_from_slice(&v6.octets());
            20
        }
    }
}

/// A forwarded datagram's source and bytes.
pub fn decode_datagram(b: &[u8]) -> Result<(SocketAddr, &[u8]), BadMessage> {
    let [TAG_DATAGRAM, family, p0, p1, rest @ ..] = b else {
        return Err(BadMessage("not a datagram"));
    };
    let port = u16::from_be_bytes([*p0, *p1]);
    let (ip, payload) = match family {
        4 => {
            let (a, p) = rest
                .split_first_chunk::<4>()
                .ok_or(BadMessage("short address"))?;
            (IpAddr::V4(Ipv4Addr::from(*a)), p)
        }
        6 => {
            let (a, p) = rest
                .split_first_chunk::<16>()
                .ok_or(BadMessage("short address"))?;
            (IpAddr::V6(Ipv6Addr::from(*a)), p)
        }
        _ => return Err(BadMessage("bad address family")),
    };
    Ok((SocketAddr::new(ip, port), payload))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Give the connection toward a guest [`GUEST_BUFFER_BYTES`]: past wmem_max where the
/// process may (CAP_NET_ADMIN), else what wmem_max allows. Best effort.
fn guest_buffer(conn: &impl std::os::fd::AsFd) {
    let bytes = libc::c_int::try_from(GUEST_BUFFER_BYTES).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt with a pointer to a live c_int and its size.
    let forced = unsafe {
        libc::setsockopt(
            conn.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    } == 0;
    if !forced {
        let _ = socket2::SockRef::from(conn).set_send_buffer_size(GUEST_BUFFER_BYTES);
    }
}

fn seqpacket() -> io::Result<Socket> {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
    s.set_cloexec(true)?;
    Ok(s)
}

/// Send one record (no SIGPIPE when the peer is gone).
fn send_record(fd: RawFd, bytes: &[u8], flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `bytes` is valid for its length during the call.
    let n = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            flags | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receive one record into `buf` (0: the peer closed). A record longer than `buf` is cut,
/// and reported as `InvalidData`.
fn recv_record(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length during the call.
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags | libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n > buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "record longer than any message",
        ));
    }
    Ok(n)
}

/// Wait until `fd` is readable (or hung up), at most `timeout`.
fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd during the call.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r > 0)
}

/// The uid of the process at the other end of `fd`.
fn peer_uid(fd: RawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for the call and sized as SO_PEERCRED writes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::from_mut(&mut cred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// A request/response exchange on a control connection.
fn request(fd: RawFd, msg: &Message) -> io::Result<Message> {
    send_record(fd, &msg.encode(), 0)?;
    await_reply(fd)
}

/// The next reply on a control connection, within `CONTROL_TIMEOUT`.
fn await_reply(fd: RawFd) -> io::Result<Message> {
    if !wait_readable(fd, CONTROL_TIMEOUT)? {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the device's owning process did not answer",
        ));
    }
    let mut buf = [0u8; MAX_CONTROL];
    let n = recv_record(fd, &mut buf, libc::MSG_DONTWAIT)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the device's owning process closed the connection",
        ));
    }
    Message::decode(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

// ---- owner ---------------------------------------------------------------------------

/// What decides which process a datagram on the device's port is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKey {
    /// The slot in its destination QPN, or in the communication ID a CM MAD addresses.
    Slot(u8),
    /// A REQ or SIDR_REQ: whoever listens on this service ID.
    Service(u64),
}

/// Where `datagram` goes, from its headers alone (`None`: it does not parse, or is a QP1
/// MAD of another class than the CM's; the owner keeps those).
pub fn route_key(datagram: &[u8]) -> Option<RouteKey> {
    let packet = RocePacket::new_checked(datagram).ok()?;
    let qpn = packet.bth().dest_qpn().value();
    if qpn != softroce_emu_core::GSI_QPN {
        return Some(RouteKey::Slot(qpn_slot(qpn)));
    }
    let mad = Mad::new_checked(packet.payload()).ok()?;
    let cm = CmMadRepr::parse(&mad).ok()?;
    Some(match cm.message {
        CmMessage::Req(r) => RouteKey::Service(r.service_id),
        CmMessage::SidrReq(r) => RouteKey::Service(r.service_id),
        m => RouteKey::Slot(comm_id_slot(m.comm_ids()?.1)),
    })
}

/// A registered guest.
#[derive(Debug)]
struct GuestEntry {
    control: ParentOnly<OwnedFd>,
    data: Option<ParentOnly<OwnedFd>>,
    nonce: u64,
    listens: BTreeSet<u64>,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Option<GuestEntry>>,
    /// Service ID → the guest slot listening on it.
    listens: HashMap<u64, u8>,
    /// What the owner itself listens on (a guest may not take these).
    own_listens: BTreeSet<u64>,
}

/// What the owner counts about sharing.
#[derive(Debug, Default)]
pub struct ShareCounters {
    /// Datagrams forwarded to guests.
    pub forwarded: AtomicU64,
    /// Datagrams for a guest that its connection refused (full, or gone).
    pub forward_drops: AtomicU64,
    /// Connections closed for a message that did not parse or came out of turn.
    pub bad_messages: AtomicU64,
    /// Registrations refused (a full slot table, another user, a taken slot).
    pub refused: AtomicU64,
}

/// The owner's side: the routing table its receive path reads and the thread that keeps
/// it (accepting guests, their listens, their exits).
#[derive(Debug)]
pub struct Router {
    my_slot: u8,
    table: Mutex<Table>,
    /// Guests with a data connection (the receive path looks no further while 0).
    active: AtomicUsize,
    /// What sharing did.
    pub counters: ShareCounters,
    stop: AtomicBool,
    wake: EventFd,
}

/// The owner's registry thread, stopped and joined on drop.
#[derive(Debug)]
pub struct Owner {
    /// The routing table.
    pub router: Arc<Router>,
    thread: Option<JoinHandle<()>>,
}

impl Owner {
    /// Listen for guests of the device receiving on `addr`; this process is in `my_slot`.
    pub fn start(addr: SocketAddr, my_slot: u8) -> io::Result<Self> {
        let listener = ParentOnly::new(seqpacket()?);
        listener.bind(&SockAddr::unix(socket_name(addr))?)?;
        listener.listen(64)?;
        listener.set_nonblocking(true)?;
        let mut slots = Vec::with_capacity(MAX_SLOTS);
        slots.resize_with(MAX_SLOTS, || None);
        let router = Arc::new(Router {
            my_slot,
            table: Mutex::new(Table {
                slots,
                listens: HashMap::new(),
                own_listens: BTreeSet::new(),
            }),
            active: AtomicUsize::new(0),
            counters: ShareCounters::default(),
            stop: AtomicBool::new(false),
            wake: EventFd::new()?,
        });
        let r = Arc::clone(&router);
        let thread = std::thread::Builder::new()
            .name("softroce-share".into())
            .spawn(move || registry(&r, &listener))?;
        Ok(Self {
            router,
            thread: Some(thread),
        })
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.router.stop.store(true, Ordering::SeqCst);
        let _ = self.router.wake.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Router {
    /// This process's slot.
    pub fn slot(&self) -> u8 {
        self.my_slot
    }

    /// Whether any guest may receive (cheap; checked per datagram).
    pub fn has_guests(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    /// The guest slot a datagram received on the device's port belongs to, or `None` for
    /// this process (its own QPs, QP1 MADs for nobody else, anything that does not parse:
    /// the core counts those drops).
    pub fn route(&self, datagram: &[u8]) -> Option<u8> {
        let key = route_key(datagram)?;
        let table = lock(&self.table);
        let slot = match key {
            RouteKey::Slot(slot) => slot,
            RouteKey::Service(sid) => *table.listens.get(&sid)?,
        };
        if slot == self.my_slot {
            return None;
        }
        table
            .slots
            .get(usize::from(slot))?
            .as_ref()?
            .data
            .as_ref()
            .map(|_| slot)
    }

    /// Forward `datagram` from `src` to the guest in `slot`; counted as dropped when its
    /// connection does not take it now (full or gone): the sender retransmits.
    pub fn forward(&self, slot: u8, src: SocketAddr, datagram: &[u8]) {
        let table = lock(&self.table);
        let Some(fd) = table
            .slots
            .get(usize::from(slot))
            .and_then(Option::as_ref)
            .and_then(|g| g.data.as_ref())
        else {
            self.counters.forward_drops.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut header = [0u8; 20];
        let hlen = datagram_header(src, &mut header);
        let iov = [
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: hlen,
            },
            libc::iovec {
                iov_base: datagram.as_ptr().cast_mut().cast(),
                iov_len: datagram.len(),
            },
        ];
        // SAFETY: all-zero is a valid msghdr; it points at `iov`, alive during the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr().cast_mut();
        msg.msg_iovlen = 2;
        // SAFETY: a valid fd and msghdr; the kernel only reads the buffers.
        let n = unsafe {
            libc::sendmsg(
                fd.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            self.counters.forward_drops.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The owner listens on `sid` unless a guest does: whether it may.
    pub fn claim_listen(&self, sid: u64) -> bool {
        let mut table = lock(&self.table);
        if table.listens.contains_key(&sid) {
            return false;
        }
        table.own_listens.insert(sid);
        true
    }

    /// The owner's listens are exactly `sids` (after an unlisten, say).
    pub fn set_own_listens(&self, sids: BTreeSet<u64>) {
        lock(&self.table).own_listens = sids;
    }

    /// Guests registered now.
    pub fn guests(&self) -> usize {
        lock(&self.table).slots.iter().flatten().count()
    }

    /// Handle one control message from the guest in `slot`; `false` closes it.
    fn on_control(&self, slot: u8, msg: Message) -> bool {
        let mut table = lock(&self.table);
        let Table {
            slots,
            listens,
            own_listens,
        } = &mut *table;
        let Some(g) = slots[usize::from(slot)].as_mut() else {
            return false;
        };
        let reply = match msg {
            Message::Listen(sid) => {
                let taken =
                    own_listens.contains(&sid) || listens.get(&sid).is_some_and(|&s| s != slot);
                if !taken {
                    listens.insert(sid, slot);
                    g.listens.insert(sid);
                }
                Message::Ack(!taken)
            }
            Message::Unlisten(sid) => {
                if g.listens.remove(&sid) {
                    listens.remove(&sid);
                }
                Message::Ack(true)
            }
            _ => return false,
        };
        send_record(g.control.as_raw_fd(), &reply.encode(), libc::MSG_DONTWAIT).is_ok()
    }

    /// A new connection's first message: a HELLO registers a guest, a JOIN attaches its
    /// data connection. Returns whether the connection was kept.
    fn on_first(&self, conn: ParentOnly<OwnedFd>, msg: Message) -> bool {
        let fd = conn.as_raw_fd();
        let refuse = |why: &str| {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            let _ = send_record(
                fd,
                &Message::Refuse(why.into()).encode(),
                libc::MSG_DONTWAIT,
            );
            false
        };
        let mut table = lock(&self.table);
        match msg {
            Message::Hello { slot } => {
                let free = |s: usize| s != usize::from(self.my_slot) && table.slots[s].is_none();
                let chosen = match slot {
                    Some(s) if free(usize::from(s)) => Some(s),
                    Some(_) => None,
                    None => (0..MAX_SLOTS).find(|&s| free(s)).map(|s| s as u8),
                };
                let Some(s) = chosen else {
                    return refuse(if slot.is_some() {
                        "the slot asked for is taken"
                    } else {
                        "every slot of the device is taken (64 processes share it)"
                    });
                };
                let nonce = crate::entropy::random_u64();
                if send_record(fd, &Message::Welcome { slot: s, nonce }.encode(), 0).is_err() {
                    return false;
                }
                table.slots[usize::from(s)] = Some(GuestEntry {
                    control: conn,
                    data: None,
                    nonce,
                    listens: BTreeSet::new(),
                });
                true
            }
            Message::Join { slot, nonce } => {
                let Some(g) = table.slots[usize::from(slot)].as_mut() else {
                    return refuse("no such slot");
                };
                if g.nonce != nonce || g.data.is_some() {
                    return refuse("not this slot's data connection");
                }
                guest_buffer(&*conn);
                if send_record(
                    conn.as_raw_fd(),
                    &Message::Welcome { slot, nonce }.encode(),
                    0,
                )
                .is_err()
                {
                    return false;
                }
                g.data = Some(conn);
                self.active.fetch_add(1, Ordering::AcqRel);
                true
            }
            _ => {
                self.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The guest in `slot` is gone: free its slot and its listens.
    fn remove(&self, slot: u8) {
        let mut table = lock(&self.table);
        if let Some(g) = table.slots[usize::from(slot)].take() {
            if g.data.is_some() {
                self.active.fetch_sub(1, Ordering::AcqRel);
            }
            for sid in g.listens {
                table.listens.remove(&sid);
            }
        }
    }
}

/// The owner's registry thread: accepts connections, reads their first message, serves
/// guests' control requests, and frees the slot of a guest whose control connection closes.
fn registry(router: &Router, listener: &Socket) {
    let started = Instant::now();
    let mut pending: Vec<(ParentOnly<OwnedFd>, Instant)> = Vec::new();
    // Newcomers (HELLO without a slot) that came during `REJOIN_GRACE`.
    let mut newcomers: Vec<ParentOnly<OwnedFd>> = Vec::new();
    let mut buf = [0u8; MAX_CONTROL];
    while !router.stop.load(Ordering::SeqCst) {
        if !newcomers.is_empty() && started.elapsed() >= REJOIN_GRACE {
            for conn in newcomers.drain(..) {
                router.on_first(conn, Message::Hello { slot: None });
            }
        }
        let timeout_ms = if newcomers.is_empty() {
            1000
        } else {
            REJOIN_GRACE
                .saturating_sub(started.elapsed())
                .as_millis()
                .clamp(1, 1000) as libc::c_int
        };
        // Control fds of registered guests, by slot.
        let guests: Vec<(u8, RawFd)> = lock(&router.table)
            .slots
            .iter()
            .enumerate()
            .filter_map(|(s, g)| Some((s as u8, g.as_ref()?.control.as_raw_fd())))
            .collect();
        let mut fds = vec![
            libc::pollfd {
                fd: router.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        fds.extend(pending.iter().map(|(c, _)| libc::pollfd {
            fd: c.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        fds.extend(guests.iter().map(|&(_, fd)| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: `fds` is a valid array of pollfds during the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if r < 0 {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        if fds[0].revents != 0 {
            let _ = router.wake.try_consume();
        }
        // Registered guests first (their fds are only valid while the table has them).
        for (i, &(slot, fd)) in guests.iter().enumerate() {
            if fds[2 + pending.len() + i].revents == 0 {
                continue;
            }
            let keep = match recv_record(fd, &mut buf, libc::MSG_DONTWAIT) {
                Ok(0) => false,
                Ok(n) => match Message::decode(&buf[..n]) {
                    Ok(m) => {
                        let ok = router.on_control(slot, m);
                        if !ok {
                            router.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                        }
                        ok
                    }
                    Err(e) => {
                        tracing::warn!(slot, error = %e, "closing a sharing guest");
                        router.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
                Err(e) => {
                    if e.kind() == io::ErrorKind::InvalidData {
                        router.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                    }
                    false
                }
            };
            if !keep {
                router.remove(slot);
            }
        }
        // Connections waiting for their first message.
        let ready: Vec<bool> = (0..pending.len())
            .map(|i| fds[2 + i].revents != 0)
            .collect();
        let mut still = Vec::with_capacity(pending.len());
        for ((conn, since), ready) in pending.drain(..).zip(ready) {
            if !ready {
                // A connection that never speaks is closed after the control timeout.
                if since.elapsed() < CONTROL_TIMEOUT {
                    still.push((conn, since));
                }
                continue;
            }
            match recv_record(conn.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT) {
                Ok(n) if n > 0 => match Message::decode(&buf[..n]) {
                    Ok(Message::Hello { slot: None })
                        if started.elapsed() < REJOIN_GRACE && newcomers.len() < MAX_PENDING =>
                    {
                        newcomers.push(conn);
                    }
                    Ok(m) => {
                        router.on_first(conn, m);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "closing a connection to the device's socket");
                        router.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => still.push((conn, since)),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    router.counters.bad_messages.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        pending = still;
        if fds[1].revents != 0 {
            // Accept what waits (bounded per round).
            for _ in 0..MAX_PENDING {
                let Ok((conn, _)) = listener.accept() else {
                    break;
                };
                let conn = ParentOnly::new(OwnedFd::from(conn));
                // SAFETY: getuid cannot fail.
                let me = unsafe { libc::getuid() };
                if peer_uid(conn.as_raw_fd()).ok() != Some(me) {
                    router.counters.refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if pending.len() >= MAX_PENDING {
                    pending.remove(0);
                }
                pending.push((conn, Instant::now()));
            }
        }
    }
}

// ---- guest ---------------------------------------------------------------------------

/// A guest's registration: its slot, the control connection its listens go through, and
/// the data connection its receive path drains.
#[derive(Debug)]
pub struct Guest {
    /// This process's slot.
    pub slot: u8,
    control: Mutex<ParentOnly<OwnedFd>>,
    data: ParentOnly<OwnedFd>,
    /// Service IDs registered with the owner.
    listens: Mutex<BTreeSet<u64>>,
    /// Listen and unlisten requests the owner did not answer in time (a stopped owner):
    /// their answers still come, first, and say what the owner did after all.
    unanswered: Mutex<std::collections::VecDeque<Message>>,
    /// The owner closed the data connection.
    pub owner_lost: AtomicBool,
    /// Forwarded records that did not parse (counted, dropped).
    pub bad_datagrams: AtomicU64,
}

impl Guest {
    /// Register with the owner of the device receiving on `addr`, asking for `slot`
    /// (`None`: any). `ConnectionRefused`/`NotFound`: nobody owns the device (yet).
    pub fn join(addr: SocketAddr, slot: Option<u8>) -> io::Result<Self> {
        let name = SockAddr::unix(socket_name(addr))?;
        let control = seqpacket()?;
        control.connect(&name)?;
        let control = ParentOnly::new(OwnedFd::from(control));
        // Abstract names have no permissions: only trust an owner of our own user.
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        if peer_uid(control.as_raw_fd())? != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("the process owning {addr} belongs to another user"),
            ));
        }
        let (slot, nonce) = match request(control.as_raw_fd(), &Message::Hello { slot })? {
            Message::Welcome { slot, nonce } => (slot, nonce),
            Message::Refuse(why) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("the process owning {addr} refused to share it: {why}"),
                ));
            }
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected answer from the device's owner: {other:?}"),
                ));
            }
        };
        let data = seqpacket()?;
        data.connect(&name)?;
        let _ = data.set_recv_buffer_size(GUEST_BUFFER_BYTES);
        let data = ParentOnly::new(OwnedFd::from(data));
        match request(data.as_raw_fd(), &Message::Join { slot, nonce })? {
            Message::Welcome { .. } => {}
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the device's owner refused the data connection: {other:?}"),
                ));
            }
        }
        Ok(Self {
            slot,
            control: Mutex::new(control),
            data,
            listens: Mutex::new(BTreeSet::new()),
            unanswered: Mutex::new(std::collections::VecDeque::new()),
            owner_lost: AtomicBool::new(false),
            bad_datagrams: AtomicU64::new(0),
        })
    }

    /// The data connection's fd, for `poll` (-1 once the owner is gone: it would stay
    /// readable forever).
    pub fn poll_fd(&self) -> RawFd {
        if self.owner_lost.load(Ordering::Acquire) {
            -1
        } else {
            self.data.as_raw_fd()
        }
    }

    /// Receive up to `max` forwarded datagrams without blocking, handing each to `deliver`.
    /// Returns how many records were read, and whether the owner just went away.
    pub fn receive(
        &self,
        buf: &mut [u8],
        max: usize,
        mut deliver: impl FnMut(SocketAddr, &[u8]),
    ) -> (usize, bool) {
        if self.owner_lost.load(Ordering::Acquire) {
            return (0, false);
        }
        let mut got = 0;
        for _ in 0..max {
            match recv_record(self.data.as_raw_fd(), buf, libc::MSG_DONTWAIT) {
                Ok(0) => {
                    self.owner_lost.store(true, Ordering::Release);
                    return (got, true);
                }
                Ok(n) => {
                    got += 1;
                    match decode_datagram(&buf[..n]) {
                        Ok((src, payload)) => deliver(src, payload),
                        Err(_) => {
                            self.bad_datagrams.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    got += 1;
                    self.bad_datagrams.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.owner_lost.store(true, Ordering::Release);
                    return (got, true);
                }
            }
        }
        (got, false)
    }

    /// Make the owner route REQs and SIDR_REQs for exactly `wanted` here. Errors name a
    /// service another process listens on, or a lost owner.
    pub fn sync_listens(&self, wanted: &BTreeSet<u64>) -> io::Result<()> {
        let mut have = lock(&self.listens);
        if *have == *wanted {
            return Ok(());
        }
        let control = lock(&self.control);
        let fd = control.as_raw_fd();
        let mut unanswered = lock(&self.unanswered);
        // Late answers first, in order, each taken for what the owner did: a listen it
        // made after all is this process's (and undone below when no longer wanted), and
        // no answer is read as the reply to a later request.
        while let Some(asked) = unanswered.front().cloned() {
            let reply = await_reply(fd)?;
            unanswered.pop_front();
            match (asked, reply) {
                (Message::Listen(sid), Message::Ack(true)) => {
                    have.insert(sid);
                }
                (Message::Unlisten(sid), _) => {
                    have.remove(&sid);
                }
                _ => {}
            }
        }
        if *have == *wanted {
            return Ok(());
        }
        // A request whose answer does not come in time is remembered with it.
        let mut ask = |msg: Message| -> io::Result<Message> {
            send_record(fd, &msg.encode(), 0)?;
            await_reply(fd).inspect_err(|e| {
                if e.kind() == io::ErrorKind::TimedOut {
                    unanswered.push_back(msg);
                }
            })
        };
        for &sid in have.difference(wanted).copied().collect::<Vec<_>>().iter() {
            ask(Message::Unlisten(sid))?;
            have.remove(&sid);
        }
        for &sid in wanted.difference(&have.clone()) {
            match ask(Message::Listen(sid))? {
                Message::Ack(true) => {
                    have.insert(sid);
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("another process on this device listens on service {sid:#x}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_owner_seats_returning_guests_before_newcomers() {
        // An owner that just took the port: a newcomer asks for any slot first, a guest of
        // the owner that died asks for its own (1) a moment later. The guest gets it; the
        // newcomer waits out the grace and gets another (it used to get 1 at once, and
        // the returning guest was refused and died).
        let addr: SocketAddr = "127.80.3.13:4791".parse().unwrap();
        let _owner = Owner::start(addr, 0).unwrap();
        let name = SockAddr::unix(socket_name(addr)).unwrap();
        let newcomer = seqpacket().unwrap();
        newcomer.connect(&name).unwrap();
        send_record(
            newcomer.as_raw_fd(),
            &Message::Hello { slot: None }.encode(),
            0,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let returning = seqpacket().unwrap();
        returning.connect(&name).unwrap();
        let back = request(returning.as_raw_fd(), &Message::Hello { slot: Some(1) }).unwrap();
        assert!(matches!(back, Message::Welcome { slot: 1, .. }), "{back:?}");
        assert!(wait_readable(newcomer.as_raw_fd(), REJOIN_GRACE * 10).unwrap());
        let mut buf = [0u8; MAX_CONTROL];
        let n = recv_record(newcomer.as_raw_fd(), &mut buf, 0).unwrap();
        let seated = Message::decode(&buf[..n]).unwrap();
        assert!(
            matches!(seated, Message::Welcome { slot, .. } if slot != 1),
            "{seated:?}"
        );
    }

    #[test]
    fn a_late_answer_is_taken_for_the_request_it_answers_not_the_next() {
        // A guest whose owner stops past the control timeout while it asks to listen:
        // the owner makes the listen after all and answers late. The guest's next sync
        // must read that answer as the listen's (and undo the listen it no longer wants),
        // not as the answer to its next request.
        let (ours, owners) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let (data, _data_peer) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let guest = Guest {
            slot: 1,
            control: Mutex::new(ParentOnly::new(OwnedFd::from(ours))),
            data: ParentOnly::new(OwnedFd::from(data)),
            listens: Mutex::new(BTreeSet::new()),
            unanswered: Mutex::new(std::collections::VecDeque::new()),
            owner_lost: AtomicBool::new(false),
            bad_datagrams: AtomicU64::new(0),
        };
        let owner = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; MAX_CONTROL];
            // Bounded: a guest that asks less than expected ends the script.
            owners.set_read_timeout(Some(CONTROL_TIMEOUT * 10)).unwrap();
            for step in 0..3 {
                let Ok(n) = owners.recv(&mut buf) else { break };
                seen.push(Message::decode(&buf[..n]).unwrap());
                if step == 0 {
                    // Stopped for longer than the guest waits.
                    std::thread::sleep(CONTROL_TIMEOUT * 2);
                }
                owners.send(&Message::Ack(true).encode()).unwrap();
            }
            seen
        });
        let e = guest.sync_listens(&BTreeSet::from([7])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        std::thread::sleep(CONTROL_TIMEOUT * 2);
        guest.sync_listens(&BTreeSet::from([9])).unwrap();
        assert_eq!(*lock(&guest.listens), BTreeSet::from([9]));
        assert_eq!(
            owner.join().unwrap(),
            [Message::Listen(7), Message::Unlisten(7), Message::Listen(9)],
            "the late listen undone, the new one asked and answered in turn"
        );
    }

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        for m in [
            Message::Hello { slot: None },
            Message::Hello { slot: Some(3) },
            Message::Join {
                slot: 63,
                nonce: 0x0123_4567_89ab_cdef,
            },
            Message::Welcome { slot: 1, nonce: 7 },
            Message::Refuse("full".into()),
            Message::Listen(0x0106_0000_0000_4e20),
            Message::Unlisten(5),
            Message::Ack(true),
            Message::Ack(false),
        ] {
            assert_eq!(Message::decode(&m.encode()), Ok(m));
        }
        for garbage in [
            &b""[..],
            b"SR",
            b"SRH1",
            b"SRH1\x40",
            b"SRJ1\x01\x00",
            b"SRL1\x01",
            b"SRA1\x02",
            b"XXXXXXXXXXXX",
            b"D\x04\x12\xb7\x7f",
        ] {
            assert!(Message::decode(garbage).is_err(), "{garbage:?}");
        }
        assert!(decode_datagram(b"D\x05\x12\xb7\x7f\x00\x00\x01").is_err());
        assert!(decode_datagram(b"D\x04\x12\xb7\x7f\x00").is_err());
        let src: SocketAddr = "127.80.0.9:49152".parse().unwrap();
        let mut h = [0u8; 20];
        let n = datagram_header(src, &mut h);
        let mut rec = h[..n].to_vec();
        rec.extend_from_slice(b"payload");
        assert_eq!(decode_datagram(&rec), Ok((src, &b"payload"[..])));
    }

    proptest::proptest! {
        /// Whatever arrives on a unix connection or the port, parsing never panics.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = Message::decode(&bytes);
            let _ = decode_datagram(&bytes);
            let _ = route_key(&bytes);
            let mut tagged = b"SRL1".to_vec();
            tagged.extend_from_slice(&bytes);
            let _ = Message::decode(&tagged);
        }
    }
}
