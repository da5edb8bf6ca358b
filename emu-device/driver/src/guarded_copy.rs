//! Copies to and from application memory that survive pages the application has unmapped:
//! emulated pinning.
//!
//! ibv_reg_mr(3) pins the pages of a region on a real HCA: if the application frees memory
//! whose registration is still live (UCX's registration cache keeps regions over memory it
//! has freed; some programs tear down in the "wrong" order), a late DMA still lands in the
//! pinned pages, which the process no longer sees, and nothing happens. An emulator that
//! copies with plain loads and stores would die with SIGSEGV instead, in its engine thread,
//! in the middle of someone else's teardown. These copies behave as the pinned pages would:
//! bytes for an unmapped page are dropped when writing and read as zeros, counted, and
//! reported once.
//!
//! How: one copy routine (`rep movsb`) and one atomic 8-byte store whose faulting
//! instructions are known; a SIGSEGV/SIGBUS
//! handler that finds the fault at that instruction resumes after it with the count of bytes
//! left (the kernel's `copy_from_user` fixup, in user space), and hands every other fault to
//! the handler that was installed before (or the default action, so a program's own bugs
//! still crash as they would). x86-64 Linux only; elsewhere copies stay plain.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Total bytes that fell on unmapped application pages since the process started.
static UNMAPPED_BYTES: AtomicU64 = AtomicU64::new(0);
static REPORTED: AtomicBool = AtomicBool::new(false);

/// Make the core's copies to and from application memory fault-safe (idempotent; the
/// first call installs the signal handlers). Called before memory is first registered.
pub fn install() {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            if x86_64::install_handlers() {
                softroce_emu_core::install_copier(softroce_emu_core::AppCopier {
                    read: read_app,
                    write: write_app,
                    store_u64_release: store_app_u64,
                    crc: crc_app,
                });
            }
        });
    }
}

/// Whether the copies are fault-safe in this process (after [`install`]).
pub fn installed() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        x86_64::INSTALLED.load(Ordering::Acquire)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// Bytes of transfers that met unmapped application memory (dropped or read as zeros).
pub fn unmapped_bytes() -> u64 {
    UNMAPPED_BYTES.load(Ordering::Relaxed)
}

fn record_unmapped(addr: usize, bytes: usize) {
    UNMAPPED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    if !REPORTED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "registered memory at {addr:#x} is no longer mapped: the application freed memory \
             whose registration is live (ibv_reg_mr(3) asks it to stay until ibv_dereg_mr); \
             {bytes} bytes were dropped or read as zeros, as pinned pages would absorb them \
             (reported once)"
        );
    }
}

/// The fault-safe copy from application address `src` into `dst`.
///
/// # Safety
/// `dst` is the caller's buffer; `src..src + dst.len()` is application memory that was
/// registered (it may since have been unmapped).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn read_app(src: u64, dst: &mut [u8]) -> usize {
    // SAFETY: forwarded; the destination is a live Rust buffer of `dst.len()` bytes.
    unsafe {
        x86_64::copy_skipping_holes(
            dst.as_mut_ptr(),
            src as usize as *const u8,
            dst.len(),
            Side::Source,
        )
    }
}

/// The fault-safe copy of `src` to application address `dst`.
///
/// # Safety
/// As [`read_app`], the application range being the destination.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn write_app(dst: u64, src: &[u8]) -> usize {
    // SAFETY: forwarded; the source is a live Rust buffer of `src.len()` bytes.
    unsafe {
        x86_64::copy_skipping_holes(
            dst as usize as *mut u8,
            src.as_ptr(),
            src.len(),
            Side::Destination,
        )
    }
}

