//! The per-process device context and the verbs that only query.

use crate::ffi::{private::*, verbs::*};
use core::ffi::{c_int, c_void};
use rxe_rs_uapi::RXE_RS_DRIVER_ID;
use std::mem::{offset_of, size_of, MaybeUninit};

/// Our context: libibverbs' `verbs_context` plus our state (none yet).
#[repr(C)]
pub struct Context {
    pub verbs: verbs_context,
}

static CONTEXT_OPS: verbs_context_ops = verbs_context_ops {
    free_context: Some(free_context),
    query_device_ex: Some(query_device_ex),
    query_port: Some(query_port),
    query_rt_values: Some(query_rt_values),
    alloc_pd: Some(crate::pd::alloc_pd),
    dealloc_pd: Some(crate::pd::dealloc_pd),
    create_cq: Some(crate::cq::create_cq),
    create_cq_ex: Some(crate::cq_ex::create_cq_ex),
    destroy_cq: Some(crate::cq::destroy_cq),
    poll_cq: Some(crate::cq::poll_cq),
    req_notify_cq: Some(crate::cq::req_notify_cq),
    resize_cq: Some(crate::cq::resize_cq),
    reg_mr: Some(crate::mr::reg_mr),
    dereg_mr: Some(crate::mr::dereg_mr),
    rereg_mr: Some(crate::mr::rereg_mr),
    alloc_mw: Some(crate::mw::alloc_mw),
    dealloc_mw: Some(crate::mw::dealloc_mw),
    bind_mw: Some(crate::mw::bind_mw),
    create_qp: Some(crate::qp::create_qp),
    modify_qp: Some(crate::qp::modify_qp),
    query_qp: Some(crate::qp::query_qp),
    destroy_qp: Some(crate::qp::destroy_qp),
    post_recv: Some(crate::post::recv::post_recv),
    post_send: Some(crate::post::send::post_send),
    create_qp_ex: Some(crate::qp::create_qp_ex),
    create_srq: Some(crate::srq::create_srq),
    modify_srq: Some(crate::srq::modify_srq),
    query_srq: Some(crate::srq::query_srq),
    destroy_srq: Some(crate::srq::destroy_srq),
    post_srq_recv: Some(crate::srq::post_srq_recv),
    create_ah: Some(crate::ah::create_ah),
    destroy_ah: Some(crate::ah::destroy_ah),
    attach_mcast: Some(crate::ah::attach_mcast),
    detach_mcast: Some(crate::ah::detach_mcast),
    ..ZERO_OPS
};

// `Default::default()` is not const; every slot not named above stays NULL (EOPNOTSUPP stub).
// SAFETY: `verbs_context_ops` is all nullable function pointers, for which zero is `None`.
const ZERO_OPS: verbs_context_ops = unsafe { MaybeUninit::zeroed().assume_init() };

/// `verbs_device_ops.alloc_context`: opens a context on the uverbs fd `cmd_fd`.
///
/// # Safety
///
/// Called by libibverbs with a device from [`crate::device::alloc_device`] and an open fd.
pub unsafe extern "C" fn alloc_context(
    ibdev: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    // SAFETY: libibverbs allocates `size_of::<Context>()` zeroed bytes, initialises the
    // `verbs_context` at the given offset and returns the start (or NULL with errno set).
    let ctx = unsafe {
        _verbs_init_and_alloc_context(
            ibdev,
            cmd_fd,
            size_of::<Context>(),
            offset_of!(Context, verbs) as *mut verbs_context,
            RXE_RS_DRIVER_ID,
        )
    }
    .cast::<Context>();
    if ctx.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: `ctx` is a valid, initialised context; `cmd` and `resp` are local buffers sized as
    // we pass them.
    unsafe {
        let verbs = &raw mut (*ctx).verbs;
        let mut cmd = ibv_get_context::default();
        let mut resp = ib_uverbs_get_context_resp::default();
        if ibv_cmd_get_context(
            verbs,
            &mut cmd,
            size_of_val(&cmd),
            &mut resp,
            size_of_val(&resp),
        ) != 0
        {
            let err = *libc::__errno_location();
            verbs_uninit_context(verbs);
            libc::free(ctx.cast());
            *libc::__errno_location() = err;
            return core::ptr::null_mut();
        }
        verbs_set_ops(verbs, &CONTEXT_OPS);
        verbs
    }
}

