#!/usr/bin/env bash
# Packages of rxe_rs, the way out-of-tree modules reach users.
#   package.sh deb            Debian packages in target/deb/: rxe-rs-dkms (the module's source,
#                             which DKMS builds for each kernel) and librxe-rs (the provider)
#   package.sh dkms [KVER]    this tree into /usr/src/rxe_rs-VERSION, then dkms add, build and
#                             install for kernel KVER (default: the running one)
#   package.sh dkms-remove    dkms remove --all, and the tree out of /usr/src
#   package.sh dkms-source DEST
#                             the module's source as DKMS builds it, into DEST
#   package.sh dkms-binaries KVER KDIR
#                             DKMS's build of the packaged source for kernel KVER (build tree
#                             KDIR), in a private DKMS tree, as DKMS's binaries-only tarball
#                             target/deb/rxe_rs-VERSION.dkms.tar.gz (make check's
#                             rxe_rs_package: the compile is native here, minutes under TCG)
# The version is debian/changelog's; dkms.conf and Cargo.toml must say the same. DKMS builds
# with the bindgen scripts/setup.sh installed (BINDGEN), when it finds no other.
set -euo pipefail
source "$(dirname "$0")/lib/env.sh"
cd "$RXE_RS_ROOT"
export BINDGEN
git rev-parse --git-dir >/dev/null 2>&1 || { echo "package: needs the git tree (its file list)" >&2; exit 1; }

version=$(dpkg-parsechangelog -S Version)
dkms_version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' dkms.conf)
cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml)
if [[ ! ($version == "$dkms_version" && $version == "$cargo_version") ]]; then
	echo "package: versions differ: debian/changelog $version, dkms.conf $dkms_version, Cargo.toml $cargo_version" >&2
	exit 1
fi

# Copies the tracked files under PATHS (as they are in the working tree) to DEST.
copy_tracked() {
	local dest=$1 file
	shift
	git ls-files -z -- "$@" | while IFS= read -r -d '' file; do
		[[ -e $file ]] && cp --parents -t "$dest" "$file"
	done
}

# The module's source as DKMS builds it (debian/rules installs the same files).
module_source() {
	local dest=$1
	mkdir -p "$dest/scripts"
	copy_tracked "$dest" Kbuild dkms.conf rxe_rs uapi
	install -m 0755 scripts/dkms-build.sh "$dest/scripts/"
}

# make dkms works on the source in /usr/src, which is the rxe-rs-dkms package's once that is
# installed: then leave it to the package (apt purge rxe-rs-dkms).
not_packaged() {
	if dpkg-query -S "/usr/src/rxe_rs-$version" >/dev/null 2>&1; then
		echo "package: /usr/src/rxe_rs-$version belongs to the rxe-rs-dkms package: apt purge rxe-rs-dkms first" >&2
		exit 1
	fi
}

case ${1:-} in
deb)
	out=$RXE_RS_ROOT/target/deb
	stage=$out/rxe-rs-$version
	rm -rf "$out"
	mkdir -p "$stage"
	# A copy of the tracked files as they are in the working tree: dpkg-buildpackage writes
	# beside the tree, and must not see our build products.
	copy_tracked "$stage" .
	(cd "$stage" && CARGO_TARGET_DIR=$RXE_RS_ROOT/target dpkg-buildpackage -b -us -uc >"$out/build.log" 2>&1) || {
		tail -30 "$out/build.log" >&2
		echo "package: dpkg-buildpackage failed (log: $out/build.log)" >&2
		exit 1
	}
	rm -rf "$stage"
	ls "$out"/*.deb
	;;
dkms)
	not_packaged
	kver=${2:-$(uname -r)}
	src=/usr/src/rxe_rs-$version
	if dkms status -m rxe_rs -v "$version" | grep -q .; then
		dkms remove -m rxe_rs -v "$version" --all
	fi
	rm -rf "$src"
	module_source "$src"
	dkms add -m rxe_rs -v "$version"
	dkms build -m rxe_rs -v "$version" -k "$kver"
	dkms install -m rxe_rs -v "$version" -k "$kver"
	;;
dkms-binaries)
	kver=$2 kdir=$3
	deb=$RXE_RS_ROOT/target/deb/rxe-rs-dkms_${version}_all.deb
	[[ -e $deb ]] || { echo "package: $deb is missing: make deb first" >&2; exit 1; }
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	trees=(--dkmstree "$work/tree" --sourcetree "$work/src" --installtree "$work/install")
	dpkg-deb -x "$deb" "$work/deb"
	mkdir -p "$work/tree" "$work/src" "$work/install"
	cp -a "$work/deb/usr/src/rxe_rs-$version" "$work/src/"
	dkms add "${trees[@]}" -m rxe_rs -v "$version" >/dev/null
	dkms build "${trees[@]}" -m rxe_rs -v "$version" -k "$kver" --kernelsourcedir "$kdir" >"$work/build.log" 2>&1 || {
		cat "$work/build.log" "$work"/tree/rxe_rs/*/build/make.log >&2 || true
		exit 1
	}
	dkms mktarball "${trees[@]}" -m rxe_rs -v "$version" -k "$kver" --binaries-only \
		--archive "rxe_rs-$version.dkms.tar.gz" >/dev/null
	cp "$work/tree/rxe_rs/$version/tarball/rxe_rs-$version.dkms.tar.gz" "$RXE_RS_ROOT/target/deb/"
	ls "$RXE_RS_ROOT/target/deb/rxe_rs-$version.dkms.tar.gz"
	;;
dkms-source)
	module_source "$2"
	;;
dkms-remove)
	not_packaged
	if dkms status -m rxe_rs -v "$version" | grep -q .; then
		dkms remove -m rxe_rs -v "$version" --all
	fi
	rm -rf "/usr/src/rxe_rs-$version"
	;;
*)
	sed -n '2,15s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
