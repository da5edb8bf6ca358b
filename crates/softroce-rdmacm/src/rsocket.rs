//! rsockets (rsocket(7)): sockets over RDMA, for SOCK_STREAM, with librdmacm's wire protocol
//! so they talk to rdma-core's rsockets (`rstream`, `riostream`, `librspreload`) on rxe or a
//! RoCE NIC.
//!
//! Built, as rdma-core's own rsocket.c is, on the public rdma_cm and verbs calls only: the
//! connection manager through the drop-in's entry points, the verbs through libibverbs'
//! exports and the context's ops. Facts of the protocol (taken from rdma-core's rsocket.c):
//!
//! - Connecting carries `struct rs_conn_data` (40 bytes) as private data both ways: version 1,
//!   flags (bit 0: big-endian host, bit 1: iomap support), the receive-queue credits, and two
//!   `struct rs_sge {u64 addr; u32 key; u32 length}` in network order: where the peer writes
//!   buffer updates (`target_sgl`, 2 entries) and the first half of the data ring.
//! - Data moves as RDMA WRITE WITH IMMEDIATE into the peer's ring; the immediate is
//!   `op << 29 | data`: DATA (0, its length), SGL (4, the peer's new sequence limit, sent
//!   with a 16-byte `rs_sge` written into the sender's `target_sgl` slot naming the half of
//!   the ring freed), CTRL (7: 0 disconnect, 2 shutdown). The receive queue's entries are
//!   zero-length; every send is signaled.
//! - Credits: a sender may have `sseq_comp - sseq_no` messages outstanding; a receiver
//!   returns credits once half its queue or half its ring is consumed.
//!
//! - Direct placement: `riomap` writes a 24-byte `struct rs_iomap` (offset, then an
//!   `rs_sge`, unpadded) into a slot of the peer's iomap table (after its `target_sgl`, 24
//!   bytes a slot, sized by the conn data's scaled `target_iomap_size`) with immediate
//!   IOMAP_SGL (6, the slot); `riowrite` finds the peer's mapping in this side's table and
//!   writes with plain RDMA WRITEs.
//!
//! Datagram rsockets (SOCK_DGRAM) live in `rsocket_dgram`; each call here hands a datagram
//! socket's number over to it first.
//!
//! Keepalive (SO_KEEPALIVE, TCP_KEEPIDLE): every `keepalive_time` seconds a connected
//! socket sends a CTRL KEEPALIVE (1), a zero-length WRITE with immediate the peer ignores,
//! as rsockets' service thread does; a dead peer makes it run out of retries, and the
//! socket fails. Here the probes go from the calls that wait on the socket (a blocked
//! rrecv, rsend or rpoll), which are where a dead peer would otherwise go unnoticed.

use core::ffi::{c_int, c_void};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use libc::{pollfd, sockaddr, socklen_t};
use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::{
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_QP_STATE, IBV_QPS_ERR, IBV_QPT_RC,
    IBV_SEND_INLINE, IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, ibv_ah, ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq,
    ibv_device_attr, ibv_gid, ibv_mr, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc,
};

use crate::entry_points;
use crate::rsocket_dgram as dgram;

/// A datagram rsocket's calls that streams only have: not supported on one.
fn stream_only(fd: c_int) -> Res<()> {
    match dgram::lookup(fd) {
        Some(_) => Err(libc::EOPNOTSUPP),
        None => Ok(()),
    }
}

/// A result whose error is an errno value.
pub(crate) type Res<T> = Result<T, c_int>;

// ---- protocol constants (rdma-core's rsocket.c) -------------------------------------------

const RS_OP_DATA: u32 = 0;
const RS_OP_WRITE: u32 = 2;
const RS_OP_SGL: u32 = 4;
const RS_OP_IOMAP_SGL: u32 = 6;
const RS_OP_CTRL: u32 = 7;
const RS_CTRL_DISCONNECT: u32 = 0;
const RS_CTRL_KEEPALIVE: u32 = 1;
const RS_CTRL_SHUTDOWN: u32 = 2;
const RECV_WR_FLAG: u64 = 1 << 63;
const CONN_FLAG_NET: u8 = 1 << 0;
const CONN_FLAG_IOMAP: u8 = 1 << 1;
const CONN_DATA_LEN: usize = 40;
const OLAP_START_SIZE: u32 = 2048;
const MAX_TRANSFER: u32 = 65536;
pub(crate) const SNDLOWAT: u32 = 2048;
const QP_MIN_SIZE: u32 = 16;
pub(crate) const QP_MAX_SIZE: u32 = 0xFFFE;
const QP_CTRL_SIZE: u32 = 4;
const SGL_SIZE: usize = 2;
const SGE_LEN: usize = 16;
/// `struct rs_iomap`: offset (u64) and an `rs_sge` (u64 addr, u32 key, u32 length): 24
/// bytes, no padding. The table entries, their slots' addresses and the send-ring space an
/// update takes all use this size; a larger one writes past the end of rdma-core's table
/// (its target MR is `2 * 16 + 24 * entries` bytes), which rxe refuses with a Remote
/// Access Error NAK.
const IOMAP_LEN: usize = 24;
const _: () = assert!(IOMAP_LEN == 8 + SGE_LEN);
const DEFAULT_INLINE: u32 = 64;
const DEFAULT_QP_SIZE: u32 = 384;
const DEFAULT_MEM: u32 = 1 << 17;
/// How long resolving an address or a route may take.
pub(crate) const RESOLVE_TIMEOUT_MS: c_int = 2000;

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
pub(crate) const SOL_RDMA: c_int = 0x10000;
pub(crate) const RDMA_SQSIZE: c_int = 0;
pub(crate) const RDMA_RQSIZE: c_int = 1;
pub(crate) const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;
const RDMA_ROUTE: c_int = 4;

/// The defaults an administrator sets in /etc/rdma/rsocket (rsocket(7)), else rsockets'.
pub(crate) struct Defaults {
    pub(crate) mem: u32,
    pub(crate) wmem: u32,
    pub(crate) sq_size: u32,
    pub(crate) rq_size: u32,
    pub(crate) inline: u32,
    /// How long a blocking call polls before it sleeps on the completion channel.
    pub(crate) polling: Duration,
    /// The longest a blocking call or rpoll sleeps before it looks again: a safeguard
    /// against a wake-up that never comes.
    pub(crate) wake_up_ms: c_int,
}

pub(crate) fn defaults() -> &'static Defaults {
    static DEFAULTS: OnceLock<Defaults> = OnceLock::new();
    DEFAULTS.get_or_init(|| {
        // One integer per file; a file that is missing, unreadable, long or not a number
        // leaves the default (as rsockets' fscanf does). Only a regular file is read, and
        // opened without waiting: a FIFO there would block every program's first rsocket
        // call until some writer came.
        let read = |name: &str| -> Option<u64> {
            use std::io::Read as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let path = format!("/etc/rdma/rsocket/{name}");
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
                .ok()?;
            if !file.metadata().ok()?.is_file() {
                eprintln!("softroce librdmacm: {path} is not a regular file; its default is used");
                return None;
            }
            let mut text = String::new();
            file.take(64).read_to_string(&mut text).ok()?;
            text.trim().parse().ok()
        };
        let clamp = |v: Option<u64>, lo: u64, hi: u64, default: u32| {
            v.map_or(default, |v| v.clamp(lo, hi) as u32)
        };
        Defaults {
            mem: clamp(read("mem_default"), 1, 1 << 30, DEFAULT_MEM),
            wmem: clamp(
                read("wmem_default"),
                u64::from(SNDLOWAT) << 1,
                1 << 30,
                DEFAULT_MEM,
            ),
            sq_size: clamp(
                read("sqsize_default"),
                1,
                u64::from(QP_MAX_SIZE),
                DEFAULT_QP_SIZE,
            ),
            rq_size: clamp(
                read("rqsize_default"),
                1,
                u64::from(QP_MAX_SIZE),
                DEFAULT_QP_SIZE,
            ),
            inline: clamp(
                read("inline_default"),
                0,
                u64::from(QP_MAX_SIZE),
                DEFAULT_INLINE,
            ),
            polling: Duration::from_micros(read("polling_time").unwrap_or(10).min(1_000_000)),
            wake_up_ms: clamp(read("wake_up_interval"), 1, 60_000, 500) as c_int,
        }
    })
}

const fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}
const fn msg_op(m: u32) -> u32 {
    m >> 29
}
const fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// rsockets' rs_value_to_scale / rs_scale_to_value: an iomap table size in one byte.
fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}
fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

/// A buffer mapped for direct placement (`riomap`): its region, its offset, and the slot
/// of the peer's iomap table it was offered in (`None`: local only).
struct IoMapping {
    mr: *mut ibv_mr,
    offset: u64,
    slot: Option<u32>,
    /// Written into the peer's table yet.
    sent: bool,
}

// ---- libibverbs, found at run time ---------------------------------------------------------

type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
type CreateCompChannel = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel;
type DestroyCompChannel = unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int;
type CreateCq = unsafe extern "C" fn(
    *mut ibv_context,
    c_int,
    *mut c_void,
    *mut ibv_comp_channel,
    c_int,
) -> *mut ibv_cq;
type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type GetCqEvent =
    unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
type AckCqEvents = unsafe extern "C" fn(*mut ibv_cq, u32);
type ModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
type CreateAh = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
type DestroyAh = unsafe extern "C" fn(*mut ibv_ah) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
type QueryDevice = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;

/// The libibverbs exports rsockets needs (the post, poll and arm calls go through the
/// context's ops, as `<infiniband/verbs.h>` inlines them).
pub(crate) struct Verbs {
    pub(crate) reg_mr: RegMr,
    pub(crate) dereg_mr: DeregMr,
    pub(crate) create_comp_channel: CreateCompChannel,
    pub(crate) destroy_comp_channel: DestroyCompChannel,
    pub(crate) create_cq: CreateCq,
    pub(crate) destroy_cq: DestroyCq,
    pub(crate) get_cq_event: GetCqEvent,
    pub(crate) ack_cq_events: AckCqEvents,
    modify_qp: ModifyQp,
    // Datagram rsockets' address handles.
    pub(crate) create_ah: CreateAh,
    pub(crate) destroy_ah: DestroyAh,
    pub(crate) query_gid: QueryGid,
    /// The exported ibv_query_port, whose attribute block is a prefix of `ibv_port_attr`.
    pub(crate) query_port: QueryPort,
    /// For the queue sizes a connection may ask (`max_qp_wr`).
    query_device: QueryDevice,
}

pub(crate) fn verbs() -> Res<&'static Verbs> {
    static VERBS: OnceLock<Option<Verbs>> = OnceLock::new();
    VERBS
        .get_or_init(|| {
            // The drop-in's libibverbs is loaded (entry_points found it) or loadable.
            entry_points()?;
            // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process.
            let handle = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
            let find = |name: &core::ffi::CStr| {
                // SAFETY: NUL-terminated names; RTLD_DEFAULT or a valid handle.
                let mut f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
                if f.is_null() && !handle.is_null() {
                    // SAFETY: as above.
                    f = unsafe { libc::dlsym(handle, name.as_ptr()) };
                }
                (!f.is_null()).then_some(f)
            };
            // SAFETY (every transmute): the symbol is libibverbs' function of that name,
            // whose C signature (rdma-core's verbs.h) the target type declares.
            unsafe {
                Some(Verbs {
                    reg_mr: core::mem::transmute::<*mut c_void, RegMr>(find(c"ibv_reg_mr")?),
                    dereg_mr: core::mem::transmute::<*mut c_void, DeregMr>(find(c"ibv_dereg_mr")?),
                    create_comp_channel: core::mem::transmute::<*mut c_void, CreateCompChannel>(
                        find(c"ibv_create_comp_channel")?,
                    ),
                    destroy_comp_channel: core::mem::transmute::<*mut c_void, DestroyCompChannel>(
                        find(c"ibv_destroy_comp_channel")?,
                    ),
                    create_cq: core::mem::transmute::<*mut c_void, CreateCq>(find(
                        c"ibv_create_cq",
                    )?),
                    destroy_cq: core::mem::transmute::<*mut c_void, DestroyCq>(find(
                        c"ibv_destroy_cq",
                    )?),
                    get_cq_event: core::mem::transmute::<*mut c_void, GetCqEvent>(find(
                        c"ibv_get_cq_event",
                    )?),
                    ack_cq_events: core::mem::transmute::<*mut c_void, AckCqEvents>(find(
                        c"ibv_ack_cq_events",
                    )?),
                    modify_qp: core::mem::transmute::<*mut c_void, ModifyQp>(find(
                        c"ibv_modify_qp",
                    )?),
                    create_ah: core::mem::transmute::<*mut c_void, CreateAh>(find(
                        c"ibv_create_ah",
                    )?),
                    destroy_ah: core::mem::transmute::<*mut c_void, DestroyAh>(find(
                        c"ibv_destroy_ah",
                    )?),
                    query_gid: core::mem::transmute::<*mut c_void, QueryGid>(find(
                        c"ibv_query_gid",
                    )?),
                    query_port: core::mem::transmute::<*mut c_void, QueryPort>(find(
                        c"ibv_query_port",
                    )?),
                    query_device: core::mem::transmute::<*mut c_void, QueryDevice>(find(
                        c"ibv_query_device",
                    )?),
                })
            }
        })
        .as_ref()
        .ok_or(libc::ENOSYS)
}

// The data-path verbs `<infiniband/verbs.h>` inlines: through the object's context ops.

