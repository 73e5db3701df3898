#!/usr/bin/env bash
# NVMe over Fabrics on RDMA between the two VMs, in three pairings in one boot (make check: the
# first, see PAIR_PAIRINGS below): rxe_rs on both ends, rxe_rs target (A) with an rdma_rxe
# host (B; the target's receives then on SRQs: nvmet-rdma use_srq=1, a kernel consumer's SRQ),
# and an rdma_rxe target (A) with an rxe_rs host (B). A exports a memory-backed null_blk
# namespace through nvmet-rdma; B discovers it, connects with nvme-rdma, and runs fio with
# crc32c verification (random writes of 4 KiB to 1 MiB at queue depth 16, then mixed reads and
# writes at depth 1), disconnects, connects again and verifies what it wrote before (fio
# --verify_only), and disconnects. Where B runs rxe_rs,
# it then deletes its RDMA link under I/O: fio must end (with I/O errors) and nothing hang. With
# rxe_rs on both ends, verified I/O also runs over a link that damages RoCE frames (the host's
# relay, as in lossy_link.sh): it must recover or fail the I/O, never return wrong data or hang.
# In each pairing the target's RDMA device is deleted with its port still enabled before the
# export goes.
#
# Why the target's device goes first there: once a queue's first command has run from rdma_cm's
# event handler (nvmet_rdma_queue_established, when the command arrived before the RTU, as a
# damaged link or a slow host makes likely), nvmet has taken nvmet_config_sem under the cm_id's handler_mutex;
# unlinking the port from the subsystem takes them the other way round (nvmet_config_sem, then
# rdma_destroy_id of the listener) and draws lockdep's report on nvmet's own lock order. With the
# device gone first, rdma_cm destroys the listener itself and the unlink takes no handler_mutex.
#
# What it exercises: the host registers each command's buffer with IB_WR_REG_MR (a fresh key
# byte per I/O) and the target moves the data with RDMA READ/WRITE to that rkey, then answers
# with SEND WITH INVALIDATE, which the host's responder applies (IB_WC_WITH_INVALIDATE, checked
# by nvme-rdma: "Bogus remote invalidation" otherwise); 4 KiB writes go in the command capsule.
# KTAP results go to stdout; the kernel log must stay clean (run-suite.sh checks it).
source "$RXE_RS_ROOT/selftests/guest/pair.sh"
source "$RXE_RS_ROOT/selftests/guest/lib.sh"

NQN=nqn.2026-11.io.rxe-rs:pair
HOSTNQN=nqn.2026-11.io.rxe-rs:host-b
CFS=/sys/kernel/config/nvmet
# fio's verified jobs: sizes small enough for a debug kernel under TCG (about 1 MB/s there, less
# on a slow CI machine beside the single-VM guests: 8 MiB and 4 MiB took the suite past 90 min).
FIO_COMMON=(--direct=1 --ioengine=libaio --verify=crc32c --verify_fatal=1 --verify_state_save=0
	--randrepeat=1 --group_reporting)
FIO_WRITE=(--name=write --rw=randwrite --bssplit=4k/40:64k/40:1m/20 --size=4M --iodepth=16)
FIO_LOSSY=(--name=lossy --rw=randrw --bssplit=4k/50:64k/50 --offset=64M --size=2M --iodepth=8)
# The damage for the lossy step (per RoCE frame, both ways), as lossy_link.sh's.
LOSSY_IMPAIRMENT=${RXE_RS_IMPAIRMENT:-loss=0.03 dup=0.02 reorder=0.03 corrupt=0.01}
FIO_MIXED=(--name=mixed --rw=randrw --bssplit=4k/50:16k/30:128k/20 --offset=32M --size=2M --iodepth=1)

