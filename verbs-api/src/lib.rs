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
//! # Testing against faults, deterministically
//! [`sim`] runs the same code on devices of a simulated fabric, in virtual time, with seeded
//! loss, reordering, partitions and error injection; [`sim::check`] runs a test body over
//! many seeds and names the one that fails (`SOFTROCE_SIM_SEED=<seed>` replays it exactly):
//!
//! ```
//! use std::time::Duration;
//! use softroce_verbs::{sim, QpType, WcStatus};
//!
//! sim::check(10, |fabric| -> Result<(), Box<dyn std::error::Error>> {
//!     let a = fabric.device("a", "10.0.0.1".parse()?)?;
//!     let b = fabric.device("b", "10.0.0.2".parse()?)?;
//!     fabric.set_link_faults("a", "b", "drop=0.05")?;
//!     fabric.at(Duration::from_millis(1), |f| f.partition("a", "b"));
//!     fabric.at(Duration::from_millis(100), |f| f.heal("a", "b"));
//!
//!     // Ordinary verbs code from here on.
//!     let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//!     let (ca, cb) = (a.create_cq(8, None)?, b.create_cq(8, None)?);
//!     let qa = pa.create_qp(&ca, &ca, QpType::Rc).build()?;
//!     let qb = pb.create_qp(&cb, &cb, QpType::Rc).build()?;
//!     let (ea, eb) = (qa.endpoint(), qb.endpoint());
//!     let (qa, qb) = (qa.handshake(eb)?, qb.handshake(ea)?);
//!     let (src, dst) = (pa.allocate(64)?, pb.allocate(64)?);
//!     src.write(0, b"hello")?;
//!     // SAFETY: both regions outlive the completions waited for below.
//!     unsafe {
//!         qb.post_receive(&[dst.slice(0..64)?], 1)?;
//!         let mut wr = softroce_verbs::SendWr::new(2, softroce_verbs::WrOpcode::Send);
//!         wr.sg_list = vec![src.slice(0..5)?].into();
//!         qa.post_send(&[wr])?;
//!     }
//!     // Waits in virtual time: the retransmissions after the partition cost no wall time.
//!     let wc = cb.poll_wait(1, Duration::from_secs(5))?;
//!     assert_eq!(wc[0].status, WcStatus::Success);
//!     let mut got = [0u8; 5];
//!     dst.read(0, &mut got)?;
//!     assert_eq!(&got, b"hello");
//!     Ok(())
//! });
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
pub mod cm;
mod context;
mod error;
mod inject;
mod qp;
pub mod sim;
#[cfg(feature = "tokio")]
pub mod tokio;

pub use context::{
    CompletionChannel, CompletionQueue, Context, MemoryRegion, MemoryWindow, NullMemoryRegion,
    ProtectionDomain, SharedReceiveQueue, XrcDomain,
};
pub use error::{Error, Result};
pub use qp::{PreparedQueuePair, QueuePair, QueuePairBuilder, QueuePairEndpoint};
pub use softroce_emu::core::{
    AccessFlags, AsyncEvent, AtomicTarget, Counters, DEVICE_ATOMIC_WRITE, DeviceAttr, EventElement,
    EventType, MwBind, MwType, PortAttr, QpAttr, QpAttrMask, QpCap, QpState, QpType, RdmaTarget,
    RecvWr, SendFlags, SendWr, SgList, Sge, UdTarget, VendorErr, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};
/// The 40-byte area at the start of every UD receive buffer: what it says about the sender.
pub use softroce_wire::grh;
pub use softroce_wire::{Gid, Mtu};
#[cfg(feature = "tokio")]
pub use tokio::{AsyncCompletionChannel, AsyncCq, AsyncEvents};
