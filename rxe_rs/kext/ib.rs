// SPDX-License-Identifier: GPL-2.0
//! `struct ib_device`: allocation, registration, lookup, and the `ib_device_ops` vtable.
//!
//! A driver describes its device with a [`Driver`] implementation whose value lives inside the
//! C allocation, right after the `ib_device` (as C drivers embed it). The RDMA core owns a
//! registered device: it is unregistered by `rdma link delete`, by [`Device::unregister_queued`]
//! or by [`unregister_all`], and the driver value is dropped in `dealloc_driver`, the last
//! callback the core makes.

use super::{
    bindings, mmap,
    netdev::NetDevice,
    object::{CoreObject, Udata},
};
use core::{marker::PhantomData, mem::ManuallyDrop, ops::Deref, ptr::NonNull};
use kernel::{
    error::{from_result, to_result},
    prelude::*,
    str::CStr,
    types::{ARef, Opaque},
    ThisModule,
};

/// Device attributes (`ib_query_device`): plain data.
pub(crate) type DeviceAttr = bindings::ib_device_attr;
/// Port attributes (`ib_query_port`): plain data.
pub(crate) type PortAttr = bindings::ib_port_attr;
/// What never changes about a port (`get_port_immutable`): plain data.
pub(crate) type PortImmutable = bindings::ib_port_immutable;
/// CQ creation attributes: plain data.
pub(crate) type CqInitAttr = bindings::ib_cq_init_attr;

/// A protection domain of driver `T`.
pub(crate) type Pd<T> = CoreObject<bindings::ib_pd, <T as Driver>::Pd>;
/// A completion queue of driver `T`.
pub(crate) type Cq<T> = CoreObject<bindings::ib_cq, <T as Driver>::Cq>;
/// A queue pair of driver `T`.
pub(crate) type Qp<T> = CoreObject<bindings::ib_qp, <T as Driver>::Qp>;
/// QP creation attributes (the driver writes the real capacities back into `cap`).
pub(crate) type QpInitAttr = bindings::ib_qp_init_attr;
/// QP attributes of modify/query: plain data, except the GRH's `sgid_attr` (see [`read_roce_av`]).
pub(crate) type QpAttr = bindings::ib_qp_attr;

/// `ib_modify_qp_is_ok`: is `cur -> next` with `mask` a legal transition for an RC QP?
pub(crate) fn rc_transition_ok(cur: u32, next: u32, mask: i32) -> bool {
    // SAFETY: a pure function of its arguments.
    unsafe { bindings::ib_modify_qp_is_ok(cur, next, bindings::ib_qp_type_IB_QPT_RC, mask as u32) }
}

/// The RoCEv2 path in an address handle attribute: `None` without a GRH, or if the source GID
/// is not a RoCEv2 (UDP-encapsulated) one.
pub(crate) fn read_roce_av(ah: &bindings::rdma_ah_attr) -> Option<crate::proto::av::AddressVector> {
    if ah.ah_flags as u32 & bindings::ib_ah_flags_IB_AH_GRH == 0 || ah.grh.sgid_attr.is_null() {
        return None;
    }
    // SAFETY: the core holds a reference on `sgid_attr` for the duration of the verb; `ib_gid`
    // is a 16-byte union of plain bytes.
    let (gid_type, sgid, dgid) = unsafe {
        let sgid_attr = &*ah.grh.sgid_attr;
        (sgid_attr.gid_type, sgid_attr.gid.raw, ah.grh.dgid.raw)
    };
    if gid_type != bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP {
        return None;
    }
    Some(crate::proto::av::AddressVector {
        sgid,
        dgid,
        flow_label: ah.grh.flow_label,
        hop_limit: ah.grh.hop_limit,
        traffic_class: ah.grh.traffic_class,
    })
}

/// Fills `ah` (of a query) with a RoCE path.
pub(crate) fn write_roce_av(
    ah: &mut bindings::rdma_ah_attr,
    av: &crate::proto::av::AddressVector,
    sgid_index: u8,
    port: u32,
) {
    ah.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
    ah.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
    ah.port_num = port;
    ah.grh.dgid.raw = av.dgid;
    ah.grh.flow_label = av.flow_label;
    ah.grh.hop_limit = av.hop_limit;
    ah.grh.traffic_class = av.traffic_class;
    ah.grh.sgid_index = sgid_index;
    // The core's query path does not take a GID reference from us.
    ah.grh.sgid_attr = core::ptr::null();
}

