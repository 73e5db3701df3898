//! RC atomics (IBA 9.4.5, 9.7.5.2.5, 9.7.5.3): the AtomicETH of a COMPARE SWAP or FETCH ADD
//! request, the AtomicAckETH that returns the original value, what each operation does to the
//! 8 bytes it names, and the responder's record of the results it sent, so that a repeated
//! request is answered with its original result and never executed twice.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use core::ops::DerefMut;

use super::{
    opcode::{Opcode, ATOMIC_ACK_ETH_BYTES, ATOMIC_ETH_BYTES},
    psn::Psn,
};

/// Bytes an atomic operation reads and writes.
pub const ATOMIC_BYTES: u32 = 8;

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// The operation an atomic request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Writes `swap` if the value equals `compare`.
    CompareSwap {
        /// The value expected.
        compare: u64,
        /// The value written if it was there.
        swap: u64,
    },
    /// Adds `add` (wrapping at 2^64).
    FetchAdd {
        /// The addend.
        add: u64,
    },
    /// Stores `value` once everything before it is visible (IBTA 1.5's ATOMIC WRITE: its 8
    /// bytes, in the byte order they came in).
    Write {
        /// The value stored.
        value: u64,
    },
}

impl AtomicOp {
    /// The value that replaces `old`.
    pub const fn apply(self, old: u64) -> u64 {
        match self {
            Self::CompareSwap { compare, swap } if old == compare => swap,
            Self::CompareSwap { .. } => old,
            Self::FetchAdd { add } => old.wrapping_add(add),
            Self::Write { value } => value,
        }
    }

    /// Its request opcode.
    pub const fn opcode(self) -> Opcode {
        match self {
            Self::CompareSwap { .. } => Opcode::RC_CMP_SWAP,
            Self::FetchAdd { .. } => Opcode::RC_FETCH_ADD,
            Self::Write { .. } => Opcode::RC_ATOMIC_WRITE,
        }
    }
}

/// `va` may be the target of an atomic: 8-byte aligned (IBA 9.4.5; else the responder NAKs it
/// as an invalid request).
pub const fn is_aligned(va: u64) -> bool {
    const MASK: u64 = ATOMIC_BYTES as u64 - 1;
    va & MASK == 0
}

/// The atomic extended transport header (28 bytes): VA, R_Key, "Swap (or Add) Data", "Compare
/// Data" (IBA 9.3.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Remote virtual address of the 8 bytes.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// The swap value (COMPARE SWAP) or the addend (FETCH ADD).
    pub swap_add: u64,
    /// The compare value (COMPARE SWAP; 0 for FETCH ADD).
    pub compare: u64,
}

impl AtomicEth {
    /// Parses the first [`ATOMIC_ETH_BYTES`] of `b`.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..ATOMIC_ETH_BYTES)?;
        Some(Self {
            va: be64(b),
            rkey: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            swap_add: be64(&b[12..]),
            compare: be64(&b[20..]),
        })
    }

    /// Writes the header into the first [`ATOMIC_ETH_BYTES`] of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
    }

    /// The header of `op` on the 8 bytes at `va` of the MR `rkey` names.
    pub const fn of(op: AtomicOp, va: u64, rkey: u32) -> Self {
        let (swap_add, compare) = match op {
            AtomicOp::CompareSwap { compare, swap } => (swap, compare),
            AtomicOp::FetchAdd { add } => (add, 0),
            // Not carried in an AtomicETH (its value is the payload).
            AtomicOp::Write { .. } => (0, 0),
        };
        Self {
            va,
            rkey,
            swap_add,
            compare,
        }
    }

    /// The operation it asks for, under request opcode `op`; `None` for any other opcode.
    pub const fn op(&self, op: Opcode) -> Option<AtomicOp> {
        match op {
            Opcode::RC_CMP_SWAP => Some(AtomicOp::CompareSwap {
                compare: self.compare,
                swap: self.swap_add,
            }),
            Opcode::RC_FETCH_ADD => Some(AtomicOp::FetchAdd { add: self.swap_add }),
            _ => None,
        }
    }
}

