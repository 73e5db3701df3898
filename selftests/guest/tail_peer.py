"""The responder end of tail_target.py's QP, in the peer namespace, that loses the tail of a
burst: it ACKs the first WRITE (PSN 0), takes PSNs 1-2 of the second and treats 3-4 as lost.
A requester that probes sends PSN 4 again, asking for an ACK, long before its retransmission
timeout; the peer NAKs it (PSN sequence error, expecting 3), as a responder would, and ACKs
PSN 4 once 3 and 4 came again.

Usage: tail_peer.py SRC_IP DST_IP QPN
Prints "ready" once it listens, then a line per packet it got ("got PSN ACKREQ MS"), and at the
end "probe after MS ms" or the reason it stopped ("no probe: ..."); exits non-zero then.
"""
import socket
import struct
import sys
import time

from roce_send import datagram

NAK_PSN_SEQUENCE_ERROR = 0x60
ACK = 0x1F


def main():
    src, dst, qpn = sys.argv[1], sys.argv[2], int(sys.argv[3], 0)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("0.0.0.0", 4791))
    rx.settimeout(20)
    tx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    start = time.monotonic()

    def answer(psn, syndrome, msn):
        aeth = struct.pack("!I", syndrome << 24 | msn)
        tx.sendto(datagram(src, dst, qpn, opcode=0x11, psn=psn, payload=aeth), (dst, 0))

    def take():
        try:
            bth = rx.recv(4096)
        except socket.timeout:
            sys.exit("no probe: nothing came for 20 s")
        psn, ackreq = int.from_bytes(bth[9:12], "big"), bth[8] >> 7
        ms = (time.monotonic() - start) * 1000
        print(f"got {psn} {ackreq} {ms:.0f}", flush=True)
        return psn, ackreq, ms

    print("ready", flush=True)
    if take()[0] != 0:
        sys.exit("no probe: the first WRITE is not PSN 0")
    answer(0, ACK, 1)
    sent_at = None
    for want in (1, 2, 3, 4):
        psn, _, ms = take()
        if psn != want:
            sys.exit(f"no probe: PSN {psn} where the first send of {want} was due")
        sent_at = ms
    psn, ackreq, ms = take()
    if (psn, ackreq) != (4, 1):
        sys.exit(f"no probe: then PSN {psn} (AckReq {ackreq}), not PSN 4 asking for an ACK")
    answer(3, NAK_PSN_SEQUENCE_ERROR, 1)
    for want in (3, 4):
        psn, _, _ = take()
        if psn != want:
            sys.exit(f"after the NAK, PSN {psn} where {want} was due")
    answer(4, ACK, 2)
    print(f"probe after {ms - sent_at:.0f} ms", flush=True)


if __name__ == "__main__":
    main()
