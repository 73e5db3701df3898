// SPDX-License-Identifier: GPL-2.0
//! The completer: turns ACKs, NAKs and READ responses into completions of the send WQEs in
//! flight, and decides on retransmission (sequence NAKs, lost READ responses, the timer and
//! its tail-loss probe, RNR NAKs) within `retry_cnt` and `rnr_retry`.

use crate::{
    counters::Counter,
    kext::ib::{NetworkType, QpState},
    kext::mmap::RingIndex,
    proto::{
        atomic::parse_ack,
        chunks::Chunks,
        completer::{on_aeth, unacknowledged_from, AckOutcome, AfterAck, RemoteError},
        headers::{Aeth, NakCode, Syndrome},
        opcode::{Opcode, Transport, AETH_BYTES},
        packet::Datagram,
        psn::Psn,
        send_queue::ReadResponse,
        timers::{rnr_delay_ns, RETRY_FOREVER},
        window::AckWait,
    },
    qp::requester::{wc_opcode, Requester, PACKETS_PER_SOFTIRQ_RUN},
    qp::responder::check_admitted,
    qp::{QpInner, QpLocked},
    uapi::{send_flags, send_opcode, Cqe, WcStatus},
    verbs::cq::{CqeSource, RxeCq},
    verbs::sgl,
};
use kernel::sync::Arc;

/// The completer's own state: the retry budgets, and the timer it runs for the requester.
#[derive(Default)]
pub(crate) struct Completer {
    /// Retransmissions left (`retry_cnt`).
    pub(crate) retries_left: u8,
    /// RNR retries left (`rnr_retry`).
    pub(crate) rnr_left: u8,
    /// Waiting out an RNR NAK's timer: the requester sends nothing until it expires.
    pub(crate) rnr_wait: bool,
    /// The retransmission (or RNR) timer is armed.
    pub(crate) timer_armed: bool,
    /// It is armed for a tail-loss probe, not the retransmission timeout.
    pub(crate) probe_due: bool,
}

impl Completer {
    /// Full budgets for a connection entering RTS.
    pub(crate) fn start(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retries_left = retry_cnt;
        self.rnr_left = rnr_retry;
    }

    /// Nothing waits, nothing is timed (RESET, ERR).
    pub(crate) fn stop(&mut self) {
        self.rnr_wait = false;
        self.timer_armed = false;
        self.probe_due = false;
    }
}

/// Completes the oldest WQE with `status` (a CQE if it failed or asked for one) and hands its
/// slot back to the process.
pub(crate) fn retire(qp: &QpInner, req: &mut Requester, status: WcStatus) {
    let wqe = *req.wqe(req.q.consumer);
    let w = req.q.retire();
    if w.is_read {
        req.reads.received_before(w.last_psn().add(1)); // flushed: nothing more is asked for
    }
    // The slot is free before its completion is seen: a consumer that posts again as soon as it
    // polls (ib_mad keeps QP1's SQ full) must find room.
    qp.sq.store(RingIndex::Consumer, req.q.consumer);
    let is_send = matches!(
        wqe.opcode,
        send_opcode::SEND | send_opcode::SEND_WITH_IMM | send_opcode::SEND_WITH_INV
    );
    // rdma_rxe counts a SEND that completed in error too; a flushed one never ran.
    if is_send && status != WcStatus::WrFlushErr {
        qp.count(Counter::RdmaSends);
    }
    if status != WcStatus::Success || qp.sq_sig_all || wqe.flags & send_flags::SIGNALED != 0 {
        let cqe = Cqe {
            wr_id: wqe.wr_id,
            status: status.raw(),
            opcode: wc_opcode(wqe.opcode),
            byte_len: w.len,
            qp_num: qp.qpn,
            ..Default::default()
        };
        // A full CQ raises IB_EVENT_CQ_ERR inside `post`; the QP then enters the error state.
        let source = CqeSource {
            qp: qp.peers.qp.for_completion(),
            network: NetworkType::None,
        };
        if RxeCq::post(qp.peers.send.get(), &cqe, false, source).is_err() {
            qp.completion_lost();
        }
    }
}

/// Completes the local operations at the head of the SQ that were executed: everything before
/// them has completed.
pub(crate) fn retire_done_locals(qp: &QpInner, req: &mut Requester) {
    while req.q.oldest_is_done_local() {
        retire(qp, req, WcStatus::Success);
    }
}

