//! Memory regions: pinned and keyed by the kernel.

use crate::ffi::{private::*, verbs::*};
use core::ffi::{c_int, c_void};
use std::mem::{size_of_val, MaybeUninit};

/// `ibv_reg_mr`.
///
/// # Safety
///
/// libibverbs passes a PD of ours.
pub unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: plain C data, filled by the command.
    let vmr = Box::into_raw(Box::new(unsafe {
        MaybeUninit::<verbs_mr>::zeroed().assume_init()
    }));
    let mut cmd = ibv_reg_mr::default();
    let mut resp = ib_uverbs_reg_mr_resp::default();
    // SAFETY: valid PD and buffers of the sizes passed.
    let ret = unsafe {
        ibv_cmd_reg_mr(
            pd,
            addr,
            len,
            hca_va,
            access,
            vmr,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: never published.
        drop(unsafe { Box::from_raw(vmr) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    vmr.cast()
}

/// `ibv_dereg_mr`.
///
/// # Safety
///
/// `vmr` comes from [`reg_mr`].
pub unsafe extern "C" fn dereg_mr(vmr: *mut verbs_mr) -> c_int {
    // SAFETY: an MR of ours.
    let ret = unsafe { ibv_cmd_dereg_mr(vmr) };
    if ret == 0 {
        // SAFETY: the kernel object is gone.
        drop(unsafe { Box::from_raw(vmr) });
    }
    ret
}

/// `ibv_rereg_mr`: the kernel changes the MR in place (its keys stay); libibverbs checked the
/// flags and updates its own view of the MR.
///
/// # Safety
///
/// `vmr` comes from [`reg_mr`]; `pd` is ours when the flags change it.
pub unsafe extern "C" fn rereg_mr(
    vmr: *mut verbs_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    let mut cmd = ibv_rereg_mr::default();
    let mut resp = ib_uverbs_rereg_mr_resp::default();
    // SAFETY: an MR of ours and local buffers of the sizes passed.
    unsafe {
        ibv_cmd_rereg_mr(
            vmr,
            flags as u32,
            addr,
            len,
            addr as u64,
            access,
            pd,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        )
    }
}
