"""What the hostile peer (selftests/hostile-peer) attacks, and what it must not harm (pyverbs).

Targets: RC QPs in RTS whose peer is the hostile namespace (PEER_GID, QPN 0x100 + i), each with
an MR open to remote READ and WRITE, receives posted, and two WRITEs of its own in flight to the
peer (so that ACKs, NAKs and READ responses have something to hit). Victims: two RC QPs connected
to each other through the device's own address, which the hostile peer knows the numbers of but
cannot legitimately address. While the attack runs, the victims move data in rounds (a WRITE of
fresh random data, a READ back, a byte-for-byte compare).

Usage: hostile_target.py DEV GID_INDEX PEER_GID TARGETS
Prints the state for the hostile peer as one JSON line, runs rounds until a line arrives on stdin,
then prints "ok victims_intact: N rounds" (or "not ok victims_intact: why") and the targets' fate.
"""
import json
import random
import select
import sys
import time

from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

# Atomics too: the hostile peer's COMPARE SWAPs and FETCH ADDs reach their execution.
FLUSH_GLOBAL = 1 << 8  # IB_UVERBS_ACCESS_FLUSH_GLOBAL (libibverbs 44 has no name for it)
RW = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
      | FLUSH_GLOBAL)
MR_SIZE = 64 * 1024
STALL_WATCH_S = 120
STATES = {e.IBV_QPS_RESET: "RESET", e.IBV_QPS_INIT: "INIT", e.IBV_QPS_RTR: "RTR", e.IBV_QPS_RTS: "RTS",
          e.IBV_QPS_SQD: "SQD", e.IBV_QPS_SQE: "SQE", e.IBV_QPS_ERR: "ERR"}


def rc_qp(ctx, pd, cq):
    cap = QPCap(max_send_wr=16, max_recv_wr=32, max_send_sge=1, max_recv_sge=1)
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))


