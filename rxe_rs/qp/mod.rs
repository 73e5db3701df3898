// SPDX-License-Identifier: GPL-2.0
//! Queue pairs (RC, UC and UD): creation with user-mapped send and receive rings, and the IB
//! state machine with the attributes each transition carries. Its engines, each a child module:
//! the [`requester`] sends, the [`completer`] turns responses into completions, the
//! [`responder`] executes what the peer asks; a UC QP receives through [`unreliable`], a UD QP
//! sends and receives through [`datagram`].

pub(crate) mod completer;
pub(crate) mod datagram;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod unreliable;

use crate::{
    counters::Counter,
    kext::{
        ib::{Access, CqRef, QpAttrMask, QpCap, QpEvent, QpRef, QpState, QpType, SrqRef},
        kmem,
        lock::{new_spinlock_bh, new_spinlock_irq, SpinLockBh, SpinLockIrq},
        timer::{Timer, TimerOwner},
        work,
    },
    proto::wire::qp_source_port,
    resources::Resources,
    uapi::{send_flags, send_opcode, SendWqe, Sge, WcStatus, RING_FLAG_FLUSH, RING_FLAG_SQ_POLLED},
    verbs::{cq::RxeCq, mr::PdId, recv_wqe, srq::RxeSrq},
};
use crate::{
    kext::{
        errno::eopnotsupp,
        ib::{self, QpAttr, QpInitAttr},
        mmap::{RingIndex, SharedRing},
        object::Udata,
        work::{datapath_queue, Datapath},
    },
    limits,
    proto::{av::AddressVector, doorbell, mtu::IbMtu, psn::Psn},
    uapi::{recv_wqe_bytes, send_wqe_bytes, CreateQpResp, MmapInfo, RingGeometry},
};
use completer::Completer;
use core::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use kernel::{
    c_str, new_work,
    prelude::*,
    sync::Arc,
    workqueue::{impl_has_work, Work, WorkItem},
};
use requester::{Requester, RunEnd, PACKETS_PER_RUN};
use responder::Responder;

/// The next [`QpInner::serial`] (64 bits: never wraps).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// Rights a QP may grant. LOCAL_WRITE means nothing for a QP, but applications (perftest) pass
/// it and rdma_rxe accepts it. ib_cm grants both FLUSH rights to every connected QP of a device
/// that offers either (a FLUSH for persistence also needs an MR on persistent memory: see
/// `responder::execute_flush`).
const QP_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::FLUSH_GLOBAL)
    .union(Access::FLUSH_PERSISTENT);

/// The attributes `modify_qp` sets.
#[derive(Clone, Copy)]
pub(crate) struct QpAttrs {
    pub(crate) state: QpState,
    pub(crate) path_mtu: IbMtu,
    pub(crate) dest_qpn: u32,
    pub(crate) sq_psn: Psn,
    pub(crate) rq_psn: Psn,
    pub(crate) access: Access,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) sgid_index: u8,
    /// UD: the Q_Key datagrams must carry to be received.
    pub(crate) qkey: u32,
    pub(crate) av: Option<AddressVector>,
    /// In SQD, messages already started are still in flight (`IB_EVENT_SQ_DRAINED` is due).
    pub(crate) sq_draining: bool,
}

/// Everything the QP's lock protects.
pub(crate) struct QpLocked {
    pub(crate) attrs: QpAttrs,
    pub(crate) req: Requester,
    pub(crate) comp: Completer,
    pub(crate) resp: Responder,
}

/// What a QP reaches outside itself: its device's datapath resources, its CQs, and the core's
/// side of itself (for events).
pub(crate) struct QpPeers {
    /// Its device's MRs, counters and netdev.
    pub(crate) res: Arc<Resources>,
    /// For send completions.
    pub(crate) send: CqRef<RxeCq>,
    /// For receive completions.
    pub(crate) recv: CqRef<RxeCq>,
    /// For its asynchronous events.
    pub(crate) qp: QpRef,
    /// Where its receive WQEs come from instead of its own RQ, if it was created with one.
    pub(crate) srq: Option<SrqRef<RxeSrq>>,
}

/// A queue pair as the verbs layer holds it; the QP itself is shared with the datapath, which
/// finds it by number in the device's QP table.
pub(crate) struct RxeQp {
    pub(crate) inner: Arc<QpInner>,
    /// Its index in the device's QP table (none for QP1, which is kept apart).
    pub(crate) index: Option<u32>,
}

