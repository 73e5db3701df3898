"""Holds an RC QP in RTS (sq_psn 0, no retransmission timeout) whose peer is DGID, with one
8-byte RDMA WRITE in flight at PSN 0, for crafted ACKs to answer.

Usage: ack_target.py DEV GID_INDEX DGID
Prints the QP number. Then, per line on stdin: "none" checks that the WRITE has not completed
(printing "pending"), "done" waits up to 30 s for its successful completion (printing
"completed"); anything else ends it. Exits non-zero with the reason when a check fails.
"""
import sys
import time

from pyverbs.mr import MR
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

from recv_target import rts_qp


def main():
    dev, gid_index, dgid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # timeout 0: no retransmission timer; retries go to the peer namespace, which drops them.
    ctx, pd, cq, qp = rts_qp(dev, gid_index, dgid, timeout=0, retry_cnt=7)
    src = MR(pd, 8, e.IBV_ACCESS_LOCAL_WRITE)
    wr = SendWR(wr_id=7, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 8, src.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(0x1234, 0x10000)
    qp.post_send(wr)
    print(qp.qp_num, flush=True)
    for line in sys.stdin:
        what = line.strip()
        if what == "none":
            n, wcs = cq.poll(1)
            if n:
                sys.exit(f"the WRITE completed (status {wcs[0].status}) without a valid ACK")
            print("pending", flush=True)
        elif what == "done":
            deadline = time.time() + 30
            while time.time() < deadline:
                n, wcs = cq.poll(1)
                if n:
                    if (wcs[0].wr_id, wcs[0].status) != (7, e.IBV_WC_SUCCESS):
                        sys.exit(f"completion wr {wcs[0].wr_id} status {wcs[0].status}")
                    print("completed", flush=True)
                    break
                time.sleep(0.05)
            else:
                sys.exit("the valid ACK did not complete the WRITE")
        else:
            return


if __name__ == "__main__":
    main()
