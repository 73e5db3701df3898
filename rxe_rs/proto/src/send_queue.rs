//! The send queue's bookkeeping, shared by the requester and the completer: which WQEs the
//! kernel holds, the PSNs each uses, how far each was sent, answered and acknowledged, and
//! where sending resumes after a loss or a timeout.
//!
//! The driver keeps the WQE copies (id, opcode, SGEs, inline bytes) in its own arrays at the
//! same slot; this is plain data over a slice of [`Progress`], so the histories that once went
//! wrong (go-back-N storms, READ re-request floods) are replayed here on the host.
//!
//! Indices are free-running `u32` ring indices (they wrap at 2^32, as the ring's); the slot of
//! index `i` is `i mod capacity`, the capacity a power of two.
// Indices and PSNs come from the ring and the wire: nothing overflows, wraps or divides unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    completer::Span, mtu::IbMtu, psn::Psn, read_requests::ReadRequests, segment::packet_count,
};
use core::ops::DerefMut;

/// An RDMA READ is asked for in parts of at most this many responses (fewer while the send
/// window is smaller), sent within the window as a WRITE's packets are: READ responses are not
/// acknowledged, so nothing else keeps a large READ from arriving as one burst that overflows
/// the path.
pub const READ_PART: u32 = 128;

/// Progress of one WQE the kernel holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// An RDMA READ: its PSNs are those of its responses.
    pub is_read: bool,
    /// Message bytes.
    pub len: u32,
    /// PSN of its first packet (for a READ, of its first response).
    pub first_psn: Psn,
    /// PSNs it uses: packets, or READ responses (0 for a WQE that never got PSNs).
    pub npkts: u32,
    /// Packets sent so far; for a READ, responses asked for so far.
    pub sent: u32,
    /// READ: responses received (and scattered) so far.
    pub read_got: u32,
    /// A local operation (a memory registration or invalidation): it sends nothing and uses no
    /// PSN. `sent` is 1 once the requester executed it; it completes once all before it did.
    pub local: bool,
    /// An atomic (COMPARE SWAP, FETCH ADD): `is_read` too, since like a READ it takes one of
    /// the responder's READ credits and completes with its response (an atomic acknowledge)
    /// rather than with an ACK; it uses one PSN.
    pub atomic: bool,
    /// An ATOMIC WRITE (IBTA 1.5): `is_read` too, one PSN, 8 bytes of payload, answered by an
    /// empty READ RESPONSE ONLY.
    pub atomic_write: bool,
}

impl Progress {
    /// Its last PSN. A local operation's is the one before its `first_psn` (the last PSN of
    /// what precedes it), so an ACK that completes its predecessors completes it too.
    pub fn last_psn(&self) -> Psn {
        if self.local {
            return self.first_psn.add(super::psn::PSN_MASK);
        }
        self.first_psn.add(self.npkts.saturating_sub(1))
    }

    /// A local operation the requester executed.
    pub fn local_done(&self) -> bool {
        self.local && self.sent > 0
    }

    /// All of its packets (for a READ, requests for all its responses) are out.
    pub fn fully_sent(&self) -> bool {
        self.sent >= self.npkts
    }

    /// `psn` is one of its PSNs.
    pub fn uses(&self, psn: Psn) -> bool {
        !self.local && psn.diff(self.first_psn) >= 0 && psn.diff(self.last_psn()) <= 0
    }

    fn span(&self) -> Span {
        Span {
            first: self.first_psn,
            last: self.last_psn(),
            needs_response: self.is_read,
        }
    }
}

/// What a READ response at some PSN means for the send queue ([`SendQueue::read_response`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadResponse {
    /// For nothing in flight (or from before it): ignored.
    Stale,
    /// The oldest WQE is not a READ and precedes the response's READ: the response implicitly
    /// acknowledges it. Retire it, then ask again.
    RetireOldest,
    /// Responses to a later READ while the oldest READ is missing some: those were lost. Ask
    /// again from this PSN ([`SendQueue::ask_again`]); the response itself is ignored.
    EarlierReadIncomplete(Psn),
    /// Already received.
    Duplicate,
    /// Responses before it are missing: the response is dropped, and the missing ones are asked
    /// for again from this PSN ([`SendQueue::ask_again`]) unless no request for them is out
    /// (`None`: a rewind already went back there, and the requester will ask).
    Gap(Option<Psn>),
    /// The next response of the READ at this index: scatter it, then
    /// [`SendQueue::read_response_arrived`].
    Next(u32),
}

/// Where the kernel's copies of the send WQEs stand; see the module documentation.
#[derive(Debug)]
pub struct SendQueue<S> {
    works: S,
    /// Capacity minus one: the slot mask.
    mask: u32,
    /// Oldest WQE not completed (published as the ring's consumer index).
    pub consumer: u32,
    /// WQEs copied out of the ring.
    pub fetched: u32,
    /// The WQE being (or next to be) transmitted.
    pub cur: u32,
    /// WQEs before this one have sent packets (or were retired): what SQD lets finish.
    pub started_end: u32,
    /// PSN the next fetched WQE starts at.
    pub next_psn: Psn,
    /// PSNs before this one have been sent (for a READ, its responses asked for): the end of
    /// what a response may acknowledge. It does not move back when a rewind resends.
    pub sent_end: Psn,
    /// Everything before this PSN is acknowledged.
    pub acked_psn: Psn,
    /// A loss made us send again from this PSN ([`SendQueue::ask_again`]): the rest of the
    /// burst that lost a packet, or the peer's answers to what we sent again, tell of the same
    /// loss, and must not resend each time.
    pub asked_again: Option<Psn>,
}

