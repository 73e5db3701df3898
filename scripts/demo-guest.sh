#!/usr/bin/env bash
# One guest of the demo (scripts/run.sh): brings up rxers0 on the link to the other VM, then A
# serves and B connects: ibv_rc_pingpong with payload checking, then ib_write_bw. Exits
# non-zero if a step fails. selftests/pair/demo.sh runs it in the suite and checks its output.
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"
pair_link
set -e
set -x
rdma link add rxers0 type rxe_rs netdev "$PAIR_DEV"
rdma link show
ibv_devices
ibv_devinfo -d rxers0
{ set +x; } 2>/dev/null
# The RoCEv2 GID of our IPv4 address: its index is where the netdev's addresses landed.
wait_for 30 ipv4_gid_index rxers0 >/dev/null || { echo "demo: rxers0 has no GID for $PAIR_MY_IP" >&2; exit 1; }
gid=$(ipv4_gid_index rxers0)
echo "demo: GID index $gid is ::ffff:$PAIR_MY_IP"
pair_wait_peer 900
touch "$PAIR_RESULTS/$PAIR_ROLE.up"
until [[ -e $PAIR_RESULTS/a.up && -e $PAIR_RESULTS/b.up ]]; do nap 0.2; done
retry() { for _ in $(seq 60); do "$@" && return; nap 1; done; return 1; }
if [[ $PAIR_ROLE == a ]]; then
	set -x
	ibv_rc_pingpong -d rxers0 -g "$gid" -c -s 4096 -n 100
	ib_write_bw -d rxers0 -x "$gid" -F -s 65536 -n 200
else
	sleep 2
	set -x
	retry ibv_rc_pingpong -d rxers0 -g "$gid" -c -s 4096 -n 100 "$PAIR_PEER_IP"
	sleep 2
	retry ib_write_bw -d rxers0 -x "$gid" -F -s 65536 -n 200 "$PAIR_PEER_IP"
fi
