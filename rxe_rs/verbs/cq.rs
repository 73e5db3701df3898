// SPDX-License-Identifier: GPL-2.0
//! Completion queues: a ring the kernel produces into and the process polls without a syscall;
//! for a kernel consumer, a ring in kernel memory that `poll_cq` reads.

use crate::kext::lock::{new_spinlock_irq, SpinLockIrq};
use crate::{
    kext::{
        errno::eopnotsupp,
        ib::{cq_notify, CqOf, KernelCqe, KernelWcArray, NetworkType},
        mmap::{RingIndex, SharedRing},
        object::Udata,
    },
    limits,
    uapi::{CqSlot, Cqe, CreateCqResp, MmapInfo, RingGeometry},
};
use kernel::{prelude::*, time::Ktime};

/// The ring and the kernel's (producer) side of it.
struct Producer {
    /// Replaced by `resize`.
    ring: SharedRing,
    /// Next slot to fill (free-running; the shared copy is only ever written from this).
    index: u32,
    /// Armed by `req_notify_cq`: 0, or `NEXT_COMP` / `SOLICITED`.
    armed: u32,
    /// `IB_EVENT_CQ_ERR` was raised and no completion fitted since: a flush of thousands of
    /// WQEs into a full CQ raises one event, not thousands.
    overflowed: bool,
}

/// Where a completion comes from, for a kernel consumer's `ib_wc`.
#[derive(Clone, Copy)]
pub(crate) struct CqeSource {
    /// The QP (`QpRef::for_completion`).
    pub(crate) qp: u64,
    /// A datagram's IP version (its GRH), or none.
    pub(crate) network: NetworkType,
}

/// A completion queue.
#[pin_data]
pub(crate) struct RxeCq {
    /// A kernel consumer's: its ring holds [`KernelCqe`]s, polled through `poll_cq`.
    kernel: bool,
    /// A user CQ whose slots carry the time of each completion (`CqSlot::completed_ns`).
    timestamped: bool,
    /// IRQ-safe, as rdma_rxe's and siw's: the receive softirq posts completions, and kernel
    /// consumers poll and arm with interrupts off (ib_srp calls `ib_process_cq_direct` under
    /// `spin_lock_irq`), maybe under a lock an interrupt handler takes.
    #[pin]
    producer: SpinLockIrq<Producer>,
}

impl RxeCq {
    /// A CQ for at least `cqe` completions, described to user space through `udata`, with
    /// completion timestamps if `timestamped`. Returns its initialiser and its real capacity.
    pub(crate) fn new(
        cqe: u32,
        udata: &Udata<'_>,
        timestamped: bool,
    ) -> Result<(impl PinInit<Self, Error>, u32)> {
        let kernel = udata.ucontext().is_none();
        if kernel && timestamped {
            return Err(eopnotsupp());
        }
        let ring = if kernel {
            if cqe == 0 || cqe > limits::MAX_CQE {
                return Err(EINVAL);
            }
            SharedRing::new_kernel(RingGeometry::for_entries(
                cqe,
                core::mem::size_of::<KernelCqe>(),
            ))?
        } else {
            new_ring(cqe, udata)?
        };
        let capacity = ring.geometry().slots();
        let init = try_pin_init!(Self {
            kernel,
            timestamped,
            producer <- new_spinlock_irq!(Producer { ring, index: 0, armed: 0, overflowed: false }, "rxe_rs_cq"),
        });
        Ok((init, capacity))
    }

    /// Moves the CQ to a new ring for at least `cqe` completions, described to user space
    /// through `udata`; completions not yet polled move along, in order. Returns the new
    /// capacity. EINVAL if more completions are waiting than the new ring holds.
    pub(crate) fn resize(&self, cqe: u32, udata: &Udata<'_>) -> Result<u32> {
        if self.kernel {
            return Err(eopnotsupp());
        }
        let mut ring = new_ring(cqe, udata)?;
        let geometry = ring.geometry();
        // `ring` is declared before the guard, so on every path the lock is released before
        // a ring is freed (freeing one removes its mmap entry, not a thing to do under a spinlock).
        let mut p = self.producer.lock();
        let consumer = p.ring.load(RingIndex::Consumer);
        let pending = p
            .ring
            .geometry()
            .occupancy(p.index, consumer)
            .ok_or(EINVAL)?;
        if pending > geometry.slots() {
            return Err(EINVAL);
        }
        for i in 0..pending {
            let slot: CqSlot = p.ring.read(consumer.wrapping_add(i), 0)?;
            ring.write(i, &slot)?;
        }
        // The new ring's consumer index is 0 (fresh, zeroed memory).
        ring.store(RingIndex::Producer, pending);
        core::mem::swap(&mut p.ring, &mut ring);
        p.index = pending;
        drop(p);
        Ok(geometry.slots())
    }

