//! A safe Rust verbs API, shaped after rust-ibverbs, over a pluggable [`backend::Backend`]:
//! the softroce emulator (default), or real hardware through the system's libibverbs
//! (cargo feature `ibverbs`, loaded at run time: no build-time rdma-core).
//!
//! ```no_run
//! use softroce_verbs::{Context, QpType};
//! let ctx = Context::open_emulated("softroce0", "127.0.0.1".parse().unwrap(), 4791)?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16, None)?;
//! let mr = pd.allocate(4096)?;
//! let prepared = pd.create_qp(&cq, &cq, QpType::Rc).build()?;
//! let endpoint = prepared.endpoint(); // exchange with the peer out of band
//! # let remote = endpoint;
//! let qp = prepared.handshake(remote)?;
//! // SAFETY: `mr` outlives the work request (it is dropped after the completion is polled).
//! unsafe { qp.post_receive(&[mr.slice(0..4096)?], 1)? };
//! # Ok::<(), softroce_verbs::Error>(())
//! ```
//!
//! # Safety model
//! Registered memory is written by the device at any time between posting and completion
//! (as an HCA's DMA would). Posting is therefore `unsafe`: every memory region a work request
//! names must stay alive, and must not be reused by the application, until its completion has
//! been polled. [`MemoryRegion`] owns its buffer and deregisters it on drop, and offers copy-in
//! and copy-out accessors that never create a Rust reference the device could invalidate.

pub mod backend;
mod backend_kind;
mod context;
mod error;
mod inject;
mod qp;
pub mod sim;

pub use context::{
    CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain, SharedReceiveQueue,
};
pub use error::{Error, Result};
pub use qp::{PreparedQueuePair, QueuePair, QueuePairBuilder, QueuePairEndpoint};
pub use softroce_emu::core::{
    AccessFlags, AsyncEvent, AtomicTarget, Counters, DeviceAttr, EventElement, EventType, PortAttr,
    QpAttr, QpAttrMask, QpCap, QpState, QpType, RdmaTarget, RecvWr, SendFlags, SendWr, Sge,
    UdTarget, VendorErr, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
pub use softroce_wire::{Gid, Mtu};
