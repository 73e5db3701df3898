#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The Debian packages as a user installs them (make deb builds them on the host): on a machine
# without rxe_rs, `dpkg -i` of rxe-rs-dkms (DKMS builds the module here, for the running
# kernel) and librxe-rs (the provider); modprobe, rdma link add, ibv_devinfo and
# ibv_rc_pingpong over what they installed; `dpkg --purge` leaves nothing behind. (Where DKMS
# cannot build, it says so: selftests/host/dkms_refusals.sh, on the host.)
# DKMS's compile of the module takes 25 minutes of a TCG guest, against 40 s on the host: unless
# RXE_RS_PACKAGE_COMPILE=1 (make soak), the host compiles it first, with DKMS, against this
# kernel (make check: scripts/package.sh dkms-binaries), and the package's postinst loads that
# as DKMS's binaries-only tarball, from where a package carrying prebuilt modules has it
# (/usr/share/rxe_rs-dkms), instead of compiling. Everything else is the same.
# The script runs in a mount namespace of its own, with a writable layer over /usr, /etc and
# /var, so that the packages, DKMS and dpkg change nothing that the guest's later tests see;
# what they left is what that layer holds after the purge.
if [[ -z ${RXE_RS_PACKAGE_NS:-} ]]; then
	RXE_RS_PACKAGE_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
source "$(dirname "$0")/guest/lib.sh"
# The bindgen scripts/setup.sh installed, for a DKMS that compiles here (as package.sh does).
BINDGEN=$(bash -c 'source "$1/scripts/lib/env.sh" && echo "$BINDGEN"' - "$RXE_RS_ROOT")
export BINDGEN
DEV=rxers0
DEBS=$RXE_RS_ROOT/target/deb
KVER=$(uname -r)
MODULES=/lib/modules/$KVER

ktap_print_header
ktap_set_plan 13
reset_or_bail