/// The state of a queue pair.
#[pin_data]
pub(crate) struct QpInner {
    /// Retransmission and RNR timer (first, so that it is shut down before anything else goes).
    #[pin]
    timer: Timer<QpInner>,
    /// Sends the READ responses the responder owes (see `schedule_read_replies`).
    #[pin]
    read_work: Work<QpInner>,
    /// Acts on what a kernel consumer posted (see [`QpInner::kick`]).
    #[pin]
    doorbell_work: Work<QpInner, 1>,
    /// A kernel consumer's producer index of the SQ; IRQ-safe: ib_mad posts with interrupts
    /// off. (A process's QP has its producer index in the mapped ring instead.)
    #[pin]
    sq_post: SpinLockIrq<u32>,
    /// The same for the RQ.
    #[pin]
    rq_post: SpinLockIrq<u32>,
    /// UDP source port of its packets.
    pub(crate) sport: u16,
    /// Its number.
    pub(crate) qpn: u32,
    /// Names this QP for the type 2 memory windows bound to it: unlike its number, never
    /// given to another QP.
    pub(crate) serial: u64,
    /// Its transport service.
    pub(crate) qp_type: QpType,
    /// The PD it was created in.
    pub(crate) pd: PdId,
    /// Send queue (user produces WQEs, the kernel consumes).
    pub(crate) sq: SharedRing,
    /// Receive queue (user produces WQEs, the kernel consumes).
    pub(crate) rq: SharedRing,
    /// What creation granted (reported by query).
    pub(crate) caps: QpCap,
    /// Where packets go out, completions and events go, and MRs are found.
    pub(crate) peers: QpPeers,
    /// Every send WR completes with a CQE (`sq_sig_all`).
    pub(crate) sq_sig_all: bool,
    /// A completion found its CQ full (and was lost): the QP must enter the error state. Set
    /// where completions are posted, acted on where each path leaves the QP's lock.
    cq_overflowed: AtomicBool,
    /// BH-safe: the receive softirq and the timer run the protocol under it.
    #[pin]
    pub(crate) state: SpinLockBh<QpLocked>,
}

/// The monotonic clock the requester times round trips with (ns since boot).
pub(crate) fn now_ns() -> u64 {
    u64::try_from(kernel::time::Ktime::ktime_get().to_ns()).unwrap_or(0)
}

fn clamp_caps(cap: &mut QpCap) -> Result {
    if cap.max_send_wr > limits::MAX_QP_WR
        || cap.max_recv_wr > limits::MAX_QP_WR
        || cap.max_send_sge > limits::MAX_SGE
        || cap.max_recv_sge > limits::MAX_SGE
        || cap.max_inline_data > limits::MAX_INLINE_DATA
    {
        return Err(EINVAL);
    }
    cap.max_send_wr = cap.max_send_wr.max(1);
    cap.max_recv_wr = cap.max_recv_wr.max(1);
    cap.max_send_sge = cap.max_send_sge.max(1);
    cap.max_recv_sge = cap.max_recv_sge.max(1);
    Ok(())
}

impl QpInner {
    /// A QP in `pd` (with id `pd_id`) numbered `qpn`; writes the real capacities to `init`.
    pub(crate) fn new(
        qpn: u32,
        pd_id: PdId,
        init: &mut QpInitAttr,
        peers: QpPeers,
        udata: &Udata<'_>,
    ) -> Result<impl PinInit<Self, Error>> {
        let qp_type = init.qp_type().ok_or_else(eopnotsupp)?;
        if init.create_flags != 0 {
            return Err(eopnotsupp());
        }
        if init.send_cq.is_null() || init.recv_cq.is_null() {
            return Err(EINVAL);
        }
        let shared_rq = peers.srq.is_some();
        if shared_rq {
            // Its receive queue is the SRQ: what it asks for one of its own is ignored, as
            // rdma_rxe does.
            init.cap.max_recv_wr = 0;
            init.cap.max_recv_sge = 0;
        }
        clamp_caps(&mut init.cap)?;
        let sq_geometry = RingGeometry::for_entries(
            init.cap.max_send_wr,
            send_wqe_bytes(init.cap.max_send_sge, init.cap.max_inline_data),
        );
        let rq_geometry =
            RingGeometry::for_entries(init.cap.max_recv_wr, recv_wqe_bytes(init.cap.max_recv_sge));
        // Report what the rings really hold (free-running indices: every slot is usable).
        init.cap.max_send_wr = sq_geometry.slots();
        init.cap.max_recv_wr = rq_geometry.slots();
        if shared_rq {
            init.cap.max_recv_wr = 0;
            init.cap.max_recv_sge = 0;
        }
        let (sq, rq) = match udata.ucontext() {
            Some(ctx) => {
                let sq = SharedRing::new(&ctx, sq_geometry)?;
                let sq_map = sq.mmap_info().ok_or(EINVAL)?;
                // With an SRQ, a QP's own RQ (one slot, in kernel memory) is never posted to:
                // the process is not given it.
                let (rq, rq_map, rq_geometry) = if shared_rq {
                    let none = RingGeometry {
                        log2_slots: 0,
                        slot_size: 0,
                    };
                    (SharedRing::new_kernel(rq_geometry)?, (0, 0), none)
                } else {
                    let rq = SharedRing::new(&ctx, rq_geometry)?;
                    let rq_map = rq.mmap_info().ok_or(EINVAL)?;
                    (rq, rq_map, rq_geometry)
                };
                udata.write(&CreateQpResp {
                    sq: MmapInfo {
                        offset: sq_map.0,
                        size: sq_map.1,
                    },
                    rq: MmapInfo {
                        offset: rq_map.0,
                        size: rq_map.1,
                    },
                    sq_log2_slots: sq_geometry.log2_slots,
                    sq_slot_size: sq_geometry.slot_size,
                    rq_log2_slots: rq_geometry.log2_slots,
                    rq_slot_size: rq_geometry.slot_size,
                })?;
                (sq, rq)
            }
            // A kernel consumer: the same rings in kernel memory, written by `post_kernel_*`.
            None => (
                SharedRing::new_kernel(sq_geometry)?,
                SharedRing::new_kernel(rq_geometry)?,
            ),
        };
        let attrs = QpAttrs {
            state: QpState::Reset,
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: 0,
            sq_psn: Psn::new(0),
            rq_psn: Psn::new(0),
            access: Access::NONE,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            min_rnr_timer: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            sgid_index: 0,
            qkey: 0,
            av: None,
            sq_draining: false,
        };
        let req = Requester::new(
            sq_geometry.slots(),
            init.cap.max_send_sge,
            init.cap.max_inline_data,
        )?;
        let qp_state = QpLocked {
            attrs,
            req,
            comp: Completer::default(),
            resp: Responder::new()?,
        };
        let caps = init.cap;
        let sq_sig_all = init.signals_all();
        Ok(try_pin_init!(Self {
            timer <- Timer::new(),
            read_work <- new_work!("QpInner::read_work"),
            doorbell_work <- new_work!("QpInner::doorbell_work"),
            sq_post <- new_spinlock_irq!(0, "rxe_rs_qp_sq_post"),
            rq_post <- new_spinlock_irq!(0, "rxe_rs_qp_rq_post"),
            sport: qp_source_port(qpn),
            qpn,
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            qp_type,
            pd: pd_id,
            sq,
            rq,
            caps,
            peers,
            sq_sig_all,
            cq_overflowed: AtomicBool::new(false),
            state <- new_spinlock_bh!(qp_state, "rxe_rs_qp"),
        }? Error))
    }

