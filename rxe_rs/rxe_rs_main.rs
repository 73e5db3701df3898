// SPDX-License-Identifier: GPL-2.0
//! rxe_rs: soft-RoCE (RoCEv2 over UDP 4791) RDMA provider, in Rust.
//!
//! Layers, bottom up:
//! - [`kext`]: the only FFI and `unsafe` code: safe types over the RDMA core, net devices,
//!   UDP tunnel sockets and skbs the `kernel` crate of 6.12 does not cover;
//! - [`proto`] and [`uapi`]: plain `core` Rust shared with the host (protocol engine, unit-tested
//!   with `cargo test`) and with the user-space provider (the user ABI);
//! - the driver: [`device`] (the `ib_device`), [`link`] (`rdma link add`), [`netdev_events`]
//!   (port state follows the netdev), [`recv`] (the UDP 4791 receive path).

mod completer;
mod counters;
mod cq;
mod device;
mod kext;
mod limits;
mod link;
mod mr;
mod netdev_events;
mod pd;
mod qp;
mod recv;
mod requester;
mod responder;
mod sgl;
mod table;
mod transmit;

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
    _sockets: recv::Sockets,
}

impl kernel::Module for RxeRsModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let sockets = recv::Sockets::bind()?;
        let notifier = KBox::pin_init(kext::netdev::NotifierRegistration::register(), GFP_KERNEL)?;
        let link = KBox::pin_init(kext::link::LinkRegistration::register(), GFP_KERNEL)?;
        pr_info!("loaded\n");
        Ok(Self {
            link: Some(link),
            _notifier: notifier,
            _sockets: sockets,
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
