//! What travels through the rings: send and receive work requests, and completions.
//!
//! All fields are plain integers, so any bytes form a valid value: the kernel copies a slot out
//! of user memory and then validates the copy, never the shared original.

/// A scatter/gather element: `length` bytes at `addr` in the MR of `lkey`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address (the MR's iova space).
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// Send opcodes: the values of `enum ibv_wr_opcode` (and the kernel's `ib_uverbs_wr_opcode`).
#[allow(missing_docs)]
pub mod send_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// Invalidates the MR or memory window named by `invalidate_rkey`.
    pub const LOCAL_INV: u32 = 7;
    /// Binds a memory window: see [`super::BindMw`] for the fields it uses.
    pub const BIND_MW: u32 = 8;
    pub const SEND_WITH_INV: u32 = 9;
    /// IBTA 1.5's ATOMIC WRITE (`ibv_wr_atomic_write` only): the 8 bytes it stores in `swap`,
    /// as they are in the process's buffer; no SGEs.
    pub const ATOMIC_WRITE: u32 = 15;
    /// `IB_WR_REG_MR`, posted by kernel consumers only (never valid in a process's ring): the
    /// new key in `rkey`, the iova in `remote_addr`, the length in `compare_add`, the access
    /// flags in `swap`.
    pub const REG_MR: u32 = 0x20;
}

/// What a BIND_MW WQE carries, in the fields of [`SendWqe`]: the window by its R_Key now
/// (`invalidate_rkey`), its new R_Key (`rkey`), the range `[remote_addr, remote_addr +
/// compare_add)` of the MR whose L_Key is the high half of `swap`, and the window's access flags
/// (`enum ibv_access_flags`) in the low half. A zero length unbinds (type 1 only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindMw {
    /// The window's R_Key when the bind was posted (its table index names it).
    pub mw_rkey: u32,
    /// The R_Key it gets (same index, new low byte).
    pub new_rkey: u32,
    /// L_Key of the MR the window opens onto.
    pub mr_lkey: u32,
    /// First byte of the window, an address in the MR's iova space.
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// `IBV_ACCESS_REMOTE_*` and `IBV_ACCESS_ZERO_BASED`.
    pub access: u32,
}

impl BindMw {
    /// Puts the bind into `wqe` (opcode and the fields above).
    pub fn encode(&self, wqe: &mut SendWqe) {
        wqe.opcode = send_opcode::BIND_MW;
        wqe.invalidate_rkey = self.mw_rkey;
        wqe.rkey = self.new_rkey;
        wqe.remote_addr = self.addr;
        wqe.compare_add = self.length;
        wqe.swap = (u64::from(self.mr_lkey) << 32) | u64::from(self.access);
    }

    /// Reads the bind out of `wqe`.
    pub fn decode(wqe: &SendWqe) -> Self {
        Self {
            mw_rkey: wqe.invalidate_rkey,
            new_rkey: wqe.rkey,
            mr_lkey: (wqe.swap >> 32) as u32,
            addr: wqe.remote_addr,
            length: wqe.compare_add,
            access: wqe.swap as u32,
        }
    }
}

/// Send flags: the values of `enum ibv_send_flags`.
#[allow(missing_docs)]
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// The fixed part of a send WQE; `num_sge` [`Sge`]s or `inline_len` bytes of data follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendWqe {
    /// The user's `wr_id`, returned in the completion.
    pub wr_id: u64,
    /// One of [`send_opcode`].
    pub opcode: u32,
    /// [`send_flags`].
    pub flags: u32,
    /// SGEs following the header (0 when inline).
    pub num_sge: u32,
    /// Inline bytes following the header (only with [`send_flags::INLINE`]).
    pub inline_len: u32,
    /// Immediate data, in network byte order as `ibv_send_wr.imm_data`.
    pub imm_data: u32,
    /// R_Key to invalidate (SEND_WITH_INV).
    pub invalidate_rkey: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Address handle (UD): the number `create_ah` returned in [`crate::CreateAhResp`].
    pub ah_num: u32,
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand.
    pub compare_add: u64,
    /// Swap operand (CMP_AND_SWP).
    pub swap: u64,
    /// Destination QP number (UD).
    pub remote_qpn: u32,
    /// Q_Key (UD); with bit 31 set, the QP's own Q_Key is sent instead (IBA 10.2.5).
    pub remote_qkey: u32,
}

/// Bytes in front of every UD message in its receive buffer: the Global Route Header, which on
/// RoCEv2 is the packet's IPv6 header, or 20 zero bytes and its IPv4 header.
pub const GRH_BYTES: u32 = 40;

/// The fixed part of a receive WQE; `num_sge` [`Sge`]s follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWqe {
    /// The user's `wr_id`.
    pub wr_id: u64,
    /// SGEs following the header.
    pub num_sge: u32,
    /// Zero.
    pub reserved: u32,
}

/// A completion, laid out exactly as `struct ib_uverbs_wc` and libibverbs' `struct ibv_wc`
/// (48 bytes), so that polling copies it as is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// The completed WQE's `wr_id`.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Provider-specific error detail.
    pub vendor_err: u32,
    /// Bytes received (receive completions) or transferred.
    pub byte_len: u32,
    /// Immediate data (network order) or the invalidated R_Key.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD).
    pub src_qp: u32,
    /// `enum ibv_wc_flags`.
    pub wc_flags: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
    /// Port number (ib_uverbs_wc) / padding (ibv_wc).
    pub port_num: u8,
    /// Zero.
    pub reserved: u8,
}

