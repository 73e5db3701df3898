#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Life cycle under traffic. Each round starts a perftest stream (a 1 GiB RDMA WRITE or READ,
# 1 MiB messages, between two processes over the device's own GID), waits until packets flow,
# and then does what users and admins do to a busy device: SIGKILL of the requester or of the
# responder (its QP destroyed with READ replies queued, the other's timers armed), `modprobe
# -r` right after a kill and while the stream runs, `rdma link delete` and removal of the
# netdev while it runs (the device goes without waiting for its users), MTU changes and a
# carrier flap. A round passes when the stream was flowing, the action did what it should
# within its time (the device gone, or still there), and the device works again (re-added
# where it went): the next round's stream flows over it. At the end a validated exchange,
# nothing left in the resource tracker, and the module unloads; run-suite.sh adds the dmesg
# and kmemleak checks. The stream's kind alternates from round to round and flips in each
# pass over the actions: make check runs 8 rounds (each action once, half of them on a READ
# stream), 16 run each action on a WRITE and on a READ stream, make soak 56
# (RXE_RS_LIFECYCLE_ROUNDS).
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0
GID_V4=0000:0000:0000:0000:0000:ffff:0a0b:0001
ROUNDS=${RXE_RS_LIFECYCLE_ROUNDS:-8}
ACTIONS=(kill_requester kill_responder modprobe_r modprobe_r_busy link_delete netdev_delete mtu_change carrier_flap)
LOGS=$(mktemp -d)
PORT=18600

ktap_print_header
ktap_set_plan $((ROUNDS + 3))
reset_or_bail

# Read without a process: they are polled while a stream runs.
port_counter() { hw_counter "$DEV" "$1" 2>/dev/null; }
sent_past() { local n; read -r n <"/sys/class/infiniband/$DEV/ports/1/hw_counters/sent_pkts" 2>/dev/null && ((n > $1)); }
listening() { tcp_listening "$1"; }

# The device on veth0 (made if it is gone), its IPv4 GID ready.
device_up() {
	[[ -e /sys/class/net/veth0 ]] || make_veth veth0 veth1 10.11.0.1/24
	module_loaded rxe_rs || modprobe rxe_rs || return
	ib_exists "$DEV" || rdma link add "$DEV" type rxe_rs netdev veth0 || return
	wait_for 30 gid_present "$DEV" "$GID_V4"
}

# Starts a 1 GiB stream of KIND (write, read): server (the responder) then client.
server= client=
start_stream() {
	local tool=ib_$1_bw gidx
	gidx=$(gid_index "$DEV" "$GID_V4") || return
	PORT=$((PORT + 1))
	$tool -d "$DEV" -x "$gidx" -F -s 1048576 -n 1024 -p "$PORT" >"$LOGS/server" 2>&1 &
	server=$!
	wait_for 30 listening "$PORT" || return
	$tool -d "$DEV" -x "$gidx" -F -s 1048576 -n 1024 -p "$PORT" 10.11.0.1 >"$LOGS/client" 2>&1 &
	client=$!
}

# Packets of the stream went out: 256 more than before it started (a quarter MiB).
flowing() {
	wait_for 60 sent_past $(($1 + 256))
}

# Kills what is left of the stream and reaps it.
stop_stream() {
	local p
	for p in $server $client; do
		kill -9 "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	server= client=
}

