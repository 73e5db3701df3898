//! The RDMA READ responses a responder owes, in PSN order (IBA 9.7.5.1.3, 9.7.5.2.2).
//!
//! A READ request of up to 2 GiB asks for up to 2^19 response packets: far too many to send
//! from the receive path in one go. The responder queues one [`ReadReply`] per accepted request
//! and sends its packets a batch at a time from process context. Requests that arrive meanwhile
//! are executed at once, but their ACKs wait until the queue is empty, so the requester sees
//! responses in PSN order. A repeated (duplicate) READ request restarts the responses from its
//! PSN: what the queue owes from that PSN on is replaced by it.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use core::ops::DerefMut;

use super::{
    mtu::IbMtu,
    opcode::Opcode,
    psn::{Psn, PSN_MASK},
    segment::{packet_count, read_response_opcode},
};

/// READ replies a QP must be able to owe at once: one per READ the requester may have
/// outstanding (`max_dest_rd_atomic` <= 128), and one for a repeated request that replaces the
/// tail.
pub const MAX_READ_REPLIES: usize = 129;

/// The reply slots of a QP whose requester may have `max_dest_rd_atomic` READs outstanding
/// (0 counts as 1), plus one for a repeated request: [`MAX_READ_REPLIES`] at the most. More
/// repeats than that make room for themselves and for new requests by dropping older repeats.
pub fn slots_for(max_dest_rd_atomic: u8) -> usize {
    usize::from(max_dest_rd_atomic.max(1))
        .saturating_add(1)
        .min(MAX_READ_REPLIES)
}

/// The responses owed for one READ request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadReply {
    /// The R_Key the request named.
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub va: u64,
    /// Bytes asked for.
    pub len: u32,
    /// PSN of the request (and of its first response).
    pub psn: Psn,
    /// The MSN before this READ completes (its last response carries one more).
    pub msn: u32,
    /// Responses sent so far.
    sent: u32,
    /// Responses to send (fewer than the request's when a repeated request took over the rest).
    end: u32,
    /// Queued for a repeated (duplicate) request: the requester counted the request once,
    /// when it first sent it, so this does not take another of its READ credits.
    repeated: bool,
    /// An atomic's acknowledge, returning this original value (it was executed when queued):
    /// atomics take the same credits as READs, and their answers keep PSN order with them.
    atomic: Option<u64>,
}

/// One response packet to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// Its opcode (FIRST/MIDDLE/LAST/ONLY of the whole READ).
    pub opcode: Opcode,
    /// Its PSN.
    pub psn: Psn,
    /// Address of its payload.
    pub va: u64,
    /// Payload bytes.
    pub len: u32,
    /// The MSN its AETH carries, if it has one.
    pub msn: u32,
    /// An atomic acknowledge's original value (its AtomicAckETH).
    pub atomic_orig: Option<u64>,
}

impl ReadReply {
    /// The responses to a READ request at `psn` for `len` bytes at `va`.
    pub const fn new(rkey: u32, va: u64, len: u32, psn: Psn, msn: u32, mtu: IbMtu) -> Self {
        Self {
            rkey,
            va,
            len,
            psn,
            msn,
            sent: 0,
            end: packet_count(len, mtu),
            repeated: false,
            atomic: None,
        }
    }

    /// The acknowledge of the atomic at `psn`, which returned `orig`.
    pub const fn atomic(psn: Psn, msn: u32, orig: u64) -> Self {
        Self {
            rkey: 0,
            va: 0,
            len: 0,
            psn,
            msn,
            sent: 0,
            end: 1,
            repeated: false,
            atomic: Some(orig),
        }
    }

    /// PSNs (response packets) the request consumes.
    pub const fn packets(&self, mtu: IbMtu) -> u32 {
        packet_count(self.len, mtu)
    }

