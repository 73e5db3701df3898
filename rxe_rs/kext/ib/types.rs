// SPDX-License-Identifier: GPL-2.0
//! Typed values of the RDMA core's enums and flag sets that the driver reads and writes: the
//! driver never sees their raw C constants.

use super::super::bindings;
use core::ops::BitOr;

/// `enum ib_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum QpState {
    /// Created, or reset: nothing runs.
    Reset = bindings::ib_qp_state_IB_QPS_RESET,
    /// Receives may be posted.
    Init = bindings::ib_qp_state_IB_QPS_INIT,
    /// Ready to receive.
    Rtr = bindings::ib_qp_state_IB_QPS_RTR,
    /// Ready to send.
    Rts = bindings::ib_qp_state_IB_QPS_RTS,
    /// Send queue drain: no new message starts.
    Sqd = bindings::ib_qp_state_IB_QPS_SQD,
    /// Send queue error (not for RC).
    Sqe = bindings::ib_qp_state_IB_QPS_SQE,
    /// Error: everything is flushed.
    Err = bindings::ib_qp_state_IB_QPS_ERR,
}

impl QpState {
    /// The state a raw `ib_qp_state` names, if any.
    pub(crate) fn from_raw(raw: u32) -> Option<Self> {
        [
            Self::Reset,
            Self::Init,
            Self::Rtr,
            Self::Rts,
            Self::Sqd,
            Self::Sqe,
            Self::Err,
        ]
        .into_iter()
        .find(|s| *s as u32 == raw)
    }

    /// The raw `ib_qp_state`.
    pub(crate) fn raw(self) -> u32 {
        self as u32
    }
}

