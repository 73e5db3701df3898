//! Shared rings: the send, receive and completion queues live in memory the kernel allocates and
//! user space maps. One side produces, the other consumes; each index sits on its own cache
//! line and is written only by its owner, with release stores and acquire loads.
//!
//! ```text
//! offset 0                 producer index (u32, free-running)
//! offset 64                consumer index (u32, free-running)
//! offset 68                flags (u32, written by the kernel only; send and receive queues)
//! offset RING_DATA_OFFSET  slot[0], slot[1], ... slot[slots - 1]   (slot = index & (slots - 1))
//! ```
//!
//! Indices count forever and wrap at 2^32; `producer - consumer` is the number of full slots,
//! which can never exceed `slots`. The kernel keeps its own copy of the index it owns and treats
//! the other one as untrusted input: a count larger than `slots` is a broken queue.

/// Offset of the producer index.
pub const RING_PRODUCER_OFFSET: usize = 0;
/// Offset of the consumer index (a different cache line from the producer's).
pub const RING_CONSUMER_OFFSET: usize = 64;
/// Offset of the flags word: on the consumer's cache line, because for the queues that have
/// flags (send and receive queues) the consumer is the kernel, which alone writes them.
pub const RING_FLAGS_OFFSET: usize = 68;
/// Flag: the QP is in the error state. Receive WQEs posted now complete (flushed) only when the
/// kernel is told: after publishing its producer index, the provider reads the flags (with a
/// full fence between the two) and, if this is set, rings the receive doorbell.
pub const RING_FLAG_FLUSH: u32 = 1;
/// Flag (send queues): the kernel will look at this SQ again by itself, because packets are in
/// flight and their acknowledgement, or the retransmission timer, runs the requester. A post
/// then needs no doorbell. The provider publishes its producer index, then reads the flags
/// (full fence between); the kernel clears this flag, then reads the producer index (full
/// fence between): a post is either seen by the kernel's last look or followed by a doorbell.
pub const RING_FLAG_SQ_POLLED: u32 = 2;

/// Offset of slot 0.
pub const RING_DATA_OFFSET: usize = 128;

/// Size and shape of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// log2 of the slot count.
    pub log2_slots: u32,
    /// Bytes per slot (a power of two, at least 64).
    pub slot_size: u32,
}

impl RingGeometry {
    /// The smallest ring holding `entries` slots of at least `elem_size` bytes each.
    pub const fn for_entries(entries: u32, elem_size: usize) -> Self {
        let slots = if entries <= 1 {
            1
        } else {
            entries.next_power_of_two()
        };
        let slot_size = if elem_size <= 64 {
            64
        } else {
            elem_size.next_power_of_two()
        };
        Self {
            log2_slots: slots.trailing_zeros(),
            slot_size: slot_size as u32,
        }
    }

    /// Number of slots.
    pub const fn slots(&self) -> u32 {
        1 << self.log2_slots
    }

    /// `index & (slots - 1)`.
    pub const fn slot_of(&self, index: u32) -> u32 {
        index & (self.slots() - 1)
    }

    /// Byte offset of slot `slot_of(index)`.
    pub const fn slot_offset(&self, index: u32) -> usize {
        RING_DATA_OFFSET + self.slot_of(index) as usize * self.slot_size as usize
    }

    /// Bytes to allocate and map, rounded to whole pages of `page_size`.
    pub const fn mapped_bytes(&self, page_size: usize) -> usize {
        let bytes = RING_DATA_OFFSET + self.slots() as usize * self.slot_size as usize;
        bytes.div_ceil(page_size) * page_size
    }

    /// Full slots, given the producer's and consumer's indices; `None` if they are inconsistent
    /// (more than `slots` apart), which only a corrupted queue can produce.
    pub const fn occupancy(&self, producer: u32, consumer: u32) -> Option<u32> {
        let n = producer.wrapping_sub(consumer);
        if n > self.slots() {
            None
        } else {
            Some(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_rounds_up_to_powers_of_two() {
        let g = RingGeometry::for_entries(100, 80);
        assert_eq!(g.slots(), 128);
        assert_eq!(g.slot_size, 128);
        assert_eq!(
            RingGeometry::for_entries(0, 1),
            RingGeometry {
                log2_slots: 0,
                slot_size: 64
            }
        );
        assert_eq!(RingGeometry::for_entries(64, 64).slots(), 64);
        assert_eq!(g.slot_offset(129), RING_DATA_OFFSET + 128);
        assert_eq!(g.mapped_bytes(4096), 4096 * 5);
    }

    #[test]
    fn flags_share_the_consumers_cache_line_only() {
        assert_eq!(RING_FLAGS_OFFSET / 64, RING_CONSUMER_OFFSET / 64);
        const {
            assert!(
                RING_FLAGS_OFFSET >= RING_CONSUMER_OFFSET + 4
                    && RING_FLAGS_OFFSET + 4 <= RING_DATA_OFFSET
            )
        };
        assert_eq!(RING_FLAGS_OFFSET % 4, 0);
    }

    #[test]
    fn occupancy_survives_wrap_and_rejects_garbage() {
        let g = RingGeometry::for_entries(8, 64);
        assert_eq!(g.occupancy(5, 5), Some(0));
        assert_eq!(g.occupancy(3, u32::MAX - 4), Some(8));
        assert_eq!(g.occupancy(4, u32::MAX - 4), None);
        assert_eq!(g.occupancy(0, 1), None, "consumer ahead of producer");
    }
}
