// SPDX-License-Identifier: GPL-2.0
//! The requester: takes send WQEs off the user's SQ ring (each copied into the kernel and
//! validated once), numbers their packets, and transmits within the window. Completion of
//! what it sent is the completer's job; both work on the QP's state under its lock. A UC
//! message has no window and nothing acknowledges it: it completes as its last packet goes out.

use crate::{
    kext::ib::{Access, QpState, QpType},
    kext::mmap::RingIndex,
    limits,
    net::transmit::{Transmitter, TxError},
    proto::{
        ack_request::{ack_interval, asks_ack, Place, PACKETS_PER_ACK_REQ},
        atomic::{is_aligned, AtomicEth, AtomicOp, ATOMIC_BYTES},
        av::AddressVector,
        headers::{Bth, Reth},
        mtu::IbMtu,
        psn::Psn,
        read_requests::{ReadRequest, ReadRequests, MAX_READ_REQUESTS},
        segment::{segment, MessageKind},
        send_queue::{read_request_size, Progress, SendQueue},
        window::SendWindow,
        wire::Frame,
    },
    qp::{QpInner, QpLocked},
    uapi::{send_flags, send_opcode, wc_opcode, BindMw, SendWqe, Sge, WcStatus},
    verbs::{mr::MrKind, sgl},
};
use kernel::prelude::*;

// Every READ request `max_rd_atomic` allows can be remembered.
const _: () = assert!(MAX_READ_REQUESTS == limits::MAX_RD_ATOMIC as usize);
/// WQEs the kernel holds copies of at a time (at most the SQ's slots): what is in flight, not
/// the whole ring, so a QP's kernel memory does not grow with `max_send_wr`. More are fetched
/// as these complete.
const MAX_FETCHED: u32 = 256;
/// Packets sent (or local operations executed) per run from process context (the doorbell,
/// its work item, `modify_qp`): the rest goes from the doorbell work item (`Requester::yielded`), or for RC from the run the
/// next ACK starts, so that a long message or a wide window never holds the QP's lock (BH
/// off), and the CPU, for long, nor floods the local delivery queue.
pub(crate) const PACKETS_PER_RUN: u32 = 128;
/// Packets sent per run from the receive softirq or the timer: what one ACK opens in a
/// stream (so a stream still sends from its ACKs), not the window a rewind reopens, which
/// goes from the doorbell work item. A softirq takes up to 64 packets per NAPI poll, each of
/// which may start a run: at 128 packets a run, and twice that with a second pass, one poll of
/// ACKs could send thousands of packets before anything else ran on that CPU.
pub(crate) const PACKETS_PER_SOFTIRQ_RUN: u32 = PACKETS_PER_ACK_REQ;
// A run the budget ends mid-message still asks for an ACK (the next run comes from it).
const _: () = assert!(PACKETS_PER_ACK_REQ <= PACKETS_PER_SOFTIRQ_RUN);
const _: () = assert!(PACKETS_PER_SOFTIRQ_RUN <= PACKETS_PER_RUN);

/// How a send opcode is segmented.
fn kind(opcode: u32) -> MessageKind {
    match opcode {
        send_opcode::SEND => MessageKind::Send {
            imm: false,
            inv: false,
        },
        send_opcode::SEND_WITH_IMM => MessageKind::Send {
            imm: true,
            inv: false,
        },
        send_opcode::SEND_WITH_INV => MessageKind::Send {
            imm: false,
            inv: true,
        },
        send_opcode::RDMA_WRITE => MessageKind::Write { imm: false },
        send_opcode::RDMA_WRITE_WITH_IMM => MessageKind::Write { imm: true },
        _ => MessageKind::Read,
    }
}

/// The `ibv_wc_opcode` of a send opcode's completion.
pub(crate) fn wc_opcode(opcode: u32) -> u32 {
    match opcode {
        send_opcode::RDMA_WRITE | send_opcode::RDMA_WRITE_WITH_IMM => wc_opcode::RDMA_WRITE,
        send_opcode::RDMA_READ => wc_opcode::RDMA_READ,
        send_opcode::ATOMIC_CMP_AND_SWP => wc_opcode::COMP_SWAP,
        send_opcode::ATOMIC_FETCH_AND_ADD => wc_opcode::FETCH_ADD,
        send_opcode::ATOMIC_WRITE => wc_opcode::ATOMIC_WRITE,
        send_opcode::LOCAL_INV => wc_opcode::LOCAL_INV,
        send_opcode::BIND_MW => wc_opcode::BIND_MW,
        send_opcode::REG_MR => wc_opcode::REG_MR,
        _ => wc_opcode::SEND,
    }
}