/// Completes, successfully, every WQE before the one being sent: on UC, where nothing
/// acknowledges them, those went out whole (or were executed, for local operations).
pub(crate) fn retire_sent(qp: &QpInner, req: &mut Requester) {
    while req.q.consumer != req.q.cur {
        retire(qp, req, WcStatus::Success);
    }
}

/// Arms the retransmission timer if packets are outstanding (and `timeout` is not infinite):
/// for a tail-loss probe first, where the window says so.
pub(crate) fn arm_retransmit(qp: &Arc<QpInner>, s: &mut QpLocked) {
    if !s.req.outstanding() {
        return;
    }
    let (ns, probe) = match s.req.window.ack_wait(s.attrs.timeout) {
        Some(AckWait::Probe(ns)) => (ns, true),
        Some(AckWait::Resend(ns)) => (ns, false),
        None => return,
    };
    s.comp.timer_armed = true;
    s.comp.probe_due = probe;
    qp.arm_timer(ns);
}

/// Handles a response packet (ACK, NAK, READ response) for `qp`, in softirq.
pub(crate) fn handle_response(qp: &Arc<QpInner>, d: &Datagram<'_>) -> Counter {
    let mut s = qp.state.lock();
    let counter = handle_response_locked(qp, &mut s, d);
    qp.settle(&mut s);
    // What the softirq's budget left goes from the doorbell work item.
    qp.resume_later(&mut s);
    counter
}

fn handle_response_locked(qp: &Arc<QpInner>, s: &mut QpLocked, d: &Datagram<'_>) -> Counter {
    if s.attrs.state != QpState::Rts && s.attrs.state != QpState::Sqd {
        return Counter::RcvdQpNotReady;
    }
    if let Err(counter) = check_admitted(s, d, Transport::Rc) {
        return counter;
    }
    qp.count(Counter::AckDeferred);
    // Only PSNs we sent and that are not acknowledged yet can be answered: anything else is
    // stale, or forged by someone guessing (a blind ACK must not complete WQEs whose data
    // never arrived).
    let psn = d.bth.psn;
    if psn.diff(s.req.q.acked_psn) < 0 || psn.diff(s.req.q.sent_end) >= 0 {
        return Counter::RcvdStaleResponse;
    }
    let aeth = if d.info.aeth {
        Aeth::parse(d.ext_headers)
    } else {
        None
    };
    if d.info.aeth && aeth.is_none() {
        return Counter::RcvdMalformed;
    }
    let progress_from = s.req.q.consumer;
    let acked_before = s.req.q.acked_psn;
    let outcome = if d.info.is_read {
        read_response(qp, s, d, psn)
    } else if d.info.atomic_ack_eth {
        atomic_response(qp, s, d, psn)
    } else {
        match aeth {
            Some(a) => ack(qp, s, a, psn),
            None => return Counter::RcvdMalformed,
        }
    };
    let counter = match outcome {
        Ok(()) => Counter::RcvdPkts,
        Err(c) => c,
    };
    if s.attrs.state == QpState::Err {
        return counter;
    }
    retire_done_locals(qp, &mut s.req);
    // Forward progress resets the retry budget and restarts the timer.
    if (s.req.q.consumer != progress_from || s.req.q.acked_psn != acked_before) && !s.comp.rnr_wait
    {
        if s.req.q.acked_psn != acked_before {
            s.req.window.on_acked(s.req.q.acked_psn, super::now_ns);
        }
        s.req.window.on_progress();
        s.comp.retries_left = s.attrs.retry_cnt;
        s.comp.timer_armed = false;
        arm_retransmit(qp, s);
    }
    qp.run_requester(s, PACKETS_PER_SOFTIRQ_RUN);
    qp.check_drained(s);
    counter
}

fn remote_status(e: RemoteError) -> WcStatus {
    match e {
        RemoteError::InvalidRequest => WcStatus::RemInvReqErr,
        RemoteError::AccessError => WcStatus::RemAccessErr,
        RemoteError::OperationalError => WcStatus::RemOpErr,
    }
}

