// SPDX-License-Identifier: GPL-2.0
//! The `ib_device_ops` vtable: C callbacks that turn the core's raw pointers into safe types
//! and call the [`Driver`].

use super::*;

/// The C callbacks of `ib_device_ops`, each turning raw pointers into safe types for `T`.
pub(super) struct Adapter<T: Driver>(PhantomData<T>);

impl<T: Driver> Adapter<T> {
    pub(super) fn ops(owner: &'static ThisModule) -> bindings::ib_device_ops {
        bindings::ib_device_ops {
            owner: owner.as_ptr(),
            driver_id: T::DRIVER_ID,
            uverbs_abi_ver: T::UVERBS_ABI_VERSION,
            query_device: Some(Self::query_device),
            query_port: Some(Self::query_port),
            get_port_immutable: Some(Self::get_port_immutable),
            get_link_layer: Some(Self::get_link_layer),
            query_pkey: Some(Self::query_pkey),
            alloc_ucontext: Some(Self::alloc_ucontext),
            dealloc_ucontext: Some(Self::dealloc_ucontext),
            disassociate_ucontext: Some(Self::disassociate_ucontext),
            mmap: Some(mmap::mmap),
            mmap_free: Some(mmap::mmap_free),
            alloc_hw_port_stats: Some(Self::alloc_hw_port_stats),
            get_hw_stats: Some(Self::get_hw_stats),
            alloc_pd: Some(Self::alloc_pd),
            dealloc_pd: Some(Self::dealloc_pd),
            create_cq: Some(Self::create_cq),
            destroy_cq: Some(Self::destroy_cq),
            resize_cq: Some(Self::resize_cq),
            req_notify_cq: Some(Self::req_notify_cq),
            create_qp: Some(Self::create_qp),
            modify_qp: Some(Self::modify_qp),
            query_qp: Some(Self::query_qp),
            fill_res_qp_entry: if T::HAS_FILL_RES_QP_ENTRY {
                Some(Self::fill_res_qp_entry)
            } else {
                None
            },
            destroy_qp: Some(Self::destroy_qp),
            post_send: Some(Self::post_send),
            post_recv: Some(Self::post_recv),
            size_ib_qp: core::mem::size_of::<Qp<T>>(),
            create_srq: Some(Self::create_srq),
            modify_srq: Some(Self::modify_srq),
            query_srq: Some(Self::query_srq),
            destroy_srq: Some(Self::destroy_srq),
            post_srq_recv: Some(Self::post_srq_recv),
            size_ib_srq: core::mem::size_of::<Srq<T>>(),
            reg_user_mr: Some(Self::reg_user_mr),
            get_dma_mr: Some(Self::get_dma_mr),
            alloc_mr: Some(Self::alloc_mr),
            map_mr_sg: Some(Self::map_mr_sg),
            rereg_user_mr: Some(Self::rereg_user_mr),
            dereg_mr: Some(Self::dereg_mr),
            alloc_mw: Some(Self::alloc_mw),
            dealloc_mw: Some(Self::dealloc_mw),
            size_ib_mw: core::mem::size_of::<Mw<T>>(),
            attach_mcast: Some(Self::attach_mcast),
            detach_mcast: Some(Self::detach_mcast),
            create_ah: Some(Self::create_ah),
            create_user_ah: Some(Self::create_user_ah),
            poll_cq: Some(Self::poll_cq),
            destroy_ah: Some(Self::destroy_ah),
            size_ib_ah: core::mem::size_of::<Ah<T>>(),
            size_ib_pd: core::mem::size_of::<Pd<T>>(),
            size_ib_cq: core::mem::size_of::<Cq<T>>(),
            dealloc_driver: Some(Self::dealloc_driver),
            size_ib_ucontext: core::mem::size_of::<bindings::ib_ucontext>(),
            ..Default::default()
        }
    }