    /// `modify_qp`: validates everything first, then applies it all under the lock.
    pub(crate) fn modify(self: &Arc<Self>, attr: &QpAttr, m: QpAttrMask) -> Result {
        // Reply slots for a new `max_dest_rd_atomic`, allocated before the lock is taken (a
        // value out of range is refused below).
        let reply_slots = if m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC)
            && u32::from(attr.max_dest_rd_atomic) <= limits::MAX_RD_ATOMIC
        {
            Some(responder::ReplySlots::new(attr.max_dest_rd_atomic)?)
        } else {
            None
        };
        let mut guard = self.state.lock();
        let s = &mut *guard;
        let a = &mut s.attrs;
        let cur = if m.contains(QpAttrMask::CUR_STATE) {
            QpState::from_raw(attr.cur_qp_state).ok_or(EINVAL)?
        } else {
            a.state
        };
        let next = if m.contains(QpAttrMask::STATE) {
            QpState::from_raw(attr.qp_state).ok_or(EINVAL)?
        } else {
            cur
        };
        if cur != a.state || !ib::transition_ok(self.qp_type, cur, next, m) {
            return Err(EINVAL);
        }
        // Leaving SQD waits for the drain, except into the error state.
        if m.contains(QpAttrMask::STATE)
            && cur == QpState::Sqd
            && a.sq_draining
            && next != QpState::Err
        {
            return Err(EINVAL); // as rdma_rxe
        }
        let mut new = *a;
        new.state = next;
        if m.contains(QpAttrMask::ACCESS_FLAGS) {
            let access = Access::from_raw(attr.qp_access_flags);
            if !access.within(QP_ACCESS) {
                return Err(EINVAL);
            }
            new.access = access;
        }
        if m.contains(QpAttrMask::PKEY_INDEX) && attr.pkey_index >= limits::PKEY_TABLE_LEN {
            return Err(EINVAL);
        }
        if m.contains(QpAttrMask::PORT) && attr.port_num != crate::limits::PORT {
            return Err(EINVAL);
        }
        // A controlled Q_Key (bit 31) from a user QP was refused by the core already, unless the
        // process has CAP_NET_RAW or the privileged Q_Key mode is on.
        if m.contains(QpAttrMask::QKEY) {
            new.qkey = attr.qkey;
        }
        if m.contains(QpAttrMask::AV) {
            let av = ib::read_roce_av(&attr.ah_attr).ok_or(EINVAL)?;
            av.families().ok_or(EINVAL)?;
            new.av = Some(av);
            new.sgid_index = attr.ah_attr.grh.sgid_index;
        }
        if m.contains(QpAttrMask::PATH_MTU) {
            new.path_mtu = IbMtu::from_enum(attr.path_mtu).ok_or(EINVAL)?;
        }
        if m.contains(QpAttrMask::TIMEOUT) {
            new.timeout = (attr.timeout <= 31).then_some(attr.timeout).ok_or(EINVAL)?;
        }
        if m.contains(QpAttrMask::RETRY_CNT) {
            new.retry_cnt = (attr.retry_cnt <= 7)
                .then_some(attr.retry_cnt)
                .ok_or(EINVAL)?;
        }
        if m.contains(QpAttrMask::RNR_RETRY) {
            new.rnr_retry = (attr.rnr_retry <= 7)
                .then_some(attr.rnr_retry)
                .ok_or(EINVAL)?;
        }
        if m.contains(QpAttrMask::MIN_RNR_TIMER) {
            new.min_rnr_timer = (attr.min_rnr_timer <= 31)
                .then_some(attr.min_rnr_timer)
                .ok_or(EINVAL)?;
        }
        if m.contains(QpAttrMask::RQ_PSN) {
            new.rq_psn = Psn::new(attr.rq_psn);
        }
        if m.contains(QpAttrMask::SQ_PSN) {
            new.sq_psn = Psn::new(attr.sq_psn);
        }
        if m.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
            if u32::from(attr.max_rd_atomic) > limits::MAX_RD_ATOMIC {
                return Err(EINVAL);
            }
            new.max_rd_atomic = attr.max_rd_atomic;
        }
        if m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            if u32::from(attr.max_dest_rd_atomic) > limits::MAX_RD_ATOMIC {
                return Err(EINVAL);
            }
            new.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if m.contains(QpAttrMask::DEST_QPN) {
            new.dest_qpn = attr.dest_qp_num & crate::proto::psn::PSN_MASK;
        }
        // RTR needs the peer's path (UD has none: each WQE names its own).
        if self.qp_type.is_connected()
            && next == QpState::Rtr
            && cur != QpState::Rtr
            && new.av.is_none()
        {
            return Err(EINVAL);
        }
        if next == QpState::Err || next == QpState::Reset {
            new.sq_draining = false;
        }
        *a = new;
        // The old slots (or the new ones, if more READs are owed than they hold) are freed
        // when this returns; kfree may run under a spinlock.
        let _unused_slots = reply_slots.map(|slots| s.resp.replace_reply_slots(slots));
        if next == QpState::Rtr && cur != QpState::Rtr {
            s.resp.start(new.rq_psn);
        }
        if next == QpState::Rts && cur == QpState::Rtr {
            s.req.start(new.sq_psn, new.path_mtu);
            s.comp.start(new.retry_cnt, new.rnr_retry);
            // What a kernel consumer posted before RTS goes now.
            self.run_requester(s, PACKETS_PER_RUN);
        }
        if next == QpState::Sqd && cur == QpState::Rts {
            // No new message starts; those in flight finish (then the event).
            s.attrs.sq_draining = true;
            self.check_drained(s);
        }
        if next == QpState::Rts && cur == QpState::Sqd {
            // Sends what was posted meanwhile.
            self.run_requester(s, PACKETS_PER_RUN);
        }
        if next == QpState::Reset && cur != QpState::Reset {
            // Back to the creation state: the rings start over (the provider resets its side),
            // and no timer of the old connection may fire into the new one.
            self.timer.cancel();
            s.req.reset();
            s.comp.stop();
            s.resp.reset();
            self.cq_overflowed.store(false, Ordering::Relaxed);
            self.sq.store(RingIndex::Consumer, 0);
            self.rq.store(RingIndex::Consumer, 0);
            self.rq.store(RingIndex::Flags, 0);
            self.sq.store(RingIndex::Flags, 0);
            if self.is_kernel() {
                // Under each producer lock, so that no post slips in between.
                let mut sq = self.sq_post.lock();
                *sq = 0;
                self.sq.store(RingIndex::Producer, 0);
                drop(sq);
                let mut rq = self.rq_post.lock();
                *rq = 0;
                self.rq.store(RingIndex::Producer, 0);
            }
        }
        if next == QpState::Err && cur != QpState::Err {
            self.enter_error(s);
        }
        self.resume_later(s);
        Ok(())
    }

    /// `query_qp`.
    pub(crate) fn query(&self, attr: &mut QpAttr, init: &mut QpInitAttr) {
        let a = self.state.lock().attrs;
        attr.qp_state = a.state.raw();
        attr.cur_qp_state = a.state.raw();
        attr.path_mtu = a.path_mtu as u32;
        attr.set_migrated();
        attr.rq_psn = a.rq_psn.get();
        attr.sq_psn = a.sq_psn.get();
        attr.dest_qp_num = a.dest_qpn;
        attr.qp_access_flags = a.access.raw_int();
        attr.cap = self.caps;
        attr.pkey_index = 0;
        attr.port_num = crate::limits::PORT;
        attr.timeout = a.timeout;
        attr.retry_cnt = a.retry_cnt;
        attr.rnr_retry = a.rnr_retry;
        attr.min_rnr_timer = a.min_rnr_timer;
        attr.max_rd_atomic = a.max_rd_atomic;
        attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        attr.qkey = a.qkey;
        attr.sq_draining = u8::from(a.sq_draining);
        if let Some(av) = &a.av {
            ib::write_roce_av(&mut attr.ah_attr, av, a.sgid_index, crate::limits::PORT);
        }
        init.cap = self.caps;
        init.set_type(self.qp_type, self.sq_sig_all);
    }
}

