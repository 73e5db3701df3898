//! Which received datagrams the receive socket's GRO callback may chain into one skb.
//!
//! The kernel's own UDP GRO refuses datagrams without a UDP checksum, and RoCEv2 datagrams
//! have none (the ICRC covers them): without our callback every one passes the IP layers and
//! UDP's socket lookup alone. Chained (`frag_list`), a run of one flow passes them once and
//! UDP splits it again before our socket (`udp_rcv_segment`), each datagram with its own
//! headers but for the IPv4 ID, which segmentation sets to the chain head's plus the index.
//! So a datagram may follow a chain only with exactly that ID: its ICRC covers the ID.
#![deny(clippy::arithmetic_side_effects)]

use super::icrc::{IPV4_HDR_BYTES, IPV6_HDR_BYTES};

/// Datagrams one chain holds at most (as the kernel's UDP GRO: more would let a flood of
/// small ones pile up memory in one skb).
pub const MAX_SEGMENTS: u16 = 64;

/// Bytes a chain may reach, from its IP header on: the IP length fields, which GRO rewrites
/// to the chain's, must describe it.
pub const MAX_BYTES: usize = 65535;

/// A datagram seen by GRO: its IP and UDP headers (at least), and its length from there on.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// The IP header and the UDP header after it; more bytes after those are ignored.
    pub ip: &'a [u8],
    /// Bytes from the IP header to the end.
    pub len: usize,
}

/// Whether `next` may join the chain `held` leads, which holds `segments` datagrams and
/// `held.len` bytes. `held` and `next` are of one flow (addresses and UDP ports; the IP and UDP
/// GRO layers checked that) and `next` is whole (not a fragment, no IPv4 options).
pub fn may_follow(held: Seen<'_>, segments: u16, next: Seen<'_>) -> bool {
    if segments == 0 || segments >= MAX_SEGMENTS {
        return false;
    }
    // What `next` adds: its UDP payload (its own headers go back at segmentation).
    let Some(added) = next
        .len
        .checked_sub(udp_payload_offset(next.ip).unwrap_or(usize::MAX))
    else {
        return false;
    };
    let fits = match held.len.checked_add(added) {
        Some(total) => total <= MAX_BYTES,
        None => false,
    };
    if !fits {
        return false;
    }
    // A UDP checksum of 0 (RoCEv2 sends none): the chain is marked as needing no check.
    if !(has_no_udp_checksum(held.ip) && has_no_udp_checksum(next.ip)) {
        return false;
    }
    match (held.ip, next.ip) {
        ([h0, _, _, _, h_id0, h_id1, ..], [n0, _, _, _, n_id0, n_id1, ..])
            if h0 >> 4 == 4 && n0 >> 4 == 4 && held.ip.len() >= IPV4_HDR_BYTES =>
        {
            let held_id = u16::from_be_bytes([*h_id0, *h_id1]);
            u16::from_be_bytes([*n_id0, *n_id1]) == held_id.wrapping_add(segments)
        }
        ([h0, ..], [n0, ..]) => h0 >> 4 == 6 && n0 >> 4 == 6 && held.ip.len() >= IPV6_HDR_BYTES,
        _ => false,
    }
}

/// Whether the UDP header after `ip` (which must hold it) has a checksum of 0.
fn has_no_udp_checksum(ip: &[u8]) -> bool {
    udp_payload_offset(ip)
        .and_then(|end| ip.get(end.checked_sub(2)?..end))
        .is_some_and(|check| check == [0, 0])
}

/// Where the UDP payload starts, for a header of either family; `None` for anything else.
fn udp_payload_offset(ip: &[u8]) -> Option<usize> {
    const UDP_HDR_BYTES: usize = 8;
    let header = match ip.first()? >> 4 {
        4 if ip.len() >= IPV4_HDR_BYTES => IPV4_HDR_BYTES,
        6 if ip.len() >= IPV6_HDR_BYTES => IPV6_HDR_BYTES,
        _ => return None,
    };
    header.checked_add(UDP_HDR_BYTES)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data, built from small constants
mod tests {
    use super::*;

    fn v4(id: u16) -> [u8; 28] {
        let mut h = [0u8; 28];
        h[0] = 0x45;
        h[4..6].copy_from_slice(&id.to_be_bytes());
        h[6] = 0x40; // DF
        h[9] = 17;
        h
    }

    fn v6() -> [u8; 48] {
        let mut h = [0u8; 48];
        h[0] = 0x60;
        h[6] = 17;
        h
    }

    fn seen(ip: &[u8], len: usize) -> Seen<'_> {
        Seen { ip, len }
    }

    #[test]
    fn an_ipv4_datagram_follows_only_with_the_id_segmentation_gives_it() {
        let (head, next) = (v4(7), v4(10));
        assert!(may_follow(seen(&head, 1100), 3, seen(&next, 1100)));
        for segments in [1, 2, 4] {
            assert!(
                !may_follow(seen(&head, 1100), segments, seen(&next, 1100)),
                "{segments}"
            );
        }
        // Our batches number from 0; rdma_rxe's IDs run on past 65535.
        let (head, next) = (v4(0xfffe), v4(1));
        assert!(may_follow(seen(&head, 1100), 3, seen(&next, 1100)));
    }

    #[test]
    fn ipv6_has_no_id_to_match_but_families_must() {
        let (head, next) = (v6(), v6());
        assert!(may_follow(seen(&head, 1100), 5, seen(&next, 1100)));
        let v4_next = v4(6);
        assert!(!may_follow(seen(&head, 1100), 1, seen(&v4_next, 1100)));
        let v4_head = v4(5);
        assert!(!may_follow(seen(&v4_head, 1100), 1, seen(&next, 1100)));
        assert!(
            !may_follow(seen(&head[..47], 1100), 1, seen(&next, 1100)),
            "short header"
        );
        assert!(!may_follow(seen(&[], 0), 1, seen(&next, 1100)));
        assert!(!may_follow(seen(&head, 1100), 1, seen(&[], 1100)));
    }

    #[test]
    fn only_datagrams_without_a_udp_checksum_are_chained() {
        let head = v4(0);
        let mut next = v4(1);
        next[26] = 0x12;
        assert!(!may_follow(seen(&head, 1100), 1, seen(&next, 1100)));
        assert!(!may_follow(seen(&next, 1100), 1, seen(&v4(2), 1100)));
        let mut next = v6();
        next[47] = 1;
        assert!(!may_follow(seen(&v6(), 1100), 1, seen(&next, 1100)));
    }

    #[test]
    fn a_chain_stops_at_its_segment_and_byte_limits() {
        let head = v4(0);
        assert!(may_follow(seen(&head, 1100), 63, seen(&v4(63), 1100)));
        assert!(!may_follow(seen(&head, 1100), 64, seen(&v4(64), 1100)));
        assert!(!may_follow(seen(&head, 1100), 0, seen(&v4(0), 1100)));
        // A datagram adds its UDP payload: 1100 - 28 bytes.
        assert!(may_follow(
            seen(&head, MAX_BYTES - 1072),
            1,
            seen(&v4(1), 1100)
        ));
        assert!(!may_follow(
            seen(&head, MAX_BYTES - 1071),
            1,
            seen(&v4(1), 1100)
        ));
        assert!(!may_follow(seen(&head, usize::MAX), 1, seen(&v4(1), 1100)));
        // Shorter than its own headers: not a datagram to chain.
        assert!(!may_follow(seen(&head, 1100), 1, seen(&v4(1), 27)));
        assert!(may_follow(seen(&head, 1100), 1, seen(&v4(1), 28)));
    }
}
