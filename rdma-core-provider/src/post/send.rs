//! Posting sends: WQEs are written into the mapped SQ and published with a release store of the
//! producer index, then one doorbell syscall per batch (`POST_SEND` with no WRs, as rdma_rxe's
//! provider does) tells the kernel to look, unless the kernel says it will look by itself
//! (packets in flight: `RING_FLAG_SQ_POLLED`), as it does in a stream. Both the classic
//! `ibv_post_send` and the extended `ibv_wr_*` API (which perftest uses by default) end up here.

use super::{can_post, qp_of, ring_doorbell, sges_of, Doorbell};
use crate::{
    ah::ah_num,
    ffi::{private::verbs_qp, verbs::*},
    qp::Qp,
    ring::MappedRing,
    wqe::{self, SendData},
};
use core::ffi::{c_int, c_void};
use rxe_rs_uapi::{send_opcode, BindMw, SendWqe, Sge, RING_FLAG_SQ_POLLED};
use std::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};

// WR opcodes go into the ring as they are, and completions come back with ibverbs' values.
const _: () = {
    use rxe_rs_uapi::wc_opcode;
    assert!(send_opcode::ATOMIC_CMP_AND_SWP == IBV_WR_ATOMIC_CMP_AND_SWP);
    assert!(send_opcode::ATOMIC_FETCH_AND_ADD == IBV_WR_ATOMIC_FETCH_AND_ADD);
    assert!(send_opcode::ATOMIC_WRITE == IBV_WR_ATOMIC_WRITE);
    assert!(wc_opcode::COMP_SWAP == IBV_WC_COMP_SWAP);
    assert!(wc_opcode::FETCH_ADD == IBV_WC_FETCH_ADD);
    assert!(wc_opcode::ATOMIC_WRITE == IBV_WC_ATOMIC_WRITE);
};

/// The SQ's producer lock. A plain flag, because the `ibv_wr_*` API holds it from
/// `wr_start` to `wr_complete` across calls (no guard object can live that long).
#[derive(Default)]
pub struct SqLock(AtomicBool);

impl SqLock {
    fn lock(&self) {
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A batch of WQEs being written (between `wr_start` and `wr_complete`), under the SQ lock.
#[derive(Default)]
pub struct Batch {
    /// Producer index when the batch started (restored by `wr_abort`).
    start: u32,
    /// Next free index.
    next: u32,
    /// The WQE being built (the last `wr_*` opcode call), if any.
    current: Option<u32>,
    /// That WQE is an atomic: its data must leave room for the result, not be inline.
    current_atomic: bool,
    /// First error of the batch: `wr_complete` returns it and discards the batch.
    error: c_int,
}

/// Send-side state of a QP.
#[derive(Default)]
pub struct SendQueue {
    pub lock: SqLock,
    pub batch: UnsafeCell<Batch>,
    /// SGEs a send WR may carry, and inline bytes (what the kernel granted).
    pub max_sge: u32,
    pub max_inline: u32,
    /// Posts in a row that left the kernel to find them (see [`SendQueue::needs_doorbell`]).
    unrung: AtomicU32,
}

/// Posts in a row that may skip the doorbell: the next one rings anyway. A stream's runs are
/// clocked by ACKs, and only some packets of a run ask for one (its last, and one in every 64
/// or a quarter of the window); if those packets or their ACKs are lost, this doorbell sends
/// more, whose NAK or ACK recovers within a round trip instead of the retransmission timeout.
const MAX_UNRUNG: u32 = 32;

impl SendQueue {
    /// Whether the kernel must be told of what was just published (producer index stored):
    /// not while it says it polls the SQ by itself (packets in flight; see
    /// `RING_FLAG_SQ_POLLED`), except every [`MAX_UNRUNG`]th post.
    fn needs_doorbell(&self, sq: &MappedRing) -> bool {
        if sq.flags_after_fence() & RING_FLAG_SQ_POLLED == 0 {
            self.unrung.store(0, Ordering::Relaxed);
            return true;
        }
        let unrung = self.unrung.load(Ordering::Relaxed) + 1;
        let ring = unrung >= MAX_UNRUNG;
        self.unrung
            .store(if ring { 0 } else { unrung }, Ordering::Relaxed);
        ring
    }
}

// SAFETY: `batch` is only touched with `lock` held.
unsafe impl Sync for SendQueue {}

impl Qp {
    /// The slot of SQ index `index`, if the ring has room for it.
    ///
    /// # Safety
    ///
    /// Under the SQ lock, for one index at a time: the slot is free (the kernel is done with
    /// it and reads it only once the producer index passes it), and no other reference to it
    /// is alive.
    #[allow(clippy::mut_from_ref)] // the SQ lock, not the borrow, makes it exclusive
    unsafe fn free_slot(&self, index: u32) -> Option<&mut [u8]> {
        let sq = self.sq.as_ref()?;
        // SAFETY: free and exclusive by the caller's contract.
        (index.wrapping_sub(sq.consumer()) < sq.geometry().slots())
            .then(|| unsafe { sq.slot_mut(index) })
    }
}

/// The data of a send WR as the encoder takes it: its SGEs, or with `inline` the bytes they
/// point at (at most `max_inline` of them in all, else EINVAL before anything is read).
///
/// # Safety
///
/// With `inline`, every SGE's `addr` is readable for `length` bytes (the ibverbs contract for
/// inline sends) for as long as the result is used.
unsafe fn send_data(
    sges: &[Sge],
    inline: bool,
    max_inline: u32,
) -> Result<SendData<'_, impl Iterator<Item = &[u8]>>, c_int> {
    if !inline {
        return Ok(SendData::Sges(sges));
    }
    let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    if total > u64::from(max_inline) || sges.iter().any(|s| s.addr == 0 && s.length != 0) {
        return Err(libc::EINVAL);
    }
    Ok(SendData::Inline(sges.iter().map(|s| {
        if s.length == 0 {
            return &[][..];
        }
        // SAFETY: non-null, and readable by the caller's contract.
        unsafe { core::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize) }
    })))
}

