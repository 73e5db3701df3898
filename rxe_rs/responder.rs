// SPDX-License-Identifier: GPL-2.0
//! The responder: executes the requests a QP receives. SENDs scatter into the next receive
//! WQE; RDMA WRITEs land in the MR their R_Key names; RDMA READs are answered with response
//! packets. It acknowledges what the requester asks it to, answers duplicates again, and NAKs
//! gaps (once per gap), missing receive WQEs (RNR), bad keys and malformed requests.

use crate::{
    counters::Counter,
    cq::RxeCq,
    device::RxeDevice,
    kext::{
        ib::{access, Device},
        mmap::RingIndex,
    },
    limits,
    mr::AccessError,
    proto::{
        headers::{Aeth, NakCode, Reth, Syndrome, AETH_NO_CREDITS},
        opcode::Opcode,
        packet::Datagram,
        psn::Psn,
        responder::{ResponderSeq, Verdict},
        segment::{packet_count, read_response_opcode},
        wire::Frame,
    },
    qp::{state, QpInner, QpState},
    requester::bth,
    transmit::Transmitter,
    uapi::{wc_flags, wc_opcode, wc_status, Cqe, RecvWqe, Sge},
};

/// A receive WQE taken from the RQ, and how far a message has filled it.
pub(crate) struct RecvInProgress {
    pub(crate) wr_id: u64,
    pub(crate) sges: [Sge; limits::MAX_SGE as usize],
    pub(crate) num_sge: usize,
    /// Bytes received so far.
    pub(crate) received: u64,
}

/// Where a multi-packet RDMA WRITE is going.
#[derive(Clone, Copy)]
pub(crate) struct WriteInProgress {
    rkey: u32,
    va: u64,
    /// Bytes still to come.
    resid: u32,
    /// Its whole length (reported by a WRITE WITH IMMEDIATE's completion).
    dma_len: u32,
}

/// Receive-side state of a QP.
#[derive(Default)]
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
}

impl Responder {
    /// Ready to receive at `epsn` (move to RTR).
    pub(crate) fn start(&mut self, epsn: Psn) {
        self.seq = ResponderSeq { epsn, ..Default::default() };
        self.recv = None;
        self.write = None;
        self.nak_sent = false;
    }
}

/// Why a request fails: the NAK it gets (and the QP goes to the error state).
#[derive(Clone, Copy)]
enum Failure {
    /// Malformed or unexpected: NAK "invalid request".
    Invalid,
    /// Bad R_Key, rights or range: NAK "remote access error".
    Access,
    /// The receive WQE could not take the SEND: the WQE completes with this local status, and
    /// the NAK is "invalid request" (too long) or "remote operational error" (a malformed WQE).
    Local(u32),
    /// The RQ's indices are corrupt: NAK "remote operational error", and the QP's owner gets
    /// `IB_EVENT_QP_FATAL`.
    BrokenRing,
}

/// Why the next receive WQE cannot be used. Only a process writing garbage to its own RQ gets
/// here: the provider never posts either.
#[derive(Clone, Copy)]
enum RqError {
    /// The indices are inconsistent: nothing in the ring can be trusted.
    BrokenRing,
    /// The WQE is malformed (more SGEs than the QP has); it was taken off the ring with no SGEs.
    BadWqe,
}

