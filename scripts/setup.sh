#!/usr/bin/env bash
# Install everything rxe_rs needs to build, boot and test, from Debian, crates.io and PyPI only.
# Idempotent: each step checks first and does nothing when already satisfied.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"

APT_PACKAGES=(
	# kernel + Rust-for-Linux toolchain
	linux-source-6.12 rustc-web rust-web-src rust-web-clippy clang-19 lld-19 llvm-19 libclang-19-dev
	flex bison bc libelf-dev libssl-dev cpio xz-utils kmod make gcc pkg-config
	# VMs
	qemu-system-x86 python3-venv busybox-static
	# the guest scripts' sleep builtin (selftests/guest/lib.sh: nap)
	bash-builtins
	# RDMA user space: the reference tools and the provider's build deps
	rdma-core ibverbs-utils ibverbs-providers libibverbs-dev librdmacm-dev perftest
	python3-pyverbs rdmacm-utils iproute2 iperf3 ethtool procps tcpdump iputils-ping
	# NVMe over Fabrics: the host's tools and the I/O checker
	nvme-cli fio
	# the guests' persistent memory as device DAX (FLUSH for persistence)
	ndctl
	# benchmark plot
	gnuplot-nox
	# make lint's shell checker
	shellcheck
	# make deb and make dkms (cargo-web: Debian's cargo for rustc-web, debian/control's build tool)
	dpkg-dev debhelper dh-dkms dkms cargo-web
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "setup: apt installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# bindgen: Debian's 0.60 is below the kernel's minimum; the kernel tree was validated with 0.73.2.
if ! "$BINDGEN" --version 2>/dev/null | grep -q "bindgen $BINDGEN_VERSION"; then
	echo "setup: cargo installing bindgen-cli $BINDGEN_VERSION"
	cargo install --locked --quiet --root "$RXE_RS_CACHE/cargo" bindgen-cli --version "$BINDGEN_VERSION"
fi

# virtme-ng in its own venv, so neither Debian's nor pyenv's Python is modified.
if ! "$VNG" --version 2>/dev/null | grep -q "$VIRTME_NG_VERSION"; then
	echo "setup: pip installing virtme-ng $VIRTME_NG_VERSION"
	python3 -m venv "$RXE_RS_CACHE/venv"
	"$RXE_RS_CACHE/venv/bin/pip" install -q "virtme-ng==$VIRTME_NG_VERSION"
fi
# ruff, make lint's Python checker, in the same venv.
if ! "$RUFF" --version 2>/dev/null | grep -q "ruff $RUFF_VERSION"; then
	echo "setup: pip installing ruff $RUFF_VERSION"
	"$RXE_RS_CACHE/venv/bin/pip" install -q "ruff==$RUFF_VERSION"
fi
echo "setup: ok (cache $RXE_RS_CACHE)"
