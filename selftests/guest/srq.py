"""Shared receive queues (pyverbs, one process, loopback).

Receiving RC QPs attached to one SRQ take its WQEs in whatever order their messages come, each
WQE once; what a user sees is checked: every byte, each wr_id once with its QP's number, the
limit event when fewer WQEs than the armed limit are left, not before (the limit disarmed by it), RNR waits
for a WQE posted to the SRQ later, the last-WQE event when such a QP enters the error state
while the SRQ goes on serving the others, a UD datagram too long for its WQE completing that
WQE in error (not keeping it from the SRQ), a resize (grown and shrunk with WQEs posted, which
move to the new ring and receive in order), and the errnos: ibv_post_recv on an attached QP, a
limit above the SRQ's size, a resize below the WQEs posted or the armed limit.

Usage: srq.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import errno
import sys
import time

from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import RecvWR, SGE
import pyverbs.enums as e

from rdma_data import (Side, connected, expect, expect_status, first_diff, pattern,
                       port_counter, run_checks, wait_event)
from ud import GRH, UdSide, gid_index, sent_ok

MSG = 3000  # three packets at the 1024-byte path MTU


def shared_side(ctx, max_wr, count, **side_args):
    """`count` receiving sides in one PD with one CQ, attached to a new SRQ of `max_wr` WQEs."""
    first = Side(ctx, cqe=256, **side_args)
    srq = SRQ(first.pd, SrqInitAttr(SrqAttr(max_wr=max_wr, max_sge=2)))
    # The first side was made before the SRQ: remade on it, sharing its PD and CQ.
    sides = [Side(ctx, pd=first.pd, cq=first.cq, srq=srq, **side_args) for _ in range(count)]
    first.qp.close()
    return srq, sides


def errno_of(action):
    try:
        action()
    except PyverbsRDMAError as err:
        return err.error_code
    return 0


class Buffers:
    """One receive buffer per WQE in one MR of the receivers' PD, with a guard byte after each."""

    def __init__(self, side, count, size=MSG):
        self.size, self.count = size, count
        self.mr = side.mr(count * (size + 64))

    def post(self, srq, wr_id):
        # Two SGEs, to show the WQE's whole list is taken: 1000 bytes, then the rest.
        at = self.mr.buf + wr_id * (self.size + 64)
        sg = [SGE(at, 1000, self.mr.lkey), SGE(at + 1000, self.size - 1000, self.mr.lkey)]
        srq.post_recv(RecvWR(wr_id=wr_id, num_sge=2, sg=sg))

    def read(self, wr_id, length):
        return self.mr.read(length, wr_id * (self.size + 64))


def send(sender, data, wr_id=1):
    """Posts a signaled SEND of `data` (a new MR, returned: it must outlive the WR)."""
    return sender.start_data(e.IBV_WR_SEND, data, wr_id=wr_id)


