//! Checking application memory at registration, as a real HCA does when it pins the pages.
//!
//! The core copies to and from registered memory with raw pointers (as DMA would), so a
//! registration over unmapped pages, or over read-only pages that a peer may write, would let
//! a remote WRITE or READ kill the process with SIGSEGV. The kernel's `ib_umem_get` refuses
//! such registrations (EFAULT when pinning fails, EINVAL for zero pages); this module gives
//! the same answers by reading the process's own mappings (`/proc/self/maps`).
//!
//! What stays the application's promise (ibv_reg_mr(3)): the memory is not unmapped or
//! `mprotect`ed before `ibv_dereg_mr`. A program that breaks it anyway meets what pinned
//! pages would give it, not a crash ([`crate::guarded_copy`]).

use std::io::{BufRead, BufReader};

use softroce_emu_core::{AccessFlags, Hca, MrHandle, MrKeys, PdHandle, VerbsError, VerbsResult};

const VERB: &str = "reg_mr";

/// The kernel's pin granularity on the platforms the drop-in supports.
const PAGE: u64 = 4096;

/// Refuse a registration of `len` bytes at `addr` unless every page is mapped readable, and
/// writable too when `access` lets anyone write (`ib_access_writable`: local or remote write,
/// remote atomics, MW binds).
pub fn check_registration(addr: u64, len: u64, access: AccessFlags) -> VerbsResult<()> {
    if len == 0 {
        // ib_umem_get: zero pages to pin.
        return Err(VerbsError::Invalid {
            verb: VERB,
            reason: "length 0 (nothing to pin)".into(),
        });
    }
    if access.contains(AccessFlags::ON_DEMAND) && crate::guarded_copy::installed() {
        // On-demand paging pins nothing: pages are faulted in when accessed, and one that is
        // not mapped then fails the work request (the copies survive it), as on an HCA with
        // ODP. The range may even be the whole address space (implicit ODP).
        return Ok(());
    }
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(PAGE))
        .ok_or_else(|| VerbsError::Invalid {
            verb: VERB,
            reason: format!("range {addr:#x}+{len:#x} wraps around"),
        })?;
    let start = addr - addr % PAGE;
    if (end - start) / PAGE > u64::from(u32::MAX) {
        return Err(VerbsError::Invalid {
            verb: VERB,
            reason: format!("{len} bytes is more pages than a registration may pin"),
        });
    }
    let writable = access.intersects(
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_ATOMIC
            | AccessFlags::MW_BIND,
    );
    let maps = std::fs::File::open("/proc/self/maps").map_err(|e| VerbsError::BadAddress {
        verb: VERB,
        reason: format!("cannot read /proc/self/maps to check the pages: {e}"),
    })?;
    let mappings = BufReader::new(maps)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| Mapping::parse(&line));
    covered(start, end, writable, mappings)
}

/// `ibv_reg_mr` on `hca` with the pages checked: the core's own checks (PD, access flags,
/// limits) first, as in the kernel, whose pinning is the last step; a region whose pages fail
/// is removed again before the caller lets go of the device, so no peer ever reaches it.
/// Shared by the real device and the simulated backend.
///
/// # Safety
/// The memory must stay mapped, with the same protection, until the MR is deregistered.
pub unsafe fn register_checked(
    hca: &mut Hca,
    pd: PdHandle,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
) -> VerbsResult<(MrHandle, MrKeys)> {
    // Registered pages are pinned on hardware; the copies emulate that from now on.
    crate::guarded_copy::install();
    // SAFETY: the caller's contract; the MR is removed again if the pages fail.
    let (mr, keys) = unsafe { hca.reg_mr(pd, addr, len, access) }?;
    match check_registration(addr as u64, len as u64, access) {
        Ok(()) => Ok((mr, keys)),
        Err(e) => {
            hca.dereg_mr(mr)?;
            Err(e)
        }
    }
}