impl QpInner {
    /// The engines' state, for `rdma resource show qp -dd` (what a stalled QP is waiting
    /// for). The RDMA core shows it to any user: the live PSNs (what a packet forged into the
    /// connection needs) only to one with CAP_NET_ADMIN.
    pub(crate) fn report(&self, out: &mut ib::DriverAttrs<'_>) -> Result {
        let live_psns = crate::kext::current_is_net_admin();
        let s = self.state.lock();
        let r = &s.req;
        let q = &r.q;
        out.put_u32(c_str!("sq-consumer"), q.consumer)?;
        out.put_u32(c_str!("sq-cur"), q.cur)?;
        out.put_u32(c_str!("sq-fetched"), q.fetched)?;
        // What the poster published, and whether posts skip the doorbell: a post the
        // requester never fetched shows here.
        out.put_u32(c_str!("sq-producer"), self.sq.load(RingIndex::Producer))?;
        out.put_u32(c_str!("sq-polled"), u32::from(r.sq_polled))?;
        out.put_u32(c_str!("sq-flags"), self.sq.load(RingIndex::Flags))?;
        if live_psns {
            out.put_u32(c_str!("next-psn"), q.next_psn.get())?;
            out.put_u32(c_str!("acked-psn"), q.acked_psn.get())?;
            out.put_u32(c_str!("sent-end"), q.sent_end.get())?;
        }
        out.put_u32(c_str!("reads-in-flight"), r.reads.len() as u32)?;
        out.put_u32(c_str!("timer-armed"), u32::from(s.comp.timer_armed))?;
        out.put_u32(c_str!("retries-left"), u32::from(s.comp.retries_left))?;
        out.put_u32(c_str!("rnr-wait"), u32::from(s.comp.rnr_wait))?;
        out.put_u32(c_str!("window"), r.window.limit())?;
        out.put_u32(c_str!("backoff"), u32::from(r.window.backoff()))?;
        if q.consumer != q.fetched {
            let w = q.work(q.consumer);
            if live_psns {
                out.put_u32(c_str!("oldest-first-psn"), w.first_psn.get())?;
            }
            out.put_u32(c_str!("oldest-npkts"), w.npkts)?;
            out.put_u32(c_str!("oldest-sent"), w.sent)?;
            out.put_u32(c_str!("oldest-read-got"), w.read_got)?;
        }
        if live_psns {
            out.put_u32(c_str!("epsn"), s.resp.seq.epsn.get())?;
        }
        out.put_u32(c_str!("read-replies-owed"), s.resp.reads_owed() as u32)?;
        Ok(())
    }