def srq_shared_by_qps(ctx):
    """Three QPs send four messages each to three QPs on one SRQ: twelve WQEs, each taken once,
    each completion naming the QP that received it, every byte where its WQE said."""
    srq, receivers = shared_side(ctx, max_wr=16, count=3)
    senders = [Side(ctx) for _ in receivers]
    for s, r in zip(senders, receivers):
        connected(ctx, s, r)
    attr = srq.query()
    expect(attr.max_wr >= 16 and attr.max_sge >= 2 and attr.srq_limit == 0,
           f"query: max_wr {attr.max_wr} max_sge {attr.max_sge} srq_limit {attr.srq_limit}")
    qp_attr, _ = receivers[0].qp.query(e.IBV_QP_CAP)
    expect(qp_attr.cap.max_recv_wr == 0 and qp_attr.cap.max_recv_sge == 0,
           f"an attached QP reports an RQ of {qp_attr.cap.max_recv_wr} WRs, {qp_attr.cap.max_recv_sge} SGEs")
    bufs = Buffers(receivers[0], 12)
    for wr_id in range(12):
        bufs.post(srq, wr_id)
    # An attached QP has no receive queue of its own.
    got = errno_of(lambda: receivers[0].qp.post_recv(RecvWR(wr_id=99, num_sge=1, sg=[SGE(bufs.mr.buf, 8, bufs.mr.lkey)])))
    expect(got == errno.EINVAL, f"ibv_post_recv on a QP attached to an SRQ: errno {got}, want EINVAL")
    keep = []
    for round_ in range(4):
        for i, s in enumerate(senders):
            keep.append(send(s, pattern(MSG, 16 * i + round_), wr_id=round_))
    for i, s in enumerate(senders):
        for round_ in range(4):
            expect_status(s.completion(f"sender {i} SEND {round_}"), e.IBV_WC_SUCCESS, f"sender {i} SEND")
    qpn_to_sender = {r.qp.qp_num: i for i, r in enumerate(receivers)}
    seen, per_qp = set(), {}
    cq = receivers[0].cq
    for _ in range(12):
        wc = receivers[0].completion("a receive on the SRQ")
        expect_status(wc, e.IBV_WC_SUCCESS, "receive")
        expect(wc.opcode == e.IBV_WC_RECV and wc.byte_len == MSG, f"receive: opcode {wc.opcode} byte_len {wc.byte_len}")
        expect(wc.wr_id not in seen and 0 <= wc.wr_id < 12, f"wr_id {wc.wr_id} completed twice or is unknown")
        seen.add(wc.wr_id)
        expect(wc.qp_num in qpn_to_sender, f"completion names QP {wc.qp_num:#x}, not a receiver")
        sender = qpn_to_sender[wc.qp_num]
        # Each QP's messages arrive in order: its n-th completion holds its sender's n-th message.
        n = per_qp.get(wc.qp_num, 0)
        per_qp[wc.qp_num] = n + 1
        want = pattern(MSG, 16 * sender + n)
        got = bufs.read(wc.wr_id, MSG)
        expect(got == want, f"wr_id {wc.wr_id} (QP {sender}, message {n}): data differs at byte {first_diff(got, want)}")
        guard = bufs.mr.read(64, wc.wr_id * (MSG + 64) + MSG)
        expect(guard == bytes([0xEE]) * 64, f"wr_id {wc.wr_id}: bytes after the buffer were written")
    expect(sorted(per_qp.values()) == [4, 4, 4], f"messages per receiving QP: {per_qp}")
    n, _ = cq.poll(1)
    expect(n == 0, "a thirteenth receive completion appeared")
    del keep


def srq_limit_event(ctx):
    """Armed at 8 with 10 WQEs posted, the SRQ stays quiet while 8 are left and raises
    IBV_EVENT_SRQ_LIMIT_REACHED once 7 are; the limit then reads 0 (disarmed). A limit above
    the SRQ's size is EINVAL."""
    srq, (receiver,) = shared_side(ctx, max_wr=16, count=1)
    sender = Side(ctx)
    connected(ctx, sender, receiver)
    size = srq.query().max_wr
    got = errno_of(lambda: srq.modify(SrqAttr(srq_limit=size + 1), e.IBV_SRQ_LIMIT))
    expect(got == errno.EINVAL, f"a limit of {size + 1} on an SRQ of {size}: errno {got}, want EINVAL")
    bufs = Buffers(receiver, 10)
    for wr_id in range(10):
        bufs.post(srq, wr_id)
    srq.modify(SrqAttr(srq_limit=8), e.IBV_SRQ_LIMIT)
    expect(srq.query().srq_limit == 8, f"armed limit reads {srq.query().srq_limit}, want 8")
    keep = []
    for i in range(2):
        keep.append(send(sender, pattern(MSG, i), wr_id=i))
        expect_status(sender.completion(f"SEND {i}"), e.IBV_WC_SUCCESS, "SEND")
        expect_status(receiver.completion(f"receive {i}"), e.IBV_WC_SUCCESS, "receive")
    # (The event disarms the limit: still armed means it was not raised. Waiting for an event
    # that must not come would block the process: pyverbs waits for one holding the GIL.)
    expect(srq.query().srq_limit == 8, f"with 8 WQEs left the limit reads {srq.query().srq_limit}: raised early")
    keep.append(send(sender, pattern(MSG, 2), wr_id=2))
    expect_status(sender.completion("SEND 2"), e.IBV_WC_SUCCESS, "SEND")
    expect_status(receiver.completion("receive 2"), e.IBV_WC_SUCCESS, "receive")
    wait_event(ctx, e.IBV_EVENT_SRQ_LIMIT_REACHED, timeout=10)
    expect(srq.query().srq_limit == 0, f"after the event the limit reads {srq.query().srq_limit}, want 0")
    del keep


