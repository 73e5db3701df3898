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
import os
import signal
import struct
import sys
import time

from pyverbs.mr import MW, MWBind, MWBindInfo
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e

from rdma_data import Failed, Side, connected, expect, expect_status, pair, pattern, run_checks, wait_event
from verbs import ipv4_gid_index
from ring_scribble import CONSUMER, PRODUCER, SLOT0, others_still_work, post_in_sqd, qp_state, scribble_pair, u32, uverbs_maps

TOP = (1 << 64) - 1
PR_SET_PDEATHSIG = 1


def read_remote_addr_wraps(ctx):
    """A 64 KiB READ at remote address 2^64 - 1: the range wraps, so the requester fails it
    as a remote access error (what any responder would answer) without putting a wrapped
    address on the wire; nothing panics."""
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


def write_lands(a, b, size, what):
    """An RDMA WRITE of `size` patterned bytes from `a` into a new MR of `b` succeeds and lands."""
    data = pattern(size, size & 0xFF)
    remote = b.mr(size)
    _src = a.start_data(e.IBV_WR_RDMA_WRITE, data, remote, wr_id=size)
    wc = a.completion(what)
    expect_status(wc, e.IBV_WC_SUCCESS, what)
    expect(remote.read(size, 0) == data, f"{what} did not land")


def uverbs_fds():
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/infiniband/uverbs"):
                fds.append(int(fd))
        except OSError:
            pass
    return fds


