#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# UD QPs and address handles on one device over loopback (guest/ud.py): SENDs with and without
# immediate data from 0 bytes to the MTU over IPv4 and IPv6, each checked byte for byte behind
# its GRH with the completion's length, source QP and flags; what must be dropped (a wrong
# Q_Key, no receive or one too small) is dropped and counted; a send longer than the MTU
# completes unsent; an AH of another PD fails the WQE; a reply through ibv_create_ah_from_wc;
# the ibv_wr_* API; a batch of 1000 SENDs in one post, all sent and received, from a process
# and from a kernel consumer (kmod/rxe_rs_ud_batch.c); a controlled Q_Key refused; ibv_devinfo's
# max_ah.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0

checks=(ud_ipv4_sizes ud_ipv6_sizes ud_wrong_qkey_dropped ud_qkey_from_qp ud_no_or_small_receive_dropped
	ud_longer_than_mtu ud_ah_of_another_pd ud_reply_from_wc ud_wr_api ud_batch_of_1000 ud_query_qp)
ktap_print_header
ktap_set_plan $((${#checks[@]} + 4))
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
ip -6 addr add fd00:11::1/64 dev veth0 nodad
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"
wait_for 30 gid_present "$DEV" "fd00:0011:0000:0000:0000:0000:0000:0001"

run_py_checks ud.py "${checks[@]}"
# The kernel's post_send path: a consumer that posts 1000 UD SENDs in one chain and nothing
# after it. The module's load fails unless every send and receive completes intact.
kernel_ud_batch() {
	local rc=0
	insmod "$(dirname "$0")/kmod/rxe_rs_ud_batch.ko" dev="$DEV" count=1000 || rc=$?
	dmesg | grep 'rxe_rs_ud_batch: ' | tail -1 | sed 's/^/# /'
	((rc == 0)) && rmmod rxe_rs_ud_batch
	return $rc
}
check "a kernel consumer's 1000 UD SENDs in one post: all sent and received" kernel_ud_batch
# The core's rule for user QPs, which keeps a process from posing as QP1 (0x80010000).
check "a controlled Q_Key without CAP_NET_RAW: EPERM" bash -c \
	"setpriv --bounding-set=-net_raw /usr/bin/python3 $(dirname "$0")/guest/ud.py $DEV ud_controlled_qkey_refused | tee /dev/stderr | grep -qx 'ok ud_controlled_qkey_refused'"
rdma statistic show link "$DEV/1" | sed 's/^/# /'
check "ibv_devinfo -v reports max_ah 32767" bash -c "ibv_devinfo -v -d $DEV | grep -Eq 'max_ah:[[:space:]]+32767'"
check "UD datagrams were counted as received" test "$(hw_counter "$DEV" rcvd_pkts)" -ge 32

rdma link delete "$DEV"
reset_or_bail
ktap_finished
