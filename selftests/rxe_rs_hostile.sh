#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A hostile local user (guest/hostile.py, two QPs over loopback): addresses that wrap past 2^64
# in READs, SGEs and MR registrations, an SQ producer index moved backwards, RESET with the
# retransmission timer armed, a CQ that overflows, receives posted in the error state, QP
# numbers that a sweep could guess, MR key churn, producer indices chased during a flush and
# under a ring of local operations (type-1 unbinds), WR lists the process built itself handed to
# uverbs (refused: they are for kernel consumers). Each
# ends in an errno or an error completion of the process's own QP, never a stuck or crashed
# kernel (the suite checks dmesg).
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0

checks=(read_remote_addr_wraps mr_iova_wraps_refused sq_producer_backwards
	reset_stops_the_timer full_cq_fails_the_qp recv_after_error_is_flushed qp_numbers_not_sequential mr_churn
	mmap_wrong_offsets_and_after_destroy fork_with_mapped_rings dereg_mr_under_remote_traffic modify_qp_out_of_range
	producers_chased_during_flush local_ops_under_producer_chase user_wr_lists_refused)
ktap_print_header
ktap_set_plan ${#checks[@]}
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"
run_py_checks hostile.py "${checks[@]}"
rdma statistic show link "$DEV/1" | sed 's/^/# /'
rdma link delete "$DEV"
reset_or_bail
ktap_finished