def srq_resize(ctx):
    """ibv_modify_srq(IBV_SRQ_MAX_WR) with WQEs posted: with 8 posted across the end of the
    ring (slots 12..15 and 0..3 of 16), a shrink below 8, or below the armed limit of 12 (to 9,
    which would round up to 16), is EINVAL and changes nothing; grown to 64 the SRQ holds 48
    WQEs (3x its old size), which one QP's 48 messages fill in posting order, every byte
    checked; shrunk to 8 while empty it takes 8 and refuses a ninth (ENOMEM); a resize and a
    limit in one call both apply. Each resize leaves the process one mapping of the ring."""
    from ring_scribble import uverbs_mappings
    srq, (receiver,) = shared_side(ctx, max_wr=16, count=1)
    sender = Side(ctx)
    connected(ctx, sender, receiver)
    expect(ctx.query_device().device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE,
           "the device does not advertise IBV_DEVICE_SRQ_RESIZE")
    size = srq.query().max_wr
    bufs = Buffers(receiver, 70)
    keep = []
    received = 0

    def exchange(wr_ids):
        nonlocal received
        for wr_id in wr_ids:
            keep.append(send(sender, pattern(MSG, 100 + received), wr_id=received))
            expect_status(sender.completion(f"SEND {received}"), e.IBV_WC_SUCCESS, "SEND")
            wc = receiver.completion(f"receive {received}")
            expect_status(wc, e.IBV_WC_SUCCESS, "receive")
            expect(wc.wr_id == wr_id, f"message {received} took WQE {wc.wr_id}, want {wr_id} (posting order)")
            got = bufs.read(wr_id, MSG)
            want = pattern(MSG, 100 + received)
            expect(got == want, f"message {received} into WQE {wr_id}: data differs at byte {first_diff(got, want)}")
            received += 1

    def resize(max_wr, mask=e.IBV_SRQ_MAX_WR, **more):
        before = uverbs_mappings()
        srq.modify(SrqAttr(max_wr=max_wr, **more), mask)
        after = uverbs_mappings()
        expect(len(after) == len(before), f"resizing to {max_wr}: {len(before)} mappings of the device before, {len(after)} after")

    expect(size == 16, f"an SRQ for 16 WQEs has {size} slots")
    for wr_id in range(14):
        bufs.post(srq, wr_id)
    exchange(range(12))
    for wr_id in range(14, 20):
        bufs.post(srq, wr_id)  # 8 posted, from slot 12 across the end to slot 3
    got = errno_of(lambda: srq.modify(SrqAttr(max_wr=4), e.IBV_SRQ_MAX_WR))
    expect(got == errno.EINVAL, f"shrinking to 4 with 8 WQEs posted: errno {got}, want EINVAL")
    srq.modify(SrqAttr(srq_limit=12), e.IBV_SRQ_LIMIT)
    got = errno_of(lambda: srq.modify(SrqAttr(max_wr=9), e.IBV_SRQ_MAX_WR))
    expect(got == errno.EINVAL, f"resizing to 9, below the armed limit of 12: errno {got}, want EINVAL")
    max_srq_wr = ctx.query_device().max_srq_wr
    got = errno_of(lambda: srq.modify(SrqAttr(max_wr=max_srq_wr + 1), e.IBV_SRQ_MAX_WR))
    expect(got == errno.EINVAL, f"growing past max_srq_wr {max_srq_wr}: errno {got}, want EINVAL")
    attr = srq.query()
    expect(attr.max_wr == size and attr.srq_limit == 12,
           f"after refused resizes: max_wr {attr.max_wr} limit {attr.srq_limit}, want {size} and 12")
    srq.modify(SrqAttr(srq_limit=0), e.IBV_SRQ_LIMIT)
    resize(64)
    expect(srq.query().max_wr >= 64, f"grown to 64, the SRQ reads max_wr {srq.query().max_wr}")
    for wr_id in range(20, 60):
        bufs.post(srq, wr_id)
    exchange(range(12, 60))
    resize(8)
    expect(srq.query().max_wr == 8, f"shrunk to 8, the SRQ reads max_wr {srq.query().max_wr}")
    for wr_id in range(60, 68):
        bufs.post(srq, wr_id)
    got = errno_of(lambda: bufs.post(srq, 68))
    expect(got == errno.ENOMEM, f"a ninth WQE on an SRQ of 8: errno {got}, want ENOMEM")
    resize(32, e.IBV_SRQ_MAX_WR | e.IBV_SRQ_LIMIT, srq_limit=20)
    attr = srq.query()
    expect(attr.max_wr == 32 and attr.srq_limit == 20, f"resized with a limit: max_wr {attr.max_wr} limit {attr.srq_limit}, want 32 and 20")
    srq.modify(SrqAttr(srq_limit=0), e.IBV_SRQ_LIMIT)
    exchange(range(60, 68))
    n, _ = receiver.cq.poll(1)
    expect(n == 0, "a receive completion too many")
    keep.clear()


