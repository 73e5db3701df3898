//! The requester's estimate of the round trip, which keeps the retransmission timer from
//! firing before an ACK could have come back.
//!
//! The QP's `timeout` attribute is a fixed guess made by the application: perftest and
//! `ibv_rc_pingpong` ask for 67 ms (14), some tests for 17 ms (12). Where the round trip is
//! longer, on a loaded host or between VMs whose vCPUs wait their turn, every wait ends before
//! the ACK arrives: the requester resends a window that arrived, the responder must acknowledge
//! each duplicate, and its ACKs come later still. Between two TCG VMs that was 653 timeouts in
//! a 6 MiB `ibv_rc_pingpong` and about 2600 in a 3 MiB lossy-link exchange, nearly all of them
//! spurious. So the wait is never shorter than what the round trip measured suggests: the
//! smoothed round trip plus four times its mean deviation (RFC 6298's estimator, with its
//! gains of 1/8 and 1/4), capped at [`MAX_ESTIMATE_NS`] so a peer that died is still found in
//! about `retry_cnt` times that. Samples follow Karn's rule: only a packet sent once is timed,
//! and a resend drops the packet being timed (its ACK could answer either copy).
#![deny(clippy::arithmetic_side_effects)]

use super::psn::Psn;

/// The estimate never makes the wait longer than this (2^31 ns, about `timeout` 19's 2.1 s).
pub const MAX_ESTIMATE_NS: u64 = 1 << 31;

/// Round-trip samples of a requester, and the wait they suggest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// The packet being timed: its PSN and when it was sent (ns).
    timing: Option<(Psn, u64)>,
    /// The smoothed round trip (ns); `None` before the first sample.
    srtt_ns: Option<u64>,
    /// Its smoothed mean deviation (ns).
    rttvar_ns: u64,
}

impl RttEstimator {
    /// The packet at `psn` was sent for the first time, at `now_ns()`: timed unless another
    /// is. (The clock is read only when a sample starts or ends: not once per packet.)
    pub fn on_first_send(&mut self, psn: Psn, now_ns: impl FnOnce() -> u64) {
        if self.timing.is_none() {
            self.timing = Some((psn, now_ns()));
        }
    }

    /// Something is sent again: the packet being timed may be among it, or its ACK may have
    /// been lost, so its round trip would not be one.
    pub fn on_resend(&mut self) {
        self.timing = None;
    }

    /// The packets from `psn` on are sent again: the timing stops if the packet timed is
    /// among them (its ACK could answer either copy). One before them was sent once, and the
    /// first response that covers it comes no earlier than its own round trip. (Dropping the
    /// timing at every resend would drop exactly the long samples when a tail-loss probe
    /// fires after two round trips: the estimate could then never grow.)
    pub fn on_resend_from(&mut self, psn: Psn) {
        if self.timing.is_some_and(|(timed, _)| timed.diff(psn) >= 0) {
            self.timing = None;
        }
    }

