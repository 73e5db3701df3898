// SPDX-License-Identifier: GPL-2.0
//! Waiting for readers: RCU read-side sections include softirqs and BH-disabled regions, which
//! is where the datapath uses the objects it looks up.

use super::bindings;

/// Waits until every RCU read-side section (softirq, BH-disabled region) that began before the
/// call has ended. Process context only (it sleeps).
pub(crate) fn synchronize() {
    // SAFETY: no preconditions beyond process context, which callers document.
    unsafe { bindings::synchronize_rcu() }
}
