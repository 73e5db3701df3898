// SPDX-License-Identifier: GPL-2.0
//! The responder: executes the requests a QP receives. SENDs so far: their payload is scattered
//! into the buffers of the next receive WQE, which completes with the last packet. RDMA WRITE and
//! READ, ACKs and NAKs come with the transmit path.

use crate::{
    counters::Counter,
    cq::RxeCq,
    device::RxeDevice,
    kext::{
        ib::{access, Device},
        mmap::RingIndex,
    },
    mr::AccessError,
    proto::{packet::Datagram, responder::Verdict},
    qp::{state, QpAttrs, QpInner, RecvInProgress},
    uapi::{wc_flags, wc_opcode, wc_status, Cqe, RecvWqe, Sge},
};
use kernel::prelude::*;

/// Takes the next receive WQE off the RQ: `Ok(None)` if the process posted none (RNR), `Err`
/// if the ring or the WQE is corrupt.
fn take_recv_wqe(qp: &QpInner, a: &QpAttrs) -> Result<Option<RecvInProgress>> {
    let producer = qp.rq.load(RingIndex::Producer);
    match qp.rq.geometry().occupancy(producer, a.rq_consumer) {
        None => return Err(EINVAL),
        Some(0) => return Ok(None),
        Some(_) => {}
    }
    let wqe: RecvWqe = qp.rq.read(a.rq_consumer, 0)?;
    let num_sge = wqe.num_sge as usize;
    if num_sge > qp.caps.max_recv_sge as usize {
        return Err(EINVAL);
    }
    let mut recv = RecvInProgress { wr_id: wqe.wr_id, sges: [Sge::default(); crate::limits::MAX_SGE as usize], num_sge, received: 0 };
    for (i, sge) in recv.sges[..num_sge].iter_mut().enumerate() {
        *sge = qp.rq.read(a.rq_consumer, core::mem::size_of::<RecvWqe>() + i * core::mem::size_of::<Sge>())?;
    }
    Ok(Some(recv))
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

/// Handles one valid request packet for `qp`, in softirq; returns the counter it moves.
pub(crate) fn handle_request(dev: &Device<RxeDevice>, qp: &QpInner, d: &Datagram<'_>) -> Counter {
    let mut a = qp.attrs.lock();
    if a.state != state::RTR && a.state != state::RTS {
        return Counter::RcvdQpNotReady;
    }
    if !d.info.is_send || d.info.ieth {
        return Counter::RcvdUnsupported;
    }
    match a.resp.classify(d.bth.op(), &d.info, d.bth.psn, d.payload.len() as u32, a.path_mtu) {
        Verdict::Execute => {}
        Verdict::Duplicate | Verdict::OutOfSequence => return Counter::RcvdSeqErr,
        Verdict::InvalidRequest => return Counter::RcvdInvalidRequest,
    }
    if d.info.is_first {
        match take_recv_wqe(qp, &a) {
            Ok(Some(recv)) => a.recv = Some(recv),
            Ok(None) => return Counter::RcvdRnr,
            Err(_) => return Counter::RcvdInvalidRequest,
        }
    }
    let Some(mut recv) = a.recv else {
        return Counter::RcvdInvalidRequest;
    };
    let status = match scatter(dev, qp.pd, &mut recv, d.payload) {
        Ok(()) => wc_status::SUCCESS,
        Err(status) => status,
    };
    let mtu = a.path_mtu;
    a.resp.advance(&d.info, 0, mtu);
    if !d.info.is_last && status == wc_status::SUCCESS {
        a.recv = Some(recv);
        return Counter::RcvdPkts;
    }
    // The message is complete (or failed): the WQE is done.
    a.recv = None;
    a.rq_consumer = a.rq_consumer.wrapping_add(1);
    qp.rq.store(RingIndex::Consumer, a.rq_consumer);
    drop(a);
    let imm = if d.info.immdt { d.ext_headers.get(..4) } else { None };
    let cqe = Cqe {
        wr_id: recv.wr_id,
        status,
        opcode: wc_opcode::RECV,
        byte_len: recv.received as u32,
        imm_data: imm.map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
        qp_num: qp.qpn,
        wc_flags: if imm.is_some() { wc_flags::WITH_IMM } else { 0 },
        ..Default::default()
    };
    // A full CQ raises IB_EVENT_CQ_ERR inside `post`; nothing more to do here.
    let _ = RxeCq::post(qp.cqs.recv.get(), &cqe, d.bth.solicited);
    Counter::RcvdPkts
}
