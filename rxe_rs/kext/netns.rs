// SPDX-License-Identifier: GPL-2.0
//! Network namespaces: a reference on one ([`NetNs`]), and a slot of driver data in every
//! namespace ([`PernetRegistration`]), made when the namespace is and dropped when it goes or
//! when the module unregisters.

use super::{bindings, link::LinkLockGuard, netdev::NetDevice};
use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    ptr::NonNull,
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{error::to_result, prelude::*, types::Opaque};

/// A reference on a network namespace: while it is held, the namespace does not start going
/// (its slots of driver data stay), and it is dropped with `put_net`.
pub(crate) struct NetNs(NonNull<bindings::net>);

// SAFETY: a namespace reference may be dropped from any thread.
unsafe impl Send for NetNs {}
// SAFETY: no interior mutability through it.
unsafe impl Sync for NetNs {}

impl NetNs {
    /// The initial namespace.
    pub(crate) fn init() -> Self {
        // SAFETY: `init_net` is a static of the kernel; a reference is taken on it.
        let net = unsafe { bindings::rxe_rs_helper_get_init_net() };
        Self(NonNull::new(net).expect("&init_net is never NULL"))
    }

    /// The namespace `ndev` is registered in, or `None` if it is not registered (any more) or
    /// its namespace is going. (A netdev reference does not hold its namespace: a netdev moved
    /// to another namespace does not wait for its references.)
    pub(crate) fn of(ndev: &NetDevice) -> Option<Self> {
        // SAFETY: a valid device; the helper reads its namespace under RTNL and takes a
        // reference on it only if it is not going.
        let net = unsafe { bindings::rxe_rs_helper_get_dev_net(ndev.as_raw()) };
        NonNull::new(net).map(Self)
    }

    pub(super) fn as_raw(&self) -> *mut bindings::net {
        self.0.as_ptr()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // SAFETY: the reference taken in `init` or `of`.
        unsafe { bindings::rxe_rs_helper_put_net(self.0.as_ptr()) };
    }
}

/// Data a module keeps in every network namespace.
pub(crate) trait PernetData: Sized + Send + Sync + 'static {
    /// The slot the core numbers for this data (one `static` per type).
    const SLOT: &'static PernetSlot;
    /// The data of a new namespace (which has no devices of ours yet).
    fn new() -> impl PinInit<Self, Error>;
}

/// The number the core gives a [`PernetData`]'s slot at registration, and whether it is
/// registered.
pub(crate) struct PernetSlot {
    id: UnsafeCell<u32>,
    registered: AtomicBool,
}

// SAFETY: `id` is written by the core once, in `register_pernet_subsys`, before `registered`
// is set (and before the first namespace's `init` reads it); only read afterwards.
unsafe impl Sync for PernetSlot {}

impl PernetSlot {
    pub(crate) const fn new() -> Self {
        Self {
            id: UnsafeCell::new(0),
            registered: AtomicBool::new(false),
        }
    }
}

/// `T` in every network namespace, while this lives.
#[pin_data(PinnedDrop)]
pub(crate) struct PernetRegistration<T: PernetData> {
    #[pin]
    ops: Opaque<bindings::pernet_operations>,
    _data: PhantomData<T>,
}

impl<T: PernetData> PernetRegistration<T> {
    /// Registers `T`: every namespace, existing or to come, gets its `T::new()`. The flag
    /// [`Self::data`] checks changes under the module's link lock.
    pub(crate) fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            ops <- Opaque::ffi_init(|ops: *mut bindings::pernet_operations| {
                // SAFETY: `ops` is ours to fill; the callbacks match the C signatures, and the
                // slot's id is a static the core writes once, at registration.
                unsafe {
                    ops.write(bindings::pernet_operations {
                        init: Some(Self::init_net),
                        exit: Some(Self::exit_net),
                        id: T::SLOT.id.get(),
                        size: core::mem::size_of::<T>(),
                        ..Default::default()
                    })
                }
            }),
            _data: PhantomData,
        }? Error)
        .pin_chain(|this| {
            // SAFETY: `ops` is filled and pinned for as long as it is registered (drop
            // unregisters it, if this succeeded).
            to_result(unsafe { bindings::register_pernet_subsys(this.ops.get()) })?;
            let _serialised = LinkLockGuard::lock();
            T::SLOT.registered.store(true, Ordering::Release);
            Ok(())
        })
    }

    /// The data of `net`, if `T` is registered (the link lock held keeps it so).
    pub(crate) fn data<'a>(_serialised: &'a LinkLockGuard, net: &'a NetNs) -> Option<&'a T> {
        if !T::SLOT.registered.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: registered (and it stays so while the link lock is held: unregistering
        // clears the flag under it first), so `net` has an initialised `T` in our slot, which
        // stays while `net` is held (a namespace's `exit` runs only once nothing holds it).
        Some(unsafe { &*Self::slot(net.as_raw()) })
    }

    /// Our slot in `net`.
    ///
    /// # Safety
    ///
    /// `T` is registered and `net` alive.
    unsafe fn slot(net: *mut bindings::net) -> *mut T {
        // SAFETY: per the contract; the core sized the slot for a `T` (`size`).
        unsafe { bindings::rxe_rs_helper_net_generic(net, *T::SLOT.id.get()).cast::<T>() }
    }

    /// `pernet_operations.init`.
    ///
    /// # Safety
    ///
    /// Called by the core for a new namespace, once our slot in it is allocated (zeroed).
    unsafe extern "C" fn init_net(net: *mut bindings::net) -> kernel::ffi::c_int {
        // SAFETY: the slot is ours, allocated and not yet initialised; if `new` fails the core
        // fails the namespace and calls no `exit` for it.
        match unsafe { T::new().__pinned_init(Self::slot(net)) } {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// `pernet_operations.exit`.
    ///
    /// # Safety
    ///
    /// Called by the core once for a namespace whose `init_net` succeeded, as it goes or as we
    /// unregister; nothing uses the slot any more (see [`Self::data`]).
    unsafe extern "C" fn exit_net(net: *mut bindings::net) {
        // SAFETY: initialised by `init_net`, dropped once.
        unsafe { core::ptr::drop_in_place(Self::slot(net)) };
    }
}

#[pinned_drop]
impl<T: PernetData> PinnedDrop for PernetRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // No `data` from here on; then every namespace's `exit_net` (not under the link lock:
        // `exit_net` runs under the core's pernet lock, which must not nest inside it).
        let registered = {
            let _serialised = LinkLockGuard::lock();
            T::SLOT.registered.swap(false, Ordering::AcqRel)
        };
        // (Not registered if `register` failed.)
        if registered {
            // SAFETY: registered in `register`; this runs `exit_net` for every namespace.
            unsafe { bindings::unregister_pernet_subsys(self.ops.get()) };
        }
    }
}

// SAFETY: `ops` is only touched at creation and drop, under the link lock.
unsafe impl<T: PernetData> Send for PernetRegistration<T> {}
// SAFETY: no `&self` methods.
unsafe impl<T: PernetData> Sync for PernetRegistration<T> {}
