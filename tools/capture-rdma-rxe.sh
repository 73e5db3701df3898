#!/usr/bin/env bash
# Captures what the in-tree C rdma_rxe puts on the wire, between two VMs: ibv_rc_pingpong SENDs of
# several packets, and RDMA WRITEs and READs from perftest. The pcap is the source of the golden
# packets in rxe_rs/proto/tests: copy it to rxe_rs/proto/tests/data/rdma_rxe.pcap, which
# golden_rdma_rxe.rs reads as it is.
#
#   tools/capture-rdma-rxe.sh [RESULTS_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
results=${1:-$root/results/capture}
rm -rf "$results"
"$root/scripts/vm-pair.sh" --timeout 900 "$results" -- bash "$root/tools/capture-guest.sh" -- bash "$root/tools/capture-guest.sh"
ls -la "$results"
