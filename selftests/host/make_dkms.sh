#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make dkms` and `make dkms-remove` on this machine, for the test kernel, without changing it:
# in a mount namespace of their own with a tmpfs layer over /usr and /var (where /usr/src,
# /lib/modules and DKMS's tree are), the test kernel given a /lib/modules entry there. DKMS
# compiles natively here; the guest test of the packages (rxe_rs_package) loads what it builds.
# KTAP output; exits non-zero on a failure, and refuses to run where it cannot isolate itself.
#   selftests/host/make_dkms.sh KDIR     (KDIR: the built test kernel)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$1
if [[ -z ${RXE_RS_MAKE_DKMS_NS:-} ]]; then
	RXE_RS_MAKE_DKMS_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
kver=$(cat "$kdir/include/config/kernel.release")
version=$(cd "$root" && dpkg-parsechangelog -S Version)
layers=/mnt # (a mount point every Debian has; the tmpfs over it is this namespace's only)
mount -t tmpfs rxe-rs-make-dkms "$layers" || exit 1
for dir in /usr /var; do
	name=${dir#/}
	mkdir -p "$layers/$name/upper" "$layers/$name/work"
	if ! mount -t overlay "rxe-rs-$name" -o "lowerdir=$dir,upperdir=$layers/$name/upper,workdir=$layers/$name/work" "$dir"; then
		echo "make_dkms: no writable layer over $dir: not running make dkms on the machine itself" >&2
		exit 1
	fi
done
mkdir -p "/lib/modules/$kver"
ln -s "$kdir" "/lib/modules/$kver/build"
source "$root/selftests/host/lib.sh"
plan 4
out=$(make -s -C "$root" dkms KERNELVER="$kver" 2>&1)
rc=$?
grep -E 'rxe_rs:|Error|Installing to|Building module' <<<"$out" | sed 's/^/# /'
result "$rc" "make dkms KERNELVER=$kver builds and installs rxe_rs with DKMS"
ko=/lib/modules/$kver/updates/dkms/rxe_rs.ko
modinfo=$(modinfo -k "$kver" -F name "$ko" 2>/dev/null)
[[ -f $ko && $modinfo == rxe_rs && -d /usr/src/rxe_rs-$version ]]
result $? "rxe_rs.ko in updates/dkms, the source in /usr/src/rxe_rs-$version"
out=$(make -s -C "$root" dkms-remove 2>&1)
rc=$?
result "$rc" "make dkms-remove"
left=$(find "/lib/modules/$kver" /usr/src /var/lib/dkms -name '*rxe_rs*' 2>/dev/null)
[[ -n $left ]] && sed 's/^/# left behind: /' <<<"$left"
[[ -z $left ]]
result $? "nothing of rxe_rs is left in /lib/modules, /usr/src or DKMS's tree"
finish "make dkms"
