//! Extended CQs (`ibv_create_cq_ex`): the same kernel CQ and ring as `ibv_create_cq`, polled
//! one completion at a time through `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and the
//! `ibv_wc_read_*` accessors.
//!
//! A poll is a session: `start_poll` takes the CQ (unless it was created single-threaded) and
//! `end_poll`, or a `start_poll` that found nothing, gives it back. The completions read in a
//! session go back to the kernel at its end, when the consumer index moves past them.

use crate::{
    cq::{to_cq, Cq},
    ffi::{private::*, verbs::*},
};
use core::{
    cell::UnsafeCell,
    ffi::c_int,
    hint::spin_loop,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};
use rxe_rs_uapi::{CqSlot, Cqe, CreateCqResp};
use std::mem::{size_of, size_of_val};

/// The completion fields a CQ slot carries: those of `ibv_wc`, and the time the kernel wrote
/// it (when asked for, the kernel stamps each completion; the clock is `hca_core_clock`).
const SUPPORTED_WC_FLAGS: u64 =
    IBV_WC_STANDARD_FLAGS as u64 | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as u64;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` needs nothing from the kernel; `IGNORE_OVERRUN` is
/// the kernel's to refuse (a full CQ raises `IB_EVENT_CQ_ERR` there); other bits are unknown.
const USER_ONLY_FLAGS: u32 = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
const KNOWN_FLAGS: u32 = USER_ONLY_FLAGS | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;

thread_local! {
    /// Its address names the calling thread, to tell the session's owner (cheaper than gettid).
    static THREAD_TOKEN: u8 = const { 0 };
}

fn thread_token() -> usize {
    THREAD_TOKEN.with(|t| t as *const u8 as usize)
}

/// Where an extended poll is: the lock that makes it one session at a time (every consumer
/// of the ring takes it: legacy polls and QP resets too), the thread whose `start_poll` opened
/// the session, and the completion it has reached.
pub struct PollSession {
    held: AtomicBool,
    single_threaded: bool,
    /// `thread_token()` of the thread between `start_poll` and `end_poll`, or 0.
    owner: AtomicUsize,
    place: UnsafeCell<Place>,
}

/// The completion a session reads, and the index after it.
#[derive(Default)]
struct Place {
    current: CqSlot,
    next: u32,
}

// SAFETY: `place` is only touched by the holder of `held` (see `SessionGuard`), or by the one
// thread a single-threaded CQ is polled from, as its creator promised.
unsafe impl Sync for PollSession {}

/// A session held across calls (`start_poll` to `end_poll`), or within one (resize).
pub struct SessionGuard<'a>(&'a PollSession);

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}

impl PollSession {
    pub(crate) fn new(single_threaded: bool) -> Self {
        Self {
            held: AtomicBool::new(false),
            single_threaded,
            owner: AtomicUsize::new(0),
            place: UnsafeCell::new(Place::default()),
        }
    }

    /// Waits for the session (a poller holds it for a few reads at most).
    pub(crate) fn lock(&self) -> SessionGuard<'_> {
        if !self.single_threaded {
            while self
                .held
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                spin_loop();
            }
        }
        SessionGuard(self)
    }

    fn unlock(&self) {
        if !self.single_threaded {
            self.held.store(false, Ordering::Release);
        }
    }

    /// The session's place.
    ///
    /// # Safety
    ///
    /// The caller holds the session (between `start_poll`'s success and `end_poll`).
    #[allow(clippy::mut_from_ref)]
    unsafe fn place(&self) -> &mut Place {
        // SAFETY: exclusive by the caller's contract.
        unsafe { &mut *self.place.get() }
    }
}

/// The response to the extended create_cq: core part, then ours (as for `ibv_create_cq`).
#[repr(C)]
#[derive(Default)]
struct CreateCqExRespFull {
    core: ib_uverbs_ex_create_cq_resp,
    drv: CreateCqResp,
}

/// `ibv_create_cq_ex`.
///
/// # Safety
///
/// libibverbs passes a context of ours and valid attributes.
pub unsafe extern "C" fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: valid attributes, by the contract.
    let a = unsafe { &*attr };
    let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    // A parent domain (IBV_CQ_INIT_ATTR_MASK_PD) is not supported; nor are completion fields
    // a CQ slot does not carry (wall-clock timestamps, VLAN, flow tag, tag matching).
    if a.comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
        || a.wc_flags & !SUPPORTED_WC_FLAGS != 0
        || flags & !KNOWN_FLAGS != 0
    {
        crate::set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    }
    let cq = Cq::new_boxed(flags & USER_ONLY_FLAGS != 0);
    let mut resp = CreateCqExRespFull::default();
    // SAFETY: valid context and attributes, a fresh CQ, no command data (NULL, 0), and a
    // response buffer of the size passed that starts with the core part.
    let ret = unsafe {
        ibv_cmd_create_cq_ex(
            ctx,
            attr,
            &raw mut (*cq).verbs,
            core::ptr::null_mut(),
            0,
            &mut resp.core,
            size_of_val(&resp),
            0,
        )
    };
    // SAFETY: a fresh CQ, created by the kernel if `ret` is 0.
    let cq = unsafe { Cq::finish_create(ctx, cq, ret, &resp.drv) };
    if cq.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: ours, not published yet.
    let ex = unsafe { &mut (*cq).verbs.cq_ex };
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_vendor_err);
    ex.read_byte_len = Some(read_byte_len);
    ex.read_imm_data = Some(read_imm_data);
    ex.read_qp_num = Some(read_qp_num);
    ex.read_src_qp = Some(read_src_qp);
    ex.read_wc_flags = Some(read_wc_flags);
    ex.read_slid = Some(read_slid);
    ex.read_sl = Some(read_sl);
    ex.read_dlid_path_bits = Some(read_dlid_path_bits);
    ex.read_completion_ts = Some(read_completion_ts);
    ex
}

fn cq_of<'a>(ex: *mut ibv_cq_ex) -> &'a Cq {
    to_cq(ex.cast())
}

/// Reads the completion at the session's next index (the ring's consumer index when
/// `from_start`) into the session and the CQ's `wr_id` and `status`; `ENOENT` if there is
/// none yet.
///
/// # Safety
///
/// `ex` is a CQ of ours and the caller holds its session.
unsafe fn read_next(ex: *mut ibv_cq_ex, from_start: bool) -> c_int {
    let cq = cq_of(ex);
    let guard = cq.ring.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ring) = guard.as_ref() else {
        return libc::EINVAL;
    };
    // SAFETY: the caller holds the session.
    let place = unsafe { cq.session.place() };
    let index = if from_start {
        ring.consumer()
    } else {
        place.next
    };
    if index == ring.producer() {
        return libc::ENOENT;
    }
    // SAFETY: the slot holds a CQE the kernel published before `producer` (acquire); a
    // `CqSlot` is plain data of the slot's size.
    place.current = unsafe { ring.slot(index).cast::<CqSlot>().read_unaligned() };
    place.next = index.wrapping_add(1);
    // SAFETY: ours; the session is the only writer of these two fields.
    unsafe {
        (*ex).wr_id = place.current.cqe.wr_id;
        (*ex).status = place.current.cqe.status;
    }
    0
}

/// `ibv_start_poll`.
///
/// # Safety
///
/// `ex` comes from [`create_cq_ex`]; `attr` is valid.
unsafe extern "C" fn start_poll(ex: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: valid, by the contract. (No field of it means anything yet.)
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    let session = cq_of(ex).session.lock();
    // SAFETY: held just above.
    let ret = unsafe { read_next(ex, true) };
    if ret == 0 {
        // Held until `end_poll`; on ENOENT the caller does not call it (or calls it for
        // nothing: `end_poll` only ends the session its thread opened).
        cq_of(ex)
            .session
            .owner
            .store(thread_token(), Ordering::Relaxed);
        core::mem::forget(session);
    }
    ret
}

/// `ibv_next_poll`.
///
/// # Safety
///
/// `ex` comes from [`create_cq_ex`], in a session `start_poll` opened.
unsafe extern "C" fn next_poll(ex: *mut ibv_cq_ex) -> c_int {
    if cq_of(ex).session.owner.load(Ordering::Relaxed) != thread_token() {
        return libc::EINVAL;
    }
    // SAFETY: this thread holds the session.
    unsafe { read_next(ex, false) }
}

/// `ibv_end_poll`: the completions read go back to the kernel. Without a session of this
/// thread's (a `start_poll` that found nothing, as rdma-core's tests do), nothing happens.
///
/// # Safety
///
/// `ex` comes from [`create_cq_ex`].
unsafe extern "C" fn end_poll(ex: *mut ibv_cq_ex) {
    let cq = cq_of(ex);
    if cq.session.owner.load(Ordering::Relaxed) != thread_token() {
        return;
    }
    cq.session.owner.store(0, Ordering::Relaxed);
    {
        let guard = cq.ring.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ring) = guard.as_ref() {
            // SAFETY: this thread holds the session.
            ring.set_consumer(unsafe { cq.session.place() }.next);
        }
    }
    cq.session.unlock();
}

/// The session's current completion.
///
/// # Safety
///
/// `ex` comes from [`create_cq_ex`], in a session in which a poll found a completion.
unsafe fn current<'a>(ex: *mut ibv_cq_ex) -> &'a CqSlot {
    // SAFETY: the session is held, by the contract.
    unsafe { &cq_of(ex).session.place().current }
}

macro_rules! readers {
    ($($(#[$doc:meta])* $name:ident -> $ty:ty = |$c:ident| $value:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// `ex` comes from [`create_cq_ex`], in a session in which a poll found a completion.
        unsafe extern "C" fn $name(ex: *mut ibv_cq_ex) -> $ty {
            // SAFETY: by the contract.
            let $c = unsafe { current(ex) };
            $value
        }
    )*};
}

readers! {
    /// `ibv_wc_read_opcode`.
    read_opcode -> ibv_wc_opcode = |c| c.cqe.opcode;
    /// `ibv_wc_read_vendor_err`.
    read_vendor_err -> u32 = |c| c.cqe.vendor_err;
    /// `ibv_wc_read_byte_len`.
    read_byte_len -> u32 = |c| c.cqe.byte_len;
    /// `ibv_wc_read_imm_data` (or the invalidated R_Key, with `IBV_WC_WITH_INV`).
    read_imm_data -> __be32 = |c| c.cqe.imm_data;
    /// `ibv_wc_read_qp_num`.
    read_qp_num -> u32 = |c| c.cqe.qp_num;
    /// `ibv_wc_read_src_qp`.
    read_src_qp -> u32 = |c| c.cqe.src_qp;
    /// `ibv_wc_read_wc_flags` (`ibv_wc`'s flags, the same bits).
    read_wc_flags -> core::ffi::c_uint = |c| c.cqe.wc_flags;
    /// `ibv_wc_read_slid`.
    read_slid -> u32 = |c| u32::from(c.cqe.slid);
    /// `ibv_wc_read_sl`.
    read_sl -> u8 = |c| c.cqe.sl;
    /// `ibv_wc_read_dlid_path_bits`.
    read_dlid_path_bits -> u8 = |c| c.cqe.dlid_path_bits;
    /// `ibv_wc_read_completion_ts`: CLOCK_MONOTONIC nanoseconds when the kernel wrote the
    /// completion (`hca_core_clock` is 1 GHz); 0 on a CQ created without
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
    read_completion_ts -> u64 = |c| c.completed_ns;
}

// A `CqSlot` is read whole from a slot: `MappedRing::map` refuses slots under 64 bytes.
const _: () = assert!(size_of::<CqSlot>() <= 64 && size_of::<Cqe>() == size_of::<ibv_wc>());
