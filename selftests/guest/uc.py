"""UC queue pairs (pyverbs, one process, loopback): what arrives is intact, and what cannot be
received is lost silently, one message at a time, with the QP left running.

Two UC QPs on one device, connected through its IPv4 GID (rdma_data.Side). UC sends SENDs and
RDMA WRITEs as RC does, but nothing acknowledges them: a send WR completes once its last packet
is out, and a message the responder cannot take (no receive posted, a bad R_Key, a packet of it
lost) is dropped and counted in rcvd_uc_dropped, never NAKed, with the QP still in RTS. Lost and
cut-short messages are made with crafted packets (roce_send.datagram) aimed at the receiving QP.

Usage: uc.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import ctypes
import errno
import os
import socket
import sys
import time

from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

import rdma_data
from rdma_data import (Failed, Scattered, Side, connected, expect, expect_status, first_diff, next_async_event,
                       pattern, port_counter, run_checks, write_batch)
from roce_send import datagram

UC = e.IBV_QPT_UC
SIZE = 16384
# UC opcodes (IBA table 38): RC's plus 0x20.
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x20, 0x21, 0x22, 0x24


def uc_pair(ctx):
    return connected(ctx, Side(ctx, qp_type=UC), Side(ctx, qp_type=UC))


def dropped():
    return port_counter("rcvd_uc_dropped")


def counter_moves_by(before, want, what):
    """rcvd_uc_dropped must reach before + want (the sysfs value is cached for 10 ms)."""
    deadline = time.time() + 10
    while time.time() < deadline:
        got = dropped() - before
        if got == want:
            return
        expect(got < want, f"{what}: rcvd_uc_dropped moved by {got}, want {want}")
        time.sleep(0.05)
    raise Failed(f"{what}: rcvd_uc_dropped moved by {dropped() - before}, want {want}")


def expect_landed(mr, offset, want, what, timeout=10):
    """The bytes at `offset` of `mr` become `want`: a UC send completion says the data left,
    not that it was placed (the receiver may still be at it)."""
    deadline = time.time() + timeout
    while True:
        got = mr.read(len(want), offset)
        if got == want:
            return
        if time.time() > deadline:
            raise Failed(f"{what}: data differs at byte {first_diff(got, want)} after {timeout} s")
        time.sleep(0.05)


def expect_no_completion(side, what, wait=0.5):
    time.sleep(wait)
    n, wcs = side.cq.poll(1)
    expect(n == 0, f"{what}: a completion appeared (status {wcs[0].status if n else None})")


def expect_rts(side, what):
    attr, _ = side.qp.query(e.IBV_QP_STATE)
    expect(attr.qp_state == e.IBV_QPS_RTS, f"{what}: the QP is in state {attr.qp_state}, not RTS")


def send_write_imm_intact(ctx):
    """A 7-packet SEND across SGE lists, a 10-packet WRITE and a WRITE WITH IMMEDIATE arrive byte
    for byte, and each side sees the completions RC would give."""
    a, b = uc_pair(ctx)
    src = Scattered(a)
    data = pattern(src.length, 21)
    src.fill(data)
    rmr = b.mr(SIZE)
    b.qp.post_recv(RecvWR(wr_id=7, num_sge=2, sg=[SGE(rmr.buf + 3, 5000, rmr.lkey), SGE(rmr.buf + 6000, 8000, rmr.lkey)]))
    wc = a.post(e.IBV_WR_SEND, src.sges)
    expect_status(wc, e.IBV_WC_SUCCESS, "SEND")
    expect(wc.opcode == e.IBV_WC_SEND, f"SEND completion opcode {wc.opcode}")
    rwc = b.completion("the receive")
    expect_status(rwc, e.IBV_WC_SUCCESS, "receive")
    expect(rwc.opcode == e.IBV_WC_RECV and rwc.byte_len == src.length and rwc.wr_id == 7,
           f"receive: opcode {rwc.opcode} byte_len {rwc.byte_len} wr_id {rwc.wr_id}")
    got = rmr.read(SIZE, 0)
    landed = (got[3:5003] + got[6000:14000])[:src.length]
    expect(landed == data, f"SEND data differs at byte {first_diff(landed, data)}")

    target = b.mr(SIZE)
    blob = pattern(10000, 22)
    keep = a.start_data(e.IBV_WR_RDMA_WRITE, blob, target)
    expect_status(a.completion("WRITE"), e.IBV_WC_SUCCESS, "WRITE")
    expect_landed(target, 0, blob, "WRITE")
    expect(target.read(SIZE - 10000, 10000) == bytes([rdma_data.GUARD]) * (SIZE - 10000), "the WRITE ran past its end")

    spare = b.mr(64)
    b.qp.post_recv(RecvWR(wr_id=8, num_sge=1, sg=[SGE(spare.buf, 64, spare.lkey)]))
    blob2 = pattern(5000, 23)
    src2 = a.mr(5000)
    src2.write(blob2, 5000, 0)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[SGE(src2.buf, 5000, src2.lkey)],
                send_flags=e.IBV_SEND_SIGNALED, imm_data=socket.htonl(0x1234ABCD))
    wr.set_wr_rdma(target.rkey, target.buf + 11000)
    a.qp.post_send(wr)
    expect_status(a.completion("WRITE WITH IMMEDIATE"), e.IBV_WC_SUCCESS, "WRITE WITH IMMEDIATE")
    rwc = b.completion("the WRITE WITH IMMEDIATE's receive")
    expect_status(rwc, e.IBV_WC_SUCCESS, "WRITE WITH IMMEDIATE's receive")
    expect(rwc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM and rwc.byte_len == 5000 and rwc.wr_id == 8
           and socket.ntohl(rwc.imm_data) == 0x1234ABCD and rwc.wc_flags & e.IBV_WC_WITH_IMM,
           f"receive: opcode {rwc.opcode} byte_len {rwc.byte_len} imm {rwc.imm_data:#x} flags {rwc.wc_flags}")
    got = target.read(SIZE, 0)
    expect(got[11000:16000] == blob2, f"WRITE WITH IMMEDIATE data differs at byte {first_diff(got[11000:16000], blob2)}")
    del keep


def no_receive_drops_the_message(ctx):
    """A 3-packet SEND with no receive posted completes at the sender and is lost at the
    receiver (3 packets counted, no NAK, no error); the next one, with a receive, arrives."""
    a, b = uc_pair(ctx)
    before = dropped()
    keep = a.start_data(e.IBV_WR_SEND, pattern(3000, 24))
    expect_status(a.completion("SEND without a receive"), e.IBV_WC_SUCCESS, "SEND without a receive")
    counter_moves_by(before, 3, "a SEND of 3 packets without a receive")
    expect_no_completion(b, "the receiver")
    expect_rts(a, "the sender")
    expect_rts(b, "the receiver")
    rmr = b.mr(SIZE)
    b.qp.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(rmr.buf, SIZE, rmr.lkey)]))
    data = pattern(2500, 25)
    keep2 = a.start_data(e.IBV_WR_SEND, data, wr_id=2)
    expect_status(a.completion("the next SEND"), e.IBV_WC_SUCCESS, "the next SEND")
    rwc = b.completion("the next SEND's receive")
    expect(rwc.status == e.IBV_WC_SUCCESS and rwc.byte_len == 2500, f"receive: status {rwc.status} byte_len {rwc.byte_len}")
    expect(rmr.read(2500, 0) == data, "the next SEND's data differs")
    del keep, keep2


def bad_rkey_drops_the_write(ctx):
    """A WRITE under a wrong R_Key completes at the sender, changes nothing at the receiver
    (2 packets counted) and leaves both QPs in RTS; the next, correct WRITE lands."""
    a, b = uc_pair(ctx)
    target = b.mr(SIZE)
    before_mem = target.read(SIZE, 0)
    before = dropped()
    src = a.mr(2048)
    src.write(pattern(2048, 26), 2048, 0)
    a.start(e.IBV_WR_RDMA_WRITE, [SGE(src.buf, 2048, src.lkey)], target.rkey ^ 0x80, target.buf)
    expect_status(a.completion("WRITE under a wrong R_Key"), e.IBV_WC_SUCCESS, "WRITE under a wrong R_Key")
    counter_moves_by(before, 2, "a 2-packet WRITE under a wrong R_Key")
    expect(target.read(SIZE, 0) == before_mem, "the WRITE under a wrong R_Key changed memory")
    expect_rts(a, "the sender")
    expect_rts(b, "the receiver")
    a.start(e.IBV_WR_RDMA_WRITE, [SGE(src.buf, 2048, src.lkey)], target.rkey, target.buf + 100, wr_id=2)
    expect_status(a.completion("the correct WRITE"), e.IBV_WC_SUCCESS, "the correct WRITE")
    expect_landed(target, 100, pattern(2048, 26), "the correct WRITE")


CLONE_NEWNET = 0x40000000


def inject(ctx, b, *packets):
    """Sends crafted UC packets (opcode, psn, payload) to b's QP, from and to the device's own
    IPv4 address, so they pass as its peer's. They go over the link, from the namespace at its
    other end (RXE_RS_INJECT_NETNS, made by rxe_rs_data.sh, whose device end accepts a local
    source address from the wire): rxe_rs takes nothing from this host's own IP stack."""
    _, gid = rdma_data.ipv4_gid_index(ctx)
    ip = socket.inet_ntoa(bytes.fromhex(str(gid).replace(":", ""))[12:])
    crafted = [datagram(ip, ip, b.qp.qp_num, opcode=opcode, payload=payload, psn=psn)
               for opcode, psn, payload in packets]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            netns = os.open(f"/run/netns/{os.environ['RXE_RS_INJECT_NETNS']}", os.O_RDONLY)
            if ctypes.CDLL(None, use_errno=True).setns(netns, CLONE_NEWNET) == 0:
                s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
                for pkt in crafted:
                    s.sendto(pkt, (ip, 0))
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    expect(status == 0, f"the injector in namespace {os.environ.get('RXE_RS_INJECT_NETNS')} failed ({status})")


