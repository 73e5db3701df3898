// SPDX-License-Identifier: GPL-2.0
//! Local delivery: a datagram routed to an address of this host goes from the sender to the
//! receive path through a queue and a softirq (BH) work item, instead of through
//! `ip_local_out`, `lo`, and the IP and UDP input paths (rdma_rxe short-cuts such packets too).
//! Deferred, not called in place: the sender may hold locks the receive path takes, and the
//! receive path sends (ACKs, READ responses), which would recurse.
//!
//! Each CPU has a lane (a queue and its work item, run on that CPU while it is online, else on
//! another), and a datagram goes to the lane its steering key picks (the destination QP's
//! table index, modulo the lanes), as RSS spreads flows over a NIC's queues: the receive work
//! of a host's QPs is spread over its CPUs, and each QP's packets are received in order, by
//! one work item (the lane depends on the key alone, so CPUs coming and going do not reorder a
//! QP's packets).

use super::{bindings, errno::enobufs, rcu, skb::SkBuff, work};
use core::ptr::NonNull;
use kernel::{
    prelude::*,
    sync::Arc,
    types::Opaque,
    workqueue::{self, impl_has_work, Queue, RawWorkItem, Work, WorkItem},
};

/// Packets a lane holds at most: more are dropped, as a full backlog drops them on the way
/// through `lo` (`netdev_max_backlog`, 1000 by default, per CPU too); the sender's
/// retransmission covers them.
const MAX_QUEUED: u32 = 1000;
/// Packets one run of a lane's work item takes before it lets other softirq work go (it queues
/// itself again).
const BUDGET: usize = 64;

/// A device's queues of datagrams for this host's receive path, one per CPU.
pub(crate) struct LocalDelivery {
    /// Indexed by CPU number, for every possible CPU.
    lanes: KVec<Arc<Lane>>,
}

impl LocalDelivery {
    /// Empty queues whose datagrams go to `receive`.
    pub(crate) fn new(receive: fn(SkBuff)) -> Result<Arc<Self>> {
        // SAFETY: reads a variable set at boot.
        let cpus = unsafe { bindings::rxe_rs_helper_nr_cpu_ids() };
        let mut lanes = KVec::with_capacity(cpus as usize, GFP_KERNEL)?;
        for cpu in 0..cpus {
            lanes.push(Lane::new(receive, cpu)?, GFP_KERNEL)?;
        }
        Ok(Arc::new(Self { lanes }, GFP_KERNEL)?)
    }

    /// Queues `skb`, an IP datagram readied as if it came back through `lo`, for the receive
    /// path, in lane `key` (modulo the lanes). `ENOBUFS` (the skb freed) when that lane is full.
    ///
    /// # Safety
    ///
    /// `skb` is a valid skb whose ownership passes to this call.
    pub(crate) unsafe fn deliver(&self, skb: NonNull<bindings::sk_buff>, key: u32) -> Result {
        let lane = usize::try_from(key)
            .ok()
            .and_then(|key| self.lanes.get(key % self.lanes.len().max(1)));
        let Some(lane) = lane else {
            // SAFETY: the skb is ours (the caller's contract) and nobody else has it.
            drop(unsafe { SkBuff::from_raw(skb) });
            return Err(enobufs());
        };
        // SAFETY: as this function's contract.
        unsafe { lane.deliver(skb) }
    }

    /// Waits until every queue is empty and no run of a work item is left (process context,
    /// once the device's QPs are gone: a packet still queued finds no QP, so nothing received
    /// sends more; passes over all lanes until one finds them all empty).
    pub(crate) fn drain(&self) {
        loop {
            for lane in &self.lanes {
                lane.drain();
            }
            if self.lanes.iter().all(|lane| lane.len() == 0) {
                return;
            }
        }
    }
}

/// Preemption disabled while it lives.
struct PreemptionOff(());

impl PreemptionOff {
    fn new() -> Self {
        // SAFETY: balanced by `drop`.
        unsafe { bindings::rxe_rs_helper_preempt_disable() };
        Self(())
    }
}

impl Drop for PreemptionOff {
    fn drop(&mut self) {
        // SAFETY: disabled by `new`, on this CPU (preemption was off since).
        unsafe { bindings::rxe_rs_helper_preempt_enable() };
    }
}

/// One CPU's queue of datagrams for this host's receive path.
#[pin_data(PinnedDrop)]
struct Lane {
    #[pin]
    queue: Opaque<bindings::sk_buff_head>,
    /// The receive path, called in softirq context as a UDP encap_rcv callback is.
    receive: fn(SkBuff),
    /// Its number, the CPU its work item runs on while that is online.
    index: u32,
    #[pin]
    work: Work<Lane>,
}

