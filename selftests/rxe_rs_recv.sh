#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The receive path drops bad datagrams and counts why: crafted RoCEv2 packets (raw IPv4 from a
# peer namespace, so they arrive on the device's netdev) must move the matching counter of
# `rdma statistic`, and a burst of random garbage must not hurt the kernel.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0
here=$(dirname "$0")

ktap_print_header
ktap_set_plan 39
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

counter() { hw_counter "$DEV" "$1"; }
counter_is() { local n; read -r n <"/sys/class/infiniband/$DEV/ports/1/hw_counters/$1" && [[ $n == "$2" ]]; }
# -S: no site packages to scan (roce_send.py needs only the standard library); starting Python
# is what this test spends most of its time on in a TCG guest.
send() { ip netns exec rxpeer /usr/bin/python3 -I -S "$here/guest/roce_send.py" 10.11.0.2 10.11.0.1 "$@"; }
# The same, claiming another source address (the raw socket writes whatever it is given).
send_from() { local src=$1; shift; ip netns exec rxpeer /usr/bin/python3 -I -S "$here/guest/roce_send.py" "$src" 10.11.0.1 "$@"; }
peer_gid=0000:0000:0000:0000:0000:ffff:0a0b:0002

rdma statistic show link "$DEV/1" | sed 's/^/# /'
check "the port counters exist and start at 0" bash -c \
	"for c in rcvd_pkts rcvd_malformed rcvd_icrc_err rcvd_unknown_qp; do rdma statistic show link $DEV/1 | grep -qE \"\$c 0( |\\\$)\" || exit 1; done"

send 0x123456 valid,bad_icrc,truncated,bad_opcode
check "a valid packet for no QP counts in rcvd_unknown_qp" wait_for 10 counter_is rcvd_unknown_qp 1
check "a bad ICRC counts in rcvd_icrc_err" wait_for 10 counter_is rcvd_icrc_err 1
check "a truncated packet and an unknown opcode count in rcvd_malformed" wait_for 10 counter_is rcvd_malformed 2

