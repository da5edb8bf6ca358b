//! What a peer could otherwise guess (issue 13, finding 9): initial PSNs and a real device's
//! keys and QP numbers come from OS entropy; a device given a seed stays reproducible.

use std::net::IpAddr;

use softroce_emu::core::QpType;
use softroce_emu::driver::DeviceConfig;
use softroce_verbs::Context;

const IP: [u8; 4] = [127, 0, 0, 171];

fn device(seed: Option<u64>) -> Context {
    let mut cfg = DeviceConfig::new("unpredictable", IpAddr::from(IP));
    cfg.hca.udp_port = 0;
    cfg.pcap = None;
    cfg.faults = None;
    if let Some(s) = seed {
        cfg.hca.seed = s;
    }
    Context::open_emulated_with(cfg).expect("device on 127.0.0.171")
}

/// (QPN, PSN) of a fresh RC QP and the rkey of a fresh region.
fn draw(ctx: &Context) -> ((u32, u32), u32) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, None).unwrap();
    let mr = pd.allocate(64).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let ep = qp.endpoint();
    ((ep.qpn, ep.psn), mr.rkey())
}

#[test]
fn initial_psns_are_random_per_qp() {
    let ctx = device(None);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let psns: std::collections::HashSet<u32> = (0..8)
        .map(|_| {
            pd.create_qp(&cq, &cq, QpType::Rc)
                .build()
                .unwrap()
                .endpoint()
                .psn
        })
        .collect();
    // 8 draws of 24 bits: a repeat is a one-in-a-million event, every QP alike is a formula.
    assert!(psns.len() >= 7, "{psns:?}");
    assert!(psns.iter().all(|p| *p <= 0xff_ffff));
}

#[test]
fn real_devices_draw_keys_from_os_entropy() {
    // Same name, address and order of verbs: only the seed can tell the devices apart.
    let a = draw(&device(None));
    let b = draw(&device(None));
    assert_ne!(a.1, b.1, "rkeys of two unseeded devices");
    assert_ne!(a.0.1, b.0.1, "initial PSNs of two unseeded devices");
}

#[test]
fn a_seeded_device_replays_its_keys() {
    let a = draw(&device(Some(42)));
    let b = draw(&device(Some(42)));
    assert_eq!((a.0.0, a.1), (b.0.0, b.1), "QPN and rkey under one seed");
}
