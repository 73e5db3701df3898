// SPDX-License-Identifier: GPL-2.0
//! QP attributes the core hands over: legal transitions, and the RoCEv2 path of an address
//! vector in both directions.

use super::*;

/// `ib_modify_qp_is_ok`: is `cur -> next` with `mask` a legal transition for a QP of `qp_type`?
pub(crate) fn transition_ok(
    qp_type: QpType,
    cur: QpState,
    next: QpState,
    mask: QpAttrMask,
) -> bool {
    // SAFETY: a pure function of its arguments.
    unsafe { bindings::ib_modify_qp_is_ok(cur.raw(), next.raw(), qp_type as u32, mask.raw()) }
}

/// The RoCEv2 path in an address handle attribute: `None` without a GRH, or if the source GID
/// is not a RoCEv2 (UDP-encapsulated) one.
pub(crate) fn read_roce_av(ah: &bindings::rdma_ah_attr) -> Option<crate::proto::av::AddressVector> {
    if ah.ah_flags as u32 & bindings::ib_ah_flags_IB_AH_GRH == 0 || ah.grh.sgid_attr.is_null() {
        return None;
    }
    // SAFETY: the core holds a reference on `sgid_attr` for the duration of the verb; `ib_gid`
    // is a 16-byte union of plain bytes.
    let (gid_type, sgid, dgid) = unsafe {
        let sgid_attr = &*ah.grh.sgid_attr;
        (sgid_attr.gid_type, sgid_attr.gid.raw, ah.grh.dgid.raw)
    };
    if gid_type != bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP {
        return None;
    }
    Some(crate::proto::av::AddressVector {
        sgid,
        dgid,
        flow_label: ah.grh.flow_label,
        hop_limit: ah.grh.hop_limit,
        traffic_class: ah.grh.traffic_class,
    })
}

/// Fills `ah` (of a query) with a RoCE path.
pub(crate) fn write_roce_av(
    ah: &mut bindings::rdma_ah_attr,
    av: &crate::proto::av::AddressVector,
    sgid_index: u8,
    port: u32,
) {
    ah.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
    ah.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
    ah.port_num = port;
    ah.grh.dgid.raw = av.dgid;
    ah.grh.flow_label = av.flow_label;
    ah.grh.hop_limit = av.hop_limit;
    ah.grh.traffic_class = av.traffic_class;
    ah.grh.sgid_index = sgid_index;
    // The core's query path does not take a GID reference from us.
    ah.grh.sgid_attr = core::ptr::null();
}
