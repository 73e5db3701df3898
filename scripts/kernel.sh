#!/usr/bin/env bash
# The test kernel: Debian's linux-source-6.12 with the fragments in kernel-config/, built once
# per (source version, fragments, toolchain) in $RXE_RS_CACHE and reused after that.
#
#   kernel.sh path  [debug|bench]   print the tree's path (built or not)
#   kernel.sh build [debug|bench]   build it unless the cache has it; print the path
#
# "debug" (default) adds lockdep, KASAN, kmemleak...; "bench" leaves them out.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"

action=${1:?usage: kernel.sh path|build [debug|bench]}
flavor=${2:-debug}
frags=("$RXE_RS_ROOT"/kernel-config/{vm,rdma,lean}.config)
case $flavor in
debug) frags+=("$RXE_RS_ROOT"/kernel-config/{debug,pmem}.config) ;;
bench) ;;
*) echo "kernel.sh: unknown flavor $flavor" >&2; exit 2 ;;
esac

src_version=$(dpkg-query -W -f='${Version}' linux-source-$KERNEL_SERIES)
key=$( { echo "$src_version"; cat "${frags[@]}" "$0"; /usr/bin/rustc --version; clang-19 --version | head -1;
	echo "$BINDGEN_VERSION"; } | sha256sum | cut -c1-12)
kdir=$RXE_RS_CACHE/kernel/linux-$KERNEL_SERIES-$flavor-$key

if [[ $action == path ]]; then
	echo "$kdir"
	exit 0
fi
[[ $action == build ]] || { echo "kernel.sh: unknown action $action" >&2; exit 2; }
if [[ -e $kdir/.rxe_rs-built ]]; then
	echo "$kdir"
	exit 0
fi

exec 9>"$RXE_RS_CACHE/kernel.lock"
flock 9
[[ -e $kdir/.rxe_rs-built ]] && { echo "$kdir"; exit 0; }

log=$RXE_RS_CACHE/kernel-build-$flavor.log
echo "kernel: building $flavor kernel in $kdir (log: $log)" >&2
start=$SECONDS
# Built in place (generated files hold absolute paths); an interrupted build resumes.
if [[ ! -e $kdir/.rxe_rs-configured ]]; then
	rm -rf "$kdir"
	mkdir -p "$kdir"
	tar -xf /usr/src/linux-source-$KERNEL_SERIES.tar.xz -C "$kdir" --strip-components=1
	kmake() { make -C "$kdir" -j"$(nproc)" "${KMAKE_TOOLS[@]}" "$@"; }
	{
		kmake x86_64_defconfig
		(cd "$kdir" && scripts/kconfig/merge_config.sh -m .config "${frags[@]}")
		kmake olddefconfig
	} >"$log" 2>&1
	# merge_config silently drops what a dependency forbids: check what we cannot live without.
	grep -hE '^CONFIG_[A-Z0-9_]+=[ym]$' "${frags[@]}" | sort -u | while IFS= read -r want; do
		grep -qx "$want" "$kdir/.config" || { echo "kernel: $want did not stick (see $log)" >&2; exit 1; }
	done
	touch "$kdir/.rxe_rs-configured"
fi
if ! make -C "$kdir" -j"$(nproc)" "${KMAKE_TOOLS[@]}" bzImage modules >>"$log" 2>&1; then
	tail -40 "$log" >&2
	echo "kernel: build failed (full log: $log)" >&2
	exit 1
fi
touch "$kdir/.rxe_rs-built"
echo "kernel: built in $((SECONDS - start)) s" >&2
echo "$kdir"
