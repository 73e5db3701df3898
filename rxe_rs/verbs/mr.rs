// SPDX-License-Identifier: GPL-2.0
//! Memory regions: pinned user memory (or all kernel memory, for DMA MRs) with a key, a PD, an
//! address range and access rights that every local and remote access is checked against.

use crate::{
    kext::{atomic64::AtomicError, ib::Access, kmem, lock::SpinLockIrq, umem::PinnedUserMemory},
    proto::atomic::{AtomicOp, ATOMIC_BYTES},
    uapi::WcStatus,
};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

/// Access flags we implement; the optional range is accepted and ignored.
const SUPPORTED_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::MW_BIND)
    .union(Access::FLUSH_GLOBAL)
    .union(Access::FLUSH_PERSISTENT);

/// Names a protection domain. 64 bits from a counter that only goes up: two PDs never share
/// one, however many a process allocates and frees (a 32-bit counter wraps after 2^32).
pub(crate) type PdId = u64;

/// What backs an MR registered once.
pub(crate) enum Backing {
    /// User pages pinned at registration.
    User(PinnedUserMemory),
    /// A DMA MR for kernel users: addresses are kernel virtual addresses.
    Dma,
}

/// An MR whose key, range and rights are set once, at registration.
pub(crate) struct FixedRegion {
    /// Low byte of the key (lkey == rkey == table index << 8 | this).
    pub(crate) key_byte: u8,
    /// First address of the region, in the address space the user registered (iova).
    pub(crate) iova: u64,
    /// Bytes; `iova + len - 1` does not pass 2^64 - 1 (checked at registration).
    pub(crate) len: u64,
    /// Its rights.
    pub(crate) access: Access,
    pub(crate) backing: Backing,
}

/// What an MR is.
pub(crate) enum MrKind {
    Fixed(FixedRegion),
    /// A fast-registration MR of a kernel consumer: mapped by `map_mr_sg` and `IB_WR_REG_MR`,
    /// invalidated by `IB_WR_LOCAL_INV` or a peer's SEND WITH INVALIDATE, all while the
    /// datapath may be using it: every access checks its state under its lock.
    Fast(Pin<KBox<SpinLockIrq<FastRegion>>>),
}

/// The state of an MR that the datapath uses.
pub(crate) struct MrInner {
    /// The PD it belongs to (QPs may only use MRs of their own PD).
    pub(crate) pd: PdId,
    pub(crate) kind: MrKind,
    /// Memory windows bound to it, or [`DEREGISTERED`]: an MR with windows bound cannot be
    /// deregistered (IBA 10.6.7.2.6), and none binds to one being deregistered.
    windows: AtomicU32,
}

/// [`MrInner::windows`] of an MR being deregistered.
const DEREGISTERED: u32 = 1 << 31;

/// Why an access to an MR was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessError {
    /// Outside `[iova, iova + len)`.
    OutOfBounds,
    /// The MR lacks the needed right, belongs to another PD, or its key is no longer valid.
    Denied,
    /// An atomic's 8 bytes are not aligned in memory (the responder NAKs it as an invalid
    /// request, not as an access error).
    Misaligned,
}

impl From<AtomicError> for AccessError {
    fn from(e: AtomicError) -> Self {
        match e {
            AtomicError::Misaligned => AccessError::Misaligned,
            AtomicError::OutOfBounds => AccessError::OutOfBounds,
        }
    }
}

/// A QP's access to its own MRs (gather, scatter) that is refused completes its WQE with a
/// local protection error, whichever check refused it. (Remote accesses, by an rkey, are NAKed
/// as remote access errors: the responder maps those itself.)
impl From<AccessError> for WcStatus {
    fn from(_: AccessError) -> Self {
        WcStatus::LocProtErr
    }
}

/// The offset of `[addr, addr + len)` in a region of `len` bytes at `iova`.
pub(crate) fn offset_in(
    iova: u64,
    region_len: u64,
    addr: u64,
    len: u64,
) -> Result<u64, AccessError> {
    let offset = addr.checked_sub(iova).ok_or(AccessError::OutOfBounds)?;
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(offset),
        _ => Err(AccessError::OutOfBounds),
    }
}

impl FixedRegion {
    fn check(&self, pd_ok: bool, addr: u64, len: u64, rights: Access) -> Result<u64, AccessError> {
        if !pd_ok || !self.access.contains(rights) {
            return Err(AccessError::Denied);
        }
        offset_in(self.iova, self.len, addr, len)
    }

