#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Network namespaces, as containers use them. Shared mode (the default): two namespaces joined by
# a veth pair, each adding its own rxe_rs device on its end with `rdma link add` from inside,
# ibv_rc_pingpong -c and rping -V between them (each namespace has its own UDP 4791 socket) and
# between two processes of one namespace (by local delivery, not its lo), the
# netdev looked up in the caller's namespace only, then one namespace deleted under a WRITE
# stream (both devices go with the veth pair, the writer can be killed: nothing hangs). Exclusive mode (`rdma system set netns
# exclusive`): two namespaces each given their device with `rdma dev set DEV netns NS`, each
# seeing only its own, talking RoCE to each other.
source "$(dirname "$0")/guest/lib.sh"

ktap_print_header
ktap_set_plan 19
reset_or_bail
# Whatever happens, the guest's later scripts find no namespace of ours and the shared mode.
cleanup() {
	local ns
	for ns in nsa nsb c1 c2; do ip netns del "$ns" 2>/dev/null; done
	wait_for 120 eval 'rdma system set netns shared 2>/dev/null'
}
trap cleanup EXIT
for ns in nsa nsb c1 c2; do ip netns del "$ns" 2>/dev/null; done

# A veth pair between namespaces $1 and $2: $3 in $1 with 10.$5.0.1, $4 in $2 with .2.
ns_pair() {
	ip netns add "$1" && ip netns add "$2" &&
		ip link add "$3" netns "$1" type veth peer name "$4" netns "$2" &&
		ip -n "$1" addr add "10.$5.0.1/24" dev "$3" && ip -n "$2" addr add "10.$5.0.2/24" dev "$4" &&
		ip -n "$1" link set "$3" up && ip -n "$2" link set "$4" up &&
		ip -n "$1" link set lo up && ip -n "$2" link set lo up
}
v4_gid() { printf '0000:0000:0000:0000:0000:ffff:0a%02x:000%d' "$1" "$2"; }

# ibv_rc_pingpong -c from namespace $1 (device $2, server on 10.$5.0.1) to $3 (device $4).
pingpong() {
	local ia ib rc
	# (The client's GID: its device's own address on that link, .1 when it is the server's.)
	local mine=2
	[[ $2 == "$4" ]] && mine=1
	ia=$(gid_index "$2" "$(v4_gid "$5" 1)") && ib=$(gid_index "$4" "$(v4_gid "$5" $mine)") || return 1
	ip netns exec "$1" timeout 120 ibv_rc_pingpong -d "$2" -g "$ia" -c -s 4096 -n 50 >/tmp/netns.server 2>&1 &
	local server=$!
	wait_for 30 eval "ip netns exec $1 ss -ltn | grep -q ':18515 '"
	ip netns exec "$3" timeout 120 ibv_rc_pingpong -d "$4" -g "$ib" -c -s 4096 -n 50 "10.$5.0.1" 2>&1 | sed 's/^/# /'
	rc=${PIPESTATUS[0]}
	wait "$server" || rc=1
	sed 's/^/# server: /' /tmp/netns.server
	return "$rc"
}

# Shared mode.
modprobe rxe_rs
check "two namespaces joined by a veth pair" ns_pair nsa nsb va vb 30
check "rdma link add inside namespace nsa, on its netdev" ip netns exec nsa rdma link add rxa type rxe_rs netdev va
check "rdma link add inside namespace nsb, on its netdev" ip netns exec nsb rdma link add rxb type rxe_rs netdev vb
check "from the initial namespace, nsa's netdev is not found (ENODEV)" \
	fails_with "No such device" rdma link add rxc type rxe_rs netdev va
check "each device has the RoCEv2 GID of its namespace's address" \
	eval 'wait_for 30 gid_present rxa "$(v4_gid 30 1)" && wait_for 30 gid_present rxb "$(v4_gid 30 2)"'
rx_before=$(ip netns exec nsa cat /sys/class/net/va/statistics/rx_packets)
check "ibv_rc_pingpong -c between the namespaces" pingpong nsa rxa nsb rxb 30
rx_after=$(ip netns exec nsa cat /sys/class/net/va/statistics/rx_packets)
echo "# va received $((rx_after - rx_before)) packets; rxa: $(hw_counter rxa rcvd_pkts) RoCE packets in"
rping_between() {
	ip netns exec nsa timeout 120 rping -s -a 10.30.0.1 -C 20 -S 1024 -V >/tmp/netns.rping 2>&1 &
	local server=$! rc
	wait_for 30 eval "ip netns exec nsa rdma resource show cm_id 2>/dev/null | grep -q LISTEN"
	ip netns exec nsb timeout 120 rping -c -a 10.30.0.1 -C 20 -S 1024 -V 2>&1 | sed 's/^/# /'
	rc=${PIPESTATUS[0]}
	wait "$server" || rc=1
	sed 's/^/# server: /' /tmp/netns.rping
	return "$rc"
}
check "rping -V (rdma_cm) between the namespaces" rping_between
# Both ends on rxa: the packets go by local delivery, not through nsa's lo (which drops
# RoCE from this host), to the device that owns the address in nsa.
lo_before=$(ip netns exec nsa cat /sys/class/net/lo/statistics/rx_packets)
check "ibv_rc_pingpong -c between two processes on rxa, by local delivery" pingpong nsa rxa nsa rxa 30
lo_after=$(ip netns exec nsa cat /sys/class/net/lo/statistics/rx_packets)
echo "# nsa's lo received $((lo_after - lo_before)) packets during it"
check "... nothing of it through nsa's lo but the pingpong's TCP exchange" test $((lo_after - lo_before)) -lt 100

