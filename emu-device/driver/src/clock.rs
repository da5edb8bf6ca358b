//! The clock of a driven device: its raw clock ([`Hca::clock`](softroce_emu_core::Hca::clock))
//! counts nanoseconds of CLOCK_MONOTONIC, so timestamps of every device and process on the
//! host compare, and a program may read the clock itself with `clock_gettime`.

use std::time::{Duration, Instant};

/// The instant CLOCK_MONOTONIC reads 0, for [`HcaConfig::clock_epoch`](softroce_emu_core::HcaConfig::clock_epoch).
/// `Instant` is CLOCK_MONOTONIC on Linux, so the two readings differ only by the time
/// between them.
pub fn monotonic_epoch() -> Instant {
    let now = Instant::now();
    now.checked_sub(read(libc::CLOCK_MONOTONIC)).unwrap_or(now)
}

/// A raw clock value (`ibv_wc_read_completion_ts`) as wall-clock nanoseconds since the Unix
/// epoch (`ibv_wc_read_completion_wallclock_ns`): shifted by how far CLOCK_REALTIME is
/// ahead of CLOCK_MONOTONIC now (a wall clock set since moves old timestamps with it).
pub fn wallclock_ns(raw: u64) -> u64 {
    let mono = read(libc::CLOCK_MONOTONIC).as_nanos();
    let real = read(libc::CLOCK_REALTIME).as_nanos();
    let shifted = i128::from(raw) + (real as i128 - mono as i128);
    u64::try_from(shifted.max(0)).unwrap_or(u64::MAX)
}

fn read(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out pointer; these clocks cannot fail on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}
