#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Allocation failures (guest/faults.py): failslab and fail_page_alloc, confined by the stack
# filter to allocations made with rxe_rs's code on the stack. Every verb runs with each of its
# allocations failing in turn (fail-nth) and must return ENOMEM and then work; RC traffic runs
# with 1 in 10 of the module's allocations failing and every byte must arrive. The suite then
# checks dmesg (no warning or splat: a failed allocation a user can cause must not print one)
# and kmemleak (every error path frees what it took).
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0
DEBUGFS=/sys/kernel/debug

checks=(control_path_verbs datapath_under_failures)
ktap_print_header
ktap_set_plan $((${#checks[@]} + 1))
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
modprobe rxe_rs
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"

# The module's code: from its .text to the next section above it (the stack filter fails an
# allocation only when an address in that range is on the stack).
text_range() {
	local start end a
	start=$(cat /sys/module/rxe_rs/sections/.text)
	while read -r a; do
		((a > start)) && { [[ -z $end ]] || ((a < end)); } && end=$a
	done < <(cat /sys/module/rxe_rs/sections/.* /sys/module/rxe_rs/sections/* 2>/dev/null)
	[[ -n $end ]] && echo "$start $end"
}

# Quiet (no report per failure), every allocation type (also the ones that may sleep), only
# on request: fail-nth, or a probability set by the checks. `times` counts the failures.
configure() {
	local kind start end
	read -r start end < <(text_range) || return
	echo "# rxe_rs text: $start..$end ($(((end - start) / 1024)) KiB)"
	for kind in failslab fail_page_alloc; do
		echo 0 >"$DEBUGFS/$kind/verbose"
		echo 0 >"$DEBUGFS/$kind/probability"
		echo 1 >"$DEBUGFS/$kind/interval"
		echo 1000000 >"$DEBUGFS/$kind/times"
		echo 0 >"$DEBUGFS/$kind/space"
		echo N >"$DEBUGFS/$kind/task-filter"
		echo N >"$DEBUGFS/$kind/ignore-gfp-wait"
		echo 32 >"$DEBUGFS/$kind/stacktrace-depth"
		echo "$start" >"$DEBUGFS/$kind/require-start"
		echo "$end" >"$DEBUGFS/$kind/require-end"
	done
	echo 0 >"$DEBUGFS/fail_page_alloc/min-order"
}
check "fault injection confined to rxe_rs's code" configure
run_py_checks faults.py "${checks[@]}"
for kind in failslab fail_page_alloc; do
	echo 0 >"$DEBUGFS/$kind/probability"
	echo "# $kind: $((1000000 - $(cat "$DEBUGFS/$kind/times"))) allocations failed on request"
done
rdma statistic show link "$DEV/1" | sed 's/^/# /'
rdma link delete "$DEV"
reset_or_bail
ktap_finished
