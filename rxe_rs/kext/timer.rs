// SPDX-License-Identifier: GPL-2.0
//! One-shot kernel timers (`timer_list`) embedded in a pinned owner; the 6.12 `kernel` crate
//! has none. The callback runs in softirq context.

use super::bindings;
use core::{
    marker::PhantomData,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{prelude::*, types::Opaque};

/// An owner of a [`Timer`]: says where its timer is and what expiry does.
pub(crate) trait TimerOwner: Sync + Sized {
    /// The owner's timer.
    fn timer(&self) -> &Timer<Self>;
    /// The timer expired (softirq context).
    fn expired(&self);
}

/// A timer inside a pinned `T`. The owner must call [`Timer::shutdown`] before it starts to
/// drop its other fields (drop also shuts down, as a last resort).
#[pin_data(PinnedDrop)]
pub(crate) struct Timer<T: TimerOwner> {
    #[pin]
    raw: Opaque<bindings::timer_list>,
    /// The owner, recorded by the first `arm` (a pinned owner never moves).
    owner: AtomicPtr<T>,
    _owner: PhantomData<T>,
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
    pub(crate) fn arm(owner: &T, ns: u64) {
        let timer = owner.timer();
        timer
            .owner
            .store(owner as *const T as *mut T, Ordering::Release);
        // SAFETY: an initialised timer; plain function calls.
        unsafe {
            let expires = bindings::rxe_rs_helper_jiffies()
                .wrapping_add(bindings::nsecs_to_jiffies(ns).max(1));
            bindings::mod_timer(timer.raw.get(), expires);
        }
    }

    /// Disarms it (the callback may still be running on another CPU).
    pub(crate) fn cancel(&self) {
        // SAFETY: an initialised timer.
        unsafe { bindings::timer_delete(self.raw.get()) };
    }

    /// Disarms it for good and waits for a running callback. Process context only.
    pub(crate) fn shutdown(&self) {
        // SAFETY: an initialised timer; the caller may sleep.
        unsafe { bindings::timer_shutdown_sync(self.raw.get()) };
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
        // SAFETY: `arm` recorded the pinned owner holding this timer; it is alive because the
        // owner shuts the timer down (waiting for this callback) before it is freed.
        if let Some(owner) = unsafe { owner.as_ref() } {
            owner.expired();
        }
    }
}

#[pinned_drop]
impl<T: TimerOwner> PinnedDrop for Timer<T> {
    fn drop(self: Pin<&mut Self>) {
        self.shutdown();
    }
}

// SAFETY: the timer core serialises access to `timer_list`; `owner` is atomic.
unsafe impl<T: TimerOwner> Send for Timer<T> {}
// SAFETY: as above.
unsafe impl<T: TimerOwner> Sync for Timer<T> {}
