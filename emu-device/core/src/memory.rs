//! The one place that touches application memory.
//!
//! Registered memory belongs to the application and may be read or written by it at any
//! time, so the core never forms a `&[u8]`/`&mut [u8]` to it (that would assert exclusivity
//! the core cannot guarantee); it copies with raw pointers, as DMA would. Every address and
//! length reaching these functions has been checked against a live memory region first.
//!
//! A checked range can still be gone: an application (UCX's registration cache, for one)
//! may unmap memory whose registration is live. A real HCA keeps registered pages pinned, so
//! its late DMA lands in pages the process no longer sees; a plain copy here would kill the
//! process. The driver therefore installs a fault-safe [`AppCopier`] (the core itself
//! touches no signals or system calls); without one the copies are plain.

use std::sync::OnceLock;

/// Copies between the core's buffers and application memory that survive unmapped pages.
/// Each returns how many bytes could not be accessed: skipped when writing, read as zeros —
/// what a pinned page the process has let go of would absorb or hold.
#[derive(Debug, Clone, Copy)]
pub struct AppCopier {
    /// Copy from application address `src` into `dst`.
    pub read: unsafe fn(src: u64, dst: &mut [u8]) -> usize,
    /// Copy `src` to application address `dst`.
    pub write: unsafe fn(dst: u64, src: &[u8]) -> usize,
    /// Store `value` at the 8-byte aligned application address `dst` in one atomic store
    /// ordered after every earlier write (8 when the page is gone, else 0).
    pub store_u64_release: unsafe fn(dst: u64, value: u64) -> usize,
    /// The CRC-32 of `crc` (the CRC so far, as `crc32fast::Hasher::new_with_initial` takes
    /// it) continued over application memory `addr..addr + len` read in place, or `None`
    /// when a page of it is gone: what lets a packet's payload leave straight from
    /// registered memory (see [`HcaConfig::payload_by_reference`](crate::HcaConfig)).
    pub crc: unsafe fn(crc: u32, addr: u64, len: usize) -> Option<u32>,
}

static COPIER: OnceLock<AppCopier> = OnceLock::new();

/// Make every later copy to or from application memory go through `copier` (process-wide:
/// the first installation wins, later ones are ignored).
pub fn install_copier(copier: AppCopier) {
    let _ = COPIER.set(copier);
}

/// Whether copies survive unmapped pages (a fault-safe copier is installed): what implicit
/// on-demand paging needs, its region spanning memory the process never mapped.
pub(crate) fn fault_safe() -> bool {
    COPIER.get().is_some()
}

/// `crc` continued over application memory `addr..addr + len` read in place, when a
/// fault-safe copier is installed and every page of the range is there.
///
/// # Safety
/// `addr..addr + len` lies inside a registered memory region (it may since have been
/// unmapped: the copier survives that).
pub(crate) unsafe fn crc_app(crc: u32, addr: u64, len: usize) -> Option<u32> {
    let copier = COPIER.get()?;
    // SAFETY: forwarded; the copier's read is fault-safe.
    unsafe { (copier.crc)(crc, addr, len) }
}

/// Copy `dst.len()` bytes from application address `addr` into `dst`; the number of bytes
/// that were not mapped (read as zeros).
///
/// # Safety
/// `addr..addr + dst.len()` must lie inside a registered memory region whose registration
/// contract (valid, not freed or moved until deregistration) holds, unless a fault-safe
/// copier is installed.
pub(crate) unsafe fn read_app(addr: u64, dst: &mut [u8]) -> usize {
    if dst.is_empty() {
        return 0;
    }
    if let Some(copier) = COPIER.get() {
        // SAFETY: the copier survives unmapped application pages.
        return unsafe { (copier.read)(addr, dst) };
    }
    // SAFETY: the caller checked the range against a live registration.
    unsafe { core::ptr::copy(addr as usize as *const u8, dst.as_mut_ptr(), dst.len()) };
    0
}

/// Copy `src` to application address `addr`; the number of bytes that were not mapped
/// (dropped).
///
/// # Safety
/// As for [`read_app`], and the region must have been registered writable.
pub(crate) unsafe fn write_app(addr: u64, src: &[u8]) -> usize {
    if src.is_empty() {
        return 0;
    }
    if let Some(copier) = COPIER.get() {
        // SAFETY: the copier survives unmapped application pages.
        return unsafe { (copier.write)(addr, src) };
    }
    // SAFETY: the caller checked the range against a live, writable registration.
    unsafe { core::ptr::copy(src.as_ptr(), addr as usize as *mut u8, src.len()) };
    0
}

/// Store 8 bytes at an 8-byte aligned address in one atomic store, ordered after every
/// earlier write (rxe's `smp_store_release`): ATOMIC WRITE's guarantee that a reader sees
/// the old or the new value, never a mix. The number of bytes not mapped (8 or 0).
///
/// # Safety
/// As for [`write_app`] with an 8-byte range, and `addr` 8-byte aligned.
pub(crate) unsafe fn store_u64_release(addr: u64, bytes: [u8; 8]) -> usize {
    if let Some(copier) = COPIER.get() {
        // SAFETY: the copier survives an unmapped target.
        return unsafe { (copier.store_u64_release)(addr, u64::from_ne_bytes(bytes)) };
    }
    // SAFETY: aligned and inside a live, writable registration (the caller's contract);
    // other accesses to it are the application's or the NIC's, as for a device's DMA.
    let target = unsafe { core::sync::atomic::AtomicU64::from_ptr(addr as usize as *mut u64) };
    target.store(
        u64::from_ne_bytes(bytes),
        core::sync::atomic::Ordering::Release,
    );
    0
}
