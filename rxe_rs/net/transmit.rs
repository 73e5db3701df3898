// SPDX-License-Identifier: GPL-2.0
//! Putting a QP's packets on the wire: the route to its peer is looked up once per burst, each
//! packet is built in place in its skb (headers, payload filled by the caller, ICRC). A packet
//! for this host skips the IP layers: it is queued for our receive path.

use crate::{
    counters::Counter,
    kext::{
        netdev::NetDevice,
        xmit::{Route, TxDatagram},
    },
    proto::{
        av::{AddressVector, Family},
        wire::{seal, Frame},
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

/// Sends packets of one QP to its peer.
pub(crate) struct Transmitter<'a> {
    res: &'a Resources,
    ndev: ARef<NetDevice>,
    route: Route,
}

impl<'a> Transmitter<'a> {
    /// A transmitter along `av` out of the device's netdev; `None` (counted) when there is no
    /// netdev or no route.
    pub(crate) fn new(res: &'a Resources, av: &AddressVector) -> Option<Self> {
        let route = Some(res.ndev.clone()).and_then(|ndev| {
            let route = match av.families()? {
                (Family::Ipv4(s), Family::Ipv4(d)) => Route::lookup(&ndev, &s, &d),
                (Family::Ipv6(s), Family::Ipv6(d)) => Route::lookup(&ndev, &s, &d),
                _ => None,
            }?;
            Some((ndev, route))
        });
        match route {
            Some((ndev, route)) => Some(Self { res, ndev, route }),
            None => {
                res.counters.inc(Counter::SendErr);
                None
            }
        }
    }

    /// Builds `frame`, lets `fill` write its payload, and sends it.
    pub(crate) fn send(
        &self,
        frame: &Frame,
        fill: impl FnOnce(&mut [u8]) -> Result<(), WcStatus>,
    ) -> Result<(), TxError> {
        let result = self.build_and_send(frame, fill);
        self.res.counters.inc(if result.is_ok() {
            Counter::SentPkts
        } else {
            Counter::SendErr
        });
        result
    }

    fn build_and_send(
        &self,
        frame: &Frame,
        fill: impl FnOnce(&mut [u8]) -> Result<(), WcStatus>,
    ) -> Result<(), TxError> {
        let len = frame.len().ok_or(TxError::Dropped)?;
        let mut skb = TxDatagram::alloc(&self.ndev, len).map_err(|_| TxError::Dropped)?;
        let buf = skb.bytes();
        let payload = frame.write_headers(buf).ok_or(TxError::Dropped)?;
        fill(&mut buf[payload]).map_err(TxError::Payload)?;
        seal(buf, &self.res.crc).ok_or(TxError::Dropped)?;
        if self.route.is_local() {
            skb.deliver_locally(&self.route, &self.res.local)
        } else {
            skb.send(self.route.clone())
        }
        .map_err(|_| TxError::Dropped)
    }
}
