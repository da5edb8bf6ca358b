//! The real-device driver: the engine thread that runs the sans-IO core
//! (`softroce-emu-core`) over a batched UDP socket, pollable eventfds for completion channels
//! and async events, fault injection and pcap capture. The core knows nothing of this crate.

pub mod cm;
pub mod device;
pub mod entropy;
pub mod eventfd;
pub mod link;
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
