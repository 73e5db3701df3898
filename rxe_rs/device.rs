// SPDX-License-Identifier: GPL-2.0
//! The rxe_rs `ib_device`: attributes, and a port whose state follows the netdev.

use crate::{
    counters::{self, Counter},
    kext::{
        ib::{
            self, Access, Ah, AhAttr, AtomicCap, CorePortCaps, Cq, CqFlags, CqInitAttr, Device,
            DeviceAttr, DeviceCaps, KernelCaps, KernelDest, KernelRecvWr, KernelSendWr,
            KernelWcArray, Mr, MrChange, Mw, MwType, Pd, PortAttr, PortCaps, PortImmutable,
            PortPhysState, PortState, Qp, QpAttr, QpAttrMask, QpInitAttr, QpLinks, QpType, Srq,
            SrqAttr, SrqAttrMask, StatDesc,
        },
        lock::{new_spinlock_bh, new_spinlock_irq, SpinLockBh},
        netdev::NetDevice,
        object::Udata,
        skb::SkBuff,
        umem::random_u32,
    },
    limits::{self, PORT},
    proto::{addr::eui64_from_mac, mtu::IbMtu},
    qp::{QpInner, QpPeers, RxeQp},
    resources::Resources,
    table::IndexTable,
    uapi::{self, SendWqe},
    verbs::ah::{AhInner, RxeAh},
    verbs::cq::RxeCq,
    verbs::mcast::McastGroups,
    verbs::mr::{self, Backing, FastRegion, FixedRegion, MrInner, MrKind, RxeMr},
    verbs::mw::{MwInner, RxeMw},
    verbs::pd::RxePd,
    verbs::srq::RxeSrq,
};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::{prelude::*, sync::Arc, types::ARef};

/// Per-device driver state, embedded behind the `ib_device`.
#[pin_data(PinnedDrop)]
pub(crate) struct RxeDevice {
    /// EUI-64 of the netdev's MAC when the device was created (node and system image GUID).
    guid: [u8; 8],
    /// Port ACTIVE (netdev running with carrier) or DOWN. Written under RTNL by the notifier.
    port_active: AtomicBool,
    /// Active `enum ib_mtu`, following the netdev MTU.
    active_mtu: AtomicU32,
    /// Live protection domains (limit: [`limits::MAX_PD`]).
    pds: ObjectCount,
    /// Live completion queues (limit: [`limits::MAX_CQ`]).
    cqs: ObjectCount,
    /// Live shared receive queues (limit: [`limits::MAX_SRQ`]).
    srqs: ObjectCount,
    /// Names PDs, so that MRs and QPs can be matched to theirs (never reused: 64 bits).
    next_pd_id: AtomicU64,
    /// Queue pairs by number (limit: [`limits::MAX_QP`]).
    #[pin]
    qps: IndexTable<QpInner>,
    /// The port's general services QP (QP1, created by ib_mad), outside the table: its
    /// number is not a table index.
    #[pin]
    gsi: SpinLockBh<Option<Arc<QpInner>>>,
    /// Multicast groups and the UD QPs attached to them.
    #[pin]
    pub(crate) mcast: McastGroups,
    /// What the datapath uses: the MRs, the counters, the netdev (each QP holds it too).
    pub(crate) res: Arc<Resources>,
}

#[pinned_drop]
impl PinnedDrop for RxeDevice {
    fn drop(self: Pin<&mut Self>) {
        // Dropped by `dealloc_driver`, in process context, after the core destroyed every QP:
        // nothing sends on this device any more. Packets it sent to this host may still wait
        // for the receive path, whose work item is this module's code.
        self.res.local.drain();
    }
}

/// Counts live objects of one kind against the limit the device advertises.
struct ObjectCount(AtomicU32);

impl ObjectCount {
    const fn new() -> Self {
        Self(AtomicU32::new(0))
    }