    /// The next response to send, if any.
    pub const fn next(&self, mtu: IbMtu) -> Option<Response> {
        if self.sent >= self.end {
            return None;
        }
        if let Some(orig) = self.atomic {
            return Some(Response {
                opcode: Opcode::RC_ATOMIC_ACK,
                psn: self.psn,
                va: 0,
                len: 0,
                msn: self.msn.wrapping_add(1) & PSN_MASK,
                atomic_orig: Some(orig),
            });
        }
        let count = self.packets(mtu);
        let i = self.sent;
        // `sent < end <= count`: the offset lies inside the request, whose range the responder
        // checked against the MR. Checked anyway: a reply that would wrap simply ends.
        let Some(offset) = i.checked_mul(mtu.bytes()) else {
            return None;
        };
        let Some(rest) = self.len.checked_sub(offset) else {
            return None;
        };
        let Some(va) = self.va.checked_add(offset as u64) else {
            return None;
        };
        let len = if rest < mtu.bytes() {
            rest
        } else {
            mtu.bytes()
        };
        let last = i.saturating_add(1) == count;
        Some(Response {
            opcode: read_response_opcode(i, count),
            psn: self.psn.add(i),
            va,
            len,
            msn: if last {
                self.msn.wrapping_add(1) & PSN_MASK
            } else {
                self.msn
            },
            atomic_orig: None,
        })
    }

    /// The response [`next`](Self::next) returned went out (or was lost: the requester asks
    /// again for what it misses).
    /// Queued for a repeated request (see [`ReadReplies::repeat`]).
    pub fn is_repeated(&self) -> bool {
        self.repeated
    }

    pub fn sent_one(&mut self) {
        self.sent = self.sent.saturating_add(1).min(self.end);
    }

    /// Every response owed was sent.
    pub const fn done(&self) -> bool {
        self.sent >= self.end
    }
}

/// The queue is full: the requester has more READs outstanding than it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// READ replies owed, oldest (lowest PSN) first, in a ring over the slots `S` (as many as the
/// QP may owe; the kernel allocates them with the QP, tests use an array).
#[derive(Debug)]
pub struct ReadReplies<S> {
    slots: S,
    head: usize,
    len: usize,
}

impl<S: DerefMut<Target = [ReadReply]>> ReadReplies<S> {
    /// An empty queue over `slots`.
    pub fn new(slots: S) -> Self {
        Self {
            slots,
            head: 0,
            len: 0,
        }
    }

    /// Nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Replies owed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Replies owed to new requests: what `max_dest_rd_atomic` limits. Replies to repeated
    /// requests are left out: a requester that saw a late LAST response of a request it had
    /// already sent again counts that READ as done while the repeat's responses are still
    /// queued here, and may rightly send a new READ in its place (rdma_rxe's does the same;
    /// refusing it would fail a QP over a lost packet).
    pub fn owed_to_new_requests(&self) -> usize {
        (0..self.len)
            .filter(|&i| !self.slots[self.slot(i)].repeated)
            .count()
    }

    fn slot(&self, i: usize) -> usize {
        self.head
            .wrapping_add(i)
            .checked_rem(self.slots.len())
            .unwrap_or(0)
    }

    /// Queues the reply to a new READ request (its PSN follows everything queued). If the slots
    /// are full, the oldest reply to a repeated request makes room (see [`Self::make_room`]).
    pub fn push(&mut self, reply: ReadReply) -> Result<(), Full> {
        self.make_room()?;
        let tail = self.slot(self.len);
        self.slots[tail] = reply;
        self.len = self.len.saturating_add(1); // below slots.len(): `make_room`
        Ok(())
    }

    /// Frees a slot if none is free, by dropping the oldest reply to a repeated request. The
    /// limit on READs outstanding counts only replies to new requests, so repeats (asked for
    /// when the first responses were late, and often no longer needed) can fill the slots; a
    /// dropped one is lost responses to the requester, which asks again if it still needs them.
    /// `Full` if every slot holds a reply to a new request.
    fn make_room(&mut self) -> Result<(), Full> {
        if self.len < self.slots.len() {
            return Ok(());
        }
        let victim = (0..self.len)
            .find(|&i| self.slots[self.slot(i)].repeated)
            .ok_or(Full)?;
        // Close the gap: everything after it moves one slot towards the head.
        for i in victim..self.len.saturating_sub(1) {
            let (to, from) = (self.slot(i), self.slot(i.saturating_add(1)));
            self.slots[to] = self.slots[from];
        }
        self.len = self.len.saturating_sub(1);
        Ok(())
    }

    /// Queues the reply to a repeated READ request: the requester asks again from its PSN, so
    /// nothing queued from that PSN on is owed any more.
    pub fn repeat(&mut self, reply: ReadReply, mtu: IbMtu) -> Result<(), Full> {
        while let Some(last_index) = self.len.checked_sub(1) {
            let last = self.slot(last_index);
            let queued = &mut self.slots[last];
            let from = reply.psn.diff(queued.psn);
            if from <= 0 {
                // It starts at or after the repeat: dropped.
                self.len = last_index;
                continue;
            }
            // It starts before: it stops short of the repeat's PSN.
            let stop = (from as u32).min(queued.packets(mtu));
            queued.end = queued.end.min(stop);
            if queued.done() {
                self.len = last_index;
            }
            break;
        }
        self.push(ReadReply {
            repeated: true,
            ..reply
        })
    }

