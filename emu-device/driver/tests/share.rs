//! Several device instances on one address and port, as several processes share a host's
//! HCA: the first owns the port, the others are its guests. RC and UD traffic between
//! each of them and a peer device on another address, between two guests, the owner's
//! exit while guests run (one takes over, the other rejoins, connections keep working),
//! and hostile input on the owner's unix socket. The CLI's `shared_device` tests run the
//! same with separate processes (rping, ucmatose, perftest).
//!
//! Addresses: 127.80.0.0/16 only.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use softroce_emu_core::*;
use softroce_emu_driver::share::{Guest, socket_name};
use softroce_emu_driver::{Device, DeviceConfig};
use softroce_wire::{Gid, Psn};

const WAIT: Duration = Duration::from_secs(10);

fn start(ip: &str) -> Device {
    let mut cfg = DeviceConfig::new("share", ip.parse().unwrap());
    cfg.pcap = None;
    cfg.faults = None;
    Device::start(cfg).unwrap()
}

fn counter(dev: &Device, name: &str) -> u64 {
    dev.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

/// One QP with its PD, CQ and 4 KiB of registered memory (leaked: the device writes it
/// through raw pointers until the test process ends).
struct Side<'a> {
    dev: &'a Device,
    ip: IpAddr,
    pd: PdHandle,
    cq: CqHandle,
    qp: QpHandle,
    qpn: u32,
    mem: &'static mut [u8],
    keys: MrKeys,
}

impl<'a> Side<'a> {
    fn new(dev: &'a Device, qp_type: QpType) -> Self {
        let mem: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
        let ptr = mem.as_mut_ptr();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let pd = dev.with(|h| h.alloc_pd()).unwrap();
        // SAFETY: the leaked buffer stays mapped for the life of the process.
        let (_, keys) = unsafe { dev.reg_mr(pd, ptr, 4096, access) }.unwrap();
        let (cq, _) = dev.with(|h| h.create_cq(64, None, 0, 0)).unwrap();
        let (qp, qpn, _) = dev
            .with(|h| {
                h.create_qp(
                    pd,
                    QpInitAttr {
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: QpCap::new(32, 32).with_sges(2),
                        qp_type,
                        sq_sig_all: false,
                        qp_context: 0,
                    },
                )
            })
            .unwrap();
        Self {
            dev,
            ip: dev.local_addr().ip(),
            pd,
            cq,
            qp,
            qpn: qpn.value(),
            mem,
            keys,
        }
    }

    /// Bring the QP to RTS: toward `peer` (RC), or ready for any peer (UD).
    fn connect(&self, peer: Option<&Side<'_>>) {
        let qp_type = if peer.is_some() {
            QpType::Rc
        } else {
            QpType::Ud
        };
        let bringup = QpBringup::new(qp_type);
        let psn = Psn::new(0x100);
        let to = peer.map_or_else(QpPeer::default, |p| QpPeer {
            qpn: p.qpn,
            psn,
            av: AhAttr::new(Gid::from_ip(p.ip), 0),
        });
        self.dev
            .with(|h| bringup.to_rts(h, self.qp, &to, psn))
            .unwrap();
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mem.as_ptr() as u64 + off as u64,
            length: len as u32,
            lkey: self.keys.lkey,
        }
    }

    fn post_recv(&self, len: usize) {
        let wr = RecvWr {
            wr_id: 1,
            sg_list: vec![self.sge(2048, len)].into(),
        };
        self.dev.with(|h| h.post_recv(self.qp, &[wr])).unwrap();
    }

    /// SEND `data` (to the QP numbered `ud.1` at address `ud.0` when this is a UD QP).
    fn send(&mut self, data: &[u8], ud: Option<(IpAddr, u32)>) {
        self.mem[..data.len()].copy_from_slice(data);
        let mut wr = SendWr::new(2, WrOpcode::Send);
        wr.sg_list = vec![self.sge(0, data.len())].into();
        if let Some((ip, qpn)) = ud {
            let ah = self
                .dev
                .with(|h| h.create_ah(self.pd, AhAttr::new(Gid::from_ip(ip), 0)))
                .unwrap();
            wr.ud = Some(UdTarget {
                ah,
                remote_qpn: qpn,
                remote_qkey: QpBringup::new(QpType::Ud).qkey,
            });
        }
        // SAFETY: the gather list points into this side's live registered memory.
        self.dev
            .with(|h| unsafe { h.post_send(self.qp, &[wr]) })
            .unwrap();
    }

    /// The next completion, waiting up to [`WAIT`].
    fn completion(&self) -> WorkCompletion {
        let cq = self.cq;
        self.dev
            .wait_for(WAIT, |h| {
                let mut wc = [WorkCompletion::success(0, 0, WcOpcode::Send, 0)];
                (h.poll_cq(cq, &mut wc).ok()? == 1).then_some(wc[0])
            })
            .expect("a completion within the wait")
    }

    fn received(&self, off: usize, len: usize) -> &[u8] {
        &self.mem[2048 + off..2048 + off + len]
    }
}

