// SPDX-License-Identifier: GPL-2.0
//! The RDMA core (`ib_core`): the [`Driver`] trait a device implements, and by job: its
//! `ib_device` ([`device`]), the `ib_device_ops` vtable that calls it ([`adapter`]), the
//! core's verbs objects ([`objects`]), QP attributes ([`qp_attr`]) and typed enums and flags
//! ([`types`]).
//!
//! A driver describes its device with a [`Driver`] implementation whose value lives inside the
//! C allocation, right after the `ib_device` (as C drivers embed it). The RDMA core owns a
//! registered device: it is unregistered by `rdma link delete`, by [`Device::unregister_queued`]
//! or by [`unregister_all`], and the driver value is dropped in `dealloc_driver`, the last
//! callback the core makes.

mod adapter;
mod device;
mod objects;
mod qp_attr;
mod types;
mod wr;

pub(crate) use device::*;
pub(crate) use objects::*;
pub(crate) use qp_attr::*;
pub(crate) use types::{
    Access, AtomicCap, CorePortCaps, CqFlags, DeviceCaps, KernelCaps, MwType, PortCaps,
    PortPhysState, PortState, QpAttrMask, QpEvent, QpState, QpType, SrqAttrMask, MGMT_MAD_SIZE,
};
pub(crate) use wr::{
    KernelCqe, KernelDest, KernelRecvWr, KernelSendWr, KernelWcArray, NetworkType,
};

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
pub(crate) type Cq<T> = CqOf<<T as Driver>::Cq>;
/// A completion queue whose driver data is a `C` (for code below the driver's device type).
pub(crate) type CqOf<C> = CoreObject<bindings::ib_cq, C>;
/// An address handle of driver `T`.
pub(crate) type Ah<T> = CoreObject<bindings::ib_ah, <T as Driver>::Ah>;
/// Address handle attributes (a path): plain data, except the GRH's `sgid_attr` (see
/// [`read_roce_av`]).
pub(crate) type AhAttr = bindings::rdma_ah_attr;
/// What an `ibv_rereg_mr` changes; `None` keeps what the MR has.
pub(crate) struct MrChange<'a, T: Driver> {
    /// Another PD.
    pub(crate) pd: Option<&'a Pd<T>>,
    /// Other rights.
    pub(crate) access: Option<Access>,
    /// Other memory: `(start, len, iova)` of the calling process.
    pub(crate) translation: Option<(u64, u64, u64)>,
}

