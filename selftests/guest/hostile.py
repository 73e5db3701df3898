"""A hostile local user: values at the edges of what verbs and rings accept, and state changes
a careless or malicious program makes (pyverbs and ctypes, one process, loopback). Each check
expects an errno or an error completion, never a stuck or crashed kernel; the harness checks
dmesg (no panic, warning, KASAN report or soft lockup).

Usage: hostile.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import ctypes
import ctypes.util
import errno
import mmap
import sys
import time

from pyverbs.qp import QPAttr
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

from rdma_data import Side, connected, expect, expect_status, pair, pattern, run_checks, wait_event
from verbs import ipv4_gid_index
from ring_scribble import PRODUCER, others_still_work, post_in_sqd, qp_state, scribble_pair, u32

TOP = (1 << 64) - 1


def read_remote_addr_wraps(ctx):
    """A 64 KiB READ at remote address 2^64 - 1 (max_rd_atomic 4, so its parts would go out
    at once): the range wraps, so it fails as a remote access error; nothing panics."""
    a, b = pair(ctx)
    dst = a.mr(65536)
    a.start(e.IBV_WR_RDMA_READ, [SGE(dst.buf, 65536, dst.lkey)], b.mr(64).rkey, TOP, wr_id=11)
    wc = a.completion("the wrapping READ")
    expect(wc.wr_id == 11, f"completion wr_id {wc.wr_id}")
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "the wrapping READ")
    expect(dst.read(64, 0) == bytes([0xEE]) * 64, "the wrapping READ wrote local memory")
    others_still_work(ctx)


class Verbs:
    """The few libibverbs calls pyverbs does not expose (ibv_reg_mr_iova2), on a context and PD
    of their own."""

    def __init__(self, name):
        lib = ctypes.CDLL(ctypes.util.find_library("ibverbs"), use_errno=True)
        for fn, res, args in (("ibv_get_device_list", ctypes.POINTER(ctypes.c_void_p), [ctypes.POINTER(ctypes.c_int)]),
                              ("ibv_get_device_name", ctypes.c_char_p, [ctypes.c_void_p]),
                              ("ibv_open_device", ctypes.c_void_p, [ctypes.c_void_p]),
                              ("ibv_alloc_pd", ctypes.c_void_p, [ctypes.c_void_p]),
                              ("ibv_reg_mr_iova2", ctypes.c_void_p,
                               [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint]),
                              ("ibv_dereg_mr", ctypes.c_int, [ctypes.c_void_p])):
            getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args
        self.lib = lib
        n = ctypes.c_int()
        devs = lib.ibv_get_device_list(ctypes.byref(n))
        dev = next(devs[i] for i in range(n.value) if lib.ibv_get_device_name(devs[i]).decode() == name)
        self.ctx = lib.ibv_open_device(dev)
        self.pd = lib.ibv_alloc_pd(self.ctx)
        expect(self.ctx and self.pd, "cannot open the device through libibverbs")
        # Page-aligned, as the iovas below are (the core refuses differing page offsets).
        self.buf = mmap.mmap(-1, 8192)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))

    def reg(self, length, iova):
        """Registers `length` bytes at `iova`: the MR pointer, or the errno."""
        ctypes.set_errno(0)
        mr = self.lib.ibv_reg_mr_iova2(self.pd, self.addr, length, iova, e.IBV_ACCESS_LOCAL_WRITE)
        return mr if mr else -ctypes.get_errno()


def mr_iova_wraps_refused(ctx):
    """An MR whose iova range runs past 2^64 is refused with EINVAL (its bounds checks would
    lie, and a WRITE into it overflowed the responder's address); ranges whose last byte is at
    2^64 - 1 or below are fine."""
    v = Verbs(ctx.name)
    for iova, length in (((1 << 64) - 4096, 8192), ((1 << 64) - 8192, 4096 * 3)):
        got = v.reg(length, iova)
        expect(got == -errno.EINVAL, f"iova {iova:#x} + {length}: got {got}, want -EINVAL")
    for iova, length in (((1 << 64) - 8192, 4096), ((1 << 64) - 8192, 8192)):
        mr = v.reg(length, iova)
        expect(mr > 0, f"iova {iova:#x} + {length} (not past 2^64) was refused ({mr})")
        expect(v.lib.ibv_dereg_mr(mr) == 0, "dereg failed")


def sq_producer_backwards(ctx):
    """Two WRITEs are handed to the kernel in SQD; then the SQ's producer index is moved back
    below them and a third is posted, which rings the doorbell. The kernel finds the ring
    inconsistent at once (before, it ran its fetch loop ~2^32 times under the QP's lock):
    QP_FATAL, the WRITEs flush."""
    a, b = scribble_pair(ctx)
    keep = [post_in_sqd(ctx, a, b.probe, pattern(64, 1), wr_id=21)]
    keep.append(a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, 2), b.probe, wr_id=22))
    u32(a.rings.sq + PRODUCER).value -= 2
    # Its doorbell finds the ring inconsistent (even in SQD, WQEs are fetched).
    keep.append(a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, 3), b.probe, wr_id=23))
    wait_event(ctx, e.IBV_EVENT_QP_FATAL)
    expect(qp_state(a) == e.IBV_QPS_ERR, f"the QP is in state {qp_state(a)}, want ERR")
    wc = a.completion("the first WRITE")
    expect(wc.wr_id == 21 and wc.status == e.IBV_WC_WR_FLUSH_ERR, f"wr {wc.wr_id} status {wc.status}")
    others_still_work(ctx)


def reset_stops_the_timer(ctx):
    """A WRITE to a peer in ERR arms the retransmission timer; the QP goes to RESET (the timer
    fires there), back to RTS, and a WRITE to the dead peer must still be retried and fail
    with RETRY_EXC_ERR: the RESET must not leave the timer marked armed."""
    # First a long timeout (268 ms): the timer is still armed when the QP goes to RESET.
    a, b = pair(ctx, timeout=16)
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    remote = b.mr(64)
    _first = a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, 1), remote, wr_id=31)
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    time.sleep(1)  # the timer, if still running, expires in RESET
    while a.cq.poll(1)[0]:
        pass
    gid_index, gid = ipv4_gid_index(ctx)
    a.connect(b.qp.qp_num, gid_index, gid, timeout=8, retry_cnt=1)
    _second = a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, 2), remote, wr_id=32)
    wc = a.completion("the WRITE after RESET", timeout=30)
    expect(wc.wr_id == 32, f"completion wr_id {wc.wr_id}")
    expect_status(wc, e.IBV_WC_RETRY_EXC_ERR, "the WRITE to the dead peer after RESET")


def full_cq_fails_the_qp(ctx):
    """A CQ with room for 2 completions and 4 signaled WRITEs nobody polls for: the third
    completion finds the CQ full; the CQ reports IBV_EVENT_CQ_ERR and the QP enters ERR instead
    of running on with its completions lost."""
    a = Side(ctx, cqe=2)
    b = Side(ctx)
    connected(ctx, a, b)
    remote = b.mr(64)
    keep = [a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, i), remote, wr_id=40 + i) for i in range(4)]
    wait_event(ctx, e.IBV_EVENT_CQ_ERR)
    deadline = time.time() + 10
    while qp_state(a) != e.IBV_QPS_ERR and time.time() < deadline:
        time.sleep(0.05)
    expect(qp_state(a) == e.IBV_QPS_ERR, f"the QP is in state {qp_state(a)} after its CQ overflowed, want ERR")
    del keep
    others_still_work(ctx)


def recv_after_error_is_flushed(ctx):
    """A receive posted after the QP entered ERR completes with WR_FLUSH_ERR (a drain that
    waits for it would hang otherwise)."""
    a, b = pair(ctx)
    b.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    dst = b.mr(64)
    b.qp.post_recv(RecvWR(wr_id=51, num_sge=1, sg=[SGE(dst.buf, 64, dst.lkey)]))
    wc = b.completion("the receive posted in ERR", timeout=10)
    expect(wc.wr_id == 51, f"completion wr_id {wc.wr_id}")
    expect_status(wc, e.IBV_WC_WR_FLUSH_ERR, "the receive posted in ERR")


def qp_numbers_not_sequential(ctx):
    """QP numbers are 24-bit and not handed out one after another: eight QPs do not sit at
    eight consecutive numbers (a blind sweep from 16 up would find them all)."""
    sides = [Side(ctx) for _ in range(8)]
    qpns = sorted(s.qp.qp_num for s in sides)
    expect(all(16 <= q <= 0xFFFFFF for q in qpns), f"QP numbers {qpns}")
    expect(qpns[-1] - qpns[0] > 7, f"QP numbers {[hex(q) for q in qpns]} are consecutive")
    expect(len(set(q >> 17 for q in qpns)) > 1, f"QP numbers {[hex(q) for q in qpns]} share their high bits")


def mr_churn(ctx):
    """2000 registrations and deregistrations (in rounds of 40): keys stay distinct among the
    live MRs, and transfers through new MRs keep working (kmemleak checks what stays behind)."""
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    pd = PD(ctx)
    for round_ in range(50):
        mrs = [MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE) for _ in range(40)]
        keys = {mr.lkey for mr in mrs}
        expect(len(keys) == 40 and 0 not in keys, f"round {round_}: live MRs share keys")
        for mr in mrs:
            mr.close()
    others_still_work(ctx)


CHECKS = {f.__name__: f for f in [read_remote_addr_wraps, mr_iova_wraps_refused,
                                   sq_producer_backwards, reset_stops_the_timer, full_cq_fails_the_qp,
                                   recv_after_error_is_flushed, qp_numbers_not_sequential, mr_churn]}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