# The actions: each returns success if it did what it should.
kill_requester() {
	kill -9 "$client" && wait "$client" 2>/dev/null
	nap 1 # the responder still answers what was asked for
	stop_stream
}
kill_responder() {
	kill -9 "$server" && wait "$server" 2>/dev/null
	nap 1 # the requester retries into nothing, timers armed
	stop_stream
}
# Right after the kill: the QPs go with the processes' files, their timers and queued READ
# replies with them; the module must unload at once.
modprobe_r() {
	stop_stream
	timeout 60 modprobe -r rxe_rs && ! module_loaded rxe_rs && ib_gone "$DEV"
}
# With the stream running: the device is taken from its users (they get DEVICE_FATAL, their
# objects are destroyed) and the module unloads; the processes exit after it is gone.
modprobe_r_busy() {
	timeout 60 modprobe -r rxe_rs && ! module_loaded rxe_rs && ib_gone "$DEV" || return
	stop_stream
}
# The device is in use: it goes all the same, within seconds, without waiting for its users.
# (60 s, as modprobe -r's: 3 to 7 s in a 2-vCPU guest on a loaded host; 16 to 54 s when the
# receive work of a loopback stream took both CPUs' softirq time, and the `rdma` process and
# RCU little else; more than 30 s once with the host's two cores shared by six vCPUs, 22c268f.)
link_delete() {
	local t0=$SECONDS rc=0
	timeout 60 rdma link delete "$DEV" || rc=$?
	((rc == 124)) && { echo "# rdma link delete: not done in 60 s"; return 1; }
	((rc == 0)) || { echo "# rdma link delete failed ($rc)"; return 1; }
	wait_for 30 ib_gone "$DEV" || { echo "# $DEV still there 30 s after rdma link delete returned"; return 1; }
	echo "# rdma link delete took $((SECONDS - t0)) s"
	stop_stream
}
# `ip link del` returns (it holds RTNL: it must not wait for the RDMA users) and the device
# goes with the netdev, while the stream's processes still run.
netdev_delete() {
	timeout 60 ip link del veth0 && wait_for 30 ib_gone "$DEV" || return
	stop_stream
}
# The port follows the netdev's MTU; the stream's QPs keep theirs.
mtu_change() {
	local m
	for m in 1280 9000 1500; do
		ip link set veth0 mtu "$m" || return
		nap 0.3
	done
	stop_stream
	ib_exists "$DEV"
}
carrier_flap() {
	ip link set veth1 down || return
	wait_for 10 port_state_is "$DEV" DOWN || return
	ip link set veth1 up || return
	wait_for 10 port_state_is "$DEV" ACTIVE || return
	stop_stream
	ib_exists "$DEV"
}

# One round: ACTION on a stream of KIND. Says what failed.
round() {
	local action=$1 kind=$2 before
	device_up || { echo "# the device did not come up"; return 1; }
	before=$(port_counter sent_pkts)
	start_stream "$kind" || { echo "# the $kind stream did not start"; sed 's/^/# server: /' "$LOGS/server"; stop_stream; return 1; }
	if ! flowing "$before"; then
		echo "# the $kind stream did not flow ($(port_counter sent_pkts) packets sent, $before before)"
		sed 's/^/# server: /' "$LOGS/server"
		sed 's/^/# client: /' "$LOGS/client"
		stop_stream
		return 1
	fi
	$action || { echo "# $action did not do what it should"; stop_stream; return 1; }
}

for ((i = 0; i < ROUNDS; i++)); do
	action=${ACTIONS[i % ${#ACTIONS[@]}]}
	kind='write'
	(((i + i / ${#ACTIONS[@]}) % 2)) && kind='read'
	check "round $((i + 1)): $action during a 1 GiB $kind stream" round "$action" "$kind"
done

# ibv_rc_pingpong with its payload checked, both ends on the device.
validated_exchange() {
	local gidx pp
	gidx=$(gid_index "$DEV" "$GID_V4") || return
	ibv_rc_pingpong -d "$DEV" -g "$gidx" -c -s 65536 -n 20 -p 18599 >"$LOGS/server" 2>&1 &
	pp=$!
	wait_for 30 listening 18599 || { kill -9 $pp; return 1; }
	# The client's status, not sed's.
	timeout 120 ibv_rc_pingpong -d "$DEV" -g "$gidx" -c -s 65536 -n 20 -p 18599 10.11.0.1 | sed 's/^/# /'
	((PIPESTATUS[0] == 0)) && reap $pp 60
}
# What the resource tracker still lists of the device's objects made by processes (nothing,
# once they are gone); the kernel's own (ib_mad's QP1, its CQ, PD and DMA MR: "comm [ib_core]")
# live as long as the device.
leftovers() {
	local what
	for what in qp cq mr pd; do
		rdma resource show "$what" | grep -w "$DEV" | grep -vF 'comm ['
	done
}
nothing_left() {
	local left
	left=$(leftovers)
	[[ -z $left ]] || { sed 's/^/# left: /' <<<"$left"; return 1; }
}

echo "# life cycle: $ROUNDS rounds of ${#ACTIONS[@]} actions on 1 GiB WRITE and READ streams"
device_up
check "the device works after $ROUNDS rounds: ibv_rc_pingpong -c" validated_exchange
check "nothing left in the resource tracker" nothing_left
check "the module unloads" reset_modules
rm -rf "$LOGS"
ktap_finished
