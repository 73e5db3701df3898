// SPDX-License-Identifier: GPL-2.0
//! The requester: takes send WQEs off the user's SQ ring (each copied into the kernel and
//! validated once), numbers their packets, and transmits within the window. Completion of
//! what it sent is the completer's job; both work on the QP's state under its lock.

use crate::{
    device::RxeDevice,
    kext::{ib::Device, mmap::RingIndex},
    limits,
    net::transmit::{Transmitter, TxError},
    proto::{
        av::AddressVector,
        headers::{Bth, Reth},
        mtu::IbMtu,
        psn::Psn,
        read_requests::{ReadRequest, ReadRequests, MAX_READ_REQUESTS},
        segment::{packet_count, segment, MessageKind},
        window::SendWindow,
        wire::Frame,
    },
    qp::{state, QpInner, QpState},
    uapi::{send_flags, send_opcode, wc_opcode, wc_status, SendWqe, Sge},
    verbs::mr::PdId,
    verbs::sgl,
};
use kernel::prelude::*;

/// An ACK is requested at least every this many packets of a long message.
const PACKETS_PER_ACK_REQ: u32 = 32;
/// An RDMA READ is asked for in parts of at most this many responses (fewer while the send
/// window is smaller), sent within the send window as a WRITE's packets are: READ responses are
/// not acknowledged, so nothing else keeps a large READ from arriving as one burst that
/// overflows the path. A part asked for again ends where it first ended ([`ReadRequests`]).
const READ_PART: u32 = 32;
// Every READ request `max_rd_atomic` allows can be remembered.
const _: () = assert!(MAX_READ_REQUESTS == limits::MAX_RD_ATOMIC as usize);
/// WQEs the kernel holds copies of at a time (at most the SQ's slots): what is in flight, not
/// the whole ring, so a QP's kernel memory does not grow with `max_send_wr`. More are fetched
/// as these complete.
const MAX_FETCHED: u32 = 256;

/// A send WQE the kernel owns: the validated copy and its progress.
#[derive(Clone, Copy, Default)]
pub(crate) struct SendWork {
    pub(crate) wqe: SendWqe,
    /// Message bytes.
    pub(crate) len: u32,
    /// PSN of its first packet (for a READ, of its first response).
    pub(crate) first_psn: Psn,
    /// PSNs it uses: packets, or READ response packets.
    pub(crate) npkts: u32,
    /// Packets sent so far; for a READ, responses asked for so far.
    pub(crate) sent: u32,
    /// READ: response packets received (and scattered) so far.
    pub(crate) read_got: u32,
}

impl SendWork {
    pub(crate) fn is_read(&self) -> bool {
        self.wqe.opcode == send_opcode::RDMA_READ
    }

    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.max(1) - 1)
    }

    /// All of its packets (for a READ, requests for all its responses) are out.
    pub(crate) fn fully_sent(&self) -> bool {
        self.sent >= self.npkts
    }

    fn kind(&self) -> MessageKind {
        match self.wqe.opcode {
            send_opcode::SEND => MessageKind::Send {
                imm: false,
                inv: false,
            },
            send_opcode::SEND_WITH_IMM => MessageKind::Send {
                imm: true,
                inv: false,
            },
            send_opcode::RDMA_WRITE => MessageKind::Write { imm: false },
            send_opcode::RDMA_WRITE_WITH_IMM => MessageKind::Write { imm: true },
            _ => MessageKind::Read,
        }
    }

    /// The `ibv_wc_opcode` of its completion.
    pub(crate) fn wc_opcode(&self) -> u32 {
        match self.wqe.opcode {
            send_opcode::RDMA_WRITE | send_opcode::RDMA_WRITE_WITH_IMM => wc_opcode::RDMA_WRITE,
            send_opcode::RDMA_READ => wc_opcode::RDMA_READ,
            _ => wc_opcode::SEND,
        }
    }
}

