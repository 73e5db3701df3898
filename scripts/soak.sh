#!/usr/bin/env bash
# make soak: the hostile campaign for a long while (SOAK_MINUTES, default 30), in rounds until
# the time is up: the hostile peer with many more packets, the hostile local user, the local
# attacker forging through lo, SRP (a kernel consumer polling with interrupts off), the life
# cycle under traffic with more rounds, allocation failures, exhaustion up to max_pd, max_qp and
# max_mr with 100000 reg/dereg cycles, the packages with DKMS compiling the module in the
# guest, and the lossy link with more data in all three pairings
# (make check runs rdma_rxe serving rxe_rs) and rdma_rxe on both ends as the yardstick. The first
# round also runs every interop exchange and NVMe-oF in all three pairings (make check runs a
# short profile of each), and rdma-core's pyverbs suite on rdma_rxe beside rxe_rs (make check
# compares with rdma_rxe's recorded verdicts). Stops at the first failing round; prints the
# rounds' figures (results/soak/).
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"

minutes=${SOAK_MINUTES:-30}
"$RXE_RS_ROOT/scripts/setup.sh"
build_all debug
# The long profile (make check runs the short one: 8000 packets, 8 life-cycle rounds, 2000
# reg/dereg cycles and no object to its limit, 1 MiB over one lossy pairing). One round takes
# 2-3 h under TCG, depending on the host.
export RXE_RS_HOSTILE_PACKETS=${RXE_RS_HOSTILE_PACKETS:-1000000}
export RXE_RS_LOSSY_MIB=${RXE_RS_LOSSY_MIB:-4}
export RXE_RS_LOSSY_BASELINE=1
export RXE_RS_LIFECYCLE_ROUNDS=${RXE_RS_LIFECYCLE_ROUNDS:-56}
export RXE_RS_EXHAUST_CYCLES=${RXE_RS_EXHAUST_CYCLES:-100000}
export RXE_RS_EXHAUST_FULL=1
export RXE_RS_FAULT_ROUNDS=${RXE_RS_FAULT_ROUNDS:-40}
export RXE_RS_INTEROP_FULL=1 RXE_RS_PYVERBS_LIVE=1 RXE_RS_NVMEOF_FULL=1
# The packages' test compiles the module in the guest with DKMS (make check compiles it on the
# host): 25-30 min under TCG.
export RXE_RS_PACKAGE_COMPILE=1
# A million packets take 30-55 min under TCG, the full exhaustion checks 50-90 (65536 QPs were
# created and destroyed in 1432 s on one day, 2345 s on a slower one, and the MRs come after).
export RXE_RS_TEST_TIMEOUT=${RXE_RS_TEST_TIMEOUT:-7200}
export RXE_RS_VM_TIMEOUT=${RXE_RS_VM_TIMEOUT:-14400}
# 65536 QPs with KASAN and kmemleak take more than a 2 GiB guest.
export RXE_RS_VM_MEMORY=${RXE_RS_VM_MEMORY:-4G}
export RXE_RS_RESULTS=$RXE_RS_ROOT/results/soak
# The long profile's lossy link has its time limit measured with the host to itself.
export RXE_RS_OVERLAP=0
mkdir -p "$RXE_RS_RESULTS"

# SOAK_SCRIPTS="rxe_rs_lifecycle pair/lossy_link ...": only those scripts of the round, with the
# same profile. A round takes 3-4 h on a slow machine (the million packets alone took 82 min on
# one), so it can be run in parts, each in its own invocation, and its figures put together.
soak_subset() {
	local want found=() s
	for want in $SOAK_SCRIPTS; do
		for s in "$@"; do
			[[ $s == "$RXE_RS_ROOT/selftests/$want.sh" ]] && found+=("$s") && continue 2
		done
		echo "soak: $want is not a script of the round (${*##*/selftests/})" >&2
		return 1
	done
	printf '%s\n' "${found[@]}"
}

start=$SECONDS end=$((SECONDS + minutes * 60)) round=0
while ((round == 0 || SECONDS < end)); do
	round=$((round + 1))
	echo "== soak round $round ($(((end - SECONDS) / 60)) min left)"
	once=()
	((round == 1)) && once=("$RXE_RS_ROOT"/selftests/{rxe_rs_pyverbs,pair/interop,pair/nvmeof}.sh)
	# (interop before the lossy link: a lossy_link killed at its limit leaves the link impaired.)
	scripts=("$RXE_RS_ROOT"/selftests/rxe_rs_{hostile_peer,hostile,local_forger,srp,lifecycle,faults,exhaust,package}.sh
		"${once[@]}" "$RXE_RS_ROOT/selftests/pair/lossy_link.sh")
	if [[ -n ${SOAK_SCRIPTS:-} ]]; then
		subset=$(soak_subset "${scripts[@]}") || exit 2
		mapfile -t scripts <<<"$subset"
	fi
	if ! "$RXE_RS_ROOT/selftests/run.sh" "${scripts[@]}"; then
		echo "soak: round $round failed (logs: $RXE_RS_RESULTS)"
		exit 1
	fi
	# (A part of a round may have run no single-VM guest, or no pair.)
	grep -hs '^# hostile peer\|^# life cycle' "$RXE_RS_RESULTS"/selftests-vm*.log | sed "s/^/round $round: /" || true
	grep -hs '^# relay\|started over' "$RXE_RS_RESULTS"/pair/suite-*.log | sed "s/^/round $round: /" || true
done
echo "soak: $round round(s) in $(((SECONDS - start) / 60)) min, all passed"
