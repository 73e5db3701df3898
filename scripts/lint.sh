#!/usr/bin/env bash
# make lint: formatting and lints over all our code, with warnings as errors.
# - shell: shellcheck; Python: ruff check; C: the kernel's checkpatch.pl --strict;
# - host crates (uapi, proto, provider, hostile peer): cargo fmt, cargo clippy -D warnings;
# - the module: rustfmt with the kernel's .rustfmt.toml (what `make rustfmtcheck` does for
#   in-tree code), then a build with the kernel's CLIPPY=1 that fails on any warning it prints
#   (rustc, clippy, objtool, modpost).
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
cd "$RXE_RS_ROOT"
kdir=$("$RXE_RS_ROOT/scripts/kernel.sh" path "${KFLAVOR:-debug}")

# The docs describe what is, for a reader who never saw the work: history lives in git.
echo "lint: no run history in README.md and Documentation/ (stop N, issue N)"
if git grep -n -i -E '\bstops? [0-9]+\b|\bissues? [0-9]+\b' -- README.md Documentation; then
	echo "lint: the lines above name a session or an issue: say what is, and why" >&2
	exit 1
fi
echo "lint: shellcheck (every shell script; .shellcheckrc says which checks are off, and why)"
mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run scripts/guest-udev/udevadm)
shellcheck "${shell_scripts[@]}"
echo "lint: ruff check (every Python file; ruff.toml says which rules)"
"$RUFF" check --quiet .
echo "lint: checkpatch --strict (the module's C)"
mapfile -t c_sources < <(git ls-files '*.c' '*.h')
perl "$kdir/scripts/checkpatch.pl" --strict --no-tree --terse --quiet --no-summary -f "${c_sources[@]}"
echo "lint: cargo fmt --check"
cargo fmt --all --check
echo "lint: rustfmt --check (module, kernel's .rustfmt.toml)"
mapfile -t module_sources < <(find rxe_rs -name '*.rs' -not -path 'rxe_rs/proto/*' -not -name '*generated*' | sort)
rustfmt --check --edition 2021 --config-path "$kdir/.rustfmt.toml" "${module_sources[@]}"
echo "lint: no import circle in the driver (design.md draws its import graph)"
python3 "$RXE_RS_ROOT/scripts/lib/import-graph.py" --check >/dev/null
echo "lint: cargo clippy -D warnings (host crates, tests included)"
cargo clippy --locked --release --workspace --all-targets --quiet -- -D warnings
echo "lint: module with CLIPPY=1, no warnings"
# Kbuild rebuilds only what changed: make the crate's object stale so its warnings show.
touch rxe_rs/rxe_rs_main.rs
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make -s -C "$RXE_RS_ROOT" clippy 2>&1 | tee "$log"
if grep -q 'warning' "$log"; then
	echo "lint: the module's build printed warnings" >&2
	exit 1
fi