    fn copy(&self, addr: u64, offset: u64, buf: Buf<'_>) -> Result<(), AccessError> {
        let offset = usize::try_from(offset).map_err(|_| AccessError::OutOfBounds)?;
        if let Buf::Atomic(op, orig) = buf {
            *orig = match &self.backing {
                Backing::User(memory) => memory.atomic(offset, op),
                Backing::Dma => kmem::atomic(addr, op),
            }?;
            return Ok(());
        }
        match (&self.backing, buf) {
            (Backing::User(memory), Buf::Out(out)) => memory.read(offset, out),
            (Backing::User(memory), Buf::In(data)) => memory.write(offset, data),
            (Backing::Dma, Buf::Out(out)) => kmem::read(addr, out).map_err(|()| EFAULT),
            (Backing::Dma, Buf::In(data)) => kmem::write(addr, data).map_err(|()| EFAULT),
            (_, Buf::Atomic(..)) => Ok(()), // executed above
        }
        .map_err(|_| AccessError::OutOfBounds)
    }
}

/// Where a fast-registration MR stands (IBA 10.6.1.1: "free" and "valid"; rdma_rxe's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FastState {
    /// Allocated or invalidated: every access by its key fails.
    Free,
    /// Registered by `IB_WR_REG_MR`.
    Valid,
}

/// A fast-registration MR's mapping, key and state.
pub(crate) struct FastRegion {
    pub(crate) state: FastState,
    /// Low byte of the key the last registration set (the index part never changes).
    pub(crate) key_byte: u8,
    /// The range and rights of the current registration.
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    /// log2 of the page size `map_mr_sg` mapped with.
    page_shift: u32,
    /// Where the first byte lies in the first page.
    first_offset: u64,
    /// Kernel virtual addresses of the pages (page-aligned): the first `npages` are mapped.
    pages: KVec<u64>,
    npages: usize,
}

/// Smallest and largest page sizes `map_mr_sg` accepts.
const MIN_PAGE_SHIFT: u32 = 9;
const MAX_PAGE_SHIFT: u32 = 31;

impl FastRegion {
    /// A free MR that can map up to `max_pages` pages. Process context.
    pub(crate) fn new(key_byte: u8, max_pages: u32) -> Result<Self> {
        Ok(Self {
            state: FastState::Free,
            key_byte,
            iova: 0,
            len: 0,
            access: Access::NONE,
            page_shift: 12,
            first_offset: 0,
            pages: KVec::from_elem(0, max_pages as usize, GFP_KERNEL)?,
            npages: 0,
        })
    }

    /// Starts a new mapping with pages of `page_size` bytes (`map_mr_sg`).
    pub(crate) fn begin_map(&mut self, page_size: u32) -> Result {
        if !page_size.is_power_of_two()
            || !(MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT).contains(&page_size.trailing_zeros())
        {
            return Err(EINVAL);
        }
        self.page_shift = page_size.trailing_zeros();
        self.npages = 0;
        Ok(())
    }

    /// Adds the next page, at kernel virtual address `addr` (`ib_sg_to_pages`'s `set_page`).
    pub(crate) fn add_page(&mut self, addr: u64) -> Result {
        let slot = self.pages.get_mut(self.npages).ok_or(ENOMEM)?;
        *slot = addr;
        self.npages += 1;
        Ok(())
    }

    /// Ends the mapping: `iova` is where the core says it starts.
    pub(crate) fn end_map(&mut self, iova: u64) {
        self.first_offset = iova & ((1u64 << self.page_shift) - 1);
    }

    /// `IB_WR_REG_MR`: makes the mapping valid under key byte `key_byte` for `[iova, iova +
    /// len)` with `access`. Only a free MR can be registered, and only within its pages.
    pub(crate) fn register(&mut self, key_byte: u8, iova: u64, len: u64, access: Access) -> Result {
        let mapped = (self.npages as u64)
            .checked_shl(self.page_shift)
            .and_then(|bytes| bytes.checked_sub(self.first_offset))
            .ok_or(EINVAL)?;
        // (Its pages are not checked for persistent memory: no FLUSH for persistence.)
        if self.state != FastState::Free
            || len > mapped
            || iova.checked_add(len.saturating_sub(1)).is_none()
            || check_access(access).is_err()
            || access.contains(Access::FLUSH_PERSISTENT)
        {
            return Err(EINVAL);
        }
        self.state = FastState::Valid;
        self.key_byte = key_byte;
        self.iova = iova;
        self.len = len;
        self.access = access;
        Ok(())
    }

    fn check(
        &self,
        key: u32,
        pd_ok: bool,
        addr: u64,
        len: u64,
        rights: Access,
    ) -> Result<u64, AccessError> {
        if self.state != FastState::Valid
            || self.key_byte != key as u8
            || !pd_ok
            || !self.access.contains(rights)
        {
            return Err(AccessError::Denied);
        }
        offset_in(self.iova, self.len, addr, len)
    }

