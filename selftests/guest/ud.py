"""UD QPs and address handles, checked as a user sees them (pyverbs, one process, loopback).

Two UD QPs on one device send to each other through an address handle on the device's own
IPv4 (or IPv6) GID, so every datagram goes through the IP stack and the receive path. Each
check asserts what arrives: the payload byte for byte behind a 40-byte GRH that is the packet's
IP header, the completion's length, source QP, flags and immediate data; and that what must be
dropped (a wrong Q_Key, no receive or one too small) is dropped and counted.

Usage: ud.py DEVICE [CHECK...]   prints "ok NAME" or "not ok NAME: why" per check.
"""
import errno
import socket
import struct
import sys
import time

from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

from rdma_data import Failed, expect, expect_status, first_diff, pattern, run_checks

GRH = 40
QKEY = 0x11111111
GUARD = 0xEE


def gid_index(ctx, want_v4):
    for i in range(32):
        try:
            gid = ctx.query_gid(1, i)
        except Exception:
            continue
        s = str(gid)
        if s == "0000:0000:0000:0000:0000:0000:0000:0000" or s.startswith("fe80"):
            continue
        if s.startswith("0000:0000:0000:0000:0000:ffff:") == want_v4:
            return i, gid
    raise Failed(f"no {'IPv4' if want_v4 else 'IPv6'} GID")


def counter(ctx, name):
    dev = ctx.name
    with open(f"/sys/class/infiniband/{dev}/ports/1/hw_counters/{name}") as f:
        return int(f.read())


def mtu_bytes(ctx):
    return 128 << ctx.query_port(1).active_mtu


