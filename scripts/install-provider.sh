#!/usr/bin/env bash
# Install the built provider where Debian 12's libibverbs looks for it:
# the library in its provider directory and a config file naming it.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
lib=$RXE_RS_ROOT/target/release/librxe_rs_provider.so
[[ -e $lib ]] || { echo "install-provider: build it first (make provider)" >&2; exit 1; }
provider_dir=$(pkg-config --variable=libdir libibverbs)/libibverbs
install -D -m 0644 "$lib" "$provider_dir/librxe_rs-rdmav34.so"
install -D -m 0644 /dev/stdin /etc/libibverbs.d/rxe_rs.driver <<<"driver rxe_rs"
