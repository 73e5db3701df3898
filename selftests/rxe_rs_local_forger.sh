#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A local attacker (guest/local_forger.py): an unprivileged process (uid 65534) with a plain UDP
# socket forges RoCEv2 packets, valid ICRC and the live PSNs in hand (read by root), into an RC
# connection between two QPs of its own host: a SEND ONLY at the receiver's expected PSN, an ACK
# to the requester, a MAD to QP1 with the GSI Q_Key. Each comes back through `lo` and must be
# dropped and counted (rcvd_from_loopback), reaching no QP. Then the same user makes an RC QP of
# its own on the device (any user may use any of its GIDs) that claims to be the receiver's peer,
# at its expected PSN: its SEND must be refused as a wrong peer (local delivery tells the sending
# QP), and the real peer's next SEND lands in the receive the forgeries aimed at. Once in the initial namespace and once in another one (whose
# own traffic between local QPs goes by local delivery too). A control sends the same forgery
# from a peer namespace over the link: it passes the ICRC check and fails only as a wrong peer,
# so the forger's packets are valid RoCE. The driver's live PSNs in `rdma resource show qp -dd`
# are shown to CAP_NET_ADMIN only.
source "$(dirname "$0")/guest/lib.sh"
here=$(dirname "$0")

ktap_print_header
ktap_set_plan 14
reset_or_bail
cleanup() { ip netns del fns 2>/dev/null; ip netns del fpeer 2>/dev/null; true; }
trap cleanup EXIT
cleanup

unprivileged() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
export -f unprivileged
# The value of driver attribute $2 of QP $1 in `rdma resource show qp -dd` (as whoever runs it).
driver_attr() {
	rdma resource show qp lqpn "$1" -dd | tr ' ' '\n' | grep -A1 -xE "(drv_)?$2" | tail -n1 | grep -E '^[0-9]+$'
}

# A forger's run in namespace $1 (or none): `local_forger.py forge` with the rest, which drops
# to uid 65534 before it opens its socket.
forge() {
	local ns=$1 in=()
	shift
	[[ -n $ns ]] && in=(ip netns exec "$ns")
	"${in[@]}" /usr/bin/python3 -S "$here/guest/local_forger.py" forge "$@" | sed 's/^/# /'
	return "${PIPESTATUS[0]}"
}

# One round: device $1 on address $2 in namespace $3 (or none); $4 is a peer namespace whose
# address $5 is on the other end of the device's link.
attack() {
	local dev=$1 addr=$2 ns=$3 peer=$4 peer_addr=$5 in=() gid a_qpn b_qpn epsn next from_lo pkts
	local wrong_peer icrc verdict forgery words octets fd
	[[ -n $ns ]] && in=(ip netns exec "$ns")
	local where=${ns:-the initial namespace}
	IFS=. read -ra octets <<<"$addr"
	gid=$(gid_index "$dev" "$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "${octets[@]}")")
	coproc VICTIM { "${in[@]}" /usr/bin/python3 -u "$here/guest/local_forger.py" victim "$dev"; }
	read -r -t 300 a_qpn b_qpn <&"${VICTIM[0]}"
	echo "# $where: RC pair $a_qpn -> $b_qpn on $dev ($addr, GID index $gid)"
	epsn=$(driver_attr "$b_qpn" epsn) next=$(driver_attr "$a_qpn" next-psn)
	check "$where: root reads the live PSNs (epsn $epsn, next-psn $next)" test -n "$epsn" -a -n "$next"
	check "$where: an unprivileged user sees the QP's driver state without them" bash -c \
		"unprivileged rdma resource show qp lqpn $b_qpn -dd >/tmp/forger.res; cat /tmp/forger.res >&2
		grep -q sq-consumer /tmp/forger.res && ! grep -qE '(^|[ _])(epsn|next-psn|acked-psn|sent-end) ' /tmp/forger.res"
	# The control: the same forged SEND from the peer's address, over the link, passes the ICRC
	# check and is refused only as not from the QP's peer.
	wrong_peer=$(hw_counter "$dev" rcvd_wrong_peer) icrc=$(hw_counter "$dev" rcvd_icrc_err)
	forge "$peer" "$peer_addr" "$addr" "$b_qpn" send "$epsn"
	check "$where: the forger's packet is valid RoCE: from the link it fails only as a wrong peer" \
		wait_for 10 eval "test \$(hw_counter $dev rcvd_wrong_peer)/\$(hw_counter $dev rcvd_icrc_err) = $((wrong_peer + 1))/$icrc"
	from_lo=$(hw_counter "$dev" rcvd_from_loopback) pkts=$(hw_counter "$dev" rcvd_pkts)
	for forgery in "send $b_qpn $epsn" "ack $a_qpn $((next - 1))" "mad 1 0"; do
		read -ra words <<<"$forgery"
		set -- "${words[@]}"
		forge "$ns" "$addr" "$addr" "$2" "$1" "$3" || echo "# the forger failed"
	done
	check "$where: the forged SEND, ACK and MAD are dropped and counted (rcvd_from_loopback)" \
		wait_for 10 eval "test \$(hw_counter $dev rcvd_from_loopback) -eq $((from_lo + 3))"
	check "$where: none of them reached a QP (rcvd_pkts)" test "$(hw_counter "$dev" rcvd_pkts)" -eq "$pkts"
	# A QP of the forger's own, as nobody (uverbs devices are 0666, as for any user).
	wrong_peer=$(hw_counter "$dev" rcvd_wrong_peer)
	"${in[@]}" /usr/bin/python3 -u "$here/guest/local_forger.py" qp "$dev" "$b_qpn" "$epsn" 2>&1 | sed 's/^/# /'
	check "$where: a QP of its own, claiming to be the peer, is refused as a wrong peer" \
		wait_for 10 eval "test \$(hw_counter $dev rcvd_wrong_peer) -gt $wrong_peer"
	echo real >&"${VICTIM[1]}"
	read -r -t 120 verdict <&"${VICTIM[0]}"
	echo "# victim: $verdict"
	check "$where: the real peer's SEND lands in the receive, its only completion" \
		test "$verdict" = "received $(printf realsend | od -An -tx1 | tr -d ' \n') 1 0"
	fd=${VICTIM[1]}
	exec {fd}>&-
	reap "$VICTIM_PID"
}

# The initial namespace: veth0 here, its peer in namespace fpeer.
ip netns add fpeer
make_veth veth0 veth1 10.11.0.1/24
ip link set veth1 netns fpeer
ip -n fpeer addr add 10.11.0.2/24 dev veth1 && ip -n fpeer link set veth1 up
rdma link add rxers0 type rxe_rs netdev veth0
wait_for 30 gid_present rxers0 "0000:0000:0000:0000:0000:ffff:0a0b:0001"
attack rxers0 10.11.0.1 "" fpeer 10.11.0.2
rdma link delete rxers0

# Namespace fns: fv0 there, its peer in fpeer.
ip netns add fns
ip link add fv0 netns fns type veth peer name fv1 netns fpeer
ip -n fns addr add 10.12.0.1/24 dev fv0 && ip -n fpeer addr add 10.12.0.2/24 dev fv1
ip -n fns link set fv0 up && ip -n fpeer link set fv1 up && ip -n fns link set lo up
ip netns exec fns rdma link add rxf type rxe_rs netdev fv0
wait_for 30 gid_present rxf "0000:0000:0000:0000:0000:ffff:0a0c:0001"
attack rxf 10.12.0.1 fns fpeer 10.12.0.2
ip netns exec fns rdma link delete rxf
cleanup
reset_or_bail
ktap_finished
