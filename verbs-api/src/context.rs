//! Device context, protection domains, memory regions, completion queues and channels.

use std::net::IpAddr;
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softroce_emu::core::{
    AccessFlags, AsyncEvent, ChannelHandle, Counters, CqHandle, DeviceAttr, Hca, MrHandle, MrKeys,
    MwBind, MwHandle, MwType, PdHandle, PortAttr, RecvWr, SendWr, Sge, SrqAttr, SrqAttrMask,
    SrqHandle, VerbsError, WorkCompletion, WrOpcode, XrcdHandle,
};
use softroce_emu::driver::{Device, DeviceConfig};

use crate::backend::{Backend, Emulated};
use softroce_wire::Gid;

use crate::error::{Error, Result};

/// An open device, on any [`Backend`].
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) dev: Arc<dyn Backend>,
    /// The device's connection manager, made on first use and shared by every clone.
    pub(crate) cm: Arc<std::sync::OnceLock<Arc<crate::cm::CmShared>>>,
}

impl Context {
    /// Start an emulated device named `name` on `ip:port` (port 0: any free port).
    pub fn open_emulated(name: &str, ip: IpAddr, port: u16) -> Result<Self> {
        let mut cfg = DeviceConfig::new(name, ip);
        cfg.hca.udp_port = port;
        Self::open_emulated_with(cfg)
    }

    /// Start an emulated device with a full configuration.
    pub fn open_emulated_with(cfg: DeviceConfig) -> Result<Self> {
        Ok(Self::with_backend(Arc::new(Emulated::start(cfg)?)))
    }

    /// Open a device through the system's libibverbs (a NIC, rdma_rxe): `device` by name
    /// (default: the first), source GID `gid_index` (default: its RoCEv2 IPv4 GID).
    #[cfg(feature = "ibverbs")]
    pub fn open_ibverbs(device: Option<&str>, gid_index: Option<usize>) -> Result<Self> {
        Ok(Self::with_backend(Arc::new(crate::backend::Ibverbs::open(
            device, gid_index,
        )?)))
    }

    /// Drive any backend (e.g. `backend::Ibverbs` with feature `ibverbs`).
    pub fn with_backend(backend: Arc<dyn Backend>) -> Self {
        Self {
            dev: backend,
            cm: Arc::default(),
        }
    }