    /// The device's datapath resources.
    pub(crate) fn res(&self) -> &Resources {
        &self.peers.res
    }

    /// Moves a port counter of the device.
    pub(crate) fn count(&self, c: Counter) {
        self.peers.res.counters.inc(c);
    }

    /// (Re)arms the timer to expire in `ns`.
    pub(crate) fn arm_timer(self: &Arc<Self>, ns: u64) {
        Timer::arm(self, ns);
    }

    /// The send doorbell: sends what the process posted, or flushes it in the error state.
    pub(crate) fn post_send(self: &Arc<Self>) -> Result {
        self.count(Counter::SendDoorbells);
        let mut s = self.state.lock();
        match s.attrs.state {
            QpState::Rts | QpState::Sqd => self.run_requester(&mut s, PACKETS_PER_RUN),
            QpState::Err => self.flush_sq(&mut s),
            // Posting before RTS is an immediate error; the provider takes its WQEs back.
            _ => return Err(EINVAL),
        }
        self.settle(&mut s);
        self.resume_later(&mut s);
        Ok(())
    }

    /// A requester run that used up its budget (`Requester::yielded`) goes on from the
    /// doorbell work item: for UC nothing else would run it again, since nothing acknowledges
    /// UC, and for RC a run from the receive softirq leaves the rest of a window to process
    /// context (an RC run's next ACK would, later, in softirq again).
    /// Under the lock, outside RESET (which `detach` relies on).
    pub(crate) fn resume_later(self: &Arc<Self>, s: &mut QpLocked) {
        if core::mem::take(&mut s.req.yielded)
            && matches!(s.attrs.state, QpState::Rts | QpState::Sqd)
        {
            // Already queued: that run sends these too.
            let _ = datapath_queue(Datapath::Bound).enqueue::<Arc<QpInner>, 1>(self.clone());
        }
    }

    /// The receive doorbell, rung by the provider when the RQ's flags ask for it (the QP is in
    /// the error state): completes what was posted with WR_FLUSH_ERR.
    pub(crate) fn post_recv(&self) -> Result {
        let mut s = self.state.lock();
        if s.attrs.state == QpState::Err {
            responder::flush_rq(self, &mut s);
        }
        Ok(())
    }

    /// Notes that a completion found its CQ full (see [`Self::settle`]).
    pub(crate) fn completion_lost(&self) {
        self.cq_overflowed.store(true, Ordering::Relaxed);
    }