/// `ibv_post_send`.
///
/// # Safety
/// `qp` is a live QP; `wr` a valid chain whose SGEs point at registered memory.
pub(crate) unsafe fn post_send_wr(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> Res<()> {
    // SAFETY: a QP of a live context; the ops are the drop-in's.
    let f = unsafe { (*(*qp).context).ops.post_send }.ok_or(libc::ENOSYS)?;
    let mut bad = core::ptr::null_mut();
    // SAFETY: the caller's WR.
    match unsafe { f(qp, wr, &mut bad) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// `ibv_post_recv`.
///
/// # Safety
/// As [`post_send_wr`].
pub(crate) unsafe fn post_recv_wr(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> Res<()> {
    // SAFETY: as in `post_send_wr`.
    let f = unsafe { (*(*qp).context).ops.post_recv }.ok_or(libc::ENOSYS)?;
    let mut bad = core::ptr::null_mut();
    // SAFETY: the caller's WR.
    match unsafe { f(qp, wr, &mut bad) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// `ibv_poll_cq` into `wcs`: how many it took (0 when empty or failing).
///
/// # Safety
/// `cq` is a live CQ.
pub(crate) unsafe fn poll_cq(cq: *mut ibv_cq, wcs: &mut [ibv_wc]) -> Res<usize> {
    // SAFETY: a CQ of a live context.
    let poll = unsafe { (*(*cq).context).ops.poll_cq }.ok_or(libc::ENOSYS)?;
    // SAFETY: room for `wcs.len()` completions.
    let n = unsafe {
        poll(
            cq,
            wcs.len().min(c_int::MAX as usize) as c_int,
            wcs.as_mut_ptr(),
        )
    };
    Ok(usize::try_from(n).unwrap_or(0))
}

/// `ibv_req_notify_cq(cq, 0)`.
///
/// # Safety
/// `cq` is a live CQ.
pub(crate) unsafe fn arm_cq(cq: *mut ibv_cq) -> Res<()> {
    // SAFETY: a CQ of a live context.
    let arm = unsafe { (*(*cq).context).ops.req_notify_cq }.ok_or(libc::ENOSYS)?;
    // SAFETY: as above.
    match unsafe { arm(cq, 0) } {
        0 => Ok(()),
        e => Err(e),
    }
}

pub(crate) fn cm() -> Res<&'static RdmacmEntryPoints> {
    entry_points().ok_or(libc::ENOSYS)
}

pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// -1/errno of an rdma_* call as a result.
pub(crate) fn check(rc: c_int) -> Res<()> {
    if rc == 0 { Ok(()) } else { Err(errno()) }
}

pub(crate) fn set_nonblocking(fd: c_int, on: bool) -> Res<()> {
    // SAFETY: fcntl on a descriptor this library owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(errno());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) })
}

/// Waits until one of `fds` is readable, or `timeout_ms` (-1: no limit) passes.
fn wait_readable(fds: &[c_int], timeout_ms: c_int) -> Res<()> {
    let mut p: Vec<pollfd> = fds
        .iter()
        .map(|&fd| pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: a valid array of p.len() pollfds.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 && errno() != libc::EINTR {
        return Err(errno());
    }
    Ok(())
}

// ---- memory the device reads and writes ----------------------------------------------------

/// A zeroed, page-aligned allocation registered with the device; it never moves.
pub(crate) struct Buffer {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

impl Buffer {
    pub(crate) fn new(len: usize) -> Res<Self> {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|_| libc::ENOMEM)?;
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(libc::ENOMEM);
        }
        Ok(Self {
            ptr,
            len: len.max(1),
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe {
            std::alloc::dealloc(
                self.ptr,
                std::alloc::Layout::from_size_align_unchecked(self.len, 4096),
            )
        };
    }
}

/// `struct rs_sge` as it travels: addr, key, length.
#[derive(Debug, Clone, Copy, Default)]
struct RsSge {
    addr: u64,
    key: u32,
    length: u32,
}

// ---- a connection's datapath ---------------------------------------------------------------

/// The queue pair, buffers and counters of a connected (or connecting) socket.
struct Conn {
    cq_channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    sbuf: Buffer,
    rbuf: Buffer,
    /// `target_sgl`: where the peer writes the ring halves it frees.
    target: Buffer,
    smr: *mut ibv_mr,
    rmr: *mut ibv_mr,
    target_mr: *mut ibv_mr,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sbuf_size: u32,
    rbuf_size: u32,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,
    remote_sge: u32,
    remote_sgl: RsSge,
    target_sge: usize,
    /// The peer's byte order differs: SGL updates go byte-swapped.
    swap_sgl: bool,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,
    sbuf_bytes_avail: u32,
    /// Offset in `sbuf` of the next copy (rsockets' `ssgl[0].addr`).
    sbuf_head: u32,
    /// Lengths of the data messages received and not yet read (rsockets' rmsg ring).
    rmsg: VecDeque<u32>,
    /// Entries of this side's iomap table (after `target_sgl`), which the peer writes.
    target_iomap_size: u32,
    /// The peer's iomap table: where, its key, how many entries.
    remote_iomap: RsSge,
    /// This side's `riomap`s.
    iomaps: Vec<IoMapping>,
    sqe_avail: u32,
    cq_armed: bool,
    unacked_events: u32,
}

impl Conn {
    fn target_sgl(&self, i: usize) -> RsSge {
        // SAFETY: `target` holds SGL_SIZE entries of SGE_LEN bytes; the peer writes them
        // with RDMA WRITEs, so every read is volatile.
        unsafe {
            let p = self.target.ptr.add(i * SGE_LEN);
            RsSge {
                addr: core::ptr::read_volatile(p.cast::<u64>()),
                key: core::ptr::read_volatile(p.add(8).cast::<u32>()),
                length: core::ptr::read_volatile(p.add(12).cast::<u32>()),
            }
        }
    }

    fn set_target_sgl(&mut self, i: usize, sge: RsSge) {
        // SAFETY: as in `target_sgl`.
        unsafe {
            let p = self.target.ptr.add(i * SGE_LEN);
            core::ptr::write_volatile(p.cast::<u64>(), sge.addr);
            core::ptr::write_volatile(p.add(8).cast::<u32>(), sge.key);
            core::ptr::write_volatile(p.add(12).cast::<u32>(), sge.length);
        }
    }

    fn post_send(&self, wr: &mut ibv_send_wr) -> Res<()> {
        // SAFETY: the connection's QP; a valid WR whose SGEs point at live memory.
        unsafe { post_send_wr(self.qp, wr) }
    }

    fn post_recv(&self) -> Res<()> {
        let mut wr = ibv_recv_wr {
            wr_id: RECV_WR_FLAG,
            next: core::ptr::null_mut(),
            sg_list: core::ptr::null_mut(),
            num_sge: 0,
        };
        // SAFETY: the connection's QP; a receive WR without SGEs.
        unsafe { post_recv_wr(self.qp, &mut wr) }
    }

    /// An RDMA WRITE WITH IMMEDIATE carrying `message` (and `sgl`'s bytes to `addr`).
    fn write_msg(
        &self,
        sgl: &mut [ibv_sge],
        message: u32,
        flags: u32,
        addr: u64,
        rkey: u32,
    ) -> Res<()> {
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero numbers).
        let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
        wr.wr_id = u64::from(message);
        wr.sg_list = if sgl.is_empty() {
            core::ptr::null_mut()
        } else {
            sgl.as_mut_ptr()
        };
        wr.num_sge = sgl.len() as c_int;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = flags;
        wr.imm_data = message.to_be();
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
        self.post_send(&mut wr)
    }

    /// A message without data (a zero-length write needs no address or key: IBTA C9-88).
    fn post_msg(&self, message: u32) -> Res<()> {
        self.write_msg(&mut [], message, 0, 0, 0)
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target_sgl(self.target_sge).length != 0
    }

    fn all_sends_done(&self) -> bool {
        self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) + self.sqe_avail == self.sq_size
    }

    /// The 40-byte `struct rs_conn_data` this side offers.
    fn conn_data(&self) -> [u8; CONN_DATA_LEN] {
        let mut d = [0u8; CONN_DATA_LEN];
        d[0] = 1;
        d[1] = CONN_FLAG_IOMAP
            | if cfg!(target_endian = "big") {
                CONN_FLAG_NET
            } else {
                0
            };
        d[2..4].copy_from_slice(&(self.rq_size as u16).to_be_bytes());
        // reserved[3] stays 0.
        d[7] = value_to_scale(self.target_iomap_size, 8) as u8;
        // SAFETY: the MRs are registered (create_ep).
        let (target_rkey, rbuf_rkey) = unsafe { ((*self.target_mr).rkey, (*self.rmr).rkey) };
        d[8..16].copy_from_slice(&(self.target.ptr as u64).to_be_bytes());
        d[16..20].copy_from_slice(&target_rkey.to_be_bytes());
        d[20..24].copy_from_slice(&(SGL_SIZE as u32).to_be_bytes());
        d[24..32].copy_from_slice(&(self.rbuf.ptr as u64).to_be_bytes());
        d[32..36].copy_from_slice(&rbuf_rkey.to_be_bytes());
        d[36..40].copy_from_slice(&(self.rbuf_size >> 1).to_be_bytes());
        d
    }

    /// Takes the peer's `rs_conn_data` (rsockets' rs_save_conn_data).
    fn save_conn_data(&mut self, d: &[u8]) -> Res<()> {
        if d.len() < CONN_DATA_LEN || d[0] != 1 {
            return Err(libc::ENOTSUP);
        }
        let be64 = |at: usize| u64::from_be_bytes(d[at..at + 8].try_into().unwrap_or([0; 8]));
        let be32 = |at: usize| u32::from_be_bytes(d[at..at + 4].try_into().unwrap_or([0; 4]));
        self.remote_sgl = RsSge {
            addr: be64(8),
            key: be32(16),
            length: be32(20),
        };
        if self.remote_sgl.length == 0 {
            return Err(libc::EPROTO);
        }
        self.remote_sge = 1 % self.remote_sgl.length;
        let peer_net = d[1] & CONN_FLAG_NET != 0;
        self.swap_sgl = peer_net != cfg!(target_endian = "big");
        self.set_target_sgl(
            0,
            RsSge {
                addr: be64(24),
                key: be32(32),
                length: be32(36),
            },
        );
        self.sseq_comp = u16::from_be_bytes([d[2], d[3]]);
        if d[1] & CONN_FLAG_IOMAP != 0 {
            self.remote_iomap = RsSge {
                addr: self
                    .remote_sgl
                    .addr
                    .wrapping_add(SGE_LEN as u64 * u64::from(self.remote_sgl.length)),
                key: self.remote_sgl.key,
                length: scale_to_value(u32::from(d[7]), 8),
            };
        }
        Ok(())
    }

    /// rsockets' rs_give_credits / rs_send_credits: returns the freed half of the ring and
    /// the new sequence limit, or the limit alone.
    fn update_credits(&mut self, connected: bool) {
        let half = self.rbuf_size >> 1;
        let owed = self.rbuf_bytes_avail >= half
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0;
        if !(owed && self.ctrl_avail() && connected) {
            return;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size >> 1) as u16);
        let limit = msg(
            RS_OP_SGL,
            u32::from(self.rseq_no.wrapping_add(self.rq_size as u16)),
        );
        if self.rbuf_bytes_avail >= half {
            // SAFETY: rmr is registered.
            let rkey = unsafe { (*self.rmr).rkey };
            let mut sge = RsSge {
                addr: self.rbuf.ptr as u64 + u64::from(self.rbuf_free_offset),
                key: rkey,
                length: half,
            };
            if self.swap_sgl {
                sge = RsSge {
                    addr: sge.addr.swap_bytes(),
                    key: sge.key.swap_bytes(),
                    length: sge.length.swap_bytes(),
                };
            }
            let mut bytes = [0u8; SGE_LEN];
            bytes[0..8].copy_from_slice(&sge.addr.to_ne_bytes());
            bytes[8..12].copy_from_slice(&sge.key.to_ne_bytes());
            bytes[12..16].copy_from_slice(&sge.length.to_ne_bytes());
            // Inline when the QP takes 16 bytes inline, else from the control slots past
            // the send ring.
            let (addr, lkey, flags) = if self.sq_inline >= SGE_LEN as u32 {
                (bytes.as_ptr() as u64, 0, IBV_SEND_INLINE)
            } else {
                let slot = (self.ctrl_seqno & (QP_CTRL_SIZE - 1)) as usize;
                // SAFETY: sbuf holds QP_CTRL_SIZE slots of SGE_LEN bytes past sbuf_size.
                let p = unsafe { self.sbuf.ptr.add(self.sbuf_size as usize + slot * SGE_LEN) };
                // SAFETY: as above.
                unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, SGE_LEN) };
                // SAFETY: smr is registered.
                (p as u64, unsafe { (*self.smr).lkey }, 0)
            };
            let mut sgl = [ibv_sge {
                addr,
                length: SGE_LEN as u32,
                lkey,
            }];
            let to = self.remote_sgl.addr + u64::from(self.remote_sge) * SGE_LEN as u64;
            let _ = self.write_msg(&mut sgl, limit, flags, to, self.remote_sgl.key);
            self.rbuf_bytes_avail -= half;
            self.rbuf_free_offset += half;
            if self.rbuf_free_offset >= self.rbuf_size {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge += 1;
            if self.remote_sge == self.remote_sgl.length {
                self.remote_sge = 0;
            }
        } else {
            let _ = self.post_msg(limit);
        }
    }

    /// The peer's mapping (in this side's iomap table, which the peer writes) covering
    /// `offset`: its offset and where it lies.
    fn find_iomap(&self, offset: u64) -> Option<(u64, RsSge)> {
        (0..self.target_iomap_size as usize).find_map(|i| {
            // SAFETY: the table follows the SGL slots in `target`; the peer writes it, so
            // every read is volatile.
            let (off, sge) = unsafe {
                let p = self.target.ptr.add(SGL_SIZE * SGE_LEN + i * IOMAP_LEN);
                (
                    core::ptr::read_volatile(p.cast::<u64>()),
                    RsSge {
                        addr: core::ptr::read_volatile(p.add(8).cast::<u64>()),
                        key: core::ptr::read_volatile(p.add(16).cast::<u32>()),
                        length: core::ptr::read_volatile(p.add(20).cast::<u32>()),
                    },
                )
            };
            (sge.length != 0 && offset >= off && offset - off < u64::from(sge.length))
                .then_some((off, sge))
        })
    }

    /// Offers the mapping `m` in slot `slot` of the peer's iomap table (rs_write_iomap).
    fn write_iomap(&mut self, slot: u32, offset: u64, mr: *mut ibv_mr) -> Res<()> {
        // SAFETY: a registered region of this connection.
        let (addr, length, rkey) = unsafe { ((*mr).addr as u64, (*mr).length as u32, (*mr).rkey) };
        let mut entry = [0u8; IOMAP_LEN];
        let (offset, addr, rkey, length) = if self.swap_sgl {
            (
                offset.swap_bytes(),
                addr.swap_bytes(),
                rkey.swap_bytes(),
                length.swap_bytes(),
            )
        } else {
            (offset, addr, rkey, length)
        };
        entry[0..8].copy_from_slice(&offset.to_ne_bytes());
        entry[8..16].copy_from_slice(&addr.to_ne_bytes());
        entry[16..20].copy_from_slice(&rkey.to_ne_bytes());
        entry[20..24].copy_from_slice(&length.to_ne_bytes());
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= IOMAP_LEN as u32;
        let to = self.remote_iomap.addr + u64::from(slot) * IOMAP_LEN as u64;
        let key = self.remote_iomap.key;
        let (mut sgl, n) = self.stage(&entry);
        self.write_msg(&mut sgl[..n], msg(RS_OP_IOMAP_SGL, slot), 0, to, key)
    }

    /// Copies `bytes` into the send ring (wrapping) and returns the SGEs naming them (one,
    /// or two across the wrap).
    fn stage(&mut self, bytes: &[u8]) -> ([ibv_sge; 2], usize) {
        let len = bytes.len() as u32;
        let room = self.sbuf_size - self.sbuf_head;
        // SAFETY: smr is registered.
        let lkey = unsafe { (*self.smr).lkey };
        let base = self.sbuf.ptr;
        let head = self.sbuf_head;
        if len <= room {
            // SAFETY: `len` bytes fit in the ring from its head.
            unsafe {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(head as usize), bytes.len())
            };
            self.sbuf_head = if len < room { head + len } else { 0 };
            let one = ibv_sge {
                addr: base as u64 + u64::from(head),
                length: len,
                lkey,
            };
            ([one, one], 1)
        } else {
            let second = len - room;
            // SAFETY: the tail of the ring, then its start, hold the two parts.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    base.add(head as usize),
                    room as usize,
                );
                core::ptr::copy_nonoverlapping(
                    bytes.as_ptr().add(room as usize),
                    base,
                    second as usize,
                );
            }
            self.sbuf_head = second;
            let tail = ibv_sge {
                addr: base as u64 + u64::from(head),
                length: room,
                lkey,
            };
            let start = ibv_sge {
                addr: base as u64,
                length: second,
                lkey,
            };
            ([tail, start], 2)
        }
    }

    /// Writes `bytes` straight into the peer's mapped buffer at `addr` (rs_write_direct):
    /// a plain RDMA WRITE, no receive consumed at the peer.
    fn write_direct(&mut self, bytes: &[u8], addr: u64, rkey: u32) -> Res<()> {
        let len = bytes.len() as u32;
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let (mut sgl, n, flags) = if len <= self.sq_inline {
            let inline = ibv_sge {
                addr: bytes.as_ptr() as u64,
                length: len,
                lkey: 0,
            };
            ([inline, inline], 1, IBV_SEND_INLINE)
        } else {
            let (sgl, n) = self.stage(bytes);
            (sgl, n, 0)
        };
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero numbers).
        let mut wr: ibv_send_wr = unsafe { core::mem::zeroed() };
        wr.wr_id = u64::from(msg(RS_OP_WRITE, len));
        wr.sg_list = sgl.as_mut_ptr();
        wr.num_sge = n as c_int;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = flags;
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
        self.post_send(&mut wr)
    }

    /// Writes `len` bytes (`sgl`) into the peer's ring (rsockets' rs_write_data).
    fn write_data(&mut self, sgl: &mut [ibv_sge], len: u32, flags: u32) -> Res<()> {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let mut t = self.target_sgl(self.target_sge);
        let (addr, rkey) = (t.addr, t.key);
        // The slot is the peer's to write: saturating, so a peer that rewrote it meanwhile
        // breaks only its own stream.
        t.addr = t.addr.wrapping_add(u64::from(len));
        t.length = t.length.saturating_sub(len);
        self.set_target_sgl(self.target_sge, t);
        if t.length == 0 {
            self.target_sge = (self.target_sge + 1) % SGL_SIZE;
        }
        self.write_msg(sgl, msg(RS_OP_DATA, len), flags, addr, rkey)
    }
}

