//! The requester's completer: what an acknowledgement (AETH) means for the WQEs in flight
//! (IBA 9.7.5.1.3 - 9.7.5.1.6, 9.9.2).
//!
//! ACKs are cumulative: an ACK for PSN p acknowledges every request packet up to p. SENDs and
//! RDMA WRITEs complete when acknowledged; an RDMA READ only completes with its last response,
//! so an ACK that goes past a READ whose responses did not all arrive means they were lost: the
//! READ is resent from its first missing response ("implied NAK"). NAKs carry the PSN the
//! responder expected: everything before it is acknowledged.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    headers::{NakCode, Syndrome},
    psn::Psn,
};

/// The PSNs a WQE in flight uses, oldest WQE first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Its first PSN.
    pub first: Psn,
    /// Its last PSN (for a READ, that of its last response).
    pub last: Psn,
    /// A READ (or atomic): completes with its responses, not with an ACK.
    pub needs_response: bool,
}

/// Completion status of a WQE ended by a NAK (`enum ib_wc_status` meaning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteError {
    /// The responder could not take the request (bad opcode, length, no RQ...).
    InvalidRequest,
    /// Bad R_Key, rights or bounds at the responder.
    AccessError,
    /// The responder failed for its own reasons.
    OperationalError,
}

/// What to do after an AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckOutcome {
    /// This many WQEs from the oldest on completed successfully.
    pub completed: usize,
    /// And then:
    pub then: AfterAck,
}

/// The action after completing [`AckOutcome::completed`] WQEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterAck {
    /// Nothing else (the ACK may also have been stale).
    Nothing,
    /// Resend from this PSN (sequence error, or READ responses lost).
    RetryFrom(Psn),
    /// Receiver not ready: wait for this RNR timer code, then resend from the PSN.
    RnrRetry(u8, Psn),
    /// The next WQE fails with this status; the QP goes to the error state.
    Fail(RemoteError),
}

/// Interprets an AETH with `syndrome` for `psn` against the WQEs in flight (oldest first).
pub fn on_aeth(spans: impl IntoIterator<Item = Span>, syndrome: Syndrome, psn: Psn) -> AckOutcome {
    // NAKs name the PSN the responder expects: the packets before it are acknowledged.
    let acked_through = match syndrome {
        Syndrome::Ack { .. } => psn,
        Syndrome::RnrNak { .. } | Syndrome::Nak(_) => psn.add(0xff_ffff), // psn - 1
    };
    let mut completed = 0;
    let mut next = None;
    for span in spans {
        if span.last.diff(acked_through) > 0 {
            next = Some(span);
            break;
        }
        if span.needs_response {
            // Acknowledged past a READ whose last response we never saw: it was lost.
            return AckOutcome {
                completed,
                then: AfterAck::RetryFrom(span.first),
            };
        }
        completed = completed.saturating_add(1);
    }
    let then = match (syndrome, next) {
        (Syndrome::Ack { .. }, _) => AfterAck::Nothing,
        // A NAK for a PSN nothing in flight uses is stale (from before a retry): ignore it.
        (_, None) => AfterAck::Nothing,
        (_, Some(span)) if span.first.diff(psn) > 0 => AfterAck::Nothing,
        (Syndrome::RnrNak { timer }, _) => AfterAck::RnrRetry(timer, psn),
        (Syndrome::Nak(NakCode::PsnSequenceError), _) => AfterAck::RetryFrom(psn),
        (Syndrome::Nak(NakCode::RemoteAccessError), _) => AfterAck::Fail(RemoteError::AccessError),
        (Syndrome::Nak(NakCode::RemoteOperationalError), _) => {
            AfterAck::Fail(RemoteError::OperationalError)
        }
        (Syndrome::Nak(NakCode::InvalidRequest | NakCode::InvalidRdRequest), _) => {
            AfterAck::Fail(RemoteError::InvalidRequest)
        }
    };
    AckOutcome { completed, then }
}

