// SPDX-License-Identifier: GPL-2.0
//! Spinlocks that also disable bottom halves (`spin_lock_bh`), for data that the receive path
//! (softirq) and process context both touch, or interrupts (`spin_lock_irqsave`), for what
//! kernel verbs callers reach with interrupts off; the 6.12 `kernel` crate only has plain
//! spinlocks.

use super::bindings;
use kernel::sync::lock::{Backend, Lock};

/// The `spin_lock_bh` backend of [`Lock`].
pub(crate) struct SpinLockBhBackend;

/// A [`Lock`] taken with `spin_lock_bh`, or, by a caller that has interrupts off already (no
/// softirq can run on its CPU then), with `spin_lock`.
pub(crate) type SpinLockBh<T> = Lock<T, SpinLockBhBackend>;

/// Creates a [`SpinLockBh`] initialiser with its own lockdep class.
macro_rules! new_spinlock_bh {
    ($inner:expr, $name:literal) => {
        kernel::sync::lock::Lock::<_, $crate::kext::lock::SpinLockBhBackend>::new(
            $inner,
            kernel::c_str!($name),
            kernel::static_lock_class!(),
        )
    };
}
pub(crate) use new_spinlock_bh;

// SAFETY: `spin_lock_bh`/`spin_unlock_bh` (or plain `spin_lock`/`spin_unlock` with interrupts
// off) give mutual exclusion, and the guard is only created by `lock` and released by `unlock`
// on the same lock, with the state `lock` returned.
unsafe impl Backend for SpinLockBhBackend {
    type State = bindings::spinlock_t;
    /// Whether bottom halves were disabled (not when interrupts were off already).
    type GuardState = bool;

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const kernel::ffi::c_char,
        key: *mut bindings::lock_class_key,
    ) {
        // SAFETY: the caller passes writable memory and a name and key valid forever.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller passes an initialised lock.
        unsafe { bindings::rxe_rs_helper_spin_lock_bh(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State, bh: &Self::GuardState) {
        // SAFETY: the caller holds the lock, taken the way `bh` says.
        unsafe { bindings::rxe_rs_helper_spin_unlock_bh(ptr, *bh) }
    }
}

/// The `spin_lock_irqsave` backend of [`Lock`].
pub(crate) struct SpinLockIrqBackend;

/// A [`Lock`] taken with `spin_lock_irqsave`: usable with interrupts already off.
pub(crate) type SpinLockIrq<T> = Lock<T, SpinLockIrqBackend>;

/// Creates a [`SpinLockIrq`] initialiser with its own lockdep class.
macro_rules! new_spinlock_irq {
    ($inner:expr, $name:literal) => {
        kernel::sync::lock::Lock::<_, $crate::kext::lock::SpinLockIrqBackend>::new(
            $inner,
            kernel::c_str!($name),
            kernel::static_lock_class!(),
        )
    };
}
pub(crate) use new_spinlock_irq;

// SAFETY: `spin_lock_irqsave`/`spin_unlock_irqrestore` give mutual exclusion; the guard keeps
// the saved flags and is only created by `lock` and released by `unlock` on the same lock.
unsafe impl Backend for SpinLockIrqBackend {
    type State = bindings::spinlock_t;
    type GuardState = kernel::ffi::c_ulong;

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const kernel::ffi::c_char,
        key: *mut bindings::lock_class_key,
    ) {
        // SAFETY: the caller passes writable memory and a name and key valid forever.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller passes an initialised lock.
        unsafe { bindings::rxe_rs_helper_spin_lock_irqsave(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: the caller holds the lock, taken with these flags.
        unsafe { bindings::rxe_rs_helper_spin_unlock_irqrestore(ptr, *guard_state) }
    }
}
