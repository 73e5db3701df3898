//! IB path MTUs and how a RoCE port's active MTU follows its netdev's MTU.
#![deny(clippy::arithmetic_side_effects)]

/// The IB MTU enumeration (`enum ib_mtu`): 1 = 256 bytes ... 5 = 4096 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum IbMtu {
    /// 256-byte payload.
    Mtu256 = 1,
    /// 512-byte payload.
    Mtu512 = 2,
    /// 1024-byte payload.
    Mtu1024 = 3,
    /// 2048-byte payload.
    Mtu2048 = 4,
    /// 4096-byte payload.
    Mtu4096 = 5,
}

/// Room kept for Ethernet-side headers (IPv6 40 + UDP 8 + BTH 12 + RETH 16 + ICRC 4), as rdma_rxe
/// does, so a full path-MTU payload plus headers always fits the netdev MTU.
pub const MAX_HDR_LENGTH: u32 = 80;

impl IbMtu {
    /// The payload size in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The enum value for an `enum ib_mtu` number, if valid.
    pub const fn from_enum(value: u32) -> Option<Self> {
        match value {
            1 => Some(Self::Mtu256),
            2 => Some(Self::Mtu512),
            3 => Some(Self::Mtu1024),
            4 => Some(Self::Mtu2048),
            5 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// The active MTU of a port on a netdev with MTU `netdev_mtu`: the largest IB MTU that fits
    /// after [`MAX_HDR_LENGTH`], clamped to 256..=4096.
    pub const fn for_netdev_mtu(netdev_mtu: u32) -> Self {
        let room = netdev_mtu.saturating_sub(MAX_HDR_LENGTH);
        if room >= 4096 {
            Self::Mtu4096
        } else if room >= 2048 {
            Self::Mtu2048
        } else if room >= 1024 {
            Self::Mtu1024
        } else if room >= 512 {
            Self::Mtu512
        } else {
            Self::Mtu256
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IbMtu;

    #[test]
    fn netdev_mtu_maps_like_rdma_rxe() {
        assert_eq!(IbMtu::for_netdev_mtu(1500), IbMtu::Mtu1024);
        assert_eq!(IbMtu::for_netdev_mtu(9000), IbMtu::Mtu4096);
        assert_eq!(IbMtu::for_netdev_mtu(4176), IbMtu::Mtu4096);
        assert_eq!(IbMtu::for_netdev_mtu(4175), IbMtu::Mtu2048);
        assert_eq!(IbMtu::for_netdev_mtu(1104), IbMtu::Mtu1024);
        assert_eq!(IbMtu::for_netdev_mtu(1103), IbMtu::Mtu512);
        // Below the smallest IB MTU the port still reports 256, as rdma_rxe does.
        assert_eq!(IbMtu::for_netdev_mtu(68), IbMtu::Mtu256);
        assert_eq!(IbMtu::for_netdev_mtu(0), IbMtu::Mtu256);
    }

    #[test]
    fn enum_round_trips() {
        for v in 1..=5 {
            let mtu = IbMtu::from_enum(v).unwrap();
            assert_eq!(mtu as u32, v);
            assert_eq!(mtu.bytes(), 128 << v);
        }
        assert_eq!(IbMtu::from_enum(0), None);
        assert_eq!(IbMtu::from_enum(6), None);
    }
}
