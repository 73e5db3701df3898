// SPDX-License-Identifier: GPL-2.0
//! `rdma link add NAME type TYPE netdev DEV`: RDMA link-type registration.

use super::{bindings, netdev::NetDevice};
use core::marker::PhantomData;
use kernel::{error::from_result, prelude::*, str::CStr, types::Opaque};

/// Creates devices for `rdma link add`.
pub(crate) trait LinkDriver {
    /// The link type, as in `rdma link add ... type <TYPE>` (at most 15 characters).
    const TYPE: &'static CStr;

    /// Creates and registers an RDMA device called `name` on `ndev`.
    fn newlink(name: &CStr, ndev: &NetDevice) -> Result;
}

/// A registered link type; unregistered on drop (which waits for running `newlink` calls).
#[pin_data(PinnedDrop)]
pub(crate) struct LinkRegistration<T: LinkDriver> {
    #[pin]
    ops: Opaque<bindings::rdma_link_ops>,
    _driver: PhantomData<T>,
}

impl<T: LinkDriver> LinkRegistration<T> {
    /// Registers `T::TYPE` with the RDMA core.
    pub(crate) fn register() -> impl PinInit<Self> {
        pin_init!(Self {
            ops <- Opaque::ffi_init(|slot: *mut bindings::rdma_link_ops| {
                // SAFETY: `slot` is ours to initialise and pinned until `drop` unregisters it;
                // `T::TYPE` is 'static.
                unsafe {
                    slot.write(bindings::rdma_link_ops {
                        type_: T::TYPE.as_char_ptr(),
                        newlink: Some(Self::newlink),
                        ..Default::default()
                    });
                    bindings::rdma_link_register(slot);
                }
            }),
            _driver: PhantomData,
        })
    }

    /// `newlink` callback.
    ///
    /// # Safety
    ///
    /// Called by the RDMA core's netlink handler (`rdma link add`) with a valid name, type and
    /// netdev.
    unsafe extern "C" fn newlink(
        name: *const kernel::ffi::c_char,
        ndev: *mut bindings::net_device,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: nldev passes a NUL-terminated name and holds a reference on `ndev` for
            // the duration of the call.
            let (name, ndev) = unsafe { (CStr::from_char_ptr(name), NetDevice::from_raw(ndev)) };
            T::newlink(name, ndev)?;
            Ok(0)
        })
    }
}

#[pinned_drop]
impl<T: LinkDriver> PinnedDrop for LinkRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `register`.
        unsafe { bindings::rdma_link_unregister(self.ops.get()) };
    }
}

// SAFETY: only touched at creation and drop.
unsafe impl<T: LinkDriver> Send for LinkRegistration<T> {}
// SAFETY: no `&self` methods.
unsafe impl<T: LinkDriver> Sync for LinkRegistration<T> {}

/// Serialises `newlink` calls of this module: the "already exists?" checks and the
/// registration must be one atomic step, and nldev only takes a read lock around `newlink`.
pub(crate) struct LinkLockGuard(());

impl LinkLockGuard {
    /// Takes the module's link lock (sleeps).
    pub(crate) fn lock() -> Self {
        // SAFETY: a plain mutex_lock on a static mutex, released by `Drop`.
        unsafe { bindings::rxe_rs_helper_link_lock() };
        Self(())
    }
}

impl Drop for LinkLockGuard {
    fn drop(&mut self) {
        // SAFETY: taken in `lock` by this thread.
        unsafe { bindings::rxe_rs_helper_link_unlock() };
    }
}