/// Send-side state of a QP.
pub(crate) struct Requester {
    /// Which WQEs the kernel holds, their PSNs and progress (the slot of each is that of its
    /// copy below).
    pub(crate) q: SendQueue<KVVec<Progress>>,
    /// Kernel copies of the WQEs from `q.consumer` to `q.fetched`, by slot.
    wqes: KVVec<SendWqe>,
    /// Their SGEs: `max_sge` per copy.
    sges: KVVec<Sge>,
    /// Their inline data: `max_inline` bytes per copy.
    inline: KVVec<u8>,
    max_sge: usize,
    max_inline: usize,
    /// READ requests sent as new whose responses did not all arrive: what `max_rd_atomic`
    /// limits, and what a request sent again may ask for.
    pub(crate) reads: ReadRequests<KVec<ReadRequest>>,
    /// Packets sent since the last one asking for an ACK.
    noack_pkts: u32,
    /// The next packet is a tail-loss probe ([`Requester::probe`]): it asks for an ACK.
    probing: bool,
    /// How far past `acked_psn` it may send, and the retransmission backoff.
    pub(crate) window: SendWindow,
    /// The SQ's flags say `RING_FLAG_SQ_POLLED` (see `QpInner::update_sq_polled`).
    pub(crate) sq_polled: bool,
    /// A run stopped at its budget with packets left to send: the doorbell work item goes on
    /// (`QpInner::resume_later`).
    pub(crate) yielded: bool,
}

impl Requester {
    /// State for an SQ of `slots` slots (a power of two) of up to `max_sge` SGEs or
    /// `max_inline` bytes. Charged to the process's memory cgroup.
    pub(crate) fn new(slots: u32, max_sge: u32, max_inline: u32) -> Result<Self> {
        let copies = slots.min(MAX_FETCHED) as usize;
        let sges = copies.checked_mul(max_sge as usize).ok_or(EINVAL)?;
        let inline = copies.checked_mul(max_inline as usize).ok_or(EINVAL)?;
        let works = KVVec::from_elem(Progress::default(), copies, crate::kext::gfp_user_sized())?;
        Ok(Self {
            // `slots` is a power of two, and so is MAX_FETCHED.
            q: SendQueue::new(works).ok_or(EINVAL)?,
            wqes: KVVec::from_elem(SendWqe::default(), copies, crate::kext::gfp_user_sized())?,
            sges: KVVec::from_elem(Sge::default(), sges, crate::kext::gfp_user_sized())?,
            inline: KVVec::from_elem(0u8, inline, crate::kext::gfp_user_sized())?,
            reads: ReadRequests::new(KVec::from_elem(
                ReadRequest::default(),
                MAX_READ_REQUESTS,
                GFP_KERNEL_ACCOUNT,
            )?),
            max_sge: max_sge as usize,
            max_inline: max_inline as usize,
            noack_pkts: 0,
            probing: false,
            window: SendWindow::default(),
            sq_polled: false,
            yielded: false,
        })
    }

    /// The kernel's copy of the WQE at SQ index `index`.
    pub(crate) fn wqe(&self, index: u32) -> &SendWqe {
        &self.wqes[self.q.slot(index)]
    }

    /// The SGEs of the WQE at `index`.
    pub(crate) fn sges_of(&self, index: u32) -> &[Sge] {
        let base = self.q.slot(index) * self.max_sge;
        &self.sges[base..base + self.wqe(index).num_sge as usize]
    }

    fn inline_of(&self, index: u32) -> &[u8] {
        let base = self.q.slot(index) * self.max_inline;
        &self.inline[base..base + self.wqe(index).inline_len as usize]
    }