/// A reference from a QP to one of its CQs.
///
/// # Invariants
///
/// Points to a live `Cq<T>`: the core keeps a CQ alive while a QP uses it (its `usecnt`), and
/// the QP's users are the verbs on it and the receive softirq, which `destroy_qp` waits out
/// (`synchronize_rcu`) before the QP, and with it this reference, goes away.
pub(crate) struct CqRef<T: Driver>(NonNull<bindings::ib_cq>, PhantomData<T>);

// SAFETY: a CQ may be used from any context (its state has its own locks).
unsafe impl<T: Driver> Send for CqRef<T> {}
// SAFETY: as above.
unsafe impl<T: Driver> Sync for CqRef<T> {}

impl<T: Driver> CqRef<T> {
    /// The CQ.
    pub(crate) fn get(&self) -> &Cq<T> {
        // SAFETY: live for as long as this reference (type invariant).
        unsafe { Cq::<T>::from_raw(self.0.as_ptr()) }
    }
}

/// The core's side of one of our QPs, for reporting asynchronous events to its owner.
///
/// # Invariants
///
/// Points to an `ib_qp` of ours that is alive until the driver's `destroy_qp` returns; the
/// driver reports no event after that (it stops its datapath for the QP first).
pub(crate) struct QpRef<T: Driver>(NonNull<bindings::ib_qp>, PhantomData<T>);

// SAFETY: only used to call the core's event handler, which may run on any CPU.
unsafe impl<T: Driver> Send for QpRef<T> {}
// SAFETY: as above.
unsafe impl<T: Driver> Sync for QpRef<T> {}

impl<T: Driver> QpRef<T> {
    /// Reports `event` (an `ib_event_type`) on the QP to its owner.
    pub(crate) fn dispatch_event(&self, event: bindings::ib_event_type) {
        let qp = self.0.as_ptr();
        // SAFETY: a live QP (type invariant) with a valid device; the core sets
        // `event_handler` (possibly NULL) and `qp_context` before the QP is used.
        unsafe {
            if let Some(handler) = (*qp).event_handler {
                let mut ev = bindings::ib_event {
                    device: (*qp).device,
                    event,
                    ..Default::default()
                };
                ev.element.qp = qp;
                handler(&mut ev, (*qp).qp_context);
            }
        }
    }
}

/// What a new QP reaches through the core: its completion queues, and itself (for events).
pub(crate) struct QpLinks<T: Driver> {
    /// For send completions.
    pub(crate) send: CqRef<T>,
    /// For receive completions.
    pub(crate) recv: CqRef<T>,
    /// The QP itself, for its asynchronous events.
    pub(crate) qp: QpRef<T>,
}

/// The name of one hardware counter (`rdma statistic show`), for a `static` table.
#[repr(transparent)]
pub(crate) struct StatDesc(bindings::rdma_stat_desc);

// SAFETY: immutable after construction; the name is a `'static` C string.
unsafe impl Sync for StatDesc {}

impl StatDesc {
    /// A counter called `name`.
    pub(crate) const fn new(name: &'static CStr) -> Self {
        Self(bindings::rdma_stat_desc {
            name: name.as_char_ptr(),
            flags: 0,
            priv_: core::ptr::null(),
        })
    }
}

/// A memory region of driver `T` (allocated by the driver, unlike the others).
pub(crate) type Mr<T> = CoreObject<bindings::ib_mr, <T as Driver>::Mr>;

/// MR access flags (`enum ib_access_flags`).
pub(crate) mod access {
    use super::bindings;
    #[allow(missing_docs)]
    pub(crate) const LOCAL_WRITE: i32 = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE as i32;
    #[allow(missing_docs)]
    pub(crate) const REMOTE_WRITE: i32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE as i32;
    #[allow(missing_docs)]
    pub(crate) const REMOTE_READ: i32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ as i32;
    #[allow(missing_docs)]
    pub(crate) const REMOTE_ATOMIC: i32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC as i32;
    #[allow(missing_docs)]
    pub(crate) const MW_BIND: i32 = bindings::ib_access_flags_IB_ACCESS_MW_BIND as i32;
    /// Flags a device may ignore (relaxed ordering...).
    pub(crate) const OPTIONAL_RANGE: i32 = bindings::ib_access_flags_IB_ACCESS_OPTIONAL as i32;
}