    /// The backend behind this context.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.dev
    }

    /// The emulated device, or why there is none.
    pub(crate) fn emulated(&self, what: &'static str) -> Result<&Arc<Device>> {
        self.dev.emulated().ok_or_else(|| Error::Unsupported {
            what,
            backend: self.dev.kind(),
        })
    }

    /// Run a closure on the underlying emulated HCA (for attributes, counters and fault
    /// injection beyond what this API wraps); an error on other backends.
    pub fn with_hca<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> Result<R> {
        crate::inject::on_hca(self.dev.as_ref(), "the emulated HCA", f)
    }

    /// The UDP address an emulated device receives on.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr> {
        Ok(self.emulated("a local UDP address")?.local_addr())
    }

    /// The device's name.
    pub fn name(&self) -> String {
        self.dev.device_name()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.dev.query_device()
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.dev.query_port(port)
    }

    /// `ibv_query_gid` on port 1.
    pub fn gid(&self, index: usize) -> Result<Gid> {
        self.dev.query_gid(1, index)
    }

    /// Index of the RoCEv2 GID made from the device's IP address (what QPs use).
    pub fn ip_gid_index(&self) -> usize {
        self.dev.sgid_index()
    }

    /// What an emulated device's fault injector did (`None` without faults configured or
    /// on other backends).
    pub fn fault_counters(&self) -> Option<softroce_emu::faults::FaultCounters> {
        self.dev.emulated().and_then(|d| d.fault_counters())
    }

    /// Every counter of an emulated device as one `name=value …` line: rxe's `hw_counters`
    /// names first, then drops by reason, the driver's `drop_oversize`,
    /// `drop_send_failed` and `unmapped_bytes` and, with faults
    /// configured, what they injected. `None` on other backends.
    pub fn counters_line(&self) -> Option<String> {
        self.dev.emulated().map(|d| d.counters_line())
    }

    /// The device clock now (`ibv_query_rt_values_ex`, `IBV_VALUES_MASK_RAW_CLOCK`): what
    /// [`WorkCompletion::completion_ts`] is stamped with, in units of
    /// [`DeviceAttr::hca_core_clock`] kHz (nanoseconds: of CLOCK_MONOTONIC on the emulator,
    /// of virtual time since the fabric began on the simulator). `None` on backends whose
    /// completions carry no timestamp (the system libibverbs).
    pub fn raw_clock(&self) -> Option<u64> {
        self.dev.raw_clock()
    }

    /// The device's counters, where the backend keeps them (the emulator does).
    pub fn counters(&self) -> Option<Counters> {
        self.dev.counters()
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let pd = self.dev.alloc_pd()?;
        Ok(ProtectionDomain {
            ctx: self.clone(),
            pd: Arc::new(PdInner {
                dev: Arc::clone(&self.dev),
                pd,
            }),
        })
    }

    /// `ibv_create_comp_channel`: a channel with a pollable fd.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        let (ch, fd) = self.dev.create_comp_channel()?;
        Ok(CompletionChannel {
            dev: Arc::clone(&self.dev),
            ch,
            fd,
        })
    }

    /// `ibv_create_cq` with at least `cqe` entries, attached to `channel` if given.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        let (cq, size) = self.dev.create_cq(cqe, channel.map(|c| c.ch))?;
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                dev: Arc::clone(&self.dev),
                cq,
            }),
            size,
        })
    }

    /// `ibv_get_async_event`, waiting up to `timeout` (`None`: forever).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        self.dev.get_async_event(timeout)
    }

    /// `ibv_ack_async_event`.
    pub fn ack_async_event(&self, event: &AsyncEvent) -> Result<()> {
        self.dev.ack_async_event(event)
    }

    /// The fd of the async event queue, for poll/epoll/mio.
    pub fn async_fd(&self) -> RawFd {
        self.dev.async_fd()
    }
}

#[derive(Debug)]
pub(crate) struct PdInner {
    pub(crate) dev: Arc<dyn Backend>,
    pub(crate) pd: PdHandle,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Objects hold the PD alive through `Arc`, so this is the last user.
        let _ = self.dev.dealloc_pd(self.pd);
    }
}

/// A protection domain.
#[derive(Debug, Clone)]
pub struct ProtectionDomain {
    pub(crate) ctx: Context,
    pub(crate) pd: Arc<PdInner>,
}

impl ProtectionDomain {
    /// Allocate and register `len` zeroed bytes with local write, remote write, remote read
    /// and remote atomic access.
    pub fn allocate(&self, len: usize) -> Result<MemoryRegion> {
        self.allocate_with(
            len,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )
    }

    /// Allocate and register `len` zeroed bytes with `access`.
    pub fn allocate_with(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        // u64 elements keep the buffer 8-byte aligned for atomics.
        let mut buf: Box<[u64]> = vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice();
        let ptr = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: the buffer is owned by the returned MemoryRegion and deregistered in its
        // Drop before being freed; a boxed slice never moves.
        let (mr, keys) = unsafe { self.pd.dev.reg_mr(self.pd.pd, ptr, len, access) }?;
        Ok(MemoryRegion {
            pd: Arc::clone(&self.pd),
            mr,
            keys,
            ptr,
            len,
            _buf: Some(buf),
        })
    }

