//! Seeded network faults for a real device (and the same spec for the simulator).
//!
//! The compact form, used by `--faults SPEC` and `SOFTROCE_FAULTS=SPEC`, is a comma-separated
//! list of `key=value`: `drop=P`, `dup=P`, `reorder=P`, `corrupt=P` (P a probability 0–1),
//! `delay=MS` (hold every datagram that long), `seed=N`. All randomness comes from the seed, so
//! the same traffic meets the same faults.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::sim::LinkFaults;

/// A parsed fault specification.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultSpec {
    /// Probability a datagram is dropped.
    pub drop: f64,
    /// Probability a datagram is sent twice.
    pub duplicate: f64,
    /// Probability a datagram is held back so later ones overtake it.
    pub reorder: f64,
    /// Probability one random bit is flipped (the ICRC must catch it).
    pub corrupt: f64,
    /// Fixed delay added to every datagram.
    pub delay: Duration,
    /// Seed of every random decision.
    pub seed: u64,
}

/// A spec that does not parse, with the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec at '{part}' (chars {start}..{end}): {reason}")]
pub struct FaultSpecError {
    /// The offending `key=value`.
    pub part: String,
    /// Its start offset in the spec.
    pub start: usize,
    /// Its end offset.
    pub end: usize,
    /// What is wrong.
    pub reason: String,
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut out = Self::default();
        let mut start = 0;
        for part in spec.split(',') {
            let end = start + part.len();
            let err = |reason: String| FaultSpecError {
                part: part.to_string(),
                start,
                end,
                reason,
            };
            let trimmed = part.trim();
            if trimmed.is_empty() {
                start = end + 1;
                continue;
            }
            let Some((key, value)) = trimmed.split_once('=') else {
                return Err(err("expected key=value".into()));
            };
            let prob = |v: &str| -> Result<f64, FaultSpecError> {
                let p: f64 = v
                    .parse()
                    .map_err(|_| err(format!("{v:?} is not a number")))?;
                if (0.0..=1.0).contains(&p) {
                    Ok(p)
                } else {
                    Err(err("probability must be within 0..=1".into()))
                }
            };
            match key.trim() {
                "drop" => out.drop = prob(value)?,
                "dup" | "duplicate" => out.duplicate = prob(value)?,
                "reorder" => out.reorder = prob(value)?,
                "corrupt" => out.corrupt = prob(value)?,
                "delay" => {
                    let ms: f64 = value
                        .parse()
                        .map_err(|_| err(format!("{value:?} is not a number of milliseconds")))?;
                    if !(0.0..=10_000.0).contains(&ms) {
                        return Err(err("delay must be within 0..=10000 ms".into()));
                    }
                    out.delay = Duration::from_secs_f64(ms / 1000.0);
                }
                "seed" => {
                    out.seed = value
                        .parse()
                        .map_err(|_| err(format!("{value:?} is not an unsigned integer")))?
                }
                other => {
                    return Err(err(format!(
                        "unknown key {other:?} (known: drop, dup, reorder, corrupt, delay, seed)"
                    )));
                }
            }
            start = end + 1;
        }
        Ok(out)
    }
}

impl FaultSpec {
    /// The same faults for the in-memory simulator.
    pub fn link_faults(&self) -> LinkFaults {
        LinkFaults {
            drop: self.drop,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_delay: Duration::from_micros(500).max(self.delay),
            corrupt: self.corrupt,
        }
    }
}

/// What an injector did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultCounters {
    /// Datagrams seen.
    pub seen: u64,
    /// Dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Held back to be overtaken.
    pub reordered: u64,
    /// Bit-flipped.
    pub corrupted: u64,
}

impl fmt::Display for FaultCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected: seen={} dropped={} duplicated={} reordered={} corrupted={}",
            self.seen, self.dropped, self.duplicated, self.reordered, self.corrupted
        )
    }
}

/// Applies a [`FaultSpec`] to outgoing datagrams; sans-IO (time comes in as arguments).
#[derive(Debug)]
pub struct FaultInjector {
    spec: FaultSpec,
    rng: ChaCha8Rng,
    held: Vec<(Instant, SocketAddr, Vec<u8>)>,
    counters: FaultCounters,
}

