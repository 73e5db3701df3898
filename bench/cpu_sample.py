"""CPU time per GB moved, as one guest of `make bench` sees it.

Usage: cpu_sample.py NETDEV   (runs until SIGTERM, then prints one number or "-")
Samples the guest's busy CPU time (/proc/stat: all but idle and iowait) and the bytes its link
moved (rx + tx of NETDEV) every 0.2 s. At the end it prints the CPU seconds per GB over the
intervals in which the link ran at half its peak rate or more: the steady part of the run,
without the tools' setup and teardown, which a whole-run figure would mix in.
"""
import os
import signal
import sys
import time

INTERVAL_S = 0.2


def busy_ticks():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal
    return sum(fields) - fields[3] - fields[4]


def link_bytes(netdev):
    total = 0
    for counter in ("rx_bytes", "tx_bytes"):
        with open(f"/sys/class/net/{netdev}/statistics/{counter}") as f:
            total += int(f.read())
    return total


def steady_cpu_s_per_gb(samples, hz):
    steps = [(c1 - c0, b1 - b0) for (c0, b0), (c1, b1) in zip(samples, samples[1:])]
    peak = max((b for _, b in steps), default=0)
    steady = [(c, b) for c, b in steps if peak and b * 2 >= peak]
    moved = sum(b for _, b in steady)
    if not moved:
        return None
    return sum(c for c, _ in steady) / hz / (moved / 1e9)


def main(netdev):
    hz = os.sysconf("SC_CLK_TCK")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    samples = [(busy_ticks(), link_bytes(netdev))]
    while not stop:
        time.sleep(INTERVAL_S)
        samples.append((busy_ticks(), link_bytes(netdev)))
    value = steady_cpu_s_per_gb(samples, hz)
    print("-" if value is None else f"{value:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
