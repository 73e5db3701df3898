"""Memory windows as a user sees them (pyverbs, one process, loopback).

Two RC QPs on one device, connected through its IPv4 GID (rdma_data.py's sides). The responder's
MR is registered with LOCAL_WRITE | MW_BIND only: the peer can reach it only through a window.
Type 1 windows are bound with ibv_bind_mw, type 2 ones with a BIND_MW work request (also
through the ibv_wr_* API); data written through a window lands where the window says, and every
access outside it, after an unbind or invalidation, or through the wrong QP fails with
REM_ACCESS_ERR without touching memory. Binds the rules refuse complete with MW_BIND_ERR; an MR
with a window bound cannot be deregistered.

Usage: mw.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import errno
import sys

from pyverbs.mr import MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

from rdma_data import (GUARD, Failed, Side, connected, expect, expect_status, first_diff, pair,
                       pattern, run_checks)

BINDABLE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND
REMOTE = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
SIZE = 16384
WIN_OFF, WIN_LEN = 4096, 8192  # the window: pages 1 and 2 of the MR
MW_OPS = (e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_BIND_MW
          | e.IBV_QP_EX_WITH_LOCAL_INV | e.IBV_QP_EX_WITH_SEND_WITH_INV)


def bind_type1(side, mw, mr, off, length, access, wr_id=7):
    """ibv_bind_mw; waits for the bind's completion and returns it."""
    side.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf + off, length, access), e.IBV_SEND_SIGNALED,
                               wr_id=wr_id))
    return side.completion(f"bind {wr_id}")


def bind_type2(side, mw, mr, off, length, access, wr_id=8):
    """A BIND_MW work request; returns its completion and the window's new rkey."""
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
    wr.set_bind_wr(mw, MWBindInfo(mr, mr.buf + off, length, access))
    side.qp.post_send(wr)
    return side.completion(f"bind {wr_id}"), wr.rkey


def expect_bound(wc, what="bind"):
    expect_status(wc, e.IBV_WC_SUCCESS, what)
    expect(wc.opcode == e.IBV_WC_BIND_MW, f"{what}: completion opcode {wc.opcode}, want BIND_MW")


def post_write(a, rkey, addr, data, wr_id=1):
    src = a.mr(len(data))
    src.write(data, len(data), 0)
    return a.post(e.IBV_WR_RDMA_WRITE, [SGE(src.buf, len(data), src.lkey)], rkey, addr, wr_id)


def post_read(a, rkey, addr, n, wr_id=2):
    dst = a.mr(n)
    wc = a.post(e.IBV_WR_RDMA_READ, [SGE(dst.buf, n, dst.lkey)], rkey, addr, wr_id)
    return wc, dst.read(n, 0)


def expect_untouched(mr, what):
    got = mr.read(SIZE, 0)
    expect(got == bytes([GUARD]) * SIZE, f"{what}: memory changed at byte {first_diff(got, bytes([GUARD]) * SIZE)}")


def expect_window_data(mr, at, data):
    """`data` at MR offset `at`, GUARD everywhere else."""
    got = mr.read(SIZE, 0)
    expect(got[at:at + len(data)] == data, f"window data differs at byte {first_diff(got[at:at + len(data)], data)}")
    expect(got[:at] == bytes([GUARD]) * at and got[at + len(data):] == bytes([GUARD]) * (SIZE - at - len(data)),
           "bytes outside the written range changed")


def expect_refused(a, rkey, addr, n, mr, what):
    wc = post_write(a, rkey, addr, pattern(n, 9), wr_id=99)
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, what)
    if mr is not None:
        expect_untouched(mr, what)


WINDOWS = []  # deallocated after each check, before its MRs go (else they cannot)
KEEP = []  # what the windows' MRs hang on, alive until then


