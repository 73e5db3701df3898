// SPDX-License-Identifier: GPL-2.0
//! The completer: turns ACKs, NAKs and READ responses into completions of the send WQEs in
//! flight, and decides on retransmission (sequence NAKs, lost READ responses, the timer, RNR
//! NAKs) within `retry_cnt` and `rnr_retry`.

use crate::{
    counters::Counter,
    device::RxeDevice,
    kext::{ib::Device, mmap::RingIndex},
    proto::{
        completer::{on_aeth, unacknowledged_from, AckOutcome, AfterAck, RemoteError, Span},
        headers::Aeth,
        packet::Datagram,
        psn::Psn,
        timers::{rnr_delay_ns, RETRY_FOREVER},
    },
    qp::requester::{Requester, SendWork},
    qp::responder::check_admitted,
    qp::{state, QpInner, QpState},
    uapi::{send_flags, wc_status, Cqe},
    verbs::cq::RxeCq,
    verbs::sgl,
};

/// Completes the oldest WQE with `status` (a CQE if it failed or asked for one) and hands its
/// slot back to the process.
pub(crate) fn retire(qp: &QpInner, req: &mut Requester, status: u32) {
    let index = req.consumer;
    let w = *req.work(index);
    if w.is_read() {
        req.reads.received_before(w.last_psn().add(1)); // flushed: nothing more is asked for
    }
    if status != wc_status::SUCCESS || qp.sq_sig_all || w.wqe.flags & send_flags::SIGNALED != 0 {
        let cqe = Cqe {
            wr_id: w.wqe.wr_id,
            status,
            opcode: w.wc_opcode(),
            byte_len: w.len,
            qp_num: qp.qpn,
            ..Default::default()
        };
        // A full CQ raises IB_EVENT_CQ_ERR inside `post`; the QP then enters the error state.
        if RxeCq::post(qp.links.send.get(), &cqe, false).is_err() {
            qp.completion_lost();
        }
    }
    if req.cur == index {
        req.cur = index.wrapping_add(1);
    }
    req.consumer = index.wrapping_add(1);
    if req.started_end == index {
        req.started_end = req.consumer; // retired without sending (flushed)
    }
    qp.sq.store(RingIndex::Consumer, req.consumer);
}

/// Sends again from `psn` (which a WQE in flight uses): every packet from there on. A stale
/// PSN (no WQE in flight uses it) changes nothing.
pub(crate) fn rewind(req: &mut Requester, psn: Psn) {
    let within = |w: &SendWork| psn.diff(w.first_psn) >= 0 && psn.diff(w.last_psn()) <= 0;
    // The WQE at `cur` may be partly sent: it counts as in flight.
    let end = if req.cur != req.fetched {
        req.cur.wrapping_add(1)
    } else {
        req.cur
    };
    let mut index = req.consumer;
    while index != end && !within(req.work(index)) {
        index = index.wrapping_add(1);
    }
    if index == end {
        return;
    }
    let mut i = index;
    while i != end {
        let w = req.work_mut(i);
        // A READ asks again from its first missing response, anything else resends from `psn`.
        w.sent = if w.is_read() {
            w.read_got
        } else if i == index {
            psn.diff(w.first_psn) as u32
        } else {
            0
        };
        i = i.wrapping_add(1);
    }
    req.cur = index;
}

/// After a rewind, packets the peer has since acknowledged need not go again: the WQE being
/// sent resumes past them (at its last packet at most, whose ACK completes it).
fn skip_acknowledged(req: &mut Requester) {
    if req.cur == req.fetched {
        return;
    }
    let acked = req.acked_psn;
    let w = req.work_mut(req.cur);
    if w.is_read() || w.npkts == 0 {
        return;
    }
    let done = acked.diff(w.first_psn);
    if done > w.sent as i32 {
        w.sent = (done as u32).min(w.npkts - 1);
    }
}

/// Arms the retransmission timer if packets are outstanding (and `timeout` is not infinite).
pub(crate) fn arm_retransmit(qp: &QpInner, s: &mut QpState) {
    if s.req.outstanding() {
        if let Some(ns) = s.req.window.ack_timeout_ns(s.attrs.timeout) {
            s.req.timer_armed = true;
            qp.arm_timer(ns);
        }
    }
}

/// Handles a response packet (ACK, NAK, READ response) for `qp`, in softirq.
pub(crate) fn handle_response(dev: &Device<RxeDevice>, qp: &QpInner, d: &Datagram<'_>) -> Counter {
    let mut s = qp.state.lock();
    let counter = handle_response_locked(dev, qp, &mut s, d);
    qp.settle(&mut s);
    counter
}