/// `ibv_post_send`.
///
/// # Safety
///
/// `ibqp` is ours; `wr` is a valid list; `bad` a valid out-pointer.
pub unsafe extern "C" fn post_send(
    ibqp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let qp = qp_of(ibqp);
    if !can_post(ibqp) {
        // SAFETY: valid out-pointer.
        unsafe { *bad = wr };
        return libc::EINVAL;
    }
    let Some(sq) = &qp.sq else {
        return libc::EINVAL;
    };
    qp.send.lock.lock();
    let mut producer = sq.producer();
    let mut ret = 0;
    while !wr.is_null() {
        // SAFETY: a valid WR of the caller's list.
        let w = unsafe { &*wr };
        // SAFETY: under the SQ lock, one slot at a time.
        let Some(slot) = (unsafe { qp.free_slot(producer) }) else {
            ret = libc::ENOMEM;
            break;
        };
        let supported = matches!(
            w.opcode,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_SEND_WITH_INV
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_RDMA_READ
                | IBV_WR_ATOMIC_CMP_AND_SWP
                | IBV_WR_ATOMIC_FETCH_AND_ADD
                | IBV_WR_LOCAL_INV
                | IBV_WR_BIND_MW
        );
        // SAFETY: `ibqp` is a live QP of ours.
        let qp_type = unsafe { (*ibqp).qp_type };
        let ud = qp_type == IBV_QPT_UD;
        let for_type = opcode_for_type(w.opcode, qp_type);
        if !supported || !for_type || w.num_sge < 0 {
            ret = libc::EINVAL;
            break;
        }
        // Local operations carry no data.
        let local = matches!(w.opcode, IBV_WR_LOCAL_INV | IBV_WR_BIND_MW);
        let inline = w.send_flags & IBV_SEND_INLINE != 0 && !local;
        let num_sge = if local { 0 } else { w.num_sge };
        let atomic = is_atomic(w.opcode);
        if atomic {
            // SAFETY: an atomic's union member is `atomic`; plain data.
            let remote_addr = unsafe { w.wr.atomic.remote_addr };
            // SAFETY: `sg_list` has `num_sge` entries (the ibverbs contract).
            let valid = unsafe { sges_of(w.sg_list, num_sge) }
                .is_ok_and(|sges| atomic_wr_valid(remote_addr, sges, inline));
            if !valid {
                ret = libc::EINVAL;
                break;
            }
        }
        // SAFETY: `sg_list` has `num_sge` entries (the ibverbs contract).
        let written = unsafe { sges_of(w.sg_list, num_sge) }
            // SAFETY: inline sources are the caller's buffers (the ibverbs contract).
            .and_then(|sges| unsafe { send_data(sges, inline, qp.send.max_inline) })
            .and_then(|data| wqe::write_send_data(slot, data, qp.send.max_sge, qp.send.max_inline));
        let (num_sge, inline_len) = match written {
            Ok(v) => v,
            Err(e) => {
                ret = e;
                break;
            }
        };
        // SAFETY: the union members match the opcode (rdma and imm_data are plain data).
        let (remote_addr, rkey, imm) = unsafe {
            (
                w.wr.rdma.remote_addr,
                w.wr.rdma.rkey,
                w.__bindgen_anon_1.imm_data,
            )
        };
        let mut wqe = SendWqe {
            wr_id: w.wr_id,
            opcode: w.opcode,
            flags: w.send_flags,
            num_sge,
            inline_len,
            imm_data: imm,
            remote_addr,
            rkey,
            ..Default::default()
        };
        if matches!(w.opcode, IBV_WR_SEND_WITH_INV | IBV_WR_LOCAL_INV) {
            // SAFETY: the union's other member; plain data.
            wqe.invalidate_rkey = unsafe { w.__bindgen_anon_1.invalidate_rkey };
            wqe.imm_data = 0;
        }
        if atomic {
            // SAFETY: an atomic's union member is `atomic`; plain data.
            let a = unsafe { w.wr.atomic };
            wqe.remote_addr = a.remote_addr;
            wqe.rkey = a.rkey;
            wqe.compare_add = a.compare_add;
            wqe.swap = a.swap;
        }
        if w.opcode == IBV_WR_BIND_MW {
            // SAFETY: a bind's union member is `bind_mw`; its window and MR (if any) are ours
            // and alive (the ibverbs contract).
            let bind = unsafe { bind_of(&w.__bindgen_anon_2.bind_mw) };
            bind.encode(&mut wqe);
        }
        if ud {
            // SAFETY: a UD WR's union member is `ud`; its AH is one of ours and alive (the
            // ibverbs contract: it outlives the WRs that name it).
            unsafe {
                let dest = w.wr.ud;
                wqe.ah_num = ah_num(dest.ah);
                wqe.remote_qpn = dest.remote_qpn;
                wqe.remote_qkey = dest.remote_qkey;
            }
            wqe.remote_addr = 0;
            wqe.rkey = 0;
        }
        if let Err(e) = wqe::write_send_header(slot, &wqe) {
            ret = e;
            break;
        }
        producer = producer.wrapping_add(1);
        wr = w.next;
    }
    let posted = producer != sq.producer();
    sq.set_producer(producer);
    let ring = posted && qp.send.needs_doorbell(sq);
    qp.send.lock.unlock();
    if ring {
        // SAFETY: `ibqp` is a live QP of ours (the post_send contract).
        let e = unsafe { ring_doorbell(ibqp, Doorbell::Send) };
        if e != 0 && ret == 0 {
            ret = e;
        }
    }
    if ret != 0 {
        // SAFETY: valid out-pointer.
        unsafe { *bad = wr };
    }
    ret
}

