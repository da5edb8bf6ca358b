//! The backend a [`Context`](crate::Context) drives: the softroce emulator (always built) or
//! real hardware through the system's libibverbs (cargo feature `ibverbs`, loaded at run time).
//!
//! Objects are named by the emulator's handle types. For the emulator they are its own
//! generation-checked handles; other backends treat them as opaque tokens (the libibverbs
//! backend stores its C object pointers in them). A token is only ever given back to the
//! backend that made it.

use std::fmt;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, ChannelHandle, Counters, CqHandle, DeviceAttr, Hca,
    MrHandle, MrKeys, MwBind, MwHandle, MwType, PdHandle, PortAttr, QpAttr, QpAttrMask, QpHandle,
    QpInitAttr, QpState, RecvWr, SendFlags, SendWr, SrqAttr, SrqAttrMask, SrqHandle, WcOpcode,
    WorkCompletion, XrcdHandle,
};
use softroce_emu::driver::Device;
use softroce_wire::{Gid, Qpn};

use crate::error::Result;

/// The verbs that are one call on the emulator's `Hca`, for a backend with a method
/// `with(&self, impl FnOnce(&mut Hca) -> R) -> R` that runs it under the device's lock.
/// Shared by the emulated and the simulated backends, which differ only in how they wait.
macro_rules! hca_verbs {
    () => {
        fn query_device(&self) -> Result<DeviceAttr> {
            Ok(self.with(|h| h.query_device().clone()))
        }
        fn query_port(&self, port: u8) -> Result<PortAttr> {
            Ok(self.with(|h| h.query_port(port))?)
        }
        fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
            Ok(self.with(|h| h.query_gid(port, index))?)
        }
        fn sgid_index(&self) -> usize {
            self.with(|h| h.ip_gid_index())
        }

        fn alloc_pd(&self) -> Result<PdHandle> {
            Ok(self.with(|h| h.alloc_pd())?)
        }
        fn dealloc_pd(&self, pd: PdHandle) -> Result<()> {
            Ok(self.with(|h| h.dealloc_pd(pd))?)
        }
        fn dereg_mr(&self, mr: MrHandle) -> Result<()> {
            Ok(self.with(|h| h.dereg_mr(mr))?)
        }
        fn alloc_null_mr(&self, pd: PdHandle) -> Result<(MrHandle, u32)> {
            let (mr, keys) = self.with(|h| h.alloc_null_mr(pd))?;
            Ok((mr, keys.lkey))
        }
        fn alloc_mw(&self, pd: PdHandle, mw_type: MwType) -> Result<(MwHandle, u32)> {
            Ok(self.with(|h| h.alloc_mw(pd, mw_type))?)
        }
        fn dealloc_mw(&self, mw: MwHandle) -> Result<()> {
            Ok(self.with(|h| h.dealloc_mw(mw))?)
        }
        fn bind_mw(
            &self,
            qp: QpHandle,
            wr_id: u64,
            send_flags: SendFlags,
            bind: MwBind,
        ) -> Result<u32> {
            self.with(|h| h.bind_mw(qp, wr_id, send_flags, bind))?;
            Ok(bind.rkey)
        }

        fn create_cq(&self, cqe: u32, channel: Option<ChannelHandle>) -> Result<(CqHandle, u32)> {
            Ok(self.with(|h| h.create_cq(cqe, channel, 0, 0))?)
        }
        fn destroy_cq(&self, cq: CqHandle) -> Result<()> {
            Ok(self.with(|h| h.destroy_cq(cq))?)
        }
        fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()> {
            Ok(self.with(|h| h.req_notify_cq(cq, solicited_only))?)
        }
        fn modify_cq_moderation(&self, cq: CqHandle, count: u16, period_us: u16) -> Result<()> {
            Ok(self.with(|h| h.modify_cq_moderation(cq, count, period_us))?)
        }
        fn ack_cq_events(&self, cq: CqHandle, n: u32) -> Result<()> {
            Ok(self.with(|h| h.ack_cq_events(cq, n))?)
        }

        fn create_srq(&self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle> {
            Ok(self.with(|h| h.create_srq(pd, attr, 0))?.0)
        }
        fn modify_srq(&self, srq: SrqHandle, attr: SrqAttr, mask: SrqAttrMask) -> Result<()> {
            Ok(self.with(|h| h.modify_srq(srq, attr, mask))?)
        }
        fn destroy_srq(&self, srq: SrqHandle) -> Result<()> {
            Ok(self.with(|h| h.destroy_srq(srq))?)
        }
        unsafe fn post_srq_recv(&self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<()> {
            Ok(self.with_recv(|h| h.post_srq_recv(srq, wrs))?)
        }

        fn create_qp(&self, pd: PdHandle, init: QpInitAttr) -> Result<(QpHandle, Qpn)> {
            let (qp, qpn, _) = self.with(|h| h.create_qp(pd, init))?;
            Ok((qp, qpn))
        }

        fn open_xrcd(&self) -> Result<XrcdHandle> {
            Ok(self.with(|h| h.open_xrcd())?)
        }
        fn close_xrcd(&self, xrcd: XrcdHandle) -> Result<()> {
            Ok(self.with(|h| h.close_xrcd(xrcd))?)
        }
        fn create_xrc_srq(
            &self,
            pd: PdHandle,
            xrcd: XrcdHandle,
            cq: CqHandle,
            attr: SrqAttr,
        ) -> Result<(SrqHandle, u32)> {
            Ok(self.with(|h| {
                let (srq, _) = h.create_xrc_srq(pd, xrcd, cq, attr, 0)?;
                Ok::<_, softroce_emu::core::VerbsError>((srq, h.srq_num(srq)?))
            })?)
        }
        fn create_xrc_recv_qp(&self, xrcd: XrcdHandle) -> Result<(QpHandle, Qpn)> {
            Ok(self.with(|h| h.create_xrc_recv_qp(xrcd, 0))?)
        }
        fn open_xrc_recv_qp(&self, xrcd: XrcdHandle, qpn: u32) -> Result<QpHandle> {
            Ok(self.with(|h| h.open_xrc_recv_qp(xrcd, qpn))?)
        }
        fn modify_qp(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
            Ok(self.with(|h| h.modify_qp(qp, attr, mask))?)
        }
        fn qp_state(&self, qp: QpHandle) -> Result<QpState> {
            Ok(self.with(|h| h.qp_state(qp))?)
        }
        fn destroy_qp(&self, qp: QpHandle) -> Result<()> {
            Ok(self.with(|h| h.destroy_qp(qp))?)
        }
        unsafe fn post_send(&self, qp: QpHandle, wrs: &[SendWr]) -> Result<()> {
            // SAFETY: forwarded contract.
            Ok(self.with_post(|h| unsafe { h.post_send(qp, wrs) })?)
        }
        unsafe fn post_recv(&self, qp: QpHandle, wrs: &[RecvWr]) -> Result<()> {
            Ok(self.with_recv(|h| h.post_recv(qp, wrs))?)
        }

        fn create_ah(&self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle> {
            Ok(self.with(|h| h.create_ah(pd, attr))?)
        }
        fn destroy_ah(&self, ah: AhHandle) -> Result<()> {
            Ok(self.with(|h| h.destroy_ah(ah))?)
        }
        fn ack_async_event(&self, event: &AsyncEvent) -> Result<()> {
            Ok(self.with(|h| h.ack_async_event(event))?)
        }

        fn counters(&self) -> Option<Counters> {
            Some(self.with(|h| h.counters().clone()))
        }
        fn with_hca_dyn(&self, f: &mut dyn FnMut(&mut Hca)) -> bool {
            self.with(|h| f(h));
            true
        }
    };
}

mod emulated;
#[cfg(feature = "ibverbs")]
pub(crate) mod ibverbs;
mod simulated;

#[cfg(feature = "ibverbs")]
pub use ibverbs::Ibverbs;

pub use crate::backend_kind::BackendKind;
pub use emulated::Emulated;
pub use simulated::Simulated;

/// The verbs, one method each, as a device implements them.
///
/// Every method mirrors the libibverbs verb of the same name and reports failures with the
/// errno that verb would set. Methods marked `unsafe` hand the device memory it may access
/// until the matching completion is polled or the region is deregistered.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Which implementation this is.
    fn kind(&self) -> BackendKind;
    /// The device's name (`ibv_get_device_name`).
    fn device_name(&self) -> String;
    /// `ibv_query_device`.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// `ibv_query_port`.
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// `ibv_query_gid`.
    fn query_gid(&self, port: u8, index: usize) -> Result<Gid>;
    /// The source GID index QPs use (the RoCEv2 GID of the device's IPv4 or IPv6 address).
    fn sgid_index(&self) -> usize;
    /// The UDP port the device receives RoCEv2 on (4791 but for private emulated setups).
    fn udp_port(&self) -> u16;

    /// `ibv_alloc_pd`.
    fn alloc_pd(&self) -> Result<PdHandle>;
    /// `ibv_dealloc_pd`.
    fn dealloc_pd(&self, pd: PdHandle) -> Result<()>;
    /// `ibv_reg_mr` of `len` bytes at `addr`.
    ///
    /// # Safety
    /// The memory must stay allocated until [`Backend::dereg_mr`] returns, and the device
    /// may read or write it at any time before that.
    unsafe fn reg_mr(
        &self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(MrHandle, MrKeys)>;
    /// `ibv_dereg_mr`.
    fn dereg_mr(&self, mr: MrHandle) -> Result<()>;
    /// `ibv_alloc_null_mr`: a region of `pd` that reads as zeros and discards writes; its
    /// lkey (the only valid key). Released with [`Backend::dereg_mr`].
    fn alloc_null_mr(&self, pd: PdHandle) -> Result<(MrHandle, u32)>;
    /// `ibv_alloc_mw`: the window and its R_Key.
    fn alloc_mw(&self, pd: PdHandle, mw_type: MwType) -> Result<(MwHandle, u32)>;
    /// `ibv_dealloc_mw`.
    fn dealloc_mw(&self, mw: MwHandle) -> Result<()>;
    /// `ibv_bind_mw` of a type 1 window, asking for the R_Key `bind.rkey`: the window's R_Key
    /// after the bind (a provider may pick its own, as ibv_bind_mw(3) returns it).
    fn bind_mw(&self, qp: QpHandle, wr_id: u64, send_flags: SendFlags, bind: MwBind)
    -> Result<u32>;

    /// `ibv_create_comp_channel`: the channel and its pollable fd (valid until destroyed).
    fn create_comp_channel(&self) -> Result<(ChannelHandle, RawFd)>;
    /// `ibv_destroy_comp_channel`.
    fn destroy_comp_channel(&self, ch: ChannelHandle) -> Result<()>;
    /// `ibv_get_cq_event`, waiting up to `timeout` (`None`: forever; zero: EAGAIN if none).
    fn get_cq_event(&self, ch: ChannelHandle, timeout: Option<Duration>) -> Result<CqHandle>;

    /// `ibv_create_cq`: the CQ and its real size (at least `cqe`).
    fn create_cq(&self, cqe: u32, channel: Option<ChannelHandle>) -> Result<(CqHandle, u32)>;
    /// `ibv_destroy_cq`.
    fn destroy_cq(&self, cq: CqHandle) -> Result<()>;
    /// `ibv_poll_cq` into `out`; how many were written.
    fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize>;
    /// Poll until `want` completions were appended to `got` or `timeout` passed. The default
    /// polls with short sleeps; a backend with a progress signal sleeps on it instead.
    fn poll_cq_wait(
        &self,
        cq: CqHandle,
        want: usize,
        timeout: Duration,
        got: &mut Vec<WorkCompletion>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut buf = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 32];
        while got.len() < want {
            let room = (want - got.len()).min(buf.len());
            let n = self.poll_cq(cq, &mut buf[..room])?;
            got.extend_from_slice(&buf[..n]);
            if n == 0 {
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        Ok(())
    }
    /// `ibv_req_notify_cq`.
    fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()>;
    /// `ibv_modify_cq` with IBV_CQ_ATTR_MODERATE: completions per event and the period
    /// (microseconds) after which an armed CQ's event goes anyway.
    fn modify_cq_moderation(&self, cq: CqHandle, count: u16, period_us: u16) -> Result<()>;
    /// `ibv_ack_cq_events`.
    fn ack_cq_events(&self, cq: CqHandle, n: u32) -> Result<()>;

    /// `ibv_create_srq`.
    fn create_srq(&self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle>;
    /// `ibv_modify_srq`.
    fn modify_srq(&self, srq: SrqHandle, attr: SrqAttr, mask: SrqAttrMask) -> Result<()>;
    /// `ibv_destroy_srq`.
    fn destroy_srq(&self, srq: SrqHandle) -> Result<()>;
    /// `ibv_post_srq_recv`; a refusal names the first rejected request.
    ///
    /// # Safety
    /// The buffers the requests name must stay valid until their completions are polled.
    unsafe fn post_srq_recv(&self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<()>;

    /// `ibv_create_qp`: the QP and its number.
    fn create_qp(&self, pd: PdHandle, init: QpInitAttr) -> Result<(QpHandle, Qpn)>;
    /// `ibv_create_qp_ex` of an RC QP that can post [`WrOpcode::AtomicWrite`]
    /// (`IBV_QP_EX_WITH_ATOMIC_WRITE`): verbs.h carries ATOMIC WRITE's 8 bytes only through
    /// `ibv_wr_atomic_write`, on a QP created for the `ibv_wr_*` API. The emulator takes
    /// every opcode on any QP, so by default this is [`Backend::create_qp`].
    ///
    /// [`WrOpcode::AtomicWrite`]: softroce_emu::core::WrOpcode::AtomicWrite
    fn create_qp_atomic_write(&self, pd: PdHandle, init: QpInitAttr) -> Result<(QpHandle, Qpn)> {
        self.create_qp(pd, init)
    }
    /// `ibv_open_xrcd` of a domain of its own (no file shared with other processes).
    /// Backends without XRC: [`Error::Unsupported`](crate::Error::Unsupported), as for the
    /// other XRC verbs below.
    fn open_xrcd(&self) -> Result<XrcdHandle> {
        Err(xrc_unsupported(self.kind()))
    }
    /// `ibv_close_xrcd`.
    fn close_xrcd(&self, xrcd: XrcdHandle) -> Result<()> {
        let _ = xrcd;
        Err(xrc_unsupported(self.kind()))
    }
    /// `ibv_create_srq_ex` of an XRC SRQ of `pd` in `xrcd`, completing on `cq`: the SRQ and
    /// the number XRC requests name it by (`ibv_get_srq_num`).
    fn create_xrc_srq(
        &self,
        pd: PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: SrqAttr,
    ) -> Result<(SrqHandle, u32)> {
        let _ = (pd, xrcd, cq, attr);
        Err(xrc_unsupported(self.kind()))
    }
    /// `ibv_create_qp_ex` of an XRC target QP (`IBV_QPT_XRC_RECV`) in `xrcd`.
    fn create_xrc_recv_qp(&self, xrcd: XrcdHandle) -> Result<(QpHandle, Qpn)> {
        let _ = xrcd;
        Err(xrc_unsupported(self.kind()))
    }
    /// `ibv_open_qp`: another handle to the XRC target QP `qpn` of `xrcd`.
    fn open_xrc_recv_qp(&self, xrcd: XrcdHandle, qpn: u32) -> Result<QpHandle> {
        let _ = (xrcd, qpn);
        Err(xrc_unsupported(self.kind()))
    }
    /// `ibv_modify_qp`.
    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()>;
    /// `ibv_query_qp` of the state.
    fn qp_state(&self, qp: QpHandle) -> Result<QpState>;
    /// `ibv_destroy_qp`.
    fn destroy_qp(&self, qp: QpHandle) -> Result<()>;
    /// `ibv_attach_mcast` (a UD QP to the group `mgid`).
    fn attach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()>;
    /// `ibv_detach_mcast`.
    fn detach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()>;
    /// `ibv_post_send`; a refusal names the first rejected request (`bad_wr`).
    ///
    /// # Safety
    /// The buffers the requests name must stay valid until their completions are polled
    /// (inline data: during this call).
    unsafe fn post_send(&self, qp: QpHandle, wrs: &[SendWr]) -> Result<()>;
    /// `ibv_post_recv`; a refusal names the first rejected request (`bad_wr`).
    ///
    /// # Safety
    /// The buffers the requests name must stay valid until their completions are polled.
    unsafe fn post_recv(&self, qp: QpHandle, wrs: &[RecvWr]) -> Result<()>;

    /// `ibv_create_ah`.
    fn create_ah(&self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle>;
    /// `ibv_destroy_ah`.
    fn destroy_ah(&self, ah: AhHandle) -> Result<()>;

    /// `ibv_get_async_event`, waiting up to `timeout` (`None`: forever).
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent>;
    /// `ibv_ack_async_event`.
    fn ack_async_event(&self, event: &AsyncEvent) -> Result<()>;
    /// The async event queue's fd (`ibv_context.async_fd`).
    fn async_fd(&self) -> RawFd;

    /// Device counters in the emulator's terms (rxe's hw_counters), where the backend has them.
    fn counters(&self) -> Option<Counters> {
        None
    }
    /// `ibv_query_rt_values_ex`'s raw clock, where the backend stamps completions with it.
    fn raw_clock(&self) -> Option<u64> {
        None
    }
    /// The emulated device behind this backend, if it is one (fault injection, the HCA).
    fn emulated(&self) -> Option<&Arc<Device>> {
        None
    }
    /// The simulated device behind this backend, if it is one (the connection manager).
    fn simulated(&self) -> Option<&Simulated> {
        None
    }
    /// The libibverbs device behind this backend, if it is one (the connection manager,
    /// through librdmacm).
    #[cfg(feature = "ibverbs")]
    fn ibverbs(&self) -> Option<&Ibverbs> {
        None
    }
    /// Run `f` on the emulator's HCA behind this backend (the emulated and the simulated
    /// backends have one); `false` if there is none. Error injection goes through here.
    fn with_hca_dyn(&self, f: &mut dyn FnMut(&mut Hca)) -> bool {
        let _ = f;
        false
    }
    /// The first PSN a new QP numbered `qpn` sends from, when the backend chooses it (the
    /// simulator draws it from its seed so runs replay); `None`: the API chooses.
    fn initial_psn(&self, qpn: Qpn) -> Option<u32> {
        let _ = qpn;
        None
    }
}

/// What a backend without the XRC verbs answers them with.
fn xrc_unsupported(backend: BackendKind) -> crate::Error {
    crate::Error::Unsupported {
        what: "XRC (ibv_open_xrcd, XRC SRQs, XRC target QPs, ibv_open_qp)",
        backend,
    }
}