# Namespace nsb goes under traffic: a WRITE stream from nsa to nsb, whose receiving process is
# killed right after `ip netns del`, so that the kernel tears the namespace down (its veth, its
# socket, its device) while nsa still sends. The veth's peer in nsa goes with it, and so does
# rxa: the writer is left busy-polling a device that is gone (perftest does not watch for
# IBV_EVENT_DEVICE_FATAL), and must die when killed (nothing of it stuck in the kernel).
ia=$(gid_index rxa "$(v4_gid 30 1)") ib=$(gid_index rxb "$(v4_gid 30 2)")
ip netns exec nsb ib_write_bw -d rxb -x "$ib" -F -s 4096 -D 300 >/dev/null 2>&1 &
receiver=$!
wait_for 30 eval "ip netns exec nsb ss -ltn | grep -q ':18515 '"
ip netns exec nsa ib_write_bw -d rxa -x "$ia" -F -s 4096 -D 300 10.30.0.2 >/dev/null 2>&1 &
writer=$!
sent_before=$(hw_counter rxa sent_pkts)
check "a WRITE stream runs from nsa to nsb" wait_for 60 eval '(($(hw_counter rxa sent_pkts) > sent_before + 500))'
echo "# rxa sent $(($(hw_counter rxa sent_pkts) - sent_before)) packets before nsb went"
ip netns del nsb
kill -9 "$receiver"
check "nsb's device goes with its namespace, and rxa with its veth" wait_for 120 eval 'ib_gone rxb && ib_gone rxa'
kill -9 "$writer"
check "the writer, killed, exits (nothing stuck in the kernel)" wait_for 60 eval "! kill -0 $writer 2>/dev/null"
wait "$writer" 2>/dev/null
wait "$receiver" 2>/dev/null
ip netns del nsa

# Exclusive mode: the mode may change once no namespace but the initial one is left (the ones
# above go asynchronously).
check "rdma system set netns exclusive" wait_for 120 eval 'rdma system set netns exclusive 2>/dev/null'
check "two containers' namespaces add a device each (which land in the initial namespace)" eval '
	ns_pair c1 c2 vc1 vc2 31 &&
	ip netns exec c1 rdma link add rx1 type rxe_rs netdev vc1 &&
	ip netns exec c2 rdma link add rx2 type rxe_rs netdev vc2 &&
	wait_for 30 gid_present rx1 "$(v4_gid 31 1)" && wait_for 30 gid_present rx2 "$(v4_gid 31 2)"'
moved() {
	rdma dev set rx1 netns c1 && rdma dev set rx2 netns c2 || return 1
	ip netns exec c1 rdma dev | sed 's/^/# c1: /'
	ip netns exec c2 rdma dev | sed 's/^/# c2: /'
	ip netns exec c1 rdma dev | grep -qw rx1 && ! ip netns exec c1 rdma dev | grep -qw rx2 &&
		ip netns exec c2 rdma dev | grep -qw rx2 && ! ip netns exec c2 rdma dev | grep -qw rx1 &&
		! rdma dev | grep -qE 'rx1|rx2'
}
check "rdma dev set DEV netns NS: each namespace sees only its own device" moved
in_ns_gid_index() { ip netns exec "$1" cat "/sys/class/infiniband/$2/ports/1/gids/$3" 2>/dev/null; }
# (Exclusive: sysfs of the device is only in its namespace, so the harness's gid_index reads it
# there.)
pingpong_exclusive() {
	local i gid ia= ib=
	for i in {0..15}; do
		gid=$(in_ns_gid_index c1 rx1 "$i") && [[ $gid == "$(v4_gid 31 1)" ]] && ia=$i
		gid=$(in_ns_gid_index c2 rx2 "$i") && [[ $gid == "$(v4_gid 31 2)" ]] && ib=$i
	done
	[[ -n $ia && -n $ib ]] || { echo "# no IPv4 GID (c1: $ia, c2: $ib)"; return 1; }
	ip netns exec c1 timeout 120 ibv_rc_pingpong -d rx1 -g "$ia" -c -s 4096 -n 50 >/tmp/netns.server 2>&1 &
	local server=$! rc
	wait_for 30 eval "ip netns exec c1 ss -ltn | grep -q ':18515 '"
	ip netns exec c2 timeout 120 ibv_rc_pingpong -d rx2 -g "$ib" -c -s 4096 -n 50 10.31.0.1 2>&1 | sed 's/^/# /'
	rc=${PIPESTATUS[0]}
	wait "$server" || rc=1
	sed 's/^/# server: /' /tmp/netns.server
	return "$rc"
}
check "ibv_rc_pingpong -c between the two containers' devices" pingpong_exclusive
ip netns del c1
ip netns del c2
# The namespaces' devices go with their veths (or back to the initial namespace, and then).
check "both devices gone with their namespaces" wait_for 120 eval 'ib_gone rx1 && ib_gone rx2 && [[ -z $(rdma dev 2>/dev/null) ]]'
check "rdma system set netns shared, once the namespaces are gone" wait_for 120 eval 'rdma system set netns shared 2>/dev/null'
check "rxe_rs unloads" wait_for 60 unload rxe_rs
trap - EXIT
reset_or_bail
ktap_finished