    /// Starts over (RESET): the provider resets its side of the ring too.
    pub(crate) fn reset(&mut self) {
        self.q.reset();
        self.reads.clear();
        self.noack_pkts = 0;
        self.probing = false;
        self.window = SendWindow::default();
        self.sq_polled = false;
        self.yielded = false;
    }

    /// Starts sending at `sq_psn` (move to RTS), in packets of `path_mtu`.
    pub(crate) fn start(&mut self, sq_psn: Psn, path_mtu: IbMtu) {
        self.q.start(sq_psn);
        self.window = SendWindow::for_path_mtu(path_mtu.bytes());
    }

    /// A tail-loss probe: the next run sends the last packet sent again, asking for an ACK
    /// (`proto::window`). Returns whether anything unacknowledged was there to send.
    pub(crate) fn probe(&mut self) -> bool {
        self.window.on_probe();
        let probing = self.q.probe();
        self.probing |= probing;
        probing
    }

    /// Every WQE that sent a packet is complete (SQD's "drained").
    pub(crate) fn nothing_started_left(&self) -> bool {
        self.q.nothing_started_left()
    }

    /// A WQE in flight has packets not yet acknowledged.
    pub(crate) fn outstanding(&self) -> bool {
        self.q.outstanding()
    }

    /// Copies the next WQE of the ring into the kernel, checks it and numbers its packets at
    /// `mtu`. `Err` carries its index and the completion status it fails with.
    fn fetch_one(&mut self, qp: &QpInner, mtu: IbMtu) -> core::result::Result<(), (u32, WcStatus)> {
        let index = self.q.fetched;
        let slot = self.q.slot(index);
        let wqe: SendWqe = qp.sq.read(index, 0).unwrap_or_default();
        let is_read = answered_by_response(wqe.opcode);
        // Whatever happens next, completions report this WQE's id and opcode.
        self.wqes[slot] = wqe;
        if is_local(wqe.opcode) {
            // Memory registration (a kernel consumer's), invalidation and window binds (a
            // process's: the kernel has no windows), on RC; window binds on UC too (as
            // rdma_rxe).
            let allowed = match wqe.opcode {
                send_opcode::REG_MR => qp.is_kernel() && qp.qp_type == QpType::Rc,
                send_opcode::BIND_MW => !qp.is_kernel() && qp.qp_type.is_connected(),
                _ => qp.qp_type == QpType::Rc,
            };
            if !allowed {
                let _ = self.q.push_unnumbered(false);
                return Err((index, WcStatus::LocQpOpErr));
            }
            return self
                .q
                .push_local()
                .map(|_| ())
                .ok_or((index, WcStatus::LocQpOpErr));
        }
        match self.check(qp, index, wqe) {
            Ok((wqe, len)) => {
                self.wqes[slot] = wqe;
                let pushed = if is_atomic(wqe.opcode) {
                    self.q.push_atomic(len)
                } else if wqe.opcode == send_opcode::ATOMIC_WRITE {
                    self.q.push_atomic_write()
                } else {
                    self.q.push(len, is_read, mtu)
                };
                pushed.map(|_| ()).ok_or((index, WcStatus::LocQpOpErr))
            }
            Err(status) => {
                let _ = self.q.push_unnumbered(is_read);
                Err((index, status))
            }
        }
    }