    /// The oldest reply, to send from.
    pub fn front_mut(&mut self) -> Option<&mut ReadReply> {
        if self.len == 0 {
            return None;
        }
        let head = self.head;
        Some(&mut self.slots[head])
    }

    /// Drops the oldest reply.
    pub fn pop(&mut self) {
        if let Some(rest) = self.len.checked_sub(1) {
            self.head = self.slot(1);
            self.len = rest;
        }
    }

    /// Moves what is owed into `slots`, oldest first, and returns the old slots; if it does not
    /// fit, changes nothing and returns `slots`.
    pub fn replace_slots(&mut self, mut slots: S) -> S {
        if self.len > slots.len() {
            return slots;
        }
        for (i, new) in slots.iter_mut().take(self.len).enumerate() {
            *new = self.slots[self.slot(i)];
        }
        self.head = 0;
        core::mem::replace(&mut self.slots, slots)
    }

    /// Forgets everything owed (the QP left the states that answer).
    pub fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: IbMtu = IbMtu::Mtu1024;

    type Slots = [ReadReply; MAX_READ_REPLIES];

    fn slots() -> Slots {
        [ReadReply::default(); MAX_READ_REPLIES]
    }

    fn drain(r: &mut ReadReply) -> [Option<Response>; 4] {
        core::array::from_fn(|_| {
            let p = r.next(MTU);
            r.sent_one();
            p
        })
    }

    #[test]
    fn responses_cover_the_request_in_order() {
        let mut r = ReadReply::new(7, 0x1000, 2 * 1024 + 5, Psn::new(0xff_ffff), 41, MTU);
        let [a, b, c, none] = drain(&mut r);
        let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
        assert_eq!(none, None);
        assert!(r.done());
        assert_eq!(
            [a.opcode, b.opcode, c.opcode],
            [
                Opcode::RC_READ_RESPONSE_FIRST,
                Opcode::RC_READ_RESPONSE_MIDDLE,
                Opcode::RC_READ_RESPONSE_LAST
            ]
        );
        assert_eq!(
            [a.psn.get(), b.psn.get(), c.psn.get()],
            [0xff_ffff, 0, 1],
            "PSNs wrap"
        );
        assert_eq!([a.va, b.va, c.va], [0x1000, 0x1400, 0x1800]);
        assert_eq!([a.len, b.len, c.len], [1024, 1024, 5]);
        assert_eq!(
            [a.msn, c.msn],
            [41, 42],
            "the READ completes with its last response"
        );
    }

    #[test]
    fn a_zero_length_read_gets_one_empty_response() {
        let mut r = ReadReply::new(0, 0, 0, Psn::new(3), PSN_MASK, MTU);
        let [only, none, ..] = drain(&mut r);
        let only = only.unwrap();
        assert_eq!(
            (only.opcode, only.len, only.msn),
            (Opcode::RC_READ_RESPONSE_ONLY, 0, 0)
        );
        assert_eq!(none, None);
    }

    #[test]
    fn replies_leave_in_psn_order() {
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        q.push(ReadReply::new(1, 0, 1024, Psn::new(10), 0, MTU))
            .unwrap();
        q.push(ReadReply::new(2, 0, 1024, Psn::new(11), 1, MTU))
            .unwrap();
        assert_eq!(q.front_mut().unwrap().rkey, 1);
        q.pop();
        assert_eq!(q.front_mut().unwrap().rkey, 2);
        q.pop();
        assert!(q.is_empty() && q.front_mut().is_none());
    }

    #[test]
    fn the_queue_holds_what_a_requester_may_have_outstanding() {
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        for i in 0..MAX_READ_REPLIES as u32 {
            q.push(ReadReply::new(i, 0, 1, Psn::new(i), 0, MTU))
                .unwrap();
            // Wrap the ring once on the way.
            if i == 5 {
                q.pop();
                q.push(ReadReply::new(i, 0, 1, Psn::new(i), 0, MTU))
                    .unwrap();
            }
        }
        assert_eq!(
            q.push(ReadReply::new(0, 0, 1, Psn::new(0), 0, MTU)),
            Err(Full)
        );
        assert_eq!(q.len(), MAX_READ_REPLIES);
    }

