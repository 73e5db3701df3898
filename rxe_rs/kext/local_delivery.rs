// SPDX-License-Identifier: GPL-2.0
//! Local delivery: a datagram routed to an address of this host goes from the sender to the
//! receive path through a queue and a work item, instead of through `ip_local_out`, `lo`, and
//! the IP and UDP input paths (rdma_rxe short-cuts such packets too). Deferred, not called in
//! place: the sender may hold locks the receive path takes, and the receive path sends (ACKs,
//! READ responses), which would recurse.
//!
//! Each CPU has a lane (a queue and its works, run on that CPU while it is online, else on
//! another), and a datagram goes to the lane its steering key picks (the destination QP's
//! table index, modulo the lanes), as RSS spreads flows over a NIC's queues: the receive work
//! of a host's QPs is spread over its CPUs, and each QP's packets are received in order on
//! one CPU.
//!
//! Who receives them, as NAPI and ksoftirqd share a NIC's: a softirq work item on the lane's
//! CPU, which runs at once, takes bursts (a round trip) and a stream that CPU sends itself
//! (its sender is what it waits for); once a softirq run leaves packets from another CPU
//! queued (a stream), a task on the lane's CPU, which the scheduler shares with that CPU's
//! other tasks, has the lane until its queue is empty. Softirq work taking streams on every
//! CPU left the host's tasks, its admin's commands and RCU's grace periods among them, next
//! to no CPU: a `rdma link delete` took 16 to 54 s during a loopback stream in a 2-vCPU
//! guest, 5 to 7 s this way. The two never receive at once (the task has the lane from the
//! softirq run that hands it over to its own last run, and each work runs once at a time),
//! so the queue's order is the receive order, also while CPUs come and go.

use super::{
    bindings,
    errno::enobufs,
    rcu,
    skb::SkBuff,
    work::{self, datapath_queue, Datapath},
};
use core::{
    marker::PhantomData,
    ptr::NonNull,
    sync::atomic::{fence, AtomicBool, AtomicU32, Ordering},
};
use kernel::{
    prelude::*,
    sync::Arc,
    types::Opaque,
    workqueue::{impl_has_work, Queue, RawWorkItem, Work, WorkItem},
};

/// Memory (the skbs' truesize) a lane holds at most: past it a packet is dropped, as a full
/// backlog drops on the way through `lo`, and the sender's retransmission covers it. Counted
/// in bytes, not packets: an RC QP's packets (READ responses included) stay within its send
/// window, at most 1.1 MiB of skbs at any path MTU (512 packets of 1 KiB, 128 of 4 KiB), and
/// this holds seven such windows; UC and UD, which have none, are bounded by this alone.
/// 1000 packets (`netdev_max_backlog`'s default) held under two windows at 1 KiB: two
/// streaming QPs on one lane overran it and each drop cost a go-back-N resend (1512 drops and
/// 75 resends in a 3 s loopback stream of 4 QPs, 2 vCPUs).
const MAX_LANE_BYTES: u32 = 8 << 20;
/// Lanes' worth of memory a device's lanes hold at most together: a host with many CPUs
/// does not hold that much for each device per CPU.
const MAX_LANES_FULL: u32 = 4;
/// Packets one run of a lane's work takes before it lets other work go (it queues itself
/// again).
const BUDGET: usize = 64;

/// Stamps `skb` with `qpn`, the QP that sent it. The stamp travels in the first bytes of the
/// skb's control buffer: between our transmit path and our receive path a locally delivered
/// skb passes through our lanes only, where nothing else writes it, so the receiver can trust
/// it ([`stamped_sender`]).
///
/// # Safety
///
/// `skb` is a valid skb that we own.
pub(crate) unsafe fn stamp_sender(skb: NonNull<bindings::sk_buff>, qpn: u32) {
    // SAFETY: a valid skb we own (the caller's contract); `cb` has 48 bytes, we write 4,
    // unaligned.
    unsafe {
        core::ptr::addr_of_mut!((*skb.as_ptr()).cb)
            .cast::<u32>()
            .write_unaligned(qpn)
    }
}

