"""Exhaustion: objects up to the device's limits, key churn, what a process's QPs cost its
memory cgroup, and async events that cannot flood (libibverbs through ctypes for the hot
loops; pyverbs for the rest).

Each check ends with the device still working for a fresh pair of QPs; kmemleak and dmesg are
checked by the suite after the script.

Usage: exhaust.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
Knob: RXE_RS_EXHAUST_CYCLES, the reg/dereg cycles of mr_churn_bounded (default 2000).
"""
import ctypes
import errno
import os
import select
import subprocess
import sys
import time

from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
import pyverbs.enums as e

from hostile import Verbs
from rdma_data import Failed, Side, connected, expect, pattern, run_checks
from ring_scribble import others_still_work

CGROUP = "/sys/fs/cgroup/rxe_rs_exhaust"


def verbs(ctx):
    """A second context and PD through libibverbs directly (ctypes: a call costs
    microseconds, pyverbs' objects tens of them)."""
    v = Verbs(ctx.name)
    lib = v.lib
    for fn, res, args in (("ibv_dealloc_pd", ctypes.c_int, [ctypes.c_void_p]),
                          ("ibv_close_device", ctypes.c_int, [ctypes.c_void_p]),
                          ("ibv_reg_mr", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])):
        getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args
    return v


def close(v):
    """Closes what verbs() opened (its async event file with it)."""
    expect(v.lib.ibv_dealloc_pd(v.pd) == 0, "dealloc of the ctypes PD failed")
    expect(v.lib.ibv_close_device(v.ctx) == 0, "ibv_close_device failed")


def lkey(mr):
    # struct ibv_mr { context*, pd*, addr*, size_t length, u32 handle, u32 lkey, u32 rkey }
    return ctypes.c_uint32.from_address(mr + 36).value


def until_refused(make, limit):
    """Calls make() until it returns NULL (at most limit + 1 times): (objects, errno)."""
    made = []
    for _ in range(limit + 1):
        ctypes.set_errno(0)
        obj = make()
        if not obj:
            return made, ctypes.get_errno()
        made.append(obj)
    return made, 0


def kernel_owned(ctx, what):
    """How many of the device's objects of kind `what` (pd, mr, cq) the kernel holds: ib_mad's
    PD, DMA MR and CQ count against the device's limits too (as with rdma_rxe)."""
    out = subprocess.run(["rdma", "resource", "show", what], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if f"dev {ctx.name} " in line and "comm [" in line)


def pds_to_the_limit(ctx):
    """alloc_pd up to max_pd: the next one fails with ENOMEM; all freed, PDs can be had again."""
    v = verbs(ctx)
    limit = ctx.query_device().max_pd
    # Counted before: `rdma resource show` of 65536 PDs takes minutes under TCG.
    kernels = kernel_owned(ctx, "pd")
    start = time.time()
    pds, err = until_refused(lambda: v.lib.ibv_alloc_pd(v.ctx), limit)
    # Verbs() holds one PD of its own, the kernel its own.
    held = len(pds) + 1 + kernels
    for pd in pds:
        expect(v.lib.ibv_dealloc_pd(pd) == 0, "dealloc_pd failed")
    expect(held == limit, f"{held} PDs (the kernel's included) before a refusal, max_pd is {limit}")
    expect(err == errno.ENOMEM, f"the PD past max_pd failed with errno {err}, want ENOMEM")
    again, _ = until_refused(lambda: v.lib.ibv_alloc_pd(v.ctx), 15)
    expect(len(again) == 16, "PDs cannot be had again after freeing them")
    for pd in again:
        v.lib.ibv_dealloc_pd(pd)
    print(f"{limit} PDs in {time.time() - start:.0f} s")
    close(v)
    others_still_work(ctx)