/// A set of flags of one C flag type: `const`s of it, `|` to combine, `contains`/`within` to
/// test, `raw` for the C field.
macro_rules! flag_set {
    ($(#[$doc:meta])* $name:ident($raw:ty) { $($(#[$fdoc:meta])* $flag:ident = $value:expr,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name($raw);

        impl $name {
            $($(#[$fdoc])* pub(crate) const $flag: Self = Self($value as $raw);)*

            /// The raw bits, for the C field.
            #[allow(dead_code)]
            pub(crate) fn raw(self) -> $raw {
                self.0
            }

            /// `self | other`, in a `const`.
            #[allow(dead_code)]
            pub(crate) const fn union(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }

            /// Every flag of `other` is set.
            #[allow(dead_code)]
            pub(crate) fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// No flag outside `allowed` is set.
            #[allow(dead_code)]
            pub(crate) fn within(self, allowed: Self) -> bool {
                self.0 & !allowed.0 == 0
            }
        }

        impl BitOr for $name {
            type Output = Self;

            fn bitor(self, other: Self) -> Self {
                Self(self.0 | other.0)
            }
        }
    };
}

flag_set! {
    /// `enum ib_qp_attr_mask`: the attributes a `modify_qp` sets.
    QpAttrMask(u32) {
        /// The state to move to.
        STATE = bindings::ib_qp_attr_mask_IB_QP_STATE,
        /// The state the caller believes the QP is in.
        CUR_STATE = bindings::ib_qp_attr_mask_IB_QP_CUR_STATE,
        /// The remote rights.
        ACCESS_FLAGS = bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS,
        /// The P_Key index.
        PKEY_INDEX = bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX,
        /// The Q_Key (UD).
        QKEY = bindings::ib_qp_attr_mask_IB_QP_QKEY,
        /// The port.
        PORT = bindings::ib_qp_attr_mask_IB_QP_PORT,
        /// The address vector (the path to the peer).
        AV = bindings::ib_qp_attr_mask_IB_QP_AV,
        /// The path MTU.
        PATH_MTU = bindings::ib_qp_attr_mask_IB_QP_PATH_MTU,
        /// The ACK timeout.
        TIMEOUT = bindings::ib_qp_attr_mask_IB_QP_TIMEOUT,
        /// Retransmissions allowed.
        RETRY_CNT = bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT,
        /// RNR retries allowed.
        RNR_RETRY = bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY,
        /// The first PSN expected.
        RQ_PSN = bindings::ib_qp_attr_mask_IB_QP_RQ_PSN,
        /// READs and atomics in flight as requester.
        MAX_QP_RD_ATOMIC = bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC,
        /// The RNR NAK timer asked of the peer.
        MIN_RNR_TIMER = bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER,
        /// The first PSN sent.
        SQ_PSN = bindings::ib_qp_attr_mask_IB_QP_SQ_PSN,
        /// READs and atomics in flight as responder.
        MAX_DEST_RD_ATOMIC = bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC,
        /// The peer's QP number.
        DEST_QPN = bindings::ib_qp_attr_mask_IB_QP_DEST_QPN,
    }
}

impl QpAttrMask {
    /// The mask the core passed (its `int`; the bits are what they are).
    pub(crate) fn from_raw(raw: i32) -> Self {
        Self(raw as u32)
    }
}

/// Asynchronous events a QP reports to its owner (`enum ib_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpEvent {
    /// In SQD, every message started before is complete (`IB_EVENT_SQ_DRAINED`).
    SqDrained,
    /// A catastrophic work queue error (`IB_EVENT_QP_FATAL`): here, a corrupt ring.
    Fatal,
    /// A QP attached to an SRQ entered the error state and takes no more of its WQEs
    /// (`IB_EVENT_QP_LAST_WQE_REACHED`).
    LastWqeReached,
}

impl QpEvent {
    /// The raw `ib_event_type`.
    pub(super) fn raw(self) -> bindings::ib_event_type {
        match self {
            Self::SqDrained => bindings::ib_event_type_IB_EVENT_SQ_DRAINED,
            Self::Fatal => bindings::ib_event_type_IB_EVENT_QP_FATAL,
            Self::LastWqeReached => bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED,
        }
    }
}

flag_set! {
    /// `enum ib_srq_attr_mask`: the attributes a `modify_srq` sets.
    SrqAttrMask(u32) {
        /// The size (a resize).
        MAX_WR = bindings::ib_srq_attr_mask_IB_SRQ_MAX_WR,
        /// The limit: arms `IB_EVENT_SRQ_LIMIT_REACHED`.
        LIMIT = bindings::ib_srq_attr_mask_IB_SRQ_LIMIT,
    }
}

impl SrqAttrMask {
    /// The mask the core passed.
    pub(crate) fn from_raw(raw: bindings::ib_srq_attr_mask) -> Self {
        Self(raw)
    }
}

flag_set! {
    /// `enum ib_device_cap_flags`.
    DeviceCaps(u64) {
        /// RNR NAKs are generated.
        RC_RNR_NAK_GEN = bindings::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN,
        /// Port state changes are reported.
        PORT_ACTIVE_EVENT = bindings::ib_device_cap_flags_IB_DEVICE_PORT_ACTIVE_EVENT,
        /// `sys_image_guid` is meaningful.
        SYS_IMAGE_GUID = bindings::ib_device_cap_flags_IB_DEVICE_SYS_IMAGE_GUID,
        /// Fast registration (`IB_WR_REG_MR`), local and remote invalidation.
        MEM_MGT_EXTENSIONS = bindings::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS,
        /// Memory windows (type 1).
        MEM_WINDOW = bindings::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW,
        /// Type 2B memory windows (bound to a QP).
        MEM_WINDOW_TYPE_2B = bindings::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B,
        /// IBTA 1.5's ATOMIC WRITE.
        ATOMIC_WRITE = bindings::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE,
        /// IBTA 1.5's FLUSH, for global visibility.
        FLUSH_GLOBAL = bindings::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL,
        /// IBTA 1.5's FLUSH, for persistence (of MRs on persistent memory).
        FLUSH_PERSISTENT = bindings::ib_device_cap_flags_IB_DEVICE_FLUSH_PERSISTENT,
        /// `modify_srq` resizes (`IB_SRQ_MAX_WR`).
        SRQ_RESIZE = bindings::ib_device_cap_flags_IB_DEVICE_SRQ_RESIZE,
    }
}

flag_set! {
    /// `enum ib_kernel_cap_flags`.
    KernelCaps(u64) {
        /// `rdma link delete` may remove the device.
        ALLOW_USER_UNREG = bindings::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG,
    }
}

flag_set! {
    /// `enum ib_port_capability_mask_bits`.
    PortCaps(u32) {
        /// A connection manager is supported.
        CM_SUP = bindings::ib_port_capability_mask_bits_IB_PORT_CM_SUP,
    }
}

flag_set! {
    /// `RDMA_CORE_PORT_*`: the port's transport.
    CorePortCaps(u32) {
        /// RoCEv2 (IB transport over UDP).
        ROCE_UDP_ENCAP = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP,
    }
}

/// `IB_MGMT_MAD_SIZE`: the MAD size of an IB port.
pub(crate) const MGMT_MAD_SIZE: u32 = bindings::IB_MGMT_MAD_SIZE;

/// `enum ib_atomic_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum AtomicCap {
    /// Atomic with respect to the device's own atomics (`IB_ATOMIC_HCA`; ours are the CPU's
    /// atomic instructions, so a process's own atomics on the bytes are covered too).
    Hca = bindings::ib_atomic_cap_IB_ATOMIC_HCA,
}

/// `enum ib_port_state`, as far as a soft device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum PortState {
    /// No usable link.
    Down = bindings::ib_port_state_IB_PORT_DOWN,
    /// Up and usable.
    Active = bindings::ib_port_state_IB_PORT_ACTIVE,
}

