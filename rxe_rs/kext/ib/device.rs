// SPDX-License-Identifier: GPL-2.0
//! The `ib_device` with the driver's value behind it: allocation, registration, lookup and
//! unregistration.

use super::*;
use adapter::Adapter;

/// An `ib_device` with the driver's value `T` behind it.
///
/// # Invariants
///
/// `ib` was allocated by `_ib_alloc_device` with room for the whole struct, `data` is
/// initialised from [`NewDevice::new`] until `dealloc_driver`, and the ops of `ib` are those of
/// [`Adapter<T>`].
#[repr(C)]
pub(crate) struct Device<T: Driver> {
    ib: Opaque<bindings::ib_device>,
    pub(super) data: T,
}

impl<T: Driver> Device<T> {
    /// Borrows the device behind an `ib_device` pointer handed to a `T` callback.
    ///
    /// # Safety
    ///
    /// `ib` must be the `ib` field of a live `Device<T>` (any device whose ops are `T`'s), valid
    /// for `'a`.
    pub(super) unsafe fn from_raw<'a>(ib: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `ib` is the first field of the `#[repr(C)]` struct, so the pointers coincide.
        unsafe { &*ib.cast::<Self>() }
    }

    fn as_raw(&self) -> *mut bindings::ib_device {
        self.ib.get()
    }

    /// The device name (`rxers0`).
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `name` is a NUL-terminated array of the live device.
        unsafe { CStr::from_char_ptr((*self.as_raw()).name.as_ptr()) }
    }

    /// The net device bound to `port`, if it is still there.
    pub(crate) fn netdev(&self, port: u32) -> Option<ARef<NetDevice>> {
        // SAFETY: live device; the core returns a held reference or NULL.
        let ndev = NonNull::new(unsafe { bindings::ib_device_get_netdev(self.as_raw(), port) })?;
        // SAFETY: `ib_device_get_netdev` took the reference we hand to `ARef`.
        Some(unsafe { ARef::from_raw(ndev.cast::<NetDevice>()) })
    }

    /// Tells the RDMA core (and so user space's async event queues) that `port` changed.
    pub(crate) fn dispatch_port_event(&self, port: u32, active: bool) {
        let mut event = bindings::ib_event {
            device: self.as_raw(),
            event: if active {
                bindings::ib_event_type_IB_EVENT_PORT_ACTIVE
            } else {
                bindings::ib_event_type_IB_EVENT_PORT_ERR
            },
            ..Default::default()
        };
        event.element.port_num = port;
        // SAFETY: `event` is fully initialised and names this live device.
        unsafe { bindings::ib_dispatch_event(&event) };
    }

    /// Starts unregistering the device from a context that must not sleep on it (a netdev
    /// notifier); the core finishes from its workqueue.
    pub(crate) fn unregister_queued(&self) {
        // SAFETY: the device is registered and we hold a reference (it is borrowed).
        unsafe { bindings::ib_unregister_device_queued(self.as_raw()) };
    }

    /// The Ethernet link speed of `port` as IB (speed, width), from ethtool.
    pub(crate) fn eth_speed(&self, port: u32) -> Result<(u16, u8)> {
        let (mut speed, mut width) = (0u16, 0u8);
        // SAFETY: live device, valid out-pointers; may sleep (takes RTNL), as do our callers.
        to_result(unsafe {
            bindings::ib_get_eth_speed(self.as_raw(), port, &mut speed, &mut width)
        })?;
        Ok((speed, width))
    }

    /// Pins `[addr, addr + len)` of the calling process for an MR with `access`.
    pub(crate) fn pin_user_memory(
        &self,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<crate::kext::umem::PinnedUserMemory> {
        crate::kext::umem::PinnedUserMemory::pin(self.as_raw(), addr, len, access.raw_int())
    }

    /// Our device on `ndev`, if there is one.
    pub(crate) fn get_by_netdev(ndev: &NetDevice) -> Option<DeviceRef<T>> {
        // SAFETY: `ndev` is valid; the core returns a referenced device or NULL.
        let ib = unsafe { bindings::ib_device_get_by_netdev(ndev.as_raw(), T::DRIVER_ID) };
        // INVARIANT: only `T`'s devices carry `T::DRIVER_ID`, and the core took a reference.
        NonNull::new(ib).map(|ib| DeviceRef {
            ib,
            _driver: PhantomData,
        })
    }
}

impl<T: Driver> Deref for Device<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.data
    }
}

/// Whether any RDMA device (of any driver) is called `name`.
pub(crate) fn name_in_use(name: &CStr) -> bool {
    // SAFETY: `name` is NUL-terminated; RDMA_DRIVER_UNKNOWN matches every driver.
    let ib = unsafe {
        bindings::ib_device_get_by_name(
            name.as_char_ptr(),
            bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
        )
    };
    if ib.is_null() {
        return false;
    }
    // SAFETY: `ib_device_get_by_name` returned a reference we give back.
    unsafe { bindings::ib_device_put(ib) };
    true
}

/// Unregisters every device of driver `T` and waits until each is deallocated: no callback
/// into `T` runs after this returns.
pub(crate) fn unregister_all<T: Driver>() {
    // SAFETY: plain call; the core serialises against other unregistrations.
    unsafe { bindings::ib_unregister_driver(T::DRIVER_ID) };
}

/// A counted reference to a registered device.
///
/// # Invariants
///
/// `ib` is a `Device<T>` on which we hold an `ib_device_get` reference.
pub(crate) struct DeviceRef<T: Driver> {
    ib: NonNull<bindings::ib_device>,
    _driver: PhantomData<T>,
}

impl<T: Driver> Deref for DeviceRef<T> {
    type Target = Device<T>;

