//! Queue pairs: created, modified and queried through the kernel; their send and receive rings
//! are mapped here for the post verbs.

use crate::{
    ffi::{private::*, verbs::*},
    ring::MappedRing,
};
use core::ffi::c_int;
use rxe_rs_uapi::{CreateQpResp, RingGeometry};
use std::{
    mem::{offset_of, size_of_val, MaybeUninit},
    sync::Mutex,
};

/// Our QP: libibverbs' `verbs_qp` first.
#[repr(C)]
pub struct Qp {
    pub verbs: verbs_qp,
    /// Send ring (we produce).
    pub sq: Option<MappedRing>,
    /// Receive ring (we produce).
    pub rq: Option<MappedRing>,
    /// Serialises producers of the SQ.
    pub sq_lock: Mutex<()>,
    /// Serialises producers of the RQ.
    pub rq_lock: Mutex<()>,
}

const _: () = assert!(offset_of!(Qp, verbs) == 0);

#[repr(C)]
#[derive(Default)]
struct CreateQpRespFull {
    core: ib_uverbs_create_qp_resp,
    drv: CreateQpResp,
}

/// `ibv_create_qp`.
///
/// # Safety
///
/// libibverbs passes a PD of ours and valid attributes.
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    let qp = Box::into_raw(Box::new(Qp {
        // SAFETY: plain C data, filled by libibverbs.
        verbs: unsafe { MaybeUninit::zeroed().assume_init() },
        sq: None,
        rq: None,
        sq_lock: Mutex::new(()),
        rq_lock: Mutex::new(()),
    }));
    let ibqp = qp.cast::<ibv_qp>();
    let mut cmd = ibv_create_qp::default();
    let mut resp = CreateQpRespFull::default();
    // SAFETY: valid PD, QP, attributes and buffers of the sizes passed.
    let ret = unsafe { ibv_cmd_create_qp(pd, ibqp, attr, &mut cmd, size_of_val(&cmd), &mut resp.core, size_of_val(&resp)) };
    if ret != 0 {
        // SAFETY: never published.
        drop(unsafe { Box::from_raw(qp) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    // SAFETY: `pd` is valid, and so is its context.
    let fd = unsafe { (*(*pd).context).cmd_fd };
    let d = &resp.drv;
    let rings = MappedRing::map(fd, &d.sq, RingGeometry { log2_slots: d.sq_log2_slots, slot_size: d.sq_slot_size })
        .and_then(|sq| Ok((sq, MappedRing::map(fd, &d.rq, RingGeometry { log2_slots: d.rq_log2_slots, slot_size: d.rq_slot_size })?)));
    match rings {
        Ok((sq, rq)) => {
            // SAFETY: `qp` is ours until returned.
            unsafe {
                (*qp).sq = Some(sq);
                (*qp).rq = Some(rq);
            }
            ibqp
        }
        Err(e) => {
            // SAFETY: created above: destroy the kernel QP, free ours.
            unsafe {
                ibv_cmd_destroy_qp(ibqp);
                drop(Box::from_raw(qp));
            }
            crate::set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
            core::ptr::null_mut()
        }
    }
}

/// `ibv_modify_qp`.
///
/// # Safety
///
/// `qp` is ours; `attr` valid.
pub unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    let mut cmd = ibv_modify_qp::default();
    // SAFETY: as documented; `cmd` is a local of the size passed.
    unsafe { ibv_cmd_modify_qp(qp, attr, mask, &mut cmd, size_of_val(&cmd)) }
}

/// `ibv_query_qp`.
///
/// # Safety
///
/// `qp` is ours; `attr` and `init` valid.
pub unsafe extern "C" fn query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int, init: *mut ibv_qp_init_attr) -> c_int {
    let mut cmd = ibv_query_qp::default();
    // SAFETY: as documented; `cmd` is a local of the size passed.
    unsafe { ibv_cmd_query_qp(qp, attr, mask, init, &mut cmd, size_of_val(&cmd)) }
}

/// `ibv_destroy_qp`.
///
/// # Safety
///
/// `qp` comes from [`create_qp`].
pub unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: a QP of ours.
    let ret = unsafe { ibv_cmd_destroy_qp(qp) };
    if ret == 0 {
        // SAFETY: the kernel QP is gone; unmaps the rings.
        drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
    }
    ret
}
