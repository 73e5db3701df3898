#!/usr/bin/env bash
# One guest of `make bench` (scripts/bench.sh): for rxe_rs and rdma_rxe on both ends of the
# link, perftest RC bandwidth (64 B..1 MiB) with the kernel CPU both guests spend per GB, latency
# (2 B..4 KiB) and the 64-byte message rate with 1 and 4 QPs, then TCP with iperf3 (1 and 4
# streams) and a reference round trip without RDMA (floor_case). A serves, B connects and
# records each result as a CSV row in $PAIR_RESULTS/results.csv: stack,test,bytes,metric,value
# (stack "tcp" and "link" for the rows without RDMA; metric: MB/s for bandwidth, CPU s/GB for
# both guests' kernel CPU seconds per GB of payload, usec for latency (median), kmsg/s).
# BENCH_RUNS passes (default 3) each measure every case once, the stacks' order swapped from one
# pass to the next; bench/report.py takes the median of the passes and shows their spread.
# BENCH_CASES, an extended regex, keeps only the cases whose name ("STACK-TEST-SIZE",
# "STACK-rate-QPS", "tcp-STREAMS", "floor-udp", "floor-icmp", with "-mtu9000" appended at that
# link MTU) it matches.
# Each pass runs at a link MTU of 1500 (IB MTU 1024) and then 9000 (IB MTU 4096; bandwidth
# from 4 KiB, message rate and TCP only), whose rows are labelled "TEST mtu9000"; at 1500 it
# also runs some cases within one guest (loopback_pass, rows "TEST loopback"). With
# BENCH_SCALING=1 it is a lone 2-vCPU guest instead (scaling_pass, below).
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"
BW_SIZES="64 1024 4096 16384 65536 262144 1048576"
RUNS=${BENCH_RUNS:-3}
MTUS=${BENCH_MTUS:-1500 9000}
TAG= # label suffix of the rows at a link MTU other than 1500
REDO_FILE= # where record() notes the iterations of a run perftest printed 0.00 MB/s for
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
		# perftest's -D mode sometimes prints 0.00 for a run that moved data: no figure, not 0.
		if ! awk -v v="$value" 'BEGIN { exit !(v > 0) }'; then
			echo "# $stack $test $size: perftest printed $value MB/s"
			local iters
			iters=$(awk '{ print $2 }' <<<"$row")
			[[ -n ${REDO_FILE:-} && $iters =~ ^[1-9][0-9]*$ ]] && echo "$iters" >"$REDO_FILE"
			return 1
		fi
		[[ $unit == *Gb/sec* ]] && value=$(awk -v v="$value" 'BEGIN { printf "%.2f", v * 1000 / 8 }')
		echo "$stack,$test$TAG,$size,MB/s,$value" >>"$CSV"
	else
		echo "$stack,$test$TAG,$size,usec,$(awk '{ print $5 }' <<<"$row")" >>"$CSV"
	fi
}

# A serves, B runs the client and records the row. For bandwidth, both guests also measure
# their kernel's share of the CPU while data flows (bench/cpu_sample.py); B records both
# guests' kernel CPU seconds per GB of payload.
bench_case() {
	local stack=$1 test=$2 size=$3 case="$1-$2-$3${TAG:+-mtu$MTU}"
	shift 3
	wanted "$case" || return 0
	case+="-$PASS"
	REDO_FILE=$PAIR_RESULTS/redo.$case
	measure "$stack" "$test" "$size" "$case" "$@"
	local rc=$?
	REDO_FILE=
	[[ $test == *_bw ]] || return $rc
	# perftest 4.5's duration mode sometimes prints 0.00 MB/s for a run that moved data (B
	# then wrote down its iteration count): both run it once more for that many iterations.
	pair_barrier "$case-redo"
	[[ -s $PAIR_RESULTS/redo.$case ]] || return $rc
	local iters
	iters=$(cat "$PAIR_RESULTS/redo.$case")
	echo "# $case: again with -n $iters"
	measure "$stack" "$test" "$size" "$case-n" -n "$iters"
}

