"""RC atomics between two hosts, checked by their values (pyverbs): perftest's ib_atomic_bw
counts completions, this checks what the atomics did.

The client forks PROCS processes, each with its own QP to the server, all on one 8-byte word of
one server MR. Each first runs FETCH_ADDs of 1, several in flight, then COMPARE_SWAP increments
(compare with the value it last saw, swap in one more; a miss retries with the value returned),
until it has made CAS_WINS of them; last, an ATOMIC WRITE (IBTA 1.5, ibv_wr_atomic_write) of
its own 8 bytes to its own word after the counter, which the server finds there byte for byte.
Each FETCH_ADD and each successful COMPARE_SWAP adds 1 and
returns the value before: executed once each and atomically against one another, together
they return every value from 0 to PROCS * (ADDS + CAS_WINS) - 1 exactly once (the processes
interleave, so which kind returned which value varies), failed COMPARE_SWAPs change nothing,
and the word ends at PROCS * (ADDS + CAS_WINS). A lost or duplicated packet (lossy_link.sh's relay) makes the
requester send an atomic again: the responder must answer the repeat with the result it
recorded, not execute it twice, or a value repeats and the sum is off. Works with any RC
provider on either end (rxe_rs, rdma_rxe).

With RXE_RS_NO_ATOMIC_WRITE=1 in the client's environment it sends no ATOMIC WRITE (and the
server checks none): rdma_rxe 6.12 resends a lost ATOMIC WRITE to remote address 0 (its
req_retry sets the address again for atomics, READs and WRITEs only), which its responder,
or ours, rightly NAKs as a remote access error; lossy_link.sh sets it where rdma_rxe requests.

Usage: pair_atomic.py server|client DEVICE PEER_IP PORT
Prints "ok NAME" or "not ok NAME: why": the client reports atomics_completed, the server
atomic_results_exact.
"""
import os
import socket
import struct
import sys
import time

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

import pair_data
from pair_data import Failed, open_channel, report

PROCS = 3
ADDS = 100
CAS_WINS = 20
OUTSTANDING = 4
REMOTE = e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_REMOTE_WRITE
ATOMIC = e.IBV_ACCESS_LOCAL_WRITE | REMOTE
SEND_OPS = e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | e.IBV_QP_EX_WITH_ATOMIC_WRITE


def written(index):
    """The 8 bytes client process `index` stores with its ATOMIC WRITE."""
    return struct.pack("<Q", 0x0123_4567_89AB_CD00 + index)


