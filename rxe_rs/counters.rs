// SPDX-License-Identifier: GPL-2.0
//! Port counters, shown by `rdma statistic show link DEV/1`: ours, and rdma_rxe's names with
//! rdma_rxe's meanings, so that what reads rdma_rxe's counters reads ours.

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
    /// Dropped: a request past a PSN gap (NAKed once per gap), or a READ response past one.
    RcvdPsnGap,
    /// Dropped: invalid request (opcode sequence, length, corrupt receive queue).
    RcvdInvalidRequest,
    /// Dropped: a SEND found no receive WQE (receiver not ready); an RNR NAK went back.
    RcvdRnr,
    /// Dropped: a duplicate request (answered again: re-ACK, or READ responses again).
    DuplicateRequest,
    /// Packets sent (requests, responses, ACKs and NAKs).
    SentPkts,
    /// Packets that could not be sent (no route, no memory, the IP layer refused, a full lane
    /// of local delivery).
    SendErr,
    /// RNR NAKs received by the requester.
    RcvdRnrNak,
    /// Retransmissions started (timeout, sequence NAK, lost READ responses).
    Retransmits,
    /// Retransmission timeouts: the wait for an ACK ran out (resends, or fails at `retry_cnt`).
    AckTimeouts,
    /// Tail-loss probes: the last packet sent again, asking for an ACK, after about two round
    /// trips without one (a lost tail brings no NAK by itself).
    TailProbes,
    /// WQEs failed after `retry_cnt` retransmissions.
    RetryExceededErr,
    /// WQEs failed after `rnr_retry` RNR NAKs.
    RetryRnrExceededErr,
    /// Responses dropped: stale, duplicate or for no request in flight.
    RcvdStaleResponse,
    /// Dropped: an opcode of another transport than the QP's.
    RcvdWrongTransport,
    /// Dropped: not from the QP's peer, or not to the QP's address.
    RcvdWrongPeer,
    /// Dropped: a P_Key that does not match the QP's partition.
    RcvdBadPkey,
    /// Dropped: a UD datagram whose Q_Key is not the QP's.
    RcvdBadQkey,
    /// Dropped: a UD datagram that found no receive WQE, or one too small for it and its GRH.
    RcvdUdDropped,
    /// Dropped: a UC packet whose message is lost (a packet of it went missing or came out of
    /// order, no receive WQE, a bad R_Key or range, too long for the buffers); UC answers
    /// nothing, so this is all that tells.
    RcvdUcDropped,
    /// Dropped: came from this host through the IP stack (on a `lo`, or looped back onto the
    /// device). rxe_rs's own packets for this host never go that way (local delivery), so
    /// these are a local process's forgeries, and the copies IP loops back of multicast this
    /// device sends to a group the host joined at the IP level.
    RcvdFromLoopback,
    /// UD sends longer than the path MTU: completed without being sent (IBA C10-93.1.1).
    SentUdTooLong,
    /// Send doorbells that reached the kernel (a post the requester was not going to find by
    /// itself: the provider skips the syscall while the SQ is polled).
    SendDoorbells,
    /// ACKs and NAKs the responders sent (one per request that asks for one, and per NAK).
    SentAcks,
    /// Batches the sent packets went to the IP layer in (`sent_pkts` over this is the mean
    /// batch; packets for this host are not batched and not counted here).
    SentBatches,
    /// rdma_rxe's: PSN sequence error NAKs the requesters went back for.
    RcvdSeqErr,
    /// rdma_rxe's: PSN gaps the responders NAKed (once per gap).
    OutOfSeqRequest,
    /// rdma_rxe's: responses (ACKs, NAKs, READ responses) the requesters took in.
    AckDeferred,
    /// rdma_rxe's: times the port went down.
    LinkDowned,
    /// rdma_rxe's: SEND work requests completed, with or without error (not flushed).
    RdmaSends,
    /// rdma_rxe's: receive work requests completed.
    RdmaRecvs,
}

/// Their names, in `Counter` order.
pub(crate) static NAMES: [StatDesc; COUNT + ALIASES.len()] = [
    StatDesc::new(c_str!("rcvd_pkts")),
    StatDesc::new(c_str!("rcvd_malformed")),
    StatDesc::new(c_str!("rcvd_icrc_err")),
    StatDesc::new(c_str!("rcvd_unknown_qp")),
    StatDesc::new(c_str!("rcvd_qp_not_ready")),
    StatDesc::new(c_str!("rcvd_psn_gap")),
    StatDesc::new(c_str!("rcvd_invalid_request")),
    StatDesc::new(c_str!("rcvd_rnr")),
    StatDesc::new(c_str!("duplicate_request")),
    StatDesc::new(c_str!("sent_pkts")),
    StatDesc::new(c_str!("send_err")),
    StatDesc::new(c_str!("rcvd_rnr_nak")),
    StatDesc::new(c_str!("retransmits")),
    StatDesc::new(c_str!("ack_timeouts")),
    StatDesc::new(c_str!("tail_probes")),
    StatDesc::new(c_str!("retry_exceeded_err")),
    StatDesc::new(c_str!("retry_rnr_exceeded_err")),
    StatDesc::new(c_str!("rcvd_stale_response")),
    StatDesc::new(c_str!("rcvd_wrong_transport")),
    StatDesc::new(c_str!("rcvd_wrong_peer")),
    StatDesc::new(c_str!("rcvd_bad_pkey")),
    StatDesc::new(c_str!("rcvd_bad_qkey")),
    StatDesc::new(c_str!("rcvd_ud_dropped")),
    StatDesc::new(c_str!("rcvd_uc_dropped")),
    StatDesc::new(c_str!("rcvd_from_loopback")),
    StatDesc::new(c_str!("sent_ud_too_long")),
    StatDesc::new(c_str!("send_doorbells")),
    StatDesc::new(c_str!("sent_acks")),
    StatDesc::new(c_str!("sent_batches")),
    StatDesc::new(c_str!("rcvd_seq_err")),
    StatDesc::new(c_str!("out_of_seq_request")),
    StatDesc::new(c_str!("ack_deferred")),
    StatDesc::new(c_str!("link_downed")),
    StatDesc::new(c_str!("rdma_sends")),
    StatDesc::new(c_str!("rdma_recvs")),
    // rdma_rxe's names for counters we keep under ours (ALIASES).
    StatDesc::new(c_str!("rcvd_rnr_err")),
    StatDesc::new(c_str!("send_rnr_err")),
    StatDesc::new(c_str!("completer_retry_err")),
];

/// Counters kept.
const COUNT: usize = Counter::RdmaRecvs as usize + 1;

/// rdma_rxe's names that count what one of ours counts, after ours in `NAMES`: RNR NAKs
/// received, RNR NAKs sent (RC receives without a WQE), retransmissions started.
const ALIASES: [Counter; 3] = [Counter::RcvdRnrNak, Counter::RcvdRnr, Counter::Retransmits];

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

    /// Counts `n` events.
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Copies the values out, in `NAMES` order.
    pub(crate) fn read(&self, out: &mut [u64]) {
        let sources = self
            .0
            .iter()
            .chain(ALIASES.iter().map(|&c| &self.0[c as usize]));
        for (o, v) in out.iter_mut().zip(sources) {
            *o = v.load(Ordering::Relaxed);
        }
    }
}
