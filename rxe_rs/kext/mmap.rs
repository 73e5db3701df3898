// SPDX-License-Identifier: GPL-2.0
//! Kernel memory mapped into one process (the rings): vmalloc'ed and charged to the process's
//! memory cgroup, registered as an
//! `rdma_user_mmap_entry` so that `mmap(2)` on the uverbs fd at [`UserBuffer::mmap_offset`] maps
//! it, and a ring view over it.
//!
//! Lifetime: the entry holds the buffer. Dropping the [`UserBuffer`] removes the entry; the
//! core frees it (our `mmap_free`) once no mmap(2) call is using it. Pages already mapped by a
//! process hold their own references (`vm_insert_page`), so a process that keeps a mapping
//! after destroying the object (or after the device was disassociated from it) only ever sees
//! memory nobody else uses.

use super::{bindings, object::UContext};
use crate::uapi::{RingGeometry, RING_CONSUMER_OFFSET, RING_FLAGS_OFFSET, RING_PRODUCER_OFFSET};
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{
    prelude::*,
    types::{AsBytes, FromBytes},
};

/// What the core's `rdma_user_mmap_entry` points back to.
#[repr(C)]
struct MmapEntry {
    rdma: bindings::rdma_user_mmap_entry,
    buf: *mut kernel::ffi::c_void,
    /// Bytes of `buf` (whole pages).
    len: usize,
}

/// A zeroed, page-aligned buffer that user space can map once it knows the offset.
///
/// # Invariants
///
/// `entry` is inserted in its ucontext and owns the `len`-byte vmalloc buffer at `base`, which
/// stays valid while this value exists.
pub(crate) struct UserBuffer {
    entry: NonNull<MmapEntry>,
    base: NonNull<u8>,
    len: usize,
}

impl UserBuffer {
    /// Allocates `len` bytes (a multiple of the page size) mappable by `ctx`'s process.
    pub(crate) fn new(ctx: &UContext<'_>, len: usize) -> Result<Self> {
        if len == 0 || len % kernel::page::PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        // SAFETY: plain allocation of zeroed memory, charged to the caller's memory cgroup.
        let buf = unsafe { bindings::rxe_rs_helper_vzalloc_account(len as _) };
        let base = NonNull::new(buf.cast::<u8>()).ok_or(ENOMEM)?;
        let entry = match KBox::new(
            MmapEntry {
                rdma: Default::default(),
                buf,
                len,
            },
            GFP_KERNEL_ACCOUNT,
        ) {
            Ok(e) => KBox::into_raw(e),
            Err(e) => {
                // SAFETY: allocated above, never shared.
                unsafe { bindings::vfree(buf) };
                return Err(e.into());
            }
        };
        // SAFETY: `entry` is a valid, unshared allocation; `ctx` is the caller's live context.
        let ret =
            unsafe { bindings::rdma_user_mmap_entry_insert(ctx.raw, &raw mut (*entry).rdma, len) };
        if ret != 0 {
            // SAFETY: not inserted: both allocations are still ours alone.
            unsafe {
                drop(KBox::from_raw(entry));
                bindings::vfree(buf);
            }
            return Err(Error::from_errno(ret));
        }
        // INVARIANT: inserted, and it owns `buf`.
        Ok(Self {
            entry: NonNull::new(entry).unwrap(),
            base,
            len,
        })
    }

    /// The offset to pass to `mmap(2)`.
    pub(crate) fn mmap_offset(&self) -> u64 {
        // SAFETY: the entry is alive (type invariant); `start_pgoff` is set by the insert.
        let pgoff = unsafe { (*self.entry.as_ptr()).rdma.start_pgoff };
        (pgoff as u64) << kernel::page::PAGE_SHIFT
    }

    /// The size to map.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for UserBuffer {
    fn drop(&mut self) {
        // SAFETY: inserted (type invariant); after this the core may free it at any time and we
        // do not touch it again.
        unsafe { bindings::rdma_user_mmap_entry_remove(&raw mut (*self.entry.as_ptr()).rdma) };
    }
}

// SAFETY: the buffer is plain memory; shared access goes through `SharedRing`.
unsafe impl Send for UserBuffer {}
// SAFETY: as above.
unsafe impl Sync for UserBuffer {}