// ---- a socket ------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Init,
    Bound,
    Listening,
    ResolvingAddr,
    ResolvingRoute,
    Connecting,
    Connected,
    ConnectError,
    Disconnected,
    Error,
    /// Closed: its id and channel are gone (a thread still holding it must not touch them).
    Closed,
}

struct Inner {
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
    phase: Phase,
    readable: bool,
    writable: bool,
    /// The error SO_ERROR reports (and clears).
    err: c_int,
    fs_flags: c_int,
    fd_flags: c_int,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sbuf_size: u32,
    rbuf_size: u32,
    so_opts: u64,
    tcp_opts: u64,
    ipv6_opts: u64,
    ip_tos: c_int,
    keepalive_time: c_int,
    /// When the next keepalive probe is due (set once one is sent, or waited for).
    next_keepalive: Option<Instant>,
    /// Entries of the iomap table offered to the peer (RDMA_IOMAPSIZE).
    target_iomap_size: u32,
    /// Path records set with RDMA_ROUTE (`ibv_path_data[]`): the connect gives them to
    /// the CM (RDMA_OPTION_IB_PATH) instead of resolving a route, as rsockets does.
    route_option: Option<Vec<u8>>,
    dst: Option<libc::sockaddr_storage>,
    conn: Option<Box<Conn>>,
    /// A listener's connections, accepted as they come (see [`accept_service`]).
    accepted: Option<AcceptQueue>,
    /// A listener's accepting thread.
    accept_svc: Option<Service>,
}

// SAFETY: the raw pointers are the library's own objects, used under the socket's mutex.
unsafe impl Send for Inner {}

struct Socket {
    inner: Mutex<Inner>,
}

fn sockets() -> MutexGuard<'static, HashMap<c_int, Arc<Socket>>> {
    static SOCKETS: OnceLock<Mutex<HashMap<c_int, Arc<Socket>>>> = OnceLock::new();
    SOCKETS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Whether `fd` is a stream rsocket.
pub(crate) fn is_stream(fd: c_int) -> bool {
    sockets().contains_key(&fd)
}

fn lookup(fd: c_int) -> Res<Arc<Socket>> {
    sockets().get(&fd).cloned().ok_or(libc::EBADF)
}

fn lock(s: &Socket) -> MutexGuard<'_, Inner> {
    s.inner.lock().unwrap_or_else(|e| e.into_inner())
}

/// One CM event, copied out and acknowledged.
struct Event {
    kind: c_int,
    status: c_int,
    id: *mut rdma_cm_id,
    param: rdma_conn_param,
    private_data: Vec<u8>,
}

