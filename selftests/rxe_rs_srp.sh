#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# SRP over rxe_rs, target and initiator on one host: LIO's ib_srpt exports a null_blk LUN and
# listens on RDMA/CM, ib_srp logs in over rxe_rs (local delivery) and a SCSI disk appears, on
# which fio writes and verifies. ib_srp polls its send CQ with interrupts off
# (ib_process_cq_direct under spin_lock_irqsave in srp_queuecommand and srp_destroy_qp): the
# CQ's lock must be IRQ-safe and every verb it calls safe there (the suite fails on the lockdep
# or softirq warning otherwise). Then the initiator logs out and everything comes down.
source "$(dirname "$0")/guest/lib.sh"
DEV=rxers0 IP=10.11.0.1 PORT=5555
CFS=/sys/kernel/config/target

ktap_print_header
ktap_set_plan 5
reset_or_bail
# The configfs tree and the modules, in the order they can go, whatever state a failure left.
teardown() {
	local p
	for p in /sys/class/srp_remote_ports/port-*; do [[ -e $p/delete ]] && echo 1 >"$p/delete"; done
	wait_for 60 eval '! ls -d /sys/class/srp_remote_ports/port-* >/dev/null 2>&1'
	modprobe -r ib_srp scsi_transport_srp 2>/dev/null
	[[ -n ${TPG:-} && -e $TPG/enable ]] && echo 0 >"$TPG/enable"
	rm -f "$TPG/acls/$IP/lun_0/lun_0" "$TPG/lun/lun_0/vdev0" 2>/dev/null
	rmdir "$TPG/acls/$IP/lun_0" "$TPG/acls/$IP" "$TPG/lun/lun_0" "$TPG" "$CFS/srpt/${WWN:-none}" 2>/dev/null
	[[ -e $CFS/srpt/discovery_auth/rdma_cm_port ]] && echo 0 >"$CFS/srpt/discovery_auth/rdma_cm_port"
	rmdir "$CFS/srpt" "$CFS/core/iblock_0/vdev0" "$CFS/core/iblock_0" 2>/dev/null
	modprobe -r ib_srpt target_core_iblock target_core_mod null_blk sd_mod 2>/dev/null
	rdma link delete "$DEV" 2>/dev/null
	true
}
trap teardown EXIT

make_veth veth0 veth1 $IP/24
rdma link add "$DEV" type rxe_rs netdev veth0
wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"

# The target: a 1 GiB memory-backed null_blk LUN (pages allocated as written) through LIO's
# iblock backstore, exported by
# ib_srpt on the port named after the device's default GID (its interface id), to the
# initiator at this host's address, listening on RDMA/CM port $PORT.
target() {
	modprobe null_blk nr_devices=1 gb=1 bs=512 memory_backed=1 &&
		modprobe target_core_iblock && modprobe ib_srpt srp_max_req_size=8260 || return 1
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
	mkdir -p "$CFS/core/iblock_0/vdev0" &&
		echo udev_path=/dev/nullb0 >"$CFS/core/iblock_0/vdev0/control" &&
		echo 1 >"$CFS/core/iblock_0/vdev0/enable" || return 1
	mkdir -p "$CFS/srpt" && echo $PORT >"$CFS/srpt/discovery_auth/rdma_cm_port" || return 1
	local gid
	gid=$(cat "/sys/class/infiniband/$DEV/ports/1/gids/0")
	WWN=${gid#fe80:0000:0000:0000:} TPG=$CFS/srpt/${gid#fe80:0000:0000:0000:}/tpgt_1
	mkdir "$CFS/srpt/$WWN" "$TPG" "$TPG/lun/lun_0" &&
		ln -s "$CFS/core/iblock_0/vdev0" "$TPG/lun/lun_0/vdev0" &&
		mkdir -p "$TPG/acls/$IP/lun_0" && ln -s "$TPG/lun/lun_0" "$TPG/acls/$IP/lun_0/lun_0" &&
		echo 1 >"$TPG/enable"
}
check "ib_srpt exports a null_blk LUN on $DEV, listening on RDMA/CM port $PORT" target

# The initiator: one channel, logged in through RDMA/CM; its disk is the SCSI device of the
# new SRP host.
disk=
login() {
	# (The guest runs no udev to load the disk driver for the new SCSI device.)
	modprobe sd_mod && modprobe ib_srp ch_count=1 || return 1
	local guid host dev
	guid=$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)
	echo "id_ext=$guid,ioc_guid=$guid,dest=$IP:$PORT,src=$IP" >"/sys/class/infiniband_srp/srp-$DEV-1/add_target" || return 1
	host=$(basename /sys/class/srp_remote_ports/port-*) host=${host#port-} host=${host%:*}
	echo "# SRP host $host: $(cat "/sys/class/scsi_host/host$host/proc_name")"
	wait_for 60 eval "ls /sys/class/scsi_device/$host:*/device/block/ >/dev/null 2>&1" || return 1
	dev=$(basename "$(find /sys/class/scsi_device/"$host":*/device/block/ -mindepth 1 -maxdepth 1 | head -n1)")
	disk=/dev/$dev
	wait_for 30 test -b "$disk"
	echo "# $disk: $(cat "/sys/block/$dev/device/vendor" "/sys/block/$dev/device/model" | tr -s ' \n' ' ')"
}
check "ib_srp logs in over $DEV (RDMA/CM) and a SCSI disk appears" login
sent=$(hw_counter "$DEV" sent_pkts)
check "fio writes 8 MiB to the SRP disk and verifies it (crc32c)" \
	fio --name=srp --filename="$disk" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
	--size=8M --verify=crc32c --verify_fatal=1 --minimal
echo "# $DEV sent $(($(hw_counter "$DEV" sent_pkts) - sent)) packets during fio"
check "... over $DEV (its packet counter moved)" test "$(hw_counter "$DEV" sent_pkts)" -gt $((sent + 4096))
logout() {
	local p
	for p in /sys/class/srp_remote_ports/port-*; do echo 1 >"$p/delete"; done
	wait_for 60 eval '! ls -d /sys/class/srp_remote_ports/port-* >/dev/null 2>&1' &&
		modprobe -r ib_srp scsi_transport_srp
}
check "the initiator logs out and ib_srp unloads" logout
teardown
trap - EXIT
reset_or_bail
ktap_finished
