//! Address handles: created by the kernel, which checks the path and resolves it, and returns
//! the number UD send WQEs name it by. Posting then needs no system call. Also the multicast
//! attachments of UD QPs, which the kernel keeps too.

use crate::ffi::{private::*, verbs::*};
use core::ffi::c_int;
use rxe_rs_uapi::CreateAhResp;
use std::mem::{size_of, MaybeUninit};

/// Our address handle: libibverbs' part first (the pointer it hands back), then the number.
#[repr(C)]
pub struct Ah {
    pub ibv: ibv_ah,
    pub num: u32,
}

/// The core response followed by ours, as the kernel writes them.
#[repr(C)]
#[derive(Default)]
struct CreateAhRespAll {
    base: ib_uverbs_create_ah_resp,
    driver: CreateAhResp,
}

/// `ibv_create_ah`.
///
/// # Safety
///
/// libibverbs passes a PD of ours and a valid attribute.
pub unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let ah = Box::into_raw(Box::new(Ah {
        // SAFETY: `ibv_ah` is plain data; libibverbs fills it.
        ibv: unsafe { MaybeUninit::<ibv_ah>::zeroed().assume_init() },
        num: 0,
    }));
    let mut resp = CreateAhRespAll::default();
    // SAFETY: valid PD, attribute, AH and a local response of the size passed.
    let ret = unsafe {
        ibv_cmd_create_ah(
            pd,
            &raw mut (*ah).ibv,
            attr,
            (&raw mut resp).cast(),
            size_of::<CreateAhRespAll>(),
        )
    };
    // A kernel that returned no number (0) could not be posted to: refuse rather than send
    // every datagram of this AH into a completion error.
    let ret = if ret == 0 && resp.driver.ah_num == 0 {
        // SAFETY: the kernel AH was created just above and is not published.
        unsafe { ibv_cmd_destroy_ah(&raw mut (*ah).ibv) };
        libc::EPROTO
    } else {
        ret
    };
    if ret != 0 {
        // SAFETY: ours, never published.
        drop(unsafe { Box::from_raw(ah) });
        crate::set_errno(ret);
        return core::ptr::null_mut();
    }
    // SAFETY: ours, not yet published.
    unsafe { (*ah).num = resp.driver.ah_num };
    ah.cast()
}

/// `ibv_destroy_ah`.
///
/// # Safety
///
/// `ah` comes from [`create_ah`].
pub unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: an AH of ours.
    let ret = unsafe { ibv_cmd_destroy_ah(ah) };
    if ret == 0 {
        // SAFETY: the kernel object is gone; nobody uses `ah` any more.
        drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
    }
    ret
}

/// The number of an AH of ours (0, which no AH has, for NULL).
///
/// # Safety
///
/// `ah` is NULL or comes from [`create_ah`] and is alive.
pub unsafe fn ah_num(ah: *mut ibv_ah) -> u32 {
    if ah.is_null() {
        return 0;
    }
    // SAFETY: one of ours, alive (the caller's contract).
    unsafe { (*ah.cast::<Ah>()).num }
}

/// `ibv_attach_mcast`: the kernel attaches the QP to the group.
///
/// # Safety
///
/// libibverbs passes a QP of ours and a valid GID.
pub unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { ibv_cmd_attach_mcast(qp, gid, lid) }
}

/// `ibv_detach_mcast`.
///
/// # Safety
///
/// As for [`attach_mcast`].
pub unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { ibv_cmd_detach_mcast(qp, gid, lid) }
}
