// SPDX-License-Identifier: GPL-2.0
//! Shared receive queues: one ring of receive WQEs that several QPs take from. The process
//! (or a kernel consumer, through `post_srq_recv`) produces into it as into a QP's RQ; the
//! receive softirqs of every QP attached consume from it, one WQE per message, under the SRQ's
//! lock. Armed with a limit, the SRQ tells its owner when fewer WQEs than that are left.

use crate::{
    kext::{
        errno::eopnotsupp,
        ib::{SrqAttr, SrqAttrMask, SrqOf},
        lock::{new_spinlock_bh, new_spinlock_irq, SpinLockBh, SpinLockIrq},
        mmap::{RingIndex, SharedRing},
        object::Udata,
    },
    limits,
    uapi::{recv_wqe_bytes, CreateSrqResp, MmapInfo, RingGeometry, Sge},
    verbs::{
        mr::PdId,
        recv_wqe::{self, read_recv_wqe, RecvInProgress, RqError},
    },
};
use kernel::prelude::*;

/// The consumers' side of the ring.
struct Consumer {
    /// The next WQE to take (free-running; the shared copy is only ever written from this).
    index: u32,
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
    /// The ring (user or kernel memory).
    ring: SharedRing,
    /// SGEs a WQE may carry.
    max_sge: u32,
    /// A kernel consumer's producer index; IRQ-safe, as a QP's.
    #[pin]
    post: SpinLockIrq<u32>,
    /// BH-safe: the receive softirqs of the attached QPs take WQEs under it.
    #[pin]
    consumer: SpinLockBh<Consumer>,
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
        if attr.max_wr == 0
            || attr.max_wr > limits::MAX_SRQ_WR
            || attr.max_sge > limits::MAX_SRQ_SGE
        {
            return Err(EINVAL);
        }
        let max_sge = attr.max_sge.max(1);
        let geometry = RingGeometry::for_entries(attr.max_wr, recv_wqe_bytes(max_sge));
        let ring = match udata.ucontext() {
            Some(ctx) => {
                let ring = SharedRing::new(&ctx, geometry)?;
                let (offset, size) = ring.mmap_info().ok_or(EINVAL)?;
                udata.write(&CreateSrqResp {
                    ring: MmapInfo { offset, size },
                    log2_slots: geometry.log2_slots,
                    slot_size: geometry.slot_size,
                })?;
                ring
            }
            None => SharedRing::new_kernel(geometry)?,
        };
        attr.max_wr = geometry.slots();
        attr.max_sge = max_sge;
        attr.srq_limit = 0;
        Ok(try_pin_init!(Self {
            pd,
            ring,
            max_sge,
            post <- new_spinlock_irq!(0, "rxe_rs_srq_post"),
            consumer <- new_spinlock_bh!(Consumer { index: 0, limit: 0, broken: false }, "rxe_rs_srq"),
        }))
    }

    /// `modify_srq`: arms the limit. A resize is not offered (`IB_DEVICE_SRQ_RESIZE` is not
    /// advertised).
    pub(crate) fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result {
        if mask.contains(SrqAttrMask::MAX_WR) {
            return Err(eopnotsupp());
        }
        if !mask.within(SrqAttrMask::LIMIT) {
            return Err(EINVAL);
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            if attr.srq_limit > self.ring.geometry().slots() {
                return Err(EINVAL);
            }
            self.consumer.lock().limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `query_srq`: the sizes, and the limit while it is armed (0 once it fired).
    pub(crate) fn query(&self, attr: &mut SrqAttr) {
        attr.max_wr = self.ring.geometry().slots();
        attr.max_sge = self.max_sge;
        attr.srq_limit = self.consumer.lock().limit;
    }

    /// Posts a kernel consumer's receive WQE for `wr_id` with the SGE list `sges`. Interrupts
    /// may be off: only the producer lock is taken.
    pub(crate) fn post_kernel(
        &self,
        wr_id: u64,
        sges: impl Iterator<Item = Sge>,
        num_sge: usize,
    ) -> Result {
        if num_sge > self.max_sge as usize {
            return Err(EINVAL);
        }
        let mut producer = self.post.lock();
        recv_wqe::post_kernel_recv(&self.ring, &mut producer, wr_id, sges)
    }
}

/// Takes the next WQE off `srq` into `recv`, for a QP attached to it: `Ok(false)` if none is
/// posted (RNR, or a dropped datagram). A malformed WQE is taken off all the same (and fails
/// the message that wanted it). Raises `IB_EVENT_SRQ_LIMIT_REACHED` when this leaves fewer WQEs
/// than the armed limit, and disarms it.
pub(crate) fn take(
    srq: &SrqOf<RxeSrq>,
    recv: &mut Option<RecvInProgress>,
) -> core::result::Result<bool, RqError> {
    let mut c = srq.consumer.lock();
    let producer = srq.ring.load(RingIndex::Producer);
    let posted = match srq.ring.geometry().occupancy(producer, c.index) {
        None => {
            // Each QP that takes from it fails (as on a broken RQ); its owner hears once.
            let first = !core::mem::replace(&mut c.broken, true);
            drop(c);
            if first {
                srq.raise_error();
            }
            return Err(RqError::BrokenRing);
        }
        Some(0) => return Ok(false),
        Some(n) => n,
    };
    let read = read_recv_wqe(&srq.ring, c.index, srq.max_sge, srq.pd, recv);
    if let Err(RqError::BrokenRing) = read {
        return read;
    }
    c.index = c.index.wrapping_add(1);
    srq.ring.store(RingIndex::Consumer, c.index);
    // This take leaves `posted - 1`: fewer than the limit when `posted <= limit`.
    let fire = c.limit != 0 && posted <= c.limit;
    if fire {
        c.limit = 0;
    }
    drop(c);
    if fire {
        srq.raise_limit_reached();
    }
    read
}