def mrs_to_the_limit(ctx):
    """reg_mr up to max_mr (one page registered again and again): the next one fails with
    ENOMEM; keys are distinct; all freed, MRs can be had again."""
    v = verbs(ctx)
    limit = ctx.query_device().max_mr
    # Each kernel PD has a DMA MR for its local_dma_lkey (the resource tracker does not list
    # it). Counted before, as in pds_to_the_limit.
    kernels = kernel_owned(ctx, "mr") + kernel_owned(ctx, "pd")
    start = time.time()
    mrs, err = until_refused(lambda: v.lib.ibv_reg_mr(v.pd, v.addr, 4096, e.IBV_ACCESS_LOCAL_WRITE), limit)
    held = len(mrs) + kernels
    expect(held == limit, f"{held} MRs (the kernel's included) before a refusal, max_mr is {limit}")
    expect(err == errno.ENOMEM, f"the MR past max_mr failed with errno {err}, want ENOMEM")
    expect(len({lkey(mr) for mr in mrs}) == len(mrs), "live MRs share keys")
    for mr in mrs:
        expect(v.lib.ibv_dereg_mr(mr) == 0, "dereg_mr failed")
    print(f"{limit} MRs in {time.time() - start:.0f} s")
    close(v)
    others_still_work(ctx)


class QpCap(ctypes.Structure):
    _fields_ = [("max_send_wr", ctypes.c_uint32), ("max_recv_wr", ctypes.c_uint32), ("max_send_sge", ctypes.c_uint32),
                ("max_recv_sge", ctypes.c_uint32), ("max_inline_data", ctypes.c_uint32)]


class QpInitAttr(ctypes.Structure):
    """struct ibv_qp_init_attr."""
    _fields_ = [("qp_context", ctypes.c_void_p), ("send_cq", ctypes.c_void_p), ("recv_cq", ctypes.c_void_p),
                ("srq", ctypes.c_void_p), ("cap", QpCap), ("qp_type", ctypes.c_int), ("sq_sig_all", ctypes.c_int)]


def qps_to_the_limit(ctx):
    """create_qp (one send and one receive WR) up to max_qp: the next one fails with ENOMEM;
    QP numbers are distinct; all destroyed, QPs can be had again. Each QP maps two rings, so
    vm.max_map_count is raised for the run."""
    v = verbs(ctx)
    lib = v.lib
    for fn, res, args in (("ibv_create_cq", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                              ctypes.c_void_p, ctypes.c_int]),
                          ("ibv_destroy_cq", ctypes.c_int, [ctypes.c_void_p]),
                          ("ibv_create_qp", ctypes.c_void_p, [ctypes.c_void_p, ctypes.POINTER(QpInitAttr)]),
                          ("ibv_destroy_qp", ctypes.c_int, [ctypes.c_void_p])):
        getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args
    limit = ctx.query_device().max_qp
    with open("/proc/sys/vm/max_map_count") as f:
        map_count = f.read().strip()
    with open("/proc/sys/vm/max_map_count", "w") as f:
        f.write(str(4 * limit + 65536))
    cq = lib.ibv_create_cq(v.ctx, 16, None, None, 0)
    expect(cq, "create_cq failed")
    attr = QpInitAttr(send_cq=cq, recv_cq=cq, cap=QpCap(1, 1, 1, 1, 0), qp_type=e.IBV_QPT_RC)
    qps, again, live, destroy_failed = [], [], [], 0
    start = time.time()
    try:
        qps, err = until_refused(lambda: lib.ibv_create_qp(v.pd, ctypes.byref(attr)), limit)
        live = list(qps)
        made = time.time() - start
        # struct ibv_qp { context*, qp_context*, pd*, send_cq*, recv_cq*, srq*, u32 handle, u32 qp_num }
        qpns = {ctypes.c_uint32.from_address(qp + 52).value for qp in qps}
        while live:
            destroy_failed += lib.ibv_destroy_qp(live.pop()) != 0
        destroyed = time.time() - start - made
        again, _ = until_refused(lambda: lib.ibv_create_qp(v.pd, ctypes.byref(attr)), 15)
    finally:
        # Nothing of this check may outlive it, whatever failed.
        for qp in live + again:
            lib.ibv_destroy_qp(qp)
        lib.ibv_destroy_cq(cq)
        close(v)
        with open("/proc/sys/vm/max_map_count", "w") as f:
            f.write(map_count)
    print(f"{len(qps)} QPs in {made:.0f} s (max_qp {limit}); all destroyed in {destroyed:.0f} s")
    # No other QP of this device is alive now (the earlier checks' are gone).
    expect(len(qps) == limit, f"{len(qps)} QPs before a refusal, max_qp is {limit}")
    expect(err == errno.ENOMEM, f"the QP past max_qp failed with errno {err}, want ENOMEM")
    expect(len(qpns) == len(qps), "live QPs share QP numbers")
    expect(destroy_failed == 0, f"{destroy_failed} destroy_qp calls failed")
    expect(len(again) == 16, "QPs cannot be had again after destroying them")
    others_still_work(ctx)