/// `enum ib_port_phys_state`, as far as a soft device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum PortPhysState {
    /// The netdev is administratively down.
    Disabled = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_DISABLED,
    /// The netdev is up, without carrier.
    Polling = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_POLLING,
    /// Carrier.
    LinkUp = bindings::ib_port_phys_state_IB_PORT_PHYS_STATE_LINK_UP,
}

impl bindings::ib_device_attr {
    /// Sets the capability flags and the atomic capability.
    pub(crate) fn set_caps(&mut self, device: DeviceCaps, kernel: KernelCaps, atomic: AtomicCap) {
        self.device_cap_flags = device.raw();
        self.kernel_cap_flags = kernel.raw();
        self.atomic_cap = atomic as u32;
    }
}

impl bindings::ib_port_attr {
    /// Sets the logical and physical state.
    pub(crate) fn set_state(&mut self, state: PortState, phys: PortPhysState) {
        self.state = state as u32;
        self.phys_state = phys as u8;
    }
}

/// The transport service of a QP (`enum ib_qp_type`), of those we offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum QpType {
    /// Reliable connected.
    Rc = bindings::ib_qp_type_IB_QPT_RC,
    /// Unreliable connected: RC's SENDs and WRITEs without acknowledgements.
    Uc = bindings::ib_qp_type_IB_QPT_UC,
    /// Unreliable datagram.
    Ud = bindings::ib_qp_type_IB_QPT_UD,
    /// The general services QP (QP1), a UD QP that carries MADs; created by ib_mad.
    Gsi = bindings::ib_qp_type_IB_QPT_GSI,
}

impl QpType {
    /// UD or GSI: datagrams, each to its own address handle.
    pub(crate) fn is_datagram(self) -> bool {
        matches!(self, Self::Ud | Self::Gsi)
    }

    /// RC or UC: a connection to one peer QP, set by `modify_qp`.
    pub(crate) fn is_connected(self) -> bool {
        matches!(self, Self::Rc | Self::Uc)
    }
}

impl bindings::ib_qp_init_attr {
    /// The QP type asked for, if we offer it.
    pub(crate) fn qp_type(&self) -> Option<QpType> {
        match self.qp_type {
            bindings::ib_qp_type_IB_QPT_RC => Some(QpType::Rc),
            bindings::ib_qp_type_IB_QPT_UC => Some(QpType::Uc),
            bindings::ib_qp_type_IB_QPT_UD => Some(QpType::Ud),
            bindings::ib_qp_type_IB_QPT_GSI => Some(QpType::Gsi),
            _ => None,
        }
    }

