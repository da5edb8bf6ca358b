//! The emulated RDMA HCA in one dependency.
//!
//! The layers are crates of their own, re-exported here under short names:
//! - [`core`] (`softroce-emu-core`): the sans-IO device ([`Hca`]): objects, the QP state
//!   table, CQs, completion channels, async events, SRQs, memory regions and the transport
//!   engine. No sockets, no threads, no clock: time arrives as an argument.
//! - [`cm`] (`softroce-emu-cm`): the sans-IO IB connection manager (CM MADs on QP1, the
//!   protocol rdma_cm runs on), not yet wired to the device.
//! - [`faults`] (`softroce-emu-faults`): seeded fault plans for real devices and the simulator.
//! - [`sim`] (`softroce-emu-sim`): a deterministic in-memory network of devices with virtual
//!   time and faults; the soak and the fuzzing harness.
//! - [`driver`] (`softroce-emu-driver`): the real device: an engine thread running the core
//!   over a UDP socket, with pollable fds.
//!
//! `ARCHITECTURE.md` at the repository root shows how a packet and a work request travel
//! through them. Most programs want the safe verbs API over all this, `softroce-verbs`.
//!
//! ```
//! use softroce_emu::driver::{Device, DeviceConfig};
//! use softroce_emu::faults::FaultPlan;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A device on loopback that loses a tenth of what it sends, reproducibly (seed 7).
//! let mut config = DeviceConfig::new("softroce0", "127.0.0.1".parse()?);
//! config.hca.udp_port = 0;
//! config.faults = Some("drop=0.1,seed=7".into());
//! let device = Device::start(config)?;
//! let attr = device.with(|hca| hca.query_device().clone());
//! println!("{} QPs, {} CQs", attr.max_qp, attr.max_cq);
//! // The same plan, parsed as the device did.
//! assert!(FaultPlan::parse("drop=0.1,seed=7").is_ok());
//! # Ok(()) }
//! ```

pub use softroce_emu_cm as cm;
pub use softroce_emu_core as core;
pub use softroce_emu_driver as driver;
pub use softroce_emu_faults as faults;
pub use softroce_emu_sim as sim;

pub use softroce_emu_core::{Hca, HcaConfig};
