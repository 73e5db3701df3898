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


def mr_unsupported(ctx):
    pd = PD(ctx)
    expect_errno(errno.EOPNOTSUPP, MR, pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)


def many_cqs(ctx):
    cqs = [CQ(ctx, 64) for _ in range(64)]
    for cq in cqs:
        cq.close()


CHECKS = {f.__name__: f for f in [pd_alloc_dealloc, cq_create_poll_empty, cq_bad_sizes,
                                   cq_with_channel_arms, mr_unsupported, many_cqs]}

if __name__ == "__main__":
    device, check = sys.argv[1], sys.argv[2]
    with Context(name=device) as context:
        CHECKS[check](context)