/// The next event on `channel` if one is pending (the channel's fd is non-blocking).
fn next_event(channel: *mut rdma_event_channel) -> Res<Option<Event>> {
    let cm = cm()?;
    let mut ev: *mut rdma_cm_event = core::ptr::null_mut();
    // SAFETY: a channel this library created.
    if unsafe { (cm.rdma_get_cm_event)(channel, &mut ev) } != 0 {
        let e = errno();
        return if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: a valid event until acknowledged; connection events carry `param.conn`.
    let out = unsafe {
        let e = &*ev;
        let conn = e.param.conn;
        let private_data = if conn.private_data.is_null() {
            Vec::new()
        } else {
            core::slice::from_raw_parts(
                conn.private_data.cast::<u8>(),
                usize::from(conn.private_data_len),
            )
            .to_vec()
        };
        Event {
            kind: e.event,
            status: e.status,
            id: e.id,
            param: rdma_conn_param {
                private_data: core::ptr::null(),
                private_data_len: 0,
                ..conn
            },
            private_data,
        }
    };
    // SAFETY: the event just taken.
    unsafe { (cm.rdma_ack_cm_event)(ev) };
    Ok(Some(out))
}

/// The next event on `channel`, waiting for it unless `nonblock` (EAGAIN then).
fn wait_event(channel: *mut rdma_event_channel, nonblock: bool) -> Res<Event> {
    loop {
        if let Some(ev) = next_event(channel)? {
            return Ok(ev);
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        // SAFETY: a live channel.
        wait_readable(&[unsafe { (*channel).fd }], defaults().wake_up_ms)?;
    }
}

/// The errno of an event that is not the one awaited (librdmacm's ucma_complete).
fn event_errno(ev: &Event) -> c_int {
    if ev.kind == RDMA_CM_EVENT_REJECTED {
        libc::ECONNREFUSED
    } else if ev.status < 0 {
        -ev.status
    } else if ev.status > 0 {
        ev.status
    } else {
        libc::ECONNABORTED
    }
}

impl Inner {
    fn new(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> Self {
        Self {
            id,
            channel,
            phase: Phase::Init,
            readable: false,
            writable: false,
            err: 0,
            fs_flags: 0,
            fd_flags: 0,
            sq_size: defaults().sq_size,
            rq_size: defaults().rq_size,
            sq_inline: defaults().inline,
            sbuf_size: defaults().wmem,
            rbuf_size: defaults().mem.max(SNDLOWAT << 1),
            so_opts: 0,
            tcp_opts: 0,
            ipv6_opts: 0,
            ip_tos: 0,
            keepalive_time: 0,
            next_keepalive: None,
            target_iomap_size: 0,
            route_option: None,
            dst: None,
            conn: None,
            accepted: None,
            accept_svc: None,
        }
    }

    fn nonblock(&self, flags: c_int) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    fn connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// With SO_KEEPALIVE on a connection: send the probe if it is due (and a control
    /// slot is free), and say how long until the next, which bounds a wait on the socket.
    fn keep_alive(&mut self) -> Option<Duration> {
        let on = self.so_opts & (1u64 << libc::SO_KEEPALIVE) != 0;
        if !on || !self.connected() || self.keepalive_time <= 0 {
            self.next_keepalive = None;
            return None;
        }
        let every = Duration::from_secs(self.keepalive_time as u64);
        let now = Instant::now();
        let due = *self.next_keepalive.get_or_insert(now + every);
        if now < due {
            return Some(due - now);
        }
        if let Some(c) = self.conn.as_mut()
            && c.ctrl_avail()
        {
            c.ctrl_seqno = c.ctrl_seqno.wrapping_add(1);
            if let Err(e) = c.post_msg(msg(RS_OP_CTRL, RS_CTRL_KEEPALIVE)) {
                self.phase = Phase::Error;
                self.err = e;
                return None;
            }
        }
        self.next_keepalive = Some(now + every);
        Some(every)
    }

    fn cm_fd(&self) -> c_int {
        // SAFETY: the socket's own channel.
        unsafe { (*self.channel).fd }
    }

    fn have_rdata(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| !c.rmsg.is_empty())
    }

    fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || !(self.connected() && self.readable)
    }

    fn can_send(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.can_send())
    }

    fn conn_can_send(&self) -> bool {
        self.can_send() || !(self.connected() && self.writable)
    }

    /// The QP, CQ, buffers and receives of a connection (rsockets' rs_create_ep).
    fn create_ep(&mut self) -> Res<()> {
        let v = verbs()?;
        let cm = cm()?;
        // SAFETY: the id has a device once its address is resolved or a request arrived.
        let ctx = unsafe { (*self.id).verbs };
        if ctx.is_null() {
            return Err(libc::EINVAL);
        }
        // As rsockets' rs_set_qp_size: the sizes asked (RDMA_SQSIZE, RDMA_RQSIZE) are cut to
        // what the device's queues hold, and kept so (read back as used).
        // SAFETY: all-zero bytes are a valid ibv_device_attr (integers and arrays).
        let mut attr: ibv_device_attr = unsafe { core::mem::zeroed() };
        // SAFETY: a live context and a struct to fill.
        let device_max = if unsafe { (v.query_device)(ctx, &mut attr) } == 0 {
            u32::try_from(attr.max_qp_wr).unwrap_or(0).max(QP_MIN_SIZE)
        } else {
            QP_MAX_SIZE
        };
        let max_size = device_max.min(QP_MAX_SIZE);
        self.sq_size = self.sq_size.clamp(QP_MIN_SIZE, max_size);
        self.rq_size = self.rq_size.clamp(QP_MIN_SIZE, max_size);
        let (sq_size, rq_size) = (self.sq_size, self.rq_size);
        // SAFETY: a live context.
        let cq_channel = unsafe { (v.create_comp_channel)(ctx) };
        if cq_channel.is_null() {
            return Err(errno());
        }
        // SAFETY: the channel just made.
        let fd = unsafe { (*cq_channel).fd };
        let teardown_channel = |e: c_int| {
            // SAFETY: the channel just made, unused.
            unsafe { (v.destroy_comp_channel)(cq_channel) };
            e
        };
        set_nonblocking(fd, true).map_err(teardown_channel)?;
        // SAFETY: a live context and channel.
        let cq = unsafe {
            (v.create_cq)(
                ctx,
                (sq_size + rq_size) as c_int,
                core::ptr::null_mut(),
                cq_channel,
                0,
            )
        };
        if cq.is_null() {
            return Err(teardown_channel(errno()));
        }
        let mut attr = ibv_qp_init_attr {
            qp_context: core::ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: core::ptr::null_mut(),
            cap: softroce_ibverbs_abi::ibv_qp_cap {
                max_send_wr: sq_size,
                max_recv_wr: rq_size,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: self.sq_inline,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 1,
        };
        // SAFETY: the id and a valid attribute block.
        if unsafe { (cm.rdma_create_qp)(self.id, core::ptr::null_mut(), &mut attr) } != 0 {
            let e = errno();
            // SAFETY: the CQ and channel just made.
            unsafe { (v.destroy_cq)(cq) };
            return Err(teardown_channel(e));
        }
        // SAFETY: rdma_create_qp set the QP (and the id's default PD).
        let (qp, pd) = unsafe {
            let qp = (*self.id).qp;
            let pd = if (*self.id).pd.is_null() {
                (*qp).pd
            } else {
                (*self.id).pd
            };
            (qp, pd)
        };
        let mut conn = Box::new(Conn {
            cq_channel,
            cq,
            qp,
            sbuf: Buffer::new(self.sbuf_size as usize + QP_CTRL_SIZE as usize * SGE_LEN)?,
            rbuf: Buffer::new(self.rbuf_size as usize)?,
            target: Buffer::new(SGL_SIZE * SGE_LEN + self.target_iomap_size as usize * IOMAP_LEN)?,
            smr: core::ptr::null_mut(),
            rmr: core::ptr::null_mut(),
            target_mr: core::ptr::null_mut(),
            sq_size,
            rq_size,
            sq_inline: attr.cap.max_inline_data,
            sbuf_size: self.sbuf_size,
            rbuf_size: self.rbuf_size,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: (rq_size >> 1) as u16,
            remote_sge: 0,
            remote_sgl: RsSge::default(),
            target_sge: 0,
            swap_sgl: false,
            rbuf_bytes_avail: self.rbuf_size >> 1,
            rbuf_free_offset: self.rbuf_size >> 1,
            rbuf_offset: 0,
            sbuf_bytes_avail: self.sbuf_size,
            sbuf_head: 0,
            rmsg: VecDeque::with_capacity(rq_size as usize + 1),
            target_iomap_size: self.target_iomap_size,
            remote_iomap: RsSge::default(),
            iomaps: Vec::new(),
            sqe_avail: sq_size - QP_CTRL_SIZE,
            cq_armed: false,
            unacked_events: 0,
        });
        self.sq_inline = conn.sq_inline;
        let local = IBV_ACCESS_LOCAL_WRITE as c_int;
        let remote = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int;
        // SAFETY: the buffers live as long as the connection and are deregistered first.
        unsafe {
            conn.smr = (v.reg_mr)(pd, conn.sbuf.ptr.cast(), conn.sbuf.len, local);
            conn.target_mr = (v.reg_mr)(pd, conn.target.ptr.cast(), conn.target.len, remote);
            conn.rmr = (v.reg_mr)(pd, conn.rbuf.ptr.cast(), conn.rbuf.len, remote);
        }
        let registered = !conn.smr.is_null() && !conn.target_mr.is_null() && !conn.rmr.is_null();
        let e = errno();
        self.conn = Some(conn);
        if !registered {
            return Err(e);
        }
        if let Some(c) = self.conn.as_ref() {
            for _ in 0..c.rq_size {
                c.post_recv()?;
            }
        }
        Ok(())
    }

    /// Takes completions (rsockets' rs_poll_cq), then gives credits back.
    fn progress(&mut self) -> Res<()> {
        let connected = self.connected();
        let Some(c) = self.conn.as_mut() else {
            return Err(libc::ENOTCONN);
        };
        c.update_credits(connected);
        let mut received = 0u32;
        let mut wcs = [ibv_wc::default(); 16];
        let mut stop = false;
        'poll: loop {
            // SAFETY: the connection's CQ.
            let n = unsafe { poll_cq(c.cq, &mut wcs) }?;
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                if wc.wr_id & RECV_WR_FLAG != 0 {
                    if wc.status != IBV_WC_SUCCESS || wc.wc_flags & IBV_WC_WITH_IMM == 0 {
                        continue;
                    }
                    received += 1;
                    let m = u32::from_be(wc.imm_data);
                    match msg_op(m) {
                        RS_OP_SGL => c.sseq_comp = msg_data(m) as u16,
                        RS_OP_IOMAP_SGL | RS_OP_WRITE => {}
                        RS_OP_CTRL => match msg_data(m) {
                            RS_CTRL_DISCONNECT => {
                                self.phase = Phase::Disconnected;
                                stop = true;
                                break 'poll;
                            }
                            RS_CTRL_SHUTDOWN => {
                                if self.writable {
                                    self.readable = false;
                                } else {
                                    self.phase = Phase::Disconnected;
                                    stop = true;
                                    break 'poll;
                                }
                            }
                            _ => {}
                        },
                        _ => {
                            // A peer cannot send more messages than its credits allow; one
                            // that does is broken: drop what would not fit.
                            if c.rmsg.len() <= c.rq_size as usize {
                                c.rmsg.push_back(msg_data(m).min(c.rbuf_size));
                            }
                        }
                    }
                } else {
                    let data = wc.wr_id as u32;
                    match msg_op(data) {
                        RS_OP_SGL => c.ctrl_max_seqno = c.ctrl_max_seqno.wrapping_add(1),
                        RS_OP_CTRL => {
                            c.ctrl_max_seqno = c.ctrl_max_seqno.wrapping_add(1);
                            if msg_data(data) == RS_CTRL_DISCONNECT {
                                self.phase = Phase::Disconnected;
                            }
                        }
                        RS_OP_IOMAP_SGL => {
                            c.sqe_avail += 1;
                            c.sbuf_bytes_avail += IOMAP_LEN as u32;
                        }
                        _ => {
                            c.sqe_avail += 1;
                            c.sbuf_bytes_avail += msg_data(data);
                        }
                    }
                    if wc.status != IBV_WC_SUCCESS && self.phase == Phase::Connected {
                        self.phase = Phase::Error;
                        self.err = libc::EIO;
                    }
                }
            }
        }
        if !stop && self.phase == Phase::Connected {
            for _ in 0..received {
                if let Err(e) = c.post_recv() {
                    self.phase = Phase::Error;
                    self.err = e;
                    break;
                }
            }
        }
        c.update_credits(self.phase == Phase::Connected);
        Ok(())
    }

    /// A completion event the channel holds, taken (the CQ is then unarmed).
    fn take_cq_event(&mut self) {
        let Ok(v) = verbs() else { return };
        let Some(c) = self.conn.as_mut() else { return };
        let mut cq = core::ptr::null_mut();
        let mut ctx = core::ptr::null_mut();
        // SAFETY: the connection's channel, non-blocking.
        while unsafe { (v.get_cq_event)(c.cq_channel, &mut cq, &mut ctx) } == 0 {
            c.unacked_events += 1;
            c.cq_armed = false;
        }
        if c.unacked_events >= c.sq_size + c.rq_size {
            // SAFETY: events taken from this CQ.
            unsafe { (v.ack_cq_events)(c.cq, c.unacked_events) };
            c.unacked_events = 0;
        }
    }

    /// CM events of a connection: a DREQ from the peer ends it.
    fn take_cm_events(&mut self) {
        while let Ok(Some(ev)) = next_event(self.channel) {
            if ev.kind == RDMA_CM_EVENT_DISCONNECTED && self.connected() {
                self.phase = Phase::Disconnected;
            }
        }
    }

    fn arm(&mut self) -> Res<()> {
        let Some(c) = self.conn.as_mut() else {
            return Ok(());
        };
        if !c.cq_armed {
            // SAFETY: the connection's CQ.
            unsafe { arm_cq(c.cq) }?;
            c.cq_armed = true;
        }
        Ok(())
    }

    /// Drives a connect one step at a time (rsockets' rs_do_connect); EINPROGRESS while a
    /// non-blocking socket waits for the CM.
    fn drive_connect(&mut self, nonblock: bool) -> Res<()> {
        let cm = cm()?;
        let result = loop {
            match self.phase {
                Phase::Init | Phase::Bound => {
                    let Some(mut dst) = self.dst else {
                        break Err(libc::EDESTADDRREQ);
                    };
                    // SAFETY: the id and a socket address.
                    let rc = unsafe {
                        (cm.rdma_resolve_addr)(
                            self.id,
                            core::ptr::null_mut(),
                            (&mut dst as *mut libc::sockaddr_storage).cast(),
                            RESOLVE_TIMEOUT_MS,
                        )
                    };
                    if rc != 0 {
                        break Err(errno());
                    }
                    self.phase = Phase::ResolvingAddr;
                }
                Phase::ResolvingAddr => match wait_event(self.channel, nonblock) {
                    Err(libc::EAGAIN) => return Err(libc::EINPROGRESS),
                    Err(e) => break Err(e),
                    Ok(ev) if ev.kind == RDMA_CM_EVENT_ADDR_RESOLVED => {
                        // The route set with RDMA_ROUTE, else the CM's own (either way
                        // ROUTE_RESOLVED follows); used once, as rsockets frees it.
                        let rc = match self.route_option.take() {
                            // SAFETY: the id and the records' bytes.
                            Some(mut route) => unsafe {
                                (cm.rdma_set_option)(
                                    self.id,
                                    RDMA_OPTION_IB,
                                    RDMA_OPTION_IB_PATH,
                                    route.as_mut_ptr().cast(),
                                    route.len(),
                                )
                            },
                            // SAFETY: the id.
                            None => unsafe { (cm.rdma_resolve_route)(self.id, RESOLVE_TIMEOUT_MS) },
                        };
                        if rc != 0 {
                            break Err(errno());
                        }
                        self.phase = Phase::ResolvingRoute;
                    }
                    Ok(ev) => break Err(event_errno(&ev)),
                },
                Phase::ResolvingRoute => match wait_event(self.channel, nonblock) {
                    Err(libc::EAGAIN) => return Err(libc::EINPROGRESS),
                    Err(e) => break Err(e),
                    Ok(ev) if ev.kind == RDMA_CM_EVENT_ROUTE_RESOLVED => {
                        if let Err(e) = self.create_ep() {
                            break Err(e);
                        }
                        let Some(c) = self.conn.as_ref() else {
                            break Err(libc::EIO);
                        };
                        let data = c.conn_data();
                        let mut param = rdma_conn_param {
                            private_data: data.as_ptr().cast(),
                            private_data_len: CONN_DATA_LEN as u8,
                            responder_resources: 0,
                            initiator_depth: 0,
                            flow_control: 1,
                            retry_count: 7,
                            rnr_retry_count: 7,
                            srq: 0,
                            qp_num: 0,
                        };
                        // SAFETY: the id with its QP; `data` outlives the call.
                        if unsafe { (cm.rdma_connect)(self.id, &mut param) } != 0 {
                            break Err(errno());
                        }
                        self.phase = Phase::Connecting;
                    }
                    Ok(ev) => break Err(event_errno(&ev)),
                },
                Phase::Connecting => match wait_event(self.channel, nonblock) {
                    Err(libc::EAGAIN) => return Err(libc::EINPROGRESS),
                    Err(e) => break Err(e),
                    Ok(ev) if ev.kind == RDMA_CM_EVENT_ESTABLISHED => {
                        let saved = match self.conn.as_mut() {
                            Some(c) => c.save_conn_data(&ev.private_data),
                            None => Err(libc::EIO),
                        };
                        if let Err(e) = saved {
                            break Err(e);
                        }
                        self.phase = Phase::Connected;
                        self.readable = true;
                        self.writable = true;
                        break Ok(());
                    }
                    Ok(ev) => break Err(event_errno(&ev)),
                },
                Phase::Connected => break Ok(()),
                Phase::ConnectError | Phase::Disconnected | Phase::Error => {
                    return Err(libc::ENOTCONN);
                }
                Phase::Listening => return Err(libc::EINVAL),
                Phase::Closed => return Err(libc::EBADF),
            }
        };
        if let Err(e) = result {
            self.phase = Phase::ConnectError;
            self.err = e;
        }
        result
    }

    /// Waits (unless `nonblock`) until `test` holds, taking completions meanwhile
    /// (rsockets' rs_get_comp). Returns the guard again.
    fn wait<'a>(
        mut g: MutexGuard<'a, Self>,
        sock: &'a Socket,
        nonblock: bool,
        test: fn(&Self) -> bool,
    ) -> (MutexGuard<'a, Self>, Res<()>) {
        let started = Instant::now();
        loop {
            if let Err(e) = g.progress() {
                return (g, Err(e));
            }
            if test(&g) {
                return (g, Ok(()));
            }
            if nonblock {
                return (g, Err(libc::EWOULDBLOCK));
            }
            if started.elapsed() < defaults().polling {
                continue;
            }
            let armed = g.conn.as_ref().is_some_and(|c| c.cq_armed);
            if !armed {
                if let Err(e) = g.arm() {
                    return (g, Err(e));
                }
                // A completion that came before arming raises no event: look again.
                continue;
            }
            let Some(cq_fd) = g.conn.as_ref().map(|c| {
                // SAFETY: the connection's channel.
                unsafe { (*c.cq_channel).fd }
            }) else {
                return (g, Err(libc::ENOTCONN));
            };
            let cm_fd = g.cm_fd();
            let probe_in = g.keep_alive();
            let wake_up_ms = defaults().wake_up_ms;
            let wake_ms = probe_in.map_or(wake_up_ms, |d| {
                (d.as_millis() as c_int).clamp(1, wake_up_ms)
            });
            drop(g);
            let waited = wait_readable(&[cq_fd, cm_fd], wake_ms);
            g = lock(sock);
            if let Err(e) = waited {
                return (g, Err(e));
            }
            g.take_cq_event();
            g.take_cm_events();
        }
    }

    /// Gives everything back; the socket is gone from the table.
    fn destroy(&mut self) {
        let Ok(cm) = cm() else { return };
        if let Some(mut c) = self.conn.take() {
            if let Ok(v) = verbs() {
                // SAFETY: the connection's own objects, destroyed once, the QP first so
                // the device no longer touches the buffers.
                unsafe {
                    if c.unacked_events > 0 {
                        (v.ack_cq_events)(c.cq, c.unacked_events);
                        c.unacked_events = 0;
                    }
                    (cm.rdma_destroy_qp)(self.id);
                    for m in c.iomaps.drain(..) {
                        (v.dereg_mr)(m.mr);
                    }
                    for mr in [c.smr, c.rmr, c.target_mr] {
                        if !mr.is_null() {
                            (v.dereg_mr)(mr);
                        }
                    }
                    (v.destroy_cq)(c.cq);
                    (v.destroy_comp_channel)(c.cq_channel);
                }
            }
        }
        // SAFETY: the socket's id and channel, destroyed once.
        unsafe {
            (cm.rdma_destroy_id)(self.id);
            (cm.rdma_destroy_event_channel)(self.channel);
        }
    }
}

// ---- the calls -----------------------------------------------------------------------------

/// Files a socket under its channel's fd (rsockets' socket numbers are those fds).
fn register(channel: *mut rdma_event_channel, inner: Inner) -> c_int {
    // SAFETY: the channel this socket owns.
    let fd = unsafe { (*channel).fd };
    sockets().insert(
        fd,
        Arc::new(Socket {
            inner: Mutex::new(inner),
        }),
    );
    fd
}

/// A new id on a new channel of its own.
fn new_id() -> Res<(*mut rdma_cm_id, *mut rdma_event_channel)> {
    let cm = cm()?;
    // SAFETY: plain librdmacm calls.
    let channel = unsafe { (cm.rdma_create_event_channel)() };
    if channel.is_null() {
        return Err(errno());
    }
    let mut id = core::ptr::null_mut();
    // The socket's calls wait on the channel with poll(2); its reads never block.
    // SAFETY: a live channel.
    let made = set_nonblocking(unsafe { (*channel).fd }, true).and_then(|()| {
        // SAFETY: a live channel.
        check(unsafe { (cm.rdma_create_id)(channel, &mut id, core::ptr::null_mut(), RDMA_PS_TCP) })
    });
    if let Err(e) = made {
        // SAFETY: the channel just made.
        unsafe { (cm.rdma_destroy_event_channel)(channel) };
        return Err(e);
    }
    Ok((id, channel))
}