    /// Copies at `offset` of the registration, page by page (an atomic's 8 bytes, aligned,
    /// never cross a page).
    fn copy(&self, offset: u64, mut buf: Buf<'_>) -> Result<(), AccessError> {
        let page_size = 1u64 << self.page_shift;
        let mut at = offset
            .checked_add(self.first_offset)
            .ok_or(AccessError::OutOfBounds)?;
        if let Buf::Atomic(op, orig) = buf {
            let page =
                usize::try_from(at >> self.page_shift).map_err(|_| AccessError::OutOfBounds)?;
            let base = *self.pages[..self.npages]
                .get(page)
                .ok_or(AccessError::OutOfBounds)?;
            let kva = base
                .checked_add(at & (page_size - 1))
                .ok_or(AccessError::OutOfBounds)?;
            *orig = kmem::atomic(kva, op)?;
            return Ok(());
        }
        let mut done = 0usize;
        while done < buf.len() {
            let page =
                usize::try_from(at >> self.page_shift).map_err(|_| AccessError::OutOfBounds)?;
            let base = *self.pages[..self.npages]
                .get(page)
                .ok_or(AccessError::OutOfBounds)?;
            let in_page = at & (page_size - 1);
            let n = usize::try_from(page_size - in_page)
                .map_or(buf.len() - done, |n| n.min(buf.len() - done));
            let kva = base.checked_add(in_page).ok_or(AccessError::OutOfBounds)?;
            match &mut buf {
                Buf::Out(out) => kmem::read(kva, &mut out[done..done + n]),
                Buf::In(data) => kmem::write(kva, &data[done..done + n]),
                Buf::Atomic(..) => Ok(()), // executed above
            }
            .map_err(|()| AccessError::OutOfBounds)?;
            done += n;
            at = at.checked_add(n as u64).ok_or(AccessError::OutOfBounds)?;
        }
        Ok(())
    }
}

/// What an access does with the bytes: copies out or in, or an atomic on 8 of them.
pub(crate) enum Buf<'a> {
    /// Out of the MR.
    Out(&'a mut [u8]),
    /// Into the MR.
    In(&'a [u8]),
    /// Executes the operation and stores the original value.
    Atomic(AtomicOp, &'a mut u64),
}

impl Buf<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Buf::Out(b) => b.len(),
            Buf::In(b) => b.len(),
            Buf::Atomic(..) => ATOMIC_BYTES as usize,
        }
    }
}

impl MrInner {
    /// An MR of PD `pd`, with no window bound.
    pub(crate) fn new(pd: PdId, kind: MrKind) -> Self {
        Self {
            pd,
            kind,
            windows: AtomicU32::new(0),
        }
    }

    /// Counts a window bound to it; false if it is being deregistered.
    pub(crate) fn hold_window(&self) -> bool {
        self.windows
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n & DEREGISTERED == 0).then(|| n + 1)
            })
            .is_ok()
    }

    /// A window bound to it was unbound.
    pub(crate) fn release_window(&self) {
        self.windows.fetch_sub(1, Ordering::AcqRel);
    }

    /// Marks it as being deregistered: EBUSY while windows are bound to it.
    pub(crate) fn begin_dereg(&self) -> Result {
        self.windows
            .compare_exchange(0, DEREGISTERED, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(|_| EBUSY)
    }

    /// Ends what [`Self::begin_dereg`] began, for a deregistration (or change) that failed.
    pub(crate) fn abort_dereg(&self) {
        self.windows.store(0, Ordering::Release);
    }

    /// Its rights, range and backing if it is registered once (not fast registration).
    pub(crate) fn fixed(&self) -> Option<&FixedRegion> {
        match &self.kind {
            MrKind::Fixed(r) => Some(r),
            MrKind::Fast(_) => None,
        }
    }

    /// The low byte of its key now.
    pub(crate) fn key_byte(&self) -> u8 {
        match &self.kind {
            MrKind::Fixed(r) => r.key_byte,
            MrKind::Fast(f) => f.lock().key_byte,
        }
    }

    /// Whether `key` names this MR now (its table index was matched by the lookup).
    pub(crate) fn key_matches(&self, key: u32) -> bool {
        match &self.kind {
            MrKind::Fixed(r) => r.key_byte == key as u8,
            MrKind::Fast(f) => {
                let f = f.lock();
                f.state == FastState::Valid && f.key_byte == key as u8
            }
        }
    }

    /// Checks an access by `key` of `len` bytes at `addr` needing `rights` from a QP in PD
    /// `pd`, then copies (`buf`) if it is for bytes. The fast-registration MR is checked and
    /// copied under one hold of its lock: an invalidation waits for the copy, and none after
    /// it gets through.
    pub(crate) fn access(
        &self,
        key: u32,
        pd: PdId,
        addr: u64,
        len: u64,
        rights: Access,
        buf: Option<Buf<'_>>,
    ) -> Result<(), AccessError> {
        let pd_ok = pd == self.pd;
        match &self.kind {
            MrKind::Fixed(r) => {
                let offset = r.check(pd_ok, addr, len, rights)?;
                buf.map_or(Ok(()), |buf| r.copy(addr, offset, buf))
            }
            MrKind::Fast(f) => {
                let f = f.lock();
                let offset = f.check(key, pd_ok, addr, len, rights)?;
                buf.map_or(Ok(()), |buf| f.copy(offset, buf))
            }
        }
    }

    /// Deregistration of a fast-registration MR: frees it (no access gets through any more)
    /// and returns true; false for any other MR.
    pub(crate) fn free_fast(&self) -> bool {
        let MrKind::Fast(f) = &self.kind else {
            return false;
        };
        f.lock().state = FastState::Free;
        true
    }

    /// `IB_WR_LOCAL_INV` or a peer's SEND WITH INVALIDATE of `key` by a QP in PD `pd`: only a
    /// fast-registration MR of that PD, named by its current key, can be invalidated.
    pub(crate) fn invalidate(&self, key: u32, pd: PdId) -> Result {
        let MrKind::Fast(f) = &self.kind else {
            return Err(EINVAL);
        };
        let mut f = f.lock();
        if pd != self.pd || f.key_byte != key as u8 {
            return Err(EINVAL);
        }
        f.state = FastState::Free;
        Ok(())
    }
}

