//! The real-device driver: the engine thread that runs the sans-IO core
//! (`softroce-emu-core`) over a batched UDP socket, pollable eventfds for completion channels
//! and async events, fault injection and pcap capture. The core knows nothing of this crate.
//!
//! A [`Device`] is the core behind a mutex plus the I/O: verbs run under the lock with
//! [`Device::with`], and whatever they produce is sent from the calling thread.
//!
//! ```
//! use softroce_emu_driver::{Device, DeviceConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = DeviceConfig::new("softroce0", "127.0.0.1".parse()?);
//! config.hca.udp_port = 0; // any free port (4791 is RoCEv2's)
//! let device = Device::start(config)?; // binds the UDP socket, starts the engine thread
//! println!("receiving RoCEv2 on {}", device.local_addr());
//! let pd = device.with(|hca| hca.alloc_pd())?;
//! let (cq, size) = device.with(|hca| hca.create_cq(16, None, 0, 0))?;
//! assert!(size >= 16);
//! device.with(|hca| hca.destroy_cq(cq))?;
//! device.with(|hca| hca.dealloc_pd(pd))?;
//! # Ok(()) }
//! ```

mod capture_file;
pub mod clock;
pub mod cm;
pub mod device;
pub mod entropy;
pub mod eventfd;
pub mod guarded_copy;
pub mod link;
pub mod parent_only;
pub mod share;
pub mod socket;
pub mod user_memory;

pub use device::{Device, DeviceConfig};
pub use eventfd::EventFd;
pub use socket::{MAX_BATCH, MAX_DATAGRAM, Received, RoceSocket};

#[cfg(test)]
mod tests {
    use softroce_emu_core::error::errno;

    #[test]
    fn the_cores_errno_values_are_the_c_librarys() {
        assert_eq!(errno::EIO, libc::EIO);
        assert_eq!(errno::EFAULT, libc::EFAULT);
        assert_eq!(errno::EAGAIN, libc::EAGAIN);
        assert_eq!(errno::ENOMEM, libc::ENOMEM);
        assert_eq!(errno::EBUSY, libc::EBUSY);
        assert_eq!(errno::EINVAL, libc::EINVAL);
        assert_eq!(errno::EOPNOTSUPP, libc::EOPNOTSUPP);
    }
}