/// An ACK or NAK.
fn ack(
    qp: &Arc<QpInner>,
    s: &mut QpLocked,
    aeth: Aeth,
    psn: Psn,
) -> core::result::Result<(), Counter> {
    let AckOutcome { completed, then } = on_aeth(s.req.q.in_flight_spans(), aeth.syndrome, psn);
    for _ in 0..completed {
        retire(qp, &mut s.req, WcStatus::Success);
    }
    let through = unacknowledged_from(s.req.q.fetched_spans(), aeth.syndrome, psn);
    s.req.q.acknowledge_through(through);
    match then {
        AfterAck::Nothing => {}
        AfterAck::RetryFrom(p) => {
            if matches!(aeth.syndrome, Syndrome::Nak(NakCode::PsnSequenceError)) {
                qp.count(Counter::RcvdSeqErr);
            }
            // Once per loss: a duplicated NAK, or each ACK rdma_rxe sends for a repeated WRITE
            // past a READ still being answered, would resend a window each time. Without a
            // retransmission timer (timeout 0) nothing else would resend a repeat that was lost.
            if s.req.window.ack_timeout_ns(s.attrs.timeout).is_none() {
                s.req.q.forget_asked_again();
            }
            if s.req.q.ask_again(p) {
                qp.count(Counter::Retransmits);
                s.req.window.on_loss(s.req.q.acked_psn, s.req.q.sent_end);
            }
        }
        AfterAck::RnrRetry(timer, p) => {
            qp.count(Counter::RcvdRnrNak);
            if s.comp.rnr_left == 0 {
                qp.count(Counter::RetryRnrExceededErr);
                qp.fail(s, s.req.q.consumer, WcStatus::RnrRetryExcErr);
                return Ok(());
            }
            if s.comp.rnr_left != RETRY_FOREVER {
                s.comp.rnr_left -= 1;
            }
            s.req.q.rewind(p);
            // What the RNR timer resends may be lost and NAKed again.
            s.req.q.forget_asked_again();
            s.comp.rnr_wait = true;
            s.comp.timer_armed = true;
            s.comp.probe_due = false;
            qp.arm_timer(rnr_delay_ns(timer));
        }
        AfterAck::Fail(e) => qp.fail(s, s.req.q.consumer, remote_status(e)),
    }
    Ok(())
}

/// The WQE a READ response or atomic acknowledge at `psn` answers, once the WQEs before it
/// were retired (the response implicitly acknowledges them); `Err` with the counter for a
/// response that answers nothing now.
fn answered_work(qp: &QpInner, s: &mut QpLocked, psn: Psn) -> core::result::Result<u32, Counter> {
    loop {
        match s.req.q.read_response(psn) {
            ReadResponse::Stale => return Err(Counter::RcvdStaleResponse),
            ReadResponse::RetireOldest => retire(qp, &mut s.req, WcStatus::Success),
            ReadResponse::EarlierReadIncomplete(from) => {
                // Responses to a later READ before this one finished: ours were lost.
                ask_again(qp, &mut s.req, from);
                return Err(Counter::RcvdStaleResponse);
            }
            ReadResponse::Duplicate => return Err(Counter::DuplicateRequest),
            ReadResponse::Gap(from) => {
                // A gap in the responses: ask again from the first missing one.
                if let Some(from) = from {
                    ask_again(qp, &mut s.req, from);
                }
                return Err(Counter::RcvdPsnGap);
            }
            ReadResponse::Next(index) => return Ok(index),
        }
    }
}

/// A READ response: earlier WQEs are implicitly acknowledged; the payload goes into the READ's
/// local buffers in order.
fn read_response(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
    psn: Psn,
) -> core::result::Result<(), Counter> {
    let index = answered_work(qp, s, psn)?;
    let w = *s.req.q.work(index);
    if w.atomic {
        // A READ response where an atomic's acknowledge belongs.
        return Err(bad_response(qp, s, index));
    }
    if w.atomic_write {
        // Answered by an empty READ RESPONSE ONLY.
        if d.bth.op() != Opcode::RC_READ_RESPONSE_ONLY || !d.payload.is_empty() {
            return Err(bad_response(qp, s, index));
        }
        answer_arrived(qp, s, index, psn, true);
        return Ok(());
    }
    let mtu = s.attrs.path_mtu.bytes();
    // `read_got < npkts`, so the offset is below the READ's length (at most 2^31).
    let offset = w.read_got.saturating_mul(mtu);
    let is_last = w.read_got.saturating_add(1) == w.npkts;
    let payload = d.payload.len() as u32; // at most one MTU: the packet fit a UDP datagram
    let len_ok = if is_last {
        offset.checked_add(payload) == Some(w.len)
    } else {
        payload == mtu
    };
    // A LAST response may also end a part of the message (one of several requests).
    if !len_ok || (is_last && !d.info.is_last) {
        return Err(bad_response(qp, s, index));
    }
    scatter_answer(qp, s, index, u64::from(offset), d.payload)?;
    answer_arrived(qp, s, index, psn, is_last);
    Ok(())
}