/// Takes the next receive WQE off the RQ: `Ok(false)` if the process posted none (RNR).
fn take_recv_wqe(qp: &QpInner, rq_consumer: u32, recv: &mut Option<RecvInProgress>) -> core::result::Result<bool, RqError> {
    let producer = qp.rq.load(RingIndex::Producer);
    match qp.rq.geometry().occupancy(producer, rq_consumer) {
        None => return Err(RqError::BrokenRing),
        Some(0) => return Ok(false),
        Some(_) => {}
    }
    let wqe: RecvWqe = qp.rq.read(rq_consumer, 0).map_err(|_| RqError::BrokenRing)?;
    let r = recv.insert(RecvInProgress { wr_id: wqe.wr_id, sges: [Sge::default(); limits::MAX_SGE as usize], num_sge: 0, received: 0 });
    let num_sge = wqe.num_sge as usize;
    if num_sge > qp.caps.max_recv_sge as usize {
        return Err(RqError::BadWqe);
    }
    for (i, sge) in r.sges[..num_sge].iter_mut().enumerate() {
        *sge = qp.rq.read(rq_consumer, core::mem::size_of::<RecvWqe>() + i * core::mem::size_of::<Sge>()).map_err(|_| RqError::BrokenRing)?;
    }
    r.num_sge = num_sge;
    Ok(true)
}

/// Copies `data` into the WQE's buffers after what is already there.
fn scatter(dev: &Device<RxeDevice>, pd: u32, recv: &mut RecvInProgress, mut data: &[u8]) -> core::result::Result<(), u32> {
    let mut skip = recv.received;
    for sge in &recv.sges[..recv.num_sge] {
        if data.is_empty() {
            break;
        }
        let len = u64::from(sge.length);
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = (len - skip).min(data.len() as u64) as usize;
        let mr = dev.lookup_mr(sge.lkey).ok_or(wc_status::LOC_PROT_ERR)?;
        mr.write(pd, sge.addr + skip, &data[..n], access::LOCAL_WRITE).map_err(|e| match e {
            AccessError::OutOfBounds | AccessError::Denied => wc_status::LOC_PROT_ERR,
        })?;
        recv.received += n as u64;
        data = &data[n..];
        skip = 0;
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(wc_status::LOC_LEN_ERR)
    }
}

/// Posts the receive completion of the WQE in `s.resp.recv` and retires it.
fn complete_recv(qp: &QpInner, s: &mut QpState, status: u32, opcode: u32, byte_len: u32, imm: Option<[u8; 4]>, solicited: bool) {
    let Some(recv) = s.resp.recv.take() else { return };
    s.resp.rq_consumer = s.resp.rq_consumer.wrapping_add(1);
    qp.rq.store(RingIndex::Consumer, s.resp.rq_consumer);
    let cqe = Cqe {
        wr_id: recv.wr_id,
        status,
        opcode,
        byte_len,
        imm_data: imm.map_or(0, u32::from_ne_bytes),
        qp_num: qp.qpn,
        wc_flags: if imm.is_some() && status == wc_status::SUCCESS { wc_flags::WITH_IMM } else { 0 },
        ..Default::default()
    };
    // A full CQ raises IB_EVENT_CQ_ERR inside `post`.
    let _ = RxeCq::post(qp.links.recv.get(), &cqe, solicited);
}

/// Completes every posted receive WQE with WR_FLUSH_ERR (the QP is in the error state).
pub(crate) fn flush_rq(qp: &QpInner, s: &mut QpState) {
    loop {
        if s.resp.recv.is_none() {
            match take_recv_wqe(qp, s.resp.rq_consumer, &mut s.resp.recv) {
                Ok(true) | Err(RqError::BadWqe) => {}
                // Nothing posted, or a ring too corrupt to read: nothing more to flush.
                Ok(false) | Err(RqError::BrokenRing) => return,
            }
        }
        complete_recv(qp, s, wc_status::WR_FLUSH_ERR, wc_opcode::RECV, 0, None, false);
    }
}

/// Sends an ACK or NAK for `psn`.
fn send_ack(dev: &Device<RxeDevice>, qp: &QpInner, s: &QpState, syndrome: Syndrome, psn: Psn) {
    let Some(av) = s.attrs.av else { return };
    let Some(tx) = Transmitter::new(dev, &av) else { return };
    let frame = Frame {
        av,
        sport: qp.sport,
        bth: bth(Opcode::RC_ACK.0, s.attrs.dest_qpn, psn, false, false),
        reth: None,
        aeth: Some(Aeth { syndrome, msn: s.resp.seq.msn }),
        immdt: None,
        payload_len: 0,
    };
    // A lost ACK is recovered by the requester's retransmission.
    let _ = tx.send(&frame, |_| Ok(()));
}

