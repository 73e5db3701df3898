//! How many packets the requester may have unacknowledged, and how long it waits for an ACK.
//!
//! Normally the window is 128 PSNs past the last acknowledged one (as rdma_rxe). After a
//! retransmission timeout the requester sends a single packet and waits for its ACK before
//! opening the window again, doubling it per acknowledgement; each further timeout without
//! progress doubles the wait, up to 2^[`MAX_BACKOFF`] times the QP's `timeout`. Resending a
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

use super::{psn::Psn, timers::ack_timeout_ns};

/// The largest window, in packets.
pub const MAX_WINDOW: u32 = 128;
/// A loss never halves the window below this.
pub const MIN_WINDOW_AFTER_LOSS: u32 = 8;
/// Consecutive timeouts double the wait at most this many times.
pub const MAX_BACKOFF: u8 = 6;

/// The requester's send window and retransmission backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWindow {
    limit: u32,
    /// Up to here acknowledgements double the window, past it they add one packet.
    threshold: u32,
    /// While the acknowledged PSN is before this (the end of what was sent when a loss was
    /// seen), further losses are echoes of that one.
    recovery_end: Option<Psn>,
    backoff: u8,
}

impl Default for SendWindow {
    fn default() -> Self {
        Self {
            limit: MAX_WINDOW,
            threshold: MAX_WINDOW,
            recovery_end: None,
            backoff: 0,
        }
    }
}

impl SendWindow {
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
        unacked + 1 >= self.limit
    }

    /// An acknowledgement moved things forward.
    pub fn on_progress(&mut self) {
        self.limit = if self.limit < self.threshold {
            (self.limit * 2).min(self.threshold)
        } else {
            self.limit + 1
        }
        .min(MAX_WINDOW);
        self.backoff = 0;
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
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    fn recovering(&self, acked: Psn) -> bool {
        self.recovery_end.is_some_and(|end| acked.diff(end) < 0)
    }

    /// The retransmission timeout for the QP attribute `timeout`, backed off; `None` for 0
    /// (wait forever).
    pub fn ack_timeout_ns(&self, timeout: u8) -> Option<u64> {
        // `backoff` is at most MAX_BACKOFF: no bit is shifted out (checked_shl: nothing to panic).
        ack_timeout_ns(timeout)
            .map(|ns| ns.checked_shl(u32::from(self.backoff)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_shrinks_to_one_packet_and_acks_reopen() {
        let mut w = SendWindow::default();
        assert_eq!(w.limit(), MAX_WINDOW);
        assert!(!w.is_edge(0) && w.is_edge(MAX_WINDOW - 1));
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
        assert_eq!(w.limit(), MAX_WINDOW, "ceiling");
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
}
