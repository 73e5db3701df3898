#!/usr/bin/env bash
# One guest of the demo (scripts/run.sh): brings up rxers0 on the link to the other VM, then A
# serves and B connects: ibv_rc_pingpong with payload checking, then ib_write_bw. Each step's
# full output goes to the log, and a line starting "demo:" says what it showed (run.sh prints
# those). Exits non-zero if a step fails. selftests/pair/demo.sh runs it in the suite and
# checks its output.
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"
pair_link
set -e
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Runs a command with its output in the log and kept in $out.
shown() {
	echo "+ $*"
	"$@" 2>&1 | tee "$out"
	return "${PIPESTATUS[0]}"
}

shown rdma link add rxers0 type rxe_rs netdev "$PAIR_DEV"
shown rdma link show
shown ibv_devices
shown ibv_devinfo -d rxers0
state=$(sed -nE 's/^[[:space:]]+state:[[:space:]]+([A-Z_]+).*/\1/p' "$out" | head -1)
# The RoCEv2 GID of our IPv4 address: its index is where the netdev's addresses landed.
wait_for 30 ipv4_gid_index rxers0 >/dev/null || { echo "demo: rxers0 has no GID for $PAIR_MY_IP" >&2; exit 1; }
gid=$(ipv4_gid_index rxers0)
echo "demo: rxers0 on $PAIR_DEV ($PAIR_MY_IP): port 1 $state, RoCEv2 GID index $gid is ::ffff:$PAIR_MY_IP"
pair_wait_peer 900
touch "$PAIR_RESULTS/$PAIR_ROLE.up"
until [[ -e $PAIR_RESULTS/a.up && -e $PAIR_RESULTS/b.up ]]; do nap 0.2; done
# A serves; B connects, and tries again while A is not listening yet.
exchange() {
	if [[ $PAIR_ROLE == a ]]; then
		shown "$@"
	else
		sleep 2
		for _ in $(seq 60); do shown "$@" "$PAIR_PEER_IP" && return; nap 1; done
		return 1
	fi
}
exchange ibv_rc_pingpong -d rxers0 -g "$gid" -c -s 4096 -n 100
rate=$(sed -nE 's/^819200 bytes in [0-9.]+ seconds = ([0-9.]+) Mbit\/sec.*/\1/p' "$out")
echo "demo: ibv_rc_pingpong: 100 SENDs of 4096 B each way, every byte checked (${rate:-?} Mbit/s)"
exchange ib_write_bw -d rxers0 -x "$gid" -F -s 65536 -n 200
bw=$(awk '$1 == 65536 && $2 == 200 { print $4 }' "$out")
echo "demo: ib_write_bw: 200 RDMA WRITEs of 64 KiB, ${bw:-?} MB/s on average"
