//! Checked access to registered memory for the transport: local scatter/gather lists by
//! lkey, remote ranges by rkey. Every copy goes through `core::memory` only after the range
//! was found inside a live region with the right rights.

use super::super::handles::{PdHandle, QpHandle};
use super::super::memory;
use super::super::store::Store;
use super::super::types::AccessFlags;
use super::super::wr::Sge;

/// Why a local scatter/gather access failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalFault {
    /// An lkey names no live region of the PD, or the range or rights do not fit.
    Protection,
    /// The data does not fit the buffers.
    TooLong,
}

/// Why a remote access was refused (answered with NAK remote access error, but for
/// [`RemoteFault::Misaligned`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoteFault {
    /// No region has this rkey, or it was invalidated.
    UnknownKey,
    /// The region belongs to another PD.
    WrongPd,
    /// The range is outside the region.
    OutOfBounds,
    /// The region or window lacks the right.
    NoAccess,
    /// An atomic target not 8-byte aligned: an invalid request (IBTA oA19-28; rxe's
    /// RESPST_ERR_MISALIGNED_ATOMIC), not an access error.
    Misaligned,
    /// A page of an on-demand paging region is not mapped: the page fault fails, as it would
    /// on an HCA with ODP (a pinned region's hole is absorbed instead: `core::memory`).
    Unmapped,
}

/// Whom a remote access comes from: the QP a request arrived on and its PD. (The QP's
/// own access flags are checked before any key, as an invalid request: `responder`.)
#[derive(Debug, Clone, Copy)]
pub(crate) struct Via {
    pub(crate) pd: PdHandle,
    pub(crate) qp: QpHandle,
}

/// Where the bytes a scatter/gather entry names are.
#[derive(Debug, Clone, Copy)]
enum LocalBytes {
    /// In the application's memory from `addr`, in a region that pages on demand or not.
    App { addr: u64, on_demand: bool },
    /// In a null MR (ibv_alloc_null_mr(3)): zeros to read, nowhere to write.
    Null,
}

impl Store {
    /// Find the region behind `sge` and check it covers `sge` with `need` rights: where
    /// its bytes are.
    fn local_ok(&self, pd: PdHandle, sge: &Sge, write: bool) -> Option<LocalBytes> {
        let mr = self.mr_by_key(sge.lkey)?;
        (mr.pd == pd
            && mr.contains(sge.addr, u64::from(sge.length))
            && (!write || mr.access.contains(AccessFlags::LOCAL_WRITE)))
        .then(|| {
            if mr.null {
                LocalBytes::Null
            } else {
                LocalBytes::App {
                    addr: mr.local(sge.addr),
                    on_demand: mr.access.contains(AccessFlags::ON_DEMAND),
                }
            }
        })
    }

    /// Whether the region an R_Key opens (directly or through a window) pages on demand.
    pub(crate) fn remote_on_demand(&self, rkey: u32) -> bool {
        let mr = match self.mr_by_key(rkey) {
            Some(mr) => Some(mr),
            None => self
                .mw_by_rkey(rkey)
                .and_then(|(_, mw)| mw.binding)
                .and_then(|b| self.get(b.mr)),
        };
        mr.is_some_and(|mr| mr.access.contains(AccessFlags::ON_DEMAND))
    }

    /// A copy's outcome for the region it touched: unmapped bytes fail an on-demand region.
    fn faulted(&self, rkey: u32, unmapped: usize) -> Result<(), RemoteFault> {
        if unmapped > 0 && self.remote_on_demand(rkey) {
            Err(RemoteFault::Unmapped)
        } else {
            Ok(())
        }
    }

    /// Copy `out.len()` bytes starting `offset` bytes into a scatter/gather list.
    pub(crate) fn gather(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), LocalFault> {
        let mut skip = offset;
        let mut done = 0usize;
        for sge in sges {
            if done == out.len() {
                break;
            }
            let len = u64::from(sge.length);
            if skip >= len {
                skip -= len;
                continue;
            }
            let Some(bytes) = self.local_ok(pd, sge, false) else {
                return Err(LocalFault::Protection);
            };
            let n = ((len - skip) as usize).min(out.len() - done);
            let into = &mut out[done..done + n];
            match bytes {
                LocalBytes::Null => into.fill(0),
                LocalBytes::App { addr, on_demand } => {
                    // SAFETY: `local_ok` found `sge` inside a live registered region of
                    // this PD.
                    let unmapped = unsafe { memory::read_app(addr + skip, into) };
                    if unmapped > 0 && on_demand {
                        return Err(LocalFault::Protection);
                    }
                }
            }
            done += n;
            skip = 0;
        }
        if done == out.len() {
            Ok(())
        } else {
            Err(LocalFault::TooLong)
        }
    }

    /// The application address of the `len` bytes `offset` bytes into a gather list, when
    /// they lie in one entry that passes the checks [`Store::gather`] makes and its region
    /// does not page on demand (whose holes fail the request rather than read as zeros)
    /// nor is a null MR (no bytes to point at): what a packet can leave with straight from
    /// there. `None` sends it the copying way,
    /// which reports whatever is wrong.
    pub(crate) fn payload_in_place(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        offset: u64,
        len: usize,
    ) -> Option<u64> {
        let mut skip = offset;
        for sge in sges {
            let sge_len = u64::from(sge.length);
            if skip >= sge_len {
                skip -= sge_len;
                continue;
            }
            if sge_len - skip < len as u64 {
                return None;
            }
            return match self.local_ok(pd, sge, false)? {
                LocalBytes::App { addr, on_demand } => (!on_demand).then_some(addr + skip),
                LocalBytes::Null => None,
            };
        }
        None
    }

