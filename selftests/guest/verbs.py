"""Small pyverbs checks run by the selftests, in one process on one context: a line
"running NAME" before each and its verdict after, "ok NAME" or "not ok NAME: why" (a Python
start with pyverbs costs 20-30 s of a loaded TCG guest, and the checks are many).

Usage: verbs.py DEVICE CHECK...  (see CHECKS below)
"""
import errno
import sys
import time
import traceback

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


def ipv4_gid_index(ctx):
    for i in range(16):
        try:
            gid = ctx.query_gid(1, i)
        except PyverbsRDMAError:
            continue
        if str(gid).startswith("0000:0000:0000:0000:0000:ffff:"):
            return i, gid
    sys.exit("no IPv4 GID")


def new_rc_qp(ctx, pd, cq, **caps):
    from pyverbs.qp import QP, QPCap, QPInitAttr
    cap = QPCap(**{"max_send_wr": 8, "max_recv_wr": 8, "max_send_sge": 2, "max_recv_sge": 2, **caps})
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))


def qp_types_unsupported(ctx):
    from pyverbs.qp import QP, QPCap, QPInitAttr
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    # (UC is offered: guest/uc.py.)
    for qpt in (e.IBV_QPT_RAW_PACKET,):
        expect_errno(errno.EOPNOTSUPP, QP, pd, QPInitAttr(qp_type=qpt, scq=cq, rcq=cq, cap=cap))


def qp_caps(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = new_rc_qp(ctx, pd, cq, max_send_wr=10, max_recv_wr=3, max_inline_data=64)
    attr, init = qp.query(e.IBV_QP_CAP)
    if init.cap.max_send_wr < 10 or init.cap.max_recv_wr < 3 or init.cap.max_inline_data < 64:
        sys.exit(f"caps {init.cap.max_send_wr} {init.cap.max_recv_wr} {init.cap.max_inline_data}")
    if qp.qp_num < 16 or qp.qp_state != e.IBV_QPS_RESET:
        sys.exit(f"qpn {qp.qp_num} state {qp.qp_state}")
    other = new_rc_qp(ctx, pd, cq)
    if other.qp_num == qp.qp_num:
        sys.exit("two QPs share a number")
    dev = ctx.query_device()
    expect_errno(errno.EINVAL, lambda: new_rc_qp(ctx, pd, cq, max_send_wr=dev.max_qp_wr + 1))
    expect_errno(errno.EINVAL, lambda: new_rc_qp(ctx, pd, cq, max_send_sge=dev.max_sge + 1))


def qp_state_machine(ctx):
    from pyverbs.qp import QPAttr
    from pyverbs.addr import AHAttr, GlobalRoute
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = new_rc_qp(ctx, pd, cq)
    peer = new_rc_qp(ctx, pd, cq)
    gid_index, gid = ipv4_gid_index(ctx)

    # RESET -> RTR is not a legal transition.
    bad = QPAttr(qp_state=e.IBV_QPS_RTR)
    expect_errno(errno.EINVAL, qp.modify, bad, e.IBV_QP_STATE)

    attr = QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.pkey_index = 0
    attr.port_num = 1
    attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)

    # INIT -> RTR without its required attributes.
    rtr = QPAttr(qp_state=e.IBV_QPS_RTR)
    expect_errno(errno.EINVAL, qp.modify, rtr, e.IBV_QP_STATE)

    rtr.path_mtu = e.IBV_MTU_1024
    rtr.dest_qp_num = peer.qp_num
    rtr.rq_psn = 0x123456
    rtr.max_dest_rd_atomic = 16
    rtr.min_rnr_timer = 12
    rtr.ah_attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=gid, sgid_index=gid_index, hop_limit=64))
    mask_rtr = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    qp.modify(rtr, mask_rtr)

    rts = QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.timeout = 14
    rts.retry_cnt = 8  # out of range
    rts.rnr_retry = 7
    rts.sq_psn = 0xabcdef
    rts.max_rd_atomic = 16
    mask_rts = (e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN
                | e.IBV_QP_MAX_QP_RD_ATOMIC)
    expect_errno(errno.EINVAL, qp.modify, rts, mask_rts)
    rts.retry_cnt = 7
    qp.modify(rts, mask_rts)

    got, _ = qp.query(e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN | e.IBV_QP_DEST_QPN | e.IBV_QP_AV
                      | e.IBV_QP_PATH_MTU | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT)
    want = {"qp_state": e.IBV_QPS_RTS, "sq_psn": 0xabcdef, "rq_psn": 0x123456, "dest_qp_num": peer.qp_num,
            "path_mtu": e.IBV_MTU_1024, "timeout": 14, "retry_cnt": 7}
    for name, value in want.items():
        if getattr(got, name) != value:
            sys.exit(f"{name}: got {getattr(got, name)}, want {value}")
    if str(got.ah_attr.dgid) != str(gid) or got.ah_attr.sgid_index != gid_index:
        sys.exit(f"dgid {got.ah_attr.dgid} / {got.ah_attr.sgid_index} != {gid} / {gid_index}")

    # Anything -> ERR -> RESET.
    qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    if qp.query(e.IBV_QP_STATE)[0].qp_state != e.IBV_QPS_RESET:
        sys.exit("not back in RESET")


