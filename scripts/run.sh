#!/usr/bin/env bash
# The demo: installs what is missing, builds, boots two VMs joined by a virtual link, brings up
# an rxe_rs device on each with `rdma link add`, shows what a user sees (rdma link, ibv_devices,
# ibv_devinfo), then runs ibv_rc_pingpong (payload checked) and ib_write_bw between them.
# Prints each step, a few lines per VM and a last line "demo: ok" or the step that failed; the
# full output of each step goes to results/demo/.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"

out=$RXE_RS_ROOT/results/demo
rm -rf "$out"
mkdir -p "$out"
start=$SECONDS
step() { echo "demo: [$1/4] $2"; }
failed() {
	local log
	echo "demo: FAILED at $1 after $(((SECONDS - start) / 60)) min (full output: ${*:2})"
	for log in "${@:2}"; do
		[[ -f $log ]] && tail -15 "$log" | sed "s|^|  $(basename "$log") |"
	done
	exit 1
}

step 1 "installing what is missing (apt, cargo, pip)"
"$RXE_RS_ROOT/scripts/setup.sh" >"$out/setup.log" 2>&1 || failed "setup" "$out/setup.log"
step 2 "the test kernel (Linux 6.12 with Rust, RDMA and the debug options)"
build_kernel debug || failed "the kernel build" "$RXE_RS_CACHE/kernel-build-debug.log"
step 3 "building rxe_rs.ko and the libibverbs provider"
build_all debug >"$out/build.log" 2>&1 || failed "the build" "$out/build.log"
step 4 "two VMs on one virtual link: rxers0 on each, ibv_rc_pingpong, ib_write_bw (a few minutes)"
rc=0
"$RXE_RS_ROOT/scripts/vm-pair.sh" --timeout 1800 "$out" \
	-- bash "$RXE_RS_ROOT/scripts/demo-guest.sh" -- bash "$RXE_RS_ROOT/scripts/demo-guest.sh" \
	>"$out/vm-pair.log" 2>&1 || rc=$?
for role in a b; do
	echo "VM $role ($out/vm-$role.log):"
	grep -h '^demo: ' "$out/vm-$role.log" | sed 's/^demo: /  /' || echo "  (no result: see the log)"
done
((rc == 0)) || failed "the VMs' demo" "$out/vm-pair.log" "$out/vm-a.log" "$out/vm-b.log"
bw=$(sed -nE 's/^demo: ib_write_bw: .*, ([0-9.]+) MB\/s on average/\1/p' "$out/vm-b.log")
echo "demo: ok in $(((SECONDS - start) / 60)) min: rxe_rs carried RC SENDs with every byte checked and ${bw:-?} MB/s of RDMA WRITEs between two VMs"
