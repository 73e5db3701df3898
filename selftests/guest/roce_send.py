"""Sends one crafted RoCEv2 datagram over raw IPv4, to exercise the receive path.

Usage: roce_send.py SRC_IP DST_IP QPN KIND[,KIND...] [COUNT]
KIND: valid | bad_icrc | truncated | bad_opcode | garbage | random
      | op:OPCODE:PSN:LEN:CHAR[:PKEY]  (a well-formed packet: opcode, PSN, LEN bytes of CHAR)
      | read:PSN:VA:RKEY:LEN    (an RDMA READ request for LEN bytes at VA under RKEY)
      | ack:PSN:MSN             (an RC ACKNOWLEDGE with an ACK AETH)
      | ud:QKEY:LEN:CHAR        (a UD SEND ONLY from QP 0x99 with Q_Key QKEY, LEN bytes of CHAR)
      | faa:PSN:VA:RKEY:ADD     (an RC FETCH ADD of ADD to the 8 bytes at VA under RKEY)
      | cas:PSN:VA:RKEY:COMPARE:SWAP  (an RC COMPARE SWAP)
      | awrite:PSN:VA:RKEY:VALUE      (an RC ATOMIC WRITE of VALUE, little-endian, as x86 holds it)
      | flush:PSN:VA:RKEY:LEN:PLACEMENT:LEVEL  (an RC FLUSH: placement 1 global, 2 persistent;
                                              level 0 the range, 1 the whole region)
Several comma-separated KINDs go out in order, COUNT times each (a Python start costs seconds
in a TCG guest: batch what can be batched). With REPLIES=N in the environment it first binds
UDP port 4791 and, after sending, prints the first N RoCE packets that come back there, a line
each: "reply OPCODE PSN SYNDROME [ORIG]" (hex opcode and syndrome; ORIG, the original value of
an atomic acknowledge, in decimal), or "no more replies" after 5 s without one.
"""
import os
import random
import socket
import struct
import sys
import zlib

ICRC_SEED = 0xDEBB20E3


def icrc(pkt):
    """The RoCEv2 ICRC of an IPv4 packet (IP header to payload), little-endian on the wire."""
    m = bytearray(pkt[:40])
    m[1] = 0xFF                 # TOS
    m[8] = 0xFF                 # TTL
    m[10:12] = b"\xff\xff"      # IP checksum
    m[26:28] = b"\xff\xff"      # UDP checksum
    m[32] = 0xFF                # BTH resv8a
    return zlib.crc32(bytes(m) + pkt[40:], ~ICRC_SEED & 0xFFFFFFFF)


def datagram(src, dst, qpn, opcode=0x04, payload=b"rxe_rs!!", psn=0, pkey=0xFFFF):
    udp_len = 8 + 12 + len(payload) + 4
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0x1234, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack("!HHHH", 0xC000, 4791, udp_len, 0)
    bth = struct.pack("!BBHI I", opcode, 0x40, pkey, qpn & 0xFFFFFF, psn & 0xFFFFFF)
    body = ip + udp + bth + payload
    return body + struct.pack("<I", icrc(body))


