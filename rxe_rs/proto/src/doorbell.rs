//! When a post needs the send doorbell. A doorbell is a syscall (a work item for a kernel
//! consumer) that runs the requester; while enough of a QP's packets are in flight, the
//! acknowledgements, READ responses or the retransmission timer run it soon anyway, and that
//! run fetches what was posted meanwhile (`RING_FLAG_SQ_POLLED` in the shared SQ). A run's
//! last packet always asks for an ACK, so one is on its way while anything is in flight.
//! With one packet in flight a post still rings, so that a message posted behind a lone
//! single-packet one is not held back for a round trip; from two packets (a second small
//! message, or one of two packets or more), posts wait for the next ACK's run.
//!
//! Why two and not more: where the peer acknowledges fast (the other CPU over loopback), a
//! stream of small messages seldom has many in flight. With eight, over half of a 64-byte
//! WRITE stream's posts rang and went alone, each with its own ACK; with two, 8-12%. The
//! cost: if the run's last packet or its ACK is lost, a post behind it no longer brings the
//! NAK that would recover the loss within a round trip; the retransmission timer does, as it
//! did at eight from that depth on.
#![deny(clippy::arithmetic_side_effects)]

/// Unacknowledged packets from which posts need no doorbell.
pub const POLLED_MIN_IN_FLIGHT: u32 = 2;

/// Whether posts need no doorbell: the retransmission (or RNR) timer is armed in a state that
/// sends (RTS, SQD), and `in_flight` packets (sent, unacknowledged) are enough to bring an
/// acknowledgement soon.
pub fn sq_polled(timer_armed: bool, sending: bool, in_flight: u32) -> bool {
    timer_armed && sending && in_flight >= POLLED_MIN_IN_FLIGHT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_polled_a_lone_message_is_not() {
        assert!(sq_polled(true, true, 128));
        assert!(sq_polled(true, true, POLLED_MIN_IN_FLIGHT));
        assert!(
            !sq_polled(true, true, POLLED_MIN_IN_FLIGHT - 1),
            "one round trip per post"
        );
        assert!(
            !sq_polled(false, true, 128),
            "no timer: nothing brings the requester back"
        );
        assert!(
            !sq_polled(true, false, 128),
            "ERR/RESET: posts are flushed by the doorbell"
        );
    }
}