# A packet for a live QP: a process holds one and tells us its number.
coproc QPHOLDER { /usr/bin/python3 -u -c "
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QP, QPCap, QPInitAttr
ctx = Context(name='$DEV'); pd = PD(ctx); cq = CQ(ctx, 8)
qp = QP(pd, QPInitAttr(qp_type=2, scq=cq, rcq=cq, cap=QPCap()))
print(qp.qp_num, flush=True)
input()"; }
read -r -t 300 qpn <&"${QPHOLDER[0]}"
send "$qpn" valid
check "a valid packet for a QP in RESET ($qpn) counts in rcvd_qp_not_ready" wait_for 10 counter_is rcvd_qp_not_ready 1
echo >&"${QPHOLDER[1]}"
reap "$QPHOLDER_PID"

# SENDs from the wire into posted receives: single packet, and FIRST + LAST across the MTU
# scattered over two SGEs. A PSN gap and a SEND with no receive left are dropped and counted.
gid=$(gid_index "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001")
coproc RECV { /usr/bin/python3 -u "$here/guest/recv_target.py" "$DEV" "$gid" "$peer_gid"; }
read -r -t 300 rqpn <&"${RECV[0]}"
# Before the real SENDs, packets the QP must drop without a NAK or a change of state (each
# would otherwise move it to ERR and the SENDs after them would not land): a UD SEND, a SEND
# from an address that is not the QP's peer, and a SEND with a foreign P_Key, all at PSN 0.
wrong_transport=$(counter rcvd_wrong_transport) wrong_peer=$(counter rcvd_wrong_peer) bad_pkey=$(counter rcvd_bad_pkey)
recvs=$(counter rdma_recvs)
send "$rqpn" op:0x64:0:8:u,op:0x04:0:8:k:0x1234
send_from 10.11.0.3 "$rqpn" op:0x04:0:8:x
# SEND ONLY at PSN 0, SEND FIRST at 1, SEND LAST at 2.
send "$rqpn" op:0x04:0:8:r,op:0x00:1:1024:A,op:0x02:2:100:B
echo >&"${RECV[1]}"
read -r -t 300 verdict <&"${RECV[0]}"
echo "# recv_target: $verdict"
check "SENDs land in posted receives and complete (ibv_poll_cq)" test "$verdict" = received
check "the two receives count in rdma_recvs (rdma_rxe's name)" test "$(counter rdma_recvs)" = $((recvs + 2))
check "a UD opcode for an RC QP is dropped and counted in rcvd_wrong_transport" \
	test "$(counter rcvd_wrong_transport)" = $((wrong_transport + 1))
check "a request from another source than the QP's peer is dropped (rcvd_wrong_peer)" \
	test "$(counter rcvd_wrong_peer)" = $((wrong_peer + 1))
check "a request with a foreign P_Key is dropped (rcvd_bad_pkey)" test "$(counter rcvd_bad_pkey)" = $((bad_pkey + 1))
reap "$RECV_PID"
gap_before=$(counter rcvd_psn_gap) oos_before=$(counter out_of_seq_request)
rnr_before=$(counter rcvd_rnr) send_rnr_before=$(counter send_rnr_err)
coproc RECV2 { /usr/bin/python3 -u "$here/guest/recv_target.py" "$DEV" "$gid" "$peer_gid"; }
read -r -t 300 rqpn <&"${RECV2[0]}"
send "$rqpn" op:0x04:5:8:z      # a gap: PSN 5 while 0 is expected
gap_counted() { counter_is rcvd_psn_gap $((gap_before + 1)) && counter_is out_of_seq_request $((oos_before + 1)); }
check "a PSN gap is dropped (rcvd_psn_gap) and NAKed (rdma_rxe's out_of_seq_request)" wait_for 10 gap_counted
# Two SEND ONLYs use up both receives; the third finds none.
send "$rqpn" op:0x04:0:8:r,op:0x04:1:1024:A,op:0x04:2:8:z
rnr_counted() { counter_is rcvd_rnr $((rnr_before + 1)) && counter_is send_rnr_err $((send_rnr_before + 1)); }
check "a SEND without a posted receive counts in rcvd_rnr and rdma_rxe's send_rnr_err" wait_for 10 rnr_counted
check "packets the responder took count in rcvd_pkts" test "$(counter rcvd_pkts)" -ge 5
echo >&"${RECV2[1]}"
reap "$RECV2_PID"

# One READ request from the wire for 16 MiB: 16384 responses at MTU 1024. They go out from
# process context a batch at a time, never as one burst in the receive softirq; with the soft
# lockup watchdog at 2 s (watchdog_thresh 1) a CPU held that long shows in dmesg, which the
# suite checks. A small READ after it is answered too.
READ_SIZE=$((16 << 20))
# The responses go to the peer namespace, which drops them (no socket on 4791 there). Two
# READs outstanding: the QP grants two responder resources (max_dest_rd_atomic).
coproc READER { /usr/bin/python3 -u "$here/guest/read_target.py" "$DEV" "$gid" "$peer_gid" "$READ_SIZE" 2; }
read -r -t 300 read_qpn rkey va <&"${READER[0]}"
thresh=$(cat /proc/sys/kernel/watchdog_thresh)
echo 1 >/proc/sys/kernel/watchdog_thresh
sent_before=$(counter sent_pkts)
err_before=$(counter send_err)
# Both requests in one go (each start of Python costs seconds): the big one, then 8 bytes.
send "$read_qpn" "read:0:$va:$rkey:$READ_SIZE,read:$((READ_SIZE / 1024)):$va:$rkey:8"
all_sent() { (( $(counter sent_pkts) - sent_before == READ_SIZE / 1024 + 1 )); }
# Polled every 2 s: each poll starts three processes, which is slow in a TCG guest.
WAIT_FOR_INTERVAL=2 check "a 16 MiB READ request gets its 16384 responses, and a READ after it its one" \
	wait_for 300 all_sent
check "no response failed to go out (send_err)" test "$(counter send_err)" = "$err_before"
echo "$thresh" >/proc/sys/kernel/watchdog_thresh
echo >&"${READER[1]}"
reap "$READER_PID"

# max_dest_rd_atomic 1: a second READ while the first's 1024 responses are still owed is an
# invalid request (NAKed, the QP enters ERR); before, the responder queued up to 129.
coproc READER1 { /usr/bin/python3 -u "$here/guest/read_target.py" "$DEV" "$gid" "$peer_gid" $((1 << 20)) 1; }
read -r -t 300 read_qpn rkey va <&"${READER1[0]}"
invalid_before=$(counter rcvd_invalid_request)
send "$read_qpn" "read:0:$va:$rkey:$((1 << 20)),read:1024:$va:$rkey:8"
check "a READ beyond max_dest_rd_atomic is an invalid request" \
	wait_for 30 counter_is rcvd_invalid_request $((invalid_before + 1))
echo >&"${READER1[1]}"
reap "$READER1_PID"

# A READ asked for again after its MR was deregistered (its responses lost, as far as the
# requester knows) is NAKed with a remote access error at the repeat's PSN, and the QP stays
# as it was: the repeat may be a spurious retry, or forged. Dropped silently before 5d4bbc9,
# a requester with retry_cnt 7 (retry forever) asked for it for good.
coproc READER2 { /usr/bin/python3 -u "$here/guest/read_target.py" "$DEV" "$gid" "$peer_gid" 4096 1; }
read -r -t 300 read_qpn rkey va <&"${READER2[0]}"
first=$(REPLIES=5 send "$read_qpn" "read:0:$va:$rkey:4096")
echo dereg >&"${READER2[1]}"
read -r -t 120 gone <&"${READER2[0]}"
again=$(REPLIES=2 send "$read_qpn" "read:0:$va:$rkey:4096")
echo "# a READ, then its repeat after the dereg: $(printf '%s\n%s\n' "$first" "$again" | tr '\n' ';')"
check "a 4 KiB READ from the wire gets its 4 responses (MTU 1024)" \
	test "$(grep -c '^reply 0xd 0 \|^reply 0xe [12] \|^reply 0xf 3 ' <<<"$first")" = 4
check "its repeat after the MR's dereg: NAKed, remote access error ($gone)" \
	test "$(tr '\n' ';' <<<"$again")" = "reply 0x11 0 0x62;no more replies;"
check "... and the QP is still in RTR" bash -c "rdma resource show qp lqpn $read_qpn | grep -q 'state RTR'"
echo >&"${READER2[1]}"
reap "$READER2_PID"

# A requester's QP with an 8-byte WRITE in flight at PSN 0: an ACK for a PSN it never sent is
# dropped (a blind, spoofed ACK must not complete it); the real ACK for PSN 0 completes it.
coproc ACKER { /usr/bin/python3 -u "$here/guest/ack_target.py" "$DEV" "$gid" "$peer_gid"; }
read -r -t 300 ack_qpn <&"${ACKER[0]}"
stale_before=$(counter rcvd_stale_response)
send "$ack_qpn" ack:0x100:1,ack:0xfffff0:1
check "ACKs for PSNs never sent are dropped (rcvd_stale_response)" \
	wait_for 10 counter_is rcvd_stale_response $((stale_before + 2))
echo none >&"${ACKER[1]}"
read -r -t 60 verdict <&"${ACKER[0]}"
check "... and complete nothing" test "$verdict" = pending
send "$ack_qpn" ack:0:1
echo 'done' >&"${ACKER[1]}"
read -r -t 60 verdict <&"${ACKER[0]}"
check "the ACK for the PSN sent completes the WRITE" test "$verdict" = completed
echo quit >&"${ACKER[1]}"
reap "$ACKER_PID"

# A burst whose tail is lost: the peer namespace ACKs a 1 KiB WRITE (the requester's round-trip
# sample), then takes PSNs 1-2 of a 4 KiB one and treats 3-4 as lost. Nothing follows the gap
# to show it, and the packet that asked for an ACK is among the lost: the requester sends its
# last packet again asking for one (a tail-loss probe), after two round trips rather than the
# QP's 1.07 s timeout, and the NAK it draws brings back 3 and 4.
coproc TAIL { /usr/bin/python3 -u "$here/guest/tail_target.py" "$DEV" "$gid" "$peer_gid"; }
read -r -t 300 tail_qpn <&"${TAIL[0]}"
probes=$(counter tail_probes) timeouts=$(counter ack_timeouts) seq_errs=$(counter rcvd_seq_err)
tail_log=$(mktemp)
ip netns exec rxpeer /usr/bin/python3 -S -u "$here/guest/tail_peer.py" 10.11.0.2 10.11.0.1 "$tail_qpn" >"$tail_log" 2>&1 &
tail_peer=$!
wait_for 120 grep -q '^ready' "$tail_log"
echo go >&"${TAIL[1]}"
wait "$tail_peer"
read -r -t 60 verdict <&"${TAIL[0]}"
sed 's/^/# tail peer: /' "$tail_log"
check "a lost tail is probed: its last packet again, asking for an ACK, then what the NAK asks for" \
	grep -q '^probe after' "$tail_log"
check "... and the WRITE completes" test "$verdict" = completed
# (A second probe may follow: the NAK is progress, and the peer's ACK for 3-4 may take longer
# than two of the first round trip, the only one measured.)
check "a tail probe (tail_probes), one NAK gone back for (rcvd_seq_err), no timeout (ack_timeouts)" \
	test "$(($(counter tail_probes) - probes > 0)) $(($(counter rcvd_seq_err) - seq_errs)) $(($(counter ack_timeouts) - timeouts))" = "1 1 0"
rm -f "$tail_log"
reap "$TAIL_PID"

# Atomics from the wire on one word, their answers caught in the peer namespace: FETCH ADD 5
# and 7, COMPARE SWAP 12 -> 100, FETCH ADD 1 each return the value before them; then repeats
# of PSNs 1 and 0. max_dest_rd_atomic 2 keeps the last 3 results: PSN 1's repeat is answered
# with its recorded 5 and adds nothing, PSN 0's is too old and dropped (executing it again
# would break its atomicity). An ATOMIC WRITE of 1000 (answered by an empty READ response), a
# FETCH ADD after it, and the ATOMIC WRITE's repeat, answered again without storing again.
# Last, a FETCH ADD at a misaligned address: NAKed as invalid.
coproc ATOMIC { /usr/bin/python3 -u "$here/guest/atomic_target.py" "$DEV" "$gid" "$peer_gid" 2; }
read -r -t 300 atomic_qpn rkey va <&"${ATOMIC[0]}"
replies=$(REPLIES=10 send "$atomic_qpn" "faa:0:$va:$rkey:5,faa:1:$va:$rkey:7,cas:2:$va:$rkey:12:100,faa:3:$va:$rkey:1,faa:1:$va:$rkey:7,faa:0:$va:$rkey:5,awrite:4:$va:$rkey:1000,faa:5:$va:$rkey:1,awrite:4:$va:$rkey:1000,faa:6:$((va + 4)):$rkey:1")
echo "$replies" | sed 's/^/# /'
echo >&"${ATOMIC[1]}"
read -r -t 60 word <&"${ATOMIC[0]}"
echo "# the word: $word"
reply_lines() { sed -n "$1p" <<<"$replies" | tr '\n' ';'; }
check "atomics execute in order and answer with the values before them (FETCH ADD, COMPARE SWAP)" \
	test "$(reply_lines 1,4)" = "reply 0x12 0 0x1f 0;reply 0x12 1 0x1f 5;reply 0x12 2 0x1f 12;reply 0x12 3 0x1f 100;"
check "a repeated atomic gets its recorded result again; one older than the record is dropped (next comes the ATOMIC WRITE's answer)" \
	test "$(reply_lines 5,6)" = "reply 0x12 1 0x1f 5;reply 0x10 4 0x1f;"
check "an ATOMIC WRITE stores its 8 bytes; its repeat is answered, and stores nothing again" \
	test "$(reply_lines 7,8)" = "reply 0x12 5 0x1f 1000;reply 0x10 4 0x1f;" -a "$word" = 1001
check "a misaligned atomic is NAKed (invalid request)" test "$(reply_lines 9,10)" = "reply 0x11 6 0x61;no more replies;"
reap "$ATOMIC_PID"

# FLUSH (IBTA 1.5), answered by an empty READ response. Global visibility: over a range of an MR
# that grants it, over the whole region (its RETH's VA and length then ignored), and a repeat,
# answered again. Persistence, over an MR on persistent memory (the guest's NVDIMM as device
# DAX) that grants it: a range, and the whole region for both placements; over an MR that
# grants only global visibility: remote access error. An MR of ordinary memory cannot get the
# persistent right (EINVAL, as with rdma_rxe). A QP without the right asked for: invalid
# request. An MR without the FLUSH right: remote access error.
dax_dev=$(pmem_dax) || dax_dev=/dev/no-pmem
echo "# persistent memory: $dax_dev"
coproc FLUSH { /usr/bin/python3 -u "$here/guest/flush_target.py" "$DEV" "$gid" "$peer_gid" "$dax_dev"; }
read -r -t 300 fqp1 fqp2 fqp3 frkey1 fva1 frkey2 fva2 fqp4 frkey4 fva4 frkey5 fva5 refused <&"${FLUSH[0]}"
flush1=$(REPLIES=5 send "$fqp1" "flush:0:$fva1:$frkey1:64:1:0,flush:1:0:$frkey1:0:1:1,flush:0:$fva1:$frkey1:64:1:0,flush:2:$fva1:$frkey1:64:2:0" | tr '\n' ';')
flush2=$(REPLIES=2 send "$fqp2" "flush:0:$fva2:$frkey2:64:1:0" | tr '\n' ';')
flush3=$(REPLIES=2 send "$fqp3" "flush:0:$fva1:$frkey1:64:1:0" | tr '\n' ';')
flush4=$(REPLIES=4 send "$fqp4" "flush:0:$((fva4 + 4096)):$frkey4:8192:2:0,flush:1:0:$frkey4:0:3:1,flush:2:$fva5:$frkey5:64:2:0" | tr '\n' ';')
echo "# FLUSH replies: $flush1 | $flush2 | $flush3 | $flush4"
echo >&"${FLUSH[1]}"
check "FLUSH of a range and of a whole region: empty READ responses; a repeat is answered again" \
	test "${flush1%%reply 0x11*}" = "reply 0x10 0 0x1f;reply 0x10 1 0x1f;reply 0x10 0 0x1f;"
check "FLUSH for persistence by a QP that grants only global visibility: invalid request" \
	test "${flush1#*0x1f;*0x1f;*0x1f;}" = "reply 0x11 2 0x61;no more replies;"
check "FLUSH of an MR without the FLUSH right: remote access error; by a QP without it: invalid request" \
	test "$flush2|$flush3" = "reply 0x11 0 0x62;no more replies;|reply 0x11 0 0x61;no more replies;"
check "FLUSH for persistence of an MR on persistent memory (a range; the region, both placements): empty READ responses; of an MR without the right: remote access error" \
	test "$flush4" = "reply 0x10 0 0x1f;reply 0x10 1 0x1f;reply 0x11 2 0x62;no more replies;"
check "an MR of ordinary memory with the persistent FLUSH right: EINVAL" test "$refused" = 22
reap "$FLUSH_PID"

# A UD message is one packet of at most the MTU (1024 here): a datagram carrying more (one a
# host reassembled from IP fragments, or sent whole as here) is dropped as malformed, and the
# receive it would have filled takes the next one that fits.
coproc UDHOLDER { /usr/bin/python3 -u -c "
import time
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e
ctx = Context(name='$DEV'); pd = PD(ctx); cq = CQ(ctx, 8)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap()))
init = QPAttr(qp_state=e.IBV_QPS_INIT)
init.pkey_index, init.port_num, init.qkey = 0, 1, 0x11111111
qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
rts = QPAttr(qp_state=e.IBV_QPS_RTS)
rts.sq_psn = 0
qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 4096, mr.lkey)]))
print(qp.qp_num, flush=True)
input()
time.sleep(1)
n, wcs = cq.poll(4)
print(' '.join(f'{wc.status}:{wc.byte_len}:{mr.read(1, 40).decode()}' for wc in wcs[:n]) or 'none', flush=True)
input()"; }
read -r -t 300 ud_qpn <&"${UDHOLDER[0]}"
malformed=$(counter rcvd_malformed)
send "$ud_qpn" ud:0x11111111:1100:b,ud:0x11111111:1000:a
echo >&"${UDHOLDER[1]}"
ud_verdict=
read -r -t 120 ud_verdict <&"${UDHOLDER[0]}"
echo "# UD receive: $ud_verdict"
check "a UD datagram over the MTU is dropped (rcvd_malformed); the next, within it, lands" \
	test "$ud_verdict $(counter rcvd_malformed)" = "0:1040:a $((malformed + 1))"
