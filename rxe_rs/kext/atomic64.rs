// SPDX-License-Identifier: GPL-2.0
//! RC atomics on memory the datapath reaches by page (pinned user pages, kernel memory): the
//! CPU's own 64-bit atomics through a temporary mapping, so each is atomic against every other
//! atomic on the same bytes, from any QP, CPU or process, with no lock of ours.

use super::bindings;
use crate::proto::atomic::{AtomicOp, ATOMIC_BYTES};
use core::ptr::NonNull;
use kernel::page::PAGE_SIZE;

/// Why an atomic was not executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicError {
    /// The 8 bytes are not 8-byte aligned in memory (or would cross their page).
    Misaligned,
    /// The address is outside the memory.
    OutOfBounds,
}

/// Executes `op` on the 8 bytes at `offset` of `page`; returns their original value (0 for a
/// write).
///
/// # Safety
///
/// `page` must stay a valid, mapped-able page for the duration of the call (pinned, or part of
/// the linear map).
pub(super) unsafe fn on_page(
    page: NonNull<bindings::page>,
    offset: usize,
    op: AtomicOp,
) -> Result<u64, AtomicError> {
    let size = ATOMIC_BYTES as usize;
    if offset % size != 0 || offset.checked_add(size).map_or(true, |end| end > PAGE_SIZE) {
        return Err(AtomicError::Misaligned);
    }
    // The helper's operation codes.
    let (code, a, b) = match op {
        AtomicOp::CompareSwap { compare, swap } => (0, compare, swap),
        AtomicOp::FetchAdd { add } => (1, add, 0),
        AtomicOp::Write { value } => (2, value, 0),
    };
    // SAFETY: the caller keeps `page` valid; `offset` is aligned and the 8 bytes lie within it.
    Ok(unsafe { bindings::rxe_rs_helper_page_atomic64(page.as_ptr(), offset, code, a, b) })
}