/// The fault-safe atomic 8-byte store (RDMA ATOMIC WRITE) to an aligned application
/// address: 8 when the page is gone (nothing stored), else 0.
///
/// # Safety
/// `dst` is 8-byte aligned and was a registered, writable range.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn store_app_u64(dst: u64, value: u64) -> usize {
    // SAFETY: forwarded; an aligned 8-byte `mov` is one atomic store on x86-64, and x86
    // orders it after every earlier store (release), the call being a compiler barrier.
    let lost = unsafe { x86_64::softroce_guarded_store8(dst as usize as *mut u64, value) };
    if lost > 0 {
        record_unmapped(dst as usize, lost);
    }
    lost
}

/// The CRC-32 of `crc` (the CRC so far) continued over application memory `addr..addr +
/// len`, read in place; `None` when a page of it is gone (nothing is reported: the caller
/// then copies the range the fault-safe way, which counts and reports the hole).
///
/// # Safety
/// `addr..addr + len` was a registered range (it may since have been unmapped).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn crc_app(crc: u32, addr: u64, len: usize) -> Option<u32> {
    let mut hasher = crc32fast::Hasher::new_with_initial(crc);
    let start = addr as usize;
    // SAFETY: forwarded; the slice is made and read only inside the guarded call, which
    // a fault on it cuts short (the hasher is then dropped unread).
    let whole = unsafe {
        x86_64::call_guarded(start, len, || {
            hasher.update(core::slice::from_raw_parts(start as *const u8, len));
        })
    };
    whole.then(|| hasher.finalize())
}

