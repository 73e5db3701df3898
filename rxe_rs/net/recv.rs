// SPDX-License-Identifier: GPL-2.0
//! The receive side of UDP port 4791.

use crate::{
    counters::Counter,
    device::RxeDevice,
    kext::{
        errno::eaddrinuse,
        ib::{Device, DeviceRef, QpType},
        link::LinkLockGuard,
        netdev::NetDevice,
        netns::{NetNs, PernetData, PernetRegistration, PernetSlot},
        skb::{RxDatagram, SkBuff},
        udp_tunnel::{EncapReceiver, UdpTunnel},
    },
    limits,
    proto::{
        addr::is_multicast_ip,
        packet::{self, Datagram, DropReason},
    },
    qp::{completer, datagram, responder, unreliable},
};
use kernel::{new_mutex, prelude::*, sync::Mutex, types::ARef};

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_V2_UDP_DPORT: u16 = 4791;

/// Takes the datagrams of both sockets (softirq).
pub(crate) struct Receiver;

impl EncapReceiver for Receiver {
    fn receive(mut skb: SkBuff) {
        let Some(ndev) = skb.netdev().map(ARef::<NetDevice>::from) else {
            return;
        };
        // Datagrams arriving on a netdev without an rxe_rs device are not ours to count.
        // One through a VLAN device is for the device on the real one under it.
        let dev = if ndev.is_loopback() {
            None
        } else {
            let Some(dev) = Device::<RxeDevice>::get_by_netdev(ndev.carrier()) else {
                return;
            };
            Some(dev)
        };
        // rxe_rs's own packets for this host (unicast through `lo`, multicast looped back
        // onto the device they left by) go by local delivery: what arrives that way came from
        // a socket of this host, which any local process may open, with a local source
        // address, the peer address of every connection between two ends on this host.
        let from_this_host = dev.is_none() || skb.is_looped_back();
        // Read in place: headers in the skb's head, the payload maybe in page fragments.
        let ip = skb.ip_datagram(packet::HEADER_BYTES_MAX);
        if from_this_host {
            // Dropped, and counted on the device it was aimed at.
            let aimed_at = dev.or_else(|| {
                ip.ok()
                    .and_then(|ip| device_owning_destination(&ndev, ip.head()))
            });
            if let Some(dev) = aimed_at {
                dev.res.counters.inc(Counter::RcvdFromLoopback);
            }
            return;
        }
        if let Some(dev) = dev {
            deliver(&dev, ip, false, None);
        }
    }
}

/// Takes a datagram an rxe_rs device of this host sent to an address of this host or to a
/// multicast group (local delivery, in softirq): it goes to the device on the netdev of the
/// sender's namespace that owns its destination address, or for a group to the sender's own
/// device (where IP would loop a copy back to). It says which QP sent it.
pub(crate) fn receive_local(mut skb: SkBuff) {
    let Some(sender) = skb.netdev().map(ARef::<NetDevice>::from) else {
        return;
    };
    let sender_qpn = skb.local_sender_qpn();
    let ip = skb.ip_datagram(packet::HEADER_BYTES_MAX);
    let mut group = false;
    let dev = ip.as_ref().ok().and_then(|ip| {
        let dst = packet::destination_address(ip.head())?;
        group = is_multicast_ip(dst);
        if group {
            Device::<RxeDevice>::get_by_netdev(sender.carrier())
        } else {
            device_owning_destination(&sender, ip.head())
        }
    });
    if let Some(dev) = dev {
        deliver(&dev, ip, group, Some(sender_qpn));
    }
}

/// The rxe_rs device on the netdev of `ndev`'s namespace that owns the destination address of
/// `ip`, an IP header.
fn device_owning_destination(ndev: &NetDevice, ip: &[u8]) -> Option<DeviceRef<RxeDevice>> {
    let owner = ndev.local_address_owner(packet::destination_address(ip)?)?;
    Device::<RxeDevice>::get_by_netdev(owner.carrier())
}