/// `ib_req_notify_cq` flags.
pub(crate) mod cq_notify {
    use super::bindings;
    /// Arm for the next solicited completion only.
    pub(crate) const SOLICITED: u32 = bindings::ib_cq_notify_flags_IB_CQ_SOLICITED;
    /// Arm for the next completion.
    pub(crate) const NEXT_COMP: u32 = bindings::ib_cq_notify_flags_IB_CQ_NEXT_COMP;
    /// Mask of the two above.
    pub(crate) const SOLICITED_MASK: u32 = bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK;
    /// Report (return 1) if completions are already pending.
    pub(crate) const REPORT_MISSED_EVENTS: u32 =
        bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS;
}

/// The driver-specific attributes of an object being reported over netlink (`rdma resource
/// show ... -dd`).
pub(crate) struct DriverAttrs<'a> {
    msg: *mut bindings::sk_buff,
    _msg: PhantomData<&'a mut bindings::sk_buff>,
}

impl DriverAttrs<'_> {
    /// Adds the attribute `name` with `value`.
    pub(crate) fn put_u32(&mut self, name: &CStr, value: u32) -> Result {
        // SAFETY: `msg` is the message the RDMA core is building for this call; `name` is a
        // NUL-terminated string it copies.
        to_result(unsafe { bindings::rdma_nl_put_driver_u32(self.msg, name.as_char_ptr(), value) })
    }
}

/// The driver side of an `ib_device`.
#[vtable]
pub(crate) trait Driver: Sized + Send + Sync + 'static {
    /// `ib_device_ops.driver_id`: libibverbs matches the provider by it.
    const DRIVER_ID: u32;
    /// `ib_device_ops.uverbs_abi_ver`.
    const UVERBS_ABI_VERSION: u32;

    /// Fills the device attributes.
    fn query_device(dev: &Device<Self>, attr: &mut DeviceAttr) -> Result;

    /// Fills the attributes of `port` (1-based); `attr` arrives zeroed.
    fn query_port(dev: &Device<Self>, port: u32, attr: &mut PortAttr) -> Result;

    /// Fills the immutable attributes of `port`.
    fn port_immutable(dev: &Device<Self>, port: u32, immutable: &mut PortImmutable) -> Result;

    /// The P_Key at `index` of `port`'s table.
    fn query_pkey(dev: &Device<Self>, port: u32, index: u16) -> Result<u16>;

    /// The per-port hardware counters, by name.
    const PORT_COUNTERS: &'static [StatDesc];
    /// Reads the port counters, in the order of [`Driver::PORT_COUNTERS`].
    fn read_port_counters(dev: &Device<Self>, port: u32, values: &mut [u64]);

    /// What a protection domain holds.
    type Pd: Send + Sync;
    /// Allocates a protection domain.
    fn alloc_pd(dev: &Device<Self>, udata: &Udata<'_>) -> Result<Self::Pd>;
    /// Releases a protection domain (dropped right after).
    fn dealloc_pd(dev: &Device<Self>, pd: &Pd<Self>);

    /// What a completion queue holds.
    type Cq: Send + Sync;
    /// Creates a completion queue; `udata` carries the driver response for user CQs. Returns
    /// the initialiser and the number of completions the CQ really holds (at least `attr.cqe`).
    fn create_cq(
        dev: &Device<Self>,
        attr: &CqInitAttr,
        udata: &Udata<'_>,
    ) -> Result<(impl PinInit<Self::Cq, Error>, u32)>;
    /// Destroys a completion queue (dropped right after).
    fn destroy_cq(dev: &Device<Self>, cq: &Cq<Self>);
    /// Gives the CQ room for at least `cqe` completions; `udata` carries the driver response.
    /// Returns the number of completions it now holds.
    fn resize_cq(cq: &Cq<Self>, cqe: u32, udata: &Udata<'_>) -> Result<u32>;
    /// What a queue pair holds.
    type Qp: Send + Sync;
    /// Creates a QP; writes the real capacities into `init.cap`; returns the initialiser and
    /// the QP number.
    fn create_qp(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        init: &mut QpInitAttr,
        links: QpLinks<Self>,
        udata: &Udata<'_>,
    ) -> Result<(impl PinInit<Self::Qp, Error>, u32)>;
    /// Applies the attributes of `mask` (and the state transition they ask for).
    fn modify_qp(dev: &Device<Self>, qp: &Qp<Self>, attr: &QpAttr, mask: i32) -> Result;
    /// Reports the QP's attributes and creation capacities.
    fn query_qp(qp: &Qp<Self>, attr: &mut QpAttr, init: &mut QpInitAttr) -> Result;
    /// Destroys a QP (dropped right after).
    fn destroy_qp(dev: &Device<Self>, qp: &Qp<Self>);
    /// Optional: the QP's driver state as named values, for `rdma resource show qp -dd`.
    fn fill_res_qp_entry(_qp: &Qp<Self>, _out: &mut DriverAttrs<'_>) -> Result {
        kernel::build_error(kernel::error::VTABLE_DEFAULT_ERROR)
    }

    /// The send-queue doorbell: user space posted WQEs into the QP's ring (`post_send` with
    /// no kernel work requests).
    fn post_send(dev: &Device<Self>, qp: &Qp<Self>) -> Result;
    /// The receive-queue doorbell: user space posted receive WQEs into the QP's ring while the
    /// ring asked to be told (`post_recv` with no kernel work requests).
    fn post_recv(dev: &Device<Self>, qp: &Qp<Self>) -> Result;

    /// What a memory region holds.
    type Mr: Send + Sync;
    /// Registers `[start, start + len)` of the calling process at `iova`; returns the MR and its
    /// key (used as both lkey and rkey).
    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        start: u64,
        len: u64,
        iova: u64,
        access: i32,
        udata: &Udata<'_>,
    ) -> Result<(Self::Mr, u32)>;
    /// A DMA MR (all of kernel memory) for kernel users.
    fn get_dma_mr(dev: &Device<Self>, pd: &Pd<Self>, access: i32) -> Result<(Self::Mr, u32)>;
    /// Deregisters an MR (dropped right after).
    fn dereg_mr(dev: &Device<Self>, mr: &Mr<Self>) -> Result;

    /// Arms the CQ for a completion event (`flags`: [`cq_notify`]); returns 1 if
    /// `REPORT_MISSED_EVENTS` was asked and completions are already waiting.
    fn req_notify_cq(cq: &Cq<Self>, flags: u32) -> Result<i32>;
}

