// SPDX-License-Identifier: GPL-2.0
//! The responder: executes the requests a QP receives. SENDs scatter into the next receive
//! WQE; RDMA WRITEs land in the MR their R_Key names; RDMA READs are answered with response
//! packets. It acknowledges what the requester asks it to, answers duplicates again, and NAKs
//! gaps (once per gap), missing receive WQEs (RNR), bad keys and malformed requests.
//!
//! Requests are handled in the receive softirq, except READ responses: a READ is queued and
//! its responses sent a batch at a time by the QP's work item, so that a large READ never
//! keeps a CPU in softirq. ACKs and NAKs due meanwhile wait for the queued responses, to keep
//! PSN order on the wire.

use core::sync::atomic::{fence, Ordering};
use kernel::{prelude::*, sync::Arc};

use crate::{
    counters::Counter,
    kext::ib::{NetworkType, QpState},
    kext::{ib::Access, mmap::RingIndex},
    limits,
    net::transmit::{Transmitter, TxError},
    proto::{
        admit::{admit, Connection, Refusal},
        atomic::{is_aligned, AtomicEth, AtomicOp, AtomicResult, AtomicResults, ATOMIC_BYTES},
        av::AddressVector,
        chunks::Chunks,
        flush::{Feth, FlushLevel, PLACEMENT_GLOBAL, PLACEMENT_PERSISTENT},
        headers::{Aeth, Bth, NakCode, Reth, Syndrome, AETH_NO_CREDITS},
        opcode::{Opcode, Transport, FETH_BYTES},
        packet::Datagram,
        psn::Psn,
        read_reply::{self, ReadReplies, ReadReply, Response},
        responder::{ResponderSeq, Verdict},
        segment::packet_count,
        wire::Frame,
    },
    qp::{self, QpInner, QpLocked},
    uapi::{wc_flags, wc_opcode, Cqe, WcStatus},
    verbs::cq::{CqeSource, RxeCq},
    verbs::{
        mr::AccessError,
        recv_wqe::{read_recv_wqe, RecvInProgress, RqError},
        sgl, srq,
    },
};

/// Where a multi-packet RDMA WRITE is going.
#[derive(Clone, Copy)]
pub(crate) struct WriteInProgress {
    rkey: u32,
    /// Where the next packet lands (its first packet checked the whole range against the MR).
    va: u64,
    /// Bytes still to come.
    resid: u32,
    /// Its whole length (reported by a WRITE WITH IMMEDIATE's completion).
    dma_len: u32,
}

/// READ responses sent per run of the QP's work item: it queues itself again for more, so
/// that other work (and other QPs) get a turn.
const READ_RESPONSES_PER_RUN: u32 = 64;
/// A READ of at most this many responses, with nothing else owed, is answered straight from
/// the receive softirq, as a WRITE is acknowledged there: the work item's hop (a wakeup and a
/// context switch) was most of a small READ's latency.
const READ_RESPONSES_INLINE: u32 = 4;

/// Receive-side state of a QP.
pub(crate) struct Responder {
    pub(crate) seq: ResponderSeq,
    /// The receive WQE a SEND is filling.
    pub(crate) recv: Option<RecvInProgress>,
    /// The RDMA WRITE being received.
    pub(crate) write: Option<WriteInProgress>,
    /// Our consumer index of the RQ (never read back from the ring).
    pub(crate) rq_consumer: u32,
    /// A sequence NAK went out for the current expected PSN: do not repeat it per packet.
    pub(crate) nak_sent: bool,
    /// READ responses and atomic acknowledges still to send, in PSN order.
    reads: ReadReplies<KVec<ReadReply>>,
    /// The results of the atomics executed last, for their repeats.
    atomics: AtomicResults<KVec<AtomicResult>>,
    /// The ACK or NAK to send once `reads` is empty (the latest supersedes earlier ones).
    deferred_ack: Option<(Syndrome, Psn)>,
}

impl Responder {
    /// A responder in RESET, with the reply slots of `max_dest_rd_atomic` 0.
    pub(crate) fn new() -> Result<Self> {
        let slots = ReplySlots::new(0)?;
        Ok(Self {
            seq: ResponderSeq::default(),
            recv: None,
            write: None,
            rq_consumer: 0,
            nak_sent: false,
            reads: ReadReplies::new(slots.reads),
            atomics: AtomicResults::new(slots.atomics),
            deferred_ack: None,
        })
    }

    /// Takes the reply slots made for a new `max_dest_rd_atomic` (what is owed, and the
    /// latest atomic results, move over) and returns the old ones; if more is owed than the
    /// new slots hold, changes nothing and returns `slots`.
    pub(crate) fn replace_reply_slots(&mut self, slots: ReplySlots) -> ReplySlots {
        if self.reads.len() > slots.reads.len() {
            return slots;
        }
        ReplySlots {
            reads: self.reads.replace_slots(slots.reads),
            atomics: self.atomics.replace_slots(slots.atomics),
        }
    }

    /// READ replies queued (owed), for the QP's report.
    pub(crate) fn reads_owed(&self) -> usize {
        self.reads.len()
    }

    /// Ready to receive at `epsn` (move to RTR).
    pub(crate) fn start(&mut self, epsn: Psn) {
        self.stop();
        self.seq = ResponderSeq {
            epsn,
            ..Default::default()
        };
        self.recv = None;
        self.write = None;
        self.nak_sent = false;
        self.atomics.clear();
    }

