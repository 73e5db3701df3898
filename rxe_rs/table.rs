// SPDX-License-Identifier: GPL-2.0
//! Index tables: small integers naming objects the datapath looks up (MR keys, QP numbers).
//! Lookups hand out an `Arc`, so an object outlives its removal from the table for as long as
//! an operation in flight still uses it.
//!
//! Slots live in chunks allocated (in process context, before the lock is taken) as the table
//! grows, and never move; freed slots are linked through themselves into a FIFO list. So the
//! table's memory is bounded by the most objects it ever held (rounded up to a chunk), however
//! many come and go, and nothing larger than the small chunk directory is allocated under its
//! IRQ-safe lock.
//!
//! Indices are handed out nearly cyclically, in the spirit of rdma_rxe's `xa_alloc_cyclic`:
//! every never-used slot of the allocated chunks comes before a freed one, and freed ones come
//! back oldest first. So a destroyed QP's number usually stays unused for a long while (at
//! least until the first chunk is used up), and a peer's ib_cm, which rejects a connection whose
//! QPN it still holds in time-wait, or a stale MR key or late packet, rarely meets a new object
//! under an old name.

use crate::kext::lock::{new_spinlock_irq, SpinLockIrq};
use kernel::alloc::Flags;
use kernel::{prelude::*, sync::Arc};

/// Slots per chunk.
const CHUNK: usize = 1024;
/// "No slot" in the free list.
const NONE: u32 = u32::MAX;

enum Slot<T> {
    /// Free; the next free slot in FIFO order, or `NONE`.
    Free(u32),
    /// Handed out by `insert_with`, whose object is being made.
    Reserved,
    Used(Arc<T>),
}

struct Slots<T> {
    chunks: KVec<KVec<Slot<T>>>,
    /// Slots ever handed out: `0..used_end`.
    used_end: u32,
    /// Oldest and newest free slot below `used_end` (reused oldest first, so that a stale key
    /// is unlikely to hit a new object).
    free_head: u32,
    free_tail: u32,
}

impl<T> Slots<T> {
    fn slot_mut(&mut self, slot: u32) -> Option<&mut Slot<T>> {
        let slot = slot as usize;
        self.chunks.get_mut(slot / CHUNK)?.get_mut(slot % CHUNK)
    }

    fn capacity(&self) -> u32 {
        // At most `max` / CHUNK + 1 chunks: no overflow for any `max` below 2^32 - CHUNK.
        (self.chunks.len() * CHUNK) as u32
    }

    /// Takes the oldest free slot, marked reserved.
    fn pop_free(&mut self) -> Option<u32> {
        let slot = self.free_head;
        let entry = self.slot_mut(slot)?;
        let Slot::Free(next) = *entry else {
            return None;
        };
        *entry = Slot::Reserved;
        self.free_head = next;
        if next == NONE {
            self.free_tail = NONE;
        }
        Some(slot)
    }

    /// Frees `slot` (reserved, or just emptied), newest in the list.
    fn push_free(&mut self, slot: u32) {
        let Some(entry) = self.slot_mut(slot) else {
            return;
        };
        *entry = Slot::Free(NONE);
        let tail = self.free_tail;
        match self.slot_mut(tail) {
            Some(Slot::Free(next)) => *next = slot,
            _ => self.free_head = slot,
        }
        self.free_tail = slot;
    }
}

/// Objects by index, `first..first + max`.
#[pin_data]
pub(crate) struct IndexTable<T> {
    first: u32,
    max: u32,
    /// IRQ-safe: the receive path looks QPs up in softirq, and kernel consumers create and
    /// destroy address handles with interrupts off (ib_cm, under its own spinlock_irqsave).
    #[pin]
    inner: SpinLockIrq<Slots<T>>,
}

impl<T> IndexTable<T> {
    /// An empty table handing out indices from `first`, at most `max` of them.
    pub(crate) fn new(first: u32, max: u32) -> impl PinInit<Self> {
        let slots = Slots {
            chunks: KVec::new(),
            used_end: 0,
            free_head: NONE,
            free_tail: NONE,
        };
        pin_init!(Self {
            first,
            max,
            inner <- new_spinlock_irq!(slots, "rxe_rs_table"),
        })
    }

