// SPDX-License-Identifier: GPL-2.0
//! What the 6.12 `kernel` crate's workqueue lacks: waiting for a queued work item.

use super::bindings;
use kernel::workqueue::Work;

/// Waits until the last queued instance of `work` has run (process context). An owner that
/// stops queueing it first knows afterwards that it neither runs nor holds a reference.
pub(crate) fn flush<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a live, initialised `Work`, so `raw_get` yields its `work_struct`;
    // `flush_work` only waits on it.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}
