#!/usr/bin/env bash
# Two VMs joined by a point-to-point Ethernet link (QEMU socket backend over UDP on 127.0.0.1),
# each running its own script. Guest A gets 10.10.0.1/24 and fd10::1/64 on the link, guest B .2 /
# ::2; the scripts find the link with `pair_link` from selftests/guest/pair.sh.
#
#   vm-pair.sh [--flavor F] [--timeout S] [--impairable] RESULTS_DIR -- SCRIPT_A [ARGS] -- SCRIPT_B [ARGS]
#
# Both guests may write RESULTS_DIR. With --impairable the link runs through a relay on the host
# (scripts/lib/impair-relay.py): clean until a guest writes loss/dup/reorder/corrupt rates for
# RoCE frames into RESULTS_DIR/impair; what it did is counted in RESULTS_DIR/impair.stats.
# (Benchmarks leave it out: it costs host CPU.) Exits non-zero if either guest's script fails.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"

flavor=debug timeout_s=1800 impairable=
while [[ $1 == --* && $1 != -- ]]; do
	case $1 in
	--flavor) flavor=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--impairable) impairable=1; shift ;;
	*) echo "vm-pair.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
results=$1
shift
[[ $1 == -- ]] || { echo "usage: vm-pair.sh RESULTS -- A... -- B..." >&2; exit 2; }
shift
a=()
while (($#)) && [[ $1 != -- ]]; do a+=("$1"); shift; done
shift
b=("$@")
mkdir -p "$results"

# UDP ports on the loopback for this link: each VM's own, and where each sends (the other VM's
# port, or the relay's port for it).
port_a=$((20000 + RANDOM % 20000))
port_b=$((port_a + 1)) send_a=$((port_a + 1)) send_b=$port_a relay=
if [[ -n $impairable ]]; then
	send_a=$((port_a + 2)) send_b=$((port_a + 3))
	rm -f "$results/impair" "$results/impair.stats"
	python3 "$RXE_RS_ROOT/scripts/lib/impair-relay.py" "$send_a" "$port_a" "$send_b" "$port_b" \
		"$results/impair" "$results/impair.stats" &
	relay=$!
	trap 'kill "$relay" 2>/dev/null || true' EXIT
fi
common=(--flavor "$flavor" --timeout "$timeout_s" --cpus 1 --memory 2G --rwdir "$results")
"$RXE_RS_ROOT/scripts/vm.sh" "${common[@]}" --name rxe-a --nic "52:54:00:10:00:01,$port_a,$send_a" \
	-- env PAIR_ROLE=a PAIR_RESULTS="$results" "${a[@]}" >"$results/vm-a.log" 2>&1 &
pid_a=$!
"$RXE_RS_ROOT/scripts/vm.sh" "${common[@]}" --name rxe-b --nic "52:54:00:10:00:02,$port_b,$send_b" \
	-- env PAIR_ROLE=b PAIR_RESULTS="$results" "${b[@]}" >"$results/vm-b.log" 2>&1 &
pid_b=$!
# Stopped (^C, or selftests/run.sh stopping): the VMs go too (`timeout` passes the signal on).
# (`|| true`: under `set -e` a failing command in an EXIT trap becomes the script's status, and
# the VMs have usually exited already.)
trap 'kill "$pid_a" "$pid_b" ${relay:+"$relay"} 2>/dev/null || true' EXIT
rc=0
wait "$pid_a" || rc=1
wait "$pid_b" || rc=1
if [[ -n $relay ]] && ! kill -0 "$relay" 2>/dev/null; then
	echo "vm-pair.sh: the link relay died" >&2
	rc=1
fi
exit $rc