def try_map(fd, length, offset, flags=mmap.MAP_SHARED):
    """mmap(2) of the uverbs fd: the mapping, or the OSError's errno."""
    try:
        return mmap.mmap(fd, length, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
    except OSError as err:
        return err.errno


def mmap_wrong_offsets_and_after_destroy(ctx):
    """mmap(2) of a ring with a length past it, at an offset inside it, at offsets no ring has,
    and MAP_PRIVATE: each refused. After its CQ and QP are destroyed, a ring's offset maps no
    more, while a mapping made before stays readable and writable (its pages live until the
    munmap; kmemleak checks they are freed then)."""
    before = uverbs_maps()
    side = Side(ctx, cqe=256)
    new = {a: v for a, v in uverbs_maps().items() if a not in before}
    expect(len(new) == 3, f"{len(new)} new uverbs mappings for a CQ and a QP, want 3")
    size, offset = max(new.values())  # the CQ's ring, the largest
    fd = mine = None
    for candidate in uverbs_fds():
        got = try_map(candidate, size, offset)
        if not isinstance(got, int):
            fd, mine = candidate, got
            break
    expect(fd is not None, "no uverbs fd maps the CQ's ring again")
    page = mmap.PAGESIZE
    refused = [(size + page, offset, mmap.MAP_SHARED, "a length past the ring"),
               (size - page, offset + page, mmap.MAP_SHARED, "an offset inside the ring"),
               (page, offset + (1 << 30), mmap.MAP_SHARED, "an offset no ring has"),
               (page, (1 << 44), mmap.MAP_SHARED, "an offset far past any"),
               (size, offset, mmap.MAP_PRIVATE, "MAP_PRIVATE")]
    for length, off, flags, what in refused:
        got = try_map(fd, length, off, flags)
        if not isinstance(got, int):
            got.close()
            raise Failed(f"mmap with {what} succeeded")
    mine[0:4] = b"\x01\x02\x03\x04"
    side.qp.close()
    side.cq.close()
    got = try_map(fd, size, offset)
    if not isinstance(got, int):
        got.close()
        raise Failed("a destroyed CQ's ring can still be mapped")
    mine[0:size] = bytes([0x5A]) * size  # its pages are still the process's
    expect(mine[size - 1] == 0x5A, "the old mapping does not hold what was written")
    mine.close()
    others_still_work(ctx)


def fork_with_mapped_rings(ctx):
    """A child forked with the rings mapped writes garbage into every ring it inherited and
    sleeps; meanwhile the parent destroys those QPs and CQs; then the child exits. The parent's
    new QPs work (KASAN and kmemleak check the pages outlived the objects and were freed)."""
    a, b = pair(ctx)
    before = uverbs_maps()
    extra = Side(ctx, cqe=256)
    rings = {a_: v for a_, v in uverbs_maps().items() if a_ not in before}
    expect(len(rings) == 3, f"{len(rings)} new uverbs mappings, want 3")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            for start, (size, _) in rings.items():
                ctypes.memset(start, 0xA5, size)
            os.write(w, b"x")
            time.sleep(2)
        finally:
            os._exit(0)
    os.close(w)
    expect(os.read(r, 1) == b"x", "the child did not write its rings")
    extra.qp.close()
    extra.cq.close()
    _, status = os.waitpid(pid, 0)
    expect(os.WIFEXITED(status), f"the child died: status {status:#x}")
    # The pair made before the fork still moves data.
    write_lands(a, b, 4096, "the WRITE after the fork")
    others_still_work(ctx)


def dereg_mr_under_remote_traffic(ctx):
    """An MR is deregistered while a 4 MiB READ from it (4096 responses, sent in batches) and
    WRITEs of 64 KiB into it are under way: each completes as a success or an error, never a
    hang (a READ whose MR went away between two responses is NAKed, not left to be asked for
    forever); a WRITE posted after the dereg does not land."""
    a, b = pair(ctx)
    big = 4 << 20
    local = a.mr(big)
    target = b.mr(big)
    rkey, addr = target.rkey, target.buf
    a.start(e.IBV_WR_RDMA_READ, [SGE(local.buf, big, local.lkey)], rkey, addr, wr_id=70)
    for i in range(1, 8):
        a.start(e.IBV_WR_RDMA_WRITE, [SGE(local.buf, 64 << 10, local.lkey)], rkey, addr + (i << 16), wr_id=70 + i)
    time.sleep(0.2)
    target.close()
    statuses = [a.completion(f"wr {70 + i}", timeout=120).status for i in range(8)]
    allowed = {e.IBV_WC_SUCCESS, e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_WR_FLUSH_ERR}
    expect(set(statuses) <= allowed, f"completion statuses {statuses}")
    # A new pair, the same rkey: the MR is gone.
    c, _d = pair(ctx)
    stale = c.mr(64)
    c.start(e.IBV_WR_RDMA_WRITE, [SGE(stale.buf, 64, stale.lkey)], rkey, addr, wr_id=90)
    wc = c.completion("the WRITE to the deregistered MR")
    expect_status(wc, e.IBV_WC_REM_ACCESS_ERR, "the WRITE to the deregistered MR")
    print(f"statuses while deregistering: {statuses}")
    others_still_work(ctx)


def modify_qp_out_of_range(ctx):
    """modify_qp with each attribute out of its range (timeout, retry counts, RNR timer, MTU,
    port, P_Key index, ORD/IRD past the device's) fails with EINVAL, a GID index with no entry
    with ENODATA, and each leaves the QP as it was: it then connects and moves data."""
    from pyverbs.addr import AHAttr, GlobalRoute
    a, b = Side(ctx), Side(ctx)
    gid_index, gid = ipv4_gid_index(ctx)
    dev = ctx.query_device()
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num = 0, 1
    init.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    init_mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS

    def refused(attr, mask, what, errnos=(errno.EINVAL,)):
        try:
            a.qp.modify(attr, mask)
        except PyverbsRDMAError as err:
            expect(err.error_code in errnos, f"{what}: errno {err.error_code}, want one of {errnos}")
            return
        raise Failed(f"{what} was accepted")

    for name, value in (("port_num", 2), ("port_num", 0), ("pkey_index", 1), ("pkey_index", 0xFFFF)):
        bad = QPAttr(qp_state=e.IBV_QPS_INIT)
        bad.pkey_index, bad.port_num, bad.qp_access_flags = 0, 1, init.qp_access_flags
        setattr(bad, name, value)
        refused(bad, init_mask, f"INIT with {name} {value}")
    a.qp.modify(init, init_mask)

    def rtr(**changes):
        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        attr.path_mtu, attr.dest_qp_num, attr.rq_psn = e.IBV_MTU_1024, b.qp.qp_num, 0x10
        attr.max_dest_rd_atomic, attr.min_rnr_timer = 4, 1
        gr = GlobalRoute(dgid=gid, sgid_index=changes.pop("sgid_index", gid_index), hop_limit=64)
        attr.ah_attr = AHAttr(is_global=1, port_num=changes.pop("ah_port", 1), gr=gr)
        for k, v in changes.items():
            setattr(attr, k, v)
        return attr
    rtr_mask = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    for what, attr in (("path_mtu 0", rtr(path_mtu=0)), ("path_mtu 6", rtr(path_mtu=6)),
                       ("path_mtu 255", rtr(path_mtu=255)), ("min_rnr_timer 32", rtr(min_rnr_timer=32)),
                       ("max_dest_rd_atomic past max_qp_init_rd_atom",
                        rtr(max_dest_rd_atomic=min(dev.max_qp_init_rd_atom + 1, 255))),
                       ("an AV on port 2", rtr(ah_port=2))):
        refused(attr, rtr_mask, f"RTR with {what}")
    # The core looks the GID up before the driver sees the AV: no entry is ENODATA.
    refused(rtr(sgid_index=255), rtr_mask, "RTR with sgid_index 255", (errno.EINVAL, errno.ENODATA))
    a.qp.modify(rtr(), rtr_mask)

    def rts(**changes):
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.sq_psn, attr.max_rd_atomic = 14, 7, 7, 0x10, 4
        for k, v in changes.items():
            setattr(attr, k, v)
        return attr
    rts_mask = (e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN
                | e.IBV_QP_MAX_QP_RD_ATOMIC)
    for what, attr in (("timeout 32", rts(timeout=32)), ("timeout 255", rts(timeout=255)),
                       ("retry_cnt 8", rts(retry_cnt=8)), ("rnr_retry 8", rts(rnr_retry=8)),
                       ("max_rd_atomic past max_qp_rd_atom", rts(max_rd_atomic=min(dev.max_qp_rd_atom + 1, 255)))):
        refused(attr, rts_mask, f"RTS with {what}")
    a.qp.modify(rts(), rts_mask)
    b.connect(a.qp.qp_num, gid_index, gid)
    write_lands(a, b, 256, "the WRITE after the refusals")


def fork_chaser(start, step):
    """Forks a child (it shares the mapped rings) that runs `start()`, tells the parent it did,
    then runs `step(what start returned)` over and over for 60 s, dying with the parent (a
    harness timeout kills only the parent). Returns its pid once it started."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
            state = start()
            os.write(w, b"x")
            deadline = time.time() + 60
            while time.time() < deadline:
                step(state)
        finally:
            os._exit(0)
    os.close(w)
    if os.read(r, 1) != b"x":
        os.waitpid(pid, 0)
        raise Failed("the chasing child did not start")
    return pid


def producers_chased_during_flush(ctx):
    """A child process (sharing the mapped rings) keeps moving the SQ's and RQ's producer
    indices, each within a ring's worth of its consumer, while the parent moves the QP to ERR
    and posts receives there (each doorbell flushes). A flush reads the producer once: every
    call returns, and the flush completions are bounded (before, a flush re-read the producer
    on every step and a chasing thread kept it going, filling the CQ)."""
    a, b = scribble_pair(ctx)
    slots = 16                                      # Side's max_send_wr and max_recv_wr

    def chase(indices):
        for k in range(slots):
            for producer, consumer in indices:
                producer.value = (consumer.value + k) & 0xFFFFFFFF
    pid = fork_chaser(lambda: [(u32(ring + PRODUCER), u32(ring + CONSUMER)) for ring in (a.rings.rq, a.rings.sq)],
                      chase)
    try:
        probe = a.mr(4096)
        start = time.time()
        a.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
        doorbells, refused = 20, 0
        for i in range(doorbells):
            try:
                a.qp.post_recv(RecvWR(wr_id=1000 + i, num_sge=1, sg=[SGE(probe.buf, 64, probe.lkey)]))
            except PyverbsRDMAError:
                refused += 1    # the chase made the ring look full; the doorbell rang anyway
        elapsed = time.time() - start
        time.sleep(1)
        chasing = os.waitpid(pid, os.WNOHANG) == (0, 0)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    expect(chasing, "the chasing child died before the end")
    flushed, statuses = 0, set()
    while True:
        n, wcs = a.cq.poll(64)
        if not n:
            break
        flushed += n
        statuses |= {wc.status for wc in wcs}
    # The modify flushes at most a ring of each; each doorbell at most a ring of receives.
    bound = (doorbells + 1) * slots + slots
    print(f"ERR and {doorbells} receives ({refused} refused) under the chase took {elapsed:.2f} s; "
          f"{flushed} completions flushed (bound {bound})")
    expect(elapsed < 10, f"moving to ERR and posting {doorbells} receives took {elapsed:.1f} s")
    expect(0 < flushed <= bound, f"{flushed} completions flushed, want 1..{bound}")
    expect(statuses == {e.IBV_WC_WR_FLUSH_ERR}, f"completion statuses {statuses}")
    others_still_work(ctx)


# The send WQE layout of uapi/src/wqe.rs: a BIND_MW carries the window's current R_Key where a
# SEND WITH INVALIDATE carries the key to invalidate, and its new R_Key where RDMA carries rkey.
BIND_MW_RKEY, BIND_NEW_RKEY = 28, 40


def local_ops_under_producer_chase(ctx):
    """A child process (sharing the mapped SQ, 512 slots) fills every slot with a type-1 unbind
    that leaves the window's key as it is (so each may run again) and keeps the SQ's producer
    index 500 past its consumer, while the parent moves the QP from SQD back to RTS, which runs
    the requester. A run executes at most its budget of them (128) and takes nothing posted
    after it read the producer; the doorbell work item goes on, reading it anew each run:
    modify_qp returns at once and the chase's unbinds keep being executed (and completed: the
    QP signals all) past the first window (before, the run read the producer again after each
    pass and executed the chased unbinds for ever under the QP's lock, BH off: a soft lockup,
    which panics the debug guest). Once the chase stops, a WRITE's doorbell drains the rest:
    every completion a success, the WRITE posted in SQD first, the new one last and landed."""
    slots, ahead = 512, 500
    a, b = scribble_pair(ctx, send_wr=slots)
    mr = a.mr(4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
    mw = MW(a.pd, e.IBV_MW_TYPE_1)
    try:
        for wr_id in (0x51, 0x52):
            a.qp.bind_mw(mw, MWBind(MWBindInfo(mr, mr.buf, 0, 0), e.IBV_SEND_SIGNALED, wr_id=wr_id))
            wc = a.completion(f"unbind {wr_id:#x}")
            expect_status(wc, e.IBV_WC_SUCCESS, f"unbind {wr_id:#x}")
        sq = a.rings.sq
        stride = next((off for off in range(64, 4096, 64)
                       if ctypes.c_uint64.from_address(sq + SLOT0 + off).value == 0x52), None)
        expect(stride, "cannot find the second WQE in the SQ")
        unbind = bytearray(ctypes.string_at(sq + SLOT0 + stride, stride))
        struct.pack_into("<Q", unbind, 0, 0x5C)                # wr_id
        struct.pack_into("<I", unbind, BIND_MW_RKEY, mw.rkey)
        struct.pack_into("<I", unbind, BIND_NEW_RKEY, mw.rkey)
        crafted = bytes(unbind) * slots
        write_src = post_in_sqd(ctx, a, b.probe, pattern(64, 5), wr_id=0x53)
        consumer_before = u32(sq + CONSUMER).value

        def start():
            # Every slot, the WRITE's too (the kernel has its copy): they stay as written.
            ctypes.memmove(sq + SLOT0, crafted, len(crafted))
            indices = [u32(sq + PRODUCER), u32(sq + CONSUMER), 0]   # and what was posted
            indices[2] = (indices[1].value + ahead) & 0xFFFFFFFF
            indices[0].value = indices[2]
            return indices

        def chase(indices):
            producer, consumer, posted = indices
            for _ in range(1000):
                # Only forward: a producer index moved back below what the kernel took is a
                # broken ring (QP_FATAL), as a consumer read late would make it.
                want = (consumer.value + ahead) & 0xFFFFFFFF
                if 0 < (want - posted) & 0xFFFFFFFF < 0x80000000:
                    posted = indices[2] = want
                    producer.value = posted
        pid = fork_chaser(start, chase)
        completions = []

        def poll_for(seconds, until=lambda: False):
            deadline = time.time() + seconds
            while time.time() < deadline and not until():
                n, wcs = a.cq.poll(64)
                completions.extend((wc.wr_id, wc.status) for wc in wcs[:n])
                if not n:
                    time.sleep(0.01)
        try:
            begun = time.time()
            a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
            elapsed = time.time() - begun
            poll_for(3)     # the work item executes the chase's unbinds meanwhile
            chased = (u32(sq + CONSUMER).value - consumer_before) & 0xFFFFFFFF
            chasing = os.waitpid(pid, os.WNOHANG) == (0, 0)
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        expect(chasing, "the chasing child died before the end")
        # What the child posted after the last run that used up its budget waits for a
        # doorbell, as any post does: this WRITE's.
        _src = a.start_data(e.IBV_WR_RDMA_WRITE, pattern(64, 6), b.probe, wr_id=0x54)
        def drained():
            return u32(sq + CONSUMER).value == u32(sq + PRODUCER).value

        poll_for(60, lambda: drained() and completions and completions[-1][0] == 0x54)
        poll_for(1)
        failed = [(wr_id, status) for wr_id, status in completions if status != e.IBV_WC_SUCCESS]
        print(f"SQD -> RTS under the chase returned in {elapsed:.2f} s; {chased} WQEs executed in 3 s; "
              f"{len(completions)} completions in all")
        expect(elapsed < 10, f"modify_qp to RTS took {elapsed:.1f} s under the chase")
        expect(chased > ahead, f"only {chased} WQEs executed under the chase: the work item did not follow it")
        expect(drained(), f"the SQ did not drain after the chase: {a.driver_state()}")
        expect(qp_state(a) == e.IBV_QPS_RTS, f"the QP is in state {qp_state(a)}, want RTS")
        expect(not failed, f"failed completions (wr_id, status): {failed[:4]}")
        expect(completions and completions[0][0] == 0x53, "the WRITE posted in SQD did not complete first")
        expect(completions[-1][0] == 0x54, "the WRITE after the chase did not complete last")
        expect(len(completions) == (u32(sq + CONSUMER).value - consumer_before) & 0xFFFFFFFF,
               f"{len(completions)} completions for the WQEs executed")
        expect(b.probe.read(64, 0) == pattern(64, 6), "the WRITE after the chase did not land")
        del write_src
    finally:
        mw.close()
    others_still_work(ctx)

def user_wr_lists_refused(ctx):
    """A process that builds a WR list itself and hands it to uverbs (ibv_cmd_post_send /
    ibv_cmd_post_recv, bypassing the provider, which only rings empty doorbells) is refused with
    EOPNOTSUPP: WR lists are for kernel consumers, whose addresses are kernel addresses. The WR
    here asks for 256 inline bytes at a kernel address, which must never be copied."""
    v = Verbs(ctx.name)
    lib = v.lib
    for fn, res, args in (("ibv_create_cq", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                              ctypes.c_void_p, ctypes.c_int]),
                          ("ibv_create_qp", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p]),
                          ("ibv_destroy_qp", ctypes.c_int, [ctypes.c_void_p]),
                          ("ibv_destroy_cq", ctypes.c_int, [ctypes.c_void_p]),
                          ("ibv_cmd_post_send", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
                          ("ibv_cmd_post_recv", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])):
        getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args
    cq = lib.ibv_create_cq(v.ctx, 16, None, None, 0)
    expect(cq, "create_cq failed")
    # struct ibv_qp_init_attr: qp_context, send_cq, recv_cq, srq, cap (5 x u32), qp_type, sq_sig_all
    attr = (ctypes.c_char * 64)()
    ctypes.c_void_p.from_buffer(attr, 8).value = cq
    ctypes.c_void_p.from_buffer(attr, 16).value = cq
    for i, n in enumerate((4, 4, 1, 1, 256)):
        ctypes.c_uint32.from_buffer(attr, 32 + 4 * i).value = n
    ctypes.c_int.from_buffer(attr, 52).value = e.IBV_QPT_RC
    qp = lib.ibv_create_qp(v.pd, attr)
    expect(qp, "create_qp failed")
    try:
        # One SGE at the start of the kernel's direct map, inline.
        sge = (ctypes.c_uint64 * 2)(0xffff888000000000, 256 | (0 << 32))
        wr = (ctypes.c_char * 128)()      # struct ibv_send_wr
        ctypes.c_void_p.from_buffer(wr, 16).value = ctypes.addressof(sge)
        ctypes.c_int.from_buffer(wr, 24).value = 1                      # num_sge
        ctypes.c_int.from_buffer(wr, 28).value = e.IBV_WR_SEND
        ctypes.c_uint.from_buffer(wr, 32).value = e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED
        bad = ctypes.c_void_p()
        ret = lib.ibv_cmd_post_send(qp, wr, ctypes.byref(bad))
        expect(ret == errno.EOPNOTSUPP, f"a process's own send WR list: {ret}, want EOPNOTSUPP")
        rwr = (ctypes.c_char * 32)()      # struct ibv_recv_wr
        ctypes.c_void_p.from_buffer(rwr, 16).value = ctypes.addressof(sge)
        ctypes.c_int.from_buffer(rwr, 24).value = 1
        ret = lib.ibv_cmd_post_recv(qp, rwr, ctypes.byref(bad))
        expect(ret == errno.EOPNOTSUPP, f"a process's own receive WR list: {ret}, want EOPNOTSUPP")
    finally:
        lib.ibv_destroy_qp(qp)
        lib.ibv_destroy_cq(cq)


CHECKS = {f.__name__: f for f in [user_wr_lists_refused, read_remote_addr_wraps, mr_iova_wraps_refused,
                                   sq_producer_backwards, reset_stops_the_timer, full_cq_fails_the_qp,
                                   recv_after_error_is_flushed, qp_numbers_not_sequential, mr_churn,
                                   mmap_wrong_offsets_and_after_destroy, fork_with_mapped_rings,
                                   dereg_mr_under_remote_traffic, modify_qp_out_of_range,
                                   producers_chased_during_flush, local_ops_under_producer_chase]}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
