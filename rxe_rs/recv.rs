// SPDX-License-Identifier: GPL-2.0
//! The receive side of UDP port 4791.

use crate::kext::{
    errno::eaddrinuse,
    skb::SkBuff,
    udp_tunnel::{EncapReceiver, UdpTunnel},
};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_V2_UDP_DPORT: u16 = 4791;

/// Datagrams received and dropped (no QP can take them yet).
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Takes the datagrams of both sockets.
pub(crate) struct Receiver;

impl EncapReceiver for Receiver {
    fn receive(skb: SkBuff) {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        pr_debug!("dropped a {}-byte datagram: no QP\n", skb.len());
    }
}

/// The module's receive sockets on UDP 4791, IPv4 and (when the kernel has it) IPv6.
pub(crate) struct Sockets {
    _v4: UdpTunnel<Receiver>,
    _v6: Option<UdpTunnel<Receiver>>,
}

impl Sockets {
    /// Binds both. The port is per network namespace: with rdma_rxe loaded it is taken.
    pub(crate) fn bind() -> Result<Self> {
        let v4 = UdpTunnel::bind(false, ROCE_V2_UDP_DPORT).inspect_err(report)?;
        let v6 = match UdpTunnel::bind(true, ROCE_V2_UDP_DPORT) {
            Ok(sock) => Some(sock),
            // Booted with ipv6.disable=1: RoCE over IPv4 still works.
            Err(e) if e.to_errno() == -97 => None,
            Err(e) => {
                report(&e);
                return Err(e);
            }
        };
        Ok(Self { _v4: v4, _v6: v6 })
    }
}

fn report(err: &Error) {
    if *err == eaddrinuse() {
        pr_err!("UDP port {} is in use (is rdma_rxe loaded?)\n", ROCE_V2_UDP_DPORT);
    } else {
        pr_err!("cannot bind UDP port {}: {:?}\n", ROCE_V2_UDP_DPORT, err);
    }
}
