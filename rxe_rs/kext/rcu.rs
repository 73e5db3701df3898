// SPDX-License-Identifier: GPL-2.0
//! Waiting for readers: RCU read-side sections include softirqs and BH-disabled regions, which
//! is where the datapath uses the objects it looks up. And an explicit read-side section, for
//! code that calls what the IP input path calls inside one.

use super::bindings;
use core::marker::PhantomData;

/// Waits until every RCU read-side section (softirq, BH-disabled region) that began before the
/// call has ended. Process context only (it sleeps).
pub(crate) fn synchronize() {
    // SAFETY: no preconditions beyond process context, which callers document.
    unsafe { bindings::synchronize_rcu() }
}

/// An RCU read-side section, ended on drop (on the CPU and task that began it: not `Send`).
pub(crate) struct ReadGuard(PhantomData<*mut ()>);

/// Begins an RCU read-side section (any context; no sleeping until the guard drops).
pub(crate) fn read_lock() -> ReadGuard {
    // SAFETY: always allowed; the guard ends the section in the same task (it is not `Send`).
    unsafe { bindings::rxe_rs_helper_rcu_read_lock() };
    ReadGuard(PhantomData)
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        // SAFETY: ends the section `read_lock` began.
        unsafe { bindings::rxe_rs_helper_rcu_read_unlock() };
    }
}