impl_has_work! {
    impl HasWork<Self> for Lane { self.work }
}

impl Lane {
    fn new(receive: fn(SkBuff), index: u32) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                // SAFETY: `q` points at the queue head, which the helper initialises.
                queue <- Opaque::ffi_init(|q| unsafe {
                    bindings::rxe_rs_helper_skb_queue_head_init(q)
                }),
                receive,
                index,
                work <- kernel::new_work!("LocalDelivery::work"),
            }),
            GFP_KERNEL,
        )
    }

    /// Queues `skb`, and the work item on this lane's CPU (another if it is offline).
    ///
    /// # Safety
    ///
    /// `skb` is a valid skb whose ownership passes to this call.
    unsafe fn deliver(self: &Arc<Self>, skb: NonNull<bindings::sk_buff>) -> Result {
        let queue = self.queue.get();
        if self.len() >= MAX_QUEUED {
            // SAFETY: the skb is ours (the caller's contract) and nobody else has it.
            drop(unsafe { SkBuff::from_raw(skb) });
            return Err(enobufs());
        }
        // SAFETY: an initialised queue head (it lives as long as `self`); the queue takes the
        // skb, which is ours to give, under its own lock (IRQ-safe: any context).
        unsafe { bindings::skb_queue_tail(queue, skb.as_ptr()) };
        // The CPU picked cannot go offline before the work item is queued on it: taking a CPU
        // down needs every CPU to leave such sections (stop_machine).
        let _pinned = PreemptionOff::new();
        // SAFETY: preemption is off (above), as the helper asks.
        let cpu = unsafe { bindings::rxe_rs_helper_online_cpu_of_lane(self.index) } as i32;
        // SAFETY: `__enqueue` hands the closure a pointer to the lane's initialised
        // `work_struct`, kept alive by the `Arc` it holds while the work is queued (and given
        // back to us when it already was: that run will find this packet too). `system_bh_wq`
        // is set up at boot and never freed; `cpu` is online and stays so while preemption is
        // off, as queueing on a given CPU asks. (A work item runs on one CPU at a time: queued
        // while it runs elsewhere, it runs there again after.)
        let _ = unsafe {
            self.clone()
                .__enqueue(move |work| bindings::queue_work_on(cpu, bindings::system_bh_wq, work))
        };
        Ok(())
    }

    fn drain(&self) {
        loop {
            // Waits for the last queued run, which may have queued another (over budget).
            work::flush(&self.work);
            if self.len() == 0 {
                // The run that emptied the queue may still be delivering its last packet.
                work::flush(&self.work);
                return;
            }
        }
    }

    /// How many packets are queued (read without the lock: a bound, not a count to act on).
    fn len(&self) -> u32 {
        // SAFETY: an initialised queue head; a racy read of a u32 field is harmless here.
        unsafe { core::ptr::addr_of!((*self.queue.get()).qlen).read_volatile() }
    }

    /// The oldest queued packet.
    fn dequeue(&self) -> Option<SkBuff> {
        // SAFETY: an initialised queue head; `skb_dequeue` takes the queue's lock and hands us
        // the skb it unlinks.
        let skb = NonNull::new(unsafe { bindings::skb_dequeue(self.queue.get()) })?;
        // SAFETY: unlinked from the queue, the skb is ours alone.
        Some(unsafe { SkBuff::from_raw(skb) })
    }
}

/// The system's softirq workqueue: its items run with bottom halves disabled, in softirq
/// context, as received packets are.
fn bh_queue() -> &'static Queue {
    // SAFETY: `system_bh_wq` is set up at boot, before any module loads, and never freed.
    unsafe { Queue::from_raw(bindings::system_bh_wq) }
}

impl WorkItem for Lane {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        for _ in 0..BUDGET {
            let Some(skb) = this.dequeue() else {
                return;
            };
            // As in the IP input path, which calls encap_rcv inside an RCU read-side section.
            let _rcu = rcu::read_lock();
            (this.receive)(skb);
        }
        if this.len() > 0 {
            // Where it runs (a work item queued while it runs stays on that CPU's pool).
            let _ = workqueue::Queue::enqueue(bh_queue(), this);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for Lane {
    fn drop(self: Pin<&mut Self>) {
        // Whatever no run took (the device went away first): freed.
        while let Some(skb) = self.dequeue() {
            drop(skb);
        }
    }
}

// SAFETY: the queue head is only used through the kernel's skb queue functions, which lock it;
// `receive` is a plain function pointer.
unsafe impl Send for Lane {}
// SAFETY: as above.
unsafe impl Sync for Lane {}
