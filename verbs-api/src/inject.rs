//! Fault injection on the emulated backend: network fault plans set at run time and the
//! error paths real hardware shows only rarely (CQ overrun, QP errors, port down/up, device
//! fatal). On other backends these return [`Error::Unsupported`](crate::Error::Unsupported).

use softroce_emu::core::EventType;
use softroce_emu::faults::FaultPlan;

use crate::context::{CompletionQueue, Context};
use crate::error::{Error, Result};
use crate::qp::QueuePair;

impl Context {
    /// Put a fault plan in force from now on (the compact form
    /// `drop=P,dup=P,reorder=P,corrupt=P,delay=MS,seed=N,dir=tx|rx|both` or `@plan.toml`);
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
        self.emulated("port state injection")?
            .with(|h| h.set_port_active(active));
        Ok(())
    }

    /// A catastrophic device error: IBV_EVENT_DEVICE_FATAL, every QP to ERR with its work
    /// requests flushed.
    pub fn inject_device_fatal(&self) -> Result<()> {
        self.emulated("device fatal injection")?
            .with(|h| h.inject_device_fatal());
        Ok(())
    }
}

impl CompletionQueue {
    /// Make the CQ overrun once it holds `depth` completions (`None`: at its real size), so
    /// the next completion raises IBV_EVENT_CQ_ERR and puts the CQ in error.
    pub fn limit_depth(&self, depth: Option<u32>) -> Result<()> {
        let dev = self
            .inner
            .dev
            .emulated()
            .ok_or_else(|| Error::Unsupported {
                what: "CQ depth injection",
                backend: self.inner.dev.kind(),
            })?;
        Ok(dev.with(|h| h.limit_cq_depth(self.inner.cq, depth))?)
    }
}

impl QueuePair {
    /// Move the QP to ERR as a local error would, raising `event` (IBV_EVENT_QP_FATAL,
    /// QP_REQ_ERR or QP_ACCESS_ERR) and flushing its work requests.
    pub fn force_error(&self, event: EventType) -> Result<()> {
        let (dev, qp) = self.emulated_handle("QP error injection")?;
        Ok(dev.with(|h| h.force_qp_error(qp, event))?)
    }
}