    #[test]
    fn a_repeated_request_replaces_what_is_owed_from_its_psn() {
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        // READ A: PSNs 100..104, 1 sent; READ B: PSNs 104..106.
        q.push(ReadReply::new(1, 0, 4 * 1024, Psn::new(100), 0, MTU))
            .unwrap();
        q.push(ReadReply::new(2, 0, 2 * 1024, Psn::new(104), 1, MTU))
            .unwrap();
        q.front_mut().unwrap().sent_one();
        // The requester asks again from PSN 102 (A's third response), for A's rest.
        q.repeat(
            ReadReply::new(1, 0x800, 2 * 1024, Psn::new(102), 0, MTU),
            MTU,
        )
        .unwrap();
        assert_eq!(
            q.len(),
            2,
            "B is dropped, A stops before 102, the repeat follows"
        );
        let a = q.front_mut().unwrap();
        let psns = [a.next(MTU).map(|p| p.psn.get()), {
            a.sent_one();
            a.next(MTU).map(|p| p.psn.get())
        }];
        assert_eq!(psns, [Some(101), None]);
        q.pop();
        let again = q.front_mut().unwrap().next(MTU).unwrap();
        assert_eq!(
            (again.psn.get(), again.va, again.opcode),
            (102, 0x800, Opcode::RC_READ_RESPONSE_FIRST)
        );
    }

