"""Recovery from a responder that is not ready or not there (pyverbs, one process, loopback):
`rnr_retry` and `retry_cnt` are honoured to the packet, as the counters show.

Usage: rc_recovery.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import sys
import time

from pyverbs.qp import QPAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e

from rdma_data import expect, expect_status, pair, pattern, run_checks


def counter(ctx, name):
    with open(f"/sys/class/infiniband/{ctx.name}/ports/1/hw_counters/{name}") as f:
        return int(f.read())


def counters(ctx, *names):
    # The RDMA core keeps a port's counters read through sysfs for 10 ms: a read within 10 ms
    # of the last one may miss what happened since.
    time.sleep(0.02)
    return {n: counter(ctx, n) for n in names}


def moved(ctx, before):
    after = counters(ctx, *before)
    return {n: after[n] - v for n, v in before.items()}


def rnr_retry_exhausted(ctx):
    """A SEND to a QP without a posted receive, rnr_retry 2: three RNR NAKs (the first try and
    two retries), then RNR_RETRY_EXC_ERR. rdma_rxe's names count the same: RNR NAKs sent and
    received, the requester took in three responses (ack_deferred), and the SEND completed (in
    error: rdma_sends, as rdma_rxe counts it)."""
    a, b = pair(ctx, rnr_retry=2)
    want = {"rcvd_rnr": 3, "rcvd_rnr_nak": 3, "retry_rnr_exceeded_err": 1, "send_rnr_err": 3, "rcvd_rnr_err": 3,
            "ack_deferred": 3, "rdma_sends": 1}
    before = counters(ctx, *want)
    _src = a.start_data(e.IBV_WR_SEND, pattern(64, 1))
    expect_status(a.completion("the SEND nobody receives"), e.IBV_WC_RNR_RETRY_EXC_ERR, "the SEND nobody receives")
    got = moved(ctx, before)
    expect(got == want, f"counters moved by {got}, want {want}")


def rnr_waits_for_a_receive(ctx):
    """rnr_retry 7 (forever): a SEND keeps being RNR NAKed until the receiver posts a receive,
    then completes, and its data arrives: one SEND and one receive completed (rdma_rxe's
    rdma_sends and rdma_recvs)."""
    a, b = pair(ctx)
    before = counter(ctx, "rcvd_rnr")
    completed = counters(ctx, "rdma_sends", "rdma_recvs")
    data = pattern(64, 2)
    _src = a.start_data(e.IBV_WR_SEND, data)
    deadline = time.time() + 10
    while counter(ctx, "rcvd_rnr") - before < 3 and time.time() < deadline:
        time.sleep(0.05)
    expect(counter(ctx, "rcvd_rnr") - before >= 3, "the SEND was not RNR NAKed (repeatedly)")
    n, _ = a.cq.poll(1)
    expect(n == 0, "the SEND completed with no receive posted")
    dst = b.mr(64)
    b.qp.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(dst.buf, 64, dst.lkey)]))
    expect_status(a.completion("the SEND"), e.IBV_WC_SUCCESS, "the SEND")
    wc = b.completion("the receive")
    expect_status(wc, e.IBV_WC_SUCCESS, "the receive")
    expect(wc.wr_id == 3 and wc.byte_len == 64 and dst.read(64, 0) == data, "the SEND's data did not arrive")
    got = moved(ctx, completed)
    expect(got == {"rdma_sends": 1, "rdma_recvs": 1}, f"counters moved by {got}")


def retry_cnt_exhausted(ctx):
    """The responder's QP is in ERR, so its packets are dropped and nothing is acknowledged:
    with retry_cnt 2 the WRITE goes out three times, then fails with RETRY_EXC_ERR."""
    a, b = pair(ctx, timeout=8, retry_cnt=2)
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    remote = b.mr(64)
    want = {"rcvd_qp_not_ready": 3, "retransmits": 2, "retry_exceeded_err": 1, "completer_retry_err": 2,
            "ack_deferred": 0}
    before = counters(ctx, *want)
    _src = a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, 3), remote)
    expect_status(a.completion("the WRITE nobody acknowledges"), e.IBV_WC_RETRY_EXC_ERR, "the WRITE nobody acknowledges")
    got = moved(ctx, before)
    expect(got == want, f"counters moved by {got}, want {want}")


CHECKS = {
    "rnr_retry_exhausted": rnr_retry_exhausted,
    "rnr_waits_for_a_receive": rnr_waits_for_a_receive,
    "retry_cnt_exhausted": retry_cnt_exhausted,
}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