/// Which side of a copy is application memory (the other is ours and always mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(all(target_arch = "x86_64", target_os = "linux")),
    allow(dead_code)
)]
enum Side {
    Source,
    Destination,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86_64 {
    use std::cell::Cell;
    use std::ffi::{c_int, c_void};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::Side;

    /// The granule a hole is skipped by: the smallest page (a fault never spans less).
    const PAGE: usize = 4096;

    pub(super) static INSTALLED: AtomicBool = AtomicBool::new(false);

    // rdi = destination, rsi = source, rdx = length → rax = bytes not copied. `rep movsb` is
    // restartable: at a fault rcx counts the bytes left and rsi/rdi point at the byte that
    // faulted, so resuming at the fixup label returns exactly how far the copy got.
    std::arch::global_asm!(
        ".pushsection .text.softroce_guarded_copy,\"ax\",@progbits",
        ".globl softroce_guarded_copy",
        ".hidden softroce_guarded_copy",
        ".type softroce_guarded_copy,@function",
        "softroce_guarded_copy:",
        "    mov rcx, rdx",
        ".globl softroce_guarded_copy_fault",
        ".hidden softroce_guarded_copy_fault",
        "softroce_guarded_copy_fault:",
        "    rep movsb",
        ".globl softroce_guarded_copy_fixup",
        ".hidden softroce_guarded_copy_fixup",
        "softroce_guarded_copy_fixup:",
        "    mov rax, rcx",
        "    ret",
        ".size softroce_guarded_copy, .-softroce_guarded_copy",
        // rdi = aligned destination, rsi = value → rax = bytes not stored (0 or 8).
        ".globl softroce_guarded_store8",
        ".hidden softroce_guarded_store8",
        ".type softroce_guarded_store8,@function",
        "softroce_guarded_store8:",
        ".globl softroce_guarded_store8_fault",
        ".hidden softroce_guarded_store8_fault",
        "softroce_guarded_store8_fault:",
        "    mov qword ptr [rdi], rsi",
        "    xor eax, eax",
        "    ret",
        ".globl softroce_guarded_store8_fixup",
        ".hidden softroce_guarded_store8_fixup",
        "softroce_guarded_store8_fixup:",
        "    mov eax, 8",
        "    ret",
        ".size softroce_guarded_store8, .-softroce_guarded_store8",
        // rdi = function, rsi = its argument, rdx = 7 saved words → rax = 0 when the call
        // returned, 1 when a fault in the guarded range cut it short: the handler resumes
        // at the abort label with the callee-saved registers and the stack pointer saved
        // here, which returns to our caller as if the call had (the sigsetjmp/siglongjmp
        // pair, for frames that own nothing to drop).
        ".globl softroce_guarded_call",
        ".hidden softroce_guarded_call",
        ".type softroce_guarded_call,@function",
        "softroce_guarded_call:",
        "    mov qword ptr [rdx], rbx",
        "    mov qword ptr [rdx + 8], rbp",
        "    mov qword ptr [rdx + 16], r12",
        "    mov qword ptr [rdx + 24], r13",
        "    mov qword ptr [rdx + 32], r14",
        "    mov qword ptr [rdx + 40], r15",
        "    mov qword ptr [rdx + 48], rsp",
        "    sub rsp, 8",
        "    mov rax, rdi",
        "    mov rdi, rsi",
        "    call rax",
        "    add rsp, 8",
        "    xor eax, eax",
        "    ret",
        ".globl softroce_guarded_call_abort",
        ".hidden softroce_guarded_call_abort",
        "softroce_guarded_call_abort:",
        "    mov eax, 1",
        "    ret",
        ".size softroce_guarded_call, .-softroce_guarded_call",
        ".popsection",
    );

    unsafe extern "C" {
        fn softroce_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
        static softroce_guarded_copy_fault: u8;
        static softroce_guarded_copy_fixup: u8;
        pub(super) fn softroce_guarded_store8(dst: *mut u64, value: u64) -> usize;
        static softroce_guarded_store8_fault: u8;
        static softroce_guarded_store8_fixup: u8;
        fn softroce_guarded_call(
            f: extern "C" fn(*mut c_void),
            arg: *mut c_void,
            saved: *mut [u64; SAVED_WORDS],
        ) -> u32;
        static softroce_guarded_call_abort: u8;
    }

    /// What `softroce_guarded_call` saves: rbx, rbp, r12-r15, and the stack pointer at its
    /// entry (pointing at its return address).
    const SAVED_WORDS: usize = 7;

    thread_local! {
        /// The application range a guarded call on this thread reads (start, end) and the
        /// registers it saved; all zero outside one. Const-initialised without a destructor:
        /// a plain thread-local slot, safe to read in the signal handler.
        static GUARDED_CALL: Cell<(usize, usize, usize)> = const { Cell::new((0, 0, 0)) };
    }

    /// Run `f`, which reads application memory `start..start + len` only; false when a page
    /// of that range faulted, `f` then cut short where it was.
    ///
    /// # Safety
    /// `f` and everything it calls own nothing that must be dropped or released (no locks,
    /// no allocations) while it touches the range: a fault abandons those frames as they are.
    pub(super) unsafe fn call_guarded<F: FnMut()>(start: usize, len: usize, mut f: F) -> bool {
        extern "C" fn run<F: FnMut()>(arg: *mut c_void) {
            // SAFETY: `arg` is the `F` below, alive and not otherwise borrowed for the call.
            unsafe { (*arg.cast::<F>())() }
        }
        let mut saved = [0u64; SAVED_WORDS];
        let end = start.saturating_add(len);
        GUARDED_CALL.with(|g| g.set((start, end, (&raw mut saved) as usize)));
        // SAFETY: `run::<F>` takes the pointer to `f` it is given; `saved` outlives the call.
        let cut_short =
            unsafe { softroce_guarded_call(run::<F>, (&raw mut f).cast(), &raw mut saved) };
        GUARDED_CALL.with(|g| g.set((0, 0, 0)));
        cut_short == 0
    }

    /// The registers to resume with when `addr` lies in the range of the guarded call
    /// running on this thread.
    fn guarded_call_at(addr: usize) -> Option<[u64; SAVED_WORDS]> {
        let (start, end, saved) = GUARDED_CALL.with(Cell::get);
        if saved == 0 || addr < start || addr >= end {
            return None;
        }
        // SAFETY: set by `call_guarded` to its live array for the duration of the call,
        // and this fault happened on this thread during it.
        Some(unsafe { *(saved as *const [u64; SAVED_WORDS]) })
    }

    /// Copy `len` bytes, skipping (and, when the application memory is the source, zeroing
    /// in `dst`) every page of the application side that faults; the bytes skipped.
    ///
    /// # Safety
    /// The non-application side is a live buffer of `len` bytes; the application side was a
    /// registered range.
    pub(super) unsafe fn copy_skipping_holes(
        dst: *mut u8,
        src: *const u8,
        len: usize,
        app: Side,
    ) -> usize {
        let mut done = 0;
        let mut lost = 0;
        let mut first_hole = None;
        // Each pass ends the copy or moves past at least one byte of a hole: at most one
        // pass per page.
        while done < len {
            // SAFETY: both ranges are as the caller promised; faults on the application side
            // come back as a short count.
            let left = unsafe { softroce_guarded_copy(dst.add(done), src.add(done), len - done) };
            if left == 0 {
                break;
            }
            let at = len - left;
            let faulted = match app {
                Side::Source => src as usize + at,
                Side::Destination => dst as usize + at,
            };
            let hole = (PAGE - faulted % PAGE).min(left);
            if app == Side::Source {
                // SAFETY: `dst` is the caller's live buffer of `len` bytes.
                unsafe { core::ptr::write_bytes(dst.add(at), 0, hole) };
            }
            first_hole.get_or_insert(faulted);
            lost += hole;
            done = at + hole;
        }
        if let Some(addr) = first_hole {
            super::record_unmapped(addr, lost);
        }
        lost
    }

    /// The dispositions in force before ours, for the faults that are not ours.
    struct Previous(libc::sigaction);
    // SAFETY: plain data (a handler address, flags and a mask), read-only once set.
    unsafe impl Sync for Previous {}
    unsafe impl Send for Previous {}

    static PREVIOUS_SEGV: OnceLock<Previous> = OnceLock::new();
    static PREVIOUS_BUS: OnceLock<Previous> = OnceLock::new();

    fn previous(sig: c_int) -> &'static OnceLock<Previous> {
        if sig == libc::SIGBUS {
            &PREVIOUS_BUS
        } else {
            &PREVIOUS_SEGV
        }
    }

