#!/usr/bin/env bash
# Guest side of capture-rdma-rxe.sh: role a serves and captures, role b is the client.
set -x
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh" # gid_index, nap, tcp_listening
pair_link
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev "$PAIR_DEV"
pair_wait_peer 300 || { echo "peer never answered"; exit 1; }
sleep 2
gid=$(ipv4_gid_index rxe0)
retry() { for _ in $(seq 60); do "$@" && return 0; sleep 1; done; return 1; }
if [[ $PAIR_ROLE == a ]]; then
	tcpdump -i "$PAIR_DEV" -U -w "$PAIR_RESULTS/rdma_rxe.pcap" udp port 4791 &
	dump=$!
	sleep 2
	ibv_rc_pingpong -d rxe0 -g "$gid" -s 2500 -n 2 -c
	ib_write_bw -d rxe0 -x "$gid" -F -s 3000 -n 5
	ib_read_bw -d rxe0 -x "$gid" -F -s 3000 -n 5
	sleep 2
	kill "$dump"
	wait "$dump"
else
	retry ibv_rc_pingpong -d rxe0 -g "$gid" -s 2500 -n 2 -c "$PAIR_PEER_IP"
	sleep 3
	retry ib_write_bw -d rxe0 -x "$gid" -F -s 3000 -n 5 "$PAIR_PEER_IP"
	sleep 3
	retry ib_read_bw -d rxe0 -x "$gid" -F -s 3000 -n 5 "$PAIR_PEER_IP"
fi