/// A slot of a user CQ's ring: the completion, then when the kernel wrote it if the CQ was
/// created with completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`), else 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqSlot {
    pub cqe: Cqe,
    /// CLOCK_MONOTONIC in nanoseconds: the device clock, of [`CQ_CLOCK_KHZ`].
    pub completed_ns: u64,
    /// Zero.
    pub reserved: u64,
}

/// The clock of completion timestamps (`hca_core_clock`, kHz): nanoseconds.
pub const CQ_CLOCK_KHZ: u64 = 1_000_000;

/// Bytes of a send slot holding `max_sge` SGEs or `max_inline` inline bytes.
pub const fn send_wqe_bytes(max_sge: u32, max_inline: u32) -> usize {
    let sges = max_sge as usize * core::mem::size_of::<Sge>();
    let data = if sges > max_inline as usize {
        sges
    } else {
        max_inline as usize
    };
    core::mem::size_of::<SendWqe>() + data
}

/// Bytes of a receive slot holding `max_sge` SGEs.
pub const fn recv_wqe_bytes(max_sge: u32) -> usize {
    core::mem::size_of::<RecvWqe>() + max_sge as usize * core::mem::size_of::<Sge>()
}

// The layout user space depends on (selftests/guest/ring_scribble.py writes to these offsets too).
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<Sge>() == 16);
    assert!(size_of::<SendWqe>() == 72);
    assert!(offset_of!(SendWqe, ah_num) == 44);
    assert!(offset_of!(SendWqe, remote_qpn) == 64);
    assert!(offset_of!(SendWqe, remote_qkey) == 68);
    assert!(offset_of!(SendWqe, opcode) == 8);
    assert!(offset_of!(SendWqe, num_sge) == 16);
    assert!(offset_of!(SendWqe, remote_addr) == 32);
    assert!(offset_of!(SendWqe, rkey) == 40);
    assert!(size_of::<RecvWqe>() == 16);
    assert!(offset_of!(RecvWqe, num_sge) == 8);
    assert!(size_of::<Cqe>() == 48);
    assert!(offset_of!(Cqe, imm_data) == 24);
    assert!(offset_of!(Cqe, wc_flags) == 36);
    assert!(offset_of!(Cqe, pkey_index) == 40);
    assert!(size_of::<CqSlot>() == 64);
    assert!(offset_of!(CqSlot, completed_ns) == 48);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_mw_round_trips() {
        let bind = BindMw {
            mw_rkey: 0x0100_0012,
            new_rkey: 0x0100_0013,
            mr_lkey: 0xdead_beef,
            addr: 0x7fff_0000_1000,
            length: 1 << 33,
            access: 0x22,
        };
        let mut wqe = SendWqe::default();
        bind.encode(&mut wqe);
        assert_eq!(wqe.opcode, send_opcode::BIND_MW);
        assert_eq!(BindMw::decode(&wqe), bind);
    }

    #[test]
    fn slot_sizes() {
        assert_eq!(send_wqe_bytes(4, 0), 72 + 64);
        assert_eq!(send_wqe_bytes(1, 256), 72 + 256);
        assert_eq!(recv_wqe_bytes(2), 48);
    }
}

/// Completion status values (`enum ibv_wc_status`).
#[allow(missing_docs)]
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

/// Completion opcodes (`enum ibv_wc_opcode`).
#[allow(missing_docs)]
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LOCAL_INV: u32 = 6;
    pub const ATOMIC_WRITE: u32 = 9;
    /// `IB_WC_REG_MR` (kernel consumers only).
    pub const REG_MR: u32 = 10;
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;
}

/// Completion flags (`enum ibv_wc_flags`).
#[allow(missing_docs)]
pub mod wc_flags {
    /// The receive buffer starts with the 40-byte GRH (UD).
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const WITH_INV: u32 = 1 << 3;
}

/// A completion status the kernel writes into a CQE (`enum ibv_wc_status`): the values of
/// [`wc_status`], typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WcStatus {
    /// Completed.
    Success = wc_status::SUCCESS,
    /// Local length error: SGEs too short, a message too long.
    LocLenErr = wc_status::LOC_LEN_ERR,
    /// Local QP operation error: a bad WQE.
    LocQpOpErr = wc_status::LOC_QP_OP_ERR,
    /// Local protection error: a key, right or address an MR refuses.
    LocProtErr = wc_status::LOC_PROT_ERR,
    /// Flushed: the QP is in the error state.
    WrFlushErr = wc_status::WR_FLUSH_ERR,
    /// A memory window bind failed: a window, MR, range or right the bind may not use.
    MwBindErr = wc_status::MW_BIND_ERR,
    /// Bad response from the responder.
    BadRespErr = wc_status::BAD_RESP_ERR,
    /// Local access error.
    LocAccessErr = wc_status::LOC_ACCESS_ERR,
    /// The responder found the request invalid.
    RemInvReqErr = wc_status::REM_INV_REQ_ERR,
    /// The responder refused the access.
    RemAccessErr = wc_status::REM_ACCESS_ERR,
    /// The responder failed.
    RemOpErr = wc_status::REM_OP_ERR,
    /// Retransmissions exhausted (`retry_cnt`).
    RetryExcErr = wc_status::RETRY_EXC_ERR,
    /// RNR retries exhausted (`rnr_retry`).
    RnrRetryExcErr = wc_status::RNR_RETRY_EXC_ERR,
}

impl WcStatus {
    /// The value of the CQE's `status` field.
    pub const fn raw(self) -> u32 {
        self as u32
    }
}
