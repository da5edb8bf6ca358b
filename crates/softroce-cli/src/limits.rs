//! Ranges of the numeric arguments, from what the emulated device reports (`softroce
//! devinfo`) and from sanity, checked by clap: a value out of range is a usage error (exit
//! status 2) naming the argument and the range, never a panic, an abort or a wrapped number.

use std::ops::RangeInclusive;

use clap::builder::RangedU64ValueParser;

/// The device's largest message (`max_msg_sz`, 8 MiB).
pub(crate) const MAX_MSG_SZ: u64 = 0x80_0000;
/// The device's deepest work queue (`max_qp_wr`; `max_srq_wr` is the same).
pub(crate) const MAX_QP_WR: u64 = 0x4000;
/// The device's largest CQ (`max_cqe`).
pub(crate) const MAX_CQE: u64 = softroce_emu::core::MAX_CQE as u64;
/// The IBTA's largest message, 2^31 bytes: the bound for a size that only filters.
pub(crate) const IBTA_MAX_MSG: u64 = 1 << 31;
/// The longest timeout: a day. Longer is a typo, and `Instant` arithmetic overflows near
/// `u64::MAX` seconds.
pub(crate) const MAX_TIMEOUT_SECS: u64 = 86_400;
/// The most iterations or messages: a billion, days of work on loopback.
pub(crate) const MAX_ITERS: u64 = 1_000_000_000;
/// The path MTUs the IBTA defines.
pub(crate) const MTUS: [usize; 5] = [256, 512, 1024, 2048, 4096];

/// The RC local ACK timeout exponent a command uses unless `--qp-timeout` says: rdma-core's
/// 14 (67 ms), or 10 (4 ms) when faults are injected (`faults`), where every loss no NAK
/// reports (a lost NAK, a lost resend, a lost last packet) waits out one timeout.
pub(crate) fn default_qp_timeout(faults: bool) -> u8 {
    if faults { 10 } else { 14 }
}

/// Whether `SOFTROCE_FAULTS` asks the device for faults.
pub(crate) fn faults_from_env() -> bool {
    std::env::var("SOFTROCE_FAULTS").is_ok_and(|f| !f.is_empty())
}

/// A clap parser for an integer of type `T` within `range`.
pub(crate) fn ranged<T>(range: RangeInclusive<u64>) -> RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    RangedU64ValueParser::<T>::new().range(range)
}

/// A path MTU in bytes: one of [`MTUS`].
pub(crate) fn mtu(s: &str) -> Result<usize, String> {
    let v: usize = s.parse().map_err(|e| format!("{e}"))?;
    if MTUS.contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not 256, 512, 1024, 2048 or 4096"))
    }
}

/// A probability in 0..=1.
pub(crate) fn probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability in 0..=1"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softroce_verbs::Context;

    #[test]
    fn the_limits_are_what_the_device_reports() {
        let ctx = Context::open_emulated("limits", "127.0.0.1".parse().unwrap(), 0).unwrap();
        let a = ctx.query_device().unwrap();
        let p = ctx.query_port(1).unwrap();
        assert_eq!(u64::from(p.max_msg_sz), MAX_MSG_SZ);
        assert_eq!(u64::from(a.max_qp_wr), MAX_QP_WR);
        assert_eq!(u64::from(a.max_srq_wr), MAX_QP_WR);
        assert_eq!(u64::from(a.max_cqe), MAX_CQE);
        assert_eq!(p.max_mtu.bytes(), *MTUS.last().unwrap());
    }

    #[test]
    fn mtus_and_probabilities_parse_with_reasons() {
        assert_eq!(mtu("1024"), Ok(1024));
        assert!(mtu("1000").unwrap_err().contains("not 256, 512"));
        assert!(mtu("99999999999999999999").is_err());
        assert_eq!(probability("0.5"), Ok(0.5));
        assert!(probability("1.5").unwrap_err().contains("0..=1"));
        assert!(probability("NaN").is_err());
    }
}
