#!/usr/bin/env python3
"""The link between two test VMs, impaired on demand: a UDP relay on the host's loopback.

QEMU's socket backend (udp mode) sends each Ethernet frame as one UDP datagram to a port and
reads frames from its own port from any sender. Each VM sends to its own relay port here; the
relay passes the frame on to the other VM's port, and on the way drops, duplicates, delays
(reorders) or corrupts RoCEv2 frames (UDP destination port 4791) at the rates the guests write
into CONTROL. Every other frame (ARP, ICMP, the tools' TCP exchanges) goes through untouched.

    impair-relay.py RELAY_A VM_A RELAY_B VM_B CONTROL STATS

VM A sends to RELAY_A and listens on VM_A; VM B likewise. CONTROL (re-read twice a second)
holds "loss=0.03 dup=0.01 reorder=0.02 corrupt=0.01 seed=N", each a probability per RoCE frame;
an absent or empty file means a clean link. STATS gets the counts of what was done, per
direction, as "key=value" lines, rewritten every second and on exit.
"""
import os
import random
import select
import signal
import socket
import struct
import sys
import time

ROCE_PORT = 4791
KINDS = ("loss", "dup", "reorder", "corrupt")
REORDER_DELAY_S = (0.002, 0.02)


def is_roce(frame):
    """An IPv4 or IPv6 UDP frame to port 4791 (no VLAN tags on this link)."""
    if len(frame) < 14:
        return False
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    if ethertype == 0x0800 and len(frame) >= 14 + 20 + 8:
        ihl = (frame[14] & 0x0F) * 4
        off = 14 + ihl
        return frame[14 + 9] == 17 and len(frame) >= off + 8 and struct.unpack_from("!H", frame, off + 2)[0] == ROCE_PORT
    if ethertype == 0x86DD and len(frame) >= 14 + 40 + 8:
        return frame[14 + 6] == 17 and struct.unpack_from("!H", frame, 14 + 40 + 2)[0] == ROCE_PORT
    return False


def corrupt(frame, rng):
    """One bit flipped past the IP and UDP headers: the BTH, the payload or the ICRC. (A flip in
    the IP header would mostly be dropped by the IP layer before RoCE sees it.)"""
    first = 14 + 20 + 8 if struct.unpack_from("!H", frame, 12)[0] == 0x0800 else 14 + 40 + 8
    if len(frame) <= first:
        return frame
    b = bytearray(frame)
    i = rng.randrange(first, len(b))
    b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


class Relay:
    def __init__(self, relay_a, vm_a, relay_b, vm_b, control, stats):
        self.control, self.stats_path = control, stats
        self.sock_a = self._bind(relay_a)
        self.sock_b = self._bind(relay_b)
        # Frames from A go to B's port, and back.
        self.route = {self.sock_a: (self.sock_b, ("127.0.0.1", vm_b), "a>b"),
                      self.sock_b: (self.sock_a, ("127.0.0.1", vm_a), "b>a")}
        self.rates = dict.fromkeys(KINDS, 0.0)
        self.rng = random.Random(0)
        self.control_stamp = None
        self.held = []  # (release time, socket, destination, frame)
        self.counts = {}

    @staticmethod
    def _bind(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("127.0.0.1", port))
        return s

    def count(self, direction, what):
        key = f"{direction}.{what}"
        self.counts[key] = self.counts.get(key, 0) + 1

    def read_control(self):
        try:
            st = os.stat(self.control)
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self.control_stamp:
            return
        self.control_stamp = stamp
        rates, seed = dict.fromkeys(KINDS, 0.0), 0
        if stamp is not None:
            with open(self.control) as f:
                for word in f.read().split():
                    key, _, value = word.partition("=")
                    if key in rates:
                        rates[key] = min(max(float(value), 0.0), 1.0)
                    elif key == "seed":
                        seed = int(value)
        self.rates = rates
        self.rng = random.Random(seed)
        self.count("control", "changes")

    def write_stats(self):
        tmp = self.stats_path + ".tmp"
        with open(tmp, "w") as f:
            for key in sorted(self.counts):
                f.write(f"{key}={self.counts[key]}\n")
        os.replace(tmp, self.stats_path)

    def forward(self, sock, frame):
        out, dest, direction = self.route[sock]
        if not is_roce(frame) or not any(self.rates.values()):
            out.sendto(frame, dest)
            return
        self.count(direction, "roce")
        r, rng = self.rates, self.rng
        if rng.random() < r["loss"]:
            self.count(direction, "lost")
            return
        if rng.random() < r["corrupt"]:
            frame = corrupt(frame, rng)
            self.count(direction, "corrupted")
        copies = 1
        if rng.random() < r["dup"]:
            copies = 2
            self.count(direction, "duplicated")
        for _ in range(copies):
            if rng.random() < r["reorder"]:
                # Held back while later frames pass it.
                self.held.append((time.monotonic() + rng.uniform(*REORDER_DELAY_S), out, dest, frame))
                self.count(direction, "delayed")
            else:
                out.sendto(frame, dest)

    def release_held(self):
        now = time.monotonic()
        keep = []
        for item in self.held:
            if item[0] <= now:
                item[1].sendto(item[3], item[2])
            else:
                keep.append(item)
        self.held = keep

    def run(self):
        next_control = next_stats = 0.0
        while True:
            now = time.monotonic()
            if now >= next_control:
                self.read_control()
                next_control = now + 0.5
            if now >= next_stats:
                self.write_stats()
                next_stats = now + 1.0
            timeout = 0.2
            if self.held:
                timeout = max(0.0, min(timeout, min(h[0] for h in self.held) - now))
            ready, _, _ = select.select([self.sock_a, self.sock_b], [], [], timeout)
            for sock in ready:
                # Drain what is queued: a burst must not wait for the next select.
                for _ in range(64):
                    try:
                        frame = sock.recv(65536, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    try:
                        self.forward(sock, frame)
                    except OSError:
                        self.count("relay", "send_errors")  # the other VM is not up (yet)
            self.release_held()


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    relay = Relay(*(int(a) for a in sys.argv[1:5]), sys.argv[5], sys.argv[6])

    def stop(*_):
        relay.write_stats()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    relay.run()


if __name__ == "__main__":
    main()