# One exchange of bench_case, named CASE, with perftest's ARGS; B records its rows.
measure() {
	local stack=$1 test=$2 size=$3 case=$4
	shift 4
	local sampler= profiler= cpu=$PAIR_RESULTS/cpu.$case counters=$PAIR_RESULTS/counters.$case
	if [[ $test == *_bw ]]; then
		port_counters >"$counters.$PAIR_ROLE.before"
		python3 "$RXE_RS_ROOT/bench/cpu_sample.py" "$PAIR_DEV" "$cpu.$PAIR_ROLE.split" >"$cpu.$PAIR_ROLE" &
		sampler=$!
		if [[ -n ${BENCH_PERF:-} ]]; then
			perf record -a -g -e cpu-clock -o "$(perf_data "$case")" \
				>/dev/null 2>&1 &
			profiler=$!
		fi
	fi
	pair_exchange "$case" "$test" -d "$DEV" -x "$GID" -F -s "$size" "$@"
	local rc=$?
	if [[ -n $sampler ]]; then
		kill -TERM "$sampler"
		wait "$sampler"
		echo "# $case $PAIR_ROLE cpu: kernel $(cat "$cpu.$PAIR_ROLE") ($(cat "$cpu.$PAIR_ROLE.split" 2>/dev/null || echo -))"
		[[ -n $profiler ]] && profile_report "$case" "$profiler"
		counter_deltas "$counters.$PAIR_ROLE.before" <(port_counters) >"$counters.$PAIR_ROLE"
		echo "# $case $PAIR_ROLE counters: $(cat "$counters.$PAIR_ROLE")"
		rm -f "$counters.$PAIR_ROLE.before"
		pair_barrier "$case-cpu"
	fi
	((rc == 0)) || return 1
	[[ $PAIR_ROLE == a ]] && return 0
	# (No CPU row without this run's MB/s: record_cpu would divide by another pass's.)
	record "$stack" "$test" "$size" || return 1
	[[ -n $sampler ]] && record_cpu "$stack" "$test$TAG" "$size" "$cpu"
}

# This guest's port counters of $DEV ("NAME VALUE" lines), and the nonzero changes between
# two such lists: what a bandwidth case cost in packets, ACKs, doorbells and retransmissions
# (rdma_rxe counts packets, duplicates and sequence errors under rxe_rs's names, not the
# rest), kept as counters.CASE.ROLE.
port_counters() {
	local f
	for f in "/sys/class/infiniband/$DEV/ports/1/hw_counters/"*; do
		[[ -r $f ]] && printf '%s %s\n' "${f##*/}" "$(<"$f")"
	done
}
counter_deltas() {
	awk 'NR == FNR { before[$1] = $2; next }
		$2 != before[$1] { printf "%s%s=%d", sep, $1, $2 - before[$1]; sep = " " }
		END { print "" }' "$1" "$2"
}

# BENCH_PERF: each guest's profile of a bandwidth case (`perf record -a -g` while it ran), as
# perf.CASE.ROLE.txt in the results: the symbols by their own share of the samples, then the
# callers of the top ones.
# The samples go to the guest's memory: written to the shared results folder, perf's own 9p
# writes took a quarter of the samples.
perf_data() { echo "/tmp/perf.$1.$PAIR_ROLE.data"; }
profile_report() {
	local case=$1 profiler=$2 data
	data=$(perf_data "$1")
	kill -INT "$profiler"
	wait "$profiler"
	{
		perf report -i "$data" --stdio --no-children --sort sym -g none 2>/dev/null |
			grep -v '^$' | head -60
		echo
		perf report -i "$data" --stdio --no-children --sort sym -g caller,0.5,callee,function,percent \
			--percent-limit 3 2>/dev/null | grep -v '^$' | head -300
	} >"$PAIR_RESULTS/perf.$case.$PAIR_ROLE.txt"
	rm -f "$data"
}

# Both guests' kernel CPU seconds per GB of payload: their kernel CPU shares (seconds per
# second) over the payload rate of the bandwidth row just recorded (a row only when both
# guests measured).
record_cpu() {
	local a b mbs
	a=$(cat "$4.a" 2>/dev/null) b=$(cat "$4.b" 2>/dev/null)
	mbs=$(awk -F, -v s="$1" -v t="$2" -v n="$3" '$1 == s && $2 == t && $3 == n && $4 == "MB/s" { v = $5 } END { print v }' "$CSV")
	if ! [[ $a =~ ^[0-9.]+$ && $b =~ ^[0-9.]+$ && $mbs =~ ^[0-9.]+$ ]] || ! awk -v m="$mbs" 'BEGIN { exit !(m > 0) }'; then
		echo "# $1 $2 $3: no CPU figure (A: $a, B: $b, MB/s: $mbs)"
		return 1
	fi
	echo "$1,$2,$3,CPU s/GB,$(awk -v a="$a" -v b="$b" -v m="$mbs" 'BEGIN { printf "%.2f", (a + b) * 1000 / m }')" >>"$CSV"
}

