#!/bin/sh
# The fm heterogeneity test: a big-endian peer (hetero_fm_peer.c with libfm,
# cross-built for s390x, under qemu-s390x) against the x86-64 Fortran host
# (fortran_hetero.f90): integer(int64) and complex(8) arrays into and out of
# strided sections. There is no gfortran for s390x here, so the peer is C.
#   hetero.sh BUILDDIR SRCDIR HOST
# Uses the cross build of tests/hetero (BUILDDIR/cross-s390x, the same
# options, set up here if it is missing) for libnexus and the modules, and
# compiles the peer with libfm's sources against it. Exits 77 with
# "SKIP: <reason>" when the cross toolchain, qemu-user or the s390x sysroot
# ($NX_S390X_SYSROOT, by default SRCDIR/.deps/s390x-sysroot; scripts/deps
# makes it) is missing.
set -u
build=$1 src=$2 host=$3

skip() {
  echo "SKIP: $*"
  exit 77
}
for tool in s390x-linux-gnu-gcc:gcc-s390x-linux-gnu \
  s390x-linux-gnu-g++:g++-s390x-linux-gnu qemu-s390x:qemu-user \
  pkg-config:pkg-config meson:meson ninja:ninja-build; do
  command -v "${tool%%:*}" >/dev/null 2>&1 ||
    skip "${tool%%:*} not found (Debian package ${tool#*:})"
done
libc=/usr/s390x-linux-gnu/lib
[ -e $libc/ld64.so.1 ] && [ -e $libc/libc.so.6 ] ||
  skip "$libc/ld64.so.1 not found (Debian package libc6-dev-s390x-cross)"
sysroot=${NX_S390X_SYSROOT:-$src/.deps/s390x-sysroot}
[ -f "$sysroot/sysroot.ini" ] ||
  skip "no s390x sysroot at $sysroot (scripts/deps makes it)"

cross=$build/cross-s390x
if [ ! -f "$cross/build.ninja" ] || ! cmp -s "$sysroot/sysroot.ini" "$cross/.sysroot.ini"; then
  rm -rf "$cross"
  if ! meson setup "$cross" "$src" \
    --cross-file "$sysroot/sysroot.ini" \
    --cross-file "$src/scripts/cross/s390x.ini" \
    -Dhetero_peer_only=true -Dtests=false \
    -Ducx=disabled -Dofi=disabled -Dmpi=disabled -Dtcp=enabled \
    >"$build/cross-s390x.setup.log" 2>&1; then
    tail -n 30 "$build/cross-s390x.setup.log"
    echo "FAIL: meson setup of the s390x cross build"
    rm -rf "$cross"
    exit 1
  fi
  cp "$sysroot/sysroot.ini" "$cross/.sysroot.ini"
fi
if ! ninja -C "$cross" -j2 tests/hetero/hetero_peer \
  protocols/local/libnx_proto_local.so protocols/tcp/libnx_proto_tcp.so \
  >"$build/cross-s390x-fm.build.log" 2>&1; then
  tail -n 40 "$build/cross-s390x-fm.build.log"
  echo "FAIL: the s390x cross build"
  exit 1
fi
peer=$cross/fm_hetero_peer
set -- "$src/tests/fm/hetero_fm_peer.c" "$src/compilers/fm/fm.c" \
  "$src/compilers/fm/fm_proc.c" "$src/compilers/fm/fm_values.c"
newer=0
for f in "$@" "$src/compilers/fm/fm.h" "$src/compilers/fm/fm_internal.h" \
  "$cross/nexus/libnexus.so"; do
  [ -f "$peer" ] && [ ! "$f" -nt "$peer" ] || newer=1
done
if [ $newer -eq 1 ] && ! s390x-linux-gnu-gcc -std=c11 -D_GNU_SOURCE -O2 \
  -I"$src/compilers/fm" -I"$src/nexus/include" -I"$cross/nexus/include" \
  "$@" -o "$peer" -L"$cross/nexus" -lnexus -pthread \
  -Wl,-rpath-link,"$sysroot/usr/lib/s390x-linux-gnu" \
  -Wl,-rpath,"$cross/nexus" >"$build/cross-s390x-fm.cc.log" 2>&1; then
  tail -n 30 "$build/cross-s390x-fm.cc.log"
  echo "FAIL: compiling the s390x fm peer"
  exit 1
fi
# The peer runs from the host (fork and exec) with this command, the attach
# URL appended; not with the x86-64 LD_LIBRARY_PATH of meson test.
exec env NX_PROTOCOLS=tcp,local "$host" env \
  -u LD_LIBRARY_PATH qemu-s390x -L /usr/s390x-linux-gnu \
  -E "LD_LIBRARY_PATH=$sysroot/usr/lib/s390x-linux-gnu:$libc:$cross/nexus" "$peer"