    /// # Safety
    ///
    /// Called by the RDMA core with a live device of ours.
    unsafe extern "C" fn query_device(
        ib: *mut bindings::ib_device,
        attr: *mut bindings::ib_device_attr,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: the core passes a live device, a valid attr and a NULL or valid udata.
            let (dev, attr) = unsafe { (Device::<T>::from_raw(ib), &mut *attr) };
            // SAFETY: as above.
            if !udata.is_null() && unsafe { (*udata).inlen != 0 || (*udata).outlen != 0 } {
                // We define no driver-specific query_device data.
                return Err(EINVAL);
            }
            T::query_device(dev, attr)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.query_port`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.query_port` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn query_port(
        ib: *mut bindings::ib_device,
        port: u32,
        attr: *mut bindings::ib_port_attr,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: live device, valid zeroed attr.
            let (dev, attr) = unsafe { (Device::<T>::from_raw(ib), &mut *attr) };
            T::query_port(dev, port, attr)?;
            Ok(0)
        })
    }

    /// `ib_device_ops.get_port_immutable`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_port_immutable` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_port_immutable(
        ib: *mut bindings::ib_device,
        port: u32,
        immutable: *mut bindings::ib_port_immutable,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: live device, valid out-struct.
            let (dev, immutable) = unsafe { (Device::<T>::from_raw(ib), &mut *immutable) };
            T::port_immutable(dev, port, immutable)?;
            Ok(0)
        })
    }

    /// Devices made by [`NewDevice`] are RoCE devices: Ethernet ports. (Without this op the
    /// core derives InfiniBand from the CA node type.)
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_link_layer` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_link_layer(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> bindings::rdma_link_layer {
        bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    /// `ib_device_ops.query_pkey`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.query_pkey` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn query_pkey(
        ib: *mut bindings::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: live device.
            let dev = unsafe { Device::<T>::from_raw(ib) };
            let value = T::query_pkey(dev, port, index)?;
            // SAFETY: valid out-pointer.
            unsafe { pkey.write(value) };
            Ok(0)
        })
    }

    /// `ib_device_ops.alloc_ucontext`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_ucontext` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_ucontext(
        _uctx: *mut bindings::ib_ucontext,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // No per-process state yet: the core's `ib_ucontext` is all there is.
        0
    }

    /// `ib_device_ops.dealloc_ucontext`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_ucontext` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dealloc_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// `ib_device_ops.disassociate_ucontext`: the device is going (`rdma link delete`, the
    /// netdev removed, the module unloaded) while a process still has it open. With this op
    /// the core destroys the process's objects and lets the device go at once (the process
    /// gets `IB_EVENT_DEVICE_FATAL` and EIO); without it, unregistering waits until every such
    /// process has exited, and `ip link del` of the netdev hangs with it. Nothing is left to
    /// undo here: a ring's pages are held by the process's VMA itself (`vm_insert_page`), so
    /// they stay valid memory for it until it unmaps them, and no code of ours runs on them.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.disassociate_ucontext` says: only for devices
    /// made by [`NewDevice`], with a live ucontext.
    unsafe extern "C" fn disassociate_ucontext(_uctx: *mut bindings::ib_ucontext) {}

    /// The device of a core object's `device` field.
    ///
    /// # Safety
    ///
    /// `ib` is a live device of ours.
    unsafe fn dev<'a>(ib: *mut bindings::ib_device) -> &'a Device<T> {
        // SAFETY: per the caller.
        unsafe { Device::<T>::from_raw(ib) }
    }

    /// `ib_device_ops.alloc_hw_port_stats`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_hw_port_stats` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_hw_port_stats(
        _ib: *mut bindings::ib_device,
        _port: u32,
    ) -> *mut bindings::rdma_hw_stats {
        let descs = T::PORT_COUNTERS;
        // SAFETY: `descs` is a 'static array of `rdma_stat_desc` (transparent wrappers); the
        // core frees the returned struct.
        unsafe {
            bindings::rdma_alloc_hw_stats_struct(
                descs.as_ptr().cast(),
                descs.len() as i32,
                bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as _,
            )
        }
    }

    /// `ib_device_ops.get_hw_stats`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_hw_stats` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_hw_stats(
        ib: *mut bindings::ib_device,
        stats: *mut bindings::rdma_hw_stats,
        port: u32,
        _index: kernel::ffi::c_int,
    ) -> kernel::ffi::c_int {
        // SAFETY: a live device and the stats struct from `alloc_hw_port_stats`, whose
        // `value` array has `num_counters` entries; the core holds its lock.
        unsafe {
            let n = (*stats).num_counters as usize;
            let values = (*stats).value.as_mut_slice(n);
            T::read_port_counters(Self::dev(ib), port, values);
            n as i32
        }
    }

    /// `ib_device_ops.alloc_pd`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_pd` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_pd(
        pd: *mut bindings::ib_pd,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: the core hands a fresh PD allocation of `size_ib_pd` on one of our
            // devices, and the verb's udata.
            unsafe {
                let dev = Self::dev((*pd).device);
                // A plain value is its own initialiser.
                CoreObject::init(pd, T::alloc_pd(dev, &Udata::from_raw(udata))?)?;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.dealloc_pd`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_pd` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dealloc_pd(
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys a PD we initialised; nothing uses it afterwards.
        unsafe {
            T::dealloc_pd(Self::dev((*pd).device), Pd::<T>::from_raw(pd));
            Pd::<T>::drop_in_place(pd);
        }
        0
    }

    /// `ib_device_ops.create_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_cq(
        cq: *mut bindings::ib_cq,
        attr: *const bindings::ib_cq_init_attr,
        attrs: *mut bindings::uverbs_attr_bundle,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a fresh CQ allocation of `size_ib_cq` on one of our devices; `attr` is
            // valid; `attrs` is NULL for kernel CQs or the verb's attribute bundle.
            unsafe {
                let dev = Self::dev((*cq).device);
                let udata = Udata::from_raw(bindings::rxe_rs_helper_bundle_udata(attrs));
                let (init, capacity) = T::create_cq(dev, &*attr, &udata)?;
                CoreObject::init(cq, init)?;
                (*cq).cqe = capacity as i32;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.resize_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.resize_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn resize_cq(
        cq: *mut bindings::ib_cq,
        cqe: kernel::ffi::c_int,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            let cqe = u32::try_from(cqe).map_err(|_| EINVAL)?;
            // SAFETY: a live CQ of ours; `udata` is the verb's driver udata (NULL for kernel
            // callers). The core serialises nothing here: the CQ's own lock does.
            unsafe {
                let udata = Udata::from_raw(udata);
                let capacity = T::resize_cq(Cq::<T>::from_raw(cq), cqe, &udata)?;
                (*cq).cqe = capacity as i32;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.destroy_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn destroy_cq(
        cq: *mut bindings::ib_cq,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys a CQ we initialised; no QP uses it any more (usecnt).
        unsafe {
            T::destroy_cq(Self::dev((*cq).device), Cq::<T>::from_raw(cq));
            Cq::<T>::drop_in_place(cq);
        }
        0
    }

    /// `ib_device_ops.create_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_qp(
        qp: *mut bindings::ib_qp,
        init: *mut bindings::ib_qp_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a fresh QP allocation of `size_ib_qp` whose `device` and `pd` the core set;
            // a valid init attr; the verb's udata.
            unsafe {
                let dev = Self::dev((*qp).device);
                let pd = Pd::<T>::from_raw((*qp).pd);
                let udata = Udata::from_raw(udata);
                // SAFETY (the links): both CQs, and the SRQ if any, are of this device, so
                // their data is a `T::Cq` and a `T::Srq` (what `QpLinks<T>` types them with);
                // the core checked them and holds them while the QP lives, and the driver's
                // `destroy_qp` stops its datapath, timer and work for the QP before it returns.
                let links = QpLinks {
                    send: CqRef::new((*init).send_cq)?,
                    recv: CqRef::new((*init).recv_cq)?,
                    qp: QpRef::new(qp)?,
                    srq: SrqRef::new((*init).srq),
                };
                let (init_data, qpn) = T::create_qp(dev, pd, &mut *init, links, &udata)?;
                CoreObject::init(qp, init_data)?;
                (*qp).qp_num = qpn;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.create_srq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_srq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_srq(
        srq: *mut bindings::ib_srq,
        init: *mut bindings::ib_srq_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a fresh SRQ allocation of `size_ib_srq` whose `device` and `pd` the core
            // set; a valid init attr; the verb's udata (NULL for kernel callers).
            unsafe {
                // XRC and tag-matching SRQs need XRC domains and tag matching: not offered.
                if (*init).srq_type != bindings::ib_srq_type_IB_SRQT_BASIC {
                    return Err(crate::kext::errno::eopnotsupp());
                }
                let dev = Self::dev((*srq).device);
                let pd = Pd::<T>::from_raw((*srq).pd);
                let udata = Udata::from_raw(udata);
                let init_data = T::create_srq(dev, pd, &mut (*init).attr, &udata)?;
                CoreObject::init(srq, init_data)?;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.modify_srq`.
    ///
    /// # Safety
    ///
    /// As for `create_srq`.
    unsafe extern "C" fn modify_srq(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
        mask: bindings::ib_srq_attr_mask,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live SRQ of ours, valid attributes, and the verb's driver udata (NULL
            // for kernel callers).
            unsafe {
                let udata = Udata::from_raw(udata);
                T::modify_srq(
                    Srq::<T>::from_raw(srq),
                    &*attr,
                    SrqAttrMask::from_raw(mask),
                    &udata,
                )?
            };
            Ok(0)
        })
    }

    /// `ib_device_ops.query_srq`.
    ///
    /// # Safety
    ///
    /// As for `create_srq`.
    unsafe extern "C" fn query_srq(
        srq: *mut bindings::ib_srq,
        attr: *mut bindings::ib_srq_attr,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live SRQ of ours and a valid out-struct.
            unsafe { T::query_srq(Srq::<T>::from_raw(srq), &mut *attr)? };
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_srq`.
    ///
    /// # Safety
    ///
    /// As for `create_srq`.
    unsafe extern "C" fn destroy_srq(
        srq: *mut bindings::ib_srq,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys an SRQ we initialised once no QP uses it (its `usecnt`):
        // the QPs that did are destroyed, and `destroy_qp` waited out their datapath.
        unsafe {
            T::destroy_srq(Self::dev((*srq).device), Srq::<T>::from_raw(srq));
            Srq::<T>::drop_in_place(srq);
        }
        0
    }

    /// `ib_device_ops.post_srq_recv`: a kernel consumer posts receives to its SRQ.
    ///
    /// # Safety
    ///
    /// As for `create_srq`; `wr` is a valid list and `bad_wr` a valid out-pointer.
    unsafe extern "C" fn post_srq_recv(
        srq: *mut bindings::ib_srq,
        wr: *const bindings::ib_recv_wr,
        bad_wr: *mut *const bindings::ib_recv_wr,
    ) -> kernel::ffi::c_int {
        // SAFETY: a live SRQ of ours.
        if unsafe { !(*srq).uobject.is_null() } {
            // A process's SRQ is posted to through its mapped ring; uverbs' POST_SRQ_RECV
            // hands over WRs naming user memory: refused, as for `post_recv`.
            // SAFETY: a valid out-pointer.
            unsafe { *bad_wr = wr };
            return crate::kext::errno::eopnotsupp().to_errno();
        }
        // SAFETY: a live SRQ of ours and a kernel consumer's list of valid WRs.
        unsafe {
            let q = Srq::<T>::from_raw(srq);
            let mut at = wr;
            while !at.is_null() {
                if let Err(e) =
                    super::wr::decode_recv(at).and_then(|w| T::post_srq_recv_kernel(q, &w))
                {
                    *bad_wr = at;
                    return e.to_errno();
                }
                at = (*at).next;
            }
        }
        0
    }

    /// `ib_device_ops.modify_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.modify_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn modify_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        mask: kernel::ffi::c_int,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live QP of ours and valid attributes.
            unsafe {
                T::modify_qp(
                    Self::dev((*qp).device),
                    Qp::<T>::from_raw(qp),
                    &*attr,
                    QpAttrMask::from_raw(mask),
                )?
            };
            Ok(0)
        })
    }

    /// `ib_device_ops.query_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.query_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn query_qp(
        qp: *mut bindings::ib_qp,
        attr: *mut bindings::ib_qp_attr,
        _mask: kernel::ffi::c_int,
        init: *mut bindings::ib_qp_init_attr,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live QP of ours and valid out-structs.
            unsafe { T::query_qp(Qp::<T>::from_raw(qp), &mut *attr, &mut *init)? };
            Ok(0)
        })
    }

    /// `ib_device_ops.fill_res_qp_entry`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.fill_res_qp_entry` says: only for devices made
    /// by [`NewDevice`], with a live QP and the netlink message it is building.
    unsafe extern "C" fn fill_res_qp_entry(
        msg: *mut bindings::sk_buff,
        qp: *mut bindings::ib_qp,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // The attributes go in the driver's nest of the message (`rdma ... -dd` shows it).
            // SAFETY: the message the core is building.
            let nest = unsafe { bindings::rxe_rs_helper_driver_nest_start(msg) };
            if nest.is_null() {
                return Err(crate::kext::errno::emsgsize());
            }
            let mut out = DriverAttrs {
                msg,
                _msg: PhantomData,
            };
            // SAFETY: a live QP of ours.
            let filled = T::fill_res_qp_entry(unsafe { Qp::<T>::from_raw(qp) }, &mut out);
            // SAFETY: `nest` was opened in `msg` above and nothing else closed it.
            unsafe {
                if filled.is_ok() {
                    bindings::rxe_rs_helper_nest_end(msg, nest);
                } else {
                    bindings::rxe_rs_helper_nest_cancel(msg, nest);
                }
            }
            filled?;
            Ok(0)
        })
    }

    /// `ib_device_ops.destroy_qp`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.destroy_qp` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn destroy_qp(
        qp: *mut bindings::ib_qp,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: the core destroys a QP we initialised. After `T::destroy_qp` took it out of
        // reach of new packets, `synchronize_rcu` waits for receive softirqs still using it
        // (and its `CqRef`s); then nothing uses it.
        unsafe {
            T::destroy_qp(Self::dev((*qp).device), Qp::<T>::from_raw(qp));
            bindings::synchronize_rcu();
            Qp::<T>::drop_in_place(qp);
        }
        0
    }

    /// `ib_device_ops.post_send`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.post_send` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn post_send(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad_wr: *mut *const bindings::ib_send_wr,
    ) -> kernel::ffi::c_int {
        if wr.is_null() {
            // SAFETY: per this function's contract.
            return unsafe { Self::doorbell(qp, T::post_send) };
        }
        // SAFETY: a live QP of ours.
        if unsafe { !(*qp).uobject.is_null() } {
            // A process's QP: uverbs hands over WRs the process built itself (our provider
            // never sends any). Those name user memory, not kernel memory: refused.
            // SAFETY: a valid out-pointer.
            unsafe { *bad_wr = wr };
            return crate::kext::errno::eopnotsupp().to_errno();
        }
        // SAFETY: a live QP of ours and a kernel consumer's list: each WR is valid and of the
        // kind its QP type and opcode say (the verbs contract); `bad_wr` is valid.
        unsafe {
            let dev = Self::dev((*qp).device);
            let q = Qp::<T>::from_raw(qp);
            let mut at = wr;
            let mut ret = 0;
            while !at.is_null() {
                if let Err(e) = super::wr::decode_send::<T>(qp, at)
                    .and_then(|w| T::post_send_kernel(dev, q, &w))
                {
                    *bad_wr = at;
                    ret = e.to_errno();
                    break;
                }
                at = (*at).next;
            }
            T::kick_kernel(dev, q, true);
            ret
        }
    }

    /// `ib_device_ops.post_recv`: the receive doorbell (see [`Driver::post_recv`]).
    ///
    /// # Safety
    ///
    /// As for `post_send`.
    unsafe extern "C" fn post_recv(
        qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad_wr: *mut *const bindings::ib_recv_wr,
    ) -> kernel::ffi::c_int {
        if wr.is_null() {
            // SAFETY: per this function's contract.
            return unsafe { Self::doorbell(qp, T::post_recv) };
        }
        // SAFETY: a live QP of ours.
        if unsafe { !(*qp).uobject.is_null() } {
            // As for `post_send`: only kernel consumers post WR lists.
            // SAFETY: a valid out-pointer.
            unsafe { *bad_wr = wr };
            return crate::kext::errno::eopnotsupp().to_errno();
        }
        // SAFETY: as for `post_send`.
        unsafe {
            let dev = Self::dev((*qp).device);
            let q = Qp::<T>::from_raw(qp);
            let mut at = wr;
            let mut ret = 0;
            while !at.is_null() {
                if let Err(e) =
                    super::wr::decode_recv(at).and_then(|w| T::post_recv_kernel(dev, q, &w))
                {
                    *bad_wr = at;
                    ret = e.to_errno();
                    break;
                }
                at = (*at).next;
            }
            T::kick_kernel(dev, q, false);
            ret
        }
    }

    /// Both doorbells: user space posted into a ring and uverbs delivers an empty list.
    ///
    /// # Safety
    ///
    /// `qp` is a live QP of ours.
    unsafe fn doorbell(
        qp: *mut bindings::ib_qp,
        ring: fn(&Device<T>, &Qp<T>) -> Result,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a live QP of ours.
            unsafe { ring(Self::dev((*qp).device), Qp::<T>::from_raw(qp))? };
            Ok(0)
        })
    }

    /// Runs the driver's `register` and turns its MR (and key) into the `ib_mr` pointer, or
    /// ERR_PTR, the core expects. The `ib_mr` is allocated first: once the driver has
    /// registered (a key in its table, pages pinned), nothing can fail and leak that.
    fn mr_result(register: impl FnOnce() -> Result<(T::Mr, u32)>) -> *mut bindings::ib_mr {
        let result = KBox::<Mr<T>>::new_uninit(GFP_KERNEL_ACCOUNT)
            .map_err(Error::from)
            .and_then(|slot| register().map(|(data, key)| Self::new_mr(slot, data, key)));
        match result {
            Ok(mr) => mr,
            Err(e) => e.to_ptr(),
        }
    }

    /// Fills the driver-owned `ib_mr` around `data` in `slot` and its keys.
    fn new_mr(
        slot: KBox<core::mem::MaybeUninit<Mr<T>>>,
        data: T::Mr,
        key: u32,
    ) -> *mut bindings::ib_mr {
        let mr = KBox::write(
            slot,
            Mr::<T> {
                ib: Opaque::new(Default::default()),
                data,
            },
        );
        let raw = KBox::into_raw(mr).cast::<bindings::ib_mr>();
        // SAFETY: a fresh allocation; the core fills the rest after we return.
        unsafe {
            (*raw).lkey = key;
            (*raw).rkey = key;
        }
        raw
    }

    /// `ib_device_ops.reg_user_mr`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.reg_user_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn reg_user_mr(
        pd: *mut bindings::ib_pd,
        start: u64,
        len: u64,
        iova: u64,
        access: kernel::ffi::c_int,
        udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        Self::mr_result(|| {
            // SAFETY: a live PD of ours and the verb's udata.
            unsafe {
                T::reg_user_mr(
                    Self::dev((*pd).device),
                    Pd::<T>::from_raw(pd),
                    start,
                    len,
                    iova,
                    Access::from_raw(access),
                    &Udata::from_raw(udata),
                )
            }
        })
    }

    /// `ib_device_ops.get_dma_mr`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.get_dma_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn get_dma_mr(
        pd: *mut bindings::ib_pd,
        access: kernel::ffi::c_int,
    ) -> *mut bindings::ib_mr {
        // SAFETY: a live PD of ours.
        Self::mr_result(|| unsafe {
            T::get_dma_mr(
                Self::dev((*pd).device),
                Pd::<T>::from_raw(pd),
                Access::from_raw(access),
            )
        })
    }

    /// `ib_device_ops.alloc_mr`: only `IB_MR_TYPE_MEM_REG` (no SG_GAPS, no integrity).
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn alloc_mr(
        pd: *mut bindings::ib_pd,
        mr_type: bindings::ib_mr_type,
        max_num_sg: u32,
    ) -> *mut bindings::ib_mr {
        if mr_type != bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
            return EINVAL.to_ptr();
        }
        // SAFETY: a live PD of ours.
        Self::mr_result(|| unsafe {
            T::alloc_mr(Self::dev((*pd).device), Pd::<T>::from_raw(pd), max_num_sg)
        })
    }

    /// `ib_device_ops.map_mr_sg`: the pages of `sg` (kernel virtual addresses: virtual DMA)
    /// through the core's `ib_sg_to_pages`, which also sets the MR's `iova` and `length`.
    /// Returns how many entries were mapped.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.map_mr_sg` says: for an MR of ours made by
    /// `alloc_mr` (its `page_size` set by `ib_map_mr_sg`), with a DMA-mapped list of `sg_nents`
    /// entries and a NULL or valid `sg_offset`.
    unsafe extern "C" fn map_mr_sg(
        mr: *mut bindings::ib_mr,
        sg: *mut bindings::scatterlist,
        sg_nents: kernel::ffi::c_int,
        sg_offset: *mut kernel::ffi::c_uint,
    ) -> kernel::ffi::c_int {
        // SAFETY: a live MR of ours (the caller's promise).
        let (ours, page_size) = unsafe { (Mr::<T>::from_raw(mr), (*mr).page_size) };
        if let Err(e) = T::map_mr_begin(ours, page_size) {
            return e.to_errno();
        }
        // SAFETY: as the caller promises; `set_page` only gets this MR back.
        let mapped =
            unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(Self::set_page)) };
        // SAFETY: a live MR; `ib_sg_to_pages` set its `iova`.
        T::map_mr_end(ours, unsafe { (*mr).iova });
        mapped
    }

    /// `ib_sg_to_pages`'s `set_page`: one page of the mapping.
    ///
    /// # Safety
    ///
    /// Called by `ib_sg_to_pages` from [`Self::map_mr_sg`], with its MR.
    unsafe extern "C" fn set_page(mr: *mut bindings::ib_mr, addr: u64) -> kernel::ffi::c_int {
        // SAFETY: the live MR `map_mr_sg` passed.
        match T::map_mr_page(unsafe { Mr::<T>::from_raw(mr) }, addr) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// `ib_device_ops.rereg_user_mr`: always in place (NULL: the same `ib_mr`, same keys).
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.rereg_user_mr` says: for a user MR of ours,
    /// from the process that owns it, with a live PD of ours (the new one, or the MR's).
    #[allow(clippy::too_many_arguments)] // the C signature
    unsafe extern "C" fn rereg_user_mr(
        mr: *mut bindings::ib_mr,
        flags: kernel::ffi::c_int,
        start: u64,
        len: u64,
        iova: u64,
        access: kernel::ffi::c_int,
        pd: *mut bindings::ib_pd,
        _udata: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        let flags = flags as u32;
        let has = |flag: bindings::ib_mr_rereg_flags| flags & flag != 0;
        // SAFETY: as the caller promises.
        let (dev, ours, pd) = unsafe {
            (
                Self::dev((*mr).device),
                Mr::<T>::from_raw(mr),
                Pd::<T>::from_raw(pd),
            )
        };
        let change = MrChange {
            pd: has(bindings::ib_mr_rereg_flags_IB_MR_REREG_PD).then_some(pd),
            access: has(bindings::ib_mr_rereg_flags_IB_MR_REREG_ACCESS)
                .then(|| Access::from_raw(access)),
            translation: has(bindings::ib_mr_rereg_flags_IB_MR_REREG_TRANS)
                .then_some((start, len, iova)),
        };
        match T::rereg_user_mr(dev, ours, &change) {
            Ok(()) => core::ptr::null_mut(),
            Err(e) => e.to_ptr(),
        }
    }

    /// `ib_device_ops.dereg_mr`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dereg_mr` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dereg_mr(
        mr: *mut bindings::ib_mr,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        // SAFETY: an MR made by `new_mr`, whose device the core set.
        if let Err(e) = unsafe { T::dereg_mr(Self::dev((*mr).device), Mr::<T>::from_raw(mr)) } {
            return e.to_errno();
        }
        // SAFETY: made by `KBox::into_raw` in `new_mr`; the core forgets it after this.
        drop(unsafe { KBox::from_raw(mr.cast::<Mr<T>>()) });
        0
    }

    /// `ib_device_ops.alloc_mw`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.alloc_mw` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with a fresh window
    /// allocation of `size_ib_mw` whose `device`, `pd` and `type` it set.
    unsafe extern "C" fn alloc_mw(
        mw: *mut bindings::ib_mw,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: as the caller promises: a live PD of ours, fields the core set.
            unsafe {
                let kind = MwType::from_raw((*mw).type_).ok_or(EINVAL)?;
                let dev = Self::dev((*mw).device);
                let (data, rkey) = T::alloc_mw(dev, Pd::<T>::from_raw((*mw).pd), kind)?;
                // A plain value is its own initialiser.
                CoreObject::init(mw, data)?;
                (*mw).rkey = rkey;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.dealloc_mw`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_mw` says: for a window of ours that
    /// `alloc_mw` initialised; nothing uses it afterwards.
    unsafe extern "C" fn dealloc_mw(mw: *mut bindings::ib_mw) -> kernel::ffi::c_int {
        // SAFETY: as the caller promises.
        unsafe {
            T::dealloc_mw(Self::dev((*mw).device), Mw::<T>::from_raw(mw));
            Mw::<T>::drop_in_place(mw);
        }
        0
    }

    /// `ib_device_ops.create_user_ah`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_user_ah` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_user_ah(
        ah: *mut bindings::ib_ah,
        init: *mut bindings::rdma_ah_init_attr,
        udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: a fresh AH allocation of `size_ib_ah` whose `device` and `pd` the core
            // set; `init` and its `ah_attr` are valid for the call (the core holds the GRH's
            // `sgid_attr`); the verb's udata.
            unsafe {
                let dev = Self::dev((*ah).device);
                let pd = Pd::<T>::from_raw((*ah).pd);
                let attr = (*init).ah_attr.as_ref().ok_or(EINVAL)?;
                let value = T::create_user_ah(dev, pd, attr, &Udata::from_raw(udata))?;
                // A plain value is its own initialiser.
                CoreObject::init(ah, value)?;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.create_ah`: a kernel consumer's AH.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.create_ah` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn create_ah(
        ah: *mut bindings::ib_ah,
        init: *mut bindings::rdma_ah_init_attr,
        _udata: *mut bindings::ib_udata,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: as `create_user_ah`, for a kernel caller.
            unsafe {
                let dev = Self::dev((*ah).device);
                let pd = Pd::<T>::from_raw((*ah).pd);
                let attr = (*init).ah_attr.as_ref().ok_or(EINVAL)?;
                let sleepable =
                    (*init).flags & bindings::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE != 0;
                CoreObject::init(ah, T::create_ah(dev, pd, attr, sleepable)?)?;
            }
            Ok(0)
        })
    }

    /// `ib_device_ops.attach_mcast`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.attach_mcast` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn attach_mcast(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        _lid: u16,
    ) -> kernel::ffi::c_int {
        // SAFETY: per this function's contract.
        unsafe { Self::mcast(qp, gid, T::attach_mcast) }
    }

    /// `ib_device_ops.detach_mcast`.
    ///
    /// # Safety
    ///
    /// As for `attach_mcast`.
    unsafe extern "C" fn detach_mcast(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        _lid: u16,
    ) -> kernel::ffi::c_int {
        // SAFETY: per this function's contract.
        unsafe { Self::mcast(qp, gid, T::detach_mcast) }
    }

    /// Both multicast verbs: `op` on the QP and the group.
    ///
    /// # Safety
    ///
    /// `qp` is a live QP of ours and `gid` a valid GID.
    unsafe fn mcast(
        qp: *mut bindings::ib_qp,
        gid: *mut bindings::ib_gid,
        op: fn(&Device<T>, &Qp<T>, [u8; 16]) -> Result,
    ) -> kernel::ffi::c_int {
        from_result(|| {
            // SAFETY: as the caller promises; a GID is 16 plain bytes.
            unsafe { op(Self::dev((*qp).device), Qp::<T>::from_raw(qp), (*gid).raw)? };
            Ok(0)
        })
    }

    /// `ib_device_ops.poll_cq`: a kernel consumer polls.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.poll_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn poll_cq(
        cq: *mut bindings::ib_cq,
        num_entries: kernel::ffi::c_int,
        wc: *mut bindings::ib_wc,
    ) -> kernel::ffi::c_int {
        let Ok(n) = usize::try_from(num_entries) else {
            return EINVAL.to_errno();
        };
        if n == 0 || wc.is_null() {
            return 0;
        }
        // INVARIANT: the caller's array of `n` entries, which we only write.
        let mut out = KernelWcArray { wc, len: n };
        // SAFETY: a live CQ of ours.
        unsafe { T::poll_cq(Cq::<T>::from_raw(cq), &mut out) as kernel::ffi::c_int }
    }

    /// `ib_device_ops.destroy_ah`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.destroy_ah` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn destroy_ah(ah: *mut bindings::ib_ah, _flags: u32) -> kernel::ffi::c_int {
        // SAFETY: the core destroys an AH we initialised; nothing uses it afterwards.
        unsafe {
            T::destroy_ah(Self::dev((*ah).device), Ah::<T>::from_raw(ah));
            Ah::<T>::drop_in_place(ah);
        }
        0
    }

    /// `ib_device_ops.req_notify_cq`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.req_notify_cq` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn req_notify_cq(
        cq: *mut bindings::ib_cq,
        flags: bindings::ib_cq_notify_flags,
    ) -> kernel::ffi::c_int {
        // SAFETY: a live CQ of ours.
        match T::req_notify_cq(unsafe { Cq::<T>::from_raw(cq) }, flags) {
            Ok(n) => n,
            Err(e) => e.to_errno(),
        }
    }

    /// `ib_device_ops.dealloc_driver`.
    ///
    /// # Safety
    ///
    /// The RDMA core calls it as `ib_device_ops.dealloc_driver` says: only for devices made by
    /// [`NewDevice`] (so `T` sits behind every object it passes), with live objects and valid
    /// pointers.
    unsafe extern "C" fn dealloc_driver(ib: *mut bindings::ib_device) {
        // SAFETY: the core's last callback for this device: drop `T` in place, exactly once
        // (the invariant of `Device` ends here; the core frees the memory afterwards).
        unsafe {
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*ib.cast::<Device<T>>()).data))
        };
    }
}
