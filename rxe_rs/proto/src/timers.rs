//! The two RC timers' values (IBA 9.7.6.1.3 and table 45).
#![deny(clippy::arithmetic_side_effects)]

/// The local ACK timeout for the QP attribute `timeout` (0..=31): 4.096 us * 2^timeout, in
/// nanoseconds; `None` for 0, which means "wait forever".
pub const fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        None
    } else {
        Some(4096u64 << (timeout & 31))
    }
}

/// Minimum RNR NAK timer values, in nanoseconds, by 5-bit code (IBA table 45).
const RNR_TIMER_NS: [u64; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// How long a requester waits after an RNR NAK carrying `code`.
pub const fn rnr_delay_ns(code: u8) -> u64 {
    RNR_TIMER_NS[(code & 31) as usize]
}

/// `retry_cnt` and `rnr_retry` of 7 mean "retry forever".
pub const RETRY_FOREVER: u8 = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_doubles_per_step() {
        assert_eq!(ack_timeout_ns(0), None);
        assert_eq!(ack_timeout_ns(1), Some(8192));
        assert_eq!(
            ack_timeout_ns(14),
            Some(67_108_864),
            "~67 ms, perftest's default"
        );
        assert_eq!(ack_timeout_ns(31), Some(4096 << 31));
    }

    #[test]
    fn rnr_table_matches_the_iba() {
        assert_eq!(rnr_delay_ns(0), 655_360_000);
        assert_eq!(rnr_delay_ns(1), 10_000);
        assert_eq!(rnr_delay_ns(12), 640_000, "ibv_rc_pingpong's min_rnr_timer");
        assert_eq!(rnr_delay_ns(31), 491_520_000);
        // Monotonic after the special code 0.
        assert!(RNR_TIMER_NS[1..].windows(2).all(|w| w[0] < w[1]));
    }
}
