//! Addressing derived from the netdev: GUIDs, and the Ethernet address of a multicast group.
#![deny(clippy::arithmetic_side_effects)]

/// The modified EUI-64 of a 48-bit MAC (RFC 4291 appendix A): `FF:FE` in the middle and the
/// universal/local bit flipped. rdma_rxe uses it as node GUID and system image GUID.
pub const fn eui64_from_mac(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ]
}

/// The multicast GID of a RoCEv2 group: an IPv4 group `::ffff:224.0.0.0/100` or an IPv6 one
/// `ff00::/8`, else `None`.
pub const fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    multicast_mac(gid).is_some()
}

/// Whether `ip`, an IPv4 or IPv6 address as an IP header carries it (4 or 16 bytes), is a
/// multicast group's (224.0.0.0/4, ff00::/8).
pub const fn is_multicast_ip(ip: &[u8]) -> bool {
    match ip {
        [a, _, _, _] => *a & 0xf0 == 0xe0,
        [a, ..] if ip.len() == 16 => *a == 0xff,
        _ => false,
    }
}

/// The Ethernet address a RoCEv2 multicast group's packets arrive on: `01:00:5e` and the low
/// 23 bits of an IPv4 group (RFC 1112), `33:33` and the low 32 bits of an IPv6 one (RFC 2464).
pub const fn multicast_mac(gid: &[u8; 16]) -> Option<[u8; 6]> {
    match *gid {
        [0xff, _, _, _, _, _, _, _, _, _, _, _, a, b, c, d] => Some([0x33, 0x33, a, b, c, d]),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d] if a & 0xf0 == 0xe0 => {
            Some([0x01, 0x00, 0x5e, b & 0x7f, c, d])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{eui64_from_mac, is_multicast_ip, multicast_mac};

    #[test]
    fn multicast_ip_addresses_by_family() {
        assert!(is_multicast_ip(&[239, 1, 2, 3]));
        assert!(is_multicast_ip(&[224, 0, 0, 1]));
        assert!(!is_multicast_ip(&[10, 11, 0, 1]));
        assert!(
            !is_multicast_ip(&[255, 255, 255, 255]),
            "broadcast is not a group"
        );
        let mut v6 = [0u8; 16];
        v6[0] = 0xff;
        assert!(is_multicast_ip(&v6));
        v6[0] = 0xfe;
        assert!(!is_multicast_ip(&v6));
        assert!(!is_multicast_ip(&[0xff; 5]), "neither family");
        assert!(!is_multicast_ip(&[]));
    }

    #[test]
    fn multicast_groups_map_to_their_ethernet_addresses() {
        let mut v4 = [0u8; 16];
        v4[10] = 0xff;
        v4[11] = 0xff;
        v4[12..].copy_from_slice(&[239, 129, 2, 3]);
        assert_eq!(
            multicast_mac(&v4),
            Some([1, 0, 0x5e, 1, 2, 3]),
            "23 low bits"
        );
        v4[12] = 10;
        assert_eq!(multicast_mac(&v4), None, "a unicast IPv4 address");
        let mut v6 = [0u8; 16];
        v6[0] = 0xff;
        v6[1] = 0x12;
        v6[12..].copy_from_slice(&[9, 8, 7, 6]);
        assert_eq!(multicast_mac(&v6), Some([0x33, 0x33, 9, 8, 7, 6]));
        v6[0] = 0xfe;
        assert_eq!(multicast_mac(&v6), None, "link-local unicast");
    }

    #[test]
    fn eui64_flips_the_universal_local_bit() {
        assert_eq!(
            eui64_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
        assert_eq!(eui64_from_mac([0; 6]), [2, 0, 0, 0xff, 0xfe, 0, 0, 0]);
    }
}
