#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# rxe_rs as a kernel verbs provider: the RDMA core's kernel clients attach (ib_mad's QP1 shows
# in `rdma resource show qp`), and librdmacm applications connect through ib_cm MADs on QP1 over
# loopback: rping with data verification and ucmatose (several RC connections), over IPv4
# and IPv6, udaddy (UD, through SIDR), mckey (multicast), rdma_server/rdma_client, rstream and riostream
# (rsockets) verifying their data, perftest over rdma_cm (-R). Each client and server must exit
# 0. A client killed mid-connection leaves its server a disconnect, not a hang.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0
A=10.11.0.1
A6=fd00:11::1

ktap_print_header
ktap_set_plan 18
reset_or_bail
make_veth veth0 veth1 "$A/24"
ip -6 addr add "$A6/64" dev veth0 nodad
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"
wait_for 30 gid_present "$DEV" "fd00:0011:0000:0000:0000:0000:0000:0001"

rdma resource show qp | sed 's/^/# /'
check "ib_mad created QP1 (GSI) on $DEV" bash -c "rdma resource show qp link $DEV/1 | grep -Eq 'lqpn 1 .*type GSI'"

# SERVER_ARGS -- CLIENT_ARGS for TOOL (or SERVER_TOOL/CLIENT_TOOL): the server in the
# background, the client once it listens on PORT; both must exit 0 within the limit.
cm_pair() {
	local tool=${1%/*} client_tool=${1#*/} port=$2 server=() client=() out rc=0
	shift 2
	while [[ $1 != -- ]]; do server+=("$1"); shift; done
	shift
	client=("$@")
	# (rping through rping_checked.sh: rdma-core 44's rping has an exit race, see there.)
	[[ $tool == rping ]] && tool=$RXE_RS_ROOT/selftests/guest/rping_checked.sh
	[[ $client_tool == rping ]] && client_tool=$RXE_RS_ROOT/selftests/guest/rping_checked.sh
	out=$(mktemp)
	cm_trace_restart # (cm_listening reads the listener from it)
	timeout 120 "$tool" "${server[@]}" >"$out.server" 2>&1 &
	local spid=$!
	wait_for 60 cm_listening "$port" || echo "# $tool: no rdma_cm listener on port $port"
	timeout 100 "$client_tool" "${client[@]}" >"$out.client" 2>&1 || rc=1
	wait "$spid" || rc=1
	# (By name: rping's wrapper is a path.)
	tail -5 "$out.server" | sed "s|^|# ${tool##*/} server: |"
	tail -5 "$out.client" | sed "s|^|# ${client_tool##*/} client: |"
	rm -f "$out" "$out.server" "$out.client"
	return $rc
}

check "rping -V over IPv4: 50 pings with data verification" \
	cm_pair rping 7174 -s -a "$A" -C 50 -S 1000 -- -c -a "$A" -C 50 -V -S 1000
check "rping -V over IPv6" \
	cm_pair rping 7174 -s -a "$A6" -C 20 -- -c -a "$A6" -C 20 -V
check "ucmatose: 4 RC connections, 20 messages each" \
	cm_pair ucmatose 7471 -b "$A" -c 4 -C 20 -- -s "$A" -c 4 -C 20
check "ucmatose over IPv6" cm_pair ucmatose 7471 -b "$A6" -c 2 -C 10 -- -s "$A6" -c 2 -C 10
check "udaddy: 2 UD endpoints through SIDR, 20 messages each" \
	cm_pair udaddy 7174 -b "$A" -c 2 -C 20 -- -s "$A" -c 2 -C 20
# Multicast: the receiver joins 239.1.2.3 (rdma_cm joins the IP group, librdmacm attaches its
# UD QP), then the sender's 10 datagrams to the group, each delivered to the device's members by
# local delivery (the copy IP loops back is dropped), must all arrive.
mckey_pair() {
	local out rc=0
	out=$(mktemp)
	# Line-buffered: mckey says it polls once its QP is attached; only then may the sender go.
	timeout 100 stdbuf -oL mckey -m 239.1.2.3 -b "$A" -C 10 >"$out.r" 2>&1 &
	local rpid=$!
	wait_for 60 file_has "$out.r" "receiving data transfers" || echo "# mckey: the receiver did not get ready"
	timeout 100 mckey -m 239.1.2.3 -b "$A" -s -C 10 >"$out.s" 2>&1 || rc=1
	wait "$rpid" || rc=1
	tail -4 "$out.r" | sed 's/^/# mckey receiver: /'
	tail -4 "$out.s" | sed 's/^/# mckey sender: /'
	rm -f "$out" "$out.r" "$out.s"
	return $rc
}
check "mckey: 10 datagrams to an IPv4 multicast group arrive" mckey_pair
check "rdma_server / rdma_client" cm_pair rdma_server/rdma_client 7471 -s "$A" -- -s "$A"
check "rstream -T v: rsockets transfers, verified" \
	cm_pair rstream 7471 -b "$A" -T v -C 100 -S 4096 -- -s "$A" -T v -C 100 -S 4096
check "riostream -T v: rsockets RDMA I/O, verified" \
	cm_pair riostream 7471 -b "$A" -T v -C 100 -S 4096 -- -s "$A" -T v -C 100 -S 4096
# perftest -R: when its client lost perftest's own listen race (perftest_lost_listen_race in
# lib.sh), which says nothing about the driver, the pair runs once more and that run counts.
perftest_cm_pair() {
	cm_pair "$@" && return 0
	perftest_lost_listen_race || return 1
	echo "# $1: perftest's client asked before perftest's server listened (REJ, no listener): once more"
	cm_pair "$@"
}
for t in ib_send_bw ib_write_bw ib_read_bw ib_send_lat; do
	check "$t -R (rdma_cm)" perftest_cm_pair "$t" 18515 -d "$DEV" -R -F -s 4096 -n 50 -- -d "$DEV" -R -F -s 4096 -n 50 "$A"
done
# UD over rdma_cm: the endpoints find each other through SIDR.
for t in ib_send_bw ib_send_lat; do
	check "$t -c UD -R (rdma_cm, SIDR)" perftest_cm_pair "$t" 18515 -d "$DEV" -c UD -R -F -s 1024 -n 50 -- -d "$DEV" -c UD -R -F -s 1024 -n 50 "$A"
done

# A client that dies mid-connection: the process exit destroys its cm_id (DREQ), and the
# server sees a disconnect and exits instead of waiting forever.
disconnect_seen() {
	local out rc=0
	out=$(mktemp)
	cm_trace_restart
	timeout 100 rping -s -a "$A" -C 100000 -v >"$out" 2>&1 &
	local spid=$!
	wait_for 60 cm_listening 7174 || echo "# rping: no rdma_cm listener"
	rping -c -a "$A" -C 100000 >/dev/null 2>&1 &
	local cpid=$!
	# Connected and pinging: the server has printed pings.
	wait_for 60 file_has "$out" "ping data" || rc=1
	kill -9 "$cpid"
	wait "$cpid" 2>/dev/null
	# The server gives up on its own, well before its timeout.
	wait_for 60 eval "! kill -0 $spid 2>/dev/null" || rc=1
	wait "$spid" 2>/dev/null
	grep -q "DISCONNECT" "$out" || rc=1
	tail -3 "$out" | sed 's/^/# rping server: /'
	rm -f "$out"
	return $rc
}
check "a client killed mid-connection: the server sees a disconnect" disconnect_seen
check "a CM exchange moved the port counters" test "$(hw_counter "$DEV" rcvd_pkts)" -gt 0

rdma link delete "$DEV"
reset_or_bail
ktap_finished
