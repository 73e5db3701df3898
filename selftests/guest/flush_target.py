"""Holds three RC QPs in RTR (rq_psn 0) for crafted FLUSH requests (IBTA 1.5); their answers go
to DGID. QP 1 and 2 grant FLUSH for global visibility (IB_ACCESS_FLUSH_GLOBAL, a bit
libibverbs 44 has no name for but passes on), QP 3 does not; MR 1 grants it, MR 2 (of QP 2's
PD) does not.

Usage: flush_target.py DEV GID_INDEX DGID
Prints "QPN1 QPN2 QPN3 RKEY1 ADDR1 RKEY2 ADDR2"; exits once a line comes on stdin.
"""
import sys

from pyverbs.mr import MR
import pyverbs.enums as e

from recv_target import rtr_qp

FLUSH_GLOBAL = 1 << 8  # IB_UVERBS_ACCESS_FLUSH_GLOBAL


def main():
    dev, gid_index, dgid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    write = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    _, pd1, _, qp1 = keep1 = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_WRITE | FLUSH_GLOBAL, dgid=dgid,
                                    max_dest_rd_atomic=2)
    _, pd2, _, qp2 = keep2 = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_WRITE | FLUSH_GLOBAL, dgid=dgid)
    _, _, _, qp3 = keep3 = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_WRITE, dgid=dgid)
    mr1 = MR(pd1, 4096, write | FLUSH_GLOBAL)
    mr2 = MR(pd2, 4096, write)
    print(qp1.qp_num, qp2.qp_num, qp3.qp_num, mr1.rkey, mr1.buf, mr2.rkey, mr2.buf, flush=True)
    sys.stdin.readline()
    del keep1, keep2, keep3


if __name__ == "__main__":
    main()
