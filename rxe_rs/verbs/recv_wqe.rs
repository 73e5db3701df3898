// SPDX-License-Identifier: GPL-2.0
//! Receive WQEs: the one a message is filling, copied off a QP's RQ or an SRQ. The kernel never
//! works on the ring's copy, which the process may change at any time.

use crate::{
    kext::mmap::{RingIndex, SharedRing},
    limits,
    uapi::{RecvWqe, Sge},
    verbs::mr::PdId,
};
use kernel::prelude::*;

/// Posts a kernel consumer's receive WQE for `wr_id` with the SGE list `sges` into `ring` (an
/// RQ or an SRQ in kernel memory), whose producer index is `*producer`: the caller holds the
/// lock that makes it the ring's only producer. ENOMEM if the ring is full.
pub(crate) fn post_kernel_recv(
    ring: &SharedRing,
    producer: &mut u32,
    wr_id: u64,
    sges: impl Iterator<Item = Sge>,
) -> Result {
    let index = *producer;
    let consumer = ring.load(RingIndex::Consumer);
    if index.wrapping_sub(consumer) >= ring.geometry().slots() {
        return Err(ENOMEM);
    }
    let header = core::mem::size_of::<RecvWqe>();
    let mut n = 0u32;
    for (i, sge) in sges.enumerate() {
        ring.write_at(index, header + i * core::mem::size_of::<Sge>(), &sge)?;
        n += 1;
    }
    ring.write(
        index,
        &RecvWqe {
            wr_id,
            num_sge: n,
            reserved: 0,
        },
    )?;
    *producer = index.wrapping_add(1);
    ring.store(RingIndex::Producer, *producer);
    Ok(())
}

/// A receive WQE taken from the RQ (or SRQ), and how far a message has filled it.
pub(crate) struct RecvInProgress {
    pub(crate) wr_id: u64,
    /// The PD its buffers belong to: the QP's, or its SRQ's.
    pub(crate) pd: PdId,
    pub(crate) sges: [Sge; limits::MAX_SGE as usize],
    pub(crate) num_sge: usize,
    /// Bytes received so far.
    pub(crate) received: u64,
}

/// Why the next receive WQE cannot be used. Only a process writing garbage to its own RQ (or
/// SRQ) gets here: the provider never posts either.
#[derive(Clone, Copy)]
pub(crate) enum RqError {
    /// The indices are inconsistent: nothing in the ring can be trusted.
    BrokenRing,
    /// The WQE is malformed (more SGEs than the QP has); it was taken off the ring with no SGEs.
    BadWqe,
}

/// Copies the receive WQE at `index` of `ring` (one the producer posted) into `recv`; its
/// buffers are checked against `pd` when a message fills them. A WQE with more than `max_sge`
/// SGEs is taken with none, and fails with `BadWqe`.
pub(crate) fn read_recv_wqe(
    ring: &SharedRing,
    index: u32,
    max_sge: u32,
    pd: PdId,
    recv: &mut Option<RecvInProgress>,
) -> core::result::Result<bool, RqError> {
    let wqe: RecvWqe = ring.read(index, 0).map_err(|_| RqError::BrokenRing)?;
    let mut sges = [Sge::default(); limits::MAX_SGE as usize];
    let num_sge = wqe.num_sge as usize;
    let well_formed = num_sge <= max_sge as usize;
    if well_formed {
        for (i, sge) in sges[..num_sge].iter_mut().enumerate() {
            *sge = ring
                .read(
                    index,
                    core::mem::size_of::<RecvWqe>() + i * core::mem::size_of::<Sge>(),
                )
                .map_err(|_| RqError::BrokenRing)?;
        }
    }
    // Only a WQE read whole (or refused whole) becomes the one in progress: a ring too broken
    // to read leaves none, so nothing completes for a WQE still in the ring.
    *recv = Some(RecvInProgress {
        wr_id: wqe.wr_id,
        pd,
        sges,
        num_sge: if well_formed { num_sge } else { 0 },
        received: 0,
    });
    if !well_formed {
        return Err(RqError::BadWqe);
    }
    Ok(true)
}
