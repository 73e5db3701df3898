//! Completion queues: created through the kernel, polled in user space from the mapped ring.

use crate::{
    ffi::{private::*, verbs::*},
    ring::MappedRing,
};
use core::ffi::c_int;
use rxe_rs_uapi::{CreateCqResp, Cqe, RingGeometry};
use std::{
    mem::{offset_of, size_of, size_of_val, MaybeUninit},
    sync::Mutex,
};

/// Our CQ: libibverbs' `verbs_cq` first (it casts `ibv_cq *` back to it).
#[repr(C)]
pub struct Cq {
    pub verbs: verbs_cq,
    /// The ring; `None` until mapped.
    ring: Option<MappedRing>,
    /// Consumer side: one poller at a time.
    lock: Mutex<()>,
}

/// `struct verbs_cq` (288 bytes): `ibv_cq_ex`, whose head is an `ibv_cq`.
#[repr(C)]
pub struct verbs_cq {
    pub cq_ex: ibv_cq_ex,
}

fn to_cq<'a>(ibcq: *mut ibv_cq) -> &'a Cq {
    // SAFETY: every `ibv_cq` we hand out is the first field of a `Cq`.
    unsafe { &*ibcq.cast::<Cq>() }
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
    let cq = Box::into_raw(Box::new(Cq {
        // SAFETY: plain C data, filled by libibverbs.
        verbs: unsafe { MaybeUninit::zeroed().assume_init() },
        ring: None,
        lock: Mutex::new(()),
    }));
    let ibcq = cq.cast::<ibv_cq>();
    let mut cmd = ibv_create_cq::default();
    let mut resp = CreateCqRespFull::default();
    // SAFETY: valid context, CQ and buffers of the sizes passed; the response starts with the
    // core part, as libibverbs expects.
    let ret = unsafe {
        ibv_cmd_create_cq(ctx, cqe, channel, comp_vector, ibcq, &mut cmd, size_of_val(&cmd), &mut resp.core, size_of_val(&resp))
    };
    if ret != 0 {
        // SAFETY: never published.
        drop(unsafe { Box::from_raw(cq) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    let geometry = RingGeometry { log2_slots: resp.drv.log2_slots, slot_size: resp.drv.slot_size };
    // SAFETY: `ctx` is valid.
    match MappedRing::map(unsafe { (*ctx).cmd_fd }, &resp.drv.ring, geometry) {
        // SAFETY: `cq` is ours until returned.
        Ok(ring) => unsafe { (*cq).ring = Some(ring) },
        Err(e) => {
            // SAFETY: created above; destroy the kernel object and free ours.
            unsafe {
                ibv_cmd_destroy_cq(ibcq);
                drop(Box::from_raw(cq));
            }
            crate::set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
            return core::ptr::null_mut();
        }
    }
    ibcq
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
    let Some(ring) = &cq.ring else { return -libc::EINVAL };
    let _guard = cq.lock.lock().unwrap_or_else(|e| e.into_inner());
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
    ring.set_consumer(consumer);
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

const _: () = {
    assert!(size_of::<verbs_cq>() == 288);
    assert!(offset_of!(Cq, verbs) == 0);
};