class UdSide:
    """One end: a PD, a CQ, a UD QP in RTS with Q_Key `qkey` (receiving from `srq` if given),
    and a receive buffer."""

    def __init__(self, ctx, qkey=QKEY, pd=None, wr_api=False, buf=8192, srq=None, wrs=16):
        self.ctx = ctx
        self.pd = pd or PD(ctx)
        self.cq = CQ(ctx, max(64, 2 * wrs))
        cap = QPCap(max_send_wr=wrs, max_recv_wr=wrs, max_send_sge=2, max_recv_sge=2)
        if wr_api:
            attr = QPInitAttrEx(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=cap, pd=self.pd,
                                comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                send_ops_flags=e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM)
            self.qp = QPEx(ctx, attr)
        else:
            self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, srq=srq, cap=cap))
        init = QPAttr(qp_state=e.IBV_QPS_INIT)
        init.pkey_index, init.port_num, init.qkey = 0, 1, qkey
        self.qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        self.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        rts = QPAttr(qp_state=e.IBV_QPS_RTS)
        rts.sq_psn = 0x100
        self.qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        self.buf = MR(self.pd, buf, e.IBV_ACCESS_LOCAL_WRITE)
        self.buf_len = buf
        self.buf.write(bytes([GUARD]) * buf, buf, 0)

    def ah_to(self, gid_index, gid, pd=None):
        attr = AHAttr(is_global=1, port_num=1, gr=GlobalRoute(dgid=gid, sgid_index=gid_index, hop_limit=64))
        return AH(pd or self.pd, attr=attr)

    def post_recv(self, length=None, wr_id=100):
        length = self.buf_len if length is None else length
        self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(self.buf.buf, length, self.buf.lkey)]))

    def send(self, ah, peer_qpn, data, qkey=QKEY, imm=None, wr_id=1):
        """Posts one signaled SEND of `data` (from a new MR, returned: it must outlive the WR)."""
        src = MR(self.pd, max(len(data), 1), e.IBV_ACCESS_LOCAL_WRITE)
        src.write(data, len(data), 0)
        opcode = e.IBV_WR_SEND if imm is None else e.IBV_WR_SEND_WITH_IMM
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(src.buf, len(data), src.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED, imm_data=imm or 0)
        wr.set_wr_ud(ah, peer_qpn, qkey)
        self.qp.post_send(wr)
        return src

    def completion(self, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            n, wcs = self.cq.poll(1)
            if n:
                return wcs[0]
            time.sleep(0.01)
        raise Failed(f"no completion for {what} in {timeout} s")

    def nothing(self, what, wait=1.0):
        time.sleep(wait)
        n, wcs = self.cq.poll(1)
        expect(n == 0, f"{what}: a completion arrived (status {wcs[0].status if n else ''})")


def sent_ok(side, what):
    wc = side.completion(what)
    expect_status(wc, e.IBV_WC_SUCCESS, what)
    expect(wc.opcode == e.IBV_WC_SEND, f"{what}: send completion opcode {wc.opcode}")


def check_arrival(rx, tx, data, imm=None, v4=True, gid=None):
    """The receive completion and buffer of one datagram `data` from `tx`."""
    wc = rx.completion(f"receive of {len(data)} bytes")
    expect_status(wc, e.IBV_WC_SUCCESS, "receive")
    expect(wc.opcode == e.IBV_WC_RECV, f"receive opcode {wc.opcode}")
    expect(wc.byte_len == len(data) + GRH, f"byte_len {wc.byte_len}, want {len(data) + GRH} (payload + GRH)")
    expect(wc.src_qp == tx.qp.qp_num, f"src_qp {wc.src_qp:#x}, want {tx.qp.qp_num:#x}")
    expect(wc.wc_flags & e.IBV_WC_GRH, f"wc_flags {wc.wc_flags:#x} without IBV_WC_GRH")
    if imm is None:
        expect(not wc.wc_flags & e.IBV_WC_WITH_IMM, "IBV_WC_WITH_IMM without immediate data")
    else:
        expect(wc.wc_flags & e.IBV_WC_WITH_IMM and wc.imm_data == imm,
               f"immediate {wc.imm_data:#x} flags {wc.wc_flags:#x}, want {imm:#x}")
    got = rx.buf.read(rx.buf_len, 0)
    payload = got[GRH:GRH + len(data)]
    expect(payload == data, f"payload differs at byte {first_diff(payload, data)}")
    expect(got[GRH + len(data):] == bytes([GUARD]) * (rx.buf_len - GRH - len(data)),
           "bytes past the message were written")
    grh = got[:GRH]
    if v4:
        expect(grh[:20] == bytes(20), "IPv4: the GRH's first 20 bytes are not zero")
        ip = grh[20:]
        expect(ip[0] == 0x45 and ip[9] == 17, f"IPv4: not a UDP IPv4 header: {ip.hex()}")
        expect(ip[12:16] == ip[16:20] == gid, f"IPv4 addresses {ip[12:16].hex()} -> {ip[16:20].hex()}, want {gid.hex()}")
    else:
        expect(grh[0] >> 4 == 6 and grh[6] == 17, f"IPv6: not a UDP IPv6 header: {grh.hex()}")
        expect(grh[8:24] == grh[24:40] == gid, f"IPv6 addresses {grh[8:24].hex()} -> {grh[24:40].hex()}")
    return wc


def gid_bytes(gid, v4):
    b = bytes.fromhex(str(gid).replace(":", ""))
    return b[12:] if v4 else b


def sizes(ctx, v4):
    """SEND and SEND WITH IMMEDIATE of 0, 1, 1000 bytes and the port MTU, both ways."""
    a, b = UdSide(ctx), UdSide(ctx)
    index, gid = gid_index(ctx, v4)
    to_b, to_a = a.ah_to(index, gid), b.ah_to(index, gid)
    for n in (0, 1, 1000, mtu_bytes(ctx)):
        for imm in (None, 0x12345678):
            for tx, rx, ah in ((a, b, to_b), (b, a, to_a)):
                rx.buf.write(bytes([GUARD]) * rx.buf_len, rx.buf_len, 0)
                rx.post_recv()
                data = pattern(n, n + (imm or 0) % 251)
                _src = tx.send(ah, rx.qp.qp_num, data, imm=imm)
                sent_ok(tx, f"UD SEND of {n}")
                check_arrival(rx, tx, data, imm, v4, gid_bytes(gid, v4))


def ud_ipv4_sizes(ctx):
    sizes(ctx, True)


def ud_ipv6_sizes(ctx):
    sizes(ctx, False)


def ud_wrong_qkey_dropped(ctx):
    """A datagram with another Q_Key than the QP's is dropped (rcvd_bad_qkey); the receive
    stays posted for the next one that has it."""
    a, b = UdSide(ctx), UdSide(ctx)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    b.post_recv()
    before = counter(ctx, "rcvd_bad_qkey")
    _src = a.send(ah, b.qp.qp_num, b"wrong key", qkey=QKEY + 1)
    sent_ok(a, "the SEND with a wrong Q_Key")
    b.nothing("a datagram with the wrong Q_Key")
    expect(counter(ctx, "rcvd_bad_qkey") == before + 1, "rcvd_bad_qkey did not move")
    data = pattern(100, 3)
    _src2 = a.send(ah, b.qp.qp_num, data)
    sent_ok(a, "the SEND with the right Q_Key")
    check_arrival(b, a, data, None, True, gid_bytes(gid, True))


def ud_qkey_from_qp(ctx):
    """A send WR whose Q_Key has bit 31 set sends the QP's own Q_Key (IBA 10.2.5)."""
    a, b = UdSide(ctx), UdSide(ctx)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    b.post_recv()
    data = pattern(64, 4)
    _src = a.send(ah, b.qp.qp_num, data, qkey=0x80000000)
    sent_ok(a, "the SEND naming the QP's Q_Key")
    check_arrival(b, a, data, None, True, gid_bytes(gid, True))


def ud_no_or_small_receive_dropped(ctx):
    """Without a receive, or with one too small for payload + GRH, a datagram is dropped and
    counted (rcvd_ud_dropped); the small receive stays posted and takes one that fits."""
    a, b = UdSide(ctx), UdSide(ctx)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    before = counter(ctx, "rcvd_ud_dropped")
    _s1 = a.send(ah, b.qp.qp_num, b"nobody listens")
    sent_ok(a, "the SEND to a QP without receives")
    b.nothing("a datagram without a receive")
    b.post_recv(length=GRH + 10)
    _s2 = a.send(ah, b.qp.qp_num, bytes(11))
    sent_ok(a, "the SEND one byte too long for the receive")
    b.nothing("a datagram too long for the receive")
    expect(counter(ctx, "rcvd_ud_dropped") == before + 2, "rcvd_ud_dropped did not move twice")
    data = pattern(10, 5)
    _s3 = a.send(ah, b.qp.qp_num, data)
    sent_ok(a, "the SEND that fits")
    check_arrival(b, a, data, None, True, gid_bytes(gid, True))


def ud_longer_than_mtu(ctx):
    """A UD SEND longer than the MTU completes without being sent (sent_ud_too_long)."""
    a, b = UdSide(ctx, buf=16384), UdSide(ctx, buf=16384)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    b.post_recv()
    before = counter(ctx, "sent_ud_too_long")
    _src = a.send(ah, b.qp.qp_num, bytes(mtu_bytes(ctx) + 1))
    sent_ok(a, "the SEND longer than the MTU")
    b.nothing("a datagram longer than the MTU")
    expect(counter(ctx, "sent_ud_too_long") == before + 1, "sent_ud_too_long did not move")


def ud_ah_of_another_pd(ctx):
    """An AH of another PD than the QP's fails the WQE (LOC_QP_OP_ERR), nothing is sent."""
    a, b = UdSide(ctx), UdSide(ctx)
    index, gid = gid_index(ctx, True)
    foreign = a.ah_to(index, gid, pd=PD(ctx))
    b.post_recv()
    _src = a.send(foreign, b.qp.qp_num, b"x")
    wc = a.completion("the SEND through a foreign AH")
    expect_status(wc, e.IBV_WC_LOC_QP_OP_ERR, "the SEND through another PD's AH")
    b.nothing("a datagram through another PD's AH")


def ud_reply_from_wc(ctx):
    """ibv_create_ah_from_wc on a received datagram (its GRH) reaches the sender back."""
    a, b = UdSide(ctx), UdSide(ctx)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    b.post_recv()
    a.post_recv()
    _src = a.send(ah, b.qp.qp_num, b"ping")
    sent_ok(a, "ping")
    wc = check_arrival(b, a, b"ping", None, True, gid_bytes(gid, True))
    # pyverbs 44 takes the GRH's address: the start of the receive buffer.
    back = AH(b.pd, wc=wc, grh=b.buf.buf, port_num=1)
    a.buf.write(bytes([GUARD]) * a.buf_len, a.buf_len, 0)
    _src2 = b.send(back, wc.src_qp, b"pong")
    sent_ok(b, "pong")
    check_arrival(a, b, b"pong", None, True, gid_bytes(gid, True))


def ud_wr_api(ctx):
    """The ibv_wr_* API: ibv_wr_send_imm and ibv_wr_set_ud_addr."""
    a, b = UdSide(ctx, wr_api=True), UdSide(ctx)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    b.post_recv()
    data = pattern(300, 6)
    src = MR(a.pd, len(data), e.IBV_ACCESS_LOCAL_WRITE)
    src.write(data, len(data), 0)
    qp = a.qp
    qp.wr_start()
    qp.wr_id, qp.wr_flags = 7, e.IBV_SEND_SIGNALED
    qp.wr_send_imm(0xABCDEF01)
    qp.wr_set_ud_addr(ah, b.qp.qp_num, QKEY)
    qp.wr_set_sge(SGE(src.buf, len(data), src.lkey))
    qp.wr_complete()
    sent_ok(a, "ibv_wr_send_imm")
    # pyverbs passes ibv_wr_send_imm's immediate through htonl, unlike SendWR's.
    check_arrival(b, a, data, socket.htonl(0xABCDEF01), True, gid_bytes(gid, True))


def ud_batch_of_1000(ctx):
    """1000 signaled UD SENDs posted in one ibv_post_send list on a QP of max_send_wr 1024,
    more than the kernel takes copies of at a time and than one run sends: every one is sent,
    completes and arrives, each receive holding its own datagram (before, one doorbell sent
    the first 256 and the rest waited for a post that never came)."""
    count, slot = 1000, 64
    a, b = UdSide(ctx, wrs=1024), UdSide(ctx, wrs=1024, buf=count * slot)
    index, gid = gid_index(ctx, True)
    ah = a.ah_to(index, gid)
    for i in range(count):
        b.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(b.buf.buf + i * slot, slot, b.buf.lkey)]))
    src = MR(a.pd, count * 8, e.IBV_ACCESS_LOCAL_WRITE)
    src.write(b"".join(struct.pack("<Q", 0x5EED0000 + i) for i in range(count)), count * 8, 0)
    wrs = []
    for i in range(count):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src.buf + i * 8, 8, src.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_ud(ah, b.qp.qp_num, QKEY)
        if wrs:
            wrs[-1].next_wr = wr
        wrs.append(wr)
    a.qp.post_send(wrs[0])
    sent, received = set(), set()
    deadline = time.time() + 120
    while (len(sent) < count or len(received) < count) and time.time() < deadline:
        for side, got in ((a, sent), (b, received)):
            n, wcs = side.cq.poll(64)
            for wc in wcs[:n]:
                expect_status(wc, e.IBV_WC_SUCCESS, f"wr {wc.wr_id}")
                got.add(wc.wr_id)
        if not n:
            time.sleep(0.01)
    expect(len(sent) == count, f"{len(sent)} of {count} SENDs completed")
    expect(len(received) == count, f"{len(received)} of {count} datagrams arrived")
    got = b.buf.read(count * slot, 0)
    for i in range(count):
        payload = got[i * slot + GRH:i * slot + GRH + 8]
        expect(payload == struct.pack("<Q", 0x5EED0000 + i), f"receive {i} holds {payload.hex()}")