    /// Everything before `acked` is acknowledged, at `now_ns()`: a sample if that covers the
    /// packet being timed.
    pub fn on_acked(&mut self, acked: Psn, now_ns: impl FnOnce() -> u64) {
        let Some((psn, sent_ns)) = self.timing else {
            return;
        };
        if acked.diff(psn) <= 0 {
            return;
        }
        self.timing = None;
        let now_ns = now_ns();
        // A clock that went backwards gives no sample (the kernel's is monotonic; this is
        // arithmetic that cannot wrap).
        let Some(sample) = now_ns.checked_sub(sent_ns) else {
            return;
        };
        let sample = sample.min(MAX_ESTIMATE_NS);
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(sample);
                self.rttvar_ns = sample / 2;
            }
            Some(srtt) => {
                // Both stay at most MAX_ESTIMATE_NS: weighted means of values that are (so
                // nothing saturates).
                let var = self.rttvar_ns.saturating_mul(3);
                self.rttvar_ns = var.saturating_add(srtt.abs_diff(sample)) / 4;
                self.srtt_ns = Some(srtt.saturating_mul(7).saturating_add(sample) / 8);
            }
        }
    }

    /// The smoothed round trip (ns); `None` before the first sample.
    pub fn srtt_ns(&self) -> Option<u64> {
        self.srtt_ns
    }

    /// The shortest wait for an ACK the samples suggest (ns), at most [`MAX_ESTIMATE_NS`];
    /// 0 before the first.
    pub fn min_wait_ns(&self) -> u64 {
        self.srtt_ns.map_or(0, |srtt| {
            srtt.saturating_add(self.rttvar_ns.saturating_mul(4))
                .min(MAX_ESTIMATE_NS)
        })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data, built from small constants
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn timed(e: &mut RttEstimator, psn: u32, sent: u64, acked_at: u64) {
        e.on_first_send(Psn::new(psn), || sent);
        e.on_acked(Psn::new(psn + 1), || acked_at);
    }

    /// `n` packets a second apart, each acknowledged `rtt` after it was sent.
    fn steady(e: &mut RttEstimator, n: u32, rtt: u64) {
        for i in 0..n {
            let sent = u64::from(i) * 1000 * MS;
            timed(e, i, sent, sent + rtt);
        }
    }

    #[test]
    fn no_sample_no_floor() {
        assert_eq!(RttEstimator::default().min_wait_ns(), 0);
    }

    #[test]
    fn the_first_sample_sets_a_wait_of_three_round_trips() {
        let mut e = RttEstimator::default();
        timed(&mut e, 0, 0, 100 * MS);
        assert_eq!(e.min_wait_ns(), 300 * MS, "R + 4 * R/2");
    }

    #[test]
    fn steady_round_trips_converge_on_them() {
        let mut e = RttEstimator::default();
        steady(&mut e, 100, 10 * MS);
        let w = e.min_wait_ns();
        assert!((10 * MS..11 * MS).contains(&w), "{w}");
    }

    #[test]
    fn a_slow_round_trip_raises_the_wait_at_once() {
        let mut e = RttEstimator::default();
        steady(&mut e, 50, MS);
        timed(&mut e, 50, 50_000 * MS, 50_000 * MS + 200 * MS);
        assert!(e.min_wait_ns() > 200 * MS, "{}", e.min_wait_ns());
    }

    #[test]
    fn only_the_timed_packet_is_sampled_and_only_once() {
        let mut e = RttEstimator::default();
        e.on_first_send(Psn::new(10), || 0);
        e.on_first_send(Psn::new(11), || 5 * MS); // not timed: 10 is
        e.on_acked(Psn::new(10), || 7 * MS); // 10 itself not acknowledged yet
        assert_eq!(e.min_wait_ns(), 0);
        e.on_acked(Psn::new(12), || 8 * MS);
        assert_eq!(e.min_wait_ns(), 24 * MS, "timed from 10's send");
        e.on_acked(Psn::new(13), || 500 * MS);
        assert_eq!(e.min_wait_ns(), 24 * MS, "no packet was being timed");
    }

    #[test]
    fn a_resend_drops_the_timing() {
        let mut e = RttEstimator::default();
        e.on_first_send(Psn::new(0), || 0);
        e.on_resend();
        e.on_acked(Psn::new(1), || 900 * MS);
        assert_eq!(e.min_wait_ns(), 0, "Karn: that ACK may answer the copy");
    }

    #[test]
    fn a_resend_after_the_packet_timed_keeps_its_timing() {
        let mut e = RttEstimator::default();
        e.on_first_send(Psn::new(5), || 0);
        e.on_resend_from(Psn::new(9));
        e.on_acked(Psn::new(6), || 100 * MS);
        assert_eq!(e.min_wait_ns(), 300 * MS, "sampled");
        let mut e = RttEstimator::default();
        e.on_first_send(Psn::new(5), || 0);
        e.on_resend_from(Psn::new(5));
        e.on_acked(Psn::new(6), || 900 * MS);
        assert_eq!(e.min_wait_ns(), 0, "the packet timed went again");
    }

    #[test]
    fn across_the_psn_wrap() {
        let mut e = RttEstimator::default();
        e.on_first_send(Psn::new(0xff_ffff), || 0);
        e.on_acked(Psn::new(0), || 2 * MS);
        assert_eq!(e.min_wait_ns(), 6 * MS);
    }

    #[test]
    fn hostile_clock_values_neither_wrap_nor_exceed_the_cap() {
        let mut e = RttEstimator::default();
        e.on_first_send(Psn::new(0), || 50);
        e.on_acked(Psn::new(1), || 10); // backwards
        assert_eq!(e.min_wait_ns(), 0);
        for i in 0..10 {
            timed(&mut e, i, 0, u64::MAX);
        }
        assert_eq!(e.min_wait_ns(), MAX_ESTIMATE_NS);
    }
}