    /// Takes one, or fails with ENOMEM at `max` (as rdma_rxe's pools do).
    fn acquire(&self, max: u32) -> Result {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| ENOMEM)
    }

    fn release(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RxeDevice {
    /// The state of a new device on `ndev`; the port starts DOWN until [`Self::sync_port`].
    /// Packets it sends to this host go to `receive`, the receive path.
    pub(crate) fn new(ndev: &NetDevice, receive: fn(SkBuff)) -> impl PinInit<Self, Error> {
        let guid = Self::guid_for(ndev);
        let mtu = IbMtu::for_netdev_mtu(ndev.mtu()) as u32;
        let ndev: ARef<NetDevice> = ndev.into();
        try_pin_init!(Self {
            guid,
            port_active: AtomicBool::new(false),
            active_mtu: AtomicU32::new(mtu),
            pds: ObjectCount::new(),
            cqs: ObjectCount::new(),
            srqs: ObjectCount::new(),
            next_pd_id: AtomicU64::new(1),
            qps <- IndexTable::new(limits::FIRST_QPN, limits::MAX_QP),
            gsi <- new_spinlock_bh!(None, "rxe_rs_gsi"),
            mcast <- McastGroups::new(),
            res: Arc::pin_init(Resources::new(ndev, receive), GFP_KERNEL)?,
        }? Error)
    }

    /// The node GUID of a device on `ndev` (big-endian bytes).
    pub(crate) fn guid_for(ndev: &NetDevice) -> [u8; 8] {
        eui64_from_mac(ndev.mac())
    }

    /// Registers `inner` and returns its key.
    fn insert_mr(&self, inner: MrInner) -> Result<(RxeMr, u32)> {
        let inner = Arc::new(inner, GFP_KERNEL_ACCOUNT)?;
        let fast = matches!(inner.kind, MrKind::Fast(_)).then(|| inner.clone());
        Ok((RxeMr { fast }, self.res.insert_mr(inner)?))
    }

    /// The QP numbered `qpn`, if it exists (the whole number must match, not only its index).
    pub(crate) fn lookup_qp(&self, qpn: u32) -> Option<Arc<QpInner>> {
        if qpn == limits::GSI_QPN {
            return self.gsi.lock().clone();
        }
        self.qps
            .get(qpn & limits::QPN_INDEX_MASK)
            .filter(|qp| qp.qpn == qpn)
    }

    /// Recomputes the port state from `ndev` and reports a change as a port event.
    pub(crate) fn sync_port(dev: &Device<Self>, ndev: &NetDevice) {
        let active = ndev.is_running_with_carrier();
        if dev.port_active.swap(active, Ordering::Relaxed) != active {
            if !active {
                dev.res.counters.inc(Counter::LinkDowned);
            }
            dev.dispatch_port_event(PORT, active);
            pr_info!(
                "{}: port {}\n",
                dev.name(),
                if active { "ACTIVE" } else { "DOWN" }
            );
        }
    }

    /// Follows a netdev MTU change.
    pub(crate) fn set_netdev_mtu(&self, netdev_mtu: u32) {
        self.active_mtu
            .store(IbMtu::for_netdev_mtu(netdev_mtu) as u32, Ordering::Relaxed);
    }
}

#[vtable]
impl ib::Driver for RxeDevice {
    const DRIVER_ID: u32 = uapi::RXE_RS_DRIVER_ID;
    const UVERBS_ABI_VERSION: u32 = uapi::RXE_RS_UVERBS_ABI_VERSION;

    fn query_device(dev: &Device<Self>, attr: &mut DeviceAttr) -> Result {
        attr.vendor_id = limits::VENDOR_ID;
        attr.page_size_cap = limits::PAGE_SIZE_CAP;
        let mut caps = DeviceCaps::RC_RNR_NAK_GEN
            | DeviceCaps::PORT_ACTIVE_EVENT
            | DeviceCaps::SYS_IMAGE_GUID
            | DeviceCaps::MEM_MGT_EXTENSIONS
            | DeviceCaps::MEM_WINDOW
            | DeviceCaps::MEM_WINDOW_TYPE_2B
            | DeviceCaps::ATOMIC_WRITE
            | DeviceCaps::FLUSH_GLOBAL
            | DeviceCaps::SRQ_RESIZE;
        // Only over MRs on persistent memory (device DAX), where the CPU can write its caches
        // back.
        if crate::kext::has_pmem_api() {
            caps = caps | DeviceCaps::FLUSH_PERSISTENT;
        }
        attr.set_caps(
            caps,
            // `rdma link delete` is how users remove a soft device.
            KernelCaps::ALLOW_USER_UNREG,
            AtomicCap::Hca,
        );
        attr.sys_image_guid = u64::from_ne_bytes(dev.guid);
        attr.max_pkeys = limits::PKEY_TABLE_LEN;
        attr.local_ca_ack_delay = limits::LOCAL_CA_ACK_DELAY;
        attr.max_pd = limits::MAX_PD as i32;
        attr.max_cq = limits::MAX_CQ as i32;
        attr.max_cqe = limits::MAX_CQE as i32;
        // Completion timestamps count nanoseconds of CLOCK_MONOTONIC, all 64 bits of them.
        attr.hca_core_clock = crate::uapi::CQ_CLOCK_KHZ;
        attr.timestamp_mask = u64::MAX;
        attr.max_mr = limits::MAX_MR as i32;
        attr.max_mw = limits::MAX_MW as i32;
        attr.max_qp = limits::MAX_QP as i32;
        attr.max_qp_wr = limits::MAX_QP_WR as i32;
        attr.max_srq = limits::MAX_SRQ as i32;
        attr.max_srq_wr = limits::MAX_SRQ_WR as i32;
        attr.max_srq_sge = limits::MAX_SRQ_SGE as i32;
        attr.max_send_sge = limits::MAX_SGE as i32;
        attr.max_recv_sge = limits::MAX_SGE as i32;
        attr.max_sge_rd = limits::MAX_SGE as i32;
        attr.max_qp_rd_atom = limits::MAX_RD_ATOMIC as i32;
        attr.max_qp_init_rd_atom = limits::MAX_RD_ATOMIC as i32;
        attr.max_res_rd_atom = (limits::MAX_RD_ATOMIC * limits::MAX_QP) as i32;
        attr.max_mr_size = limits::MAX_MR_SIZE;
        attr.max_fast_reg_page_list_len = limits::MAX_FAST_REG_PAGES;
        attr.max_ah = limits::MAX_AH as i32;
        attr.max_mcast_grp = limits::MAX_MCAST_GRP as i32;
        attr.max_mcast_qp_attach = limits::MAX_MCAST_QP_ATTACH as i32;
        attr.max_total_mcast_qp_attach =
            (limits::MAX_MCAST_GRP * limits::MAX_MCAST_QP_ATTACH) as i32;
        Ok(())
    }

    fn query_port(dev: &Device<Self>, port: u32, attr: &mut PortAttr) -> Result {
        if port != PORT {
            return Err(EINVAL);
        }
        let ndev = dev.netdev(port).ok_or(ENODEV)?;
        let active = dev.port_active.load(Ordering::Relaxed);
        let (state, phys) = if active {
            (PortState::Active, PortPhysState::LinkUp)
        } else if ndev.is_up() {
            (PortState::Down, PortPhysState::Polling)
        } else {
            (PortState::Down, PortPhysState::Disabled)
        };
        attr.set_state(state, phys);
        attr.max_mtu = IbMtu::Mtu4096 as u32;
        attr.active_mtu = dev.active_mtu.load(Ordering::Relaxed);
        attr.gid_tbl_len = limits::GID_TABLE_LEN;
        attr.port_cap_flags = PortCaps::CM_SUP.raw();
        attr.max_msg_sz = limits::MAX_MSG_SIZE;
        attr.pkey_tbl_len = limits::PKEY_TABLE_LEN;
        attr.max_vl_num = 1;
        let (speed, width) = dev.eth_speed(port)?;
        attr.active_speed = speed;
        attr.active_width = width;
        Ok(())
    }

    fn port_immutable(_dev: &Device<Self>, port: u32, immutable: &mut PortImmutable) -> Result {
        if port != PORT {
            return Err(EINVAL);
        }
        // RoCEv2: the core fills IP-based GIDs from the bound netdev.
        immutable.core_cap_flags = CorePortCaps::ROCE_UDP_ENCAP.raw();
        immutable.pkey_tbl_len = limits::PKEY_TABLE_LEN.into();
        immutable.gid_tbl_len = limits::GID_TABLE_LEN;
        immutable.max_mad_size = ib::MGMT_MAD_SIZE;
        Ok(())
    }

    fn query_pkey(_dev: &Device<Self>, port: u32, index: u16) -> Result<u16> {
        if port != PORT || index >= limits::PKEY_TABLE_LEN {
            return Err(EINVAL);
        }
        Ok(limits::DEFAULT_PKEY)
    }

    const PORT_COUNTERS: &'static [StatDesc] = &counters::NAMES;

    fn read_port_counters(dev: &Device<Self>, _port: u32, values: &mut [u64]) {
        dev.res.counters.read(values);
    }

    type Pd = RxePd;

    fn alloc_pd(dev: &Device<Self>, _udata: &Udata<'_>) -> Result<RxePd> {
        dev.pds.acquire(limits::MAX_PD)?;
        Ok(RxePd {
            id: dev.next_pd_id.fetch_add(1, Ordering::Relaxed),
        })
    }

    fn dealloc_pd(dev: &Device<Self>, _pd: &Pd<Self>) {
        dev.pds.release();
    }

    type Cq = RxeCq;

    fn create_cq(
        dev: &Device<Self>,
        attr: &CqInitAttr,
        udata: &Udata<'_>,
    ) -> Result<(impl PinInit<RxeCq, Error>, u32)> {
        let flags = CqFlags::of(attr);
        if !flags.within(CqFlags::TIMESTAMP_COMPLETION) {
            return Err(crate::kext::errno::eopnotsupp());
        }
        let timestamped = flags.contains(CqFlags::TIMESTAMP_COMPLETION);
        dev.cqs.acquire(limits::MAX_CQ)?;
        RxeCq::new(attr.cqe, udata, timestamped).inspect_err(|_| dev.cqs.release())
    }

    fn destroy_cq(dev: &Device<Self>, _cq: &Cq<Self>) {
        dev.cqs.release();
    }

    fn resize_cq(cq: &Cq<Self>, cqe: u32, udata: &Udata<'_>) -> Result<u32> {
        cq.resize(cqe, udata)
    }

    type Qp = RxeQp;

    fn create_qp(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        init: &mut QpInitAttr,
        links: QpLinks<Self>,
        udata: &Udata<'_>,
    ) -> Result<(impl PinInit<RxeQp, Error>, u32)> {
        let peers = QpPeers {
            res: dev.res.clone(),
            send: links.send,
            recv: links.recv,
            qp: links.qp,
            srq: links.srq,
        };
        if init.qp_type() == Some(QpType::Gsi) {
            // One per port, made by ib_mad, numbered 1.
            if init.port_num != PORT || udata.ucontext().is_some() {
                return Err(EINVAL);
            }
            let inner = Arc::pin_init(
                QpInner::new(limits::GSI_QPN, pd.id, init, peers, udata)?,
                GFP_KERNEL,
            )?;
            let mut gsi = dev.gsi.lock();
            if gsi.is_some() {
                return Err(EINVAL);
            }
            *gsi = Some(inner.clone());
            return Ok((RxeQp { inner, index: None }, limits::GSI_QPN));
        }
        let mut qp = None;
        let mut qpn = 0;
        let mut peers = Some(peers);
        dev.qps.insert_with(|index| {
            // Random bits above the table index: a QP number is not the next one after the
            // last, so a blind sweep of QP numbers does not find every QP.
            qpn = ((random_u32() << limits::QPN_INDEX_BITS) | index) & crate::proto::psn::PSN_MASK;
            let inner = Arc::pin_init(
                QpInner::new(qpn, pd.id, init, peers.take().ok_or(EINVAL)?, udata)?,
                GFP_KERNEL_ACCOUNT,
            )?;
            qp = Some(RxeQp {
                inner: inner.clone(),
                index: Some(index),
            });
            Ok(inner)
        })?;
        Ok((qp.ok_or(EINVAL)?, qpn))
    }

    fn post_recv(_dev: &Device<Self>, qp: &Qp<Self>) -> Result {
        qp.inner.post_recv()
    }

    fn modify_qp(_dev: &Device<Self>, qp: &Qp<Self>, attr: &QpAttr, mask: QpAttrMask) -> Result {
        qp.inner.modify(attr, mask)
    }

    fn query_qp(qp: &Qp<Self>, attr: &mut QpAttr, init: &mut QpInitAttr) -> Result {
        qp.inner.query(attr, init);
        Ok(())
    }

    fn fill_res_qp_entry(qp: &Qp<Self>, out: &mut ib::DriverAttrs<'_>) -> Result {
        qp.inner.report(out)
    }

    fn destroy_qp(dev: &Device<Self>, qp: &Qp<Self>) {
        let _ours = match qp.index {
            Some(index) => dev.qps.remove(index),
            None => dev.gsi.lock().take(),
        };
        qp.inner.detach();
    }

    fn post_send_kernel(_dev: &Device<Self>, qp: &Qp<Self>, wr: &KernelSendWr<'_, Self>) -> Result {
        let mut wqe = SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            flags: wr.flags,
            imm_data: wr.imm_data,
            ..Default::default()
        };
        match &wr.dest {
            KernelDest::Connected => {}
            KernelDest::Rdma { remote_addr, rkey } => {
                wqe.remote_addr = *remote_addr;
                wqe.rkey = *rkey;
            }
            KernelDest::Atomic {
                remote_addr,
                rkey,
                compare_add,
                swap,
            } => {
                wqe.remote_addr = *remote_addr;
                wqe.rkey = *rkey;
                wqe.compare_add = *compare_add;
                wqe.swap = *swap;
            }
            KernelDest::Datagram {
                ah,
                remote_qpn,
                remote_qkey,
            } => {
                wqe.ah_num = ah.num;
                wqe.remote_qpn = *remote_qpn;
                wqe.remote_qkey = *remote_qkey;
            }
            KernelDest::Register {
                key,
                iova,
                len,
                access,
            } => {
                wqe.rkey = *key;
                wqe.remote_addr = *iova;
                wqe.compare_add = *len;
                wqe.swap = u64::from(access.raw_int() as u32);
            }
        }
        if matches!(
            wr.opcode,
            uapi::send_opcode::LOCAL_INV | uapi::send_opcode::SEND_WITH_INV
        ) {
            wqe.imm_data = 0;
            wqe.invalidate_rkey = wr.imm_data;
        }
        qp.inner
            .post_kernel_send(wqe, wr.sges.iter(), wr.sges.len())
    }

    fn post_recv_kernel(_dev: &Device<Self>, qp: &Qp<Self>, wr: &KernelRecvWr<'_>) -> Result {
        qp.inner
            .post_kernel_recv(wr.wr_id, wr.sges.iter(), wr.sges.len())
    }

    fn kick_kernel(_dev: &Device<Self>, qp: &Qp<Self>, send: bool) {
        qp.inner.kick(send);
    }

    fn poll_cq(cq: &Cq<Self>, out: &mut KernelWcArray) -> usize {
        cq.poll(out)
    }

    fn post_send(_dev: &Device<Self>, qp: &Qp<Self>) -> Result {
        qp.inner.post_send()
    }

    type Srq = RxeSrq;

    fn create_srq(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        attr: &mut SrqAttr,
        udata: &Udata<'_>,
    ) -> Result<impl PinInit<RxeSrq, Error>> {
        dev.srqs.acquire(limits::MAX_SRQ)?;
        RxeSrq::new(pd.id, attr, udata).inspect_err(|_| dev.srqs.release())
    }

    fn modify_srq(srq: &Srq<Self>, attr: &SrqAttr, mask: SrqAttrMask, udata: &Udata<'_>) -> Result {
        srq.modify(attr, mask, udata)
    }

    fn query_srq(srq: &Srq<Self>, attr: &mut SrqAttr) -> Result {
        srq.query(attr);
        Ok(())
    }

    fn destroy_srq(dev: &Device<Self>, _srq: &Srq<Self>) {
        dev.srqs.release();
    }

    fn post_srq_recv_kernel(srq: &Srq<Self>, wr: &KernelRecvWr<'_>) -> Result {
        srq.post_kernel(wr.wr_id, wr.sges.iter(), wr.sges.len())
    }

    type Mr = RxeMr;

    fn reg_user_mr(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        start: u64,
        len: u64,
        iova: u64,
        access: Access,
        _udata: &Udata<'_>,
    ) -> Result<(RxeMr, u32)> {
        mr::check_access(access)?;
        mr::check_range(iova, len, limits::MAX_MR_SIZE)?;
        let mut memory = dev.pin_user_memory(start, len, access)?;
        mr::check_persistence(access, &mut memory)?;
        dev.insert_mr(MrInner::new(
            pd.id,
            MrKind::Fixed(FixedRegion {
                key_byte: random_u32() as u8,
                iova,
                len,
                access,
                backing: Backing::User(memory),
            }),
        ))
    }

    fn get_dma_mr(dev: &Device<Self>, pd: &Pd<Self>, access: Access) -> Result<(RxeMr, u32)> {
        mr::check_access(access)?;
        // All of kernel memory is not persistent memory.
        if access.contains(Access::FLUSH_PERSISTENT) {
            return Err(EINVAL);
        }
        dev.insert_mr(MrInner::new(
            pd.id,
            MrKind::Fixed(FixedRegion {
                key_byte: random_u32() as u8,
                iova: 0,
                len: u64::MAX,
                access,
                backing: Backing::Dma,
            }),
        ))
    }

    fn alloc_mr(dev: &Device<Self>, pd: &Pd<Self>, max_pages: u32) -> Result<(RxeMr, u32)> {
        if max_pages == 0 || max_pages > limits::MAX_FAST_REG_PAGES {
            return Err(EINVAL);
        }
        let key_byte = random_u32() as u8;
        let region = KBox::pin_init(
            new_spinlock_irq!(FastRegion::new(key_byte, max_pages)?, "rxe_rs_fast_mr"),
            GFP_KERNEL,
        )?;
        dev.insert_mr(MrInner::new(pd.id, MrKind::Fast(region)))
    }

    fn map_mr_begin(mr: &Mr<Self>, page_size: u32) -> Result {
        mr.fast_region()?.begin_map(page_size)
    }

    fn map_mr_page(mr: &Mr<Self>, addr: u64) -> Result {
        mr.fast_region()?.add_page(addr)
    }

    fn map_mr_end(mr: &Mr<Self>, iova: u64) {
        if let Ok(mut region) = mr.fast_region() {
            region.end_map(iova);
        }
    }

    fn rereg_user_mr(dev: &Device<Self>, mr: &Mr<Self>, change: &MrChange<'_, Self>) -> Result {
        let index = mr.lkey() >> 8;
        let old = dev.res.mrs.get(index).ok_or(EINVAL)?;
        let region = old.fixed().ok_or(EINVAL)?;
        let Backing::User(memory) = &region.backing else {
            return Err(EINVAL);
        };
        let access = change.access.unwrap_or(region.access);
        mr::check_access(access)?;
        let (start, len, iova) =
            change
                .translation
                .unwrap_or((memory.user_address(), region.len, region.iova));
        mr::check_range(iova, len, limits::MAX_MR_SIZE)?;
        let pd = change.pd.map_or(old.pd, |pd| pd.id);
        // Not with windows bound (IBA 10.6.7.2.6: EBUSY), and none binds meanwhile.
        old.begin_dereg()?;
        // Pinned again, with the rights the new access needs; the old pages stay pinned
        // until the old state is dropped.
        let new = dev
            .pin_user_memory(start, len, access)
            .and_then(|mut memory| {
                mr::check_persistence(access, &mut memory)?;
                let kind = MrKind::Fixed(FixedRegion {
                    key_byte: region.key_byte,
                    iova,
                    len,
                    access,
                    backing: Backing::User(memory),
                });
                Ok(Arc::new(MrInner::new(pd, kind), GFP_KERNEL_ACCOUNT)?)
            });
        let new = match new {
            Ok(new) => new,
            Err(e) => {
                old.abort_dereg();
                return Err(e);
            }
        };
        let replaced = dev.res.mrs.replace(index, new.clone());
        drop(old);
        // As in `dereg_mr`: the datapath's references end with its BH-disabled sections.
        crate::kext::rcu::synchronize();
        drop(replaced);
        // Accesses through the old MR may have left cached stores in memory the new one
        // writes through (the same pages, and the same key): written back, now that they are
        // over.
        if let Some(Backing::User(memory)) = new.fixed().map(|r| &r.backing) {
            if memory.is_persistent() {
                memory.write_back_all();
            }
        }
        Ok(())
    }

    fn dereg_mr(dev: &Device<Self>, mr: &Mr<Self>) -> Result {
        let index = mr.lkey() >> 8;
        if let Some(region) = dev.res.mrs.get(index) {
            // EBUSY while windows are bound to it; once this succeeds, none binds.
            region.begin_dereg()?;
        }
        let region = dev.res.mrs.remove(index);
        if region.as_ref().is_some_and(|r| r.free_fast()) {
            // Pins nothing, and no access gets through once it is free: the last reference
            // may go anywhere (nvme-rdma frees a queue's worth of these at each teardown).
            return Ok(());
        }
        // The datapath holds MRs only inside BH-disabled sections (softirq, or under a QP's
        // lock): once those are over, ours is the last reference and the pages are unpinned
        // here, in process context.
        crate::kext::rcu::synchronize();
        drop(region);
        Ok(())
    }

    type Mw = RxeMw;

    fn alloc_mw(dev: &Device<Self>, pd: &Pd<Self>, kind: MwType) -> Result<(RxeMw, u32)> {
        let key_byte = random_u32() as u8;
        let inner = Arc::pin_init(MwInner::new(pd.id, kind, key_byte), GFP_KERNEL_ACCOUNT)?;
        let index = dev.res.mws.insert(inner)?;
        Ok((RxeMw { index }, mr::make_key(index, key_byte.into())))
    }

    fn dealloc_mw(dev: &Device<Self>, mw: &Mw<Self>) {
        if let Some(inner) = dev.res.mws.remove(mw.index) {
            inner.retire();
        }
    }

    type Ah = RxeAh;

    fn create_user_ah(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        attr: &AhAttr,
        udata: &Udata<'_>,
    ) -> Result<RxeAh> {
        let inner = Arc::new(AhInner::new(pd.id, attr)?, GFP_KERNEL_ACCOUNT)?;
        let num = dev.res.ahs.insert(inner)?;
        let resp = uapi::CreateAhResp {
            ah_num: num,
            reserved: 0,
        };
        if let Err(e) = udata.write(&resp) {
            dev.res.ahs.remove(num);
            return Err(e);
        }
        Ok(RxeAh { num })
    }

    fn create_ah(
        dev: &Device<Self>,
        pd: &Pd<Self>,
        attr: &AhAttr,
        sleepable: bool,
    ) -> Result<RxeAh> {
        let inner = AhInner::new(pd.id, attr)?;
        let num = if sleepable {
            dev.res.ahs.insert(Arc::new(inner, GFP_KERNEL)?)?
        } else {
            dev.res.ahs.insert_atomic(Arc::new(inner, GFP_ATOMIC)?)?
        };
        Ok(RxeAh { num })
    }

    fn destroy_ah(dev: &Device<Self>, ah: &Ah<Self>) {
        // A send in flight holds its own reference: nothing to wait for.
        dev.res.ahs.remove(ah.num);
    }

    fn attach_mcast(dev: &Device<Self>, qp: &Qp<Self>, mgid: [u8; 16]) -> Result {
        if qp.inner.qp_type != QpType::Ud {
            return Err(EINVAL);
        }
        dev.mcast.attach(&dev.res.ndev, mgid, &qp.inner)
    }

    fn detach_mcast(dev: &Device<Self>, qp: &Qp<Self>, mgid: [u8; 16]) -> Result {
        dev.mcast.detach(&dev.res.ndev, mgid, &qp.inner)
    }

    fn req_notify_cq(cq: &Cq<Self>, flags: u32) -> Result<i32> {
        Ok(cq.req_notify(flags))
    }
}