/// An RC SEND each way between `a` and `b`, checked byte for byte.
/// An RC QP on `a` and one on `b`, connected to each other.
fn rc_pair<'a>(a: &'a Device, b: &'a Device) -> (Side<'a>, Side<'a>) {
    let (x, y) = (Side::new(a, QpType::Rc), Side::new(b, QpType::Rc));
    x.connect(Some(&y));
    y.connect(Some(&x));
    (x, y)
}

fn rc_exchange(a: &mut Side<'_>, b: &mut Side<'_>, tag: &str) {
    rc_one_way(a, b, tag);
    rc_one_way(b, a, tag);
}

fn rc_one_way(x: &mut Side<'_>, y: &Side<'_>, tag: &str) {
    let msg = format!("{tag}: from QPN {:#x} to QPN {:#x}", x.qpn, y.qpn);
    y.post_recv(256);
    x.send(msg.as_bytes(), None);
    let wc = x.completion();
    assert_eq!(wc.status, WcStatus::Success, "{tag}: send {wc:?}");
    let wc = y.completion();
    assert_eq!(wc.status, WcStatus::Success, "{tag}: receive {wc:?}");
    assert_eq!(wc.byte_len as usize, msg.len(), "{tag}");
    assert_eq!(y.received(0, msg.len()), msg.as_bytes(), "{tag}");
}

/// A UD SEND each way between `a` and `b` (receives carry the 40-byte GRH area).
fn ud_exchange(a: &mut Side<'_>, b: &mut Side<'_>, tag: &str) {
    ud_one_way(a, b, tag);
    ud_one_way(b, a, tag);
}

fn ud_one_way(x: &mut Side<'_>, y: &Side<'_>, tag: &str) {
    let msg = format!("{tag}: UD from QPN {:#x}", x.qpn);
    y.post_recv(40 + 256);
    x.send(msg.as_bytes(), Some((y.ip, y.qpn)));
    assert_eq!(x.completion().status, WcStatus::Success, "{tag}");
    let wc = y.completion();
    assert_eq!(wc.status, WcStatus::Success, "{tag}");
    assert_eq!(wc.src_qp, x.qpn, "{tag}");
    assert_eq!(y.received(40, msg.len()), msg.as_bytes(), "{tag}");
}

#[test]
fn an_owner_and_two_guests_exchange_rc_and_ud_traffic_with_a_peer_and_each_other() {
    let owner = start("127.80.3.1");
    let g1 = start("127.80.3.1");
    let g2 = start("127.80.3.1");
    let peer = start("127.80.3.2");
    assert_eq!(owner.share_slot(), Some((0, true)));
    assert_eq!(g1.share_slot(), Some((1, false)));
    assert_eq!(g2.share_slot(), Some((2, false)));
    // Every process is on the device's address and port; guests send from their own.
    assert_eq!(g1.local_addr(), owner.local_addr());
    assert_ne!(g1.source_addr(), owner.local_addr());

    for (i, dev) in [&owner, &g1, &g2].into_iter().enumerate() {
        let mut mine = Side::new(dev, QpType::Rc);
        let mut theirs = Side::new(&peer, QpType::Rc);
        // QPNs carry the slot: the owner routes by them alone.
        assert_eq!(usize::from(qpn_slot(mine.qpn)), i, "{:#x}", mine.qpn);
        mine.connect(Some(&theirs));
        theirs.connect(Some(&mine));
        rc_exchange(&mut mine, &mut theirs, &format!("slot {i} RC"));

        let mut mine = Side::new(dev, QpType::Ud);
        let mut theirs = Side::new(&peer, QpType::Ud);
        mine.connect(None);
        theirs.connect(None);
        ud_exchange(&mut mine, &mut theirs, &format!("slot {i} UD"));
    }

    // Two guests of one device: each sends to the device's own address, the owner routes.
    let mut a = Side::new(&g1, QpType::Rc);
    let mut b = Side::new(&g2, QpType::Rc);
    a.connect(Some(&b));
    b.connect(Some(&a));
    rc_exchange(&mut a, &mut b, "guest to guest");
    // And the owner with a guest: its packets to its own port come back to it and go on.
    let mut o = Side::new(&owner, QpType::Rc);
    let mut c = Side::new(&g1, QpType::Rc);
    o.connect(Some(&c));
    c.connect(Some(&o));
    rc_exchange(&mut o, &mut c, "owner to guest");

    assert!(counter(&owner, "share_forwarded") > 0);
    assert_eq!(counter(&owner, "drop_share_msg"), 0);
}

