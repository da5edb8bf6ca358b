//! Memory windows through the safe API (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3)):
//! a server opens part of a region to a client with a window, the client writes through the
//! window's key, and the server takes the access back.

use std::time::Duration;

use softroce_verbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, MemoryWindow, MwType, QpType, QueuePair,
    RdmaTarget, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

fn device(ip: &str) -> Context {
    Context::open_emulated("mw", ip.parse().expect("ip"), 0).expect("device")
}

fn one(cq: &CompletionQueue) -> WorkCompletion {
    let wc = cq.poll_wait(1, Duration::from_secs(5)).unwrap();
    assert_eq!(wc.len(), 1, "no completion within 5 s");
    wc[0]
}

/// RDMA WRITE of `data` from the client's `src` to `raddr` with `rkey`: its status.
fn write(
    qp: &QueuePair,
    cq: &CompletionQueue,
    src: &MemoryRegion,
    data: &[u8],
    rkey: u32,
    raddr: u64,
) -> WcStatus {
    src.write(0, data).unwrap();
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite);
    wr.sg_list = vec![src.slice(0..data.len()).unwrap()].into();
    wr.rdma = RdmaTarget {
        remote_addr: raddr,
        rkey,
    };
    // SAFETY: `src` outlives the completion polled here.
    unsafe { qp.post_send(&[wr]).unwrap() };
    one(cq).status
}

#[test]
fn a_window_opens_only_its_range_and_is_taken_back() {
    let (client, server) = (device("127.77.31.1"), device("127.77.31.2"));
    let (pc, ps) = (client.alloc_pd().unwrap(), server.alloc_pd().unwrap());
    let caps = server.query_device().unwrap();
    assert!(caps.max_mw > 0 && caps.device_cap_flags & (1 << 17) != 0);
    let (cc, cs) = (
        client.create_cq(16, None).unwrap(),
        server.create_cq(16, None).unwrap(),
    );
    let connect = || {
        let qc = pc.create_qp(&cc, &cc, QpType::Rc).build().unwrap();
        let qs = ps.create_qp(&cs, &cs, QpType::Rc).build().unwrap();
        let (ec, es) = (qc.endpoint(), qs.endpoint());
        (qc.handshake(es).unwrap(), qs.handshake(ec).unwrap())
    };
    let src = pc.allocate(64).unwrap();
    // The server's region carries no remote rights: only windows open it.
    let region = ps
        .allocate_with(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
        .unwrap();

    // Type 1: bound with ibv_bind_mw to bytes 1024..1280.
    let (qc, qs) = connect();
    let w1 = ps.alloc_mw(MwType::Type1).unwrap();
    let before = w1.rkey();
    // SAFETY: the region outlives the window's binding (the window is dropped first).
    let key = unsafe {
        qs.bind_mw(
            &w1,
            &region,
            1024,
            256,
            AccessFlags::REMOTE_WRITE,
            9,
            SendFlags::SIGNALED,
        )
    }
    .unwrap();
    assert_eq!((key, w1.rkey()), (MemoryWindow::next_rkey(before), key));
    let wc = one(&cs);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (9, WcOpcode::BindMw, WcStatus::Success)
    );
    assert_eq!(
        write(&qc, &cc, &src, b"inside", key, region.addr(1100)),
        WcStatus::Success
    );
    let mut got = [0u8; 6];
    region.read(1100, &mut got).unwrap();
    assert_eq!(&got, b"inside");
    // Inside the region, outside the window: refused, nothing lands.
    assert_eq!(
        write(&qc, &cc, &src, b"beyond", key, region.addr(100)),
        WcStatus::RemAccessErr
    );
    region.read(100, &mut got).unwrap();
    assert_eq!(got, [0; 6]);
    drop(w1);

    // Type 2: bound by posting IBV_WR_BIND_MW, invalidated by the client's SEND_WITH_INV.
    let (qc, qs) = connect();
    let w2 = ps.alloc_mw(MwType::Type2).unwrap();
    let (bind, key2) = w2.bind_wr(
        3,
        &region,
        2048,
        128,
        AccessFlags::REMOTE_WRITE | AccessFlags::ZERO_BASED,
    );
    // SAFETY: the region outlives the window.
    unsafe { qs.post_send(&[bind]).unwrap() };
    assert_eq!(one(&cs).opcode, WcOpcode::BindMw);
    // Zero-based: the remote address is an offset into the window.
    assert_eq!(write(&qc, &cc, &src, b"zero", key2, 8), WcStatus::Success);
    region.read(2056, &mut got[..4]).unwrap();
    assert_eq!(&got[..4], b"zero");
    let inbox = ps.allocate(64).unwrap();
    let mut inv = SendWr::new(4, WrOpcode::SendWithInv);
    inv.sg_list = vec![src.slice(0..4).unwrap()].into();
    inv.invalidate_rkey = key2;
    // SAFETY: both regions outlive the completions polled below.
    unsafe {
        qs.post_receive(&[inbox.slice(0..64).unwrap()], 5).unwrap();
        qc.post_send(&[inv]).unwrap();
    }
    assert_eq!(one(&cc).status, WcStatus::Success);
    let wc = one(&cs);
    assert!(wc.wc_flags.contains(WcFlags::WITH_INV) && wc.imm_data == key2);
    assert_eq!(
        write(&qc, &cc, &src, b"late", key2, 8),
        WcStatus::RemAccessErr
    );
    drop(w2);
}