impl<T> CoreObject<bindings::ib_mr, T> {
    /// The local key (equal to the remote key for our MRs).
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: a live MR; the key never changes after registration.
        unsafe { (*self.raw()).lkey }
    }
}

impl<T> CoreObject<bindings::ib_cq, T> {
    /// Tells the CQ's consumer that a completion arrived (the comp channel wakes up).
    pub(crate) fn call_comp_handler(&self) {
        let cq = self.raw();
        // SAFETY: a live CQ; the core sets `comp_handler` (possibly NULL for kernel CQs
        // without one) and `cq_context` before the CQ is used.
        unsafe {
            if let Some(handler) = (*cq).comp_handler {
                handler(cq, (*cq).cq_context);
            }
        }
    }

    /// Reports an asynchronous CQ error (overflow) to the CQ's owner.
    pub(crate) fn raise_cq_error(&self) {
        let cq = self.raw();
        // SAFETY: a live CQ with a valid device; `event_handler` may be NULL.
        unsafe {
            if let Some(handler) = (*cq).event_handler {
                let mut event = bindings::ib_event {
                    device: (*cq).device,
                    event: bindings::ib_event_type_IB_EVENT_CQ_ERR,
                    ..Default::default()
                };
                event.element.cq = cq;
                handler(&mut event, (*cq).cq_context);
            }
        }
    }
}

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
    data: T,
}

