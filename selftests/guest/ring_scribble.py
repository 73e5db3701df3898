"""A process that scribbles on its own mapped rings hurts only itself (pyverbs, loopback).

The SQ, RQ and CQ rings are memory the process maps from the device. These checks write
garbage into them behind the provider's back, as a buggy or hostile program would, and expect
the kernel to fail only that QP or CQ: the error state with IBV_EVENT_QP_FATAL (or
IBV_EVENT_CQ_ERR), error completions, a NAK to the peer. Another QP pair of the same process
then still moves data intact (and the harness checks dmesg: no warning, no KASAN report).

Usage: ring_scribble.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import ctypes
import sys
from types import SimpleNamespace

from pyverbs.qp import QPAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e

from rdma_data import (GUARD, Side, connected, expect, expect_status, pattern, read_into_sge_list, run_checks,
                       send_between_sge_lists, wait_event)

# The ring layout of uapi/src/ring.rs and the WQE layouts of uapi/src/wqe.rs (checked there).
PRODUCER, CONSUMER, SLOT0 = 0, 64, 128
RECV_WQE_NUM_SGE = 8
SEND_WQE_WR_ID, SEND_WQE_OPCODE, SEND_WQE_NUM_SGE, SEND_WQE_REMOTE_ADDR, SEND_WQE_RKEY = 0, 8, 16, 32, 40
# Far more than any ring has slots: the indices are inconsistent.
BROKEN = 0x10000
PROBE_WR_ID = 99


def u32(addr):
    return ctypes.c_uint32.from_address(addr)


def uverbs_maps():
    """{start address: (size, file offset)} of this process's mappings of the uverbs device."""
    found = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/dev/infiniband/uverbs"):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                found[lo] = (hi - lo, int(fields[2], 16))
    return found


def uverbs_mappings():
    """{start address: size} of this process's mappings of the uverbs device."""
    return {start: size for start, (size, _) in uverbs_maps().items()}


def scribble_pair(ctx, send_wr=16):
    """Two connected sides whose rings are located: `side.rings` has the addresses of its SQ,
    RQ and CQ. Each side has one receive posted (wr_id PROBE_WR_ID, into `side.probe`); the
    first has an SQ of `send_wr` slots."""
    sides, mappings = [], []
    for wrs in (send_wr, 16):
        before = uverbs_mappings()
        # A CQ far larger than the SQ and RQ (slots of 256 and 128 bytes, its own of 64): its
        # ring is the largest new mapping. A large SQ gets the largest CQ (every WQE of a
        # Side's QP completes: sq_sig_all).
        sides.append(Side(ctx, cqe=1024 if wrs <= 16 else 32767, send_wr=wrs))
        mappings.append({a: n for a, n in uverbs_mappings().items() if a not in before})
    a, b = connected(ctx, *sides)
    for side, new in zip(sides, mappings):
        expect(len(new) == 3, f"{len(new)} new uverbs mappings for a CQ and a QP, want 3")
        cq = max(new, key=new.get)
        q1, q2 = (addr for addr in new if addr != cq)
        # Posting a receive moves the RQ's producer index, not the SQ's.
        side.probe = side.mr(4096)
        side.qp.post_recv(RecvWR(wr_id=PROBE_WR_ID, num_sge=1, sg=[SGE(side.probe.buf, 4096, side.probe.lkey)]))
        rq, sq = (q1, q2) if u32(q1 + PRODUCER).value == 1 else (q2, q1)
        expect(u32(rq + PRODUCER).value == 1 and u32(sq + PRODUCER).value == 0, "cannot tell the RQ's ring from the SQ's")
        side.rings = SimpleNamespace(sq=sq, rq=rq, cq=cq)
    return a, b


def qp_state(side):
    attr, _ = side.qp.query(e.IBV_QP_STATE)
    return attr.qp_state


def send_64(side, wr_id=1):
    _src = side.start_data(e.IBV_WR_SEND, pattern(64, wr_id), wr_id=wr_id)
    return side.completion(f"wr {wr_id}")


def others_still_work(ctx):
    """A fresh QP pair of the same process: READ into an SGE list and SEND, bytes checked."""
    read_into_sge_list(ctx)
    send_between_sge_lists(ctx)


def post_in_sqd(ctx, side, remote, data, wr_id):
    """Moves `side` to SQD (waits for SQ_DRAINED), then posts an RDMA WRITE of `data` to the
    start of `remote`: the doorbell hands it to the kernel, which does not start it in SQD.
    Returns the WRITE's source MR (keep it: the WRITE reads it once back in RTS)."""
    side.qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE)
    wait_event(ctx, e.IBV_EVENT_SQ_DRAINED)
    return side.start_data(e.IBV_WR_RDMA_WRITE, data, remote, wr_id)