# Message rate: the MsgRate column (5th, Mpps) of a bandwidth row, in thousands of messages
# per second, as "TEST -q N" rows.
record_rate() {
	local stack=$1 test=$2 size=$3 qps=$4 row
	row=$(awk -v s="$size" '$1 == s && NF >= 5 { print; exit }' <<<"$PAIR_OUT")
	[[ -n $row ]] || { echo "# $stack $test $size -q $qps: no result"; return 1; }
	echo "$stack,$test -q $qps$TAG,$size,kmsg/s,$(awk '{ printf "%.2f", $5 * 1000 }' <<<"$row")" >>"$CSV"
}

# Whether the case named $1 is one BENCH_CASES keeps (all when it is unset).
wanted() { [[ -z ${BENCH_CASES:-} || $1 =~ $BENCH_CASES ]]; }

# Every case of STACK once.
stack_pass() {
	local stack=$1 test size qps bw_sizes=$BW_SIZES lat_sizes=$LAT_SIZES
	[[ -n $TAG ]] && bw_sizes="4096 65536 1048576" lat_sizes=
	if ! pair_barrier "$stack-start-$MTU-$PASS" || ! pair_stack_up_both "$stack" "$stack-$MTU-$PASS"; then
		echo "# $stack did not come up on both guests"
		return
	fi
	for test in ib_send_bw ib_write_bw ib_read_bw; do
		for size in $bw_sizes; do
			bench_case "$stack" "$test" "$size" -D 3
		done
	done
	for test in ib_send_lat ib_write_lat ib_read_lat; do
		for size in $lat_sizes; do
			bench_case "$stack" "$test" "$size" -n 500
		done
	done
	# Message rate at 64 B, one QP and four.
	for qps in 1 4; do
		wanted "$stack-rate-$qps${TAG:+-mtu$MTU}" || continue
		pair_exchange "$stack-rate-$qps-$MTU-$PASS" ib_write_bw -d "$DEV" -x "$GID" -F -s 64 -q "$qps" -D 3 &&
			[[ $PAIR_ROLE == b ]] && record_rate "$stack" ib_write_bw 64 "$qps"
	done
}

