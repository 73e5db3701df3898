// SPDX-License-Identifier: GPL-2.0
//! The datapath's ends at the network: received RoCEv2 datagrams dispatched to their QP, and
//! packets built and sent.

pub(crate) mod recv;
pub(crate) mod transmit;
