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
    let (Some(h), Some(n)) = (Headers::parse(held.ip), Headers::parse(next.ip)) else {
        return false;
    };
    // Each whole by its own length fields (the head's are its own until GRO completes it),
    // and long enough for a BTH and an ICRC: segmentation trusts them.
    let consistent =
        |d: &Headers| d.ip_len.checked_sub(d.ip_hdr) == Some(d.udp_len) && d.udp_len >= MIN_UDP_LEN;
    if !(consistent(&h) && consistent(&n) && n.ip_len == next.len) {
        return false;
    }
    // None longer than the head: a chain whose geometry segmentation distrusts is cut at the
    // head's length (`skb_segment`), which would split longer ones.
    if n.udp_len > h.udp_len || h.family != n.family || !(h.no_checksum && n.no_checksum) {
        return false;
    }
    // What `next` adds: its UDP payload (its own headers go back at segmentation).
    let fits = match held
        .len
        .checked_add(n.udp_len.saturating_sub(UDP_HDR_BYTES))
    {
        Some(total) => total <= MAX_BYTES,
        None => false,
    };
    fits && match (h.ipv4_id, n.ipv4_id) {
        (Some(held_id), Some(id)) => id == held_id.wrapping_add(segments),
        (None, None) => true,
        _ => false,
    }
}

const UDP_HDR_BYTES: usize = 8;

/// The shortest UDP datagram chained: its header, a BTH and an ICRC.
const MIN_UDP_LEN: usize = UDP_HDR_BYTES + 12 + 4;

/// What the policy reads of a datagram's IP and UDP headers.
struct Headers {
    family: u8,
    ip_hdr: usize,
    /// The IP datagram's length by its IP header.
    ip_len: usize,
    udp_len: usize,
    /// A UDP checksum of 0 (RoCEv2 sends none): the chain is marked as needing no check.
    no_checksum: bool,
    ipv4_id: Option<u16>,
}

impl Headers {
    /// IPv4 without options or IPv6 without extension headers, then UDP; `None` for
    /// anything else.
    fn parse(ip: &[u8]) -> Option<Self> {
        const IPPROTO_UDP: u8 = 17;
        let (family, ip_hdr, ip_len, ipv4_id) = match ip {
            [0x45, _, l0, l1, i0, i1, _, _, _, IPPROTO_UDP, ..] => (
                4,
                IPV4_HDR_BYTES,
                usize::from(u16::from_be_bytes([*l0, *l1])),
                Some(u16::from_be_bytes([*i0, *i1])),
            ),
            [v, _, _, _, l0, l1, IPPROTO_UDP, ..] if v >> 4 == 6 => (
                6,
                IPV6_HDR_BYTES,
                usize::from(u16::from_be_bytes([*l0, *l1])).checked_add(IPV6_HDR_BYTES)?,
                None,
            ),
            _ => return None,
        };
        let udp = ip.get(ip_hdr..ip_hdr.checked_add(UDP_HDR_BYTES)?)?;
        Some(Self {
            family,
            ip_hdr,
            ip_len,
            udp_len: usize::from(u16::from_be_bytes([udp[4], udp[5]])),
            no_checksum: udp[6..8] == [0, 0],
            ipv4_id,
        })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data, built from small constants
mod tests {
    use super::*;

    /// The headers of an IPv4 datagram of `len` bytes with ID `id`.
    fn v4(id: u16, len: u16) -> [u8; 28] {
        let mut h = [0u8; 28];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&len.to_be_bytes());
        h[4..6].copy_from_slice(&id.to_be_bytes());
        h[6] = 0x40; // DF
        h[9] = 17;
        h[24..26].copy_from_slice(&(len - 20).to_be_bytes());
        h
    }

    /// The headers of an IPv6 datagram of `len` bytes.
    fn v6(len: u16) -> [u8; 48] {
        let mut h = [0u8; 48];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&(len - 40).to_be_bytes());
        h[6] = 17;
        h[44..46].copy_from_slice(&(len - 40).to_be_bytes());
        h
    }

