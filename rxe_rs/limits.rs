// SPDX-License-Identifier: GPL-2.0
//! Device limits: what `ibv_devinfo -v` reports, and what the verbs enforce.
//!
//! Objects not implemented yet (QPs, CQs, MRs, SRQs, AHs, MWs) report 0, so that no application
//! plans on them; each limit is raised by the change that implements and enforces it.

/// The only port of a device (IB ports are 1-based).
pub(crate) const PORT: u32 = 1;
/// `vendor_id`: the value rdma_rxe uses for soft devices.
pub(crate) const VENDOR_ID: u32 = 0xff_ffff;
/// Largest MR and message (2 GiB, as rdma_rxe's `max_msg_sz`).
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;
/// GID table entries per port (filled by the RDMA core from the netdev's IP addresses).
pub(crate) const GID_TABLE_LEN: i32 = 1024;
/// One P_Key, the default full-membership one.
pub(crate) const PKEY_TABLE_LEN: u16 = 1;
/// `IB_DEFAULT_PKEY_FULL`.
pub(crate) const DEFAULT_PKEY: u16 = crate::proto::headers::DEFAULT_PKEY;
/// `local_ca_ack_delay` (4.096 us * 2^15), as rdma_rxe.
pub(crate) const LOCAL_CA_ACK_DELAY: u8 = 15;
/// Page sizes an MR may use.
pub(crate) const PAGE_SIZE_CAP: u64 = 0xffff_f000;
/// Protection domains per device.
pub(crate) const MAX_PD: u32 = 1 << 16;
/// Completion queues per device.
pub(crate) const MAX_CQ: u32 = 1 << 16;
/// Completions a CQ can hold (the ring has the next power of two slots).
pub(crate) const MAX_CQE: u32 = (1 << 15) - 1;
/// Memory regions per device (key indices 1..=MAX_MR; index 0 is the local DMA lkey).
pub(crate) const MAX_MR: u32 = (1 << 16) - 1;
/// Memory windows per device (key indices MAX_MR + 1..=MAX_MR + MAX_MW: an R_Key's index
/// says which of the two it names).
pub(crate) const MAX_MW: u32 = (1 << 16) - 1;
/// Largest MR.
pub(crate) const MAX_MR_SIZE: u64 = 1 << 40;
/// Pages one fast-registration MR maps (rdma_rxe's figure: nvme-rdma then maps 256 + 1, for
/// 1 MiB I/Os).
pub(crate) const MAX_FAST_REG_PAGES: u32 = 512;
/// Queue pairs per device (QP numbers FIRST_QPN..FIRST_QPN + MAX_QP).
pub(crate) const MAX_QP: u32 = 1 << 16;
/// First QP table index: 0 and 1 are the special QPs, and rdma_rxe starts at 16 too.
pub(crate) const FIRST_QPN: u32 = 16;
/// Low bits of a QP number that are its table index (FIRST_QPN + MAX_QP fits); the 7 bits
/// above them, up to the 24 of a QP number, are random.
pub(crate) const QPN_INDEX_BITS: u32 = 17;
/// Mask of the table index in a QP number.
pub(crate) const QPN_INDEX_MASK: u32 = (1 << QPN_INDEX_BITS) - 1;
/// Work requests per queue.
pub(crate) const MAX_QP_WR: u32 = 1 << 14;
/// Shared receive queues per device.
pub(crate) const MAX_SRQ: u32 = 1 << 16;
/// Work requests per shared receive queue.
pub(crate) const MAX_SRQ_WR: u32 = MAX_QP_WR;
/// Scatter/gather entries per shared receive WQE.
pub(crate) const MAX_SRQ_SGE: u32 = MAX_SGE;
/// Scatter/gather entries per work request.
pub(crate) const MAX_SGE: u32 = 32;
/// Inline data per send work request.
pub(crate) const MAX_INLINE_DATA: u32 = 512;
/// Outstanding RDMA READs per QP, as initiator and as responder.
pub(crate) const MAX_RD_ATOMIC: u32 = 128;
/// Address handles per device (numbers 1..=MAX_AH), as rdma_rxe.
pub(crate) const MAX_AH: u32 = (1 << 15) - 1;
/// The number of the general services QP (QP1) of every port.
pub(crate) const GSI_QPN: u32 = 1;
/// Multicast groups per device.
pub(crate) const MAX_MCAST_GRP: u32 = 256;
/// QPs attached to one multicast group (rdma_rxe's limit).
pub(crate) const MAX_MCAST_QP_ATTACH: u32 = 56;
/// The BTH destination QP of a multicast datagram.
pub(crate) const MULTICAST_QPN: u32 = 0xff_ffff;
