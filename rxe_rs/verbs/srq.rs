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
use kernel::prelude::*;

/// The ring and both sides' places in it.
struct Queue {
    /// Replaced by a resize.
    ring: SharedRing,
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
        Ok(try_pin_init!(Self {
            pd,
            max_sge,
            queue <- new_spinlock_irq!(
                Queue { ring, kernel_producer: 0, consumer: 0, limit: 0, broken: false },
                "rxe_rs_srq"
            ),
        }))
    }

    /// `modify_srq`: arms the limit, resizes, or both. A resize keeps the WQEs not taken yet
    /// (EINVAL if the new ring cannot hold them, or the limit it would keep); a process gets
    /// the new ring's place at the address its command names.
    pub(crate) fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask, udata: &Udata<'_>) -> Result {
        if !mask.within(SrqAttrMask::LIMIT.union(SrqAttrMask::MAX_WR)) {
            return Err(EINVAL);
        }
        // The new ring, if a resize asks for one; after the swap, the old one.
        let mut replacement = None;
        if mask.contains(SrqAttrMask::MAX_WR) {
            let resp_addr = match udata.ucontext() {
                Some(_) => match udata.read::<ModifySrqCmd>()?.resp_addr {
                    0 => return Err(EINVAL),
                    addr => Some(addr),
                },
                None => None,
            };
            replacement = Some(new_ring(attr.max_wr, self.max_sge, udata, |resp| {
                resp_addr.map_or(Ok(()), |addr| udata.write_to_user(addr, resp))
            })?);
        }
        // `replacement` is declared before the guard, so whichever ring is dropped goes after
        // the lock is released (freeing a user ring removes its mmap entry: not under a spinlock).
        let mut q = self.queue.lock();
        let slots = replacement
            .as_ref()
            .map_or(q.ring.geometry().slots(), |r| r.geometry().slots());
        let limit = if mask.contains(SrqAttrMask::LIMIT) {
            attr.srq_limit
        } else {
            q.limit
        };
        if limit > slots {
            return Err(EINVAL);
        }
        if let Some(ring) = replacement.as_mut() {
            q.move_to(ring)?;
            core::mem::swap(&mut q.ring, ring);
        }
        q.limit = limit;
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

impl Queue {
    /// Copies the WQEs posted and not taken yet to the start of `to` (empty, as new, with the
    /// same slot size) and makes this queue's places fit it. EINVAL if they do not fit, or if
    /// the process broke the indices; then nothing changed.
    fn move_to(&mut self, to: &SharedRing) -> Result {
        let producer = self.ring.load(RingIndex::Producer);
        let pending = self
            .ring
            .geometry()
            .occupancy(producer, self.consumer)
            .ok_or(EINVAL)?;
        if self.broken || pending > to.geometry().slots() {
            return Err(EINVAL);
        }
        for i in 0..pending {
            self.ring.copy_slot(self.consumer.wrapping_add(i), to, i)?;
        }
        // The new ring's consumer index is 0 (fresh, zeroed memory).
        to.store(RingIndex::Producer, pending);
        self.kernel_producer = pending;
        self.consumer = 0;
        Ok(())
    }
}

/// A ring for at least `max_wr` WQEs of `max_sge` SGEs; for a process, mappable by it and
/// described to it through `tell` (the creation's response, or a resize's user address).
fn new_ring(
    max_wr: u32,
    max_sge: u32,
    udata: &Udata<'_>,
    tell: impl FnOnce(&CreateSrqResp) -> Result,
) -> Result<SharedRing> {
    if max_wr == 0 || max_wr > limits::MAX_SRQ_WR {
        return Err(EINVAL);
    }
    let geometry = RingGeometry::for_entries(max_wr, recv_wqe_bytes(max_sge));
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
