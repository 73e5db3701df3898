#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Verbs objects through libibverbs and our provider (pyverbs): PDs, CQs with their mapped rings,
# MRs (pinned, keyed), limits and errnos; and that a process dying with objects open leaves nothing behind.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0
VERBS_OUT=$(mktemp)
# guest/verbs.py's checks run in one process (one Python start, 20-30 s of a loaded TCG guest,
# instead of one each); `verbs NAME` then reports NAME's verdict, with its output if it failed.
verbs_all() { timeout $((${RXE_RS_TEST_TIMEOUT:-1800} - 60)) /usr/bin/python3 "$(dirname "$0")/guest/verbs.py" "$DEV" "$@" >"$VERBS_OUT" 2>&1; }
verbs() {
	grep -qx "ok $1" "$VERBS_OUT" && return 0
	# What it printed, from its start to its verdict (or to the end, if it never got one).
	awk -v name="$1" '$0 == "running " name { on = 1 } on { print "# " $0 } on && $0 ~ "^(not )?ok " name "(:|$)" { exit }' "$VERBS_OUT"
	grep -q "^running $1\$" "$VERBS_OUT" || echo "# verbs.py never ran $1: $(tail -3 "$VERBS_OUT" | tr '\n' ' ')"
	return 1
}

ktap_print_header
ktap_set_plan 22
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
rdma link add "$DEV" type rxe_rs netdev veth0
# (gid_table_of_the_netdev needs the IPv4 GID.)
wait_for 30 gid_present "$DEV" 0000:0000:0000:0000:0000:ffff:0a0b:0001
verbs_all pd_alloc_dealloc cq_create_poll_empty cq_bad_sizes cq_with_channel_arms cq_ex_polls_a_session \
	many_cqs mr_register_keys mr_bad_access mr_limits_reported qp_types_unsupported comp_vectors_per_cpu \
	qp_ex_create_flags_none gid_table_of_the_netdev qp_caps qp_state_machine post_send_states

check "PDs allocate and free" verbs pd_alloc_dealloc
check "a CQ maps its ring and polls empty" verbs cq_create_poll_empty
check "CQ sizes 0 and max_cqe+1: EINVAL" verbs cq_bad_sizes
check "a CQ on a completion channel can be armed" verbs cq_with_channel_arms
check "an extended CQ: its fields, EOPNOTSUPP for others, a poll session, timestamps" verbs cq_ex_polls_a_session
check "64 CQs at once" verbs many_cqs
check "MRs register with unique keys (lkey == rkey)" verbs mr_register_keys
check "MR access errors: EINVAL / EOPNOTSUPP" verbs mr_bad_access
check "MR limits are reported" verbs mr_limits_reported
check "raw packet QPs (not offered): EOPNOTSUPP" verbs qp_types_unsupported
check "one completion vector per CPU" verbs comp_vectors_per_cpu
check "ibv_create_qp_ex with create flags, none set: created" verbs qp_ex_create_flags_none
check "ibv_query_gid_table / ibv_query_gid_ex: RoCEv2 GIDs of the netdev, link-local at index 0" verbs gid_table_of_the_netdev
check "RC QPs: capacities, numbers, limits" verbs qp_caps
check "RC QP state machine RESET-INIT-RTR-RTS-ERR-RESET, attributes, errnos" verbs qp_state_machine
check "posting sends: EINVAL before RTS and for atomics, WR_FLUSH_ERR in ERR" verbs post_send_states

# A process killed with a PD and CQs open: the core cleans up, the module can go.
/usr/bin/python3 -c "
import os, signal
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.mr import MR
ctx = Context(name='$DEV'); pd = PD(ctx); cqs = [CQ(ctx, 32) for _ in range(4)]
mrs = [MR(pd, 1 << 20, 1) for _ in range(4)]
from pyverbs.qp import QP, QPCap, QPInitAttr
qps = [QP(pd, QPInitAttr(qp_type=2, scq=cqs[0], rcq=cqs[1], cap=QPCap(max_send_wr=64, max_recv_wr=64))) for _ in range(4)]
os.kill(os.getpid(), signal.SIGKILL)"
# Objects of processes: the kernel's own (ib_mad's, "comm [ib_core]") stay with the device.
no_objects_left() { ! rdma resource show "$1" | grep "dev $DEV " | grep -qvF 'comm ['; }
check "a killed process's CQs are released" wait_for 10 no_objects_left cq
check "a killed process's PD is released" wait_for 10 no_objects_left pd
check "a killed process's MRs are released" wait_for 10 no_objects_left mr
check "a killed process's QPs are released" wait_for 10 no_objects_left qp
check "rdma link delete after that" rdma link delete "$DEV"
check "rmmod after that" modprobe -r rxe_rs
rm -f "$VERBS_OUT"
reset_or_bail
ktap_finished
