"""Small pyverbs checks run by the selftests: each prints why it failed and exits non-zero.

Usage: verbs.py DEVICE CHECK  (see CHECKS below)
"""
import errno
import sys

from pyverbs.cq import CQ, CompChannel
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.enums as e


def expect_errno(code, fn, *args):
    try:
        fn(*args)
    except PyverbsRDMAError as err:
        if err.error_code != code:
            sys.exit(f"expected errno {code}, got {err.error_code}: {err}")
        return
    sys.exit(f"expected errno {code}, but it succeeded")


def pd_alloc_dealloc(ctx):
    pds = [PD(ctx) for _ in range(16)]
    for pd in pds:
        pd.close()


def cq_create_poll_empty(ctx):
    attr = ctx.query_device()
    if attr.max_cqe < 1024:
        sys.exit(f"max_cqe {attr.max_cqe}")
    cq = CQ(ctx, 100)
    if cq.cqe < 100:
        sys.exit(f"asked for 100 CQEs, got {cq.cqe}")
    n, wcs = cq.poll(8)
    if n != 0:
        sys.exit(f"new CQ polled {n} completions")
    cq.close()


def cq_bad_sizes(ctx):
    attr = ctx.query_device()
    expect_errno(errno.EINVAL, CQ, ctx, 0)
    expect_errno(errno.EINVAL, CQ, ctx, attr.max_cqe + 1)


def cq_with_channel_arms(ctx):
    channel = CompChannel(ctx)
    cq = CQ(ctx, 16, None, channel, 0)
    cq.req_notify()
    cq.req_notify(solicited_only=True)
    cq.close()
    channel.close()


def qp_unsupported(ctx):
    from pyverbs.qp import QP, QPCap, QPInitAttr
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    expect_errno(errno.EOPNOTSUPP, QP, pd, attr)


def mr_register_keys(ctx):
    pd = PD(ctx)
    rw = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    mrs = [MR(pd, size, access) for size in (1, 4096, 65536, 1 << 20)
           for access in (0, e.IBV_ACCESS_LOCAL_WRITE, rw)]
    keys = [mr.lkey for mr in mrs]
    if any(mr.lkey != mr.rkey for mr in mrs):
        sys.exit("lkey != rkey")
    if len(set(keys)) != len(keys):
        sys.exit(f"duplicate keys {keys}")
    if 0 in keys:
        sys.exit("key 0 is the local DMA lkey")
    for mr in mrs:
        mr.close()
    # A new registration must not get a key an earlier one just had.
    again = MR(pd, 4096, 0)
    if again.lkey in keys:
        sys.exit(f"key {again.lkey:#x} reused at once")


def mr_bad_access(ctx):
    pd = PD(ctx)
    # Remote write without local write is invalid (IBA 10.6.3.1; checked by the core).
    expect_errno(errno.EINVAL, MR, pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
    # No on-demand paging.
    expect_errno(errno.EOPNOTSUPP, MR, pd, 4096, e.IBV_ACCESS_ON_DEMAND | e.IBV_ACCESS_LOCAL_WRITE)


def mr_limits_reported(ctx):
    attr = ctx.query_device()
    if attr.max_mr < 1024 or attr.max_pd < 1024 or attr.max_mr_size < (1 << 31):
        sys.exit(f"max_mr {attr.max_mr} max_pd {attr.max_pd} max_mr_size {attr.max_mr_size}")


def many_cqs(ctx):
    cqs = [CQ(ctx, 64) for _ in range(64)]
    for cq in cqs:
        cq.close()


CHECKS = {f.__name__: f for f in [pd_alloc_dealloc, cq_create_poll_empty, cq_bad_sizes,
                                   cq_with_channel_arms, many_cqs, mr_register_keys,
                                   mr_bad_access, mr_limits_reported, qp_unsupported]}

if __name__ == "__main__":
    device, check = sys.argv[1], sys.argv[2]
    with Context(name=device) as context:
        CHECKS[check](context)
