"""Holds an RC QP in RTR (rq_psn 0) with two receives posted, for crafted SENDs to land in.

Usage: recv_target.py DEV GID_INDEX DGID   (DGID: the peer the crafted packets come from)

Prints the QP number, waits for a line on stdin (the SENDs were sent), then polls the CQ and
checks: receive 1 got 8 x "r"; receive 2, split over two SGEs (1000 + 1048 bytes), got
1024 x "A" then 100 x "B". Exits non-zero with the reason otherwise.
"""
import sys
import time

from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e


def rtr_qp(dev, gid_index, post=lambda qp, pd: None, access=0, cap=None, dgid=None, max_dest_rd_atomic=1):
    """An RC QP of device DEV in RTR (rq_psn 0, path MTU 1024) from the GID at GID_INDEX to
    DGID (default: that GID itself), whose dest_qp_num (0x99) is what the crafted packets claim
    to come from; POST(qp, pd) runs in INIT. Returns (ctx, pd, cq, qp): the caller keeps them
    alive."""
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    cap = cap or QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=2, max_recv_sge=2)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num, init.qp_access_flags = 0, 1, access
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    post(qp, pd)
    rtr = QPAttr(qp_state=e.IBV_QPS_RTR)
    rtr.path_mtu, rtr.dest_qp_num, rtr.rq_psn, rtr.min_rnr_timer = e.IBV_MTU_1024, 0x99, 0, 12
    rtr.max_dest_rd_atomic = max_dest_rd_atomic
    gid = GID(dgid) if dgid else ctx.query_gid(1, gid_index)
    rtr.ah_attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=gid, sgid_index=gid_index))
    qp.modify(rtr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
              | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    return ctx, pd, cq, qp


def rts_qp(dev, gid_index, dgid, timeout, retry_cnt):
    """rtr_qp's QP moved on to RTS (sq_psn 0, rnr_retry 7, one READ or atomic in flight), with
    the retransmission `timeout` and `retry_cnt` given. Returns (ctx, pd, cq, qp)."""
    ctx, pd, cq, qp = rtr_qp(dev, gid_index, dgid=dgid)
    rts = QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.sq_psn, rts.max_rd_atomic = timeout, retry_cnt, 7, 0, 1
    qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
              | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
    return ctx, pd, cq, qp


def main():
    dev, gid_index, dgid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    small = big = None

    def post(qp, pd):
        nonlocal small, big
        small = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        big = MR(pd, 2048, e.IBV_ACCESS_LOCAL_WRITE)
        # Receives can be posted from INIT on (in RESET they fail with EINVAL).
        qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(small.buf, 64, small.lkey)]))
        qp.post_recv(RecvWR(wr_id=2, num_sge=2, sg=[SGE(big.buf, 1000, big.lkey), SGE(big.buf + 1000, 1048, big.lkey)]))

    ctx, pd, cq, qp = rtr_qp(dev, gid_index, post, dgid=dgid)
    print(qp.qp_num, flush=True)
    sys.stdin.readline()

    wcs = []
    deadline = time.time() + 30
    while len(wcs) < 2 and time.time() < deadline:
        n, got = cq.poll(2)
        wcs += got[:n]
        time.sleep(0.05)
    if len(wcs) != 2:
        sys.exit(f"{len(wcs)} completions")
    for wc, (wr_id, length) in zip(wcs, [(1, 8), (2, 1124)]):
        if (wc.status, wc.opcode, wc.wr_id, wc.byte_len, wc.qp_num) != (0, e.IBV_WC_RECV, wr_id, length, qp.qp_num):
            sys.exit(f"completion {wc.wr_id}: status {wc.status} opcode {wc.opcode} len {wc.byte_len} qp {wc.qp_num}")
    if small.read(8, 0) != b"r" * 8:
        sys.exit(f"receive 1 holds {small.read(8, 0)!r}")
    data = big.read(1124, 0)
    if data != b"A" * 1024 + b"B" * 100:
        sys.exit(f"receive 2 holds {data[:16]!r}...{data[-16:]!r}")
    print("received", flush=True)


if __name__ == "__main__":
    main()