def lost_and_cut_short_messages(ctx):
    """Crafted packets: a SEND whose LAST never comes, cut short by a new message, leaves the
    receive to that message (from its start); a MIDDLE with no message started is dropped; a
    SEND missing its middle packet is dropped and the next message takes the receive."""
    a, b = uc_pair(ctx)
    rmr = b.mr(SIZE)
    b.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(rmr.buf, SIZE, rmr.lkey)]))
    before = dropped()
    inject(ctx, b, (SEND_FIRST, 0x1000, b"A" * 1024), (SEND_ONLY, 0x1005, b"B" * 100))
    rwc = b.completion("the message after the unfinished one")
    expect(rwc.status == e.IBV_WC_SUCCESS and rwc.byte_len == 100 and rwc.wr_id == 1,
           f"receive: status {rwc.status} byte_len {rwc.byte_len} wr_id {rwc.wr_id}")
    expect(rmr.read(100, 0) == b"B" * 100, "the receive did not take the new message from its start")
    inject(ctx, b, (SEND_MIDDLE, 0x1006, b"M" * 1024))
    counter_moves_by(before, 1, "a MIDDLE packet with no message started")
    b.qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(rmr.buf, SIZE, rmr.lkey)]))
    inject(ctx, b, (SEND_FIRST, 0x2000, b"C" * 1024), (SEND_LAST, 0x2002, b"D" * 12))
    counter_moves_by(before, 2, "a LAST packet after a lost MIDDLE")
    expect_no_completion(b, "a SEND with a packet lost", wait=0.2)
    inject(ctx, b, (SEND_ONLY, 0x2003, b"E" * 20))
    rwc = b.completion("the message after the lost one")
    expect(rwc.status == e.IBV_WC_SUCCESS and rwc.byte_len == 20 and rwc.wr_id == 2,
           f"receive: status {rwc.status} byte_len {rwc.byte_len} wr_id {rwc.wr_id}")
    expect(rmr.read(20, 0) == b"E" * 20, "the receive did not take the next message from its start")
    expect_rts(b, "the receiver")
    # And a real message still arrives after all that (the expected PSN follows the sender).
    b.qp.post_recv(RecvWR(wr_id=3, num_sge=1, sg=[SGE(rmr.buf, SIZE, rmr.lkey)]))
    data = pattern(3000, 27)
    keep = a.start_data(e.IBV_WR_SEND, data)
    expect_status(a.completion("a real SEND"), e.IBV_WC_SUCCESS, "a real SEND")
    rwc = b.completion("a real SEND's receive")
    expect(rwc.status == e.IBV_WC_SUCCESS and rwc.byte_len == 3000, f"receive: status {rwc.status} byte_len {rwc.byte_len}")
    expect(rmr.read(3000, 0) == data, "a real SEND's data differs")
    del keep