impl<S: DerefMut<Target = [Progress]>> SendQueue<S> {
    /// An empty queue over `works`, whose length (the most WQEs held at once) is a power of
    /// two below 2^32; `None` otherwise.
    pub fn new(works: S) -> Option<Self> {
        let len = u32::try_from(works.len()).ok()?;
        if !len.is_power_of_two() {
            return None;
        }
        Some(Self {
            works,
            mask: len.wrapping_sub(1),
            consumer: 0,
            fetched: 0,
            cur: 0,
            started_end: 0,
            next_psn: Psn::new(0),
            sent_end: Psn::new(0),
            acked_psn: Psn::new(0),
            asked_again: None,
        })
    }

    /// The slot of ring index `index`, in the driver's parallel arrays too.
    pub fn slot(&self, index: u32) -> usize {
        (index & self.mask) as usize
    }

    /// The most WQEs held at once.
    pub fn capacity(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    /// WQEs copied into the kernel and not yet completed.
    pub fn held(&self) -> u32 {
        self.fetched.wrapping_sub(self.consumer)
    }

    /// How many more WQEs may be fetched: of the `posted` ones the ring holds (its producer
    /// index minus our consumer index), those not fetched yet, as far as the copies go. `None`
    /// if the process moved its producer index back below what was fetched.
    pub fn fetchable(&self, posted: u32) -> Option<u32> {
        let new = posted.checked_sub(self.held())?;
        Some(new.min(self.capacity().saturating_sub(self.held())))
    }

    /// The progress of the WQE at ring index `index`.
    pub fn work(&self, index: u32) -> &Progress {
        &self.works[self.slot(index)]
    }

    /// The same, to update.
    pub fn work_mut(&mut self, index: u32) -> &mut Progress {
        let slot = self.slot(index);
        &mut self.works[slot]
    }

    /// Takes a validated WQE of `len` bytes (a READ if `is_read`) at index `fetched`: it gets
    /// the next PSNs, as many as its packets (or responses) at `mtu`. Returns its index, or
    /// `None` if the copies are all in use.
    pub fn push(&mut self, len: u32, is_read: bool, mtu: IbMtu) -> Option<u32> {
        let index = self.take_slot()?;
        let npkts = packet_count(len, mtu);
        *self.work_mut(index) = Progress {
            is_read,
            len,
            first_psn: self.next_psn,
            npkts,
            ..Progress::default()
        };
        self.next_psn = self.next_psn.add(npkts);
        Some(index)
    }

    /// Takes a validated atomic at index `fetched` whose SGEs hold `len` bytes (the result
    /// takes the first 8): one PSN, answered by an atomic acknowledge. Returns its index, or
    /// `None` if the copies are all in use.
    pub fn push_atomic(&mut self, len: u32) -> Option<u32> {
        let index = self.take_slot()?;
        *self.work_mut(index) = Progress {
            is_read: true,
            atomic: true,
            len,
            first_psn: self.next_psn,
            npkts: 1,
            ..Progress::default()
        };
        self.next_psn = self.next_psn.add(1);
        Some(index)
    }

    /// Takes a validated ATOMIC WRITE at index `fetched`: one PSN, 8 bytes, answered by an
    /// empty READ response. Returns its index, or `None` if the copies are all in use.
    pub fn push_atomic_write(&mut self) -> Option<u32> {
        let index = self.take_slot()?;
        *self.work_mut(index) = Progress {
            is_read: true,
            atomic_write: true,
            len: super::atomic::ATOMIC_BYTES,
            first_psn: self.next_psn,
            npkts: 1,
            ..Progress::default()
        };
        self.next_psn = self.next_psn.add(1);
        Some(index)
    }

    /// Takes a WQE that gets no PSNs: one that failed validation, or one taken off the ring
    /// only to be flushed. Returns its index, or `None` if the copies are all in use.
    pub fn push_unnumbered(&mut self, is_read: bool) -> Option<u32> {
        let index = self.take_slot()?;
        *self.work_mut(index) = Progress {
            is_read,
            ..Progress::default()
        };
        Some(index)
    }

    /// Takes a local operation (no packets, no PSNs) at index `fetched`. Returns its index, or
    /// `None` if the copies are all in use.
    pub fn push_local(&mut self) -> Option<u32> {
        let index = self.take_slot()?;
        *self.work_mut(index) = Progress {
            local: true,
            first_psn: self.next_psn,
            ..Progress::default()
        };
        Some(index)
    }

    fn take_slot(&mut self) -> Option<u32> {
        if self.held() >= self.capacity() {
            return None;
        }
        let index = self.fetched;
        self.fetched = index.wrapping_add(1);
        Some(index)
    }

    /// Starts over (RESET): the provider resets its side of the ring too.
    pub fn reset(&mut self) {
        self.consumer = 0;
        self.fetched = 0;
        self.cur = 0;
        self.started_end = 0;
        self.asked_again = None;
    }

    /// Starts sending at `sq_psn` (move to RTS).
    pub fn start(&mut self, sq_psn: Psn) {
        self.next_psn = sq_psn;
        self.sent_end = sq_psn;
        self.acked_psn = sq_psn;
    }

    /// Every WQE that sent a packet is complete (SQD's "drained").
    pub fn nothing_started_left(&self) -> bool {
        self.consumer == self.started_end
    }

    /// A WQE in flight has packets not yet acknowledged.
    pub fn outstanding(&self) -> bool {
        self.consumer != self.cur || (self.cur != self.fetched && self.work(self.cur).sent > 0)
    }

    /// `psns` more packets (READ responses asked for) of the WQE at `index`, the one at `cur`,
    /// went out.
    pub fn record_sent(&mut self, index: u32, psns: u32) {
        if index == self.started_end {
            self.started_end = index.wrapping_add(1);
        }
        let w = self.work_mut(index);
        w.sent = w.sent.saturating_add(psns);
        let end = w.first_psn.add(w.sent);
        let fully_sent = w.fully_sent();
        if end.diff(self.sent_end) > 0 {
            self.sent_end = end;
        }
        if fully_sent {
            self.cur = self.cur.wrapping_add(1);
        }
    }

    /// The local operation at `index`, the one at `cur`, was executed (or had been, before a
    /// rewind went back past it): sending moves on to the next WQE.
    pub fn record_local_done(&mut self, index: u32) {
        if index == self.started_end {
            self.started_end = index.wrapping_add(1);
        }
        let w = self.work_mut(index);
        if w.local {
            w.sent = 1;
        }
        if index == self.cur {
            self.cur = index.wrapping_add(1);
        }
    }

    /// The oldest WQE is a local operation already executed: it completes now (everything
    /// before it did).
    pub fn oldest_is_done_local(&self) -> bool {
        self.consumer != self.fetched && self.work(self.consumer).local_done()
    }

    /// Completes the oldest WQE (the caller made sure there is one): returns its progress, for
    /// the completion, and hands its slot back.
    pub fn retire(&mut self) -> Progress {
        let index = self.consumer;
        let w = *self.work(index);
        if self.cur == index {
            self.cur = index.wrapping_add(1);
        }
        self.consumer = index.wrapping_add(1);
        if self.started_end == index {
            self.started_end = self.consumer; // retired without sending (flushed)
        }
        w
    }

    /// Sends again from `psn` (which a WQE in flight uses): every packet from there on. A READ
    /// asks again from its first missing response. A stale PSN (no WQE in flight uses it)
    /// changes nothing.
    pub fn rewind(&mut self, psn: Psn) {
        // The WQE at `cur` may be partly sent: it counts as in flight.
        let end = if self.cur != self.fetched {
            self.cur.wrapping_add(1)
        } else {
            self.cur
        };
        let mut index = self.consumer;
        while index != end && !self.work(index).uses(psn) {
            index = index.wrapping_add(1);
        }
        if index == end {
            return;
        }
        let mut i = index;
        while i != end {
            let w = self.work_mut(i);
            // A local operation is executed once: going back past it does not undo it.
            w.sent = if w.local {
                w.sent
            } else if w.is_read {
                w.read_got
            } else if i == index {
                psn.diff(w.first_psn).unsigned_abs()
            } else {
                0
            };
            i = i.wrapping_add(1);
        }
        self.cur = index;
    }

    /// After a rewind, packets the peer has since acknowledged need not go again: the WQE being
    /// sent resumes past them (at its last packet at most, whose ACK completes it).
    fn skip_acknowledged(&mut self) {
        if self.cur == self.fetched {
            return;
        }
        let acked = self.acked_psn;
        let w = self.work_mut(self.cur);
        if w.is_read || w.npkts == 0 {
            return;
        }
        let done = acked.diff(w.first_psn);
        if done > 0 && done.unsigned_abs() > w.sent {
            w.sent = done.unsigned_abs().min(w.npkts.saturating_sub(1));
        }
    }

    /// An ACK or NAK says everything before `through` arrived: the oldest unacknowledged PSN
    /// moves there if that is forward and within what was numbered.
    pub fn acknowledge_through(&mut self, through: Psn) {
        if through.diff(self.acked_psn) > 0 && through.diff(self.next_psn) <= 0 {
            self.acked_psn = through;
            self.skip_acknowledged();
            self.forget_recovered_loss();
        }
    }

    /// A loss asked for again is behind `acked_psn` now: one at the same PSN later (after the
    /// PSNs wrapped) is a new one.
    fn forget_recovered_loss(&mut self) {
        if self
            .asked_again
            .is_some_and(|at| at.diff(self.acked_psn) < 0)
        {
            self.asked_again = None;
        }
    }

    /// Where a rewind to `from` resends from: for a READ, its first missing response. The same
    /// loss named by a gap in the responses and by an ACK past the READ (which names the READ's
    /// first PSN) is the same place.
    fn resend_point(&self, from: Psn) -> Psn {
        let mut index = self.consumer;
        while index != self.fetched {
            let w = self.work(index);
            if w.uses(from) {
                return if w.is_read {
                    w.first_psn.add(w.read_got)
                } else {
                    from
                };
            }
            index = index.wrapping_add(1);
        }
        from
    }

    /// Sends again from `from` (a READ asks again from its first missing response; every later
    /// request goes again), once per loss until a timeout, or until what it resent is
    /// acknowledged: every later packet of a READ burst that lost one would ask again, and the
    /// responder answers each repeated READ with a whole new burst, which loses more; a NAK the
    /// link duplicated names the loss again; and each ACK the responder sends for a repeated
    /// request past a READ whose responses are still coming says the READ is incomplete again,
    /// which rewinding each time would answer with a window of repeats, each ACKed. Returns
    /// whether it rewound.
    pub fn ask_again(&mut self, from: Psn) -> bool {
        let at = self.resend_point(from);
        if self.asked_again == Some(at) {
            return false;
        }
        self.asked_again = Some(at);
        self.rewind(from);
        true
    }

    /// Nothing was asked for again yet: a retransmission timeout, an RNR NAK (whose timer
    /// resends), or a QP without a retransmission timer (what names a loss is all that can
    /// resend it).
    pub fn forget_asked_again(&mut self) {
        self.asked_again = None;
    }

    /// The last packet sent before the requester's position, if it is unacknowledged and not
    /// a READ or atomic request: what a tail-loss probe sends again. (Asking again for a READ's
    /// responses asks for all it misses, a retransmission: that is the timeout's.)
    fn last_sent(&self) -> Option<Psn> {
        // The WQE at `cur` may be partly sent; everything before it was sent whole.
        let mut index = if self.cur != self.fetched {
            self.cur.wrapping_add(1)
        } else {
            self.cur
        };
        // Bounded: at most the WQEs held, each looked at once.
        while index != self.consumer {
            index = index.wrapping_sub(1);
            let w = self.work(index);
            if !w.local && w.sent > 0 {
                let last = w.first_psn.add(w.sent.saturating_sub(1));
                return (!w.is_read && last.diff(self.acked_psn) >= 0).then_some(last);
            }
        }
        None
    }

    /// A tail-loss probe: the requester goes back one packet, to send its last one again.
    /// Returns whether there was one to go back to.
    pub fn probe(&mut self) -> bool {
        let Some(last) = self.last_sent() else {
            return false;
        };
        self.rewind(last);
        true
    }

    /// The retransmission timer expired with packets outstanding: resends from the oldest
    /// unacknowledged packet (for a READ, its first missing response), and a gap may be asked
    /// for again. Returns the PSN it resends from.
    pub fn on_timeout(&mut self) -> Psn {
        self.forget_asked_again();
        let w = *self.work(self.consumer);
        let from = if w.is_read {
            w.first_psn.add(w.read_got)
        } else {
            self.acked_psn
        };
        let from = if from.diff(w.first_psn) < 0 {
            w.first_psn
        } else {
            from
        };
        self.rewind(from);
        from
    }

    /// What a READ response at `psn` (within what was sent and is unacknowledged) means. Call
    /// again after acting on [`ReadResponse::RetireOldest`].
    pub fn read_response(&self, psn: Psn) -> ReadResponse {
        if self.consumer == self.cur && (self.cur == self.fetched || self.work(self.cur).sent == 0)
        {
            return ReadResponse::Stale;
        }
        let w = self.work(self.consumer);
        if w.uses(psn) {
            if !w.is_read || w.sent == 0 {
                return ReadResponse::Stale;
            }
            let expected = w.first_psn.add(w.read_got);
            let ahead = psn.diff(expected);
            return if ahead < 0 {
                ReadResponse::Duplicate
            } else if ahead > 0 {
                ReadResponse::Gap((w.sent > w.read_got).then_some(expected))
            } else {
                ReadResponse::Next(self.consumer)
            };
        }
        if w.last_psn().diff(psn) >= 0 {
            return ReadResponse::Stale; // from before the WQE in flight
        }
        if w.is_read {
            return ReadResponse::EarlierReadIncomplete(w.first_psn.add(w.read_got));
        }
        ReadResponse::RetireOldest
    }

    /// The response at `psn`, the next one of the READ at `index`, was taken: everything up to
    /// it is acknowledged.
    pub fn read_response_arrived(&mut self, index: u32, psn: Psn) {
        let w = self.work_mut(index);
        w.read_got = w.read_got.saturating_add(1);
        self.acked_psn = psn.add(1);
        self.forget_recovered_loss();
    }

    /// The PSNs of every WQE the kernel holds, sent or not (they are assigned when it is
    /// fetched), oldest first.
    pub fn fetched_spans(&self) -> impl Iterator<Item = Span> + '_ {
        let mut index = self.consumer;
        core::iter::from_fn(move || {
            if index == self.fetched {
                return None;
            }
            let span = self.work(index).span();
            index = index.wrapping_add(1);
            Some(span)
        })
    }