def send_with_inv(a, b, rkey, seed):
    """b posts a 256-byte receive (wr_id 3); a SENDs 100 bytes of pattern `seed` WITH
    INVALIDATE of `rkey` (wr_id 4, signaled). Returns b's receive buffer."""
    buf = b.mr(256)
    b.qp.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(buf.buf, 256, buf.lkey)]))
    src = a.mr(100)
    src.write(pattern(100, seed), 100, 0)
    wr = SendWR(wr_id=4, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1, sg=[SGE(src.buf, 100, src.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.imm_data = rkey
    a.qp.post_send(wr)
    return buf


def new_mw(pd, mw_type):
    mw = MW(pd, mw_type)
    WINDOWS.append(mw)
    return mw


def closing_windows(check):
    def run(ctx):
        try:
            check(ctx)
        finally:
            while WINDOWS:
                WINDOWS.pop().close()
            KEEP.clear()
    return run


def type1_window(ctx, mw_type=e.IBV_MW_TYPE_1):
    a, b = pair(ctx)
    mr = b.mr(SIZE, BINDABLE)
    KEEP.extend((a, b, mr))
    return a, b, mr, new_mw(b.pd, mw_type)


# --- the checks ---

def type1_bind_write_read(ctx):
    """A type 1 window onto pages 1-2 of an MR without remote rights: WRITE and READ through it."""
    a, b, mr, mw = type1_window(ctx)
    old = mw.rkey
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    expect(mw.rkey >> 8 == old >> 8 and mw.rkey != old, f"rkey {old:#x} -> {mw.rkey:#x}: want a new key byte")
    data = pattern(3000, 1)
    at = WIN_OFF + WIN_LEN - len(data)  # the window's last bytes
    expect_status(post_write(a, mw.rkey, mr.buf + at, data), e.IBV_WC_SUCCESS, "WRITE through the window")
    expect_window_data(mr, at, data)
    wc, got = post_read(a, mw.rkey, mr.buf + at, len(data))
    expect_status(wc, e.IBV_WC_SUCCESS, "READ through the window")
    expect(got == data, "READ through the window returned other bytes")


def type1_mr_rkey_refused(ctx):
    """The MR's own rkey gives no remote access (it has none): only the window does."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    expect_refused(a, mr.rkey, mr.buf + WIN_OFF, 64, mr, "WRITE by the MR's rkey")


def type1_write_past_window(ctx):
    """A WRITE that starts inside the window and ends one byte past it: refused, nothing written."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    expect_refused(a, mw.rkey, mr.buf + WIN_OFF + WIN_LEN - 100, 101, mr, "WRITE past the window")


def type1_write_before_window(ctx):
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    expect_refused(a, mw.rkey, mr.buf + WIN_OFF - 1, 64, mr, "WRITE before the window")


def type1_read_only_window(ctx):
    """A window with REMOTE_READ only: READ works, WRITE is refused."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, e.IBV_ACCESS_REMOTE_READ))
    wc, got = post_read(a, mw.rkey, mr.buf + WIN_OFF, 512)
    expect_status(wc, e.IBV_WC_SUCCESS, "READ")
    expect(got == bytes([GUARD]) * 512, "READ returned other bytes")
    expect_refused(a, mw.rkey, mr.buf + WIN_OFF, 64, mr, "WRITE through a read-only window")


def type1_unbind(ctx):
    """A zero-length bind unbinds: the old key and the new one are both refused."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    bound = mw.rkey
    expect_bound(bind_type1(b, mw, mr, 0, 0, 0), "unbind")
    expect(mw.rkey != bound, "the unbind did not change the key")
    # Even the window's current key reaches nothing.
    expect_refused(a, mw.rkey, mr.buf + WIN_OFF, 64, mr, "WRITE by the key of the unbound window")


def type1_rebind_moves_window(ctx):
    """Binding again moves the window: the new key reaches the new range, the old key nothing."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    first = mw.rkey
    expect_bound(bind_type1(b, mw, mr, 0, 4096, REMOTE), "rebind")
    data = pattern(4096, 2)
    expect_status(post_write(a, mw.rkey, mr.buf, data), e.IBV_WC_SUCCESS, "WRITE by the new key")
    expect_window_data(mr, 0, data)
    wc = post_write(a, first, mr.buf + WIN_OFF, pattern(64, 3), wr_id=5)
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE by the old key")
    expect_window_data(mr, 0, data)


def type1_dealloc_closes(ctx):
    """Deallocating a bound window: its key is refused, and the MR can be deregistered."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    rkey = mw.rkey
    mw.close()
    expect_refused(a, rkey, mr.buf + WIN_OFF, 64, mr, "WRITE through a deallocated window")
    mr.close()


def dereg_mr_with_bound_window_busy(ctx):
    """An MR with a window bound cannot be deregistered (EBUSY); once the window is gone it can."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    try:
        mr.close()
        raise Failed("ibv_dereg_mr succeeded with a window bound")
    except PyverbsRDMAError as err:
        expect(err.error_code == errno.EBUSY, f"ibv_dereg_mr: errno {err.error_code}, want EBUSY")
    # The window still works.
    expect_status(post_write(a, mw.rkey, mr.buf + WIN_OFF, pattern(64, 4)), e.IBV_WC_SUCCESS, "WRITE after the refused dereg")
    mw.close()
    mr.close()


def type2_bind_write_local_inv(ctx):
    """A type 2 window bound by a work request; LOCAL_INV closes it."""
    a, b, mr, mw = type1_window(ctx, e.IBV_MW_TYPE_2)
    wc, rkey = bind_type2(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE)
    expect_bound(wc)
    data = pattern(5000, 5)
    expect_status(post_write(a, rkey, mr.buf + WIN_OFF, data), e.IBV_WC_SUCCESS, "WRITE")
    expect_window_data(mr, WIN_OFF, data)
    inv = SendWR(wr_id=9, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = rkey  # the invalidate_rkey of the union
    b.qp.post_send(inv)
    wc = b.completion("LOCAL_INV")
    expect_status(wc, e.IBV_WC_SUCCESS, "LOCAL_INV")
    expect(wc.opcode == e.IBV_WC_LOCAL_INV, f"LOCAL_INV: opcode {wc.opcode}")
    wc = post_write(a, rkey, mr.buf + WIN_OFF, pattern(64, 6), wr_id=5)
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE after LOCAL_INV")
    expect_window_data(mr, WIN_OFF, data)


def type2_remote_invalidate(ctx):
    """The peer's SEND WITH INVALIDATE closes the window; the receiver sees IBV_WC_WITH_INV."""
    a, b, mr, mw = type1_window(ctx, e.IBV_MW_TYPE_2)
    wc, rkey = bind_type2(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE)
    expect_bound(wc)
    buf = send_with_inv(a, b, rkey, 7)
    expect_status(a.completion("SEND_WITH_INV"), e.IBV_WC_SUCCESS, "SEND_WITH_INV")
    wc = b.completion("receive")
    expect_status(wc, e.IBV_WC_SUCCESS, "receive")
    expect(wc.wc_flags & e.IBV_WC_WITH_INV, f"receive: wc_flags {wc.wc_flags:#x} without WITH_INV")
    expect(wc.imm_data == rkey, f"receive: invalidated rkey {wc.imm_data:#x}, want {rkey:#x}")
    expect(buf.read(100, 0) == pattern(100, 7), "the SEND's data differs")
    expect_refused(a, rkey, mr.buf + WIN_OFF, 64, mr, "WRITE after remote invalidation")


def type2_zero_based(ctx):
    """A zero-based window is addressed from 0: offset 100 lands at WIN_OFF + 100."""
    a, b, mr, mw = type1_window(ctx, e.IBV_MW_TYPE_2)
    wc, rkey = bind_type2(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE | e.IBV_ACCESS_ZERO_BASED)
    expect_bound(wc)
    data = pattern(1000, 8)
    expect_status(post_write(a, rkey, 100, data), e.IBV_WC_SUCCESS, "WRITE at window offset 100")
    expect_window_data(mr, WIN_OFF + 100, data)
    wc = post_write(a, rkey, WIN_LEN - 10, pattern(11, 1), wr_id=5)
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE past a zero-based window")
    expect_window_data(mr, WIN_OFF + 100, data)


def type2_other_qp_refused(ctx):
    """A type 2 window works only through the QP that bound it, not another QP of its PD."""
    a, b, mr, mw = type1_window(ctx, e.IBV_MW_TYPE_2)
    wc, rkey = bind_type2(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE)
    expect_bound(wc)
    # A second QP in b's PD, with its own peer.
    other = Side(ctx)
    other.pd = b.pd
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=4, max_recv_sge=4)
    other.qp = QP(b.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=other.cq, rcq=other.cq, cap=cap))
    c, _ = connected(ctx, Side(ctx), other)
    expect_refused(c, rkey, mr.buf + WIN_OFF, 64, mr, "WRITE through another QP of the PD")
    # Through the QP that bound it, it works.
    expect_status(post_write(a, rkey, mr.buf + WIN_OFF, pattern(64, 2)), e.IBV_WC_SUCCESS, "WRITE through the binding QP")


def type2_wr_api(ctx):
    """ibv_wr_bind_mw, a WRITE through the window, then ibv_wr_local_inv."""
    a = Side(ctx)
    b = Side(ctx)
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=4, max_recv_sge=4)
    attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=b.cq, rcq=b.cq, cap=cap, pd=b.pd,
                        comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                        send_ops_flags=MW_OPS)
    b.qp = QPEx(ctx, attr)
    connected(ctx, a, b)
    mr = b.mr(SIZE, BINDABLE)
    KEEP.extend((a, b, mr))
    mw = new_mw(b.pd, e.IBV_MW_TYPE_2)
    rkey = (mw.rkey & ~0xff) | ((mw.rkey + 1) & 0xff)
    b.qp.wr_start()
    b.qp.wr_id, b.qp.wr_flags = 11, e.IBV_SEND_SIGNALED
    b.qp.wr_bind_mw(mw, rkey, MWBindInfo(mr, mr.buf + WIN_OFF, WIN_LEN, REMOTE))
    b.qp.wr_complete()
    expect_bound(b.completion("ibv_wr_bind_mw"), "ibv_wr_bind_mw")
    data = pattern(2000, 3)
    expect_status(post_write(a, rkey, mr.buf + WIN_OFF, data), e.IBV_WC_SUCCESS, "WRITE")
    expect_window_data(mr, WIN_OFF, data)
    b.qp.wr_start()
    b.qp.wr_id, b.qp.wr_flags = 12, e.IBV_SEND_SIGNALED
    b.qp.wr_local_inv(rkey)
    b.qp.wr_complete()
    wc = b.completion("ibv_wr_local_inv")
    expect_status(wc, e.IBV_WC_SUCCESS, "ibv_wr_local_inv")
    expect(wc.opcode == e.IBV_WC_LOCAL_INV, f"ibv_wr_local_inv: opcode {wc.opcode}")
    wc = post_write(a, rkey, mr.buf + WIN_OFF, pattern(64, 4), wr_id=5)
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "WRITE after ibv_wr_local_inv")
    expect_window_data(mr, WIN_OFF, data)


