// SPDX-License-Identifier: GPL-2.0
//! The receive side of UDP port 4791.

use crate::{
    counters::Counter,
    device::RxeDevice,
    kext::{
        errno::eaddrinuse,
        ib::{Device, DeviceRef, QpType},
        netdev::NetDevice,
        skb::SkBuff,
        udp_tunnel::{EncapReceiver, UdpTunnel},
    },
    limits,
    proto::packet::{self, DropReason},
    qp::{completer, datagram, responder, unreliable},
};
use kernel::prelude::*;

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_V2_UDP_DPORT: u16 = 4791;

/// Takes the datagrams of both sockets (softirq).
pub(crate) struct Receiver;

impl EncapReceiver for Receiver {
    fn receive(mut skb: SkBuff) {
        let looped_back = skb.netdev().is_some_and(NetDevice::is_loopback);
        let dev = if looped_back {
            None
        } else {
            // Datagrams arriving on a netdev without an rxe_rs device are not ours to count.
            // One through a VLAN device is for the device on the real one under it.
            let Some(dev) = skb
                .netdev()
                .and_then(|ndev| Device::<RxeDevice>::get_by_netdev(ndev.carrier()))
            else {
                return;
            };
            Some(dev)
        };
        let ip = skb.ip_datagram();
        // Between QPs of this host, datagrams come back through `lo`: they belong to the device
        // on the netdev that owns their destination address. Only from a local source: a
        // packet routed in from elsewhere does not arrive on `lo`, and one that claims to must
        // not reach a device through this door.
        let Some(dev) = dev.or_else(|| ip.as_ref().ok().and_then(|ip| device_of_looped_back(ip)))
        else {
            return;
        };
        let outcome = match ip {
            Err(_) => Counter::RcvdMalformed,
            Ok(ip) => match packet::parse(ip, &dev.res.crc) {
                Err(DropReason::Malformed) => Counter::RcvdMalformed,
                Err(DropReason::BadIcrc) => Counter::RcvdIcrcErr,
                Ok(d) if d.bth.dest_qp == limits::MULTICAST_QPN => {
                    // Each member takes it as its own datagram; counted once.
                    let mut counter = Counter::RcvdUnknownQp;
                    dev.mcast.for_each_member(&d.dst_gid, |qp| {
                        counter = datagram::receive(qp, &d);
                    });
                    counter
                }
                Ok(d) => match dev.lookup_qp(d.bth.dest_qp) {
                    None => Counter::RcvdUnknownQp,
                    Some(qp) if qp.qp_type.is_datagram() => datagram::receive(&qp, &d),
                    Some(qp) if qp.qp_type == QpType::Uc => unreliable::receive(&qp, &d),
                    Some(qp) if d.info.is_request => responder::handle_request(&qp, &d),
                    Some(qp) => completer::handle_response(&qp, &d),
                },
            },
        };
        dev.res.counters.inc(outcome);
    }
}

/// The device a datagram that came back through `lo` is for: the one on the netdev owning its
/// destination address, if its source address is local too.
fn device_of_looped_back(ip: &[u8]) -> Option<DeviceRef<RxeDevice>> {
    NetDevice::with_local_address(packet::source_address(ip)?)?;
    let ndev = NetDevice::with_local_address(packet::destination_address(ip)?)?;
    Device::<RxeDevice>::get_by_netdev(ndev.carrier())
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
        pr_err!(
            "UDP port {} is in use (is rdma_rxe loaded?)\n",
            ROCE_V2_UDP_DPORT
        );
    } else {
        pr_err!("cannot bind UDP port {}: {:?}\n", ROCE_V2_UDP_DPORT, err);
    }
}
