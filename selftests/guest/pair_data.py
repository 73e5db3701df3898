"""Data integrity of RC transfers between two hosts, checked byte for byte (pyverbs).

The client moves seeded random data into and out of the server's memory: RDMA WRITEs of
multi-packet messages, RDMA READs of multi-packet responses (several outstanding), and SENDs of
sizes from 1 byte to the buffer size into posted receives. After each step the side that holds
the result compares it with what it must be. Meant to run over a lossy, reordering, duplicating
and corrupting link: every byte must still arrive right, and every WR must complete SUCCESS.
Works with any RC provider on either end (rxe_rs, rdma_rxe).

Usage: pair_data.py server|client DEVICE PEER_IP PORT [MIB]
Prints "ok NAME" or "not ok NAME: why" per check: the client reports write_completed,
read_data_intact, send_completed; the server write_data_intact, send_data_intact.
"""
import json
import random
import socket
import subprocess
import sys
import time

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR
import pyverbs.enums as e

from verbs import ipv4_gid_index

CHUNK = 256 * 1024          # bytes per WRITE/READ WR: 256 packets at MTU 1024
OUTSTANDING = 4             # WRs in flight (and max_rd_atomic for the READs)
SEND_SIZES = [1, 4095, 4097, 65536, 65537, CHUNK]
RW = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
COMPLETION_TIMEOUT_S = 300


class Failed(Exception):
    pass


def data(seed, n):
    return random.Random(seed).randbytes(n)


def first_diff(got, want):
    for i, (x, y) in enumerate(zip(got, want)):
        if x != y:
            return f"first difference at byte {i} of {len(want)} (got {x:#04x}, want {y:#04x})"
    return f"length {len(got)} != {len(want)}"


class Channel:
    """JSON lines over the TCP connection that carries the out-of-band exchange."""

    def __init__(self, sock):
        self.sock, self.rfile = sock, sock.makefile("r")

    def send(self, **msg):
        self.sock.sendall((json.dumps(msg) + "\n").encode())

    def abort(self, name):
        try:
            self.send(abort=name)
        except OSError:
            pass  # the peer is gone already

    def recv(self):
        line = self.rfile.readline()
        if not line:
            raise Failed("the peer closed the connection")
        msg = json.loads(line)
        if "abort" in msg:
            raise Failed(f"the peer gave up: {msg['abort']}")
        return msg


class End:
    # What the peer may do to our memory through the QP.
    REMOTE_ACCESS = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ

    def __init__(self, device, size):
        self.ctx = Context(name=device)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.mr = MR(self.pd, size, RW)
        self.gid_index, self.gid = ipv4_gid_index(self.ctx)

    def describe(self):
        return {"qpn": self.qp.qp_num, "gid": str(self.gid), "rkey": self.mr.rkey, "addr": self.mr.buf}

    def connect(self, peer):
        init = QPAttr(qp_state=e.IBV_QPS_INIT)
        init.pkey_index, init.port_num = 0, 1
        init.qp_access_flags = self.REMOTE_ACCESS
        self.qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
        rtr = QPAttr(qp_state=e.IBV_QPS_RTR)
        rtr.path_mtu, rtr.dest_qp_num, rtr.rq_psn = e.IBV_MTU_1024, peer["qpn"], 0
        rtr.max_dest_rd_atomic, rtr.min_rnr_timer = OUTSTANDING, 1
        rtr.ah_attr = AHAttr(is_global=1, port_num=1,
                             gr=GlobalRoute(dgid=peer_gid(peer["gid"]), sgid_index=self.gid_index, hop_limit=64))
        self.qp.modify(rtr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                       | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        rts = QPAttr(qp_state=e.IBV_QPS_RTS)
        # timeout 12 (~17 ms): a lost tail is resent soon; retry_cnt 7 is the most there is.
        rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.sq_psn, rts.max_rd_atomic = 12, 7, 7, 0, OUTSTANDING
        self.qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                       | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    def poll(self, count, what):
        """Waits for `count` completions, all of which must be SUCCESS; returns them."""
        got, deadline = [], time.time() + COMPLETION_TIMEOUT_S
        while len(got) < count:
            n, wcs = self.cq.poll(min(16, count - len(got)))
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_SUCCESS:
                    raise Failed(f"{what}: wr {wc.wr_id} completed with status {wc.status}")
            got.extend(wcs[:n])
            if not n:
                if time.time() > deadline:
                    self.show_state()
                    raise Failed(f"{what}: {len(got)} of {count} completions in {COMPLETION_TIMEOUT_S} s")
                time.sleep(0.002)
        return got

    def show_state(self):
        """Prints where our QP stands, as the driver reports it (rxe_rs reports its requester's
        and responder's state with -dd)."""
        out = subprocess.run(["rdma", "resource", "show", "qp", "lqpn", str(self.qp.qp_num), "-dd"],
                             capture_output=True, text=True).stdout
        print(f"# QP {self.qp.qp_num:#x}: " + " ".join(out.split()), flush=True)

    def rdma(self, opcode, peer, size, what):
        """Moves `size` bytes between our MR and the peer's, CHUNK per WR, OUTSTANDING at once."""
        offsets = list(range(0, size, CHUNK))
        posted = done = 0
        while done < len(offsets):
            while posted < len(offsets) and posted - done < OUTSTANDING:
                off = offsets[posted]
                n = min(CHUNK, size - off)
                wr = SendWR(wr_id=posted, opcode=opcode, num_sge=1, sg=[SGE(self.mr.buf + off, n, self.mr.lkey)],
                            send_flags=e.IBV_SEND_SIGNALED)
                wr.set_wr_rdma(peer["rkey"], peer["addr"] + off)
                self.qp.post_send(wr)
                posted += 1
            done += len(self.poll(1, what))


def peer_gid(text):
    from pyverbs.addr import GID
    return GID(text)


def report(name, fn):
    try:
        fn()
        print(f"ok {name}", flush=True)
        return True
    except Failed as err:
        print(f"not ok {name}: {err}", flush=True)
    except Exception as err:  # a pyverbs error is a failed check, with its text
        print(f"not ok {name}: {type(err).__name__}: {err}", flush=True)
    return False


def server(end, chan, size):
    peer = chan.recv()
    chan.send(**end.describe())
    end.connect(peer)

    def write_data_intact():
        msg = chan.recv()
        want = data(msg["seed"], size)
        got = end.mr.read(size, 0)
        ok = got == want
        chan.send(ok=ok)
        if not ok:
            raise Failed(f"after the client's WRITEs: {first_diff(got, want)}")

    def send_data_intact():
        chan.recv()  # the client is about to send
        # Fill first: the client's READ step below reads this back.
        end.mr.write(data(7, size), size, 0)
        for i, _ in enumerate(SEND_SIZES):
            end.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(end.mr.buf + i * CHUNK, CHUNK, end.mr.lkey)]))
        chan.send(ready=True)
        wcs = sorted(end.poll(len(SEND_SIZES), "receives"), key=lambda wc: wc.wr_id)
        bad = []
        for wc in wcs:
            n = SEND_SIZES[wc.wr_id]
            got, want = end.mr.read(n, wc.wr_id * CHUNK), data(100 + wc.wr_id, n)
            if wc.byte_len != n:
                bad.append(f"message {wc.wr_id}: byte_len {wc.byte_len}, sent {n}")
            elif got != want:
                bad.append(f"message {wc.wr_id} ({n} B): {first_diff(got, want)}")
        chan.send(ok=not bad)
        if bad:
            raise Failed("; ".join(bad))
        # Restore what the receives overwrote, for the READ step.
        end.mr.write(data(7, size), size, 0)
        chan.send(ready=True)

    for name, check in (("write_data_intact", write_data_intact), ("send_data_intact", send_data_intact)):
        if not report(name, check):
            chan.abort(name)
            return False
    chan.recv()  # the client is done: keep the QP until then
    return True


