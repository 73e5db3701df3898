// SPDX-License-Identifier: GPL-2.0
//! What the 6.12 `kernel` crate's workqueue lacks: waiting for a queued work item, and
//! workqueues of our own.

use super::bindings;
use core::{
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    c_str,
    prelude::*,
    workqueue::{Queue, Work},
};

/// Waits until the last queued instance of `work` has run (process context). An owner that
/// stops queueing it first knows afterwards that it neither runs nor holds a reference.
pub(crate) fn flush<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a live, initialised `Work`, so `raw_get` yields its `work_struct`;
    // `flush_work` only waits on it.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}

/// The module's workqueues for the QPs' work (doorbells, READ responses), in the order of
/// [`Datapath`]'s variants.
static QUEUES: [AtomicPtr<kernel::bindings::workqueue_struct>; 2] = [
    AtomicPtr::new(ptr::null_mut()),
    AtomicPtr::new(ptr::null_mut()),
];

/// Which of the module's workqueues.
#[derive(Clone, Copy)]
pub(crate) enum Datapath {
    /// Per CPU: work stays where it was queued (a doorbell, near the poster).
    Bound = 0,
    /// Any CPU: long work (a large READ's responses).
    Unbound = 1,
}

/// The module's workqueues, alive from module load to unload. `WQ_MEM_RECLAIM`: storage ULPs
/// (nvmet-rdma, nvme-rdma, iSER) destroy QPs from their own reclaim workqueues, and
/// destroying a QP waits for its work, which the workqueue code only allows (and memory
/// pressure only lets progress) on a reclaim workqueue with its rescuer.
pub(crate) struct DatapathQueues(());

impl DatapathQueues {
    /// Allocates them (module load: nothing queues work before this returns).
    pub(crate) fn new() -> Result<Self> {
        let flags = [
            bindings::wq_flags_WQ_MEM_RECLAIM,
            bindings::wq_flags_WQ_MEM_RECLAIM | bindings::wq_flags_WQ_UNBOUND,
        ];
        let this = Self(());
        for (slot, flags) in QUEUES.iter().zip(flags) {
            // SAFETY: a NUL-terminated format without conversions; returns a workqueue or NULL.
            let wq = unsafe {
                kernel::bindings::alloc_workqueue(c_str!("rxe_rs").as_char_ptr(), flags, 0)
            };
            if wq.is_null() {
                return Err(ENOMEM); // `this` frees those made so far
            }
            slot.store(wq, Ordering::Release);
        }
        Ok(this)
    }
}

impl Drop for DatapathQueues {
    fn drop(&mut self) {
        for slot in &QUEUES {
            let wq = slot.swap(ptr::null_mut(), Ordering::AcqRel);
            if !wq.is_null() {
                // SAFETY: allocated by `new`, destroyed once (the slot is cleared); runs what is
                // still queued first. Module unload: no device, so no QP, queues any more.
                unsafe { kernel::bindings::destroy_workqueue(wq) };
            }
        }
    }
}

/// One of the module's workqueues.
pub(crate) fn datapath_queue(which: Datapath) -> &'static Queue {
    let wq = QUEUES[which as usize].load(Ordering::Acquire);
    // SAFETY: set at module load before any device exists, and destroyed at unload after every
    // device (and so every QP, the only users) is gone: live whenever work is queued.
    unsafe { Queue::from_raw(wq) }
}
