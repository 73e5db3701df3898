// SPDX-License-Identifier: GPL-2.0
//! The uapi structs are plain bytes both ways: `#[repr(C)]`, integer fields only, and no
//! padding (their sizes are asserted in `uapi/`), so they may be copied to and from user space.

use crate::uapi::{
    CqSlot, Cqe, CreateAhResp, CreateCqResp, CreateQpResp, CreateSrqResp, MmapInfo, ModifySrqCmd,
    RecvWqe, SendWqe, Sge,
};
use kernel::types::{AsBytes, FromBytes};

macro_rules! plain_bytes {
    ($($t:ty),*) => {$(
        // SAFETY: see the module documentation.
        unsafe impl AsBytes for $t {}
        // SAFETY: see the module documentation.
        unsafe impl FromBytes for $t {}
    )*};
}

plain_bytes!(
    MmapInfo,
    CreateAhResp,
    CreateCqResp,
    CreateQpResp,
    CreateSrqResp,
    ModifySrqCmd,
    Cqe,
    CqSlot,
    SendWqe,
    RecvWqe,
    Sge
);