/// Answers an RDMA READ request at `psn` for `reth` with its response packets.
fn read_reply(dev: &Device<RxeDevice>, qp: &QpInner, s: &QpState, reth: &Reth, psn: Psn) {
    let Some(av) = s.attrs.av else { return };
    let Some(tx) = Transmitter::new(dev, &av) else { return };
    let mtu = s.attrs.path_mtu.bytes();
    let count = packet_count(reth.dma_len, s.attrs.path_mtu);
    for i in 0..count {
        let opcode = read_response_opcode(i, count);
        let offset = i * mtu;
        let len = (reth.dma_len - offset).min(mtu);
        let last = i + 1 == count;
        let info = opcode.info();
        // MSN: the READ counts as completed with its last response.
        let msn = if last { (s.resp.seq.msn + 1) & crate::proto::psn::PSN_MASK } else { s.resp.seq.msn };
        let frame = Frame {
            av,
            sport: qp.sport,
            bth: bth(opcode.0, s.attrs.dest_qpn, psn.add(i), false, false),
            reth: None,
            aeth: info.is_some_and(|i| i.aeth).then_some(Aeth { syndrome: Syndrome::Ack { credits: AETH_NO_CREDITS }, msn }),
            immdt: None,
            payload_len: len,
        };
        let va = reth.va + u64::from(offset);
        let result = tx.send(&frame, |out| {
            let mr = dev.lookup_mr(reth.rkey).ok_or(wc_status::REM_ACCESS_ERR)?;
            mr.read(qp.pd, va, out, access::REMOTE_READ).map_err(|_| wc_status::REM_ACCESS_ERR)
        });
        if result.is_err() {
            // The requester asks again for what it misses.
            return;
        }
    }
}

/// Checks that `reth` names `len` bytes of an MR of ours the peer may access with `rights`.
fn check_remote(dev: &Device<RxeDevice>, qp: &QpInner, s: &QpState, reth: &Reth, rights: i32) -> core::result::Result<(), Failure> {
    if s.attrs.access & rights != rights {
        return Err(Failure::Access);
    }
    if reth.dma_len == 0 {
        return Ok(());
    }
    let mr = dev.lookup_mr(reth.rkey).ok_or(Failure::Access)?;
    mr.check(qp.pd, reth.va, u64::from(reth.dma_len), rights).map(|_| ()).map_err(|_| Failure::Access)
}