/// Send-side state of a QP.
pub(crate) struct Requester {
    /// Kernel copies of the WQEs from `consumer` to `fetched`, by index modulo their count (a
    /// power of two, so that it divides 2^32).
    works: KVVec<SendWork>,
    /// Their SGEs: `max_sge` per copy.
    sges: KVVec<Sge>,
    /// Their inline data: `max_inline` bytes per copy.
    inline: KVVec<u8>,
    max_sge: usize,
    max_inline: usize,
    /// Oldest WQE not completed (published as the ring's consumer index).
    pub(crate) consumer: u32,
    /// WQEs copied out of the ring.
    pub(crate) fetched: u32,
    /// The WQE being (or next to be) transmitted.
    pub(crate) cur: u32,
    /// WQEs before this one have sent packets (or were retired): what SQD lets finish.
    pub(crate) started_end: u32,
    /// PSN the next fetched WQE starts at.
    pub(crate) next_psn: Psn,
    /// PSNs before this one have been sent (for a READ, its responses asked for): the end of
    /// what a response may acknowledge. It does not move back when a rewind resends.
    pub(crate) sent_end: Psn,
    /// Everything before this PSN is acknowledged.
    pub(crate) acked_psn: Psn,
    /// READ requests sent as new whose responses did not all arrive: what `max_rd_atomic`
    /// limits, and what a request sent again may ask for.
    pub(crate) reads: ReadRequests<KVec<ReadRequest>>,
    /// A gap in a READ's responses made us ask again from this PSN: the rest of the burst
    /// that lost a packet arrives past the gap too, and must not ask again each time.
    pub(crate) read_asked_again: Option<Psn>,
    /// Packets sent since the last one asking for an ACK.
    noack_pkts: u32,
    /// Retransmissions left (`retry_cnt`), RNR retries left (`rnr_retry`).
    pub(crate) retries_left: u8,
    pub(crate) rnr_left: u8,
    /// Waiting out an RNR NAK's timer: nothing is sent until it expires.
    pub(crate) rnr_wait: bool,
    /// The retransmission (or RNR) timer is armed.
    pub(crate) timer_armed: bool,
    /// How far past `acked_psn` it may send, and the retransmission backoff.
    pub(crate) window: SendWindow,
}

impl Requester {
    /// State for an SQ of `slots` slots (a power of two) of up to `max_sge` SGEs or
    /// `max_inline` bytes. Charged to the process's memory cgroup.
    pub(crate) fn new(slots: u32, max_sge: u32, max_inline: u32) -> Result<Self> {
        let copies = slots.min(MAX_FETCHED) as usize;
        let sges = copies.checked_mul(max_sge as usize).ok_or(EINVAL)?;
        let inline = copies.checked_mul(max_inline as usize).ok_or(EINVAL)?;
        Ok(Self {
            works: KVVec::from_elem(SendWork::default(), copies, crate::kext::gfp_user_sized())?,
            sges: KVVec::from_elem(Sge::default(), sges, crate::kext::gfp_user_sized())?,
            inline: KVVec::from_elem(0u8, inline, crate::kext::gfp_user_sized())?,
            reads: ReadRequests::new(KVec::from_elem(
                ReadRequest::default(),
                MAX_READ_REQUESTS,
                GFP_KERNEL_ACCOUNT,
            )?),
            max_sge: max_sge as usize,
            max_inline: max_inline as usize,
            consumer: 0,
            fetched: 0,
            cur: 0,
            started_end: 0,
            next_psn: Psn::new(0),
            sent_end: Psn::new(0),
            acked_psn: Psn::new(0),
            read_asked_again: None,
            noack_pkts: 0,
            retries_left: 0,
            rnr_left: 0,
            rnr_wait: false,
            timer_armed: false,
            window: SendWindow::default(),
        })
    }

    fn slot(&self, index: u32) -> usize {
        index as usize % self.works.len()
    }

    /// WQEs copied into the kernel and not yet completed.
    pub(crate) fn held(&self) -> u32 {
        self.fetched.wrapping_sub(self.consumer)
    }

