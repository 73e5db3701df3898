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
        skb::SkBuff,
        udp_tunnel::{EncapReceiver, UdpTunnel},
    },
    limits,
    proto::packet::{self, DropReason},
    qp::{completer, datagram, responder, unreliable},
};
use kernel::{new_mutex, prelude::*, sync::Mutex, types::ARef};

/// The RoCEv2 UDP destination port (IANA).
pub(crate) const ROCE_V2_UDP_DPORT: u16 = 4791;

/// Takes the datagrams of both sockets (softirq).
pub(crate) struct Receiver;

impl EncapReceiver for Receiver {
    fn receive(mut skb: SkBuff) {
        // The `lo` of the namespace it looped back in, if it did.
        let lo: Option<ARef<NetDevice>> = skb
            .netdev()
            .filter(|ndev| ndev.is_loopback())
            .map(ARef::from);
        let dev = if lo.is_some() {
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
        // Read in place: headers in the skb's head, the payload maybe in page fragments.
        let ip = skb.ip_datagram(packet::HEADER_BYTES_MAX);
        // Between QPs of this host, datagrams come back through `lo`: they belong to the device
        // on the netdev that owns their destination address. Only from a local source: a
        // packet routed in from elsewhere does not arrive on `lo`, and one that claims to must
        // not reach a device through this door.
        let Some(dev) =
            dev.or_else(|| device_of_looped_back(lo.as_deref()?, ip.as_ref().ok()?.head()))
        else {
            return;
        };
        let outcome = match ip {
            Err(_) => Counter::RcvdMalformed,
            Ok(ip) => match packet::parse_chunks(ip.chunks(), &dev.res.crc) {
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

/// The device a datagram that came back through `lo` (of its namespace) is for: the one on the
/// netdev of that namespace owning its destination address, if its source address is local too.
fn device_of_looped_back(lo: &NetDevice, ip: &[u8]) -> Option<DeviceRef<RxeDevice>> {
    lo.local_address_owner(packet::source_address(ip)?)?;
    let ndev = lo.local_address_owner(packet::destination_address(ip)?)?;
    Device::<RxeDevice>::get_by_netdev(ndev.carrier())
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