def to_rts(qp, gid_index, dgid, dest_qpn, post=lambda: None):
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num = 0, 1
    init.qp_access_flags = (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
                            | FLUSH_GLOBAL)
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    post()
    rtr = QPAttr(qp_state=e.IBV_QPS_RTR)
    rtr.path_mtu, rtr.dest_qp_num, rtr.rq_psn = e.IBV_MTU_1024, dest_qpn, 0
    rtr.max_dest_rd_atomic, rtr.min_rnr_timer = 4, 1
    rtr.ah_attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=dgid, sgid_index=gid_index, hop_limit=64))
    qp.modify(rtr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
              | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    rts = QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.sq_psn, rts.max_rd_atomic = 12, 7, 7, 0, 4
    qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
              | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


class Target:
    """A QP that trusts the hostile peer. The attack soon drives it to ERR; `revive` brings it
    back (RESET, then RTS at PSN 0 with receives and two WRITEs of its own posted), so that the
    packets keep reaching a live QP's checks rather than only "QP not ready"."""

    def __init__(self, qp, cq, mr, connect):
        self.qp, self.cq, self.mr, self.connect = qp, cq, mr, connect
        self.revived, self.failed, self.last_error = 0, 0, None

    def start(self):
        self.connect()
        for w in range(2):
            wr = SendWR(wr_id=100 + w, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(self.mr.buf, 4096, self.mr.lkey)],
                        send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_rdma(0x1234, 0x10000 * (w + 1))
            self.qp.post_send(wr)

    def drain(self):
        while self.cq.poll(64)[0]:
            pass

    def revive(self):
        """Brings it back to RTS if the attack moved it out (to ERR, or left it between two steps
        of an earlier revival). The attack may send it to ERR between two of these steps too;
        then the next step fails with EINVAL, as it should, and the next call starts over."""
        if self.qp.query(e.IBV_QP_STATE)[0].qp_state == e.IBV_QPS_RTS:
            return
        try:
            self.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
            self.drain()
            self.start()
            self.revived += 1
        except PyverbsRDMAError as err:
            self.failed += 1
            self.last_error = str(err)

class Failed(Exception):
    pass


def completion(cq, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        n, wcs = cq.poll(1)
        if n:
            if wcs[0].status != e.IBV_WC_SUCCESS:
                raise Failed(f"{what} completed with status {wcs[0].status}")
            return
        time.sleep(0.001)
    raise Failed(f"no completion for {what} in {timeout} s")


def main():
    dev, gid_index, peer_gid, ntargets = sys.argv[1], int(sys.argv[2]), GID(sys.argv[3]), int(sys.argv[4])
    ctx = Context(name=dev)
    own_gid = ctx.query_gid(1, gid_index)

    targets, keep = [], []
    for i in range(ntargets):
        pd = PD(ctx)
        cq = CQ(ctx, 256)
        qp = rc_qp(ctx, pd, cq)
        mr = MR(pd, MR_SIZE, RW)

        def post(qp=qp, mr=mr):
            for r in range(32):
                qp.post_recv(RecvWR(wr_id=r, num_sge=1, sg=[SGE(mr.buf + (r % 16) * 2048, 2048, mr.lkey)]))

        target = Target(qp, cq, mr, lambda qp=qp, post=post, i=i: to_rts(qp, gid_index, peer_gid, 0x100 + i, post))
        target.start()
        targets.append({"qpn": qp.qp_num, "rkey": mr.rkey, "va": mr.buf, "size": MR_SIZE, "peer_qpn": 0x100 + i})
        keep.append((pd, target))

    # The victims: A writes to and reads from B, through the device's own address.
    vpd_a, vpd_b = PD(ctx), PD(ctx)
    vcq_a, vcq_b = CQ(ctx, 64), CQ(ctx, 64)
    va, vb = rc_qp(ctx, vpd_a, vcq_a), rc_qp(ctx, vpd_b, vcq_b)
    to_rts(va, gid_index, own_gid, vb.qp_num)
    to_rts(vb, gid_index, own_gid, va.qp_num)
    src, back, dst = MR(vpd_a, MR_SIZE, RW), MR(vpd_a, MR_SIZE, RW), MR(vpd_b, MR_SIZE, RW)

    addr = ".".join(str(int(x, 16)) for x in (str(own_gid)[-9:-7], str(own_gid)[-7:-5], str(own_gid)[-4:-2], str(own_gid)[-2:]))
    print(json.dumps({"addr": addr, "targets": targets, "victims": [va.qp_num, vb.qp_num]}), flush=True)

    rounds, verdict = 0, None
    try:
        while not select.select([sys.stdin], [], [], 0)[0]:
            data = random.Random(rounds).randbytes(MR_SIZE)
            src.write(data, MR_SIZE, 0)
            back.write(b"\0" * MR_SIZE, MR_SIZE, 0)
            w = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, MR_SIZE, src.lkey)],
                       send_flags=e.IBV_SEND_SIGNALED)
            w.set_wr_rdma(dst.rkey, dst.buf)
            va.post_send(w)
            completion(vcq_a, f"round {rounds}: WRITE")
            r = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(back.buf, MR_SIZE, back.lkey)],
                       send_flags=e.IBV_SEND_SIGNALED)
            r.set_wr_rdma(dst.rkey, dst.buf)
            va.post_send(r)
            completion(vcq_a, f"round {rounds}: READ")
            if back.read(MR_SIZE, 0) != data:
                raise Failed(f"round {rounds}: the data read back differs from what was written")
            rounds += 1
            # Keep the targets' CQs drained (their flushes and errors land there) and alive.
            for _, t in keep:
                t.drain()
                if rounds % 4 == 0:
                    t.revive()
    except Failed as err:
        verdict = f"not ok victims_intact: {err} (after {rounds} good rounds)"
        # Stalled or only slow? Wait longer, saying where the two QPs stand (the driver's
        # requester/responder state included).
        import subprocess
        for qpn in (va.qp_num, vb.qp_num):
            out = subprocess.run(["rdma", "resource", "show", "qp", "lqpn", str(qpn), "-dd"],
                                 capture_output=True, text=True).stdout
            print(f"# victim QP {qpn:#x}: " + " ".join(out.split()), flush=True)
        for _ in range(STALL_WATCH_S // 10):
            for name, qp in (("A", va), ("B", vb)):
                a, _ = qp.query(e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN)
                print(f"# victim {name}: state {STATES.get(a.qp_state, a.qp_state)} sq_psn {a.sq_psn:#x} rq_psn {a.rq_psn:#x}",
                      flush=True)
            n, wcs = vcq_a.poll(1)
            if n:
                print(f"# victim A's late completion: wr {wcs[0].wr_id} status {wcs[0].status}", flush=True)
                break
            time.sleep(10)
    except Exception as err:
        verdict = f"not ok victims_intact: {type(err).__name__}: {err} (after {rounds} good rounds)"
    sys.stdin.readline()
    if verdict is None:
        verdict = f"ok victims_intact: {rounds} rounds" if rounds else "not ok victims_intact: no round finished"
    fate = {}
    for _, t in keep:
        state = STATES.get(t.qp.query(e.IBV_QP_STATE)[0].qp_state, "?")
        fate[state] = fate.get(state, 0) + 1
    failed = [t for _, t in keep if t.failed]
    print(f"# targets after the attack: {fate}; revived {sum(t.revived for _, t in keep)} times, "
          f"{sum(t.failed for t in failed)} revivals cut short" + (f" (last: {failed[-1].last_error})" if failed else ""),
          flush=True)
    print(verdict, flush=True)


if __name__ == "__main__":
    main()
