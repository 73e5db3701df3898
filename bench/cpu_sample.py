"""Kernel CPU time while a benchmark moves data, as one guest of `make bench` sees it.

Usage: cpu_sample.py NETDEV|COUNTER [SPLIT]   (runs until SIGTERM, then prints one number or "-")
Samples the guest's CPU time (/proc/stat) and the bytes its link moved (rx + tx of NETDEV)
every 0.2 s; or, given a file's path, the number it holds (an RDMA port's sent_pkts, for
traffic between QPs of this guest, which no netdev counts). Kernel time is the elapsed time
less idle, I/O wait, user and steal time: user
time is left out because perftest busy-polls its CQ, which would make every busy guest look
100% used, and the kernel's own system, irq and softirq counters are not used because they
are sampled at the tick, which an idle CPU (NO_HZ) stops: a softirq that runs between two
idle periods, as a receive path does on a guest that waits for packets, would count as
nothing, while the idle time is measured exactly. At the end it prints the kernel CPU
seconds per second over the intervals in which the link ran at half its peak rate or more:
the steady part of the run, without the tools' setup and teardown. The caller divides by the
payload rate perftest reports to get CPU seconds per GB.

With SPLIT it also writes there the shares of /proc/stat's fields over the same intervals
(seconds per second), and "lost": the time that none of them holds. Ticks go uncharged when
softirqs run between the idle periods of a CPU whose tick is stopped, when the host keeps the
vCPU's thread off its core for several ticks (it is charged one when it runs again), and when
ticks come late. The kernel share above counts "lost" as kernel time.
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


FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def ticks():
    """(kernel, elapsed, /proc/stat's FIELDS) in clock ticks so far: kernel as elapsed less
    what was not kernel."""
    elapsed = time.monotonic() * CLOCK_TICKS * CPUS
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1 : 1 + len(FIELDS)]]
    user, nice, _, idle, iowait, _, _, steal = fields
    return elapsed - (user + nice + idle + iowait + steal), elapsed / CPUS, fields


def link_bytes(netdev):
    total = 0
    for counter in ("rx_bytes", "tx_bytes"):
        with open(f"/sys/class/net/{netdev}/statistics/{counter}") as f:
            total += int(f.read())
    return total


def steady_steps(samples):
    """(kernel, elapsed, fields) tick deltas of the intervals at half the peak link rate or
    more: the steady part of the run."""
    steps = [
        (k1 - k0, t1 - t0, [b - a for a, b in zip(f0, f1)], b1 - b0)
        for (k0, t0, f0, b0), (k1, t1, f1, b1) in zip(samples, samples[1:])
    ]
    peak = max((b for *_, b in steps), default=0)
    return [(k, t, f) for k, t, f, b in steps if peak and b * 2 >= peak]


def steady_kernel_share(steady):
    """Kernel CPU ticks / elapsed ticks (CPU seconds per second: up to the number of CPUs)."""
    total = sum(t for _, t, _ in steady)
    if not total:
        return None
    return max(0.0, sum(k for k, _, _ in steady) / total)


def steady_split(steady):
    """Each field's share of the elapsed time, and the share no field holds, as one line."""
    total = sum(t for _, t, _ in steady)
    if not total:
        return "-"
    shares = {name: sum(f[i] for _, _, f in steady) / total for i, name in enumerate(FIELDS)}
    shares["user"] += shares.pop("nice")
    lost = max(0.0, CPUS - sum(shares.values()))
    return " ".join(f"{k} {v:.2f}" for k, v in shares.items()) + f" lost {lost:.2f}"


def traffic(source):
    """How much moved so far: the netdev's bytes, or the counter file's value."""
    if source.startswith("/"):
        with open(source) as f:
            return int(f.read())
    return link_bytes(source)


def sample(source):
    return ticks() + (traffic(source),)


def main(source, split_path):
    samples = [sample(source)]
    while not stop:
        time.sleep(INTERVAL_S)
        samples.append(sample(source))
    steady = steady_steps(samples)
    value = steady_kernel_share(steady)
    print("-" if value is None else f"{value:.3f}")
    if split_path:
        with open(split_path, "w") as f:
            print(steady_split(steady), file=f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
