#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Data integrity: RDMA WRITE, READ and SEND between SGE lists over several MRs (and into an MR on
# persistent memory, the guest NVDIMM as device DAX), checked byte
# for byte (also posted with the ibv_wr_* API); ibv_resize_cq with completions waiting; SQD
# draining; a batch of small WRITEs asking for 2 ACKs, not one each; remote accesses with a wrong rkey, without the right or out of bounds failing with
# REM_ACCESS_ERR without touching memory (guest/rdma_data.py, two QPs over loopback); garbage
# written to the mapped rings failing only its own QP or CQ (guest/ring_scribble.py); rnr_retry
# and retry_cnt honoured against a responder without receives or in ERR (guest/rc_recovery.py);
# UC: SENDs and WRITEs intact, and what cannot be received (no receive, a bad R_Key, a packet
# lost, a message cut short) dropped and counted with the QPs running on (guest/uc.py); SRQs
# shared by QPs, their limit and last-WQE events, resizes, RNR and errnos (guest/srq.py);
# those packets, between QPs of this host, go to the receive path without crossing lo.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0

checks=(write_sge_list_to_mr_end read_into_sge_list send_between_sge_lists large_write_then_read_back
	write_into_persistent_memory
	resize_cq_keeps_pending_completions sqd_drains_then_resumes wr_api_batch batch_asks_two_acks
	write_wrong_rkey read_wrong_rkey write_past_mr_end read_before_mr_start write_without_remote_write)
# A process writing garbage to its own rings fails only its own QP or CQ (guest/ring_scribble.py).
scribbles=(rq_indices_scribbled rq_wqe_scribbled sq_indices_scribbled sq_wqe_scribbled_after_doorbell
	cq_indices_scribbled)
recoveries=(rnr_retry_exhausted rnr_waits_for_a_receive retry_cnt_exhausted)
ucs=(uc_send_write_imm_intact uc_no_receive_drops_the_message uc_bad_rkey_drops_the_write
	uc_lost_and_cut_short_messages uc_long_write_sqd_and_a_big_batch uc_refuses_what_it_cannot_carry)
srqs=(srq_shared_by_qps srq_limit_event srq_resize srq_rnr_waits_for_a_post srq_last_wqe_and_destroy
	srq_ud_short_wqe_completes_in_error srq_indices_scribbled)
ktap_print_header
ktap_set_plan $((${#checks[@]} + ${#scribbles[@]} + ${#recoveries[@]} + ${#ucs[@]} + ${#srqs[@]} + 2))
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"

# write_into_persistent_memory's MR: the guest's NVDIMM as device DAX.
RXE_RS_PMEM=$(pmem_dax) || RXE_RS_PMEM=/dev/no-pmem
export RXE_RS_PMEM
counter() { hw_counter "$DEV" "$1"; }
lo_rx() { cat /sys/class/net/lo/statistics/rx_packets; }
lo_before=$(lo_rx) sent_before=$(counter sent_pkts)
run_py_checks rdma_data.py "${checks[@]}"
lo_packets=$(($(lo_rx) - lo_before)) sent=$(($(counter sent_pkts) - sent_before))
echo "# rdma_data.py: $sent RoCE packets sent, $lo_packets packets through lo"
check "packets between QPs of this host skip lo (local delivery)" test $((lo_packets * 10)) -lt "$sent"
run_py_checks ring_scribble.py "${scribbles[@]}"
run_py_checks rc_recovery.py "${recoveries[@]}"
run_py_checks uc.py "${ucs[@]}"
run_py_checks srq.py "${srqs[@]}"
rdma statistic show link "$DEV/1" | sed 's/^/# /'
check "the remote access errors were NAKed and counted" test "$(counter rcvd_invalid_request)" -ge 5

rdma link delete "$DEV"
reset_or_bail
ktap_finished
