//! Shared receive queues: created, armed, resized and queried through the kernel; their ring
//! is mapped here, and `ibv_post_srq_recv` writes into it as `ibv_post_recv` writes into a QP's
//! RQ (no syscall: an SRQ has no error state whose WQEs the kernel must be told to flush).

use crate::{
    ffi::{private::*, verbs::*},
    post::recv::fill_ring,
    ring::MappedRing,
};
use core::ffi::c_int;
use rxe_rs_uapi::{CreateSrqResp, ModifySrqCmd, ModifySrqResp};
use std::{
    mem::{offset_of, size_of_val, MaybeUninit},
    sync::Mutex,
};

/// Our SRQ: libibverbs' `ibv_srq` first.
#[repr(C)]
pub struct Srq {
    pub ibv: ibv_srq,
    /// The receive ring (we produce); `None` if a resize could not map the new one. The lock
    /// serialises producers and keeps a resize out of a post.
    ring: Mutex<Option<MappedRing>>,
    /// SGEs a WR may carry (what the kernel granted).
    max_sge: u32,
}

const _: () = assert!(offset_of!(Srq, ibv) == 0);

#[repr(C)]
#[derive(Default)]
struct CreateSrqRespFull {
    core: ib_uverbs_create_srq_resp,
    drv: CreateSrqResp,
}

fn srq_of<'a>(ibsrq: *mut ibv_srq) -> &'a Srq {
    // SAFETY: every `ibv_srq` we hand out starts an `Srq` (asserted above).
    unsafe { &*ibsrq.cast::<Srq>() }
}

/// `ibv_create_srq`.
///
/// # Safety
///
/// libibverbs passes a PD of ours and valid attributes.
pub unsafe extern "C" fn create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    let srq = Box::into_raw(Box::new(Srq {
        // SAFETY: plain C data, filled by libibverbs.
        ibv: unsafe { MaybeUninit::zeroed().assume_init() },
        ring: Mutex::new(None),
        max_sge: 0,
    }));
    let ibsrq = srq.cast::<ibv_srq>();
    let mut cmd = ibv_create_srq::default();
    let mut resp = CreateSrqRespFull::default();
    // SAFETY: valid PD, SRQ, attributes and buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_create_srq(
            pd,
            ibsrq,
            attr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp.core,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: never published.
        drop(unsafe { Box::from_raw(srq) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    // SAFETY: `pd` and its context are valid.
    let fd = unsafe { (*(*pd).context).cmd_fd };
    let d = &resp.drv;
    match MappedRing::map(fd, &d.ring, d.log2_slots, d.slot_size) {
        Ok(ring) => {
            // SAFETY: `srq` is ours until returned; libibverbs wrote the granted sizes back
            // into `attr`.
            unsafe {
                *(*srq).ring.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(ring);
                (*srq).max_sge = (*attr).attr.max_sge;
            }
            ibsrq
        }
        Err(e) => {
            // SAFETY: created above: destroy the kernel SRQ, free ours.
            unsafe {
                ibv_cmd_destroy_srq(ibsrq);
                drop(Box::from_raw(srq));
            }
            crate::set_errno(e.raw_os_error().unwrap_or(libc::ENOMEM));
            core::ptr::null_mut()
        }
    }
}

/// The command of modify_srq: core part, then ours.
#[repr(C)]
#[derive(Default)]
struct ModifySrqCmdFull {
    core: ibv_modify_srq,
    drv: ModifySrqCmd,
}

// The kernel reads our part right after the core command.
const _: () = assert!(offset_of!(ModifySrqCmdFull, drv) == 24);

/// `ibv_modify_srq`: arms the limit, or resizes: the kernel moves the WQEs not taken yet to a
/// new ring and tells us where it is (at the address our command names); we map it in place of
/// the old one.
///
/// # Safety
///
/// `ibsrq` is ours; `attr` valid.
pub unsafe extern "C" fn modify_srq(
    ibsrq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let mut cmd = ModifySrqCmdFull::default();
    if mask & IBV_SRQ_MAX_WR as c_int == 0 {
        // SAFETY: as documented; `cmd` is a local of the size passed, the core part first.
        return unsafe {
            ibv_cmd_modify_srq(ibsrq, attr, mask, (&raw mut cmd).cast(), size_of_val(&cmd))
        };
    }
    let srq = srq_of(ibsrq);
    // No post while the ring moves: its WQEs would be left behind in the old one.
    let mut ring = srq.ring.lock().unwrap_or_else(|e| e.into_inner());
    let mut resp = ModifySrqResp::default();
    cmd.drv.resp_addr = &raw mut resp as u64;
    // SAFETY: as documented; `cmd` is a local of the size passed, the core part first, and
    // `resp` outlives the call.
    let ret =
        unsafe { ibv_cmd_modify_srq(ibsrq, attr, mask, (&raw mut cmd).cast(), size_of_val(&cmd)) };
    if ret != 0 {
        return ret;
    }
    // SAFETY: an SRQ of ours has a valid context.
    let fd = unsafe { (*(*ibsrq).context).cmd_fd };
    match MappedRing::map(fd, &resp.ring, resp.log2_slots, resp.slot_size) {
        Ok(new) => {
            *ring = Some(new);
            0
        }
        Err(e) => {
            // The kernel already reads the new ring: without it this SRQ takes no more posts.
            *ring = None;
            e.raw_os_error().unwrap_or(libc::ENOMEM)
        }
    }
}

/// `ibv_query_srq`.
///
/// # Safety
///
/// `srq` is ours; `attr` valid.
pub unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let mut cmd = ibv_query_srq::default();
    // SAFETY: as documented; `cmd` is a local of the size passed.
    unsafe { ibv_cmd_query_srq(srq, attr, &mut cmd, size_of_val(&cmd)) }
}

/// `ibv_destroy_srq` (the kernel refuses while a QP uses it: EBUSY).
///
/// # Safety
///
/// `srq` comes from [`create_srq`].
pub unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: an SRQ of ours.
    let ret = unsafe { ibv_cmd_destroy_srq(srq) };
    if ret == 0 {
        // SAFETY: the kernel SRQ is gone; unmaps the ring.
        drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
    }
    ret
}

/// `ibv_post_srq_recv`: writes receive WQEs into the mapped ring and publishes them.
///
/// # Safety
///
/// `ibsrq` is ours; `wr` is a valid list; `bad` a valid out-pointer.
pub unsafe extern "C" fn post_srq_recv(
    ibsrq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let srq = srq_of(ibsrq);
    let ring = srq.ring.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ring) = ring.as_ref() else {
        // SAFETY: valid out-pointer.
        unsafe { *bad = wr };
        return libc::EINVAL;
    };
    // SAFETY: the caller's list; we produce into the ring under its lock.
    let (ret, failed) = unsafe { fill_ring(ring, wr, srq.max_sge) };
    if ret != 0 {
        // SAFETY: valid out-pointer.
        unsafe { *bad = failed };
    }
    ret
}
