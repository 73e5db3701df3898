# shellcheck shell=bash
# Helpers for the in-guest tests (sourced). KDIR and RXE_RS_ROOT come from scripts/vm.sh.
# shellcheck source=/dev/null # the kernel tree's, found in the guest
source "$KDIR/tools/testing/selftests/kselftest/ktap_helpers.sh"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# The CPU's CRC32 driver (the ICRC's), which udev's CPU modalias loads on a host booted with
# udev; scripts/vm.sh's guests run none. (Not on the guest's command line, which the kernel
# cuts at 2048 bytes: scripts/vm.sh counts what is left.)
[[ -d /sys/module/crc32_pclmul ]] || ! grep -qw pclmulqdq /proc/cpuinfo || modprobe -q crc32_pclmul

# Sleeps S seconds without starting a process: bash's loadable `sleep` (Debian's
# bash-builtins), else /usr/bin/sleep. In a TCG guest with KASAN a fork and exec of `sleep`
# costs tens of milliseconds of CPU, and a poll loop calling it five times a second takes that
# from the program it is waiting for. Not `read -t` on an idle pipe: in bash 5.2, a read whose
# timeout expires before it starts reading (a slow vCPU) installs an uninitialised signal mask
# (fixed in bash 5.3), which can leave SIGCHLD blocked for good; children are then never
# reaped, and `kill -0` finds them running long after they exited.
enable -f /usr/lib/bash/sleep sleep 2>/dev/null || : # (else /usr/bin/sleep)
nap() {
	sleep "$1"
}

# Polls COMMAND... until it succeeds or SECONDS run out (TCG guests are slow: be generous),
# every WAIT_FOR_INTERVAL seconds (0.2).
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		nap "${WAIT_FOR_INTERVAL:-0.2}"
	done
}

# A TCP socket listens on port P (read from /proc/net/tcp{,6}: no process to start, so it
# can be polled often). A listener's line has a zero remote address and state 0A.
tcp_listening() {
	local port text
	printf -v port ':%04X' "$1"
	read -r -d '' text </proc/net/tcp
	[[ $text == *"$port 00000000:0000 0A"* ]] && return 0
	read -r -d '' text </proc/net/tcp6
	[[ $text == *"$port 00000000000000000000000000000000:0000 0A"* ]]
}

# An rdma_cm ID listens on port P (rping, ucmatose, perftest -R: they listen on no TCP socket).
# Read from the rdma_cma trace events that cm_trace_restart enabled and cleared (call it before
# starting the server), starting no process: a listener's ID attaches to its device
# (cm_id_attach, source port P) when it binds to an address or, bound to none, inside
# rdma_listen. No event marks the listen itself: after a bind the server's next call is
# rdma_listen, so a moment's nap lets it make that call before a client is started. Without
# those events (no tracefs), `rdma resource show`: a process, which in a TCG guest with KASAN
# costs about 2 s of CPU that a poll loop takes from the server it waits for.
cm_listening() {
	local t=/sys/kernel/tracing on text
	if read -r on 2>/dev/null <"$t/events/rdma_cma/cm_id_attach/enable" && [[ $on == 1 ]]; then
		IFS= read -r -d '' text 2>/dev/null <"$t/trace"
		[[ $text =~ cm_id_attach:[^[:cntrl:]]*\ src=[^[:space:]]*:$1\ dst= ]] || return 1
		nap 0.2
		return 0
	fi
	rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr [^ ]*:$1( |$)"
}

# FILE holds TEXT (a fixed string). Read with builtins, starting no process: it is polled
# (wait_for), and a grep a poll would take its CPU from the program that writes FILE. The
# first poll may come before a writer started in the background has opened FILE: empty it
# before starting the writer, or an earlier run's words match (a killed rping client at once).
file_has() {
	local text
	IFS= read -r -d '' text 2>/dev/null <"$1"
	[[ $text == *"$2"* ]]
}

# Reads FILE whole into variable NAME, as $(cat FILE) would (without its trailing newlines),
# starting no process.
slurp() {
	local -n slurp_into=$1
	IFS= read -r -d '' slurp_into <"$2"
	while [[ $slurp_into == *$'\n' ]]; do slurp_into=${slurp_into%$'\n'}; done
	return 0
}

