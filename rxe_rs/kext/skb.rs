// SPDX-License-Identifier: GPL-2.0
//! Owned socket buffers.

use super::{bindings, netdev::NetDevice};
use crate::proto::chunks::Chunks;
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
        // device's queues); one we queued for local delivery names the sending rxe_rs device's
        // netdev, which that device holds until its local delivery queues are drained.
        let dev = unsafe { bindings::rxe_rs_helper_skb_dev(self.0.as_ptr()) };
        // SAFETY: non-NULL, valid while the skb is (above).
        (!dev.is_null()).then(|| unsafe { NetDevice::from_raw(dev) })
    }

    /// For a datagram of ours delivered locally: the QP that sent it (meaningless for an skb
    /// from the wire).
    pub(crate) fn local_sender_qpn(&self) -> u32 {
        // SAFETY: we own the skb; `receive_local` calls this only for what local delivery
        // queued, which its sender stamped.
        unsafe { super::local_delivery::stamped_sender(self.0) }
    }

    /// A copy of a datagram this host sent that the IP layer looped back to it (multicast and
    /// broadcast, which arrive on the device they left by; unicast to this host arrives on
    /// `lo` instead).
    pub(crate) fn is_looped_back(&self) -> bool {
        // SAFETY: we own the skb; reads one of its fields.
        unsafe { bindings::rxe_rs_helper_skb_is_looped_back(self.0.as_ptr()) }
    }

    /// The whole IP datagram (IP header to the end) where the skb holds it: its linear head,
    /// which holds the first `headers` bytes from `data` on (or all, if fewer), then its page
    /// fragments, read in place rather than copied into one buffer. `data` is at the UDP
    /// header for a packet handed to a UDP encap_rcv callback (the network header precedes it
    /// in the head), at the IP header for one of ours delivered locally (linear). An skb that
    /// cannot be read so is made linear first (a copy).
    pub(crate) fn ip_datagram(&mut self, headers: usize) -> Result<RxDatagram<'_>> {
        let skb = self.0.as_ptr();
        let pull = u32::try_from(headers).map_err(|_| EINVAL)?;
        // SAFETY: we own the skb; pulling may reallocate its head and linearising its data,
        // after which every pointer below is read afresh.
        to_result(unsafe { bindings::rxe_rs_helper_skb_prepare_rx(skb, pull) })?;
        // SAFETY: the skb lives as long as `&self`; nobody else changes it while we own it.
        let mut nr_frags = unsafe { bindings::rxe_rs_helper_skb_nr_frags(skb) } as usize;
        if nr_frags > FRAGS_IN_PLACE {
            // More than a default kernel allows: read it whole.
            // SAFETY: as above.
            to_result(unsafe { bindings::rxe_rs_helper_skb_linearize(skb) })?;
            nr_frags = 0;
        }
        let mut frags: [&[u8]; FRAGS_IN_PLACE] = [&[]; FRAGS_IN_PLACE];
        for (i, frag) in frags.iter_mut().take(nr_frags).enumerate() {
            let mut size = 0u32;
            // SAFETY: `i` is below the skb's fragment count; prepared above, so each
            // fragment is a readable lowmem page range.
            let at = unsafe { bindings::rxe_rs_helper_skb_frag(skb, i as u32, &mut size) };
            if at.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: the fragment's `size` bytes at `at` are mapped (lowmem, physically
            // contiguous) packet data that nobody writes (prepared above: no shared frags),
            // held by the skb for as long as `&self`.
            *frag = unsafe { core::slice::from_raw_parts(at.cast::<u8>(), size as usize) };
        }
        // SAFETY: the linear head runs from the network header to `data + headlen`, initialised
        // packet data that lives as long as the skb, which `&self` borrows.
        let head = unsafe {
            let start = bindings::rxe_rs_helper_skb_network_header(skb);
            let data = (*skb).data;
            let before = usize::try_from(data.offset_from(start)).map_err(|_| EINVAL)?;
            let headlen = bindings::rxe_rs_helper_skb_headlen(skb) as usize;
            core::slice::from_raw_parts(start, before.checked_add(headlen).ok_or(EINVAL)?)
        };
        Ok(RxDatagram {
            head,
            frags,
            nr_frags,
        })
    }
}

/// Page fragments a received datagram is read across in place (`MAX_SKB_FRAGS` of a default
/// kernel); an skb with more is made linear.
const FRAGS_IN_PLACE: usize = 17;

/// A received IP datagram in its skb: the linear head (from the IP header), then page fragments.
pub(crate) struct RxDatagram<'a> {
    head: &'a [u8],
    frags: [&'a [u8]; FRAGS_IN_PLACE],
    nr_frags: usize,
}

impl<'a> RxDatagram<'a> {
    /// The part in the linear head: the IP header and at least the bytes asked to be pulled.
    pub(crate) fn head(&self) -> &'a [u8] {
        self.head
    }

    /// All of it, in order.
    pub(crate) fn chunks(&self) -> Chunks<'_> {
        Chunks::new(self.head, &self.frags[..self.nr_frags])
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
