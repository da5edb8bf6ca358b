//! The real-device driver: UDP sockets, pollable fds and (later) the engine thread that runs
//! the sans-IO core. Nothing in `core` may depend on this module.

pub mod device;
pub mod eventfd;
pub mod socket;

pub use device::{Device, DeviceConfig};
pub use eventfd::EventFd;
pub use socket::{MAX_BATCH, MAX_DATAGRAM, ROCE_V2_PORT, Received, RoceSocket};