/// Validates the datagram `ip` for `dev` and hands it to the QP it names. `own_group_copy`:
/// the copy of a datagram this device sent to a group, for its members here (none is no drop).
/// `sender_qpn`: the QP of this host that sent it, by local delivery (`None` from the wire).
fn deliver(
    dev: &RxeDevice,
    ip: Result<RxDatagram<'_>>,
    own_group_copy: bool,
    sender_qpn: Option<u32>,
) {
    let outcome = match ip {
        Err(_) => Counter::RcvdMalformed,
        Ok(ip) => match packet::parse_chunks(ip.chunks(), &dev.res.crc) {
            Err(DropReason::Malformed) => Counter::RcvdMalformed,
            Err(DropReason::BadIcrc) => Counter::RcvdIcrcErr,
            Ok(mut d) => {
                d.sender_qpn = sender_qpn;
                match dispatch(dev, &d, own_group_copy) {
                    Some(counter) => counter,
                    None => return,
                }
            }
        },
    };
    dev.res.counters.inc(outcome);
}

/// Hands a valid datagram to the QP (or the multicast group's QPs) it names; returns the
/// counter it moves (none for our own copy to a group with no member here).
fn dispatch(dev: &RxeDevice, d: &Datagram<'_>, own_group_copy: bool) -> Option<Counter> {
    if d.bth.dest_qp == limits::MULTICAST_QPN {
        // Each member takes it as its own datagram; counted once.
        let mut counter = (!own_group_copy).then_some(Counter::RcvdUnknownQp);
        dev.mcast.for_each_member(&d.dst_gid, |qp| {
            counter = Some(datagram::receive(qp, d));
        });
        return counter;
    }
    Some(match dev.lookup_qp(d.bth.dest_qp) {
        None => Counter::RcvdUnknownQp,
        Some(qp) if qp.qp_type.is_datagram() => datagram::receive(&qp, d),
        Some(qp) if qp.qp_type == QpType::Uc => unreliable::receive(&qp, d),
        Some(qp) if d.info.is_request => responder::handle_request(&qp, d),
        Some(qp) => completer::handle_response(&qp, d),
    })
}

/// The receive sockets on UDP 4791 of one network namespace, IPv4 and (when the kernel has it)
/// IPv6.
struct Sockets {
    _v4: UdpTunnel<Receiver>,
    _v6: Option<UdpTunnel<Receiver>>,
}

impl Sockets {
    /// Binds both in `net`. The port is per namespace: with rdma_rxe loaded it is taken in
    /// the initial one.
    fn bind(net: &NetNs) -> Result<Self> {
        let v4 = UdpTunnel::bind(net, false, ROCE_V2_UDP_DPORT).inspect_err(report)?;
        let v6 = match UdpTunnel::bind(net, true, ROCE_V2_UDP_DPORT) {
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

/// What each network namespace has of ours: its receive sockets, bound when its first device
/// is added (in the initial namespace, when the module loads), released when it goes.
#[pin_data]
pub(crate) struct NetSockets {
    #[pin]
    bound: Mutex<Option<Sockets>>,
}

static NET_SOCKETS: PernetSlot = PernetSlot::new();

impl PernetData for NetSockets {
    const SLOT: &'static PernetSlot = &NET_SOCKETS;

    fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            bound <- new_mutex!(None, "rxe_rs_net_sockets"),
        })
    }
}

/// Keeps every namespace's sockets (while the module is loaded).
pub(crate) type SocketsRegistration = PernetRegistration<NetSockets>;

/// Makes sure `net` has its receive sockets (under the link lock: `newlink`, or loading).
pub(crate) fn bind_sockets(serialised: &LinkLockGuard, net: &NetNs) -> Result {
    let sockets = SocketsRegistration::data(serialised, net).ok_or(ENODEV)?;
    let mut bound = sockets.bound.lock();
    if bound.is_none() {
        *bound = Some(Sockets::bind(net)?);
    }
    Ok(())
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