/// An MR as a lookup by key found it: each access checks that the key still names it.
pub(crate) struct KeyedMr {
    pub(crate) mr: Arc<MrInner>,
    pub(crate) key: u32,
}

impl KeyedMr {
    /// Copies `out.len()` bytes at `addr` out of the MR, for a QP in PD `pd` that needs `rights`
    /// ([`Access::NONE`] for local reads).
    pub(crate) fn read(
        &self,
        pd: PdId,
        addr: u64,
        out: &mut [u8],
        rights: Access,
    ) -> core::result::Result<(), AccessError> {
        let len = out.len() as u64;
        self.mr
            .access(self.key, pd, addr, len, rights, Some(Buf::Out(out)))
    }

    /// Copies `data` into the MR at `addr`, for a QP in PD `pd` that needs `rights`.
    pub(crate) fn write(
        &self,
        pd: PdId,
        addr: u64,
        data: &[u8],
        rights: Access,
    ) -> core::result::Result<(), AccessError> {
        self.mr.access(
            self.key,
            pd,
            addr,
            data.len() as u64,
            rights,
            Some(Buf::In(data)),
        )
    }
}

/// A registered MR as the verbs layer holds it: the region itself lives in the device's key
/// table (and in operations in flight) until deregistration removes it. A fast-registration
/// MR is also held here, for `map_mr_sg` to reach without a table lookup per page.
pub(crate) struct RxeMr {
    pub(crate) fast: Option<Arc<MrInner>>,
}

impl RxeMr {
    /// The mapping of a fast-registration MR, locked.
    pub(crate) fn fast_region(
        &self,
    ) -> Result<kernel::sync::lock::Guard<'_, FastRegion, crate::kext::lock::SpinLockIrqBackend>>
    {
        match self.fast.as_deref().map(|mr| &mr.kind) {
            Some(MrKind::Fast(f)) => Ok(f.lock()),
            _ => Err(EINVAL),
        }
    }
}

/// Validates the range of a new MR: not empty, not too large, and its last byte within the
/// 64-bit address space (a range that wraps would make every bounds check lie; one ending at
/// 2^64 itself is fine).
pub(crate) fn check_range(iova: u64, len: u64, max: u64) -> Result {
    if len == 0 || len > max || iova.checked_add(len - 1).is_none() {
        return Err(EINVAL);
    }
    Ok(())
}

/// Validates MR access flags as rdma_rxe does (after the core's own checks).
pub(crate) fn check_access(flags: Access) -> Result {
    if !flags.within(SUPPORTED_ACCESS | Access::OPTIONAL_RANGE) {
        return Err(crate::kext::errno::eopnotsupp());
    }
    Ok(())
}

/// An MR that a peer may FLUSH for persistence must be on persistent memory, and is then
/// written through the CPU caches (see `PinnedUserMemory::make_persistent`).
pub(crate) fn check_persistence(access: Access, memory: &mut PinnedUserMemory) -> Result {
    if access.contains(Access::FLUSH_PERSISTENT) {
        memory.make_persistent()?;
    }
    Ok(())
}

/// The key of table index `index`: a random low byte makes stale keys unlikely to work.
pub(crate) fn make_key(index: u32, random: u32) -> u32 {
    (index << 8) | (random & 0xff)
}
