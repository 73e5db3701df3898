"""Turns the rows bench/guest.sh recorded into the side-by-side table of `make bench`.

Usage: report.py [--partial] RESULTS_DIR
Reads RESULTS_DIR/results.csv (stack,test,bytes,metric,value; a row per pass); prints the table
of medians with their spread ((max - min) / median over the passes) and the ratio of the medians
rxe_rs / rdma_rxe, and writes it as RESULTS_DIR/bench.csv and plots it to RESULTS_DIR/bench.png
(gnuplot). The rows without RDMA (TCP's bandwidth, the reference round trips of the pseudo-stack
"link") follow, their figure in the rxe_rs column. A missing measurement shows as "-" and makes
the exit status 1 (with --partial, for a run of some cases only, only a row that one stack
lacks does).
"""
import csv
import os
import statistics
import subprocess
import sys

STACKS = ("rxe_rs", "rdma_rxe")


def load(path):
    """{(stack, test, size, metric): [value of each pass]} and the keys in order of appearance."""
    values, order = {}, []
    with open(path) as f:
        for stack, test, size, metric, value in csv.reader(f):
            key = (test, int(size), metric)
            if key not in order:
                order.append(key)
            values.setdefault((stack,) + key, []).append(float(value))
    return values, order


def median(runs):
    return None if not runs else statistics.median(runs)


def spread(runs):
    """(max - min) / median of the passes, in percent; None for fewer than two."""
    if not runs or len(runs) < 2 or statistics.median(runs) == 0:
        return None
    return 100 * (max(runs) - min(runs)) / statistics.median(runs)


def ratio(ours, theirs):
    """rxe_rs / rdma_rxe (for bandwidth above 1 is better, for latency below 1)."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def plot(out, rows):
    data = os.path.join(out, "bench.dat")
    with open(data, "w") as f:
        for metric in ("MB/s", "usec"):
            for test in dict.fromkeys(r[0] for r in rows if r[2] == metric):
                f.write(f'"{test}"\n')
                for t, size, m, ours, theirs, _ in rows:
                    if t == test and m == metric:
                        f.write(f"{size} {ours if ours is not None else '?'} {theirs if theirs is not None else '?'}\n")
                f.write("\n\n")
    bw_tests = list(dict.fromkeys(r[0] for r in rows if r[2] == "MB/s"))
    lat_tests = list(dict.fromkeys(r[0] for r in rows if r[2] == "usec"))

    def series(tests, first_index):
        parts = []
        for i, test in enumerate(tests):
            idx = first_index + i
            parts.append(f"'{data}' index {idx} using 1:2 with linespoints lc {i + 1} dt 1 title '{test} rxe_rs'")
            parts.append(f"'{data}' index {idx} using 1:3 with linespoints lc {i + 1} dt 2 title '{test} rdma_rxe'")
        return ", ".join(parts)

    panels = []
    if bw_tests:
        panels.append(f"""set logscale y 10
set ylabel 'bandwidth (MB/s)'
set title 'perftest bandwidth (BW average)'
plot {series(bw_tests, 0)}
unset logscale y""")
    if lat_tests:
        panels.append(f"""set ylabel 'latency (usec, median)'
set title 'perftest latency (t_typical)'
plot {series(lat_tests, len(bw_tests))}""")
    if not panels:
        return False
    body = "\n".join(panels)
    script = f"""
set terminal pngcairo size {700 * len(panels)},600 noenhanced
set output '{os.path.join(out, "bench.png")}'
set multiplot layout 1,{len(panels)} title 'rxe_rs vs rdma_rxe (same VMs, same link)'
set logscale x 2
set format x '%.0f'
set grid
set key top left font ',8'
set xlabel 'message size (bytes)'
{body}
unset multiplot
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"bench: no plot ({err})", file=sys.stderr)
        return False
    return True