    /// Posts a completion and wakes the consumer if it asked to be. A full ring (or one whose
    /// consumer index the process corrupted) fails with EBUSY and raises `IB_EVENT_CQ_ERR`,
    /// once until a completion fits again.
    pub(crate) fn post(cq: &CqOf<RxeCq>, cqe: &Cqe, solicited: bool, source: CqeSource) -> Result {
        let wake = {
            let mut p = cq.producer.lock();
            let geometry = p.ring.geometry();
            let consumer = p.ring.load(RingIndex::Consumer);
            match geometry.occupancy(p.index, consumer) {
                Some(n) if n < geometry.slots() => {}
                _ => {
                    let first = !core::mem::replace(&mut p.overflowed, true);
                    drop(p);
                    if first {
                        cq.raise_cq_error();
                    }
                    return Err(EBUSY);
                }
            }
            p.overflowed = false;
            if cq.kernel {
                let kcqe = KernelCqe {
                    cqe: *cqe,
                    qp: source.qp,
                    network: source.network as u8,
                    reserved: [0; 7],
                };
                p.ring.write(p.index, &kcqe)?;
            } else if cq.timestamped {
                let slot = CqSlot {
                    cqe: *cqe,
                    // (CLOCK_MONOTONIC is never negative.)
                    completed_ns: Ktime::ktime_get().to_ns() as u64,
                    reserved: 0,
                };
                p.ring.write(p.index, &slot)?;
            } else {
                p.ring.write(p.index, cqe)?;
            }
            p.index = p.index.wrapping_add(1);
            p.ring.store(RingIndex::Producer, p.index);
            let wake =
                p.armed == cq_notify::NEXT_COMP || (p.armed == cq_notify::SOLICITED && solicited);
            if wake {
                p.armed = 0;
            }
            wake
        };
        if wake {
            cq.call_comp_handler();
        }
        Ok(())
    }

    /// A kernel consumer polls: fills `out` with the oldest completions; returns how many.
    pub(crate) fn poll(&self, out: &mut KernelWcArray) -> usize {
        if !self.kernel {
            return 0;
        }
        let p = self.producer.lock();
        let mut consumer = p.ring.load(RingIndex::Consumer);
        let mut n = 0;
        while n < out.len() && consumer != p.index {
            // Our own kernel memory: a read cannot fail but for a bug; stop there if it does.
            let Ok(kcqe) = p.ring.read::<KernelCqe>(consumer, 0) else {
                break;
            };
            out.set(n, &kcqe);
            consumer = consumer.wrapping_add(1);
            n += 1;
        }
        p.ring.store(RingIndex::Consumer, consumer);
        n
    }

    /// Arms the CQ; with `REPORT_MISSED_EVENTS`, returns 1 if completions are already waiting.
    pub(crate) fn req_notify(&self, flags: u32) -> i32 {
        let mut p = self.producer.lock();
        let kind = flags & cq_notify::SOLICITED_MASK;
        // NEXT_COMP wins over SOLICITED if both are asked for before an event.
        if p.armed != cq_notify::NEXT_COMP {
            p.armed = kind;
        }
        let pending = p.ring.load(RingIndex::Consumer) != p.index;
        i32::from(flags & cq_notify::REPORT_MISSED_EVENTS != 0 && pending)
    }
}

/// A ring for at least `cqe` completions, described to user space through `udata` (the
/// create and resize responses are the same).
fn new_ring(cqe: u32, udata: &Udata<'_>) -> Result<SharedRing> {
    if cqe == 0 || cqe > limits::MAX_CQE {
        return Err(EINVAL);
    }
    let ctx = udata.ucontext().ok_or(EINVAL)?;
    let geometry = RingGeometry::for_entries(cqe, core::mem::size_of::<CqSlot>());
    let ring = SharedRing::new(&ctx, geometry)?;
    let (offset, size) = ring.mmap_info().ok_or(EINVAL)?;
    udata.write(&CreateCqResp {
        ring: MmapInfo { offset, size },
        log2_slots: geometry.log2_slots,
        slot_size: geometry.slot_size,
    })?;
    Ok(ring)
}