/// A memory window of driver `T`.
pub(crate) type Mw<T> = CoreObject<bindings::ib_mw, <T as Driver>::Mw>;
/// A queue pair of driver `T`.
pub(crate) type Qp<T> = CoreObject<bindings::ib_qp, <T as Driver>::Qp>;
/// QP creation attributes (the driver writes the real capacities back into `cap`).
pub(crate) type QpInitAttr = bindings::ib_qp_init_attr;
/// What a QP can hold (`struct ib_qp_cap`): plain data.
pub(crate) type QpCap = bindings::ib_qp_cap;
/// QP attributes of modify/query: plain data, except the GRH's `sgid_attr` (see [`read_roce_av`]).
pub(crate) type QpAttr = bindings::ib_qp_attr;
/// A shared receive queue of driver `T`.
pub(crate) type Srq<T> = SrqOf<<T as Driver>::Srq>;
/// A shared receive queue whose driver data is an `S` (for code below the driver's device type).
pub(crate) type SrqOf<S> = CoreObject<bindings::ib_srq, S>;
/// SRQ sizes and limit (`struct ib_srq_attr`): plain data.
pub(crate) type SrqAttr = bindings::ib_srq_attr;

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
    fn modify_qp(dev: &Device<Self>, qp: &Qp<Self>, attr: &QpAttr, mask: QpAttrMask) -> Result;
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

    /// Posts one send WR of a kernel consumer into the QP's SQ. Interrupts may be off (ib_mad
    /// posts under a spinlock_irqsave): nothing here may sleep or take a BH-only lock.
    fn post_send_kernel(dev: &Device<Self>, qp: &Qp<Self>, wr: &KernelSendWr<'_, Self>) -> Result;
    /// Posts one receive WR of a kernel consumer into the QP's RQ (same context rules).
    fn post_recv_kernel(dev: &Device<Self>, qp: &Qp<Self>, wr: &KernelRecvWr<'_>) -> Result;
    /// After a kernel consumer posted (sends if `send`, else receives): have the QP act on
    /// them, from a context where it may (same context rules).
    fn kick_kernel(dev: &Device<Self>, qp: &Qp<Self>, send: bool);
    /// Polls a kernel consumer's CQ into `out`; returns how many completions it filled.
    fn poll_cq(cq: &Cq<Self>, out: &mut KernelWcArray) -> usize;

    /// What a shared receive queue holds.
    type Srq: Send + Sync;
    /// Creates a basic SRQ in `pd` of at least `attr.max_wr` WQEs of `attr.max_sge` SGEs;
    /// writes the real sizes back into `attr`; `udata` carries the driver response for user
    /// SRQs. Process context.
    fn create_srq(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        attr: &mut SrqAttr,
        udata: &Udata<'_>,
    ) -> Result<impl PinInit<Self::Srq, Error>>;
    /// Applies the attributes of `mask` (arms the limit, or resizes).
    fn modify_srq(srq: &Srq<Self>, attr: &SrqAttr, mask: SrqAttrMask, udata: &Udata<'_>) -> Result;
    /// Reports the SRQ's sizes and armed limit.
    fn query_srq(srq: &Srq<Self>, attr: &mut SrqAttr) -> Result;
    /// Destroys an SRQ no QP uses any more (dropped right after).
    fn destroy_srq(dev: &Device<Self>, srq: &Srq<Self>);
    /// Posts one receive WR of a kernel consumer into the SRQ (same context rules as
    /// [`Driver::post_recv_kernel`]).
    fn post_srq_recv_kernel(srq: &Srq<Self>, wr: &KernelRecvWr<'_>) -> Result;

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
        access: Access,
        udata: &Udata<'_>,
    ) -> Result<(Self::Mr, u32)>;
    /// A DMA MR (all of kernel memory) for kernel users.
    fn get_dma_mr(dev: &Device<Self>, pd: &Pd<Self>, access: Access) -> Result<(Self::Mr, u32)>;
    /// A fast-registration MR that can map `max_pages` pages, for a kernel consumer
    /// (`ib_alloc_mr` with `IB_MR_TYPE_MEM_REG`); it is free (no access works) until an
    /// `IB_WR_REG_MR` makes it valid. Process context.
    fn alloc_mr(dev: &Device<Self>, pd: &Pd<Self>, max_pages: u32) -> Result<(Self::Mr, u32)>;
    /// `ib_map_mr_sg` begins: the MR's pages are replaced by the ones that follow, each
    /// `page_size` bytes.
    fn map_mr_begin(mr: &Mr<Self>, page_size: u32) -> Result;
    /// The next page of the mapping, at kernel virtual address `addr` (virtual DMA).
    fn map_mr_page(mr: &Mr<Self>, addr: u64) -> Result;
    /// The mapping is complete; its first byte is at `iova`.
    fn map_mr_end(mr: &Mr<Self>, iova: u64);
    /// Changes a user MR in place (`ibv_rereg_mr`), keeping its keys; the core then updates
    /// its own view (PD, iova, length).
    fn rereg_user_mr(dev: &Device<Self>, mr: &Mr<Self>, change: &MrChange<'_, Self>) -> Result;
    /// Deregisters an MR (dropped right after).
    fn dereg_mr(dev: &Device<Self>, mr: &Mr<Self>) -> Result;

    /// What a memory window holds.
    type Mw: Send + Sync;
    /// Allocates a memory window of `kind` in `pd` (`ibv_alloc_mw`: the core has no kernel
    /// API for windows); returns it and its R_Key. Process context.
    fn alloc_mw(dev: &Device<Self>, pd: &Pd<Self>, kind: MwType) -> Result<(Self::Mw, u32)>;
    /// Deallocates a memory window (dropped right after). Process context.
    fn dealloc_mw(dev: &Device<Self>, mw: &Mw<Self>);

    /// What an address handle holds.
    type Ah: Send + Sync;
    /// Creates an address handle in `pd` for the path `attr` of a user process (`udata`
    /// carries the driver response). Process context.
    fn create_user_ah(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        attr: &AhAttr,
        udata: &Udata<'_>,
    ) -> Result<Self::Ah>;
    /// Creates an address handle in `pd` for a kernel consumer; unless `sleepable`, in atomic
    /// context (ib_cm creates one per MAD under a spinlock).
    fn create_ah(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        attr: &AhAttr,
        sleepable: bool,
    ) -> Result<Self::Ah>;
    /// Destroys an address handle (dropped right after). May be called in atomic context.
    fn destroy_ah(dev: &Device<Self>, ah: &Ah<Self>);

    /// Attaches a UD QP to the multicast group `mgid` (the core checked both). Process context.
    fn attach_mcast(dev: &Device<Self>, qp: &Qp<Self>, mgid: [u8; 16]) -> Result;
    /// Detaches it again.
    fn detach_mcast(dev: &Device<Self>, qp: &Qp<Self>, mgid: [u8; 16]) -> Result;

    /// Arms the CQ for a completion event (`flags`: [`cq_notify`]); returns 1 if
    /// `REPORT_MISSED_EVENTS` was asked and completions are already waiting.
    fn req_notify_cq(cq: &Cq<Self>, flags: u32) -> Result<i32>;
}
