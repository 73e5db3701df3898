#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# DKMS's build of rxe_rs (dkms.conf): check that this machine can build a Rust module for the
# kernel, say what is missing if it cannot, and build it. A Rust module needs what the kernel
# itself was built with: the same rustc (the kernel's crate metadata is rustc-version specific),
# bindgen, and for a kernel built with clang, an LLVM of the same major version.
#   dkms-build.sh check|build|clean KERNELVER KERNEL_BUILD_DIR
# Tools are taken from RUSTC, BINDGEN and LLVM when set, else found on PATH and where
# scripts/setup.sh installs them.
set -euo pipefail
action=$1 kver=$2 kdir=$3
config=$kdir/.config

refuse() {
	echo "rxe_rs: cannot build for kernel $kver: $*" >&2
	exit 1
}

config_value() {
	sed -n "s/^$1=//p" "$config" | sed 's/^"\(.*\)"$/\1/'
}

# The rustc whose `--version` is the kernel's CONFIG_RUSTC_VERSION_TEXT.
find_rustc() {
	local want candidate seen=()
	want=$(config_value CONFIG_RUSTC_VERSION_TEXT)
	for candidate in ${RUSTC:-} /usr/bin/rustc "$(command -v rustc || true)"; do
		[[ -x $candidate && " ${seen[*]} " != *" $candidate "* ]] || continue
		[[ $($candidate --version 2>/dev/null) == "$want" ]] && { echo "$candidate"; return; }
		seen+=("$candidate" "($($candidate --version 2>/dev/null))")
	done
	refuse "the kernel was built with \"$want\"; no rustc here is that one${seen:+ (found: ${seen[*]})}." \
		"Install that rustc (Debian: rustc-web) or set RUSTC."
}

# A bindgen at least as new as the kernel's minimum (scripts/min-tool-version.sh).
find_bindgen() {
	local min candidate version seen=()
	min=$("$kdir/scripts/min-tool-version.sh" bindgen 2>/dev/null || echo 0.65.1)
	for candidate in ${BINDGEN:-} /var/lib/rxe_rs/cargo/bin/bindgen "${HOME:-/root}/.cargo/bin/bindgen" \
		"$(command -v bindgen || true)"; do
		[[ -x $candidate ]] || continue
		version=$($candidate --version 2>/dev/null | awk '{ print $2 }')
		if [[ $(printf '%s\n%s\n' "$min" "$version" | sort -V | head -n1) == "$min" ]]; then
			echo "$candidate"
			return
		fi
		seen+=("$candidate ($version)")
	done
	refuse "no bindgen $min or newer${seen:+ (found: ${seen[*]})}." \
		"Install it with \`cargo install --locked bindgen-cli\` or set BINDGEN."
}

# make's LLVM= for a kernel built with clang: -N for clang-N on PATH, 1 for a plain clang of
# the kernel's major version; nothing for a kernel built with gcc.
find_llvm() {
	local major
	grep -q '^CONFIG_CC_IS_CLANG=y' "$config" || return 0
	major=$(($(config_value CONFIG_CLANG_VERSION) / 10000))
	if [[ -n ${LLVM:-} ]]; then
		echo "$LLVM"
	elif command -v "clang-$major" >/dev/null && command -v "ld.lld-$major" >/dev/null; then
		echo "-$major"
	elif [[ $(clang -dumpversion 2>/dev/null) == "$major".* ]] && command -v ld.lld >/dev/null; then
		echo 1
	else
		refuse "the kernel was built with clang $major; install clang-$major, lld-$major and llvm-$major (or set LLVM)."
	fi
}

check() {
	[[ -e $config ]] || refuse "no kernel build tree at $kdir (no .config): install the kernel's headers."
	grep -q '^CONFIG_RUST=y' "$config" || refuse "the kernel has no CONFIG_RUST: it cannot load Rust modules."
	[[ -e $kdir/rust/libkernel.rmeta ]] ||
		refuse "$kdir has no rust/libkernel.rmeta: its headers lack the Rust metadata modules are built against."
	command -v make >/dev/null || refuse "make is not installed."
	RUSTC=$(find_rustc)
	BINDGEN=$(find_bindgen)
	LLVM=$(find_llvm)
}

case $action in
check)
	check
	echo "rxe_rs: building for $kver with $RUSTC, $BINDGEN${LLVM:+, LLVM=$LLVM}" >&2
	;;
build)
	check
	make -C "$kdir" M="$PWD" RUSTC="$RUSTC" BINDGEN="$BINDGEN" ${LLVM:+LLVM="$LLVM"} modules
	;;
clean)
	make -C "$kdir" M="$PWD" clean >/dev/null 2>&1 || true
	;;
*)
	echo "usage: $0 check|build|clean KERNELVER KERNEL_BUILD_DIR" >&2
	exit 2
	;;
esac
