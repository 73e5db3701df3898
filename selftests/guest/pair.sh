# shellcheck shell=bash
# Helpers for scripts run by scripts/vm-pair.sh (sourced): the link to the other guest, and a
# way for the two guests to wait for each other.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

# Brings up the link (the NIC with our MAC) with our addresses; prints its name.
pair_link() {
	local mac dev
	[[ $PAIR_ROLE == a ]] && mac=52:54:00:10:00:01 || mac=52:54:00:10:00:02
	dev=$(ip -o link | awk -v m="$mac" '$0 ~ m { sub(":", "", $2); print $2; exit }')
	local me peer
	[[ $PAIR_ROLE == a ]] && me=1 peer=2 || me=2 peer=1
	ip addr add "10.10.0.$me/24" dev "$dev"
	ip -6 addr add "fd10::$me/64" dev "$dev" nodad
	ip link set "$dev" up
	PAIR_DEV=$dev
	PAIR_PEER_IP=10.10.0.$peer
	PAIR_MY_IP=10.10.0.$me
}

# Waits (up to S seconds) until the peer answers ping: both guests are up and the link works.
pair_wait_peer() {
	local deadline=$((SECONDS + ${1:-300}))
	until ping -c1 -W1 "$PAIR_PEER_IP" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
	done
}

# Waits until TCP port P is listening on this host (a server we started is ready).
wait_listening() {
	local deadline=$((SECONDS + ${2:-120}))
	until ss -ltn "sport = :$1" | grep -q LISTEN; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# The helpers below also need selftests/guest/lib.sh (reset_modules, wait_for, gid_index).

# The index of the RoCEv2 GID of our IPv4 address on ib device $1.
ipv4_gid_index() {
	gid_index "$1" "0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' ${PAIR_MY_IP//./ })"
}

# Both guests reach the named point (marker files in the shared results directory).
pair_barrier() {
	local peer=a
	[[ $PAIR_ROLE == a ]] && peer=b
	touch "$PAIR_RESULTS/$PAIR_ROLE.$1"
	local deadline=$((SECONDS + 900))
	until [[ -e $PAIR_RESULTS/$peer.$1 ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

# Brings up STACK (rxe_rs or rdma_rxe) on the link; sets DEV and GID.
pair_stack_up() {
	reset_modules
	local type=rxe_rs
	DEV=rxers0
	[[ $1 == rdma_rxe ]] && type=rxe DEV=rxe0
	rdma link add "$DEV" type "$type" netdev "$PAIR_DEV" || return 1
	wait_for 30 ipv4_gid_index "$DEV" >/dev/null || return 1
	GID=$(ipv4_gid_index "$DEV")
}

# Runs a client (COMMAND... SERVER_IP), retrying while the server is not listening yet. Its
# output goes to PAIR_OUT and is appended to $PAIR_RESULTS/$PAIR_ROLE.out; the tail is shown.
pair_client() {
	local i rc
	for i in $(seq 60); do
		PAIR_OUT=$(timeout "${PAIR_CASE_TIMEOUT:-150}" "$@" 2>&1)
		rc=$?
		if grep -qiE "couldn't connect|unable to connect|connection refused" <<<"$PAIR_OUT"; then
			sleep 1
			continue
		fi
		echo "$PAIR_OUT" | tail -4 | sed 's/^/# /'
		echo "$PAIR_OUT" >>"$PAIR_RESULTS/$PAIR_ROLE.out"
		return $rc
	done
	return 1
}

# Runs a server (COMMAND...); output as for pair_client.
pair_server() {
	local rc
	PAIR_OUT=$(timeout "$((${PAIR_CASE_TIMEOUT:-150} + 90))" "$@" 2>&1)
	rc=$?
	echo "$PAIR_OUT" | tail -3 | sed 's/^/# /'
	echo "$PAIR_OUT" >>"$PAIR_RESULTS/$PAIR_ROLE.out"
	return $rc
}
