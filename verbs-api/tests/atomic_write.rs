//! RDMA ATOMIC WRITE through the safe API (`WrOpcode::AtomicWrite`, verbs.h's
//! `IBV_WR_ATOMIC_WRITE`): a client publishes an 8-byte value into a server's region in one
//! atomic store, on the simulator; the device says it can (`device_cap_flags_ex`).

use std::time::Duration;

use softroce_verbs::sim::Fabric;
use softroce_verbs::{
    DEVICE_ATOMIC_WRITE, QpType, RdmaTarget, SendWr, WcOpcode, WcStatus, WrOpcode,
};

#[test]
fn a_client_publishes_eight_bytes_into_a_server_region_with_one_atomic_write() {
    let fabric = Fabric::new(11);
    let client = fabric
        .device("client", "10.0.0.1".parse().unwrap())
        .unwrap();
    let server = fabric
        .device("server", "10.0.0.2".parse().unwrap())
        .unwrap();
    let caps = client.query_device().unwrap();
    assert_ne!(caps.device_cap_flags_ex & DEVICE_ATOMIC_WRITE, 0);
    let (pc, ps) = (client.alloc_pd().unwrap(), server.alloc_pd().unwrap());
    let (cc, cs) = (
        client.create_cq(8, None).unwrap(),
        server.create_cq(8, None).unwrap(),
    );
    let qc = pc.create_qp(&cc, &cc, QpType::Rc).build().unwrap();
    let qs = ps.create_qp(&cs, &cs, QpType::Rc).build().unwrap();
    let (ec, es) = (qc.endpoint(), qs.endpoint());
    let (qc, _qs) = (qc.handshake(es).unwrap(), qs.handshake(ec).unwrap());
    let (src, board) = (pc.allocate(8).unwrap(), ps.allocate(64).unwrap());

    src.write(0, &0xFEED_F00D_u64.to_ne_bytes()).unwrap();
    let mut wr = SendWr::new(5, WrOpcode::AtomicWrite);
    wr.sg_list = vec![src.slice(0..8).unwrap()].into();
    wr.rdma = RdmaTarget {
        remote_addr: board.addr(16),
        rkey: board.rkey(),
    };
    // SAFETY: `src` outlives the completion polled below.
    unsafe { qc.post_send(&[wr]).unwrap() };
    let wc = cc.poll_wait(1, Duration::from_secs(1)).unwrap()[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::AtomicWrite, 8)
    );
    let mut seen = [0u8; 8];
    board.read(16, &mut seen).unwrap();
    assert_eq!(u64::from_ne_bytes(seen), 0xFEED_F00D);
}
