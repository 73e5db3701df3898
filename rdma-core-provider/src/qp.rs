//! Queue pairs: created, modified and queried through the kernel; their send and receive rings
//! are mapped here for the post verbs.

use crate::{
    ffi::{private::*, verbs::*},
    post::send::{init_qp_ex, supported_send_ops, SendQueue},
    ring::MappedRing,
};
use core::ffi::c_int;
use rxe_rs_uapi::CreateQpResp;
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
    /// Receive ring (we produce); none for a QP attached to an SRQ.
    pub rq: Option<MappedRing>,
    /// Producer-side state of the SQ.
    pub send: SendQueue,
    /// Serialises producers of the RQ.
    pub rq_lock: Mutex<()>,
    /// SGEs a receive WR may carry (what the kernel granted).
    pub max_recv_sge: u32,
}

const _: () = assert!(offset_of!(Qp, verbs) == 0);

#[repr(C)]
#[derive(Default)]
struct CreateQpRespFull {
    core: ib_uverbs_create_qp_resp,
    drv: CreateQpResp,
}

/// A QP of ours with nothing mapped yet.
fn new_qp() -> *mut Qp {
    Box::into_raw(Box::new(Qp {
        // SAFETY: plain C data, filled by libibverbs.
        verbs: unsafe { MaybeUninit::zeroed().assume_init() },
        sq: None,
        rq: None,
        send: SendQueue::default(),
        rq_lock: Mutex::new(()),
        max_recv_sge: 0,
    }))
}

/// After the kernel created the QP: maps its rings and records what it granted. On failure the
/// kernel QP is destroyed and ours freed; errno is set.
///
/// # Safety
///
/// `qp` comes from [`new_qp`] and the kernel QP was created with `resp`; `fd` is the context's
/// command fd.
unsafe fn finish_create(
    qp: *mut Qp,
    fd: c_int,
    resp: &CreateQpRespFull,
    cap: &ibv_qp_cap,
) -> *mut ibv_qp {
    let ibqp = qp.cast::<ibv_qp>();
    let d = &resp.drv;
    // A QP attached to an SRQ has no RQ (the kernel describes none).
    let rings = MappedRing::map(fd, &d.sq, d.sq_log2_slots, d.sq_slot_size).and_then(|sq| {
        if d.rq.size == 0 {
            return Ok((sq, None));
        }
        let rq = MappedRing::map(fd, &d.rq, d.rq_log2_slots, d.rq_slot_size)?;
        Ok((sq, Some(rq)))
    });
    match rings {
        Ok((sq, rq)) => {
            // SAFETY: `qp` is ours until returned.
            unsafe {
                (*qp).sq = Some(sq);
                (*qp).rq = rq;
                (*qp).max_recv_sge = cap.max_recv_sge;
                (*qp).send.max_sge = cap.max_send_sge;
                (*qp).send.max_inline = cap.max_inline_data;
            }
            ibqp
        }
        Err(e) => {
            // SAFETY: created by the caller: destroy the kernel QP, free ours.
            unsafe {
                ibv_cmd_destroy_qp(ibqp);
                drop(Box::from_raw(qp));
            }
            crate::set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
            core::ptr::null_mut()
        }
    }
}

/// `ibv_create_qp`.
///
/// # Safety
///
/// libibverbs passes a PD of ours and valid attributes.
pub unsafe extern "C" fn create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    let qp = new_qp();
    let ibqp = qp.cast::<ibv_qp>();
    let mut cmd = ibv_create_qp::default();
    let mut resp = CreateQpRespFull::default();
    // SAFETY: valid PD, QP, attributes and buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_qp(
            pd,
            ibqp,
            attr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: never published.
        drop(unsafe { Box::from_raw(qp) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    // SAFETY: `pd` is valid, and so is its context; libibverbs wrote the granted capacities
    // back into `attr`.
    unsafe { finish_create(qp, (*(*pd).context).cmd_fd, &resp, &(*attr).cap) }
}

/// `ibv_create_qp_ex`: as `ibv_create_qp`, plus the `ibv_wr_*` API when asked for.
///
/// # Safety
///
/// libibverbs passes a context of ours and valid attributes.
pub unsafe extern "C" fn create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: valid attributes.
    let a = unsafe { *attr };
    // Create flags are accepted when none is set (we offer none: the kernel refuses any).
    let known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    let with_ops = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    let with_flags = a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0;
    if a.comp_mask & !known != 0
        || (with_ops && !supported_send_ops(a.send_ops_flags, a.qp_type))
        || (with_flags && a.create_flags != 0)
    {
        crate::set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    }
    let qp = new_qp();
    let mut cmd = ibv_create_qp::default();
    let mut resp = CreateQpRespFull::default();
    // No flag is no flag: the command we send has no field for them, and libibverbs refuses
    // the mask bit for it. A copy without the bit goes down (the caller's attributes may be
    // shared between threads); the granted capacities are copied back.
    let mut sent = a;
    sent.comp_mask &= !IBV_QP_INIT_ATTR_CREATE_FLAGS;
    // SAFETY: valid context, QP (a `verbs_qp` first), attributes and buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_qp_ex(
            ctx,
            &mut (*qp).verbs,
            &mut sent,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    // SAFETY: the caller's attributes, valid and writable (ibv_create_qp_ex reports the
    // capacities granted there).
    unsafe { (*attr).cap = sent.cap };
    if ret != 0 {
        // SAFETY: never published.
        drop(unsafe { Box::from_raw(qp) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    if with_ops {
        // SAFETY: `qp` is ours until returned.
        init_qp_ex(unsafe { &mut (*qp).verbs });
    }
    // SAFETY: valid context; libibverbs wrote the granted capacities back into `attr`.
    unsafe { finish_create(qp, (*ctx).cmd_fd, &resp, &(*attr).cap) }
}

/// `ibv_modify_qp`.
///
/// # Safety
///
/// `qp` is ours; `attr` valid.
pub unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    let mut cmd = ibv_modify_qp::default();
    // SAFETY: as documented; `cmd` is a local of the size passed.
    let ret = unsafe { ibv_cmd_modify_qp(qp, attr, mask, &mut cmd, size_of_val(&cmd)) };
    // SAFETY: `attr` is valid.
    if ret == 0 && mask & IBV_QP_STATE as c_int != 0 && unsafe { (*attr).qp_state } == IBV_QPS_RESET
    {
        // Back to the creation state: the kernel zeroed its consumer indices, we ours.
        // SAFETY: every `ibv_qp` we hand out starts a `Qp`.
        let q = unsafe { &*qp.cast::<Qp>() };
        let _guard = q.rq_lock.lock().unwrap_or_else(|e| e.into_inner());
        q.sq.iter()
            .chain(q.rq.iter())
            .for_each(|ring| ring.set_producer(0));
        // SAFETY: a live QP's CQs are live; the QP's number is fixed.
        unsafe {
            let (send_cq, recv_cq, qpn) = ((*qp).send_cq, (*qp).recv_cq, (*qp).qp_num);
            crate::cq::discard_qp_completions(send_cq, qpn);
            if recv_cq != send_cq {
                crate::cq::discard_qp_completions(recv_cq, qpn);
            }
        }
    }
    ret
}

/// `ibv_query_qp`.
///
/// # Safety
///
/// `qp` is ours; `attr` and `init` valid.
pub unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
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
