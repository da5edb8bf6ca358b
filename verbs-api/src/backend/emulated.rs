//! The default backend: a softroce emulated device in this process.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, ChannelHandle, Counters, CqHandle, DeviceAttr, Hca,
    MrHandle, MrKeys, MwBind, MwHandle, MwType, PdHandle, PortAttr, QpAttr, QpAttrMask, QpHandle,
    QpInitAttr, QpState, RecvWr, SendFlags, SendWr, SrqAttr, SrqAttrMask, SrqHandle, WcOpcode,
    WorkCompletion, XrcdHandle,
};
use softroce_emu::driver::{Device, DeviceConfig};
use softroce_wire::{Gid, Qpn};

use super::{Backend, BackendKind};
use crate::error::{Error, Result};

/// An emulated device (UDP sockets, engine thread) driven through the [`Backend`] verbs.
#[derive(Debug, Clone)]
pub struct Emulated {
    dev: Arc<Device>,
}

impl Emulated {
    /// Start a device with `cfg`.
    pub fn start(cfg: DeviceConfig) -> Result<Self> {
        let what = format!(
            "starting device {} on {}:{}",
            cfg.hca.name, cfg.hca.ip, cfg.hca.udp_port
        );
        let dev = Device::start(cfg).map_err(|e| Error::io(what, e))?;
        Ok(Self { dev: Arc::new(dev) })
    }

    /// Drive an already started device.
    pub fn from_device(dev: Arc<Device>) -> Self {
        Self { dev }
    }
}

impl Emulated {
    /// A verb under the device's lock (what `hca_verbs!` calls).
    fn with<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        self.dev.with(f)
    }

    /// Posting send work: inside a burst its packets wait for the next verb
    /// ([`Device::post_send`]).
    fn with_post<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        self.dev.post_send(f)
    }

    /// Posting receive work: nothing to send, only completions to signal
    /// ([`Device::post_recv`]).
    fn with_recv<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        self.dev.post_recv(f)
    }
}

impl Backend for Emulated {
    hca_verbs!();

    fn kind(&self) -> BackendKind {
        BackendKind::Emulated
    }
    fn device_name(&self) -> String {
        self.dev.with(|h| h.config().name.clone())
    }
    fn udp_port(&self) -> u16 {
        self.dev.local_addr().port()
    }
    unsafe fn reg_mr(
        &self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(MrHandle, MrKeys)> {
        // SAFETY: forwarded contract: the memory outlives the registration.
        Ok(unsafe { self.dev.reg_mr(pd, addr, len, access) }?)
    }

    fn create_comp_channel(&self) -> Result<(ChannelHandle, RawFd)> {
        let (ch, fd) = self
            .dev
            .create_comp_channel()
            .map_err(|e| Error::io("creating a completion channel", e))?;
        // The device keeps the eventfd open until the channel is destroyed.
        Ok((ch, fd.as_raw_fd()))
    }
    fn destroy_comp_channel(&self, ch: ChannelHandle) -> Result<()> {
        Ok(self.dev.destroy_comp_channel(ch)?)
    }
    fn get_cq_event(&self, ch: ChannelHandle, timeout: Option<Duration>) -> Result<CqHandle> {
        Ok(self.dev.get_cq_event(ch, timeout)?.0)
    }

    fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize> {
        // A busy poller receives and runs timers itself, as ibv_poll_cq on the drop-in does
        // (no engine wakeup per arrival).
        Ok(self
            .dev
            .busy_poll(|h| h.poll_cq(cq, out), |r| matches!(r, Ok(0)))?)
    }
    fn poll_cq_wait(
        &self,
        cq: CqHandle,
        want: usize,
        timeout: Duration,
        got: &mut Vec<WorkCompletion>,
    ) -> Result<()> {
        let mut buf = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 32];
        let mut error = None;
        // Sleep on the engine's progress signal rather than spinning on the device lock.
        let _ = self.dev.wait_for(timeout, |h| {
            if got.len() >= want {
                return Some(());
            }
            let room = (want - got.len()).min(buf.len());
            match h.poll_cq(cq, &mut buf[..room]) {
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) => {
                    error = Some(e);
                    return Some(());
                }
            }
            (got.len() >= want).then_some(())
        });
        match error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        Ok(self.dev.get_async_event(timeout)?)
    }
    fn async_fd(&self) -> RawFd {
        self.dev.async_fd().as_raw_fd()
    }

    fn emulated(&self) -> Option<&Arc<Device>> {
        Some(&self.dev)
    }
    fn raw_clock(&self) -> Option<u64> {
        Some(self.dev.raw_clock())
    }
    // Through the device: it joins the IP group the core's membership asks for.
    fn attach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()> {
        Ok(self.dev.attach_mcast(qp, mgid, 0)?)
    }
    fn detach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()> {
        Ok(self.dev.detach_mcast(qp, mgid, 0)?)
    }
}