    /// Back to the creation state (RESET: the RQ starts over).
    pub(crate) fn reset(&mut self) {
        self.start(Psn::new(0));
        self.rq_consumer = 0;
    }

    /// Nothing more goes out (the QP leaves the states that answer).
    pub(crate) fn stop(&mut self) {
        self.reads.clear();
        self.deferred_ack = None;
    }
}

/// The memory a responder answers READs and atomics from, sized by `max_dest_rd_atomic` (not
/// for the most any QP may have, since every QP has them from its creation on): the replies
/// it may owe at once, and the atomic results it keeps for repeats. Allocated before the QP's
/// lock is taken, charged to the process's memory cgroup.
pub(crate) struct ReplySlots {
    reads: KVec<ReadReply>,
    atomics: KVec<AtomicResult>,
}

impl ReplySlots {
    pub(crate) fn new(max_dest_rd_atomic: u8) -> Result<Self> {
        let n = read_reply::slots_for(max_dest_rd_atomic);
        Ok(Self {
            reads: KVec::from_elem(ReadReply::default(), n, GFP_KERNEL_ACCOUNT)?,
            atomics: KVec::from_elem(AtomicResult::default(), n, GFP_KERNEL_ACCOUNT)?,
        })
    }
}

/// Why a request fails: the NAK it gets (and the QP goes to the error state).
#[derive(Clone, Copy)]
pub(super) enum Failure {
    /// Malformed or unexpected: NAK "invalid request".
    Invalid,
    /// Bad R_Key, rights or range: NAK "remote access error".
    Access,
    /// The receive WQE could not take the SEND: the WQE completes with this local status, and
    /// the NAK is "invalid request" (too long, or an invalidation refused) or "remote
    /// operational error" (a malformed WQE, or its memory refused).
    Local(WcStatus),
    /// The RQ's indices are corrupt: NAK "remote operational error", and the QP's owner gets
    /// `IB_EVENT_QP_FATAL`.
    BrokenRing,
}

/// Takes the next receive WQE for a message: off the QP's SRQ if it has one, else off its RQ
/// (at `rq_consumer`, which the QP advances when the WQE completes). `Ok(false)` if none was
/// posted (RNR).
pub(super) fn take_recv_wqe(
    qp: &QpInner,
    rq_consumer: u32,
    recv: &mut Option<RecvInProgress>,
) -> core::result::Result<bool, RqError> {
    if let Some(srq) = &qp.peers.srq {
        return srq::take(srq.get(), recv);
    }
    let producer = qp.rq.load(RingIndex::Producer);
    match qp.rq.geometry().occupancy(producer, rq_consumer) {
        None => return Err(RqError::BrokenRing),
        Some(0) => return Ok(false),
        Some(_) => {}
    }
    read_recv_wqe(&qp.rq, rq_consumer, qp.caps.max_recv_sge, qp.pd, recv)
}

/// Copies `data` into the WQE's buffers after what is already there; a message longer than
/// `max_msg_sz` fails as one longer than the buffers.
pub(super) fn scatter(
    qp: &QpInner,
    recv: &mut RecvInProgress,
    data: Chunks<'_>,
) -> core::result::Result<(), WcStatus> {
    let received = recv
        .received
        .checked_add(data.len() as u64)
        .filter(|&n| n <= u64::from(limits::MAX_MSG_SIZE))
        .ok_or(WcStatus::LocLenErr)?;
    sgl::scatter(
        qp.res(),
        recv.pd,
        &recv.sges[..recv.num_sge],
        recv.received,
        data,
    )?;
    recv.received = received;
    Ok(())
}

/// Who sent a UD message: its completion reports the source QP and a GRH in the buffer.
#[derive(Clone, Copy)]
pub(super) struct DatagramSource {
    pub(super) src_qp: u32,
    /// The GRH's IP version.
    pub(super) network: NetworkType,
}

/// What a receive completion reports besides the bytes.
#[derive(Clone, Copy)]
pub(super) enum Carried {
    Nothing,
    /// Immediate data, as the 4 bytes came on the wire.
    Imm([u8; 4]),
    /// The R_Key a SEND WITH INVALIDATE invalidated.
    Invalidated(u32),
}

impl Carried {
    /// Immediate data if there is some.
    pub(super) fn imm(imm: Option<[u8; 4]>) -> Self {
        imm.map_or(Carried::Nothing, Carried::Imm)
    }
}

/// Posts the receive completion of the WQE in `s.resp.recv` and retires it.
pub(super) fn complete_recv(
    qp: &QpInner,
    s: &mut QpLocked,
    status: WcStatus,
    opcode: u32,
    byte_len: u32,
    carried: Carried,
    solicited: bool,
) {
    complete_recv_from(qp, s, status, opcode, byte_len, carried, solicited, None);
}

