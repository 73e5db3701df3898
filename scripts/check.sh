#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds everything, runs the lints,
# the host unit tests and the VM selftests, and prints how long each phase took. Exits non-zero
# if anything fails.
#   check.sh           everything (make check)
#   check.sh --quick   the inner loop (make check-quick): the same lints, builds and host
#                      tests, then one guest with the core scripts (verbs objects, data paths)
set -euo pipefail
quick=
[[ ${1:-} == --quick ]] && quick=1
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"
start=$SECONDS

export RXE_RS_PHASES=${RXE_RS_RESULTS:-$RXE_RS_ROOT/results}/phases.txt
mkdir -p "$(dirname "$RXE_RS_PHASES")"
: >"$RXE_RS_PHASES"
phase_start=$SECONDS
phase_done() {
	echo "$1: $((SECONDS - phase_start)) s" >>"$RXE_RS_PHASES"
	phase_start=$SECONDS
}
# The phase list, on success and on failure alike.
trap 'echo "== phases"; sed "s/^/  /" "$RXE_RS_PHASES"; echo "  total: $((SECONDS - start)) s"' EXIT

"$RXE_RS_ROOT/scripts/setup.sh"
phase_done "setup (apt, cargo, pip)"
# The kernel first (built once, cached); then lints; then the module the VMs load, built by
# rustc itself.
build_kernel debug
phase_done "test kernel (cached after the first build)"
echo "== lints: rustfmt, clippy, shellcheck, ruff, checkpatch; warnings are errors"
"$RXE_RS_ROOT/scripts/lint.sh"
phase_done "lints"
build_all debug
phase_done "build (module, provider)"

echo "== host tests: cargo test; make dkms, and DKMS's refusals (selftests/host/)"
cargo test --locked --workspace --release
kdir=$("$RXE_RS_ROOT/scripts/kernel.sh" path debug)
"$RXE_RS_ROOT/selftests/host/dkms_refusals.sh" "$kdir"
[[ -n $quick ]] || "$RXE_RS_ROOT/selftests/host/make_dkms.sh" "$kdir"
phase_done "host unit tests"

echo "== VM selftests"
if [[ -n $quick ]]; then
	RXE_RS_VMS=1 "$RXE_RS_ROOT/selftests/run.sh" "$RXE_RS_ROOT"/selftests/rxe_rs_{objects,data}.sh
else
	"$RXE_RS_ROOT/selftests/run.sh"
fi
echo "check: all passed in $((SECONDS - start)) s"
