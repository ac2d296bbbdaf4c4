#!/bin/sh
# Installs the build into a temporary DESTDIR and builds a C program and a
# Fortran program against libfm there with pkg-config fm (fm.pc, fm.h,
# libfm, libfm_f.a, fm.mod), then runs them. Args: BUILD_DIR SOURCE_DIR.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp" meson install -C "$build" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name fm.pc | head -n 1)
[ -n "$pc" ] || { echo "fm.pc was not installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$tmp"
flags=$(pkg-config --cflags --libs fm)
unset NX_PROTO_PATH NX_PROTOCOLS || true
export LD_LIBRARY_PATH="$libdir"

${CC:-cc} -o "$tmp/hello" "$src/tests/fm/install_hello.c" $flags
out=$("$tmp/hello")
echo "$out"
[ "$out" = "fm install: 42 through a channel" ] || { echo "FAIL: C program"; exit 1; }

if ! command -v gfortran >/dev/null 2>&1; then
  echo "gfortran not found: the Fortran half is skipped"
  exit 77
fi
[ -n "$(find "$tmp" -name fm.mod)" ] || { echo "FAIL: fm.mod was not installed"; exit 1; }
gfortran -o "$tmp/farm" "$src/examples/fm/farm.f90" $flags
"$tmp/farm" threads
echo "fm install test: ok"
