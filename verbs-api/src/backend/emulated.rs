//! The default backend: a softroce emulated device in this process.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, ChannelHandle, Counters, CqHandle, DeviceAttr,
    MrHandle, MrKeys, PdHandle, PortAttr, QpAttr, QpAttrMask, QpHandle, QpInitAttr, QpState,
    RecvWr, SendWr, SrqAttr, SrqAttrMask, SrqHandle, WcOpcode, WorkCompletion,
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

impl Backend for Emulated {
    fn kind(&self) -> BackendKind {
        BackendKind::Emulated
    }
    fn device_name(&self) -> String {
        self.dev.with(|h| h.config().name.clone())
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.dev.with(|h| h.query_device().clone()))
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        Ok(self.dev.with(|h| h.query_port(port))?)
    }
    fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        Ok(self.dev.with(|h| h.query_gid(port, index))?)
    }
    fn sgid_index(&self) -> usize {
        self.dev.with(|h| h.ip_gid_index())
    }
    fn udp_port(&self) -> u16 {
        self.dev.local_addr().port()
    }

    fn alloc_pd(&self) -> Result<PdHandle> {
        Ok(self.dev.with(|h| h.alloc_pd())?)
    }
    fn dealloc_pd(&self, pd: PdHandle) -> Result<()> {
        Ok(self.dev.with(|h| h.dealloc_pd(pd))?)
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
    fn dereg_mr(&self, mr: MrHandle) -> Result<()> {
        Ok(self.dev.with(|h| h.dereg_mr(mr))?)
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

    fn create_cq(&self, cqe: u32, channel: Option<ChannelHandle>) -> Result<(CqHandle, u32)> {
        Ok(self.dev.with(|h| h.create_cq(cqe, channel, 0, 0))?)
    }
    fn destroy_cq(&self, cq: CqHandle) -> Result<()> {
        Ok(self.dev.with(|h| h.destroy_cq(cq))?)
    }
    fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize> {
        Ok(self.dev.with(|h| h.poll_cq(cq, out))?)
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
    fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        Ok(self.dev.with(|h| h.req_notify_cq(cq, solicited_only))?)
    }
    fn ack_cq_events(&self, cq: CqHandle, n: u32) -> Result<()> {
        Ok(self.dev.with(|h| h.ack_cq_events(cq, n))?)
    }

    fn create_srq(&self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle> {
        Ok(self.dev.with(|h| h.create_srq(pd, attr, 0))?.0)
    }
    fn modify_srq(&self, srq: SrqHandle, attr: SrqAttr, mask: SrqAttrMask) -> Result<()> {
        Ok(self.dev.with(|h| h.modify_srq(srq, attr, mask))?)
    }
    fn destroy_srq(&self, srq: SrqHandle) -> Result<()> {
        Ok(self.dev.with(|h| h.destroy_srq(srq))?)
    }
    unsafe fn post_srq_recv(&self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<()> {
        Ok(self.dev.with(|h| h.post_srq_recv(srq, wrs))?)
    }

    fn create_qp(&self, pd: PdHandle, init: QpInitAttr) -> Result<(QpHandle, Qpn)> {
        let (qp, qpn, _) = self.dev.with(|h| h.create_qp(pd, init))?;
        Ok((qp, qpn))
    }
    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        Ok(self.dev.with(|h| h.modify_qp(qp, attr, mask))?)
    }
    fn qp_state(&self, qp: QpHandle) -> Result<QpState> {
        Ok(self.dev.with(|h| h.qp_state(qp))?)
    }
    fn destroy_qp(&self, qp: QpHandle) -> Result<()> {
        Ok(self.dev.with(|h| h.destroy_qp(qp))?)
    }
    unsafe fn post_send(&self, qp: QpHandle, wrs: &[SendWr]) -> Result<()> {
        // SAFETY: forwarded contract.
        Ok(self.dev.with(|h| unsafe { h.post_send(qp, wrs) })?)
    }
    unsafe fn post_recv(&self, qp: QpHandle, wrs: &[RecvWr]) -> Result<()> {
        Ok(self.dev.with(|h| h.post_recv(qp, wrs))?)
    }

    fn create_ah(&self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle> {
        Ok(self.dev.with(|h| h.create_ah(pd, attr))?)
    }
    fn destroy_ah(&self, ah: AhHandle) -> Result<()> {
        Ok(self.dev.with(|h| h.destroy_ah(ah))?)
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        Ok(self.dev.get_async_event(timeout)?)
    }
    fn ack_async_event(&self, event: &AsyncEvent) -> Result<()> {
        Ok(self.dev.with(|h| h.ack_async_event(event))?)
    }
    fn async_fd(&self) -> RawFd {
        self.dev.async_fd().as_raw_fd()
    }

    fn counters(&self) -> Option<Counters> {
        Some(self.dev.with(|h| h.counters().clone()))
    }
    fn emulated(&self) -> Option<&Arc<Device>> {
        Some(&self.dev)
    }
    fn with_hca_dyn(&self, f: &mut dyn FnMut(&mut softroce_emu::core::Hca)) -> bool {
        self.dev.with(|h| f(h));
        true
    }
}
