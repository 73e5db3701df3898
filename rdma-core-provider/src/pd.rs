//! Protection domains.

use crate::ffi::{private::*, verbs::*};
use core::ffi::c_int;
use std::mem::{size_of_val, MaybeUninit};

/// `ibv_alloc_pd`.
///
/// # Safety
///
/// libibverbs passes a context of ours.
pub unsafe extern "C" fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: `ibv_pd` is plain data; libibverbs' command fills it.
    let pd = Box::into_raw(Box::new(unsafe {
        MaybeUninit::<ibv_pd>::zeroed().assume_init()
    }));
    let mut cmd = ibv_alloc_pd::default();
    let mut resp = ib_uverbs_alloc_pd_resp::default();
    // SAFETY: valid context, PD and local buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_alloc_pd(
            ctx,
            pd,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: ours, never published.
        drop(unsafe { Box::from_raw(pd) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    pd
}

/// `ibv_dealloc_pd`.
///
/// # Safety
///
/// `pd` comes from [`alloc_pd`].
pub unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: a PD of ours.
    let ret = unsafe { ibv_cmd_dealloc_pd(pd) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; nobody uses `pd` any more.
        drop(unsafe { Box::from_raw(pd) });
    }
    ret
}