pub(crate) fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> Res<c_int> {
    let socket_type = kind & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(libc::ENOTSUP);
    }
    if socket_type == libc::SOCK_DGRAM {
        return dgram::rsocket(domain, kind, protocol);
    }
    if socket_type != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
        return Err(libc::ENOTSUP);
    }
    verbs()?;
    let (id, channel) = new_id()?;
    // An unbound socket's name is its family with address and port 0 (getsockname(2);
    // rsockets sets the id's source family the same way).
    // SAFETY: the id just made; the union's family field is the same in every view.
    unsafe { (*id).route.addr.src.addr.sa_family = domain as libc::sa_family_t };
    let mut inner = Inner::new(id, channel);
    if kind & libc::SOCK_NONBLOCK != 0 {
        inner.fs_flags = libc::O_NONBLOCK;
    }
    if kind & libc::SOCK_CLOEXEC != 0 {
        inner.fd_flags = libc::FD_CLOEXEC;
    }
    Ok(register(channel, inner))
}

/// # Safety
/// `addr` points at `len` readable bytes.
pub(crate) unsafe fn rbind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rbind(&d, addr, len) };
    }
    let s = lookup(fd)?;
    let mut g = lock(&s);
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < size_of::<libc::sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's address; the id.
    check(unsafe { (cm()?.rdma_bind_addr)(g.id, addr.cast_mut()) })?;
    g.phase = Phase::Bound;
    Ok(())
}

pub(crate) fn rlisten(fd: c_int, backlog: c_int) -> Res<()> {
    stream_only(fd)?;
    let s = lookup(fd)?;
    let mut g = lock(&s);
    // listen(2): at most SOMAXCONN wait to be accepted; 0 or less still lets one.
    let backlog_len = usize::try_from(backlog).unwrap_or(0).clamp(1, 4096);
    if g.phase == Phase::Listening {
        // Listening again sets the backlog anew, as listen(2).
        if let Some(q) = g.accepted.as_mut() {
            q.backlog = backlog_len;
        }
        if g.accept_svc.is_some() {
            return Ok(());
        }
        // The accepting thread could not start the first time (EAGAIN): this is the retry.
        drop(g);
        return start_accept_service(&s);
    }
    // SAFETY: the id.
    check(unsafe { (cm()?.rdma_listen)(g.id, backlog) })?;
    g.accepted = Some(AcceptQueue::new(backlog_len)?);
    g.phase = Phase::Listening;
    drop(g);
    start_accept_service(&s)
}

/// # Safety
/// `addr`/`len` are NULL or as for accept(2).
pub(crate) unsafe fn raccept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> Res<c_int> {
    stream_only(fd)?;
    let s = lookup(fd)?;
    loop {
        let ready_fd = {
            let mut g = lock(&s);
            let nonblock = g.nonblock(0);
            // EBADF, as rsockets answers an rsocket that is not listening.
            let (Phase::Listening, Some(q)) = (g.phase, g.accepted.as_mut()) else {
                return Err(libc::EBADF);
            };
            if let Some(queued_fd) = q.pop() {
                drop(g);
                // Renumbering is for select(2) under the preload: a socket that cannot be
                // renumbered (out of fds) still works under its queued number.
                let new_fd = renumber(queued_fd).unwrap_or(queued_fd);
                if !addr.is_null() && !len.is_null() {
                    // SAFETY: the caller's buffers.
                    let _ = unsafe { rgetpeername(new_fd, addr, len) };
                }
                return Ok(new_fd);
            }
            let ready_fd = q.ready_fd;
            // Nothing accepts while the listener's thread is missing (it could not start):
            // waiting would be forever.
            if nonblock || g.accept_svc.is_none() {
                return Err(libc::EAGAIN);
            }
            ready_fd
        };
        wait_readable(&[ready_fd], defaults().wake_up_ms)?;
    }
}

/// Gives an accepted socket a number taken now: its id moves to a new channel, whose fd is
/// the socket's number. rsockets' raccept makes the connection's channel in the call
/// (`rdma_get_request`), after librspreload's accept() opened the placeholder fd the
/// application gets, so the socket's number is a newer fd than that placeholder;
/// librspreload's select() maps an rsocket back by walking the application's fds upward
/// from 0 for the first that maps to it, where an fd it does not track maps to itself. The
/// number of a connection accepted in the background before accept() came was older: the
/// walk stopped at it, and select() marked an fd the application never had (iperf3 and
/// `ncat -l` waited for data forever).
fn renumber(fd: c_int) -> Res<c_int> {
    let cm = cm()?;
    let s = lookup(fd)?;
    // SAFETY: plain librdmacm call.
    let channel = unsafe { (cm.rdma_create_event_channel)() };
    if channel.is_null() {
        return Err(errno());
    }
    let destroy = |c| {
        // SAFETY: a channel of ours, no id on it.
        unsafe { (cm.rdma_destroy_event_channel)(c) }
    };
    // SAFETY: the channel just made.
    if let Err(e) = set_nonblocking(unsafe { (*channel).fd }, true) {
        destroy(channel);
        return Err(e);
    }
    let mut g = lock(&s);
    // SAFETY: the socket's live id (its events are read and acknowledged as they come, so
    // the migration does not wait) and the new channel.
    if let Err(e) = check(unsafe { (cm.rdma_migrate_id)(g.id, channel) }) {
        drop(g);
        destroy(channel);
        return Err(e);
    }
    let old = std::mem::replace(&mut g.channel, channel);
    drop(g);
    // SAFETY: the channel just made.
    let new_fd = unsafe { (*channel).fd };
    {
        let mut all = sockets();
        if let Some(socket) = all.remove(&fd) {
            all.insert(new_fd, socket);
        }
    }
    destroy(old);
    Ok(new_fd)
}

// ---- accepting in the background -----------------------------------------------------------

/// A listener's connections that are established and wait for `raccept`, as a TCP
/// listener's accept queue: a client's connect completes without the server's accept
/// (rsockets' service thread accepts for it too).
struct AcceptQueue {
    ready: VecDeque<c_int>,
    /// The most that wait (listen(2)'s backlog); requests beyond wait in the CM, whose
    /// own backlog drops what exceeds it (the requester's CM sends it again).
    backlog: usize,
    /// An eventfd readable while `ready` holds a connection: what a blocking raccept and
    /// rpoll wait on.
    ready_fd: c_int,
}

impl AcceptQueue {
    fn new(backlog: usize) -> Res<Self> {
        // SAFETY: a plain eventfd.
        let ready_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if ready_fd < 0 {
            return Err(errno());
        }
        Ok(Self {
            ready: VecDeque::new(),
            backlog,
            ready_fd,
        })
    }

    fn has_room(&self) -> bool {
        self.ready.len() < self.backlog
    }

    fn push(&mut self, fd: c_int) {
        self.ready.push_back(fd);
        let one = 1u64;
        // SAFETY: the eventfd, 8 bytes.
        unsafe { libc::write(self.ready_fd, (&one as *const u64).cast(), 8) };
    }

    fn pop(&mut self) -> Option<c_int> {
        let fd = self.ready.pop_front()?;
        if self.ready.is_empty() {
            let mut count = 0u64;
            // SAFETY: the eventfd, 8 bytes; non-blocking.
            unsafe { libc::read(self.ready_fd, (&mut count as *mut u64).cast(), 8) };
        }
        Some(fd)
    }

    /// Closes what was never taken (each peer sees its connection end) and the eventfd.
    fn close(mut self) {
        for fd in self.ready.drain(..) {
            let _ = rclose(fd);
        }
        // SAFETY: the eventfd, no longer used.
        unsafe { libc::close(self.ready_fd) };
    }
}

/// Starts the listener's accepting thread (rsockets' listen service).
fn start_accept_service(listener: &Arc<Socket>) -> Res<()> {
    let me = Arc::clone(listener);
    let svc = start_service("rsocket-accept", move |stop| accept_service(&me, stop))?;
    let mut g = lock(listener);
    if g.accept_svc.is_some() {
        // Another rlisten's retry started one meanwhile: one thread accepts.
        drop(g);
        stop_service(svc);
    } else {
        g.accept_svc = Some(svc);
    }
    Ok(())
}

/// Stops the listener's accepting thread and waits for it (a connection it is accepting
/// finishes first, at most [`ACCEPT_RTU_WAIT`]). The caller holds no lock of the listener.
fn stop_accept_service(listener: &Socket) {
    let taken = lock(listener).accept_svc.take();
    if let Some(svc) = taken {
        stop_service(svc);
    }
}

/// A service thread of the library (rsockets' service threads): the eventfd that tells it
/// to stop, its handle, and the process that started it.
pub(crate) struct Service {
    stop: c_int,
    handle: std::thread::JoinHandle<()>,
    pid: u32,
}

/// Starts a service thread running `run` with the eventfd that tells it to stop; a panic in
/// it ends the thread, never the program.
pub(crate) fn start_service(name: &str, run: impl FnOnce(c_int) + Send + 'static) -> Res<Service> {
    // SAFETY: a plain eventfd.
    let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if stop < 0 {
        return Err(errno());
    }
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            crate::mark_library_thread();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(stop)));
        })
        .map_err(|_| {
            // SAFETY: the eventfd just made.
            unsafe { libc::close(stop) };
            libc::EAGAIN
        })?;
    Ok(Service {
        stop,
        handle,
        pid: std::process::id(),
    })
}

/// Tells a service thread of [`start_service`] to stop, waits for it, closes its eventfd. In
/// a child forked since, the thread is the parent's (a fork copies only the calling thread):
/// the child lets go of its copy of the eventfd and neither signals nor waits (a join would
/// wait forever).
pub(crate) fn stop_service(svc: Service) {
    if svc.pid == std::process::id() {
        let one = 1u64;
        // SAFETY: the eventfd, 8 bytes.
        unsafe { libc::write(svc.stop, (&one as *const u64).cast(), 8) };
        let _ = svc.handle.join();
    } else {
        // The handle names the parent's thread: dropping it only detaches.
        drop(svc.handle);
    }
    // SAFETY: this process's copy of the eventfd, no longer used.
    unsafe { libc::close(svc.stop) };
}

/// The accepting thread: serves each connect request as it comes while the queue has room,
/// until `stop`.
fn accept_service(listener: &Socket, stop: c_int) {
    loop {
        let (cm_fd, room) = {
            let g = lock(listener);
            if g.phase != Phase::Listening {
                return;
            }
            (
                g.cm_fd(),
                g.accepted.as_ref().is_some_and(AcceptQueue::has_room),
            )
        };
        let mut p = [
            pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
            pollfd {
                // A full queue leaves requests to the CM until raccept makes room.
                fd: if room { cm_fd } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let wait_ms = if room { 1000 } else { 20 };
        // SAFETY: two pollfds.
        let rc = unsafe { libc::poll(p.as_mut_ptr(), 2, wait_ms) };
        if p[0].revents != 0 {
            return;
        }
        if rc > 0 && p[1].revents != 0 {
            accept_pending(listener);
        }
    }
}

/// Accepts the requests waiting on the listener's channel while its queue has room.
fn accept_pending(listener: &Socket) {
    // Bounded: each round takes one event off the channel.
    for _ in 0..1024 {
        let (ev, inherit) = {
            let g = lock(listener);
            if g.phase != Phase::Listening
                || !g.accepted.as_ref().is_some_and(AcceptQueue::has_room)
            {
                return;
            }
            let Ok(Some(ev)) = next_event(g.channel) else {
                return;
            };
            (ev, inherited(&g))
        };
        if ev.kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            continue;
        }
        // A request that could not be served was refused; go on with the next.
        let Ok(new_fd) = accept_request(&ev, inherit) else {
            continue;
        };
        let mut g = lock(listener);
        match (g.phase, g.accepted.as_mut()) {
            (Phase::Listening, Some(q)) => q.push(new_fd),
            _ => {
                drop(g);
                let _ = rclose(new_fd);
                return;
            }
        }
    }
}

/// What an accepted socket takes from its listener (as rsockets' rs_accept copies).
fn inherited(g: &Inner) -> Inherited {
    (
        g.sq_size,
        g.rq_size,
        g.sq_inline,
        g.sbuf_size,
        g.rbuf_size,
        g.fs_flags,
        g.fd_flags,
        g.target_iomap_size,
    )
}

type Inherited = (u32, u32, u32, u32, u32, c_int, c_int, u32);

/// Serves one connect request on a socket of its own (rsockets' rs_accept): the QP and
/// buffers, the peer's conn data, the answer, and the wait for ESTABLISHED.
fn accept_request(ev: &Event, inherit: Inherited) -> Res<c_int> {
    let cm = cm()?;
    let id = ev.id;
    let reject = |e: c_int| {
        // SAFETY: the request's id, refused and destroyed once.
        unsafe {
            (cm.rdma_reject)(id, core::ptr::null(), 0);
        }
        e
    };
    if ev.private_data.len() < CONN_DATA_LEN || ev.private_data[0] != 1 {
        let e = reject(libc::ENOTSUP);
        // SAFETY: as above.
        unsafe { (cm.rdma_destroy_id)(id) };
        return Err(e);
    }
    // SAFETY: plain librdmacm call.
    let channel = unsafe { (cm.rdma_create_event_channel)() };
    // SAFETY: a channel just made, or NULL.
    if channel.is_null() || set_nonblocking(unsafe { (*channel).fd }, true).is_err() {
        let e = reject(errno());
        // SAFETY: as above.
        unsafe {
            (cm.rdma_destroy_id)(id);
            if !channel.is_null() {
                (cm.rdma_destroy_event_channel)(channel);
            }
        }
        return Err(e);
    }
    let mut inner = Inner::new(id, channel);
    (
        inner.sq_size,
        inner.rq_size,
        inner.sq_inline,
        inner.sbuf_size,
        inner.rbuf_size,
        inner.fs_flags,
        inner.fd_flags,
        inner.target_iomap_size,
    ) = inherit;
    // SAFETY: the request's id (its event acknowledged) and a new channel.
    let migrated = check(unsafe { (cm.rdma_migrate_id)(id, channel) });
    let served = migrated.and_then(|()| {
        inner.create_ep()?;
        let c = inner.conn.as_mut().ok_or(libc::EIO)?;
        c.save_conn_data(&ev.private_data)?;
        let data = c.conn_data();
        let mut param = rdma_conn_param {
            private_data: data.as_ptr().cast(),
            private_data_len: CONN_DATA_LEN as u8,
            ..ev.param
        };
        // SAFETY: the id with its QP; `data` outlives the call.
        check(unsafe { (cm.rdma_accept)(id, &mut param) })?;
        wait_established(channel, ACCEPT_RTU_WAIT)?;
        inner.phase = Phase::Connected;
        inner.readable = true;
        inner.writable = true;
        Ok(())
    });
    match served {
        Ok(()) => Ok(register(channel, inner)),
        Err(e) => {
            if inner.phase != Phase::Connected {
                reject(e);
            }
            inner.destroy();
            Err(e)
        }
    }
}

/// How long the accepting thread waits for an accepted request's RTU (its ESTABLISHED)
/// before refusing it: a requester gone mid-handshake must not hold the requests behind it.
/// A live peer's RTU follows the reply at once.
const ACCEPT_RTU_WAIT: Duration = Duration::from_secs(2);

/// Waits up to `limit` for ESTABLISHED on `channel` (non-blocking): ETIMEDOUT after it,
/// another event's errno if one comes first.
fn wait_established(channel: *mut rdma_event_channel, limit: Duration) -> Res<()> {
    let until = Instant::now() + limit;
    loop {
        if let Some(ev) = next_event(channel)? {
            return if ev.kind == RDMA_CM_EVENT_ESTABLISHED {
                Ok(())
            } else {
                Err(event_errno(&ev))
            };
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(libc::ETIMEDOUT);
        }
        let slice = (left.as_millis() as c_int).clamp(1, defaults().wake_up_ms.max(1));
        // SAFETY: a live channel.
        wait_readable(&[unsafe { (*channel).fd }], slice)?;
    }
}

/// # Safety
/// `addr` points at `len` readable bytes.
pub(crate) unsafe fn rconnect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rconnect(&d, addr, len) };
    }
    let s = lookup(fd)?;
    let mut g = lock(&s);
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    match g.phase {
        Phase::Init | Phase::Bound => {
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut dst: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
            let n = (len as usize).min(size_of::<libc::sockaddr_storage>());
            if n < size_of::<libc::sockaddr_in>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's `len` bytes, at most the storage's size.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    addr.cast::<u8>(),
                    (&mut dst as *mut libc::sockaddr_storage).cast::<u8>(),
                    n,
                )
            };
            g.dst = Some(dst);
        }
        Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting => {}
        Phase::Connected => return Err(libc::EISCONN),
        Phase::Listening => return Err(libc::EINVAL),
        Phase::ConnectError | Phase::Disconnected | Phase::Error => return Err(libc::ENOTCONN),
        Phase::Closed => return Err(libc::EBADF),
    }
    let nonblock = g.nonblock(0);
    g.drive_connect(nonblock)
}

