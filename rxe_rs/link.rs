// SPDX-License-Identifier: GPL-2.0
//! `rdma link add NAME type rxe_rs netdev DEV`.

use crate::{
    device::RxeDevice,
    kext::{
        ib::{self, Device, DeviceConfig, NewDevice},
        link::{LinkDriver, LinkLockGuard},
        netdev::NetDevice,
        netns::NetNs,
        possible_cpus,
    },
    net::{self, recv},
};
use kernel::{c_str, prelude::*, str::CStr};

/// The `rxe_rs` link type.
pub(crate) struct RxeLink;

impl LinkDriver for RxeLink {
    const TYPE: &'static CStr = c_str!("rxe_rs");

    fn newlink(name: &CStr, ndev: &NetDevice) -> Result {
        if ndev.is_vlan() {
            pr_err!(
                "{}: a VLAN device cannot carry RoCE, use its real device\n",
                ndev.name()
            );
            return Err(EPERM);
        }
        let serialised = LinkLockGuard::lock();
        // The netdev's namespace (the asking process's, unless the netdev moved meanwhile) gets
        // its receive sockets with its first device.
        let net = NetNs::of(ndev).ok_or(ENODEV)?;
        net::recv::bind_sockets(&serialised, &net)?;
        if Device::<RxeDevice>::get_by_netdev(ndev).is_some() {
            pr_err!("{}: already has an rxe_rs device\n", ndev.name());
            return Err(EEXIST);
        }
        if ib::name_in_use(name) {
            pr_err!("{}: an RDMA device with this name exists\n", name);
            return Err(EEXIST);
        }

        let config = DeviceConfig {
            node_guid: RxeDevice::guid_for(ndev),
            node_desc: c_str!("rxe_rs"),
            // One per CPU, as rdma_rxe: consumers spread their CQs over them (the vector
            // names no interrupt here; completions are signalled where they are made).
            num_comp_vectors: possible_cpus(),
            owner: &crate::THIS_MODULE,
        };
        let mut new =
            NewDevice::<RxeDevice>::new(RxeDevice::new(ndev, recv::receive_local), &config)?;
        new.set_netdev(ndev)?;
        new.enable_legacy_commands();
        // The core reports a name taken meanwhile by another driver as ENFILE.
        let dev = new
            .register(name)
            .map_err(|e| if e == ENFILE { EEXIST } else { e })?;
        dev.set_netdev_mtu(ndev.mtu());
        RxeDevice::sync_port(&dev, ndev);
        pr_info!(
            "{}: added on {}, ICRC by {}\n",
            dev.name(),
            ndev.name(),
            dev.res.crc.driver_name()
        );
        Ok(())
    }
}
