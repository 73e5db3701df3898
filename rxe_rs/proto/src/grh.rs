//! The Global Route Header a UD receive buffer starts with. On RoCEv2 it is the packet's own IP
//! header: the IPv6 header as is, or for IPv4 twenty zero bytes and then the IPv4 header
//! (rdma_rxe's layout, which libibverbs' `ibv_init_ah_from_wc` and the kernel's
//! `ib_init_ah_attr_from_wc` decode: an IPv6 version nibble first, else IPv4 at byte 20).
#![deny(clippy::arithmetic_side_effects)]

use super::icrc::{IPV4_HDR_BYTES, IPV6_HDR_BYTES};

/// Bytes of a GRH.
pub const GRH_BYTES: usize = 40;

/// The GRH for a datagram whose IP header is `ip_header` (20 bytes for IPv4, 40 for IPv6);
/// `None` for anything else.
pub fn grh_of(ip_header: &[u8]) -> Option<[u8; GRH_BYTES]> {
    let mut grh = [0u8; GRH_BYTES];
    match (ip_header.first().map(|b| b >> 4), ip_header.len()) {
        (Some(4), IPV4_HDR_BYTES) => {
            grh[GRH_BYTES - IPV4_HDR_BYTES..].copy_from_slice(ip_header);
        }
        (Some(6), IPV6_HDR_BYTES) => grh.copy_from_slice(ip_header),
        _ => return None,
    }
    Some(grh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_headers_sit_in_the_last_twenty_bytes() {
        let mut v4 = [0x77u8; 20];
        v4[0] = 0x45;
        let grh = grh_of(&v4).unwrap();
        assert_eq!(&grh[..20], &[0u8; 20], "zeroed, so it cannot read as IPv6");
        assert_eq!(&grh[20..], &v4);
    }

    #[test]
    fn ipv6_headers_are_the_grh() {
        let mut v6 = [0x33u8; 40];
        v6[0] = 0x60;
        assert_eq!(grh_of(&v6), Some(v6));
    }

    #[test]
    fn other_headers_have_none() {
        let mut v4 = [0u8; 24];
        v4[0] = 0x46; // with options: not what the receive path passes
        assert_eq!(grh_of(&v4), None);
        assert_eq!(grh_of(&[0x60; 20]), None);
        assert_eq!(grh_of(&[]), None);
    }
}