    /// Called before each path that drove the protocol drops the QP's lock: a completion
    /// lost to a full CQ puts the QP in the error state, as rdma_rxe does, rather than let it
    /// run on with its owner no longer told what completed.
    pub(crate) fn settle(&self, s: &mut QpLocked) {
        if self.cq_overflowed.swap(false, Ordering::Relaxed)
            && s.attrs.state != QpState::Err
            && s.attrs.state != QpState::Reset
        {
            self.enter_error(s);
            // The flush's completions found the CQ full too: nothing more to do for them.
            self.cq_overflowed.store(false, Ordering::Relaxed);
        }
    }

    /// Runs the requester, which sends at most `budget` packets or executes that many local
    /// operations, and acts on how it ended. What the budget leaves goes on from the doorbell
    /// work item, never in this call: run from the receive softirq or the timer, another pass
    /// in place would hold that CPU for as long as a process keeps posting.
    pub(crate) fn run_requester(self: &Arc<Self>, s: &mut QpLocked, budget: u32) {
        self.drive_requester(s, budget);
        self.resume_later(s);
    }

    /// The passes of [`Self::run_requester`]. Each takes what was posted up to the producer
    /// index read when the run began (once more at most, see `update_sq_polled`): a process
    /// that keeps moving it cannot keep the run going.
    fn drive_requester(self: &Arc<Self>, s: &mut QpLocked, budget: u32) {
        let mut budget = budget;
        let mut producer = self.sq.load(RingIndex::Producer);
        loop {
            let end = match self.qp_type {
                QpType::Rc | QpType::Uc => requester::run(self, s, producer, &mut budget),
                QpType::Ud | QpType::Gsi => datagram::send(self, s, producer, &mut budget),
            };
            if self.qp_type == QpType::Uc {
                // Nothing acknowledges UC: what went out whole completes now, before a failure
                // flushes what follows it.
                completer::retire_sent(self, &mut s.req);
            }
            match end {
                RunEnd::Idle => {}
                RunEnd::Failed(index, status) => return self.fail(s, index, status),
                RunEnd::BrokenRing => return self.fatal(s),
            }
            if self.qp_type == QpType::Uc {
                // More was posted than the kernel took copies of (the run ended under its
                // budget on local operations): the work item goes on, as nothing else would.
                // Not in SQD, where nothing new may start.
                if s.attrs.state == QpState::Rts && producer != s.req.q.fetched {
                    s.req.yielded = true;
                }
                self.check_drained(s);
                return;
            }
            // Local operations the run executed at the head of the SQ complete now; an
            // invalidation waiting for them may go next. Bounded: each pass retires at least
            // one WQE of those posted up to `producer`, and executes others from the budget.
            if s.req.q.oldest_is_done_local() {
                completer::retire_done_locals(self, &mut s.req);
                continue;
            }
            // Whatever is unacknowledged has a timer to resend it: also when this run sent
            // nothing (the window was shut, the READ credits used up) after a timeout had
            // disarmed it.
            if !s.comp.timer_armed {
                completer::arm_retransmit(self, s);
            }
            // At most once more: that run leaves the flag as it is or sets it again.
            if !self.update_sq_polled(s) {
                return;
            }
            producer = self.sq.load(RingIndex::Producer);
        }
    }

    /// Tells the provider whether a post needs the send doorbell (`proto::doorbell`): not
    /// while the timer is armed with enough in flight, since then an ACK, a READ response or
    /// the timer itself runs the requester again, and that run fetches what was posted.
    /// Returns true when it stops saying so and something was posted that a doorbell may not
    /// announce: the caller runs the requester once more.
    fn update_sq_polled(&self, s: &mut QpLocked) -> bool {
        let in_flight = s.req.q.sent_end.diff(s.req.q.acked_psn).max(0) as u32;
        let polled = self.qp_type == QpType::Rc
            && doorbell::sq_polled(
                s.comp.timer_armed,
                matches!(s.attrs.state, QpState::Rts | QpState::Sqd),
                in_flight,
            );
        if polled == s.req.sq_polled {
            return false;
        }
        s.req.sq_polled = polled;
        if polled {
            self.sq.store(RingIndex::Flags, RING_FLAG_SQ_POLLED);
            return false;
        }
        self.sq_unpolled();
        self.sq.load(RingIndex::Producer) != s.req.q.fetched
    }

    /// Clears `RING_FLAG_SQ_POLLED`; what the producer index says after this is what posts
    /// that skipped their doorbell left (they published it before they read the flag, full
    /// fences on both sides).
    fn sq_unpolled(&self) {
        self.sq.store(RingIndex::Flags, 0);
        fence(Ordering::SeqCst);
    }

