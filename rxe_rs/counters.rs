// SPDX-License-Identifier: GPL-2.0
//! Port counters, shown by `rdma statistic show link DEV/1`.

use crate::kext::ib::StatDesc;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::c_str;

/// One counter.
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    /// Packets that passed validation and reached a QP.
    RcvdPkts,
    /// Dropped: not a well-formed RoCEv2 packet.
    RcvdMalformed,
    /// Dropped: bad ICRC.
    RcvdIcrcErr,
    /// Dropped: no such QP.
    RcvdUnknownQp,
    /// Dropped: the QP is not in RTR or RTS.
    RcvdQpNotReady,
    /// Dropped: an operation the responder does not implement yet.
    RcvdUnsupported,
    /// Dropped: duplicate or out-of-sequence PSN.
    RcvdSeqErr,
    /// Dropped: invalid request (opcode sequence, length, corrupt receive queue).
    RcvdInvalidRequest,
    /// Dropped: a SEND found no receive WQE (receiver not ready).
    RcvdRnr,
}

/// Their names, in `Counter` order.
pub(crate) static NAMES: [StatDesc; COUNT] = [
    StatDesc::new(c_str!("rcvd_pkts")),
    StatDesc::new(c_str!("rcvd_malformed")),
    StatDesc::new(c_str!("rcvd_icrc_err")),
    StatDesc::new(c_str!("rcvd_unknown_qp")),
    StatDesc::new(c_str!("rcvd_qp_not_ready")),
    StatDesc::new(c_str!("rcvd_unsupported")),
    StatDesc::new(c_str!("rcvd_seq_err")),
    StatDesc::new(c_str!("rcvd_invalid_request")),
    StatDesc::new(c_str!("rcvd_rnr")),
];

const COUNT: usize = 9;

/// The values of one port.
pub(crate) struct Counters([AtomicU64; COUNT]);

impl Counters {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; COUNT])
    }

    /// Counts one event.
    pub(crate) fn inc(&self, c: Counter) {
        self.0[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Copies the values out, in `NAMES` order.
    pub(crate) fn read(&self, out: &mut [u64]) {
        for (o, v) in out.iter_mut().zip(&self.0) {
            *o = v.load(Ordering::Relaxed);
        }
    }
}