    /// Validates `wqe`, at ring index `index`, and copies its SGEs or inline data: returns the
    /// copy to keep and the message length, or the completion status it fails with.
    fn check(
        &mut self,
        qp: &QpInner,
        index: u32,
        wqe: SendWqe,
    ) -> core::result::Result<(SendWqe, u32), WcStatus> {
        let slot = self.q.slot(index);
        if !carries(qp.qp_type, wqe.opcode) {
            return Err(WcStatus::LocQpOpErr);
        }
        let inline = wqe.flags & send_flags::INLINE != 0;
        let atomic = is_atomic(wqe.opcode);
        // The provider refuses these at posting (EINVAL); a process writing its own ring gets
        // the WQE failed instead. Its 8-byte result needs a buffer, not inline data.
        if atomic && (inline || !is_aligned(wqe.remote_addr)) {
            return Err(WcStatus::LocQpOpErr);
        }
        if wqe.opcode == send_opcode::ATOMIC_WRITE {
            // Its 8 bytes travel in the WQE itself: whatever data it names is not used.
            if !is_aligned(wqe.remote_addr) {
                return Err(WcStatus::LocQpOpErr);
            }
            let mut wqe = wqe;
            (wqe.num_sge, wqe.inline_len) = (0, 0);
            return Ok((wqe, ATOMIC_BYTES));
        }
        let len: u64 = if inline {
            if wqe.opcode == send_opcode::RDMA_READ || wqe.inline_len as usize > self.max_inline {
                return Err(WcStatus::LocLenErr);
            }
            let dst = &mut self.inline[slot * self.max_inline..][..wqe.inline_len as usize];
            qp.sq
                .read_bytes(index, core::mem::size_of::<SendWqe>(), dst)
                .map_err(|_| WcStatus::LocQpOpErr)?;
            u64::from(wqe.inline_len)
        } else {
            if wqe.num_sge as usize > self.max_sge {
                return Err(WcStatus::LocLenErr);
            }
            let mut total = 0u64;
            for i in 0..wqe.num_sge as usize {
                let sge: Sge = qp
                    .sq
                    .read(
                        index,
                        core::mem::size_of::<SendWqe>() + i * core::mem::size_of::<Sge>(),
                    )
                    .map_err(|_| WcStatus::LocQpOpErr)?;
                // At most 32 lengths below 2^32 each: cannot overflow, checked all the same.
                total = total
                    .checked_add(u64::from(sge.length))
                    .ok_or(WcStatus::LocLenErr)?;
                self.sges[slot * self.max_sge + i] = sge;
            }
            total
        };
        // An atomic's result takes the first 8 bytes its SGEs name.
        if len > u64::from(limits::MAX_MSG_SIZE) || (atomic && len < u64::from(ATOMIC_BYTES)) {
            return Err(WcStatus::LocLenErr);
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
            return Err(WcStatus::RemAccessErr);
        }
        let mut wqe = wqe;
        if !inline {
            wqe.inline_len = 0;
        } else {
            wqe.num_sge = 0;
        }
        Ok((wqe, len as u32))
    }
}

/// Whether a QP of `qp_type` carries messages of send opcode `opcode`: RC every one we offer,
/// UC SENDs and WRITEs (without invalidation), UD SENDs (one packet each).
pub(crate) fn carries(qp_type: QpType, opcode: u32) -> bool {
    match qp_type {
        QpType::Rc => matches!(
            opcode,
            send_opcode::SEND
                | send_opcode::SEND_WITH_IMM
                | send_opcode::SEND_WITH_INV
                | send_opcode::RDMA_WRITE
                | send_opcode::RDMA_WRITE_WITH_IMM
                | send_opcode::RDMA_READ
                | send_opcode::ATOMIC_CMP_AND_SWP
                | send_opcode::ATOMIC_FETCH_AND_ADD
                | send_opcode::ATOMIC_WRITE
        ),
        QpType::Uc => matches!(
            opcode,
            send_opcode::SEND
                | send_opcode::SEND_WITH_IMM
                | send_opcode::RDMA_WRITE
                | send_opcode::RDMA_WRITE_WITH_IMM
        ),
        QpType::Ud | QpType::Gsi => {
            matches!(opcode, send_opcode::SEND | send_opcode::SEND_WITH_IMM)
        }
    }
}

/// An RC atomic: COMPARE SWAP or FETCH ADD on 8 remote bytes.
pub(crate) fn is_atomic(opcode: u32) -> bool {
    matches!(
        opcode,
        send_opcode::ATOMIC_CMP_AND_SWP | send_opcode::ATOMIC_FETCH_AND_ADD
    )
}

/// Completes with its response, not with an ACK: an RDMA READ, an atomic or an ATOMIC WRITE.
/// Each takes one of the `max_rd_atomic` credits.
fn answered_by_response(opcode: u32) -> bool {
    opcode == send_opcode::RDMA_READ || opcode == send_opcode::ATOMIC_WRITE || is_atomic(opcode)
}

/// The operation an atomic WQE asks for.
fn atomic_op(wqe: &SendWqe) -> AtomicOp {
    if wqe.opcode == send_opcode::ATOMIC_CMP_AND_SWP {
        AtomicOp::CompareSwap {
            compare: wqe.compare_add,
            swap: wqe.swap,
        }
    } else {
        AtomicOp::FetchAdd {
            add: wqe.compare_add,
        }
    }
}