    /// The WQE at `index` fails with `status`: those before it are flushed, it completes with
    /// the error, and the QP enters the error state (which flushes the rest).
    pub(crate) fn fail(&self, s: &mut QpLocked, index: u32, status: WcStatus) {
        // `index` was fetched: this ends within what the kernel holds.
        while s.req.q.consumer != index && s.req.q.consumer != s.req.q.fetched {
            completer::retire(self, &mut s.req, WcStatus::WrFlushErr);
        }
        if s.req.q.consumer == index && index != s.req.q.fetched {
            completer::retire(self, &mut s.req, status);
        }
        self.enter_error(s);
    }

    /// Moves to the error state: every outstanding WQE completes with WR_FLUSH_ERR.
    pub(crate) fn enter_error(&self, s: &mut QpLocked) {
        s.attrs.state = QpState::Err;
        s.comp.stop();
        self.timer.cancel();
        s.resp.stop();
        // Posts need the doorbell again (to be flushed): the flush below reads the producer
        // index after the flag is cleared.
        s.req.sq_polled = false;
        self.sq_unpolled();
        self.flush_sq(s);
        // From now on receives posted need the doorbell to be flushed. The flag is set before
        // the flush reads the producer index, and the provider publishes its producer index
        // before it reads the flag (full fences on both sides): a receive is either seen by this
        // flush or followed by a doorbell.
        self.rq.store(RingIndex::Flags, RING_FLAG_FLUSH);
        fence(Ordering::SeqCst);
        responder::flush_rq(self, s);
        if self.peers.srq.is_some() {
            // It takes nothing more from its SRQ: its owner may now destroy it safely.
            self.peers.qp.dispatch_event(QpEvent::LastWqeReached);
        }
    }

    /// One of the QP's rings is corrupt (the process wrote garbage to its indices): the error
    /// state, and `IB_EVENT_QP_FATAL` to the owner, as a hardware QP reports a catastrophic
    /// work queue error. Nothing outside this QP is touched.
    pub(crate) fn fatal(&self, s: &mut QpLocked) {
        self.enter_error(s);
        self.peers.qp.dispatch_event(QpEvent::Fatal);
    }

    /// Completes every WQE of the SQ, posted or in flight, with WR_FLUSH_ERR: those the kernel
    /// holds, then what the ring held when the flush began (its producer index is read once, so
    /// a process moving it meanwhile cannot keep the flush going).
    fn flush_sq(&self, s: &mut QpLocked) {
        let end = requester::flush_end(self, &s.req);
        loop {
            while s.req.q.consumer != s.req.q.fetched {
                completer::retire(self, &mut s.req, WcStatus::WrFlushErr);
            }
            // A corrupt ring: nothing more in it can be trusted, or flushed.
            let Some(end) = end else { return };
            if s.req.q.fetched == end {
                return;
            }
            requester::fetch_for_flush(self, &mut s.req, end);
        }
    }

    /// In SQD, once every message started before is complete: reports `IB_EVENT_SQ_DRAINED`
    /// (under the lock, so that `detach` cannot slip in between).
    pub(crate) fn check_drained(&self, s: &mut QpLocked) {
        if s.attrs.state == QpState::Sqd && s.attrs.sq_draining && s.req.nothing_started_left() {
            s.attrs.sq_draining = false;
            self.peers.qp.dispatch_event(QpEvent::SqDrained);
        }
    }

    /// Destroy: after this the datapath leaves the QP alone (every entry to it takes the lock
    /// and finds it in RESET), so the core may free it and its CQs may go. Then stops the timer
    /// for good and waits for both it and the work item. Process context.
    pub(crate) fn detach(&self) {
        {
            let mut s = self.state.lock();
            s.attrs.state = QpState::Reset;
            s.resp.stop();
        }
        self.timer.shutdown();
        // The work item is only queued under the lock outside RESET: this waits for the last
        // time it was, and it finds RESET and leaves.
        work::flush(&self.read_work);
        // A kernel consumer posts nothing more once it destroys the QP; the last doorbell runs
        // in RESET and does nothing.
        work::flush(&self.doorbell_work);
    }

    /// A kernel consumer's QP (rings in kernel memory, posted through `post_kernel_*`).
    pub(crate) fn is_kernel(&self) -> bool {
        self.sq.mmap_info().is_none()
    }