    /// `ibv_reg_mr` of memory the caller owns.
    ///
    /// # Safety
    /// `addr..addr+len` must be valid for reads and writes, and stay allocated and unused
    /// by anything but this region's accessors and the device, until the region is dropped
    /// and every work request naming it has completed.
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: forwarded contract.
        let (mr, keys) = unsafe { self.pd.dev.reg_mr(self.pd.pd, addr, len, access) }?;
        Ok(MemoryRegion {
            pd: Arc::clone(&self.pd),
            mr,
            keys,
            ptr: addr,
            len,
            _buf: None,
        })
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        let srq = self.pd.dev.create_srq(
            self.pd.pd,
            SrqAttr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        )?;
        Ok(SharedReceiveQueue {
            pd: Arc::clone(&self.pd),
            srq,
            xrc: None,
        })
    }

    /// `ibv_create_srq_ex` of an XRC SRQ (`IBV_SRQT_XRC`) of this PD in `xrcd`: XRC
    /// requests reach it through any target QP of the domain by naming its
    /// [`SharedReceiveQueue::srq_num`], and its receives complete on `cq`.
    pub fn create_xrc_srq(
        &self,
        xrcd: &XrcDomain,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SharedReceiveQueue> {
        let attr = SrqAttr {
            max_wr,
            max_sge,
            srq_limit: 0,
        };
        let (srq, srq_num) =
            self.pd
                .dev
                .create_xrc_srq(self.pd.pd, xrcd.inner.xrcd, cq.inner.cq, attr)?;
        Ok(SharedReceiveQueue {
            pd: Arc::clone(&self.pd),
            srq,
            xrc: Some(XrcSrq {
                srq_num,
                _xrcd: Arc::clone(&xrcd.inner),
                _cq: Arc::clone(&cq.inner),
            }),
        })
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

/// Registered memory owning its buffer.
#[derive(Debug)]
pub struct MemoryRegion {
    pd: Arc<PdInner>,
    mr: MrHandle,
    keys: MrKeys,
    ptr: *mut u8,
    len: usize,
    /// The owned buffer (`None` for a raw registration of the caller's memory).
    _buf: Option<Box<[u64]>>,
}

// SAFETY: the region is plain memory plus handles; all access goes through copies or the
// device's own synchronisation.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; `&self` methods only copy.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.keys.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.keys.rkey
    }
    /// Address of byte `offset` (what a peer uses as a remote address).
    pub fn addr(&self, offset: usize) -> u64 {
        self.ptr as u64 + offset as u64
    }
    /// A scatter/gather element for `range`; a range outside the region is an error.
    pub fn slice(&self, range: Range<usize>) -> Result<Sge> {
        self.check("slice", range.start, range.end.saturating_sub(range.start))?;
        Ok(Sge {
            addr: self.addr(range.start),
            length: (range.end - range.start) as u32,
            lkey: self.keys.lkey,
        })
    }

    fn check(&self, verb: &'static str, offset: usize, len: usize) -> Result<()> {
        let fits =
            offset.checked_add(len).is_some_and(|end| end <= self.len) && len <= u32::MAX as usize;
        if fits {
            Ok(())
        } else {
            Err(VerbsError::Invalid {
                verb,
                reason: format!("{offset}+{len} lies outside the {}-byte region", self.len),
            }
            .into())
        }
    }

    /// Copy bytes out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check("read", offset, out.len())?;
        // SAFETY: in bounds of the owned buffer; a raw copy, no reference to the memory.
        unsafe { std::ptr::copy(self.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copy bytes into the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check("write", offset, data.len())?;
        // SAFETY: in bounds of the owned buffer; a raw copy, no reference to the memory.
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }

    /// Copy the whole region out.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: the whole owned buffer; a raw copy.
        unsafe { std::ptr::copy(self.ptr, v.as_mut_ptr(), self.len) };
        v
    }
}

impl MemoryRegion {
    pub(crate) fn handle(&self) -> MrHandle {
        self.mr
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.pd.dev.dereg_mr(self.mr).is_err() {
            // Still registered (a memory window is bound to it: ibv_dereg_mr fails with
            // EBUSY): a peer may still reach the buffer through the window, so it is leaked
            // rather than freed under the device.
            if let Some(buf) = self._buf.take() {
                std::mem::forget(buf);
            }
        }
    }
}

