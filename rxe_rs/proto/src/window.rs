//! How many packets the requester may have unacknowledged, and how long it waits for an ACK.
//!
//! Normally the window is [`WINDOW_BYTES`] of packets at the QP's path MTU past the last
//! acknowledged PSN: 512 packets at 1024 bytes (and below), 128 at 4096 (rdma_rxe's fixed 128 packets hold
//! 128 KiB at a 1500-byte link's MTU of 1024, which between TCG VMs capped a SEND stream at
//! 11 MB/s, where 512 moved 16-18; 512 packets of 4096 bytes overran the receivers, 31854
//! datagrams lost in one `make bench` run). After a
//! retransmission timeout the requester sends a single packet and waits for its ACK before
//! opening the window again, doubling it per acknowledgement; each further timeout without
//! progress doubles the wait, up to 2^[`MAX_BACKOFF`] times the QP's `timeout`; and the wait
//! is never shorter than the round trips measured suggest ([`RttEstimator`]). Resending a
//! full window every `timeout` to a receiver that is slow rather than lossy floods it with
//! duplicates it must acknowledge one by one; against rdma_rxe, which queues every packet for
//! its responder without bound, that loop never ends (found with a 1 MiB `ibv_rc_pingpong`
//! between TCG VMs).
//!
//! A lost packet (a PSN sequence error NAK, or an ACK past a READ whose responses did not come)
//! halves the window, down to [`MIN_WINDOW_AFTER_LOSS`], and from there acknowledgements widen
//! it by one packet each. One loss halves it once: what was sent before the loss was noticed
//! may bring further NAKs or ACKs for it, which are not new losses (the recovery point). A sender faster than its receiver otherwise overruns it a full window
//! at a time, and go-back-N resends each whole window: between TCG VMs, where the receiver
//! drops what it cannot take, that was four packets sent for every one delivered.
//!
//! A burst whose tail is lost brings no NAK: nothing after the gap reaches the responder to
//! show it, and nothing asks for the ACK that the lost packets would have. Before the
//! retransmission timeout, after about two round trips ([`SendWindow::ack_wait`]), the
//! requester sends its last packet again, asking for an ACK (not a READ or atomic request:
//! asking for their responses again is a retransmission): a tail loss is answered with a
//! sequence NAK, and recovered as any loss, and a lost ACK is answered again (RFC 8985's
//! tail-loss probe). A timeout, which shrinks the window to one packet and backs off, is left
//! for a path that answers nothing. Between two TCG VMs streaming both ways, where the
//! receivers' sockets overflowed at the end of each burst, every such loss otherwise waited
//! out the timer, doubled, and some 3-second runs moved nothing.
#![deny(clippy::arithmetic_side_effects)]

use super::{psn::Psn, rtt::RttEstimator, timers::ack_timeout_ns};

/// What the largest window holds, in bytes of payload.
pub const WINDOW_BYTES: u32 = 512 * 1024;
/// The largest window, in packets, at any path MTU (at 256 bytes, `WINDOW_BYTES` would be 2048;
/// more than 512 was never measured).
pub const MAX_WINDOW: u32 = 512;
/// The largest window is never smaller than this (rdma_rxe's), at any path MTU.
pub const MIN_MAX_WINDOW: u32 = 128;
/// A loss never halves the window below this.
pub const MIN_WINDOW_AFTER_LOSS: u32 = 8;
/// Consecutive timeouts double the wait at most this many times.
pub const MAX_BACKOFF: u8 = 6;
/// A tail-loss probe waits at least this long (ns): a timer tick, and the peer's time to
/// answer a packet that asks.
pub const MIN_PROBE_NS: u64 = 1_000_000;

/// What the requester's timer waits for next, and how long (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckWait {
    /// No ACK for about two round trips: send the last packet again, asking for one.
    Probe(u64),
    /// The retransmission timeout: resend from the oldest unacknowledged packet.
    Resend(u64),
}

/// The requester's send window and retransmission backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWindow {
    /// The largest window for the path MTU.
    ceiling: u32,
    limit: u32,
    /// Up to here acknowledgements double the window, past it they add one packet.
    threshold: u32,
    /// While the acknowledged PSN is before this (the end of what was sent when a loss was
    /// seen), further losses are echoes of that one.
    recovery_end: Option<Psn>,
    backoff: u8,
    /// A tail-loss probe went since the last progress (one per stall).
    probed: bool,
    /// The round trips measured, which the wait for an ACK is never shorter than.
    rtt: RttEstimator,
}

