// SPDX-License-Identifier: GPL-2.0
//! Kernel consumers' work requests and completions: `ib_send_wr`/`ib_recv_wr` lists decoded
//! into plain values (the UD and RDMA parts, which live in the structs around an `ib_send_wr`,
//! included), and `ib_wc` filled from the driver's completions.

use super::*;
use crate::uapi::{Cqe, Sge};

// A kernel SGE has the layout of ours: lists are copied field by field all the same.
const _: () = {
    assert!(core::mem::size_of::<bindings::ib_sge>() == core::mem::size_of::<Sge>());
};
// Kernel opcodes are carried in our WQEs and CQEs as they are.
const _: () = {
    use crate::uapi::{send_opcode, wc_opcode};
    assert!(send_opcode::LOCAL_INV == bindings::ib_wr_opcode_IB_WR_LOCAL_INV);
    assert!(send_opcode::SEND_WITH_INV == bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV);
    assert!(send_opcode::REG_MR == bindings::ib_wr_opcode_IB_WR_REG_MR);
    assert!(send_opcode::ATOMIC_CMP_AND_SWP == bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP);
    assert!(send_opcode::ATOMIC_FETCH_AND_ADD == bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD);
    assert!(send_opcode::ATOMIC_WRITE == bindings::ib_wr_opcode_IB_WR_ATOMIC_WRITE);
    assert!(wc_opcode::ATOMIC_WRITE == bindings::ib_wc_opcode_IB_WC_ATOMIC_WRITE);
    assert!(wc_opcode::COMP_SWAP == bindings::ib_wc_opcode_IB_WC_COMP_SWAP);
    assert!(wc_opcode::FETCH_ADD == bindings::ib_wc_opcode_IB_WC_FETCH_ADD);
    assert!(wc_opcode::LOCAL_INV == bindings::ib_wc_opcode_IB_WC_LOCAL_INV);
    assert!(wc_opcode::REG_MR == bindings::ib_wc_opcode_IB_WC_REG_MR);
};

/// Where a kernel send WR goes beyond its QP.
pub(crate) enum KernelDest<'a, T: Driver> {
    /// A connected QP's SEND.
    Connected,
    /// RDMA WRITE or READ: the remote range.
    Rdma { remote_addr: u64, rkey: u32 },
    /// COMPARE SWAP or FETCH ADD: the remote 8 bytes and the operands.
    Atomic {
        remote_addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
    },
    /// A UD (or GSI) SEND: its address handle, QP number and Q_Key.
    Datagram {
        ah: &'a Ah<T>,
        remote_qpn: u32,
        remote_qkey: u32,
    },
    /// `IB_WR_REG_MR`: the MR's mapping becomes valid under `key` for `[iova, iova + len)`,
    /// as the MR says when the WR is posted.
    Register {
        key: u32,
        iova: u64,
        len: u64,
        access: Access,
    },
}

/// One kernel send WR, decoded.
pub(crate) struct KernelSendWr<'a, T: Driver> {
    /// `wr_id` (or the `wr_cqe` pointer, carried as is).
    pub(crate) wr_id: u64,
    /// `enum ib_wr_opcode` (the values of `ibv_wr_opcode` for the opcodes we offer).
    pub(crate) opcode: u32,
    /// `enum ib_send_flags`.
    pub(crate) flags: u32,
    /// Immediate data (network order), for the `_WITH_IMM` opcodes; the R_Key to invalidate
    /// (host order) for LOCAL_INV and SEND_WITH_INV (the same field of `ib_send_wr`).
    pub(crate) imm_data: u32,
    /// Its SGEs: kernel virtual addresses in the MR of each lkey.
    pub(crate) sges: KernelSges<'a>,
    pub(crate) dest: KernelDest<'a, T>,
}

/// One kernel receive WR, decoded.
pub(crate) struct KernelRecvWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) sges: KernelSges<'a>,
}

/// A kernel WR's SGE list.
pub(crate) struct KernelSges<'a>(&'a [bindings::ib_sge]);

impl KernelSges<'_> {
    /// How many.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Each, as ours.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Sge> + '_ {
        self.0.iter().map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
    }
}

/// Borrows a kernel SGE list.
///
/// # Safety
///
/// `list` has `num` valid entries (when `num > 0`) for `'a`.
unsafe fn sges_of<'a>(
    list: *const bindings::ib_sge,
    num: kernel::ffi::c_int,
) -> Result<KernelSges<'a>> {
    let num = usize::try_from(num).map_err(|_| EINVAL)?;
    if num == 0 {
        return Ok(KernelSges(&[]));
    }
    if list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: `num` valid entries (the caller's promise).
    Ok(KernelSges(unsafe {
        core::slice::from_raw_parts(list, num)
    }))
}

