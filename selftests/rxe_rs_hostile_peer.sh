#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# A hostile peer on the wire (selftests/hostile-peer, compiled; from a peer namespace): RoCEv2 packets with
# valid ICRCs, built from the live state of QPs that trust it, with mutated opcodes, sources,
# P_Keys, PSNs, RETH/AETH/atomic fields, lengths and truncations. Meanwhile two victim QPs that
# it cannot legitimately address move data; they must keep moving it intact, the kernel must
# stay clean, and the packets must have reached the QPs (not died at the ICRC check).
#   RXE_RS_HOSTILE_PACKETS=N   how many packets (default 8000: 24000 took 536 s of a loaded
#                              TCG guest, and the single-VM scripts then ran past CI's
#                              limit; `make soak` sends 1M a round)
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0
here=$(dirname "$0")
PACKETS=${RXE_RS_HOSTILE_PACKETS:-8000}
PEER=$RXE_RS_ROOT/target/release/hostile-peer
TARGETS=8

ktap_print_header
ktap_set_plan 7
reset_or_bail
ip netns del rxpeer 2>/dev/null
ip netns add rxpeer
ip link add veth0 type veth peer name veth1
ip link set veth1 netns rxpeer
ip addr add 10.11.0.1/24 dev veth0
ip link set veth0 up
ip netns exec rxpeer ip addr add 10.11.0.2/24 dev veth1
ip netns exec rxpeer ip link set veth1 up
rdma link add "$DEV" type rxe_rs netdev veth0
gid=$(wait_for 60 gid_index "$DEV" 0000:0000:0000:0000:0000:ffff:0a0b:0001 >/dev/null && gid_index "$DEV" 0000:0000:0000:0000:0000:ffff:0a0b:0001)

# All port counters as "name value" lines.
counters() { rdma statistic show link "$DEV/1" | tr ' ' '\n' | awk 'NR > 2 && NR % 2 == 1 { n = $0 } NR > 2 && NR % 2 == 0 { print n, $0 }'; }
declare -A before after
while read -r n v; do before[$n]=$v; done < <(counters)

coproc TARGET { /usr/bin/python3 -u "$here/guest/hostile_target.py" "$DEV" "$gid" 0000:0000:0000:0000:0000:ffff:0a0b:0002 "$TARGETS" 2>&1; }
state=
while read -r -t 300 line <&"${TARGET[0]}"; do
	[[ $line == '{"addr"'* ]] && { state=$line; break; }
	echo "# target: $line"
done
if ! check "$TARGETS target QPs trust the peer namespace; two victim QPs run between themselves" test -n "$state"; then
	ip netns del rxpeer
	ktap_exit_fail_msg "no target to attack"
fi

start=$SECONDS
# The targets' state as the generator's arguments: DST_IP VICTIMS QPN:PEER_QPN:RKEY:VA:SIZE...
read -r -a peer_args < <(python3 -I -S -c 'import json, sys; s = json.loads(sys.argv[1])
print(s["addr"], ",".join(map(str, s["victims"])), *("%(qpn)d:%(peer_qpn)d:%(rkey)d:%(va)d:%(size)d" % t for t in s["targets"]))' "$state")
if ! check "the generator is built and has targets" test -x "$PEER" -a "${#peer_args[@]}" -ge 3; then
	ip netns del rxpeer
	ktap_exit_fail_msg "no generator (make test-tools) or no state"
fi
seed=$RANDOM$RANDOM
echo "# hostile peer: $PACKETS packets, seed $seed"
stats=$(ip netns exec rxpeer "$PEER" 10.11.0.2 "${peer_args[0]}" "$PACKETS" "$seed" "${peer_args[@]:1}")
echo "# hostile peer ($((SECONDS - start)) s): $stats"
field() { python3 -I -S -c 'import json, sys; print(json.loads(sys.argv[1]).get(sys.argv[2], 0))' "$stats" "$1"; }
sent=$(field sent) bad_icrc=$(field bad_icrc) truncated=$(field truncated)
check "the hostile peer sent $PACKETS packets" test "${sent:-0}" -eq "$PACKETS"
sent=${sent:-0} bad_icrc=${bad_icrc:-0} truncated=${truncated:-0}

# Let the last packets be taken, then stop the victims and hear their verdict.
sleep 2
echo stop >&"${TARGET[1]}"
verdict=
while read -r -t 300 line <&"${TARGET[0]}"; do
	echo "# target: $line"
	[[ $line == *victims_intact* ]] && { verdict=$line; break; }
done
check "the victim QPs kept moving data intact (${verdict#*: })" test "${verdict%%:*}" = "ok victims_intact"
reap "$TARGET_PID"

while read -r n v; do after[$n]=$v; done < <(counters)
reached=0
echo "# counters moved:"
for n in "${!after[@]}"; do
	d=$((after[$n] - ${before[$n]:-0}))
	((d)) && echo "#   $n +$d"
	# Refused after the ICRC check by a check the victims' own traffic never trips (their
	# losses show as duplicates, sequence errors and stale responses, which are left out).
	case $n in
	rcvd_unknown_qp | rcvd_qp_not_ready | rcvd_wrong_* | rcvd_bad_pkey | rcvd_invalid_request)
		reached=$((reached + d)) ;;
	esac
done
icrc=$((after[rcvd_icrc_err] - before[rcvd_icrc_err]))
check "only the damaged packets failed the ICRC check ($icrc <= $bad_icrc bad + $truncated cut)" \
	test "$bad_icrc" -gt 0 -a "$icrc" -le $((bad_icrc + truncated))
# Most mutations are refused by some check past the ICRC; a generator whose ICRCs were wrong
# (as the old random fuzz's were) would stop at rcvd_icrc_err and fail this.
check "packets past the ICRC were refused by the QPs' checks ($reached of $sent)" test "$sent" -gt 0 -a "$reached" -ge $((sent / 4))
check "the device still works after that" bash -c "ibv_devinfo -d $DEV | grep -q PORT_ACTIVE"

rdma link delete "$DEV"
ip netns del rxpeer
reset_or_bail
ktap_finished