    /// Stores `object` under a free index and returns the index; ENOMEM when full.
    pub(crate) fn insert(&self, object: Arc<T>) -> Result<u32> {
        self.insert_with(|_| Ok(object))
    }

    /// [`Self::insert`] in atomic context: a chunk the table may need is allocated with
    /// `GFP_ATOMIC`.
    pub(crate) fn insert_atomic(&self, object: Arc<T>) -> Result<u32> {
        let slot = self.reserve(GFP_ATOMIC)?;
        let index = self.first.checked_add(slot).ok_or(ENOMEM)?;
        if let Some(entry) = self.inner.lock().slot_mut(slot) {
            *entry = Slot::Used(object);
        }
        Ok(index)
    }

    /// Stores the object `make` builds for a free index; the index is reserved (lookups find
    /// nothing) while `make` runs, which may sleep. Returns the index. Process context.
    pub(crate) fn insert_with(&self, make: impl FnOnce(u32) -> Result<Arc<T>>) -> Result<u32> {
        let slot = self.reserve(GFP_KERNEL)?;
        let index = self.first.checked_add(slot).ok_or(ENOMEM)?;
        match make(index) {
            Ok(object) => {
                if let Some(entry) = self.inner.lock().slot_mut(slot) {
                    *entry = Slot::Used(object);
                }
                Ok(index)
            }
            Err(e) => {
                self.inner.lock().push_free(slot);
                Err(e)
            }
        }
    }

    /// Reserves a slot: a never-used one of the allocated chunks, else the oldest free one,
    /// else a new one (allocating a chunk, outside the lock).
    fn reserve(&self, gfp: Flags) -> Result<u32> {
        loop {
            {
                let mut t = self.inner.lock();
                if t.used_end < t.capacity().min(self.max) {
                    let slot = t.used_end;
                    t.used_end += 1;
                    if let Some(entry) = t.slot_mut(slot) {
                        *entry = Slot::Reserved;
                    }
                    return Ok(slot);
                }
                if let Some(slot) = t.pop_free() {
                    return Ok(slot);
                }
                if t.used_end >= self.max {
                    return Err(ENOMEM);
                }
            }
            // Not charged to the caller: the chunk lives as long as the device.
            let mut chunk = KVec::with_capacity(CHUNK, gfp)?;
            for _ in 0..CHUNK {
                // Within the capacity just allocated: cannot fail.
                chunk.push(Slot::Free(NONE), gfp)?;
            }
            let mut t = self.inner.lock();
            // Another insert may have added one meanwhile: then ours is dropped (after the lock,
            // as it may have been vmalloc'ed).
            if t.used_end >= t.capacity() && t.capacity() < self.max {
                // The directory itself is small (one entry per CHUNK slots). Room first, so
                // that the push cannot fail and free the chunk under the lock.
                if t.chunks.reserve(1, GFP_ATOMIC).is_err() {
                    drop(t);
                    return Err(ENOMEM);
                }
                t.chunks.push(chunk, GFP_ATOMIC)?;
            }
        }
    }

    /// The object at `index`.
    pub(crate) fn get(&self, index: u32) -> Option<Arc<T>> {
        let slot = index.checked_sub(self.first)?;
        match self.inner.lock().slot_mut(slot)? {
            Slot::Used(object) => Some(object.clone()),
            _ => None,
        }
    }

    /// Puts `object` at `index` in place of the object there, and returns that one.
    pub(crate) fn replace(&self, index: u32, object: Arc<T>) -> Option<Arc<T>> {
        let slot = index.checked_sub(self.first)?;
        match self.inner.lock().slot_mut(slot)? {
            Slot::Used(old) => Some(core::mem::replace(old, object)),
            _ => None,
        }
    }

    /// Removes and returns the object at `index`.
    pub(crate) fn remove(&self, index: u32) -> Option<Arc<T>> {
        let slot = index.checked_sub(self.first)?;
        let mut t = self.inner.lock();
        let entry = t.slot_mut(slot)?;
        if !matches!(entry, Slot::Used(_)) {
            return None;
        }
        let Slot::Used(object) = core::mem::replace(entry, Slot::Reserved) else {
            return None;
        };
        t.push_free(slot);
        Some(object)
    }
}