#[test]
fn when_the_owner_exits_a_guest_takes_over_and_the_other_keeps_its_slot() {
    let owner = start("127.80.3.3");
    let g1 = start("127.80.3.3");
    let g2 = start("127.80.3.3");
    let peer = start("127.80.3.4");
    let (mut a1, mut p1) = (Side::new(&g1, QpType::Rc), Side::new(&peer, QpType::Rc));
    let (mut a2, mut p2) = (Side::new(&g2, QpType::Rc), Side::new(&peer, QpType::Rc));
    for (a, p) in [(&a1, &p1), (&a2, &p2)] {
        a.connect(Some(p));
        p.connect(Some(a));
    }
    rc_exchange(&mut a1, &mut p1, "before");
    rc_exchange(&mut a2, &mut p2, "before");

    drop(owner);
    // The same QPs keep working: packets to the port reach whichever guest took it over,
    // which routes the other's (RC retransmits what was lost during the handover).
    rc_exchange(&mut a1, &mut p1, "after g1");
    rc_exchange(&mut a2, &mut p2, "after g2");
    let roles = [g1.share_slot(), g2.share_slot()];
    assert!(
        roles == [Some((1, true)), Some((2, false))]
            || roles == [Some((1, false)), Some((2, true))],
        "{roles:?}"
    );
    assert!(!g1.share_dead() && !g2.share_dead());

    // A newcomer joins the new owner in a free slot.
    let g3 = start("127.80.3.3");
    let (slot, owner) = g3.share_slot().unwrap();
    assert!(!owner && slot != 1 && slot != 2, "{slot}");
    let (mut a3, mut p3) = rc_pair(&g3, &peer);
    rc_exchange(&mut a3, &mut p3, "newcomer");
}