    /// How many more WQEs may be fetched: of the `posted` ones the ring holds (the producer
    /// index minus our consumer index), those not fetched yet, as far as the kernel copies
    /// go. `None` if the process moved its producer index back below what was fetched.
    fn fetchable(&self, posted: u32) -> Option<u32> {
        let new = posted.checked_sub(self.held())?;
        Some(new.min((self.works.len() as u32).saturating_sub(self.held())))
    }

    /// The work at SQ index `index`.
    pub(crate) fn work(&self, index: u32) -> &SendWork {
        &self.works[self.slot(index)]
    }

    pub(crate) fn work_mut(&mut self, index: u32) -> &mut SendWork {
        let slot = self.slot(index);
        &mut self.works[slot]
    }

    /// The SGEs of the work at `index`.
    pub(crate) fn sges_of(&self, index: u32) -> &[Sge] {
        let w = self.work(index);
        let base = self.slot(index) * self.max_sge;
        &self.sges[base..base + w.wqe.num_sge as usize]
    }

    fn inline_of(&self, index: u32) -> &[u8] {
        let w = self.work(index);
        let base = self.slot(index) * self.max_inline;
        &self.inline[base..base + w.wqe.inline_len as usize]
    }

    /// Starts over (RESET): the provider resets its side of the ring too.
    pub(crate) fn reset(&mut self) {
        self.consumer = 0;
        self.fetched = 0;
        self.cur = 0;
        self.started_end = 0;
        self.reads.clear();
        self.read_asked_again = None;
        self.noack_pkts = 0;
        self.rnr_wait = false;
        self.timer_armed = false;
        self.window = SendWindow::default();
    }

    /// Starts sending at `sq_psn` (move to RTS).
    pub(crate) fn start(&mut self, sq_psn: Psn, retry_cnt: u8, rnr_retry: u8) {
        self.next_psn = sq_psn;
        self.sent_end = sq_psn;
        self.acked_psn = sq_psn;
        self.retries_left = retry_cnt;
        self.rnr_left = rnr_retry;
    }

    /// Every WQE that sent a packet is complete (SQD's "drained").
    pub(crate) fn nothing_started_left(&self) -> bool {
        self.consumer == self.started_end
    }

    /// A WQE in flight has packets not yet acknowledged.
    pub(crate) fn outstanding(&self) -> bool {
        self.consumer != self.cur || (self.cur != self.fetched && self.work(self.cur).sent > 0)
    }

