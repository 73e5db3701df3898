#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# rping_checked.sh ARGS...: runs `rping -v ARGS`, prints what it printed, and returns its status.
#
# rdma-core 44's rping can exit 255 after a clean run: its event thread calls rdma_get_cm_event
# once more after the main thread has destroyed the event channel, gets EBADF and exits
# (upstream's fix, rdma-core PR #1622 of 2025, is not in Debian 12). That exit counts as a pass
# only when nothing else went wrong: -C COUNT pings printed, and no line but pings, the
# disconnect event (and a server's end of waiting), and that EBADF as the last line of its errors.
# (stdout is a pipe, flushed at exit, after stderr's lines: each is read on its own.)
errs=$(mktemp)
out=$(rping -v "$@" 2>"$errs")
rc=$?
err=$(<"$errs")
rm -f "$errs"
printf '%s\n' "$out" "$err"
((rc == 255)) || exit $rc

count=
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
	[[ ${args[i]} == -C ]] && count=${args[i + 1]}
done
[[ -n $count ]] || exit $rc
mapfile -t lines <<<"$err"
[[ ${lines[-1]} == "rdma_get_cm_event: Bad file descriptor" ]] || exit $rc
# (A server's clean end prints its wait for the next ping cut short: state 10 is DISCONNECTED.)
for line in "${lines[@]:0:${#lines[@]}-1}"; do
	case $line in
	"server DISCONNECT EVENT..." | "client DISCONNECT EVENT..." | "wait for RDMA_READ_ADV state 10") ;;
	*) exit $rc ;;
	esac
done
pings=0
mapfile -t lines <<<"$out"
for line in "${lines[@]}"; do
	[[ $line == *"ping data: "* ]] || exit $rc
	((pings++))
done
((pings == count)) || exit $rc
echo "# rping: $pings pings, then rdma-core 44's exit race (EBADF from its event thread): passed"
exit 0
