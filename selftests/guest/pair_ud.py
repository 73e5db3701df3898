"""UD between two hosts, checked byte for byte (pyverbs): the tools (ibv_ud_pingpong, perftest)
do not look at the bytes they move, this does.

The client sends datagrams of 1 byte to the path MTU, with and without immediate data, through
an address handle on the server's IPv4 GID. The server checks each: the payload behind the
40-byte GRH, the GRH's addresses (the client's and its own), the completion's length, source QP
and flags. Then it echoes each back through an address handle made from the completion
(ibv_create_ah_from_wc), and the client checks the echoes the same way. Works with any UD
provider on either end (rxe_rs, rdma_rxe).

Usage: pair_ud.py server|client DEVICE PEER_IP PORT
Prints "ok NAME" or "not ok NAME: why": the server reports datagrams_intact, the client
echoes_intact.
"""
import random
import sys
import time

from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

from pair_data import COMPLETION_TIMEOUT_S, Failed, first_diff, open_channel, peer_gid, report
from verbs import ipv4_gid_index

GRH = 40
QKEY = 0x0BADCAFE
IMM = 0x01020304


def payload(i, n):
    return random.Random(1000 + i).randbytes(n)


def sizes(mtu):
    """(size, immediate) of each datagram."""
    return [(n, IMM + i if i % 2 else None) for i, n in enumerate((1, 2, 100, 511, 512, mtu - 1, mtu))]


