"""Holds an RC QP in RTR (rq_psn 0) that lets the peer run atomics (and ATOMIC WRITEs) on an
8-byte word of an MR, for crafted atomic requests; its answers go to DGID.

Usage: atomic_target.py DEV GID_INDEX DGID MAX_DEST_RD_ATOMIC
Prints "QPN RKEY ADDR"; then, once a line comes on stdin (the test is done), the word's value,
and exits.
"""
import struct
import sys

from pyverbs.mr import MR
import pyverbs.enums as e

from recv_target import rtr_qp


def main():
    dev, gid_index, dgid, max_dest = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    remote = e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_REMOTE_WRITE
    ctx, pd, cq, qp = rtr_qp(dev, gid_index, access=remote, dgid=dgid, max_dest_rd_atomic=max_dest)
    mr = MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE | remote)
    mr.write(bytes(8), 8, 0)
    print(qp.qp_num, mr.rkey, mr.buf, flush=True)
    sys.stdin.readline()
    print(struct.unpack("=Q", mr.read(8, 0))[0], flush=True)


if __name__ == "__main__":
    main()