# A tmpfs layer over each directory the packages write to; $LAYERS/NAME/upper records what
# changed there. /lib/modules/$KVER is virtme-ng's link to the kernel tree's modules, under
# /var when the tree is in scripts/setup.sh's cache as root.
LAYERS=/mnt
mount -t tmpfs rxe-rs-package "$LAYERS"
umount /etc/libibverbs.d 2>/dev/null # (run-suite.sh's short list of providers)
layered=(/usr /etc /var)
modules_dir=$(realpath "$MODULES")
[[ $modules_dir == /usr/* || $modules_dir == /var/* ]] || layered+=("$modules_dir")
for dir in "${layered[@]}"; do
	name=$(basename "$dir")
	mkdir -p "$LAYERS/$name/upper" "$LAYERS/$name/work"
	mount -t overlay "rxe-rs-$name" -o "lowerdir=$dir,upperdir=$LAYERS/$name/upper,workdir=$LAYERS/$name/work" "$dir" ||
		ktap_exit_fail_msg "no writable layer over $dir"
done
# (virtme-ng's /lib/modules is a tmpfs mounted in /usr, which the layer hides: the link again.)
mkdir -p /lib/modules
ln -sfn "$modules_dir" "$MODULES"

# What this guest has of rxe_rs outside the packages goes first: the module the harness
# staged and the provider setup.sh installed. The machine then has none, as before an install.
# (For modprobe in this namespace: the kernel's own module requests, such as `rdma link add`'s,
# are served by a modprobe in the guest's first namespace, which still has the staged one.)
provider=$(pkg-config --variable=libdir libibverbs)/libibverbs/librxe_rs-rdmav34.so
rm -f "$provider" /etc/libibverbs.d/rxe_rs.driver "$MODULES/extra/rxe_rs.ko"
depmod -a "$KVER"
# Every file, link and deletion (a character device) in the layers, as DIR/PATH and its
# content's checksum or its type.
layer_state() {
	local dir name type path
	for dir in "${layered[@]}"; do
		name=$(basename "$dir")
		(cd "$LAYERS/$name/upper" && find . ! -type d -printf '%y %P\n') | while read -r type path; do
			if [[ $type == f ]]; then
				echo "$name/$path $(md5sum <"$LAYERS/$name/upper/$path" | cut -d' ' -f1)"
			else
				echo "$name/$path $type"
			fi
		done
	done | sort
}
before=$(layer_state)

debs=("$DEBS"/rxe-rs-dkms_*_all.deb "$DEBS"/librxe-rs_*_"$(dpkg --print-architecture)".deb)
check "make deb's packages are here: ${debs[*]##*/}" test -f "${debs[0]}" -a -f "${debs[1]}"
check "before: no module rxe_rs on this machine" fails_with "not found" modprobe rxe_rs

# The install: dkms's postinst builds the module for the running kernel, or loads the host's.
version=$(dpkg-deb -f "${debs[0]}" Version)
prebuilt=$DEBS/rxe_rs-$version.dkms.tar.gz
if [[ ${RXE_RS_PACKAGE_COMPILE:-} != 1 && -e $prebuilt ]]; then
	echo "# DKMS's build from the host: ${prebuilt##*/}"
	install -D -m 0644 "$prebuilt" "/usr/share/rxe_rs-dkms/${prebuilt##*/}"
else
	echo "# DKMS compiles the module in this guest"
	prebuilt=
fi
install_packages() {
	DEBIAN_FRONTEND=noninteractive dpkg -i "${debs[@]}" 2>&1 | sed 's/^/# dpkg: /'
	((PIPESTATUS[0] == 0))
}
check "dpkg -i installs both packages (DKMS puts rxe_rs in place for $KVER)" install_packages
# (What `dkms status` reads, without its 40 s of shell under TCG.)
check "DKMS's tree has rxe_rs built for $KVER, installed in updates/dkms" \
	test -f "/var/lib/dkms/rxe_rs/$version/$KVER/$(uname -m)/module/rxe_rs.ko" -a -f "$MODULES/updates/dkms/rxe_rs.ko"

modprobe rxe_rs
installed=$(modinfo -n rxe_rs 2>/dev/null)
echo "# modprobe rxe_rs: $installed"
check "modprobe loads the module DKMS installed (updates/dkms)" \
	test "$installed" = "$MODULES/updates/dkms/rxe_rs.ko" -a -d /sys/module/rxe_rs

make_veth veth0 veth1 10.11.0.1/24
check "rdma link add $DEV type rxe_rs netdev veth0" rdma link add "$DEV" type rxe_rs netdev veth0
info=$(IBV_SHOW_WARNINGS=1 ibv_devinfo -d "$DEV" 2>&1)
sed 's/^/# /' <<<"$info" | head -20
check "ibv_devinfo opens $DEV through the packaged provider, port active" \
	bash -c "grep -q 'state:.*PORT_ACTIVE' <<<\"\$0\" && ! grep -qi 'no userspace device-specific driver' <<<\"\$0\"" "$info"

# ibv_rc_pingpong with its payload checked, both ends on the device.
pingpong() {
	local gidx server
	gidx=$(gid_index "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001") || return
	ibv_rc_pingpong -d "$DEV" -g "$gidx" -c -s 4096 -n 20 -p 18598 >/dev/null 2>&1 &
	server=$!
	wait_for 30 tcp_listening 18598 || { kill -9 $server; wait $server; return 1; }
	timeout 120 ibv_rc_pingpong -d "$DEV" -g "$gidx" -c -s 4096 -n 20 -p 18598 10.11.0.1 | sed 's/^/# /'
	local rc=${PIPESTATUS[0]}
	# (The server must be gone whatever happened: it holds the device, and its deletion waits.)
	((rc == 0)) || kill -9 $server 2>/dev/null
	reap $server 60 && ((rc == 0))
}
check "$DEV has the RoCEv2 GID of 10.11.0.1" wait_for 30 gid_present "$DEV" "0000:0000:0000:0000:0000:ffff:0a0b:0001"
check "ibv_rc_pingpong -c over the packaged module and provider: 20 checked messages" pingpong
rdma link delete "$DEV"
check "rmmod rxe_rs" wait_for 60 unload rxe_rs

purge_packages() {
	DEBIAN_FRONTEND=noninteractive dpkg --purge rxe-rs-dkms librxe-rs 2>&1 | sed 's/^/# dpkg: /'
	((PIPESTATUS[0] == 0))
}
check "dpkg --purge removes both packages" purge_packages
[[ -n $prebuilt ]] && rm "/usr/share/rxe_rs-dkms/${prebuilt##*/}" && rmdir /usr/share/rxe_rs-dkms
check "after: no module rxe_rs on this machine again" fails_with "not found" modprobe rxe_rs
# What the layers hold now that they did not before the install (or held otherwise): only
# dpkg's records and logs, depmod's indexes, and dkms's module-signing key (made once per
# machine, for every module it builds).
left=$(diff <(echo "$before") <(layer_state) | sed -n 's/^> //p' |
	grep -vE '^var/lib/dpkg/|^var/log/|^var/cache/debconf/|/modules\.[a-z.]+ |^var/lib/dkms/mok\.(key|pub) ' || true)
[[ -n $left ]] && sed 's/^/# left behind: /' <<<"$left"
check "nothing else is left behind" test -z "$left"
ktap_finished