    fn deref(&self) -> &Device<T> {
        // SAFETY: type invariant: a referenced `Device<T>`.
        unsafe { Device::from_raw(self.ib.as_ptr()) }
    }
}

impl<T: Driver> Drop for DeviceRef<T> {
    fn drop(&mut self) {
        // SAFETY: we hold the reference (type invariant).
        unsafe { bindings::ib_device_put(self.ib.as_ptr()) };
    }
}

/// What the driver sets on a device before it is registered.
pub(crate) struct DeviceConfig<'a> {
    /// Node GUID (big-endian bytes, as on the wire).
    pub(crate) node_guid: [u8; 8],
    /// `node_desc` (shown by `ibv_devinfo` and sysfs).
    pub(crate) node_desc: &'a CStr,
    /// Completion vectors offered to user space.
    pub(crate) num_comp_vectors: u32,
    /// The module that owns the device (the ops' `owner`; with `disassociate_ucontext` uverbs
    /// does not pin it while user space has the device open: removal disassociates).
    pub(crate) owner: &'static ThisModule,
}

/// A device allocated but not yet registered; freed on drop.
///
/// # Invariants
///
/// `dev` points to an allocated `Device<T>` with `data` initialised and `T`'s ops set; nobody
/// else knows about it.
pub(crate) struct NewDevice<T: Driver> {
    dev: NonNull<Device<T>>,
}

impl<T: Driver> NewDevice<T> {
    /// Allocates a one-port RoCE device carrying `data`.
    pub(crate) fn new(data: impl PinInit<T, Error>, config: &DeviceConfig<'_>) -> Result<Self> {
        // SAFETY: a plain allocation; `Device<T>` starts with the `ib_device`.
        let ib =
            unsafe { bindings::rxe_rs_helper_ib_alloc_device(core::mem::size_of::<Device<T>>()) };
        let dev = NonNull::new(ib.cast::<Device<T>>()).ok_or(ENOMEM)?;
        let ops = Adapter::<T>::ops(config.owner);
        // SAFETY: `dev` is a fresh, zeroed `Device<T>` allocation that we own and never move.
        if let Err(e) = unsafe { data.__pinned_init(core::ptr::addr_of_mut!((*dev.as_ptr()).data)) }
        {
            // SAFETY: no ops installed yet, so this only frees the allocation.
            unsafe { bindings::ib_dealloc_device(ib) };
            return Err(e);
        }
        // SAFETY: we initialised `data` before installing ops whose `dealloc_driver` drops it;
        // `ib_set_device_ops` copies `ops`, which may then go out of scope.
        unsafe {
            let ib = &mut *ib;
            bindings::ib_set_device_ops(ib, &ops);
            ib.node_guid = u64::from_ne_bytes(config.node_guid);
            ib.node_type = bindings::RDMA_NODE_IB_CA as u8;
            ib.phys_port_cnt = 1;
            ib.num_comp_vectors = config.num_comp_vectors as i32;
            ib.local_dma_lkey = 0;
            ib.name_assign_type = bindings::rdma_nl_name_assign_type_RDMA_NAME_ASSIGN_TYPE_USER;
            let desc = config.node_desc.as_bytes();
            let len = desc.len().min(ib.node_desc.len() - 1);
            core::ptr::copy_nonoverlapping(desc.as_ptr(), ib.node_desc.as_mut_ptr().cast(), len);
        }
        Ok(Self { dev })
    }

    fn raw(&self) -> *mut bindings::ib_device {
        self.dev.as_ptr().cast()
    }

    /// Binds `ndev` to port 1: the core fills the GID table from its IP addresses and resolves
    /// routes through it.
    pub(crate) fn set_netdev(&mut self, ndev: &NetDevice) -> Result {
        // SAFETY: unregistered device we own; the core takes its own netdev reference.
        to_result(unsafe { bindings::ib_device_set_netdev(self.raw(), ndev.as_raw(), 1) })
    }

    /// Enables the legacy write commands the provider uses and the core leaves off by default:
    /// arming CQs (`ibv_req_notify_cq`) and the send doorbell (`POST_SEND` with no WRs).
    pub(crate) fn enable_legacy_commands(&mut self) {
        // SAFETY: unregistered device we own.
        unsafe {
            (*self.raw()).uverbs_cmd_mask |= (1u64
                << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ)
                | (1u64 << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND)
                | (1u64 << bindings::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_RECV);
        }
    }

    /// Registers the device as `name`. From here on the RDMA core owns it; the returned
    /// reference keeps it alive while the caller finishes setting it up.
    pub(crate) fn register(self, name: &CStr) -> Result<DeviceRef<T>> {
        let this = ManuallyDrop::new(self);
        let ib = this.raw();
        // SAFETY: fully set-up device we own; NULL means no DMA device (software device).
        let ret =
            unsafe { bindings::ib_register_device(ib, name.as_char_ptr(), core::ptr::null_mut()) };
        if let Err(e) = to_result(ret) {
            // On failure the caller still owns the device and must free it.
            drop(ManuallyDrop::into_inner(this));
            return Err(e);
        }
        // SAFETY: a registered device; this reference is dropped by the `DeviceRef`. The device
        // may be unregistered concurrently (rdma link delete), which this reference survives.
        unsafe { bindings::rxe_rs_helper_ib_device_try_get(ib) }
            .then(|| DeviceRef {
                ib: NonNull::new(ib).unwrap(),
                _driver: PhantomData,
            })
            .ok_or(ENODEV)
    }
}

impl<T: Driver> Drop for NewDevice<T> {
    fn drop(&mut self) {
        // SAFETY: we own the unregistered device; this calls `dealloc_driver` (dropping `data`)
        // and frees it.
        unsafe { bindings::ib_dealloc_device(self.raw()) };
    }
}