/// Finishes a non-blocking connect the data calls find under way.
fn connect_pending(g: &mut Inner) -> Res<()> {
    if matches!(
        g.phase,
        Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting
    ) {
        let nonblock = g.nonblock(0);
        return g.drive_connect(nonblock).map_err(|e| {
            if e == libc::EINPROGRESS {
                libc::EAGAIN
            } else {
                e
            }
        });
    }
    Ok(())
}

/// # Safety
/// `buf` holds `len` readable bytes.
pub(crate) unsafe fn rsend(fd: c_int, buf: *const u8, len: usize, flags: c_int) -> Res<usize> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rsendto(&d, buf, len, flags, core::ptr::null(), 0) };
    }
    let s = lookup(fd)?;
    let mut g = lock(&s);
    connect_pending(&mut g)?;
    if g.conn.is_none() {
        return Err(if g.phase == Phase::ConnectError {
            g.err
        } else {
            libc::ENOTCONN
        });
    }
    if len > 0 && buf.is_null() {
        return Err(libc::EFAULT);
    }
    // Shut down for writing here (EPIPE, as send(2)), or by the peer.
    if g.connected() && !g.writable {
        return Err(libc::EPIPE);
    }
    if !g.connected() {
        return Err(libc::ECONNRESET);
    }
    let nonblock = g.nonblock(flags);
    let (g2, sent) = send_iomaps(g, &s, nonblock);
    g = g2;
    sent?;
    let mut left = len;
    let mut olen = OLAP_START_SIZE;
    let mut off = 0usize;
    let mut result = Ok(());
    while left > 0 {
        let (g2, ready) = wait_to_send(g, &s, nonblock);
        g = g2;
        if let Err(e) = ready {
            result = Err(e);
            break;
        }
        let Some(c) = g.conn.as_mut() else {
            result = Err(libc::ENOTCONN);
            break;
        };
        let mut xfer = next_transfer(&mut olen, left);
        xfer = xfer
            .min(c.sbuf_bytes_avail)
            .min(c.target_sgl(c.target_sge).length);
        // SAFETY: `off + xfer <= len` bytes of the caller's buffer.
        let src = unsafe { buf.add(off) };
        let sent = if xfer <= c.sq_inline {
            let mut sgl = [ibv_sge {
                addr: src as u64,
                length: xfer,
                lkey: 0,
            }];
            c.write_data(&mut sgl, xfer, IBV_SEND_INLINE)
        } else {
            // SAFETY: `xfer` bytes of the caller's buffer from `src`.
            let bytes = unsafe { core::slice::from_raw_parts(src, xfer as usize) };
            let (mut sgl, n) = c.stage(bytes);
            c.write_data(&mut sgl[..n], xfer, 0)
        };
        if let Err(e) = sent {
            result = Err(e);
            break;
        }
        left -= xfer as usize;
        off += xfer as usize;
    }
    match result {
        Err(e) if left == len => Err(e),
        _ => Ok(len - left),
    }
}

/// # Safety
/// `buf` holds `len` writable bytes.
pub(crate) unsafe fn rrecv(fd: c_int, buf: *mut u8, len: usize, flags: c_int) -> Res<usize> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe {
            dgram::rrecvfrom(
                &d,
                buf,
                len,
                flags,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        };
    }
    let s = lookup(fd)?;
    let mut g = lock(&s);
    connect_pending(&mut g)?;
    if g.conn.is_none() {
        return Err(if g.phase == Phase::ConnectError {
            g.err
        } else {
            libc::ENOTCONN
        });
    }
    if len > 0 && buf.is_null() {
        return Err(libc::EFAULT);
    }
    let nonblock = g.nonblock(flags);
    let mut left = len;
    let mut result = Ok(());
    loop {
        if !g.have_rdata() {
            let (g2, waited) = Inner::wait(g, &s, nonblock, Inner::conn_have_rdata);
            g = g2;
            if let Err(e) = waited {
                result = Err(e);
                break;
            }
        }
        let Some(c) = g.conn.as_mut() else { break };
        if flags & libc::MSG_PEEK != 0 {
            let mut offset = c.rbuf_offset;
            let mut done = 0usize;
            for &m in &c.rmsg {
                if done == left {
                    break;
                }
                let n = (m as usize).min(left - done);
                copy_out(c, &mut offset, buf, done, n);
                done += n;
            }
            left -= done;
            break;
        }
        while left > 0 {
            let Some(front) = c.rmsg.front_mut() else {
                break;
            };
            let n = if left < *front as usize {
                *front -= left as u32;
                left
            } else {
                let n = *front as usize;
                c.rmsg.pop_front();
                c.rseq_no = c.rseq_no.wrapping_add(1);
                n
            };
            let mut offset = c.rbuf_offset;
            copy_out(c, &mut offset, buf, len - left, n);
            c.rbuf_offset = offset;
            // Bounded by the ring: a peer that writes more than it was given cannot make
            // this side hand out more than it has.
            c.rbuf_bytes_avail = (c.rbuf_bytes_avail + n as u32).min(c.rbuf_size);
            left -= n;
        }
        if !(left > 0 && flags & libc::MSG_WAITALL != 0 && g.connected() && g.readable) {
            break;
        }
    }
    // What was read frees credits for the peer now, not at the next call.
    if left != len {
        let _ = g.progress();
    }
    match result {
        Err(e) if left == len => Err(e),
        _ => Ok(len - left),
    }
}

/// Waits (unless `nonblock`) until a message may go (rsockets' rs_can_send); ECONNRESET
/// once the connection no longer takes them.
fn wait_to_send<'a>(
    g: MutexGuard<'a, Inner>,
    s: &'a Socket,
    nonblock: bool,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    if g.can_send() {
        return (g, Ok(()));
    }
    let (g, waited) = Inner::wait(g, s, nonblock, Inner::conn_can_send);
    let ready = waited.and_then(|()| {
        if g.connected() && g.writable {
            Ok(())
        } else {
            Err(libc::ECONNRESET)
        }
    });
    (g, ready)
}

/// The next transfer of `left` bytes: rsockets overlaps sending with copying by starting
/// at 2 KiB and doubling up to 64 KiB (`olen`) while more is left.
fn next_transfer(olen: &mut u32, left: usize) -> u32 {
    if (*olen as usize) < left {
        let x = *olen;
        if *olen < MAX_TRANSFER {
            *olen <<= 1;
        }
        x
    } else {
        left as u32
    }
}

/// Offers the peer the mappings `riomap` made since the last send (rs_send_iomaps), each
/// when credits allow.
fn send_iomaps<'a>(
    mut g: MutexGuard<'a, Inner>,
    s: &'a Socket,
    nonblock: bool,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    loop {
        let Some(c) = g.conn.as_ref() else {
            return (g, Ok(()));
        };
        let Some(i) = c.iomaps.iter().position(|m| m.slot.is_some() && !m.sent) else {
            return (g, Ok(()));
        };
        let (g2, ready) = wait_to_send(g, s, nonblock);
        g = g2;
        if let Err(e) = ready {
            return (g, Err(e));
        }
        let Some(c) = g.conn.as_mut() else {
            return (g, Err(libc::ENOTCONN));
        };
        let m = &mut c.iomaps[i];
        m.sent = true;
        let (slot, offset, mr) = (m.slot.unwrap_or(0), m.offset, m.mr);
        if let Err(e) = c.write_iomap(slot, offset, mr) {
            return (g, Err(e));
        }
    }
}

/// `riomap` (rsocket(7)): registers `len` bytes at `buf` for this socket; with PROT_WRITE
/// offers them to the peer at `offset` (-1: the address) in a slot of its iomap table,
/// sent before the next data. Returns the offset.
///
/// # Safety
/// `buf` holds `len` bytes that stay valid until riounmap or rclose.
pub(crate) unsafe fn riomap(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    prot: c_int,
    offset: i64,
) -> Res<i64> {
    stream_only(fd)?;
    let s = lookup(fd)?;
    let mut g = lock(&s);
    if prot & !libc::PROT_WRITE != 0 {
        return Err(libc::EINVAL);
    }
    let v = verbs()?;
    // SAFETY: the socket's id; its PD exists once it has a QP.
    let pd = unsafe { (*g.id).pd };
    let Some(c) = g.conn.as_mut() else {
        return Err(libc::EINVAL);
    };
    if pd.is_null() {
        return Err(libc::EINVAL);
    }
    let slot = if prot & libc::PROT_WRITE != 0 {
        let used: Vec<u32> = c.iomaps.iter().filter_map(|m| m.slot).collect();
        let Some(free) = (0..c.remote_iomap.length).find(|i| !used.contains(i)) else {
            // The peer offers no (free) slot: RDMA_IOMAPSIZE on its side.
            return Err(libc::ENOMEM);
        };
        Some(free)
    } else {
        None
    };
    let access = if slot.is_some() {
        (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int
    } else {
        IBV_ACCESS_LOCAL_WRITE as c_int
    };
    // SAFETY: the caller's buffer, kept valid while mapped.
    let mr = unsafe { (v.reg_mr)(pd, buf, len, access) };
    if mr.is_null() {
        return Err(errno());
    }
    let offset = if offset == -1 { buf as i64 } else { offset };
    c.iomaps.push(IoMapping {
        mr,
        offset: offset as u64,
        slot,
        sent: false,
    });
    Ok(offset)
}

/// `riounmap`: ends the mapping of exactly `buf`/`len`.
pub(crate) fn riounmap(fd: c_int, buf: *mut c_void, len: usize) -> Res<()> {
    stream_only(fd)?;
    let s = lookup(fd)?;
    let mut g = lock(&s);
    let v = verbs()?;
    let Some(c) = g.conn.as_mut() else {
        return Err(libc::EINVAL);
    };
    // SAFETY: the mappings' own regions.
    let found = c
        .iomaps
        .iter()
        .position(|m| unsafe { (*m.mr).addr == buf && (*m.mr).length == len });
    let Some(i) = found else {
        return Err(libc::EINVAL);
    };
    let m = c.iomaps.remove(i);
    // SAFETY: a region this socket registered, deregistered once.
    unsafe { (v.dereg_mr)(m.mr) };
    Ok(())
}

/// `riowrite`: `count` bytes from `buf` straight into the peer's buffer mapped at
/// `offset` (its riomap), as part of the stream: they land before any later data.
///
/// # Safety
/// `buf` holds `count` readable bytes.
pub(crate) unsafe fn riowrite(
    fd: c_int,
    buf: *const u8,
    count: usize,
    offset: i64,
    flags: c_int,
) -> Res<usize> {
    stream_only(fd)?;
    let s = lookup(fd)?;
    let mut g = lock(&s);
    connect_pending(&mut g)?;
    if g.conn.is_none() {
        return Err(libc::ENOTCONN);
    }
    if count > 0 && buf.is_null() {
        return Err(libc::EFAULT);
    }
    if !(g.connected() && g.writable) {
        return Err(if g.connected() {
            libc::EPIPE
        } else {
            libc::ECONNRESET
        });
    }
    let nonblock = g.nonblock(flags);
    let (g2, sent) = send_iomaps(g, &s, nonblock);
    g = g2;
    sent?;
    let mut left = count;
    let mut at = offset as u64;
    let mut olen = OLAP_START_SIZE;
    let mut done = 0usize;
    let mut result = Ok(());
    while left > 0 {
        let (g2, ready) = wait_to_send(g, &s, nonblock);
        g = g2;
        if let Err(e) = ready {
            result = Err(e);
            break;
        }
        let Some(c) = g.conn.as_mut() else {
            result = Err(libc::ENOTCONN);
            break;
        };
        let Some((moff, sge)) = c.find_iomap(at) else {
            // Nothing mapped there (yet): what was written stands.
            if done == 0 {
                result = Err(libc::EINVAL);
            }
            break;
        };
        let mut xfer = next_transfer(&mut olen, left);
        let room = u64::from(sge.length) - (at - moff);
        xfer = xfer
            .min(c.sbuf_bytes_avail)
            .min(room.min(u64::from(u32::MAX)) as u32);
        // SAFETY: `done + xfer <= count` bytes of the caller's buffer.
        let bytes = unsafe { core::slice::from_raw_parts(buf.add(done), xfer as usize) };
        if let Err(e) = c.write_direct(bytes, sge.addr.wrapping_add(at - moff), sge.key) {
            result = Err(e);
            break;
        }
        left -= xfer as usize;
        done += xfer as usize;
        at += u64::from(xfer);
    }
    match result {
        Err(e) if done == 0 => Err(e),
        _ => Ok(done),
    }
}

/// Copies `n` bytes of the ring from `*offset` (wrapping) to `buf + at`.
fn copy_out(c: &Conn, offset: &mut u32, buf: *mut u8, at: usize, n: usize) {
    let mut done = 0usize;
    while done < n {
        let end = (c.rbuf_size - *offset) as usize;
        let k = (n - done).min(end);
        // SAFETY: `k` bytes inside the ring; the caller's buffer holds `at + n` bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(c.rbuf.ptr.add(*offset as usize), buf.add(at + done), k)
        };
        done += k;
        *offset += k as u32;
        if *offset == c.rbuf_size {
            *offset = 0;
        }
    }
}

