//! 24-bit sequence and queue-pair numbers.
//!
//! IBTA packet sequence numbers (PSN), message sequence numbers (MSN) and queue pair numbers
//! (QPN) are 24-bit fields. PSN and MSN arithmetic wraps modulo 2^24; comparison is only
//! meaningful inside half the space (2^23), the window IBTA allows outstanding.

use core::fmt;

/// Mask of a 24-bit field.
pub const MASK_24: u32 = 0x00FF_FFFF;

/// Half of the 24-bit space: the largest distance at which PSN order is defined.
pub const HALF_WINDOW: u32 = 1 << 23;

/// A 24-bit packet sequence number with wrapping arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The largest PSN value.
    pub const MAX: Self = Self(MASK_24);

    /// Build a PSN from the low 24 bits of `value` (higher bits are discarded, as on the wire).
    pub const fn new(value: u32) -> Self {
        Self(value & MASK_24)
    }

    /// Build a PSN, refusing values that do not fit in 24 bits.
    pub const fn try_new(value: u32) -> Option<Self> {
        if value > MASK_24 {
            None
        } else {
            Some(Self(value))
        }
    }

    /// The numeric value (always < 2^24).
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Self(self.0.wrapping_add(n) & MASK_24)
    }

    /// `self - n` modulo 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Self {
        Self(self.0.wrapping_sub(n) & MASK_24)
    }

    /// The next PSN.
    #[must_use]
    pub const fn next(self) -> Self {
        self.add(1)
    }

    /// Signed distance `self - other` interpreted in the 24-bit window: positive when `self`
    /// is after `other` (rxe's `psn_compare`: `(s32)((a - b) << 8)`).
    pub const fn diff(self, other: Self) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Forward distance from `other` to `self` modulo 2^24 (how many increments of `other`
    /// reach `self`).
    pub const fn distance_from(self, other: Self) -> u32 {
        self.0.wrapping_sub(other.0) & MASK_24
    }

    /// `self` is strictly before `other` in the window.
    pub const fn is_before(self, other: Self) -> bool {
        self.diff(other) < 0
    }

    /// `self` is strictly after `other` in the window.
    pub const fn is_after(self, other: Self) -> bool {
        self.diff(other) > 0
    }

    /// `self` lies in the half-open range `[start, start + len)` modulo 2^24.
    pub const fn in_range(self, start: Self, len: u32) -> bool {
        self.distance_from(start) < len
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 24-bit message sequence number (carried in the AETH), wrapping like a PSN.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Msn(u32);

impl Msn {
    /// Build an MSN from the low 24 bits of `value`.
    pub const fn new(value: u32) -> Self {
        Self(value & MASK_24)
    }

    /// The numeric value (always < 2^24).
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The next MSN.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.wrapping_add(1) & MASK_24)
    }

    /// Signed distance `self - other` in the 24-bit window.
    pub const fn diff(self, other: Self) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }
}

impl fmt::Debug for Msn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Msn({})", self.0)
    }
}

impl fmt::Display for Msn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 24-bit queue pair number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Qpn(u32);

impl Qpn {
    /// QP0, the subnet management QP (not used on RoCE).
    pub const SMI: Self = Self(0);
    /// QP1, the general services interface QP that carries CM MADs.
    pub const GSI: Self = Self(1);
    /// The largest QPN.
    pub const MAX: Self = Self(MASK_24);
    /// The multicast QPN (all ones).
    pub const MULTICAST: Self = Self(MASK_24);

    /// Build a QPN, refusing values that do not fit in 24 bits.
    pub const fn new(value: u32) -> Option<Self> {
        if value > MASK_24 {
            None
        } else {
            Some(Self(value))
        }
    }

    /// Build a QPN from the low 24 bits of `value` (as read from a 24-bit wire field).
    pub const fn from_wire(value: u32) -> Self {
        Self(value & MASK_24)
    }

    /// The numeric value (always < 2^24).
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Qpn({:#x})", self.0)
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn psn_wraps_at_24_bits() {
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0x0100_0005), Psn::new(5));
        assert_eq!(Psn::try_new(0x0100_0000), None);
    }

    #[test]
    fn psn_order_across_the_wrap() {
        let before = Psn::new(0xFF_FFF0);
        let after = Psn::new(0x10);
        assert!(before.is_before(after));
        assert!(after.is_after(before));
        assert_eq!(after.diff(before), 0x20);
        assert_eq!(after.distance_from(before), 0x20);
        assert!(after.in_range(before, 0x21));
        assert!(!after.in_range(before, 0x20));
    }

    #[test]
    fn qpn_rejects_more_than_24_bits() {
        assert_eq!(Qpn::new(0x0100_0000), None);
        assert_eq!(Qpn::new(0x11).map(Qpn::value), Some(0x11));
        assert_eq!(
            Qpn::from_wire(0xAB00_0011),
            Qpn::new(0x11).unwrap_or_default()
        );
    }

    proptest! {
        #[test]
        fn psn_add_then_sub_is_identity(start in 0u32..=MASK_24, n in 0u32..=MASK_24) {
            let p = Psn::new(start);
            prop_assert_eq!(p.add(n).sub(n), p);
            prop_assert_eq!(p.add(n).distance_from(p), n);
        }

        #[test]
        fn psn_diff_is_antisymmetric_inside_the_window(start in 0u32..=MASK_24, n in 1u32..HALF_WINDOW) {
            let a = Psn::new(start);
            let b = a.add(n);
            prop_assert_eq!(b.diff(a), n as i32);
            prop_assert_eq!(a.diff(b), -(n as i32));
            prop_assert!(a.is_before(b));
        }
    }
}