def lost_message_frees_its_srq_wqe(ctx):
    """On a UC QP that receives from an SRQ, a SEND lost at a PSN gap completes the SRQ WQE it
    took, in error (remote invalid request), rather than keep it inside this QP for a message
    it may never get; the QP runs on, and the next message takes the SRQ's next WQE."""
    a = Side(ctx, qp_type=UC)
    srq = SRQ(a.pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
    a, b = connected(ctx, a, Side(ctx, qp_type=UC, pd=a.pd, srq=srq))
    rmr = b.mr(2 * SIZE)
    for wr_id in (1, 2):
        srq.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(rmr.buf + (wr_id - 1) * SIZE, SIZE, rmr.lkey)]))
    before = dropped()
    inject(ctx, b, (SEND_FIRST, 0x3000, b"C" * 1024), (SEND_LAST, 0x3002, b"D" * 12))
    counter_moves_by(before, 1, "a LAST packet after a lost MIDDLE")
    wc = b.completion("the SRQ WQE the lost SEND took")
    expect(wc.wr_id == 1 and wc.status == e.IBV_WC_REM_INV_REQ_ERR,
           f"the lost SEND's SRQ WQE: wr_id {wc.wr_id} status {wc.status}, want 1 and REM_INV_REQ_ERR")
    expect_rts(b, "the receiver")
    inject(ctx, b, (SEND_ONLY, 0x3003, b"E" * 20))
    wc = b.completion("the next message")
    expect(wc.wr_id == 2 and wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 20,
           f"the next message: wr_id {wc.wr_id} status {wc.status} byte_len {wc.byte_len}")
    expect(rmr.read(20, SIZE) == b"E" * 20, "the next message's data differs")