SLAB = "/sys/kernel/slab"


def live_slab_objects():
    """Live objects of each slab cache, and the bytes each takes: {cache: (objects, size)}.

    The debug kernel's KASAN keeps freed objects in its quarantine, still counted as in use
    (in /proc/meminfo's Slab too), up to 1/32 of RAM: a churn of 100000 registrations filled it
    by 9.7 MiB, which looked like a leak. Shrinking a cache empties its part of the quarantine
    (kmem_cache_shrink removes the cache's objects from it), so every cache is shrunk first,
    after a moment for the RCU callbacks that free objects (kmemleak's records among them)."""
    time.sleep(1)
    caches = sorted(os.listdir(SLAB))
    for c in caches:
        try:
            with open(f"{SLAB}/{c}/shrink", "w") as f:
                f.write("1")
        except OSError:
            pass
    out = {}
    for c in caches:
        try:
            with open(f"{SLAB}/{c}/objects") as f:
                objects = int(f.read().split()[0])
            with open(f"{SLAB}/{c}/object_size") as f:
                size = int(f.read())
        except (OSError, ValueError):
            continue
        out[c] = (objects, size)
    # (Nothing to compare would pass the check on nothing.)
    if not out:
        raise Failed(f"no slab cache's objects readable under {SLAB}")
    return out


def vmalloc_used_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("VmallocUsed:"):
                return int(line.split()[1])
    raise Failed("no VmallocUsed in /proc/meminfo")