/// `ib_device_ops.mmap`: maps the entry at the VMA's offset.
///
/// # Safety
///
/// Called by the core with the caller's live context and VMA.
pub(super) unsafe extern "C" fn mmap(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> kernel::ffi::c_int {
    // SAFETY: per the caller; returns a referenced entry whose size matches the VMA, or NULL.
    let entry = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: all our entries are `MmapEntry`s (first field), and the reference keeps it alive.
    let (buf, len) = unsafe {
        (
            (*entry.cast::<MmapEntry>()).buf,
            (*entry.cast::<MmapEntry>()).len,
        )
    };
    // SAFETY: the VMA is the caller's, its mmap lock held for writing; `buf` holds `len` bytes,
    // which is the VMA's size (`rdma_user_mmap_entry_get` checked it).
    let ret = unsafe { insert_pages(vma, buf.cast::<u8>(), len) };
    // SAFETY: drops the reference taken by `rdma_user_mmap_entry_get`.
    unsafe { bindings::rdma_user_mmap_entry_put(entry) };
    ret
}

/// Maps the `len` bytes of vmalloc memory at `buf` into `vma`, page by page (each mapped
/// page takes a reference of its own, so it outlives `vfree` until unmapped).
///
/// # Safety
///
/// `vma` is live with its mmap lock held for writing and spans exactly `len` bytes; `buf` is
/// a vmalloc allocation of at least `len` bytes.
unsafe fn insert_pages(
    vma: *mut bindings::vm_area_struct,
    buf: *mut u8,
    len: usize,
) -> kernel::ffi::c_int {
    // SAFETY: per the caller, the VMA is live and its mmap lock held for writing.
    let start = unsafe {
        bindings::rxe_rs_helper_vma_set_ring_flags(vma);
        (*vma).__bindgen_anon_1.__bindgen_anon_1.vm_start
    };
    let mut offset = 0;
    while offset < len {
        // SAFETY: `offset < len`, inside the allocation; each page of it is a vmalloc page.
        let ret = unsafe {
            let page = bindings::vmalloc_to_page(buf.add(offset).cast());
            bindings::vm_insert_page(vma, start + offset as kernel::ffi::c_ulong, page)
        };
        if ret != 0 {
            return ret;
        }
        offset += kernel::page::PAGE_SIZE;
    }
    0
}

/// `ib_device_ops.mmap_free`: the last reference to an entry is gone.
///
/// # Safety
///
/// Called by the core once per entry, after which the entry is unused.
pub(super) unsafe extern "C" fn mmap_free(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: made by `KBox::into_raw` in `UserBuffer::new` and owning its buffer.
    let entry = unsafe { KBox::from_raw(entry.cast::<MmapEntry>()) };
    // SAFETY: nobody uses the buffer any more (mapped pages hold their own references).
    unsafe { bindings::vfree(entry.buf) };
}

/// Which index of a ring.
#[derive(Clone, Copy)]
pub(crate) enum RingIndex {
    /// Written by the producer.
    Producer,
    /// Written by the consumer.
    Consumer,
    /// The flags word (`uapi::RING_FLAG_*`), written by the kernel only.
    Flags,
}

/// A zeroed, page-aligned buffer only the kernel sees: the rings of kernel consumers' QPs and
/// CQs, in the same layout as the ones user space maps.
///
/// # Invariants
///
/// `base` is a vmalloc allocation (of the ring's mapped size) owned by this value.
struct KernelBuffer {
    base: NonNull<u8>,
}

impl KernelBuffer {
    fn new(len: usize) -> Result<Self> {
        // SAFETY: plain allocation of zeroed memory.
        let buf = unsafe { bindings::rxe_rs_helper_vzalloc_account(len as _) };
        let base = NonNull::new(buf.cast::<u8>()).ok_or(ENOMEM)?;
        // INVARIANT: a fresh allocation, ours.
        Ok(Self { base })
    }
}

impl Drop for KernelBuffer {
    fn drop(&mut self) {
        // SAFETY: ours (type invariant), not used after this.
        unsafe { bindings::vfree(self.base.as_ptr().cast()) };
    }
}

// SAFETY: plain memory; shared access goes through `SharedRing`.
unsafe impl Send for KernelBuffer {}
// SAFETY: as above.
unsafe impl Sync for KernelBuffer {}

/// Where a ring lives.
enum RingMemory {
    /// Mappable by a process, which may write anything into it at any time.
    User(UserBuffer),
    /// Kernel memory, for kernel consumers.
    Kernel(KernelBuffer),
}

/// A ring in a [`UserBuffer`] shared with user space, or in kernel memory for a kernel
/// consumer (written by the driver's own verbs, the same way).
///
/// The process can write anything at any time into the whole buffer, so the kernel only ever
/// copies slots in and out (never hands out references into it) and validates what it copies.
pub(crate) struct SharedRing {
    mem: RingMemory,
    geometry: RingGeometry,
}

impl SharedRing {
    /// A ring of `geometry` in a new buffer mappable by `ctx`'s process.
    pub(crate) fn new(ctx: &UContext<'_>, geometry: RingGeometry) -> Result<Self> {
        let buf = UserBuffer::new(ctx, geometry.mapped_bytes(kernel::page::PAGE_SIZE))?;
        Ok(Self {
            mem: RingMemory::User(buf),
            geometry,
        })
    }

    /// A ring of `geometry` in kernel memory, for a kernel consumer's QP or CQ.
    pub(crate) fn new_kernel(geometry: RingGeometry) -> Result<Self> {
        let buf = KernelBuffer::new(geometry.mapped_bytes(kernel::page::PAGE_SIZE))?;
        Ok(Self {
            mem: RingMemory::Kernel(buf),
            geometry,
        })
    }

    /// Its shape.
    pub(crate) fn geometry(&self) -> RingGeometry {
        self.geometry
    }

    /// Where user space maps it: its mmap offset and size (`None` for a kernel ring).
    pub(crate) fn mmap_info(&self) -> Option<(u64, u64)> {
        match &self.mem {
            RingMemory::User(buf) => Some((buf.mmap_offset(), buf.len() as u64)),
            RingMemory::Kernel(_) => None,
        }
    }

    fn base(&self) -> NonNull<u8> {
        match &self.mem {
            RingMemory::User(buf) => buf.base,
            RingMemory::Kernel(buf) => buf.base,
        }
    }

    fn index_ref(&self, which: RingIndex) -> &AtomicU32 {
        let offset = match which {
            RingIndex::Producer => RING_PRODUCER_OFFSET,
            RingIndex::Consumer => RING_CONSUMER_OFFSET,
            RingIndex::Flags => RING_FLAGS_OFFSET,
        };
        // SAFETY: the offsets are 4-byte aligned and inside the buffer (it has at least one
        // page); an `AtomicU32` may alias memory another agent accesses atomically.
        unsafe { &*self.base().as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// Reads the other side's index (acquire: its slot writes are visible afterwards).
    pub(crate) fn load(&self, which: RingIndex) -> u32 {
        self.index_ref(which).load(Ordering::Acquire)
    }

    /// Publishes our index (release: our slot writes are visible before it).
    pub(crate) fn store(&self, which: RingIndex, value: u32) {
        self.index_ref(which).store(value, Ordering::Release)
    }

    fn slot_ptr(&self, index: u32, offset: usize, len: usize) -> Result<*mut u8> {
        if offset
            .checked_add(len)
            .map_or(true, |end| end > self.geometry.slot_size as usize)
        {
            return Err(EINVAL);
        }
        // SAFETY: `slot_offset` is within the buffer for any index, and `offset + len` within
        // the slot (checked above).
        Ok(unsafe {
            self.base()
                .as_ptr()
                .add(self.geometry.slot_offset(index) + offset)
        })
    }

    /// Copies `out.len()` bytes at `offset` of slot `index` out of the ring.
    pub(crate) fn read_bytes(&self, index: u32, offset: usize, out: &mut [u8]) -> Result {
        let src = self.slot_ptr(index, offset, out.len())?;
        // SAFETY: in bounds (checked); the user may be writing concurrently, in which case we
        // copy garbage, which the caller validates like any other input.
        unsafe { core::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies a `T` at `offset` of slot `index` out of the ring.
    pub(crate) fn read<T: FromBytes>(&self, index: u32, offset: usize) -> Result<T> {
        let src = self.slot_ptr(index, offset, core::mem::size_of::<T>())?;
        // SAFETY: in bounds; any bytes are a valid `T` (`FromBytes`).
        Ok(unsafe { core::ptr::read_unaligned(src.cast::<T>()) })
    }

    /// Copies `value` into slot `index`.
    pub(crate) fn write<T: AsBytes>(&self, index: u32, value: &T) -> Result {
        self.write_at(index, 0, value)
    }

    /// Copies `data` to `offset` of slot `index`.
    pub(crate) fn write_bytes(&self, index: u32, offset: usize, data: &[u8]) -> Result {
        let dst = self.slot_ptr(index, offset, data.len())?;
        // SAFETY: in bounds (checked); plain bytes.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Copies slot `index` into slot `to_index` of `to`, a ring of the same slot size (a
    /// resize moving what is queued).
    pub(crate) fn copy_slot(&self, index: u32, to: &SharedRing, to_index: u32) -> Result {
        let len = self.geometry.slot_size as usize;
        let src = self.slot_ptr(index, 0, len)?;
        let dst = to.slot_ptr(to_index, 0, len)?;
        // SAFETY: both in bounds (checked against each ring's slot size); `copy` allows the
        // two to overlap. A user writing the source meanwhile makes the copy garbage, which is
        // validated when the slot is read, like anything in a user ring.
        unsafe { core::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Copies `value` to `offset` of slot `index`.
    pub(crate) fn write_at<T: AsBytes>(&self, index: u32, offset: usize, value: &T) -> Result {
        let dst = self.slot_ptr(index, offset, core::mem::size_of::<T>())?;
        // SAFETY: in bounds; `T: AsBytes` is plain initialised bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (value as *const T).cast::<u8>(),
                dst,
                core::mem::size_of::<T>(),
            )
        };
        Ok(())
    }
}