#[test]
fn garbage_on_the_unix_socket_and_dying_guests_cost_nothing() {
    let owner = start("127.80.3.5");
    let addr: SocketAddr = owner.local_addr();
    let name = socket_name(addr);
    let raw = || {
        let s =
            socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::SEQPACKET, None).unwrap();
        s.connect(&socket2::SockAddr::unix(&name).unwrap()).unwrap();
        s
    };
    // Garbage as a first message, an unknown tag, a truncated HELLO, an oversized record,
    // a JOIN with a wrong nonce, and a connection that closes before speaking.
    for junk in [
        &b"\xff\xfe\xfd"[..],
        b"XXXXXXXXXXXXXXXXXXXX",
        b"SRH1",
        &[0x41u8; 4000][..],
        b"SRJ1\x01\x00\x00\x00\x00\x00\x00\x00\x00",
    ] {
        let s = raw();
        let _ = s.send(junk);
        let mut buf = [std::mem::MaybeUninit::new(0u8); 64];
        // The owner answers a refusal or closes: never hangs, never panics.
        s.set_read_timeout(Some(WAIT)).unwrap();
        let _ = s.recv(&mut buf);
    }
    drop(raw());
    // A guest that dies right after registering frees its slot.
    let dead = Guest::join(addr, None).unwrap();
    assert_eq!(dead.slot, 1);
    drop(dead);

    // A registered guest speaking garbage on its control connection is dropped; others stay.
    let g = start("127.80.3.5");
    let peer = start("127.80.3.6");
    let (mut a, mut p) = rc_pair(&g, &peer);
    rc_exchange(&mut a, &mut p, "after the garbage");
    assert!(
        counter(&owner, "drop_share_msg") >= 3,
        "{}",
        owner.counters_line()
    );

    // A full slot table is a clear error, and the table frees as guests leave.
    let mut guests = Vec::new();
    let err = loop {
        match Guest::join(addr, None) {
            Ok(g) => guests.push(g),
            Err(e) => break e,
        }
        assert!(guests.len() < 64, "more guests than slots");
    };
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains("slot"), "{err}");
    assert_eq!(guests.len(), MAX_SLOTS - 2, "the owner and `g` hold two");
    assert!(counter(&owner, "share_refused") >= 1);
    drop(guests);
    // Bounded: the owner notices the closed connections on its next round.
    let mut joined = None;
    for _ in 0..500 {
        if let Ok(g) = Guest::join(addr, None) {
            joined = Some(g);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(joined.is_some(), "a slot freed");
    rc_exchange(&mut a, &mut p, "still");
}

/// A guest whose owner exits while the port stays taken by something that does not share
/// it (here a plain UDP socket) can neither take over nor join: it raises DEVICE_FATAL and
/// flushes its QPs, within a bounded time, rather than wait for packets forever.
#[test]
fn a_guest_that_can_neither_take_over_nor_join_dies_loudly() {
    let addr: SocketAddr = "127.80.3.7:4791".parse().unwrap();
    let squatter = std::net::UdpSocket::bind(addr).unwrap();
    // An owner's unix side without its UDP port: the guest registers with it.
    let fake_owner = softroce_emu_driver::share::Owner::start(addr, 0).unwrap();
    let g = start("127.80.3.7");
    assert_eq!(g.share_slot(), Some((1, false)));
    let peer = start("127.80.3.8");
    let (a, _peer_qp) = rc_pair(&g, &peer);
    a.post_recv(64);

    drop(fake_owner);
    let ev = g
        .get_async_event(Some(WAIT))
        .expect("DEVICE_FATAL within the wait");
    assert_eq!(ev.event_type, EventType::DeviceFatal);
    assert!(g.share_dead());
    // The posted receive is flushed, not left waiting.
    let wc = a.completion();
    assert_eq!(wc.status, WcStatus::WrFlushErr, "{wc:?}");
    drop(squatter);
}

/// Listens are per device, as ports are per host: a service one process listens on is
/// refused to the others, and a REQ for a guest's service reaches that guest through the
/// owner, its REP and RTU too, so the connection establishes on both sides.
#[test]
fn listens_are_exclusive_across_processes_and_reqs_reach_the_listening_guest() {
    use softroce_emu_cm::{AcceptParams, CmError, CmEvent, ConnectParams};
    use softroce_wire::{Mtu, PortSpace, Qpn};
    let owner = start("127.80.3.9");
    let g1 = start("127.80.3.9");
    let g2 = start("127.80.3.9");
    let peer = start("127.80.3.10");
    let (x, y) = (
        PortSpace::Tcp.service_id(7001),
        PortSpace::Tcp.service_id(7002),
    );
    owner.cm_listen(x).unwrap();
    assert_eq!(g1.cm_listen(x), Err(CmError::AlreadyListening(x)));
    g1.cm_listen(y).unwrap();
    assert_eq!(owner.cm_listen(y), Err(CmError::AlreadyListening(y)));
    assert_eq!(g2.cm_listen(y), Err(CmError::AlreadyListening(y)));
    // A refused listen leaves nothing behind in the refused process.
    assert!(!g2.with_cm(|cm, _| cm.is_listening(y)));

    let params = ConnectParams {
        ece: Default::default(),
        path: None,
        qp_type: Default::default(),
        remote_gid: Gid::ZERO,
        service_id: y,
        local_qpn: Qpn::new(0x11).unwrap(),
        starting_psn: Psn::new(0x123),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        srq: false,
        flow_control: true,
        private_data: b"to the guest".to_vec(),
    };
    let id = peer.cm_connect(owner.local_addr(), params).unwrap();
    let Some(CmEvent::ConnectRequest {
        id: g_id,
        private_data,
        ..
    }) = g1.cm_get_event(Some(WAIT))
    else {
        panic!("the listening guest gets the request");
    };
    assert_eq!(&private_data[..12], b"to the guest");
    let accept = AcceptParams {
        ece: Default::default(),
        xrc: false,
        local_qpn: Qpn::new(qpn_slot_range(1).start).unwrap(),
        starting_psn: Psn::new(0x456),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        flow_control: true,
        private_data: Vec::new(),
    };
    g1.cm_accept(g_id, accept).unwrap();
    assert!(matches!(
        peer.cm_get_event(Some(WAIT)),
        Some(CmEvent::ConnectResponse { id: i, .. }) if i == id
    ));
    peer.with_cm(|cm, _| cm.send_rtu(id, &[])).unwrap();
    assert_eq!(
        g1.cm_get_event(Some(WAIT)),
        Some(CmEvent::Established { id: g_id })
    );
    // Nobody else saw any of it.
    for d in [&owner, &g2] {
        assert_eq!(d.cm_get_event(Some(Duration::ZERO)), None);
    }
}

/// A guest that stops reading costs the owner only the kernel's socket buffer: what does
/// not fit is dropped and counted, and the owner goes on serving everyone else.
#[test]
fn datagrams_for_a_guest_that_does_not_read_are_dropped_and_counted() {
    use softroce_wire::{BthRepr, DethRepr, ExtRepr, Opcode, Qpn, RoceRepr};
    let owner = start("127.80.3.11");
    let addr = owner.local_addr();
    // Registered, never reading.
    let stalled = Guest::join(addr, None).unwrap();
    let qpn = qpn_slot_range(stalled.slot).start;
    let repr = RoceRepr::new(
        BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::new(qpn).unwrap(), Psn::new(1)),
        ExtRepr {
            deth: Some(DethRepr {
                qkey: 1,
                reserved: 0,
                src_qpn: Qpn::new(0x11).unwrap(),
            }),
            ..ExtRepr::default()
        },
        4000,
    );
    let mut datagram = vec![0u8; repr.buffer_len()];
    repr.emit_with_payload(&[0x5a; 4000], &mut datagram)
        .unwrap();
    let sender = std::net::UdpSocket::bind("127.80.3.12:0").unwrap();
    // Bounded: far more than any default unix socket buffer holds.
    for i in 0..20_000 {
        let _ = sender.send_to(&datagram, addr);
        if i % 500 == 499 {
            std::thread::sleep(Duration::from_millis(5));
            if counter(&owner, "drop_share_queue") > 0 {
                break;
            }
        }
    }
    let mut dropped = 0;
    for _ in 0..500 {
        dropped = counter(&owner, "drop_share_queue");
        if dropped > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(dropped > 0, "{}", owner.counters_line());
    assert!(counter(&owner, "share_forwarded") > 0);
    // The owner still serves others.
    let g = start("127.80.3.11");
    let peer = start("127.80.3.12");
    let (mut a, mut p) = rc_pair(&g, &peer);
    rc_exchange(&mut a, &mut p, "beside a stalled guest");
    drop(stalled);
}

/// An owner that forks (a test suite's worker, a daemon) and then exits: the child does not
/// keep the device's port, registry socket or guest connections, so a guest takes over as
/// when no child was made. (The child held them all: every guest died with "the device's
/// owning process did not answer", and the port stayed taken.)
#[test]
fn a_child_the_owner_forked_does_not_keep_the_device_from_its_guests() {
    let owner = start("127.80.3.9");
    let g1 = start("127.80.3.9");
    let peer = start("127.80.3.10");
    let (mut a1, mut p1) = rc_pair(&g1, &peer);
    rc_exchange(&mut a1, &mut p1, "before the fork");

    // SAFETY: the child only sleeps and exits (async-signal-safe calls).
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        // SAFETY: plain calls in the forked child.
        unsafe {
            libc::sleep(20);
            libc::_exit(0);
        }
    }
    drop(owner);
    rc_exchange(&mut a1, &mut p1, "after the owner left");
    let took_over = g1.share_slot();
    let dead = g1.share_dead();
    // SAFETY: our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    assert_eq!(took_over, Some((1, true)), "the guest owns the port now");
    assert!(!dead);
}

