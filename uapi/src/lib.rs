//! The rxe_rs user ABI: what the kernel module and the libibverbs provider must agree on.
//!
//! Both sides compile this very file (the module through Kbuild with `--cfg MODULE`, the provider
//! as a cargo dependency), so a layout change is seen by both at once. Every struct that crosses
//! the user/kernel boundary is `#[repr(C)]` and its size is pinned by a compile-time assert.
#![cfg_attr(not(MODULE), no_std)]

pub mod cmd;
pub mod device;
pub mod ring;
pub mod wqe;

pub use cmd::*;
pub use device::*;
pub use ring::*;
pub use wqe::*;