fn handle_response_locked(
    dev: &Device<RxeDevice>,
    qp: &QpInner,
    s: &mut QpState,
    d: &Datagram<'_>,
) -> Counter {
    if s.attrs.state != state::RTS && s.attrs.state != state::SQD {
        return Counter::RcvdQpNotReady;
    }
    if let Err(counter) = check_admitted(s, d) {
        return counter;
    }
    // Only PSNs we sent and that are not acknowledged yet can be answered: anything else is
    // stale, or forged by someone guessing (a blind ACK must not complete WQEs whose data
    // never arrived).
    let psn = d.bth.psn;
    if psn.diff(s.req.acked_psn) < 0 || psn.diff(s.req.sent_end) >= 0 {
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
    let progress_from = s.req.consumer;
    let acked_before = s.req.acked_psn;
    let outcome = if d.info.is_read {
        read_response(dev, qp, s, d, psn)
    } else if d.info.atomic_ack_eth {
        return Counter::RcvdUnsupported;
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
    if s.attrs.state == state::ERR {
        return counter;
    }
    // Forward progress resets the retry budget and restarts the timer.
    if (s.req.consumer != progress_from || s.req.acked_psn != acked_before) && !s.req.rnr_wait {
        s.req.window.on_progress();
        s.req.retries_left = s.attrs.retry_cnt;
        s.req.timer_armed = false;
        arm_retransmit(qp, s);
    }
    qp.run_requester(dev, s);
    qp.check_drained(s);
    counter
}

fn remote_status(e: RemoteError) -> u32 {
    match e {
        RemoteError::InvalidRequest => wc_status::REM_INV_REQ_ERR,
        RemoteError::AccessError => wc_status::REM_ACCESS_ERR,
        RemoteError::OperationalError => wc_status::REM_OP_ERR,
    }
}

/// An ACK or NAK.
fn ack(qp: &QpInner, s: &mut QpState, aeth: Aeth, psn: Psn) -> core::result::Result<(), Counter> {
    let req = &s.req;
    let spans = SpanIter {
        req,
        index: req.consumer,
    };
    let AckOutcome { completed, then } = on_aeth(spans, aeth.syndrome, psn);
    for _ in 0..completed {
        retire(qp, &mut s.req, wc_status::SUCCESS);
    }
    let through = unacknowledged_from(fetched_spans(&s.req), aeth.syndrome, psn);
    if through.diff(s.req.acked_psn) > 0 && through.diff(s.req.next_psn) <= 0 {
        s.req.acked_psn = through;
        skip_acknowledged(&mut s.req);
    }
    match then {
        AfterAck::Nothing => {}
        AfterAck::RetryFrom(p) => {
            qp.count(Counter::Retransmits);
            rewind(&mut s.req, p);
        }
        AfterAck::RnrRetry(timer, p) => {
            qp.count(Counter::RcvdRnrNak);
            if s.req.rnr_left == 0 {
                qp.count(Counter::RetryRnrExceededErr);
                qp.fail(s, s.req.consumer, wc_status::RNR_RETRY_EXC_ERR);
                return Ok(());
            }
            if s.req.rnr_left != RETRY_FOREVER {
                s.req.rnr_left -= 1;
            }
            rewind(&mut s.req, p);
            s.req.rnr_wait = true;
            s.req.timer_armed = true;
            qp.arm_timer(rnr_delay_ns(timer));
        }
        AfterAck::Fail(e) => qp.fail(s, s.req.consumer, remote_status(e)),
    }
    Ok(())
}

/// A READ response: earlier WQEs are implicitly acknowledged; the payload goes into the READ's
/// local buffers in order.
fn read_response(
    dev: &Device<RxeDevice>,
    qp: &QpInner,
    s: &mut QpState,
    d: &Datagram<'_>,
    psn: Psn,
) -> core::result::Result<(), Counter> {
    // Retire what precedes the READ this response belongs to.
    loop {
        if s.req.consumer == s.req.cur
            && (s.req.cur == s.req.fetched || s.req.work(s.req.cur).sent == 0)
        {
            return Err(Counter::RcvdStaleResponse);
        }
        let w = *s.req.work(s.req.consumer);
        if psn.diff(w.first_psn) >= 0 && psn.diff(w.last_psn()) <= 0 {
            if !w.is_read() || w.sent == 0 {
                return Err(Counter::RcvdStaleResponse);
            }
            break;
        }
        if w.last_psn().diff(psn) >= 0 {
            return Err(Counter::RcvdStaleResponse); // from before the WQE in flight
        }
        if w.is_read() {
            // Responses to a later READ before this one finished: ours were lost.
            ask_again(qp, &mut s.req, w.first_psn.add(w.read_got));
            return Err(Counter::RcvdStaleResponse);
        }
        retire(qp, &mut s.req, wc_status::SUCCESS);
    }
    let index = s.req.consumer;
    let w = *s.req.work(index);
    let expected = w.first_psn.add(w.read_got);
    let d_psn = psn.diff(expected);
    if d_psn < 0 {
        return Err(Counter::DuplicateRequest);
    }
    if d_psn > 0 {
        // A gap in the responses: ask again from the first missing one.
        if w.sent > w.read_got {
            ask_again(qp, &mut s.req, expected);
        }
        return Err(Counter::RcvdSeqErr);
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
        qp.fail(s, index, wc_status::BAD_RESP_ERR);
        return Err(Counter::RcvdInvalidRequest);
    }
    if let Err(status) = sgl::scatter(
        dev,
        qp.pd,
        s.req.sges_of(index),
        u64::from(offset),
        d.payload,
    ) {
        qp.fail(s, index, status);
        return Err(Counter::RcvdPkts);
    }
    s.req.work_mut(index).read_got += 1;
    // Responses arrive in order: the requests that end here are answered (whatever the
    // opcode said; rdma_rxe answers a repeat from the middle with MIDDLE..LAST).
    s.req.reads.received_before(psn.add(1));
    s.req.acked_psn = psn.add(1);
    if is_last {
        retire(qp, &mut s.req, wc_status::SUCCESS);
    }
    Ok(())
}

/// Asks again for the responses of the READ in flight from `from` on (and sends every later
/// request again), once per gap: every later packet of the burst that lost one would ask again,
/// and the responder answers each duplicate READ with a whole new burst, which loses more. The
/// timer covers a lost second request.
fn ask_again(qp: &QpInner, req: &mut Requester, from: Psn) {
    if req.read_asked_again != Some(from) {
        req.read_asked_again = Some(from);
        qp.count(Counter::Retransmits);
        rewind(req, from);
    }
}

/// The retransmission or RNR timer expired (softirq).
pub(crate) fn timer_expired(dev: &Device<RxeDevice>, qp: &QpInner) {
    let mut s = qp.state.lock();
    timer_expired_locked(dev, qp, &mut s);
    qp.settle(&mut s);
}

fn timer_expired_locked(dev: &Device<RxeDevice>, qp: &QpInner, s: &mut QpState) {
    if !s.req.timer_armed || (s.attrs.state != state::RTS && s.attrs.state != state::SQD) {
        return;
    }
    s.req.timer_armed = false;
    if s.req.rnr_wait {
        s.req.rnr_wait = false;
    } else if s.req.outstanding() {
        if s.req.retries_left == 0 {
            qp.count(Counter::RetryExceededErr);
            let consumer = s.req.consumer;
            qp.fail(s, consumer, wc_status::RETRY_EXC_ERR);
            return;
        }
        if s.req.retries_left != RETRY_FOREVER {
            s.req.retries_left -= 1;
        }
        s.req.window.on_timeout();
        s.req.read_asked_again = None;
        qp.count(Counter::Retransmits);
        // Resend from the oldest unacknowledged packet.
        let w = *s.req.work(s.req.consumer);
        let from = if w.is_read() {
            w.first_psn.add(w.read_got)
        } else {
            s.req.acked_psn
        };
        let from = if from.diff(w.first_psn) < 0 {
            w.first_psn
        } else {
            from
        };
        rewind(&mut s.req, from);
    }
    qp.run_requester(dev, s);
}

/// The PSNs of every WQE the kernel holds, sent or not (they are assigned when it is fetched),
/// oldest first.
fn fetched_spans(req: &Requester) -> impl Iterator<Item = Span> + '_ {
    let mut index = req.consumer;
    core::iter::from_fn(move || {
        if index == req.fetched {
            return None;
        }
        let w = req.work(index);
        index = index.wrapping_add(1);
        Some(Span {
            first: w.first_psn,
            last: w.last_psn(),
            needs_response: w.is_read(),
        })
    })
}

/// The spans of the WQEs in flight, oldest first, for [`on_aeth`].
struct SpanIter<'a> {
    req: &'a Requester,
    index: u32,
}

impl Iterator for SpanIter<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        let req = self.req;
        if self.index == req.fetched {
            return None;
        }
        let w = req.work(self.index);
        if w.sent == 0 && !(w.is_read() && w.read_got > 0) {
            return None;
        }
        self.index = self.index.wrapping_add(1);
        Some(Span {
            first: w.first_psn,
            last: w.last_psn(),
            needs_response: w.is_read(),
        })
    }
}