    /// Copies the WQE at ring index `index` into the kernel and checks it. `Err` carries the
    /// completion status the WQE fails with.
    fn fetch_one(&mut self, qp: &QpInner, index: u32) -> core::result::Result<(), u32> {
        let slot = self.slot(index);
        let wqe: SendWqe = qp.sq.read(index, 0).unwrap_or_default();
        // Whatever happens next, completions report this WQE's id and opcode.
        self.works[slot] = SendWork {
            wqe,
            ..Default::default()
        };
        let supported = matches!(
            wqe.opcode,
            send_opcode::SEND
                | send_opcode::SEND_WITH_IMM
                | send_opcode::RDMA_WRITE
                | send_opcode::RDMA_WRITE_WITH_IMM
                | send_opcode::RDMA_READ
        );
        if !supported {
            return Err(wc_status::LOC_QP_OP_ERR);
        }
        let inline = wqe.flags & send_flags::INLINE != 0;
        let len: u64 = if inline {
            if wqe.opcode == send_opcode::RDMA_READ || wqe.inline_len as usize > self.max_inline {
                return Err(wc_status::LOC_LEN_ERR);
            }
            let dst = &mut self.inline[slot * self.max_inline..][..wqe.inline_len as usize];
            qp.sq
                .read_bytes(index, core::mem::size_of::<SendWqe>(), dst)
                .map_err(|_| wc_status::LOC_QP_OP_ERR)?;
            u64::from(wqe.inline_len)
        } else {
            if wqe.num_sge as usize > self.max_sge {
                return Err(wc_status::LOC_LEN_ERR);
            }
            let mut total = 0u64;
            for i in 0..wqe.num_sge as usize {
                let sge: Sge = qp
                    .sq
                    .read(
                        index,
                        core::mem::size_of::<SendWqe>() + i * core::mem::size_of::<Sge>(),
                    )
                    .map_err(|_| wc_status::LOC_QP_OP_ERR)?;
                // At most 32 lengths below 2^32 each: cannot overflow, checked all the same.
                total = total
                    .checked_add(u64::from(sge.length))
                    .ok_or(wc_status::LOC_LEN_ERR)?;
                self.sges[slot * self.max_sge + i] = sge;
            }
            total
        };
        if len > u64::from(limits::MAX_MSG_SIZE) {
            return Err(wc_status::LOC_LEN_ERR);
        }
        // A remote range that wraps past 2^64 lies in no MR: fail it as any responder would
        // (remote access error), without putting a wrapped address on the wire. (It may end
        // at 2^64 itself: its last byte is the last address.)
        let rdma = matches!(
            wqe.opcode,
            send_opcode::RDMA_WRITE | send_opcode::RDMA_WRITE_WITH_IMM | send_opcode::RDMA_READ
        );
        if rdma
            && len
                .checked_sub(1)
                .is_some_and(|last| wqe.remote_addr.checked_add(last).is_none())
        {
            return Err(wc_status::REM_ACCESS_ERR);
        }
        let mut wqe = wqe;
        if !inline {
            wqe.inline_len = 0;
        } else {
            wqe.num_sge = 0;
        }
        self.works[slot] = SendWork {
            wqe,
            len: len as u32,
            ..Default::default()
        };
        Ok(())
    }
}

/// Copies the payload bytes at message offset `offset` of the work at `index` into `out`.
fn gather(
    dev: &Device<RxeDevice>,
    pd: PdId,
    req: &Requester,
    index: u32,
    offset: u32,
    out: &mut [u8],
) -> core::result::Result<(), u32> {
    if req.work(index).wqe.flags & send_flags::INLINE != 0 {
        let start = offset as usize;
        let end = start.checked_add(out.len()).ok_or(wc_status::LOC_LEN_ERR)?;
        out.copy_from_slice(
            req.inline_of(index)
                .get(start..end)
                .ok_or(wc_status::LOC_LEN_ERR)?,
        );
        return Ok(());
    }
    sgl::gather(dev, pd, req.sges_of(index), u64::from(offset), out)
}

/// What a requester run ended with.
pub(crate) enum RunEnd {
    /// Sent what it could.
    Idle,
    /// The WQE at this index failed with this status: the QP must go to the error state.
    Failed(u32, u32),
    /// The ring is corrupt.
    BrokenRing,
}

