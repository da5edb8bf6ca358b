//! An application that unmaps memory whose registration is still live (UCX's registration
//! cache does; so does many a teardown in the wrong order) breaks ibv_reg_mr(3)'s promise,
//! but on a real HCA nothing happens: the pages stay pinned, late DMA lands in pages the
//! process no longer sees. The emulator does the same instead of dying with SIGSEGV in its
//! engine thread: writes into the hole (atomic ones too) are dropped, reads of it give zeros,
//! it is counted, and the device goes on working. A fault of the program's own still kills it as before.
//! Payloads the device sends straight from registered memory (no copy) obey the same rules:
//! a page gone by the time its ICRC is taken is sent as zeros, and whatever reads the
//! datagram instead (a fault plan) gets the payload copied in first.
//!
//! Addresses: 127.81.0.0/16 only.

use std::process::Command;
use std::time::Duration;

use softroce_emu_core::*;
use softroce_emu_driver::{Device, DeviceConfig, guarded_copy};
use softroce_wire::{Gid, Psn};

const WAIT: Duration = Duration::from_secs(10);
const PAGE: usize = 4096;

fn start(ip: &str) -> Device {
    start_with_faults(ip, None)
}

fn start_with_faults(ip: &str, faults: Option<&str>) -> Device {
    let mut cfg = DeviceConfig::new("unmapped", ip.parse().unwrap());
    cfg.pcap = None;
    cfg.faults = faults.map(str::to_owned);
    Device::start(cfg).unwrap()
}

/// Three anonymous pages, mapped (and never unmapped by Rust: the test unmaps what it means
/// to).
fn three_pages() -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            3 * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of three pages");
    p.cast()
}

/// An RC QP on `dev` with `len` bytes at `mem` registered for remote reads and writes.
struct Rc<'a> {
    dev: &'a Device,
    cq: CqHandle,
    qp: QpHandle,
    qpn: u32,
    mem: *mut u8,
    keys: MrKeys,
}

impl<'a> Rc<'a> {
    fn new(dev: &'a Device, mem: *mut u8, len: usize) -> Self {
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let pd = dev.with(|h| h.alloc_pd()).unwrap();
        // SAFETY: the mapping is live now; what the test later unmaps is the point.
        let (_, keys) = unsafe { dev.reg_mr(pd, mem, len, access) }.unwrap();
        let (cq, _) = dev.with(|h| h.create_cq(16, None, 0, 0)).unwrap();
        let (qp, qpn, _) = dev
            .with(|h| {
                h.create_qp(
                    pd,
                    QpInitAttr {
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: QpCap::new(8, 8),
                        qp_type: QpType::Rc,
                        sq_sig_all: false,
                        qp_context: 0,
                    },
                )
            })
            .unwrap();
        Self {
            dev,
            cq,
            qp,
            qpn: qpn.value(),
            mem,
            keys,
        }
    }

    fn connect(&self, peer: &Rc<'_>) {
        let psn = Psn::new(0x200);
        let to = QpPeer {
            qpn: peer.qpn,
            psn,
            av: AhAttr::new(Gid::from_ip(peer.dev.local_addr().ip()), 0),
        };
        self.dev
            .with(|h| QpBringup::new(QpType::Rc).to_rts(h, self.qp, &to, psn))
            .unwrap();
    }

    /// RDMA WRITE (or READ) `len` bytes between our memory at `local_off` and the peer's
    /// at `remote_off`; the completion's status.
    fn rdma(
        &self,
        op: WrOpcode,
        local_off: usize,
        peer: &Rc<'_>,
        remote_off: usize,
        len: usize,
    ) -> WcStatus {
        let mut wr = SendWr::new(7, op);
        wr.sg_list = vec![Sge {
            addr: self.mem as u64 + local_off as u64,
            length: len as u32,
            lkey: self.keys.lkey,
        }]
        .into();
        wr.rdma = RdmaTarget {
            remote_addr: peer.mem as u64 + remote_off as u64,
            rkey: peer.keys.rkey,
        };
        // SAFETY: the gather list lies in our live registered memory.
        self.dev
            .with(|h| unsafe { h.post_send(self.qp, &[wr]) })
            .unwrap();
        let cq = self.cq;
        self.dev
            .wait_for(WAIT, |h| {
                let mut wc = [WorkCompletion::success(0, 0, WcOpcode::Send, 0)];
                (h.poll_cq(cq, &mut wc).ok()? == 1).then_some(wc[0])
            })
            .expect("a completion within the wait")
            .status
    }
}