/// [`complete_recv`], for a UD message from `source` too.
#[allow(clippy::too_many_arguments)]
pub(super) fn complete_recv_from(
    qp: &QpInner,
    s: &mut QpLocked,
    status: WcStatus,
    opcode: u32,
    byte_len: u32,
    carried: Carried,
    solicited: bool,
    source: Option<DatagramSource>,
) {
    let Some(recv) = s.resp.recv.take() else {
        return;
    };
    if status == WcStatus::Success {
        qp.count(Counter::RdmaRecvs);
    }
    if qp.peers.srq.is_none() {
        // (An SRQ's WQE left its ring when it was taken.)
        s.resp.rq_consumer = s.resp.rq_consumer.wrapping_add(1);
        qp.rq.store(RingIndex::Consumer, s.resp.rq_consumer);
    }
    let cqe = Cqe {
        wr_id: recv.wr_id,
        status: status.raw(),
        opcode,
        byte_len,
        // `ibv_wc`'s union: immediate data in network order, an invalidated R_Key in host order.
        imm_data: match carried {
            Carried::Nothing => 0,
            Carried::Imm(imm) => u32::from_ne_bytes(imm),
            Carried::Invalidated(rkey) => rkey,
        },
        qp_num: qp.qpn,
        src_qp: source.map_or(0, |from| from.src_qp),
        wc_flags: if status == WcStatus::Success {
            (match carried {
                Carried::Nothing => 0,
                Carried::Imm(_) => wc_flags::WITH_IMM,
                Carried::Invalidated(_) => wc_flags::WITH_INV,
            }) | (if source.is_some() { wc_flags::GRH } else { 0 })
        } else {
            0
        },
        ..Default::default()
    };
    // A full CQ raises IB_EVENT_CQ_ERR inside `post`; the QP then enters the error state.
    let source = CqeSource {
        qp: qp.peers.qp.for_completion(),
        network: source.map_or(NetworkType::None, |from| from.network),
    };
    if RxeCq::post(qp.peers.recv.get(), &cqe, solicited, source).is_err() {
        qp.completion_lost();
    }
}

/// Completes every posted receive WQE with WR_FLUSH_ERR (the QP is in the error state): the
/// one in progress, then what the ring held when the flush began. The producer index is read
/// once, so a process posting meanwhile cannot keep the flush going; what it posts later is
/// flushed by the doorbell the ring's flags ask for.
pub(crate) fn flush_rq(qp: &QpInner, s: &mut QpLocked) {
    let flush_one = |s: &mut QpLocked| {
        complete_recv(
            qp,
            s,
            WcStatus::WrFlushErr,
            wc_opcode::RECV,
            0,
            Carried::Nothing,
            false,
        )
    };
    if s.resp.recv.is_some() {
        flush_one(s);
    }
    // An SRQ's WQEs stay for its other QPs.
    if qp.peers.srq.is_some() {
        return;
    }
    let producer = qp.rq.load(RingIndex::Producer);
    // A ring too corrupt to read: nothing in it can be flushed.
    let Some(posted) = qp.rq.geometry().occupancy(producer, s.resp.rq_consumer) else {
        return;
    };
    for _ in 0..posted {
        match take_recv_wqe(qp, s.resp.rq_consumer, &mut s.resp.recv) {
            Ok(true) | Err(RqError::BadWqe) => {}
            Ok(false) | Err(RqError::BrokenRing) => return,
        }
        flush_one(s);
    }
}

/// Sends an ACK or NAK for `psn`, after the READ responses still owed.
fn send_ack(qp: &QpInner, s: &mut QpLocked, syndrome: Syndrome, psn: Psn) {
    if s.resp.reads.is_empty() {
        send_ack_now(qp, s, syndrome, psn);
    } else if !matches!(
        s.resp.deferred_ack,
        Some((Syndrome::Nak(NakCode::RemoteAccessError), _))
    ) {
        s.resp.deferred_ack = Some((syndrome, psn));
    }
    // (An access NAK waiting, for a repeated READ whose MR is gone, is not replaced: an ACK
    // for the requests the requester sends again after that READ would lose it every time.)
}

/// Sends an ACK or NAK for `psn` right away.
fn send_ack_now(qp: &QpInner, s: &QpLocked, syndrome: Syndrome, psn: Psn) {
    let Some(av) = s.attrs.av else { return };
    let Some(mut tx) = Transmitter::new(qp.res(), &av, qp.qpn) else {
        return;
    };
    let frame = Frame {
        av,
        sport: qp.sport,
        bth: Bth::rc(Opcode::RC_ACK.0, s.attrs.dest_qpn, psn, false, false),
        deth: None,
        reth: None,
        atomic_eth: None,
        aeth: Some(Aeth {
            syndrome,
            msn: s.resp.seq.msn,
        }),
        atomic_ack: None,
        immdt: None,
        payload_len: 0,
    };
    qp.count(Counter::SentAcks);
    // A lost ACK is recovered by the requester's retransmission.
    let _ = tx.send(&frame, |_| Ok(()));
}

