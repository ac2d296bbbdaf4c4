#!/bin/sh
# Installs the build into a scratch DESTDIR, builds tests/install/helper_hello.c
# against it with pkg-config alone, and checks that the installed library
# loads the installed module, not the build tree's.
set -eu
build=$1
src=$2
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp" meson install -C "$build" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name nexus.pc | head -n 1)
[ -n "$pc" ] || { echo "nexus.pc was not installed"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$tmp"
flags=$(pkg-config --cflags --libs nexus)
$cc -o "$tmp/hello" "$src/tests/install/helper_hello.c" $flags
out=$(env -u NX_PROTO_PATH -u NX_PROTOCOLS LD_LIBRARY_PATH="$libdir" "$tmp/hello")
echo "$out"
echo "$out" | grep -qx "protocol local" || { echo "FAIL: no RSR over local"; exit 1; }
echo "$out" | grep -qx "local $libdir/nexus/libnx_proto_local.so" ||
  { echo "FAIL: the module was not loaded from the install"; exit 1; }
echo "install test: ok"
