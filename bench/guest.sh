#!/usr/bin/env bash
# One guest of `make bench` (scripts/bench.sh): for rxe_rs and then rdma_rxe on both ends of the
# link, perftest RC bandwidth (64 B..1 MiB) and latency (2 B..4 KiB), then TCP with iperf3. A
# serves, B connects and records each result as a CSV row in $PAIR_RESULTS/results.csv:
# stack,test,bytes,metric,value (metric: MB/s for bandwidth, usec for latency, median).
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"
BW_SIZES="64 1024 4096 16384 65536 262144 1048576"
LAT_SIZES="2 64 1024 4096"
CSV=$PAIR_RESULTS/results.csv

# perftest's result row is the line that starts with the message size; BW average is its 4th
# column (in the unit its header names), t_typical (the median) the 5th of a latency row.
record() {
	local stack=$1 test=$2 size=$3 row unit value
	row=$(awk -v s="$size" '$1 == s && NF >= 4 { print; exit }' <<<"$PAIR_OUT")
	[[ -n $row ]] || { echo "# $stack $test $size: no result"; return 1; }
	if [[ $test == *_bw ]]; then
		unit=$(grep -oE 'BW average\[[A-Za-z/]+\]' <<<"$PAIR_OUT" | head -1)
		value=$(awk '{ print $4 }' <<<"$row")
		[[ $unit == *Gb/sec* ]] && value=$(awk -v v="$value" 'BEGIN { printf "%.2f", v * 1000 / 8 }')
		echo "$stack,$test,$size,MB/s,$value" >>"$CSV"
	else
		echo "$stack,$test,$size,usec,$(awk '{ print $5 }' <<<"$row")" >>"$CSV"
	fi
}

# A serves, B runs the client and records the row.
bench_case() {
	local stack=$1 test=$2 size=$3
	shift 3
	pair_exchange "$stack-$test-$size" "$test" -d "$DEV" -x "$GID" -F -s "$size" "$@" || return 1
	[[ $PAIR_ROLE == a ]] || record "$stack" "$test" "$size"
}

pair_link
pair_wait_peer 900 || echo "# the peer never answered ping"
for stack in rxe_rs rdma_rxe; do
	pair_barrier "$stack-start" && pair_stack_up_both "$stack" "$stack" || { echo "# $stack did not come up on both guests"; continue; }
	for test in ib_send_bw ib_write_bw ib_read_bw; do
		for size in $BW_SIZES; do
			bench_case "$stack" "$test" "$size" -D 3
		done
	done
	for test in ib_send_lat ib_write_lat ib_read_lat; do
		for size in $LAT_SIZES; do
			bench_case "$stack" "$test" "$size" -n 500
		done
	done
done
reset_modules

# TCP on the same link, for scale.
pair_barrier tcp
if [[ $PAIR_ROLE == a ]]; then
	timeout 90 iperf3 -s -1 >"$PAIR_RESULTS/iperf3-server.log" 2>&1
else
	# Retried while the server is not listening yet: an attempt counts only if its JSON has a
	# result (iperf3 -J has exited 0 with "connection refused" in it). The last attempt stays
	# in iperf3-client.log (.err).
	for _ in $(seq 30); do
		out=$(timeout 60 iperf3 -c "$PAIR_PEER_IP" -t 5 -J 2>"$PAIR_RESULTS/iperf3-client.err")
		bps=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])' <<<"$out" 2>/dev/null)
		[[ -n $bps ]] && break
		sleep 1
	done
	echo "$out" >"$PAIR_RESULTS/iperf3-client.log"
	# No row when it failed: the report shows "-" and `make bench` fails, rather than a 0.
	if [[ -n $bps ]]; then
		awk -v b="$bps" 'BEGIN { printf "tcp,iperf3,131072,MB/s,%.2f\n", b / 8e6 }' >>"$CSV"
	else
		echo "# iperf3 failed: see iperf3-client.log"
	fi
fi
pair_barrier done