# The exported namespace: a 1 GiB memory-backed null_blk device (pages allocated as written) behind port 4420 on our
# address (rdma_cm listens there on whichever RDMA device has the address).
# With SRQ=1, nvmet-rdma takes every queue's receives from shared receive queues (use_srq=1):
# a kernel consumer's SRQ, posted with ib_post_srq_recv.
target_up() {
	mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
	local enabled
	enabled=$(dmesg | grep -c "nvmet_rdma: enabling port 1 ($PAIR_MY_IP:4420)")
	modprobe null_blk nr_devices=1 gb=1 memory_backed=1 bs=4096 &&
		modprobe nvmet && modprobe nvmet-rdma use_srq="${SRQ:-0}" || return
	# (Read when the module loads: a module left loaded by the last pairing keeps its value.)
	if [[ $(cat /sys/module/nvmet_rdma/parameters/use_srq) != "$( ((${SRQ:-0})) && echo Y || echo N)" ]]; then
		echo "# nvmet-rdma was loaded with use_srq=$(cat /sys/module/nvmet_rdma/parameters/use_srq)"
		return 1
	fi
	local sub=$CFS/subsystems/$NQN port=$CFS/ports/1
	mkdir "$sub" "$sub/namespaces/1" "$port" &&
		echo 1 >"$sub/attr_allow_any_host" &&
		echo -n /dev/nullb0 >"$sub/namespaces/1/device_path" &&
		echo 1 >"$sub/namespaces/1/enable" &&
		echo rdma >"$port/addr_trtype" &&
		echo ipv4 >"$port/addr_adrfam" &&
		echo "$PAIR_MY_IP" >"$port/addr_traddr" &&
		echo 4420 >"$port/addr_trsvcid" &&
		ln -s "$sub" "$port/subsystems/$NQN" || return
	# nvmet_rdma logs the port it enabled, or why it could not.
	wait_for 30 port_enabled_since "$enabled"
}

# The RDMA core lists an SRQ of the target's device (nvmet-rdma's, one per completion vector).
srq_in_use() {
	rdma resource show srq dev "$DEV" | sed 's/^/# /'
	[[ -n $(rdma resource show srq dev "$DEV") ]]
}

# nvmet_rdma said it enabled our port more than N times.
port_enabled_since() {
	(($(dmesg | grep -c "nvmet_rdma: enabling port 1 ($PAIR_MY_IP:4420)") > $1))
}

# Takes the export down again (with whatever connections remain) and unloads nvmet, so the
# next pairing's drivers can go.
target_down() {
	local sub=$CFS/subsystems/$NQN port=$CFS/ports/1
	rm -f "$port/subsystems/$NQN"
	[[ -d $port ]] && rmdir "$port"
	[[ -d $sub/namespaces/1 ]] && { echo 0 >"$sub/namespaces/1/enable"; rmdir "$sub/namespaces/1"; }
	[[ -d $sub ]] && rmdir "$sub"
	wait_for 60 unload nvmet_rdma && wait_for 30 unload nvmet && wait_for 30 unload null_blk
}

# The namespace's block device once connected (none before).
ns_device() {
	local d
	for d in /sys/block/nvme*n1; do
		[[ -e $d ]] && grep -qx "$NQN" "$d/device/subsysnqn" 2>/dev/null && { echo "/dev/${d##*/}"; return 0; }
		# (With native multipath the namespace's head hangs off the subsystem instead.)
		[[ -e $d ]] && grep -qx "$NQN" "$d/device/../subsysnqn" 2>/dev/null && { echo "/dev/${d##*/}"; return 0; }
	done
	return 1
}

discover() {
	local out
	out=$(timeout 120 nvme discover -t rdma -a "$PAIR_PEER_IP" -s 4420 -q "$HOSTNQN" 2>&1)
	local rc=$?
	sed 's/^/# /' <<<"$out" | grep -E 'trtype|subnqn|traddr|Failed|error' | head -8
	((rc == 0)) && grep -q "subnqn: *$NQN" <<<"$out" && grep -q 'trtype: *rdma' <<<"$out" && return
	nvme_diagnose
	return 1
}

# The kernel's last words on NVMe and RDMA, after a failure.
nvme_diagnose() {
	dmesg | grep -E 'nvme|rdma|rxe' | tail -n 12 | sed 's/^/# diagnose: dmesg: /'
}

connect() {
	timeout 120 nvme connect -t rdma -n "$NQN" -a "$PAIR_PEER_IP" -s 4420 -q "$HOSTNQN" \
		-i 1 -Q 32 || { nvme_diagnose; return 1; }
	wait_for 60 ns_device >/dev/null || { echo "# connected, but no block device for $NQN"; return 1; }
	echo "# $(ns_device): $(cat "/sys/block/$(basename "$(ns_device)")/size") sectors"
}

disconnect() {
	local out
	out=$(timeout 120 nvme disconnect -n "$NQN" 2>&1)
	echo "# $out"
	[[ $out == *"disconnected 1 controller"* ]] && wait_for 30 bash -c '! ls /sys/block/nvme*n1 >/dev/null 2>&1'
}

# fio JOB... on the namespace, bounded; shows its summary lines.
run_fio() {
	local dev out rc
	dev=$(ns_device) || { echo "# no namespace device"; return 1; }
	out=$(timeout 600 fio --filename="$dev" "${FIO_COMMON[@]}" "$@" 2>&1)
	rc=$?
	grep -E 'READ:|WRITE:|verify|err=|error' <<<"$out" | head -8 | sed 's/^/# /'
	((rc == 0)) && ! grep -qE 'err= *[1-9]|verify: bad' <<<"$out"
}

