# Shared settings for the build, VM and test scripts. Sourced, never run.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the scripts that source this file use what it sets
RXE_RS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Everything expensive (kernel trees, bindgen, virtme-ng) lives outside the repo, so a fresh clone
# reuses it and `git clean` never throws a kernel build away. Not under /var/cache: virtme-ng
# hides that from the guest behind a tmpfs, and the guest needs the kernel tree and its modules.
if [[ -z ${RXE_RS_CACHE:-} ]]; then
	if ((EUID == 0)); then RXE_RS_CACHE=/var/lib/rxe_rs; else RXE_RS_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/rxe_rs; fi
fi
BINDGEN_VERSION=0.73.2
VIRTME_NG_VERSION=1.42
KERNEL_SERIES=6.12
BINDGEN=$RXE_RS_CACHE/cargo/bin/bindgen
VNG=$RXE_RS_CACHE/venv/bin/vng
RUFF_VERSION=0.17.6
RUFF=$RXE_RS_CACHE/venv/bin/ruff
# vng runs its helpers (virtme-run, virtme-prep-kdir-mods) from PATH.
export PATH=$RXE_RS_CACHE/venv/bin:$PATH
# rustup's rustc comes first on PATH and cannot build against the Debian-configured kernel.
KMAKE_TOOLS=(LLVM=-19 RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc BINDGEN="$BINDGEN")
mkdir -p "$RXE_RS_CACHE"
