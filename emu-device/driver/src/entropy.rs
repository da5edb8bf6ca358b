//! Unpredictable numbers from the OS, for what a peer must not guess: a real device's key
//! seed (lkeys, rkeys, initial QPNs) and initial PSNs. The core and the simulator take their
//! seeds as arguments and stay deterministic; only real devices draw from here.

/// A random `u64` from the kernel (`getrandom(2)`), or, should that fail (a seccomp filter,
/// an ancient kernel), from std's per-process random hash keys, which are OS entropy too.
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: writes at most `buf.len()` bytes into `buf`, which lives across the call.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == buf.len() as isize {
        return u64::from_ne_bytes(buf);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_differ() {
        // Eight draws of 64 bits colliding would mean a constant, not bad luck.
        let draws: std::collections::HashSet<u64> = (0..8).map(|_| super::random_u64()).collect();
        assert_eq!(draws.len(), 8);
    }
}