# I/Os the namespace's block device completed so far (reads + writes).
ios_done() {
	local stat
	read -r -a stat <"/sys/block/$1/stat" && echo $((stat[0] + stat[4]))
}

# fio under I/O while our RDMA link is deleted: nvme-rdma's device removal deletes the
# controller, so fio must end (its I/Os fail) and the link delete return, within bounds, well
# before fio's own run time is up.
link_delete_under_io() {
	local dev name out=/tmp/nvmeof-fio-gone.out before
	dev=$(ns_device) || return 1
	name=${dev#/dev/}
	before=$(ios_done "$name")
	timeout 300 fio --filename="$dev" --direct=1 --ioengine=libaio --name=gone --rw=randrw \
		--bs=64k --iodepth=8 --size=64M --time_based --runtime=240 >"$out" 2>&1 &
	local fio=$!
	# (fio takes seconds to start in a TCG guest: delete only once its I/O flows.)
	wait_for 120 eval '(($(ios_done "$name") >= before + 16))' || { echo "# fio did no I/O"; cat "$out"; kill -9 $fio; return 1; }
	local t0=$SECONDS flowed=$(($(ios_done "$name") - before))
	timeout 180 rdma link delete "$DEV" || { echo "# rdma link delete $DEV failed or hung"; kill -9 $fio; return 1; }
	echo "# link deleted in $((SECONDS - t0)) s, after $flowed I/Os"
	wait_for 120 bash -c "! kill -0 $fio 2>/dev/null" || { echo "# fio still running 120 s after the link went"; kill -9 $fio; return 1; }
	wait $fio
	local rc=$?
	echo "# fio ended with status $rc $((SECONDS - t0)) s after the delete: $(grep -oE 'err= *[0-9-]+.*|io=[^,]*' "$out" | head -3 | tr '\n' ' ')"
	((rc != 0)) || { echo "# fio reported success on a device that went away"; return 1; }
	! ns_device >/dev/null
}

# RoCE frames the host's relay lost so far, both ways (vm-pair.sh --impairable).
relay_lost() {
	grep -hE '^(a>b|b>a)\.lost=' "$PAIR_RESULTS/impair.stats" 2>/dev/null | awk -F= '{ s += $2 } END { print s + 0 }'
}

# Verified I/O while the relay loses, duplicates, reorders and corrupts RoCE frames: RC must
# recover or nvme-rdma must fail the I/O and recover the controller, never hand back wrong
# data (a verify mismatch fails this even where fio's exit would not) or hang.
lossy_io() {
	local lost out rc
	lost=$(relay_lost)
	echo "$LOSSY_IMPAIRMENT seed=$RANDOM" >"$PAIR_RESULTS/impair"
	nap 1 # (the relay re-reads its control file twice a second)
	connect || { : >"$PAIR_RESULTS/impair"; return 1; }
	out=$(timeout 600 fio --filename="$(ns_device)" "${FIO_COMMON[@]}" "${FIO_LOSSY[@]}" 2>&1)
	rc=$?
	: >"$PAIR_RESULTS/impair"
	nap 1
	grep -E 'READ:|WRITE:|verify|err=|error' <<<"$out" | head -8 | sed 's/^/# /'
	echo "# fio exit $rc; the relay lost $(($(relay_lost) - lost)) RoCE frames meanwhile"
	((rc != 124)) || { echo "# fio still running after 600 s"; return 1; }
	! grep -qE 'verify: bad|bad magic|crc32c: verify failed' <<<"$out" || return 1
	(($(relay_lost) > lost)) || { echo "# the relay lost nothing: the link was not impaired"; return 1; }
	disconnect
}

# The target's RDMA device goes with the port still enabled (see the top): the ib device is
# gone, and nvmet_rdma said so for the port's listener.
target_link_delete() {
	rdma link delete "$DEV" && wait_for 60 ib_gone "$DEV"
}

# Runs CHECK unless the pairing is down (then fails it unrun).
step() {
	local description=$1
	shift
	if [[ -n $down ]]; then
		ktap_test_fail "$description: not run, a stack or the target is not up"
		return 1
	fi
	check "$description" "$@"
}

# One pairing LABEL, with stack MINE here.
pairing() {
	local mine=$1 label=$2
	down=
	pair_barrier "$label-start" || return
	check "$label: $mine up on $PAIR_DEV, and the peer's stack" pair_stack_up_both "$mine" "$label" || down=1
	if [[ $PAIR_ROLE == a ]]; then
		# rxe_rs serving rdma_rxe: the target's receives on SRQs (checked once the host is done).
		local srq=0
		[[ $label == "rxe_rs<->rdma_rxe" ]] && srq=1
		step "$label: nvmet-rdma exports a null_blk namespace on $DEV$( ((srq)) && echo ', its receives on SRQs')" \
			eval 'SRQ=$srq target_up' || : >"$PAIR_RESULTS/a.$label-no-target"
		pair_barrier "$label-target" || return
		if ((srq)); then
			# While the host is connected (nvmet-rdma makes a device's SRQs when its first
			# queue connects, and frees them with its last).
			wait_for 900 test -e "$PAIR_RESULTS/b.$label-connected"
			check "$label: the target's queues take their receives from SRQs" srq_in_use
		fi
		pair_barrier "$label-host-done" || return
		dmesg | grep -E 'nvmet' | tail -n 6 | sed 's/^/# target: /'
		# (In every pairing: a command before the RTU needs no damaged link, a slow host does.)
		step "$label: the target's RDMA device deleted with its port enabled" target_link_delete
		if [[ -n $down ]]; then
			ktap_test_fail "$label: target torn down: not run"
			target_down
		else
			check "$label: target torn down, nvmet unloaded" target_down
		fi
	else
		pair_barrier "$label-target" || return
		[[ -e $PAIR_RESULTS/a.$label-no-target ]] && down=1
		step "$label: nvme discover lists $NQN over rdma" discover
		step "$label: nvme connect -t rdma, the namespace appears" connect || down=1
		: >"$PAIR_RESULTS/b.$label-connected"
		step "$label: fio random writes 4 KiB..1 MiB, depth 16, crc32c verified" run_fio "${FIO_WRITE[@]}"
		step "$label: fio mixed reads and writes, depth 1, crc32c verified" run_fio "${FIO_MIXED[@]}"
		step "$label: nvme disconnect" disconnect
		down=
		[[ -e $PAIR_RESULTS/a.$label-no-target ]] && down=1
		step "$label: connect again, and what was written before reads back intact" \
			eval 'connect && run_fio "${FIO_WRITE[@]}" --verify_only'
		step "$label: nvme disconnect again" disconnect
		if [[ $label == "rxe_rs<->rxe_rs" ]]; then
			step "$label: verified I/O over a link that loses, duplicates, reorders and corrupts" lossy_io
		fi
		if [[ $mine == rxe_rs ]]; then
			step "$label: rdma link delete under I/O: fio ends, nothing hangs" eval 'connect && link_delete_under_io'
		fi
		ns_device >/dev/null && timeout 60 nvme disconnect -n "$NQN" >/dev/null
		pair_barrier "$label-host-done" || return
	fi
	pair_barrier "$label-end"
}

# make check runs one of the three pairings: rxe_rs on both ends (rxe_rs's host and target,
# the lossy step and the link deleted under I/O). A pairing costs 5-10 minutes of a slow CI
# machine, and two took the pair phase past CI's limit; RXE_RS_NVMEOF_FULL=1 (make
# soak's first round) adds rxe_rs's target with rdma_rxe's host (its receives on SRQs) and
# rdma_rxe's target with rxe_rs's host.
PAIR_PAIRINGS="rxe_rs-rxe_rs"
[[ -n ${RXE_RS_NVMEOF_FULL:-} ]] && PAIR_PAIRINGS+=" rxe_rs-rdma_rxe rdma_rxe-rxe_rs"
# The plan: A has 4 results a pairing and the SRQ check; B 8 a pairing, the lossy step with
# rxe_rs on both ends, and the link delete wherever B runs rxe_rs.
plan=0
for p in $PAIR_PAIRINGS; do
	if [[ $PAIR_ROLE == a ]]; then
		plan=$((plan + 4))
		[[ $p == rxe_rs-rdma_rxe ]] && plan=$((plan + 1))
	else
		plan=$((plan + 8))
		[[ $p == rxe_rs-rxe_rs ]] && plan=$((plan + 1))
		[[ ${p#*-} == rxe_rs ]] && plan=$((plan + 1))
	fi
done

pair_link
ktap_print_header
ktap_set_plan "$plan"
pair_wait_peer 900 || { echo "# the peer never answered ping"; }
modprobe nvme-rdma 2>/dev/null
pair_each_pairing pairing
modprobe -r nvme-rdma 2>/dev/null
reset_modules
ktap_finished
