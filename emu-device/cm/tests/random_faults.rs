//! Random loss and duplication on every message: a connection is set up exactly once or
//! fails cleanly on both sides, never twice, and nothing is left behind.

mod harness;

use harness::*;
use proptest::prelude::*;
use softroce_emu_cm::CmEvent;

/// splitmix64 for the wire's choices: a run is a function of its seed.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `percent` / 100.
    fn roll(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A wire that drops `loss` % of MADs and duplicates `duplication` % of the rest.
fn random_wire(seed: u64, loss: u64, duplication: u64) -> Chooser {
    let mut dice = Dice(seed);
    Box::new(move |_, _| {
        if dice.roll(loss) {
            Fate::Drop
        } else if dice.roll(duplication) {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    })
}

fn is_failure(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Rejected { .. } | CmEvent::Unreachable { .. })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn connections_come_up_once_or_fail_cleanly(
        seed in any::<u64>(),
        loss in 0u64..=25,
        duplication in 0u64..=30,
        a_seed in any::<u64>(),
        b_seed in any::<u64>(),
    ) {
        let mut pair = Pair::new(a_seed, b_seed);
        pair.chooser = Some(random_wire(seed, loss, duplication));
        let a_id = pair.start_connect();
        pair.run_until(|p| {
            p.a.count(is_established) == 1 && p.b.count(is_established) == 1
                || p.a.count(is_failure) > 0
        });

        let a_up = pair.a.count(is_established);
        let b_up = pair.b.count(is_established);
        prop_assert!(a_up <= 1 && b_up <= 1, "A up {a_up} times, B up {b_up} times");
        prop_assert!(pair.b.count(is_request) <= 1, "B saw {} requests", pair.b.count(is_request));
        prop_assert!(pair.b.cm.connection_count() <= 1);

        if a_up == 1 {
            // Let straggling RTUs and REP retries settle, then hang up.
            pair.run_to(pair.now + std::time::Duration::from_secs(1));
            prop_assert_eq!(pair.b.count(is_established), 1, "A is up, B is not");
            pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
        }
        pair.run();

        prop_assert_eq!(pair.a.count(is_established), a_up);
        prop_assert!(pair.b.count(is_established) <= 1);
        prop_assert!(pair.b.count(is_request) <= 1);
        if a_up == 1 {
            prop_assert_eq!(pair.a.count(is_disconnected), 1);
            prop_assert_eq!(pair.b.count(is_disconnected), 1);
            prop_assert_eq!(pair.a.count(is_timewait_exit), 1);
            prop_assert_eq!(pair.b.count(is_timewait_exit), 1);
        } else {
            prop_assert_eq!(pair.a.count(is_failure), 1);
            prop_assert_eq!(pair.b.count(is_established), 0);
        }
        prop_assert!(pair.is_clean(), "state left behind");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Under heavy loss connections often fail and a side may give up while the other
    /// still retries (the kernel does the same); still no connection comes up twice, the
    /// passive side is never up alone, and hanging up leaves nothing behind.
    #[test]
    fn heavy_loss_never_doubles_a_connection_nor_leaks_one(
        seed in any::<u64>(),
        loss in 40u64..=90,
        duplication in 0u64..=30,
    ) {
        let mut pair = Pair::new(seed, !seed);
        pair.chooser = Some(random_wire(seed, loss, duplication));
        let a_id = pair.start_connect();
        pair.run();
        prop_assert!(pair.a.count(is_established) <= 1);
        prop_assert!(pair.b.count(is_established) <= 1);
        prop_assert!(
            pair.b.count(is_established) == 0 || pair.a.count(is_established) == 1,
            "B is up without A"
        );
        if pair.a.cm.state(a_id).is_some() {
            pair.a.cm.disconnect(pair.now, a_id, &[]).unwrap();
            pair.run();
        }
        prop_assert_eq!(pair.a.cm.connection_count(), 0);
        prop_assert!(pair.a.cm.poll_timeout().is_none() && pair.b.cm.poll_timeout().is_none());
    }
}
