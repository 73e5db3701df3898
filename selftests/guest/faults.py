"""Allocation failures injected into rxe_rs (failslab and fail_page_alloc, confined by the
stack filter to allocations made with rxe_rs on the stack; rxe_rs_faults.sh sets them up).

Control path: every verb is run again and again with its Nth allocation failing (the task's
fail-nth), N = 1, 2, ... until it gets through with no failure left to inject. Each injected
failure must end in ENOMEM from the verb (or be absorbed), and the verb must then work.
Datapath: RC traffic runs while 1 in 10 of the module's allocations fail, in the receive
softirq, the work items and the doorbell; every byte must still arrive (a lost skb is a lost
packet, which RC retransmits). kmemleak and dmesg are checked by the suite after the script.

Usage: faults.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import errno
import os
import sys

from pyverbs.cq import CQ, CompChannel
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e

from rdma_data import RW, Side, connected, expect, expect_status, pair, pattern, run_checks
from ring_scribble import others_still_work

DEBUGFS = "/sys/kernel/debug"
KINDS = ("failslab", "fail_page_alloc")
# More points than any verb has: a loop that reaches it has lost track of fail-nth.
MAX_POINTS = 400
# `times` counts down by one per injected failure: set high, read back to count them.
TIMES = 1000000


def attr(kind, name, value=None):
    path = f"{DEBUGFS}/{kind}/{name}"
    if value is None:
        with open(path) as f:
            return f.read().strip()
    with open(path, "w") as f:
        f.write(str(value))


def fail_nth(n=None):
    """Sets (or reads) this thread's fail-nth: the Nth fault-injection point it passes fails."""
    fd = os.open("/proc/thread-self/fail-nth", os.O_RDONLY if n is None else os.O_WRONLY)
    try:
        if n is None:
            return int(os.read(fd, 32).strip() or 0)
        os.write(fd, str(n).encode())
    finally:
        os.close(fd)


def injected():
    return sum(TIMES - int(attr(k, "times")) for k in KINDS)


def each_failure(what, make, undo=None, required=True):
    """Runs `make()` with its 1st, 2nd, ... fault-injection point failing, until it passes
    them all. An injected failure must raise ENOMEM (or be absorbed: the verb succeeds, the
    point was optional); a failure nobody injected is a bug. `undo(obj)` releases a success.
    With `required`, the verb must reach at least one allocation of rxe_rs."""
    points = absorbed = 0
    for nth in range(1, MAX_POINTS + 1):
        before = injected()
        fail_nth(nth)
        try:
            obj, err = make(), None
        except (PyverbsRDMAError, PyverbsError) as x:
            obj, err = None, x
        finally:
            left = fail_nth()
            fail_nth(0)
        hit = injected() > before
        if err is not None:
            code = getattr(err, "error_code", None)
            expect(hit, f"{what}: failed with no failure injected (fail-nth {nth}): {err}")
            expect(code == errno.ENOMEM, f"{what}: injected failure {nth} gave errno {code} ({err}), want ENOMEM")
            points += 1
            continue
        if undo is not None:
            undo(obj)
        if hit:
            points += 1
            absorbed += 1
            continue
        expect(left > 0, f"{what}: fail-nth {nth} was used up but nothing failed")
        expect(points > 0 or not required, f"{what}: no allocation of rxe_rs was reached (is the stack filter right?)")
        print(f"{what}: {points} allocation points failed in turn ({absorbed} absorbed), then it worked")
        return points
    raise AssertionError(f"{what}: still failing after {MAX_POINTS} injected failures")


def close(obj):
    obj.close()


