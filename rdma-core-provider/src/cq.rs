//! Completion queues: created through the kernel, polled in user space from the mapped ring.

use crate::{
    cq_ex::PollSession,
    ffi::{private::*, verbs::*},
    ring::MappedRing,
};
use core::ffi::c_int;
use rxe_rs_uapi::{CqSlot, Cqe, CreateCqResp, ResizeCqResp};
use std::{
    mem::{offset_of, size_of, size_of_val, MaybeUninit},
    sync::Mutex,
};

/// Our CQ: libibverbs' `verbs_cq` first (it casts `ibv_cq *` back to it).
#[repr(C)]
pub struct Cq {
    pub verbs: verbs_cq,
    /// The ring (`None` until mapped, or if a resize could not map the new one). The lock
    /// makes the consumer side one poller at a time and keeps a resize out of a poll.
    pub(crate) ring: Mutex<Option<MappedRing>>,
    /// The extended polling interface's state (`ibv_create_cq_ex`).
    pub(crate) session: PollSession,
}

pub(crate) fn to_cq<'a>(ibcq: *mut ibv_cq) -> &'a Cq {
    // SAFETY: every `ibv_cq` we hand out is the first field of a `Cq`.
    unsafe { &*ibcq.cast::<Cq>() }
}

impl Cq {
    /// A CQ for libibverbs to fill, not created yet.
    pub(crate) fn new_boxed(single_threaded: bool) -> *mut Cq {
        Box::into_raw(Box::new(Cq {
            // SAFETY: plain C data, filled by libibverbs.
            verbs: unsafe { MaybeUninit::zeroed().assume_init() },
            ring: Mutex::new(None),
            session: PollSession::new(single_threaded),
        }))
    }

    /// Maps the ring of a CQ the kernel has just created (`ret` 0), or frees it: returns the
    /// CQ, or NULL with errno set.
    ///
    /// # Safety
    ///
    /// `cq` comes from [`Cq::new_boxed`] and is not published; `ctx` is valid; on success the
    /// kernel CQ exists and `resp` is its response.
    pub(crate) unsafe fn finish_create(
        ctx: *mut ibv_context,
        cq: *mut Cq,
        ret: c_int,
        resp: &CreateCqResp,
    ) -> *mut Cq {
        if ret != 0 {
            // SAFETY: never published.
            drop(unsafe { Box::from_raw(cq) });
            crate::set_errno(ret);
            return core::ptr::null_mut();
        }
        // SAFETY: `ctx` is valid.
        let fd = unsafe { (*ctx).cmd_fd };
        match MappedRing::map(fd, &resp.ring, resp.log2_slots, resp.slot_size) {
            // SAFETY: `cq` is ours until returned.
            Ok(ring) => unsafe {
                *(*cq).ring.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(ring);
                cq
            },
            Err(e) => {
                // SAFETY: created by the caller; destroy the kernel object and free ours.
                unsafe {
                    ibv_cmd_destroy_cq(cq.cast());
                    drop(Box::from_raw(cq));
                }
                crate::set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
                core::ptr::null_mut()
            }
        }
    }
}

/// The response to create_cq: core part, then ours.
#[repr(C)]
#[derive(Default)]
struct CreateCqRespFull {
    core: ib_uverbs_create_cq_resp,
    drv: CreateCqResp,
}

