// SPDX-License-Identifier: GPL-2.0
//! Shared receive queues: one ring of receive WQEs that several QPs take from. The process
//! (or a kernel consumer, through `post_srq_recv`) produces into it as into a QP's RQ; the
//! receive softirqs of every QP attached consume from it, one WQE per message, under the SRQ's
//! lock. Armed with a limit, the SRQ tells its owner when fewer WQEs than that are left. A
//! resize moves the WQEs not taken yet to a new ring.

use crate::{
    kext::{
        ib::{SrqAttr, SrqAttrMask, SrqOf},
        lock::{new_spinlock_irq, SpinLockIrq},
        mmap::{RingIndex, SharedRing},
        object::Udata,
    },
    limits,
    uapi::{recv_wqe_bytes, CreateSrqResp, MmapInfo, ModifySrqCmd, RingGeometry, Sge},
    verbs::{
        mr::PdId,
        recv_wqe::{self, read_recv_wqe, RecvInProgress, RqError},
    },
};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// The ring and both sides' places in it.
struct Queue {
    /// Replaced by a resize (shared with it while it copies outside the lock).
    ring: Arc<SharedRing>,
    /// A kernel consumer's producer index (a process keeps its own in the ring).
    kernel_producer: u32,
    /// The next WQE to take (free-running; the shared copy is only ever written from this).
    consumer: u32,
    /// `IB_EVENT_SRQ_LIMIT_REACHED` is due when fewer WQEs than this are left; 0: not armed.
    limit: u32,
    /// The process wrote inconsistent indices: `IB_EVENT_SRQ_ERR` was raised (once).
    broken: bool,
}

/// A shared receive queue.
#[pin_data]
pub(crate) struct RxeSrq {
    /// The PD its WQEs' buffers are checked against (not the receiving QP's).
    pub(crate) pd: PdId,
    /// SGEs a WQE may carry (a resize keeps it, and with it the slot size).
    max_sge: u32,
    /// Created by a process (which produces into the ring itself), not a kernel consumer.
    user: bool,
    /// One resize at a time (the core lets `modify_srq` calls on one SRQ run together).
    #[pin]
    resizing: Mutex<()>,
    /// IRQ-safe: kernel consumers may post with interrupts off, and the receive softirqs of
    /// the attached QPs take WQEs under it.
    #[pin]
    queue: SpinLockIrq<Queue>,
}

impl RxeSrq {
    /// An SRQ in the PD `pd` for at least `attr.max_wr` WQEs of `attr.max_sge` SGEs, described
    /// to user space through `udata`; writes the real sizes back into `attr`. The limit given
    /// at creation is ignored, as the verbs say (`ibv_modify_srq` arms it).
    pub(crate) fn new(
        pd: PdId,
        attr: &mut SrqAttr,
        udata: &Udata<'_>,
    ) -> Result<impl PinInit<Self, Error>> {
        if attr.max_sge > limits::MAX_SRQ_SGE {
            return Err(EINVAL);
        }
        let max_sge = attr.max_sge.max(1);
        let ring = new_ring(attr.max_wr, max_sge, udata, |info| udata.write(info))?;
        attr.max_wr = ring.geometry().slots();
        attr.max_sge = max_sge;
        attr.srq_limit = 0;
        let ring = Arc::new(ring, GFP_KERNEL_ACCOUNT)?;
        let user = udata.ucontext().is_some();
        Ok(try_pin_init!(Self {
            pd,
            max_sge,
            user,
            resizing <- new_mutex!((), "rxe_rs_srq_resize"),
            queue <- new_spinlock_irq!(
                Queue { ring, kernel_producer: 0, consumer: 0, limit: 0, broken: false },
                "rxe_rs_srq"
            ),
        }))
    }

