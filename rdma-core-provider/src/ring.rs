//! The user side of a ring the kernel allocated: mapped from the uverbs fd.

use core::sync::atomic::{AtomicU32, Ordering};
use rxe_rs_uapi::{
    MmapInfo, RingGeometry, RING_CONSUMER_OFFSET, RING_FLAGS_OFFSET, RING_PRODUCER_OFFSET,
};
use std::io;

/// A mapped ring; unmapped on drop.
pub struct MappedRing {
    base: *mut u8,
    len: usize,
    geometry: RingGeometry,
}

// SAFETY: the mapping is plain shared memory; callers serialise their own side with a lock.
unsafe impl Send for MappedRing {}
// SAFETY: as above.
unsafe impl Sync for MappedRing {}

impl MappedRing {
    /// Maps `info` of the command fd `cmd_fd`: `2^log2_slots` slots of `slot_size` bytes, as
    /// the kernel's response describes the ring.
    pub fn map(cmd_fd: i32, info: &MmapInfo, log2_slots: u32, slot_size: u32) -> io::Result<Self> {
        let geometry = RingGeometry {
            log2_slots,
            slot_size,
        };
        let len = info.size as usize;
        let needed =
            rxe_rs_uapi::RING_DATA_OFFSET + geometry.slots() as usize * geometry.slot_size as usize;
        if len < needed || geometry.slot_size < 64 || !geometry.slot_size.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh shared mapping of the kernel's buffer; nothing else is affected.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                cmd_fd,
                info.offset as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: base.cast(),
            len,
            geometry,
        })
    }

    /// Its shape.
    pub fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    fn index(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: 4-byte aligned offsets inside the mapping.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    /// The producer index (acquire).
    pub fn producer(&self) -> u32 {
        self.index(RING_PRODUCER_OFFSET).load(Ordering::Acquire)
    }

    /// The consumer index (acquire).
    pub fn consumer(&self) -> u32 {
        self.index(RING_CONSUMER_OFFSET).load(Ordering::Acquire)
    }

    /// The flags the kernel sets (`RING_FLAG_*`), read after a full fence: whatever this side
    /// stored before (its producer index) is visible to the kernel before the flags are read.
    pub fn flags_after_fence(&self) -> u32 {
        core::sync::atomic::fence(Ordering::SeqCst);
        self.index(RING_FLAGS_OFFSET).load(Ordering::Acquire)
    }

    /// Publishes the producer index (release).
    pub fn set_producer(&self, value: u32) {
        self.index(RING_PRODUCER_OFFSET)
            .store(value, Ordering::Release)
    }

    /// Publishes the consumer index (release).
    pub fn set_consumer(&self, value: u32) {
        self.index(RING_CONSUMER_OFFSET)
            .store(value, Ordering::Release)
    }

    /// The slot of `index`.
    pub fn slot(&self, index: u32) -> *mut u8 {
        // SAFETY: `slot_offset` is inside the mapping (checked against the geometry in `map`).
        unsafe { self.base.add(self.geometry.slot_offset(index)) }
    }

    /// The bytes of the slot of `index`, to write a WQE into.
    ///
    /// # Safety
    ///
    /// The caller produces into this ring under its lock, and the slot is free: the kernel is
    /// done with it and reads it only after the producer index passes it. No other reference
    /// to the slot is alive while the result is.
    #[allow(clippy::mut_from_ref)] // the ring's lock, not the borrow, makes it exclusive
    pub unsafe fn slot_mut(&self, index: u32) -> &mut [u8] {
        // SAFETY: a slot of `slot_size` bytes inside the mapping (checked against the geometry
        // in `map`), exclusive by the caller's contract.
        unsafe {
            core::slice::from_raw_parts_mut(self.slot(index), self.geometry.slot_size as usize)
        }
    }
}

impl Drop for MappedRing {
    fn drop(&mut self) {
        // SAFETY: our mapping, unused after this.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