/// `ibv_rereg_mr` on `hca` with the pages of the new registration checked (a new range, or
/// the old one with new access) before anything changes, as [`register_checked`] does for
/// a registration.
///
/// # Safety
/// As [`register_checked`] for a new range.
pub unsafe fn reregister_checked(
    hca: &mut Hca,
    mr: MrHandle,
    pd: Option<PdHandle>,
    range: Option<(*mut u8, usize)>,
    access: Option<AccessFlags>,
) -> VerbsResult<MrKeys> {
    let (addr, len, old_access) = hca.mr_registration(mr)?;
    if range.is_some() || access.is_some() {
        let (addr, len) = range.map_or((addr, len as u64), |(a, l)| (a as u64, l as u64));
        check_registration(addr, len, access.unwrap_or(old_access))?;
    }
    // SAFETY: the caller's contract for the new range.
    unsafe { hca.rereg_mr(mr, pd, range, access) }
}

/// One line of `/proc/self/maps`: `start-end perms ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    start: u64,
    end: u64,
    readable: bool,
    writable: bool,
}

impl Mapping {
    fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split_ascii_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?.as_bytes();
        Some(Self {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            readable: perms.first() == Some(&b'r'),
            writable: perms.get(1) == Some(&b'w'),
        })
    }
}

/// Walk the (address-ordered) mappings over the pages `start..end`.
fn covered(
    start: u64,
    end: u64,
    writable: bool,
    mappings: impl Iterator<Item = Mapping>,
) -> VerbsResult<()> {
    let fault = |reason: String| VerbsError::BadAddress { verb: VERB, reason };
    let mut next = start;
    for m in mappings {
        if m.end <= next {
            continue;
        }
        if m.start > next {
            break;
        }
        if !m.readable {
            return Err(fault(format!(
                "pages at {next:#x} are mapped without read permission"
            )));
        }
        if writable && !m.writable {
            return Err(fault(format!(
                "pages at {next:#x} are read-only but the access flags allow writes"
            )));
        }
        next = m.end;
        if next >= end {
            return Ok(());
        }
    }
    Err(fault(format!(
        "pages {next:#x}..{end:#x} are not mapped in this process"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, perms: &str) -> Mapping {
        Mapping::parse(&format!("{start:x}-{end:x} {perms} 00000000 00:00 0")).unwrap()
    }

    #[test]
    fn a_range_spanning_adjacent_mappings_is_covered() {
        let maps = [map(0x1000, 0x3000, "rw-p"), map(0x3000, 0x5000, "rw-p")];
        assert!(covered(0x2000, 0x4000, true, maps.into_iter()).is_ok());
    }

    #[test]
    fn a_hole_read_only_or_inaccessible_pages_are_faults() {
        let maps = [map(0x1000, 0x2000, "rw-p"), map(0x3000, 0x4000, "r--p")];
        let hole = covered(0x1000, 0x4000, false, maps.into_iter()).unwrap_err();
        assert!(
            hole.to_string().contains("0x2000..0x4000 are not mapped"),
            "{hole}"
        );
        let ro = covered(0x3000, 0x4000, true, maps.into_iter()).unwrap_err();
        assert!(ro.to_string().contains("read-only"), "{ro}");
        assert!(covered(0x3000, 0x4000, false, maps.into_iter()).is_ok());
        let none = [map(0x1000, 0x2000, "---p")];
        let err = covered(0x1000, 0x2000, false, none.into_iter()).unwrap_err();
        assert_eq!(err.errno(), 14);
    }

    #[test]
    fn live_memory_passes_and_the_zero_page_and_huge_ranges_do_not() {
        let buf = vec![0u8; 8192];
        let a = buf.as_ptr() as u64;
        assert!(check_registration(a, 8192, AccessFlags::LOCAL_WRITE).is_ok());
        let page_one = check_registration(0x1000, 8, AccessFlags::EMPTY).unwrap_err();
        assert_eq!(page_one.errno(), 14, "{page_one}");
        let tib = check_registration(a, 1 << 40, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert_eq!(tib.errno(), 14, "{tib}");
        assert_eq!(
            check_registration(a, 0, AccessFlags::EMPTY)
                .unwrap_err()
                .errno(),
            22
        );
        assert_eq!(
            check_registration(u64::MAX - 4, 8, AccessFlags::EMPTY)
                .unwrap_err()
                .errno(),
            22
        );
    }
}
