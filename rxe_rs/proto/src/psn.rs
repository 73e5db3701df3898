//! Packet sequence numbers: 24-bit, compared modulo 2^24 (IBA 9.7.1).
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

/// PSNs and MSNs are 24 bits wide.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The PSN `value mod 2^24`.
    pub const fn new(value: u32) -> Self {
        Self(value & PSN_MASK)
    }

    /// The raw 24-bit value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Self::new(self.0.wrapping_add(n))
    }

    /// The signed distance `self - other` in the window of +-2^23: positive when `self` is
    /// later than `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// `self` comes strictly before `other`.
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
}

#[cfg(test)]
mod tests {
    use super::Psn;

    #[test]
    fn arithmetic_wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).add(1), Psn::new(0));
        assert_eq!(Psn::new(0x1_000_005).get(), 5);
        assert_eq!(Psn::new(0).diff(Psn::new(0xff_ffff)), 1);
        assert_eq!(Psn::new(0xff_ffff).diff(Psn::new(0)), -1);
        assert_eq!(Psn::new(10).diff(Psn::new(3)), 7);
        assert!(Psn::new(0xff_fff0).before(Psn::new(0x10)));
        assert!(!Psn::new(0x10).before(Psn::new(0xff_fff0)));
        assert!(!Psn::new(7).before(Psn::new(7)));
    }

    #[test]
    fn half_window_is_the_boundary() {
        let a = Psn::new(0);
        assert_eq!(Psn::new(0x7f_ffff).diff(a), 0x7f_ffff);
        assert_eq!(Psn::new(0x80_0000).diff(a), -0x80_0000);
    }
}
