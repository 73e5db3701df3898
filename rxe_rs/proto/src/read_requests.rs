//! The RDMA READ requests a requester has out (IBA 9.7.5.1.3, 9.7.5.2.2, C9-28): what
//! `max_rd_atomic` limits, and where a request sent again must end.
//!
//! A responder keeps what it needs to answer a READ again: rdma_rxe keeps one resource per
//! request, `max_dest_rd_atomic` of them, and each new request reuses the oldest. It answers a
//! repeated request only if it asks for part of one request it took, and drops it silently
//! otherwise. So the requester remembers every request it sent as new until all its responses
//! have arrived:
//! - no new READ goes out while `max_rd_atomic` are remembered (a repeat takes no new
//!   resource, so repeats do not count, and a late response to a request that was since sent
//!   again frees nothing early: only responses arriving in order do);
//! - a request sent again from a lost response asks for what remains of the request it repeats,
//!   never past its end (a request sized by a small send window at first would otherwise be
//!   repeated as a bigger one, which rdma_rxe drops: the READ stalled for good).
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use core::ops::DerefMut;

use super::psn::Psn;

/// READ requests a QP can have out: `max_rd_atomic` is at most this.
pub const MAX_READ_REQUESTS: usize = 128;

/// One READ request as it was first sent: the PSNs of the responses it asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadRequest {
    /// PSN of the request and of its first response.
    pub first: Psn,
    /// Responses it asked for (at least one).
    pub count: u32,
}

impl ReadRequest {
    /// PSN of its last response.
    pub fn last(&self) -> Psn {
        self.first.add(self.count.max(1).saturating_sub(1))
    }

    fn holds(&self, psn: Psn) -> bool {
        psn.diff(self.first) >= 0 && psn.diff(self.last()) <= 0
    }

    /// Responses from `psn` (one of its own) to its end.
    fn remaining_from(&self, psn: Psn) -> u32 {
        let done = u32::try_from(psn.diff(self.first)).unwrap_or(0);
        self.count.max(1).saturating_sub(done)
    }
}

/// All the slots hold a request: no new one may go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// The READ requests out, oldest (lowest PSN) first, in a ring over the slots `S` (the kernel
/// allocates them with the QP, tests use an array).
#[derive(Debug)]
pub struct ReadRequests<S> {
    slots: S,
    head: usize,
    len: usize,
}

impl<S: DerefMut<Target = [ReadRequest]>> ReadRequests<S> {
    /// None out, over `slots`.
    pub fn new(slots: S) -> Self {
        Self {
            slots,
            head: 0,
            len: 0,
        }
    }

    /// Requests out whose responses did not all arrive.
    pub fn len(&self) -> usize {
        self.len
    }

    /// All responses asked for arrived.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, i: usize) -> usize {
        self.head
            .wrapping_add(i)
            .checked_rem(self.slots.len())
            .unwrap_or(0)
    }

    fn get(&self, i: usize) -> ReadRequest {
        self.slots[self.slot(i)]
    }

    /// Remembers a new request (its PSNs follow those of every request out).
    pub fn push(&mut self, request: ReadRequest) -> Result<(), Full> {
        if self.len >= self.slots.len() {
            return Err(Full);
        }
        let tail = self.slot(self.len);
        self.slots[tail] = request;
        self.len = self.len.saturating_add(1); // below slots.len(), checked above
        Ok(())
    }

    /// Every response before `psn` arrived: forgets the requests that end before it.
    pub fn received_before(&mut self, psn: Psn) {
        while self.len > 0 && self.get(0).last().diff(psn) < 0 {
            self.head = self.slot(1);
            self.len = self.len.saturating_sub(1);
        }
    }

    /// How many responses a request sent again from response `psn` asks for: the rest of the
    /// request that first asked for `psn`. `None` if no request out asked for it.
    pub fn repeat_from(&self, psn: Psn) -> Option<u32> {
        (0..self.len)
            .map(|i| self.get(i))
            .find(|r| r.holds(psn))
            .map(|r| r.remaining_from(psn))
    }

    /// Forgets every request (the QP was reset or failed).
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(slots: &mut [ReadRequest]) -> ReadRequests<&mut [ReadRequest]> {
        ReadRequests::new(slots)
    }

    fn req(first: u32, count: u32) -> ReadRequest {
        ReadRequest {
            first: Psn::new(first),
            count,
        }
    }

    #[test]
    fn repeats_end_where_the_request_they_repeat_ended() {
        let mut slots = [ReadRequest::default(); 4];
        let mut r = requests(&mut slots);
        // A window of 4 sized the first two; the window has grown since.
        r.push(req(100, 4)).unwrap();
        r.push(req(104, 4)).unwrap();
        r.push(req(108, 32)).unwrap();
        assert_eq!(r.repeat_from(Psn::new(102)), Some(2));
        assert_eq!(r.repeat_from(Psn::new(104)), Some(4));
        assert_eq!(r.repeat_from(Psn::new(139)), Some(1));
        assert_eq!(r.repeat_from(Psn::new(140)), None);
        assert_eq!(r.repeat_from(Psn::new(99)), None);
    }

    #[test]
    fn only_responses_in_order_free_a_request() {
        let mut slots = [ReadRequest::default(); 2];
        let mut r = requests(&mut slots);
        r.push(req(0, 32)).unwrap();
        r.push(req(32, 32)).unwrap();
        assert_eq!(r.push(req(64, 32)), Err(Full));
        r.received_before(Psn::new(31));
        assert_eq!(
            r.len(),
            2,
            "the last response of the first is still missing"
        );
        r.received_before(Psn::new(32));
        assert_eq!(r.len(), 1);
        r.push(req(64, 32)).unwrap();
        assert_eq!(r.repeat_from(Psn::new(40)), Some(24));
        r.received_before(Psn::new(96));
        assert!(r.is_empty());
    }

    #[test]
    fn psns_wrap() {
        let mut slots = [ReadRequest::default(); 4];
        let mut r = requests(&mut slots);
        r.push(req(0xff_fffe, 4)).unwrap();
        r.push(req(2, 1)).unwrap();
        assert_eq!(r.repeat_from(Psn::new(0xff_ffff)), Some(3));
        assert_eq!(r.repeat_from(Psn::new(1)), Some(1));
        assert_eq!(r.repeat_from(Psn::new(2)), Some(1));
        r.received_before(Psn::new(2));
        assert_eq!(r.len(), 1);
        r.received_before(Psn::new(3));
        assert!(r.is_empty());
    }

    #[test]
    fn the_ring_reuses_its_slots() {
        let mut slots = [ReadRequest::default(); 3];
        let mut r = requests(&mut slots);
        for i in 0..1000u32 {
            r.push(req(i * 8, 8)).unwrap();
            if i >= 2 {
                r.received_before(Psn::new((i - 1) * 8));
                assert_eq!(r.len(), 2);
                assert_eq!(r.repeat_from(Psn::new(i * 8 + 3)), Some(5));
            }
        }
        r.clear();
        assert_eq!(r.repeat_from(Psn::new(999 * 8)), None);
    }

    #[test]
    fn a_request_of_no_responses_counts_as_one() {
        let mut slots = [ReadRequest::default(); 2];
        let mut r = requests(&mut slots);
        r.push(req(5, 0)).unwrap();
        assert_eq!(r.repeat_from(Psn::new(5)), Some(1));
        r.received_before(Psn::new(6));
        assert!(r.is_empty());
    }
}