    /// The PSNs of the WQEs in flight (those that sent something, or whose READ responses
    /// began to arrive, or that a rewind is about to send again), oldest first: what an ACK
    /// may complete. A WQE sent before a rewind counts although its `sent` went back to 0: the
    /// responder may have taken it, and answers its repeat with an ACK for the last PSN it
    /// took, which must complete it now, since once `acked_psn` is past it no later ACK can.
    pub fn in_flight_spans(&self) -> impl Iterator<Item = Span> + '_ {
        let mut index = self.consumer;
        core::iter::from_fn(move || {
            if index == self.fetched {
                return None;
            }
            let w = self.work(index);
            let sent_before = !w.local && w.npkts > 0 && w.first_psn.before(self.sent_end);
            if w.sent == 0 && !(w.is_read && w.read_got > 0) && !sent_before {
                return None;
            }
            index = index.wrapping_add(1);
            Some(w.span())
        })
    }
}

/// How many responses the next READ request for `w` asks for, new (`repeat` false) or sent
/// again, with the send window at `window_limit`:
/// - a new request: up to the next multiple of [`READ_PART`] responses, no more than half the
///   window (so the next request goes out while this one's responses arrive: at IB MTU 4096
///   the whole window is 128 packets);
/// - a repeat: the rest of the request it repeats (`reads` remembers it; one response if none
///   does: its responses all arrived, which rewinds never ask again for), never split, since a
///   responder may drop a repeat that is not one of the requests it took.
pub fn read_request_size<R: DerefMut<Target = [super::read_requests::ReadRequest]>>(
    w: &Progress,
    reads: &ReadRequests<R>,
    repeat: bool,
    window_limit: u32,
) -> u32 {
    let left = w.npkts.saturating_sub(w.sent);
    if repeat {
        let at = w.first_psn.add(w.sent);
        return reads.repeat_from(at).unwrap_or(1).min(left);
    }
    let into_part = w.sent.checked_rem(READ_PART).unwrap_or(0);
    READ_PART
        .saturating_sub(into_part)
        .min(left)
        .min((window_limit / 2).max(1))
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test histories, built from small constants
mod tests {
    extern crate std;
    use super::super::{
        completer::{on_aeth, unacknowledged_from, AckOutcome, AfterAck},
        headers::Syndrome,
        read_requests::ReadRequest,
    };
    use super::*;
    use std::{vec, vec::Vec};

    const MTU: IbMtu = IbMtu::Mtu1024;
    const ACK: Syndrome = Syndrome::Ack { credits: 31 };
    const K: u32 = 1024;

    fn queue(capacity: usize) -> SendQueue<Vec<Progress>> {
        SendQueue::new(vec![Progress::default(); capacity]).unwrap()
    }

    /// Sends every packet of the WQE at `cur`, one step per packet, as the requester does.
    fn send_all(q: &mut SendQueue<Vec<Progress>>) {
        while q.cur != q.fetched {
            let index = q.cur;
            if q.work(index).local {
                q.record_local_done(index);
                continue;
            }
            let left = q.work(index).npkts - q.work(index).sent;
            q.record_sent(index, left);
        }
    }

    #[test]
    fn an_ack_past_rewound_work_completes_it() {
        // Three one-packet WRITEs all reach the responder, but their ACK is lost: the timer
        // resends from the first, the window shut to one packet. The responder answers the
        // repeat with an ACK for the last PSN it took (2): all three are complete. Counting
        // only what was sent since the rewind, the completer retired one, moved `acked_psn`
        // to 3, and dropped every later ACK for PSN 2 as stale: the QP stalled for good.
        let mut q = queue(8);
        q.start(Psn::new(0));
        for _ in 0..3 {
            q.push(K, false, MTU);
        }
        send_all(&mut q);
        assert_eq!(q.on_timeout(), Psn::new(0));
        assert_eq!((q.cur, q.work(1).sent, q.work(2).sent), (0, 0, 0));
        q.record_sent(0, 1);
        assert_eq!(ack(&mut q, Psn::new(2)), AfterAck::Nothing);
        assert_eq!(q.consumer, 3, "all three complete");
        assert_eq!(q.acked_psn, Psn::new(3));
        assert!(!q.outstanding());
    }

    #[test]
    fn a_local_operation_takes_no_psn_and_completes_with_what_precedes_it() {
        let mut q = queue(8);
        q.start(Psn::new(10));
        q.push(K, false, MTU); // PSN 10
        assert_eq!(q.push_local(), Some(1));
        q.push(K, false, MTU); // PSN 11
        assert_eq!(
            q.work(2).first_psn,
            Psn::new(11),
            "the local WQE took no PSN"
        );
        assert!(!q.work(1).uses(Psn::new(10)) && !q.work(1).uses(Psn::new(11)));
        send_all(&mut q);
        assert_eq!(q.sent_end, Psn::new(12), "nothing was sent for it");
        assert!(q.work(1).local_done());
        assert_eq!(ack(&mut q, Psn::new(10)), AfterAck::Nothing);
        assert_eq!(
            q.consumer, 2,
            "the WRITE and the registration after it complete"
        );
        assert_eq!(ack(&mut q, Psn::new(11)), AfterAck::Nothing);
        assert_eq!(q.consumer, 3);
        assert!(!q.outstanding());
    }

    #[test]
    fn a_local_operation_waits_for_earlier_work_and_is_not_redone_by_a_rewind() {
        let mut q = queue(8);
        q.start(Psn::new(0));
        q.push(2 * K, false, MTU); // PSNs 0-1
        q.push_local();
        q.push(K, false, MTU); // PSN 2
        send_all(&mut q);
        assert!(
            !q.oldest_is_done_local(),
            "the WRITE before it is not complete"
        );
        q.rewind(Psn::new(1));
        assert_eq!((q.cur, q.work(0).sent), (0, 1));
        assert_eq!(q.work(1).sent, 1, "still executed");
        assert_eq!(q.work(2).sent, 0);
        q.record_sent(0, 1);
        assert_eq!(q.cur, 1);
        q.record_local_done(1);
        assert_eq!((q.cur, q.sent_end), (2, Psn::new(3)));
        // The ACK of the WRITE completes the local WQE after it too.
        assert_eq!(ack(&mut q, Psn::new(1)), AfterAck::Nothing);
        assert_eq!(q.consumer, 2, "through the local WQE");
    }

    #[test]
    fn a_local_operation_after_a_read_completes_once_the_read_does() {
        let mut q = queue(8);
        q.start(Psn::new(0));
        q.push(2 * K, true, MTU); // responses 0-1
        q.push_local();
        send_all(&mut q);
        assert_eq!(q.read_response(Psn::new(0)), ReadResponse::Next(0));
        q.read_response_arrived(0, Psn::new(0));
        assert_eq!(q.read_response(Psn::new(1)), ReadResponse::Next(0));
        q.read_response_arrived(0, Psn::new(1));
        q.retire();
        assert!(q.oldest_is_done_local(), "nothing else will complete it");
        q.retire();
        assert!(!q.outstanding() && q.nothing_started_left());
    }

    #[test]
    fn a_local_operation_alone_is_done_at_once() {
        let mut q = queue(4);
        q.start(Psn::new(5));
        q.push_local();
        assert!(!q.oldest_is_done_local(), "not executed yet");
        assert!(!q.outstanding());
        send_all(&mut q);
        assert!(q.oldest_is_done_local());
        assert_eq!(q.next_psn, Psn::new(5));
        q.retire();
        assert_eq!((q.consumer, q.cur, q.started_end), (1, 1, 1));
    }

    /// An ACK for `psn` as the completer handles it: completes, then moves `acked_psn`.
    fn ack(q: &mut SendQueue<Vec<Progress>>, psn: Psn) -> AfterAck {
        let AckOutcome { completed, then } = on_aeth(q.in_flight_spans(), ACK, psn);
        for _ in 0..completed {
            q.retire();
        }
        let through = unacknowledged_from(q.fetched_spans(), ACK, psn);
        q.acknowledge_through(through);
        then
    }

    #[test]
    fn capacity_must_be_a_power_of_two() {
        assert!(SendQueue::new(Vec::<Progress>::new()).is_none());
        assert!(SendQueue::new(vec![Progress::default(); 3]).is_none());
        assert_eq!(queue(8).capacity(), 8);
    }

    #[test]
    fn fetch_numbers_packets_and_stops_at_capacity() {
        let mut q = queue(4);
        q.start(Psn::new(100));
        assert_eq!(q.push(3 * K, false, MTU), Some(0));
        assert_eq!(
            q.push(0, false, MTU),
            Some(1),
            "an empty message uses one PSN"
        );
        assert_eq!(q.push(5 * K + 1, true, MTU), Some(2));
        assert_eq!(q.work(0).first_psn, Psn::new(100));
        assert_eq!(q.work(1).first_psn, Psn::new(103));
        assert_eq!((q.work(2).first_psn, q.work(2).npkts), (Psn::new(104), 6));
        assert_eq!(q.next_psn, Psn::new(110));
        assert_eq!(q.fetchable(10), Some(1), "one copy left");
        assert_eq!(q.push_unnumbered(false), Some(3));
        assert_eq!(q.push(K, false, MTU), None, "every copy in use");
        assert_eq!(q.next_psn, Psn::new(110), "an unnumbered WQE takes no PSN");
    }

    #[test]
    fn a_producer_index_moved_back_is_refused() {
        let mut q = queue(8);
        q.push(K, false, MTU);
        q.push(K, false, MTU);
        assert_eq!(q.fetchable(1), None, "2 held, the ring says 1 posted");
        assert_eq!(q.fetchable(2), Some(0));
        assert_eq!(q.fetchable(u32::MAX), Some(6), "no more than the copies");
    }

    #[test]
    fn indices_and_psns_wrap() {
        let mut q = queue(4);
        q.consumer = u32::MAX - 1;
        q.fetched = u32::MAX - 1;
        q.cur = u32::MAX - 1;
        q.started_end = u32::MAX - 1;
        q.start(Psn::new(0xff_fffe));
        for _ in 0..3 {
            q.push(2 * K, false, MTU);
        }
        assert_eq!(q.fetched, 1);
        assert_eq!(q.work(0).first_psn, Psn::new(2));
        send_all(&mut q);
        assert_eq!(q.sent_end, Psn::new(4));
        assert_eq!(ack(&mut q, Psn::new(3)), AfterAck::Nothing);
        assert_eq!(q.consumer, 1, "all three complete across both wraps");
        assert!(q.nothing_started_left() && !q.outstanding());
    }

    #[test]
    fn retire_keeps_cur_and_started_end_with_the_consumer() {
        let mut q = queue(8);
        q.push(K, false, MTU);
        q.push(K, false, MTU);
        // Flushed before anything was sent.
        assert_eq!(q.retire().first_psn, Psn::new(0));
        assert_eq!((q.consumer, q.cur, q.started_end), (1, 1, 1));
        q.record_sent(1, 1);
        assert_eq!((q.cur, q.started_end), (2, 2));
        assert!(!q.nothing_started_left(), "SQD waits for the second");
        q.retire();
        assert!(q.nothing_started_left());
    }

    #[test]
    fn a_stale_rewind_changes_nothing() {
        let mut q = queue(8);
        q.push(4 * K, false, MTU);
        send_all(&mut q);
        let before = (*q.work(0), q.cur);
        q.rewind(Psn::new(4)); // not sent by anything in flight
        q.rewind(Psn::new(0xff_ffff)); // before the first
        assert_eq!((*q.work(0), q.cur), before);
    }

    #[test]
    fn a_sequence_nak_resends_from_its_psn_and_every_later_message() {
        let mut q = queue(8);
        q.push(4 * K, false, MTU); // PSNs 0..4
        q.push(2 * K, true, MTU); // READ responses 4..6
        q.push(2 * K, false, MTU); // 6..8
        send_all(&mut q);
        q.work_mut(1).read_got = 1;
        q.rewind(Psn::new(2));
        assert_eq!(q.cur, 0);
        assert_eq!(q.work(0).sent, 2, "the WRITE resends from PSN 2");
        assert_eq!(
            q.work(1).sent,
            1,
            "the READ asks from its first missing response"
        );
        assert_eq!(q.work(2).sent, 0);
        assert_eq!(
            q.sent_end,
            Psn::new(8),
            "what may be answered does not shrink"
        );
    }

    /// The go-back-N storm (design.md, congestion after a timeout): after a timeout the whole
    /// window was resent although ACKs kept arriving for most of it. The ACKs that cover
    /// packets about to be resent must skip them.
    #[test]
    fn resending_skips_what_a_later_ack_covered() {
        let mut q = queue(8);
        q.push(128 * K, false, MTU);
        send_all(&mut q);
        assert_eq!(q.on_timeout(), Psn::new(0));
        assert_eq!(q.work(0).sent, 0);
        q.record_sent(0, 1); // the probe
                             // The receiver was slow, not lossy: its ACK for PSN 99 comes now.
        assert_eq!(ack(&mut q, Psn::new(99)), AfterAck::Nothing);
        assert_eq!(q.acked_psn, Psn::new(100));
        assert_eq!(q.work(0).sent, 100, "PSNs 0..100 are not sent again");
        // Even an ACK of everything leaves the last packet to send: its ACK completes it.
        ack(&mut q, Psn::new(126));
        assert_eq!(q.work(0).sent, 127);
        assert_eq!(q.consumer, 0);
    }

    #[test]
    fn an_ack_never_acknowledges_read_responses() {
        let mut q = queue(8);
        q.push(K, false, MTU); // 0
        q.push(4 * K, true, MTU); // responses 1..5
        send_all(&mut q);
        // A responder answers a repeated WRITE with an ACK of the last PSN it took, which may
        // lie inside the READ.
        ack(&mut q, Psn::new(3));
        assert_eq!(q.consumer, 1, "the WRITE completes");
        assert_eq!(
            q.acked_psn,
            Psn::new(1),
            "the READ's responses are still expected"
        );
        assert_eq!(q.read_response(Psn::new(1)), ReadResponse::Next(1));
    }

    /// The READ re-request flood (design.md, completer): one lost response made every later
    /// response of the burst ask again, each answered with a whole new burst.
    #[test]
    fn a_gap_is_asked_for_once() {
        let mut q = queue(8);
        q.push(32 * K, true, MTU);
        send_all(&mut q);
        assert_eq!(q.read_response(Psn::new(0)), ReadResponse::Next(0));
        q.read_response_arrived(0, Psn::new(0));
        // PSN 1 is lost: 2..32 arrive past the gap. After each, the requester runs and sends
        // what a rewind asked for (the rest of the part).
        let mut asked = 0;
        for psn in 2..32 {
            match q.read_response(Psn::new(psn)) {
                ReadResponse::Gap(Some(from)) => {
                    assert_eq!(from, Psn::new(1));
                    asked += u32::from(q.ask_again(from));
                }
                other => panic!("PSN {psn}: {other:?}"),
            }
            if q.cur != q.fetched {
                assert_eq!(q.work(0).sent, 1, "asks again from response 1");
                q.record_sent(0, 31);
            }
        }
        assert_eq!(asked, 1, "one repeated request for one lost response");
        // The timer may ask again for the same gap (the repeat was lost too).
        q.on_timeout();
        q.record_sent(0, 31);
        assert!(q.ask_again(Psn::new(1)));
    }

    /// A READ whose responses were lost, then WRITEs: the first ACK past the READ sends it
    /// again with the WRITEs; the responder ACKs each repeated WRITE while the READ's
    /// responses are still on their way, and each of those ACKs is past the READ again. Each
    /// used to rewind and resend everything from the READ, whose repeats were ACKed again.
    #[test]
    fn acks_past_a_read_being_answered_resend_it_once() {
        let mut q = queue(8);
        q.start(Psn::new(0));
        q.push(4 * K, true, MTU); // READ, responses 0-3
        for _ in 0..4 {
            q.push(K, false, MTU); // WRITEs, PSNs 4-7
        }
        send_all(&mut q);
        let mut resent = 0;
        for psn in 4..8 {
            assert_eq!(ack(&mut q, Psn::new(psn)), AfterAck::RetryFrom(Psn::new(0)));
            if q.ask_again(Psn::new(0)) {
                resent += 1;
                assert_eq!((q.cur, q.work(0).sent), (0, 0), "the READ from response 0");
                send_all(&mut q);
            }
        }
        assert_eq!(resent, 1);
        assert_eq!(q.acked_psn, Psn::new(0), "the READ is still unanswered");
        // Its responses arrive: it completes, and the ACKs before complete the WRITEs.
        for psn in 0..4 {
            assert_eq!(q.read_response(Psn::new(psn)), ReadResponse::Next(0));
            q.read_response_arrived(0, Psn::new(psn));
        }
        q.retire();
        assert_eq!(ack(&mut q, Psn::new(7)), AfterAck::Nothing);
        assert!(!q.outstanding());
    }

    /// A READ whose first responses arrived and then one was lost: the gap and the ACKs past
    /// the READ (which name its first PSN) are one loss, asked for once; once the responses
    /// asked for arrive, a later loss is asked for again.
    #[test]
    fn a_gap_and_acks_past_the_read_are_one_loss() {
        let mut q = queue(8);
        q.start(Psn::new(0));
        q.push(8 * K, true, MTU); // READ, responses 0-7
        q.push(K, false, MTU); // WRITE, PSN 8
        send_all(&mut q);
        for psn in 0..2 {
            q.read_response_arrived(0, Psn::new(psn));
        }
        // Response 2 is lost; 3 arrives past the gap.
        assert_eq!(
            q.read_response(Psn::new(3)),
            ReadResponse::Gap(Some(Psn::new(2)))
        );
        assert!(q.ask_again(Psn::new(2)));
        assert_eq!((q.cur, q.work(0).sent), (0, 2), "the READ from response 2");
        send_all(&mut q);
        assert_eq!(ack(&mut q, Psn::new(8)), AfterAck::RetryFrom(Psn::new(0)));
        assert!(!q.ask_again(Psn::new(0)), "the same loss");
        // Responses 2-4 arrive; 5 is lost, and the WRITE's ACK comes past the READ again.
        for psn in 2..5 {
            assert_eq!(q.read_response(Psn::new(psn)), ReadResponse::Next(0));
            q.read_response_arrived(0, Psn::new(psn));
        }
        assert_eq!(ack(&mut q, Psn::new(8)), AfterAck::RetryFrom(Psn::new(0)));
        assert!(q.ask_again(Psn::new(0)), "a new loss");
        assert_eq!((q.cur, q.work(0).sent), (0, 5), "the READ from response 5");
    }

    #[test]
    fn a_gap_already_rewound_to_is_not_asked_for() {
        let mut q = queue(8);
        q.push(4 * K, true, MTU);
        send_all(&mut q);
        q.read_response_arrived(0, Psn::new(0));
        q.rewind(Psn::new(1));
        assert_eq!(q.read_response(Psn::new(2)), ReadResponse::Gap(None));
    }

    #[test]
    fn responses_to_a_later_read_mean_the_earlier_ones_were_lost() {
        let mut q = queue(8);
        q.push(2 * K, true, MTU); // responses 0..2
        q.push(2 * K, true, MTU); // responses 2..4
        send_all(&mut q);
        q.read_response_arrived(0, Psn::new(0));
        assert_eq!(
            q.read_response(Psn::new(2)),
            ReadResponse::EarlierReadIncomplete(Psn::new(1))
        );
        assert_eq!(q.read_response(Psn::new(0)), ReadResponse::Duplicate);
        assert_eq!(q.read_response(Psn::new(1)), ReadResponse::Next(0));
    }

    #[test]
    fn a_read_response_acknowledges_the_writes_before_it() {
        let mut q = queue(8);
        q.push(K, false, MTU); // 0
        q.push(K, false, MTU); // 1
        q.push(K, true, MTU); // response 2
        q.push(K, false, MTU); // 3, not sent
        for _ in 0..3 {
            let index = q.cur;
            q.record_sent(index, 1);
        }
        let psn = Psn::new(2);
        let mut retired = 0;
        while q.read_response(psn) == ReadResponse::RetireOldest {
            q.retire();
            retired += 1;
        }
        assert_eq!(retired, 2);
        assert_eq!(q.read_response(psn), ReadResponse::Next(2));
        assert_eq!(
            q.read_response(Psn::new(1)),
            ReadResponse::Stale,
            "from before the READ"
        );
    }

    #[test]
    fn an_atomic_takes_one_psn_and_completes_only_with_its_acknowledge() {
        let mut q = queue(8);
        q.push(K, false, MTU); // WRITE, PSN 0
        let atomic = q.push_atomic(8).unwrap(); // PSN 1
        q.push(K, false, MTU); // WRITE, PSN 2
        assert_eq!(q.next_psn, Psn::new(3));
        let w = *q.work(atomic);
        assert!(w.atomic && w.is_read && w.npkts == 1 && w.len == 8);
        send_all(&mut q);
        // An ACK past it (for the later WRITE) means its acknowledge was lost: sent again.
        assert_eq!(ack(&mut q, Psn::new(2)), AfterAck::RetryFrom(Psn::new(1)));
        q.rewind(Psn::new(1));
        assert_eq!((q.consumer, q.cur), (1, 1), "the first WRITE completed");
        assert_eq!(q.work(atomic).sent, 0);
        send_all(&mut q);
        // The repeat's acknowledge arrives: it is the atomic's response.
        assert_eq!(q.read_response(Psn::new(1)), ReadResponse::Next(atomic));
        q.read_response_arrived(atomic, Psn::new(1));
        assert!(q.retire().atomic);
        // A timeout with only the atomic out resends the atomic.
        let mut q = queue(8);
        q.push_atomic(8);
        send_all(&mut q);
        assert_eq!(q.on_timeout(), Psn::new(0));
        assert_eq!((q.cur, q.work(0).sent), (0, 0));
    }

    #[test]
    fn nothing_sent_means_every_response_is_stale() {
        let mut q = queue(8);
        assert_eq!(q.read_response(Psn::new(0)), ReadResponse::Stale);
        q.push(K, true, MTU);
        assert_eq!(q.read_response(Psn::new(0)), ReadResponse::Stale);
        assert!(!q.outstanding());
    }

    #[test]
    fn a_timeout_resends_from_the_oldest_unacknowledged() {
        let mut q = queue(8);
        q.push(4 * K, false, MTU); // 0..4
        q.push(2 * K, true, MTU); // 4..6
        send_all(&mut q);
        ack(&mut q, Psn::new(1));
        assert_eq!(q.on_timeout(), Psn::new(2));
        assert_eq!((q.cur, q.work(0).sent, q.work(1).sent), (0, 2, 0));
        send_all(&mut q);
        ack(&mut q, Psn::new(3));
        q.read_response_arrived(1, Psn::new(4));
        assert_eq!(
            q.on_timeout(),
            Psn::new(5),
            "a READ resumes at its first missing response"
        );
        assert_eq!((q.cur, q.work(1).sent), (1, 1));
    }

    #[test]
    fn a_probe_sends_the_last_packet_again() {
        let mut q = queue(8);
        q.start(Psn::new(0xff_fffe));
        q.push(4 * K, false, MTU); // 0xfffffe..=0x1
        q.push(2 * K, false, MTU); // 0x2..=0x3
        q.record_sent(0, 4);
        q.record_sent(1, 1); // the window shut after 0x2
        assert!(q.probe());
        assert_eq!((q.cur, q.work(1).sent), (1, 0), "0x2 goes again, then 0x3");
        assert_eq!(q.sent_end, Psn::new(3), "a resend: the end stays");
        q.record_sent(1, 2);
        // Everything sent: the last WQE's last packet, across the PSN wrap.
        assert!(q.probe());
        assert_eq!((q.cur, q.work(1).sent), (1, 1));
        q.record_sent(1, 1);
        // A local operation after it is passed over.
        q.push_local();
        send_all(&mut q);
        assert!(q.probe());
        assert_eq!((q.cur, q.work(1).sent), (1, 1));
        assert!(q.work(2).local_done(), "executed once, not again");
        send_all(&mut q);
        // Nothing unacknowledged: nothing to probe.
        ack(&mut q, Psn::new(3));
        assert!(!q.probe());
        assert_eq!(q.cur, q.fetched);
    }

    #[test]
    fn a_read_or_atomic_last_is_left_to_the_timeout() {
        let mut q = queue(8);
        q.push(K, false, MTU); // 0
        q.push(4 * K, true, MTU); // 1..5
        send_all(&mut q);
        q.read_response_arrived(1, Psn::new(1));
        assert!(
            !q.probe(),
            "asking again for a READ's responses is a retransmission"
        );
        assert_eq!((q.cur, q.work(1).sent), (2, 4), "nothing moved");
        let mut q = queue(8);
        q.push(K, false, MTU);
        q.push_atomic(8);
        send_all(&mut q);
        assert!(!q.probe());
    }

    #[test]
    fn read_requests_come_in_parts_and_repeat_whole() {
        let mut reads = ReadRequests::new(vec![ReadRequest::default(); 4]);
        let npkts = 3 * READ_PART + 4;
        let window = 4 * READ_PART;
        let mut w = Progress {
            is_read: true,
            len: npkts * K,
            npkts,
            ..Progress::default()
        };
        assert_eq!(read_request_size(&w, &reads, false, window), READ_PART);
        assert_eq!(
            read_request_size(&w, &reads, false, 1),
            1,
            "after a timeout"
        );
        assert_eq!(
            read_request_size(&w, &reads, false, READ_PART),
            READ_PART / 2,
            "half the window: the next part overlaps"
        );
        w.sent = 1;
        assert_eq!(
            read_request_size(&w, &reads, false, window),
            READ_PART - 1,
            "ends where parts end"
        );
        w.sent = 3 * READ_PART;
        assert_eq!(
            read_request_size(&w, &reads, false, window),
            4,
            "no more than is left"
        );
        // A part first asked for with a small window is repeated at its first size, whatever
        // the window has grown to.
        reads
            .push(ReadRequest {
                first: Psn::new(READ_PART),
                count: 2,
            })
            .unwrap();
        w.sent = READ_PART;
        assert_eq!(read_request_size(&w, &reads, true, window), 2);
        w.sent = READ_PART + 1;
        assert_eq!(read_request_size(&w, &reads, true, window), 1);
        w.sent = READ_PART + 18;
        assert_eq!(
            read_request_size(&w, &reads, true, window),
            1,
            "unknown: one response"
        );
    }
}
