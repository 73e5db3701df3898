// SPDX-License-Identifier: GPL-2.0
//! Multicast groups: the UD QPs attached to each group of a device, and the Ethernet filter of
//! its netdev. A datagram to a group (destination QP 0xFFFFFF) reaches every QP attached to the
//! group its destination address names, each checking it as its own.

use crate::{
    kext::{
        lock::{new_spinlock_bh, SpinLockBh},
        netdev::NetDevice,
    },
    limits,
    proto::addr::multicast_mac,
    qp::QpInner,
};
use kernel::{prelude::*, sync::Arc};

struct Group {
    mgid: [u8; 16],
    /// Attached QPs; freed entries are `None` and reused (the kernel crate's vector has no
    /// removal), so a group's memory is bounded by [`limits::MAX_MCAST_QP_ATTACH`].
    qps: KVec<Option<Arc<QpInner>>>,
}

impl Group {
    fn members(&self) -> impl Iterator<Item = &Arc<QpInner>> {
        self.qps.iter().flatten()
    }
}

/// A device's multicast groups.
#[pin_data]
pub(crate) struct McastGroups {
    /// BH-safe: the receive softirq delivers under it. Freed groups are `None` and reused.
    #[pin]
    groups: SpinLockBh<KVec<Option<Group>>>,
}

impl McastGroups {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            groups <- new_spinlock_bh!(KVec::new(), "rxe_rs_mcast"),
        })
    }

    /// Attaches `qp` to group `mgid`; the first QP of a group opens the netdev's Ethernet
    /// filter for it. Attaching twice is no error (as rdma_rxe).
    pub(crate) fn attach(&self, ndev: &NetDevice, mgid: [u8; 16], qp: &Arc<QpInner>) -> Result {
        let mac = multicast_mac(&mgid).ok_or(EINVAL)?;
        let mut guard = self.groups.lock();
        let groups = &mut *guard;
        let index = match groups
            .iter()
            .position(|g| g.as_ref().is_some_and(|g| g.mgid == mgid))
        {
            Some(i) => i,
            None => {
                let live = groups.iter().flatten().count();
                if live >= limits::MAX_MCAST_GRP as usize {
                    return Err(ENOMEM);
                }
                let free = match groups.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        groups.push(None, GFP_ATOMIC)?;
                        groups.len() - 1
                    }
                };
                ndev.mc_add(&mac)?;
                groups[free] = Some(Group {
                    mgid,
                    qps: KVec::new(),
                });
                free
            }
        };
        let Some(group) = groups[index].as_mut() else {
            return Err(EINVAL);
        };
        if group.members().any(|q| Arc::ptr_eq(q, qp)) {
            return Ok(());
        }
        if group.members().count() >= limits::MAX_MCAST_QP_ATTACH as usize {
            return Err(ENOMEM);
        }
        let pushed = match group.qps.iter().position(Option::is_none) {
            Some(i) => {
                group.qps[i] = Some(qp.clone());
                Ok(())
            }
            None => group.qps.push(Some(qp.clone()), GFP_ATOMIC),
        };
        if pushed.is_err() && group.members().next().is_none() {
            groups[index] = None;
            ndev.mc_del(&mac);
        }
        Ok(pushed?)
    }

    /// Detaches `qp` from group `mgid`; the last QP closes the filter. EINVAL if not attached.
    pub(crate) fn detach(&self, ndev: &NetDevice, mgid: [u8; 16], qp: &Arc<QpInner>) -> Result {
        let mut guard = self.groups.lock();
        let groups = &mut *guard;
        let index = groups
            .iter()
            .position(|g| g.as_ref().is_some_and(|g| g.mgid == mgid))
            .ok_or(EINVAL)?;
        let Some(group) = groups[index].as_mut() else {
            return Err(EINVAL);
        };
        let at = group
            .qps
            .iter()
            .position(|q| q.as_ref().is_some_and(|q| Arc::ptr_eq(q, qp)))
            .ok_or(EINVAL)?;
        // Not the last reference (the core refuses to destroy an attached QP): dropping it under
        // the lock frees nothing.
        let _gone = group.qps[at].take();
        if group.members().next().is_none() {
            groups[index] = None;
            if let Some(mac) = multicast_mac(&mgid) {
                ndev.mc_del(&mac);
            }
        }
        Ok(())
    }

    /// Calls `deliver` for each QP attached to group `mgid` (in softirq); returns how many.
    pub(crate) fn for_each_member(
        &self,
        mgid: &[u8; 16],
        mut deliver: impl FnMut(&QpInner),
    ) -> usize {
        let groups = self.groups.lock();
        let Some(group) = groups.iter().flatten().find(|g| &g.mgid == mgid) else {
            return 0;
        };
        let mut n = 0;
        for qp in group.members() {
            deliver(qp);
            n += 1;
        }
        n
    }
}