/// Fetches newly posted WQEs and sends what the window allows. Returns how it ended.
pub(crate) fn run(dev: &Device<RxeDevice>, qp: &QpInner, s: &mut QpState) -> RunEnd {
    let mtu = s.attrs.path_mtu;
    let req = &mut s.req;
    // Copy out what the process posted.
    let producer = qp.sq.load(RingIndex::Producer);
    // Read once: the process may move it while we work, and the loop must not follow.
    let Some(new) = qp
        .sq
        .geometry()
        .occupancy(producer, req.consumer)
        .and_then(|posted| req.fetchable(posted))
    else {
        return RunEnd::BrokenRing;
    };
    for _ in 0..new {
        let index = req.fetched;
        if let Err(status) = req.fetch_one(qp, index) {
            req.fetched = req.fetched.wrapping_add(1);
            return RunEnd::Failed(index, status);
        }
        let w = req.works[req.slot(index)];
        let npkts = packet_count(w.len, mtu);
        let first_psn = req.next_psn;
        let w = req.work_mut(index);
        w.first_psn = first_psn;
        w.npkts = npkts;
        req.next_psn = req.next_psn.add(npkts);
        req.fetched = req.fetched.wrapping_add(1);
    }
    if req.rnr_wait {
        return RunEnd::Idle;
    }
    let Some(av) = s.attrs.av else {
        return RunEnd::Idle;
    };
    let mut tx = None;
    while s.req.cur != s.req.fetched {
        let index = s.req.cur;
        let w = *s.req.work(index);
        if index == s.req.started_end && s.attrs.state == state::SQD {
            break; // SQD: no new message starts
        }
        if w.sent == 0 && w.wqe.flags & send_flags::FENCE != 0 && !s.req.reads.is_empty() {
            break;
        }
        let at = w.first_psn.add(w.sent);
        let unacked = at.diff(s.req.acked_psn).max(0) as u32;
        let limit = s.req.window.limit();
        let room = limit.saturating_sub(unacked);
        // A READ asked for again (`at` was sent before) is not new to the responder.
        let repeat = w.is_read() && at.diff(s.req.sent_end) < 0;
        // Packets (or READ responses asked for) this step.
        let psns = if repeat {
            // The rest of the request that first asked for `at`. (None: its responses all
            // arrived, which rewinds never ask again for; one response is safe anyway.)
            let part = s
                .req
                .reads
                .repeat_from(at)
                .unwrap_or(1)
                .min(w.npkts - w.sent);
            // Not one request per arriving response: wait for room for the whole part (or a
            // window's worth: a repeat may not be split, the responder may drop its second half).
            if room < part.min(limit) {
                break;
            }
            part
        } else if w.is_read() {
            if s.req.reads.len() >= usize::from(s.attrs.max_rd_atomic).max(1) {
                break;
            }
            let part = (READ_PART - w.sent % READ_PART)
                .min(w.npkts - w.sent)
                .min(limit.max(1));
            if room < part {
                break;
            }
            part
        } else if room == 0 {
            break;
        } else {
            1
        };
        let new_read = w.is_read() && !repeat;
        // Looked up once per run; `None` (counted) when there is no route or no memory for one.
        let tx = tx.get_or_insert_with(|| Transmitter::new(dev, &av));
        let edge = s.req.window.is_edge(unacked);
        let sent = match tx.as_ref() {
            Some(t) => send_packet(
                dev,
                qp,
                &av,
                s.attrs.dest_qpn,
                mtu,
                &s.req,
                index,
                psns,
                t,
                edge,
            ),
            // No route: a loss the retransmission timer recovers. Without a timer (timeout 0)
            // the packet waits unsent for the next run instead (a doorbell or an ACK).
            None if s.req.window.ack_timeout_ns(s.attrs.timeout).is_some() => Err(TxError::Dropped),
            None => break,
        };
        let ack_req = match sent {
            Ok(ack_req) => ack_req,
            // Lost before the wire (no route, no memory): the retransmission timer recovers
            // it, as any loss. Stopping here instead would leave it with no timer to retry it.
            Err(TxError::Dropped) => true,
            Err(TxError::Payload(status)) => return RunEnd::Failed(index, status),
        };
        let req = &mut s.req;
        if index == req.started_end {
            req.started_end = index.wrapping_add(1);
        }
        req.noack_pkts = if ack_req {
            0
        } else {
            req.noack_pkts.saturating_add(1)
        };
        let w = req.work_mut(index);
        w.sent += psns;
        let end = w.first_psn.add(w.sent);
        if end.diff(req.sent_end) > 0 {
            req.sent_end = end;
        }
        if new_read {
            // Fits: `reads.len() < max_rd_atomic <= MAX_READ_REQUESTS`, checked above.
            let _ = req.reads.push(ReadRequest {
                first: at,
                count: psns,
            });
        }
        if req.work(index).fully_sent() {
            req.cur = req.cur.wrapping_add(1);
        }
    }
    RunEnd::Idle
}

