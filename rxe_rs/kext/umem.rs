// SPDX-License-Identifier: GPL-2.0
//! User memory pinned for RDMA (`ib_umem`): the pages stay in memory and in place until drop,
//! and the datapath copies bytes in and out of them through temporary kernel mappings.

use super::{
    atomic64::{self, AtomicError},
    bindings, PageCopy,
};
use crate::proto::atomic::{AtomicOp, ATOMIC_BYTES};
use core::ptr::NonNull;
use kernel::{error::from_err_ptr, prelude::*};

const PAGE_SIZE: usize = kernel::page::PAGE_SIZE;

/// Pinned user memory.
///
/// # Invariants
///
/// `umem` is a live `ib_umem` owned by this value; `pages` lists its pinned pages in order and
/// covers `offset + len` bytes.
pub(crate) struct PinnedUserMemory {
    umem: NonNull<bindings::ib_umem>,
    pages: KVVec<NonNull<bindings::page>>,
    /// Offset of the first byte in the first page.
    offset: usize,
    len: usize,
    /// Persistent memory, written through the CPU caches ([`Self::make_persistent`]).
    persistent: bool,
}

impl PinnedUserMemory {
    /// Pins `[addr, addr + len)` of the calling process (with write access when
    /// `access` has IB_ACCESS_LOCAL_WRITE or remote write).
    pub(crate) fn pin(
        dev: *mut bindings::ib_device,
        addr: u64,
        len: u64,
        access: i32,
    ) -> Result<Self> {
        // SAFETY: called from a verb of the process whose memory it is; the core validates the
        // range and accounts the pinned pages.
        let umem =
            from_err_ptr(unsafe { bindings::ib_umem_get(dev, addr as _, len as _, access) })?;
        let umem = NonNull::new(umem).ok_or(ENOMEM)?;
        let mut this = Self {
            umem,
            pages: KVVec::new(),
            offset: (addr as usize) % PAGE_SIZE,
            len: len as usize,
            persistent: false,
        };
        let needed = (this.offset + this.len).div_ceil(PAGE_SIZE);
        this.pages.reserve(needed, super::gfp_user_sized())?;
        let mut raw = KVVec::<*mut bindings::page>::with_capacity(needed, super::gfp_user_sized())?;
        // SAFETY: `raw` has room for `needed` entries and the helper writes at most that many.
        let n =
            unsafe { bindings::rxe_rs_helper_umem_pages(umem.as_ptr(), raw.as_mut_ptr(), needed) };
        if n != needed {
            return Err(EFAULT);
        }
        // SAFETY: the helper initialised `n` entries.
        unsafe { raw.set_len(n) };
        for page in raw.iter() {
            this.pages
                .push(NonNull::new(*page).ok_or(EFAULT)?, super::gfp_user_sized())?;
        }
        Ok(this)
    }

    /// The user address of its first byte.
    pub(crate) fn user_address(&self) -> u64 {
        // SAFETY: a live `ib_umem` (type invariant); `address` never changes after pinning.
        unsafe { (*self.umem.as_ptr()).address as u64 }
    }

    /// Copies between the pinned bytes at `at` and `buf`, page by page.
    fn copy(&self, at: usize, buf: *mut u8, len: usize, to_pages: bool) -> Result {
        let how = match (to_pages, self.persistent) {
            (false, _) => PageCopy::Out,
            (true, false) => PageCopy::In,
            (true, true) => PageCopy::InThrough,
        };
        if at.checked_add(len).map_or(true, |end| end > self.len) {
            return Err(EINVAL);
        }
        let mut pos = self.offset + at;
        let mut done = 0;
        while done < len {
            let in_page = pos % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(len - done);
            let page = self.pages[pos / PAGE_SIZE];
            // SAFETY: the page is pinned (type invariant); `in_page + n` stays in the page and
            // `buf + done` has `n` bytes (caller's slice, bounds checked above).
            unsafe {
                bindings::rxe_rs_helper_page_copy(
                    page.as_ptr(),
                    in_page,
                    buf.add(done).cast(),
                    n,
                    how as i32,
                )
            };
            pos += n;
            done += n;
        }
        if how == PageCopy::InThrough {
            // Durable now, and ordered, whichever CPU executes the FLUSH that follows.
            super::pmem_wmb();
        }
        Ok(())
    }

