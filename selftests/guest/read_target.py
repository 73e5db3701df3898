"""Holds an RC QP in RTR (rq_psn 0) that lets the peer RDMA READ an MR of SIZE bytes, for
crafted READ requests to ask; its responses go to DGID.

Usage: read_target.py DEV GID_INDEX DGID SIZE [MAX_DEST_RD_ATOMIC]
Prints "QPN RKEY ADDR", then reads lines on stdin: "dereg" deregisters the MR (and prints
"deregistered"), anything else means the test is done: it exits.
"""
import sys

from pyverbs.mr import MR
import pyverbs.enums as e

from recv_target import rtr_qp


def main():
    dev, gid_index, dgid, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    max_dest = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    ctx, pd, cq, qp = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_READ, dgid=dgid, max_dest_rd_atomic=max_dest)
    mr = MR(pd, size, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
    print(qp.qp_num, mr.rkey, mr.buf, flush=True)
    while sys.stdin.readline().strip() == "dereg":
        mr.close()
        print("deregistered", flush=True)


if __name__ == "__main__":
    main()
