"""Holds an RC QP in RTS (sq_psn 0, timeout 18: 1.07 s, retry_cnt 2) whose peer is DGID (the
peer namespace's tail_peer.py), and sends it two RDMA WRITEs: 1 KiB (PSN 0), whose ACK gives
the requester a round-trip sample, then 4 KiB (PSNs 1-4, path MTU 1024), whose tail the peer
pretends to have lost.

Usage: tail_target.py DEV GID_INDEX DGID
Prints the QP number, waits for a line on stdin (the peer listens), posts the WRITEs one after
the other, and prints "completed" once both completed successfully, else exits non-zero with
the reason.
"""
import sys
import time

from pyverbs.mr import MR
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

from recv_target import rts_qp


def write(qp, cq, src, wr_id, length):
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, length, src.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(0x1234, 0x10000)
    qp.post_send(wr)
    deadline = time.time() + 30
    while time.time() < deadline:
        n, wcs = cq.poll(1)
        if n:
            if (wcs[0].wr_id, wcs[0].status) != (wr_id, e.IBV_WC_SUCCESS):
                sys.exit(f"WRITE {wr_id}: completion wr {wcs[0].wr_id} status {wcs[0].status}")
            return
        time.sleep(0.01)
    sys.exit(f"WRITE {wr_id} did not complete in 30 s")


def main():
    dev, gid_index, dgid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ctx, pd, cq, qp = rts_qp(dev, gid_index, dgid, timeout=18, retry_cnt=2)
    src = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    print(qp.qp_num, flush=True)
    sys.stdin.readline()
    write(qp, cq, src, 1, 1024)
    write(qp, cq, src, 2, 4096)
    print("completed", flush=True)


if __name__ == "__main__":
    main()
