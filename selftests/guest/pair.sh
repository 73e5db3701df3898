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

# The index of the RoCEv2 GID of our IPv4 address on ib device $1.
ipv4_gid_index() {
	local f
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		if [[ $(cat "$f") == "0000:0000:0000:0000:0000:ffff:$(printf '%02x%02x:%02x%02x' ${PAIR_MY_IP//./ })" ]]; then
			basename "$f"
			return
		fi
	done
	return 1
}
