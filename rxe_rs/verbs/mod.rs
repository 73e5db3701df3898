// SPDX-License-Identifier: GPL-2.0
//! The verbs objects other than the QP: protection domains, memory regions (and the copy of
//! bytes through them), memory windows, completion queues, shared receive queues, address handles, multicast groups.

pub(crate) mod ah;
pub(crate) mod cq;
pub(crate) mod mcast;
pub(crate) mod mr;
pub(crate) mod mw;
pub(crate) mod pd;
pub(crate) mod recv_wqe;
pub(crate) mod sgl;
pub(crate) mod srq;