/// The stories that count unmapped bytes run one at a time: the count is the process's
/// (`guarded_copy::unmapped_bytes`), and two holes read at once made one story see both.
fn counting_unmapped_bytes() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn rdma_into_and_out_of_unmapped_registered_memory_acts_as_pinned_pages_would() {
    let _counting = counting_unmapped_bytes();
    let (a_dev, b_dev) = (start("127.81.0.1"), start("127.81.0.2"));
    let src = three_pages();
    let victim = three_pages();
    // SAFETY: both mappings are three live pages.
    unsafe {
        std::ptr::write_bytes(src, 0xAB, 3 * PAGE);
        std::ptr::write_bytes(victim, 0x11, 3 * PAGE);
    }
    let writer = Rc::new(&a_dev, src, 3 * PAGE);
    let owner = Rc::new(&b_dev, victim, 3 * PAGE);
    writer.connect(&owner);
    owner.connect(&writer);

    // The owner frees the middle page while its registration is live.
    // SAFETY: the middle page of our own mapping; nothing in Rust refers to it.
    assert_eq!(unsafe { libc::munmap(victim.add(PAGE).cast(), PAGE) }, 0);
    let before = guarded_copy::unmapped_bytes();

    // A WRITE across all three pages succeeds, as on hardware; the mapped pages get the data.
    assert_eq!(
        writer.rdma(WrOpcode::RdmaWrite, 0, &owner, 0, 3 * PAGE),
        WcStatus::Success
    );
    assert!(
        guarded_copy::installed(),
        "registration installs the fault-safe copies"
    );
    assert_eq!(
        guarded_copy::unmapped_bytes() - before,
        PAGE as u64,
        "the hole is counted"
    );
    // SAFETY: pages 0 and 2 are still mapped.
    let (first, last) = unsafe {
        (
            std::slice::from_raw_parts(victim, PAGE).to_vec(),
            std::slice::from_raw_parts(victim.add(2 * PAGE), PAGE).to_vec(),
        )
    };
    assert!(
        first.iter().all(|&b| b == 0xAB),
        "the page before the hole got the data"
    );
    assert!(
        last.iter().all(|&b| b == 0xAB),
        "the page after the hole got the data"
    );

    // A READ across the hole: the hole reads as zeros, the rest as written.
    // SAFETY: our own source mapping.
    unsafe { std::ptr::write_bytes(src, 0, 3 * PAGE) };
    assert_eq!(
        writer.rdma(WrOpcode::RdmaRead, 0, &owner, 0, 3 * PAGE),
        WcStatus::Success
    );
    // SAFETY: as above.
    let read = unsafe { std::slice::from_raw_parts(src, 3 * PAGE) };
    assert!(read[..PAGE].iter().all(|&b| b == 0xAB));
    assert!(
        read[PAGE..2 * PAGE].iter().all(|&b| b == 0),
        "the hole reads as zeros"
    );
    assert!(read[2 * PAGE..].iter().all(|&b| b == 0xAB));

    // An ATOMIC WRITE into the hole: acknowledged, absorbed, counted.
    let before = guarded_copy::unmapped_bytes();
    assert_eq!(
        writer.rdma(WrOpcode::AtomicWrite, 0, &owner, PAGE + 64, 8),
        WcStatus::Success
    );
    assert_eq!(guarded_copy::unmapped_bytes() - before, 8);

    // Nothing was written elsewhere: a fresh page mapped into the hole is still zero, and
    // the device keeps working.
    // SAFETY: re-mapping the hole we made.
    let again = unsafe {
        libc::mmap(
            victim.add(PAGE).cast(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(again.cast::<u8>(), unsafe { victim.add(PAGE) });
    // SAFETY: just mapped.
    assert!(
        unsafe { std::slice::from_raw_parts(victim.add(PAGE), PAGE) }
            .iter()
            .all(|&b| b == 0)
    );
    assert_eq!(
        writer.rdma(WrOpcode::RdmaWrite, 0, &owner, PAGE, PAGE),
        WcStatus::Success
    );
    // SAFETY: mapped again.
    assert!(
        unsafe { std::slice::from_raw_parts(victim.add(PAGE), PAGE) }
            .iter()
            .all(|&b| b == 0xAB)
    );
}

/// The byte a patterned source holds at offset `i` (no period a misplaced page could hide
/// behind).
fn byte_at(i: usize) -> u8 {
    (i * 7 + i / 4093) as u8
}

/// A writer on `writer` whose three source pages hold [`byte_at`], connected to an owner on
/// `owner` whose three pages are zero.
fn patterned_pair<'a>(writer: &'a Device, owner: &'a Device) -> (Rc<'a>, Rc<'a>) {
    let (src, dst) = (three_pages(), three_pages());
    // SAFETY: both mappings are three live pages.
    unsafe {
        for i in 0..3 * PAGE {
            *src.add(i) = byte_at(i);
        }
        std::ptr::write_bytes(dst, 0, 3 * PAGE);
    }
    let w = Rc::new(writer, src, 3 * PAGE);
    let o = Rc::new(owner, dst, 3 * PAGE);
    w.connect(&o);
    o.connect(&w);
    (w, o)
}

#[test]
fn a_write_from_memory_with_a_hole_sends_zeros_for_it_and_the_rest_from_where_it_lies() {
    let _counting = counting_unmapped_bytes();
    let (a_dev, b_dev) = (start("127.81.0.3"), start("127.81.0.4"));
    let (writer, owner) = patterned_pair(&a_dev, &b_dev);
    let (src, dst, byte) = (writer.mem, owner.mem, byte_at);
    // SAFETY: the owner's three pages stay mapped.
    let landed = || unsafe { std::slice::from_raw_parts(dst, 3 * PAGE).to_vec() };

    // Whole: every byte lands where it belongs, the payloads sent from where they lie.
    assert_eq!(
        writer.rdma(WrOpcode::RdmaWrite, 0, &owner, 0, 3 * PAGE),
        WcStatus::Success
    );
    let got = landed();
    assert!(
        (0..3 * PAGE).all(|i| got[i] == byte(i)),
        "each payload from its own place"
    );

    // The writer frees the middle page of its source while the registration is live: the
    // WRITE still completes, as on hardware, that page read as zeros and counted.
    // SAFETY: the middle page of our own mapping; nothing in Rust refers to it.
    assert_eq!(unsafe { libc::munmap(src.add(PAGE).cast(), PAGE) }, 0);
    // SAFETY: as above.
    unsafe { std::ptr::write_bytes(dst, 0xEE, 3 * PAGE) };
    let before = guarded_copy::unmapped_bytes();
    assert_eq!(
        writer.rdma(WrOpcode::RdmaWrite, 0, &owner, 0, 3 * PAGE),
        WcStatus::Success
    );
    assert_eq!(
        guarded_copy::unmapped_bytes() - before,
        PAGE as u64,
        "the hole is counted once"
    );
    let got = landed();
    assert!((0..PAGE).all(|i| got[i] == byte(i)), "before the hole");
    assert!(
        got[PAGE..2 * PAGE].iter().all(|&b| b == 0),
        "the hole arrives as zeros"
    );
    assert!(
        (2 * PAGE..3 * PAGE).all(|i| got[i] == byte(i)),
        "after the hole"
    );
}

/// A fault plan that keeps or rewrites datagrams (duplicates, reorders) reads them whole,
/// so payloads the core left in registered memory are copied into them first; one that
/// only drops reads the headers and lets them leave from where they lie. Either way the
/// WRITEs land byte for byte and no datagram leaves with bytes its ICRC was not taken over.
fn writes_land_under(plan: &str, writer_ip: &str, owner_ip: &str) {
    let a_dev = start_with_faults(writer_ip, Some(plan));
    let b_dev = start(owner_ip);
    let (writer, owner) = patterned_pair(&a_dev, &b_dev);
    let (dst, byte) = (owner.mem, byte_at);
    for round in 0..4 {
        assert_eq!(
            writer.rdma(WrOpcode::RdmaWrite, 0, &owner, 0, 3 * PAGE),
            WcStatus::Success,
            "round {round}"
        );
    }
    // SAFETY: the owner's pages are mapped.
    let got = unsafe { std::slice::from_raw_parts(dst, 3 * PAGE) };
    assert!(
        (0..3 * PAGE).all(|i| got[i] == byte(i)),
        "every byte as written"
    );
    let injected = a_dev.fault_counters().expect("the plan is in force");
    assert!(
        injected.seen_tx > 0 && injected.duplicated + injected.reordered + injected.dropped > 0,
        "the plan acted: {injected:?}"
    );
    let bad_icrc = b_dev.with(|h| h.counters().drops[DropReason::IcrcMismatch as usize]);
    assert_eq!(
        bad_icrc, 0,
        "no datagram left with bytes its ICRC was not taken over"
    );
}

#[test]
fn under_a_plan_that_duplicates_and_reorders_payloads_are_copied_into_what_it_keeps() {
    writes_land_under("dup=0.3,reorder=0.3,seed=5", "127.81.0.5", "127.81.0.6");
}

#[test]
fn under_a_plan_that_only_drops_every_write_lands_whole() {
    writes_land_under("drop=0.2,seed=9", "127.81.0.7", "127.81.0.8");
}

/// Run in a child process by the next test: registers memory (installing the handlers),
/// then makes a fault of its own outside any copy of the device's.
#[test]
#[ignore = "run as a child process by a_fault_of_the_programs_own_still_kills_it"]
fn child_faults_on_its_own() {
    if std::env::var_os("SOFTROCE_GUARD_CHILD").is_none() {
        return;
    }
    let dev = start("127.81.0.3");
    let mem = three_pages();
    let _rc = Rc::new(&dev, mem, PAGE);
    assert!(guarded_copy::installed());
    let forbidden = three_pages();
    // SAFETY: deliberately not: the program writes to memory it made inaccessible itself,
    // its own bug. Protected rather than unmapped: an unmapped range may be mapped again
    // by another thread (the device's) before the write, which then succeeds.
    unsafe {
        assert_eq!(
            libc::mprotect(forbidden.cast(), 3 * PAGE, libc::PROT_NONE),
            0
        );
        std::ptr::write_volatile(forbidden.cast::<u64>(), 1);
    }
    unreachable!("the write above must have killed the process");
}

#[test]
fn a_fault_of_the_programs_own_still_kills_it() {
    use std::os::unix::process::ExitStatusExt;
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_faults_on_its_own",
            "--nocapture",
        ])
        .env("SOFTROCE_GUARD_CHILD", "1")
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGSEGV),
        "the child must die of its own SIGSEGV (status {status:?})"
    );
}