/// A process that opens the device while its owner is gone may win the port; the old
/// guests then come back in their own slots, and a newcomer opening the device meanwhile
/// gets a slot none of them holds (it was given the first free one at once, a surviving
/// guest's, which then found its slot taken and died).
#[test]
fn newcomers_during_a_failover_never_take_a_returning_guests_slot() {
    let owner = start("127.80.3.11");
    let g1 = start("127.80.3.11");
    let g2 = start("127.80.3.11");
    let peer = start("127.80.3.12");
    let (mut a1, mut p1) = rc_pair(&g1, &peer);
    rc_exchange(&mut a1, &mut p1, "before");
    let slots = [g1.share_slot().unwrap().0, g2.share_slot().unwrap().0];

    drop(owner);
    // Opened while the guests are still finding out: either may win the port.
    let n1 = start("127.80.3.11");
    let n2 = start("127.80.3.11");
    rc_exchange(&mut a1, &mut p1, "after");
    assert!(!g1.share_dead() && !g2.share_dead(), "both guests live on");
    assert_eq!(
        [g1.share_slot().unwrap().0, g2.share_slot().unwrap().0],
        slots,
        "in their slots"
    );
    for n in [&n1, &n2] {
        let (slot, _) = n.share_slot().unwrap();
        assert!(
            !slots.contains(&slot),
            "a newcomer in slot {slot} of {slots:?}"
        );
    }
}
