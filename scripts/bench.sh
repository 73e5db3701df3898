#!/usr/bin/env bash
# make bench: rxe_rs against rdma_rxe (and TCP) on the same pair of VMs and link, with the
# kernel built without the debug set. Prints a side-by-side table and writes results/bench/
# bench.csv and bench.png. Numbers from TCG VMs measure CPU cost more than anything else;
# only the ratios between stacks of one run mean something.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"

"$RXE_RS_ROOT/scripts/setup.sh"
build_all bench
out=$RXE_RS_ROOT/results/bench
rm -rf "$out"
mkdir -p "$out"
# The module just built is for the bench kernel: keep it apart from the test kernel's.
cp "$RXE_RS_ROOT/rxe_rs.ko" "$out/rxe_rs.ko"
cp "$RXE_RS_ROOT/rxe_rs.ko.kdir" "$out/rxe_rs.ko.kdir"
# The VMs' link is a host UDP socket per QEMU (the socket netdev) with the default receive
# buffer, 208 KiB: a guest that falls behind loses packets there, and the bench would measure
# the emulator's buffer more than the stacks. Over it, the bench gets 4 MiB (put back after);
# what losses cost is measured apart (selftests/pair/lossy_link.sh, Documentation/performance.md).
# The setting is host-wide: other VM runs meanwhile get it too.
rmem=$(sysctl -n net.core.rmem_default)
if ((rmem < 4194304)); then
	if sysctl -qw net.core.rmem_default=4194304 2>/dev/null; then
		trap 'sysctl -qw net.core.rmem_default='"$rmem" EXIT
	else
		echo "bench: cannot raise net.core.rmem_default (not root?): the link keeps $rmem bytes and will drop more"
	fi
fi
udp_drops() { awk '/^Udp:/ { getline; print $6; exit }' /proc/net/snmp; }
drops_before=$(udp_drops)
echo "bench: two VMs (bench kernel), perftest for rxe_rs then rdma_rxe, then iperf3; logs: $out"
# BENCH_RUNS passes (median and spread reported), BENCH_CASES to run some cases only,
# BENCH_MTUS the link MTUs, BENCH_PERF=1 a profile of each bandwidth case per guest (see
# bench/guest.sh).
runs=${BENCH_RUNS:-3}
guest=(env BENCH_RUNS="$runs" BENCH_CASES="${BENCH_CASES:-}" BENCH_MTUS="${BENCH_MTUS:-1500 9000}"
	BENCH_PERF="${BENCH_PERF:-}" bash "$RXE_RS_ROOT/bench/guest.sh")
RXE_RS_MODULE=$out/rxe_rs.ko "$RXE_RS_ROOT/scripts/vm-pair.sh" --flavor bench --timeout $((600 + runs * 3000)) "$out" \
	-- "${guest[@]}" -- "${guest[@]}" || true
# Scaling over CPUs: one guest with 2 vCPUs (the host has 2 cores; two such guests would
# share them), perftest with both ends in it, 1 QP and 4, and the latency of one.
# (BENCH_CASES as the guest reads it: a regex over the case names, bench/guest.sh.)
scaling_wanted() {
	local c
	for c in {rxe_rs,rdma_rxe}-{ib_write_bw-65536,rate-64}-q{1,4}-scaling \
		{rxe_rs,rdma_rxe}-{ib_send_lat,ib_write_lat}-64-q1-scaling; do
		[[ -z ${BENCH_CASES:-} || $c =~ $BENCH_CASES ]] && return 0
	done
	return 1
}
if scaling_wanted; then
	echo "bench: one VM with 2 vCPUs, 1 QP and 4 over loopback"
	port=$((20000 + RANDOM % 20000))
	RXE_RS_MODULE=$out/rxe_rs.ko "$RXE_RS_ROOT/scripts/vm.sh" --flavor bench --timeout $((300 + runs * 600)) \
		--cpus 2 --memory 2G --rwdir "$out" --name rxe-scaling --nic "52:54:00:10:00:01,$port,$((port + 1))" \
		-- env PAIR_ROLE=a PAIR_RESULTS="$out" BENCH_SCALING=1 "${guest[@]}" >"$out/vm-scaling.log" 2>&1 || true
fi
echo "bench: the link dropped $(($(udp_drops) - drops_before)) datagrams (host UDP receive buffers full; other host traffic counts too)"
[[ -s $out/results.csv ]] || { tail -30 "$out"/vm-*.log; echo "bench: no results" >&2; exit 1; }
python3 "$RXE_RS_ROOT/bench/report.py" ${BENCH_CASES:+--partial} "$out"