def control_path_verbs(ctx):
    """alloc_pd, create_cq (with and without a channel), reg_mr, create_qp, modify_qp from
    RESET to RTS, resize_cq and a doorbell: each with each of its allocations failing in turn;
    then a fresh pair of QPs moves data."""
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    channel = CompChannel(ctx)
    cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=4, max_recv_sge=4, max_inline_data=64)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    # The core allocates the PD itself; ours has nothing to allocate (not required).
    each_failure("alloc_pd", lambda: PD(ctx), close, required=False)
    each_failure("create_cq", lambda: CQ(ctx, 256), close)
    each_failure("create_cq with a channel", lambda: CQ(ctx, 4096, None, channel, 0), close)
    each_failure("reg_mr 1 MiB", lambda: MR(pd, 1 << 20, RW), close)
    each_failure("create_qp", lambda: QP(pd, init), close)
    # A modify that fails half-way leaves a QP where it got to: each try starts from RESET.
    a, b = Side(ctx), Side(ctx)
    each_failure("modify_qp RESET->INIT->RTR->RTS, both sides", lambda: connected(ctx, reset(a), reset(b)),
                 required=False)
    grow = iter(range(128, 128 + 64 * MAX_POINTS, 64))
    each_failure("resize_cq", lambda: a.cq.resize(next(grow)))

    # A doorbell whose allocations fail: the SEND's packet is lost and sent again.
    src, dst = a.mr(64), b.mr(64)
    sends = iter(range(1, MAX_POINTS + 1))

    def send():
        n = next(sends)
        src.write(pattern(64, n), 64, 0)
        b.qp.post_recv(RecvWR(wr_id=n, num_sge=1, sg=[SGE(dst.buf, 64, dst.lkey)]))
        a.start(e.IBV_WR_SEND, [SGE(src.buf, 64, src.lkey)], wr_id=n)
        wc = a.completion(f"SEND {n}")
        expect_status(wc, e.IBV_WC_SUCCESS, f"SEND {n}")
        rwc = b.completion(f"receive {n}")
        expect_status(rwc, e.IBV_WC_SUCCESS, f"receive {n}")
        expect(dst.read(64, 0) == pattern(64, n), f"SEND {n}: the data differs")
    each_failure("post_send doorbell (SEND, completions and data checked)", send, required=False)
    others_still_work(ctx)


def reset(side):
    """`side` with its QP back in RESET."""
    side.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    return side


def datapath_under_failures(ctx):
    """1 in 10 of rxe_rs's allocations fail (any context) while 64 KiB WRITEs, READs back and
    SENDs run between two QPs, RXE_RS_FAULT_ROUNDS rounds (6; make soak 40): every byte
    arrives, failures were injected, and the requester retransmitted what they cost."""
    a, b = pair(ctx)
    size = 64 << 10
    local, remote, rbuf = a.mr(2 * size), b.mr(size), b.mr(size)
    before = counters(ctx)
    hit = injected()
    set_probability(10)
    try:
        for r in range(int(os.environ.get("RXE_RS_FAULT_ROUNDS", "6"))):
            data = pattern(size, r)
            local.write(data, size, 0)
            b.qp.post_recv(RecvWR(wr_id=r, num_sge=1, sg=[SGE(rbuf.buf, size, rbuf.lkey)]))
            wc = a.post(e.IBV_WR_RDMA_WRITE, [SGE(local.buf, size, local.lkey)], remote.rkey, remote.buf, wr_id=1)
            expect_status(wc, e.IBV_WC_SUCCESS, f"round {r}: WRITE")
            wc = a.post(e.IBV_WR_RDMA_READ, [SGE(local.buf + size, size, local.lkey)], remote.rkey, remote.buf, wr_id=2)
            expect_status(wc, e.IBV_WC_SUCCESS, f"round {r}: READ")
            wc = a.post(e.IBV_WR_SEND, [SGE(local.buf, size, local.lkey)], wr_id=3)
            expect_status(wc, e.IBV_WC_SUCCESS, f"round {r}: SEND")
            rwc = b.completion(f"round {r}: the receive")
            expect_status(rwc, e.IBV_WC_SUCCESS, f"round {r}: receive")
            expect(remote.read(size, 0) == data, f"round {r}: the WRITE's data differs")
            expect(local.read(size, size) == data, f"round {r}: the data READ back differs")
            expect(rbuf.read(size, 0) == data, f"round {r}: the SEND's data differs")
    finally:
        set_probability(0)
    hit = injected() - hit
    after = counters(ctx)
    moved = {k: after[k] - before.get(k, 0) for k in ("send_err", "retransmits", "tail_probes", "sent_pkts")}
    print(f"datapath: {hit} allocations failed; counters moved: {moved}")
    expect(hit > 0, "no allocation failed: the datapath was not reached")
    # (A lost last packet is sent again by a tail-loss probe, which is not a retransmission.)
    expect(moved["retransmits"] + moved["tail_probes"] > 0, "failures were injected but nothing was sent again")
    others_still_work(ctx)


def set_probability(p):
    for k in KINDS:
        attr(k, "probability", p)


def counters(ctx):
    """The port's hw counters (rdma statistic), by name."""
    out = {}
    base = f"/sys/class/infiniband/{ctx.name}/ports/1/hw_counters"
    for name in os.listdir(base):
        try:
            with open(f"{base}/{name}") as f:
                out[name] = int(f.read())
        except (OSError, ValueError):
            pass
    return out


CHECKS = {f.__name__: f for f in [control_path_verbs, datapath_under_failures]}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
