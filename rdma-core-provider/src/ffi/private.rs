//! libibverbs' private provider ABI (`IBVERBS_PRIVATE_34`, rdma-core 44 as in Debian 12).
//!
//! `infiniband/driver.h` is not installed by Debian, so these declarations are written from the
//! facts of its layout (names, order, sizes, offsets). The layouts are pinned at compile time
//! below and again by the unit tests, against the sizes measured on Debian 12: one slot off in
//! `verbs_context_ops` would silently call the wrong function.
#![allow(non_camel_case_types)]

use super::verbs::*;
use core::ffi::{c_char, c_int, c_void};

/// `enum verbs_match_kind`.
pub const VERBS_MATCH_SENTINEL: u8 = 0;
/// Match on the kernel driver id (`RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID`).
pub const VERBS_MATCH_DRIVER_ID: u8 = 3;

/// `struct verbs_match_ent`.
#[repr(C)]
pub struct verbs_match_ent {
    pub driver_data: *const c_void,
    /// Union { modalias: *const c_char, driver_id: u64 }; we only use driver ids.
    pub driver_id: u64,
    pub vendor: u16,
    pub device: u16,
    pub kind: u8,
}

/// `struct verbs_sysfs_dev` (only the fields we read are named).
#[repr(C)]
pub struct verbs_sysfs_dev {
    _head: [u8; 968],
    pub abi_ver: u32,
    _tail: [u8; 992 - 972],
}

/// `struct verbs_device_ops`.
#[repr(C)]
pub struct verbs_device_ops {
    pub name: *const c_char,
    pub match_min_abi_version: u32,
    pub match_max_abi_version: u32,
    pub match_table: *const verbs_match_ent,
    pub static_providers: *const *const verbs_device_ops,
    pub match_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> bool>,
    pub alloc_context:
        Option<unsafe extern "C" fn(*mut ibv_device, c_int, *mut c_void) -> *mut verbs_context>,
    pub import_context: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut verbs_context>,
    pub alloc_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> *mut verbs_device>,
    pub uninit_device: Option<unsafe extern "C" fn(*mut verbs_device)>,
}

/// `struct verbs_device`: libibverbs fills it; the provider allocates it (with its own data
/// after it) in `alloc_device` and frees it in `uninit_device`.
#[repr(C)]
pub struct verbs_device {
    pub device: ibv_device,
    pub ops: *const verbs_device_ops,
    pub refcount: c_int,
    pub entry: [*mut c_void; 2],
    pub sysfs: *mut verbs_sysfs_dev,
    pub core_support: u64,
}

/// An op slot whose signature we do not use; `None` keeps libibverbs' EOPNOTSUPP stub.
pub type UnusedOp = Option<unsafe extern "C" fn()>;