/// Decodes the send WR at `wr` for `qp`.
///
/// # Safety
///
/// `wr` is a valid WR (alive for `'a`) of a kernel consumer posting to `qp`, a live QP of driver
/// `T`: for a UD or GSI QP it is the `wr` of an `ib_ud_wr` whose AH is one of `T`'s; for an RDMA
/// opcode, that of an `ib_rdma_wr`; for an atomic, that of an `ib_atomic_wr`; for REG_MR, that of an `ib_reg_wr` naming a live MR (the
/// verbs contract).
pub(super) unsafe fn decode_send<'a, T: Driver>(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_send_wr,
) -> Result<KernelSendWr<'a, T>> {
    // SAFETY: as the caller promises.
    unsafe {
        let w = &*wr;
        let opcode = w.opcode;
        let datagram = matches!(
            (*qp).qp_type,
            bindings::ib_qp_type_IB_QPT_UD | bindings::ib_qp_type_IB_QPT_GSI
        );
        let dest = if datagram {
            let ud = &*wr.cast::<bindings::ib_ud_wr>();
            if ud.ah.is_null() {
                return Err(EINVAL);
            }
            KernelDest::Datagram {
                ah: Ah::<T>::from_raw(ud.ah),
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            }
        } else if matches!(
            opcode,
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE
                | bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
                | bindings::ib_wr_opcode_IB_WR_RDMA_READ
        ) {
            let rdma = &*wr.cast::<bindings::ib_rdma_wr>();
            KernelDest::Rdma {
                remote_addr: rdma.remote_addr,
                rkey: rdma.rkey,
            }
        } else if matches!(
            opcode,
            bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP
                | bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD
        ) {
            let atomic = &*wr.cast::<bindings::ib_atomic_wr>();
            KernelDest::Atomic {
                remote_addr: atomic.remote_addr,
                rkey: atomic.rkey,
                compare_add: atomic.compare_add,
                swap: atomic.swap,
            }
        } else if opcode == bindings::ib_wr_opcode_IB_WR_REG_MR {
            let reg = &*wr.cast::<bindings::ib_reg_wr>();
            // The new key may change only the MR's key byte.
            if reg.mr.is_null() || (*reg.mr).lkey >> 8 != reg.key >> 8 {
                return Err(EINVAL);
            }
            KernelDest::Register {
                key: reg.key,
                iova: (*reg.mr).iova,
                len: (*reg.mr).length,
                access: Access::from_raw(reg.access),
            }
        } else {
            KernelDest::Connected
        };
        Ok(KernelSendWr {
            wr_id: w.__bindgen_anon_1.wr_id,
            opcode,
            flags: w.send_flags as u32,
            imm_data: w.ex.imm_data,
            sges: sges_of(w.sg_list, w.num_sge)?,
            dest,
        })
    }
}

/// Decodes the receive WR at `wr`.
///
/// # Safety
///
/// `wr` is a valid WR of a kernel consumer, alive for `'a`.
pub(super) unsafe fn decode_recv<'a>(wr: *const bindings::ib_recv_wr) -> Result<KernelRecvWr<'a>> {
    // SAFETY: as the caller promises.
    unsafe {
        let w = &*wr;
        Ok(KernelRecvWr {
            wr_id: w.__bindgen_anon_1.wr_id,
            sges: sges_of(w.sg_list, w.num_sge)?,
        })
    }
}

/// The IP version of a datagram's GRH, for a kernel completion (`enum rdma_network_type`).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum NetworkType {
    /// Not a datagram (no GRH).
    None = 0,
    Ipv4 = bindings::rdma_network_type_RDMA_NETWORK_IPV4 as u8,
    Ipv6 = bindings::rdma_network_type_RDMA_NETWORK_IPV6 as u8,
}

/// A completion as a kernel CQ keeps it: the user-format CQE, plus the QP (the core's pointer,
/// as a number: only handed back, never followed) and the network type of a datagram.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct KernelCqe {
    pub(crate) cqe: Cqe,
    pub(crate) qp: u64,
    pub(crate) network: u8,
    pub(crate) reserved: [u8; 7],
}

// SAFETY: `#[repr(C)]`, integers only, no padding (48 + 8 + 8 bytes).
unsafe impl kernel::types::AsBytes for KernelCqe {}
// SAFETY: as above; any bytes are a valid value.
unsafe impl kernel::types::FromBytes for KernelCqe {}
const _: () = assert!(core::mem::size_of::<KernelCqe>() == 64);

/// The `ib_wc` array a `poll_cq` caller passed (possibly uninitialised: only written).
///
/// # Invariants
///
/// `wc` points to `len` writable `ib_wc`s for as long as this value lives.
pub(crate) struct KernelWcArray {
    pub(super) wc: *mut bindings::ib_wc,
    pub(super) len: usize,
}

impl KernelWcArray {
    /// How many completions it has room for.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes entry `i` (ignored past the end) from `c`.
    pub(crate) fn set(&mut self, i: usize, c: &KernelCqe) {
        if i >= self.len {
            return;
        }
        // SAFETY: `i < len`, writable (type invariant); a plain write, no read of the old value.
        unsafe { self.wc.add(i).write(wc_of(c)) };
    }
}

/// The `ib_wc` of completion `c`.
fn wc_of(c: &KernelCqe) -> bindings::ib_wc {
    let e = &c.cqe;
    // The user flags' values, but for WITH_INV (`IBV_WC_WITH_INV` is 8, `IB_WC_WITH_INVALIDATE` 4).
    let mut flags = e.wc_flags & !crate::uapi::wc_flags::WITH_INV;
    if e.wc_flags & crate::uapi::wc_flags::WITH_INV != 0 {
        flags |= bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE;
    }
    if c.network != NetworkType::None as u8 {
        flags |= bindings::ib_wc_flags_IB_WC_WITH_NETWORK_HDR_TYPE;
    }
    bindings::ib_wc {
        __bindgen_anon_1: bindings::ib_wc__bindgen_ty_1 { wr_id: e.wr_id },
        status: e.status,
        opcode: e.opcode,
        vendor_err: e.vendor_err,
        byte_len: e.byte_len,
        qp: c.qp as usize as *mut bindings::ib_qp,
        ex: bindings::ib_wc__bindgen_ty_2 {
            imm_data: e.imm_data,
        },
        src_qp: e.src_qp,
        slid: 0,
        wc_flags: flags as i32,
        pkey_index: e.pkey_index,
        sl: 0,
        dlid_path_bits: 0,
        port_num: crate::limits::PORT,
        smac: [0; 6],
        vlan_id: 0,
        network_hdr_type: c.network,
    }
}
