#!/usr/bin/env bash
# Runs the VM selftests: boots the debug kernel with the built module and provider, runs every
# test script inside, and fails if any test fails, the guest crashes or hangs, or the kernel log
# shows a splat or a leak. Beside them, the two-VM tests (selftests/pair/) on a pair of VMs
# joined by a virtual link. Prints a KTAP log per VM and a closing "N passed, N failed" line.
#
#   selftests/run.sh [TEST.sh ...]      (default: every single-VM test, and beside them the pair
#                                        tests; scripts under pair/ run on the pair of VMs)
#   RXE_RS_VMS=N: how many guests share the single-VM scripts (default 2)
#   RXE_RS_TEST_TIMEOUT=S: a script's time limit in the guest (default 1800; pair scripts 4500;
#     on a machine 2-3x slower than CI's, rxe_rs_exhaust took 1219 s and rxe_rs_hostile_peer 1133)
#   RXE_RS_VM_TIMEOUT=S: each guest's time limit, single-VM and pair (default 5200: CI allows
#     the whole check 5400 s, of which setup, lints, build and host tests took 125 s with the
#     kernel cached; at 4200 and 4800 a CI machine about twice as slow as the one that passed
#     in 2673 s killed both phases, 4925 s into the run)
#   RXE_RS_VM_MEMORY=M: a single-VM guest's memory (default 2G)
#   RXE_RS_OVERLAP=0: the pair phase after the single-VM one, not beside it (default 1: the pair
#     scripts wait on each other's steps and leave CPU idle, which the single-VM guests take;
#     the single-VM guests boot once the pair's have, RXE_RS_PAIR_BOOT_WAIT s at most, 600)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../scripts/lib/env.sh"