/// `ibv_create_cq`.
///
/// # Safety
///
/// libibverbs passes a context of ours and a NULL or valid channel.
pub unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let cq = Cq::new_boxed(false);
    let ibcq = cq.cast::<ibv_cq>();
    let mut cmd = ibv_create_cq::default();
    let mut resp = CreateCqRespFull::default();
    // SAFETY: valid context, CQ and buffers of the sizes passed; the response starts with the
    // core part, as libibverbs expects.
    let ret = unsafe {
        ibv_cmd_create_cq(
            ctx,
            cqe,
            channel,
            comp_vector,
            ibcq,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    // SAFETY: a fresh CQ, created by the kernel if `ret` is 0.
    unsafe { Cq::finish_create(ctx, cq, ret, &resp.drv) }.cast()
}

/// The response to resize_cq: core part, then ours.
#[repr(C)]
#[derive(Default)]
struct ResizeCqRespFull {
    core: ib_uverbs_resize_cq_resp,
    drv: ResizeCqResp,
}

/// `ibv_resize_cq`: the kernel moves the CQ to a new ring (with the completions not polled
/// yet at its start); we map it in place of the old one.
///
/// # Safety
///
/// `ibcq` comes from [`create_cq`].
pub unsafe extern "C" fn resize_cq(ibcq: *mut ibv_cq, cqe: c_int) -> c_int {
    let cq = to_cq(ibcq);
    // (Not inside an extended poll, whose place is an index into the old ring.)
    let _session = cq.session.lock();
    let mut ring = cq.ring.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = ibv_resize_cq::default();
    let mut resp = ResizeCqRespFull::default();
    // SAFETY: a CQ of ours; buffers of the sizes passed, the response starting with the core
    // part. On success libibverbs stores the new capacity in `ibcq->cqe`.
    let ret = unsafe {
        ibv_cmd_resize_cq(
            ibcq,
            cqe,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        return ret;
    }
    // SAFETY: a CQ of ours has a valid context.
    let fd = unsafe { (*(*ibcq).context).cmd_fd };
    let d = &resp.drv;
    match MappedRing::map(fd, &d.ring, d.log2_slots, d.slot_size) {
        Ok(new) => {
            *ring = Some(new);
            0
        }
        Err(e) => {
            // The kernel already writes to the new ring: without it this CQ can only fail.
            *ring = None;
            e.raw_os_error().unwrap_or(libc::ENOMEM)
        }
    }
}

/// `ibv_destroy_cq`.
///
/// # Safety
///
/// `ibcq` comes from [`create_cq`].
pub unsafe extern "C" fn destroy_cq(ibcq: *mut ibv_cq) -> c_int {
    // SAFETY: a CQ of ours.
    let ret = unsafe { ibv_cmd_destroy_cq(ibcq) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; unmaps the ring.
        drop(unsafe { Box::from_raw(ibcq.cast::<Cq>()) });
    }
    ret
}

/// `ibv_poll_cq`: copies up to `n` completions out of the ring, no syscall.
///
/// # Safety
///
/// `ibcq` is ours; `wc` has room for `n` entries.
pub unsafe extern "C" fn poll_cq(ibcq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let cq = to_cq(ibcq);
    // (Not inside an extended poll, which moves the consumer index at its end.)
    let _session = cq.session.lock();
    let guard = cq.ring.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ring) = guard.as_ref() else {
        return -libc::EINVAL;
    };
    let producer = ring.producer();
    let mut consumer = ring.consumer();
    let mut polled = 0;
    while polled < n.max(0) && consumer != producer {
        // SAFETY: the slot holds a CQE the kernel published before `producer` (acquire);
        // `wc + polled` is in the caller's array; `Cqe` is laid out as `ibv_wc` (tested).
        unsafe {
            core::ptr::copy_nonoverlapping(
                ring.slot(consumer).cast::<u8>(),
                wc.add(polled as usize).cast::<u8>(),
                size_of::<Cqe>(),
            );
        }
        consumer = consumer.wrapping_add(1);
        polled += 1;
    }
    // An empty poll leaves the index alone: busy pollers would otherwise write the line the
    // kernel's producer reads on every call.
    if polled > 0 {
        ring.set_consumer(consumer);
    }
    polled
}

/// `ibv_req_notify_cq`.
///
/// # Safety
///
/// `ibcq` is ours.
pub unsafe extern "C" fn req_notify_cq(ibcq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: a CQ of ours.
    unsafe { ibv_cmd_req_notify_cq(ibcq, solicited_only) }
}

const _: () = assert!(offset_of!(Cq, verbs) == 0);

/// Removes the completions of QP `qpn` still waiting in the CQ, keeping the order of the
/// others: a QP reset forgets its work, and its completions with it, as mlx4 and mlx5 do (a
/// flush completion from before a reset would otherwise be the first thing the reset QP
/// seems to complete).
///
/// # Safety
///
/// `ibcq` is a live CQ of ours, or NULL.
pub unsafe fn discard_qp_completions(ibcq: *mut ibv_cq, qpn: u32) {
    if ibcq.is_null() {
        return;
    }
    let cq = to_cq(ibcq);
    let _session = cq.session.lock();
    let guard = cq.ring.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ring) = guard.as_ref() else {
        return;
    };
    let producer = ring.producer();
    let consumer = ring.consumer();
    // Indices the process scribbled over name no CQEs: nothing to compact (and the walk
    // below stays within one ring's worth).
    if producer.wrapping_sub(consumer) > ring.geometry().slots() {
        return;
    }
    // From the newest to the oldest, the kept CQEs move up over the discarded ones. The
    // kernel writes only at and after `producer`, and reuses the slots freed at the old end
    // only once it sees the new consumer index, stored after the moves (release).
    let mut kept_from = producer;
    let mut at = producer;
    while at != consumer {
        at = at.wrapping_sub(1);
        // SAFETY: a published CQE between the indices; the field is a plain u32.
        let owner = unsafe {
            ring.slot(at)
                .add(offset_of!(Cqe, qp_num))
                .cast::<u32>()
                .read_unaligned()
        };
        if owner == qpn {
            continue;
        }
        kept_from = kept_from.wrapping_sub(1);
        if kept_from != at {
            // SAFETY: two distinct published slots of one ring, each a whole `CqSlot` (the
            // completion and its timestamp move together).
            unsafe {
                core::ptr::copy_nonoverlapping(
                    ring.slot(at).cast_const(),
                    ring.slot(kept_from),
                    size_of::<CqSlot>(),
                )
            };
        }
    }
    if kept_from != consumer {
        ring.set_consumer(kept_from);
    }
}