def ud_query_qp(ctx):
    """ibv_query_qp reports the UD type and the Q_Key set."""
    a = UdSide(ctx, qkey=0x1234)
    attr, init = a.qp.query(e.IBV_QP_QKEY | e.IBV_QP_STATE)
    expect(attr.qkey == 0x1234, f"qkey {attr.qkey:#x}")
    expect(attr.qp_state == e.IBV_QPS_RTS, f"state {attr.qp_state}")
    expect(init.qp_type == e.IBV_QPT_UD, f"type {init.qp_type}")


def ud_controlled_qkey_refused(ctx):
    """Without CAP_NET_RAW (run under `setpriv --bounding-set=-net_raw`), a user QP may not take
    a controlled Q_Key (bit 31, such as QP1's 0x80010000): EPERM."""
    pd, cq = PD(ctx), CQ(ctx, 8)
    cap = QPCap(max_send_wr=2, max_recv_wr=2, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=cap))
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index, init.port_num, init.qkey = 0, 1, 0x80010000
    try:
        qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
    except PyverbsRDMAError as err:
        expect(err.error_code == errno.EPERM, f"errno {err.error_code}, want EPERM")
        return
    raise Failed("a controlled Q_Key was accepted")


CHECKS = {
    "ud_ipv4_sizes": ud_ipv4_sizes,
    "ud_ipv6_sizes": ud_ipv6_sizes,
    "ud_wrong_qkey_dropped": ud_wrong_qkey_dropped,
    "ud_qkey_from_qp": ud_qkey_from_qp,
    "ud_no_or_small_receive_dropped": ud_no_or_small_receive_dropped,
    "ud_longer_than_mtu": ud_longer_than_mtu,
    "ud_ah_of_another_pd": ud_ah_of_another_pd,
    "ud_reply_from_wc": ud_reply_from_wc,
    "ud_wr_api": ud_wr_api,
    "ud_batch_of_1000": ud_batch_of_1000,
    "ud_query_qp": ud_query_qp,
    "ud_controlled_qkey_refused": ud_controlled_qkey_refused,
}

if __name__ == "__main__":
    run_checks(CHECKS, sys.argv[1], sys.argv[2:])
