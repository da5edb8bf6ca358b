//! A device on a simulated fabric ([`crate::sim::Fabric`]): the emulator's HCA in virtual
//! time, driven in the calling thread by the verbs that wait.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, ChannelHandle, Counters, CqHandle, DeviceAttr, Hca,
    MrHandle, MrKeys, MwBind, MwHandle, MwType, PdHandle, PortAttr, QpAttr, QpAttrMask, QpHandle,
    QpInitAttr, QpState, RecvWr, SendFlags, SendWr, SrqAttr, SrqAttrMask, SrqHandle, VerbsError,
    WcStatus, WorkCompletion, XrcdHandle,
};
use softroce_emu::driver::{EventFd, user_memory};
use softroce_wire::{Gid, Qpn};

use super::{Backend, BackendKind};
use crate::error::{Error, Result};
use crate::sim::{Fabric, Step, World};

/// One device of a simulated fabric, driven through the [`Backend`] verbs.
#[derive(Debug, Clone)]
pub struct Simulated {
    fabric: Fabric,
    /// Index of the device in the fabric.
    dev: usize,
    name: String,
}

impl Simulated {
    pub(crate) fn new(fabric: Fabric, dev: usize, name: String) -> Self {
        Self { fabric, dev, name }
    }

    /// The fabric this device is on.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The device's index on its fabric.
    pub(crate) fn index(&self) -> usize {
        self.dev
    }

    /// A verb on the HCA under the fabric's lock; what it raised is signalled after.
    fn with<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        let mut w = self.fabric.lock();
        let now = w.instant();
        // Completions a verb generates carry the virtual time it ran at.
        w.hca(self.dev).advance_clock(now);
        let r = f(w.hca(self.dev));
        w.pump();
        r
    }

    /// Posting send work: in virtual time packets leave at once.
    fn with_post<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        self.with(f)
    }

    /// Posting receive work: as any verb.
    fn with_recv<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        self.with(f)
    }

    /// Poll without driving the fabric, logging error completions.
    fn poll_now(&self, w: &mut World, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize> {
        let n = w.hca(self.dev).poll_cq(cq, out)?;
        for wc in &out[..n] {
            if wc.status != WcStatus::Success {
                let what = format!(
                    "{}: completion wr_id {} {:?} {}",
                    self.name, wc.wr_id, wc.opcode, wc.status
                );
                w.log(what);
            }
        }
        Ok(n)
    }

    fn channel_fd(&self, w: &World, ch: ChannelHandle) -> Option<Arc<EventFd>> {
        w.devices[self.dev]
            .channel_fds
            .iter()
            .find(|(c, _)| *c == ch)
            .map(|(_, fd)| Arc::clone(fd))
    }
}

impl Backend for Simulated {
    hca_verbs!();

    fn kind(&self) -> BackendKind {
        BackendKind::Simulated
    }
    fn raw_clock(&self) -> Option<u64> {
        // `with` brings the device's clock to the fabric's virtual now.
        Some(self.with(|h| h.clock()))
    }
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn udp_port(&self) -> u16 {
        self.with(|h| h.config().udp_port)
    }