/// Builds and sends the next packet of the work at `index` (for a READ, the request for its
/// next `responses`); returns whether it asked for an ACK.
#[allow(clippy::too_many_arguments)]
fn send_packet(
    dev: &Device<RxeDevice>,
    qp: &QpInner,
    av: &AddressVector,
    dest_qpn: u32,
    mtu: IbMtu,
    req: &Requester,
    index: u32,
    responses: u32,
    tx: &Transmitter<'_>,
    window_edge: bool,
) -> Result<bool, TxError> {
    let w = req.work(index);
    let av = *av;
    if w.is_read() {
        // The responses from `sent` on: a part of the message, or after a loss its rest. The
        // remote range was checked at fetch; checked again rather than trusted.
        let skip = w
            .sent
            .checked_mul(mtu.bytes())
            .filter(|&skip| skip < w.len || w.len == 0);
        let va = skip.and_then(|skip| w.wqe.remote_addr.checked_add(u64::from(skip)));
        let (Some(skip), Some(va)) = (skip, va) else {
            return Err(TxError::Payload(wc_status::REM_ACCESS_ERR));
        };
        let dma_len = (w.len - skip).min(responses.saturating_mul(mtu.bytes()));
        let frame = Frame {
            av,
            sport: qp.sport,
            bth: bth(
                crate::proto::opcode::Opcode::RC_READ_REQUEST.0,
                dest_qpn,
                w.first_psn.add(w.sent),
                true,
                false,
            ),
            reth: Some(Reth {
                va,
                rkey: w.wqe.rkey,
                dma_len,
            }),
            aeth: None,
            immdt: None,
            payload_len: 0,
        };
        return tx.send(&frame, |_| Ok(())).map(|()| true);
    }
    let seg = segment(w.kind(), w.len, mtu, w.first_psn, w.sent);
    let info = seg.opcode.info();
    let (has_reth, has_imm) = info.map_or((false, false), |i| (i.reth, i.immdt));
    // The last packet the window allows asks too, or the window would only reopen by timeout.
    let ack_req =
        seg.last || window_edge || req.noack_pkts.saturating_add(1) >= PACKETS_PER_ACK_REQ;
    let solicited = seg.last && w.wqe.flags & send_flags::SOLICITED != 0;
    let frame = Frame {
        av,
        sport: qp.sport,
        bth: bth(seg.opcode.0, dest_qpn, seg.psn, ack_req, solicited),
        reth: has_reth.then_some(Reth {
            va: w.wqe.remote_addr,
            rkey: w.wqe.rkey,
            dma_len: w.len,
        }),
        aeth: None,
        immdt: has_imm.then_some(w.wqe.imm_data.to_ne_bytes()),
        payload_len: seg.len,
    };
    tx.send(&frame, |out| {
        gather(dev, qp.pd, req, index, seg.offset, out)
    })
    .map(|()| ack_req)
}

/// A request BTH.
pub(crate) fn bth(opcode: u8, dest_qp: u32, psn: Psn, ack_req: bool, solicited: bool) -> Bth {
    Bth {
        opcode,
        solicited,
        mig_req: true,
        pad: 0,
        pkey: limits::DEFAULT_PKEY,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req,
        psn,
    }
}

/// Takes WQEs the process posted, up to ring index `end`, off the ring unvalidated so that
/// they can be flushed (only the id and opcode of each are used), as far as the kernel copies
/// go. `end` is a producer index read once and checked by the caller.
pub(crate) fn fetch_for_flush(qp: &QpInner, req: &mut Requester, end: u32) {
    while req.fetched != end && (req.held() as usize) < req.works.len() {
        let index = req.fetched;
        let wqe: SendWqe = qp.sq.read(index, 0).unwrap_or_default();
        *req.work_mut(index) = SendWork {
            wqe,
            ..Default::default()
        };
        req.fetched = req.fetched.wrapping_add(1);
    }
}

/// The producer index of the SQ, if it is consistent with what the kernel took: the end of
/// what a flush may take off the ring.
pub(crate) fn flush_end(qp: &QpInner, req: &Requester) -> Option<u32> {
    let producer = qp.sq.load(RingIndex::Producer);
    let posted = qp.sq.geometry().occupancy(producer, req.consumer)?;
    (posted >= req.held()).then_some(producer)
}