/// The QP is in a state that executes and answers requests (RTR, RTS, SQD).
pub(super) fn answers_requests(s: &QpLocked) -> bool {
    matches!(s.attrs.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
}

/// Queues the responses to a READ request at `psn` (`repeated`: asked for again); the caller
/// has them sent.
fn queue_read(
    s: &mut QpLocked,
    reth: &Reth,
    psn: Psn,
    repeated: bool,
) -> core::result::Result<(), Failure> {
    let mtu = s.attrs.path_mtu;
    let reply = ReadReply::new(reth.rkey, reth.va, reth.dma_len, psn, s.resp.seq.msn, mtu);
    queue_reply(s, reply, repeated)
}

/// Queues `reply` to a READ or atomic (`repeated`: asked for again); the caller has it sent.
fn queue_reply(
    s: &mut QpLocked,
    reply: ReadReply,
    repeated: bool,
) -> core::result::Result<(), Failure> {
    let mtu = s.attrs.path_mtu;
    // The requester may have `max_dest_rd_atomic` READs and atomics outstanding (our
    // responder resources; 0 counts as 1, as a requester with `max_rd_atomic` 0 still sends
    // one): one more is an invalid request. Replies fully sent leave the queue at once, so only those still owed
    // count, and only to new requests. A repeated READ replaces what is owed from its PSN on.
    if !repeated
        && s.resp.reads.owed_to_new_requests() >= usize::from(s.attrs.max_dest_rd_atomic.max(1))
    {
        return Err(Failure::Invalid);
    }
    let queued = if repeated {
        s.resp.reads.repeat(reply, mtu)
    } else {
        s.resp.reads.push(reply)
    };
    queued.map_err(|_| Failure::Invalid)
}

/// The QP's work item: sends a batch of the READ responses owed, then the ACK that waited for
/// them, or queues itself again for the next batch.
pub(crate) fn send_read_replies(qp: &Arc<QpInner>) {
    let mut guard = qp.state.lock();
    send_owed_replies(qp, &mut guard, READ_RESPONSES_PER_RUN);
}

/// Sends up to `budget` of the READ responses owed, then the ACK that waited for them, or has
/// the work item send the rest.
fn send_owed_replies(qp: &Arc<QpInner>, s: &mut QpLocked, budget: u32) {
    if !answers_requests(s) {
        // Stopped meanwhile (`stop` emptied the queue).
        return;
    }
    let mtu = s.attrs.path_mtu;
    let Some((av, mut tx)) = s
        .attrs
        .av
        .and_then(|av| Some((av, Transmitter::new(qp.res(), &av, qp.qpn)?)))
    else {
        // No route to the requester (counted): it asks again once there is one.
        s.resp.stop();
        return;
    };
    let mut budget = budget;
    while budget > 0 {
        let Some(reply) = s.resp.reads.front_mut() else {
            break;
        };
        let Some(response) = reply.next(mtu) else {
            s.resp.reads.pop();
            continue;
        };
        reply.sent_one();
        let rkey = reply.rkey;
        let repeated = reply.is_repeated();
        // Owed no more once its last response is on its way: it leaves the queue now (the
        // queue's length is what `max_dest_rd_atomic` limits).
        let finished = reply.done();
        if finished {
            s.resp.reads.pop();
        }
        budget -= 1;
        match send_read_response(qp, s, &av, &mut tx, rkey, &response) {
            Ok(()) => {}
            Err(TxError::Payload(_)) if !repeated => {
                // The MR was deregistered (or lost its rights) while its READ was being
                // answered: NAK it with a remote access error, at the response the requester
                // expects next, which ends the QP as a request naming the MR now would.
                // Staying silent would have the requester ask again forever (retry_cnt 7).
                tx.flush();
                fail(qp, s, Failure::Access, response.psn);
                return;
            }
            Err(TxError::Payload(_)) => {
                // A repeat whose MR is gone: NAK it too, or a requester with retry_cnt 7
                // (retry forever) asks for the rest for good. But this QP stays as it is:
                // the repeat may answer a spurious retry of a READ the requester already
                // has, which then takes the NAK as stale.
                if !finished {
                    s.resp.reads.pop();
                }
                tx.flush();
                send_ack_now(
                    qp,
                    s,
                    Syndrome::Nak(NakCode::RemoteAccessError),
                    response.psn,
                );
            }
            // Dropped like a packet lost on the wire: the requester asks again for the rest.
            Err(_) if !finished => {
                s.resp.reads.pop();
            }
            Err(_) => {}
        }
    }
    // The responses go before the ACK that waited for them.
    tx.flush();
    if !s.resp.reads.is_empty() {
        qp::schedule_read_replies(qp);
    } else if let Some((syndrome, psn)) = s.resp.deferred_ack.take() {
        send_ack_now(qp, s, syndrome, psn);
    }
}

/// Sends one READ response packet, its payload read from the MR `rkey` names.
fn send_read_response(
    qp: &QpInner,
    s: &QpLocked,
    av: &AddressVector,
    tx: &mut Transmitter<'_>,
    rkey: u32,
    r: &Response,
) -> core::result::Result<(), TxError> {
    let aeth = r.opcode.info().is_some_and(|i| i.aeth);
    let frame = Frame {
        av: *av,
        sport: qp.sport,
        bth: Bth::rc(r.opcode.0, s.attrs.dest_qpn, r.psn, false, false),
        deth: None,
        reth: None,
        atomic_eth: None,
        aeth: aeth.then_some(Aeth {
            syndrome: Syndrome::Ack {
                credits: AETH_NO_CREDITS,
            },
            msn: r.msn,
        }),
        atomic_ack: r.atomic_orig,
        immdt: None,
        payload_len: r.len,
    };
    tx.send(&frame, |out| {
        if out.is_empty() {
            return Ok(());
        }
        let mr = qp.res().lookup_rkey(rkey).ok_or(WcStatus::RemAccessErr)?;
        mr.read(qp.pd, qp.serial, r.va, out, Access::REMOTE_READ)
            .map_err(|_| WcStatus::RemAccessErr)
    })
}

/// Checks that `reth` names `len` bytes of an MR of ours the peer may access with `rights`.
fn check_remote(
    qp: &QpInner,
    s: &QpLocked,
    reth: &Reth,
    rights: Access,
) -> core::result::Result<(), Failure> {
    if !s.attrs.access.contains(rights) {
        return Err(Failure::Access);
    }
    if reth.dma_len > limits::MAX_MSG_SIZE {
        return Err(Failure::Invalid); // longer than `max_msg_sz`
    }
    if reth.dma_len == 0 {
        return Ok(());
    }
    let mr = qp.res().lookup_rkey(reth.rkey).ok_or(Failure::Access)?;
    mr.check(qp.pd, qp.serial, reth.va, u64::from(reth.dma_len), rights)
        .map_err(|_| Failure::Access)
}

/// Handles one valid request packet for `qp`, in softirq; returns the counter it moves.
pub(crate) fn handle_request(qp: &Arc<QpInner>, d: &Datagram<'_>) -> Counter {
    let mut guard = qp.state.lock();
    let s = &mut *guard;
    let counter = handle_request_locked(qp, s, d);
    qp.settle(s);
    counter
}

/// The counter a refused datagram moves.
pub(crate) fn refusal_counter(r: Refusal) -> Counter {
    match r {
        Refusal::WrongTransport => Counter::RcvdWrongTransport,
        Refusal::WrongPeer => Counter::RcvdWrongPeer,
        Refusal::BadPkey => Counter::RcvdBadPkey,
    }
}

/// Checks that `d` may act on the QP at all: its connected peer, the QP's transport, our
/// partition. Dropped silently otherwise, as rdma_rxe does (a NAK would answer whoever forged
/// it).
pub(crate) fn check_admitted(
    s: &QpLocked,
    d: &Datagram<'_>,
    transport: Transport,
) -> core::result::Result<(), Counter> {
    let av = s.attrs.av.as_ref().ok_or(Counter::RcvdQpNotReady)?;
    let conn = Connection {
        transport,
        pkey: limits::DEFAULT_PKEY,
        av,
        dest_qpn: s.attrs.dest_qpn,
    };
    admit(d, &conn).map_err(refusal_counter)
}

fn handle_request_locked(qp: &Arc<QpInner>, s: &mut QpLocked, d: &Datagram<'_>) -> Counter {
    if !answers_requests(s) {
        return Counter::RcvdQpNotReady;
    }
    if let Err(counter) = check_admitted(s, d, Transport::Rc) {
        return counter;
    }
    let psn = d.bth.psn;
    match s.resp.seq.classify(
        d.bth.op(),
        &d.info,
        psn,
        d.payload.len() as u32,
        s.attrs.path_mtu,
    ) {
        Verdict::Execute => {}
        Verdict::Duplicate => {
            duplicate(qp, s, d);
            return Counter::DuplicateRequest;
        }
        Verdict::OutOfSequence => {
            if !s.resp.nak_sent {
                s.resp.nak_sent = true;
                qp.count(Counter::OutOfSeqRequest);
                let epsn = s.resp.seq.epsn;
                send_ack(qp, s, Syndrome::Nak(NakCode::PsnSequenceError), epsn);
            }
            return Counter::RcvdPsnGap;
        }
        Verdict::InvalidRequest => {
            fail(qp, s, Failure::Invalid, psn);
            return Counter::RcvdInvalidRequest;
        }
    }
    let (reth, imm, carried) = extended_headers(d);
    let result = if d.info.atomic_eth {
        execute_atomic(qp, s, d).map(|()| Outcome::Read(0))
    } else if d.info.atomic_write {
        execute_atomic_write(qp, s, d, reth).map(|()| Outcome::Read(0))
    } else if d.info.flush {
        execute_flush(qp, s, d, reth).map(|()| Outcome::Read(0))
    } else if d.info.is_send {
        execute_send(qp, s, d, carried)
    } else if d.info.is_write {
        execute_write(qp, s, d, reth, imm)
    } else if let Some(reth) = reth.filter(|_| d.info.is_read) {
        check_remote(qp, s, &reth, Access::REMOTE_READ)
            .and_then(|()| queue_read(s, &reth, psn, false))
            .map(|()| Outcome::Read(reth.dma_len))
    } else {
        Err(Failure::Invalid)
    };
    let mtu = s.attrs.path_mtu;
    match result {
        // An atomic's acknowledge is queued like a READ's response (one PSN, `len` 0).
        Ok(Outcome::Read(len)) => {
            s.resp.seq.advance(&d.info, len, mtu);
            s.resp.nak_sent = false;
            if s.resp.reads.len() == 1 && packet_count(len, mtu) <= READ_RESPONSES_INLINE {
                send_owed_replies(qp, s, READ_RESPONSES_INLINE);
            } else {
                qp::schedule_read_replies(qp);
            }
            Counter::RcvdPkts
        }
        Ok(Outcome::Done) => {
            s.resp.seq.advance(&d.info, 0, mtu);
            s.resp.nak_sent = false;
            if d.bth.ack_req {
                send_ack(
                    qp,
                    s,
                    Syndrome::Ack {
                        credits: AETH_NO_CREDITS,
                    },
                    psn,
                );
            }
            Counter::RcvdPkts
        }
        Ok(Outcome::NotReady) => {
            // Not executed: the requester sends it again after the RNR timer.
            rnr_nak(qp, s, psn);
            Counter::RcvdRnr
        }
        Err(f) => {
            if let Failure::Local(status) = f {
                complete_recv(qp, s, status, wc_opcode::RECV, 0, Carried::Nothing, false);
            }
            fail(qp, s, f, psn);
            Counter::RcvdInvalidRequest
        }
    }
}

/// The RETH, immediate data and what a receive completion carries, from a request's extended
/// headers.
pub(super) fn extended_headers(d: &Datagram<'_>) -> (Option<Reth>, Option<[u8; 4]>, Carried) {
    // A FLUSH's RETH follows its FETH.
    let reth_at = if d.info.flush { FETH_BYTES } else { 0 };
    let reth = if d.info.reth {
        d.ext_headers.get(reth_at..).and_then(Reth::parse)
    } else {
        None
    };
    // ImmDt and IETH are the last 4 bytes of the extended headers (never both).
    let last_word: Option<[u8; 4]> = d
        .ext_headers
        .get(d.ext_headers.len().saturating_sub(4)..)
        .and_then(|b| b.try_into().ok());
    let imm = last_word.filter(|_| d.info.immdt);
    let carried = match last_word {
        Some(rkey) if d.info.ieth => Carried::Invalidated(u32::from_be_bytes(rkey)),
        _ => Carried::imm(imm),
    };
    (reth, imm, carried)
}

/// What executing a request came to.
pub(super) enum Outcome {
    /// Executed: acknowledge if asked.
    Done,
    /// An RDMA READ of this many bytes was queued for its responses (0 also for an atomic,
    /// executed, its acknowledge queued).
    Read(u32),
    /// No receive WQE: the request was not executed (RC answers with an RNR NAK).
    NotReady,
}

pub(super) type Executed = core::result::Result<Outcome, Failure>;

/// The RNR case: no receive WQE for a message that needs one.
struct Rnr;

/// Makes sure a receive WQE is there for a message that consumes one.
fn need_recv(
    qp: &QpInner,
    s: &mut QpLocked,
) -> core::result::Result<core::result::Result<(), Rnr>, Failure> {
    if s.resp.recv.is_some() {
        return Ok(Ok(()));
    }
    match take_recv_wqe(qp, s.resp.rq_consumer, &mut s.resp.recv) {
        Ok(true) => Ok(Ok(())),
        Ok(false) => Ok(Err(Rnr)),
        Err(RqError::BadWqe) => Err(Failure::Local(WcStatus::LocQpOpErr)),
        Err(RqError::BrokenRing) => Err(Failure::BrokenRing),
    }
}

fn rnr_nak(qp: &QpInner, s: &mut QpLocked, psn: Psn) {
    let timer = s.attrs.min_rnr_timer;
    send_ack(qp, s, Syndrome::RnrNak { timer }, psn);
}

/// A SEND packet: its payload after what the receive WQE holds, completed by its last packet.
pub(super) fn execute_send(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
    carried: Carried,
) -> Executed {
    if d.info.is_first {
        if let Err(Rnr) = need_recv(qp, s)? {
            return Ok(Outcome::NotReady);
        }
    }
    let recv = s.resp.recv.as_mut().ok_or(Failure::Invalid)?;
    scatter(qp, recv, d.payload).map_err(Failure::Local)?;
    if d.info.is_last {
        let len = recv.received as u32;
        if let Carried::Invalidated(rkey) = carried {
            // After the data is placed; only a fast-registration MR of our PD or a type 2
            // window bound to this QP, by its key.
            qp.res()
                .invalidate(rkey, qp.pd, qp.serial, true)
                .map_err(|_| Failure::Local(WcStatus::RemInvReqErr))?;
        }
        complete_recv(
            qp,
            s,
            WcStatus::Success,
            wc_opcode::RECV,
            len,
            carried,
            d.bth.solicited,
        );
    }
    Ok(Outcome::Done)
}

/// An RDMA WRITE packet: its payload into the MR the message's first packet named.
pub(super) fn execute_write(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
    reth: Option<Reth>,
    imm: Option<[u8; 4]>,
) -> Executed {
    if d.info.is_first {
        let reth = reth.ok_or(Failure::Invalid)?;
        check_remote(qp, s, &reth, Access::REMOTE_WRITE)?;
        s.resp.write = Some(WriteInProgress {
            rkey: reth.rkey,
            va: reth.va,
            resid: reth.dma_len,
            dma_len: reth.dma_len,
        });
    }
    // WRITE WITH IMMEDIATE consumes a receive WQE with its last packet: RNR before any byte
    // of that packet lands, so that the retry finds everything as it was.
    if imm.is_some() {
        if let Err(Rnr) = need_recv(qp, s)? {
            return Ok(Outcome::NotReady);
        }
    }
    let w = s.resp.write.as_mut().ok_or(Failure::Invalid)?;
    let n = d.payload.len() as u32;
    if n > w.resid || (d.info.is_last && n != w.resid) {
        return Err(Failure::Invalid);
    }
    if n > 0 {
        let mr = qp.res().lookup_rkey(w.rkey).ok_or(Failure::Access)?;
        // The payload where the skb holds it, piece by piece; each piece's address from the
        // bytes before it (never the end, which may be 2^64).
        let mut done = 0u64;
        for piece in d.payload.pieces() {
            let va = w.va.checked_add(done).ok_or(Failure::Access)?;
            mr.write(qp.pd, qp.serial, va, piece, Access::REMOTE_WRITE)
                .map_err(|_| Failure::Access)?;
            done = done.saturating_add(piece.len() as u64);
        }
    }
    w.resid -= n;
    if w.resid > 0 {
        // Still inside the range checked at the first packet; checked all the same. (After
        // the last packet the end may be 2^64 itself, which is not an address.)
        w.va = w.va.checked_add(u64::from(n)).ok_or(Failure::Access)?;
    }
    let dma_len = w.dma_len;
    if d.info.is_last {
        s.resp.write = None;
        if imm.is_some() {
            complete_recv(
                qp,
                s,
                WcStatus::Success,
                wc_opcode::RECV_RDMA_WITH_IMM,
                dma_len,
                Carried::imm(imm),
                d.bth.solicited,
            );
        }
    }
    Ok(Outcome::Done)
}

/// A COMPARE SWAP or FETCH ADD: executed at once on the 8 bytes its R_Key and address name,
/// its result recorded for a repeat and its acknowledge queued in turn with READ responses.
fn execute_atomic(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
) -> core::result::Result<(), Failure> {
    // A QP that does not take atomics, or a requester over its credits, makes an invalid
    // request, and so does a misaligned address; key, rights and range are access errors: the
    // codes rdma_rxe sends for each error alone. (With two, it checks the range first, so a
    // misaligned address out of range gets its access error; and `max_dest_rd_atomic` 0 takes
    // no request at all there, while here it counts as 1.)
    if !s.attrs.access.contains(Access::REMOTE_ATOMIC) {
        return Err(Failure::Invalid);
    }
    if s.resp.reads.owed_to_new_requests() >= usize::from(s.attrs.max_dest_rd_atomic.max(1)) {
        return Err(Failure::Invalid);
    }
    let eth = AtomicEth::parse(d.ext_headers).ok_or(Failure::Invalid)?;
    let op = eth.op(d.bth.op()).ok_or(Failure::Invalid)?;
    if !is_aligned(eth.va) {
        return Err(Failure::Invalid);
    }
    let rkey = qp.res().lookup_rkey(eth.rkey).ok_or(Failure::Access)?;
    let orig = rkey
        .atomic(qp.pd, qp.serial, eth.va, op)
        .map_err(|e| match e {
            AccessError::Misaligned => Failure::Invalid,
            _ => Failure::Access,
        })?;
    let psn = d.bth.psn;
    s.resp.atomics.record(psn, orig);
    queue_reply(s, ReadReply::atomic(psn, s.resp.seq.msn, orig), false)
}

/// An ATOMIC WRITE (IBTA 1.5): its 8 bytes stored at once, after everything before them, at
/// the aligned address its RETH names; answered, in turn with READ responses, by an empty READ
/// RESPONSE ONLY, and recorded so that a repeat is answered without storing again.
fn execute_atomic_write(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
    reth: Option<Reth>,
) -> core::result::Result<(), Failure> {
    // The QP's remote write right, a READ credit, exactly 8 bytes, an aligned address (else
    // invalid request); the R_Key's remote write right over them (else access): rdma_rxe's
    // codes for each error alone (see `execute_atomic` for two at once).
    if !s.attrs.access.contains(Access::REMOTE_WRITE) {
        return Err(Failure::Invalid);
    }
    if s.resp.reads.owed_to_new_requests() >= usize::from(s.attrs.max_dest_rd_atomic.max(1)) {
        return Err(Failure::Invalid);
    }
    let reth = reth.ok_or(Failure::Invalid)?;
    let value: [u8; 8] = d.payload.to_array().ok_or(Failure::Invalid)?;
    if reth.dma_len != ATOMIC_BYTES || d.bth.pad != 0 || !is_aligned(reth.va) {
        return Err(Failure::Invalid);
    }
    let rkey = qp.res().lookup_rkey(reth.rkey).ok_or(Failure::Access)?;
    let op = AtomicOp::Write {
        value: u64::from_ne_bytes(value),
    };
    rkey.atomic(qp.pd, qp.serial, reth.va, op)
        .map_err(|e| match e {
            AccessError::Misaligned => Failure::Invalid,
            _ => Failure::Access,
        })?;
    let psn = d.bth.psn;
    s.resp.atomics.record(psn, 0);
    let mtu = s.attrs.path_mtu;
    let reply = ReadReply::new(reth.rkey, reth.va, 0, psn, s.resp.seq.msn, mtu);
    queue_reply(s, reply, false)
}

/// A FLUSH (IBTA 1.5): what WRITEs placed before it is visible to every agent of this host
/// (global visibility) and, for persistence, in persistent memory, once it is answered, in turn
/// with READ responses, by an empty READ RESPONSE ONLY. Our WRITEs are the CPU's own stores,
/// done by the time the FLUSH arrives (requests run in order), and on an MR with the persistent
/// right (only ever on persistent memory) they went around the CPU caches: either placement
/// takes a full barrier, whatever the range. Recorded like an ATOMIC WRITE, so that a repeat is
/// answered again.
fn execute_flush(
    qp: &QpInner,
    s: &mut QpLocked,
    d: &Datagram<'_>,
    reth: Option<Reth>,
) -> core::result::Result<(), Failure> {
    // No placement or a reserved bit, a placement the QP does not grant, no READ credit (IBTA
    // counts FLUSH among them; rdma_rxe 6.12's requester does not), a malformed header:
    // invalid request. The R_Key's rights for each placement over the range (the whole region
    // at its level: the range is not checked): access.
    let feth = Feth::parse(d.ext_headers).ok_or(Failure::Invalid)?;
    let reth = reth.ok_or(Failure::Invalid)?;
    let rights = flush_rights(feth.placement).ok_or(Failure::Invalid)?;
    if !s.attrs.access.contains(rights) {
        return Err(Failure::Invalid);
    }
    if s.resp.reads.owed_to_new_requests() >= usize::from(s.attrs.max_dest_rd_atomic.max(1)) {
        return Err(Failure::Invalid);
    }
    let key = qp.res().lookup_rkey(reth.rkey).ok_or(Failure::Access)?;
    let len = u64::from(reth.dma_len);
    match (
        key.check(qp.pd, qp.serial, reth.va, len, rights),
        feth.level,
    ) {
        (Ok(()), _) | (Err(AccessError::OutOfBounds), FlushLevel::Region) => {}
        (Err(_), _) => return Err(Failure::Access),
    }
    fence(Ordering::SeqCst);
    if rights.contains(Access::FLUSH_PERSISTENT) {
        // (Each write-through copy already ended with one, on its own CPU.)
        crate::kext::pmem_wmb();
    }
    let psn = d.bth.psn;
    s.resp.atomics.record(psn, 0);
    let mtu = s.attrs.path_mtu;
    let reply = ReadReply::new(reth.rkey, reth.va, 0, psn, s.resp.seq.msn, mtu);
    queue_reply(s, reply, false)
}

/// The rights a FLUSH's placement type bits need (of the QP and of the R_Key); `None` for
/// none, or a reserved bit.
fn flush_rights(placement: u8) -> Option<Access> {
    if placement == 0 || placement & !(PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT) != 0 {
        return None;
    }
    let mut rights = Access::NONE;
    if placement & PLACEMENT_GLOBAL != 0 {
        rights = rights.union(Access::FLUSH_GLOBAL);
    }
    if placement & PLACEMENT_PERSISTENT != 0 {
        rights = rights.union(Access::FLUSH_PERSISTENT);
    }
    Some(rights)
}

/// A request we executed before: acknowledge it again, or for a READ, answer it again (the
/// requester asks for what it lost, possibly from the middle of the responses), or for an
/// atomic, send its recorded result again.
fn duplicate(qp: &Arc<QpInner>, s: &mut QpLocked, d: &Datagram<'_>) {
    if d.info.atomic_eth || d.info.atomic_write || d.info.flush {
        // Never executed twice. A result no longer recorded cannot be sent: the repeat is
        // dropped (IBA 9.7.5.2.5; a requester that follows the rules never asks for one).
        let psn = d.bth.psn;
        let Some(orig) = s.resp.atomics.find(psn) else {
            return;
        };
        // Its MSN: what it was is not recorded; the requester does not check an MSN.
        let msn = s.resp.seq.msn.wrapping_sub(1) & crate::proto::psn::PSN_MASK;
        let reply = if d.info.atomic_write || d.info.flush {
            ReadReply::new(0, 0, 0, psn, msn, s.attrs.path_mtu)
        } else {
            ReadReply::atomic(psn, msn, orig)
        };
        if queue_reply(s, reply, true).is_ok() {
            // Answered from here when nothing else is owed, as a new atomic is.
            if s.resp.reads.len() == 1 {
                send_owed_replies(qp, s, READ_RESPONSES_INLINE);
            } else {
                qp::schedule_read_replies(qp);
            }
        }
        return;
    }
    if d.info.is_read {
        if let Some(reth) = Reth::parse(d.ext_headers) {
            // Only PSNs a READ executed before took: the responses must not run past them.
            let end = d.bth.psn.add(packet_count(reth.dma_len, s.attrs.path_mtu));
            if end.diff(s.resp.seq.epsn) > 0 {
                return;
            }
            match check_remote(qp, s, &reth, Access::REMOTE_READ) {
                Ok(()) => {
                    // Room is made by dropping older repeats (`ReadReplies::push`); if it
                    // could not be, the requester would simply ask again.
                    if queue_read(s, &reth, d.bth.psn, true).is_ok() {
                        qp::schedule_read_replies(qp);
                    }
                }
                // Its MR went away (or the rights): NAK it, after what is owed, or a requester
                // with retry_cnt 7 (retry forever) asks again for good. This QP stays as it is
                // (rdma_rxe moves its own to the error state): without a record of the READs
                // executed (rdma_rxe's responder resources) a repeat cannot be told from a
                // forgery at a guessed PSN, or from a spurious retry of a READ the requester
                // has since completed (ours takes the NAK as stale), and neither may end the
                // QP. A forger learns nothing new: it could as well send the NAK itself.
                Err(Failure::Access) => {
                    send_ack(qp, s, Syndrome::Nak(NakCode::RemoteAccessError), d.bth.psn)
                }
                // Longer than any READ we execute: not one we took.
                Err(_) => {}
            }
        }
        return;
    }
    let last_done = s.resp.seq.epsn.add(0xff_ffff);
    send_ack(
        qp,
        s,
        Syndrome::Ack {
            credits: AETH_NO_CREDITS,
        },
        last_done,
    );
}

/// NAKs the request at `psn` and moves the QP to the error state.
fn fail(qp: &QpInner, s: &mut QpLocked, f: Failure, psn: Psn) {
    let code = match f {
        Failure::Access => NakCode::RemoteAccessError,
        // The receive's own fault (a malformed WQE, or memory its L_Keys do not grant, as
        // after the MR was re-registered): nothing the requester did wrong.
        Failure::Local(WcStatus::LocQpOpErr | WcStatus::LocProtErr) | Failure::BrokenRing => {
            NakCode::RemoteOperationalError
        }
        Failure::Invalid | Failure::Local(_) => NakCode::InvalidRequest,
    };
    // The error state ends the QP's traffic: no reason to wait for READ responses.
    send_ack_now(qp, s, Syndrome::Nak(code), psn);
    if let Failure::BrokenRing = f {
        qp.fatal(s);
    } else {
        qp.enter_error(s);
    }
}
