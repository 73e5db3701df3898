// SPDX-License-Identifier: GPL-2.0
//! The UC responder (IBA 9.8.3): RC's SENDs and RDMA WRITEs, executed in order as RC's are, but
//! never answered. A packet lost, out of order, or one that cannot be executed (no receive WQE,
//! a bad R_Key, a message too long for its buffers) loses its message, silently: the receive
//! WQE it was filling takes the next message from its start, as rdma_rxe's does. Only a
//! broken receive queue ends the QP, as on RC. The UC requester is RC's without the window
//! ([`super::requester`]).

use crate::{
    counters::Counter,
    proto::{opcode::Transport, packet::Datagram, responder::UcVerdict},
    qp::{
        responder::{
            answers_requests, check_admitted, complete_recv, execute_send, execute_write,
            extended_headers, Carried, Failure, Outcome,
        },
        QpInner, QpLocked,
    },
    uapi::{wc_opcode, WcStatus},
};

/// Handles one packet for the UC QP `qp`, in softirq; returns the counter it moves. Only UC
/// requests from its peer are taken: UC has no responses.
pub(crate) fn receive(qp: &QpInner, d: &Datagram<'_>) -> Counter {
    let mut guard = qp.state.lock();
    let s = &mut *guard;
    let counter = if !answers_requests(s) {
        Counter::RcvdQpNotReady
    } else if let Err(counter) = check_admitted(s, d, Transport::Uc) {
        counter
    } else {
        handle_request(qp, s, d)
    };
    qp.settle(s);
    counter
}

fn handle_request(qp: &QpInner, s: &mut QpLocked, d: &Datagram<'_>) -> Counter {
    let mtu = s.attrs.path_mtu;
    let decision =
        s.resp
            .seq
            .classify_uc(d.bth.op(), &d.info, d.bth.psn, d.payload.len() as u32, mtu);
    if decision.abandons {
        // Lost at a PSN gap (or cut by a new FIRST): as any lost message.
        release_srq_wqe(qp, s, WcStatus::RemInvReqErr);
        forget_partial_message(s);
    }
    if decision.verdict == UcVerdict::Drop {
        return Counter::RcvdUcDropped;
    }
    let (reth, imm, carried) = extended_headers(d);
    let result = if d.info.is_send {
        execute_send(qp, s, d, carried)
    } else if d.info.is_write {
        execute_write(qp, s, d, reth, imm)
    } else {
        Err(Failure::Invalid)
    };
    match result {
        Ok(Outcome::Done) => {
            s.resp.seq.advance(&d.info, 0, mtu);
            Counter::RcvdPkts
        }
        // A malformed receive WQE or memory its L_Keys do not grant: the receive's own fault,
        // which ends the QP on every transport (IBA class A).
        Err(Failure::Local(status @ (WcStatus::LocQpOpErr | WcStatus::LocProtErr))) => {
            complete_recv(qp, s, status, wc_opcode::RECV, 0, Carried::Nothing, false);
            qp.enter_error(s);
            Counter::RcvdInvalidRequest
        }
        Err(Failure::BrokenRing) => {
            qp.fatal(s);
            Counter::RcvdInvalidRequest
        }
        // No receive WQE, a bad key or range, too long for the buffers: the message is lost.
        Ok(Outcome::NotReady | Outcome::Read(_)) | Err(_) => {
            s.resp.seq.drop_message();
            release_srq_wqe(
                qp,
                s,
                match result {
                    Err(Failure::Local(status)) => status,
                    _ => WcStatus::RemInvReqErr,
                },
            );
            forget_partial_message(s);
            Counter::RcvdUcDropped
        }
    }
}

/// A message is lost while an SRQ's WQE was taken for it: the WQE already left the SRQ, and
/// kept here it would wait for a message this QP may never get (one that fits), where the
/// SRQ's other QPs could have used it. It completes with `status` instead, the QP running on
/// (as rdma_rxe does). A QP's own RQ keeps its WQE for the next message.
fn release_srq_wqe(qp: &QpInner, s: &mut QpLocked, status: WcStatus) {
    if qp.peers.srq.is_some() && s.resp.recv.is_some() {
        complete_recv(qp, s, status, wc_opcode::RECV, 0, Carried::Nothing, false);
    }
}

/// The message in progress is lost: a WRITE's target is forgotten, and the receive WQE a SEND
/// was filling takes the next message from its start (no completion: UC reports nothing of a
/// message it did not receive whole).
fn forget_partial_message(s: &mut QpLocked) {
    s.resp.write = None;
    if let Some(recv) = s.resp.recv.as_mut() {
        recv.received = 0;
    }
}