impl ProtectionDomain {
    /// `ibv_alloc_null_mr` (ibv_alloc_null_mr(3)): a region of the maximum length that reads
    /// as zeros and discards what is written to it, for data nobody needs (a receive's
    /// unwanted part, zeros to send). EOPNOTSUPP where the device has none (rxe).
    pub fn alloc_null_mr(&self) -> Result<NullMemoryRegion> {
        let (mr, lkey) = self.pd.dev.alloc_null_mr(self.pd.pd)?;
        Ok(NullMemoryRegion {
            pd: Arc::clone(&self.pd),
            mr,
            lkey,
        })
    }
}

/// A null memory region ([`ProtectionDomain::alloc_null_mr`]): only its lkey is valid, no
/// memory stands behind it, and it cannot be re-registered or bound to a window.
#[derive(Debug)]
pub struct NullMemoryRegion {
    pd: Arc<PdInner>,
    mr: MrHandle,
    lkey: u32,
}

impl NullMemoryRegion {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// A scatter/gather element of `len` bytes in the region (its address is never read).
    pub fn sge(&self, len: u32) -> Sge {
        Sge {
            addr: 0,
            length: len,
            lkey: self.lkey,
        }
    }
}

impl Drop for NullMemoryRegion {
    fn drop(&mut self) {
        let _ = self.pd.dev.dereg_mr(self.mr);
    }
}

impl ProtectionDomain {
    /// `ibv_alloc_mw`: an unbound memory window of `mw_type` (ibv_alloc_mw(3)). Bind a type 1
    /// window with [`QueuePair::bind_mw`](crate::QueuePair::bind_mw), a type 2 window by
    /// posting [`MemoryWindow::bind_wr`].
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow> {
        let (mw, rkey) = self.pd.dev.alloc_mw(self.pd.pd, mw_type)?;
        Ok(MemoryWindow {
            pd: Arc::clone(&self.pd),
            mw,
            mw_type,
            rkey: AtomicU32::new(rkey),
        })
    }
}

/// A memory window: an R_Key that, once bound, opens part of a memory region to remote
/// access with its own rights. Dropping it deallocates it (`ibv_dealloc_mw`, which unbinds).
#[derive(Debug)]
pub struct MemoryWindow {
    pd: Arc<PdInner>,
    mw: MwHandle,
    mw_type: MwType,
    rkey: AtomicU32,
}

impl MemoryWindow {
    /// Its type.
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The R_Key: as allocated, or as the last bind ([`QueuePair::bind_mw`](crate::QueuePair::bind_mw),
    /// [`MemoryWindow::bind_wr`]) gives it. As with `ibv_bind_mw`, the key changes when the
    /// bind is made, before it completes: a bind that completes in error leaves the window
    /// with its old key (ibv_bind_mw(3), NOTES).
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Relaxed)
    }

    pub(crate) fn set_rkey(&self, rkey: u32) {
        self.rkey.store(rkey, Ordering::Relaxed);
    }

    /// The next R_Key a bind gives the window: `ibv_inc_rkey` of `current`.
    pub fn next_rkey(current: u32) -> u32 {
        (current & !0xFF) | (current.wrapping_add(1) & 0xFF)
    }

    /// The bind, `len` bytes of `mr` from byte `offset` with `access` (remote rights, and
    /// `ZERO_BASED`), giving the window R_Key `rkey`; `len` 0 unbinds.
    pub(crate) fn bind_of(
        &self,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        access: AccessFlags,
        rkey: u32,
    ) -> MwBind {
        MwBind {
            mw: self.mw,
            rkey,
            mr: Some(mr.handle()),
            addr: mr.addr(offset),
            length: len as u64,
            access,
        }
    }

    /// An `IBV_WR_BIND_MW` work request binding this (type 2) window to `len` bytes of `mr`
    /// from byte `offset` with `access`, and the window's R_Key once it completes: the next
    /// key (`ibv_inc_rkey`), which [`MemoryWindow::rkey`] reports from now on. Post it with
    /// [`QueuePair::post_send`](crate::QueuePair::post_send): remote access through the key
    /// then comes only through that QP (a type 2B window, ibv_alloc_mw(3)).
    pub fn bind_wr(
        &self,
        wr_id: u64,
        mr: &MemoryRegion,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> (SendWr, u32) {
        let rkey = Self::next_rkey(self.rkey());
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw);
        wr.bind = Some(Box::new(self.bind_of(mr, offset, len, access, rkey)));
        self.set_rkey(rkey);
        (wr, rkey)
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        let _ = self.pd.dev.dealloc_mw(self.mw);
    }
}

