#!/bin/sh
# Installs the build into a temporary DESTDIR, builds fpvm_msg.f there with
# gfortran and pkg-config nexus-fpvm alone (fpvm3.h, libnxfpvm, libnxpvm,
# libnexus from the install), also with its includes written as PVM's own
# examples write them ('../include/fpvm3.h'), runs both and checks what
# they print against the output recorded from the real PVM. Args:
# BUILD_DIR SOURCE_DIR.
set -eu
build=$1
src=$2
if ! command -v gfortran >/dev/null 2>&1; then
  echo "gfortran not found: skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp" meson install -C "$build" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name nexus-fpvm.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: nexus-fpvm.pc was not installed"; exit 1; }
[ -n "$(find "$tmp" -path '*/nexus-pvm/fpvm3.h')" ] ||
  { echo "FAIL: fpvm3.h was not installed beside pvm3.h"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$tmp"
flags=$(pkg-config --cflags --libs nexus-fpvm)
echo "pkg-config --cflags --libs nexus-fpvm: $flags"
# As a user builds an old Fortran 77 PVM program with gfortran >= 10.
gfortran -fallow-argument-mismatch -w -o "$tmp/fpvm_msg" \
  "$src/tests/pvm/fortran/fpvm_msg.f" $flags
# As PVM's own examples include it: '../include/fpvm3.h' (their source
# tree's layout), found through nexus-fpvm's include path too.
sed "s|include 'fpvm3.h'|include '../include/fpvm3.h'|" \
  "$src/tests/pvm/fortran/fpvm_msg.f" >"$tmp/fpvm_msg_tree.f"
grep -q "include '../include/fpvm3.h'" "$tmp/fpvm_msg_tree.f"
gfortran -fallow-argument-mismatch -w -o "$tmp/fpvm_msg_tree" \
  "$tmp/fpvm_msg_tree.f" $flags
unset NX_PROTO_PATH || true
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/fpvm_msg")
tree=$(LD_LIBRARY_PATH="$libdir" "$tmp/fpvm_msg_tree")
[ "$out" = "$tree" ] ||
  { echo "$tree"; echo "FAIL: the build that includes '../include/fpvm3.h' printed something else"; exit 1; }
expect=$(cat "$src/tests/pvm/expected/fpvm_msg.txt")
[ "$out" = "$expect" ] ||
  { echo "$out"; echo "FAIL: the installed build did not print tests/pvm/expected/fpvm_msg.txt"; exit 1; }
echo "fpvm install test: ok"