class End(pair_data.End):
    """pair_data's RC end, on `mr` (shared by the server's QPs); the peer may run atomics."""

    REMOTE_ACCESS = REMOTE

    def __init__(self, ctx, pd, mr):
        self.ctx, self.pd, self.mr = ctx, pd, mr
        self.cq = CQ(ctx, 64)
        cap = QPCap(max_send_wr=16, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        # An extended QP (for ibv_wr_atomic_write), posted to with ibv_post_send as well.
        attr = QPInitAttrEx(cap=cap, qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, pd=pd, send_ops_flags=SEND_OPS,
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
        self.qp = QPEx(ctx, attr)
        from verbs import ipv4_gid_index
        self.gid_index, self.gid = ipv4_gid_index(ctx)

    def atomic(self, wr_id, opcode, peer, compare_add, swap=0):
        """Posts one atomic whose result lands in the 8 bytes of our MR at wr_id % OUTSTANDING."""
        slot = wr_id % OUTSTANDING * 8
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(self.mr.buf + slot, 8, self.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_atomic(rkey=peer["rkey"], addr=peer["addr"], compare_add=compare_add, swap=swap)
        self.qp.post_send(wr)

    def result(self, wr_id):
        return struct.unpack("=Q", self.mr.read(8, wr_id % OUTSTANDING * 8))[0]


def client_process(device, peer_ip, port, index):
    """One client process: its QP, its FETCH_ADDs and COMPARE_SWAPs; sends the server what each
    returned."""
    chan = open_channel("client", peer_ip, port)
    ctx = Context(name=device)
    pd = PD(ctx)
    end = End(ctx, pd, MR(pd, 8 * OUTSTANDING, ATOMIC))
    chan.send(**end.describe())
    peer = chan.recv()
    end.connect(peer)
    chan.send(connected=True)
    chan.recv()  # every process is connected: go together

    def atomics_completed():
        added, posted, done = [], 0, 0
        while done < ADDS:
            while posted < ADDS and posted - done < OUTSTANDING:
                end.atomic(posted, e.IBV_WR_ATOMIC_FETCH_AND_ADD, peer, 1)
                posted += 1
            for wc in end.poll(1, "FETCH_ADD"):
                if wc.opcode != e.IBV_WC_FETCH_ADD:
                    raise Failed(f"FETCH_ADD completed with opcode {wc.opcode}")
                added.append(end.result(wc.wr_id))
                done += 1
        swapped, guess, tries = [], 0, 0
        while len(swapped) < CAS_WINS:
            tries += 1
            end.atomic(tries, e.IBV_WR_ATOMIC_CMP_AND_SWP, peer, guess, guess + 1)
            wc = end.poll(1, "COMPARE_SWAP")[0]
            if wc.opcode != e.IBV_WC_COMP_SWAP:
                raise Failed(f"COMPARE_SWAP completed with opcode {wc.opcode}")
            orig = end.result(wc.wr_id)
            if orig == guess:
                swapped.append(orig)
            guess = orig if orig != guess else guess + 1
        wrote = os.environ.get("RXE_RS_NO_ATOMIC_WRITE") != "1"
        if wrote:
            end.qp.wr_start()
            end.qp.wr_id, end.qp.wr_flags = 1 << 20, e.IBV_SEND_SIGNALED
            end.qp.wr_atomic_write(peer["rkey"], peer["addr"] + 8 * (1 + index), written(index))
            end.qp.wr_complete()
            wc = end.poll(1, "ATOMIC WRITE")[0]
            if wc.opcode != e.IBV_WC_ATOMIC_WRITE:
                raise Failed(f"ATOMIC WRITE completed with opcode {wc.opcode}")
        chan.send(added=added, swapped=swapped, tries=tries, index=index, wrote=wrote)
        if not chan.recv()["ok"]:
            raise Failed("the server found the results wrong (see its log)")

    ok = report(f"atomics_completed (process {index})", atomics_completed)
    if not ok:
        chan.abort("atomics_completed")
    os._exit(0 if ok else 1)


def client(device, peer_ip, port):
    children = []
    for i in range(PROCS):
        pid = os.fork()
        if pid == 0:
            try:
                client_process(device, peer_ip, port, i)
            finally:
                os._exit(1)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    return all(code == 0 for code in codes)


def server(device, peer_ip, port):
    ctx = Context(name=device)
    pd = PD(ctx)
    # The counter, then a word for each client process's ATOMIC WRITE.
    size = 8 * (1 + PROCS)
    word = MR(pd, size, ATOMIC)
    word.write(bytes(size), size, 0)
    # One channel and one QP per client process, all on the one word.
    ends, chans = [], []
    listener = socket.create_server(("0.0.0.0", port), reuse_port=True)
    listener.settimeout(300)
    for _ in range(PROCS):
        chan = open_channel("server", peer_ip, port, listener)
        end = End(ctx, pd, word)
        peer = chan.recv()
        chan.send(**end.describe())
        end.connect(peer)
        chan.recv()
        ends.append(end)
        chans.append(chan)
    for chan in chans:
        chan.send(go=True)
    t0 = time.time()
    results = [chan.recv() for chan in chans]

    def atomic_results_exact():
        returned = sorted(v for r in results for v in r["added"] + r["swapped"])
        final = struct.unpack("=Q", word.read(8, 0))[0]
        total = PROCS * (ADDS + CAS_WINS)
        tries = sum(r["tries"] for r in results)
        print(f"# {PROCS * ADDS} FETCH_ADDs and {tries} COMPARE_SWAPs ({PROCS * CAS_WINS} swapped) from "
              f"{PROCS} QPs in {time.time() - t0:.1f} s; the word is {final}", flush=True)
        if returned != list(range(total)):
            seen = set()
            dup = sorted({v for v in returned if v in seen or seen.add(v)})[:5]
            missing = sorted(set(range(total)) - set(returned))[:5]
            raise Failed(f"the atomics did not return 0..{total - 1} once each (repeated: {dup}, missing: {missing})")
        if final != total:
            raise Failed(f"the word ended at {final}, not {total}")
        for r in results:
            if not r["wrote"]:
                continue
            i = r["index"]
            got = word.read(8, 8 * (1 + i))
            if got != written(i):
                raise Failed(f"process {i}'s ATOMIC WRITE left {got.hex()}, not {written(i).hex()}")

    ok = report("atomic_results_exact", atomic_results_exact)
    for chan in chans:
        chan.send(ok=ok)
    return ok


def main():
    role, device, peer_ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    try:
        passed = (server if role == "server" else client)(device, peer_ip, port)
    except Failed as err:
        print(f"# stopped: {err}", flush=True)
        passed = False
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