    unsafe fn reg_mr(
        &self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(MrHandle, MrKeys)> {
        // Pages checked as on the emulated device, so no simulated peer can fault the
        // process through the region.
        // SAFETY: forwarded contract: the memory outlives the registration.
        self.with(|h| Ok(unsafe { user_memory::register_checked(h, pd, addr, len, access) }?))
    }

    fn create_comp_channel(&self) -> Result<(ChannelHandle, RawFd)> {
        let fd = EventFd::new().map_err(|e| Error::io("creating a completion channel fd", e))?;
        let fd = Arc::new(fd);
        let mut w = self.fabric.lock();
        let ch = w.hca(self.dev).create_comp_channel();
        w.devices[self.dev].channel_fds.push((ch, Arc::clone(&fd)));
        // The slot keeps the eventfd open until the channel is destroyed.
        Ok((ch, fd.as_raw_fd()))
    }
    fn destroy_comp_channel(&self, ch: ChannelHandle) -> Result<()> {
        let mut w = self.fabric.lock();
        w.hca(self.dev).destroy_comp_channel(ch)?;
        w.devices[self.dev].channel_fds.retain(|(c, _)| *c != ch);
        Ok(())
    }
    fn get_cq_event(&self, ch: ChannelHandle, timeout: Option<Duration>) -> Result<CqHandle> {
        self.fabric.wait("get_cq_event", timeout, |w| {
            let fd = self.channel_fd(w, ch);
            let hca = w.hca(self.dev);
            match hca.get_cq_event(ch) {
                Ok((cq, _)) => {
                    // The fd stays readable exactly while events wait, as on a device.
                    if hca.channel_pending(ch).unwrap_or(0) == 0
                        && let Some(fd) = fd
                    {
                        let _ = fd.try_consume();
                    }
                    Some(Ok(cq))
                }
                Err(VerbsError::WouldBlock { .. }) => None,
                Err(e) => Some(Err(e.into())),
            }
        })
    }

    /// Polls; when the CQ is empty, takes one step of the fabric (or, on an idle fabric,
    /// lets 1 ms of virtual time pass) and polls again, so busy-poll loops make progress.
    fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize> {
        let n = self.poll_now(&mut self.fabric.lock(), cq, out)?;
        if n > 0 || out.is_empty() {
            return Ok(n);
        }
        if self.fabric.step_until(None) == Step::Idle {
            self.fabric.idle_tick();
        }
        self.poll_now(&mut self.fabric.lock(), cq, out)
    }
    /// Runs the fabric until `want` completions arrived or `timeout` of virtual time passed.
    fn poll_cq_wait(
        &self,
        cq: CqHandle,
        want: usize,
        timeout: Duration,
        got: &mut Vec<WorkCompletion>,
    ) -> Result<()> {
        let mut buf = [WorkCompletion::success(0, 0, softroce_emu::core::WcOpcode::Send, 0); 32];
        let r = self.fabric.wait("poll_cq", Some(timeout), |w| {
            while got.len() < want {
                let room = (want - got.len()).min(buf.len());
                match self.poll_now(w, cq, &mut buf[..room]) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => return Some(Err(e)),
                }
            }
            (got.len() >= want).then_some(Ok(()))
        });
        match r {
            // Running out of time is not an error here: the caller counts what arrived.
            Err(Error::Verbs(VerbsError::WouldBlock { .. })) => Ok(()),
            r => r,
        }
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        self.fabric.wait("get_async_event", timeout, |w| {
            let fd = Arc::clone(&w.devices[self.dev].async_fd);
            let hca = w.hca(self.dev);
            match hca.get_async_event() {
                Ok(ev) => {
                    if !hca.async_event_pending() {
                        let _ = fd.try_consume();
                    }
                    w.log(format!("{}: got async event {}", self.name, ev.event_type));
                    Some(Ok(ev))
                }
                Err(VerbsError::WouldBlock { .. }) => None,
                Err(e) => Some(Err(e.into())),
            }
        })
    }
    fn async_fd(&self) -> RawFd {
        self.fabric.lock().devices[self.dev].async_fd.as_raw_fd()
    }
    // The fabric copies a multicast datagram to every device with a QP in its group.
    fn attach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()> {
        Ok(self.with(|h| h.attach_mcast(qp, mgid, 0))?)
    }
    fn detach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()> {
        Ok(self.with(|h| h.detach_mcast(qp, mgid, 0))?)
    }

    fn simulated(&self) -> Option<&Simulated> {
        Some(self)
    }

    fn initial_psn(&self, _qpn: Qpn) -> Option<u32> {
        Some(self.fabric.draw_psn())
    }
}
