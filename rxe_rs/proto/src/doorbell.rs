//! When a post needs the send doorbell. A doorbell is a syscall (a work item for a kernel
//! consumer) that runs the requester; while enough of a QP's packets are in flight, the
//! acknowledgements, READ responses or the retransmission timer run it soon anyway, and that
//! run fetches what was posted meanwhile (`RING_FLAG_SQ_POLLED` in the shared SQ). With few
//! packets in flight a post rings as before, so that it is not held back for a round trip:
//! only a QP that streams skips the syscall, and it then sends what it fetched in one run.

/// Unacknowledged packets from which posts need no doorbell.
pub const POLLED_MIN_IN_FLIGHT: u32 = 8;

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
