"""ibv_rereg_mr as a user sees it (pyverbs, one process, loopback): the MR keeps its keys while
its rights, its PD or its memory change, and the peer's next access follows the change.

Usage: rereg.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import ctypes
import errno
import sys

from pyverbs.mem_alloc import free, posix_memalign
from pyverbs.mr import MW
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.enums as e

from rdma_data import Failed, Side, connected, expect, expect_status, first_diff, pair, pattern, run_checks
from mw import BINDABLE, REMOTE, SIZE, WIN_LEN, WIN_OFF, bind_type1, expect_bound, expect_untouched, post_write

RW = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def expect_errno(err, code, what):
    expect(err.error_code == code, f"{what}: errno {err.error_code}, want {code}")


def rereg_access_grants_write(ctx):
    """An MR without REMOTE_WRITE gets it by rereg: the same rkey now takes a WRITE."""
    a, b = pair(ctx)
    mr = b.mr(SIZE, e.IBV_ACCESS_LOCAL_WRITE)
    keys = (mr.lkey, mr.rkey)
    mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, b.pd, 0, 0, RW)
    expect((mr.lkey, mr.rkey) == keys, f"keys changed: {keys} -> {(mr.lkey, mr.rkey)}")
    data = pattern(3000, 1)
    expect_status(post_write(a, mr.rkey, mr.buf + 100, data), e.IBV_WC_SUCCESS, "WRITE after the rereg")
    got = mr.read(SIZE, 0)
    expect(got[100:3100] == data, f"data differs at byte {first_diff(got[100:3100], data)}")


def rereg_access_revokes_write(ctx):
    """Taking REMOTE_WRITE away by rereg: the peer's WRITE is refused, memory untouched."""
    a, b = pair(ctx)
    mr = b.mr(SIZE, RW)
    mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, b.pd, 0, 0, e.IBV_ACCESS_LOCAL_WRITE)
    wc = post_write(a, mr.rkey, mr.buf, pattern(64, 2))
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE after REMOTE_WRITE was taken away")
    expect_untouched(mr, "refused WRITE")


def rereg_translation_moves_memory(ctx):
    """A rereg onto other memory: the same rkey, at the new address, writes the new memory; the
    old address is no longer the MR's. (pyverbs frees the MR's old buffer itself.)"""
    a, b = pair(ctx)
    mr = b.mr(SIZE, RW)
    old_buf = mr.buf
    new = posix_memalign(SIZE)
    ctypes.memset(new, 0x5A, SIZE)
    mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, b.pd, new, SIZE, 0)
    data = pattern(5000, 3)
    expect_status(post_write(a, mr.rkey, new + 1000, data), e.IBV_WC_SUCCESS, "WRITE to the new memory")
    got = ctypes.string_at(new, SIZE)
    expect(got[1000:6000] == data, f"new memory differs at byte {first_diff(got[1000:6000], data)}")
    expect(got[:1000] == b"\x5a" * 1000 and got[6000:] == b"\x5a" * (SIZE - 6000), "new memory written outside the range")
    wc = post_write(a, mr.rkey, old_buf, pattern(64, 4), wr_id=7)
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE to the old address")
    mr.close()
    free(new)


def rereg_pd_away_and_back(ctx):
    """An MR moved to another PD is refused to the QP of its old PD; moved back, it works."""
    a, b = pair(ctx)
    mr = b.mr(SIZE, RW)
    other = PD(ctx)
    mr.rereg(e.IBV_REREG_MR_CHANGE_PD, other, 0, 0, 0)
    wc = post_write(a, mr.rkey, mr.buf, pattern(64, 5))
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE to an MR of another PD")
    expect_untouched(mr, "refused WRITE")
    mr.rereg(e.IBV_REREG_MR_CHANGE_PD, b.pd, 0, 0, 0)
    a2, _ = connected(ctx, Side(ctx), fresh_peer(ctx, b))
    expect_status(post_write(a2, mr.rkey, mr.buf, pattern(64, 6)), e.IBV_WC_SUCCESS, "WRITE after the PD came back")


def fresh_peer(ctx, b):
    """A new QP in b's PD (b's own QP is in the error state after a refused access)."""
    from pyverbs.qp import QP, QPCap, QPInitAttr
    peer = Side(ctx)
    peer.pd = b.pd
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=4, max_recv_sge=4)
    peer.qp = QP(b.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=peer.cq, rcq=peer.cq, cap=cap))
    return peer


def rereg_with_bound_window_busy(ctx):
    """An MR with a window bound cannot be re-registered (EBUSY); the window keeps working."""
    a, b = pair(ctx)
    mr = b.mr(SIZE, BINDABLE)
    mw = MW(b.pd, e.IBV_MW_TYPE_1)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    try:
        mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, b.pd, 0, 0, e.IBV_ACCESS_LOCAL_WRITE)
        raise Failed("ibv_rereg_mr succeeded with a window bound")
    except PyverbsRDMAError as err:
        expect_errno(err, errno.EBUSY, "ibv_rereg_mr")
    expect_status(post_write(a, mw.rkey, mr.buf + WIN_OFF, pattern(64, 7)), e.IBV_WC_SUCCESS, "WRITE through the window")
    mw.close()


CHECKS = {
    "rereg_access_grants_write": rereg_access_grants_write,
    "rereg_access_revokes_write": rereg_access_revokes_write,
    "rereg_translation_moves_memory": rereg_translation_moves_memory,
    "rereg_pd_away_and_back": rereg_pd_away_and_back,
    "rereg_with_bound_window_busy": rereg_with_bound_window_busy,
}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