    /// Executes the atomic `op` on the 8 bytes at offset `at`; returns their original value.
    pub(crate) fn atomic(&self, at: usize, op: AtomicOp) -> Result<u64, AtomicError> {
        if at
            .checked_add(ATOMIC_BYTES as usize)
            .map_or(true, |end| end > self.len)
        {
            return Err(AtomicError::OutOfBounds);
        }
        let pos = self.offset + at;
        let page = self.pages[pos / PAGE_SIZE];
        // SAFETY: the page is pinned (type invariant); `on_page` checks the offset.
        let orig = unsafe { atomic64::on_page(page, pos % PAGE_SIZE, op) }?;
        if self.persistent {
            // SAFETY: as above; `on_page` checked that the 8 bytes lie within the page.
            unsafe {
                bindings::rxe_rs_helper_page_write_back(
                    page.as_ptr(),
                    pos % PAGE_SIZE,
                    ATOMIC_BYTES as usize,
                )
            };
            super::pmem_wmb();
        }
        Ok(orig)
    }

    /// Makes this memory the target of FLUSHes for persistence: every page must be persistent
    /// memory (device DAX on an NVDIMM; EINVAL otherwise, as with rdma_rxe). What was cached
    /// of it so far is written back now, and from here on every byte and atomic placed in it
    /// bypasses or is written back from the CPU caches at once, so a FLUSH for persistence
    /// costs a barrier, however large its range: never a write-back of gigabytes from the
    /// receive softirq. Process context (registration): it yields the CPU as it goes.
    pub(crate) fn make_persistent(&mut self) -> Result {
        for (i, page) in self.pages.iter().enumerate() {
            // SAFETY: a pinned page (type invariant); plain calls.
            unsafe {
                if !bindings::rxe_rs_helper_page_is_pmem(page.as_ptr()) {
                    return Err(EINVAL);
                }
                if i % 256 == 255 {
                    bindings::rxe_rs_helper_cond_resched();
                }
            }
        }
        self.persistent = true;
        self.write_back_all();
        Ok(())
    }

    /// Writes the CPU caches back over all of this memory and waits for it: at registration,
    /// and again once accesses through an MR it replaced are over (`rereg_mr`), since those
    /// may have left cached stores behind. Process context: it yields the CPU as it goes.
    pub(crate) fn write_back_all(&self) {
        for (i, page) in self.pages.iter().enumerate() {
            // SAFETY: a pinned page (type invariant); plain calls.
            unsafe {
                bindings::rxe_rs_helper_page_write_back(page.as_ptr(), 0, PAGE_SIZE);
                if i % 256 == 255 {
                    bindings::rxe_rs_helper_cond_resched();
                }
            }
        }
        super::pmem_wmb();
    }

    /// Whether bytes placed here go around the CPU caches ([`Self::make_persistent`]).
    pub(crate) fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// Copies `out.len()` bytes at offset `at` out of the memory.
    pub(crate) fn read(&self, at: usize, out: &mut [u8]) -> Result {
        self.copy(at, out.as_mut_ptr(), out.len(), false)
    }

    /// Copies `data` into the memory at offset `at`.
    pub(crate) fn write(&self, at: usize, data: &[u8]) -> Result {
        self.copy(at, data.as_ptr().cast_mut(), data.len(), true)
    }
}

impl Drop for PinnedUserMemory {
    fn drop(&mut self) {
        // SAFETY: we own the umem (type invariant); this unpins its pages. May sleep: the
        // datapath only drops MRs in process context.
        unsafe { bindings::ib_umem_release(self.umem.as_ptr()) };
    }
}

// SAFETY: the pages are pinned kernel-wide; copies go through kmap_local on any CPU.
unsafe impl Send for PinnedUserMemory {}
// SAFETY: concurrent copies into the same bytes race like DMA would; no Rust references exist.
unsafe impl Sync for PinnedUserMemory {}

/// A random 32-bit value (key bytes of lkeys and rkeys).
pub(crate) fn random_u32() -> u32 {
    // SAFETY: plain call.
    unsafe { bindings::get_random_u32() }
}
