#!/usr/bin/env bash
# RC between two VMs (scripts/vm-pair.sh), in three pairings in one boot: rxe_rs on both ends,
# rxe_rs (A) with the C rdma_rxe (B), and rdma_rxe (A) with rxe_rs (B). In each: ibv_rc_pingpong
# with payload checking (-c) at 1 B..1 MiB, with and without completion events (-e), and
# perftest send/write/read bandwidth and latency. A runs the servers, B the clients. KTAP
# results go to stdout (the host counts them); the kernel log must stay clean.
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"

# One exchange: A serves, B connects. Both report it (so both logs show what failed).
run_case() {
	local name=$1
	shift
	pair_barrier "$label-$name" || { ktap_test_fail "$label $name (peer never came)"; return; }
	if [[ $PAIR_ROLE == a ]]; then
		check "$label $name (server)" pair_server "$@"
	else
		check "$label $name (client)" pair_client "$@" "$PAIR_PEER_IP"
	fi
}

pairing() {
	local mine=$1 theirs=$2
	label="$3:"
	pair_barrier "$label-start" || return
	check "$label $mine up on $PAIR_DEV" pair_stack_up "$mine"
	local size events n
	for events in "" -e; do
		for size in 1 1024 4096 65536 1048576; do
			n=10
			((size >= 65536)) && n=3
			run_case "ibv_rc_pingpong -c${events:+ $events} -s $size" \
				ibv_rc_pingpong -d "$DEV" -g "$GID" -c $events -s "$size" -n "$n"
		done
	done
	for t in ib_send_bw ib_write_bw ib_read_bw; do
		run_case "$t -s 16384" "$t" -d "$DEV" -x "$GID" -F -s 16384 -n 20
	done
	for t in ib_send_lat ib_write_lat ib_read_lat; do
		run_case "$t -s 64" "$t" -d "$DEV" -x "$GID" -F -s 64 -n 20
	done
	pair_barrier "$label-end"
}

pair_link
ktap_print_header
ktap_set_plan 51
pair_wait_peer 900 || { echo "# the peer never answered ping"; }
if [[ $PAIR_ROLE == a ]]; then
	pairing rxe_rs rxe_rs "rxe_rs<->rxe_rs"
	pairing rxe_rs rdma_rxe "rxe_rs<->rdma_rxe"
	pairing rdma_rxe rxe_rs "rdma_rxe<->rxe_rs"
else
	pairing rxe_rs rxe_rs "rxe_rs<->rxe_rs"
	pairing rdma_rxe rxe_rs "rxe_rs<->rdma_rxe"
	pairing rxe_rs rdma_rxe "rdma_rxe<->rxe_rs"
fi
reset_modules
ktap_finished