def packet(src, dst, qpn, kind, rng):
    if kind.startswith("read:"):
        psn, va, rkey, length = (int(x, 0) for x in kind.split(":")[1:])
        reth = struct.pack("!QII", va, rkey, length)
        return datagram(src, dst, qpn, opcode=0x0C, psn=psn, payload=reth)
    if kind.startswith("faa:") or kind.startswith("cas:"):
        fields = [int(x, 0) for x in kind.split(":")[1:]]
        psn, va, rkey = fields[:3]
        # AtomicETH: VA, R_Key, swap (or add) data, compare data.
        swap_add, compare = (fields[4], fields[3]) if kind.startswith("cas:") else (fields[3], 0)
        eth = struct.pack("!QIQQ", va, rkey, swap_add, compare)
        return datagram(src, dst, qpn, opcode=0x13 if kind.startswith("cas:") else 0x14, psn=psn, payload=eth)
    if kind.startswith("awrite:"):
        psn, va, rkey, value = (int(x, 0) for x in kind.split(":")[1:])
        reth = struct.pack("!QII", va, rkey, 8)
        return datagram(src, dst, qpn, opcode=0x1D, psn=psn, payload=reth + struct.pack("<Q", value))
    if kind.startswith("flush:"):
        psn, va, rkey, length, placement, level = (int(x, 0) for x in kind.split(":")[1:])
        feth = struct.pack("!I", (level & 3) << 4 | placement & 0xF)
        reth = struct.pack("!QII", va, rkey, length)
        return datagram(src, dst, qpn, opcode=0x1C, psn=psn, payload=feth + reth)
    if kind.startswith("ack:"):
        psn, msn = (int(x, 0) for x in kind.split(":")[1:])
        return datagram(src, dst, qpn, opcode=0x11, psn=psn, payload=struct.pack("!I", 0x1F << 24 | msn & 0xFFFFFF))
    if kind.startswith("ud:"):
        _, qkey, length, char = kind.split(":")
        deth = struct.pack("!II", int(qkey, 0), 0x99)
        return datagram(src, dst, qpn, opcode=0x64, payload=deth + char.encode() * int(length))
    if kind.startswith("op:"):
        _, op, psn, length, char, *pkey = kind.split(":")
        return datagram(src, dst, qpn, opcode=int(op, 0), psn=int(psn, 0), payload=char.encode() * int(length),
                        pkey=int(pkey[0], 0) if pkey else 0xFFFF)
    pkt = bytearray(datagram(src, dst, qpn))
    if kind == "bad_icrc":
        pkt[-1] ^= 0xFF
    elif kind == "truncated":
        pkt = bytearray(datagram(src, dst, qpn, payload=b""))[:20 + 8 + 10]
        pkt[2:4] = struct.pack("!H", len(pkt))
        pkt[24:26] = struct.pack("!H", len(pkt) - 20)
    elif kind == "bad_opcode":
        pkt = bytearray(datagram(src, dst, qpn, opcode=0x1F))
    elif kind == "garbage":
        # A valid IP/UDP envelope around random bytes of random length.
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
        pkt = bytearray(datagram(src, dst, qpn)[:28] + junk)
        pkt[2:4] = struct.pack("!H", len(pkt))
        pkt[24:26] = struct.pack("!H", len(pkt) - 20)
    elif kind == "random":
        # Random BTH fields (opcode, flags, P_Key, PSN; the QPN as given) and random bytes after
        # them, closed with a valid ICRC: past the ICRC check into the parser and the QP lookup.
        bth = bytes(rng.getrandbits(8) for _ in range(4)) + struct.pack("!I", qpn & 0xFFFFFF)
        bth += bytes(rng.getrandbits(8) for _ in range(4))
        junk = bth + bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
        body = bytearray(datagram(src, dst, qpn)[:28] + junk)
        body[2:4] = struct.pack("!H", len(body) + 4)
        body[24:26] = struct.pack("!H", len(body) + 4 - 20)
        pkt = body + struct.pack("<I", icrc(bytes(body)))
    elif kind != "valid":
        sys.exit(f"unknown kind {kind}")
    return bytes(pkt)


def main():
    src, dst, qpn, kinds = sys.argv[1], sys.argv[2], int(sys.argv[3], 0), sys.argv[4].split(",")
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    replies = int(os.environ.get("REPLIES", "0"))
    if replies:
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("0.0.0.0", 4791))
        rx.settimeout(5)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    rng = random.Random(4791)
    for kind in kinds:
        for _ in range(count):
            s.sendto(packet(src, dst, qpn, kind, rng), (dst, 0))
    for _ in range(replies):
        try:
            bth = rx.recv(2048)
        except socket.timeout:
            print("no more replies", flush=True)
            break
        opcode, psn, syndrome = bth[0], int.from_bytes(bth[9:12], "big"), bth[12] if len(bth) > 12 else 0
        orig = f" {int.from_bytes(bth[16:24], 'big')}" if opcode == 0x12 else ""
        print(f"reply {opcode:#x} {psn} {syndrome:#x}{orig}", flush=True)


if __name__ == "__main__":
    main()
