#!/bin/sh
# The fm heterogeneity test: a big-endian peer (hetero_fm_peer.c with libfm,
# cross-built for s390x, under qemu-s390x) against the x86-64 Fortran host
# (fortran_hetero.f90): integer(int64) and complex(8) arrays into and out of
# strided sections. There is no gfortran for s390x here, so the peer is C.
#   hetero.sh BUILDDIR SRCDIR HOST
# Uses the cross build of tests/hetero (BUILDDIR/cross-s390x, or
# $NX_S390X_CROSS; made or brought up to date by tests/hetero/cross.sh:
# exit 77 with "SKIP: <reason>" when the cross toolchain, qemu-user or the
# s390x sysroot is missing) for libnexus and the modules, and compiles the
# peer with libfm's sources against it.
set -u
build=$1 src=$2 host=$3

. "$src/tests/hetero/cross.sh"
cross_build fm
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
cross_unlock
# The peer runs from the host (fork and exec) with this command, the attach
# URL appended; not with the x86-64 LD_LIBRARY_PATH of meson test.
exec env NX_PROTOCOLS=tcp,local "$host" env \
  -u LD_LIBRARY_PATH qemu-s390x -L /usr/s390x-linux-gnu \
  -E "LD_LIBRARY_PATH=$sysroot/usr/lib/s390x-linux-gnu:$libc:$cross/nexus" "$peer"
