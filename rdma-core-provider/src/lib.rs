//! libibverbs provider for rxe_rs devices.
//!
//! libibverbs (rdma-core 44) loads `librxe_rs-rdmav34.so` because `/etc/libibverbs.d/rxe_rs.driver`
//! names it; the ELF constructor below registers our `verbs_device_ops`, and libibverbs then
//! matches our devices by the kernel driver id the module reports ([`RXE_RS_DRIVER_ID`]).
//!
//! Verbs this provider does not implement keep libibverbs' stubs, which fail with `EOPNOTSUPP`.

pub mod ah;
pub mod context;
pub mod cq;
pub mod cq_ex;
pub mod device;
pub mod ffi;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod post;
pub mod qp;
pub mod ring;
pub mod srq;
pub mod wqe;

/// Sets `errno` for verbs that report errors through it (those returning pointers).
pub(crate) fn set_errno(err: i32) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = err.abs() };
}

use ffi::private::*;
use rxe_rs_uapi::{RXE_RS_DRIVER_ID, RXE_RS_UVERBS_ABI_VERSION};

/// Raw pointers in a `static` shared with C, which only reads it.
#[repr(transparent)]
struct SharedWithC<T>(T);
// SAFETY: the wrapped tables are immutable after compilation and only read, by any thread.
unsafe impl<T> Sync for SharedWithC<T> {}

static MATCH_TABLE: SharedWithC<[verbs_match_ent; 2]> = SharedWithC([
    verbs_match_ent {
        driver_data: core::ptr::null(),
        driver_id: RXE_RS_DRIVER_ID as u64,
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_DRIVER_ID,
    },
    verbs_match_ent {
        driver_data: core::ptr::null(),
        driver_id: 0,
        vendor: 0,
        device: 0,
        kind: VERBS_MATCH_SENTINEL,
    },
]);

static DEVICE_OPS: SharedWithC<verbs_device_ops> = SharedWithC(verbs_device_ops {
    name: c"rxe_rs".as_ptr(),
    match_min_abi_version: RXE_RS_UVERBS_ABI_VERSION,
    match_max_abi_version: RXE_RS_UVERBS_ABI_VERSION,
    match_table: &MATCH_TABLE.0 as *const _ as *const verbs_match_ent,
    static_providers: core::ptr::null(),
    match_device: None,
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(device::alloc_device),
    uninit_device: Some(device::uninit_device),
});

/// Registers the provider when libibverbs `dlopen`s us (the constructor rdma-core providers
/// use too).
extern "C" fn register_provider() {
    // SAFETY: the ops table is a valid 'static `verbs_device_ops`.
    unsafe { verbs_register_driver_34(&DEVICE_OPS.0) };
}

#[used]
#[link_section = ".init_array"]
static REGISTER_PROVIDER: extern "C" fn() = register_provider;