def srq_rnr_waits_for_a_post(ctx):
    """A SEND to an empty SRQ is answered with RNR NAKs until a WQE is posted to the SRQ; then
    it lands, intact."""
    srq, (receiver,) = shared_side(ctx, max_wr=4, count=1)
    sender = Side(ctx)
    connected(ctx, sender, receiver, rnr_retry=7)
    rnr_before = port_counter("rcvd_rnr_err")
    data = pattern(MSG, 40)
    keep = send(sender, data)
    deadline = time.time() + 20
    while port_counter("rcvd_rnr_err") == rnr_before and time.time() < deadline:
        time.sleep(0.05)
    expect(port_counter("rcvd_rnr_err") > rnr_before, "no RNR NAK reached the sender")
    bufs = Buffers(receiver, 1)
    bufs.post(srq, 0)
    expect_status(sender.completion("the SEND"), e.IBV_WC_SUCCESS, "SEND after RNR")
    wc = receiver.completion("the receive")
    expect_status(wc, e.IBV_WC_SUCCESS, "receive")
    got = bufs.read(0, MSG)
    expect(got == data, f"data differs at byte {first_diff(got, data)}")
    del keep


def srq_last_wqe_and_destroy(ctx):
    """A QP on the SRQ moved to ERR raises IBV_EVENT_QP_LAST_WQE_REACHED and leaves the SRQ's
    WQEs to the other QP, which goes on receiving; then the QPs and the SRQ are destroyed."""
    srq, receivers = shared_side(ctx, max_wr=8, count=2)
    senders = [Side(ctx) for _ in receivers]
    for s, r in zip(senders, receivers):
        connected(ctx, s, r)
    bufs = Buffers(receivers[0], 4)
    for wr_id in range(4):
        bufs.post(srq, wr_id)
    receivers[0].qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    wait_event(ctx, e.IBV_EVENT_QP_LAST_WQE_REACHED, timeout=10)
    n, wcs = receivers[0].cq.poll(4)
    expect(n == 0, f"the SRQ's WQEs were flushed by one QP's error (status {wcs[0].status if n else None})")
    keep = []
    for i in range(4):
        keep.append(send(senders[1], pattern(MSG, 50 + i), wr_id=i))
    ids = set()
    for i in range(4):
        expect_status(senders[1].completion(f"SEND {i}"), e.IBV_WC_SUCCESS, "SEND")
        wc = receivers[1].completion(f"receive {i}")
        expect_status(wc, e.IBV_WC_SUCCESS, "receive")
        expect(wc.qp_num == receivers[1].qp.qp_num, f"completion names QP {wc.qp_num:#x}")
        got = bufs.read(wc.wr_id, MSG)
        expect(got == pattern(MSG, 50 + i), f"message {i}: data differs at byte {first_diff(got, pattern(MSG, 50 + i))}")
        ids.add(wc.wr_id)
    expect(ids == {0, 1, 2, 3}, f"wr_ids {sorted(ids)}")
    # (pyverbs destroys an SRQ's QPs before it: the core's EBUSY for an SRQ in use is not
    # reachable from here.)
    for r in receivers:
        r.qp.close()
    srq.close()
    del keep