results=${RXE_RS_RESULTS:-$RXE_RS_ROOT/results}
mkdir -p "$results"
single_vm_tests=()
pair_tests=()
for t in "$@"; do
	if [[ $t == */pair/* ]]; then pair_tests+=("$(realpath "$t")"); else single_vm_tests+=("$(realpath "$t")"); fi
done
if (($# == 0)); then
	single_vm_tests=("$here"/rxe_rs_*.sh)
	pair_tests=("$here"/pair/*.sh)
fi
# rxe_rs_package installs make deb's packages, with DKMS's build of the module for the test
# kernel made here first, natively (unless RXE_RS_PACKAGE_COMPILE=1: then the guest compiles).
for t in "${single_vm_tests[@]}"; do
	[[ $(basename "$t") == rxe_rs_package.sh ]] || continue
	echo "selftests: building the packages for rxe_rs_package"
	kdir=$("$RXE_RS_ROOT/scripts/kernel.sh" path debug)
	if ! make -s -C "$RXE_RS_ROOT" deb >/dev/null ||
		{ [[ ${RXE_RS_PACKAGE_COMPILE:-} != 1 ]] &&
			! "$RXE_RS_ROOT/scripts/package.sh" dkms-binaries "$(cat "$kdir/include/config/kernel.release")" "$kdir" >/dev/null; }; then
		echo "selftests: the packages did not build: rxe_rs_package will fail" >&2
	fi
done

# The tests' knobs, passed on into the guests (profiles: make check's short one, make soak's).
knobs=()
for v in RXE_RS_HOSTILE_PACKETS RXE_RS_LOSSY_MIB RXE_RS_IMPAIRMENT RXE_RS_LOSSY_BASELINE RXE_RS_LOSSY_PAIRINGS RXE_RS_LIFECYCLE_ROUNDS \
	RXE_RS_EXHAUST_CYCLES RXE_RS_EXHAUST_FULL RXE_RS_FAULT_ROUNDS RXE_RS_TEST_TIMEOUT RXE_RS_INTEROP_CASES RXE_RS_INTEROP_FULL RXE_RS_NVMEOF_FULL RXE_RS_PYVERBS_LIVE RXE_RS_PACKAGE_COMPILE; do
	[[ -n ${!v:-} ]] && knobs+=("$v=${!v}")
done

# What a guest runs, in a file it reads (guest/run-suite.sh --suite FILE): the knobs, more
# settings, then the scripts. Not on its command line: the kernel cuts that at 2048 bytes, and
# make soak's knobs with a guest's list of scripts took it past, which cut off virtme-ng's
# init path and the parameters after it.
#   suite_file FILE [VAR=VALUE...] -- SCRIPT...
suite_file() {
	local file=$1 setting
	shift
	{
		for setting in "${knobs[@]}"; do
			printf 'export %s=%q\n' "${setting%%=*}" "${setting#*=}"
		done
		while [[ $1 != -- ]]; do
			printf 'export %s=%q\n' "${1%%=*}" "${1#*=}"
			shift
		done
		shift
		printf 'tests=(%s)\n' "$(printf '%q ' "$@")"
	} >"$file"
}

# The guests' consoles carry their kernels' warnings and worse (vm.sh): a guest that panics
# leaves its report there and nowhere else.
export RXE_RS_VM_VERBOSE=${RXE_RS_VM_VERBOSE:-warnings}
# The last kernel lines of a dead guest's CONSOLE, for the notes at the end (CI keeps a tail).
kernel_tail() {
	grep -aE '^\[ *[0-9]+\.[0-9]+\] ' "$1" 2>/dev/null | tail -n 40 | cut -c1-300 | sed 's/^/  | /'
}

passed=0 failed=0 skipped=0
# "LOG:LINE" of each failed result, shown again at the very end (CI keeps only a log's tail).
failures=()
# Guests that did not finish and scripts that did not exit cleanly, also repeated at the end.
failure_notes=()
phase_start=$SECONDS
# Appends "NAME: N s" (since the previous phase) to the phase list check.sh prints at the end.
phase_done() {
	echo "$1: $((SECONDS - phase_start)) s" | tee -a "${RXE_RS_PHASES:-/dev/null}"
	phase_start=$SECONDS
}
# Counts the KTAP results of LOG..., whose guests ran run-suite.sh; each of TESTS... must
# have run to a clean exit in one of them: count LOG... -- TEST...
count() {
	local logs=() log p s f t name
	while [[ $1 != -- ]]; do logs+=("$1"); shift; done
	shift
	for log in "${logs[@]}"; do
		p=$(grep -cE '^ok ' "$log")
		s=$(grep -cE '^ok .*# SKIP' "$log")
		f=$(grep -cE '^not ok ' "$log")
		passed=$((passed + p - s)) skipped=$((skipped + s)) failed=$((failed + f))
		while IFS=: read -r n _; do failures+=("$log:$n"); done < <(grep -nE '^not ok ' "$log")
		if ! grep -q '^# suite: done' "$log"; then
			failure_notes+=("selftests: the guest of $log did not finish (crash, hang or timeout)")
			echo "${failure_notes[-1]}"
			failed=$((failed + 1))
		fi
	done
	# A script that dies (or whose plan does not add up: ktap_finished exits 1) fails too.
	for t in "$@"; do
		name=$(basename "$t" .sh)
		if ! grep -q "^# selftest: $name exit=0" "${logs[@]}"; then
			failure_notes+=("selftests: $name did not exit cleanly (see ${logs[*]})")
			echo "${failure_notes[-1]}"
			failed=$((failed + 1))
		fi
	done
}

# The pair phase: two linked VMs run every pair script (one boot for all of them). Started
# before the single-VM guests when they overlap; its log is shown and counted at the end.
pair_dir=$results/pair
start_pairs() {
	rm -rf "$pair_dir"
	mkdir -p "$pair_dir"
	echo "selftests: booting two VMs for ${#pair_tests[@]} pair test script(s); logs: $pair_dir"
	(
		for end in a b; do
			suite_file "$pair_dir/suite-$end.env" RXE_RS_TEST_TIMEOUT=4500 RXE_RS_SUITE_LOG="$pair_dir/suite-$end.log" \
				-- "${pair_tests[@]}"
		done
		"$RXE_RS_ROOT/scripts/vm-pair.sh" --impairable --timeout "${RXE_RS_VM_TIMEOUT:-5200}" "$pair_dir" \
			-- bash "$here/guest/run-suite.sh" --suite "$pair_dir/suite-a.env" \
			-- bash "$here/guest/run-suite.sh" --suite "$pair_dir/suite-b.env"
		date +%s >"$pair_dir/.end"
	) >"$results/pair-phase.out" 2>&1 &
	pair_pid=$!
	pair_start=$(date +%s)
	# A background job ignores ^C: stop the pair's VMs with us.
	trap 'pkill -TERM -P "$pair_pid" 2>/dev/null; exit 130' INT TERM
}
finish_pairs() {
	wait "$pair_pid"
	cat "$results/pair-phase.out"
	for role in a b; do
		log=$pair_dir/suite-$role.log
		# No log: the script never started; the console (vm-X.log) says why.
		[[ -e $log ]] || log=$pair_dir/vm-$role.log
		sed "s/^/[$role] /" "$log"
		if ! grep -q '^# suite: done' "$log"; then
			tail -n 3 "$pair_dir/vm-$role.log" | sed "s/^/[$role console] /"
			failure_notes+=("selftests: the end of guest $role's kernel console:"$'\n'"$(kernel_tail "$pair_dir/vm-$role.log")")
		fi
		count "$log" -- "${pair_tests[@]}"
	done
	local took=$(($(cat "$pair_dir/.end" 2>/dev/null || date +%s) - pair_start))
	echo "VM selftests, pairs${overlap:+ (beside the single-VM guests)}: $took s" | tee -a "${RXE_RS_PHASES:-/dev/null}"
}
overlap=
[[ ${RXE_RS_OVERLAP:-1} == 1 && ${#pair_tests[@]} -gt 0 && ${#single_vm_tests[@]} -gt 0 ]] && overlap=1
[[ -n $overlap ]] && start_pairs

if ((${#single_vm_tests[@]})); then
	# Single-VM scripts run in RXE_RS_VMS guests at once (default 2: the scripts are mostly one
	# process at a time, so two 2-CPU guests keep both host cores busy). The guests share one
	# list, costliest first (seconds under TCG beside the pairs at 24ca8e9, or measured on a
	# 2.2x slower machine at a034b56 and divided by 2.2; new scripts count 300): each runs the
	# next script no guest has taken (run-suite.sh, RXE_RS_QUEUE), so they end together.
	# rxe_rs_package goes last: its dpkg and dkms runs are thousands of small reads over 9p and
	# short processes, which beside the pair phase took 5.5 times as long as alone (1610 s, 291).
	declare -A cost=([rxe_rs_exhaust]=120 [rxe_rs_pyverbs]=205 [rxe_rs_recv]=372 [rxe_rs_cm]=277
		[rxe_rs_objects]=250 [rxe_rs_netns]=345 [rxe_rs_data]=318 [rxe_rs_faults]=225 [rxe_rs_link]=215
		[rxe_rs_ud]=175 [rxe_rs_hostile]=169 [rxe_rs_mr]=144 [rxe_rs_package]=1)
	# The knobs (make soak's long profile) change what these cost: 100000 packets took 1047 s
	# at 24ca8e9; 8 life-cycle rounds took 627 s at a034b56, on the slower machine.
	cost[rxe_rs_hostile_peer]=$((180 + ${RXE_RS_HOSTILE_PACKETS:-8000} / 116))
	[[ -n ${RXE_RS_EXHAUST_FULL:-} ]] && cost[rxe_rs_exhaust]=2400
	[[ -n ${RXE_RS_PYVERBS_LIVE:-} ]] && cost[rxe_rs_pyverbs]=410
	[[ -n ${RXE_RS_PACKAGE_COMPILE:-} ]] && cost[rxe_rs_package]=1800
	cost[rxe_rs_lifecycle]=$((70 + 30 * ${RXE_RS_LIFECYCLE_ROUNDS:-8}))
	vms=${RXE_RS_VMS:-2}
	((vms > ${#single_vm_tests[@]})) && vms=${#single_vm_tests[@]}
	((vms >= 1)) || { echo "selftests: RXE_RS_VMS must be at least 1" >&2; exit 2; }
	# (Relative to the tree, which run-suite.sh resolves.)
	mapfile -t tests < <(for t in "${single_vm_tests[@]}"; do n=$(basename "$t" .sh); echo "${cost[$n]:-300} ${t#"$RXE_RS_ROOT"/}"; done | sort -rn | cut -d' ' -f2-)
	queue=$results/queue
	rm -rf "$queue"
	mkdir -p "$queue"

	# Each guest writes its log into the results directory too (run-suite.sh): that copy is
	# counted, the console is shown live. If the console's copy is lost, the log is shown at the end.
	# Four guests booting at once starved the pair's 1-CPU guests (a vCPU thread each, against
	# the 2-CPU guests' two): at 0aa704e they reached their first script after 17 minutes, the
	# single-VM guests after a few, and the pair phase is the long pole. So these boot once the
	# pair's guests have (waiting RXE_RS_PAIR_BOOT_WAIT s at most, 600), and stop that much earlier.
	vm_timeout=${RXE_RS_VM_TIMEOUT:-5200}
	if [[ -n $overlap ]]; then
		waited_from=$SECONDS
		until grep -qs '^# suite:' "$pair_dir/suite-a.log" && grep -qs '^# suite:' "$pair_dir/suite-b.log"; do
			((SECONDS - waited_from < ${RXE_RS_PAIR_BOOT_WAIT:-600})) || break
			kill -0 "$pair_pid" 2>/dev/null || break
			sleep 2
		done
		echo "selftests: waited $((SECONDS - waited_from)) s for the pair's guests to reach their scripts; booting the single-VM guests"
		vm_timeout=$((vm_timeout - (SECONDS - waited_from)))
		((vm_timeout >= 300)) || vm_timeout=300 # (timeout 0 would mean no limit)
	fi
	echo "selftests: $vms guests share ${tests[*]##*/}"
	pids=() followers=()
	# Guest $1 takes tests from the queue until it is empty.
	start_guest() {
		local i=$1 log=$results/selftests-vm$1.log
		rm -f "$log"
		suite_file "$results/selftests-vm$i.env" RXE_RS_SUITE_LOG="$log" RXE_RS_QUEUE="$queue" -- "${tests[@]}"
		# (Not niced beside the pair: at nice 5 the pair's exchanges ran 3x faster, but
		# these guests starved: a hostile_peer victim's READ completed after its 60 s window,
		# rxe_rs_objects took 1378 s.)
		"$RXE_RS_ROOT/scripts/vm.sh" --name "rxe-selftest$i" --rwdir "$results" --timeout "$vm_timeout" --pmem \
			--memory "${RXE_RS_VM_MEMORY:-2G}" -- \
			bash "$here/guest/run-suite.sh" --suite "$results/selftests-vm$i.env" \
			>"$results/selftests-vm$i.console" 2>&1 &
		pids+=($!)
		# Shown live, each line marked with its guest.
		tail -n +1 -F --pid=$! "$results/selftests-vm$i.console" 2>/dev/null | sed -u "s/^/[vm$i] /" &
		followers+=($!)
	}
	for ((i = 0; i < vms; i++)); do start_guest "$i"; done
	# (Not a bare `wait`: the pair phase may be running beside.)
	for pid in "${pids[@]}" "${followers[@]}"; do wait "$pid"; done
	# A guest whose suite never started (no log, nothing on its console: under TCG a guest
	# once died that way at boot, before any of our code ran) took no test; the others took
	# its share from the queue. It boots once more and runs what is left, at least the kernel
	# checks; a second such failure is counted as one.
	pids=() followers=()
	for ((i = 0; i < vms; i++)); do
		[[ -e $results/selftests-vm$i.log ]] && continue
		echo "selftests: guest $i never started its suite (console: $(tail -c 300 "$results/selftests-vm$i.console" | tr '\n' ' ')); booting it once more, with udev"
		# (At 6055070 both guests ended so, twice each: their command had outgrown the
		# kernel's 2048-byte command line, 730c2ab. The retry with udev is the old boot path.)
		RXE_RS_GUEST_UDEV=1 start_guest "$i"
	done
	for pid in "${pids[@]}" "${followers[@]}"; do wait "$pid"; done
	logs=()
	for ((i = 0; i < vms; i++)); do
		log=$results/selftests-vm$i.log
		if [[ ! -e $log ]]; then
			log=$results/selftests-vm$i.console # the script never started; the console says why
		elif ! grep -q '^# suite:' "$results/selftests-vm$i.console"; then
			echo "selftests: the console output of VM $i was lost; its log:"
			cat "$log"
		fi
		grep -q '^# suite: done' "$log" ||
			failure_notes+=("selftests: the end of guest $i's kernel console:"$'\n'"$(kernel_tail "$results/selftests-vm$i.console")")
		logs+=("$log")
	done
	count "${logs[@]}" -- "${tests[@]}"
	phase_done "VM selftests, single ($vms guests${overlap:+, beside the pairs})"
fi

if ((${#pair_tests[@]})); then
	[[ -n $overlap ]] || start_pairs
	finish_pairs
fi
# Each failure again, with the diagnostics its test printed just before it (the first few).
shown=0
for at in "${failures[@]}"; do
	((shown++ < 4)) || { echo "selftests: $((${#failures[@]} - 4)) more failure(s) not shown here"; break; }
	log=${at%:*} n=${at##*:}
	echo "selftests: FAILED in $log, line $n, after:"
	# A kernel splat (run-suite.sh's "# dmesg: " lines right before its "not ok") is told by
	# its head, which names the report (stall, lockup, KASAN...) and which the last 30 lines of
	# a long one leave out (CI's record of 250520e kept only a stall's tail): its first 40
	# lines, then its last 5.
	splat=$(awk -v n="$n" 'NR >= n { exit } /^# dmesg: / { if (!run) start = NR; run = 1; next } { run = 0 }
		END { print (run ? start : n) }' "$log")
	if ((n - splat > 45)); then
		{ sed -n "${splat},$((splat + 39))p" "$log"; echo "  ..."; sed -n "$((n - 5)),${n}p" "$log"; } | cut -c1-300 | sed 's/^/  | /'
	else
		sed -n "$((n > 30 ? n - 30 : 1)),${n}p" "$log" | cut -c1-300 | sed 's/^/  | /'
	fi
done
for note in "${failure_notes[@]}"; do echo "$note"; done
echo "selftests: $passed passed, $failed failed, $skipped skipped"
((failed == 0 && passed > 0))
