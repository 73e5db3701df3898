"""Holds four RC QPs in RTR (rq_psn 0) for crafted FLUSH requests (IBTA 1.5); their answers go
to DGID. QP 1 and 2 grant FLUSH for global visibility (IB_ACCESS_FLUSH_GLOBAL, a bit
libibverbs 44 has no name for but passes on), QP 3 does not; MR 1 grants it, MR 2 (of QP 2's
PD) does not. QP 4 grants both FLUSH rights; in its PD, MR 4 is on persistent memory (2 MiB of
the device DAX file DAX, mapped) and grants both, MR 5 is ordinary memory with the global right
only. An MR of ordinary memory that asks for the persistent right is refused: its errno is
printed.

Usage: flush_target.py DEV GID_INDEX DGID DAX
Prints "QPN1 QPN2 QPN3 RKEY1 ADDR1 RKEY2 ADDR2 QPN4 RKEY4 ADDR4 RKEY5 ADDR5 ERRNO"; exits once
a line comes on stdin.
"""
import ctypes
import mmap
import os
import sys

from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
import pyverbs.enums as e

from recv_target import rtr_qp

FLUSH_GLOBAL = 1 << 8  # IB_UVERBS_ACCESS_FLUSH_GLOBAL
FLUSH_PERSISTENT = 1 << 9  # IB_UVERBS_ACCESS_FLUSH_PERSISTENT
PMEM_BYTES = 2 << 20  # device DAX maps in units of its alignment (2 MiB by default)


def main():
    dev, gid_index, dgid, dax = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    write = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    _, pd1, _, qp1 = keep1 = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_WRITE | FLUSH_GLOBAL, dgid=dgid,
                                    max_dest_rd_atomic=2)
    _, pd2, _, qp2 = keep2 = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_WRITE | FLUSH_GLOBAL, dgid=dgid)
    _, _, _, qp3 = keep3 = rtr_qp(dev, gid_index, access=e.IBV_ACCESS_REMOTE_WRITE, dgid=dgid)
    _, pd4, _, qp4 = keep4 = rtr_qp(dev, gid_index,
                                    access=e.IBV_ACCESS_REMOTE_WRITE | FLUSH_GLOBAL | FLUSH_PERSISTENT,
                                    dgid=dgid, max_dest_rd_atomic=4)
    mr1 = MR(pd1, 4096, write | FLUSH_GLOBAL)
    mr2 = MR(pd2, 4096, write)
    fd = os.open(dax, os.O_RDWR)
    pmem = mmap.mmap(fd, PMEM_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    pmem_addr = ctypes.addressof(ctypes.c_char.from_buffer(pmem))
    mr4 = MR(pd4, PMEM_BYTES, write | FLUSH_GLOBAL | FLUSH_PERSISTENT, address=pmem_addr)
    mr5 = MR(pd4, 4096, write | FLUSH_GLOBAL)
    try:
        MR(pd4, 4096, write | FLUSH_PERSISTENT).close()
        refused = 0
    except PyverbsRDMAError as err:
        refused = err.error_code
    print(qp1.qp_num, qp2.qp_num, qp3.qp_num, mr1.rkey, mr1.buf, mr2.rkey, mr2.buf,
          qp4.qp_num, mr4.rkey, pmem_addr, mr5.rkey, mr5.buf, refused, flush=True)
    sys.stdin.readline()
    del keep1, keep2, keep3, keep4


if __name__ == "__main__":
    main()
