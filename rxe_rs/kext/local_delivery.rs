// SPDX-License-Identifier: GPL-2.0
//! Local delivery: a datagram routed to an address of this host goes from the sender to the
//! receive path through a queue and a softirq (BH) work item, instead of through
//! `ip_local_out`, `lo`, and the IP and UDP input paths (rdma_rxe short-cuts such packets too).
//! Deferred, not called in place: the sender may hold locks the receive path takes, and the
//! receive path sends (ACKs, READ responses), which would recurse.

use super::{bindings, errno::enobufs, rcu, skb::SkBuff, work};
use core::ptr::NonNull;
use kernel::{
    prelude::*,
    sync::Arc,
    types::Opaque,
    workqueue::{self, impl_has_work, Queue, Work, WorkItem},
};

/// Packets the queue holds at most: more are dropped, as a full backlog drops them on the way
/// through `lo` (`netdev_max_backlog`, 1000 by default); the sender's retransmission covers them.
/// One queue per sending device (not per CPU, as `lo`'s backlog): all its QPs share the bound,
/// and its local traffic is received on one CPU at a time, in order.
const MAX_QUEUED: u32 = 1000;
/// Packets one run of the work item takes before it lets other softirq work go (it queues
/// itself again).
const BUDGET: usize = 64;

/// A queue of datagrams for this host's receive path.
#[pin_data(PinnedDrop)]
pub(crate) struct LocalDelivery {
    #[pin]
    queue: Opaque<bindings::sk_buff_head>,
    /// The receive path, called in softirq context as a UDP encap_rcv callback is.
    receive: fn(SkBuff),
    #[pin]
    work: Work<LocalDelivery>,
}

impl_has_work! {
    impl HasWork<Self> for LocalDelivery { self.work }
}

impl LocalDelivery {
    /// An empty queue whose datagrams go to `receive`.
    pub(crate) fn new(receive: fn(SkBuff)) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                // SAFETY: `q` points at the queue head, which the helper initialises.
                queue <- Opaque::ffi_init(|q| unsafe {
                    bindings::rxe_rs_helper_skb_queue_head_init(q)
                }),
                receive,
                work <- kernel::new_work!("LocalDelivery::work"),
            }),
            GFP_KERNEL,
        )
    }

    /// Queues `skb`, an IP datagram readied as if it came back through `lo`, for the receive
    /// path. `ENOBUFS` (the skb freed) when the queue is full.
    ///
    /// # Safety
    ///
    /// `skb` is a valid skb whose ownership passes to this call.
    pub(crate) unsafe fn deliver(self: &Arc<Self>, skb: NonNull<bindings::sk_buff>) -> Result {
        let queue = self.queue.get();
        if self.len() >= MAX_QUEUED {
            // SAFETY: the skb is ours (the caller's contract) and nobody else has it.
            drop(unsafe { SkBuff::from_raw(skb) });
            return Err(enobufs());
        }
        // SAFETY: an initialised queue head (it lives as long as `self`); the queue takes the
        // skb, which is ours to give, under its own lock (IRQ-safe: any context).
        unsafe { bindings::skb_queue_tail(queue, skb.as_ptr()) };
        // Already queued: that run will find this packet too.
        let _ = bh_queue().enqueue(self.clone());
        Ok(())
    }

    /// Waits until the queue is empty and no run of the work item is left (process context;
    /// nobody may queue meanwhile).
    pub(crate) fn drain(&self) {
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

impl WorkItem for LocalDelivery {
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
            let _ = workqueue::Queue::enqueue(bh_queue(), this);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for LocalDelivery {
    fn drop(self: Pin<&mut Self>) {
        // Whatever no run took (the device went away first): freed.
        while let Some(skb) = self.dequeue() {
            drop(skb);
        }
    }
}

// SAFETY: the queue head is only used through the kernel's skb queue functions, which lock it;
// `receive` is a plain function pointer.
unsafe impl Send for LocalDelivery {}
// SAFETY: as above.
unsafe impl Sync for LocalDelivery {}