def main(out, partial=False):
    values, order = load(os.path.join(out, "results.csv"))
    tests = list(dict.fromkeys(t for t, _, _ in order))
    order.sort(key=lambda k: (tests.index(k[0]), k[1]))
    rows, spreads = [], {}
    # The reference round trips without RDMA (guest.sh floor_case): the pseudo-stack "link".
    floor_runs = {t: v for (s, t, _, _), v in values.items() if s == "link"}
    floor_tests = set(floor_runs)
    required_floor = ("echo rtt/2 (both busy)", "echo rtt (client busy)")
    if not partial:
        floor_tests.update(required_floor)
    floor_order = [t for t in required_floor if t in floor_tests] + sorted(floor_tests - set(required_floor))
    for test, size, metric in order:
        if test.startswith("iperf3") or test in floor_tests:
            continue
        runs = [values.get((s, test, size, metric)) for s in STACKS]
        ours, theirs = (median(r) for r in runs)
        spreads[(test, size, metric)] = [spread(r) for r in runs]
        rows.append((test, size, metric, ours, theirs, ratio(ours, theirs)))
    tcp_runs = {t: v for (s, t, _, _), v in values.items() if t.startswith("iperf3")}
    tcp = {t: median(v) for t, v in tcp_runs.items()}
    required_tcp = ("iperf3 -P 1", "iperf3 -P 4")
    tcp_tests = list(dict.fromkeys(list(required_tcp) + sorted(tcp_runs)))
    passes = max((len(v) for v in values.values()), default=0)

    def pct(v):
        return "-" if v is None else f"{v:.0f}%"

    print(f"medians of {passes} pass(es); +-: spread of the passes, (max - min) / median")
    header = (f"{'test':<22}{'bytes':>9}  {'unit':<9}{'rxe_rs':>11}{'+-':>5}{'rdma_rxe':>11}{'+-':>5}"
              f"{'rxe_rs/rdma_rxe':>17}")
    print(header)
    print("-" * len(header))
    for test, size, metric, ours, theirs, r in rows:
        s_ours, s_theirs = spreads[(test, size, metric)]
        print(f"{test:<22}{size:>9}  {metric:<9}{fmt(ours):>11}{pct(s_ours):>5}{fmt(theirs):>11}{pct(s_theirs):>5}"
              f"{fmt(r):>17}")
    for t in tcp_tests:
        print(f"{'TCP ' + t:<31}  {'MB/s':<9}{fmt(tcp.get(t)):>11}{pct(spread(tcp_runs.get(t))):>5}")
    for t in floor_order:
        runs = floor_runs.get(t)
        print(f"{'link ' + t:<31}  {'usec':<9}{fmt(median(runs)):>11}{pct(spread(runs)):>5}")
    print("(ratio rxe_rs/rdma_rxe: above 1 is better for MB/s and kmsg/s, below 1 for usec and CPU s/GB)")

    with open(os.path.join(out, "bench.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["test", "bytes", "unit", "rxe_rs", "rxe_rs spread %", "rdma_rxe", "rdma_rxe spread %", "ratio"])
        for test, size, metric, ours, theirs, r in rows:
            s_ours, s_theirs = spreads[(test, size, metric)]
            w.writerow([test, size, metric, fmt(ours, 3), fmt(s_ours, 1), fmt(theirs, 3), fmt(s_theirs, 1), fmt(r, 3)])
        for t in tcp_tests:
            w.writerow([f"{t} (TCP)", 131072, "MB/s", fmt(tcp.get(t), 3), fmt(spread(tcp_runs.get(t)), 1), "", "", ""])
        for t in floor_order:
            runs = floor_runs.get(t)
            w.writerow([f"{t} (link)", 64, "usec", fmt(median(runs), 3), fmt(spread(runs), 1), "", "", ""])
    plotted = plot(out, rows)
    complete = all(r[3] is not None and r[4] is not None for r in rows)
    if not partial:
        complete = complete and all(t in tcp for t in required_tcp) and all(t in floor_runs for t in required_floor)
    print(f"bench: {os.path.join(out, 'bench.csv')}" + (f", {os.path.join(out, 'bench.png')}" if plotted else ""))
    return 0 if complete and rows else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    partial = "--partial" in args
    args = [a for a in args if a != "--partial"]
    sys.exit(main(args[0], partial))