def client(end, chan, size):
    chan.send(**end.describe())
    peer = chan.recv()
    end.connect(peer)

    def write_completed():
        end.mr.write(data(1, size), size, 0)
        end.rdma(e.IBV_WR_RDMA_WRITE, peer, size, "WRITE")
        chan.send(seed=1)
        if not chan.recv()["ok"]:
            raise Failed("the server found its memory wrong (see its log)")

    def send_completed():
        chan.send(sending=True)
        chan.recv()
        for i, n in enumerate(SEND_SIZES):
            end.mr.write(data(100 + i, n), n, i * CHUNK)
            end.qp.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                                    sg=[SGE(end.mr.buf + i * CHUNK, n, end.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED))
        end.poll(len(SEND_SIZES), "SENDs")
        if not chan.recv()["ok"]:
            raise Failed("the server received wrong data (see its log)")
        chan.recv()

    def read_data_intact():
        end.mr.write(b"\xee" * size, size, 0)
        end.rdma(e.IBV_WR_RDMA_READ, peer, size, "READ")
        got, want = end.mr.read(size, 0), data(7, size)
        if got != want:
            raise Failed(f"READ brought back wrong data: {first_diff(got, want)}")

    for name, check in (("write_completed", write_completed), ("send_completed", send_completed),
                        ("read_data_intact", read_data_intact)):
        if not report(name, check):
            chan.abort(name)
            return False
    chan.send(done=True)
    return True


def open_channel(role, peer_ip, port, listener=None):
    """The out-of-band channel: the server accepts on `port` (on `listener` if given, for
    several clients), the client connects to it."""
    if role == "server":
        if listener is None:
            listener = socket.create_server(("0.0.0.0", port), reuse_port=True)
            listener.settimeout(300)
        sock, _ = listener.accept()
    else:
        deadline = time.time() + 300
        while True:
            try:
                sock = socket.create_connection((peer_ip, port), timeout=5)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
    sock.settimeout(COMPLETION_TIMEOUT_S + 60)
    return Channel(sock)


def main():
    role, device, peer_ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    size = (int(sys.argv[5]) if len(sys.argv) > 5 else 4) << 20
    size = max(size, CHUNK * len(SEND_SIZES))
    end = End(device, size)
    chan = open_channel(role, peer_ip, port)
    try:
        passed = (server if role == "server" else client)(end, chan, size)
    except Failed as err:
        print(f"# stopped: {err}", flush=True)
        passed = False
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