/// A completion channel: `fd()` becomes readable when an armed CQ gets a completion.
#[derive(Debug)]
pub struct CompletionChannel {
    pub(crate) dev: Arc<dyn Backend>,
    pub(crate) ch: ChannelHandle,
    fd: RawFd,
}

impl CompletionChannel {
    /// The pollable fd (`ibv_comp_channel.fd`).
    pub fn fd(&self) -> RawFd {
        self.fd
    }
    /// Make `fd()` non-blocking (for event loops) or blocking.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        set_fd_nonblocking(self.fd, nonblocking)
            .map_err(|e| Error::io("fcntl on the channel fd", e))
    }
    /// `ibv_get_cq_event`: wait up to `timeout` (`None`: forever; zero: EAGAIN if none).
    /// Returns the CQ handle's raw value, as `CompletionQueue::raw_handle` shows it.
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Result<u64> {
        Ok(self.dev.get_cq_event(self.ch, timeout)?.to_raw())
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        let _ = self.dev.destroy_comp_channel(self.ch);
    }
}

#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) dev: Arc<dyn Backend>,
    pub(crate) cq: CqHandle,
}

/// A completion queue. Queue pairs keep it alive while they use it.
#[derive(Debug)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
    size: u32,
}

impl CompletionQueue {
    /// Entries it holds (at least what was asked).
    pub fn size(&self) -> u32 {
        self.size
    }
    /// The handle value completion channels report for this CQ.
    pub fn raw_handle(&self) -> u64 {
        self.inner.cq.to_raw()
    }
    /// `ibv_poll_cq` into `out`; returns how many were written.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.inner.dev.poll_cq(self.inner.cq, out)
    }
    /// Poll until `n` completions arrived or `timeout` passed, sleeping on the device's
    /// progress signal in between where the backend has one. An error after some
    /// completions were gathered returns those; the error shows on the next poll.
    pub fn poll_wait(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let mut got = Vec::with_capacity(n);
        match self
            .inner
            .dev
            .poll_cq_wait(self.inner.cq, n, timeout, &mut got)
        {
            Err(e) if got.is_empty() => Err(e),
            _ => Ok(got),
        }
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.inner.dev.req_notify_cq(self.inner.cq, solicited_only)
    }
    /// `ibv_modify_cq` (ibv_modify_cq(3)): once armed, the CQ's completion event waits for
    /// `count` completions, or for `period_us` microseconds after the first of them,
    /// whichever comes first; a zero leaves its condition out, both zero turn moderation
    /// off. Limits: [`DeviceAttr::max_cq_moderation_count`] and `_period`; EOPNOTSUPP where
    /// the device has no moderation (rxe).
    pub fn moderate(&self, count: u16, period_us: u16) -> Result<()> {
        self.inner
            .dev
            .modify_cq_moderation(self.inner.cq, count, period_us)
    }
    /// `ibv_ack_cq_events`.
    pub fn ack_events(&self, n: u32) -> Result<()> {
        self.inner.dev.ack_cq_events(self.inner.cq, n)
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Unacknowledged events make destroy refuse (EBUSY); dropping means the application
        // is done with them, so acknowledge what is outstanding first.
        if let Err(e) = self.dev.destroy_cq(self.cq)
            && e.errno() == libc::EBUSY
        {
            for _ in 0..1024 {
                if self.dev.ack_cq_events(self.cq, 1).is_err() {
                    break;
                }
            }
            let _ = self.dev.destroy_cq(self.cq);
        }
    }
}

