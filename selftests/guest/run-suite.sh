#!/usr/bin/env bash
# Runs test scripts inside the guest, each followed by a check that the kernel stayed clean (no
# new WARNING/BUG/oops/KASAN/lockdep/RCU splat in dmesg), and after the last one a last check: a
# few seconds later (what timers, work items and RCU callbacks print after a script ends), no
# splat and no kmemleak report. One kmemleak scan for the whole suite: a scan costs 10-30 s of
# CPU in a TCG guest, and what leaked is told by the report's allocation backtraces, not by
# when it is found.
#   run-suite.sh TEST.sh...
#   run-suite.sh --suite FILE   (FILE sets the environment and tests=(TEST.sh...); run.sh writes it)
# With RXE_RS_QUEUE (a directory the host shares writable, the same for several guests), the
# guests share the list: each runs the next script that no guest has taken yet (taking one is
# a mkdir there, atomic on the host), so they finish together whatever the scripts cost.
# With RXE_RS_SUITE_LOG (a file in a directory the host shares writable), the output also goes
# there: virtme-ng's script output ports come from udev, and a guest that boots slowly enough can
# start the script before they exist, and then its output is lost.
set -u
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
if [[ ${1:-} == --suite ]]; then
	tests=()
	# shellcheck source=/dev/null # written by selftests/run.sh
	source "$2" || exit 1
	set -- "${tests[@]}"
fi
if [[ -n ${RXE_RS_SUITE_LOG:-} ]]; then
	exec > >(tee "$RXE_RS_SUITE_LOG") 2>&1
fi
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# Every process that opens a device makes libibverbs dlopen each provider /etc/libibverbs.d
# lists (18 on Debian 12): in a TCG guest with the debug kernel that took ibv_devinfo from
# 1.25 s to 2.8 s, and a loopback ibv_rc_pingpong pair from 3.9 s to 6.9 s. The guests have
# rxe_rs and rdma_rxe devices only, so they list those two providers (a bind mount in the
# guest: the host's directory is untouched).
IBV_DRIVERS_DIR=/tmp/rxe_rs-libibverbs.d
if mkdir -p "$IBV_DRIVERS_DIR" && cp /etc/libibverbs.d/{rxe,rxe_rs}.driver "$IBV_DRIVERS_DIR"/; then
	mount --bind "$IBV_DRIVERS_DIR" /etc/libibverbs.d || echo "# libibverbs: all providers stay listed (bind mount failed)"
fi
KMEMLEAK=/sys/kernel/debug/kmemleak
SPLATS='WARNING:|BUG:|Oops|KASAN|kernel BUG|general protection fault|possible recursive locking|possible circular locking|inconsistent lock state|suspicious RCU usage|unreferenced object|UBSAN|soft lockup|hung_task|blocked for more than|detected stall|Call Trace'

# What every process is doing, and the blocked tasks' kernel stacks: printed before a test that
# hangs is killed, so that the log says where it hung.
dump_state() {
	echo "# watchdog: $1 still running after $2 s; processes:"
	# (Kernel threads, whose names are in brackets, left out: pgrep cannot print this table.)
	# shellcheck disable=SC2009
	ps -eo pid,ppid,stat,wchan:30,etime,args | grep -v ' \[' | sed 's/^/# ps: /'
	echo w >/proc/sysrq-trigger
	sleep 1
	dmesg | tail -60 | sed 's/^/# blocked: /'
}

