// SPDX-License-Identifier: GPL-2.0
//! Kernel memory named by kernel virtual address: what a kernel consumer's SGEs point at
//! through a DMA MR on a device without a DMA device (the RDMA core's "virtual DMA": the
//! `ib_dma_*` helpers hand out kernel virtual addresses).

use super::{
    atomic64::{self, AtomicError},
    bindings, PageCopy,
};
use crate::proto::atomic::AtomicOp;
use core::ptr::NonNull;
use kernel::page::PAGE_SIZE;

/// Copies between `buf` and the `len` bytes of kernel memory at `addr`, page by page through
/// `kmap_local`. Fails, copying nothing more, at the first page outside the linear map (vmalloc
/// memory, user or bogus addresses): no address from a kernel consumer is dereferenced
/// unchecked.
fn copy(addr: u64, buf: *mut u8, len: usize, to_kernel: bool) -> Result<(), ()> {
    let mut done = 0usize;
    while done < len {
        let at = addr.checked_add(done as u64).ok_or(())?;
        let in_page = (at % PAGE_SIZE as u64) as usize;
        let n = (PAGE_SIZE - in_page).min(len - done);
        // SAFETY: a lookup that validates `at` before computing its page.
        let page = unsafe { bindings::rxe_rs_helper_kva_page(at) };
        if page.is_null() {
            return Err(());
        }
        // SAFETY: `page` is a valid page of the linear map; `in_page + n` does not pass its
        // end; `buf + done` has `n` bytes (the caller's buffer of `len`).
        unsafe {
            let how = if to_kernel {
                PageCopy::In
            } else {
                PageCopy::Out
            };
            bindings::rxe_rs_helper_page_copy(page, in_page, buf.add(done).cast(), n, how as i32)
        };
        done += n;
    }
    Ok(())
}

/// Copies `out.len()` bytes at kernel virtual address `addr` into `out`.
pub(crate) fn read(addr: u64, out: &mut [u8]) -> Result<(), ()> {
    copy(addr, out.as_mut_ptr(), out.len(), false)
}

/// Copies `data` to kernel virtual address `addr`.
pub(crate) fn write(addr: u64, data: &[u8]) -> Result<(), ()> {
    copy(addr, data.as_ptr().cast_mut(), data.len(), true)
}

/// Executes the atomic `op` on the 8 bytes at kernel virtual address `addr`; returns their
/// original value.
pub(crate) fn atomic(addr: u64, op: AtomicOp) -> Result<u64, AtomicError> {
    // SAFETY: a lookup that validates `addr` before computing its page.
    let page = unsafe { bindings::rxe_rs_helper_kva_page(addr) };
    let page = NonNull::new(page).ok_or(AtomicError::OutOfBounds)?;
    // SAFETY: a page of the linear map; `on_page` checks the offset.
    unsafe { atomic64::on_page(page, (addr % PAGE_SIZE as u64) as usize, op) }
}
