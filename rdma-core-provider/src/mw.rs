//! Memory windows: allocated and deallocated by the kernel; `ibv_bind_mw` (type 1) posts a
//! BIND_MW work request like any other, and the kernel binds when the QP reaches it.

use crate::ffi::{private::*, verbs::*};
use core::ffi::c_int;
use std::mem::{size_of_val, MaybeUninit};

/// `ibv_alloc_mw`.
///
/// # Safety
///
/// libibverbs passes a PD of ours.
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: `ibv_mw` is plain data; libibverbs' command fills it.
    let mw = Box::into_raw(Box::new(unsafe {
        MaybeUninit::<ibv_mw>::zeroed().assume_init()
    }));
    let mut cmd = ibv_alloc_mw::default();
    let mut resp = ib_uverbs_alloc_mw_resp::default();
    // SAFETY: valid PD, window and local buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_alloc_mw(
            pd,
            mw_type,
            mw,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: ours, never published.
        drop(unsafe { Box::from_raw(mw) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    mw
}

/// `ibv_dealloc_mw`.
///
/// # Safety
///
/// `mw` comes from [`alloc_mw`].
pub unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: a window of ours.
    let ret = unsafe { ibv_cmd_dealloc_mw(mw) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; nobody uses `mw` any more.
        drop(unsafe { Box::from_raw(mw) });
    }
    ret
}

/// The key a bind gives a window: same index, next low byte (`ibv_inc_rkey`).
pub fn next_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_bind_mw` (type 1; libibverbs checked the type, the MR's PD and a range without MR):
/// posts the bind on `qp` and gives the window the new key, as rdma_rxe's provider does. The
/// bind's completion says whether the kernel accepted it.
///
/// # Safety
///
/// libibverbs passes a QP and window of ours and a valid bind.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: valid pointers (the caller's contract); plain data.
    let (bind, rkey) = unsafe { (&*mw_bind, (*mw).rkey) };
    // A type 1 window is never zero based (IBA o10-36.2.2): refused here, not by failing the
    // QP.
    if bind.bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED != 0 {
        return libc::EINVAL;
    }
    // SAFETY: a zeroed WR is a valid empty one.
    let mut wr: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
    wr.wr_id = bind.wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = bind.send_flags;
    wr.__bindgen_anon_2.bind_mw = ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
        mw,
        rkey: next_rkey(rkey),
        bind_info: bind.bind_info,
    };
    let mut bad = core::ptr::null_mut();
    // SAFETY: our QP and a valid one-WR list.
    let ret = unsafe { crate::post::send::post_send(qp, &mut wr, &mut bad) };
    if ret == 0 {
        // SAFETY: a window of ours; the application owns it and does not bind it from two
        // threads at once (the ibverbs contract).
        unsafe { (*mw).rkey = next_rkey(rkey) };
    }
    ret
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_rkey_keeps_the_index() {
        assert_eq!(next_rkey(0x0001_0012), 0x0001_0013);
        assert_eq!(next_rkey(0x0001_00ff), 0x0001_0000);
    }
}
