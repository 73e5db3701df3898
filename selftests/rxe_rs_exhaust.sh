#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Exhaustion (guest/exhaust.py): reg/dereg churn with live slab objects and vmalloc that stay flat, QP memory
# charged to the process's memory cgroup and given back, and one async event per CQ overflow
# (no flood); with RXE_RS_EXHAUST_FULL=1 (make soak) also PDs, QPs and MRs up to the device's
# limits (the next one ENOMEM, all of them freed: 65536 PDs took 305-378 s of a loaded TCG
# guest, and the single-VM scripts then ran past CI's limit). The suite checks kmemleak
# and dmesg afterwards. make check: 2000 reg/dereg cycles; make soak 100000
# (RXE_RS_EXHAUST_CYCLES).
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0

checks=(mr_churn_bounded qp_memory_charged async_events_bounded)
# QPs first: no QP of the earlier checks is alive then.
[[ -n ${RXE_RS_EXHAUST_FULL:-} ]] && checks=(qps_to_the_limit pds_to_the_limit "${checks[@]}" mrs_to_the_limit)
ktap_print_header
ktap_set_plan ${#checks[@]}
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
modprobe rxe_rs
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"
run_py_checks exhaust.py "${checks[@]}"
rdma link delete "$DEV"
reset_or_bail
ktap_finished