/// The QP number [`stamp_sender`] left in `skb`.
///
/// # Safety
///
/// `skb` is a valid skb that we own, delivered locally by us.
pub(crate) unsafe fn stamped_sender(skb: NonNull<bindings::sk_buff>) -> u32 {
    // SAFETY: a valid skb we own (the caller's contract); reads the 4 bytes stamped.
    unsafe {
        core::ptr::addr_of!((*skb.as_ptr()).cb)
            .cast::<u32>()
            .read_unaligned()
    }
}

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
        let queued = Arc::new(QueuedBytes(AtomicU32::new(0)), GFP_KERNEL)?;
        for cpu in 0..cpus {
            lanes.push(Lane::new(receive, cpu, queued.clone())?, GFP_KERNEL)?;
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
    /// once the device's QPs are gone: nothing queues more; passes over all lanes until one
    /// finds them all empty).
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

/// Preemption disabled while it lives (not `Send`: enabled again where it was disabled).
#[must_use]
struct PreemptionOff(PhantomData<*mut ()>);

impl PreemptionOff {
    fn new() -> Self {
        // SAFETY: balanced by `drop`.
        unsafe { bindings::rxe_rs_helper_preempt_disable() };
        Self(PhantomData)
    }
}

impl Drop for PreemptionOff {
    fn drop(&mut self) {
        // SAFETY: disabled by `new`, on this CPU (preemption was off since).
        unsafe { bindings::rxe_rs_helper_preempt_enable() };
    }
}

/// Bottom halves disabled on this CPU while it lives (not `Send`, as above).
#[must_use]
struct BottomHalvesOff(PhantomData<*mut ()>);

impl BottomHalvesOff {
    fn new() -> Self {
        // SAFETY: balanced by `drop`.
        unsafe { bindings::rxe_rs_helper_local_bh_disable() };
        Self(PhantomData)
    }
}

impl Drop for BottomHalvesOff {
    fn drop(&mut self) {
        // SAFETY: disabled by `new`, on this CPU (a task with bottom halves off stays on it).
        unsafe { bindings::rxe_rs_helper_local_bh_enable() };
    }
}

/// The truesize of the skbs queued in all of a device's lanes.
struct QueuedBytes(AtomicU32);

/// Adds `truesize` to `held` unless it already holds `max` or more (so it passes `max` by
/// at most one skb); whether it did.
fn reserve(held: &AtomicU32, truesize: u32, max: u32) -> bool {
    held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        if n < max {
            n.checked_add(truesize)
        } else {
            None
        }
    })
    .is_ok()
}

/// Takes `truesize` back from `held`.
fn release(held: &AtomicU32, truesize: u32) {
    let _ = held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        Some(n.saturating_sub(truesize))
    });
}

/// Which of a lane's works.
const SOFTIRQ: u64 = 0;
const TASK: u64 = 1;

/// One CPU's queue of datagrams for this host's receive path.
#[pin_data(PinnedDrop)]
struct Lane {
    #[pin]
    queue: Opaque<bindings::sk_buff_head>,
    /// The receive path, called with bottom halves off as a UDP encap_rcv callback is.
    receive: fn(SkBuff),
    /// Its number, the CPU its work runs on while that is online.
    index: u32,
    /// The truesize of the skbs in `queue`.
    bytes: AtomicU32,
    /// Shared by the device's lanes.
    queued: Arc<QueuedBytes>,
    /// The task has the lane (a stream from elsewhere): senders and the softirq work leave
    /// it alone. Set before the task is queued, cleared by the task's last run once it
    /// receives no more: one work receives at a time (each of the two runs once at a time).
    /// Relaxed: the workqueue orders a work item's runs (a run queued before the handoff
    /// runs after the run that handed over), the queue's lock orders the task's last
    /// packet before the next run's first, and the fences order the handing back.
    streaming: AtomicBool,
    /// Packets came from another CPU since the queue was last found empty.
    from_elsewhere: AtomicBool,
    #[pin]
    softirq: Work<Lane, SOFTIRQ>,
    #[pin]
    task: Work<Lane, TASK>,
}

impl_has_work! {
    impl HasWork<Self, SOFTIRQ> for Lane { self.softirq }
    impl HasWork<Self, TASK> for Lane { self.task }
}