impl Default for SendWindow {
    /// The window at a 4096-byte path MTU (until the QP has its own).
    fn default() -> Self {
        Self::for_path_mtu(4096)
    }
}

impl SendWindow {
    /// A fully open window for packets of `path_mtu` bytes.
    pub fn for_path_mtu(path_mtu: u32) -> Self {
        let ceiling = WINDOW_BYTES
            .checked_div(path_mtu)
            .unwrap_or(MAX_WINDOW)
            .clamp(MIN_MAX_WINDOW, MAX_WINDOW);
        Self {
            ceiling,
            limit: ceiling,
            threshold: ceiling,
            recovery_end: None,
            backoff: 0,
            probed: false,
            rtt: RttEstimator::default(),
        }
    }

    /// Timeouts in a row without progress (the wait is doubled that many times).
    pub fn backoff(&self) -> u8 {
        self.backoff
    }

    /// Packets that may be outstanding past the last acknowledged PSN.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether the packet `unacked` packets past the last acknowledged one (0 for the first)
    /// is the last the window allows: it should ask for an ACK.
    pub fn is_edge(&self, unacked: u32) -> bool {
        unacked.saturating_add(1) >= self.limit
    }

    /// An acknowledgement moved things forward.
    pub fn on_progress(&mut self) {
        self.limit = if self.limit < self.threshold {
            self.limit.saturating_mul(2).min(self.threshold)
        } else {
            self.limit.saturating_add(1)
        }
        .min(self.ceiling);
        self.backoff = 0;
        self.probed = false;
    }

    /// A packet was lost (the responder asked for it again): halve the window, unless this
    /// loss is part of one already seen. `acked` is the oldest unacknowledged PSN, `sent_end`
    /// the PSN after the last one sent.
    pub fn on_loss(&mut self, acked: Psn, sent_end: Psn) {
        if self.recovering(acked) {
            return;
        }
        self.recovery_end = Some(sent_end);
        // A window of one (after a timeout) cannot halve: the threshold stays.
        if self.limit > 1 {
            self.threshold = (self.limit / 2).max(MIN_WINDOW_AFTER_LOSS);
            self.limit = self.limit.min(self.threshold);
        }
    }

    /// The retransmission timer expired without progress.
    pub fn on_timeout(&mut self, acked: Psn, sent_end: Psn) {
        if self.limit > 1 && !self.recovering(acked) {
            self.threshold = (self.limit / 2).max(MIN_WINDOW_AFTER_LOSS);
        }
        self.recovery_end = Some(sent_end);
        self.limit = 1;
        self.backoff = self.backoff.saturating_add(1).min(MAX_BACKOFF);
        self.rtt.on_resend();
    }

    /// The packet at `psn` goes out, at `now_ns()` (a monotonic clock); `sent_end` is the PSN
    /// after the last one sent before it. Karn's rule: a packet sent for the first time (at or
    /// past `sent_end`) may be timed, a resend (before it) drops the timing of a packet at or
    /// after it (a tail-loss probe, which resends the last, keeps an earlier one's).
    pub fn on_send(&mut self, psn: Psn, sent_end: Psn, now_ns: impl FnOnce() -> u64) {
        if psn.diff(sent_end) >= 0 {
            self.rtt.on_first_send(psn, now_ns);
        } else {
            self.rtt.on_resend_from(psn);
        }
    }

    /// Everything before `acked` is acknowledged now (`now_ns()`).
    pub fn on_acked(&mut self, acked: Psn, now_ns: impl FnOnce() -> u64) {
        self.rtt.on_acked(acked, now_ns);
    }

    /// The tail-loss probe went (see [`SendWindow::ack_wait`]).
    pub fn on_probe(&mut self) {
        self.probed = true;
    }