def bind_refused(mw_type, mr_access, off, length, access, other_pd=False):
    """A bind the rules refuse completes with MW_BIND_ERR (the QP then fails, as with any
    WR's error)."""
    def check(ctx):
        a, b = pair(ctx)
        mr = b.mr(SIZE, mr_access)
        KEEP.extend((a, b, mr))
        mw = new_mw(PD(ctx) if other_pd else b.pd, mw_type)
        if mw_type == e.IBV_MW_TYPE_1:
            wc = bind_type1(b, mw, mr, off, length, access)
            rkey = mw.rkey
        else:
            wc, rkey = bind_type2(b, mw, mr, off, length, access)
        expect_status(wc, e.IBV_WC_MW_BIND_ERR, "bind")
        expect_untouched(mr, "after a refused bind")
    return check


def type2_rebind_while_bound(ctx):
    """A bound type 2 window cannot be bound again before it is invalidated."""
    a, b, mr, mw = type1_window(ctx, e.IBV_MW_TYPE_2)
    wc, rkey = bind_type2(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE)
    expect_bound(wc)
    wr = SendWR(wr_id=8, opcode=e.IBV_WR_BIND_MW, send_flags=e.IBV_SEND_SIGNALED)
    wr.set_bind_wr(mw, MWBindInfo(mr, mr.buf, 4096, REMOTE))
    b.qp.post_send(wr)
    expect_status(b.completion("second bind"), e.IBV_WC_MW_BIND_ERR, "second bind")


