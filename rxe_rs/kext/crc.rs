// SPDX-License-Identifier: GPL-2.0
//! The kernel's CRC-32 (`crc32_le`, the same raw register update as `proto::icrc::SoftCrc32`).

use super::bindings;
use crate::proto::icrc::Crc32;

/// `crc32_le`.
pub(crate) struct KernelCrc32;

impl Crc32 for KernelCrc32 {
    fn update(&self, crc: u32, data: &[u8]) -> u32 {
        // SAFETY: reads `data.len()` bytes of a valid slice.
        unsafe { bindings::crc32_le(crc, data.as_ptr(), data.len()) }
    }
}