/// `transfer` over each non-empty vector of `iov` in turn, as readv(2)/writev(2): stops at
/// the first that moves less than its length; an error after some bytes moved ends the
/// call with those bytes. `transfer` is told whether bytes moved already.
///
/// # Safety
/// `iov` holds `count` iovecs naming memory `transfer` may use.
/// The most one peek over several vectors copies (a stream peek may show less than is
/// there): the temporary buffer it spreads from stays bounded whatever the vectors say.
const PEEK_LIMIT: usize = 16 << 20;

/// The bytes `count` iovecs name in all (EINVAL for a negative count, as `each_iovec`).
///
/// # Safety
/// `iov` holds `count` iovecs.
unsafe fn iovec_total(iov: *const libc::iovec, count: c_int) -> Res<usize> {
    if count < 0 || (count > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's array of `count`.
    Ok((0..count as usize)
        .map(|i| unsafe { (*iov.add(i)).iov_len })
        .fold(0usize, usize::saturating_add))
}

unsafe fn each_iovec(
    iov: *const libc::iovec,
    count: c_int,
    mut transfer: impl FnMut(*mut u8, usize, bool) -> Res<usize>,
) -> Res<usize> {
    if count < 0 || (count > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut total = 0usize;
    for i in 0..count as usize {
        // SAFETY: the caller's array.
        let v = unsafe { *iov.add(i) };
        if v.iov_len == 0 {
            continue;
        }
        match transfer(v.iov_base.cast(), v.iov_len, total > 0) {
            Ok(n) => {
                total += n;
                if n < v.iov_len {
                    break;
                }
            }
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// # Safety
/// `iov` holds `count` iovecs naming writable memory.
pub(crate) unsafe fn rrecvv(
    fd: c_int,
    iov: *const libc::iovec,
    count: c_int,
    flags: c_int,
) -> Res<usize> {
    if let Some(d) = dgram::lookup(fd) {
        let mut tmp = vec![0u8; SNDLOWAT as usize];
        let (n, _, _) = dgram::recv(&d, &mut tmp, flags)?;
        // SAFETY: the caller's vectors.
        return unsafe { dgram::scatter(iov, count.max(0) as usize, &tmp[..n]) };
    }
    if flags & libc::MSG_PEEK != 0 && count > 1 {
        // One peek spread over the vectors, as a socket's: peeking each vector alone would
        // show every one the same first bytes. What a peek can see is in the receive
        // buffer, so the copy is bounded by the largest one.
        // SAFETY: the caller's vectors.
        let total = unsafe { iovec_total(iov, count) }?.min(PEEK_LIMIT);
        let mut tmp = vec![0u8; total];
        // SAFETY: `total` writable bytes of our own.
        let n = unsafe { rrecv(fd, tmp.as_mut_ptr().cast(), total, flags) }?;
        // SAFETY: the caller's vectors.
        return unsafe { dgram::scatter(iov, count.max(0) as usize, &tmp[..n]) };
    }
    // SAFETY: the caller's vectors; later ones only take what is already there, unless
    // MSG_WAITALL asks for them all.
    unsafe {
        each_iovec(iov, count, |base, len, moved| {
            let f = if moved && flags & libc::MSG_WAITALL == 0 {
                flags | libc::MSG_DONTWAIT
            } else {
                flags
            };
            rrecv(fd, base, len, f)
        })
    }
}

/// # Safety
/// `iov` holds `count` iovecs naming readable memory.
pub(crate) unsafe fn rsendv(
    fd: c_int,
    iov: *const libc::iovec,
    count: c_int,
    flags: c_int,
) -> Res<usize> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's vectors.
        let data = unsafe { dgram::gather(iov, count.max(0) as usize) }?;
        return dgram::sendto(&d, &data, flags, None);
    }
    // SAFETY: the caller's vectors.
    unsafe { each_iovec(iov, count, |base, len, _| rsend(fd, base, len, flags)) }
}

/// What `events` of an rsocket hold now (rsockets' rs_poll_rs).
fn poll_socket(g: &mut Inner, events: i16) -> i16 {
    if matches!(
        g.phase,
        Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting
    ) {
        if let Err(libc::EINPROGRESS) = g.drive_connect(true) {
            return 0;
        }
    }
    match g.phase {
        Phase::Connected | Phase::Disconnected | Phase::Error if g.conn.is_some() => {
            let _ = g.progress();
            let mut revents = 0;
            if events & libc::POLLIN != 0 && g.conn_have_rdata() {
                revents |= libc::POLLIN;
            }
            if events & libc::POLLOUT != 0 && g.can_send() {
                revents |= libc::POLLOUT;
            }
            // A peer that disconnected while data is still unread hangs up only once it is
            // read, as a TCP socket reports its peer's FIN (rsockets sets POLLHUP at once, and
            // a reader that stops at POLLHUP, like rstream, loses the tail).
            if !g.connected() && !g.have_rdata() {
                revents |= if g.phase == Phase::Disconnected {
                    libc::POLLHUP
                } else {
                    libc::POLLERR
                };
            }
            revents
        }
        Phase::Listening if g.accepted.as_ref().is_some_and(|q| !q.ready.is_empty()) => {
            events & libc::POLLIN
        }
        Phase::ConnectError => (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR,
        _ => 0,
    }
}

/// What rpoll watches behind one descriptor.
enum Polled {
    Stream(Arc<Socket>),
    Dgram(Arc<dgram::DSocket>),
    Plain,
}

/// # Safety
/// `fds` holds `nfds` pollfds.
pub(crate) unsafe fn rpoll(fds: *mut pollfd, nfds: libc::nfds_t, timeout: c_int) -> Res<c_int> {
    if nfds > 0 && fds.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's array.
    let fds = if nfds == 0 {
        &mut [][..]
    } else {
        unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) }
    };
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let socks: Vec<Polled> = fds
        .iter()
        .map(|p| match dgram::lookup(p.fd) {
            Some(d) => Polled::Dgram(d),
            None => lookup(p.fd).map_or(Polled::Plain, Polled::Stream),
        })
        .collect();
    let started = Instant::now();
    loop {
        // Look at every descriptor without waiting.
        let mut ready = 0;
        let mut plain: Vec<pollfd> = Vec::new();
        for (p, s) in fds.iter_mut().zip(&socks) {
            p.revents = 0;
            match s {
                Polled::Stream(s) => {
                    p.revents = poll_socket(&mut lock(s), p.events);
                }
                Polled::Dgram(d) => p.revents = dgram::poll_events(d, p.events),
                Polled::Plain => plain.push(*p),
            }
        }
        if !plain.is_empty() {
            // SAFETY: a local array.
            unsafe { libc::poll(plain.as_mut_ptr(), plain.len() as libc::nfds_t, 0) };
            let mut it = plain.iter();
            for (p, s) in fds.iter_mut().zip(&socks) {
                if matches!(s, Polled::Plain) {
                    p.revents = it.next().map_or(0, |q| q.revents);
                }
            }
        }
        for p in fds.iter() {
            if p.revents != 0 {
                ready += 1;
            }
        }
        let mut left_ms = match deadline {
            None => defaults().wake_up_ms,
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Ok(ready);
                }
                ((d - now).as_millis() as c_int).min(defaults().wake_up_ms)
            }
        };
        if ready > 0 {
            return Ok(ready);
        }
        // Spin briefly as rsockets does before sleeping.
        if started.elapsed() < defaults().polling {
            continue;
        }
        // Arm, then sleep on what would wake each descriptor.
        let mut wait: Vec<pollfd> = Vec::new();
        let mut owner: Vec<Option<usize>> = Vec::new();
        for (i, (p, s)) in fds.iter().zip(&socks).enumerate() {
            match s {
                Polled::Dgram(d) => match dgram::arm_for_wait(d, p.events) {
                    Some(fd) => {
                        wait.push(pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        owner.push(Some(i));
                    }
                    None => {
                        wait.clear();
                        break;
                    }
                },
                Polled::Stream(s) => {
                    let mut g = lock(s);
                    let _ = g.arm();
                    if let Some(d) = g.keep_alive() {
                        left_ms = left_ms.min((d.as_millis() as c_int).max(1));
                    }
                    if let Some(c) = g.conn.as_ref() {
                        wait.push(pollfd {
                            // SAFETY: the connection's channel.
                            fd: unsafe { (*c.cq_channel).fd },
                            events: libc::POLLIN,
                            revents: 0,
                        });
                        owner.push(Some(i));
                    }
                    wait.push(pollfd {
                        // A listener is ready when its queue holds a connection.
                        fd: g
                            .accepted
                            .as_ref()
                            .map_or_else(|| g.cm_fd(), |q| q.ready_fd),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    owner.push(Some(i));
                    // What came before arming raises no event: look once more.
                    if poll_socket(&mut g, p.events) != 0 {
                        wait.clear();
                        break;
                    }
                }
                Polled::Plain => {
                    wait.push(*p);
                    owner.push(None);
                }
            }
        }
        if wait.is_empty() {
            continue;
        }
        // SAFETY: a local array.
        let rc = unsafe { libc::poll(wait.as_mut_ptr(), wait.len() as libc::nfds_t, left_ms) };
        if rc < 0 && errno() != libc::EINTR {
            return Err(errno());
        }
        for (w, o) in wait.iter().zip(&owner) {
            if let (Some(i), true) = (o, w.revents != 0)
                && let Polled::Dgram(d) = &socks[*i]
            {
                dgram::after_wait(d);
            } else if let (Some(i), true) = (o, w.revents != 0)
                && let Polled::Stream(s) = &socks[*i]
            {
                let mut g = lock(s);
                g.take_cq_event();
                if g.phase != Phase::Listening
                    && !matches!(
                        g.phase,
                        Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting
                    )
                {
                    g.take_cm_events();
                }
            }
        }
    }
}

/// # Safety
/// The sets are NULL or valid `fd_set`s; `timeout` NULL or valid.
pub(crate) unsafe fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> Res<c_int> {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        return Err(libc::EINVAL);
    }
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut events = 0;
        // SAFETY: the caller's sets, fd < FD_SETSIZE.
        unsafe {
            if !readfds.is_null() && libc::FD_ISSET(fd, readfds) {
                events |= libc::POLLIN;
            }
            if !writefds.is_null() && libc::FD_ISSET(fd, writefds) {
                events |= libc::POLLOUT;
            }
            if !exceptfds.is_null() && libc::FD_ISSET(fd, exceptfds) {
                events |= libc::POLLPRI;
            }
        }
        if events != 0 {
            fds.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            return Err(libc::EINVAL);
        }
        (t.tv_sec.saturating_mul(1000) + t.tv_usec / 1000).min(i64::from(c_int::MAX)) as c_int
    };
    // SAFETY: a local array.
    let n = unsafe { rpoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) }?;
    // SAFETY: the caller's sets.
    unsafe {
        for set in [readfds, writefds, exceptfds] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
    }
    let mut count = 0;
    if n > 0 {
        for p in &fds {
            // SAFETY: the caller's sets, fd < FD_SETSIZE.
            unsafe {
                if !readfds.is_null()
                    && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                {
                    libc::FD_SET(p.fd, readfds);
                    count += 1;
                }
                if !writefds.is_null() && p.revents & (libc::POLLOUT | libc::POLLERR) != 0 {
                    libc::FD_SET(p.fd, writefds);
                    count += 1;
                }
                if !exceptfds.is_null() && p.revents & libc::POLLPRI != 0 {
                    libc::FD_SET(p.fd, exceptfds);
                    count += 1;
                }
            }
        }
    }
    Ok(count)
}

/// Ends one or both directions (rsockets' rshutdown): tells the peer, then waits for every
/// send to complete.
pub(crate) fn rshutdown(fd: c_int, how: c_int) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        return dgram::rshutdown(&d, how);
    }
    let s = lookup(fd)?;
    shutdown(&s, how)
}

fn shutdown(s: &Socket, how: c_int) -> Res<()> {
    let mut g = lock(s);
    if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
        return Err(libc::EINVAL);
    }
    let mut result = Ok(());
    if g.connected() {
        let ctrl = match how {
            libc::SHUT_RDWR => {
                g.readable = false;
                g.writable = false;
                Some(RS_CTRL_DISCONNECT)
            }
            libc::SHUT_WR => {
                g.writable = false;
                Some(if g.readable {
                    RS_CTRL_SHUTDOWN
                } else {
                    RS_CTRL_DISCONNECT
                })
            }
            _ => {
                g.readable = false;
                (!g.writable).then_some(RS_CTRL_DISCONNECT)
            }
        };
        if let Some(ctrl) = ctrl {
            if !g.conn.as_ref().is_some_and(|c| c.ctrl_avail()) {
                let (g2, r) = Inner::wait(g, s, false, |i| {
                    i.conn.as_ref().is_some_and(|c| c.ctrl_avail()) || !i.connected()
                });
                g = g2;
                result = r;
            }
            if result.is_ok()
                && g.connected()
                && let Some(c) = g.conn.as_mut()
                && c.ctrl_avail()
            {
                c.ctrl_seqno = c.ctrl_seqno.wrapping_add(1);
                result = c.post_msg(msg(RS_OP_CTRL, ctrl));
            }
        }
        if result.is_ok() && g.connected() {
            let (g2, r) = Inner::wait(g, s, false, |i| {
                i.conn.as_ref().is_some_and(|c| c.all_sends_done()) || !i.connected()
            });
            g = g2;
            result = r;
        }
    }
    if g.phase == Phase::Disconnected
        && let (Some(c), Ok(v)) = (g.conn.as_ref(), verbs())
    {
        // As librdmacm's ucma_shutdown on IB/RoCE: the QP to ERR flushes what is posted,
        // waking anyone who waits on the CQ.
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut attr: ibv_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = IBV_QPS_ERR;
        // SAFETY: the connection's QP.
        unsafe { (v.modify_qp)(c.qp, &mut attr, IBV_QP_STATE as c_int) };
    }
    result
}

