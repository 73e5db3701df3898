"""A hostile RoCEv2 peer: structure-aware mutated packets with valid ICRCs, built from live QP
state (standard library only: runs with python3 -I -S from the peer's namespace).

The state comes from hostile_target.py as one JSON line: the device's address, the target QPs
(which believe this namespace is their peer), their MR's rkey/address/size, and the victim QPs
(which do not). Every packet is a well-formed RoCEv2 datagram of a random shape:

- transport: every RC opcode with the headers it needs (RETH, AETH, AtomicETH, ImmDt, IETH),
  some UC/UD/CNP opcodes and some random ones;
- addressing: mostly a target QP from the address it trusts; some to the victims (whose peer we
  are not), some from a forged source, some with a foreign P_Key, some to random QPNs;
- sequence: at the PSN the target expects (learned from its ACKs and NAKs, read off the wire
  with a raw UDP socket), just before or after it, far in the past or future;
- fields: RETH addresses at the MR's edges and near 2^64, DMA lengths 0, MTU+1, 2^31, 2^32-1;
  AETH syndromes and MSNs at random; payloads over the path MTU; random pad counts;
- damage: a few packets truncated inside a header, a few with a bad ICRC (counted, so the
  caller can check that all the others passed the ICRC check).

Usage: hostile_peer.py SRC_IP STATE_JSON COUNT SEED
Prints one JSON line of what it sent: {"sent": N, "bad_icrc": N, "truncated": N, ...}.
"""
import json
import random
import select
import socket
import struct
import sys
import zlib

ICRC_SEED = 0xDEBB20E3
ROCE_PORT = 4791
MTU = 1024                  # the targets' path MTU
MAX_PAYLOAD = 1400          # what fits in one IPv4 datagram on a 1500-byte link with headers

SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = range(6)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(6, 12)
READ_REQ, READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY, ACK, ATOMIC_ACK = range(12, 19)
CMP_SWAP, FETCH_ADD = 0x13, 0x14
SEND_LAST_INV, SEND_ONLY_INV = 0x16, 0x17
RC_OPCODES = list(range(0x00, 0x15)) + [SEND_LAST_INV, SEND_ONLY_INV]
OTHER_OPCODES = [0x20, 0x24, 0x2A, 0x64, 0x65, 0x81, 0x15, 0x18, 0x1F, 0xFF]
REQUESTS = [op for op in RC_OPCODES if op not in (READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY, ACK, ATOMIC_ACK)]
RESPONSES = [READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY, ACK, ATOMIC_ACK]


def icrc(pkt):
    """The RoCEv2 ICRC of an IPv4 packet (IP header to payload): the variant fields masked."""
    m = bytearray(pkt[:40])
    m[1] = 0xFF                 # TOS
    m[8] = 0xFF                 # TTL
    m[10:12] = b"\xff\xff"      # IP checksum
    m[26:28] = b"\xff\xff"      # UDP checksum
    m[32] = 0xFF                # BTH: FECN, BECN, reserved
    return zlib.crc32(bytes(m) + pkt[40:], ~ICRC_SEED & 0xFFFFFFFF)


def envelope(src, dst, transport):
    """IPv4 + UDP around `transport` (BTH onwards, ICRC not included)."""
    udp_len = 8 + len(transport) + 4
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack("!HHHH", 0xC000 | random.getrandbits(14), ROCE_PORT, udp_len, 0)
    return ip + udp + transport


class Target:
    def __init__(self, t):
        self.qpn, self.rkey, self.va, self.size = t["qpn"], t["rkey"], t["va"], t["size"]
        self.peer_qpn = t["peer_qpn"]
        self.epsn = 0           # the PSN it expects next (from its ACKs/NAKs)
        self.sent_psn = 0       # the next PSN of its own requests to us (for ACKs)


