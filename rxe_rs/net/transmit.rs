// SPDX-License-Identifier: GPL-2.0
//! Putting a QP's packets on the wire: the route to its peer is looked up once per burst, each
//! packet is built in place in its skb (headers, payload filled by the caller, ICRC), and a
//! burst's packets go to the IP layer in batches ([`TxBatch`]), which pass the IP layers, the
//! qdisc and the driver's kick once. A packet for this host skips the IP layers: it is queued
//! for our receive path.

use crate::{
    counters::Counter,
    kext::{
        netdev::NetDevice,
        xmit::{Route, TxBatch, TxDatagram},
    },
    limits,
    proto::{
        addr::is_multicast_gid,
        av::{AddressVector, Family},
        wire::{seal, set_ipv4_id, Frame},
    },
    resources::Resources,
    uapi::WcStatus,
};
use kernel::types::ARef;

/// Why a packet did not go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxError {
    /// No route, no memory, or the IP layer dropped it: like a loss on the wire, the
    /// retransmission timer covers it.
    Dropped,
    /// The payload could not be gathered: this completion status ends the WQE.
    Payload(WcStatus),
}

/// The netdev packets from source address `src` leave by: a VLAN device on ours whose address
/// it is (its GID is one of the port's: the RDMA core lists the addresses of VLAN devices on
/// it), tagged by that device as rdma_rxe's are; else ours. Not for an IPv6 link-local source:
/// a VLAN device has the same one as its real device, and the default GID is the real one's.
fn egress(res: &Resources, src: &[u8]) -> ARef<NetDevice> {
    let link_local = src.len() == 16 && src[0] == 0xfe && src[1] & 0xc0 == 0x80;
    if link_local {
        return res.ndev.clone();
    }
    res.ndev
        .local_address_owner(src)
        .filter(|ndev| ndev.is_vlan() && ndev.carrier().is(&res.ndev))
        .unwrap_or_else(|| res.ndev.clone())
}

/// Sends packets of one QP to its peer. What [`Transmitter::send`] took goes to the IP layer
/// in batches: when a packet does not fit the one pending, at [`Transmitter::flush`], and when
/// the transmitter is dropped. So a caller that sends by other means between two packets (an
/// ACK after READ responses) flushes first, to keep the order.
pub(crate) struct Transmitter<'a> {
    res: &'a Resources,
    ndev: ARef<NetDevice>,
    route: Route,
    batch: TxBatch,
    /// To a multicast group: one datagram at a time (multicast is one datagram per WQE, and a
    /// batch to a group is a path no test covers), each with a copy for the group's members
    /// on this host.
    group: bool,
    /// The sending QP: local delivery tells the receiver (which admits only its peer's).
    sender_qpn: u32,
}

impl<'a> Transmitter<'a> {
    /// A transmitter for QP `sender_qpn` along `av`, out of the netdev its source address
    /// belongs to (the device's, or a VLAN device on it); `None` (counted) when there is no
    /// route.
    pub(crate) fn new(res: &'a Resources, av: &AddressVector, sender_qpn: u32) -> Option<Self> {
        let route = match av.families() {
            Some((Family::Ipv4(s), Family::Ipv4(d))) => {
                let ndev = egress(res, &s);
                Route::lookup(&ndev, &s, &d).map(|route| (ndev, route))
            }
            Some((Family::Ipv6(s), Family::Ipv6(d))) => {
                let ndev = egress(res, &s);
                Route::lookup(&ndev, &s, &d).map(|route| (ndev, route))
            }
            _ => None,
        };
        match route {
            Some((ndev, route)) => Some(Self {
                res,
                ndev,
                route,
                batch: TxBatch::new(),
                group: is_multicast_gid(&av.dgid),
                sender_qpn,
            }),
            None => {
                res.counters.inc(Counter::SendErr);
                None
            }
        }
    }

    /// Builds `frame`, lets `fill` write its payload, and sends it, or queues it in the batch
    /// (counted once the batch goes). An error is counted now.
    pub(crate) fn send(
        &mut self,
        frame: &Frame,
        fill: impl FnOnce(&mut [u8]) -> Result<(), WcStatus>,
    ) -> Result<(), TxError> {
        let result = self.build_and_send(frame, fill);
        if result.is_err() {
            self.res.counters.inc(Counter::SendErr);
        }
        result
    }

    /// Sends the pending batch now.
    pub(crate) fn flush(&mut self) {
        if let Some((count, result)) = self.batch.send(&self.route) {
            if result.is_ok() {
                self.res.counters.add(Counter::SentPkts, u64::from(count));
                self.res.counters.inc(Counter::SentBatches);
            } else {
                self.res.counters.add(Counter::SendErr, u64::from(count));
            }
        }
    }

    fn build_and_send(
        &mut self,
        frame: &Frame,
        fill: impl FnOnce(&mut [u8]) -> Result<(), WcStatus>,
    ) -> Result<(), TxError> {
        let len = frame.len().ok_or(TxError::Dropped)?;
        let local = self.route.is_local();
        let joins = !self.group && self.batch.fits(len);
        if !local && !joins {
            self.flush();
        }
        let mut skb = TxDatagram::alloc(&self.ndev, len).map_err(|_| TxError::Dropped)?;
        let buf = skb.bytes();
        let payload = frame.write_headers(buf).ok_or(TxError::Dropped)?;
        fill(&mut buf[payload]).map_err(TxError::Payload)?;
        if !local {
            set_ipv4_id(buf, self.batch.next_index());
        }
        seal(buf, &self.res.crc).ok_or(TxError::Dropped)?;
        if self.group {
            // A group's members on this host get their copy by local delivery, as IP would
            // loop one back: the receive path refuses looped-back datagrams, which any local
            // process can send to a group or a broadcast address.
            self.deliver_group_copy(&mut skb, frame.bth.dest_qp);
        }
        if local {
            // Spread over the CPUs by destination QP, each QP's packets in order on one. By
            // its table index (handed out in sequence), not its random bits: QPs made one
            // after the other, as the two ends of a connection or the QPs of one process
            // usually are, go to different lanes, not to the same one half the time.
            let key = frame.bth.dest_qp & limits::QPN_INDEX_MASK;
            skb.deliver_locally(
                &self.route,
                &self.res.ndev,
                &self.res.local,
                key,
                self.sender_qpn,
            )
            .map_err(|_| TxError::Dropped)?;
            self.res.counters.inc(Counter::SentPkts);
        } else {
            self.batch.push(skb, &self.route);
        }
        Ok(())
    }
}

impl Transmitter<'_> {
    /// Hands a copy of `skb`, a sealed datagram to a multicast group, to this host's receive
    /// path. A copy that cannot be made is lost, as a datagram may be (counted).
    fn deliver_group_copy(&self, skb: &mut TxDatagram, dest_qp: u32) {
        let bytes = skb.bytes();
        let delivered = TxDatagram::alloc(&self.ndev, bytes.len()).and_then(|mut copy| {
            copy.bytes().copy_from_slice(bytes);
            copy.deliver_locally(
                &self.route,
                &self.res.ndev,
                &self.res.local,
                dest_qp & limits::QPN_INDEX_MASK,
                self.sender_qpn,
            )
        });
        if delivered.is_err() {
            self.res.counters.inc(Counter::SendErr);
        }
    }
}

impl Drop for Transmitter<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}
