// SPDX-License-Identifier: GPL-2.0
//! Memory windows (IBA 10.6.7): an R_Key onto part of an MR, bound and invalidated by work
//! requests while the datapath may be using it. A type 1 window is bound by `ibv_bind_mw` and
//! unbound by a zero-length bind; a type 2B window is bound by a BIND_MW work request to the QP
//! that posted it, and freed by LOCAL_INV or by the peer's SEND WITH INVALIDATE on that QP.
//! Every access checks the window and copies through its MR under one hold of its lock, so an
//! invalidation never races a copy.

use crate::{
    kext::{
        ib::{Access, MwType},
        lock::{new_spinlock_irq, SpinLockIrq},
    },
    proto::atomic::{AtomicOp, ATOMIC_BYTES},
    uapi::BindMw,
    verbs::mr::{self, AccessError, Buf, KeyedMr, MrInner, PdId},
};
use kernel::{prelude::*, sync::Arc};

/// Flags a bind may carry. A window's rights are the remote ones; local write means nothing
/// for it and is accepted (rdma-core's own tests pass it), as rdma_rxe does.
const BIND_FLAGS: Access = Access::REMOTE_READ
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::ZERO_BASED)
    .union(Access::LOCAL_WRITE);

/// What a bound window opens onto.
struct Binding {
    /// Holds the MR: its window count keeps it from being deregistered meanwhile.
    mr: Arc<MrInner>,
    /// The MR's key when bound.
    mr_key: u32,
    /// First byte of the window, in the MR's iova space.
    addr: u64,
    /// Bytes (not 0).
    len: u64,
    /// Addressed from 0 by the peer rather than from `addr`.
    zero_based: bool,
    /// Remote rights.
    rights: Access,
    /// Type 2B: the QP it is bound to (by serial: QP numbers are reused), the only one
    /// through which it works.
    qp: Option<u64>,
}

impl Drop for Binding {
    fn drop(&mut self) {
        // The MR stays in the key table until this count is 0, and a deregistration that
        // then succeeds waits out every BH-disabled section (where the datapath unbinds) with
        // `synchronize_rcu` before it drops its reference: ours is never the last one in
        // atomic context, so the MR's pages are never unpinned there.
        self.mr.release_window();
    }
}

/// Where a window stands.
struct WindowState {
    /// Its key works: type 1 from allocation on, type 2 from a bind to its invalidation.
    valid: bool,
    /// Low byte of the key (the index part never changes).
    key_byte: u8,
    /// None for a type 1 window never bound or bound with length 0 (every access fails).
    binding: Option<Binding>,
    /// Deallocated: nothing binds it again.
    retired: bool,
}

/// A memory window.
#[pin_data]
pub(crate) struct MwInner {
    /// Its PD: binds come from QPs of this PD, accesses through QPs of it.
    pub(crate) pd: PdId,
    pub(crate) kind: MwType,
    #[pin]
    state: SpinLockIrq<WindowState>,
}

impl MwInner {
    /// A window of `kind` in PD `pd` whose key ends in `key_byte`, not bound.
    pub(crate) fn new(pd: PdId, kind: MwType, key_byte: u8) -> impl PinInit<Self> {
        let state = WindowState {
            valid: kind == MwType::One,
            key_byte,
            binding: None,
            retired: false,
        };
        pin_init!(Self {
            pd,
            kind,
            state <- new_spinlock_irq!(state, "rxe_rs_mw"),
        })
    }

    /// Whether `key` names this window now (its table index was matched by the lookup).
    pub(crate) fn key_matches(&self, key: u32) -> bool {
        let s = self.state.lock();
        s.valid && s.key_byte == key as u8
    }