# One guest alone (A; B waits): both ends of perftest on A, over its own address. Rows "TEST
# loopback": bandwidth at 64 KiB, latency at 64 B, the message rate at 64 B with one QP; cases
# "STACK-TEST-SIZE-loopback". With one vCPU only the cases whose server sleeps (WRITE, READ)
# mean something: two busy-polling processes take turns at the scheduler tick (send and write
# latency both read 1000 us then). No CPU per GB: rdma_rxe hands a local packet to its own
# receive path, so `lo`, which bench/cpu_sample.py watches, shows none of its traffic.
loopback_pass() {
	local stack=$1 test cases=() c words
	pair_barrier "loopback-$stack-$PASS" || return
	[[ $PAIR_ROLE == a ]] || return 0
	cases=("ib_write_bw 65536 -D 3" "ib_read_bw 65536 -D 3" "ib_read_lat 64 -n 500" "rate 64 -D 3")
	(($(nproc) > 1)) && cases+=("ib_send_bw 65536 -D 3" "ib_send_lat 64 -n 500" "ib_write_lat 64 -n 500")
	local wanted_cases=()
	for c in "${cases[@]}"; do
		read -r -a words <<<"$c"
		wanted "$stack-${words[0]}-${words[1]}-loopback" && wanted_cases+=("$c")
	done
	((${#wanted_cases[@]})) || return 0
	pair_stack_up "$stack" || { echo "# $stack did not come up for loopback"; return; }
	TAG=" loopback"
	for c in "${wanted_cases[@]}"; do
		read -r -a words <<<"$c"
		loopback_case "$stack" "${words[@]}"
	done
	TAG=
	reset_modules
}

# One case of loopback_pass: perftest's server in the background, its client here; TEST "rate"
# is ib_write_bw's message rate.
loopback_case() {
	local stack=$1 test=$2 size=$3 tool=$2
	shift 3
	[[ $test == rate ]] && tool=ib_write_bw
	local cmd=("$tool" -d "$DEV" -x "$GID" -F -s "$size" "$@")
	"${cmd[@]}" >"$PAIR_RESULTS/loopback-server.out" 2>&1 &
	local server=$!
	wait_listening 18515 60 || echo "# loopback $stack $test: the server did not listen"
	# What the case cost in packets, ACKs and doorbells (both ends are this guest's).
	local cpus counters split sampler=
	cpus=$(nproc)
	counters=$PAIR_RESULTS/counters.$stack-$test-$size${QPS:+-q$QPS}-${cpus}cpu-$PASS
	port_counters >"$counters.before"
	# Where the guest's CPUs went while packets moved (sent_pkts marks the steady part: no
	# netdev counts packets between QPs of one host): whether the vCPUs had time to spare.
	split=$PAIR_RESULTS/cpu.$stack-$test-$size${QPS:+-q$QPS}-${cpus}cpu-$PASS
	if [[ $test != *_lat ]]; then
		python3 "$RXE_RS_ROOT/bench/cpu_sample.py" "/sys/class/infiniband/$DEV/ports/1/hw_counters/sent_pkts" \
			"$split.split" >"$split" &
		sampler=$!
	fi
	PAIR_OUT=$(timeout 120 "${cmd[@]}" "$PAIR_MY_IP" 2>&1)
	local rc=$?
	reap "$server" 60
	counter_deltas "$counters.before" <(port_counters) >"$counters"
	rm -f "$counters.before"
	echo "# loopback $stack $test $size${QPS:+ -q $QPS} counters: $(cat "$counters")"
	if [[ -n $sampler ]]; then
		kill -TERM "$sampler"
		wait "$sampler"
		echo "# loopback $stack $test $size${QPS:+ -q $QPS} cpu: kernel $(cat "$split") ($(cat "$split.split" 2>/dev/null || echo -)) of $(nproc)"
	fi
	((rc == 0)) || { echo "# loopback $stack $test: client exit $rc"; tail -3 <<<"$PAIR_OUT"; return 1; }
	if [[ $test == rate ]]; then
		record_rate "$stack" ib_write_bw "$size" "${QPS:-1}"
	else
		record "$stack" "$test" "$size"
	fi
}

# BENCH_SCALING=1: this guest alone, with 2 vCPUs (scripts/bench.sh boots it after the pair,
# as A): both ends of perftest here, with 1 QP and with 4, for the 64 KiB WRITE bandwidth and
# the 64-byte message rate, rows "TEST -q N loopback Ncpu"; cases "STACK-TEST-SIZE-qN-scaling";
# then SEND and WRITE latency at 64 B (rows "TEST loopback Ncpu", cases "...-q1-scaling"):
# each busy-polling end has a CPU of its own.
# Whether more QPs use more CPUs: rdma_rxe runs its QPs' work on an unbound workqueue, rxe_rs
# receives a QP's local packets in the lane of the CPU its QP number picks.
scaling_pass() {
	local stack=$1 qps test size tool
	pair_stack_up "$stack" || { echo "# $stack did not come up for the scaling pass"; return; }
	for qps in 1 4; do
		for test in "ib_write_bw 65536" "rate 64"; do
			read -r tool size <<<"$test"
			wanted "$stack-$tool-$size-q$qps-scaling" || continue
			TAG=" -q $qps loopback $(nproc)cpu" QPS=$qps
			[[ $tool == rate ]] && TAG=" loopback $(nproc)cpu"
			loopback_case "$stack" "$tool" "$size" -D 3 -q "$qps"
		done
	done
	for test in "ib_send_lat 64" "ib_write_lat 64"; do
		read -r tool size <<<"$test"
		wanted "$stack-$tool-$size-q1-scaling" || continue
		TAG=" loopback $(nproc)cpu" QPS=
		loopback_case "$stack" "$tool" "$size" -n 1000
	done
	TAG= QPS=
	reset_modules
}

pair_link
if [[ -n ${BENCH_SCALING:-} ]]; then
	for ((PASS = 1; PASS <= RUNS; PASS++)); do
		if ((PASS % 2)); then stacks="rxe_rs rdma_rxe"; else stacks="rdma_rxe rxe_rs"; fi
		for stack in $stacks; do
			scaling_pass "$stack"
		done
	done
	exit 0
fi
pair_wait_peer 900 || echo "# the peer never answered ping"

# TCP on the same link, for scale: STREAMS streams with iperf3.
tcp_case() {
	local streams=$1 out bps
	wanted "tcp-$streams${TAG:+-mtu$MTU}" || return 0
	pair_barrier "tcp-$streams-$MTU-$PASS"
	if [[ $PAIR_ROLE == a ]]; then
		timeout 90 iperf3 -s -1 >"$PAIR_RESULTS/iperf3-server-$streams.log" 2>&1
		return
	fi
	# Retried while the server is not listening yet: an attempt counts only if its JSON has a
	# result (iperf3 -J has exited 0 with "connection refused" in it). The last attempt stays
	# in iperf3-client-N.log (.err).
	for _ in $(seq 30); do
		out=$(timeout 60 iperf3 -c "$PAIR_PEER_IP" -t 5 -P "$streams" -J 2>"$PAIR_RESULTS/iperf3-client-$streams.err")
		bps=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])' <<<"$out" 2>/dev/null)
		[[ -n $bps ]] && break
		sleep 1
	done
	echo "$out" >"$PAIR_RESULTS/iperf3-client-$streams.log"
	# No row when it failed: the report shows "-" and `make bench` fails, rather than a 0.
	if [[ -n $bps ]]; then
		awk -v b="$bps" -v n="$streams" -v t="$TAG" 'BEGIN { printf "tcp,iperf3 -P %d%s,131072,MB/s,%.2f\n", n, t, b / 8e6 }' >>"$CSV"
	else
		echo "# iperf3 -P $streams failed: see iperf3-client-$streams.log"
	fi
}

# A reference round trip for the latency rows (bench/echo_floor.py): 64-byte echoes polled
# without sleeping, as perftest's latency tests poll. "echo rtt/2 (both busy)": UDP echoed by
# a polling process on A, half the round trip, next to send and write latency (both ends
# poll); "echo rtt (client busy)": ICMP echoed by A's kernel in softirq, as a READ responder
# answers, a whole round trip, next to READ latency. Under TCG on a 2-core host a packet waits
# for QEMU's threads, which busy vCPU threads crowd out: that wait is in every stack's figure.
# Python's polls cost more than perftest's, so a stack can come in under it.
floor_case() {
	local mode=$1 label=$2 halve=$3 port=18515 server= rtt
	wanted "floor-$mode" || return 0
	pair_barrier "floor-$mode-$PASS"
	if [[ $PAIR_ROLE == a && $mode == udp ]]; then
		python3 "$RXE_RS_ROOT/bench/echo_floor.py" serve "$port" "$PAIR_RESULTS/floor-ready-$PASS" &
		server=$!
		wait_listening "mark:floor-ready-$PASS" 60 || echo "# echo_floor serve did not start"
	fi
	pair_barrier "floor-$mode-serving-$PASS"
	if [[ $PAIR_ROLE == b ]]; then
		if [[ $mode == udp ]]; then
			rtt=$(timeout 120 python3 "$RXE_RS_ROOT/bench/echo_floor.py" udp "$PAIR_PEER_IP" "$port" 500)
		else
			rtt=$(timeout 120 python3 "$RXE_RS_ROOT/bench/echo_floor.py" icmp "$PAIR_PEER_IP" 500)
		fi
		if [[ -n $rtt ]]; then
			awk -v r="$rtt" -v h="$halve" -v l="$label" 'BEGIN { printf "link,%s,64,usec,%.2f\n", l, r / h }' >>"$CSV"
		else
			echo "# echo_floor $mode: no result"
		fi
	fi
	pair_barrier "floor-$mode-done-$PASS"
	[[ -n $server ]] && kill "$server" && wait "$server" 2>/dev/null
	return 0
}

# The link's MTU on both guests; both must have it before either sends.
set_mtu() {
	ip link set dev "$PAIR_DEV" mtu "$1" || echo "# cannot set MTU $1 on $PAIR_DEV"
	pair_barrier "mtu-$1-$PASS"
	ping -c1 -W5 -M 'do' -s $(($1 - 28)) "$PAIR_PEER_IP" >/dev/null 2>&1 ||
		echo "# MTU $1: the peer does not answer a ping of that size"
}

for ((PASS = 1; PASS <= RUNS; PASS++)); do
	if ((PASS % 2)); then stacks="rxe_rs rdma_rxe"; else stacks="rdma_rxe rxe_rs"; fi
	for MTU in $MTUS; do
		TAG=
		((MTU != 1500)) && TAG=" mtu$MTU"
		set_mtu "$MTU"
		for stack in $stacks; do
			stack_pass "$stack"
		done
		reset_modules
		if [[ -z $TAG ]]; then
			for stack in $stacks; do
				loopback_pass "$stack"
			done
		fi
		tcp_case 1
		tcp_case 4
		if [[ -z $TAG ]]; then
			floor_case udp "echo rtt/2 (both busy)" 2
			floor_case icmp "echo rtt (client busy)" 1
		fi
	done
done
set_mtu 1500
pair_barrier 'done'