class Peer:
    def __init__(self, src, state, seed):
        self.src, self.dst = src, state["addr"]
        self.targets = [Target(t) for t in state["targets"]]
        self.by_qpn = {t.peer_qpn: t for t in self.targets}
        self.victims = state["victims"]
        self.rng = random.Random(seed)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        # Every UDP datagram that reaches this namespace: the targets' ACKs, NAKs and requests.
        self.sniff = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.sniff.setblocking(False)
        self.stats = {"sent": 0, "bad_icrc": 0, "truncated": 0, "to_targets": 0, "to_victims": 0,
                      "forged_source": 0, "foreign_pkey": 0, "random_qpn": 0, "learned": 0}

    def learn(self):
        """Tracks what the targets expect from what they send us."""
        while True:
            try:
                pkt = self.sniff.recv(4096)
            except BlockingIOError:
                return
            ihl = (pkt[0] & 0x0F) * 4
            if len(pkt) < ihl + 8 + 12 or struct.unpack_from("!H", pkt, ihl + 2)[0] != ROCE_PORT:
                continue
            bth = ihl + 8
            op = pkt[bth]
            dqpn = struct.unpack_from("!I", pkt, bth + 4)[0] & 0xFFFFFF
            psn = struct.unpack_from("!I", pkt, bth + 8)[0] & 0xFFFFFF
            t = self.by_qpn.get(dqpn)
            if t is None:
                continue
            if op == ACK and len(pkt) >= bth + 16:
                syndrome = pkt[bth + 12]
                # An ACK acknowledges through psn; a sequence NAK names the PSN expected.
                t.epsn = (psn + (1 if syndrome >> 5 == 0 else 0)) & 0xFFFFFF
                self.stats["learned"] += 1
            elif op in REQUESTS:
                t.sent_psn = (psn + 1) & 0xFFFFFF

    def pick(self, pool):
        return self.rng.choice(pool)

    def psn(self, t):
        r = self.rng.random()
        if r < 0.6:
            return t.epsn
        if r < 0.75:
            return (t.epsn + self.rng.choice([-1, 1, 2])) & 0xFFFFFF
        if r < 0.9:
            return (t.epsn + self.rng.choice([-(1 << 23), (1 << 23) - 1, 1 << 23, -self.rng.randrange(1, 4096)])) & 0xFFFFFF
        return self.rng.getrandbits(24)

    def va(self, t):
        return self.pick([t.va, t.va + t.size - 1, t.va + t.size, t.va - 1, (1 << 64) - 1, (1 << 64) - 4096,
                          (1 << 63), 0, t.va + self.rng.randrange(t.size), self.rng.getrandbits(64)]) & ((1 << 64) - 1)

    def dma_len(self, t):
        return self.pick([0, 1, 8, MTU, MTU + 1, t.size, t.size + 1, 1 << 31, (1 << 32) - 1,
                          self.rng.randrange(1 << 20), self.rng.getrandbits(32)])

    def rkey(self, t):
        return t.rkey if self.rng.random() < 0.8 else self.rng.getrandbits(32)

    def payload(self, op):
        if op in (SEND_MIDDLE, WRITE_MIDDLE, READ_MIDDLE, SEND_FIRST, WRITE_FIRST, READ_FIRST):
            n = self.pick([MTU, MTU, MTU - 1, MTU + 1, 0, self.rng.randrange(MAX_PAYLOAD)])
        elif op in (READ_REQ, CMP_SWAP, FETCH_ADD, ACK, ATOMIC_ACK):
            n = self.pick([0, 0, 0, 4, 16])
        else:
            n = self.pick([0, 1, 4, 100, MTU, MTU + 4, self.rng.randrange(MAX_PAYLOAD)])
        block = self.rng.randbytes(64)
        return (block * (n // 64 + 1))[:n]

    def extension_headers(self, op, t):
        rng = self.rng
        aeth = struct.pack("!I", rng.choice([0x00, 0x1F, 0x20, 0x60, 0x61, 0x62, 0x63, 0x64, rng.getrandbits(8)]) << 24
                           | rng.getrandbits(24))
        reth = struct.pack("!QII", self.va(t), self.rkey(t), self.dma_len(t))
        imm = struct.pack("!I", rng.getrandbits(32))
        if op in (WRITE_FIRST, WRITE_ONLY):
            return reth
        if op == WRITE_ONLY_IMM:
            return reth + imm
        if op == READ_REQ:
            return reth
        if op in (SEND_LAST_IMM, SEND_ONLY_IMM, WRITE_LAST_IMM, SEND_LAST_INV, SEND_ONLY_INV):
            return imm
        if op in (READ_FIRST, READ_LAST, READ_ONLY, ACK):
            return aeth
        if op == ATOMIC_ACK:
            return aeth + struct.pack("!Q", rng.getrandbits(64))
        if op in (CMP_SWAP, FETCH_ADD):
            va = self.va(t) & ~7 if rng.random() < 0.7 else self.va(t)
            return struct.pack("!QIQQ", va, self.rkey(t), rng.getrandbits(64), rng.getrandbits(64))
        return b""

    def one(self):
        rng, st = self.rng, self.stats
        t = self.pick(self.targets)
        src, qpn, pkey = self.src, t.qpn, 0xFFFF
        r = rng.random()
        if r < 0.05:
            qpn = self.pick(self.victims)
            st["to_victims"] += 1
        elif r < 0.08:
            qpn = rng.getrandbits(24)
            st["random_qpn"] += 1
        else:
            st["to_targets"] += 1
        if rng.random() < 0.03:
            src = self.dst      # claims to be the device itself (arriving from outside)
            st["forged_source"] += 1
        elif rng.random() < 0.02:
            src = "10.11.0.%d" % rng.randrange(3, 250)
            st["forged_source"] += 1
        if rng.random() < 0.02:
            pkey = rng.getrandbits(16)
            st["foreign_pkey"] += 1
        r = rng.random()
        if r < 0.55:
            op = self.pick(REQUESTS)
        elif r < 0.9:
            op = self.pick(RESPONSES)
        else:
            op = self.pick(OTHER_OPCODES + [rng.getrandbits(8)])
        psn = t.sent_psn - 1 if op in RESPONSES and rng.random() < 0.3 else self.psn(t)
        flags = 0x40 | (rng.getrandbits(2) << 4 if rng.random() < 0.1 else 0) | (rng.getrandbits(4) if rng.random() < 0.03 else 0)
        flags |= 0x80 if rng.random() < 0.1 else 0          # solicited event
        ackreq = 0x80 if rng.random() < 0.5 else 0
        bth = struct.pack("!BBHII", op, flags, pkey, qpn & 0xFFFFFF, (ackreq << 24) | (psn & 0xFFFFFF))
        transport = bth + self.extension_headers(op, t) + self.payload(op)
        transport = transport[:1500 - 20 - 8 - 4]
        pkt = envelope(src, self.dst, transport)
        pkt += struct.pack("<I", icrc(pkt))
        r = rng.random()
        if r < 0.01:
            pkt = bytearray(pkt)
            pkt[-1 - rng.randrange(4)] ^= 1 << rng.randrange(8)
            st["bad_icrc"] += 1
        elif r < 0.03:
            # Cut inside the transport headers; the lengths say so, the ICRC is over what is left.
            cut = rng.randrange(28 + 1, min(len(pkt), 28 + 12 + 28 + 4))
            pkt = bytearray(pkt[:cut])
            pkt[2:4] = struct.pack("!H", len(pkt))
            pkt[24:26] = struct.pack("!H", len(pkt) - 20)
            if len(pkt) >= 28 + 12 + 4 and rng.random() < 0.5:
                pkt[-4:] = struct.pack("<I", icrc(bytes(pkt[:-4])))
            st["truncated"] += 1
        try:
            self.out.sendto(bytes(pkt), (self.dst, 0))
            st["sent"] += 1
        except OSError:
            st["send_errors"] = st.get("send_errors", 0) + 1

    def run(self, count):
        for i in range(count):
            if i % 64 == 0:
                self.learn()
            self.one()
            if i % 256 == 255:
                # Let the victim and the targets' answers through now and then: a veth queue
                # overrun would only test the backlog.
                select.select([], [], [], 0.002)
        self.learn()


def main():
    src, state, count, seed = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    peer = Peer(src, state, seed)
    peer.run(count)
    print(json.dumps(peer.stats), flush=True)


if __name__ == "__main__":
    main()
