//! Driver-specific verb responses (what follows the core uverbs response).

/// Where a ring is: `mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, cmd_fd, offset)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmapInfo {
    /// Offset to pass to mmap(2) on the uverbs command fd.
    pub offset: u64,
    /// Bytes to map.
    pub size: u64,
}

/// Response to `create_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateCqResp {
    /// The completion ring (kernel produces, user consumes).
    pub ring: MmapInfo,
    /// log2 of its slot count.
    pub log2_slots: u32,
    /// Bytes per slot.
    pub slot_size: u32,
}

/// Response to `resize_cq`: the CQ's new ring, described as at creation. The old ring stops
/// being written; the completions not yet polled were copied to the start of the new one.
pub type ResizeCqResp = CreateCqResp;

const _: () = {
    assert!(core::mem::size_of::<MmapInfo>() == 16);
    assert!(core::mem::size_of::<CreateCqResp>() == 24);
};

/// Response to `create_qp`: the send and receive rings (both user-produced). A QP attached to
/// an SRQ has no receive ring: `rq` is all zeros, and so are its log2 and slot size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQpResp {
    /// Send queue ring.
    pub sq: MmapInfo,
    /// Receive queue ring.
    pub rq: MmapInfo,
    /// log2 of the SQ's slot count.
    pub sq_log2_slots: u32,
    /// Bytes per SQ slot.
    pub sq_slot_size: u32,
    /// log2 of the RQ's slot count.
    pub rq_log2_slots: u32,
    /// Bytes per RQ slot.
    pub rq_slot_size: u32,
}

const _: () = assert!(core::mem::size_of::<CreateQpResp>() == 48);

/// Response to `create_srq`: the shared receive queue's ring (user-produced, like a QP's RQ;
/// it has no flags word in use: an SRQ has no error state to flush in).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateSrqResp {
    /// The receive ring.
    pub ring: MmapInfo,
    /// log2 of its slot count.
    pub log2_slots: u32,
    /// Bytes per slot (a [`crate::RecvWqe`] and its SGEs).
    pub slot_size: u32,
}

const _: () = assert!(core::mem::size_of::<CreateSrqResp>() == 24);

/// Command of `modify_srq` (after the core command). The write command has no response, so a
/// resize (`IBV_SRQ_MAX_WR`) answers through `resp_addr`: the kernel copies a
/// [`ModifySrqResp`] there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifySrqCmd {
    /// The address of a [`ModifySrqResp`] in the caller's memory (unused without a resize).
    pub resp_addr: u64,
}

/// What a resized SRQ's caller maps: the new ring, described as at creation. WQEs posted and
/// not taken yet were copied to the start of it; the old ring is no longer read.
pub type ModifySrqResp = CreateSrqResp;

const _: () = assert!(core::mem::size_of::<ModifySrqCmd>() == 8);

/// Response to `create_ah` (user address handles).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateAhResp {
    /// What UD send WQEs name the AH by ([`crate::SendWqe::ah_num`]); never 0.
    pub ah_num: u32,
    /// Zero.
    pub reserved: u32,
}

const _: () = assert!(core::mem::size_of::<CreateAhResp>() == 8);
