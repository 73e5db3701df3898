// SPDX-License-Identifier: GPL-2.0
//! GRO for the receive sockets: a run of one flow's datagrams, as one NAPI poll takes them off
//! the NIC, is chained into one skb (`frag_list`), which passes the IP layers, netfilter and
//! UDP's socket lookup once; UDP splits it again before our `encap_rcv`. Which datagrams may be
//! chained is [`crate::proto::gro`]'s to say.

use super::bindings;
use crate::proto::gro::{self, Seen};
use core::ptr;

/// A datagram as GRO holds it (`held`) or as it arrives: its IP and UDP headers and its length.
///
/// # Safety
///
/// `skb` is an skb in GRO (held in its list, or the one being received) whose headers GRO
/// has made readable up to its UDP payload; the slice lives while the skb is left alone.
unsafe fn seen<'a>(skb: *mut bindings::sk_buff, held: bool) -> Option<Seen<'a>> {
    let mut readable = 0u32;
    // SAFETY: `skb` is in GRO (above); the helper only reads its header pointers.
    let ip = unsafe { bindings::rxe_rs_helper_gro_ip_header(skb, held, &mut readable) };
    if ip.is_null() {
        return None;
    }
    // SAFETY: the helper returned `readable` bytes of packet data at `ip`, which the skb
    // holds until it is changed (by the caller's contract, not while the slice lives).
    let ip = unsafe { core::slice::from_raw_parts(ip.cast::<u8>(), readable as usize) };
    // SAFETY: `skb` is valid; in GRO its data starts at the IP header.
    let len = unsafe { (*skb).len } as usize;
    Some(Seen { ip, len })
}

/// The `gro_receive` callback of a receive socket: chains `skb` to the run of its flow GRO
/// holds, or ends that run. Returns the held skb GRO should complete now (a run that `skb`
/// does not follow, or that is full), or NULL.
///
/// # Safety
///
/// Called by `udp_gro_receive` for a socket set up with it, in the NAPI softirq: `head` is
/// the list of skbs GRO holds, `skb` the one arriving, with its GRO offset past its UDP header.
pub(super) unsafe extern "C" fn gro_receive(
    _sk: *mut bindings::sock,
    head: *mut bindings::list_head,
    skb: *mut bindings::sk_buff,
) -> *mut bindings::sk_buff {
    // SAFETY: `head` is GRO's list (the callback's contract); nothing changes it meanwhile.
    let Some(p) = (unsafe { held_of_flow(head) }) else {
        return ptr::null_mut();
    };
    // An skb GRO will not hold (too short for its IP length, GSO, with a frag_list) goes up
    // as it is: the run before it first, to keep the flow's order.
    // SAFETY: `skb` is the skb GRO is receiving (the callback's contract).
    if unsafe { bindings::rxe_rs_helper_gro_flush(skb) } {
        return p;
    }
    // SAFETY: `p` is on GRO's list, `skb` is being received; `held` and `next` are used only
    // before `skb` is chained.
    let follows = unsafe {
        let segments = bindings::rxe_rs_helper_gro_count(p);
        match (seen(p, true), seen(skb, false)) {
            (Some(held), Some(next)) => {
                gro::may_follow(held, segments, next)
                    // Once per run, before its first link.
                    && (segments > 1 || bindings::rxe_rs_helper_gro_to_local(p))
            }
            _ => false,
        }
    };
    // A run `skb` does not follow goes up now; `skb` may start the next.
    // SAFETY: `p` holds a run of `skb`'s flow, which `may_follow` let it join.
    if !follows || unsafe { bindings::rxe_rs_helper_gro_chain(p, skb) } != 0 {
        return p;
    }
    // SAFETY: `p` is still on GRO's list.
    let full = unsafe { bindings::rxe_rs_helper_gro_count(p) } >= gro::MAX_SEGMENTS;
    if full {
        p
    } else {
        ptr::null_mut()
    }
}

/// The skb GRO holds of the arriving one's flow (addresses and ports: the IP and UDP layers
/// cleared `same_flow` on the others), if any.
///
/// # Safety
///
/// `head` is the list of skbs GRO holds, in a `gro_receive` callback.
unsafe fn held_of_flow(head: *mut bindings::list_head) -> Option<*mut bindings::sk_buff> {
    // SAFETY: `head` is GRO's list (the caller's contract).
    let mut p = unsafe { bindings::rxe_rs_helper_gro_held_next(head, ptr::null_mut()) };
    while !p.is_null() {
        // SAFETY: `p` is an skb on GRO's list.
        if unsafe { bindings::rxe_rs_helper_gro_same_flow(p) } {
            return Some(p);
        }
        // SAFETY: `p` is on the list `head` leads.
        p = unsafe { bindings::rxe_rs_helper_gro_held_next(head, p) };
    }
    None
}

/// The `gro_complete` callback of a receive socket: a run of more than one datagram, which
/// [`gro_receive`] chained, goes up the stack as a UDP GSO skb of the fraglist kind.
///
/// # Safety
///
/// Called by `udp_gro_complete` for a socket set up with it, with the head of a run GRO
/// completes.
pub(super) unsafe extern "C" fn gro_complete(
    _sk: *mut bindings::sock,
    skb: *mut bindings::sk_buff,
    _nhoff: kernel::ffi::c_int,
) -> kernel::ffi::c_int {
    // SAFETY: `skb` heads a completed run (the callback's contract).
    unsafe { bindings::rxe_rs_helper_gro_complete_chain(skb) };
    0
}