/// Handles one valid request packet for `qp`, in softirq; returns the counter it moves.
pub(crate) fn handle_request(dev: &Device<RxeDevice>, qp: &QpInner, d: &Datagram<'_>) -> Counter {
    let mut guard = qp.state.lock();
    let s = &mut *guard;
    if s.attrs.state != state::RTR && s.attrs.state != state::RTS && s.attrs.state != state::SQD {
        return Counter::RcvdQpNotReady;
    }
    if d.info.ieth || d.info.atomic_eth {
        // SEND WITH INVALIDATE and atomics are not offered (no MWs, atomic_cap NONE).
        send_ack(dev, qp, s, Syndrome::Nak(NakCode::InvalidRequest), d.bth.psn);
        return Counter::RcvdUnsupported;
    }
    let psn = d.bth.psn;
    match s.resp.seq.classify(d.bth.op(), &d.info, psn, d.payload.len() as u32, s.attrs.path_mtu) {
        Verdict::Execute => {}
        Verdict::Duplicate => {
            duplicate(dev, qp, s, d);
            return Counter::DuplicateRequest;
        }
        Verdict::OutOfSequence => {
            if !s.resp.nak_sent {
                s.resp.nak_sent = true;
                let epsn = s.resp.seq.epsn;
                send_ack(dev, qp, s, Syndrome::Nak(NakCode::PsnSequenceError), epsn);
            }
            return Counter::RcvdSeqErr;
        }
        Verdict::InvalidRequest => {
            fail(dev, qp, s, Failure::Invalid, psn);
            return Counter::RcvdInvalidRequest;
        }
    }
    let reth = if d.info.reth { Reth::parse(d.ext_headers) } else { None };
    let imm = if d.info.immdt { d.ext_headers.get(d.ext_headers.len() - 4..).and_then(|b| b.try_into().ok()) } else { None };
    let result = if d.info.is_send {
        execute_send(dev, qp, s, d, imm)
    } else if d.info.is_write {
        execute_write(dev, qp, s, d, reth, imm)
    } else if let Some(reth) = reth.filter(|_| d.info.is_read) {
        check_remote(dev, qp, s, &reth, access::REMOTE_READ).map(|()| {
            read_reply(dev, qp, s, &reth, psn);
            Outcome::Read(reth.dma_len)
        })
    } else {
        Err(Failure::Invalid)
    };
    let mtu = s.attrs.path_mtu;
    match result {
        Ok(Outcome::Read(len)) => {
            s.resp.seq.advance(&d.info, len, mtu);
            s.resp.nak_sent = false;
            Counter::RcvdPkts
        }
        Ok(Outcome::Done) => {
            s.resp.seq.advance(&d.info, 0, mtu);
            s.resp.nak_sent = false;
            if d.bth.ack_req {
                send_ack(dev, qp, s, Syndrome::Ack { credits: AETH_NO_CREDITS }, psn);
            }
            Counter::RcvdPkts
        }
        Ok(Outcome::NotReady) => Counter::RcvdRnr,
        Err(f) => {
            if let Failure::Local(status) = f {
                complete_recv(qp, s, status, wc_opcode::RECV, 0, None, false);
            }
            fail(dev, qp, s, f, psn);
            Counter::RcvdInvalidRequest
        }
    }
}

/// What executing a request came to.
enum Outcome {
    /// Executed: acknowledge if asked.
    Done,
    /// An RDMA READ of this many bytes was answered.
    Read(u32),
    /// No receive WQE: an RNR NAK went back and the request was not executed.
    NotReady,
}

type Executed = core::result::Result<Outcome, Failure>;

/// The RNR case: no receive WQE for a message that needs one.
struct Rnr;

/// Makes sure a receive WQE is there for a message that consumes one.
fn need_recv(qp: &QpInner, s: &mut QpState) -> core::result::Result<core::result::Result<(), Rnr>, Failure> {
    if s.resp.recv.is_some() {
        return Ok(Ok(()));
    }
    match take_recv_wqe(qp, s.resp.rq_consumer, &mut s.resp.recv) {
        Ok(true) => Ok(Ok(())),
        Ok(false) => Ok(Err(Rnr)),
        Err(RqError::BadWqe) => Err(Failure::Local(wc_status::LOC_QP_OP_ERR)),
        Err(RqError::BrokenRing) => Err(Failure::BrokenRing),
    }
}

fn rnr_nak(dev: &Device<RxeDevice>, qp: &QpInner, s: &QpState, psn: Psn) {
    send_ack(dev, qp, s, Syndrome::RnrNak { timer: s.attrs.min_rnr_timer }, psn);
}

fn execute_send(dev: &Device<RxeDevice>, qp: &QpInner, s: &mut QpState, d: &Datagram<'_>, imm: Option<[u8; 4]>) -> Executed {
    if d.info.is_first {
        if let Err(Rnr) = need_recv(qp, s)? {
            // Not executed: the requester sends it again after the RNR timer.
            rnr_nak(dev, qp, s, d.bth.psn);
            return Ok(Outcome::NotReady);
        }
    }
    let recv = s.resp.recv.as_mut().ok_or(Failure::Invalid)?;
    scatter(dev, qp.pd, recv, d.payload).map_err(Failure::Local)?;
    if d.info.is_last {
        let len = recv.received as u32;
        complete_recv(qp, s, wc_status::SUCCESS, wc_opcode::RECV, len, imm, d.bth.solicited);
    }
    Ok(Outcome::Done)
}

