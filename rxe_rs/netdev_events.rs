// SPDX-License-Identifier: GPL-2.0
//! Netdev events: the port follows its netdev, and goes away with it.

use crate::{
    device::RxeDevice,
    kext::{
        ib::Device,
        netdev::{NetDevice, NetdevEvent, NetdevNotifier},
    },
};

/// Keeps each device's port in step with its netdev.
pub(crate) struct PortTracker;

impl NetdevNotifier for PortTracker {
    fn event(event: NetdevEvent, ndev: &NetDevice) {
        let Some(dev) = Device::<RxeDevice>::get_by_netdev(ndev) else {
            return;
        };
        match event {
            // Queued: unregistering waits for users, and we are under RTNL.
            NetdevEvent::Unregister => dev.unregister_queued(),
            NetdevEvent::Up | NetdevEvent::Down | NetdevEvent::Change => {
                RxeDevice::sync_port(&dev, ndev)
            }
            NetdevEvent::ChangeMtu => dev.set_netdev_mtu(ndev.mtu()),
        }
    }
}