/// A local operation: no packet, executed when the requester reaches it.
fn is_local(opcode: u32) -> bool {
    matches!(
        opcode,
        send_opcode::REG_MR | send_opcode::LOCAL_INV | send_opcode::BIND_MW
    )
}

/// Executes the local operation `wqe`: `IB_WR_REG_MR` makes a fast-registration MR valid
/// under the new key, LOCAL_INV invalidates one or a type 2 memory window, BIND_MW binds a
/// window. Each fails (with the QP) on an object not of the QP's PD, not in the state the
/// operation needs, or not named by the right key: a bind with MW_BIND_ERR, the others with
/// LOC_QP_OP_ERR, as rdma_rxe.
fn execute_local(qp: &QpInner, wqe: &SendWqe) -> core::result::Result<(), WcStatus> {
    match wqe.opcode {
        send_opcode::REG_MR => register_mr(qp, wqe).map_err(|_| WcStatus::LocQpOpErr),
        send_opcode::BIND_MW => bind_mw(qp, &BindMw::decode(wqe)).map_err(|_| WcStatus::MwBindErr),
        _ => qp
            .res()
            .invalidate(wqe.invalidate_rkey, qp.pd, qp.serial, false)
            .map_err(|_| WcStatus::LocQpOpErr),
    }
}

/// `IB_WR_REG_MR`: the new key in `rkey`, the range in `remote_addr` and `compare_add`, the
/// rights in `swap`.
fn register_mr(qp: &QpInner, wqe: &SendWqe) -> Result {
    let key = wqe.rkey;
    let mr = qp.res().mrs.get(key >> 8).ok_or(EINVAL)?;
    let access = Access::from_raw(wqe.swap as u32 as i32);
    match &mr.kind {
        MrKind::Fast(region) if mr.pd == qp.pd => {
            region
                .lock()
                .register(key as u8, wqe.remote_addr, wqe.compare_add, access)
        }
        _ => Err(EINVAL),
    }
}

/// BIND_MW: the window its R_Key's index names, under a new key of the same index; the MR is
/// looked up only for a bind with a length (one without unbinds).
fn bind_mw(qp: &QpInner, bind: &BindMw) -> Result {
    let index = bind.mw_rkey >> 8;
    if bind.new_rkey >> 8 != index {
        return Err(EINVAL);
    }
    let res = qp.res();
    let mw = res.mws.get(index).ok_or(EINVAL)?;
    let mr = match bind.length {
        0 => None,
        _ => Some(res.lookup_mr(bind.mr_lkey).ok_or(EINVAL)?),
    };
    mw.bind(qp.pd, qp.serial, bind, mr)
}

/// Copies the payload bytes at message offset `offset` of the work at `index` into `out`.
pub(super) fn gather(
    qp: &QpInner,
    req: &Requester,
    index: u32,
    offset: u32,
    out: &mut [u8],
) -> core::result::Result<(), WcStatus> {
    if req.wqe(index).flags & send_flags::INLINE != 0 {
        let start = offset as usize;
        let end = start.checked_add(out.len()).ok_or(WcStatus::LocLenErr)?;
        out.copy_from_slice(
            req.inline_of(index)
                .get(start..end)
                .ok_or(WcStatus::LocLenErr)?,
        );
        return Ok(());
    }
    sgl::gather(qp.res(), qp.pd, req.sges_of(index), u64::from(offset), out)
}

/// Copies what the process posted, up to `producer` (the SQ's producer index as the run read
/// it, once: the process may move it while we work, and the run must not follow), into the
/// kernel, each WQE checked and numbered at `mtu`, as many as there are free copies.
pub(crate) fn fetch_posted(
    qp: &QpInner,
    req: &mut Requester,
    mtu: IbMtu,
    producer: u32,
) -> Result<(), RunEnd> {
    let Some(new) = qp
        .sq
        .geometry()
        .occupancy(producer, req.q.consumer)
        .and_then(|posted| req.q.fetchable(posted))
    else {
        return Err(RunEnd::BrokenRing);
    };
    for _ in 0..new {
        if let Err((index, status)) = req.fetch_one(qp, mtu) {
            return Err(RunEnd::Failed(index, status));
        }
    }
    Ok(())
}