/// The oldest PSN an AETH for `psn` leaves unacknowledged: the one after `psn` for an ACK,
/// `psn` itself for a NAK (which names the PSN expected), but never past the start of a READ in
/// flight (`spans`, oldest first): an ACK acknowledges requests, never READ responses, which are
/// still to come whether the AETH went past the READ (they were lost: [`on_aeth`] resends it) or
/// into it (a responder answers a repeated WRITE with an ACK for the last PSN it took, which may
/// be one of a READ's). A requester that took them as acknowledged would drop them as stale,
/// ask again forever, and never complete the READ (found by the hostile-peer test's victims).
pub fn unacknowledged_from(
    spans: impl IntoIterator<Item = Span>,
    syndrome: Syndrome,
    psn: Psn,
) -> Psn {
    let through = match syndrome {
        Syndrome::Ack { .. } => psn.add(1),
        _ => psn,
    };
    for span in spans {
        if span.first.diff(through) >= 0 {
            break;
        }
        if span.needs_response {
            return span.first;
        }
    }
    through
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(first: u32, last: u32, needs_response: bool) -> Span {
        Span {
            first: Psn::new(first),
            last: Psn::new(last),
            needs_response,
        }
    }
    const ACK: Syndrome = Syndrome::Ack { credits: 31 };

    #[test]
    fn acks_are_cumulative() {
        let spans = [span(0, 2, false), span(3, 3, false), span(4, 6, false)];
        assert_eq!(
            on_aeth(spans, ACK, Psn::new(3)),
            AckOutcome {
                completed: 2,
                then: AfterAck::Nothing
            }
        );
        assert_eq!(
            on_aeth(spans, ACK, Psn::new(1)),
            AckOutcome {
                completed: 0,
                then: AfterAck::Nothing
            },
            "mid-message ACK"
        );
        assert_eq!(on_aeth(spans, ACK, Psn::new(6)).completed, 3);
        assert_eq!(on_aeth([], ACK, Psn::new(6)).completed, 0);
    }

    #[test]
    fn acks_across_the_psn_wrap() {
        let spans = [span(0xff_fffe, 0xff_ffff, false), span(0, 1, false)];
        assert_eq!(on_aeth(spans, ACK, Psn::new(0xff_ffff)).completed, 1);
        assert_eq!(on_aeth(spans, ACK, Psn::new(1)).completed, 2);
    }

    #[test]
    fn an_ack_past_an_unanswered_read_means_its_responses_were_lost() {
        let spans = [span(0, 0, false), span(1, 4, true), span(5, 5, false)];
        assert_eq!(
            on_aeth(spans, ACK, Psn::new(5)),
            AckOutcome {
                completed: 1,
                then: AfterAck::RetryFrom(Psn::new(1))
            }
        );
        assert_eq!(
            on_aeth(spans, ACK, Psn::new(0)),
            AckOutcome {
                completed: 1,
                then: AfterAck::Nothing
            }
        );
    }

    #[test]
    fn acks_never_acknowledge_read_responses() {
        // A WRITE (PSN 0), then a READ of 4 responses (1..4) in flight.
        let spans = [span(0, 0, false), span(1, 4, true)];
        // Past the READ: resent, and its responses are still to come.
        assert_eq!(
            on_aeth(spans, ACK, Psn::new(4)).then,
            AfterAck::RetryFrom(Psn::new(1))
        );
        assert_eq!(unacknowledged_from(spans, ACK, Psn::new(4)), Psn::new(1));
        // Into the READ (the responder re-ACKed a repeated WRITE with its last PSN, 2): the
        // READ's responses are not acknowledged either.
        assert_eq!(on_aeth(spans, ACK, Psn::new(2)).then, AfterAck::Nothing);
        assert_eq!(unacknowledged_from(spans, ACK, Psn::new(2)), Psn::new(1));
        // Up to the READ: everything before it.
        assert_eq!(unacknowledged_from(spans, ACK, Psn::new(0)), Psn::new(1));
        let nak = Syndrome::Nak(NakCode::PsnSequenceError);
        assert_eq!(unacknowledged_from(spans, nak, Psn::new(3)), Psn::new(1));
        assert_eq!(
            unacknowledged_from(
                [span(10, 10, false), span(11, 13, false)],
                nak,
                Psn::new(12)
            ),
            Psn::new(12)
        );
        // Across the PSN wrap.
        let wrap = [span(0xff_fffe, 0xff_ffff, true)];
        assert_eq!(
            unacknowledged_from(wrap, ACK, Psn::new(2)),
            Psn::new(0xff_fffe)
        );
        assert_eq!(
            unacknowledged_from(wrap, ACK, Psn::new(0xff_fffe)),
            Psn::new(0xff_fffe)
        );
    }

    #[test]
    fn naks_ack_what_precedes_them() {
        let spans = [
            span(10, 10, false),
            span(11, 13, false),
            span(14, 14, false),
        ];
        let seq = on_aeth(
            spans,
            Syndrome::Nak(NakCode::PsnSequenceError),
            Psn::new(12),
        );
        assert_eq!(
            seq,
            AckOutcome {
                completed: 1,
                then: AfterAck::RetryFrom(Psn::new(12))
            }
        );
        let rnr = on_aeth(spans, Syndrome::RnrNak { timer: 12 }, Psn::new(11));
        assert_eq!(
            rnr,
            AckOutcome {
                completed: 1,
                then: AfterAck::RnrRetry(12, Psn::new(11))
            }
        );
        let access = on_aeth(
            spans,
            Syndrome::Nak(NakCode::RemoteAccessError),
            Psn::new(14),
        );
        assert_eq!(
            access,
            AckOutcome {
                completed: 2,
                then: AfterAck::Fail(RemoteError::AccessError)
            }
        );
        let invalid = on_aeth(spans, Syndrome::Nak(NakCode::InvalidRequest), Psn::new(10));
        assert_eq!(
            invalid,
            AckOutcome {
                completed: 0,
                then: AfterAck::Fail(RemoteError::InvalidRequest)
            }
        );
    }

    #[test]
    fn stale_naks_are_ignored() {
        let spans = [span(20, 21, false)];
        assert_eq!(
            on_aeth(
                spans,
                Syndrome::Nak(NakCode::PsnSequenceError),
                Psn::new(25)
            )
            .then,
            AfterAck::Nothing
        );
        assert_eq!(
            on_aeth([], Syndrome::RnrNak { timer: 1 }, Psn::new(3)).then,
            AfterAck::Nothing
        );
    }
}