    /// BIND_MW posted on the QP with serial `qp` in PD `pd`. `mr` is the MR the bind's L_Key
    /// names, which the caller looks up when the bind has a length. The window then opens onto
    /// `[bind.addr, bind.addr + bind.length)` of the MR under the bind's new key, or (type 1,
    /// length 0) onto nothing. EINVAL for anything the bind rules refuse (IBA 10.6.7.2,
    /// C10-72..75).
    pub(crate) fn bind(&self, pd: PdId, qp: u64, bind: &BindMw, mr: Option<KeyedMr>) -> Result {
        let flags = Access::from_raw(bind.access as i32);
        let zero_based = flags.contains(Access::ZERO_BASED);
        if pd != self.pd || !flags.within(BIND_FLAGS) {
            return Err(EINVAL);
        }
        // Type 1 windows are not zero based (o10-36.2.2); type 2 ones open onto something
        // (o10-37.2.40).
        match self.kind {
            MwType::One if zero_based => return Err(EINVAL),
            MwType::Two if bind.length == 0 => return Err(EINVAL),
            _ => {}
        }
        // The MR, its key and the window's rights, once the MR allows the bind.
        let target = match mr {
            None if bind.length == 0 => None,
            None => return Err(EINVAL),
            Some(KeyedMr { mr, key }) => {
                let region = mr.fixed().ok_or(EINVAL)?;
                let rights = Access::from_raw(
                    flags.raw_int()
                        & (Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                            .raw_int(),
                );
                // C10-74: the peer may write only where the MR lets us write.
                let writes =
                    rights.contains(Access::REMOTE_WRITE) || rights.contains(Access::REMOTE_ATOMIC);
                if mr.pd != pd
                    || bind.length == 0
                    || !region.access.contains(Access::MW_BIND)
                    || (writes && !region.access.contains(Access::LOCAL_WRITE))
                {
                    return Err(EINVAL);
                }
                // C10-75: within the MR, zero based or not.
                mr::offset_in(region.iova, region.len, bind.addr, bind.length)
                    .map_err(|_| EINVAL)?;
                Some((mr, key, rights))
            }
        };
        let mut s = self.state.lock();
        // A type 1 window rebinds while valid, named by its current key (the provider keeps
        // it); a type 2 one binds only when free (o10-37.2.30), and the application may not
        // track its key. The MR is counted only once the bind is sure to happen, so that a
        // refused bind never makes a deregistration fail.
        let ready = !s.retired
            && match self.kind {
                MwType::One => s.valid && s.key_byte == bind.mw_rkey as u8,
                MwType::Two => !s.valid,
            };
        if !ready || target.as_ref().is_some_and(|(mr, ..)| !mr.hold_window()) {
            drop(s);
            drop(target); // after the lock, and not counted
            return Err(EINVAL);
        }
        let binding = target.map(|(mr, mr_key, rights)| Binding {
            mr,
            mr_key,
            addr: bind.addr,
            len: bind.length,
            zero_based,
            rights,
            qp: (self.kind == MwType::Two).then_some(qp),
        });
        s.valid = true;
        s.key_byte = bind.new_rkey as u8;
        let old = core::mem::replace(&mut s.binding, binding);
        drop(s);
        drop(old); // after the lock
        Ok(())
    }

    /// LOCAL_INV of `key` posted on the QP with serial `qp` in PD `pd`, or (`from_peer`) a
    /// peer's SEND WITH INVALIDATE arriving on it: only a bound type 2 window of that PD, by
    /// its current key, and from the peer only through the QP it is bound to (type 1 windows
    /// are unbound by a zero-length bind, o10-37.2.26).
    pub(crate) fn invalidate(&self, key: u32, pd: PdId, qp: u64, from_peer: bool) -> Result {
        if self.kind != MwType::Two || pd != self.pd {
            return Err(EINVAL);
        }
        let old = {
            let mut s = self.state.lock();
            let bound_here = s.binding.as_ref().and_then(|b| b.qp) == Some(qp);
            if !s.valid || s.key_byte != key as u8 || (from_peer && !bound_here) {
                return Err(EINVAL);
            }
            s.valid = false;
            s.binding.take()
        };
        drop(old);
        Ok(())
    }

    /// Deallocation: no key works any more, and its MR is released.
    pub(crate) fn retire(&self) {
        let old = {
            let mut s = self.state.lock();
            s.valid = false;
            s.retired = true;
            s.binding.take()
        };
        drop(old);
    }

    /// Checks an access by `key` of `len` bytes at `addr` (a window address) needing `rights`
    /// through `via`, then copies through the MR if it is for bytes.
    fn access(
        &self,
        key: u32,
        via: Via,
        addr: u64,
        len: u64,
        rights: Access,
        buf: Option<Buf<'_>>,
    ) -> Result<(), AccessError> {
        let Via { pd, qp } = via;
        let s = self.state.lock();
        let b = s.binding.as_ref().ok_or(AccessError::Denied)?;
        if !s.valid
            || s.key_byte != key as u8
            || pd != self.pd
            || !b.rights.contains(rights)
            || b.qp.is_some_and(|bound| bound != qp)
        {
            return Err(AccessError::Denied);
        }
        let start = if b.zero_based { 0 } else { b.addr };
        let offset = mr::offset_in(start, b.len, addr, len)?;
        let at = b.addr.checked_add(offset).ok_or(AccessError::OutOfBounds)?;
        // The MR's own rights were checked against the window's at bind time.
        b.mr.access(b.mr_key, pd, at, len, Access::NONE, buf)
    }
}

/// The QP a remote access arrives on (its serial), and its PD.
#[derive(Clone, Copy)]
struct Via {
    pd: PdId,
    qp: u64,
}

/// A memory window as the verbs layer holds it: the window itself lives in the device's key
/// table (and in accesses in flight) until deallocation removes it.
pub(crate) struct RxeMw {
    pub(crate) index: u32,
}

/// What an R_Key names, as a lookup found it: an MR, or a window onto one. Each access checks
/// that the key still names it.
pub(crate) enum RemoteKey {
    Mr(KeyedMr),
    Mw { mw: Arc<MwInner>, key: u32 },
}

impl RemoteKey {
    fn access(
        &self,
        pd: PdId,
        qp: u64,
        addr: u64,
        len: u64,
        rights: Access,
        buf: Option<Buf<'_>>,
    ) -> Result<(), AccessError> {
        match self {
            RemoteKey::Mr(m) => m.mr.access(m.key, pd, addr, len, rights, buf),
            RemoteKey::Mw { mw, key } => mw.access(*key, Via { pd, qp }, addr, len, rights, buf),
        }
    }