impl FaultInjector {
    /// An injector for `spec`.
    pub fn new(spec: FaultSpec) -> Self {
        Self {
            spec,
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
            held: Vec::new(),
            counters: FaultCounters::default(),
        }
    }

    /// What was injected so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// Decide the fate of one datagram: returns the copies to send now (possibly none);
    /// held ones come out of [`FaultInjector::release`].
    pub fn process(
        &mut self,
        now: Instant,
        dst: SocketAddr,
        data: Vec<u8>,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        self.counters.seen += 1;
        let s = self.spec;
        if s.drop > 0.0 && self.rng.gen_bool(s.drop) {
            self.counters.dropped += 1;
            return;
        }
        let mut data = data;
        if s.corrupt > 0.0 && !data.is_empty() && self.rng.gen_bool(s.corrupt) {
            let bit = self.rng.gen_range(0..data.len() * 8);
            data[bit / 8] ^= 1 << (bit % 8);
            self.counters.corrupted += 1;
        }
        let copies = if s.duplicate > 0.0 && self.rng.gen_bool(s.duplicate) {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        let mut at = now + s.delay;
        if s.reorder > 0.0 && self.rng.gen_bool(s.reorder) {
            self.counters.reordered += 1;
            at += Duration::from_micros(self.rng.gen_range(100..=1000));
        }
        for i in 0..copies {
            let d = if i + 1 == copies {
                std::mem::take(&mut data)
            } else {
                data.clone()
            };
            if at > now {
                self.held.push((at, dst, d));
            } else {
                out.push((dst, d));
            }
        }
    }

    /// Datagrams whose hold time has passed.
    pub fn release(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].0 <= now {
                let (_, dst, d) = self.held.swap_remove(i);
                out.push((dst, d));
            } else {
                i += 1;
            }
        }
    }

    /// When the next held datagram is due.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.0).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_spec_parses() {
        let s: FaultSpec = "drop=0.2,dup=0.05,reorder=0.05,corrupt=0.01,delay=3,seed=9"
            .parse()
            .unwrap();
        assert_eq!(
            (s.drop, s.duplicate, s.reorder, s.corrupt),
            (0.2, 0.05, 0.05, 0.01)
        );
        assert_eq!((s.delay, s.seed), (Duration::from_millis(3), 9));
    }

    #[test]
    fn errors_point_at_the_bad_part() {
        let e = "drop=0.1,dup=1.5".parse::<FaultSpec>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad fault spec at 'dup=1.5' (chars 9..16): probability must be within 0..=1"
        );
        let e = "drop=0.1,jitter=2".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("unknown key \"jitter\""), "{e}");
        let e = "drop".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("expected key=value"), "{e}");
        let e = "seed=-1".parse::<FaultSpec>().unwrap_err();
        assert!(e.to_string().contains("not an unsigned integer"), "{e}");
    }

    #[test]
    fn drop_rate_is_near_the_probability_and_replays_from_the_seed() {
        let run = || {
            let mut inj = FaultInjector::new("drop=0.2,seed=5".parse().unwrap());
            let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
            let now = Instant::now();
            let mut out = Vec::new();
            for _ in 0..20_000 {
                inj.process(now, dst, vec![1, 2, 3], &mut out);
            }
            (inj.counters(), out.len())
        };
        let (c, sent) = run();
        assert!((3_600..4_400).contains(&c.dropped), "{c}");
        assert_eq!(sent as u64, 20_000 - c.dropped);
        assert_eq!(run(), (c, sent));
    }

    #[test]
    fn delayed_datagrams_come_out_when_due() {
        let mut inj = FaultInjector::new("delay=2".parse().unwrap());
        let dst: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let now = Instant::now();
        let mut out = Vec::new();
        inj.process(now, dst, vec![9], &mut out);
        assert!(out.is_empty());
        assert_eq!(inj.next_release(), Some(now + Duration::from_millis(2)));
        inj.release(now + Duration::from_millis(1), &mut out);
        assert!(out.is_empty());
        inj.release(now + Duration::from_millis(2), &mut out);
        assert_eq!(out, vec![(dst, vec![9])]);
    }
}
