// SPDX-License-Identifier: GPL-2.0
//! Memory regions: pinned user memory (or all kernel memory, for DMA MRs) with a key, a PD, an
//! address range and access rights that every local and remote access is checked against.

use crate::{
    kext::{ib::Access, kmem, umem::PinnedUserMemory},
    uapi::WcStatus,
};
use kernel::prelude::*;

/// Access flags we implement; the optional range is accepted and ignored.
const SUPPORTED_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::MW_BIND);

/// Names a protection domain. 64 bits from a counter that only goes up: two PDs never share
/// one, however many a process allocates and frees (a 32-bit counter wraps after 2^32).
pub(crate) type PdId = u64;

/// What backs an MR.
pub(crate) enum Backing {
    /// User pages pinned at registration.
    User(PinnedUserMemory),
    /// A DMA MR for kernel users: addresses are kernel virtual addresses.
    Dma,
}

/// The state of an MR that the datapath uses.
pub(crate) struct MrInner {
    /// Low byte of the key (lkey == rkey == table index << 8 | this).
    pub(crate) key_byte: u8,
    /// The PD it belongs to (QPs may only use MRs of their own PD).
    pub(crate) pd: PdId,
    /// First address of the region, in the address space the user registered (iova).
    pub(crate) iova: u64,
    /// Bytes; `iova + len - 1` does not pass 2^64 - 1 (checked at registration).
    pub(crate) len: u64,
    /// Its rights.
    pub(crate) access: Access,
    pub(crate) backing: Backing,
}

/// Why an access to an MR was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessError {
    /// Outside `[iova, iova + len)`.
    OutOfBounds,
    /// The MR lacks the needed right, or belongs to another PD.
    Denied,
}

/// A QP's access to its own MRs (gather, scatter) that is refused completes its WQE with a
/// local protection error, whichever check refused it. (Remote accesses, by an rkey, are NAKed
/// as remote access errors: the responder maps those itself.)
impl From<AccessError> for WcStatus {
    fn from(_: AccessError) -> Self {
        WcStatus::LocProtErr
    }
}

impl MrInner {
    /// Copies `out.len()` bytes at `addr` out of the MR, for a QP in PD `pd` that needs `rights`
    /// ([`Access::NONE`] for local reads).
    pub(crate) fn read(
        &self,
        pd: PdId,
        addr: u64,
        out: &mut [u8],
        rights: Access,
    ) -> core::result::Result<(), AccessError> {
        let offset = self.check(pd, addr, out.len() as u64, rights)?;
        match &self.backing {
            Backing::User(memory) => memory
                .read(offset, out)
                .map_err(|_| AccessError::OutOfBounds),
            Backing::Dma => kmem::read(addr, out).map_err(|()| AccessError::OutOfBounds),
        }
    }

    /// Copies `data` into the MR at `addr`, for a QP in PD `pd` that needs `rights`.
    pub(crate) fn write(
        &self,
        pd: PdId,
        addr: u64,
        data: &[u8],
        rights: Access,
    ) -> core::result::Result<(), AccessError> {
        let offset = self.check(pd, addr, data.len() as u64, rights)?;
        match &self.backing {
            Backing::User(memory) => memory
                .write(offset, data)
                .map_err(|_| AccessError::OutOfBounds),
            Backing::Dma => kmem::write(addr, data).map_err(|()| AccessError::OutOfBounds),
        }
    }

    /// Checks an access of `len` bytes at `addr` needing `rights` from a QP in PD `pd`, and
    /// returns the offset into the region.
    pub(crate) fn check(
        &self,
        pd: PdId,
        addr: u64,
        len: u64,
        rights: Access,
    ) -> core::result::Result<usize, AccessError> {
        if pd != self.pd || !self.access.contains(rights) {
            return Err(AccessError::Denied);
        }
        let offset = addr
            .checked_sub(self.iova)
            .ok_or(AccessError::OutOfBounds)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(offset as usize),
            _ => Err(AccessError::OutOfBounds),
        }
    }
}

/// A registered MR as the verbs layer holds it: the region itself lives in the device's key
/// table (and in operations in flight) until deregistration removes it.
pub(crate) struct RxeMr;

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

/// The key of table index `index`: a random low byte makes stale keys unlikely to work.
pub(crate) fn make_key(index: u32, random: u32) -> u32 {
    (index << 8) | (random & 0xff)
}
