#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Re-registration and memory windows on one device over loopback. ibv_rereg_mr (guest/rereg.py)
# keeps the keys while rights, PD or memory change, and the peer's next access follows. Memory
# windows (guest/mw.py): type 1 windows are bound with
# ibv_bind_mw and type 2 ones with BIND_MW work requests (and ibv_wr_bind_mw), move data through
# them byte for byte, and refuse what the rules refuse: accesses outside a window or after an
# unbind, invalidation or deallocation (REM_ACCESS_ERR, memory untouched), a type 2 window used
# through another QP, binds beyond the MR, without MW_BIND, from another PD or zero-based type 1
# (MW_BIND_ERR), deregistering an MR a window is bound to (EBUSY), LOCAL_INV or SEND WITH
# INVALIDATE of an MR (LOC_QP_OP_ERR, REM_INV_REQ_ERR). rdma-core's own MR and MW tests run
# with the rest of its suite in rxe_rs_pyverbs.sh.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0

checks=(type1_bind_write_read type1_mr_rkey_refused type1_write_past_window type1_write_before_window
	type1_read_only_window type1_unbind type1_rebind_moves_window type1_dealloc_closes
	dereg_mr_with_bound_window_busy type2_bind_write_local_inv type2_remote_invalidate type2_zero_based
	type2_other_qp_refused type2_wr_api type2_rebind_while_bound local_inv_of_type1_refused
	bind_beyond_mr_refused bind_mr_without_mw_bind_refused bind_window_of_other_pd_refused
	bind_write_without_local_write_refused type1_zero_based_refused local_inv_of_mr_refused
	send_with_inv_of_mr_refused alloc_wrong_type)
rereg=(rereg_access_grants_write rereg_access_revokes_write rereg_translation_moves_memory
	rereg_pd_away_and_back rereg_with_bound_window_busy)
ktap_print_header
ktap_set_plan $((${#checks[@]} + ${#rereg[@]} + 2))
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"

check "ibv_devinfo -v reports max_mw 65535" bash -c "ibv_devinfo -v -d $DEV | grep -Eq 'max_mw:[[:space:]]+65535'"
run_py_checks mw.py "${checks[@]}"
run_py_checks rereg.py "${rereg[@]}"

rdma statistic show link "$DEV/1" | sed 's/^/# /'
check "the refused accesses were NAKed and counted" test "$(hw_counter "$DEV" rcvd_invalid_request)" -ge 1

rdma link delete "$DEV"
reset_or_bail
ktap_finished
