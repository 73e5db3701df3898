// SPDX-License-Identifier: GPL-2.0
//! What the driver holds of the core's verbs objects: links from a QP to its CQs and to itself,
//! the core-side operations on MRs and CQs, access and notify flags, counter names, and the
//! attributes `rdma resource show` prints.

use super::*;

/// A reference from a QP to one of its CQs, whose driver data is a `C`.
///
/// # Invariants
///
/// Points to a live `CqOf<C>`: the core keeps a CQ alive while a QP uses it (its `usecnt`), and
/// the QP's users are the verbs on it, its timer and work item (which `destroy_qp` stops) and
/// the receive softirq (which it waits out with `synchronize_rcu`) before the QP, and with it
/// this reference, goes away.
pub(crate) struct CqRef<C>(NonNull<bindings::ib_cq>, PhantomData<C>);

// SAFETY: a CQ may be used from any context (its state has its own locks).
unsafe impl<C: Send + Sync> Send for CqRef<C> {}
// SAFETY: as above.
unsafe impl<C: Send + Sync> Sync for CqRef<C> {}

impl<C> CqRef<C> {
    /// A reference to the CQ at `cq`.
    ///
    /// # Safety
    ///
    /// `cq` is a live CQ of a driver whose CQ data is a `C`, and the caller keeps the reference
    /// within the CQ's life as the type invariant says.
    pub(super) unsafe fn new(cq: *mut bindings::ib_cq) -> Result<Self> {
        // INVARIANT: the caller's promise.
        Ok(Self(NonNull::new(cq).ok_or(EINVAL)?, PhantomData))
    }

    /// The CQ.
    pub(crate) fn get(&self) -> &CqOf<C> {
        // SAFETY: live for as long as this reference (type invariant).
        unsafe { CqOf::<C>::from_raw(self.0.as_ptr()) }
    }
}

/// A reference from a QP to the shared receive queue it takes receive WQEs from, whose driver
/// data is an `S`.
///
/// # Invariants
///
/// Points to a live `SrqOf<S>`: the core keeps an SRQ alive while a QP uses it (its `usecnt`:
/// `destroy_srq` fails with EBUSY until the last such QP is destroyed), and the QP's users stop
/// before the QP goes, as for [`CqRef`].
pub(crate) struct SrqRef<S>(NonNull<bindings::ib_srq>, PhantomData<S>);

// SAFETY: an SRQ may be used from any context (its state has its own locks).
unsafe impl<S: Send + Sync> Send for SrqRef<S> {}
// SAFETY: as above.
unsafe impl<S: Send + Sync> Sync for SrqRef<S> {}

impl<S> SrqRef<S> {
    /// A reference to the SRQ at `srq`, or none for NULL.
    ///
    /// # Safety
    ///
    /// `srq` is NULL or a live SRQ of a driver whose SRQ data is an `S`, and the caller keeps
    /// the reference within the SRQ's life as the type invariant says.
    pub(super) unsafe fn new(srq: *mut bindings::ib_srq) -> Option<Self> {
        // INVARIANT: the caller's promise.
        NonNull::new(srq).map(|srq| Self(srq, PhantomData))
    }

    /// The SRQ.
    pub(crate) fn get(&self) -> &SrqOf<S> {
        // SAFETY: live for as long as this reference (type invariant).
        unsafe { SrqOf::<S>::from_raw(self.0.as_ptr()) }
    }
}

impl<T> CoreObject<bindings::ib_srq, T> {
    /// Tells the SRQ's owner that fewer WQEs than the armed limit are left
    /// (`IB_EVENT_SRQ_LIMIT_REACHED`).
    pub(crate) fn raise_limit_reached(&self) {
        self.raise(bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED);
    }

    /// Tells the SRQ's owner that the SRQ is broken (`IB_EVENT_SRQ_ERR`).
    pub(crate) fn raise_error(&self) {
        self.raise(bindings::ib_event_type_IB_EVENT_SRQ_ERR);
    }

    fn raise(&self, event_type: bindings::ib_event_type) {
        let srq = self.raw();
        // SAFETY: a live SRQ with a valid device; the core set `event_handler` (possibly NULL)
        // and `srq_context` before the SRQ was used.
        unsafe {
            if let Some(handler) = (*srq).event_handler {
                let mut event = bindings::ib_event {
                    device: (*srq).device,
                    event: event_type,
                    ..Default::default()
                };
                event.element.srq = srq;
                handler(&mut event, (*srq).srq_context);
            }
        }
    }
}

/// The core's side of one of our QPs, for reporting asynchronous events to its owner.
///
/// # Invariants
///
/// Points to an `ib_qp` of ours that is alive until the driver's `destroy_qp` returns; the
/// driver reports no event after that (it stops its datapath for the QP first).
pub(crate) struct QpRef(NonNull<bindings::ib_qp>);

// SAFETY: only used to call the core's event handler, which may run on any CPU.
unsafe impl Send for QpRef {}
// SAFETY: as above.
unsafe impl Sync for QpRef {}

impl QpRef {
    /// A reference to the QP at `qp`.
    ///
    /// # Safety
    ///
    /// `qp` is one of our QPs, being created; the reference is used as the type invariant says.
    pub(super) unsafe fn new(qp: *mut bindings::ib_qp) -> Result<Self> {
        // INVARIANT: the caller's promise.
        Ok(Self(NonNull::new(qp).ok_or(EINVAL)?))
    }

    /// The QP as a kernel completion names it (the core's pointer, as a number: handed back in
    /// `ib_wc.qp`, never followed by us).
    pub(crate) fn for_completion(&self) -> u64 {
        self.0.as_ptr() as u64
    }

    /// Reports `event` on the QP to its owner.
    pub(crate) fn dispatch_event(&self, event: QpEvent) {
        let event = event.raw();
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

/// What a new QP reaches through the core: its completion queues, and itself (for events). The
/// driver keeps them inside the QP.
pub(crate) struct QpLinks<T: Driver> {
    /// For send completions.
    pub(crate) send: CqRef<T::Cq>,
    /// For receive completions.
    pub(crate) recv: CqRef<T::Cq>,
    /// The QP itself, for its asynchronous events.
    pub(crate) qp: QpRef,
    /// The SRQ it receives from, if it has one instead of its own receive queue.
    pub(crate) srq: Option<SrqRef<T::Srq>>,
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
    pub(super) msg: *mut bindings::sk_buff,
    pub(super) _msg: PhantomData<&'a mut bindings::sk_buff>,
}

impl DriverAttrs<'_> {
    /// Adds the attribute `name` with `value`.
    pub(crate) fn put_u32(&mut self, name: &CStr, value: u32) -> Result {
        // SAFETY: `msg` is the message the RDMA core is building for this call; `name` is a
        // NUL-terminated string it copies.
        to_result(unsafe { bindings::rdma_nl_put_driver_u32(self.msg, name.as_char_ptr(), value) })
    }
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
