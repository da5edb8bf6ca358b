//! A device shared by several processes: each process's core hands out QPNs only from its
//! slot's range and its CM only communication IDs carrying its slot, so the process on the
//! device's port routes by either alone (`driver::share`).

use std::time::Instant;

use softroce_emu::cm::{CmConfig, CmEndpoint, ConnectParams, comm_id_slot};
use softroce_emu::core::*;
use softroce_wire::{Gid, Mtu, PortSpace, Psn, Qpn};

fn qpns(slot: Option<u8>, n: usize) -> Vec<u32> {
    let mut cfg = HcaConfig::new("slots", "127.80.4.1".parse().unwrap());
    cfg.qpn_slot = slot;
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let (cq, _) = hca.create_cq(4, None, 0, 0).unwrap();
    (0..n)
        .map(|_| {
            let init = QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap::new(1, 1),
                qp_type: QpType::Ud,
                sq_sig_all: false,
                qp_context: 0,
            };
            hca.create_qp(pd, init).unwrap().1.value()
        })
        .collect()
}

#[test]
fn qpns_stay_in_their_slots_range() {
    for slot in [0u8, 1, 7, 63] {
        let range = qpn_slot_range(slot);
        for q in qpns(Some(slot), 50) {
            assert!(range.contains(&q), "slot {slot}: {q:#x}");
            assert_eq!(qpn_slot(q), slot);
            assert!(q > 1 && q != 0xFF_FFFF, "{q:#x}");
        }
    }
    // Alone, the whole space as before (rxe's first QPN).
    assert_eq!(qpns(None, 1), vec![0x11]);
    assert_eq!(MAX_SLOTS, 64);
}

#[test]
fn comm_ids_carry_the_slot() {
    for slot in [0u8, 5, 63] {
        let mut cfg = CmConfig::new(Gid::from_ip("127.80.4.1".parse().unwrap()), 1, 9);
        cfg.id_slot = Some(slot);
        let mut cm = CmEndpoint::new(cfg);
        for i in 0..20 {
            let id = cm
                .connect(
                    Instant::now(),
                    ConnectParams {
                        ece: Default::default(),
                        path: None,
                        qp_type: Default::default(),
                        remote_gid: Gid::from_ip("127.80.4.2".parse().unwrap()),
                        service_id: PortSpace::Tcp.service_id(7471),
                        local_qpn: Qpn::new(0x11 + i).unwrap(),
                        starting_psn: Psn::new(1),
                        responder_resources: 1,
                        initiator_depth: 1,
                        retry_count: 7,
                        rnr_retry_count: 7,
                        path_mtu: Mtu::Mtu1024,
                        srq: false,
                        flow_control: true,
                        private_data: Vec::new(),
                    },
                )
                .unwrap();
            assert_eq!(comm_id_slot(id.0), slot, "{:#x}", id.0);
            assert_ne!(id.0, 0);
        }
    }
}
