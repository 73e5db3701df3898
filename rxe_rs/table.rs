// SPDX-License-Identifier: GPL-2.0
//! Index tables: small integers naming objects the datapath looks up (MR keys, QP numbers).
//! Lookups hand out an `Arc`, so an object outlives its removal from the table for as long as
//! an operation in flight still uses it.

use crate::kext::lock::{new_spinlock_bh, SpinLockBh};
use kernel::{prelude::*, sync::Arc};

struct Slots<T> {
    slots: KVec<Option<Arc<T>>>,
    /// Indices freed, reused oldest first (FIFO), so a stale key is unlikely to hit a new object.
    free: KVec<u32>,
    next_free: usize,
}

/// Objects by index, `first..first + max`.
#[pin_data]
pub(crate) struct IndexTable<T> {
    first: u32,
    max: u32,
    /// BH-safe: the receive path looks QPs up in softirq.
    #[pin]
    inner: SpinLockBh<Slots<T>>,
}

impl<T> IndexTable<T> {
    /// An empty table handing out indices from `first`, at most `max` of them.
    pub(crate) fn new(first: u32, max: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            first,
            max,
            inner <- new_spinlock_bh!(Slots { slots: KVec::new(), free: KVec::new(), next_free: 0 }, "rxe_rs_table"),
        })
    }

    /// Stores `object` under a free index and returns the index; ENOMEM when full.
    pub(crate) fn insert(&self, object: Arc<T>) -> Result<u32> {
        self.insert_with(|_| Ok(object))
    }

    /// Stores the object `make` builds for a free index; the index is reserved (lookups find
    /// nothing) while `make` runs, which may sleep. Returns the index.
    pub(crate) fn insert_with(&self, make: impl FnOnce(u32) -> Result<Arc<T>>) -> Result<u32> {
        let slot = {
            let mut t = self.inner.lock();
            if t.next_free < t.free.len() {
                let slot = t.free[t.next_free];
                t.next_free += 1;
                slot
            } else {
                let slot = t.slots.len() as u32;
                if slot >= self.max {
                    return Err(ENOMEM);
                }
                t.slots.push(None, GFP_ATOMIC)?;
                slot
            }
        };
        let index = self.first + slot;
        match make(index) {
            Ok(object) => {
                self.inner.lock().slots[slot as usize] = Some(object);
                Ok(index)
            }
            Err(e) => {
                let mut t = self.inner.lock();
                let _ = t.free.push(slot, GFP_ATOMIC);
                Err(e)
            }
        }
    }

    /// The object at `index`.
    pub(crate) fn get(&self, index: u32) -> Option<Arc<T>> {
        let slot = index.checked_sub(self.first)? as usize;
        self.inner.lock().slots.get(slot)?.clone()
    }

    /// Removes and returns the object at `index`.
    pub(crate) fn remove(&self, index: u32) -> Option<Arc<T>> {
        let slot = index.checked_sub(self.first)?;
        let mut t = self.inner.lock();
        let object = t.slots.get_mut(slot as usize)?.take()?;
        // If this allocation fails the index is simply never reused.
        let _ = t.free.push(slot, GFP_ATOMIC);
        Some(object)
    }
}
