// SPDX-License-Identifier: GPL-2.0
//! Queue pairs (RC): creation with user-mapped send and receive rings, and the IB state machine
//! with the attributes each transition carries.

use crate::{
    kext::{
        bindings,
        errno::eopnotsupp,
        ib::{self, QpAttr, QpInitAttr},
        mmap::SharedRing,
        object::Udata,
    },
    limits,
    proto::{av::AddressVector, mtu::IbMtu, psn::Psn},
    uapi::{recv_wqe_bytes, send_wqe_bytes, CreateQpResp, MmapInfo, RingGeometry},
};
use crate::{
    device::RxeDevice,
    kext::{
        ib::QpCqs,
        lock::{new_spinlock_bh, SpinLockBh},
    },
    proto::responder::ResponderSeq,
    uapi::Sge,
};
use kernel::{prelude::*, sync::Arc};

/// `enum ib_qp_state` values.
#[allow(missing_docs)]
pub(crate) mod state {
    use crate::kext::bindings;
    pub(crate) const RESET: u32 = bindings::ib_qp_state_IB_QPS_RESET;
    pub(crate) const RTR: u32 = bindings::ib_qp_state_IB_QPS_RTR;
    pub(crate) const RTS: u32 = bindings::ib_qp_state_IB_QPS_RTS;
}

/// `enum ib_qp_attr_mask` bits.
#[allow(missing_docs)]
mod mask {
    use crate::kext::bindings;
    pub(super) const STATE: i32 = bindings::ib_qp_attr_mask_IB_QP_STATE as i32;
    pub(super) const CUR_STATE: i32 = bindings::ib_qp_attr_mask_IB_QP_CUR_STATE as i32;
    pub(super) const ACCESS_FLAGS: i32 = bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS as i32;
    pub(super) const PKEY_INDEX: i32 = bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX as i32;
    pub(super) const PORT: i32 = bindings::ib_qp_attr_mask_IB_QP_PORT as i32;
    pub(super) const AV: i32 = bindings::ib_qp_attr_mask_IB_QP_AV as i32;
    pub(super) const PATH_MTU: i32 = bindings::ib_qp_attr_mask_IB_QP_PATH_MTU as i32;
    pub(super) const TIMEOUT: i32 = bindings::ib_qp_attr_mask_IB_QP_TIMEOUT as i32;
    pub(super) const RETRY_CNT: i32 = bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT as i32;
    pub(super) const RNR_RETRY: i32 = bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY as i32;
    pub(super) const RQ_PSN: i32 = bindings::ib_qp_attr_mask_IB_QP_RQ_PSN as i32;
    pub(super) const MAX_QP_RD_ATOMIC: i32 = bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC as i32;
    pub(super) const MIN_RNR_TIMER: i32 = bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER as i32;
    pub(super) const SQ_PSN: i32 = bindings::ib_qp_attr_mask_IB_QP_SQ_PSN as i32;
    pub(super) const MAX_DEST_RD_ATOMIC: i32 = bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC as i32;
    pub(super) const DEST_QPN: i32 = bindings::ib_qp_attr_mask_IB_QP_DEST_QPN as i32;
}

/// Remote rights a QP may grant.
const QP_ACCESS: i32 = ib::access::REMOTE_WRITE | ib::access::REMOTE_READ | ib::access::REMOTE_ATOMIC;

/// The attributes `modify_qp` sets.
#[derive(Clone, Copy)]
pub(crate) struct QpAttrs {
    pub(crate) state: u32,
    pub(crate) path_mtu: IbMtu,
    pub(crate) dest_qpn: u32,
    pub(crate) sq_psn: Psn,
    pub(crate) rq_psn: Psn,
    pub(crate) access: i32,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) sgid_index: u8,
    pub(crate) av: Option<AddressVector>,
    /// Responder: sequence state (reset to `rq_psn` by the move to RTR).
    pub(crate) resp: ResponderSeq,
    /// Responder: the receive WQE a multi-packet SEND is filling.
    pub(crate) recv: Option<RecvInProgress>,
    /// Responder: our consumer index of the RQ (never read back from the ring).
    pub(crate) rq_consumer: u32,
}

/// A receive WQE taken from the RQ, and how far a SEND has filled it.
#[derive(Clone, Copy)]
pub(crate) struct RecvInProgress {
    pub(crate) wr_id: u64,
    pub(crate) sges: [Sge; limits::MAX_SGE as usize],
    pub(crate) num_sge: usize,
    /// Bytes received so far.
    pub(crate) received: u64,
}

/// A queue pair as the verbs layer holds it; the QP itself is shared with the datapath, which
/// finds it by number in the device's QP table.
pub(crate) struct RxeQp {
    pub(crate) inner: Arc<QpInner>,
}

