// SPDX-License-Identifier: GPL-2.0
//! Net devices: a borrowed/refcounted handle and the netdevice notifier.

use super::bindings;
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    error::to_result,
    prelude::*,
    str::CStr,
    types::{ARef, AlwaysRefCounted, Opaque},
};

/// A `struct net_device`.
///
/// # Invariants
///
/// The wrapped device is registered with the networking core (or being unregistered) and stays
/// valid while this reference is, either because the caller holds a reference or because it is
/// borrowed from a callback that guarantees it.
#[repr(transparent)]
pub(crate) struct NetDevice(Opaque<bindings::net_device>);

impl NetDevice {
    /// Borrows a net device.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a valid `net_device` that outlives `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::net_device) -> &'a Self {
        // SAFETY: `NetDevice` is a transparent wrapper; validity is the caller's promise.
        unsafe { &*ptr.cast() }
    }

    /// The C pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// The interface name (`eth0`).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `name` is a NUL-terminated array inside the valid device (type invariant).
        unsafe { CStr::from_char_ptr((*self.as_raw()).name.as_ptr()) }
    }

    /// The MTU, read once (it changes under RTNL, which callers need not hold).
    pub(crate) fn mtu(&self) -> u32 {
        // SAFETY: valid device; a racy read of an aligned u32 is what READ_ONCE does in C.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.as_raw()).mtu)) }
    }

    /// The 48-bit MAC address; zero if the device has a different address length.
    pub(crate) fn mac(&self) -> [u8; 6] {
        let mut mac = [0u8; 6];
        // SAFETY: valid device; `dev_addr` holds `addr_len` bytes.
        unsafe {
            let dev = self.as_raw();
            if (*dev).addr_len == 6 && !(*dev).dev_addr.is_null() {
                core::ptr::copy_nonoverlapping((*dev).dev_addr, mac.as_mut_ptr(), 6);
            }
        }
        mac
    }

    /// Adds `mac` to the multicast addresses the device receives (counted: one delete per add).
    /// Process context.
    pub(crate) fn mc_add(&self, mac: &[u8; 6]) -> Result {
        // SAFETY: a valid device; `dev_mc_add` copies the address and takes its own locks.
        kernel::error::to_result(unsafe { bindings::dev_mc_add(self.as_raw(), mac.as_ptr()) })
    }

    /// Undoes one [`Self::mc_add`] of `mac`.
    pub(crate) fn mc_del(&self, mac: &[u8; 6]) {
        // SAFETY: as for `mc_add`. A failure (not added) leaves nothing to undo.
        let _ = unsafe { bindings::dev_mc_del(self.as_raw(), mac.as_ptr()) };
    }

    /// Administratively up and with carrier: the state in which a RoCE port is ACTIVE.
    pub(crate) fn is_running_with_carrier(&self) -> bool {
        // SAFETY: valid device.
        unsafe {
            bindings::rxe_rs_helper_netif_running(self.as_raw())
                && bindings::rxe_rs_helper_netif_carrier_ok(self.as_raw())
        }
    }

    /// `IFF_UP` is set.
    pub(crate) fn is_up(&self) -> bool {
        // SAFETY: valid device.
        let flags = unsafe { bindings::dev_get_flags(self.as_raw()) };
        flags & bindings::net_device_flags_IFF_UP != 0
    }

    /// A loopback device (`lo`).
    pub(crate) fn is_loopback(&self) -> bool {
        // SAFETY: valid device; `flags` changes under RTNL, a racy read of one bit is fine here.
        let flags =
            unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.as_raw()).flags)) };
        flags & bindings::net_device_flags_IFF_LOOPBACK != 0
    }

    /// The device of this device's network namespace that has `addr` (an IPv4 or IPv6
    /// address, 4 or 16 bytes) as one of its own addresses.
    pub(crate) fn local_address_owner(&self, addr: &[u8]) -> Option<ARef<NetDevice>> {
        // SAFETY: a valid device (the helper reads its namespace and looks the address up in
        // one RCU read-side section: a moved netdev's old namespace may go); `addr` holds the 4 or 16 bytes the helper
        // reads; it returns a device with a reference taken for us, or NULL.
        let dev = unsafe {
            match addr.len() {
                4 => bindings::rxe_rs_helper_dev_by_local_addr_v4(self.as_raw(), addr.as_ptr()),
                16 => bindings::rxe_rs_helper_dev_by_local_addr_v6(self.as_raw(), addr.as_ptr()),
                _ => return None,
            }
        };
        // SAFETY: a valid device whose reference passes to the `ARef`.
        NonNull::new(dev).map(|dev| unsafe { ARef::from_raw(dev.cast()) })
    }

    /// A VLAN sub-device.
    pub(crate) fn is_vlan(&self) -> bool {
        // SAFETY: valid device.
        unsafe { bindings::rxe_rs_helper_is_vlan_dev(self.as_raw()) }
    }

    /// The device that carries its RoCE traffic: for a VLAN device the real device under it
    /// (where an rxe_rs device may be), else itself.
    pub(crate) fn carrier(&self) -> &NetDevice {
        if !self.is_vlan() {
            return self;
        }
        // SAFETY: a valid VLAN device; it holds a reference to its real device for as long as
        // it exists, which outlives the borrow of `self`.
        unsafe { NetDevice::from_raw(bindings::rxe_rs_helper_vlan_real_dev(self.as_raw())) }
    }

    /// Whether it is `other`.
    pub(crate) fn is(&self, other: &NetDevice) -> bool {
        core::ptr::eq(self.as_raw(), other.as_raw())
    }
}

