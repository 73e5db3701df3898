# shellcheck shell=bash
# Builds what the VM needs: the kernel (cached), the module against it, the provider (installed
# on the host, whose root the guest shares), the programs the tests run in the guest. Sourced
# by run.sh, check.sh and bench.sh.
build_all() {
	local flavor=${1:-debug}
	"$RXE_RS_ROOT/scripts/kernel.sh" build "$flavor" >/dev/null
	make -s -C "$RXE_RS_ROOT" KFLAVOR="$flavor" module provider test-tools
	"$RXE_RS_ROOT/scripts/install-provider.sh"
}
