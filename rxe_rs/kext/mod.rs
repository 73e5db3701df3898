// SPDX-License-Identifier: GPL-2.0
//! The kernel-extension layer: safe Rust types over the C APIs the `kernel` crate of 6.12 lacks
//! (RDMA core, net devices, UDP tunnels, skbs).
//!
//! This is the only place in the module with FFI calls and `unsafe`; every `unsafe` block says
//! why it is sound. Above it, the driver is plain safe Rust. Objects the C side owns are
//! borrowed as `#[repr(transparent)]` wrappers over [`Opaque`](kernel::types::Opaque);
//! registrations are RAII objects that unregister on drop.

pub(crate) mod atomic64;
mod bindings;
pub(crate) mod crc;
pub(crate) mod errno;
pub(crate) mod ib;
pub(crate) mod kmem;
pub(crate) mod link;
pub(crate) mod local_delivery;
pub(crate) mod lock;
pub(crate) mod mmap;
pub(crate) mod netdev;
pub(crate) mod netns;
pub(crate) mod object;
pub(crate) mod rcu;
pub(crate) mod skb;
pub(crate) mod timer;
pub(crate) mod uapi_bytes;
pub(crate) mod udp_tunnel;
pub(crate) mod umem;
pub(crate) mod work;
pub(crate) mod xmit;

use kernel::{alloc::Flags, init::PinInit, prelude::*, types::Opaque};

/// Allocation flags for memory whose size a process chooses (rings, WQE copies, page lists):
/// charged to its memory cgroup, and a failure is its ENOMEM, not a warning with a stack dump
/// in the kernel log (which any user could otherwise cause at will).
pub(crate) fn gfp_user_sized() -> Flags {
    GFP_KERNEL_ACCOUNT | __GFP_NOWARN
}

/// How `rxe_rs_helper_page_copy` copies (its codes).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum PageCopy {
    /// Out of the page.
    Out = 0,
    /// Into the page.
    In = 1,
    /// Into the page, around the CPU caches (persistent memory).
    InThrough = 2,
}

/// Whether the architecture can write CPU caches back to persistent memory (a FLUSH for
/// persistence can be offered).
pub(crate) fn has_pmem_api() -> bool {
    // SAFETY: a constant of the kernel's configuration.
    unsafe { bindings::rxe_rs_helper_has_pmem_api() }
}

/// Orders and completes this CPU's stores around the caches and cache write-backs
/// (`pmem_wmb`: sfence on x86).
pub(crate) fn pmem_wmb() {
    // SAFETY: a plain call.
    unsafe { bindings::rxe_rs_helper_pmem_wmb() }
}

/// CPUs this system may ever have online (`num_possible_cpus()`): at least 1.
pub(crate) fn possible_cpus() -> u32 {
    // SAFETY: reads a mask fixed at boot; any context.
    unsafe { bindings::rxe_rs_helper_num_possible_cpus() }.max(1)
}

/// Whether the current task may administer networking (`CAP_NET_ADMIN` in the initial user
/// namespace), as the RDMA core asks of who reads a resource's raw or sensitive attributes.
pub(crate) fn current_is_net_admin() -> bool {
    // SAFETY: reads the current task's credentials; process context.
    unsafe { bindings::rxe_rs_helper_capable_net_admin() }
}

/// Like [`Opaque::ffi_init`], for C constructors that can fail (registrations).
pub(crate) fn opaque_try_init<T>(
    init: impl FnOnce(*mut T) -> Result,
) -> impl PinInit<Opaque<T>, Error> {
    // SAFETY: `Opaque<T>` may hold an uninitialised `T`, so whatever `init` leaves in the slot
    // is a valid `Opaque<T>`; on error the slot is simply not used.
    unsafe {
        kernel::init::pin_init_from_closure(move |slot: *mut Opaque<T>| init(Opaque::raw_get(slot)))
    }
}
