#!/usr/bin/env bash
# Boot the test kernel in a QEMU VM (virtme-ng, over the host's root filesystem) with the freshly
# built rxe_rs module installed in the guest's module tree, and run a command inside as root.
#
#   vm.sh [options] -- COMMAND...
#     --flavor debug|bench      which cached kernel (default debug)
#     --nic MAC,LPORT,RPORT     add a virtio NIC whose frames go to/come from UDP 127.0.0.1:RPORT
#                               /:LPORT (QEMU socket backend): two VMs with crossed ports share a link
#     --cpus N --memory M       guest size (default 2 CPUs, 2G)
#     --timeout S               kill the VM after S seconds (default 1800)
#     --name NAME               guest hostname
#     --rwdir DIR               a host directory the guest may write (e.g. results)
#     --pmem                    add 128 MiB of persistent memory (a QEMU NVDIMM; debug kernel)
#
# KVM is used when it works on this machine; otherwise (or if a KVM guest hangs, as it does on some
# nested setups) the VM runs under TCG. The probe result is cached per kernel.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"

flavor=debug cpus=2 memory=2G timeout_s=1800 name=rxe-vm pmem=
nics=()
rwdirs=()
while (($#)); do
	case $1 in
	--flavor) flavor=$2; shift 2 ;;
	--nic) nics+=("$2"); shift 2 ;;
	--cpus) cpus=$2; shift 2 ;;
	--memory) memory=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--name) name=$2; shift 2 ;;
	--rwdir) rwdirs+=(--rwdir "$2"); shift 2 ;;
	--pmem) pmem=1; shift ;;
	--) shift; break ;;
	*) echo "vm.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
(($#)) || { echo "usage: vm.sh [options] -- COMMAND..." >&2; exit 2; }

kdir=$("$RXE_RS_ROOT/scripts/kernel.sh" path "$flavor")
[[ -e $kdir/.rxe_rs-built ]] || { echo "vm.sh: kernel not built: run 'make kernel KFLAVOR=$flavor'" >&2; exit 1; }
# RXE_RS_MODULE: a module built for another flavor's kernel (scripts/bench.sh).
module=${RXE_RS_MODULE:-$RXE_RS_ROOT/rxe_rs.ko}
[[ -e $module ]] || { echo "vm.sh: $module not built: run 'make module'" >&2; exit 1; }
# A module built against the other flavor's kernel would load (same release) and then crash.
if [[ -e $module.kdir && $(cat "$module.kdir") != "$kdir" ]]; then
	echo "vm.sh: $module was built for $(cat "$module.kdir"): run 'make module KFLAVOR=$flavor'" >&2
	exit 1
fi

# The guest's /lib/modules/$(uname -r) is the tree's .virtme_mods/lib/modules/0.0.0: put our
# module there and index it, so that modprobe and `rdma link add` autoloading work as installed.
stage_module() {
	local mods=$kdir/.virtme_mods/lib/modules/0.0.0
	exec 8>"$kdir/.rxe_rs-mods.lock"
	flock 8
	if [[ ! -e $mods/modules.dep || $kdir/modules.order -nt $mods/modules.dep ]]; then
		(cd "$kdir" && "$RXE_RS_CACHE/venv/bin/virtme-prep-kdir-mods" >/dev/null)
	fi
	mkdir -p "$mods/extra"
	cp "$module" "$mods/extra/rxe_rs.ko"
	depmod -ae -F "$kdir/System.map" -b "$kdir/.virtme_mods" 0.0.0
	flock -u 8
}
stage_module

vng_base=("$VNG" --run "$kdir" --user root --name "$name" --cpus "$cpus" --memory "$memory")
# RXE_RS_VM_VERBOSE=1 shows the guest kernel's console on stderr; =warnings only its warnings
# and worse (loglevel 5: WARN, KASAN, BUG, oops, lockdep, lockups, panic), which the selftests
# keep: a guest that dies in a panic leaves nothing else behind.
console_level=
case ${RXE_RS_VM_VERBOSE:-} in
1) vng_base+=(--verbose) ;;
warnings) vng_base+=(--verbose) console_level=loglevel=5 ;;
esac
# The host's root as the guest sees it: virtme-ng's 9p options plus cache=loose, so that the
# guest caches file data and metadata. With 9p's default (no cache) every stat and open is a
# round trip to the host: an exec of a dynamic program cost 155 ms, `import pyverbs` 3.8 s,
# against 111 ms and 1.4 s cached. Nothing on the root changes while a guest runs (module and
# provider are in place before it boots; tests write only to --rwdir mounts, which keep 9p's
# default). RXE_RS_VM_APPEND: more kernel parameters.
root_flags=rootflags=version=9p2000.L,trans=virtio,access=any,msize=524288,cache=loose
# The debug kernel's watchdogs end the guest (a panic, which the harness reports with the
# console's last lines) instead of letting a lockup run into the test's timeout: a CPU stuck
# with preemption or interrupts off for 20 s (soft lockup, watchdog_thresh 10), an RCU grace
# period held up for 21 s (RCU CPU stall), a task blocked for 120 s (hung task, the kernel's
# default: nvme-rdma's error recovery over the lossy link blocks its tasks for tens of seconds).
watchdogs=
if [[ $flavor == debug ]]; then
	watchdogs="watchdog_thresh=10 softlockup_panic=1 rcupdate.rcu_cpu_stall_timeout=21"
	watchdogs+=" sysctl.kernel.panic_on_rcu_stall=1 hung_task_panic=1 sysctl.kernel.hung_task_timeout_secs=120"
	# The work-queue event that rxe_rs_data.sh reads the lanes' CPUs from, enabled while the
	# kernel boots on one CPU, into a trace instance that records only while a test turns it
	# on. Enabling the event at run time patches the kernel's text under every kworker, and
	# under TCG a kworker on the other vCPU once hit the int3 of that patching as an oops.
	watchdogs+=" trace_instance=lanes^traceoff,workqueue:workqueue_execute_start"
	# 4-level paging. TCG's CPU has LA57, and while identify_cpu() refills the boot CPU's
	# feature bits (all clear for a moment) KASAN takes an interrupt's access to the 5-level
	# direct map for a wild one: a false report at boot, after which lockdep is off for the
	# whole run (seen in make soak's 4 GiB guests).
	watchdogs+=" no5lvl"