    #[test]
    fn a_repeat_of_the_oldest_psn_starts_over() {
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        q.push(ReadReply::new(1, 0, 4 * 1024, Psn::new(0xff_fffe), 0, MTU))
            .unwrap();
        q.push(ReadReply::new(2, 0, 1024, Psn::new(2), 1, MTU))
            .unwrap();
        q.repeat(
            ReadReply::new(1, 0, 4 * 1024, Psn::new(0xff_fffe), 0, MTU),
            MTU,
        )
        .unwrap();
        assert_eq!(q.len(), 1);
        // A repeat inside a reply already sent up to it leaves nothing of that reply.
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        q.push(ReadReply::new(1, 0, 4 * 1024, Psn::new(0), 0, MTU))
            .unwrap();
        q.front_mut().unwrap().sent_one();
        q.front_mut().unwrap().sent_one();
        q.repeat(ReadReply::new(1, 0x400, 3 * 1024, Psn::new(1), 0, MTU), MTU)
            .unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q.front_mut().unwrap().next(MTU).unwrap().psn.get(), 1);
    }

    #[test]
    fn replies_to_repeats_do_not_count_against_the_limit() {
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        // Four READs of 32 responses (max_dest_rd_atomic 4); the first was sent in full.
        for i in 0..4u32 {
            q.push(ReadReply::new(i, 0, 32 * 1024, Psn::new(i * 32), 0, MTU))
                .unwrap();
        }
        for _ in 0..32 {
            q.front_mut().unwrap().sent_one();
        }
        q.pop();
        assert_eq!(q.owed_to_new_requests(), 3);
        // The requester timed out too early and asks again for all four; then the first's
        // LAST arrives after all, and it sends a fifth READ in the first's place.
        for i in 0..4u32 {
            q.repeat(
                ReadReply::new(i, 0, 32 * 1024, Psn::new(i * 32), 0, MTU),
                MTU,
            )
            .unwrap();
        }
        assert_eq!(
            (q.len(), q.owed_to_new_requests()),
            (4, 0),
            "the repeats replaced the originals"
        );
        q.push(ReadReply::new(4, 0, 32 * 1024, Psn::new(128), 0, MTU))
            .unwrap();
        assert_eq!(
            q.owed_to_new_requests(),
            1,
            "the fifth READ is within the four allowed"
        );
        // A repeat from the middle of a reply: the original's rest still counts, once.
        let mut storage = slots();
        let mut q = ReadReplies::new(&mut storage[..]);
        q.push(ReadReply::new(1, 0, 4 * 1024, Psn::new(0), 0, MTU))
            .unwrap();
        q.repeat(ReadReply::new(1, 0x800, 2 * 1024, Psn::new(2), 0, MTU), MTU)
            .unwrap();
        assert_eq!((q.len(), q.owed_to_new_requests()), (2, 1));
    }

    #[test]
    fn slots_follow_max_dest_rd_atomic() {
        assert_eq!(slots_for(0), 2);
        assert_eq!(slots_for(1), 2);
        assert_eq!(slots_for(16), 17);
        assert_eq!(slots_for(128), MAX_READ_REPLIES);
        assert_eq!(slots_for(255), MAX_READ_REPLIES);
    }

    #[test]
    fn replacing_the_slots_keeps_what_is_owed_in_order() {
        let reply = |psn| ReadReply::new(1, 0x1000, 4096, Psn::new(psn), 0, MTU);
        let (mut three, mut two, mut eight) = (
            [ReadReply::default(); 3],
            [ReadReply::default(); 2],
            [ReadReply::default(); 8],
        );
        let mut q = ReadReplies::new(&mut three[..]);
        for psn in [10, 20, 30] {
            q.push(reply(psn)).unwrap();
        }
        q.pop();
        q.push(reply(40)).unwrap(); // wraps: the head is not slot 0
                                    // Too small for the three owed: nothing changes.
        let small = q.replace_slots(&mut two[..]);
        assert_eq!(small.len(), 2);
        assert_eq!(q.len(), 3);
        let old = q.replace_slots(&mut eight[..]);
        assert_eq!(old.len(), 3);
        for psn in [20, 30, 40] {
            assert_eq!(q.front_mut().unwrap().psn, Psn::new(psn));
            q.pop();
        }
        assert!(q.is_empty());
        for psn in 0..8 {
            q.push(reply(psn)).unwrap();
        }
        assert_eq!(q.push(reply(8)), Err(Full));
    }

    #[test]
    fn repeats_make_room_for_new_requests() {
        // max_dest_rd_atomic 2: three slots. Both READs were asked for again and answered
        // late; the requester counted them done and sends two new ones.
        let reply = |psn| ReadReply::new(1, 0x1000, 1024, Psn::new(psn), 0, MTU);
        let mut storage = [ReadReply::default(); 3];
        assert_eq!(storage.len(), slots_for(2));
        let mut q = ReadReplies::new(&mut storage[..]);
        q.push(reply(1)).unwrap();
        q.pop(); // the ring is wrapped from here on
        q.repeat(reply(10), MTU).unwrap();
        q.repeat(reply(11), MTU).unwrap();
        q.push(reply(20)).unwrap();
        assert_eq!(q.owed_to_new_requests(), 1);
        q.push(reply(21)).unwrap(); // the repeat of 10 makes room
        assert_eq!(q.len(), 3);
        let order: [u32; 3] = core::array::from_fn(|_| {
            let psn = q.front_mut().unwrap().psn.get();
            q.pop();
            psn
        });
        assert_eq!(order, [11, 20, 21]);
        // Only new requests queued: the next has no room (the limit check refuses it first).
        for psn in [30, 31, 32] {
            q.push(reply(psn)).unwrap();
        }
        assert_eq!(q.push(reply(33)), Err(Full));
    }

    #[test]
    fn an_atomic_is_acknowledged_in_turn_with_its_original_value() {
        let mut storage = [ReadReply::default(); 3];
        let mut q = ReadReplies::new(&mut storage[..]);
        // A READ of 2 responses at PSN 4, then an atomic at PSN 6.
        q.push(ReadReply::new(1, 0x1000, 2048, Psn::new(4), 9, MTU))
            .unwrap();
        q.push(ReadReply::atomic(Psn::new(6), 10, 77)).unwrap();
        let mut out = [None; 4];
        let mut n = 0;
        while let Some(r) = q.front_mut() {
            match r.next(MTU) {
                Some(p) => {
                    r.sent_one();
                    out[n] = Some(p);
                    n += 1;
                }
                None => q.pop(),
            }
        }
        assert_eq!(n, 3, "the READ's two responses, then the atomic's");
        let last = out[2].unwrap();
        assert_eq!(
            (
                last.opcode,
                last.psn.get(),
                last.len,
                last.msn,
                last.atomic_orig
            ),
            (Opcode::RC_ATOMIC_ACK, 6, 0, 11, Some(77))
        );
        assert!(out[..2].iter().all(|p| p.unwrap().atomic_orig.is_none()));
        // Its repeat replaces what is owed from its PSN on, like a READ's.
        q.push(ReadReply::atomic(Psn::new(7), 11, 1)).unwrap();
        q.repeat(ReadReply::atomic(Psn::new(6), 10, 77), MTU)
            .unwrap();
        assert_eq!(q.len(), 1);
        let r = q.front_mut().unwrap();
        assert!(r.is_repeated());
        assert_eq!(r.next(MTU).unwrap().atomic_orig, Some(77));
    }
}