# Waits up to S seconds (default 120) for background process PID to exit, then kills it: a
# helper process that hangs must not hang the test (it would also keep the device open, and
# `rdma link delete` waits for every user to close it). Returns the process's exit status.
# An empty PID is a coprocess that already exited (bash unsets NAME_PID then): nothing to do.
reap() {
	local pid=$1 limit=${2:-120}
	[[ -n $pid ]] || return 0
	wait_for "$limit" eval "! kill -0 $pid 2>/dev/null" || { echo "# process $pid hung: killed"; kill -9 "$pid"; }
	wait "$pid"
}

# Runs COMMAND..., which must fail, and its output must contain MESSAGE (the strerror of the
# expected errno, as iproute2 and libibverbs print it).
fails_with() {
	local message=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "# unexpectedly succeeded: $*"
		return 1
	fi
	grep -q -- "$message" <<<"$out" || { echo "# expected '$message', got: $out"; return 1; }
}

# A veth pair with IPv4 addresses on both ends, both up: a netdev with carrier. Waits for udev
# where it runs (scripts/vm.sh's guests run none), which gives a new veth its MAC address a
# moment later (MACAddressPolicy=persistent): a device created on it before then would take
# its node GUID from the address about to go.
make_veth() {
	ip link add "${1:-veth0}" type veth peer name "${2:-veth1}"
	udevadm settle --timeout=60 2>/dev/null
	ip addr add "${3:-10.11.0.1/24}" dev "${1:-veth0}"
	ip link set "${1:-veth0}" up
	ip link set "${2:-veth1}" up
}

ib_exists() { [[ -e /sys/class/infiniband/$1 ]]; }
ib_gone() { [[ ! -e /sys/class/infiniband/$1 ]]; }
# These are polled (wait_for): they read sysfs with builtins and start no process.
# "4: ACTIVE" / "1: DOWN" from sysfs.
port_state_is() {
	local state
	read -r state 2>/dev/null <"/sys/class/infiniband/$1/ports/1/state" && [[ $state == *"$2"* ]]
}
# GID $2 is in the table of ib device $1 (among the first 32 entries, see gid_find).
gid_present() { gid_find "$1" "$2"; }
# The index of GID $2 on ib device $1 (see gid_find).
gid_index() { gid_find "$1" "$2" && echo "$REPLY"; }
# Sets REPLY to the index of GID $2 on ib device $1, among the first 32 entries: where the
# addresses of one netdev land; reading all 1024 costs seconds in a TCG guest. Unused entries
# read as zeros, or fail to read.
gid_find() {
	local i gid
	for i in {0..31}; do
		read -r gid 2>/dev/null <"/sys/class/infiniband/$1/ports/1/gids/$i" || continue
		[[ $gid == "$2" ]] && { REPLY=$i; return 0; }
	done
	return 1
}
# The guest's persistent memory (scripts/vm.sh gives the debug kernel's guests a QEMU NVDIMM,
# described by ACPI's NFIT) as a device DAX character device: prints its path. Device DAX,
# because ib_umem_get pins pages for the long term, which file systems with DAX refuse.
pmem_dax() {
	local dax=(/dev/dax*)
	if [[ ! -e ${dax[0]} ]]; then
		ndctl create-namespace --force --reconfig=namespace0.0 --mode=devdax >/dev/null || return 1
		dax=(/dev/dax*)
	fi
	[[ -c ${dax[0]} ]] && echo "${dax[0]}"
}

module_loaded() { [[ -d /sys/module/$1 ]]; }
# Port counter NAME of ib device DEV, as `rdma statistic` shows it, read from sysfs without
# starting a process (tests poll counters): hw_counter DEV NAME.
hw_counter() {
	local n
	read -r n <"/sys/class/infiniband/$1/ports/1/hw_counters/$2" && echo "$n"
}
unload() { modprobe -r "$1" 2>/dev/null; ! module_loaded "$1"; }