fn is_atomic(opcode: u32) -> bool {
    matches!(
        opcode,
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
    )
}

/// An atomic WR as rdma_rxe's provider takes it: an 8-byte aligned remote address, and room
/// for the 8-byte result in its SGEs (not inline data).
fn atomic_wr_valid(remote_addr: u64, sges: &[Sge], inline: bool) -> bool {
    remote_addr.is_multiple_of(8) && atomic_data_valid(sges, inline)
}

/// An atomic's data: SGEs with room for its 8-byte result.
fn atomic_data_valid(sges: &[Sge], inline: bool) -> bool {
    let len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    !inline && len >= 8
}

/// The bind a BIND_MW work request asks for.
///
/// # Safety
///
/// The window and the bind info's MR are NULL or live.
unsafe fn bind_of(bind: &ibv_send_wr__bindgen_ty_4__bindgen_ty_1) -> BindMw {
    let info = &bind.bind_info;
    // A NULL window or MR names none (key 0): the kernel fails the bind.
    BindMw {
        mw_rkey: if bind.mw.is_null() {
            0
        } else {
            // SAFETY: a live window, as the caller promises.
            unsafe { (*bind.mw).rkey }
        },
        new_rkey: bind.rkey,
        mr_lkey: if info.mr.is_null() {
            0
        } else {
            // SAFETY: a live MR, as the caller promises.
            unsafe { (*info.mr).lkey }
        },
        addr: info.addr,
        length: info.length,
        access: info.mw_access_flags,
    }
}