# (How long the guest took to get here: under load a 1-CPU pair guest took minutes.)
echo "# suite: kernel $(uname -r), $(nproc) CPUs, up $(cut -d. -f1 /proc/uptime) s"
[[ -e $KMEMLEAK ]] && echo clear >"$KMEMLEAK"
ran=()
# The kernel log is checked in consecutive pieces, none left out: lines up to `checked` are.
checked=0
# Reads the kernel log since the last check into NEW_LINES, and its splats into NEW_SPLATS;
# moves the mark. (Not in a subshell: the mark must move.)
read_new_dmesg() {
	local now
	now=$(dmesg | wc -l)
	NEW_LINES=$(dmesg | sed -n "$((checked + 1)),${now}p")
	checked=$now
	# perftest 4.5's crash in librdmacm (see perftest_lost_listen_race in lib.sh) is its own,
	# which its test sees in its exit status, not a kernel splat ("traps: NAME[PID] general
	# protection fault ip:... in librdmacm.so...").
	NEW_SPLATS=$(grep -E "$SPLATS" <<<"$NEW_LINES" | grep -vE '^(\[[ 0-9.]+\] )?traps: [^ ]+\[[0-9]+\] general protection fault ip:.* in librdmacm')
}
# Shows a splat whole: the new log from a few lines before its first splat line, up to 200
# lines (a lockdep report's dependency chain alone can take 100), else the last 80.
show_splat() {
	local first
	first=$(grep -nE "$SPLATS" <<<"$NEW_LINES" | head -1 | cut -d: -f1)
	if [[ -n $first ]]; then
		tail -n +$((first > 5 ? first - 5 : 1)) <<<"$NEW_LINES" | head -200
	else
		tail -80 <<<"$NEW_LINES"
	fi | sed 's/^/# dmesg: /'
}
[[ -e $KMEMLEAK ]] || echo "# kmemleak is not available in this kernel: leak checks are skipped"
# The boot too: a splat there (a KASAN report turns lockdep off) weakens every check after it.
echo "# check: boot dmesg"
read_new_dmesg
if [[ -n $NEW_SPLATS ]]; then
	show_splat
	echo "not ok dmesg clean after boot"
else
	echo "ok dmesg clean after boot"
fi
for test in "$@"; do
	# (A path relative to the tree, as selftests/run.sh writes them.)
	[[ $test == /* ]] || test=$RXE_RS_ROOT/$test
	name=$(basename "$test" .sh)
	if [[ -n ${RXE_RS_QUEUE:-} ]] && ! mkdir "$RXE_RS_QUEUE/$name" 2>/dev/null; then
		continue # another guest runs it
	fi
	echo "# selftest: $name"
	limit=${RXE_RS_TEST_TIMEOUT:-1800}
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
	# (What memory is left: a guest that runs out ends with its suite killed, saying nothing.)
	while read -r key kib _; do
		[[ $key == MemAvailable: ]] && echo "# memory: $((kib / 1024)) MiB available after $name"
	done </proc/meminfo
	# A script stopped while it had a CPU offline (rxe_rs_data's hotplug check) must not leave
	# the next scripts one CPU short.
	# (A 1-CPU guest has no such file: cpu0 cannot go offline.)
	for cpu in /sys/devices/system/cpu/cpu[0-9]*/online; do
		[[ ! -e $cpu || $(<"$cpu") == 1 ]] || { echo 1 >"$cpu" && echo "# ${cpu%/online} was offline after $name: back online"; }
	done

	echo "# check: $name dmesg"
	read_new_dmesg
	if [[ -n $NEW_SPLATS ]]; then
		show_splat
		echo "not ok dmesg clean after $name"
	else
		echo "ok dmesg clean after $name"
	fi
	ran+=("$name")
done
if ((${#ran[@]})); then
	echo "# check: the kernel a while after ${ran[*]}"
	started=$SECONDS
	# kmemleak ignores objects younger than ~5 s; two scans settle grey objects. Without
	# kmemleak, the wait still lets late splats show.
	sleep 6
	leaks=
	if [[ -e $KMEMLEAK ]]; then
		echo scan >"$KMEMLEAK"
		echo scan >"$KMEMLEAK"
		leaks=$(cat "$KMEMLEAK")
		[[ -z $leaks ]] || echo "$leaks" | head -80 | sed 's/^/# kmemleak: /'
	fi
	read_new_dmesg
	[[ -z $NEW_SPLATS ]] || show_splat
	if [[ -n $leaks || -n $NEW_SPLATS ]]; then
		echo "not ok no late splat and no kmemleak report after ${ran[*]}"
	else
		echo "ok no late splat and no kmemleak report after ${ran[*]}"
	fi
	echo "# check: took $((SECONDS - started)) s"
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