/// Reads the AtomicAckETH (the original value) from the first [`ATOMIC_ACK_ETH_BYTES`] of `b`.
pub fn parse_ack(b: &[u8]) -> Option<u64> {
    b.get(..ATOMIC_ACK_ETH_BYTES).map(be64)
}

/// Writes the AtomicAckETH carrying `orig` into the first [`ATOMIC_ACK_ETH_BYTES`] of `b`.
pub fn write_ack(orig: u64, b: &mut [u8]) {
    b[..ATOMIC_ACK_ETH_BYTES].copy_from_slice(&orig.to_be_bytes());
}

/// One result the responder sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicResult {
    /// The request's PSN.
    pub psn: Psn,
    /// The original value it returned.
    pub orig: u64,
    /// The entry holds a result.
    pub valid: bool,
}

/// The most recent atomic results of a responder, as many as the slots `S` (one per atomic
/// the requester may have outstanding, `max_dest_rd_atomic`): a requester repeats only a
/// request whose response it has not seen, and it cannot have more outstanding than that. A
/// repeat of an older one finds nothing and is dropped (IBA 9.7.5.2.5 leaves it to the
/// responder's resources; executing it again would break its atomicity).
#[derive(Debug)]
pub struct AtomicResults<S> {
    slots: S,
    /// The slot the next result overwrites (the oldest).
    next: usize,
}

impl<S: DerefMut<Target = [AtomicResult]>> AtomicResults<S> {
    /// An empty record over `slots`.
    pub fn new(slots: S) -> Self {
        let mut this = Self { slots, next: 0 };
        this.clear();
        this
    }

    /// Records the result of the request at `psn`, in place of the oldest.
    pub fn record(&mut self, psn: Psn, orig: u64) {
        let n = self.slots.len();
        if let Some(slot) = self.slots.get_mut(self.next) {
            *slot = AtomicResult {
                psn,
                orig,
                valid: true,
            };
            self.next = self.next.saturating_add(1).checked_rem(n).unwrap_or(0);
        }
    }

    /// The original value the request at `psn` returned, if it is still recorded.
    pub fn find(&self, psn: Psn) -> Option<u64> {
        self.slots
            .iter()
            .find(|r| r.valid && r.psn == psn)
            .map(|r| r.orig)
    }

    /// Forgets every result (the QP starts receiving anew).
    pub fn clear(&mut self) {
        for r in self.slots.iter_mut() {
            r.valid = false;
        }
        self.next = 0;
    }

