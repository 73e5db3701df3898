// SPDX-License-Identifier: GPL-2.0
//! Unreliable datagrams (UD): each SEND is one packet to the address handle its WQE names, with
//! a DETH carrying the Q_Key and our QP number; it completes once handed to the IP layer, as
//! nothing acknowledges it. A datagram received fills the next receive WQE behind a 40-byte
//! GRH (the packet's IP header), or is dropped (counted) if there is none or it is too small:
//! UD never answers, so nothing here can be made to send by a packet.

use crate::{
    counters::Counter,
    kext::ib::{NetworkType, QpState},
    limits,
    net::transmit::{Transmitter, TxError},
    proto::{
        admit::pkeys_match,
        av::AddressVector,
        chunks::Chunks,
        grh::{grh_of, GRH_BYTES},
        headers::{Bth, Deth},
        mtu::IbMtu,
        opcode::{Opcode, Transport},
        packet::Datagram,
        psn::PSN_MASK,
        wire::Frame,
    },
    qp::{
        completer,
        requester::{self, RunEnd},
        responder::{self, DatagramSource},
        QpInner, QpLocked,
    },
    uapi::{send_flags, send_opcode, wc_opcode, WcStatus},
    verbs::recv_wqe::RqError,
};

/// A Q_Key with this bit set in a send WR means "the QP's own Q_Key" (IBA 10.2.5): so a process
/// can only send a controlled Q_Key (bit 31) if its QP was allowed to have one.
const QKEY_FROM_QP: u32 = 1 << 31;

/// The MTU of UD messages: the port's active MTU, which follows the netdev's.
fn port_mtu(qp: &QpInner) -> IbMtu {
    IbMtu::for_netdev_mtu(qp.res().ndev.mtu())
}