def post_send_states(ctx):
    """Sends before RTS fail with EINVAL, and so do atomics the provider refuses
    (misaligned, inline, no room for the result); in ERR the others flush."""
    from pyverbs.qp import QPAttr
    from pyverbs.wr import SGE, SendWR
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = new_rc_qp(ctx, pd, cq)
    mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    wr = SendWR(wr_id=77, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)])
    expect_errno(errno.EINVAL, qp.post_send, wr)
    attr = QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.pkey_index, attr.port_num, attr.qp_access_flags = 0, 1, 0
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    expect_errno(errno.EINVAL, qp.post_send, wr)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)

    def atomic(wr_id, remote_addr, length=8, flags=e.IBV_SEND_SIGNALED):
        w = SendWR(wr_id=wr_id, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                   sg=[SGE(mr.buf, length, mr.lkey)], send_flags=flags)
        w.set_wr_atomic(rkey=0x1234, addr=remote_addr, compare_add=1, swap=0)
        return w
    expect_errno(errno.EINVAL, qp.post_send, atomic(78, 0x1004))
    expect_errno(errno.EINVAL, qp.post_send, atomic(78, 0x1000, length=4))
    expect_errno(errno.EINVAL, qp.post_send, atomic(78, 0x1000, flags=e.IBV_SEND_INLINE))
    qp.post_send(atomic(78, 0x1000))
    qp.post_send(wr)
    got = []
    for _ in range(100):
        n, wcs = cq.poll(num_entries=4)
        got += [(wc.wr_id, wc.status) for wc in wcs[:n]]
        if len(got) >= 2:
            break
        time.sleep(0.05)
    if got != [(78, e.IBV_WC_WR_FLUSH_ERR), (77, e.IBV_WC_WR_FLUSH_ERR)]:
        sys.exit(f"expected the atomic and the SEND flushed in order, got {got}")


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


def possible_cpus():
    """CPUs the kernel may ever bring online (/sys/devices/system/cpu/possible, e.g. "0-1")."""
    with open("/sys/devices/system/cpu/possible") as f:
        n = 0
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            n += int(hi or lo) - int(lo) + 1
        return n


def comp_vectors_per_cpu(ctx):
    """One completion vector per possible CPU, as rdma_rxe: a CQ on the last one works, one past
    it is refused (EINVAL, by the RDMA core)."""
    n = possible_cpus()
    if ctx.num_comp_vectors != n:
        sys.exit(f"num_comp_vectors {ctx.num_comp_vectors}, want {n} (one per possible CPU)")
    CQ(ctx, 16, None, None, n - 1).close()
    expect_errno(errno.EINVAL, CQ, ctx, 16, None, None, n)


def qp_ex_create_flags_none(ctx):
    """ibv_create_qp_ex with IBV_QP_INIT_ATTR_CREATE_FLAGS and no flag set creates the QP; a
    flag we do not offer is refused (EOPNOTSUPP)."""
    from pyverbs.qp import QP, QPCap, QPInitAttrEx
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, pd=pd,
                        comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS, create_flags=0)
    QP(ctx, attr).close()
    attr.create_flags = e.IBV_QP_CREATE_SCATTER_FCS
    expect_errno(errno.EOPNOTSUPP, QP, ctx, attr)


def many_cqs(ctx):
    cqs = [CQ(ctx, 64) for _ in range(64)]
    for cq in cqs:
        cq.close()


