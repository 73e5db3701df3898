#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds everything, runs the host unit
# tests and the VM selftests. Exits non-zero if anything fails.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"
start=$SECONDS

"$RXE_RS_ROOT/scripts/setup.sh"
# Lints first (the kernel is built on the way if needed); then the module the VMs load is
# built by rustc itself.
echo "== lints: the module through clippy, the protocol engine's arithmetic rules"
make -s -C "$RXE_RS_ROOT" clippy
cargo clippy --locked --release -p rxe_rs_proto
build_all debug

echo "== host unit tests (cargo test)"
cargo test --locked --workspace --release

echo "== VM selftests"
"$RXE_RS_ROOT/selftests/run.sh"
echo "check: all passed in $((SECONDS - start)) s"