/// `struct verbs_context_ops`: 76 ops in alphabetical order. Typed where we implement them.
#[repr(C)]
#[derive(Default)]
pub struct verbs_context_ops {
    pub advise_mr: UnusedOp,
    pub alloc_dm: UnusedOp,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
    pub alloc_null_mr: UnusedOp,
    pub alloc_parent_domain: UnusedOp,
    pub alloc_pd: Option<unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd>,
    pub alloc_td: UnusedOp,
    pub async_event: UnusedOp,
    pub attach_counters_point_flow: UnusedOp,
    pub attach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    pub close_xrcd: UnusedOp,
    pub cq_event: UnusedOp,
    pub create_ah: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah>,
    pub create_counters: UnusedOp,
    pub create_cq: Option<
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    >,
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    pub create_flow: UnusedOp,
    pub create_flow_action_esp: UnusedOp,
    pub create_qp: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp>,
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub create_rwq_ind_table: UnusedOp,
    pub create_srq:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq>,
    pub create_srq_ex: UnusedOp,
    pub create_wq: UnusedOp,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub dealloc_pd: Option<unsafe extern "C" fn(*mut ibv_pd) -> c_int>,
    pub dealloc_td: UnusedOp,
    pub dereg_mr: Option<unsafe extern "C" fn(*mut verbs_mr) -> c_int>,
    pub destroy_ah: Option<unsafe extern "C" fn(*mut ibv_ah) -> c_int>,
    pub destroy_counters: UnusedOp,
    pub destroy_cq: Option<unsafe extern "C" fn(*mut ibv_cq) -> c_int>,
    pub destroy_flow: UnusedOp,
    pub destroy_flow_action: UnusedOp,
    pub destroy_qp: Option<unsafe extern "C" fn(*mut ibv_qp) -> c_int>,
    pub destroy_rwq_ind_table: UnusedOp,
    pub destroy_srq: Option<unsafe extern "C" fn(*mut ibv_srq) -> c_int>,
    pub destroy_wq: UnusedOp,
    pub detach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    pub free_context: Option<unsafe extern "C" fn(*mut ibv_context)>,
    pub free_dm: UnusedOp,
    pub get_srq_num: UnusedOp,
    pub import_dm: UnusedOp,
    pub import_mr: UnusedOp,
    pub import_pd: UnusedOp,
    pub modify_cq: UnusedOp,
    pub modify_flow_action_esp: UnusedOp,
    pub modify_qp: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int>,
    pub modify_qp_rate_limit: UnusedOp,
    pub modify_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int>,
    pub modify_wq: UnusedOp,
    pub open_qp: UnusedOp,
    pub open_xrcd: UnusedOp,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_srq_ops: UnusedOp,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    pub query_ece: UnusedOp,
    pub query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int>,
    pub query_qp: Option<
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    >,
    pub query_qp_data_in_order: UnusedOp,
    pub query_rt_values:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    pub query_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int>,
    pub read_counters: UnusedOp,
    pub reg_dm_mr: UnusedOp,
    pub reg_dmabuf_mr: UnusedOp,
    pub reg_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, c_int) -> *mut ibv_mr>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub rereg_mr: Option<
        unsafe extern "C" fn(*mut verbs_mr, c_int, *mut ibv_pd, *mut c_void, usize, c_int) -> c_int,
    >,
    pub resize_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub set_ece: UnusedOp,
    pub unimport_dm: UnusedOp,
    pub unimport_mr: UnusedOp,
    pub unimport_pd: UnusedOp,
}

/// `struct ibv_get_context` (kern-abi.h): header + core payload (the response pointer).
#[repr(C)]
#[derive(Default)]
pub struct ibv_get_context {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_get_context,
}

/// `struct ibv_alloc_pd` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_alloc_pd {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_alloc_pd,
}

/// `struct ibv_reg_mr` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_reg_mr {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_reg_mr,
}

/// `struct ibv_rereg_mr` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_rereg_mr {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_rereg_mr,
}

/// `struct ibv_alloc_mw` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_alloc_mw {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_alloc_mw,
}

/// `struct verbs_mr` (driver.h).
#[repr(C)]
pub struct verbs_mr {
    pub ibv_mr: ibv_mr,
    pub mr_type: u32,
    pub access: c_int,
}

/// `struct ibv_create_qp` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_create_qp {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_create_qp,
}

/// `struct ibv_modify_qp` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_modify_qp {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_modify_qp,
}

/// `struct ibv_query_qp` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_query_qp {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_query_qp,
}

/// `struct ibv_create_srq` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_create_srq {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_create_srq,
}

/// `struct ibv_modify_srq` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_modify_srq {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_modify_srq,
}

/// `struct ibv_query_srq` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_query_srq {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_query_srq,
}

/// `struct verbs_qp` (driver.h): the public QP (plain or extended), then private fields.
#[repr(C)]
pub struct verbs_qp {
    pub qp_ex: ibv_qp_ex,
    pub comp_mask: u32,
    pub xrcd: *mut c_void,
}

/// `struct verbs_cq` (288 bytes): `ibv_cq_ex`, whose head is an `ibv_cq`.
#[repr(C)]
pub struct verbs_cq {
    pub cq_ex: ibv_cq_ex,
}

/// `struct ibv_create_cq` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_create_cq {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_create_cq,
}

/// `struct ibv_resize_cq` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_resize_cq {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_resize_cq,
}

/// `struct ibv_query_port` (kern-abi.h).
#[repr(C)]
#[derive(Default)]
pub struct ibv_query_port {
    pub hdr: ib_uverbs_cmd_hdr,
    pub core: ib_uverbs_query_port,
}