class End:
    def __init__(self, device):
        self.ctx = Context(name=device)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        cap = QPCap(max_send_wr=32, max_recv_wr=32, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq, cap=cap))
        init = QPAttr(qp_state=e.IBV_QPS_INIT)
        init.pkey_index, init.port_num, init.qkey = 0, 1, QKEY
        self.qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        self.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        rts = QPAttr(qp_state=e.IBV_QPS_RTS)
        rts.sq_psn = 0
        self.qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
        self.gid_index, self.gid = ipv4_gid_index(self.ctx)
        self.mtu = 128 << self.ctx.query_port(1).active_mtu
        self.slot = self.mtu + GRH
        self.count = len(sizes(self.mtu))
        self.rx = MR(self.pd, self.slot * self.count, e.IBV_ACCESS_LOCAL_WRITE)
        self.tx = MR(self.pd, self.mtu * self.count, e.IBV_ACCESS_LOCAL_WRITE)

    def describe(self):
        return {"qpn": self.qp.qp_num, "gid": str(self.gid), "mtu": self.mtu}

    def post_receives(self):
        self.rx.write(b"\xee" * (self.slot * self.count), self.slot * self.count, 0)
        for i in range(self.count):
            self.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(self.rx.buf + i * self.slot, self.slot, self.rx.lkey)]))

    def send(self, i, n, imm, ah, qpn):
        self.tx.write(payload(i, n), n, i * self.mtu)
        opcode = e.IBV_WR_SEND if imm is None else e.IBV_WR_SEND_WITH_IMM
        wr = SendWR(wr_id=100 + i, opcode=opcode, num_sge=1, sg=[SGE(self.tx.buf + i * self.mtu, n, self.tx.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED, imm_data=imm or 0)
        wr.set_wr_ud(ah, qpn, QKEY)
        self.qp.post_send(wr)

    def poll(self, count, what, want_recv):
        """`count` completions of one kind (receives or sends), all SUCCESS."""
        got, deadline = [], time.time() + COMPLETION_TIMEOUT_S
        while len(got) < count:
            n, wcs = self.cq.poll(1)
            if n:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    raise Failed(f"{what}: wr {wc.wr_id} completed with status {wc.status}")
                if (wc.opcode == e.IBV_WC_RECV) != want_recv:
                    continue  # a completion of the other kind, counted where it is waited for
                got.append(wc)
            elif time.time() > deadline:
                raise Failed(f"{what}: {len(got)} of {count} in {COMPLETION_TIMEOUT_S} s")
            else:
                time.sleep(0.002)
        return sorted(got, key=lambda wc: wc.wr_id)

    def check_received(self, wcs, peer, mtu):
        """Each receive against what `peer` sent; returns what is wrong."""
        bad = []
        want_src, want_dst = gid_v4(peer["gid"]), gid_v4(str(self.gid))
        for wc in wcs:
            n, imm = sizes(mtu)[wc.wr_id]
            raw = self.rx.read(self.slot, wc.wr_id * self.slot)
            grh, got = raw[:GRH], raw[GRH:GRH + n]
            if wc.byte_len != n + GRH:
                bad.append(f"datagram {wc.wr_id}: byte_len {wc.byte_len}, want {n + GRH}")
            elif wc.src_qp != peer["qpn"]:
                bad.append(f"datagram {wc.wr_id}: src_qp {wc.src_qp:#x}, want {peer['qpn']:#x}")
            elif not wc.wc_flags & e.IBV_WC_GRH:
                bad.append(f"datagram {wc.wr_id}: no IBV_WC_GRH")
            elif (imm is not None) != bool(wc.wc_flags & e.IBV_WC_WITH_IMM) or (imm is not None and wc.imm_data != imm):
                bad.append(f"datagram {wc.wr_id}: immediate {wc.imm_data:#x} flags {wc.wc_flags:#x}, want {imm}")
            elif grh[20] != 0x45 or grh[32:36] != want_src or grh[36:40] != want_dst:
                bad.append(f"datagram {wc.wr_id}: GRH {grh.hex()} is not the IPv4 header from the peer to us")
            elif got != payload(wc.wr_id, n):
                bad.append(f"datagram {wc.wr_id} ({n} B): {first_diff(got, payload(wc.wr_id, n))}")
            elif raw[GRH + n:] != b"\xee" * (self.slot - GRH - n):
                bad.append(f"datagram {wc.wr_id}: bytes past the message were written")
        return bad


def gid_v4(text):
    return bytes.fromhex(text.replace(":", ""))[12:]


def server(end, chan):
    peer = chan.recv()
    chan.send(**end.describe())
    mtu = min(end.mtu, peer["mtu"])

    def datagrams_intact():
        end.post_receives()
        chan.send(ready=True)
        wcs = end.poll(len(sizes(mtu)), "receives", True)
        bad = end.check_received(wcs, peer, mtu)
        chan.send(ok=not bad)
        if bad:
            raise Failed("; ".join(bad))
        # Echo each through an AH made from its completion and GRH.
        chan.recv()  # the client posted its receives
        ahs = []
        for wc in wcs:
            n, imm = sizes(mtu)[wc.wr_id]
            ah = AH(end.pd, wc=wc, grh=end.rx.buf + wc.wr_id * end.slot, port_num=1)
            ahs.append(ah)
            end.send(wc.wr_id, n, imm, ah, wc.src_qp)
        end.poll(len(wcs), "echo sends", False)
        chan.recv()  # the client is done with them

    if not report("datagrams_intact", datagrams_intact):
        chan.abort("datagrams_intact")
        return False
    return True


def client(end, chan):
    chan.send(**end.describe())
    peer = chan.recv()
    mtu = min(end.mtu, peer["mtu"])

    def echoes_intact():
        ah = AH(end.pd, attr=AHAttr(is_global=1, port_num=1,
                                   gr=GlobalRoute(dgid=peer_gid(peer["gid"]), sgid_index=end.gid_index, hop_limit=64)))
        chan.recv()  # the server posted its receives
        for i, (n, imm) in enumerate(sizes(mtu)):
            end.send(i, n, imm, ah, peer["qpn"])
        end.poll(len(sizes(mtu)), "sends", False)
        if not chan.recv()["ok"]:
            raise Failed("the server received wrong datagrams (see its log)")
        end.post_receives()
        chan.send(ready=True)
        wcs = end.poll(len(sizes(mtu)), "echoes", True)
        chan.send(done=True)
        bad = end.check_received(wcs, peer, mtu)
        if bad:
            raise Failed("; ".join(bad))

    if not report("echoes_intact", echoes_intact):
        chan.abort("echoes_intact")
        return False
    return True


def main():
    role, device, peer_ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    end = End(device)
    chan = open_channel(role, peer_ip, port)
    try:
        passed = (server if role == "server" else client)(end, chan)
    except Failed as err:
        print(f"# stopped: {err}", flush=True)
        passed = False
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
