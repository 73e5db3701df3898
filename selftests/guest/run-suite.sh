#!/usr/bin/env bash
# Runs test scripts inside the guest, each followed by a check that the kernel stayed clean (no
# new WARNING/BUG/oops/KASAN/lockdep/RCU splat in dmesg), and after the last one a kmemleak scan
# (no leak reported). One scan for the whole suite: a scan costs 10-30 s of CPU in a TCG guest,
# and what leaked is told by the report's allocation backtraces, not by when it is found.
#   run-suite.sh TEST.sh...
# With RXE_RS_QUEUE (a directory the host shares writable, the same for several guests), the
# guests share the list: each runs the next script that no guest has taken yet (taking one is
# a mkdir there, atomic on the host), so they finish together whatever the scripts cost.
# With RXE_RS_SUITE_LOG (a file in a directory the host shares writable), the output also goes
# there: virtme-ng's script output ports come from udev, and a guest that boots slowly enough can
# start the script before they exist, and then its output is lost.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
if [[ -n ${RXE_RS_SUITE_LOG:-} ]]; then
	exec > >(tee "$RXE_RS_SUITE_LOG") 2>&1
fi
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
KMEMLEAK=/sys/kernel/debug/kmemleak
SPLATS='WARNING:|BUG:|Oops|KASAN|kernel BUG|general protection fault|possible recursive locking|possible circular locking|inconsistent lock state|suspicious RCU usage|unreferenced object|UBSAN|soft lockup|hung_task|blocked for more than|Call Trace'

# What every process is doing, and the blocked tasks' kernel stacks: printed before a test that
# hangs is killed, so that the log says where it hung.
dump_state() {
	echo "# watchdog: $1 still running after $2 s; processes:"
	ps -eo pid,ppid,stat,wchan:30,etime,args | grep -v ' \[' | sed 's/^/# ps: /'
	echo w >/proc/sysrq-trigger
	sleep 1
	dmesg | tail -60 | sed 's/^/# blocked: /'
}

echo "# suite: kernel $(uname -r), $(nproc) CPUs"
[[ -e $KMEMLEAK ]] && echo clear >"$KMEMLEAK"
ran=()
[[ -e $KMEMLEAK ]] || echo "# kmemleak is not available in this kernel: leak checks are skipped"
for test in "$@"; do
	name=$(basename "$test" .sh)
	if [[ -n ${RXE_RS_QUEUE:-} ]] && ! mkdir "$RXE_RS_QUEUE/$name" 2>/dev/null; then
		continue # another guest runs it
	fi
	mark=$(dmesg | wc -l)
	echo "# selftest: $name"
	limit=${RXE_RS_TEST_TIMEOUT:-900}
	started=$SECONDS
	(sleep $((limit - 20)) && dump_state "$name" $((limit - 20))) &
	watchdog=$!
	timeout "$limit" bash "$test"
	rc=$?
	pkill -P "$watchdog" 2>/dev/null # its sleep, which would hold our stdout open
	kill "$watchdog" 2>/dev/null
	wait "$watchdog" 2>/dev/null
	echo "# selftest: $name exit=$rc"
	echo "# selftest: $name took $((SECONDS - started)) s"

	echo "# check: $name dmesg"
	splats=$(dmesg | tail -n +"$((mark + 1))" | grep -E "$SPLATS")
	if [[ -n $splats ]]; then
		dmesg | tail -n +"$((mark + 1))" | tail -80 | sed 's/^/# dmesg: /'
		echo "not ok dmesg clean after $name"
	else
		echo "ok dmesg clean after $name"
	fi
	ran+=("$name")
done
if [[ -e $KMEMLEAK ]] && ((${#ran[@]})); then
	echo "# check: kmemleak"
	started=$SECONDS
	# kmemleak ignores objects younger than ~5 s; two scans settle grey objects.
	sleep 6
	echo scan >"$KMEMLEAK"
	echo scan >"$KMEMLEAK"
	leaks=$(cat "$KMEMLEAK")
	if [[ -n $leaks ]]; then
		echo "$leaks" | head -80 | sed 's/^/# kmemleak: /'
		echo "not ok no kmemleak report after ${ran[*]}"
	else
		echo "ok no kmemleak report after ${ran[*]}"
	fi
	echo "# check: kmemleak took $((SECONDS - started)) s"
fi
echo "# suite: done"
if [[ -n ${RXE_RS_SUITE_LOG:-} ]]; then
	# The host may power the guest off as soon as we exit: let tee write the last line. (Not
	# `wait` for tee: a process a test left behind may hold the pipe open forever.)
	for _ in $(seq 50); do
		grep -q '^# suite: done' "$RXE_RS_SUITE_LOG" && break
		sleep 0.2
	done
fi