/// The state of a queue pair.
#[pin_data]
pub(crate) struct QpInner {
    /// Its number.
    pub(crate) qpn: u32,
    /// The PD it was created in.
    pub(crate) pd: u32,
    /// Send queue (user produces WQEs, the kernel consumes).
    pub(crate) sq: SharedRing,
    /// Receive queue (user produces WQEs, the kernel consumes).
    pub(crate) rq: SharedRing,
    /// What creation granted (reported by query).
    pub(crate) caps: bindings::ib_qp_cap,
    /// Where completions go.
    pub(crate) cqs: QpCqs<RxeDevice>,
    /// Every send WR completes with a CQE (`sq_sig_all`).
    sq_sig_all: bool,
    /// BH-safe: the receive softirq runs the responder under it.
    #[pin]
    pub(crate) attrs: SpinLockBh<QpAttrs>,
}

fn clamp_caps(cap: &mut bindings::ib_qp_cap) -> Result {
    if cap.max_send_wr > limits::MAX_QP_WR
        || cap.max_recv_wr > limits::MAX_QP_WR
        || cap.max_send_sge > limits::MAX_SGE
        || cap.max_recv_sge > limits::MAX_SGE
        || cap.max_inline_data > limits::MAX_INLINE_DATA
    {
        return Err(EINVAL);
    }
    cap.max_send_wr = cap.max_send_wr.max(1);
    cap.max_recv_wr = cap.max_recv_wr.max(1);
    cap.max_send_sge = cap.max_send_sge.max(1);
    cap.max_recv_sge = cap.max_recv_sge.max(1);
    Ok(())
}

impl QpInner {
    /// An RC QP in `pd` (with id `pd_id`) numbered `qpn`; writes the real capacities to `init`.
    pub(crate) fn new(
        qpn: u32,
        pd_id: u32,
        init: &mut QpInitAttr,
        cqs: QpCqs<RxeDevice>,
        udata: &Udata<'_>,
    ) -> Result<impl PinInit<Self, Error>> {
        if init.qp_type != bindings::ib_qp_type_IB_QPT_RC {
            return Err(eopnotsupp());
        }
        if !init.srq.is_null() || init.create_flags != 0 {
            return Err(eopnotsupp());
        }
        if init.send_cq.is_null() || init.recv_cq.is_null() {
            return Err(EINVAL);
        }
        let ctx = udata.ucontext().ok_or_else(eopnotsupp)?;
        clamp_caps(&mut init.cap)?;
        let sq_geometry = RingGeometry::for_entries(init.cap.max_send_wr, send_wqe_bytes(init.cap.max_send_sge, init.cap.max_inline_data));
        let rq_geometry = RingGeometry::for_entries(init.cap.max_recv_wr, recv_wqe_bytes(init.cap.max_recv_sge));
        // Report what the rings really hold (free-running indices: every slot is usable).
        init.cap.max_send_wr = sq_geometry.slots();
        init.cap.max_recv_wr = rq_geometry.slots();
        let sq = SharedRing::new(&ctx, sq_geometry)?;
        let rq = SharedRing::new(&ctx, rq_geometry)?;
        udata.write(&CreateQpResp {
            sq: MmapInfo { offset: sq.buffer().mmap_offset(), size: sq.buffer().len() as u64 },
            rq: MmapInfo { offset: rq.buffer().mmap_offset(), size: rq.buffer().len() as u64 },
            sq_log2_slots: sq_geometry.log2_slots,
            sq_slot_size: sq_geometry.slot_size,
            rq_log2_slots: rq_geometry.log2_slots,
            rq_slot_size: rq_geometry.slot_size,
        })?;
        let attrs = QpAttrs {
            state: state::RESET,
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: 0,
            sq_psn: Psn::new(0),
            rq_psn: Psn::new(0),
            access: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            min_rnr_timer: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            sgid_index: 0,
            av: None,
            resp: ResponderSeq::default(),
            recv: None,
            rq_consumer: 0,
        };
        let caps = init.cap;
        let sq_sig_all = init.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR;
        Ok(try_pin_init!(Self {
            qpn,
            pd: pd_id,
            sq,
            rq,
            caps,
            cqs,
            sq_sig_all,
            attrs <- new_spinlock_bh!(attrs, "rxe_rs_qp"),
        }? Error))
    }