echo >&"${UDHOLDER[1]}"
reap "$UDHOLDER_PID"

# Random datagrams, twice: random bytes after the UDP header (the ICRC check drops nearly all),
# then random BTHs and bodies with valid ICRCs, which reach the parser and the QP lookup (to a
# QP number nobody has): every one is dropped and counted, none as an ICRC error.
drops() {
	local c n sum=0
	for c in rcvd_malformed rcvd_icrc_err rcvd_unknown_qp rcvd_wrong_transport rcvd_bad_pkey; do
		read -r n <"/sys/class/infiniband/$DEV/ports/1/hw_counters/$c" && sum=$((sum + n))
	done
	echo $sum
}
before=$(drops)
send 0x123456 garbage 2000
all_counted() { (($(drops) - before == $1)); }
check "2000 random datagrams are all dropped and counted" wait_for 30 all_counted 2000
before=$(drops) icrc_before=$(counter rcvd_icrc_err)
send 0x123456 random 2000
check "2000 random BTHs and bodies with valid ICRCs: all dropped and counted" wait_for 30 all_counted 2000
check "... and none of them as an ICRC error" test "$(counter rcvd_icrc_err)" = "$icrc_before"
rdma statistic show link "$DEV/1" | sed 's/^/# /'
check "the device still works after that" bash -c "ibv_devinfo -d $DEV | grep -q PORT_ACTIVE"

rdma link delete "$DEV"
ip netns del rxpeer
reset_or_bail
ktap_finished