// The extended API. Each `wr_<opcode>` starts a WQE at the batch's next index; the
// `wr_set_*` calls that follow fill in its data.

fn qp_of_ex<'a>(qpx: *mut ibv_qp_ex) -> &'a Qp {
    qp_of(qpx.cast::<ibv_qp>())
}

/// The QP's open `wr_start` batch.
///
/// # Safety
///
/// Only from the `wr_*` calls, which run between `wr_start` and `wr_complete`/`wr_abort`
/// holding the SQ lock, from one thread (the ibverbs contract): no other reference to the
/// batch is alive.
#[allow(clippy::mut_from_ref)] // the SQ lock, not the borrow, makes it exclusive
unsafe fn batch(qp: &Qp) -> &mut Batch {
    // SAFETY: exclusive by the caller's contract.
    unsafe { &mut *qp.send.batch.get() }
}

/// Starts a WQE with `opcode`: header from the QP's `wr_id`/`wr_flags`, data to follow.
fn begin(qpx: *mut ibv_qp_ex, opcode: u32, rkey: u32, remote_addr: u64, imm: u32) {
    begin_wqe(
        qpx,
        SendWqe {
            opcode,
            imm_data: imm,
            remote_addr,
            rkey,
            ..Default::default()
        },
    );
}

/// Starts the WQE `wqe`, with the QP's `wr_id`/`wr_flags`.
fn begin_wqe(qpx: *mut ibv_qp_ex, mut wqe: SendWqe) {
    let qp = qp_of_ex(qpx);
    // SAFETY: a `wr_*` call, under the SQ lock.
    let b = unsafe { batch(qp) };
    if b.error != 0 {
        return;
    }
    // SAFETY: a `wr_*` call, under the SQ lock; one slot at a time.
    let Some(slot) = (unsafe { qp.free_slot(b.next) }) else {
        b.error = libc::ENOMEM;
        b.current = None;
        return;
    };
    // SAFETY: `qpx` is ours; plain fields the caller set.
    (wqe.wr_id, wqe.flags) = unsafe { ((*qpx).wr_id, (*qpx).wr_flags) };
    if let Err(e) = wqe::write_send_header(slot, &wqe) {
        b.error = e;
        b.current = None;
        return;
    }
    b.current = Some(b.next);
    b.current_atomic = is_atomic(wqe.opcode);
    b.next = b.next.wrapping_add(1);
}

/// Fills the data of the current WQE.
///
/// # Safety
///
/// With `inline`, every SGE's `addr` is readable for `length` bytes (the ibverbs contract).
unsafe fn set_data(qpx: *mut ibv_qp_ex, sges: &[Sge], inline: bool) {
    let qp = qp_of_ex(qpx);
    // SAFETY: a `wr_*` call, under the SQ lock.
    let b = unsafe { batch(qp) };
    let (Some(index), Some(sq)) = (b.current, qp.sq.as_ref()) else {
        if b.error == 0 {
            b.error = libc::EINVAL;
        }
        return;
    };
    if b.current_atomic && !atomic_data_valid(sges, inline) {
        if b.error == 0 {
            b.error = libc::EINVAL;
        }
        return;
    }
    // SAFETY: the current WQE's slot, reserved by `begin` under the SQ lock, not published.
    let slot = unsafe { sq.slot_mut(index) };
    // SAFETY: as the caller promises.
    let written = unsafe { send_data(sges, inline, qp.send.max_inline) }
        .and_then(|data| wqe::write_send_data(slot, data, qp.send.max_sge, qp.send.max_inline))
        .and_then(|(num_sge, inline_len)| {
            wqe::set_send_data_fields(slot, num_sge, inline_len, inline)
        });
    if let Err(e) = written {
        b.error = e;
    }
}

unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    let qp = qp_of_ex(qpx);
    qp.send.lock.lock();
    let producer = qp.sq.as_ref().map_or(0, |sq| sq.producer());
    // SAFETY: `wr_start` took the SQ lock just above.
    *unsafe { batch(qp) } = Batch {
        start: producer,
        next: producer,
        current: None,
        current_atomic: false,
        error: 0,
    };
}

unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    let qp = qp_of_ex(qpx);
    // SAFETY: a `wr_*` call, under the SQ lock.
    let b = unsafe { batch(qp) };
    let (error, start, next) = (b.error, b.start, b.next);
    let Some(sq) = qp.sq.as_ref() else {
        qp.send.lock.unlock();
        return libc::EINVAL;
    };
    if error == 0 && !can_post(qpx.cast()) {
        qp.send.lock.unlock();
        return libc::EINVAL;
    }
    if error != 0 {
        // Nothing of a failed batch is posted (the ring's producer never moved).
        qp.send.lock.unlock();
        return error;
    }
    sq.set_producer(next);
    let ring = next != start && qp.send.needs_doorbell(sq);
    qp.send.lock.unlock();
    if ring {
        // SAFETY: `qpx` is a live QP of ours (the wr_complete contract).
        return unsafe { ring_doorbell(qpx.cast(), Doorbell::Send) };
    }
    0
}

unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    qp_of_ex(qpx).send.lock.unlock();
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    begin(qpx, send_opcode::SEND, 0, 0, 0);
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    begin(qpx, send_opcode::SEND_WITH_IMM, 0, 0, imm);
}

unsafe extern "C" fn wr_send_inv(qpx: *mut ibv_qp_ex, invalidate_rkey: u32) {
    begin_wqe(
        qpx,
        SendWqe {
            opcode: send_opcode::SEND_WITH_INV,
            invalidate_rkey,
            ..Default::default()
        },
    );
}

unsafe extern "C" fn wr_local_inv(qpx: *mut ibv_qp_ex, invalidate_rkey: u32) {
    begin_wqe(
        qpx,
        SendWqe {
            opcode: send_opcode::LOCAL_INV,
            invalidate_rkey,
            ..Default::default()
        },
    );
}

unsafe extern "C" fn wr_bind_mw(
    qpx: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    let mut wqe = SendWqe::default();
    let bind = ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
        mw,
        rkey,
        // SAFETY: a valid bind info (the ibverbs contract).
        bind_info: unsafe { *bind_info },
    };
    // SAFETY: the window and MR are live (the ibverbs contract).
    unsafe { bind_of(&bind) }.encode(&mut wqe);
    begin_wqe(qpx, wqe);
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qpx, send_opcode::RDMA_WRITE, rkey, remote_addr, 0);
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    begin(
        qpx,
        send_opcode::RDMA_WRITE_WITH_IMM,
        rkey,
        remote_addr,
        imm,
    );
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(qpx, send_opcode::RDMA_READ, rkey, remote_addr, 0);
}

/// Starts an atomic WQE (or an ATOMIC WRITE): a misaligned address fails the batch (EINVAL at
/// `wr_complete`), as `ibv_post_send` refuses it.
fn begin_atomic(qpx: *mut ibv_qp_ex, wqe: SendWqe) {
    if !wqe.remote_addr.is_multiple_of(8) {
        // SAFETY: a `wr_*` call, under the SQ lock.
        let b = unsafe { batch(qp_of_ex(qpx)) };
        if b.error == 0 {
            b.error = libc::EINVAL;
        }
        b.current = None;
        return;
    }
    begin_wqe(qpx, wqe);
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    begin_atomic(
        qpx,
        SendWqe {
            opcode: send_opcode::ATOMIC_CMP_AND_SWP,
            remote_addr,
            rkey,
            compare_add: compare,
            swap,
            ..Default::default()
        },
    );
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    begin_atomic(
        qpx,
        SendWqe {
            opcode: send_opcode::ATOMIC_FETCH_AND_ADD,
            remote_addr,
            rkey,
            compare_add: add,
            ..Default::default()
        },
    );
}

/// IBTA 1.5's ATOMIC WRITE: the 8 bytes at `atomic_wr` are stored at `remote_addr` (8-byte
/// aligned, else EINVAL) at once. They travel in the WQE itself (`swap`), read here.
///
/// # Safety
///
/// `atomic_wr` points at 8 readable bytes (the ibverbs contract).
unsafe extern "C" fn wr_atomic_write(
    qpx: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    if atomic_wr.is_null() {
        // SAFETY: a `wr_*` call, under the SQ lock.
        let b = unsafe { batch(qp_of_ex(qpx)) };
        if b.error == 0 {
            b.error = libc::EINVAL;
        }
        b.current = None;
        return;
    }
    // SAFETY: 8 readable bytes, as the caller promises; no alignment assumed.
    let value = unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() };
    begin_atomic(
        qpx,
        SendWqe {
            opcode: send_opcode::ATOMIC_WRITE,
            remote_addr,
            rkey,
            swap: u64::from_ne_bytes(value),
            ..Default::default()
        },
    );
}