    /// `modify_srq`: arms the limit, resizes, or both. The limit may not exceed the size the
    /// SRQ has after the call (as asked, not rounded up).
    pub(crate) fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask, udata: &Udata<'_>) -> Result {
        if !mask.within(SrqAttrMask::LIMIT.union(SrqAttrMask::MAX_WR)) {
            return Err(EINVAL);
        }
        let new_limit = mask.contains(SrqAttrMask::LIMIT).then_some(attr.srq_limit);
        if !mask.contains(SrqAttrMask::MAX_WR) {
            let mut q = self.queue.lock();
            let limit = new_limit.unwrap_or(q.limit);
            if limit > q.ring.geometry().slots() {
                return Err(EINVAL);
            }
            q.limit = limit;
            return Ok(());
        }
        let _one = self.resizing.lock();
        self.resize(attr.max_wr, new_limit, udata)
    }

    /// Moves the SRQ to a new ring for at least `max_wr` WQEs, keeping the WQEs posted and not
    /// taken yet, and arms `new_limit` if given. A process learns the new ring's place at the
    /// address its command names. The WQEs are copied outside the lock (a whole ring of large
    /// WQEs is megabytes: not a copy to make with interrupts off); under it, only what a
    /// kernel consumer posted meanwhile. EINVAL, with nothing changed, if the WQEs posted or
    /// the limit do not fit, or the process broke the indices or posted meanwhile.
    fn resize(&self, max_wr: u32, new_limit: Option<u32>, udata: &Udata<'_>) -> Result {
        let geometry = ring_geometry(max_wr, self.max_sge)?;
        // What to copy, and refusals that need no allocation.
        let (old, first, end) = {
            let q = self.queue.lock();
            let producer = q.ring.load(RingIndex::Producer);
            let pending = q.ring.geometry().occupancy(producer, q.consumer);
            if q.broken
                || pending.map_or(true, |n| n > geometry.slots())
                || new_limit.unwrap_or(q.limit) > max_wr
            {
                return Err(EINVAL);
            }
            (q.ring.clone(), q.consumer, producer)
        };
        let resp_addr = match udata.ucontext() {
            Some(_) => Some(udata.read::<ModifySrqCmd>()?.resp_addr),
            None => None,
        };
        let new = new_ring(max_wr, self.max_sge, udata, |resp| {
            resp_addr.map_or(Ok(()), |addr| udata.write_to_user(addr, resp))
        })?;
        // Old index `i` goes to new index `i - first`: the WQEs taken meanwhile are copied
        // too, and stay behind the new consumer index.
        copy_slots(&old, first, end, first, &new)?;
        // Declared before the guard: the ring this swaps out (and any ring on an error path)
        // is freed after the lock is released (freeing a user ring removes its mmap entry).
        let mut new = Arc::new(new, GFP_KERNEL_ACCOUNT)?;
        let mut q = self.queue.lock();
        let producer = q.ring.load(RingIndex::Producer);
        let old_geometry = q.ring.geometry();
        let live = geometry.occupancy(producer.wrapping_sub(first), q.consumer.wrapping_sub(first));
        if q.broken
            || (self.user && producer != end)
            || old_geometry.occupancy(producer, first).is_none()
            || live.is_none()
            || new_limit.unwrap_or(q.limit) > max_wr
        {
            return Err(EINVAL);
        }
        // A kernel consumer's posts since the first copy (fewer than the old ring holds).
        copy_slots(&q.ring, end, producer, first, &new)?;
        new.store(RingIndex::Consumer, q.consumer.wrapping_sub(first));
        new.store(RingIndex::Producer, producer.wrapping_sub(first));
        q.kernel_producer = producer.wrapping_sub(first);
        q.consumer = q.consumer.wrapping_sub(first);
        core::mem::swap(&mut q.ring, &mut new);
        if let Some(limit) = new_limit {
            q.limit = limit;
        }
        Ok(())
    }

    /// `query_srq`: the sizes, and the limit while it is armed (0 once it fired).
    pub(crate) fn query(&self, attr: &mut SrqAttr) {
        let q = self.queue.lock();
        attr.max_wr = q.ring.geometry().slots();
        attr.max_sge = self.max_sge;
        attr.srq_limit = q.limit;
    }

    /// Posts a kernel consumer's receive WQE for `wr_id` with the SGE list `sges`. Interrupts
    /// may be off.
    pub(crate) fn post_kernel(
        &self,
        wr_id: u64,
        sges: impl Iterator<Item = Sge>,
        num_sge: usize,
    ) -> Result {
        if num_sge > self.max_sge as usize {
            return Err(EINVAL);
        }
        let mut q = self.queue.lock();
        let q = &mut *q;
        recv_wqe::post_kernel_recv(&q.ring, &mut q.kernel_producer, wr_id, sges)
    }
}