    /// `modify_qp`: validates everything first, then applies it all under the lock.
    pub(crate) fn modify(&self, attr: &QpAttr, m: i32) -> Result {
        let mut a = self.attrs.lock();
        let cur = if m & mask::CUR_STATE != 0 { attr.cur_qp_state } else { a.state };
        let next = if m & mask::STATE != 0 { attr.qp_state } else { cur };
        if cur != a.state || !ib::rc_transition_ok(cur, next, m) {
            return Err(EINVAL);
        }
        let mut new = *a;
        new.state = next;
        if m & mask::ACCESS_FLAGS != 0 {
            if attr.qp_access_flags & !QP_ACCESS != 0 {
                return Err(EINVAL);
            }
            new.access = attr.qp_access_flags;
        }
        if m & mask::PKEY_INDEX != 0 && attr.pkey_index >= limits::PKEY_TABLE_LEN {
            return Err(EINVAL);
        }
        if m & mask::PORT != 0 && attr.port_num != crate::device::PORT {
            return Err(EINVAL);
        }
        if m & mask::AV != 0 {
            let av = ib::read_roce_av(&attr.ah_attr).ok_or(EINVAL)?;
            av.families().ok_or(EINVAL)?;
            new.av = Some(av);
            new.sgid_index = attr.ah_attr.grh.sgid_index;
        }
        if m & mask::PATH_MTU != 0 {
            new.path_mtu = IbMtu::from_enum(attr.path_mtu).ok_or(EINVAL)?;
        }
        if m & mask::TIMEOUT != 0 {
            new.timeout = (attr.timeout <= 31).then_some(attr.timeout).ok_or(EINVAL)?;
        }
        if m & mask::RETRY_CNT != 0 {
            new.retry_cnt = (attr.retry_cnt <= 7).then_some(attr.retry_cnt).ok_or(EINVAL)?;
        }
        if m & mask::RNR_RETRY != 0 {
            new.rnr_retry = (attr.rnr_retry <= 7).then_some(attr.rnr_retry).ok_or(EINVAL)?;
        }
        if m & mask::MIN_RNR_TIMER != 0 {
            new.min_rnr_timer = (attr.min_rnr_timer <= 31).then_some(attr.min_rnr_timer).ok_or(EINVAL)?;
        }
        if m & mask::RQ_PSN != 0 {
            new.rq_psn = Psn::new(attr.rq_psn);
        }
        if m & mask::SQ_PSN != 0 {
            new.sq_psn = Psn::new(attr.sq_psn);
        }
        if m & mask::MAX_QP_RD_ATOMIC != 0 {
            if u32::from(attr.max_rd_atomic) > limits::MAX_RD_ATOMIC {
                return Err(EINVAL);
            }
            new.max_rd_atomic = attr.max_rd_atomic;
        }
        if m & mask::MAX_DEST_RD_ATOMIC != 0 {
            if u32::from(attr.max_dest_rd_atomic) > limits::MAX_RD_ATOMIC {
                return Err(EINVAL);
            }
            new.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if m & mask::DEST_QPN != 0 {
            new.dest_qpn = attr.dest_qp_num & crate::proto::psn::PSN_MASK;
        }
        // RTR needs a path to send ACKs on.
        if next == state::RTR && cur != state::RTR {
            if new.av.is_none() {
                return Err(EINVAL);
            }
            new.resp = ResponderSeq { epsn: new.rq_psn, ..Default::default() };
        }
        if next == state::RESET {
            // Back to the creation state: the rings start over (the provider resets its side).
            new.recv = None;
            new.rq_consumer = 0;
            new.resp = ResponderSeq::default();
        }
        *a = new;
        Ok(())
    }

    /// `query_qp`.
    pub(crate) fn query(&self, attr: &mut QpAttr, init: &mut QpInitAttr) {
        let a = *self.attrs.lock();
        attr.qp_state = a.state;
        attr.cur_qp_state = a.state;
        attr.path_mtu = a.path_mtu as u32;
        attr.path_mig_state = bindings::ib_mig_state_IB_MIG_MIGRATED;
        attr.rq_psn = a.rq_psn.get();
        attr.sq_psn = a.sq_psn.get();
        attr.dest_qp_num = a.dest_qpn;
        attr.qp_access_flags = a.access;
        attr.cap = self.caps;
        attr.pkey_index = 0;
        attr.port_num = crate::device::PORT;
        attr.timeout = a.timeout;
        attr.retry_cnt = a.retry_cnt;
        attr.rnr_retry = a.rnr_retry;
        attr.min_rnr_timer = a.min_rnr_timer;
        attr.max_rd_atomic = a.max_rd_atomic;
        attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        if let Some(av) = &a.av {
            ib::write_roce_av(&mut attr.ah_attr, av, a.sgid_index, crate::device::PORT);
        }
        init.cap = self.caps;
        init.qp_type = bindings::ib_qp_type_IB_QPT_RC;
        init.sq_sig_type = if self.sq_sig_all {
            bindings::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            bindings::ib_sig_type_IB_SIGNAL_REQ_WR
        };
    }
}