fi
vng_base+=(--append "$root_flags${console_level:+ $console_level} $watchdogs${RXE_RS_VM_APPEND:+ $RXE_RS_VM_APPEND}")

accel_flag() {
	local probe
	probe=$RXE_RS_CACHE/accel-$(basename "$kdir")
	if [[ ! -e $probe ]]; then
		local accel=tcg
		if [[ -w /dev/kvm ]] && timeout 60 "${vng_base[@]}" --exec true >/dev/null 2>&1; then
			accel=kvm
		fi
		echo "$accel" >"$probe"
		echo "vm.sh: this machine runs VMs with $accel" >&2
	fi
	[[ $(cat "$probe") == kvm ]] || echo --disable-kvm
}

# virtme-ng gives the guest six virtio-serial devices, one port each, and QEMU makes room on each
# for 31 ports: 64 virtqueues, so 384 host notifiers (eventfds) that QEMU's main loop polled on
# every wakeup, one per datagram the link receives. That poll took a quarter of the host's CPU
# during a stream between the guests (host `perf`: fdget, do_sys_poll, eventfd_poll). A
# virtserialport is port 1 (port 0 is the console's), so 2 ports are enough, and the ports'
# little traffic needs no notifier: a kick is handled in the vCPU thread. 8 eventfds remain.
qemu_opts=" -global virtio-serial-pci.max_ports=2 -global virtio-serial-pci.ioeventfd=off"
# RXE_RS_VM_RX_RING=N: N receive buffers per NIC instead of QEMU's 256 (power of 2, up to 1024),
# for experiments: 1024 did not change the bench's ratios (performance.md).
for i in "${!nics[@]}"; do
	IFS=, read -r mac lport rport <<<"${nics[$i]}"
	qemu_opts+=" -netdev socket,id=rxenet$i,udp=127.0.0.1:$rport,localaddr=127.0.0.1:$lport"
	qemu_opts+=" -device virtio-net-pci,netdev=rxenet$i,mac=$mac${RXE_RS_VM_RX_RING:+,rx_queue_size=$RXE_RS_VM_RX_RING}"
done

