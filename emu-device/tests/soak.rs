//! The seeded soak, short enough for CI: mixed RC operations under 20 % drop, 5 % duplicate,
//! 5 % reorder and 1 % corruption, each message verified exactly once, in order.

use softroce_emu::sim::soak::{SoakConfig, run};

#[test]
fn rc_mixed_ops_survive_a_lossy_duplicating_reordering_corrupting_fabric() {
    let report = run(SoakConfig {
        messages: 2_000,
        ..SoakConfig::default()
    })
    .unwrap();
    assert_eq!(report.messages, 2_000);
    assert_eq!(report.by_op, [500, 500, 500, 500]);
    assert!(report.fabric.dropped > 0 && report.fabric.duplicated > 0);
    assert!(report.fabric.reordered > 0 && report.fabric.corrupted > 0);
    assert!(report.requester.retransmitted_pkts > 0);
    assert!(report.responder.duplicate_request > 0);
}

#[test]
fn the_same_seed_replays_the_same_soak() {
    let cfg = SoakConfig {
        messages: 300,
        seed: 42,
        ..SoakConfig::default()
    };
    assert_eq!(run(cfg).unwrap(), run(cfg).unwrap());
}
