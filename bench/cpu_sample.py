"""Kernel CPU time while a benchmark moves data, as one guest of `make bench` sees it.

Usage: cpu_sample.py NETDEV   (runs until SIGTERM, then prints one number or "-")
Samples the guest's CPU time (/proc/stat) and the bytes its link moved (rx + tx of NETDEV)
every 0.2 s. Kernel time is the elapsed time less idle, I/O wait, user and steal time: user
time is left out because perftest busy-polls its CQ, which would make every busy guest look
100% used, and the kernel's own system, irq and softirq counters are not used because they
are sampled at the tick, which an idle CPU (NO_HZ) stops: a softirq that runs between two
idle periods, as a receive path does on a guest that waits for packets, would count as
nothing, while the idle time is measured exactly. At the end it prints the kernel CPU
seconds per second over the intervals in which the link ran at half its peak rate or more:
the steady part of the run, without the tools' setup and teardown. The caller divides by the
payload rate perftest reports to get CPU seconds per GB.
"""
import os
import signal
import sys
import time

INTERVAL_S = 0.2
stop = []
# Installed before anything else: a SIGTERM that comes early still ends with a line.
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1


def ticks():
    """(kernel, elapsed) in clock ticks so far: kernel as elapsed less what was not kernel."""
    elapsed = time.monotonic() * CLOCK_TICKS * CPUS
    with open("/proc/stat") as f:
        # user nice system idle iowait irq softirq steal
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, _, idle, iowait, _, _, steal = fields
    return elapsed - (user + nice + idle + iowait + steal), elapsed / CPUS


def link_bytes(netdev):
    total = 0
    for counter in ("rx_bytes", "tx_bytes"):
        with open(f"/sys/class/net/{netdev}/statistics/{counter}") as f:
            total += int(f.read())
    return total


def steady_kernel_share(samples):
    """Kernel CPU ticks / elapsed ticks over the intervals at half the peak link rate or more
    (CPU seconds per second: up to the number of CPUs)."""
    steps = [
        (k1 - k0, t1 - t0, b1 - b0)
        for (k0, t0, b0), (k1, t1, b1) in zip(samples, samples[1:])
    ]
    peak = max((b for _, _, b in steps), default=0)
    steady = [(k, t) for k, t, b in steps if peak and b * 2 >= peak]
    total = sum(t for _, t in steady)
    if not total:
        return None
    return max(0.0, sum(k for k, _ in steady) / total)


def sample(netdev):
    return ticks() + (link_bytes(netdev),)


def main(netdev):
    samples = [sample(netdev)]
    while not stop:
        time.sleep(INTERVAL_S)
        samples.append(sample(netdev))
    value = steady_kernel_share(samples)
    print("-" if value is None else f"{value:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