unsafe extern "C" fn wr_set_ud_addr(
    qpx: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    let qp = qp_of_ex(qpx);
    // SAFETY: a `wr_*` call, under the SQ lock.
    let b = unsafe { batch(qp) };
    let (Some(index), Some(sq)) = (b.current, qp.sq.as_ref()) else {
        if b.error == 0 {
            b.error = libc::EINVAL;
        }
        return;
    };
    // SAFETY: the current WQE's slot, reserved by `begin` under the SQ lock, not published;
    // `ah` is one of ours and alive (the ibverbs contract).
    let written = unsafe {
        let slot = sq.slot_mut(index);
        wqe::set_send_ud_fields(slot, ah_num(ah), remote_qpn, remote_qkey)
    };
    if let Err(e) = written {
        b.error = e;
    }
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: not inline.
    unsafe { set_data(qpx, &[Sge { addr, length, lkey }], false) };
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num_sge: usize, list: *const ibv_sge) {
    // More SGEs than any QP has: EINVAL below.
    let num_sge = c_int::try_from(num_sge).unwrap_or(-1);
    // SAFETY: the caller's list has `num_sge` entries.
    match unsafe { sges_of(list, num_sge) } {
        // SAFETY: not inline.
        Ok(sges) => unsafe { set_data(qpx, sges, false) },
        Err(e) => {
            // SAFETY: a `wr_*` call, under the SQ lock.
            let b = unsafe { batch(qp_of_ex(qpx)) };
            if b.error == 0 {
                b.error = e;
            }
        }
    }
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // Longer than any inline limit: refused before anything is read.
    let length = u32::try_from(length).unwrap_or(u32::MAX);
    let sge = Sge {
        addr: addr as u64,
        length,
        lkey: 0,
    };
    // SAFETY: `addr` is readable for `length` bytes (the ibverbs contract).
    unsafe { set_data(qpx, &[sge], true) };
}

unsafe extern "C" fn wr_set_inline_data_list(
    qpx: *mut ibv_qp_ex,
    num_buf: usize,
    list: *const ibv_data_buf,
) {
    // SAFETY: the caller's list has `num_buf` entries.
    let bufs = unsafe { core::slice::from_raw_parts(list, num_buf) };
    let mut sges = Vec::with_capacity(num_buf);
    for b in bufs {
        sges.push(Sge {
            addr: b.addr as u64,
            length: u32::try_from(b.length).unwrap_or(u32::MAX),
            lkey: 0,
        });
    }
    // SAFETY: each buffer is readable for its length (the ibverbs contract).
    unsafe { set_data(qpx, &sges, true) };
}

/// Whether a QP of `qp_type` carries WRs of `opcode` (RC all we offer; UC SENDs, WRITEs and
/// window binds; UD SENDs).
fn opcode_for_type(opcode: u32, qp_type: u32) -> bool {
    match qp_type {
        IBV_QPT_UD => matches!(opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM),
        IBV_QPT_UC => matches!(
            opcode,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_BIND_MW
        ),
        _ => true,
    }
}

/// Whether we offer every `ibv_qp_ex` operation `flags` asks for (`send_ops_flags`) on a QP of
/// `qp_type`: a UD QP only sends, a UC QP sends, writes and binds windows.
pub fn supported_send_ops(flags: u64, qp_type: u32) -> bool {
    let sends = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    let uc = sends
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_BIND_MW;
    let ours = match qp_type {
        IBV_QPT_UD => sends,
        IBV_QPT_UC => uc,
        _ => {
            uc | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_SEND_WITH_INV
                | IBV_QP_EX_WITH_LOCAL_INV
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_ATOMIC_WRITE
        }
    };
    flags & !u64::from(ours) == 0
}

/// Makes `vqp` an extended QP: fills in the `ibv_wr_*` operations.
pub fn init_qp_ex(vqp: &mut verbs_qp) {
    let x = &mut vqp.qp_ex;
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_atomic_write = Some(wr_atomic_write);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    /// `VERBS_QP_EX` (driver.h): `ibv_qp_to_qp_ex` returns the extended QP.
    const VERBS_QP_EX: u32 = 1 << 1;
    vqp.comp_mask |= VERBS_QP_EX;
}
