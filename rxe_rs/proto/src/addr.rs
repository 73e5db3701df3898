//! Addressing derived from the netdev: GUIDs.

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

#[cfg(test)]
mod tests {
    use super::eui64_from_mac;

    #[test]
    fn eui64_flips_the_universal_local_bit() {
        assert_eq!(
            eui64_from_mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            [0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
        assert_eq!(eui64_from_mac([0; 6]), [2, 0, 0, 0xff, 0xfe, 0, 0, 0]);
    }
}
