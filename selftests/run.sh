#!/usr/bin/env bash
# Runs the VM selftests: boots the debug kernel with the built module and provider, runs every
# test script inside, and fails if any test fails, the guest crashes or hangs, or the kernel log
# shows a splat or a leak. Prints a KTAP log per VM and a closing "N passed, N failed" line.
#
#   selftests/run.sh [TEST.sh ...]      (default: every single-VM test)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../scripts/lib/env.sh"

results=${RXE_RS_RESULTS:-$RXE_RS_ROOT/results}
mkdir -p "$results"
single_vm_tests=("$@")
((${#single_vm_tests[@]})) || single_vm_tests=("$here"/rxe_rs_*.sh)

log=$results/selftests-vm.log
echo "selftests: booting a VM for ${#single_vm_tests[@]} test script(s); log: $log"
"$RXE_RS_ROOT/scripts/vm.sh" --name rxe-selftest -- \
	bash "$here/guest/run-suite.sh" "${single_vm_tests[@]}" 2>&1 | tee "$log"

passed=$(grep -cE '^ok ' "$log")
skipped=$(grep -cE '^ok .*# SKIP' "$log")
failed=$(grep -cE '^not ok ' "$log")
passed=$((passed - skipped))
if ! grep -q '^# suite: done' "$log"; then
	echo "selftests: the guest did not finish the suite (crash, hang or timeout)"
	failed=$((failed + 1))
fi
# A script that dies (or whose plan does not add up: ktap_finished exits 1) fails too.
for t in "${single_vm_tests[@]}"; do
	name=$(basename "$t" .sh)
	if ! grep -q "^# selftest: $name exit=0" "$log"; then
		echo "selftests: $name did not exit cleanly"
		failed=$((failed + 1))
	fi
done
echo "selftests: $passed passed, $failed failed, $skipped skipped"
((failed == 0 && passed > 0))