# --pmem: 128 MiB of persistent memory, a QEMU NVDIMM (ACPI NFIT; the debug kernel has the
# drivers), which the FLUSH for persistence tests map as device DAX (selftests/guest/lib.sh:
# pmem_dax). Backed by host RAM, only the pages a test touches. It costs a guest about 6 s of
# boot under TCG: only the single-VM test guests ask for it.
if [[ -n $pmem ]]; then
	qemu_opts+=" -machine nvdimm=on -m $memory,slots=2,maxmem=64G"
	qemu_opts+=" -object memory-backend-ram,id=rxepmem,size=128M -device nvdimm,id=rxenvdimm,memdev=rxepmem"
fi

# No udev in the guest: virtme-ng's init would start udevd and wait for its coldplug, which
# took 185-240 s of a 1-CPU TCG guest's 290 s of boot whatever its rules (enumerating sysfs
# alone took 36 s). The guest's root is the host's, served by QEMU over 9p, so QEMU runs in a
# mount namespace of its own where udevadm and systemd-udevd are scripts/guest-udev/udevadm
# (the host's stay as they are). What the guests need of udev: the links to virtme-ng's script
# ports (the stand-in makes them) and the CPU's CRC32 driver, the ICRC's, loaded as on a host
# booted with udev (selftests/guest/lib.sh loads it; the command line has no room: the kernel
# cuts it at 2048 bytes, which with the single-VM guests' script paths made them run nothing).
# Device nodes come from devtmpfs; network devices keep their kernel names (the pair scripts
# find theirs by MAC) and veths their MACs.
# (rdma-core, which setup.sh installs, pulls udev in; a host without it gives its guests none,
# and no script port links.) Where mount namespaces are not ours to make (no CAP_SYS_ADMIN),
# or with RXE_RS_GUEST_UDEV=1, the guest runs the host's udev as before, only slower.
mounts=()
for bin in /lib/systemd/systemd-udevd /usr/bin/udevadm /bin/udevadm; do
	[[ -e $bin ]] || continue
	bin=$(realpath "$bin")
	[[ " ${mounts[*]} " == *" $bin "* ]] || mounts+=("$bin")
done
cmd=$(printf '%q ' "$@")
exec_cmd="export RXE_RS_ROOT=$RXE_RS_ROOT KDIR=$kdir; $cmd"
# The kernel keeps 2048 bytes of its command line (x86's COMMAND_LINE_SIZE), and virtme-ng puts
# the command there, base64-encoded, among its own 700 bytes (and the working directory; 70 more
# per --rwdir, and its path)
# and before our parameters: a longer line boots a guest without its init (a panic) or without
# our watchdogs. Refuse it here; long lists go in a file (selftests/run.sh: suite_file).
cmdline_bytes=$((700 + ${#PWD} + (${#exec_cmd} + 2) * 4 / 3 + ${#vng_base[-1]}))
for ((i = 1; i < ${#rwdirs[@]}; i += 2)); do
	cmdline_bytes=$((cmdline_bytes + 70 + ${#rwdirs[i]}))
done
if ((cmdline_bytes > 2048)); then
	echo "vm.sh: the guest's command line would take about $cmdline_bytes bytes of the kernel's 2048: put the command in a file" >&2
	exit 2
fi
mapfile -t accel < <(accel_flag)
if [[ ${RXE_RS_GUEST_UDEV:-} == 1 ]] || ((${#mounts[@]} == 0)) ||
	! unshare --mount --propagation private -- true 2>/dev/null; then
	echo "vm.sh: the guest runs udev" >&2
	exec timeout --kill-after=10 "$timeout_s" "${vng_base[@]}" "${accel[@]}" "${rwdirs[@]}" \
		${qemu_opts:+--qemu-opts "$qemu_opts"} \
		--exec "$exec_cmd"
fi
exec unshare --mount --propagation private -- \
	bash -c 'stub=$1; shift; while [[ $1 != -- ]]; do mount --bind "$stub" "$1" || exit; shift; done; shift; exec "$@"' \
	bash "$RXE_RS_ROOT/scripts/guest-udev/udevadm" "${mounts[@]}" -- \
	timeout --kill-after=10 "$timeout_s" "${vng_base[@]}" "${accel[@]}" "${rwdirs[@]}" \
	${qemu_opts:+--qemu-opts "$qemu_opts"} \
	--exec "$exec_cmd"