def cq_ex_polls_a_session(ctx):
    """An extended CQ: the fields it can read are accepted, others are EOPNOTSUPP; a poll
    session reads completions one at a time, ENOENT past the last, and what it read is gone;
    completion timestamps count CLOCK_MONOTONIC nanoseconds (hca_core_clock 1 GHz), the clock
    ibv_query_rt_values_ex reads."""
    from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
    from pyverbs.qp import QPAttr
    from pyverbs.wr import RecvWR, SGE
    for flags in [e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, e.IBV_WC_EX_WITH_CVLAN,
                  e.IBV_WC_EX_WITH_FLOW_TAG]:
        expect_errno(errno.EOPNOTSUPP, CQEX, ctx, CqInitAttrEx(cqe=8, wc_flags=flags))
    attr = CqInitAttrEx(cqe=8, wc_flags=0, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS,
                        flags=e.IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)
    expect_errno(errno.EOPNOTSUPP, CQEX, ctx, attr)
    attr.flags = e.IBV_CREATE_CQ_ATTR_SINGLE_THREADED
    CQEX(ctx, attr).close()
    dev = ctx.query_device_ex()
    if dev.hca_core_clock != 1000000 or dev.completion_timestamp_mask != 2**64 - 1:
        sys.exit(f"hca_core_clock {dev.hca_core_clock} kHz, mask {dev.completion_timestamp_mask:#x}")
    cq = CQEX(ctx, CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_STANDARD_FLAGS
                                | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP))
    if cq.start_poll(PollCqAttr()) != errno.ENOENT:
        sys.exit("a new extended CQ had a completion")
    pd = PD(ctx)
    qp = new_rc_qp(ctx, pd, cq)
    mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num, init.qp_access_flags = 0, 1, 0
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for wr_id in (11, 12, 13):
        qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))
    # The flushes arrive together or one by one: a session reads what is there.
    seen, stamps = [], []
    for _ in range(100):
        if cq.start_poll(PollCqAttr()) == 0:
            while True:
                if cq.status != e.IBV_WC_WR_FLUSH_ERR or cq.read_qp_num() != qp.qp_num:
                    sys.exit(f"wr {cq.wr_id}: status {cq.status}, qp {cq.read_qp_num()} (QP {qp.qp_num})")
                seen.append(cq.wr_id)
                stamps.append(cq.read_timestamp())
                ret = cq.poll_next()
                if ret == errno.ENOENT:
                    break
                if ret != 0:
                    sys.exit(f"ibv_next_poll: {ret}")
            cq.end_poll()
        if len(seen) >= 3:
            break
        time.sleep(0.05)
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    if seen != [11, 12, 13]:
        sys.exit(f"flushed receives read back as {seen}, not [11, 12, 13]")
    if cq.start_poll(PollCqAttr()) != errno.ENOENT:
        sys.exit("completions read in a session were polled again")
    if stamps != sorted(stamps) or not before <= stamps[0] <= stamps[-1] <= after:
        sys.exit(f"timestamps {stamps} not in order within [{before}, {after}]")
    print(f"# completions stamped {stamps[0] - before} ns after the first post, "
          f"{stamps[-1] - stamps[0]} ns apart")
    # ibv_query_rt_values_ex reads the same clock (all of it in tv_nsec, as mlx5 does).
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    sec, nsec = ctx.query_rt_values_ex()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    if sec != 0 or not before <= nsec <= after:
        sys.exit(f"raw clock ({sec}, {nsec}) not within [{before}, {after}]")

def gid_table_of_the_netdev(ctx):
    """ibv_query_gid_table and ibv_query_gid_ex: the port's GIDs, each RoCEv2, on the device's
    netdev, index 0 its IPv6 link-local address (the default GID), and one the IPv4-mapped
    address of 10.11.0.1; each entry as ibv_query_gid_ex reads it alone."""
    with open(f"/sys/class/infiniband/{ctx.name}/ports/1/gid_attrs/ndevs/0") as f:
        ndev = f.read().strip()
    with open(f"/sys/class/net/{ndev}/ifindex") as f:
        ifindex = int(f.read())
    table = ctx.query_gid_table(64)
    gids = {entry.gid_index: entry for entry in table}
    if 0 not in gids or not gids[0].gid_str().startswith("fe80"):
        sys.exit(f"GID 0 is not the link-local address: {[(i, g.gid_str()) for i, g in gids.items()]}")
    if "0000:0000:0000:0000:0000:ffff:0a0b:0001" not in [g.gid_str() for g in table]:
        sys.exit(f"no IPv4-mapped 10.11.0.1 among {[g.gid_str() for g in table]}")
    for entry in table:
        if (entry.port_num, entry.gid_type, entry.ndev_ifindex) != (1, e.IBV_GID_TYPE_ROCE_V2, ifindex):
            sys.exit(f"GID {entry.gid_index}: port {entry.port_num}, type {entry.gid_type}, "
                     f"ifindex {entry.ndev_ifindex} (want 1, RoCEv2, {ifindex} {ndev})")
        alone = ctx.query_gid_ex(1, entry.gid_index)
        if (alone.gid_str(), alone.gid_type, alone.ndev_ifindex) != (entry.gid_str(), entry.gid_type, ifindex):
            sys.exit(f"GID {entry.gid_index}: ibv_query_gid_ex says {alone.gid_str()}, the table {entry.gid_str()}")


CHECKS = {f.__name__: f for f in [pd_alloc_dealloc, cq_create_poll_empty, cq_bad_sizes,
                                   cq_with_channel_arms, many_cqs, mr_register_keys,
                                   mr_bad_access, mr_limits_reported, qp_types_unsupported,
                                   qp_caps, qp_state_machine, post_send_states,
                                   comp_vectors_per_cpu, qp_ex_create_flags_none,
                                   cq_ex_polls_a_session, gid_table_of_the_netdev]}

if __name__ == "__main__":
    device = sys.argv[1]
    with Context(name=device) as context:
        for name in sys.argv[2:]:
            print(f"running {name}", flush=True)
            try:
                CHECKS[name](context)
                print(f"ok {name}", flush=True)
            except SystemExit as why:  # a check's sys.exit(reason)
                print(f"not ok {name}: {why.code}", flush=True)
            except Exception as err:
                for line in traceback.format_exc().splitlines():
                    print(f"  {line}", flush=True)
                print(f"not ok {name}: {type(err).__name__}: {err}", flush=True)
