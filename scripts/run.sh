#!/usr/bin/env bash
# The demo: installs what is missing, builds, boots two VMs joined by a virtual link, brings up
# an rxe_rs device on each with `rdma link add`, shows what a user sees (rdma link, ibv_devices,
# ibv_devinfo), then runs ibv_rc_pingpong (payload checked) and ib_write_bw between them.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"

"$RXE_RS_ROOT/scripts/setup.sh"
build_all debug
out=$RXE_RS_ROOT/results/demo
rm -rf "$out"
rc=0
"$RXE_RS_ROOT/scripts/vm-pair.sh" --timeout 1800 "$out" \
	-- bash "$RXE_RS_ROOT/scripts/demo-guest.sh" -- bash "$RXE_RS_ROOT/scripts/demo-guest.sh" || rc=$?
for role in a b; do
	echo "===== VM $role ====="
	cat "$out/vm-$role.log"
done
exit $rc
