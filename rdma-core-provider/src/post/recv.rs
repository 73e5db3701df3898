//! Posting receives: WQEs written into the mapped RQ and published with a release store of the
//! producer index; a syscall only in the error state, when the kernel must flush them.

use super::{qp_of, ring_doorbell, sges_of, Doorbell};
use crate::{ffi::verbs::*, ring::MappedRing, wqe};
use core::ffi::c_int;
use rxe_rs_uapi::RING_FLAG_FLUSH;

/// `ibv_post_recv`: writes receive WQEs into the mapped RQ and publishes them; no syscall,
/// except in the error state, where the ring's flags ask for the doorbell so that the kernel
/// flushes them.
///
/// # Safety
///
/// `ibqp` is ours; `wr` is a valid list; `bad` a valid out-pointer.
pub unsafe extern "C" fn post_recv(
    ibqp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let qp = qp_of(ibqp);
    // A QP attached to an SRQ has no RQ of its own: receives go to the SRQ.
    let Some(rq) = &qp.rq else {
        // SAFETY: valid out-pointer.
        unsafe { *bad = wr };
        return libc::EINVAL;
    };
    // SAFETY: libibverbs keeps `state` current (ibv_modify_qp updates it).
    if unsafe { (*ibqp).state } == IBV_QPS_RESET {
        // SAFETY: valid out-pointer.
        unsafe { *bad = wr };
        return libc::EINVAL;
    }
    let _guard = qp.rq_lock.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the caller's list; we produce into `rq` under its lock.
    let (ret, failed) = unsafe { fill_ring(rq, wr, qp.max_recv_sge) };
    if rq.flags_after_fence() & RING_FLAG_FLUSH != 0 {
        // The WQEs are posted either way; the doorbell only has them flushed sooner than the
        // next one would.
        // SAFETY: `ibqp` is a live QP of ours (the post_recv contract).
        let _ = unsafe { ring_doorbell(ibqp, Doorbell::Recv) };
    }
    if ret != 0 {
        // SAFETY: valid out-pointer.
        unsafe { *bad = failed };
    }
    ret
}

/// Writes the receive WRs of the list `wr` into `ring` (a QP's RQ or an SRQ) and publishes
/// them; stops at the first that does not fit or is malformed, and returns its errno and
/// itself (what came before it is posted).
///
/// # Safety
///
/// `wr` is a valid list; the caller holds the lock that makes it `ring`'s only producer.
pub(crate) unsafe fn fill_ring(
    ring: &MappedRing,
    mut wr: *mut ibv_recv_wr,
    max_sge: u32,
) -> (c_int, *mut ibv_recv_wr) {
    let slots = ring.geometry().slots();
    // We are the only producer: the ring's producer index is ours.
    let mut producer = ring.producer();
    let consumer = ring.consumer();
    let mut ret = 0;
    while !wr.is_null() {
        // SAFETY: a valid WR of the caller's list.
        let w = unsafe { &*wr };
        if producer.wrapping_sub(consumer) >= slots {
            ret = libc::ENOMEM;
            break;
        }
        if w.num_sge < 0 {
            ret = libc::EINVAL;
            break;
        }
        // SAFETY: `sg_list` has `num_sge` entries (the ibverbs contract); `ibv_sge` has `Sge`'s
        // layout (tested).
        let sges = unsafe { sges_of(w.sg_list, w.num_sge) };
        // SAFETY: a free slot (checked above), ours alone by the caller's lock, not yet
        // published.
        let slot = unsafe { ring.slot_mut(producer) };
        if let Err(e) = sges.and_then(|sges| wqe::write_recv(slot, w.wr_id, sges, max_sge)) {
            ret = e;
            break;
        }
        producer = producer.wrapping_add(1);
        wr = w.next;
    }
    ring.set_producer(producer);
    (ret, wr)
}