impl<T: Driver> Device<T> {
    /// Borrows the device behind an `ib_device` pointer handed to a `T` callback.
    ///
    /// # Safety
    ///
    /// `ib` must be the `ib` field of a live `Device<T>` (any device whose ops are `T`'s), valid
    /// for `'a`.
    unsafe fn from_raw<'a>(ib: *mut bindings::ib_device) -> &'a Self {
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

    /// A link to this device for an object of it.
    ///
    /// # Safety
    ///
    /// The link must live inside a verbs object of this device (the core destroys those before
    /// it frees the device) and be used only while that object lives.
    pub(crate) unsafe fn link(&self) -> DeviceLink<T> {
        // INVARIANT: the caller keeps the link within the device's lifetime.
        DeviceLink {
            ib: NonNull::from(&self.ib).cast(),
            _driver: PhantomData,
        }
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
        access: i32,
    ) -> Result<super::umem::PinnedUserMemory> {
        super::umem::PinnedUserMemory::pin(self.as_raw(), addr, len, access)
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

/// A link from a verbs object (a QP) to its device, for contexts that have no device at hand
/// (timers).
///
/// # Invariants
///
/// `ib` is a `Device<T>` that outlives the link: links are made only by [`Device::link`],
/// whose callers keep them inside objects the RDMA core destroys before it frees the device.
pub(crate) struct DeviceLink<T: Driver> {
    ib: NonNull<bindings::ib_device>,
    _driver: PhantomData<T>,
}

impl<T: Driver> DeviceLink<T> {
    /// The device.
    pub(crate) fn get(&self) -> &Device<T> {
        // SAFETY: type invariant: the device outlives the link.
        unsafe { Device::from_raw(self.ib.as_ptr()) }
    }
}

// SAFETY: a device may be used from any thread; the link is a shared borrow of it.
unsafe impl<T: Driver> Send for DeviceLink<T> {}
// SAFETY: as above.
unsafe impl<T: Driver> Sync for DeviceLink<T> {}

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

/// The C callbacks of `ib_device_ops`, each turning raw pointers into safe types for `T`.
struct Adapter<T: Driver>(PhantomData<T>);

impl<T: Driver> Adapter<T> {
    fn ops(owner: &'static ThisModule) -> bindings::ib_device_ops {
        bindings::ib_device_ops {
            owner: owner.as_ptr(),
            driver_id: T::DRIVER_ID,
            uverbs_abi_ver: T::UVERBS_ABI_VERSION,
            query_device: Some(Self::query_device),
            query_port: Some(Self::query_port),
            get_port_immutable: Some(Self::get_port_immutable),
            get_link_layer: Some(Self::get_link_layer),
            query_pkey: Some(Self::query_pkey),
            alloc_ucontext: Some(Self::alloc_ucontext),
            dealloc_ucontext: Some(Self::dealloc_ucontext),
            disassociate_ucontext: Some(Self::disassociate_ucontext),
            mmap: Some(mmap::mmap),
            mmap_free: Some(mmap::mmap_free),
            alloc_hw_port_stats: Some(Self::alloc_hw_port_stats),
            get_hw_stats: Some(Self::get_hw_stats),
            alloc_pd: Some(Self::alloc_pd),
            dealloc_pd: Some(Self::dealloc_pd),
            create_cq: Some(Self::create_cq),
            destroy_cq: Some(Self::destroy_cq),
            resize_cq: Some(Self::resize_cq),
            req_notify_cq: Some(Self::req_notify_cq),
            create_qp: Some(Self::create_qp),
            modify_qp: Some(Self::modify_qp),
            query_qp: Some(Self::query_qp),
            fill_res_qp_entry: if T::HAS_FILL_RES_QP_ENTRY {
                Some(Self::fill_res_qp_entry)
            } else {
                None
            },
            destroy_qp: Some(Self::destroy_qp),
            post_send: Some(Self::post_send),
            post_recv: Some(Self::post_recv),
            size_ib_qp: core::mem::size_of::<Qp<T>>(),
            reg_user_mr: Some(Self::reg_user_mr),
            get_dma_mr: Some(Self::get_dma_mr),
            dereg_mr: Some(Self::dereg_mr),
            size_ib_pd: core::mem::size_of::<Pd<T>>(),
            size_ib_cq: core::mem::size_of::<Cq<T>>(),
            dealloc_driver: Some(Self::dealloc_driver),
            size_ib_ucontext: core::mem::size_of::<bindings::ib_ucontext>(),
            ..Default::default()
        }
    }

    /// # Safety
    ///
    /// Called by the RDMA core with a live device of ours.
    unsafe extern "C" fn query_device(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: the core passes a live device, a valid attr and a NULL or valid udata.
            let (dev, attr) = unsafe { (Device::<T>::from_raw(ib), &mut *attr) };
            // SAFETY: as above.
            if !udata.is_null() && unsafe { (*udata).inlen != 0 || (*udata).outlen != 0 } {
                // We define no driver-specific query_device data.
                return Err(EINVAL);
            }
            T::query_device(dev, attr)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.query_port`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.query_port` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn query_port(
        ib: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: live device, valid zeroed attr.
            let (dev, attr) = unsafe { (Device::<T>::from_raw(ib), &mut *attr) };
            T::query_port(dev, port, attr)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.get_port_immutable`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_port_immutable` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_port_immutable(
        ib: *mut bindings::ib_device,
        port: u32,
        immutable: *mut bindings::ib_port_immutable,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: live device, valid out-struct.
            let (dev, immutable) = unsafe { (Device::<T>::from_raw(ib), &mut *immutable) };
            T::port_immutable(dev, port, immutable)?;
            Ok(0)
        })
    }

    /// Devices made by [`NewDevice`] are RoCE devices: Ethernet ports. (Without this op the
    /// core derives InfiniBand from the CA node type.)
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_link_layer` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_link_layer(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> bindings::rdma_link_layer {
        bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    /// `ib_device_ops.query_pkey`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.query_pkey` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn query_pkey(
        ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: live device.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let value = T::query_pkey(dev, port, index)?;
            // SAFETY: valid out-pointer.
            unsafe { pkey.write(value) };
            Ok(0)
        })
    }

    /// `ib_device_ops.alloc_ucontext`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_ucontext` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_ucontext(
        _uctx: *mut bindings::ib_ucontext,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // No per-process state yet: the core's `ib_ucontext` is all there is.
        0
    }