def rq_indices_scribbled(ctx):
    """The RQ's producer index runs far past its consumer: the next SEND finds the RQ broken.
    The receiver's QP enters ERR with IBV_EVENT_QP_FATAL; the sender gets REM_OP_ERR."""
    a, b = scribble_pair(ctx)
    u32(b.rings.rq + PRODUCER).value += BROKEN
    expect_status(send_64(a), e.IBV_WC_REM_OP_ERR, "the SEND into the broken RQ")
    wait_event(ctx, e.IBV_EVENT_QP_FATAL)
    expect(qp_state(b) == e.IBV_QPS_ERR, f"the receiver's QP is in state {qp_state(b)}, want ERR")
    expect(b.probe.read(64, 0) == bytes([GUARD]) * 64, "the SEND landed in a receive of the broken RQ")
    others_still_work(ctx)


def rq_wqe_scribbled(ctx):
    """A posted receive WQE gets an SGE count past the QP's limit: it completes with
    LOC_QP_OP_ERR when a SEND arrives, the receiver's QP enters ERR, the sender gets REM_OP_ERR."""
    a, b = scribble_pair(ctx)
    u32(b.rings.rq + SLOT0 + RECV_WQE_NUM_SGE).value = 0x7FFF
    expect_status(send_64(a), e.IBV_WC_REM_OP_ERR, "the SEND into the malformed receive")
    wc = b.completion("the malformed receive")
    expect(wc.wr_id == PROBE_WR_ID, f"receive completion wr_id {wc.wr_id}, want {PROBE_WR_ID}")
    expect_status(wc, e.IBV_WC_LOC_QP_OP_ERR, "the malformed receive")
    expect(qp_state(b) == e.IBV_QPS_ERR, f"the receiver's QP is in state {qp_state(b)}, want ERR")
    others_still_work(ctx)


def sq_indices_scribbled(ctx):
    """With a WRITE handed to the kernel in SQD, the SQ's producer index runs far ahead: back in
    RTS the kernel finds the SQ broken. QP_FATAL, the WRITE is flushed, nothing lands."""
    a, b = scribble_pair(ctx)
    _source = post_in_sqd(ctx, a, b.probe, pattern(64, 3), wr_id=5)
    u32(a.rings.sq + PRODUCER).value += BROKEN
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    wait_event(ctx, e.IBV_EVENT_QP_FATAL)
    wc = a.completion("the WRITE of the broken SQ")
    expect(wc.wr_id == 5, f"completion wr_id {wc.wr_id}, want 5")
    expect_status(wc, e.IBV_WC_WR_FLUSH_ERR, "the WRITE of the broken SQ")
    expect(qp_state(a) == e.IBV_QPS_ERR, f"the QP is in state {qp_state(a)}, want ERR")
    expect(b.probe.read(64, 0) == bytes([GUARD]) * 64, "the WRITE of the broken SQ landed")
    others_still_work(ctx)


def sq_wqe_scribbled_after_doorbell(ctx):
    """A WRITE is posted in SQD, then its WQE in the ring is overwritten (opcode, SGE count,
    remote address, rkey, wr_id). The kernel copied it at the doorbell: back in RTS the WRITE
    goes out as posted and lands intact."""
    a, b = scribble_pair(ctx)
    data = pattern(64, 4)
    source = post_in_sqd(ctx, a, b.probe, data, wr_id=6)
    slot = a.rings.sq + SLOT0
    for offset, value in ((SEND_WQE_OPCODE, 0xFF), (SEND_WQE_NUM_SGE, 0x7FFF), (SEND_WQE_RKEY, 0),
                          (SEND_WQE_REMOTE_ADDR, 0), (SEND_WQE_REMOTE_ADDR + 4, 0), (SEND_WQE_WR_ID, 0xBAD)):
        u32(slot + offset).value = value
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
    wc = a.completion("the WRITE posted before the scribble")
    expect(wc.wr_id == 6, f"completion wr_id {wc.wr_id}, want 6 (the WQE was read again after the doorbell)")
    expect_status(wc, e.IBV_WC_SUCCESS, "the WRITE posted before the scribble")
    expect(b.probe.read(64, 0) == data, "the WRITE did not land as posted")
    source.close()


def cq_indices_scribbled(ctx):
    """The CQ's consumer index runs far ahead of its producer: the next completion finds the CQ
    broken and raises IBV_EVENT_CQ_ERR. The WRITE itself still lands; other CQs work."""
    a, b = scribble_pair(ctx)
    u32(a.rings.cq + CONSUMER).value += BROKEN
    data = pattern(64, 5)
    _src = a.start_data(e.IBV_WR_RDMA_WRITE, data, b.probe, wr_id=7)
    wait_event(ctx, e.IBV_EVENT_CQ_ERR)
    expect(b.probe.read(64, 0) == data, "the WRITE whose completion overflowed did not land")
    others_still_work(ctx)


CHECKS = {
    "rq_indices_scribbled": rq_indices_scribbled,
    "rq_wqe_scribbled": rq_wqe_scribbled,
    "sq_indices_scribbled": sq_indices_scribbled,
    "sq_wqe_scribbled_after_doorbell": sq_wqe_scribbled_after_doorbell,
    "cq_indices_scribbled": cq_indices_scribbled,
}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