fn execute_write(dev: &Device<RxeDevice>, qp: &QpInner, s: &mut QpState, d: &Datagram<'_>, reth: Option<Reth>, imm: Option<[u8; 4]>) -> Executed {
    if d.info.is_first {
        let reth = reth.ok_or(Failure::Invalid)?;
        check_remote(dev, qp, s, &reth, access::REMOTE_WRITE)?;
        s.resp.write = Some(WriteInProgress { rkey: reth.rkey, va: reth.va, resid: reth.dma_len, dma_len: reth.dma_len });
    }
    // WRITE WITH IMMEDIATE consumes a receive WQE with its last packet: RNR before any byte
    // of that packet lands, so that the retry finds everything as it was.
    if imm.is_some() {
        if let Err(Rnr) = need_recv(qp, s)? {
            rnr_nak(dev, qp, s, d.bth.psn);
            return Ok(Outcome::NotReady);
        }
    }
    let w = s.resp.write.as_mut().ok_or(Failure::Invalid)?;
    let n = d.payload.len() as u32;
    if n > w.resid || (d.info.is_last && n != w.resid) {
        return Err(Failure::Invalid);
    }
    if n > 0 {
        let mr = dev.lookup_mr(w.rkey).ok_or(Failure::Access)?;
        mr.write(qp.pd, w.va, d.payload, access::REMOTE_WRITE).map_err(|_| Failure::Access)?;
    }
    w.va += u64::from(n);
    w.resid -= n;
    let dma_len = w.dma_len;
    if d.info.is_last {
        s.resp.write = None;
        if imm.is_some() {
            complete_recv(qp, s, wc_status::SUCCESS, wc_opcode::RECV_RDMA_WITH_IMM, dma_len, imm, d.bth.solicited);
        }
    }
    Ok(Outcome::Done)
}

/// A request we executed before: acknowledge it again, or for a READ, answer it again (the
/// requester asks for what it lost, possibly from the middle of the responses).
fn duplicate(dev: &Device<RxeDevice>, qp: &QpInner, s: &QpState, d: &Datagram<'_>) {
    if d.info.is_read {
        if let Some(reth) = Reth::parse(d.ext_headers) {
            // Only PSNs a READ executed before took: the responses must not run past them.
            let end = d.bth.psn.add(packet_count(reth.dma_len, s.attrs.path_mtu));
            if end.diff(s.resp.seq.epsn) <= 0 && check_remote(dev, qp, s, &reth, access::REMOTE_READ).is_ok() {
                read_reply(dev, qp, s, &reth, d.bth.psn);
            }
        }
        return;
    }
    let last_done = s.resp.seq.epsn.add(0xff_ffff);
    send_ack(dev, qp, s, Syndrome::Ack { credits: AETH_NO_CREDITS }, last_done);
}

/// NAKs the request at `psn` and moves the QP to the error state.
fn fail(dev: &Device<RxeDevice>, qp: &QpInner, s: &mut QpState, f: Failure, psn: Psn) {
    let code = match f {
        Failure::Access => NakCode::RemoteAccessError,
        Failure::Local(wc_status::LOC_QP_OP_ERR) | Failure::BrokenRing => NakCode::RemoteOperationalError,
        Failure::Invalid | Failure::Local(_) => NakCode::InvalidRequest,
    };
    send_ack(dev, qp, s, Syndrome::Nak(code), psn);
    if let Failure::BrokenRing = f {
        qp.fatal(s);
    } else {
        qp.enter_error(s);
    }
}