/// Fetches what the process posted up to `producer` and sends it, at most `budget` datagrams
/// (each WQE completes as it goes out): a batch larger than the kernel's copies is fetched
/// again as those complete, and what the budget leaves goes on from the doorbell work item.
/// Returns how it ended.
pub(crate) fn send(qp: &QpInner, s: &mut QpLocked, producer: u32, budget: &mut u32) -> RunEnd {
    let mtu = port_mtu(qp);
    // The route of the last address handle used: a burst to one peer looks it up once.
    let mut route: Option<(u32, AddressVector, Option<Transmitter<'_>>)> = None;
    loop {
        if let Err(end) = requester::fetch_posted(qp, &mut s.req, mtu, producer) {
            return end;
        }
        if s.req.q.cur == s.req.q.fetched {
            return RunEnd::Idle;
        }
        while s.req.q.cur != s.req.q.fetched {
            let index = s.req.q.cur;
            if index == s.req.q.started_end && s.attrs.state == QpState::Sqd {
                return RunEnd::Idle; // SQD: no new message starts
            }
            if *budget == 0 {
                s.req.yielded = true;
                return RunEnd::Idle;
            }
            *budget -= 1;
            if let Err(end) = send_one(qp, s, index, mtu, &mut route) {
                return end;
            }
        }
    }
}

/// Sends the WQE at `index` (fetched) and completes it.
fn send_one<'a>(
    qp: &'a QpInner,
    s: &mut QpLocked,
    index: u32,
    mtu: IbMtu,
    route: &mut Option<(u32, AddressVector, Option<Transmitter<'a>>)>,
) -> Result<(), RunEnd> {
    let w = *s.req.q.work(index);
    let wqe = *s.req.wqe(index);
    if w.len > mtu.bytes() {
        // Not sent, yet completed successfully, as IBA C10-93.1.1 allows and rdma_rxe does.
        qp.count(Counter::SentUdTooLong);
    } else {
        let Some(ah) = qp.res().lookup_ah(wqe.ah_num, qp.pd) else {
            return Err(RunEnd::Failed(index, WcStatus::LocQpOpErr));
        };
        if !matches!(&route, Some((num, av, _)) if *num == wqe.ah_num && *av == ah.av) {
            *route = Some((
                wqe.ah_num,
                ah.av,
                Transmitter::new(qp.res(), &ah.av, qp.qpn),
            ));
        }
        // No route (counted): lost, as a datagram may be.
        if let Some((_, av, Some(tx))) = route {
            let qkey = if wqe.remote_qkey & QKEY_FROM_QP != 0 {
                s.attrs.qkey
            } else {
                wqe.remote_qkey
            };
            let imm = wqe.opcode == send_opcode::SEND_WITH_IMM;
            let opcode = if imm {
                Opcode::UD_SEND_ONLY_IMM
            } else {
                Opcode::UD_SEND_ONLY
            };
            let frame = Frame {
                av: *av,
                sport: qp.sport,
                bth: Bth::ud(
                    opcode.0,
                    wqe.remote_qpn & PSN_MASK,
                    w.first_psn,
                    wqe.flags & send_flags::SOLICITED != 0,
                ),
                deth: Some(Deth {
                    qkey,
                    src_qp: qp.qpn,
                }),
                reth: None,
                atomic_eth: None,
                aeth: None,
                atomic_ack: None,
                immdt: imm.then_some(wqe.imm_data.to_ne_bytes()),
                payload_len: w.len,
            };
            let req = &s.req;
            match tx.send(&frame, |out| requester::gather(qp, req, index, 0, out)) {
                Ok(()) | Err(TxError::Dropped) => {}
                Err(TxError::Payload(status)) => return Err(RunEnd::Failed(index, status)),
            }
        }
    }
    s.req.q.record_sent(index, w.npkts);
    completer::retire(qp, &mut s.req, WcStatus::Success);
    Ok(())
}

/// Takes one datagram for `qp`, in softirq; returns the counter it moves.
pub(crate) fn receive(qp: &QpInner, d: &Datagram<'_>) -> Counter {
    let mut guard = qp.state.lock();
    let s = &mut *guard;
    let counter = receive_locked(qp, s, d);
    qp.settle(s);
    counter
}

fn receive_locked(qp: &QpInner, s: &mut QpLocked, d: &Datagram<'_>) -> Counter {
    if !responder::answers_requests(s) {
        return Counter::RcvdQpNotReady;
    }
    if d.info.transport != Some(Transport::Ud) {
        return Counter::RcvdWrongTransport;
    }
    if !pkeys_match(d.bth.pkey, limits::DEFAULT_PKEY) {
        return Counter::RcvdBadPkey;
    }
    let (Some(deth), Some(grh)) = (Deth::parse(d.ext_headers), grh_of(d.ip_header)) else {
        return Counter::RcvdMalformed;
    };
    if deth.qkey != s.attrs.qkey {
        return Counter::RcvdBadQkey;
    }
    // A UD message is one packet of at most the path MTU (IBA C10-93): one longer came in IP
    // fragments that the host reassembled, which no RoCE sender makes.
    if d.payload.len() > port_mtu(qp).bytes() as usize {
        return Counter::RcvdMalformed;
    }
    if s.resp.recv.is_none() {
        match responder::take_recv_wqe(qp, s.resp.rq_consumer, &mut s.resp.recv) {
            Ok(true) => {}
            Ok(false) => return Counter::RcvdUdDropped,
            Err(RqError::BadWqe) => {
                fail_recv(qp, s, WcStatus::LocQpOpErr);
                return Counter::RcvdInvalidRequest;
            }
            Err(RqError::BrokenRing) => {
                qp.fatal(s);
                return Counter::RcvdInvalidRequest;
            }
        }
    }
    let Some(recv) = s.resp.recv.as_mut() else {
        return Counter::RcvdUdDropped;
    };
    // The WQE stays posted for a datagram that fits: this one is dropped, as rdma_rxe does.
    // An SRQ's WQE, which already left the SRQ, completes with LOC_LEN_ERR instead (as a NIC
    // reports it), the QP running on: kept here, it would wait for a datagram that fits, where
    // the SRQ's other QPs could have used it.
    let room: u64 = recv.sges[..recv.num_sge]
        .iter()
        .map(|sge| u64::from(sge.length))
        .sum();
    let byte_len = d.payload.len() as u64 + GRH_BYTES as u64;
    if byte_len > room {
        if qp.peers.srq.is_some() {
            responder::complete_recv(
                qp,
                s,
                WcStatus::LocLenErr,
                wc_opcode::RECV,
                0,
                responder::Carried::Nothing,
                false,
            );
        }
        return Counter::RcvdUdDropped;
    }
    let written = responder::scatter(qp, recv, Chunks::of(&grh))
        .and_then(|()| responder::scatter(qp, recv, d.payload));
    if let Err(status) = written {
        fail_recv(qp, s, status);
        return Counter::RcvdInvalidRequest;
    }
    let imm = if d.info.immdt {
        d.ext_headers
            .get(d.ext_headers.len().saturating_sub(4)..)
            .and_then(|b| b.try_into().ok())
    } else {
        None
    };
    responder::complete_recv_from(
        qp,
        s,
        WcStatus::Success,
        wc_opcode::RECV,
        byte_len as u32,
        responder::Carried::imm(imm),
        d.bth.solicited,
        Some(DatagramSource {
            src_qp: deth.src_qp,
            network: if d.ip_header.len() == 20 {
                NetworkType::Ipv4
            } else {
                NetworkType::Ipv6
            },
        }),
    );
    Counter::RcvdPkts
}

/// The receive WQE cannot take a datagram (a malformed WQE, or buffers the QP may not write):
/// it completes with `status` and the QP enters the error state, as for any QP.
fn fail_recv(qp: &QpInner, s: &mut QpLocked, status: WcStatus) {
    responder::complete_recv_from(
        qp,
        s,
        status,
        wc_opcode::RECV,
        0,
        responder::Carried::Nothing,
        false,
        None,
    );
    qp.enter_error(s);
}