def srq_ud_short_wqe_completes_in_error(ctx):
    """UD on an SRQ: a datagram too long for the WQE it was given completes that WQE with
    LOC_LEN_ERR (kept, it would wait on this QP for good, out of the other QPs' reach) and is
    dropped; the QP runs on, and the SRQ's next WQE takes the next datagram, intact."""
    pd = PD(ctx)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
    rx = UdSide(ctx, pd=pd, srq=srq)
    tx = UdSide(ctx)
    index, gid = gid_index(ctx, True)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    mr.write(bytes([0xEE]) * 4096, 4096, 0)
    srq.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 100, mr.lkey)]))
    srq.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 1024, 2048, mr.lkey)]))
    ah = tx.ah_to(index, gid)
    keep = [tx.send(ah, rx.qp.qp_num, pattern(500, 1))]
    sent_ok(tx, "the first datagram")
    wc = rx.completion("the short WQE")
    expect(wc.wr_id == 1 and wc.status == e.IBV_WC_LOC_LEN_ERR,
           f"short WQE: wr_id {wc.wr_id} status {wc.status}, want 1 and LOC_LEN_ERR")
    expect(mr.read(100, 0) == bytes([0xEE]) * 100, "the short WQE's buffer was written")
    keep.append(tx.send(ah, rx.qp.qp_num, pattern(500, 2)))
    sent_ok(tx, "the second datagram")
    wc = rx.completion("the long WQE")
    expect_status(wc, e.IBV_WC_SUCCESS, "long WQE")
    expect(wc.wr_id == 2 and wc.byte_len == GRH + 500, f"long WQE: wr_id {wc.wr_id} byte_len {wc.byte_len}")
    got = mr.read(500, 1024 + GRH)
    expect(got == pattern(500, 2), f"datagram data differs at byte {first_diff(got, pattern(500, 2))}")
    attr, _ = rx.qp.query(e.IBV_QP_STATE)
    expect(attr.qp_state == e.IBV_QPS_RTS, f"the UD QP is in state {attr.qp_state}, not RTS")
    del keep


def srq_indices_scribbled(ctx):
    """Garbage in the mapped SRQ's producer index (behind the provider's back): the QP that
    next takes from it fails (IBV_EVENT_QP_FATAL), the SRQ's owner gets IBV_EVENT_SRQ_ERR, and
    nothing else is hurt (the harness checks dmesg)."""
    from ring_scribble import BROKEN, PRODUCER, u32, uverbs_mappings
    first = Side(ctx, cqe=256)
    before = uverbs_mappings()
    srq = SRQ(first.pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=2)))
    new = [a for a in uverbs_mappings() if a not in before]
    expect(len(new) == 1, f"creating the SRQ added {len(new)} mappings of the device, not 1")
    srq_ring = new[0]
    receiver = Side(ctx, pd=first.pd, cq=first.cq, srq=srq)
    first.qp.close()
    sender = Side(ctx)
    connected(ctx, sender, receiver)
    bufs = Buffers(receiver, 1)
    bufs.post(srq, 0)
    u32(srq_ring + PRODUCER).value = BROKEN
    keep = send(sender, pattern(MSG, 60))
    wait_event(ctx, e.IBV_EVENT_SRQ_ERR, timeout=30)
    wait_event(ctx, e.IBV_EVENT_QP_FATAL, timeout=30)
    attr, _ = receiver.qp.query(e.IBV_QP_STATE)
    expect(attr.qp_state == e.IBV_QPS_ERR, f"the receiving QP is in state {attr.qp_state}, not ERR")
    del keep


CHECKS = {
    "srq_shared_by_qps": srq_shared_by_qps,
    "srq_limit_event": srq_limit_event,
    "srq_resize": srq_resize,
    "srq_rnr_waits_for_a_post": srq_rnr_waits_for_a_post,
    "srq_last_wqe_and_destroy": srq_last_wqe_and_destroy,
    "srq_ud_short_wqe_completes_in_error": srq_ud_short_wqe_completes_in_error,
    "srq_indices_scribbled": srq_indices_scribbled,
}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
