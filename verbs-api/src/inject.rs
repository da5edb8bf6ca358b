//! Fault injection on the emulated backend: network fault plans set at run time and the
//! error paths real hardware shows only rarely (CQ overrun, QP errors, port down/up, device
//! fatal). On other backends these return [`Error::Unsupported`](crate::Error::Unsupported).
//! The simulated backend takes all but the network fault plans, which belong to its fabric's
//! links (`sim::Fabric::set_link_faults`).

use softroce_emu::core::{EventType, Hca};
use softroce_emu::faults::FaultPlan;

use crate::backend::Backend;
use crate::context::{CompletionQueue, Context};
use crate::error::{Error, Result};
use crate::qp::QueuePair;

impl Context {
    /// Put a fault plan in force from now on (the compact form
    /// `drop=P,dup=P,reorder=P,corrupt=P,delay=MS,seed=N,dir=tx|rx|both`, with device events
    /// `port_down=MS,port_up=MS,device_fatal=MS` counted from now, or `@plan.toml`);
    /// `None` removes it. A bad spec is refused with the part at fault.
    pub fn set_faults(&self, spec: Option<&str>) -> Result<()> {
        let dev = self.emulated("fault plans")?;
        let plan = spec
            .map(FaultPlan::parse)
            .transpose()
            .map_err(|e| Error::Invalid {
                what: "fault plan",
                reason: e.to_string(),
            })?;
        dev.set_fault_plan(plan);
        Ok(())
    }

    /// Take port 1 down (IBV_EVENT_PORT_ERR; traffic in and out is lost) or bring it back
    /// up (IBV_EVENT_PORT_ACTIVE).
    pub fn set_port_active(&self, active: bool) -> Result<()> {
        on_hca(self.dev.as_ref(), "port state injection", |h| {
            h.set_port_active(active)
        })
    }

    /// A catastrophic device error: IBV_EVENT_DEVICE_FATAL, every QP to ERR with its work
    /// requests flushed.
    pub fn inject_device_fatal(&self) -> Result<()> {
        on_hca(
            self.dev.as_ref(),
            "device fatal injection",
            Hca::inject_device_fatal,
        )
    }
}

/// Run `f` on the HCA behind `dev`, or say that this backend has none.
pub(crate) fn on_hca<R>(
    dev: &dyn Backend,
    what: &'static str,
    f: impl FnOnce(&mut Hca) -> R,
) -> Result<R> {
    let mut f = Some(f);
    let mut out = None;
    let found = dev.with_hca_dyn(&mut |h| {
        if let Some(f) = f.take() {
            out = Some(f(h));
        }
    });
    match out {
        Some(r) if found => Ok(r),
        _ => Err(Error::Unsupported {
            what,
            backend: dev.kind(),
        }),
    }
}

impl CompletionQueue {
    /// Make the CQ overrun once it holds `depth` completions (`None`: at its real size), so
    /// the next completion raises IBV_EVENT_CQ_ERR and puts the CQ in error.
    pub fn limit_depth(&self, depth: Option<u32>) -> Result<()> {
        let cq = self.inner.cq;
        on_hca(self.inner.dev.as_ref(), "CQ depth injection", |h| {
            h.limit_cq_depth(cq, depth)
        })?
        .map_err(Error::from)
    }
}

impl QueuePair {
    /// Move the QP to ERR as a local error would, raising `event` (IBV_EVENT_QP_FATAL,
    /// QP_REQ_ERR or QP_ACCESS_ERR) and flushing its work requests.
    pub fn force_error(&self, event: EventType) -> Result<()> {
        let (dev, qp) = self.backend_handle();
        on_hca(dev.as_ref(), "QP error injection", |h| {
            h.force_qp_error(qp, event)
        })?
        .map_err(Error::from)
    }
}