    /// What to wait for with packets outstanding, for the QP attribute `timeout`: a tail-loss
    /// probe after twice the smoothed round trip (at least [`MIN_PROBE_NS`]), once per stall,
    /// when a round trip was measured and that comes before the retransmission timeout, and
    /// not while timeouts back off (the path answers nothing); else the timeout. `None` for
    /// `timeout` 0 (wait forever: nothing is resent by timer, nor probed).
    pub fn ack_wait(&self, timeout: u8) -> Option<AckWait> {
        let resend = self.ack_timeout_ns(timeout)?;
        let probe = self
            .rtt
            .srtt_ns()
            .filter(|_| !self.probed && self.backoff == 0)
            .map(|srtt| srtt.saturating_mul(2).max(MIN_PROBE_NS))
            .filter(|&probe| probe < resend);
        Some(probe.map_or(AckWait::Resend(resend), AckWait::Probe))
    }

    fn recovering(&self, acked: Psn) -> bool {
        self.recovery_end.is_some_and(|end| acked.diff(end) < 0)
    }

    /// The retransmission timeout for the QP attribute `timeout`, backed off, and never shorter
    /// than the round trips measured suggest (see [`RttEstimator`]); `None` for 0 (wait
    /// forever).
    pub fn ack_timeout_ns(&self, timeout: u8) -> Option<u64> {
        // `backoff` is at most MAX_BACKOFF: no bit is shifted out (checked_shl: nothing to panic).
        ack_timeout_ns(timeout).map(|ns| {
            ns.checked_shl(u32::from(self.backoff))
                .unwrap_or(u64::MAX)
                .max(self.rtt.min_wait_ns())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_window_holds_window_bytes() {
        let ceiling = |mtu| SendWindow::for_path_mtu(mtu).limit();
        assert_eq!(ceiling(1024), 512);
        assert_eq!(ceiling(2048), 256);
        assert_eq!(ceiling(4096), 128);
        assert_eq!(ceiling(512), MAX_WINDOW);
        assert_eq!(ceiling(256), MAX_WINDOW, "packets capped");
        assert_eq!(ceiling(8192), MIN_MAX_WINDOW, "never below rdma_rxe's");
        assert_eq!(ceiling(0), MAX_WINDOW, "no division by zero");
        // Growth after a loss stops at the path MTU's ceiling.
        let mut w = SendWindow::for_path_mtu(1024);
        w.on_loss(Psn::new(0), Psn::new(512));
        assert_eq!(w.limit(), 256);
        for _ in 0..2000 {
            w.on_progress();
        }
        assert_eq!(w.limit(), 512);
    }

    #[test]
    fn a_timeout_shrinks_to_one_packet_and_acks_reopen() {
        let mut w = SendWindow::default();
        assert_eq!(
            w.limit(),
            128,
            "4096-byte packets until the QP has its path MTU"
        );
        assert!(!w.is_edge(0) && w.is_edge(127));
        w.on_timeout(Psn::new(0), Psn::new(128));
        assert_eq!(w.limit(), 1);
        assert!(w.is_edge(0), "the single probe asks for an ACK");
        let limits: [u32; 8] = core::array::from_fn(|_| {
            w.on_progress();
            w.limit()
        });
        assert_eq!(
            limits,
            [2, 4, 8, 16, 32, 64, 65, 66],
            "doubling up to half, then +1"
        );
    }

    #[test]
    fn a_loss_halves_and_acks_widen_by_one() {
        let mut w = SendWindow::default();
        w.on_loss(Psn::new(0), Psn::new(128));
        assert_eq!(w.limit(), 64);
        w.on_progress();
        w.on_progress();
        assert_eq!(w.limit(), 66);
        // Each loss after the previous recovery point halves again.
        for i in 1..=10 {
            w.on_loss(Psn::new(i * 128), Psn::new((i + 1) * 128));
        }
        assert_eq!(w.limit(), MIN_WINDOW_AFTER_LOSS, "floor");
        for _ in 0..1000 {
            w.on_progress();
        }
        assert_eq!(w.limit(), 128, "ceiling");
    }

    #[test]
    fn echoes_of_one_loss_halve_once() {
        let mut w = SendWindow::default();
        w.on_loss(Psn::new(100), Psn::new(228));
        // NAKs and ACKs for what was in flight when the loss was seen.
        w.on_loss(Psn::new(100), Psn::new(228));
        w.on_loss(Psn::new(164), Psn::new(260));
        w.on_loss(Psn::new(227), Psn::new(290));
        assert_eq!(w.limit(), 64);
        // Past the recovery point, a loss is a new one.
        w.on_loss(Psn::new(228), Psn::new(300));
        assert_eq!(w.limit(), 32);
        // Across the PSN wrap too.
        let mut w = SendWindow::default();
        w.on_loss(Psn::new(0xff_fff0), Psn::new(0x70));
        w.on_loss(Psn::new(0x10), Psn::new(0x80));
        assert_eq!(w.limit(), 64);
    }

    #[test]
    fn a_timeout_during_recovery_keeps_the_threshold() {
        let mut w = SendWindow::default();
        w.on_loss(Psn::new(0), Psn::new(128));
        w.on_timeout(Psn::new(0), Psn::new(128));
        assert_eq!(w.limit(), 1);
        let limits: [u32; 7] = core::array::from_fn(|_| {
            w.on_progress();
            w.limit()
        });
        assert_eq!(
            limits,
            [2, 4, 8, 16, 32, 64, 65],
            "threshold 64 from the loss"
        );
    }

    #[test]
    fn timeouts_in_a_row_keep_the_threshold_of_the_first() {
        let mut w = SendWindow::default();
        w.on_timeout(Psn::new(0), Psn::new(128));
        w.on_timeout(Psn::new(0), Psn::new(128));
        w.on_timeout(Psn::new(0), Psn::new(128));
        let limits: [u32; 7] = core::array::from_fn(|_| {
            w.on_progress();
            w.limit()
        });
        assert_eq!(limits, [2, 4, 8, 16, 32, 64, 65]);
    }

    #[test]
    fn timeouts_back_off_until_progress() {
        let mut w = SendWindow::default();
        assert_eq!(w.ack_timeout_ns(14), Some(67_108_864));
        w.on_timeout(Psn::new(0), Psn::new(128));
        assert_eq!(w.ack_timeout_ns(14), Some(2 * 67_108_864));
        for _ in 0..20 {
            w.on_timeout(Psn::new(0), Psn::new(128));
        }
        assert_eq!(
            w.ack_timeout_ns(14),
            Some(67_108_864 << MAX_BACKOFF),
            "bounded"
        );
        assert_eq!(w.ack_timeout_ns(0), None, "0 still means forever");
        w.on_progress();
        assert_eq!(w.ack_timeout_ns(14), Some(67_108_864));
    }

    #[test]
    fn the_wait_is_never_shorter_than_the_round_trip_suggests() {
        let mut w = SendWindow::default();
        assert_eq!(
            w.ack_timeout_ns(12),
            Some(16_777_216),
            "no sample: the QP's timeout"
        );
        assert_eq!(w.ack_timeout_ns(0), None, "0 still waits forever");
        w.on_send(Psn::new(5), Psn::new(5), || 1_000);
        w.on_acked(Psn::new(6), || 1_000 + 100_000_000);
        assert_eq!(
            w.ack_timeout_ns(12),
            Some(300_000_000),
            "a 100 ms round trip"
        );
        assert_eq!(w.ack_timeout_ns(0), None);
        // A backed-off wait longer than the estimate stays.
        for _ in 0..6 {
            w.on_timeout(Psn::new(6), Psn::new(7));
        }
        assert_eq!(w.ack_timeout_ns(12), Some(16_777_216 << 6));
        // A timeout's resend is not timed.
        w.on_send(Psn::new(6), Psn::new(6), || 0);
        w.on_timeout(Psn::new(6), Psn::new(7));
        w.on_acked(Psn::new(7), || u64::MAX);
        w.on_progress();
        assert_eq!(w.ack_timeout_ns(12), Some(300_000_000));
    }

    /// A window whose one round trip measured took `rtt` ns.
    fn measured(rtt: u64) -> SendWindow {
        let mut w = SendWindow::default();
        w.on_send(Psn::new(0), Psn::new(0), || 1_000);
        w.on_acked(Psn::new(1), || rtt.saturating_add(1_000));
        w.on_progress();
        w
    }

    #[test]
    fn a_stall_is_probed_once_before_the_timeout() {
        // 14: 67 ms. A 5 ms round trip: the probe after 10.
        let mut w = measured(5_000_000);
        assert_eq!(w.ack_wait(14), Some(AckWait::Probe(10_000_000)));
        w.on_probe();
        assert_eq!(
            w.ack_wait(14),
            Some(AckWait::Resend(67_108_864)),
            "then the timeout"
        );
        // Progress allows the next stall its probe; the window is untouched by one.
        let limit = w.limit();
        w.on_progress();
        assert_eq!(w.ack_wait(14), Some(AckWait::Probe(10_000_000)));
        assert!(w.limit() >= limit);
    }

    #[test]
    fn no_probe_without_a_round_trip_nor_after_a_timeout() {
        let w = SendWindow::default();
        assert_eq!(
            w.ack_wait(14),
            Some(AckWait::Resend(67_108_864)),
            "nothing measured yet"
        );
        let mut w = measured(5_000_000);
        w.on_timeout(Psn::new(1), Psn::new(2));
        assert_eq!(
            w.ack_wait(14),
            Some(AckWait::Resend(2 * 67_108_864)),
            "backing off: the path answers nothing"
        );
        w.on_progress();
        assert_eq!(w.ack_wait(14), Some(AckWait::Probe(10_000_000)));
        assert_eq!(w.ack_wait(0), None, "0 waits forever, unprobed");
    }

    #[test]
    fn the_probe_waits_at_least_a_tick_and_never_past_the_timeout() {
        let w = measured(1_000);
        assert_eq!(w.ack_wait(14), Some(AckWait::Probe(MIN_PROBE_NS)));
        // 12: 16.8 ms. After steady 10 ms round trips the timeout (the round trip and
        // its small deviation) comes before two round trips: no probe.
        let mut w = measured(10_000_000);
        for psn in 1..40 {
            w.on_send(Psn::new(psn), Psn::new(psn), || 0);
            w.on_acked(Psn::new(psn + 1), || 10_000_000);
        }
        assert!(matches!(w.ack_wait(12), Some(AckWait::Resend(ns)) if ns < 20_000_000));
        // 1: 8 us, below any probe.
        let w = measured(1_000);
        assert!(matches!(w.ack_wait(1), Some(AckWait::Resend(_))));
    }

    #[test]
    fn only_packets_sent_for_the_first_time_are_timed() {
        let late = || 100_000_000;
        // A go-back-N resend (10, with 20 sent before) is not timed.
        let mut w = SendWindow::default();
        w.on_send(Psn::new(10), Psn::new(20), || 0);
        w.on_acked(Psn::new(11), late);
        assert_eq!(w.ack_timeout_ns(12), Some(16_777_216), "no sample");
        // A resend after a first send drops its timing (Karn: the ACK may answer the copy).
        w.on_send(Psn::new(20), Psn::new(20), || 0);
        w.on_send(Psn::new(15), Psn::new(21), || 0);
        w.on_acked(Psn::new(21), late);
        assert_eq!(w.ack_timeout_ns(12), Some(16_777_216), "timing dropped");
        // A first send is timed, also across the PSN wrap.
        w.on_send(Psn::new(0xff_ffff), Psn::new(0xff_ffff), || 0);
        w.on_send(Psn::new(0), Psn::new(0), || 500_000);
        w.on_acked(Psn::new(1), || 100_000_000);
        assert_eq!(
            w.ack_timeout_ns(12),
            Some(300_000_000),
            "timed from 0xffffff's send"
        );
    }

    #[test]
    fn a_probe_keeps_an_earlier_packets_timing() {
        // 30..=37 sent, 30 timed; the probe resends 37: an ACK covering 30 still times it,
        // however long it took (the long samples are the ones a probe comes before).
        let mut w = SendWindow::default();
        w.on_send(Psn::new(30), Psn::new(30), || 0);
        w.on_send(Psn::new(37), Psn::new(38), || 0);
        w.on_acked(Psn::new(38), || 100_000_000);
        assert_eq!(w.ack_timeout_ns(12), Some(300_000_000), "sampled");
        // The packet timed is the one probed: no sample.
        let mut w = SendWindow::default();
        w.on_send(Psn::new(37), Psn::new(37), || 0);
        w.on_send(Psn::new(37), Psn::new(38), || 0);
        w.on_acked(Psn::new(38), || 100_000_000);
        assert_eq!(w.ack_timeout_ns(12), Some(16_777_216), "ambiguous");
        // Go-back-N from before the packet timed: no sample, across the PSN wrap too.
        let mut w = SendWindow::default();
        w.on_send(Psn::new(2), Psn::new(2), || 0);
        w.on_send(Psn::new(0xff_fffe), Psn::new(3), || 0);
        w.on_acked(Psn::new(3), || 100_000_000);
        assert_eq!(w.ack_timeout_ns(12), Some(16_777_216), "ambiguous");
    }
}