# Unloads rxe_rs (and rdma_rxe) so a test starts from nothing. Fails (after saying why) if a
# driver stays loaded or a device stays behind: a leaked reference is a bug of its own.
reset_modules() {
	local dev rc=0
	for dev in /sys/class/infiniband/*; do
		[[ -e $dev ]] && rdma link delete "$(basename "$dev")" 2>/dev/null
	done
	# Both drivers bind UDP 4791 when they load, so one left loaded keeps the other from loading.
	# Unloading fails while anything still holds the module: try again for a while, and say so
	# if it stays.
	local m
	for m in rxe_rs rdma_rxe; do
		module_loaded "$m" || continue
		wait_for 60 unload "$m" && continue
		echo "# reset: $m stays loaded (refcnt $(cat "/sys/module/$m/refcnt"), holders: $(ls "/sys/module/$m/holders"))"
		rc=1
	done
	if [[ -n $(ls /sys/class/infiniband 2>/dev/null) ]]; then
		echo "# reset: ib devices left: $(ls /sys/class/infiniband)"
		rc=1
	fi
	ip link del veth0 2>/dev/null || true
	ip link del veth2 2>/dev/null || true
	return $rc
}

# reset_modules for a single-VM test script: a driver that stays loaded ends the script as
# failed (KTAP "Bail out!").
reset_or_bail() {
	reset_modules || ktap_exit_fail_msg "a driver or device stayed behind (see above)"
}

# One KTAP result: "description" COMMAND... (ktap_test_result splits arguments; this does not).
# Slow checks (over 20 s, setup since the previous check included) say how long they took.
# Returns the command's status.
check() {
	local description=$1 rc=0
	shift
	if "$@"; then
		ktap_test_pass "$description"
	else
		rc=1
		ktap_test_fail "$description"
	fi
	local took=$((SECONDS - ${CHECK_MARK:-0}))
	((took > 20)) && echo "# ($took s)"
	CHECK_MARK=$SECONDS
	return $rc
}

# Runs the CHECKs of guest/FILE (pyverbs) against $DEV in one process (a Python start costs
# seconds in a TCG guest), reporting each result as it comes: run_py_checks FILE CHECK...
# The process gets the test's time limit (RXE_RS_TEST_TIMEOUT, default 1800 s) less a minute, so
# that a hung check is reported as such before the harness kills the script.
run_py_checks() {
	local file=$1 line name c
	shift
	declare -A seen
	while IFS= read -r line; do
		case $line in
		"ok "*) seen[${line#ok }]=1; ktap_test_pass "${line#ok }" ;;
		"not ok "*) name=${line#not ok }; name=${name%%:*}; seen[$name]=1; echo "# $line"; ktap_test_fail "$name" ;;
		*) echo "# $line" ;;
		esac
	done < <(timeout $((${RXE_RS_TEST_TIMEOUT:-1800} - 60)) /usr/bin/python3 "$RXE_RS_ROOT/selftests/guest/$file" "$DEV" "$@" 2>&1)
	for c in "$@"; do
		[[ -n ${seen[$c]:-} ]] || ktap_test_fail "$c (no result: the check hung or crashed)"
	done
}

# The connection managers' trace events (ib_cm's "ib_cma", rdma_cm's "rdma_cma"; on once their
# modules are loaded), emptied for each exchange so that a failure shows its own REQ/REP/REJ,
# and so that cm_listening sees only the listener started after it: call it before a server.
cm_trace_restart() {
	local t=/sys/kernel/tracing sys
	[[ -e $t/trace ]] || mount -t tracefs nodev $t 2>/dev/null || return 0
	for sys in ib_cma rdma_cma; do
		[[ -w $t/events/$sys/enable ]] && echo 1 >"$t/events/$sys/enable"
	done
	: >"$t/trace"
}

# perftest 4.5 (Debian 12's) with -R listens for its test connection only after a handshake over
# a first connection, and its client may ask first: ib_cm rejects that REQ (no listener: reason
# 8, invalid service ID), and perftest's retry then uses the rdma_cm IDs it has just destroyed and
# crashes in librdmacm (perftest 3d9d8d0 fixes both, after 4.5). Whether this side's trace shows
# such a rejection since cm_trace_restart.
perftest_lost_listen_race() {
	grep -q 'REJECTED (8/8)' /sys/kernel/tracing/trace 2>/dev/null
}
