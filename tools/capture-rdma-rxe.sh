#!/usr/bin/env bash
# Captures what the in-tree C rdma_rxe puts on the wire, between two VMs: ibv_rc_pingpong SENDs of
# several packets, and RDMA WRITEs and READs from perftest. The pcap is the source of the golden
# packets in rxe_rs/proto/tests (see tools/pcap-to-golden.py).
#
#   tools/capture-rdma-rxe.sh [RESULTS_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
results=${1:-$root/results/capture}
rm -rf "$results"
"$root/scripts/vm-pair.sh" --timeout 900 "$results" -- bash "$root/tools/capture-guest.sh" -- bash "$root/tools/capture-guest.sh"
ls -la "$results"