    /// Copies `out.len()` bytes at `addr` out, for the peer of the QP with serial `qp` in PD
    /// `pd`.
    pub(crate) fn read(
        &self,
        pd: PdId,
        qp: u64,
        addr: u64,
        out: &mut [u8],
        rights: Access,
    ) -> Result<(), AccessError> {
        let len = out.len() as u64;
        self.access(pd, qp, addr, len, rights, Some(Buf::Out(out)))
    }

    /// Copies `data` in at `addr`, for the peer of the QP with serial `qp` in PD `pd`.
    pub(crate) fn write(
        &self,
        pd: PdId,
        qp: u64,
        addr: u64,
        data: &[u8],
        rights: Access,
    ) -> Result<(), AccessError> {
        let len = data.len() as u64;
        self.access(pd, qp, addr, len, rights, Some(Buf::In(data)))
    }

    /// Executes the atomic `op` on the 8 bytes at `addr`, for the peer of the QP with serial
    /// `qp` in PD `pd`; returns their original value. COMPARE SWAP and FETCH ADD need the
    /// remote atomic right, an ATOMIC WRITE the remote write right (as rdma_rxe).
    pub(crate) fn atomic(
        &self,
        pd: PdId,
        qp: u64,
        addr: u64,
        op: AtomicOp,
    ) -> Result<u64, AccessError> {
        let rights = match op {
            AtomicOp::Write { .. } => Access::REMOTE_WRITE,
            _ => Access::REMOTE_ATOMIC,
        };
        let mut orig = 0;
        self.access(
            pd,
            qp,
            addr,
            u64::from(ATOMIC_BYTES),
            rights,
            Some(Buf::Atomic(op, &mut orig)),
        )?;
        Ok(orig)
    }

    /// Checks an access of `len` bytes at `addr` needing `rights`.
    pub(crate) fn check(
        &self,
        pd: PdId,
        qp: u64,
        addr: u64,
        len: u64,
        rights: Access,
    ) -> Result<(), AccessError> {
        self.access(pd, qp, addr, len, rights, None)
    }
}
