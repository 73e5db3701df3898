"""A reference round trip for perftest's latency tests: what the platform alone takes.

Usage: echo_floor.py serve PORT READY_FILE  (guest A: echoes UDP until killed; creates
                                            READY_FILE once it listens)
       echo_floor.py udp PEER PORT COUNT    (guest B: COUNT 64-byte UDP echoes through `serve`)
       echo_floor.py icmp PEER COUNT        (guest B: COUNT ICMP echoes, answered by A's kernel)
The client polls a non-blocking socket without sleeping, as perftest polls its CQ or its
buffer; in `udp` mode `serve` polls too, as both ends of send and write latency do, while in
`icmp` mode the peer's kernel answers in its receive softirq, as a READ responder does. Each
poll is a system call from Python, dearer than perftest's, so the figure is a reference, not a
bound. Prints the median round trip in microseconds.
"""
import socket
import statistics
import struct
import sys
import time

PAYLOAD = 64
ECHO_WAIT_S = 0.5  # an echo not back by then counts as lost
RUN_LIMIT_S = 60


def serve(port, ready_file):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    s.setblocking(False)
    open(ready_file, "w").close()
    while True:
        try:
            data, peer = s.recvfrom(2048)
        except BlockingIOError:
            continue
        s.sendto(data, peer)


def poll_reply(s, deadline, match):
    """Spins on `s` until `match(datagram)` or the deadline; True if it came."""
    while time.monotonic() < deadline:
        try:
            data = s.recv(2048)
        except (BlockingIOError, ConnectionRefusedError):
            # (Refused: an ICMP error for an echo the peer was not listening for yet.)
            continue
        if match(data):
            return True
    return False


def echoes(s, count, packet, match):
    """Round trips of `count` echoes, `packet(seq)` sent and `match(seq, data)` awaited."""
    rtts = []
    end = time.monotonic() + RUN_LIMIT_S
    for seq in range(count):
        start = time.monotonic()
        if start > end:
            break
        s.send(packet(seq))
        if poll_reply(s, start + ECHO_WAIT_S, lambda d, seq=seq: match(seq, d)):
            rtts.append(time.monotonic() - start)
    return rtts


def udp(peer, port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((peer, port))
    s.setblocking(False)

    def packet(seq):
        return struct.pack("!I", seq).ljust(PAYLOAD, b"\0")

    return echoes(s, count, packet, lambda seq, d: d[:4] == struct.pack("!I", seq))


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def icmp(peer, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.connect((peer, 0))
    s.setblocking(False)
    ident = 0x5258
    body = bytes(PAYLOAD - 8)

    def packet(seq):
        seq &= 0xFFFF
        header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        return struct.pack("!BBHHH", 8, 0, checksum(header + body), ident, seq) + body

    def is_reply(seq, d):
        # A raw socket hands up the IP header too; its length is in the first byte.
        off = (d[0] & 0xF) * 4
        return len(d) >= off + 8 and d[off] == 0 and struct.unpack("!HH", d[off + 4 : off + 8]) == (ident, seq & 0xFFFF)

    return echoes(s, count, packet, is_reply)


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "serve" and len(argv) == 4:
        serve(int(argv[2]), argv[3])
        return 0
    if mode == "udp" and len(argv) == 5:
        rtts = udp(argv[2], int(argv[3]), int(argv[4]))
    elif mode == "icmp" and len(argv) == 4:
        rtts = icmp(argv[2], int(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    count = int(argv[-1])
    if not rtts or len(rtts) < count / 2:
        print(f"echo_floor: {len(rtts)} of {count} echoes answered", file=sys.stderr)
        return 1
    print(f"{statistics.median(rtts) * 1e6:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
