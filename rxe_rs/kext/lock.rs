// SPDX-License-Identifier: GPL-2.0
//! A spinlock that also disables bottom halves (`spin_lock_bh`), for data that the receive path
//! (softirq) and process context both touch; the 6.12 `kernel` crate only has plain spinlocks.

use super::bindings;
use kernel::sync::lock::{Backend, Lock};

/// The `spin_lock_bh` backend of [`Lock`].
pub(crate) struct SpinLockBhBackend;

/// A [`Lock`] taken with `spin_lock_bh`.
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

// SAFETY: `spin_lock_bh`/`spin_unlock_bh` give mutual exclusion, and the guard is only created
// by `lock` and released by `unlock` on the same lock.
unsafe impl Backend for SpinLockBhBackend {
    type State = bindings::spinlock_t;
    type GuardState = ();

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

    unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
        // SAFETY: the caller holds the lock.
        unsafe { bindings::rxe_rs_helper_spin_unlock_bh(ptr) }
    }
}
