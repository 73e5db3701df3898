// SPDX-License-Identifier: GPL-2.0
//! Errnos that `kernel::error::code` of 6.12 lacks.
//!
//! User space only understands the uapi values: in particular `EOPNOTSUPP` (95) is what
//! libibverbs, perftest and pyverbs treat as "not supported", not the kernel-internal `ENOTSUPP`.

use kernel::error::Error;

/// Operation not supported (uapi 95).
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-95)
}

/// Address already in use (uapi 98): UDP port 4791 taken by another RoCE driver.
pub(crate) fn eaddrinuse() -> Error {
    Error::from_errno(-98)
}

/// Message too long (uapi 90): a netlink message has no room left.
pub(crate) fn emsgsize() -> Error {
    Error::from_errno(-90)
}

/// No buffer space available (uapi 105): a queue of packets is full.
pub(crate) fn enobufs() -> Error {
    Error::from_errno(-105)
}
