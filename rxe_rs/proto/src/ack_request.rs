//! Which request packets ask for an acknowledgement (the BTH's AckReq bit). A responder
//! answers only those (and sends NAKs), so each ACK costs two packets' worth of work on two
//! hosts: a stream of small messages asks once per [`ack_interval`] packets, not once per
//! message. An ACK acknowledges every PSN before it, so one that comes later completes the
//! messages that did not ask.
#![deny(clippy::arithmetic_side_effects)]

/// A request asks for an ACK at least every this many packets (rdma_rxe's interval too: a
/// 64 KiB message of 1024-byte packets asks once).
pub const PACKETS_PER_ACK_REQ: u32 = 64;
/// A full window asks at least this many times, so that one lost ACK does not stall it until
/// the retransmission timeout, and a window growing by one packet per ACK after a loss grows
/// by at least this many per round trip.
pub const ACKS_PER_WINDOW: u32 = 4;

/// How many packets may go without asking, for a send window of `window` packets: 64 in the
/// 512-packet window of IB MTU 1024, 32 in the 128-packet one of IB MTU 4096, fewer in a
/// window a loss shrank.
pub fn ack_interval(window: u32) -> u32 {
    (window / ACKS_PER_WINDOW).clamp(1, PACKETS_PER_ACK_REQ)
}

/// Where a packet stands in the requester's run.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    /// It ends its message.
    pub last_of_message: bool,
    /// It is the last packet the send window allows now.
    pub window_edge: bool,
    /// Packets sent since the last one that asked.
    pub unasked_before: u32,
    /// The [`ack_interval`] of the current window.
    pub interval: u32,
    /// The same run is certain to send another packet right after this one (a message is
    /// fetched that starts without waiting for the window, READ credits, a fence or SQD).
    pub next_follows: bool,
}

/// Whether the packet at `p` asks for an ACK. The last packet of a run always asks (else
/// what it sent would be acknowledged only after a retransmission timeout), and so does the
/// last one the window allows (else the window would only reopen by timeout).
pub fn asks_ack(p: Place) -> bool {
    p.window_edge
        || p.unasked_before.saturating_add(1) >= p.interval
        || (p.last_of_message && !p.next_follows)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data, built from small constants
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The packets of a run of `messages` messages of `packets` packets each, sent with a
    /// window of `window`: which ask.
    fn run(messages: u32, packets: u32, window: u32) -> Vec<bool> {
        let mut unasked = 0;
        let mut asks = Vec::new();
        let total = messages * packets;
        for n in 0..total.min(window) {
            let last_of_message = n % packets == packets - 1;
            let p = Place {
                last_of_message,
                window_edge: n + 1 >= window,
                unasked_before: unasked,
                interval: ack_interval(window),
                next_follows: n + 1 < total.min(window),
            };
            let ask = asks_ack(p);
            unasked = if ask { 0 } else { unasked + 1 };
            asks.push(ask);
        }
        asks
    }

    #[test]
    fn small_messages_in_a_stream_ask_every_64_packets_and_at_the_end() {
        let asks = run(200, 1, 512);
        let at: Vec<usize> = (0..asks.len()).filter(|&i| asks[i]).collect();
        assert_eq!(at, [63, 127, 191, 199]);
    }

    #[test]
    fn a_smaller_window_asks_four_times_per_window() {
        // IB MTU 4096's window of 128 packets.
        let asks = run(200, 1, 128);
        let at: Vec<usize> = (0..asks.len()).filter(|&i| asks[i]).collect();
        assert_eq!(at, [31, 63, 95, 127]);
        // A window a loss shrank to 8.
        let asks = run(20, 1, 8);
        let at: Vec<usize> = (0..asks.len()).filter(|&i| asks[i]).collect();
        assert_eq!(at, [1, 3, 5, 7]);
        assert_eq!(ack_interval(1), 1);
        assert_eq!(ack_interval(0), 1);
    }

    #[test]
    fn a_lone_message_asks_on_its_last_packet() {
        assert_eq!(run(1, 1, 128), [true]);
        let asks = run(1, 3, 128);
        assert_eq!(asks, [false, false, true]);
    }

    #[test]
    fn long_messages_ask_every_64_packets_and_at_the_window_edge() {
        let asks = run(4, 96, 300);
        let at: Vec<usize> = (0..asks.len()).filter(|&i| asks[i]).collect();
        assert_eq!(
            at,
            [63, 127, 191, 255, 299],
            "the window's last packet asks"
        );
    }

    #[test]
    fn a_message_whose_successor_must_wait_asks() {
        let p = Place {
            last_of_message: true,
            window_edge: false,
            unasked_before: 3,
            interval: PACKETS_PER_ACK_REQ,
            next_follows: false,
        };
        assert!(asks_ack(p));
        assert!(!asks_ack(Place {
            next_follows: true,
            ..p
        }));
        assert!(asks_ack(Place {
            next_follows: true,
            window_edge: true,
            ..p
        }));
    }
}
