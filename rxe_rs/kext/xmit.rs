// SPDX-License-Identifier: GPL-2.0
//! Transmit: an IP datagram we write into a fresh skb, routed out of a netdev with
//! `ip_local_out`/`ip6_local_out` (netfilter, neighbour resolution and qdiscs as for any local
//! traffic), or, when it is for this host, handed to the receive path ([`LocalDelivery`]).

use super::{bindings, local_delivery::LocalDelivery, netdev::NetDevice};
use core::{mem::ManuallyDrop, ptr::NonNull};
use kernel::{error::to_result, prelude::*};

/// A route to a peer: a held `dst_entry`, released on drop.
pub(crate) struct Route {
    dst: NonNull<bindings::dst_entry>,
    ipv6: bool,
    /// The destination is an address of this host.
    local: bool,
}

impl Route {
    /// The route out of `ndev` from `src` to `dst` (both IPv4 or both IPv6 addresses, as
    /// 4 or 16 bytes); `None` when there is none.
    pub(crate) fn lookup(ndev: &NetDevice, src: &[u8], dst: &[u8]) -> Option<Self> {
        // SAFETY: `ndev` is a live netdev; the addresses are readable for the length the
        // helper reads (checked by the match); the helper returns a held dst or NULL.
        let raw = unsafe {
            match (src.len(), dst.len()) {
                (4, 4) => {
                    bindings::rxe_rs_helper_route_v4(ndev.as_raw(), src.as_ptr(), dst.as_ptr())
                }
                (16, 16) => {
                    bindings::rxe_rs_helper_route_v6(ndev.as_raw(), src.as_ptr(), dst.as_ptr())
                }
                _ => return None,
            }
        };
        let dst = NonNull::new(raw)?;
        Some(Self {
            dst,
            ipv6: src.len() == 16,
            // SAFETY: a held dst (above), of the family the lookup was for.
            local: unsafe { bindings::rxe_rs_helper_dst_is_local(dst.as_ptr(), src.len() == 16) },
        })
    }

    /// Whether the route leads to an address of this host (in `init_net`).
    pub(crate) fn is_local(&self) -> bool {
        self.local
    }
}

impl Clone for Route {
    fn clone(&self) -> Self {
        // SAFETY: we hold a reference, so the dst is alive; the new one is the clone's.
        unsafe { bindings::rxe_rs_helper_dst_hold(self.dst.as_ptr()) };
        Self {
            dst: self.dst,
            ipv6: self.ipv6,
            local: self.local,
        }
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        // SAFETY: we hold one reference to the dst, released once here.
        unsafe { bindings::dst_release(self.dst.as_ptr()) }
    }
}

/// A datagram being built in an skb we own.
pub(crate) struct TxDatagram {
    skb: NonNull<bindings::sk_buff>,
    len: usize,
}

impl TxDatagram {
    /// An skb with room for `len` bytes of IP datagram (and `ndev`'s link-layer header in front).
    pub(crate) fn alloc(ndev: &NetDevice, len: usize) -> Result<Self> {
        let len32 = u32::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: live netdev; the helper allocates with GFP_ATOMIC (callable in softirq and
        // under spinlocks) and returns an skb with `len` bytes put, or NULL.
        let skb =
            NonNull::new(unsafe { bindings::rxe_rs_helper_alloc_tx_skb(ndev.as_raw(), len32) })
                .ok_or(ENOMEM)?;
        Ok(Self { skb, len })
    }

    /// The datagram's bytes (uninitialised skb memory is zeroed on first write by the caller:
    /// every byte is written by the frame builder or the payload copy).
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the skb's linear data holds `len` bytes we put and own exclusively; the skb
        // lives as long as `self`.
        unsafe {
            core::slice::from_raw_parts_mut(
                bindings::rxe_rs_helper_skb_data(self.skb.as_ptr()),
                self.len,
            )
        }
    }

    /// Sends the datagram along `route`; the skb is gone either way.
    pub(crate) fn send(self, route: Route) -> Result {
        let this = ManuallyDrop::new(self);
        let route = ManuallyDrop::new(route);
        // SAFETY: we own the skb and one dst reference; both pass to the helper, which sets the
        // dst on the skb and hands the skb to the IP layer (which frees it on every path).
        to_result(unsafe {
            bindings::rxe_rs_helper_ip_local_out(this.skb.as_ptr(), route.dst.as_ptr(), route.ipv6)
        })
    }

    /// Hands the datagram, for an address of this host (`route` is local), to the receive path
    /// through `local`, on the CPU `key` picks; the skb is gone either way.
    pub(crate) fn deliver_locally(self, route: &Route, local: &LocalDelivery, key: u32) -> Result {
        let this = ManuallyDrop::new(self);
        // SAFETY: we own the skb, whose data is the whole datagram; `route` holds its dst.
        unsafe {
            bindings::rxe_rs_helper_skb_as_looped_back(
                this.skb.as_ptr(),
                route.dst.as_ptr(),
                route.ipv6,
            )
        };
        // SAFETY: the skb is ours and passes to the queue.
        unsafe { local.deliver(this.skb, key) }
    }
}

impl Drop for TxDatagram {
    fn drop(&mut self) {
        // SAFETY: an skb we own that was never sent.
        unsafe { bindings::rxe_rs_helper_kfree_skb(self.skb.as_ptr()) }
    }
}

// SAFETY: an owned skb / dst reference may be used and released on any CPU.
unsafe impl Send for TxDatagram {}
// SAFETY: as above.
unsafe impl Send for Route {}