    /// Moves the most recent results into `slots` (as many as fit) and returns the old slots.
    pub fn replace_slots(&mut self, mut slots: S) -> S {
        let old_len = self.slots.len();
        let keep = slots.len().min(old_len);
        for r in slots.iter_mut() {
            r.valid = false;
        }
        // Oldest kept first: the `keep` slots before `next`, in order.
        let start = self
            .next
            .saturating_add(old_len)
            .saturating_sub(keep)
            .checked_rem(old_len)
            .unwrap_or(0);
        for (i, new) in slots.iter_mut().take(keep).enumerate() {
            let from = start.saturating_add(i).checked_rem(old_len).unwrap_or(0);
            *new = self.slots[from];
        }
        self.next = keep.checked_rem(slots.len()).unwrap_or(0);
        core::mem::replace(&mut self.slots, slots)
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data
mod tests {
    use super::*;

    #[test]
    fn operations() {
        let cas = AtomicOp::CompareSwap {
            compare: 5,
            swap: 9,
        };
        assert_eq!(cas.apply(5), 9);
        assert_eq!(cas.apply(6), 6, "no swap when the value differs");
        assert_eq!(AtomicOp::FetchAdd { add: 3 }.apply(u64::MAX), 2, "wraps");
        assert_eq!(AtomicOp::Write { value: 7 }.apply(3), 7);
        assert!(is_aligned(0x1000) && is_aligned(8) && !is_aligned(0x1004) && !is_aligned(1));
    }

    #[test]
    fn atomic_eth_round_trips_in_the_wire_layout() {
        let op = AtomicOp::CompareSwap {
            compare: 0x0102_0304_0506_0708,
            swap: 0x1112_1314_1516_1718,
        };
        let eth = AtomicEth::of(op, 0x2122_2324_2526_2728, 0x3132_3334);
        let mut b = [0u8; ATOMIC_ETH_BYTES];
        eth.write(&mut b);
        assert_eq!(
            &b[..12],
            &[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x31, 0x32, 0x33, 0x34]
        );
        assert_eq!(
            &b[12..20],
            &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18],
            "swap first"
        );
        assert_eq!(&b[20..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let back = AtomicEth::parse(&b).unwrap();
        assert_eq!(back, eth);
        assert_eq!(back.op(Opcode::RC_CMP_SWAP), Some(op));
        assert_eq!(
            back.op(Opcode::RC_FETCH_ADD),
            Some(AtomicOp::FetchAdd {
                add: 0x1112_1314_1516_1718
            }),
            "the addend is in the swap field"
        );
        // FETCH ADD as rdma_rxe and HCAs send it: the addend first, compare 0.
        let mut b = [0u8; ATOMIC_ETH_BYTES];
        AtomicEth::of(AtomicOp::FetchAdd { add: 5 }, 0x1000, 7).write(&mut b);
        assert_eq!(&b[12..20], &[0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(&b[20..], &[0; 8]);
        assert_eq!(back.op(Opcode::RC_READ_REQUEST), None);
        assert_eq!(AtomicEth::parse(&b[..27]), None);
        let mut ack = [0u8; 8];
        write_ack(0xdead_beef_0000_0001, &mut ack);
        assert_eq!(ack, [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]);
        assert_eq!(parse_ack(&ack), Some(0xdead_beef_0000_0001));
        assert_eq!(parse_ack(&ack[..7]), None);
    }

    #[test]
    fn results_keep_the_most_recent() {
        let mut a = [AtomicResult::default(); 3];
        let mut r = AtomicResults::new(&mut a[..]);
        assert_eq!(r.find(Psn::new(0)), None, "empty slots match nothing");
        for psn in 10..15u32 {
            r.record(Psn::new(psn), u64::from(psn) * 100);
        }
        assert_eq!(r.find(Psn::new(11)), None, "evicted");
        assert_eq!(r.find(Psn::new(12)), Some(1200));
        assert_eq!(r.find(Psn::new(14)), Some(1400));
        // Fewer slots keep the newest; more keep them all, and fill on.
        let mut b = [AtomicResult::default(); 3];
        let old = r.replace_slots(&mut b[..]);
        assert!(old.iter().all(|e| e.valid));
        assert_eq!(r.find(Psn::new(12)), Some(1200));
        r.record(Psn::new(15), 1500);
        assert_eq!(r.find(Psn::new(12)), None, "the oldest went first");
        assert_eq!(r.find(Psn::new(13)), Some(1300));
        r.clear();
        assert_eq!(r.find(Psn::new(15)), None);
    }

    #[test]
    fn results_move_into_fewer_or_more_slots() {
        // Slices, so that old and new slots may differ in size.
        let mut a = [AtomicResult::default(); 4];
        let mut r = AtomicResults::new(&mut a[..]);
        for psn in 0..6u32 {
            r.record(Psn::new(psn), u64::from(psn));
        }
        let mut b = [AtomicResult::default(); 2];
        let _ = r.replace_slots(&mut b[..]);
        assert_eq!(r.find(Psn::new(3)), None);
        assert_eq!(
            (r.find(Psn::new(4)), r.find(Psn::new(5))),
            (Some(4), Some(5))
        );
        r.record(Psn::new(6), 6);
        assert_eq!(r.find(Psn::new(4)), None);
        let mut c = [AtomicResult::default(); 5];
        let _ = r.replace_slots(&mut c[..]);
        assert_eq!(
            (r.find(Psn::new(5)), r.find(Psn::new(6))),
            (Some(5), Some(6))
        );
        for psn in 7..10u32 {
            r.record(Psn::new(psn), u64::from(psn));
        }
        assert_eq!(r.find(Psn::new(5)), Some(5), "five slots now");
        r.record(Psn::new(10), 10);
        assert_eq!(r.find(Psn::new(5)), None);
    }
}