    /// `ib_device_ops.dealloc_ucontext`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_ucontext` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dealloc_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// `ib_device_ops.disassociate_ucontext`: the device is going (`rdma link delete`, the
    /// netdev removed, the module unloaded) while a process still has it open. With this op
    /// the core destroys the process's objects and lets the device go at once (the process
    /// gets `IB_EVENT_DEVICE_FATAL` and EIO); without it, unregistering waits until every such
    /// process has exited, and `ip link del` of the netdev hangs with it. Nothing is left to
    /// undo here: a ring's pages are held by the process's VMA itself (`vm_insert_page`), so
    /// they stay valid memory for it until it unmaps them, and no code of ours runs on them.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.disassociate_ucontext` says: only for devices
    /// made by [`NewDevice`], with a live ucontext.
    unsafe extern "C" fn disassociate_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// The device of a core object's `device` field.
    ///
    /// # Safety
    ///
    /// `ib` is a live device of ours.
    unsafe fn dev<'a>(ib: *mut bindings::ib_device) -> &'a Device<T> {
        // SAFETY: per the caller.
        unsafe { Device::<T>::from_raw(ib) }
    }

    /// `ib_device_ops.alloc_hw_port_stats`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_hw_port_stats` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_hw_port_stats(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let descs = T::PORT_COUNTERS;
        // SAFETY: `descs` is a 'static array of `rdma_stat_desc` (transparent wrappers); the
        // core frees the returned struct.
        unsafe {
            bindings::rdma_alloc_hw_stats_struct(
                descs.as_ptr().cast(),
                descs.len() as i32,
                bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as _,
            )
        }
    }

    /// `ib_device_ops.get_hw_stats`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_hw_stats` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_hw_stats(
        ib: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: kernel::ffi::c_int,
    ) -> kernel::ffi::c_int {
        // SAFETY: a live device and the stats struct from `alloc_hw_port_stats`, whose
        // `value` array has `num_counters` entries; the core holds its lock.
        unsafe {
            let n = (*stats).num_counters as usize;
            let values = (*stats).value.as_mut_slice(n);
            T::read_port_counters(Self::dev(ib), port, values);
            n as i32
        }
    }

    /// `ib_device_ops.alloc_pd`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_pd` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_pd(
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: the core hands a fresh PD allocation of `size_ib_pd` on one of our
            // devices, and the verb's udata.
            unsafe {
                let dev = Self::dev((*pd).device);
                // A plain value is its own initialiser.
                CoreObject::init(pd, T::alloc_pd(dev, &Udata::from_raw(udata))?)?;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.dealloc_pd`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_pd` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dealloc_pd(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys a PD we initialised; nothing uses it afterwards.
        unsafe {
            T::dealloc_pd(Self::dev((*pd).device), Pd::<T>::from_raw(pd));
            Pd::<T>::drop_in_place(pd);
        }
        0
    }

    /// `ib_device_ops.create_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_cq(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a fresh CQ allocation of `size_ib_cq` on one of our devices; `attr` is
            // valid; `attrs` is NULL for kernel CQs or the verb's attribute bundle.
            unsafe {
                let dev = Self::dev((*cq).device);
                let udata = Udata::from_raw(bindings::rxe_rs_helper_bundle_udata(attrs));
                let (init, capacity) = T::create_cq(dev, &*attr, &udata)?;
                CoreObject::init(cq, init)?;
                (*cq).cqe = capacity as i32;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.resize_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.resize_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn resize_cq(
        cq: *mut bindings::ib_cq,
        cqe: kernel::ffi::c_int,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            let cqe = u32::try_from(cqe).map_err(|_| EINVAL)?;
            // SAFETY: a live CQ of ours; `udata` is the verb's driver udata (NULL for kernel
            // callers). The core serialises nothing here: the CQ's own lock does.
            unsafe {
                let udata = Udata::from_raw(udata);
                let capacity = T::resize_cq(Cq::<T>::from_raw(cq), cqe, &udata)?;
                (*cq).cqe = capacity as i32;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.destroy_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn destroy_cq(
        cq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys a CQ we initialised; no QP uses it any more (usecnt).
        unsafe {
            T::destroy_cq(Self::dev((*cq).device), Cq::<T>::from_raw(cq));
            Cq::<T>::drop_in_place(cq);
        }
        0
    }

    /// `ib_device_ops.create_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_qp(
        qp: *mut bindings::ib_qp,
        init: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a fresh QP allocation of `size_ib_qp` whose `device` and `pd` the core set;
            // a valid init attr; the verb's udata.
            unsafe {
                let dev = Self::dev((*qp).device);
                let pd = Pd::<T>::from_raw((*qp).pd);
                let udata = Udata::from_raw(udata);
                // INVARIANT: the core checked both CQs and holds them while the QP lives;
                // the driver's `destroy_qp` stops its datapath for the QP before it returns.
                let links = QpLinks {
                    send: CqRef(NonNull::new((*init).send_cq).ok_or(EINVAL)?, PhantomData),
                    recv: CqRef(NonNull::new((*init).recv_cq).ok_or(EINVAL)?, PhantomData),
                    qp: QpRef(NonNull::new(qp).ok_or(EINVAL)?, PhantomData),
                };
                let (init_data, qpn) = T::create_qp(dev, pd, &mut *init, links, &udata)?;
                CoreObject::init(qp, init_data)?;
                (*qp).qp_num = qpn;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.modify_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.modify_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn modify_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: kernel::ffi::c_int,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live QP of ours and valid attributes.
            unsafe { T::modify_qp(Self::dev((*qp).device), Qp::<T>::from_raw(qp), &*attr, mask)? };
            Ok(0)
        })
    }

    /// `ib_device_ops.query_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.query_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn query_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: kernel::ffi::c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live QP of ours and valid out-structs.
            unsafe { T::query_qp(Qp::<T>::from_raw(qp), &mut *attr, &mut *init)? };
            Ok(0)
        })
    }

    /// `ib_device_ops.fill_res_qp_entry`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.fill_res_qp_entry` says: only for devices made
    /// by [`NewDevice`], with a live QP and the netlink message it is building.
    unsafe extern "C" fn fill_res_qp_entry(
        msg: *mut bindings::sk_buff,
        qp: *mut bindings::ib_qp,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // The attributes go in the driver's nest of the message (`rdma ... -dd` shows it).
            // SAFETY: the message the core is building.
            let nest = unsafe { bindings::rxe_rs_helper_driver_nest_start(msg) };
            if nest.is_null() {
                return Err(super::errno::emsgsize());
            }
            let mut out = DriverAttrs {
                msg,
                _msg: PhantomData,
            };
            // SAFETY: a live QP of ours.
            let filled = T::fill_res_qp_entry(unsafe { Qp::<T>::from_raw(qp) }, &mut out);
            // SAFETY: `nest` was opened in `msg` above and nothing else closed it.
            unsafe {
                if filled.is_ok() {
                    bindings::rxe_rs_helper_nest_end(msg, nest);
                } else {
                    bindings::rxe_rs_helper_nest_cancel(msg, nest);
                }
            }
            filled?;
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.destroy_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn destroy_qp(
        qp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys a QP we initialised. After `T::destroy_qp` took it out of
        // reach of new packets, `synchronize_rcu` waits for receive softirqs still using it
        // (and its `CqRef`s); then nothing uses it.
        unsafe {
            T::destroy_qp(Self::dev((*qp).device), Qp::<T>::from_raw(qp));
            bindings::synchronize_rcu();
            Qp::<T>::drop_in_place(qp);
        }
        0
    }

    /// `ib_device_ops.post_send`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.post_send` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn post_send(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad_wr: *mut *const bindings::ib_send_wr,
    ) -> kernel::ffi::c_int {
        // SAFETY: per this function's contract.
        unsafe { Self::doorbell(qp, wr, bad_wr, T::post_send) }
    }

    /// `ib_device_ops.post_recv`: the receive doorbell (see [`Driver::post_recv`]).
    ///
    /// # Safety
    ///
    /// As for `post_send`.
    unsafe extern "C" fn post_recv(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad_wr: *mut *const bindings::ib_recv_wr,
    ) -> kernel::ffi::c_int {
        // SAFETY: per this function's contract.
        unsafe { Self::doorbell(qp, wr, bad_wr, T::post_recv) }
    }

    /// Both doorbells: user space posted into a ring and uverbs delivers an empty list. Kernel
    /// ULPs' work requests are not supported.
    ///
    /// # Safety
    ///
    /// `qp` is a live QP of ours; `bad_wr` is a valid out-pointer.
    unsafe fn doorbell<W>(
        qp: *mut bindings::ib_qp,
        wr: *const W,
        bad_wr: *mut *const W,
        ring: fn(&Device<T>, &Qp<T>) -> Result,
    ) -> kernel::ffi::c_int {
        if !wr.is_null() {
            // SAFETY: the caller passes a valid out-pointer with a list.
            unsafe { *bad_wr = wr };
            return super::errno::eopnotsupp().to_errno();
        }
        from_result(|| {
            // SAFETY: a live QP of ours.
            unsafe { ring(Self::dev((*qp).device), Qp::<T>::from_raw(qp))? };
            Ok(0)
        })
    }

    /// Runs the driver's `register` and turns its MR (and key) into the `ib_mr` pointer, or
    /// ERR_PTR, the core expects. The `ib_mr` is allocated first: once the driver has
    /// registered (a key in its table, pages pinned), nothing can fail and leak that.
    fn mr_result(register: impl FnOnce() -> Result<(T::Mr, u32)>) -> *mut bindings::ib_mr {
        let result = KBox::<Mr<T>>::new_uninit(GFP_KERNEL_ACCOUNT)
            .map_err(Error::from)
            .and_then(|slot| register().map(|(data, key)| Self::new_mr(slot, data, key)));
        match result {
            Ok(mr) => mr,
            Err(e) => e.to_ptr(),
        }
    }

    /// Fills the driver-owned `ib_mr` around `data` in `slot` and its keys.
    fn new_mr(
        slot: KBox<core::mem::MaybeUninit<Mr<T>>>,
        data: T::Mr,
        key: u32,
    ) -> *mut bindings::ib_mr {
        let mr = KBox::write(
            slot,
            Mr::<T> {
                ib: Opaque::new(Default::default()),
                data,
            },
        );
        let raw = KBox::into_raw(mr).cast::<bindings::ib_mr>();
        // SAFETY: a fresh allocation; the core fills the rest after we return.
        unsafe {
            (*raw).lkey = key;
            (*raw).rkey = key;
        }
        raw
    }

    /// `ib_device_ops.reg_user_mr`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.reg_user_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn reg_user_mr(
        pd: *mut bindings::ib_pd,
        start: u64,
        len: u64,
        iova: u64,
        access: kernel::ffi::c_int,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        Self::mr_result(|| {
            // SAFETY: a live PD of ours and the verb's udata.
            unsafe {
                T::reg_user_mr(
                    Self::dev((*pd).device),
                    Pd::<T>::from_raw(pd),
                    start,
                    len,
                    iova,
                    access,
                    &Udata::from_raw(udata),
                )
            }
        })
    }

    /// `ib_device_ops.get_dma_mr`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_dma_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_dma_mr(
        pd: *mut bindings::ib_pd,
        access: kernel::ffi::c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: a live PD of ours.
        Self::mr_result(|| unsafe {
            T::get_dma_mr(Self::dev((*pd).device), Pd::<T>::from_raw(pd), access)
        })
    }

    /// `ib_device_ops.dereg_mr`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dereg_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dereg_mr(
        mr: *mut bindings::ib_mr,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: an MR made by `new_mr`, whose device the core set.
        if let Err(e) = unsafe { T::dereg_mr(Self::dev((*mr).device), Mr::<T>::from_raw(mr)) } {
            return e.to_errno();
        }
        // SAFETY: made by `KBox::into_raw` in `new_mr`; the core forgets it after this.
        drop(unsafe { KBox::from_raw(mr.cast::<Mr<T>>()) });
        0
    }

    /// `ib_device_ops.req_notify_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.req_notify_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn req_notify_cq(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> kernel::ffi::c_int {
        // SAFETY: a live CQ of ours.
        match T::req_notify_cq(unsafe { Cq::<T>::from_raw(cq) }, flags) {
            Ok(n) => n,
            Err(e) => e.to_errno(),
        }
    }

    /// `ib_device_ops.dealloc_driver`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_driver` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dealloc_driver(ib: *mut bindings::ib_device) {
        // SAFETY: the core's last callback for this device: drop `T` in place, exactly once
        // (the invariant of `Device` ends here; the core frees the memory afterwards).
        unsafe {
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*ib.cast::<Device<T>>()).data))
        };
    }
}
