#!/usr/bin/env bash
# The demo's guest script (scripts/demo-guest.sh, what `make run` shows a user) on the pair of
# VMs, with its output checked: the device shows up ACTIVE, ibv_rc_pingpong runs over the IPv4
# GID with its payload checked, ib_write_bw reports its bandwidth line, no shell error, and the
# summary lines run.sh prints say the same.
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"

ktap_print_header
ktap_set_plan 7
reset_or_bail
log=$(mktemp)
timeout 900 bash "$RXE_RS_ROOT/scripts/demo-guest.sh" >"$log" 2>&1
rc=$?
sed 's/^/# /' "$log"
printed() { grep -qE -- "$1" "$log"; }
not_printed() { ! grep -qE -- "$1" "$log"; }
me=$(ip -o -4 addr show | grep -oE '10\.10\.0\.[12]' | head -1)
check "demo: the guest script exits 0" test "$rc" -eq 0
check "demo: no shell error" not_printed 'command not found|No such file|syntax error'
check "demo: rxers0 ACTIVE in ibv_devinfo" printed 'state:[[:space:]]+PORT_ACTIVE'
check "demo: ibv_rc_pingpong uses the GID of $me" printed "local address: .*GID ::ffff:$me"
check "demo: ibv_rc_pingpong moved 100 x 4096 B, payload checked" printed '^819200 bytes in [0-9.]+ seconds'
check "demo: ib_write_bw reports 200 x 64 KiB" printed '^ *65536 +200 +[0-9.]+'
summary() {
	printed "^demo: rxers0 on .*: port 1 PORT_ACTIVE, RoCEv2 GID index [0-9]+ is ::ffff:$me\$" &&
		printed '^demo: ibv_rc_pingpong: 100 SENDs of 4096 B each way, every byte checked \([0-9.]+ Mbit/s\)$' &&
		printed '^demo: ib_write_bw: 200 RDMA WRITEs of 64 KiB, [0-9.]+ MB/s on average$'
}
check "demo: the summary lines give the port state, the GID and both results" summary
rm -f "$log"
rdma link delete rxers0 2>/dev/null
reset_modules
ktap_finished
