"""Sends COUNT datagrams to an IPv4 multicast group as mckey's sender does, and waits until the
device has sent each of them (pyverbs, plain verbs: no join is needed to send to a group).

mckey -s posts its sends unsignaled and destroys its address handle and QP right after posting.
rdma_rxe sends a user QP's WQEs from a work item, so on a busy single-vCPU guest that work may
run only after the teardown, and what it had not sent by then is never sent (nothing is lost on
the wire or at the receiver): in a 1-vCPU guest rdma_rxe's sent_pkts rose by 11 to 30 for each
of 12 runs of `mckey -s -C 30`, every one exiting 0. This sender signals every send and polls
for the completions before it tears anything down, so what it reports as sent left the host.

Usage: mcast_send.py DEVICE GROUP COUNT
The datagrams carry 100 bytes to QPN 0xFFFFFF with rdma_cm's Q_Key for the UDP port space, as
mckey's do, so an `mckey` receiver joined to GROUP takes them.
"""
import ipaddress
import sys
import time

from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

from verbs import ipv4_gid_index

MULTICAST_QPN = 0xFFFFFF
RDMA_UDP_QKEY = 0x01234567  # rdma_cm's Q_Key for RDMA_PS_UDP (mckey's default port space)
MESSAGE_SIZE = 100  # mckey's default
COMPLETION_TIMEOUT_S = 60


def main():
    device, group, count = sys.argv[1], ipaddress.IPv4Address(sys.argv[2]), int(sys.argv[3])
    if not group.is_multicast or not 0 < count <= 256:
        sys.exit(f"usage: {sys.argv[0]} DEVICE IPV4_GROUP COUNT(1..256)")
    ctx = Context(name=device)
    pd = PD(ctx)
    cq = CQ(ctx, count)
    cap = QPCap(max_send_wr=count, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=cap))
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num, init.qkey = 0, 1, RDMA_UDP_QKEY
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
    rts = QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.sq_psn = 0
    qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)

    gid_index, _ = ipv4_gid_index(ctx)
    dgid = GID(ipaddress.IPv6Address(f"::ffff:{group}").exploded)  # (pyverbs wants all 8 groups)
    ah = AH(pd, attr=AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=dgid, sgid_index=gid_index, hop_limit=64)))
    mr = MR(pd, MESSAGE_SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    mr.write(b"m" * MESSAGE_SIZE, MESSAGE_SIZE, 0)
    for i in range(count):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1, sg=[SGE(mr.buf, MESSAGE_SIZE, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED, imm_data=qp.qp_num)
        wr.set_wr_ud(ah, MULTICAST_QPN, RDMA_UDP_QKEY)
        qp.post_send(wr)

    done, deadline = 0, time.monotonic() + COMPLETION_TIMEOUT_S
    while done < count:
        n, wcs = cq.poll(count - done)
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                sys.exit(f"send {wc.wr_id} completed with status {wc.status}")
        done += n
        if n == 0:
            if time.monotonic() > deadline:
                sys.exit(f"{done} of {count} sends completed within {COMPLETION_TIMEOUT_S} s")
            time.sleep(0.001)
    print(f"mcast_send: {count} datagrams to {group} sent from {device}")


if __name__ == "__main__":
    main()
