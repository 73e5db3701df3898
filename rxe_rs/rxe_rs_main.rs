// SPDX-License-Identifier: GPL-2.0
//! rxe_rs: soft-RoCE (RoCEv2 over UDP 4791) RDMA provider, in Rust.
//!
//! Layers, bottom up (Documentation/design.md draws them):
//! - [`kext`]: the only FFI and `unsafe` code: safe types over the RDMA core, net devices,
//!   UDP tunnel sockets and skbs the `kernel` crate of 6.12 does not cover;
//! - [`proto`] and [`uapi`]: plain `core` Rust shared with the host (protocol engine, unit-tested
//!   with `cargo test`) and with the user-space provider (the user ABI);
//! - [`counters`], [`limits`], [`table`]: what every part of the driver counts, caps and indexes;
//! - [`verbs`]: PDs, MRs (and the copy through them), CQs; [`resources`]: what the datapath
//!   reaches of its device (the MRs by key, the counters, the netdev);
//! - [`qp`]: the queue pair, its state machine and its three engines (requester, completer,
//!   responder); [`net`]: the receive path (UDP 4791) and transmission;
//! - [`device`] (the `ib_device`), [`link`] (`rdma link add`), [`netdev_events`] (port state
//!   follows the netdev).

mod counters;
mod device;
mod kext;
mod limits;
mod link;
mod net;
mod netdev_events;
mod qp;
mod resources;
mod table;
mod verbs;

#[path = "proto/src/lib.rs"]
#[allow(dead_code, unreachable_pub, unused_imports)] // shared with the host and the provider
mod proto;

#[path = "../uapi/src/lib.rs"]
#[allow(dead_code, unreachable_pub, unused_imports)] // shared with the host and the provider
mod uapi;

use kernel::prelude::*;

module! {
    type: RxeRsModule,
    name: "rxe_rs",
    author: "rxe_rs developers",
    description: "Soft-RoCE (RoCEv2) RDMA provider written in Rust",
    license: "GPL",
    alias: ["rdma-link-rxe_rs"],
}

/// The module: what it registers, in the order it is torn down.
struct RxeRsModule {
    /// `Some` until drop takes it first, so no new device appears while the rest goes.
    link: Option<Pin<KBox<kext::link::LinkRegistration<link::RxeLink>>>>,
    _notifier: Pin<KBox<kext::netdev::NotifierRegistration<netdev_events::PortTracker>>>,
    /// The receive sockets of every network namespace (after the devices: they use them).
    _sockets: Pin<KBox<net::recv::SocketsRegistration>>,
    /// Last: the devices' QPs queue work on them until the devices are gone.
    _queues: kext::work::DatapathQueues,
}

impl kernel::Module for RxeRsModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let queues = kext::work::DatapathQueues::new()?;
        let sockets = KBox::pin_init(net::recv::SocketsRegistration::register(), GFP_KERNEL)?;
        // The initial namespace's now, so that a port taken (by rdma_rxe) fails the load.
        net::recv::bind_sockets(
            &kext::link::LinkLockGuard::lock(),
            &kext::netns::NetNs::init(),
        )?;
        let notifier = KBox::pin_init(kext::netdev::NotifierRegistration::register(), GFP_KERNEL)?;
        let link = KBox::pin_init(kext::link::LinkRegistration::register(), GFP_KERNEL)?;
        pr_info!("loaded\n");
        Ok(Self {
            link: Some(link),
            _notifier: notifier,
            _sockets: sockets,
            _queues: queues,
        })
    }
}

impl Drop for RxeRsModule {
    fn drop(&mut self) {
        // No new devices, then remove the existing ones (waits for their deallocation), and only
        // then let the notifier and the sockets go.
        drop(self.link.take());
        kext::ib::unregister_all::<device::RxeDevice>();
        pr_info!("unloaded\n");
    }
}