    /// Posts a kernel consumer's send WQE `wqe` with the SGE list `sges` (or, with the INLINE
    /// flag, the bytes those SGEs name, copied now). Interrupts may be off: only the SQ's
    /// producer lock is taken; [`Self::kick`] has the QP act on it.
    pub(crate) fn post_kernel_send(
        &self,
        mut wqe: SendWqe,
        sges: impl Iterator<Item = Sge>,
        num_sge: usize,
    ) -> Result {
        // A kernel consumer registers and invalidates on RC (nvme-rdma, rdma_rw).
        // (ATOMIC WRITE is offered to processes only: no kernel consumer posts one.)
        let supported = (requester::carries(self.qp_type, wqe.opcode)
            && wqe.opcode != send_opcode::ATOMIC_WRITE)
            || (self.qp_type == QpType::Rc
                && matches!(wqe.opcode, send_opcode::REG_MR | send_opcode::LOCAL_INV));
        if !supported || num_sge > self.caps.max_send_sge as usize {
            return Err(EINVAL);
        }
        let mut producer = self.sq_post.lock();
        let index = *producer;
        let consumer = self.sq.load(RingIndex::Consumer);
        if index.wrapping_sub(consumer) >= self.sq.geometry().slots() {
            return Err(ENOMEM);
        }
        let header = core::mem::size_of::<SendWqe>();
        if wqe.flags & send_flags::INLINE != 0 {
            // Copied from the kernel memory the SGEs name, at most `max_inline_data` bytes.
            let mut data = [0u8; limits::MAX_INLINE_DATA as usize];
            let mut len = 0usize;
            for sge in sges {
                let end = len
                    .checked_add(sge.length as usize)
                    .filter(|&end| end <= self.caps.max_inline_data as usize)
                    .ok_or(EINVAL)?;
                kmem::read(sge.addr, &mut data[len..end]).map_err(|()| EINVAL)?;
                len = end;
            }
            self.sq.write_bytes(index, header, &data[..len])?;
            wqe.num_sge = 0;
            wqe.inline_len = len as u32;
        } else {
            let mut n = 0u32;
            for (i, sge) in sges.enumerate() {
                self.sq
                    .write_at(index, header + i * core::mem::size_of::<Sge>(), &sge)?;
                n += 1;
            }
            wqe.num_sge = n;
            wqe.inline_len = 0;
        }
        self.sq.write(index, &wqe)?;
        *producer = index.wrapping_add(1);
        self.sq.store(RingIndex::Producer, *producer);
        Ok(())
    }

    /// Posts a kernel consumer's receive WQE for `wr_id` with the SGE list `sges` (same
    /// context rules as [`Self::post_kernel_send`]).
    pub(crate) fn post_kernel_recv(
        &self,
        wr_id: u64,
        sges: impl Iterator<Item = Sge>,
        num_sge: usize,
    ) -> Result {
        // A QP with an SRQ is posted to through the SRQ (`ib_post_srq_recv`).
        if self.peers.srq.is_some() || num_sge > self.caps.max_recv_sge as usize {
            return Err(EINVAL);
        }
        let mut producer = self.rq_post.lock();
        recv_wqe::post_kernel_recv(&self.rq, &mut producer, wr_id, sges)
    }

    /// After a kernel consumer posted: the QP acts on it from a work item, where its BH-safe
    /// lock may be taken (the poster may have interrupts off). Receives need it only in the
    /// error state (to be flushed); the responder finds them in the ring otherwise.
    pub(crate) fn kick(self: &Arc<Self>, send: bool) {
        // The producer index was published before the flag is read (full fence), as
        // `enter_error` sets the flag before it reads the producer: a receive is either
        // flushed there or seen here.
        fence(Ordering::SeqCst);
        if !send && self.rq.load(RingIndex::Flags) & RING_FLAG_FLUSH == 0 {
            return;
        }
        // The requester comes back to the SQ by itself (`update_sq_polled`).
        if send && self.sq.load(RingIndex::Flags) & RING_FLAG_SQ_POLLED != 0 {
            return;
        }
        if send {
            self.count(Counter::SendDoorbells);
        }
        // Already queued: that run sees these too.
        let _ = datapath_queue(Datapath::Bound).enqueue::<Arc<QpInner>, 1>(self.clone());
    }

    /// The doorbell work: sends what was posted, or flushes it in the error state.
    fn ring_doorbell(self: &Arc<Self>) {
        let mut s = self.state.lock();
        match s.attrs.state {
            QpState::Rts | QpState::Sqd => self.run_requester(&mut s, PACKETS_PER_RUN),
            QpState::Err => {
                self.flush_sq(&mut s);
                responder::flush_rq(self, &mut s);
            }
            _ => {}
        }
        self.settle(&mut s);
        self.resume_later(&mut s);
    }
}

/// Makes sure the QP's work item runs to send the READ responses owed; call under the QP's
/// lock, outside RESET (which `detach` relies on).
pub(crate) fn schedule_read_replies(qp: &Arc<QpInner>) {
    // Unbound: a large READ keeps it busy for a while, and any CPU may do that. Already
    // queued: that run sends these too.
    let _ = datapath_queue(Datapath::Unbound).enqueue::<Arc<QpInner>, 0>(qp.clone());
}

impl_has_work! {
    impl HasWork<Self> for QpInner { self.read_work }
}

impl WorkItem for QpInner {
    type Pointer = Arc<QpInner>;

    fn run(this: Arc<QpInner>) {
        responder::send_read_replies(&this);
    }
}

impl_has_work! {
    impl HasWork<Self, 1> for QpInner { self.doorbell_work }
}

impl WorkItem<1> for QpInner {
    type Pointer = Arc<QpInner>;

    fn run(this: Arc<QpInner>) {
        this.ring_doorbell();
    }
}

impl TimerOwner for QpInner {
    fn timer(&self) -> &Timer<Self> {
        &self.timer
    }

    fn expired(this: &Arc<Self>) {
        completer::timer_expired(this);
    }
}
