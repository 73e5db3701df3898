#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The device lifecycle as a user sees it: modprobe / rdma link add (with autoload) / ibv_devinfo
# through our provider / port state and MTU following the netdev / errnos / link delete, netdev
# removal and rmmod with devices present.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0

ktap_print_header
ktap_set_plan 23
reset_or_bail
make_veth veth0 veth1 10.11.0.1/24
ip -6 addr add fd00:11::1/64 dev veth0 nodad

# 1: the link type is unknown until the module loads; `rdma link add` must load it by alias.
check "rdma link add autoloads rxe_rs" rdma link add "$DEV" type rxe_rs netdev veth0
check "module rxe_rs is loaded" module_loaded rxe_rs
check "rdma link show lists $DEV on veth0" \
	bash -c "rdma link show | grep -E 'link $DEV/1 .*netdev veth0'"
check "ibv_devices lists $DEV" bash -c "ibv_devices | grep -qw $DEV"
# The ICRC through the crypto API: its PCLMULQDQ driver where the CPU has the instruction.
icrc_driver=crc32-generic
grep -qw pclmulqdq /proc/cpuinfo && icrc_driver=crc32-pclmul
dmesg | grep "$DEV: added on" | tail -1 | sed 's/^/# /'
check "the ICRC is computed by $icrc_driver" bash -c "dmesg | grep '$DEV: added on' | tail -1 | grep -q 'ICRC by $icrc_driver\$'"

# Through our provider: libibverbs warns and skips the device when no provider matches it.
info=$(IBV_SHOW_WARNINGS=1 ibv_devinfo -v -d "$DEV" 2>&1)
echo "$info" | sed 's/^/# /' | head -70
check "ibv_devinfo -v opens $DEV through librxe_rs" \
	bash -c "grep -q 'hca_id:.*$DEV' <<<\"\$0\" && ! grep -qi 'no userspace device-specific driver' <<<\"\$0\"" "$info"
check "port is PORT_ACTIVE with an Ethernet link layer" \
	bash -c "grep -q 'state:.*PORT_ACTIVE' <<<\"\$0\" && grep -q 'link_layer:.*Ethernet' <<<\"\$0\"" "$info"
check "RoCEv2 GID of the IPv4 address" \
	bash -c "grep -Eq 'GID\[ *[0-9]+\]:.*::ffff:10\.11\.0\.1, RoCE v2' <<<\"\$0\"" "$info"
check "RoCEv2 GID of the IPv6 address" \
	wait_for 10 gid_present "$DEV" "fd00:0011:0000:0000:0000:0000:0000:0001"
check "active MTU 1024 on a 1500-byte netdev" \
	bash -c "grep -Eq 'active_mtu:.*1024' <<<\"\$0\"" "$info"
guid=$(cat /sys/class/infiniband/$DEV/node_guid)
mac=$(cat /sys/class/net/veth0/address)
check "node GUID is the EUI-64 of the MAC ($guid, $mac)" \
	bash -c "python3 -c 'import sys; m=bytes.fromhex(sys.argv[2].replace(\":\",\"\")); e=bytes([m[0]^2])+m[1:3]+b\"\\xff\\xfe\"+m[3:]; sys.exit(e.hex()!=sys.argv[1].replace(\":\",\"\"))' $guid $mac"

ip link set veth0 mtu 9000
ip link set veth1 mtu 9000
check "active MTU follows the netdev to 4096" \
	bash -c "ibv_devinfo -d $DEV | grep -Eq 'active_mtu:.*4096'"
downed=$(hw_counter "$DEV" link_downed)
ip link set veth1 down
check "port goes DOWN when the netdev loses carrier" wait_for 10 port_state_is "$DEV" DOWN
link_downed_is() { [[ $(hw_counter "$DEV" link_downed) == "$1" ]]; }
check "the port's going down counts in link_downed (rdma_rxe's name)" wait_for 5 link_downed_is $((downed + 1))
ip link set veth1 up
check "port comes back ACTIVE with the carrier" wait_for 10 port_state_is "$DEV" ACTIVE

check "second device on the same netdev: EEXIST" \
	fails_with "File exists" rdma link add rxers1 type rxe_rs netdev veth0
check "second device with the same name: EEXIST" \
	fails_with "File exists" rdma link add "$DEV" type rxe_rs netdev veth1
check "missing netdev: ENODEV" \
	fails_with "No such device" rdma link add rxers1 type rxe_rs netdev nosuchdev0
check "rdma link delete removes the device" \
	bash -c "rdma link delete $DEV && ! ibv_devices | grep -qw $DEV"

rdma link add "$DEV" type rxe_rs netdev veth0
ip link del veth0
check "removing the netdev removes the device" wait_for 20 ib_gone "$DEV"

make_veth veth0 veth1 10.11.0.1/24
make_veth veth2 veth3 10.12.0.1/24
rdma link add rxers0 type rxe_rs netdev veth0
rdma link add rxers2 type rxe_rs netdev veth2
check "rmmod with two devices present removes them" \
	bash -c "modprobe -r rxe_rs && ! ibv_devices | grep -q rxers"

check "modprobe rxe_rs loads the module" \
	bash -c "modprobe rxe_rs && grep -q '^rxe_rs ' /proc/modules && modprobe -r rxe_rs"

# Both drivers want UDP 4791 in init_net: the second one must refuse cleanly.
modprobe rdma_rxe
check "with rdma_rxe loaded, modprobe rxe_rs fails with EADDRINUSE" \
	fails_with "Address already in use" modprobe rxe_rs
modprobe -r rdma_rxe
reset_or_bail
ktap_finished
