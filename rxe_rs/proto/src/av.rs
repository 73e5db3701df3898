//! Address vectors: where a connected QP sends, as RoCEv2 GIDs, and which IP family that means.
#![deny(clippy::arithmetic_side_effects)]

/// The RoCEv2 path of a QP (or of an address handle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressVector {
    /// Our GID (an IPv6 address or an IPv4-mapped one).
    pub sgid: [u8; 16],
    /// The peer's GID.
    pub dgid: [u8; 16],
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv4 TOS / IPv6 traffic class.
    pub traffic_class: u8,
}

/// IP family of a GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `::ffff:a.b.c.d`.
    Ipv4([u8; 4]),
    /// Anything else.
    Ipv6([u8; 16]),
}

/// Classifies a GID: IPv4-mapped (`::ffff:0:0/96`) GIDs are IPv4 addresses.
pub const fn family(gid: [u8; 16]) -> Family {
    match gid {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d] => Family::Ipv4([a, b, c, d]),
        _ => Family::Ipv6(gid),
    }
}

impl AddressVector {
    /// Both ends in the same family, and which: a v4 source cannot reach a v6 destination.
    pub const fn families(&self) -> Option<(Family, Family)> {
        match (family(self.sgid), family(self.dgid)) {
            (s @ Family::Ipv4(_), d @ Family::Ipv4(_)) => Some((s, d)),
            (s @ Family::Ipv6(_), d @ Family::Ipv6(_)) => Some((s, d)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    #[test]
    fn v4_mapped_gids_are_ipv4() {
        assert_eq!(family(v4([10, 0, 0, 1])), Family::Ipv4([10, 0, 0, 1]));
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        assert_eq!(family(ll), Family::Ipv6(ll));
        let mut compat = v4([1, 2, 3, 4]);
        compat[11] = 0; // ::ff00:..., not v4-mapped
        assert!(matches!(family(compat), Family::Ipv6(_)));
    }

    #[test]
    fn mixed_families_have_no_path() {
        let mut av = AddressVector {
            sgid: v4([10, 0, 0, 1]),
            dgid: v4([10, 0, 0, 2]),
            ..Default::default()
        };
        assert!(matches!(
            av.families(),
            Some((Family::Ipv4(_), Family::Ipv4(_)))
        ));
        av.dgid = [0xfd; 16];
        assert_eq!(av.families(), None);
    }
}