impl Lane {
    fn new(receive: fn(SkBuff), index: u32, queued: Arc<QueuedBytes>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                // SAFETY: `q` points at the queue head, which the helper initialises.
                queue <- Opaque::ffi_init(|q| unsafe {
                    bindings::rxe_rs_helper_skb_queue_head_init(q)
                }),
                receive,
                index,
                bytes: AtomicU32::new(0),
                queued,
                streaming: AtomicBool::new(false),
                from_elsewhere: AtomicBool::new(false),
                softirq <- kernel::new_work!("LocalDelivery::softirq"),
                task <- kernel::new_work!("LocalDelivery::task"),
            }),
            GFP_KERNEL,
        )
    }

    /// Queues `skb`, and the softirq work on this lane's CPU (another if it is offline) unless
    /// the task has the lane.
    ///
    /// # Safety
    ///
    /// `skb` is a valid skb whose ownership passes to this call.
    unsafe fn deliver(self: &Arc<Self>, skb: NonNull<bindings::sk_buff>) -> Result {
        let queue = self.queue.get();
        // Released by `dequeue` with the same value: nothing changes an skb's truesize while it
        // is ours or queued.
        // SAFETY: a valid skb (the caller's contract), ours to read.
        let truesize = unsafe { (*skb.as_ptr()).truesize };
        let room = reserve(&self.bytes, truesize, MAX_LANE_BYTES)
            && (reserve(&self.queued.0, truesize, MAX_LANE_BYTES * MAX_LANES_FULL) || {
                release(&self.bytes, truesize);
                false
            });
        if !room {
            // SAFETY: the skb is ours (the caller's contract) and nobody else has it.
            drop(unsafe { SkBuff::from_raw(skb) });
            return Err(enobufs());
        }
        // SAFETY: an initialised queue head (it lives as long as `self`); the queue takes the
        // skb, which is ours to give, under its own lock (IRQ-safe: any context).
        unsafe { bindings::skb_queue_tail(queue, skb.as_ptr()) };
        // Pairs with the fence in the task's run: either the task, giving the lane back, sees
        // this packet, or we see the lane given back and queue the softirq work.
        fence(Ordering::SeqCst);
        if self.streaming.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.queue_softirq(true);
        Ok(())
    }

    /// Queues the softirq work on the lane's CPU (another if it is offline); for a packet
    /// just queued, `mark` notes whether it came from another CPU.
    fn queue_softirq(self: &Arc<Self>, mark: bool) {
        // The CPU picked cannot go offline before the work is queued on it: taking a CPU
        // down needs every CPU to leave such sections (stop_machine).
        let _pinned = PreemptionOff::new();
        // SAFETY: preemption is off (above), as both helpers ask.
        let (cpu, here) = unsafe {
            let cpu = bindings::rxe_rs_helper_online_cpu_of_lane(self.index);
            (cpu, cpu == bindings::rxe_rs_helper_this_cpu())
        };
        if mark && !here {
            self.from_elsewhere.store(true, Ordering::Relaxed);
        }
        let cpu = cpu as i32;
        // A work item still running is queued where it runs (it runs once at a time).
        // (False: queued already, the `Arc` comes back, and that run will find this packet.)
        // SAFETY: the closure gets the work's initialised `work_struct`, kept alive by the `Arc`
        // held while queued; `system_bh_wq` lives from boot on; `cpu` is online and stays so
        // while preemption is off, as queueing on a given CPU asks.
        let _ = unsafe {
            RawWorkItem::<SOFTIRQ>::__enqueue(self.clone(), move |work| {
                bindings::queue_work_on(cpu, bindings::system_bh_wq, work)
            })
        };
    }

    /// Whether this run is on the lane's own CPU (so that CPU is online, and the pool is its
    /// own). Called with bottom halves off: no migration.
    fn on_own_cpu(&self) -> bool {
        let _pinned = PreemptionOff::new();
        // SAFETY: preemption is off (above), as the helper asks.
        unsafe { bindings::rxe_rs_helper_this_cpu() == self.index }
    }

    /// Receives up to [`BUDGET`] packets (bottom halves off); whether some are left.
    fn receive_some(&self) -> bool {
        for _ in 0..BUDGET {
            let Some(skb) = self.dequeue() else {
                return false;
            };
            // As in the IP input path, which calls encap_rcv inside an RCU read-side section.
            let _rcu = rcu::read_lock();
            (self.receive)(skb);
        }
        self.len() > 0
    }

    fn drain(&self) {
        loop {
            // Waits for the last queued runs, which may have queued more (over budget).
            work::flush(&self.softirq);
            work::flush(&self.task);
            if self.len() == 0 {
                // A run that emptied the queue may still be delivering its last packet.
                work::flush(&self.softirq);
                work::flush(&self.task);
                return;
            }
            // A run over budget queued another, which the flushes do not wait for: what is
            // left, its senders gone (as their destroy would have), is dropped here rather
            // than received.
            while let Some(skb) = self.dequeue() {
                drop(skb);
            }
        }
    }

    /// How many packets are queued, read without the lock (`READ_ONCE`): as of some moment
    /// since the call; the fences above order it where that matters.
    fn len(&self) -> u32 {
        // SAFETY: an initialised queue head, which lives as long as `self`.
        unsafe { bindings::rxe_rs_helper_skb_queue_len_lockless(self.queue.get()) }
    }

    /// The oldest queued packet.
    fn dequeue(&self) -> Option<SkBuff> {
        // SAFETY: an initialised queue head; `skb_dequeue` takes the queue's lock and hands us
        // the skb it unlinks.
        let skb = NonNull::new(unsafe { bindings::skb_dequeue(self.queue.get()) })?;
        // SAFETY: unlinked from the queue, the skb is ours alone to read.
        let truesize = unsafe { (*skb.as_ptr()).truesize };
        // What `deliver` added. Saturating: were a size ever to change while queued, a count
        // wrapped past zero would refuse every packet from then on.
        release(&self.bytes, truesize);
        release(&self.queued.0, truesize);
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

impl WorkItem<SOFTIRQ> for Lane {
    type Pointer = Arc<Self>;

    /// In softirq context: a burst, a stream this CPU sends (its sender waits for it here),
    /// or the start of a stream from elsewhere, which the task takes over.
    fn run(this: Arc<Self>) {
        // Queued before the task took the lane: the task has it now.
        if this.streaming.load(Ordering::Relaxed) {
            return;
        }
        if !this.receive_some() {
            this.from_elsewhere.store(false, Ordering::Relaxed);
            return;
        }
        // Away from the lane's own CPU (offline: this run may be the draining of a dead CPU's
        // softirq work, which must not queue itself there again), the task takes the rest.
        if this.from_elsewhere.swap(false, Ordering::Relaxed) || !this.on_own_cpu() {
            this.streaming.store(true, Ordering::Relaxed);
            // On this CPU (a per-CPU workqueue queues where it is called).
            let _ = datapath_queue(Datapath::Bound).enqueue::<Arc<Self>, TASK>(this);
        } else {
            // Again after other softirq work, here (a work item queued while it runs stays
            // on that CPU).
            let _ = bh_queue().enqueue::<Arc<Self>, SOFTIRQ>(this);
        }
    }
}

impl WorkItem<TASK> for Lane {
    type Pointer = Arc<Self>;

    /// In process context, a stream from elsewhere: a budget's worth at a time, again after
    /// whatever else waits for this CPU, until the queue is empty.
    fn run(this: Arc<Self>) {
        let left = {
            let _bh_off = BottomHalvesOff::new();
            this.receive_some()
        };
        if left {
            let _ = datapath_queue(Datapath::Bound).enqueue::<Arc<Self>, TASK>(this);
            return;
        }
        // The lane goes back to the softirq work, and this run receives no more. A packet
        // queued meanwhile (its sender saw `streaming` and queued nothing) is seen after the
        // fence, which pairs with the one in `deliver`: the softirq work takes it.
        this.streaming.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if this.len() > 0 {
            this.queue_softirq(false);
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

// SAFETY: the queue head is only used through the kernel's skb queue functions, which lock it
// (its length is read with `READ_ONCE`, as `skb_queue_len_lockless`), and the skbs it holds
// may be received or freed on any CPU; the counters and flags are atomic; `receive` is a plain
// function pointer.
unsafe impl Send for Lane {}
// SAFETY: as above.
unsafe impl Sync for Lane {}
