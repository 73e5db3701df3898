// SPDX-License-Identifier: GPL-2.0
//! Address handles: the path of a UD send. A UD WQE names its AH by number (`ah_num`), so the
//! provider posts without a system call and the kernel still decides where the packet goes:
//! the path was checked when the AH was created, and the AH must belong to the sending QP's PD.

use crate::{kext::ib::AhAttr, proto::av::AddressVector, verbs::mr::PdId};
use kernel::prelude::*;

/// An address handle as the datapath finds it by number.
pub(crate) struct AhInner {
    /// The PD it was created in: only QPs of that PD may send with it.
    pub(crate) pd: PdId,
    /// Where its packets go.
    pub(crate) av: AddressVector,
}

impl AhInner {
    /// The AH of the path `attr` in PD `pd`: a RoCEv2 GID path whose ends are of one IP family.
    pub(crate) fn new(pd: PdId, attr: &AhAttr) -> Result<Self> {
        let av = crate::kext::ib::read_roce_av(attr).ok_or(EINVAL)?;
        av.families().ok_or(EINVAL)?;
        Ok(Self { pd, av })
    }
}

/// An address handle as the verbs layer holds it: its number in the device's AH table.
pub(crate) struct RxeAh {
    pub(crate) num: u32,
}