/// The WQE at `index` got a response that does not fit it: it fails with BAD_RESP_ERR.
fn bad_response(qp: &QpInner, s: &mut QpLocked, index: u32) -> Counter {
    qp.fail(s, index, WcStatus::BadRespErr);
    Counter::RcvdInvalidRequest
}

/// Writes `data` at `offset` of the memory the SGEs of the WQE at `index` name; memory they
/// do not grant fails the WQE.
fn scatter_answer(
    qp: &QpInner,
    s: &mut QpLocked,
    index: u32,
    offset: u64,
    data: Chunks<'_>,
) -> core::result::Result<(), Counter> {
    if let Err(status) = sgl::scatter(qp.res(), qp.pd, s.req.sges_of(index), offset, data) {
        qp.fail(s, index, status);
        return Err(Counter::RcvdPkts);
    }
    Ok(())
}

/// The response at `psn`, the next one the WQE at `index` expects, was taken; the WQE
/// completes with its `last`.
fn answer_arrived(qp: &QpInner, s: &mut QpLocked, index: u32, psn: Psn, last: bool) {
    s.req.q.read_response_arrived(index, psn);
    // Responses arrive in order: the requests that end here are answered (whatever the
    // opcode said; rdma_rxe answers a repeat from the middle with MIDDLE..LAST).
    s.req.reads.received_before(psn.add(1));
    if last {
        retire(qp, &mut s.req, WcStatus::Success);
    }
}

/// An atomic acknowledge: earlier WQEs are implicitly acknowledged; the original value goes
/// into the atomic's local buffer (8 bytes, in host order as the remote memory held them).
fn atomic_response(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
    psn: Psn,
) -> core::result::Result<(), Counter> {
    // The AETH comes first (checked by the caller), then the AtomicAckETH.
    let orig = d
        .ext_headers
        .get(AETH_BYTES..)
        .and_then(parse_ack)
        .ok_or(Counter::RcvdMalformed)?;
    let index = answered_work(qp, s, psn)?;
    if !s.req.q.work(index).atomic {
        // An atomic acknowledge where a READ's responses belong.
        return Err(bad_response(qp, s, index));
    }
    scatter_answer(qp, s, index, 0, Chunks::of(&orig.to_ne_bytes()))?;
    answer_arrived(qp, s, index, psn, true);
    Ok(())
}

/// Asks again for the responses of the READ in flight from `from` on, once per gap
/// ([`SendQueue::ask_again`](crate::proto::send_queue::SendQueue::ask_again)).
fn ask_again(qp: &QpInner, req: &mut Requester, from: Psn) {
    if req.q.ask_again(from) {
        qp.count(Counter::Retransmits);
    }
}

/// The retransmission or RNR timer expired (softirq).
pub(crate) fn timer_expired(qp: &Arc<QpInner>) {
    let mut s = qp.state.lock();
    timer_expired_locked(qp, &mut s);
    qp.settle(&mut s);
}

fn timer_expired_locked(qp: &Arc<QpInner>, s: &mut QpLocked) {
    if !s.comp.timer_armed || (s.attrs.state != QpState::Rts && s.attrs.state != QpState::Sqd) {
        return;
    }
    s.comp.timer_armed = false;
    if s.comp.rnr_wait {
        s.comp.rnr_wait = false;
    } else if core::mem::take(&mut s.comp.probe_due) {
        // No ACK for two round trips: send the last packet again, asking for one. Its NAK or
        // ACK tells what arrived; the timeout follows if nothing does.
        if s.req.probe() {
            qp.count(Counter::TailProbes);
        }
    } else if s.req.outstanding() {
        qp.count(Counter::AckTimeouts);
        if s.comp.retries_left == 0 {
            qp.count(Counter::RetryExceededErr);
            let consumer = s.req.q.consumer;
            qp.fail(s, consumer, WcStatus::RetryExcErr);
            return;
        }
        if s.comp.retries_left != RETRY_FOREVER {
            s.comp.retries_left -= 1;
        }
        s.req.window.on_timeout(s.req.q.acked_psn, s.req.q.sent_end);
        qp.count(Counter::Retransmits);
        // Resend from the oldest unacknowledged packet.
        s.req.q.on_timeout();
    }
    // (What the budget leaves goes from the doorbell work item.)
    qp.run_requester(s, PACKETS_PER_SOFTIRQ_RUN);
}