    fn seen(ip: &[u8], len: usize) -> Seen<'_> {
        Seen { ip, len }
    }

    #[test]
    fn an_ipv4_datagram_follows_only_with_the_id_segmentation_gives_it() {
        let (head, next) = (v4(7, 1100), v4(10, 1100));
        assert!(may_follow(seen(&head, 3200), 3, seen(&next, 1100)));
        for segments in [1, 2, 4] {
            assert!(
                !may_follow(seen(&head, 3200), segments, seen(&next, 1100)),
                "{segments}"
            );
        }
        // Our batches number from 0; rdma_rxe's IDs run on past 65535.
        let (head, next) = (v4(0xfffe, 1100), v4(1, 1100));
        assert!(may_follow(seen(&head, 3200), 3, seen(&next, 1100)));
    }

    #[test]
    fn ipv6_has_no_id_to_match_but_families_must() {
        let (head, next) = (v6(1100), v6(1100));
        assert!(may_follow(seen(&head, 1100), 5, seen(&next, 1100)));
        let v4_next = v4(6, 1100);
        assert!(!may_follow(seen(&head, 1100), 1, seen(&v4_next, 1100)));
        let v4_head = v4(5, 1100);
        assert!(!may_follow(seen(&v4_head, 1100), 1, seen(&next, 1100)));
        assert!(
            !may_follow(seen(&head[..47], 1100), 1, seen(&next, 1100)),
            "short header"
        );
        assert!(!may_follow(seen(&[], 0), 1, seen(&next, 1100)));
        assert!(!may_follow(seen(&head, 1100), 1, seen(&[], 1100)));
        // An extension header: the UDP header is not where the policy would read it.
        let mut ext = v6(1100);
        ext[6] = 60;
        assert!(!may_follow(seen(&head, 1100), 1, seen(&ext, 1100)));
    }

    #[test]
    fn only_datagrams_without_a_udp_checksum_are_chained() {
        let head = v4(0, 1100);
        let mut next = v4(1, 1100);
        next[26] = 0x12;
        assert!(!may_follow(seen(&head, 1100), 1, seen(&next, 1100)));
        assert!(!may_follow(seen(&next, 1100), 1, seen(&v4(2, 1100), 1100)));
        let mut next = v6(1100);
        next[47] = 1;
        assert!(!may_follow(seen(&v6(1100), 1100), 1, seen(&next, 1100)));
    }

    #[test]
    fn lengths_must_agree_and_none_may_be_longer_than_the_head() {
        let head = v4(0, 1100);
        assert!(
            may_follow(seen(&head, 1100), 1, seen(&v4(1, 600), 600)),
            "shorter"
        );
        assert!(
            !may_follow(seen(&head, 1100), 1, seen(&v4(1, 1104), 1104)),
            "longer"
        );
        // The skb's length is not the IP header's (padding, or a lie).
        assert!(!may_follow(seen(&head, 1100), 1, seen(&v4(1, 1100), 1104)));
        // A UDP length that is not the IP payload's, in the head or the next.
        let mut bad = v4(1, 1100);
        bad[24..26].copy_from_slice(&1000u16.to_be_bytes());
        assert!(!may_follow(seen(&head, 1100), 1, seen(&bad, 1100)));
        let mut bad_head = v4(0, 1100);
        bad_head[24..26].copy_from_slice(&1000u16.to_be_bytes());
        assert!(!may_follow(
            seen(&bad_head, 1100),
            1,
            seen(&v4(1, 1100), 1100)
        ));
        // Room for a BTH and an ICRC at least (20 + 8 + 16 bytes), in both.
        assert!(may_follow(seen(&head, 1100), 1, seen(&v4(1, 44), 44)));
        assert!(!may_follow(seen(&head, 1100), 1, seen(&v4(1, 43), 43)));
        assert!(!may_follow(seen(&v4(0, 43), 43), 1, seen(&v4(1, 43), 43)));
    }

    #[test]
    fn a_chain_stops_at_its_segment_and_byte_limits() {
        let head = v4(0, 1100);
        assert!(may_follow(seen(&head, 1100), 63, seen(&v4(63, 1100), 1100)));
        assert!(!may_follow(
            seen(&head, 1100),
            64,
            seen(&v4(64, 1100), 1100)
        ));
        assert!(!may_follow(seen(&head, 1100), 0, seen(&v4(0, 1100), 1100)));
        // A datagram adds its UDP payload: 1100 - 28 bytes.
        let one = v4(1, 1100);
        assert!(may_follow(
            seen(&head, MAX_BYTES - 1072),
            1,
            seen(&one, 1100)
        ));
        assert!(!may_follow(
            seen(&head, MAX_BYTES - 1071),
            1,
            seen(&one, 1100)
        ));
        assert!(!may_follow(seen(&head, usize::MAX), 1, seen(&one, 1100)));
    }
}
