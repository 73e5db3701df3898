// SPDX-License-Identifier: GPL-2.0
//! Protection domains: a name space for MRs and QPs; nothing else to hold yet.

/// A protection domain.
pub(crate) struct RxePd {
    /// Unique per device: MRs and QPs record it to check they share a PD.
    pub(crate) id: crate::verbs::mr::PdId,
}