    /// Copy `data` into a scatter/gather list starting `offset` bytes in.
    pub(crate) fn scatter(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
    ) -> Result<(), LocalFault> {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if offset + data.len() as u64 > total {
            return Err(LocalFault::TooLong);
        }
        let mut skip = offset;
        let mut done = 0usize;
        for sge in sges {
            if done == data.len() {
                break;
            }
            let len = u64::from(sge.length);
            if skip >= len {
                skip -= len;
                continue;
            }
            let Some(bytes) = self.local_ok(pd, sge, true) else {
                return Err(LocalFault::Protection);
            };
            let n = ((len - skip) as usize).min(data.len() - done);
            if let LocalBytes::App { addr, on_demand } = bytes {
                // SAFETY: `local_ok` found `sge` inside a live, locally writable region.
                let unmapped = unsafe { memory::write_app(addr + skip, &data[done..done + n]) };
                if unmapped > 0 && on_demand {
                    return Err(LocalFault::Protection);
                }
            }
            done += n;
            skip = 0;
        }
        Ok(())
    }

    /// Check a remote access of `len` bytes at `va` with `rkey` (a region's or a window's)
    /// arriving `via` a QP, needing `need` on the region or window and on the QP: the
    /// absolute address to access.
    pub(crate) fn check_remote(
        &self,
        via: Via,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<u64, RemoteFault> {
        let Via { pd, .. } = via;
        let Some(mr) = self.mr_by_key(rkey) else {
            return self.check_window(via, rkey, va, len, need);
        };
        if !mr.remote_valid || mr.rkey != rkey {
            return Err(RemoteFault::UnknownKey);
        }
        if mr.pd != pd {
            return Err(RemoteFault::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(RemoteFault::NoAccess);
        }
        if !mr.contains(va, len) {
            return Err(RemoteFault::OutOfBounds);
        }
        // Last, as rxe_mr_do_atomic_op checks it: a bad key or range is an access error
        // first.
        let addr = mr.local(va);
        if need.contains(AccessFlags::REMOTE_ATOMIC) && addr % 8 != 0 {
            return Err(RemoteFault::Misaligned);
        }
        Ok(addr)
    }

    /// [`Store::check_remote`] for a window's R_Key: the window's own bounds and rights
    /// decide (rxe checks only the underlying region's bounds, letting a WRITE land outside
    /// the window), and the region must still cover the range.
    fn check_window(
        &self,
        via: Via,
        rkey: u32,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<u64, RemoteFault> {
        let Via { pd, qp } = via;
        let Some((_, mw)) = self.mw_by_rkey(rkey) else {
            return Err(RemoteFault::UnknownKey);
        };
        let Some(b) = mw.binding else {
            return Err(RemoteFault::UnknownKey);
        };
        if mw.pd != pd || b.qp.is_some_and(|bound| bound != qp) {
            return Err(RemoteFault::WrongPd);
        }
        if !b.access.contains(need) {
            return Err(RemoteFault::NoAccess);
        }
        let Some(addr) = b.translate(va, len) else {
            return Err(RemoteFault::OutOfBounds);
        };
        if !self.get(b.mr).is_some_and(|mr| mr.covers(addr, len)) {
            return Err(RemoteFault::OutOfBounds);
        }
        if need.contains(AccessFlags::REMOTE_ATOMIC) && addr % 8 != 0 {
            return Err(RemoteFault::Misaligned);
        }
        Ok(addr)
    }

    /// Read remote-accessible memory at process address `va` (after
    /// [`Store::check_remote`] for `rkey`).
    pub(crate) fn read_remote(
        &self,
        rkey: u32,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), RemoteFault> {
        // SAFETY: callers checked `va..va+out.len()` with `check_remote`.
        let unmapped = unsafe { memory::read_app(va, out) };
        self.faulted(rkey, unmapped)
    }

    /// Write remote-accessible memory (after [`Store::check_remote`] with write rights).
    pub(crate) fn write_remote(&self, rkey: u32, va: u64, data: &[u8]) -> Result<(), RemoteFault> {
        // SAFETY: callers checked `va..va+data.len()` with `check_remote` for write rights.
        let unmapped = unsafe { memory::write_app(va, data) };
        self.faulted(rkey, unmapped)
    }

    /// ATOMIC WRITE: store `bytes` at `va` in one atomic store.
    pub(crate) fn atomic_write_remote(
        &self,
        rkey: u32,
        va: u64,
        bytes: [u8; 8],
    ) -> Result<(), RemoteFault> {
        // SAFETY: callers checked `va..va+8` with `check_remote` for write rights, and its
        // 8-byte alignment.
        let unmapped = unsafe { memory::store_u64_release(va, bytes) };
        self.faulted(rkey, unmapped)
    }

    /// Atomically (the engine is single-threaded) apply an 8-byte atomic; returns the
    /// original value.
    pub(crate) fn atomic_remote(
        &self,
        rkey: u32,
        va: u64,
        swap_or_add: u64,
        compare: Option<u64>,
    ) -> Result<u64, RemoteFault> {
        let mut bytes = [0u8; 8];
        // SAFETY: callers checked `va..va+8` with `check_remote` for atomic rights.
        let unmapped = unsafe { memory::read_app(va, &mut bytes) };
        self.faulted(rkey, unmapped)?;
        let orig = u64::from_ne_bytes(bytes);
        let new = match compare {
            Some(cmp) if orig == cmp => Some(swap_or_add),
            Some(_) => None,
            None => Some(orig.wrapping_add(swap_or_add)),
        };
        if let Some(v) = new {
            // SAFETY: as above.
            let unmapped = unsafe { memory::write_app(va, &v.to_ne_bytes()) };
            self.faulted(rkey, unmapped)?;
        }
        Ok(orig)
    }
}