/// What a requester run ended with.
pub(crate) enum RunEnd {
    /// Sent what it could.
    Idle,
    /// The WQE at this index failed with this status: the QP must go to the error state.
    Failed(u32, WcStatus),
    /// The ring is corrupt.
    BrokenRing,
}

/// Fetches the WQEs posted up to `producer` and sends what the window allows: at most
/// `budget` packets and local operations (it takes off what it spends). Returns how it ended.
pub(crate) fn run(qp: &QpInner, s: &mut QpLocked, producer: u32, budget: &mut u32) -> RunEnd {
    let mtu = s.attrs.path_mtu;
    if let Err(end) = fetch_posted(qp, &mut s.req, mtu, producer) {
        return end;
    }
    if s.comp.rnr_wait {
        return RunEnd::Idle;
    }
    let Some(av) = s.attrs.av else {
        return RunEnd::Idle;
    };
    let uc = qp.qp_type == QpType::Uc;
    let mut tx = None;
    while s.req.q.cur != s.req.q.fetched {
        let index = s.req.q.cur;
        let w = *s.req.q.work(index);
        if index == s.req.q.started_end && s.attrs.state == QpState::Sqd {
            break; // SQD: no new message starts
        }
        // A fence holds a WQE's first send only: sent again (after a rewind), a READ's own
        // request is among those in flight, and it would wait for itself for ever.
        let first_send = w.sent == 0 && w.first_psn.diff(s.req.q.sent_end) >= 0;
        if first_send && s.req.wqe(index).flags & send_flags::FENCE != 0 && !s.req.reads.is_empty()
        {
            break;
        }
        if w.local {
            if w.sent == 0 {
                let wqe = *s.req.wqe(index);
                // An invalidation waits for everything before it to complete (rdma_rxe's
                // local-invalidate fence): those may still be using the MR.
                if wqe.opcode == send_opcode::LOCAL_INV && index != s.req.q.consumer {
                    break;
                }
                // Charged as a packet: a ring of unbinds chased by a moving producer index
                // must not keep the run (and the CPU, BH off) going.
                if *budget == 0 {
                    s.req.yielded = true;
                    break;
                }
                *budget -= 1;
                if let Err(status) = execute_local(qp, &wqe) {
                    return RunEnd::Failed(index, status);
                }
            }
            // Completed by the caller once it is the oldest ([`QpInner::run_requester`]).
            s.req.q.record_local_done(index);
            continue;
        }
        let at = w.first_psn.add(w.sent);
        let unacked = at.diff(s.req.q.acked_psn).max(0) as u32;
        let limit = s.req.window.limit();
        let room = limit.saturating_sub(unacked);
        // A READ asked for again (`at` was sent before) is not new to the responder.
        let repeat = w.is_read && at.diff(s.req.q.sent_end) < 0;
        // Packets (or READ responses asked for) this step.
        let psns = if repeat {
            let part = read_request_size(&w, &s.req.reads, true, limit);
            // Not one request per arriving response: wait for room for the whole part (or a
            // window's worth: a repeat may not be split, the responder may drop its second half).
            if room < part.min(limit) {
                break;
            }
            part
        } else if w.is_read {
            if s.req.reads.len() >= usize::from(s.attrs.max_rd_atomic).max(1) {
                break;
            }
            let part = read_request_size(&w, &s.req.reads, false, limit);
            if room < part {
                break;
            }
            part
        } else if uc {
            // Nothing acknowledges UC: no window, only the budget.
            1
        } else if room == 0 {
            break;
        } else {
            1
        };
        // Checked once the packet may go: a run that filled the window (a stream's run from
        // its ACK) leaves the next one to the next ACK, not to the work item.
        if *budget == 0 {
            s.req.yielded = true;
            break;
        }
        *budget -= 1;
        let new_read = w.is_read && !repeat;
        // Looked up once per run; `None` (counted) when there is no route or no memory for one.
        let tx = tx.get_or_insert_with(|| Transmitter::new(qp.res(), &av, qp.qpn));
        let place = Place {
            last_of_message: false, // send_packet knows
            window_edge: s.req.window.is_edge(unacked) || s.req.probing,
            unasked_before: s.req.noack_pkts,
            interval: ack_interval(limit),
            // Not past the run's budget: a message ending there asks for its ACK.
            next_follows: *budget > 0 && next_follows(s, index),
        };
        let sent = match tx.as_mut() {
            Some(t) => send_packet(
                qp,
                &av,
                s.attrs.dest_qpn,
                mtu,
                &s.req,
                index,
                psns,
                t,
                place,
            ),
            // No route: a loss the retransmission timer recovers. Without a timer (timeout 0)
            // the packet waits unsent for the next run instead (a doorbell or an ACK). On UC,
            // simply a loss.
            None if uc || s.req.window.ack_timeout_ns(s.attrs.timeout).is_some() => {
                Err(TxError::Dropped)
            }
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
        req.probing = false;
        req.noack_pkts = if ack_req {
            0
        } else {
            req.noack_pkts.saturating_add(1)
        };
        // Before `record_sent` moves `sent_end`: whether this is a first send (Karn's rule).
        req.window.on_send(at, req.q.sent_end, super::now_ns);
        req.q.record_sent(index, psns);
        if uc && req.q.work(index).fully_sent() {
            // Complete, whether it arrives or not (IBA 9.8.3): the caller retires it
            // (`QpInner::run_requester`).
            let end = req.q.sent_end;
            req.q.acknowledge_through(end);
            continue;
        }
        if new_read {
            // Fits: `reads.len() < max_rd_atomic <= MAX_READ_REQUESTS`, checked above.
            let _ = req.reads.push(ReadRequest {
                first: at,
                count: psns,
            });
        }
    }
    RunEnd::Idle
}

/// Whether the run, once it sent the current packet of the work at `index`, is certain to send
/// another: a next message is fetched and nothing makes it wait (READ credits or room, a fence,
/// SQD). The window is the caller's part ([`Place::window_edge`]).
fn next_follows(s: &QpLocked, index: u32) -> bool {
    let mut next = index.wrapping_add(1);
    // A registration runs in the same run and sends nothing (nvme-rdma posts one before each
    // command): look past it. An invalidation may wait for completions (its fence).
    while next != s.req.q.fetched
        && s.req.q.work(next).local
        && s.req.wqe(next).opcode == send_opcode::REG_MR
    {
        next = next.wrapping_add(1);
    }
    if next == s.req.q.fetched || s.attrs.state != QpState::Rts {
        return false;
    }
    let fenced = s.req.wqe(next).flags & send_flags::FENCE != 0;
    let w = s.req.q.work(next);
    !w.is_read && !w.local && (!fenced || s.req.reads.is_empty())
}

/// Builds and sends the next packet of the work at `index` (for a READ, the request for its
/// next `responses`); returns whether it asked for an ACK.
#[allow(clippy::too_many_arguments)]
fn send_packet(
    qp: &QpInner,
    av: &AddressVector,
    dest_qpn: u32,
    mtu: IbMtu,
    req: &Requester,
    index: u32,
    responses: u32,
    tx: &mut Transmitter<'_>,
    place: Place,
) -> Result<bool, TxError> {
    let w = req.q.work(index);
    let wqe = req.wqe(index);
    let av = *av;
    if w.atomic {
        let op = atomic_op(wqe);
        let frame = Frame {
            av,
            sport: qp.sport,
            bth: Bth::rc(op.opcode().0, dest_qpn, w.first_psn, true, false),
            deth: None,
            reth: None,
            atomic_eth: Some(AtomicEth::of(op, wqe.remote_addr, wqe.rkey)),
            aeth: None,
            atomic_ack: None,
            immdt: None,
            payload_len: 0,
        };
        return tx.send(&frame, |_| Ok(())).map(|()| true);
    }
    if w.atomic_write {
        let frame = Frame {
            av,
            sport: qp.sport,
            bth: Bth::rc(
                crate::proto::opcode::Opcode::RC_ATOMIC_WRITE.0,
                dest_qpn,
                w.first_psn,
                true,
                false,
            ),
            deth: None,
            reth: Some(Reth {
                va: wqe.remote_addr,
                rkey: wqe.rkey,
                dma_len: ATOMIC_BYTES,
            }),
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            immdt: None,
            payload_len: ATOMIC_BYTES,
        };
        let value = wqe.swap.to_ne_bytes();
        return tx
            .send(&frame, |out| {
                out.copy_from_slice(&value);
                Ok(())
            })
            .map(|()| true);
    }
    if w.is_read {
        // The responses from `sent` on: a part of the message, or after a loss its rest. The
        // remote range was checked at fetch; checked again rather than trusted.
        let skip = w
            .sent
            .checked_mul(mtu.bytes())
            .filter(|&skip| skip < w.len || w.len == 0);
        let va = skip.and_then(|skip| wqe.remote_addr.checked_add(u64::from(skip)));
        let (Some(skip), Some(va)) = (skip, va) else {
            return Err(TxError::Payload(WcStatus::RemAccessErr));
        };
        let dma_len = (w.len - skip).min(responses.saturating_mul(mtu.bytes()));
        let frame = Frame {
            av,
            sport: qp.sport,
            bth: Bth::rc(
                crate::proto::opcode::Opcode::RC_READ_REQUEST.0,
                dest_qpn,
                w.first_psn.add(w.sent),
                true,
                false,
            ),
            deth: None,
            reth: Some(Reth {
                va,
                rkey: wqe.rkey,
                dma_len,
            }),
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            immdt: None,
            payload_len: 0,
        };
        return tx.send(&frame, |_| Ok(())).map(|()| true);
    }
    let seg = segment(kind(wqe.opcode), w.len, mtu, w.first_psn, w.sent);
    let info = seg.opcode.info();
    let (has_reth, has_imm, has_ieth) =
        info.map_or((false, false, false), |i| (i.reth, i.immdt, i.ieth));
    let ack_req = asks_ack(Place {
        last_of_message: seg.last,
        ..place
    });
    let solicited = seg.last && wqe.flags & send_flags::SOLICITED != 0;
    // UC: the same packet under its UC opcode, asking for nothing.
    let (opcode, ack_req) = if qp.qp_type == QpType::Uc {
        let uc = seg
            .opcode
            .on_uc()
            .ok_or(TxError::Payload(WcStatus::LocQpOpErr))?;
        (uc, false)
    } else {
        (seg.opcode, ack_req)
    };
    let frame = Frame {
        av,
        sport: qp.sport,
        bth: Bth::rc(opcode.0, dest_qpn, seg.psn, ack_req, solicited),
        deth: None,
        reth: has_reth.then_some(Reth {
            va: wqe.remote_addr,
            rkey: wqe.rkey,
            dma_len: w.len,
        }),
        atomic_eth: None,
        aeth: None,
        atomic_ack: None,
        // The IETH of SEND WITH INVALIDATE takes the place of immediate data.
        immdt: if has_imm {
            Some(wqe.imm_data.to_ne_bytes())
        } else if has_ieth {
            Some(wqe.invalidate_rkey.to_be_bytes())
        } else {
            None
        },
        payload_len: seg.len,
    };
    tx.send(&frame, |out| gather(qp, req, index, seg.offset, out))
        .map(|()| ack_req)
}

/// Takes WQEs the process posted, up to ring index `end`, off the ring unvalidated so that
/// they can be flushed (only the id and opcode of each are used), as far as the kernel copies
/// go. `end` is a producer index read once and checked by the caller.
pub(crate) fn fetch_for_flush(qp: &QpInner, req: &mut Requester, end: u32) {
    while req.q.fetched != end {
        let wqe: SendWqe = qp.sq.read(req.q.fetched, 0).unwrap_or_default();
        let Some(index) = req.q.push_unnumbered(answered_by_response(wqe.opcode)) else {
            return; // every copy in use: the flush retires these first
        };
        let slot = req.q.slot(index);
        req.wqes[slot] = wqe;
    }
}

/// The producer index of the SQ, if it is consistent with what the kernel took: the end of
/// what a flush may take off the ring.
pub(crate) fn flush_end(qp: &QpInner, req: &Requester) -> Option<u32> {
    let producer = qp.sq.load(RingIndex::Producer);
    let posted = qp.sq.geometry().occupancy(producer, req.q.consumer)?;
    (posted >= req.q.held()).then_some(producer)
}