pub(crate) fn rclose(fd: c_int) -> Res<()> {
    if dgram::lookup(fd).is_some() {
        return dgram::rclose(fd);
    }
    let s = lookup(fd)?;
    if lock(&s).connected() {
        let _ = shutdown(&s, libc::SHUT_RDWR);
    }
    sockets().remove(&fd);
    stop_accept_service(&s);
    let accepted = {
        let mut g = lock(&s);
        g.destroy();
        g.phase = Phase::Closed;
        g.accepted.take()
    };
    if let Some(q) = accepted {
        q.close();
    }
    Ok(())
}

/// Copies `src` into the caller's `addr` of `*len` bytes, truncating, and sets `*len` to
/// the address's full size.
///
/// # Safety
/// `addr` holds `*len` writable bytes.
unsafe fn copy_addr(src: &rdma_sockaddr, addr: *mut sockaddr, len: *mut socklen_t) -> Res<()> {
    if addr.is_null() || len.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: any view of the union starts with the family.
    let family = c_int::from(unsafe { src.addr.sa_family });
    let size = if family == libc::AF_INET6 {
        size_of::<libc::sockaddr_in6>()
    } else {
        size_of::<libc::sockaddr_in>()
    };
    // SAFETY: the caller's length.
    let room = unsafe { *len } as usize;
    // SAFETY: `min(room, size)` bytes of both.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (src as *const rdma_sockaddr).cast::<u8>(),
            addr.cast::<u8>(),
            room.min(size),
        );
        *len = size as socklen_t;
    }
    Ok(())
}

/// # Safety
/// As getpeername(2).
pub(crate) unsafe fn rgetpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rgetpeername(&d, addr, len) };
    }
    let s = lookup(fd)?;
    let g = lock(&s);
    // SAFETY: the socket's id; the caller's buffers.
    unsafe { copy_addr(&(*g.id).route.addr.dst, addr, len) }
}

/// # Safety
/// As getsockname(2).
pub(crate) unsafe fn rgetsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rgetsockname(&d, addr, len) };
    }
    let s = lookup(fd)?;
    let g = lock(&s);
    // SAFETY: the socket's id; the caller's buffers.
    unsafe { copy_addr(&(*g.id).route.addr.src, addr, len) }
}

/// An int option value (setsockopt(2)): EFAULT for none, EINVAL for fewer bytes than an int.
pub(crate) fn read_int(value: *const c_void, len: socklen_t) -> Res<c_int> {
    if value.is_null() {
        return Err(libc::EFAULT);
    }
    if (len as usize) < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least an int's bytes.
    Ok(unsafe { value.cast::<c_int>().read_unaligned() })
}

/// # Safety
/// `value` holds `len` readable bytes.
pub(crate) unsafe fn rsetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rsetsockopt(&d, level, name, value, len) };
    }
    let s = lookup(fd)?;
    let mut g = lock(&s);
    let cm = cm()?;
    let bit = |name: c_int| 1u64.checked_shl(name as u32).unwrap_or(0);
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            let mut on = read_int(value, len)?;
            // SAFETY: the id; an int option.
            let rc = unsafe {
                (cm.rdma_set_option)(
                    g.id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_REUSEADDR,
                    (&mut on as *mut c_int).cast(),
                    size_of::<c_int>(),
                )
            };
            // As rsockets: refused once bound on RoCE/IB, it is not an error.
            if rc != 0 && g.phase == Phase::Init {
                return Err(errno());
            }
            set_bit(&mut g.so_opts, bit(name), on != 0);
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let v = read_int(value, len)?;
            if g.conn.is_none() {
                g.rbuf_size = (v.max(0) as u32)
                    .saturating_mul(2)
                    .clamp(SNDLOWAT << 1, 1 << 30);
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let v = read_int(value, len)?;
            if g.conn.is_none() {
                g.sbuf_size = (v.max(0) as u32)
                    .saturating_mul(2)
                    .clamp(SNDLOWAT << 1, 1 << 30);
            }
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if value.is_null() {
                return Err(libc::EFAULT);
            }
            if (len as usize) < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: a linger's bytes.
            let l = unsafe { value.cast::<libc::linger>().read_unaligned() };
            // Inverted as rsockets keeps it, so the default (0) is on.
            set_bit(&mut g.so_opts, bit(name), l.l_onoff == 0);
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            let on = read_int(value, len)?;
            set_bit(&mut g.so_opts, bit(name), on != 0);
            // rsockets' rs_set_keepalive: turning it on without TCP_KEEPIDLE takes the
            // kernel's idle time (tcp_keepalive_time), else two hours.
            if name == libc::SO_KEEPALIVE && on != 0 && g.keepalive_time == 0 {
                g.keepalive_time = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .filter(|&t: &c_int| t > 0)
                    .unwrap_or(7200);
            }
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => {
            let tos = read_int(value, len)?;
            let mut t = tos as u8;
            // SAFETY: the id; a u8 option.
            check(unsafe {
                (cm.rdma_set_option)(
                    g.id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_TOS,
                    (&mut t as *mut u8).cast(),
                    1,
                )
            })?;
            g.ip_tos = tos;
        }
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION,
        ) => {}
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let v = read_int(value, len)?;
            if v <= 0 {
                return Err(libc::EINVAL);
            }
            g.keepalive_time = v;
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            let on = read_int(value, len)?;
            set_bit(&mut g.tcp_opts, bit(name), on != 0);
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            let mut on = read_int(value, len)?;
            // SAFETY: the id; an int option.
            check(unsafe {
                (cm.rdma_set_option)(
                    g.id,
                    RDMA_OPTION_ID,
                    RDMA_OPTION_ID_AFONLY,
                    (&mut on as *mut c_int).cast(),
                    size_of::<c_int>(),
                )
            })?;
            set_bit(&mut g.ipv6_opts, bit(name), on != 0);
        }
        (SOL_RDMA, _) => {
            if !matches!(g.phase, Phase::Init | Phase::Bound | Phase::Listening) {
                return Err(libc::EINVAL);
            }
            match name {
                RDMA_SQSIZE => g.sq_size = (read_int(value, len)?.max(0) as u32).min(QP_MAX_SIZE),
                RDMA_RQSIZE => g.rq_size = (read_int(value, len)?.max(0) as u32).min(QP_MAX_SIZE),
                RDMA_INLINE => g.sq_inline = (read_int(value, len)?.max(0) as u32).min(QP_MAX_SIZE),
                // Rounded to what one byte of the connection data can say, as rsockets.
                RDMA_IOMAPSIZE => {
                    let v = read_int(value, len)?.clamp(0, 1 << 15) as u32;
                    g.target_iomap_size = scale_to_value(value_to_scale(v, 8) & 0xFF, 8);
                }
                // Kept for the connect (see `Inner::route_option`); the CM checks the
                // records then, and refuses more than it takes.
                RDMA_ROUTE => {
                    if value.is_null() {
                        return Err(libc::EFAULT);
                    }
                    if len as usize > MAX_ROUTE_OPTION_BYTES {
                        return Err(libc::EINVAL);
                    }
                    // SAFETY: the caller's `len` bytes.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len as usize) };
                    g.route_option = Some(bytes.to_vec());
                }
                _ => return Err(libc::ENOTSUP),
            }
        }
        _ => return Err(libc::ENOTSUP),
    }
    Ok(())
}

/// The most RDMA_ROUTE keeps: what the CM's RDMA_OPTION_IB_PATH takes at most.
const MAX_ROUTE_OPTION_BYTES: usize = 4 << 20;

/// RDMA_ROUTE as rsockets reads it: the records set and not yet used, whole or EINVAL;
/// else the id's route, one `ibv_path_data` per path that fits (EINVAL when not even one
/// does), flagged with the path's preference. Returns the bytes written.
///
/// # Safety
/// `out` holds `room` writable bytes; `g.id` is the socket's id.
unsafe fn route_records(g: &Inner, out: *mut u8, room: usize) -> Res<usize> {
    if let Some(route) = &g.route_option {
        if room < route.len() {
            return Err(libc::EINVAL);
        }
        // SAFETY: room for the whole set.
        unsafe { std::ptr::copy_nonoverlapping(route.as_ptr(), out, route.len()) };
        return Ok(route.len());
    }
    const RECORD: usize = size_of::<ibv_path_data>();
    if room < RECORD {
        return Err(libc::EINVAL);
    }
    // SAFETY: the socket's id.
    let route = unsafe { &(*g.id).route };
    let paths = if route.path_rec.is_null() {
        0
    } else {
        usize::try_from(route.num_paths).unwrap_or(0)
    };
    let mut written = 0;
    for i in 0..paths.min(room / RECORD) {
        // SAFETY: `num_paths` records at `path_rec`.
        let p = unsafe { &*route.path_rec.add(i) };
        let record = packed_path(p);
        // SAFETY: room for this record (checked by the count).
        unsafe {
            out.add(written)
                .cast::<ibv_path_data>()
                .write_unaligned(record)
        };
        written += RECORD;
    }
    Ok(written)
}

/// A route's path in the SA's packed form, as rsockets' rs_convert_sa_path packs it
/// (selectors "exactly", one path, its preference as the flags).
fn packed_path(p: &ibv_sa_path_rec) -> ibv_path_data {
    const EXACTLY: u8 = 2 << 6;
    let flow_hop = (u32::from_be(p.flow_label) << 8) | u32::from(p.hop_limit);
    ibv_path_data {
        flags: u32::from(p.preference),
        reserved: 0,
        path: ibv_path_record {
            service_id: 0,
            dgid: p.dgid,
            sgid: p.sgid,
            dlid: p.dlid,
            slid: p.slid,
            flowlabel_hoplimit: flow_hop.to_be(),
            tclass: p.traffic_class,
            reversible_numpath: (u8::from(p.reversible != 0) << 7) | 1,
            pkey: p.pkey,
            qosclass_sl: u16::from(p.sl).to_be(),
            mtu: p.mtu | EXACTLY,
            rate: p.rate | EXACTLY,
            packetlifetime: p.packet_life_time | EXACTLY,
            preference: 0,
            reserved: [0; 6],
        },
    }
}

fn set_bit(opts: &mut u64, bit: u64, on: bool) {
    if on {
        *opts |= bit;
    } else {
        *opts &= !bit;
    }
}

/// # Safety
/// `value` holds `*len` writable bytes.
pub(crate) unsafe fn rgetsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: *mut socklen_t,
) -> Res<()> {
    if let Some(d) = dgram::lookup(fd) {
        // SAFETY: the caller's contract.
        return unsafe { dgram::rgetsockopt(&d, level, name, value, len) };
    }
    let s = lookup(fd)?;
    let mut g = lock(&s);
    if value.is_null() || len.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's length.
    let room = unsafe { *len } as usize;
    let bit = |opts: u64, name: c_int| {
        c_int::from(opts & 1u64.checked_shl(name as u32).unwrap_or(0) != 0)
    };
    let int = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            bit(g.so_opts, name)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.rbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.sbuf_size as c_int,
        (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut g.err),
        (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if room < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            let l = libc::linger {
                l_onoff: 1 - bit(g.so_opts, name),
                l_linger: 0,
            };
            // SAFETY: room for a linger.
            unsafe {
                value.cast::<libc::linger>().write_unaligned(l);
                *len = size_of::<libc::linger>() as socklen_t;
            }
            return Ok(());
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => g.ip_tos,
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_CONGESTION) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.keepalive_time,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(g.tcp_opts, name),
        // rsockets: the route's path MTU when there is a route, else 2048.
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            // SAFETY: the socket's id and, when it has paths, its path record.
            unsafe {
                let route = &(*g.id).route;
                if route.num_paths > 0 && !route.path_rec.is_null() {
                    1 << (7 + c_int::from((*route.path_rec).mtu).clamp(1, 5))
                } else {
                    2048
                }
            }
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(g.ipv6_opts, name),
        (SOL_RDMA, RDMA_SQSIZE) => g.sq_size as c_int,
        (SOL_RDMA, RDMA_RQSIZE) => g.rq_size as c_int,
        (SOL_RDMA, RDMA_INLINE) => g.sq_inline as c_int,
        (SOL_RDMA, RDMA_IOMAPSIZE) => g.target_iomap_size as c_int,
        (SOL_RDMA, RDMA_ROUTE) => {
            // SAFETY: `room` writable bytes at `value`; the id is the socket's.
            let written = unsafe { route_records(&g, value.cast(), room) }?;
            // SAFETY: the caller's length.
            unsafe { *len = written as socklen_t };
            return Ok(());
        }
        _ => return Err(libc::ENOTSUP),
    };
    if room < size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: room for an int.
    unsafe {
        value.cast::<c_int>().write_unaligned(int);
        *len = size_of::<c_int>() as socklen_t;
    }
    Ok(())
}

pub(crate) fn rfcntl(fd: c_int, cmd: c_int, arg: usize) -> Res<c_int> {
    if let Some(d) = dgram::lookup(fd) {
        return dgram::rfcntl(&d, cmd, arg);
    }
    let s = lookup(fd)?;
    let g = &mut *lock(&s);
    fcntl_flags(&mut g.fs_flags, &mut g.fd_flags, cmd, arg)
}

/// rfcntl's commands on a socket's file status and descriptor flags (rsockets keeps both
/// itself and supports nothing else).
pub(crate) fn fcntl_flags(
    fs_flags: &mut c_int,
    fd_flags: &mut c_int,
    cmd: c_int,
    arg: usize,
) -> Res<c_int> {
    match cmd {
        libc::F_GETFL => Ok(*fs_flags | libc::O_RDWR),
        libc::F_SETFL => {
            *fs_flags = (arg as c_int) & !libc::O_ACCMODE;
            Ok(0)
        }
        libc::F_GETFD => Ok(*fd_flags),
        libc::F_SETFD => {
            *fd_flags = arg as c_int;
            Ok(0)
        }
        _ => Err(libc::ENOTSUP),
    }
}