    /// Every send WR is to complete with a CQE (`IB_SIGNAL_ALL_WR`).
    pub(crate) fn signals_all(&self) -> bool {
        self.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR
    }

    /// Reports a QP of `qp_type` that signals every send WR (`signal_all`) or those that ask.
    pub(crate) fn set_type(&mut self, qp_type: QpType, signal_all: bool) {
        self.qp_type = qp_type as u32;
        self.sq_sig_type = if signal_all {
            bindings::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            bindings::ib_sig_type_IB_SIGNAL_REQ_WR
        };
    }
}

impl bindings::ib_qp_attr {
    /// Path migration: none, ever (`IB_MIG_MIGRATED`).
    pub(crate) fn set_migrated(&mut self) {
        self.path_mig_state = bindings::ib_mig_state_IB_MIG_MIGRATED;
    }
}

flag_set! {
    /// `enum ib_uverbs_ex_create_cq_flags`: what a CQ is created with (`ib_cq_init_attr.flags`).
    CqFlags(u32) {
        /// Each completion carries the time it was written. (The other flag,
        /// `IGNORE_OVERRUN`, is refused: a full CQ raises `IB_EVENT_CQ_ERR`.)
        TIMESTAMP_COMPLETION = bindings::ib_uverbs_ex_create_cq_flags_IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION,
    }
}

impl CqFlags {
    /// The flags of a CQ's creation attributes.
    pub(crate) fn of(attr: &bindings::ib_cq_init_attr) -> Self {
        Self(attr.flags)
    }
}

flag_set! {
    /// `enum ib_access_flags`: the rights of an MR or a QP.
    Access(u32) {
        /// Local writes (receives, READ responses land in it).
        LOCAL_WRITE = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE,
        /// The peer may WRITE into it.
        REMOTE_WRITE = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE,
        /// The peer may READ from it.
        REMOTE_READ = bindings::ib_access_flags_IB_ACCESS_REMOTE_READ,
        /// The peer may run atomics on it.
        REMOTE_ATOMIC = bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC,
        /// Memory windows may be bound to it.
        MW_BIND = bindings::ib_access_flags_IB_ACCESS_MW_BIND,
        /// The peer may FLUSH it for global visibility (IBTA 1.5).
        FLUSH_GLOBAL = bindings::ib_access_flags_IB_ACCESS_FLUSH_GLOBAL,
        /// The peer may FLUSH it for persistence (IBTA 1.5).
        FLUSH_PERSISTENT = bindings::ib_access_flags_IB_ACCESS_FLUSH_PERSISTENT,
        /// Flags a device may ignore (relaxed ordering...).
        OPTIONAL_RANGE = bindings::ib_access_flags_IB_ACCESS_OPTIONAL,
    }
}

/// The kind of a memory window (`enum ib_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MwType {
    /// Type 1: bound by `ibv_bind_mw`, unbound by a zero-length bind, any QP of its PD uses it.
    One,
    /// Type 2B: bound by a BIND_MW work request to the QP that posted it, invalidated by
    /// LOCAL_INV or a peer's SEND WITH INVALIDATE.
    Two,
}

impl MwType {
    /// The type the core passed, if it is one.
    pub(crate) fn from_raw(raw: bindings::ib_mw_type) -> Option<Self> {
        match raw {
            bindings::ib_mw_type_IB_MW_TYPE_1 => Some(Self::One),
            bindings::ib_mw_type_IB_MW_TYPE_2 => Some(Self::Two),
            _ => None,
        }
    }
}

impl Access {
    /// A memory window is addressed from 0 (`IB_ZERO_BASED`; only in a bind's flags).
    pub(crate) const ZERO_BASED: Self = Self(bindings::ib_access_flags_IB_ZERO_BASED);

    /// No right at all (what a local read needs).
    pub(crate) const NONE: Self = Self(0);

    /// The flags the core passed (its `int`; the bits are what they are).
    pub(crate) fn from_raw(raw: i32) -> Self {
        Self(raw as u32)
    }

    /// The flags as the core's `int`.
    pub(crate) fn raw_int(self) -> i32 {
        self.0 as i32
    }
}