/// Copies the slots `[from, to)` of `old` to `new`, old index `i` to new index `i - base`.
/// The caller bounds `to - from` by the old ring's size.
fn copy_slots(old: &SharedRing, from: u32, to: u32, base: u32, new: &SharedRing) -> Result {
    let mut i = from;
    while i != to {
        old.copy_slot(i, new, i.wrapping_sub(base))?;
        i = i.wrapping_add(1);
    }
    Ok(())
}

/// The shape of a ring for at least `max_wr` WQEs of `max_sge` SGEs.
fn ring_geometry(max_wr: u32, max_sge: u32) -> Result<RingGeometry> {
    if max_wr == 0 || max_wr > limits::MAX_SRQ_WR {
        return Err(EINVAL);
    }
    Ok(RingGeometry::for_entries(max_wr, recv_wqe_bytes(max_sge)))
}

/// A ring for at least `max_wr` WQEs of `max_sge` SGEs; for a process, mappable by it and
/// described to it through `tell` (the creation's response, or a resize's user address).
fn new_ring(
    max_wr: u32,
    max_sge: u32,
    udata: &Udata<'_>,
    tell: impl FnOnce(&CreateSrqResp) -> Result,
) -> Result<SharedRing> {
    let geometry = ring_geometry(max_wr, max_sge)?;
    let Some(ctx) = udata.ucontext() else {
        return SharedRing::new_kernel(geometry);
    };
    let ring = SharedRing::new(&ctx, geometry)?;
    let (offset, size) = ring.mmap_info().ok_or(EINVAL)?;
    // (A resize's `ModifySrqResp` is the same struct.)
    tell(&CreateSrqResp {
        ring: MmapInfo { offset, size },
        log2_slots: geometry.log2_slots,
        slot_size: geometry.slot_size,
    })?;
    Ok(ring)
}

/// Takes the next WQE off `srq` into `recv`, for a QP attached to it: `Ok(false)` if none is
/// posted (RNR, or a dropped datagram). A malformed WQE is taken off all the same (and fails
/// the message that wanted it). Raises `IB_EVENT_SRQ_LIMIT_REACHED` when this leaves fewer WQEs
/// than the armed limit, and disarms it.
pub(crate) fn take(
    srq: &SrqOf<RxeSrq>,
    recv: &mut Option<RecvInProgress>,
) -> core::result::Result<bool, RqError> {
    let mut q = srq.queue.lock();
    let producer = q.ring.load(RingIndex::Producer);
    let posted = match q.ring.geometry().occupancy(producer, q.consumer) {
        None => {
            // Each QP that takes from it fails (as on a broken RQ); its owner hears once.
            let first = !core::mem::replace(&mut q.broken, true);
            drop(q);
            if first {
                srq.raise_error();
            }
            return Err(RqError::BrokenRing);
        }
        Some(0) => return Ok(false),
        Some(n) => n,
    };
    let read = read_recv_wqe(&q.ring, q.consumer, srq.max_sge, srq.pd, recv);
    if let Err(RqError::BrokenRing) = read {
        return read;
    }
    q.consumer = q.consumer.wrapping_add(1);
    q.ring.store(RingIndex::Consumer, q.consumer);
    // This take leaves `posted - 1`: fewer than the limit when `posted <= limit`.
    let fire = q.limit != 0 && posted <= q.limit;
    if fire {
        q.limit = 0;
    }
    drop(q);
    if fire {
        srq.raise_limit_reached();
    }
    read
}