/// A shared receive queue (an ordinary one, or an XRC SRQ).
#[derive(Debug)]
pub struct SharedReceiveQueue {
    pd: Arc<PdInner>,
    pub(crate) srq: SrqHandle,
    xrc: Option<XrcSrq>,
}

/// What an XRC SRQ has beyond an ordinary one: its number, and the domain and CQ it keeps.
#[derive(Debug)]
struct XrcSrq {
    srq_num: u32,
    _xrcd: Arc<XrcdInner>,
    _cq: Arc<CqInner>,
}

impl SharedReceiveQueue {
    /// `ibv_get_srq_num` of an XRC SRQ: what an initiator's
    /// [`SendWr::xrc_remote_srqn`](softroce_emu::core::SendWr) names it by. `None` for an
    /// ordinary SRQ.
    pub fn srq_num(&self) -> Option<u32> {
        self.xrc.as_ref().map(|x| x.srq_num)
    }

    /// `ibv_post_srq_recv` of one receive into `sges`.
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
        unsafe { self.pd.dev.post_srq_recv(self.srq, &[wr]) }
    }
    /// `ibv_post_srq_recv` of several receive work requests (`Error::bad_wr` on refusal).
    ///
    /// # Safety
    /// As [`SharedReceiveQueue::post_receive`], for every request.
    pub unsafe fn post_receives(&self, wrs: &[RecvWr]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.pd.dev.post_srq_recv(self.srq, wrs) }
    }
    /// Arm the limit event (`IBV_EVENT_SRQ_LIMIT_REACHED` when fewer WRs remain).
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let attr = SrqAttr {
            srq_limit: limit,
            ..SrqAttr::default()
        };
        let mask = SrqAttrMask {
            limit: true,
            max_wr: false,
        };
        self.pd.dev.modify_srq(self.srq, attr, mask)
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        let _ = self.pd.dev.destroy_srq(self.srq);
    }
}

#[derive(Debug)]
pub(crate) struct XrcdInner {
    pub(crate) dev: Arc<dyn Backend>,
    pub(crate) xrcd: XrcdHandle,
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        // XRC SRQs and target QPs hold the domain through `Arc`: this is the last user.
        let _ = self.dev.close_xrcd(self.xrcd);
    }
}

/// An XRC domain (`ibv_open_xrcd`): the scope of XRC SRQs
/// ([`ProtectionDomain::create_xrc_srq`]) and of the target QPs that serve them
/// ([`XrcDomain::create_target_qp`]). An initiator is an ordinary QP of type
/// [`QpType::XrcSend`](softroce_emu::core::QpType) connected to a target QP; each of its
/// sends names the SRQ it is for in `SendWr::xrc_remote_srqn`. Closed when its last user
/// goes.
#[derive(Debug, Clone)]
pub struct XrcDomain {
    pub(crate) inner: Arc<XrcdInner>,
}

impl Context {
    /// `ibv_open_xrcd`: a domain of this process's own (no file shared with others).
    /// [`Error::Unsupported`] on backends without XRC (the system libibverbs).
    pub fn open_xrcd(&self) -> Result<XrcDomain> {
        let xrcd = self.dev.open_xrcd()?;
        Ok(XrcDomain {
            inner: Arc::new(XrcdInner {
                dev: Arc::clone(&self.dev),
                xrcd,
            }),
        })
    }
}

/// Set or clear `O_NONBLOCK` on `fd`.
fn set_fd_nonblocking(fd: RawFd, nonblocking: bool) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd the backend keeps open; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flags = if nonblocking {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
