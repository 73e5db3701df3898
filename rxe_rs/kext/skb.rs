// SPDX-License-Identifier: GPL-2.0
//! Owned socket buffers.

use super::{bindings, netdev::NetDevice};
use core::ptr::NonNull;
use kernel::{error::to_result, prelude::*};

/// An `sk_buff` we own: dropped with `kfree_skb` (counted as a drop by the networking core).
pub(crate) struct SkBuff(NonNull<bindings::sk_buff>);

impl SkBuff {
    /// Takes ownership of `skb`.
    ///
    /// # Safety
    ///
    /// `skb` must be a valid `sk_buff` whose ownership passes to the returned value.
    pub(crate) unsafe fn from_raw(skb: NonNull<bindings::sk_buff>) -> Self {
        Self(skb)
    }

    /// The device it arrived on.
    pub(crate) fn netdev(&self) -> Option<&NetDevice> {
        // SAFETY: the device of a received skb outlives it (the stack purges an unregistering
        // device's queues); one we queued for local delivery names init_net's `lo`, which lives
        // as long as the system.
        let dev = unsafe { bindings::rxe_rs_helper_skb_dev(self.0.as_ptr()) };
        // SAFETY: non-NULL, valid while the skb is (above).
        (!dev.is_null()).then(|| unsafe { NetDevice::from_raw(dev) })
    }

    /// The whole IP datagram (IP header to the end), made contiguous first. For a packet
    /// handed to a UDP encap_rcv callback, `data` is at the UDP header and the network header
    /// precedes it in the same buffer.
    pub(crate) fn ip_datagram(&mut self) -> Result<&[u8]> {
        let skb = self.0.as_ptr();
        // SAFETY: we own the skb; linearising may reallocate its head, after which we recompute
        // every pointer.
        to_result(unsafe { bindings::rxe_rs_helper_skb_linearize(skb) })?;
        // SAFETY: a linear skb: the bytes from the network header to `data + len` are one
        // initialised buffer that lives as long as the skb, which `&self` borrows.
        unsafe {
            let start = bindings::rxe_rs_helper_skb_network_header(skb);
            let data = (*skb).data;
            let before = data.offset_from(start);
            if before < 0 {
                return Err(EINVAL);
            }
            Ok(core::slice::from_raw_parts(
                start,
                before as usize + (*skb).len as usize,
            ))
        }
    }
}

impl Drop for SkBuff {
    fn drop(&mut self) {
        // SAFETY: we own the skb; nobody uses it after this.
        unsafe { bindings::rxe_rs_helper_kfree_skb(self.0.as_ptr()) }
    }
}

// SAFETY: an owned skb may be freed on any CPU.
unsafe impl Send for SkBuff {}