    /// Install the handler for SIGSEGV and SIGBUS, remembering what was there.
    pub(super) fn install_handlers() -> bool {
        for sig in [libc::SIGSEGV, libc::SIGBUS] {
            // SAFETY: sigaction with valid pointers; the zeroed struct is a valid "no handler".
            unsafe {
                let mut old: libc::sigaction = core::mem::zeroed();
                if libc::sigaction(sig, core::ptr::null(), &mut old) != 0 {
                    return false;
                }
                let _ = previous(sig).set(Previous(old));
                let mut action: libc::sigaction = core::mem::zeroed();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(sig, &action, core::ptr::null_mut()) != 0 {
                    return false;
                }
            }
        }
        INSTALLED.store(true, Ordering::Release);
        true
    }

    /// Async-signal-safe: compares addresses, edits the saved context, or chains.
    extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        // SAFETY: the kernel passes a valid ucontext_t for an SA_SIGINFO handler; the symbols
        // are our routine's labels.
        unsafe {
            let uc = ctx.cast::<libc::ucontext_t>();
            let ip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
            let at = *ip as usize;
            if at == (&raw const softroce_guarded_copy_fault) as usize {
                *ip = (&raw const softroce_guarded_copy_fixup) as usize as i64;
                return;
            }
            if at == (&raw const softroce_guarded_store8_fault) as usize {
                *ip = (&raw const softroce_guarded_store8_fixup) as usize as i64;
                return;
            }
            if let Some(saved) = guarded_call_at((*info).si_addr() as usize) {
                let gregs = &mut (*uc).uc_mcontext.gregs;
                let regs = [
                    libc::REG_RBX,
                    libc::REG_RBP,
                    libc::REG_R12,
                    libc::REG_R13,
                    libc::REG_R14,
                    libc::REG_R15,
                    libc::REG_RSP,
                ];
                for (reg, value) in regs.into_iter().zip(saved) {
                    gregs[reg as usize] = value as i64;
                }
                gregs[libc::REG_RIP as usize] =
                    (&raw const softroce_guarded_call_abort) as usize as i64;
                return;
            }
            chain(sig, info, ctx);
        }
    }

    /// A fault that is not ours: what would have happened without us.
    unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        let handler = previous(sig)
            .get()
            .map(|p| (p.0.sa_sigaction, p.0.sa_flags))
            .filter(|&(h, _)| h != libc::SIG_DFL && h != libc::SIG_IGN);
        match handler {
            Some((h, flags)) if flags & libc::SA_SIGINFO != 0 => {
                // SAFETY: an SA_SIGINFO handler's address, called as the kernel would.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { core::mem::transmute(h) };
                f(sig, info, ctx);
            }
            Some((h, _)) => {
                // SAFETY: a plain handler's address.
                let f: extern "C" fn(c_int) = unsafe { core::mem::transmute(h) };
                f(sig);
            }
            None => {
                // Back to the default action; returning re-runs the faulting instruction,
                // which now ends the process as it would have without us (core dump and all).
                // SAFETY: sigaction with a valid struct.
                unsafe {
                    let mut default: libc::sigaction = core::mem::zeroed();
                    default.sa_sigaction = libc::SIG_DFL;
                    libc::sigemptyset(&mut default.sa_mask);
                    libc::sigaction(sig, &default, core::ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// Three pages of known bytes, the middle one unmapped again.
    fn pages_with_a_hole() -> usize {
        // SAFETY: a fresh private anonymous mapping, filled and then partly unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "mmap of three pages");
            let bytes = std::slice::from_raw_parts_mut(p.cast::<u8>(), 3 * PAGE);
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (i * 7 + i / 251) as u8;
            }
            assert_eq!(libc::munmap(p.cast::<u8>().add(PAGE).cast(), PAGE), 0);
            p as usize
        }
    }

    #[test]
    fn a_crc_over_application_memory_is_cut_short_by_a_hole_and_the_thread_goes_on() {
        install();
        assert!(installed(), "the handlers are in place");
        let base = pages_with_a_hole();
        // SAFETY: the first page is mapped and ours.
        let first = unsafe { std::slice::from_raw_parts(base as *const u8, PAGE) };
        let third = base + 2 * PAGE;
        // Bounded: each round faults once and must come back with the same answers.
        for round in 0..200u32 {
            let seed = round.wrapping_mul(0x9e37_79b9);
            let mut want = crc32fast::Hasher::new_with_initial(seed);
            want.update(&first[100..]);
            // SAFETY: registered-style ranges, the middle page gone.
            unsafe {
                assert_eq!(
                    crc_app(seed, (base + 100) as u64, PAGE - 100),
                    Some(want.finalize()),
                    "a mapped range is read in place"
                );
                assert_eq!(
                    crc_app(seed, (base + 100) as u64, 3 * PAGE - 200),
                    None,
                    "a range over the hole is refused, not a crash"
                );
                assert_eq!(
                    crc_app(seed, (base + PAGE) as u64, 8),
                    None,
                    "inside the hole"
                );
                assert!(crc_app(seed, third as u64, PAGE).is_some(), "past the hole");
            }
        }
        // The state a cut-short call left behind is the caller's as before: locals, the
        // stack and a later plain computation are intact.
        let after: u64 = (1..=100u64).sum();
        assert_eq!(after, 5050);
        // SAFETY: the pages still mapped.
        unsafe {
            libc::munmap(base as *mut libc::c_void, PAGE);
            libc::munmap(third as *mut libc::c_void, PAGE);
        }
    }
}
