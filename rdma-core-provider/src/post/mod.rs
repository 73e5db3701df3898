//! The post verbs: WQEs written straight into the rings the kernel mapped (kernel bypass), and
//! the doorbell syscall that tells the kernel when it must look. [`send`] has `ibv_post_send`
//! and the extended `ibv_wr_*` API, [`recv`] `ibv_post_recv`; the WQE bytes are written by the
//! safe encoders of [`crate::wqe`].

pub mod recv;
pub mod send;

use crate::{ffi::verbs::*, qp::Qp};
use core::ffi::{c_int, c_void};
use rxe_rs_uapi::Sge;
use std::mem::size_of;

pub(crate) fn qp_of<'a>(ibqp: *mut ibv_qp) -> &'a Qp {
    // SAFETY: every `ibv_qp` we hand out starts a `Qp` (asserted in qp.rs).
    unsafe { &*ibqp.cast::<Qp>() }
}

/// Which queue a doorbell is for.
#[derive(Clone, Copy)]
pub enum Doorbell {
    /// New send WQEs.
    Send,
    /// New receive WQEs while the QP is in the error state (to be flushed).
    Recv,
}

/// The doorbell: tells the kernel a queue has new WQEs (`POST_SEND` or `POST_RECV` with no
/// work requests: the WQEs are in the ring). Their commands share one layout.
///
/// # Safety
///
/// `ibqp` is a live QP of this provider (its context's command fd is open).
pub unsafe fn ring_doorbell(ibqp: *mut ibv_qp, which: Doorbell) -> c_int {
    #[repr(C)]
    struct Cmd {
        hdr: ib_uverbs_cmd_hdr,
        core: ib_uverbs_post_send,
    }
    let (command, wqe_size) = match which {
        Doorbell::Send => (IB_USER_VERBS_CMD_POST_SEND, size_of::<ib_uverbs_send_wr>()),
        Doorbell::Recv => (IB_USER_VERBS_CMD_POST_RECV, size_of::<ib_uverbs_recv_wr>()),
    };
    let mut resp = ib_uverbs_post_send_resp::default();
    // SAFETY: a live QP of ours and its context.
    let (handle, fd) = unsafe { ((*ibqp).handle, (*(*ibqp).context).cmd_fd) };
    let cmd = Cmd {
        hdr: ib_uverbs_cmd_hdr {
            command,
            in_words: (size_of::<Cmd>() / 4) as u16,
            out_words: (size_of::<ib_uverbs_post_send_resp>() / 4) as u16,
        },
        core: ib_uverbs_post_send {
            response: &mut resp as *mut _ as u64,
            qp_handle: handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: wqe_size as u32,
            ..Default::default()
        },
    };
    // SAFETY: writes our command struct to the uverbs fd; the kernel writes `resp`.
    let n = unsafe { libc::write(fd, (&cmd as *const Cmd).cast::<c_void>(), size_of::<Cmd>()) };
    if n == size_of::<Cmd>() as isize {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

/// Whether the QP may post sends at all (RTS or later; the kernel flushes in ERR).
pub(crate) fn can_post(ibqp: *mut ibv_qp) -> bool {
    // SAFETY: libibverbs keeps `state` current (ibv_modify_qp updates it).
    let state = unsafe { (*ibqp).state };
    !matches!(state, IBV_QPS_RESET | IBV_QPS_INIT | IBV_QPS_RTR)
}

/// The SGE list of a work request: EINVAL for a negative count, or a NULL list with entries.
///
/// # Safety
///
/// A non-NULL `list` has `num_sge` valid entries (the ibverbs contract).
pub(crate) unsafe fn sges_of<'a>(list: *const ibv_sge, num_sge: c_int) -> Result<&'a [Sge], c_int> {
    match usize::try_from(num_sge) {
        Ok(0) => Ok(&[]),
        // SAFETY: as the caller promises; `ibv_sge` has `Sge`'s layout (tested).
        Ok(n) if !list.is_null() => {
            Ok(unsafe { core::slice::from_raw_parts(list.cast::<Sge>(), n) })
        }
        _ => Err(libc::EINVAL),
    }
}