#[link(name = "ibverbs")]
extern "C" {
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;
    pub fn verbs_uninit_context(context: *mut verbs_context);
    pub fn verbs_set_ops(context: *mut verbs_context, ops: *const verbs_context_ops);
    pub fn ibv_cmd_get_context(
        context: *mut verbs_context,
        cmd: *mut ibv_get_context,
        cmd_size: usize,
        resp: *mut ib_uverbs_get_context_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_device_any(
        context: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        attr_size: usize,
        resp: *mut ib_uverbs_ex_query_device_resp,
        resp_size: *mut usize,
    ) -> c_int;
    pub fn ibv_cmd_alloc_pd(
        context: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut ibv_alloc_pd,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_pd_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub fn ibv_cmd_create_ah(
        pd: *mut ibv_pd,
        ah: *mut ibv_ah,
        attr: *mut ibv_ah_attr,
        resp: *mut ib_uverbs_create_ah_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int;
    pub fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut verbs_mr,
        cmd: *mut ibv_reg_mr,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int;
    pub fn ibv_cmd_rereg_mr(
        vmr: *mut verbs_mr,
        flags: u32,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        pd: *mut ibv_pd,
        cmd: *mut ibv_rereg_mr,
        cmd_size: usize,
        resp: *mut ib_uverbs_rereg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_alloc_mw(
        pd: *mut ibv_pd,
        mw_type: ibv_mw_type,
        mw: *mut ibv_mw,
        cmd: *mut ibv_alloc_mw,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_mw_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int;
    pub fn ibv_cmd_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut ibv_create_cq,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_cq_resp,
        resp_size: usize,
    ) -> c_int;
    /// `cmd` may be NULL (size 0): our driver takes no command data.
    pub fn ibv_cmd_create_cq_ex(
        context: *mut ibv_context,
        cq_attr: *const ibv_cq_init_attr_ex,
        cq: *mut verbs_cq,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut ib_uverbs_ex_create_cq_resp,
        resp_size: usize,
        cmd_flags: u32,
    ) -> c_int;
    pub fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_cmd_resize_cq(
        cq: *mut ibv_cq,
        cqe: c_int,
        cmd: *mut ibv_resize_cq,
        cmd_size: usize,
        resp: *mut ib_uverbs_resize_cq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut ibv_create_qp,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_create_qp_ex(
        context: *mut ibv_context,
        qp: *mut verbs_qp,
        attr_ex: *mut ibv_qp_init_attr_ex,
        cmd: *mut ibv_create_qp,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_qp_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut ibv_modify_qp,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
        cmd: *mut ibv_query_qp,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
    pub fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut ibv_create_srq,
        cmd_size: usize,
        resp: *mut ib_uverbs_create_srq_resp,
        resp_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        attr_mask: c_int,
        cmd: *mut ibv_modify_srq,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        cmd: *mut ibv_query_srq,
        cmd_size: usize,
    ) -> c_int;
    pub fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;
    pub fn ibv_cmd_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut ibv_port_attr,
        cmd: *mut ibv_query_port,
        cmd_size: usize,
    ) -> c_int;
}

// The measured Debian 12 layouts (see Documentation/design.md): fail the build, not the user.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<verbs_device_ops>() == 72);
    assert!(offset_of!(verbs_device_ops, alloc_context) == 40);
    assert!(offset_of!(verbs_device_ops, alloc_device) == 56);
    assert!(size_of::<verbs_match_ent>() == 24);
    assert!(offset_of!(verbs_match_ent, kind) == 20);
    assert!(size_of::<verbs_sysfs_dev>() == 992);
    assert!(size_of::<verbs_device>() == 712);
    assert!(offset_of!(verbs_device, ops) == 664);
    assert!(offset_of!(verbs_device, sysfs) == 696);
    assert!(size_of::<verbs_context_ops>() == 608);
    assert!(offset_of!(verbs_context_ops, create_qp_ex) == 160);
    assert!(offset_of!(verbs_context_ops, poll_cq) == 424);
    assert!(offset_of!(verbs_context_ops, post_send) == 440);
    assert!(offset_of!(verbs_context_ops, query_device_ex) == 464);
    assert!(offset_of!(verbs_context_ops, unimport_pd) == 600);
    assert!(size_of::<ibv_get_context>() == 16);
    assert!(size_of::<ibv_query_port>() == 24);
    assert!(size_of::<ibv_alloc_pd>() == 16);
    assert!(size_of::<ibv_reg_mr>() == 48);
    assert!(size_of::<ibv_alloc_mw>() == 24);
    assert!(size_of::<ibv_rereg_mr>() == 56);
    assert!(offset_of!(verbs_context_ops, rereg_mr) == 70 * 8);
    assert!(offset_of!(verbs_context_ops, alloc_mw) == 2 * 8);
    assert!(offset_of!(verbs_context_ops, bind_mw) == 10 * 8);
    assert!(offset_of!(verbs_context_ops, dealloc_mw) == 25 * 8);
    assert!(size_of::<ibv_create_qp>() == 64);
    assert!(size_of::<ibv_modify_qp>() == 120);
    assert!(size_of::<ibv_create_srq>() == 40);
    assert!(size_of::<ibv_modify_srq>() == 24);
    assert!(size_of::<ibv_query_srq>() == 24);
    assert!(size_of::<ib_uverbs_create_srq_resp>() == 16);
    assert!(size_of::<ibv_query_qp>() == 24);
    assert!(size_of::<verbs_qp>() == 368);
    assert!(offset_of!(verbs_qp, comp_mask) == 352);
    assert!(size_of::<verbs_mr>() == 56);
    assert!(size_of::<ibv_create_cq>() == 40);
    assert!(size_of::<verbs_cq>() == 288);
};

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// The x86-64 layouts measured on Debian 12 (rdma-core 44), slot by slot.
    #[test]
    fn private_layouts_match_rdma_core_44() {
        assert_eq!(size_of::<verbs_device_ops>(), 72);
        assert_eq!(offset_of!(verbs_device_ops, match_min_abi_version), 8);
        assert_eq!(offset_of!(verbs_device_ops, match_max_abi_version), 12);
        assert_eq!(offset_of!(verbs_device_ops, match_table), 16);
        assert_eq!(offset_of!(verbs_device_ops, static_providers), 24);
        assert_eq!(offset_of!(verbs_device_ops, match_device), 32);
        assert_eq!(offset_of!(verbs_device_ops, alloc_context), 40);
        assert_eq!(offset_of!(verbs_device_ops, import_context), 48);
        assert_eq!(offset_of!(verbs_device_ops, alloc_device), 56);
        assert_eq!(offset_of!(verbs_device_ops, uninit_device), 64);

        assert_eq!(size_of::<verbs_match_ent>(), 24);
        assert_eq!(offset_of!(verbs_match_ent, driver_id), 8);
        assert_eq!(offset_of!(verbs_match_ent, vendor), 16);
        assert_eq!(offset_of!(verbs_match_ent, device), 18);
        assert_eq!(offset_of!(verbs_match_ent, kind), 20);

        assert_eq!(size_of::<verbs_sysfs_dev>(), 992);
        assert_eq!(offset_of!(verbs_sysfs_dev, abi_ver), 968);

        assert_eq!(size_of::<verbs_device>(), 712);
        assert_eq!(offset_of!(verbs_device, ops), 664);
        assert_eq!(offset_of!(verbs_device, refcount), 672);
        assert_eq!(offset_of!(verbs_device, entry), 680);
        assert_eq!(offset_of!(verbs_device, sysfs), 696);
        assert_eq!(offset_of!(verbs_device, core_support), 704);
    }

    #[test]
    fn context_ops_slots_are_alphabetical_as_in_rdma_core_44() {
        assert_eq!(size_of::<verbs_context_ops>(), 76 * 8);
        assert_eq!(offset_of!(verbs_context_ops, alloc_pd), 5 * 8);
        assert_eq!(offset_of!(verbs_context_ops, create_cq), 15 * 8);
        assert_eq!(offset_of!(verbs_context_ops, create_cq_ex), 16 * 8);
        assert_eq!(offset_of!(verbs_context_ops, create_qp_ex), 160);
        assert_eq!(offset_of!(verbs_context_ops, free_context), 39 * 8);
        assert_eq!(offset_of!(verbs_context_ops, modify_qp), 47 * 8);
        assert_eq!(offset_of!(verbs_context_ops, poll_cq), 424);
        assert_eq!(offset_of!(verbs_context_ops, post_send), 440);
        assert_eq!(offset_of!(verbs_context_ops, query_device_ex), 464);
        assert_eq!(offset_of!(verbs_context_ops, query_port), 60 * 8);
        assert_eq!(offset_of!(verbs_context_ops, reg_mr), 68 * 8);
        assert_eq!(offset_of!(verbs_context_ops, req_notify_cq), 69 * 8);
        assert_eq!(offset_of!(verbs_context_ops, resize_cq), 71 * 8);
        assert_eq!(offset_of!(verbs_context_ops, unimport_pd), 600);
        assert_eq!(offset_of!(verbs_context_ops, create_srq), 22 * 8);
        assert_eq!(offset_of!(verbs_context_ops, destroy_srq), 36 * 8);
        assert_eq!(offset_of!(verbs_context_ops, modify_srq), 49 * 8);
        assert_eq!(offset_of!(verbs_context_ops, post_srq_recv), 57 * 8);
        assert_eq!(offset_of!(verbs_context_ops, query_srq), 64 * 8);
    }

    #[test]
    fn public_layouts_match_rdma_core_44() {
        assert_eq!(size_of::<ibv_device>(), 664);
        assert_eq!(size_of::<ibv_context>(), 328);
        assert_eq!(size_of::<verbs_context>(), 648);
        assert_eq!(offset_of!(verbs_context, context), 320);
        assert_eq!(size_of::<ibv_qp>(), 160);
        assert_eq!(size_of::<ibv_qp_ex>(), 352);
        assert_eq!(size_of::<ibv_cq>(), 128);
        assert_eq!(size_of::<ibv_cq_ex>(), 288);
        assert_eq!(size_of::<ibv_srq>(), 128);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(size_of::<ibv_sge>(), 16);
    }

    /// Polling copies our CQE straight into the user's `ibv_wc`: every field must coincide.
    #[test]
    fn uapi_cqe_is_an_ibv_wc() {
        use rxe_rs_uapi::Cqe;
        assert_eq!(size_of::<Cqe>(), size_of::<ibv_wc>());
        assert_eq!(offset_of!(Cqe, wr_id), offset_of!(ibv_wc, wr_id));
        assert_eq!(offset_of!(Cqe, status), offset_of!(ibv_wc, status));
        assert_eq!(offset_of!(Cqe, opcode), offset_of!(ibv_wc, opcode));
        assert_eq!(offset_of!(Cqe, vendor_err), offset_of!(ibv_wc, vendor_err));
        assert_eq!(offset_of!(Cqe, byte_len), offset_of!(ibv_wc, byte_len));
        assert_eq!(
            offset_of!(Cqe, imm_data),
            offset_of!(ibv_wc, __bindgen_anon_1)
        );
        assert_eq!(offset_of!(Cqe, qp_num), offset_of!(ibv_wc, qp_num));
        assert_eq!(offset_of!(Cqe, src_qp), offset_of!(ibv_wc, src_qp));
        assert_eq!(offset_of!(Cqe, wc_flags), offset_of!(ibv_wc, wc_flags));
        assert_eq!(offset_of!(Cqe, pkey_index), offset_of!(ibv_wc, pkey_index));
        assert_eq!(offset_of!(Cqe, slid), offset_of!(ibv_wc, slid));
        assert_eq!(offset_of!(Cqe, sl), offset_of!(ibv_wc, sl));
        assert_eq!(
            offset_of!(Cqe, dlid_path_bits),
            offset_of!(ibv_wc, dlid_path_bits)
        );
        // And it is the kernel's uverbs completion too.
        assert_eq!(size_of::<Cqe>(), size_of::<ib_uverbs_wc>());
        assert_eq!(
            offset_of!(Cqe, port_num),
            offset_of!(ib_uverbs_wc, port_num)
        );
    }

    /// Our SGE is `struct ibv_sge`, so SGE lists can be copied as they are.
    #[test]
    fn uapi_sge_is_an_ibv_sge() {
        use rxe_rs_uapi::Sge;
        assert_eq!(size_of::<Sge>(), size_of::<ibv_sge>());
        assert_eq!(offset_of!(Sge, addr), offset_of!(ibv_sge, addr));
        assert_eq!(offset_of!(Sge, length), offset_of!(ibv_sge, length));
        assert_eq!(offset_of!(Sge, lkey), offset_of!(ibv_sge, lkey));
    }

    #[test]
    fn command_wrappers_have_the_kernel_sizes() {
        assert_eq!(size_of::<ibv_get_context>(), 16);
        assert_eq!(size_of::<ibv_query_port>(), 24);
        assert_eq!(size_of::<ibv_resize_cq>(), 24);
        assert_eq!(size_of::<ib_uverbs_resize_cq_resp>(), 8);
        assert_eq!(size_of::<ib_uverbs_ex_query_device_resp>(), 304);
        assert_eq!(size_of::<ib_uverbs_get_context_resp>(), 8);
        assert_eq!(size_of::<ibv_alloc_mw>(), 24);
        assert_eq!(size_of::<ib_uverbs_alloc_mw_resp>(), 8);
    }
}