def mr_churn_bounded(ctx):
    """RXE_RS_EXHAUST_CYCLES reg/dereg cycles, 64 MRs live at a time: keys stay distinct
    among the live ones, and no slab cache gains live objects (nor vmalloc space) with the
    number of cycles: a leak of one object per cycle grows some cache by as many objects as
    cycles (and kmemleak's own records with it)."""
    cycles = int(os.environ.get("RXE_RS_EXHAUST_CYCLES", "2000"))
    v = verbs(ctx)
    batch = 64

    def rounds(n):
        for _ in range(n):
            mrs = [v.lib.ibv_reg_mr(v.pd, v.addr, 4096, e.IBV_ACCESS_LOCAL_WRITE) for _ in range(batch)]
            expect(all(mrs), f"reg_mr failed (errno {ctypes.get_errno()})")
            expect(len({lkey(mr) for mr in mrs}) == batch, "live MRs share keys")
            for mr in mrs:
                expect(v.lib.ibv_dereg_mr(mr) == 0, "dereg_mr failed")

    rounds(16)  # warm: the key table's chunks, slab caches
    before, vmalloc_before = live_slab_objects(), vmalloc_used_kib()
    start = time.time()
    n = max(cycles // batch, 1)
    rounds(n)
    took = time.time() - start
    after, vmalloc_grown = live_slab_objects(), vmalloc_used_kib() - vmalloc_before
    done = n * batch
    grown = {c: after[c][0] - before.get(c, (0, 0))[0] for c in after}
    grown_kib = sum(max(d, 0) * after[c][1] for c, d in grown.items()) // 1024
    top = sorted(grown.items(), key=lambda cd: -cd[1])[:3]
    print(f"{done} reg/dereg cycles in {took:.0f} s; live slab objects grew {grown_kib} KiB "
          f"(most: {', '.join(f'{c} {d:+d}' for c, d in top)}), vmalloc {vmalloc_grown:+d} KiB")
    worst, gained = top[0]
    # Background activity moves a cache by tens or hundreds of objects, whatever the cycles.
    expect(gained < max(done // 8, 512), f"{worst} gained {gained} live objects over {done} cycles")
    expect(grown_kib < 2048, f"live slab objects grew {grown_kib} KiB over {done} cycles")
    expect(vmalloc_grown < 2048, f"vmalloc grew {vmalloc_grown} KiB over {done} cycles")
    close(v)
    others_still_work(ctx)


def cgroup_file(name, value=None):
    path = f"{CGROUP}/{name}"
    if value is None:
        with open(path) as f:
            return f.read()
    with open(path, "w") as f:
        f.write(str(value))


def charged_kib():
    return int(cgroup_file("memory.current")) // 1024


def qp_memory_charged(ctx):
    """256 QPs of 1024 send and receive WRs: their kernel memory (rings, the kernel's WQE
    copies) is charged to the process's memory cgroup, at least the rings' size, and given
    back when they are destroyed."""
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        os.system("mount -t cgroup2 none /sys/fs/cgroup")
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+memory")
    os.makedirs(CGROUP, exist_ok=True)
    pd, cq = PD(ctx), CQ(ctx, 64)
    cap = QPCap(max_send_wr=1024, max_recv_wr=1024, max_send_sge=4, max_recv_sge=4)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
    try:
        cgroup_file("cgroup.procs", os.getpid())
        base = charged_kib()
        qps = [QP(pd, init) for _ in range(256)]
        grown = charged_kib() - base
        for qp in qps:
            qp.close()
        left = charged_kib() - base
    finally:
        with open("/sys/fs/cgroup/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
    os.rmdir(CGROUP)
    # A send slot holds at least 64 bytes, a receive slot 32: 96 KiB of rings per QP.
    print(f"256 QPs charged {grown} KiB to the cgroup ({grown // 256} KiB each); {left} KiB after destroying them")
    expect(grown >= 256 * 96, f"256 QPs charged only {grown} KiB")
    expect(left < grown // 8, f"{left} of {grown} KiB stayed charged after the QPs were destroyed")
    others_still_work(ctx)


def async_event_fd():
    """The async event file of the pyverbs context (libibverbs reads it in
    ibv_get_async_event): opened first, so the lowest-numbered one (the checks close theirs)."""
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}") and "infinibandevent" in os.readlink(f"/proc/self/fd/{fd}")]
    expect(fds, "no async event file")
    return min(fds)


def drain_events(ctx, fd, quiet=3.0):
    """Every async event until none comes for `quiet` s, acknowledged: {event type: count}.
    poll(2) first, so that pyverbs' get_async_event (which blocks holding the GIL) never waits."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    counts = {}
    while poller.poll(int(quiet * 1000)):
        event = ctx.get_async_event()
        counts[event.event_type] = counts.get(event.event_type, 0) + 1
        event.ack()
    return counts


def async_events_bounded(ctx):
    """32 QPs whose CQ (room for 1) overflows with 4 signaled WRITEs each, nobody polling:
    one IBV_EVENT_CQ_ERR per CQ, not one per lost completion, and at most one QP event each;
    no event for the peers; then the device works."""
    fd = async_event_fd()
    drain_events(ctx, fd, quiet=0.5)
    sides = []
    for _ in range(32):
        a, b = Side(ctx, cqe=1), Side(ctx)
        connected(ctx, a, b)
        remote = b.mr(64)
        keep = [a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, n), remote, wr_id=n) for n in range(4)]
        sides.append((a, b, remote, keep))
    counts = drain_events(ctx, fd)
    print(f"async events after 32 CQ overflows: {counts}")
    expect(counts.get(e.IBV_EVENT_CQ_ERR, 0) == 32, f"{counts.get(e.IBV_EVENT_CQ_ERR, 0)} CQ_ERR events, want 32")
    others = {k: v for k, v in counts.items() if k != e.IBV_EVENT_CQ_ERR}
    expect(all(v <= 32 for v in others.values()), f"more than one QP event per QP: {others}")
    del sides
    others_still_work(ctx)


CHECKS = {f.__name__: f for f in [pds_to_the_limit, qps_to_the_limit, mrs_to_the_limit, mr_churn_bounded, qp_memory_charged,
                                   async_events_bounded]}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