/// `free_context`.
///
/// # Safety
///
/// `ibctx` is a context from [`alloc_context`], not used afterwards.
unsafe extern "C" fn free_context(ibctx: *mut ibv_context) {
    let ctx = to_context(ibctx);
    // SAFETY: undoes `alloc_context`: libibverbs' part, then the calloc'ed memory.
    unsafe {
        verbs_uninit_context(&raw mut (*ctx).verbs);
        libc::free(ctx.cast());
    }
}

/// The `Context` around an `ibv_context` (which is the last member of `verbs_context`).
fn to_context(ibctx: *mut ibv_context) -> *mut Context {
    let offset = offset_of!(Context, verbs) + offset_of!(verbs_context, context);
    ibctx.cast::<u8>().wrapping_sub(offset).cast()
}

/// `ibv_query_device_ex` (and, through it, `ibv_query_device`): everything comes from the kernel.
///
/// # Safety
///
/// libibverbs passes a context of ours and buffers of the stated sizes.
unsafe extern "C" fn query_device_ex(
    ibctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let mut resp = ib_uverbs_ex_query_device_resp::default();
    let mut resp_size = size_of_val(&resp);
    // SAFETY: arguments as documented; `resp` is a local of the size we pass.
    let ret = unsafe {
        ibv_cmd_query_device_any(ibctx, input, attr, attr_size, &mut resp, &mut resp_size)
    };
    if ret != 0 {
        return ret;
    }
    // `fw_ver` is major.minor.sub_minor in 64 bits, as the other providers print it.
    let fw = resp.base.fw_ver;
    let text = format!("{}.{}.{}", fw >> 32, (fw >> 16) & 0xffff, fw & 0xffff);
    // SAFETY: `attr` is valid for at least the legacy `ibv_device_attr` (libibverbs guarantees
    // attr_size covers `orig_attr`); `fw_ver` is a 64-byte array.
    unsafe {
        let dst = &mut (*attr).orig_attr.fw_ver;
        let n = text.len().min(dst.len() - 1);
        core::ptr::copy_nonoverlapping(text.as_ptr().cast(), dst.as_mut_ptr(), n);
        dst[n] = 0;
    }
    0
}

/// `ibv_query_rt_values_ex`: with `IBV_VALUES_MASK_RAW_CLOCK`, the device clock now, the one
/// completion timestamps count (`hca_core_clock` 1 GHz): CLOCK_MONOTONIC in nanoseconds, all of
/// it in `tv_nsec` (`tv_sec` 0), as mlx5 reports its cycles. `comp_mask` comes back as what was
/// filled in.
///
/// # Safety
///
/// libibverbs passes a context of ours and a valid `values`.
unsafe extern "C" fn query_rt_values(_ctx: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    // SAFETY: valid, by the contract.
    let v = unsafe { &mut *values };
    let mut filled = 0;
    if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
            return std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
        }
        v.raw_clock.tv_sec = 0;
        v.raw_clock.tv_nsec = now.tv_sec * 1_000_000_000 + now.tv_nsec;
        filled |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    v.comp_mask = filled;
    0
}

/// `ibv_query_port`.
///
/// # Safety
///
/// libibverbs passes a context of ours and a valid `ibv_port_attr`.
unsafe extern "C" fn query_port(
    ibctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    let mut cmd = ibv_query_port::default();
    // SAFETY: arguments as documented; `cmd` is a local of the size we pass.
    unsafe { ibv_cmd_query_port(ibctx, port, attr, &mut cmd, size_of_val(&cmd)) }
}
