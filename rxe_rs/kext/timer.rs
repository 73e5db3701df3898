// SPDX-License-Identifier: GPL-2.0
//! One-shot kernel timers (`timer_list`) embedded in a pinned owner; the 6.12 `kernel` crate
//! has none. The callback runs in softirq context.

use super::bindings;
use core::{
    marker::PhantomData,
    mem::ManuallyDrop,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{prelude::*, sync::Arc, types::Opaque};

/// An owner of a [`Timer`]: says where its timer is and what expiry does.
pub(crate) trait TimerOwner: Sync + Send + Sized {
    /// The owner's timer.
    fn timer(&self) -> &Timer<Self>;
    /// The timer expired (softirq context); `this` is the owner, in its `Arc`.
    fn expired(this: &Arc<Self>);
}

/// A timer inside a `T` that lives in an [`Arc`]. From its first arming the timer holds a
/// reference to its owner, which [`Timer::shutdown`] releases: the owner calls it before it
/// expects to be freed (an owner that never does is leaked, never freed under a running
/// callback). Drop also shuts down, as a last resort.
#[pin_data(PinnedDrop)]
pub(crate) struct Timer<T: TimerOwner> {
    #[pin]
    raw: Opaque<bindings::timer_list>,
    /// Null until the first `arm`; then the reference it holds (`Arc::into_raw`); [`dead`]
    /// once shut down.
    owner: AtomicPtr<T>,
    _owner: PhantomData<T>,
}

/// The `owner` of a timer shut down: never dereferenced, never null, never an `Arc`'s (the
/// dangling address is the alignment of `T`, where no allocation is).
fn dead<T>() -> *mut T {
    core::ptr::NonNull::dangling().as_ptr()
}

impl<T: TimerOwner> Timer<T> {
    /// A timer that is not armed.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `timer_setup` initialises the slot; `run` has the callback signature.
            raw <- Opaque::ffi_init(|slot| unsafe { bindings::rxe_rs_helper_timer_setup(slot, Some(Self::run)) }),
            owner: AtomicPtr::new(core::ptr::null_mut()),
            _owner: PhantomData,
        })
    }

    /// (Re)arms `owner`'s timer to expire in `ns` nanoseconds. No-op after `shutdown`.
    pub(crate) fn arm(owner: &Arc<T>, ns: u64) {
        let timer = owner.timer();
        if timer.owner.load(Ordering::Acquire).is_null() {
            let raw = Arc::into_raw(owner.clone()).cast_mut();
            if timer
                .owner
                .compare_exchange(
                    core::ptr::null_mut(),
                    raw,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
            {
                // Another arm stored one first, or the timer was shut down.
                // SAFETY: `raw` came from `into_raw` just above and went nowhere else.
                drop(unsafe { Arc::from_raw(raw) });
            }
        }
        // SAFETY: an initialised timer; plain function calls (a no-op once shut down).
        unsafe {
            // One tick more than `ns` rounds down to: the timer fires at the next tick after
            // `jiffies + n`, between n - 1 and n ticks from now, and never before `ns`.
            let expires = bindings::rxe_rs_helper_jiffies()
                .wrapping_add(bindings::nsecs_to_jiffies(ns).saturating_add(1));
            bindings::mod_timer(timer.raw.get(), expires);
        }
    }

    /// Disarms it (the callback may still be running on another CPU).
    pub(crate) fn cancel(&self) {
        // SAFETY: an initialised timer.
        unsafe { bindings::timer_delete(self.raw.get()) };
    }

    /// Disarms it for good, waits for a running callback, and releases the reference to the
    /// owner it held. Process context only.
    pub(crate) fn shutdown(&self) {
        let held = self.owner.swap(dead(), Ordering::AcqRel);
        // SAFETY: an initialised timer; the caller may sleep.
        unsafe { bindings::timer_shutdown_sync(self.raw.get()) };
        if !held.is_null() && held != dead() {
            // SAFETY: `arm` stored it from `into_raw`; the swap above took it out for us
            // alone, and no callback uses it any more (`timer_shutdown_sync` waited for the
            // last, and the timer cannot be armed again).
            drop(unsafe { Arc::from_raw(held) });
        }
    }

    /// `run` callback.
    ///
    /// # Safety
    ///
    /// Called by the timer core for a timer that `new` set up (the `raw` field of a live
    /// `Timer<T>`).
    unsafe extern "C" fn run(raw: *mut bindings::timer_list) {
        // SAFETY: `raw` is the `raw` field of a `Timer<T>` (only `new` registers this callback).
        let timer = unsafe { &*kernel::container_of!(raw, Self, raw) };
        let owner = timer.owner.load(Ordering::Acquire);
        if owner.is_null() || owner == dead() {
            return;
        }
        // SAFETY: `arm` stored it from `into_raw`; the reference it stands for is released
        // only by `shutdown`, after `timer_shutdown_sync` waited for this callback. The
        // `ManuallyDrop` borrows that reference without releasing it.
        let owner = ManuallyDrop::new(unsafe { Arc::from_raw(owner) });
        T::expired(&owner);
    }
}

#[pinned_drop]
impl<T: TimerOwner> PinnedDrop for Timer<T> {
    fn drop(self: Pin<&mut Self>) {
        self.shutdown();
    }
}

// SAFETY: the timer core serialises access to `timer_list`; `owner` is atomic, and the `Arc` it
// stands for may be released on any CPU (`T: Send + Sync`).
unsafe impl<T: TimerOwner> Send for Timer<T> {}
// SAFETY: as above.
unsafe impl<T: TimerOwner> Sync for Timer<T> {}
