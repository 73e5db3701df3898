// SPDX-License-Identifier: GPL-2.0
//! What the datapath reaches of its device: the netdev it sends on, the memory regions and
//! windows by key, the address handles by number, the port counters and the ICRC engine. The
//! device and each of its QPs share it, so the engines need nothing from the layer above them:
//! the QP table and the verbs entry points are in the device.

use crate::{
    counters::Counters,
    kext::{crc::KernelCrc32, local_delivery::LocalDelivery, netdev::NetDevice, skb::SkBuff},
    limits,
    table::IndexTable,
    verbs::{
        ah::AhInner,
        mr::{self, KeyedMr, MrInner, PdId},
        mw::{MwInner, RemoteKey},
    },
};
use kernel::{prelude::*, sync::Arc, types::ARef};

/// A device's resources for the datapath.
#[pin_data]
pub(crate) struct Resources {
    /// Memory regions by key index (limit: [`limits::MAX_MR`]).
    #[pin]
    pub(crate) mrs: IndexTable<MrInner>,
    /// Memory windows by key index, after the MRs' (limit: [`limits::MAX_MW`]).
    #[pin]
    pub(crate) mws: IndexTable<MwInner>,
    /// Address handles by number (limit: [`limits::MAX_AH`]).
    #[pin]
    pub(crate) ahs: IndexTable<AhInner>,
    /// Port counters.
    pub(crate) counters: Counters,
    /// Computes and checks the ICRC of every packet.
    pub(crate) crc: KernelCrc32,
    /// Where packets for this host go: straight to the receive path. Before `ndev`, which the
    /// skbs it holds name as their device: fields drop in order.
    pub(crate) local: Arc<LocalDelivery>,
    /// The netdev packets go out on. Ours to hold: the RDMA core's own accessor takes a lock
    /// that must not be taken in softirq, where ACKs and READ responses are sent.
    pub(crate) ndev: ARef<NetDevice>,
}

impl Resources {
    /// Empty tables and zeroed counters for a device on `ndev`; packets it sends to this host
    /// go to `receive` (the receive path, in softirq context).
    pub(crate) fn new(ndev: ARef<NetDevice>, receive: fn(SkBuff)) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            mrs <- IndexTable::new(1, limits::MAX_MR),
            mws <- IndexTable::new(limits::MAX_MR + 1, limits::MAX_MW),
            ahs <- IndexTable::new(1, limits::MAX_AH),
            counters: Counters::new(),
            crc: KernelCrc32::new(),
            local: LocalDelivery::new(receive)?,
            ndev,
        }? Error)
    }

    /// Registers `inner` in the key table and returns its key.
    pub(crate) fn insert_mr(&self, inner: Arc<MrInner>) -> Result<u32> {
        let key_byte = inner.key_byte();
        let index = self.mrs.insert(inner)?;
        Ok(mr::make_key(index, key_byte.into()))
    }

    /// The address handle numbered `num`, if it exists and belongs to PD `pd`.
    pub(crate) fn lookup_ah(&self, num: u32, pd: PdId) -> Option<Arc<AhInner>> {
        self.ahs.get(num).filter(|ah| ah.pd == pd)
    }

    /// The MR of an lkey or rkey, if it is registered (the whole key must match) and, for a
    /// fast-registration MR, valid.
    pub(crate) fn lookup_mr(&self, key: u32) -> Option<KeyedMr> {
        let mr = self.mrs.get(key >> 8).filter(|mr| mr.key_matches(key))?;
        Some(KeyedMr { mr, key })
    }

    /// What an R_Key names: an MR or a memory window, if it names one now.
    pub(crate) fn lookup_rkey(&self, key: u32) -> Option<RemoteKey> {
        if key >> 8 <= limits::MAX_MR {
            return self.lookup_mr(key).map(RemoteKey::Mr);
        }
        let mw = self.mws.get(key >> 8).filter(|mw| mw.key_matches(key))?;
        Some(RemoteKey::Mw { mw, key })
    }

    /// LOCAL_INV of `key` posted on the QP with serial `qp` in PD `pd`, or (`from_peer`) a
    /// peer's SEND WITH INVALIDATE arriving on it: a fast-registration MR or a type 2 window.
    pub(crate) fn invalidate(&self, key: u32, pd: PdId, qp: u64, from_peer: bool) -> Result {
        if key >> 8 <= limits::MAX_MR {
            return self.mrs.get(key >> 8).ok_or(EINVAL)?.invalidate(key, pd);
        }
        self.mws
            .get(key >> 8)
            .ok_or(EINVAL)?
            .invalidate(key, pd, qp, from_peer)
    }
}
