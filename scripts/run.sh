#!/usr/bin/env bash
# The demo: installs what is missing, builds, boots a VM, brings up an rxe_rs device with
# `rdma link add` on a veth and shows what a user sees (rdma link, ibv_devices, ibv_devinfo -v).
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
source "$RXE_RS_ROOT/scripts/lib/build.sh"

"$RXE_RS_ROOT/scripts/setup.sh"
build_all debug
"$RXE_RS_ROOT/scripts/vm.sh" --name rxe-demo -- bash -c '
set -e
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
ip link add veth0 type veth peer name veth1
ip addr add 10.11.0.1/24 dev veth0
ip link set veth0 up; ip link set veth1 up
set -x
rdma link add rxers0 type rxe_rs netdev veth0
rdma link show
ibv_devices
ibv_devinfo -v -d rxers0
'