UC_OPS = e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_SEND


def long_write_sqd_and_a_big_batch(ctx):
    """Past the requester's 128 packets per run: a 1 MiB WRITE (1024 packets) lands whole; moved
    to SQD during a second one, the QP finishes it and reports SQ_DRAINED; one ibv_wr_* batch of
    300 WRITEs (more than the 256 WQEs the kernel copies at a time) all complete and land."""
    a = Side(ctx, wr_api=True, send_wr=512, cqe=512, qp_type=UC, send_ops=UC_OPS)
    a, b = connected(ctx, a, Side(ctx, qp_type=UC))
    size = 1 << 20
    target = b.mr(size)
    blob = pattern(size, 28)
    keep = a.start_data(e.IBV_WR_RDMA_WRITE, blob, target)
    expect_status(a.completion("a 1 MiB WRITE"), e.IBV_WC_SUCCESS, "a 1 MiB WRITE")
    expect_landed(target, 0, blob, "a 1 MiB WRITE", timeout=30)

    blob2 = pattern(size, 29)
    keep2 = a.start_data(e.IBV_WR_RDMA_WRITE, blob2, target, wr_id=2)
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE)
    event = next_async_event(ctx)
    expect(event == e.IBV_EVENT_SQ_DRAINED, f"async event {event}, want SQ_DRAINED ({e.IBV_EVENT_SQ_DRAINED})")
    n, wcs = a.cq.poll(1)
    expect(n == 1 and wcs[0].wr_id == 2 and wcs[0].status == e.IBV_WC_SUCCESS,
           "SQ_DRAINED came before the WRITE in flight completed")
    expect_landed(target, 0, blob2, "the WRITE drained in SQD", timeout=30)
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)

    count, src = 300, a.mr(300 * 8)
    words = b"".join(i.to_bytes(8, "little") for i in range(1000, 1000 + count))
    src.write(words, len(words), 0)
    write_batch(a.qp, count, target, src)
    for i in range(count):
        wc = a.completion(f"WRITE {i} of the batch")
        expect(wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 100 + i,
               f"batch completion {i}: wr_id {wc.wr_id} status {wc.status}")
    expect_landed(target, 0, words, "the batch of 300 WRITEs")
    del keep, keep2


def refuses_what_uc_cannot_carry(ctx):
    """An RDMA READ on a UC QP fails at post (EINVAL), and an extended UC QP asking for READs
    is refused (EOPNOTSUPP), as the provider offers only what UC carries."""
    a, b = uc_pair(ctx)
    mr = a.mr(64)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(mr.rkey, mr.buf)
    try:
        a.qp.post_send(wr)
        raise Failed("an RDMA READ was posted on a UC QP")
    except PyverbsRDMAError as err:
        expect(err.error_code == errno.EINVAL, f"READ on UC: errno {err.error_code}, want EINVAL")
    expect_rts(a, "the QP after the refused post")
    def attr(ops):
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        return QPInitAttrEx(qp_type=UC, scq=a.cq, rcq=a.cq, cap=cap, pd=a.pd,
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, send_ops_flags=ops)
    try:
        QPEx(ctx, attr(e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_READ))
        raise Failed("an extended UC QP with READs was created")
    except PyverbsRDMAError as err:
        expect(err.error_code == errno.EOPNOTSUPP, f"extended UC QP with READs: errno {err.error_code}, want EOPNOTSUPP")
    QPEx(ctx, attr(e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)).close()


CHECKS = {
    "uc_send_write_imm_intact": send_write_imm_intact,
    "uc_no_receive_drops_the_message": no_receive_drops_the_message,
    "uc_bad_rkey_drops_the_write": bad_rkey_drops_the_write,
    "uc_lost_and_cut_short_messages": lost_and_cut_short_messages,
    "uc_lost_message_frees_its_srq_wqe": lost_message_frees_its_srq_wqe,
    "uc_long_write_sqd_and_a_big_batch": long_write_sqd_and_a_big_batch,
    "uc_refuses_what_it_cannot_carry": refuses_what_uc_cannot_carry,
}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
