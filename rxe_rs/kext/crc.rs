// SPDX-License-Identifier: GPL-2.0
//! The ICRC's CRC-32 in the kernel: the crypto API's "crc32" (the PCLMULQDQ folding driver on
//! x86, several times faster than the table-driven `crc32_le` of this kernel, and what
//! rdma_rxe uses), or `crc32_le` when no transform can be had. Both are the raw register update
//! of `proto::icrc::SoftCrc32`.

use super::bindings;
use crate::proto::icrc::Crc32;
use core::ptr::NonNull;
use kernel::{c_str, error::from_err_ptr, str::CStr};

/// A CRC-32 engine of one device.
pub(crate) struct KernelCrc32 {
    /// The crypto API transform; `None`: `crc32_le`.
    tfm: Option<NonNull<bindings::crypto_shash>>,
}

// SAFETY: the transform is only read after allocation (each update has its own descriptor
// on the stack, as the crypto API allows for concurrent users of one shash), and it is
// freed by `drop` alone.
unsafe impl Send for KernelCrc32 {}
// SAFETY: as for `Send`.
unsafe impl Sync for KernelCrc32 {}

impl KernelCrc32 {
    /// The crypto API's fastest "crc32" (loads its module if need be: process context), or
    /// `crc32_le` when there is none, or when its state is not the bare 32-bit register the
    /// update helper hands it.
    pub(crate) fn new() -> Self {
        // SAFETY: a NUL-terminated name; returns a transform or an `ERR_PTR`.
        let tfm = from_err_ptr(unsafe {
            bindings::crypto_alloc_shash(c_str!("crc32").as_char_ptr(), 0, 0)
        });
        let engine = Self {
            tfm: tfm.ok().and_then(NonNull::new),
        };
        let usable = engine.tfm.is_some_and(|tfm| {
            // SAFETY: a live transform.
            let state = unsafe { bindings::rxe_rs_helper_crypto_shash_descsize(tfm.as_ptr()) };
            state as usize == core::mem::size_of::<u32>()
        });
        if usable {
            engine
        } else {
            // An unusable transform is freed as `engine` goes.
            Self { tfm: None }
        }
    }

    /// The crypto driver in use ("crc32-pclmul", "crc32-generic"), or "crc32_le".
    pub(crate) fn driver_name(&self) -> &CStr {
        match self.tfm {
            // SAFETY: a live transform; its algorithm's name outlives it.
            Some(tfm) => unsafe {
                CStr::from_char_ptr(bindings::rxe_rs_helper_crypto_shash_driver_name(
                    tfm.as_ptr(),
                ))
            },
            None => c_str!("crc32_le"),
        }
    }

    fn table_driven(crc: u32, data: &[u8]) -> u32 {
        // SAFETY: reads `data.len()` bytes of a valid slice.
        unsafe { bindings::crc32_le(crc, data.as_ptr(), data.len()) }
    }
}

impl Crc32 for KernelCrc32 {
    fn update(&self, crc: u32, data: &[u8]) -> u32 {
        let (Some(tfm), Ok(len)) = (self.tfm, u32::try_from(data.len())) else {
            return Self::table_driven(crc, data);
        };
        let mut out = crc;
        // SAFETY: a live transform; reads `len` bytes of a valid slice, writes `out` only.
        let err = unsafe {
            bindings::rxe_rs_helper_crc32_shash_update(tfm.as_ptr(), &mut out, data.as_ptr(), len)
        };
        if err == 0 {
            out
        } else {
            Self::table_driven(crc, data)
        }
    }
}

impl Drop for KernelCrc32 {
    fn drop(&mut self) {
        if let Some(tfm) = self.tfm {
            // SAFETY: allocated by `new`, freed once, here; no update runs any more (`&mut`).
            unsafe { bindings::rxe_rs_helper_crypto_free_shash(tfm.as_ptr()) };
        }
    }
}
