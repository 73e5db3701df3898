// SPDX-License-Identifier: GPL-2.0
//! Transmit: an IP datagram we write into a fresh skb, routed out of a netdev with
//! `ip_local_out`/`ip6_local_out` (netfilter, neighbour resolution and qdiscs as for any local
//! traffic), or, when it is for this host, handed to the receive path ([`LocalDelivery`]).

use super::{
    bindings,
    local_delivery::{stamp_sender, LocalDelivery},
    netdev::NetDevice,
};
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

    /// Whether the route leads to an address of this host (in the sender's namespace).
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

    /// Hands the datagram, for an address of this host (`route` is local), to the receive path
    /// through `local`, on the CPU `key` picks; the skb is gone either way. `sender` is the
    /// netdev of the device that sent it (which holds it until `local` is drained): its
    /// namespace's addresses say which device receives it. `sender_qpn`, the QP that sent it,
    /// goes with it.
    pub(crate) fn deliver_locally(
        self,
        route: &Route,
        sender: &NetDevice,
        local: &LocalDelivery,
        key: u32,
        sender_qpn: u32,
    ) -> Result {
        let this = ManuallyDrop::new(self);
        // SAFETY: we own the skb.
        unsafe { stamp_sender(this.skb, sender_qpn) };
        // SAFETY: we own the skb, whose data is the whole datagram; `sender` is a live netdev.
        unsafe {
            bindings::rxe_rs_helper_skb_as_looped_back(
                this.skb.as_ptr(),
                sender.as_raw(),
                route.ipv6,
            )
        };
        // SAFETY: the skb is ours and passes to the queue.
        unsafe { local.deliver(this.skb, key) }
    }
}

/// Datagrams along one route, sent as one UDP GSO skb of the fraglist kind (the helper says
/// how): the IP layers, the qdisc and the driver's kick once per batch, not once per datagram.
/// What leaves the device is the datagrams as they were built, but for the IPv4 ID, which
/// segmentation sets to the datagram's index in its batch: [`TxBatch::next_index`] tells the
/// builder, whose ICRC covers it.
pub(crate) struct TxBatch {
    /// The first datagram; it owns the others (its frag_list).
    head: Option<TxDatagram>,
    /// The last one linked after the head (null while there is none).
    tail: *mut bindings::sk_buff,
    count: u32,
    /// The head's length, the batch's segment size to the IP layers (checked against the
    /// route's MTU): no datagram after it may be longer.
    seg_len: usize,
    bytes: usize,
}

impl TxBatch {
    /// Datagrams in a batch at most: a bound on how long the first waits for the last to be
    /// built.
    pub(crate) const MAX_DATAGRAMS: u32 = 64;
    /// Bytes at most: what the head's IPv4 total length can hold, as the IP layers see it.
    const MAX_BYTES: usize = 0xffff;

    /// An empty batch.
    pub(crate) const fn new() -> Self {
        Self {
            head: None,
            tail: core::ptr::null_mut(),
            count: 0,
            seg_len: 0,
            bytes: 0,
        }
    }

    /// Whether a datagram of `len` bytes may join (else the batch goes first).
    pub(crate) fn fits(&self, len: usize) -> bool {
        self.head.is_none()
            || (self.count < Self::MAX_DATAGRAMS
                && len <= self.seg_len
                && self
                    .bytes
                    .checked_add(len)
                    .is_some_and(|b| b <= Self::MAX_BYTES))
    }

    /// The index the next datagram gets, its IPv4 ID once segmented (below `MAX_DATAGRAMS`).
    pub(crate) fn next_index(&self) -> u16 {
        self.count as u16
    }

    /// Adds `d`, a complete datagram for `route` that [`TxBatch::fits`].
    pub(crate) fn push(&mut self, d: TxDatagram, route: &Route) {
        let len = d.len;
        match &self.head {
            None => {
                self.seg_len = len;
                self.head = Some(d);
            }
            Some(head) => {
                let d = ManuallyDrop::new(d);
                // SAFETY: both skbs are ours and linear, built for the same route; the head
                // takes ownership of `d`'s (freed with it, or sent with it); `tail` is null or
                // the last one linked.
                unsafe {
                    bindings::rxe_rs_helper_batch_link(
                        head.skb.as_ptr(),
                        self.tail,
                        d.skb.as_ptr(),
                        route.ipv6,
                    )
                };
                self.tail = d.skb.as_ptr();
            }
        }
        self.count += 1;
        self.bytes += len;
    }

    /// Sends what the batch holds along `route` and empties it: how many datagrams went with
    /// what result; `None` when it was empty. The skbs are gone either way.
    pub(crate) fn send(&mut self, route: &Route) -> Option<(u32, Result)> {
        let head = ManuallyDrop::new(self.head.take()?);
        let count = core::mem::replace(self, Self::new()).count;
        let route = ManuallyDrop::new(route.clone());
        // SAFETY: we own the skb (its batch linked to it) and a dst reference; both pass to the
        // helper, whose IP layer frees the skb on every path. `count` datagrams are linked,
        // none longer than the head (`fits`), within what the head's total length can hold.
        let err = unsafe {
            bindings::rxe_rs_helper_ip_local_out(
                head.skb.as_ptr(),
                route.dst.as_ptr(),
                route.ipv6,
                count,
            )
        };
        Some((count, to_result(err)))
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