def local_inv_of_type1_refused(ctx):
    """LOCAL_INV cannot close a type 1 window (a zero-length bind does): LOC_QP_OP_ERR."""
    a, b, mr, mw = type1_window(ctx)
    expect_bound(bind_type1(b, mw, mr, WIN_OFF, WIN_LEN, REMOTE))
    inv = SendWR(wr_id=9, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = mw.rkey
    b.qp.post_send(inv)
    expect_status(b.completion("LOCAL_INV"), e.IBV_WC_LOC_QP_OP_ERR, "LOCAL_INV of a type 1 window")


def type1_zero_based_refused(ctx):
    """ibv_bind_mw refuses a zero-based type 1 window (EINVAL, the QP untouched); posted as a
    BIND_MW work request all the same, the kernel fails it with MW_BIND_ERR."""
    a, b, mr, mw = type1_window(ctx)
    try:
        bind_type1(b, mw, mr, 0, 4096, REMOTE | e.IBV_ACCESS_ZERO_BASED)
        raise Failed("ibv_bind_mw took a zero-based type 1 bind")
    except PyverbsRDMAError as err:
        expect(err.error_code == errno.EINVAL, f"ibv_bind_mw: errno {err.error_code}, want EINVAL")
    wc, _ = bind_type2(b, mw, mr, 0, 4096, REMOTE | e.IBV_ACCESS_ZERO_BASED)
    expect_status(wc, e.IBV_WC_MW_BIND_ERR, "a zero-based BIND_MW of a type 1 window")
    expect_untouched(mr, "after a refused bind")


def local_inv_of_mr_refused(ctx):
    """LOCAL_INV of an MR's key (not a fast-registration MR, which only the kernel has):
    LOC_QP_OP_ERR, and the MR still works."""
    a, b = pair(ctx)
    mr = b.mr(SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    inv = SendWR(wr_id=9, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = mr.rkey
    b.qp.post_send(inv)
    expect_status(b.completion("LOCAL_INV"), e.IBV_WC_LOC_QP_OP_ERR, "LOCAL_INV of an MR")
    c, d = pair(ctx)
    mr2 = d.mr(SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    inv = SendWR(wr_id=9, opcode=e.IBV_WR_LOCAL_INV, send_flags=e.IBV_SEND_SIGNALED)
    inv.imm_data = mr2.rkey ^ 0x80  # same index, another key byte
    d.qp.post_send(inv)
    expect_status(d.completion("LOCAL_INV"), e.IBV_WC_LOC_QP_OP_ERR, "LOCAL_INV by a wrong key")


def send_with_inv_of_mr_refused(ctx):
    """A SEND WITH INVALIDATE naming the receiver's MR (no window, no fast registration): the
    data lands, then the sender gets REM_INV_REQ_ERR and the receive completes with it."""
    a, b = pair(ctx)
    target = b.mr(SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    send_with_inv(a, b, target.rkey, 8)
    expect_status(a.completion("SEND_WITH_INV"), e.IBV_WC_REM_INV_REQ_ERR, "SEND_WITH_INV of an MR")
    expect_status(b.completion("receive"), e.IBV_WC_REM_INV_REQ_ERR, "the receive")


def alloc_wrong_type(ctx):
    """A window of type 3 does not exist: EINVAL (not EOPNOTSUPP, which means no windows)."""
    pd = PD(ctx)
    try:
        MW(pd, 3)
        raise Failed("a window of type 3 was allocated")
    except PyverbsRDMAError as err:
        expect(err.error_code == errno.EINVAL, f"errno {err.error_code}, want EINVAL")


CHECKS = {
    "type1_bind_write_read": type1_bind_write_read,
    "type1_mr_rkey_refused": type1_mr_rkey_refused,
    "type1_write_past_window": type1_write_past_window,
    "type1_write_before_window": type1_write_before_window,
    "type1_read_only_window": type1_read_only_window,
    "type1_unbind": type1_unbind,
    "type1_rebind_moves_window": type1_rebind_moves_window,
    "type1_dealloc_closes": type1_dealloc_closes,
    "dereg_mr_with_bound_window_busy": dereg_mr_with_bound_window_busy,
    "type2_bind_write_local_inv": type2_bind_write_local_inv,
    "type2_remote_invalidate": type2_remote_invalidate,
    "type2_zero_based": type2_zero_based,
    "type2_other_qp_refused": type2_other_qp_refused,
    "type2_wr_api": type2_wr_api,
    "type2_rebind_while_bound": type2_rebind_while_bound,
    "local_inv_of_type1_refused": local_inv_of_type1_refused,
    "bind_beyond_mr_refused": bind_refused(e.IBV_MW_TYPE_2, BINDABLE, SIZE - 4096, 8192, REMOTE),
    "bind_mr_without_mw_bind_refused": bind_refused(e.IBV_MW_TYPE_1, e.IBV_ACCESS_LOCAL_WRITE, 0, 4096, REMOTE),
    "bind_window_of_other_pd_refused": bind_refused(e.IBV_MW_TYPE_2, BINDABLE, 0, 4096, REMOTE, other_pd=True),
    "bind_write_without_local_write_refused": bind_refused(e.IBV_MW_TYPE_2, e.IBV_ACCESS_MW_BIND, 0, 4096, REMOTE),
    "type1_zero_based_refused": type1_zero_based_refused,
    "local_inv_of_mr_refused": local_inv_of_mr_refused,
    "send_with_inv_of_mr_refused": send_with_inv_of_mr_refused,
    "alloc_wrong_type": alloc_wrong_type,
}

if __name__ == "__main__":
    run_checks({name: closing_windows(check) for name, check in CHECKS.items()}, sys.argv[1], sys.argv[2:])
