// SPDX-License-Identifier: GPL-2.0
//! Copies between a packet's payload and the memory a list of SGEs names: the one walk over
//! MRs that the requester (gathering a message), the responder (scattering a SEND into a
//! receive WQE) and the completer (scattering READ responses) share.
//!
//! SGE addresses and lengths come from a process's rings, offsets from packets: every sum is
//! checked, and an address that would wrap past 2^64 is a protection error like any other bad
//! address.
#![deny(clippy::arithmetic_side_effects)]

use crate::{
    kext::ib::Access,
    proto::chunks::Chunks,
    resources::Resources,
    uapi::{Sge, WcStatus},
    verbs::mr::{AccessError, KeyedMr, PdId},
};
use core::ops::Range;

/// Calls `copy(mr, addr, range)` for each piece of the SGE list `sges` that holds the `len`
/// bytes at byte `offset` of the list: `addr` is where the piece starts in `mr`, `range` where
/// it lies within those `len` bytes. Fails with the completion status: `LOC_PROT_ERR` for a
/// key, right or address the MR refuses, `LOC_LEN_ERR` if the list ends first.
fn for_each_piece(
    res: &Resources,
    sges: &[Sge],
    offset: u64,
    len: usize,
    mut copy: impl FnMut(&KeyedMr, u64, Range<usize>) -> Result<(), AccessError>,
) -> Result<(), WcStatus> {
    let mut skip = offset;
    // Bytes still to copy, and where they start in the caller's buffer (`done + left == len`).
    let mut done = 0usize;
    let mut left = len;
    for sge in sges {
        if left == 0 {
            break;
        }
        let sge_len = u64::from(sge.length);
        let Some(in_sge) = sge_len.checked_sub(skip).filter(|&n| n > 0) else {
            skip = skip.saturating_sub(sge_len);
            continue;
        };
        let n = usize::try_from(in_sge).map_or(left, |n| n.min(left));
        let addr = sge.addr.checked_add(skip).ok_or(WcStatus::LocProtErr)?;
        let end = done.checked_add(n).ok_or(WcStatus::LocLenErr)?;
        let mr = res.lookup_mr(sge.lkey).ok_or(WcStatus::LocProtErr)?;
        copy(&mr, addr, done..end)?;
        done = end;
        left = left.saturating_sub(n);
        skip = 0;
    }
    if left == 0 {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// Fills `out` with the bytes at `offset` of the memory `sges` names (a QP in PD `pd` reading
/// its own MRs).
pub(crate) fn gather(
    res: &Resources,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), WcStatus> {
    for_each_piece(res, sges, offset, out.len(), |mr, addr, range| {
        mr.read(pd, addr, &mut out[range], Access::NONE)
    })
}

/// Writes `data` (a packet's payload, maybe in pieces) at `offset` of the memory `sges` names
/// (a QP in PD `pd` writing its own MRs, which must grant local write).
pub(crate) fn scatter(
    res: &Resources,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    data: Chunks<'_>,
) -> Result<(), WcStatus> {
    for_each_piece(res, sges, offset, data.len(), |mr, addr, range| {
        let part = data
            .sub(range.start, range.len())
            .ok_or(AccessError::OutOfBounds)?;
        // Each piece's address from the bytes before it (never the end, which may be 2^64).
        let mut done = 0u64;
        for piece in part.pieces() {
            let at = addr.checked_add(done).ok_or(AccessError::OutOfBounds)?;
            mr.write(pd, at, piece, Access::LOCAL_WRITE)?;
            done = done.saturating_add(piece.len() as u64);
        }
        Ok(())
    })
}
