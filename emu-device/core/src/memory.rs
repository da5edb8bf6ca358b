//! The one place that touches application memory.
//!
//! Registered memory belongs to the application and may be read or written by it at any
//! time, so the core never forms a `&[u8]`/`&mut [u8]` to it (that would assert exclusivity
//! the core cannot guarantee); it copies with raw pointers, as DMA would. Every address and
//! length reaching these functions has been checked against a live memory region first.

/// Copy `dst.len()` bytes from application address `addr` into `dst`.
///
/// # Safety
/// `addr..addr + dst.len()` must lie inside a registered memory region whose registration
/// contract (valid, not freed or moved until deregistration) holds.
pub(crate) unsafe fn read_app(addr: u64, dst: &mut [u8]) {
    if dst.is_empty() {
        return;
    }
    // SAFETY: the caller checked the range against a live registration.
    unsafe { core::ptr::copy(addr as usize as *const u8, dst.as_mut_ptr(), dst.len()) }
}

/// Copy `src` to application address `addr`.
///
/// # Safety
/// As for [`read_app`], and the region must have been registered writable.
pub(crate) unsafe fn write_app(addr: u64, src: &[u8]) {
    if src.is_empty() {
        return;
    }
    // SAFETY: the caller checked the range against a live, writable registration.
    unsafe { core::ptr::copy(src.as_ptr(), addr as usize as *mut u8, src.len()) }
}

/// Read an 8-byte atomic target (native byte order, as the application sees it).
///
/// # Safety
/// As for [`read_app`] with an 8-byte range.
pub(crate) unsafe fn read_u64(addr: u64) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: forwarded contract.
    unsafe { read_app(addr, &mut b) };
    u64::from_ne_bytes(b)
}

/// Store 8 bytes at an 8-byte aligned address in one atomic store, ordered after every
/// earlier write (rxe's `smp_store_release`): ATOMIC WRITE's guarantee that a reader sees
/// the old or the new value, never a mix.
///
/// # Safety
/// As for [`write_app`] with an 8-byte range, and `addr` 8-byte aligned.
pub(crate) unsafe fn store_u64_release(addr: u64, bytes: [u8; 8]) {
    // SAFETY: aligned and inside a live, writable registration (the caller's contract);
    // other accesses to it are the application's or the NIC's, as for a device's DMA.
    let target = unsafe { core::sync::atomic::AtomicU64::from_ptr(addr as usize as *mut u64) };
    target.store(
        u64::from_ne_bytes(bytes),
        core::sync::atomic::Ordering::Release,
    );
}

/// Write an 8-byte atomic target.
///
/// # Safety
/// As for [`write_app`] with an 8-byte range.
pub(crate) unsafe fn write_u64(addr: u64, value: u64) {
    // SAFETY: forwarded contract.
    unsafe { write_app(addr, &value.to_ne_bytes()) }
}
