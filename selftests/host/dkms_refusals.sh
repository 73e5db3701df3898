#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Where DKMS cannot build rxe_rs, it says so (on the host, with the real dkms, in private DKMS
# trees: no guest needed, and nothing on this machine changes): a kernel without CONFIG_RUST is
# skipped with dkms's exit 77, and a kernel whose Rust metadata, rustc or clang is not here is
# refused by dkms-build.sh naming what is missing. KTAP output; exits non-zero on a failure.
#   selftests/host/dkms_refusals.sh KDIR     (KDIR: a built CONFIG_RUST kernel tree)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$1
version=$(cd "$root" && dpkg-parsechangelog -S Version)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$root/selftests/host/lib.sh"

# A copy of the kernel's .config edited by SED, with or without rust/libkernel.rmeta.
fake_kernel() {
	local dir=$work/$1 script=$2 rmeta=$3
	mkdir -p "$dir/rust"
	sed "$script" "$kdir/.config" >"$dir/.config"
	[[ $rmeta == with-rmeta ]] && touch "$dir/rust/libkernel.rmeta"
	echo "$dir"
}

# check_refusal DESCRIPTION MESSAGE KERNEL_DIR [VAR=VALUE...]: dkms-build.sh's check fails for
# the kernel at KERNEL_DIR and its message has MESSAGE.
check_refusal() {
	local description=$1 message=$2 dir=$3 out
	shift 3
	out=$(env "$@" "$root/scripts/dkms-build.sh" check 0.0.0-test "$dir" 2>&1)
	local rc=$?
	echo "# $out"
	[[ $rc != 0 && $out == *"$message"* ]]
	result $? "$description"
}

plan 5

# dkms itself, on the source as the package installs it.
trees=(--dkmstree "$work/tree" --sourcetree "$work/src" --installtree "$work/install")
mkdir -p "$work/tree" "$work/src" "$work/install"
"$root/scripts/package.sh" dkms-source "$work/src/rxe_rs-$version" || exit 1
dkms add "${trees[@]}" -m rxe_rs -v "$version" >/dev/null
norust=$(fake_kernel norust '/^CONFIG_RUST=/d' with-rmeta)
out=$(dkms build "${trees[@]}" -m rxe_rs -v "$version" -k 0.0.0-norust --kernelsourcedir "$norust" 2>&1)
rc=$?
sed 's/^/# dkms: /' <<<"$out" | grep -v '^# dkms: *$'
[[ $rc == 77 && $out == *BUILD_EXCLUSIVE* ]]
result $? "dkms skips a kernel without CONFIG_RUST (exit 77, BUILD_EXCLUSIVE)"

check_refusal "a kernel without CONFIG_RUST is refused by name" "has no CONFIG_RUST" "$norust"
check_refusal "a build tree without the Rust metadata is refused by name" "has no rust/libkernel.rmeta" \
	"$(fake_kernel normeta 's/^x//' without-rmeta)"
check_refusal "a kernel built by another rustc is refused, naming it" 'built with "rustc 1.0.0"; no rustc here is that one' \
	"$(fake_kernel oldrust 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 1.0.0"/' with-rmeta)"
check_refusal "a kernel built by a clang that is not here is refused, naming it" "built with clang 99" \
	"$(fake_kernel clang99 's/^CONFIG_CLANG_VERSION=.*/CONFIG_CLANG_VERSION=990100/' with-rmeta)"

finish "dkms refusals"