// SAFETY: `dev_hold`/`dev_put` keep the device alive; any `&NetDevice` guarantees a non-zero
// count while it lives (type invariant).
unsafe impl AlwaysRefCounted for NetDevice {
    fn inc_ref(&self) {
        // SAFETY: valid device with a non-zero refcount.
        unsafe { bindings::rxe_rs_helper_dev_hold(self.as_raw()) }
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: the caller gives back a reference it held.
        unsafe { bindings::rxe_rs_helper_dev_put(obj.as_ref().as_raw()) }
    }
}

// SAFETY: net devices are used from any thread; their fields are protected by the core.
unsafe impl Send for NetDevice {}
// SAFETY: as above.
unsafe impl Sync for NetDevice {}

/// The netdevice events a RoCE driver reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetdevEvent {
    /// Brought up (`NETDEV_UP`).
    Up,
    /// Brought down (`NETDEV_DOWN`).
    Down,
    /// Carrier or flags changed (`NETDEV_CHANGE`).
    Change,
    /// MTU changed (`NETDEV_CHANGEMTU`).
    ChangeMtu,
    /// Being unregistered (`NETDEV_UNREGISTER`): drop every reference.
    Unregister,
}

impl NetdevEvent {
    fn from_raw(event: u64) -> Option<Self> {
        match event as u32 {
            bindings::netdev_cmd_NETDEV_UP => Some(Self::Up),
            bindings::netdev_cmd_NETDEV_DOWN => Some(Self::Down),
            bindings::netdev_cmd_NETDEV_CHANGE => Some(Self::Change),
            bindings::netdev_cmd_NETDEV_CHANGEMTU => Some(Self::ChangeMtu),
            bindings::netdev_cmd_NETDEV_UNREGISTER => Some(Self::Unregister),
            _ => None,
        }
    }
}

/// Receives netdevice events; called under RTNL.
pub(crate) trait NetdevNotifier {
    /// `event` happened to `ndev`.
    fn event(event: NetdevEvent, ndev: &NetDevice);
}

/// A registered netdevice notifier; unregistered on drop.
#[pin_data(PinnedDrop)]
pub(crate) struct NotifierRegistration<T: NetdevNotifier> {
    #[pin]
    block: Opaque<bindings::notifier_block>,
    _handler: PhantomData<T>,
}

impl<T: NetdevNotifier> NotifierRegistration<T> {
    /// Registers `T` for the events of every net device.
    pub(crate) fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            block <- super::opaque_try_init(|slot: *mut bindings::notifier_block| {
                // SAFETY: `slot` is ours to initialise and pinned: its address stays valid
                // until `drop` unregisters it.
                unsafe {
                    slot.write(bindings::notifier_block {
                        notifier_call: Some(Self::notifier_call),
                        ..Default::default()
                    });
                    to_result(bindings::register_netdevice_notifier(slot))
                }
            }),
            _handler: PhantomData,
        })
    }

    /// `notifier_call` callback.
    ///
    /// # Safety
    ///
    /// Called by the netdev notifier chain with the `notifier_block` we registered and a valid
    /// `netdev_notifier_info`.
    unsafe extern "C" fn notifier_call(
        _block: *mut bindings::notifier_block,
        event: kernel::ffi::c_ulong,
        info: *mut kernel::ffi::c_void,
    ) -> kernel::ffi::c_int {
        if let Some(event) = NetdevEvent::from_raw(event as u64) {
            // SAFETY: netdevice notifiers are called with a `netdev_notifier_info` for a device
            // that stays valid for the duration of the call.
            let ndev =
                unsafe { NetDevice::from_raw(bindings::rxe_rs_helper_notifier_info_to_dev(info)) };
            T::event(event, ndev);
        }
        bindings::NOTIFY_DONE as kernel::ffi::c_int
    }
}

#[pinned_drop]
impl<T: NetdevNotifier> PinnedDrop for NotifierRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `register` (the pin-init only completes on success).
        unsafe { bindings::unregister_netdevice_notifier(self.block.get()) };
    }
}

// SAFETY: the registration is only touched at creation and drop.
unsafe impl<T: NetdevNotifier> Send for NotifierRegistration<T> {}
// SAFETY: as above; no `&self` method exists.
unsafe impl<T: NetdevNotifier> Sync for NotifierRegistration<T> {}
