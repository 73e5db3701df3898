# shellcheck shell=bash
# Builds what the VM needs: the kernel (cached), the module against it, the provider (installed
# on the host, whose root the guest shares), the programs the tests run in the guest. Sourced
# by run.sh, check.sh, bench.sh and soak.sh.

# The test kernel of FLAVOR, built once and cached. A first build takes 20-25 min on 2 cores:
# meanwhile a line a minute says how far it is (objects built, out of about as many as the last
# build of that flavor made, which the cache keeps).
build_kernel() {
	local flavor=${1:-debug} kdir total reporter rc=0
	kdir=$("$RXE_RS_ROOT/scripts/kernel.sh" path "$flavor")
	[[ -e $kdir/.rxe_rs-built ]] && return 0
	total=$(cat "$RXE_RS_CACHE/kernel-objects-$flavor" 2>/dev/null) || total=2150
	echo "kernel: building the $flavor test kernel once (20-25 min on 2 cores; later runs reuse it)" >&2
	# (It also ends within a minute of its parent, should that be stopped.)
	(
		start=$SECONDS
		while sleep 60 && kill -0 $$ 2>/dev/null; do
			echo "kernel: $(((SECONDS - start) / 60)) min: $(find "$kdir" -name '*.o' 2>/dev/null | wc -l) of about $total objects built" >&2
		done
	) &
	reporter=$!
	"$RXE_RS_ROOT/scripts/kernel.sh" build "$flavor" >/dev/null || rc=$?
	kill "$reporter" 2>/dev/null || true
	# (A killed job's status is 143: not ours to return, and fatal to a caller under set -e.)
	wait "$reporter" 2>/dev/null || true
	if ((rc == 0)); then
		find "$kdir" -name '*.o' | wc -l >"$RXE_RS_CACHE/kernel-objects-$flavor"
	fi
	return $rc
}

# Each step's failure is the function's, also where a caller's `|| ...` turns set -e off.
build_all() {
	local flavor=${1:-debug}
	build_kernel "$flavor" &&
		make -s -C "$RXE_RS_ROOT" KFLAVOR="$flavor" module provider test-tools &&
		"$RXE_RS_ROOT/scripts/install-provider.sh"
}
