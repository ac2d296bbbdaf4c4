#!/bin/sh
# The ccxx heterogeneity test with a big-endian peer (docs/ccxx.md).
#   hetero.sh BUILDDIR SRCDIR HOST
# Brings the s390x cross build of libnexus and its local and tcp modules up
# to date in BUILDDIR/cross-s390x, or $NX_S390X_CROSS (tests/hetero/cross.sh,
# shared with tests/hetero/run.sh; exit 77 with "SKIP: <reason>" when the
# cross toolchain, qemu-user or the s390x sysroot is missing), compiles libccxx
# and the peer (tests/ccxx/hetero_peer.cpp) with the s390x C++ compiler
# into it, and runs HOST (x86-64), which starts the peer under qemu-s390x.
set -u
build=$1 src=$2 host=$3

. "$src/tests/hetero/cross.sh"
cross_build ccxx
start=$(date +%s)
# libccxx and the peer, compiled again only when a source changed.
peer=$cross/ccxx_hetero_peer
sources="$src/compilers/ccxx/ccxx.cpp $src/compilers/ccxx/include/ccxx/ccxx.hpp
  $src/tests/ccxx/hetero_peer.cpp $src/tests/ccxx/hetero_types.hpp
  $(ls "$cross"/nexus/libnexus.so.* | head -n 1)"
stale=0
[ -x "$peer" ] || stale=1
for f in $sources; do
  [ "$f" -nt "$peer" ] && stale=1
done
if [ $stale -eq 1 ]; then
  if ! s390x-linux-gnu-g++ -std=c++17 -O1 -pthread \
    -I"$src/compilers/ccxx/include" -I"$src/nexus/include" \
    -I"$cross/nexus/include" \
    "$src/tests/ccxx/hetero_peer.cpp" "$src/compilers/ccxx/ccxx.cpp" \
    -L"$cross/nexus" -lnexus -Wl,-rpath,"$cross/nexus" -o "$peer" \
    >"$build/cross-s390x.ccxx-peer.log" 2>&1; then
    tail -n 40 "$build/cross-s390x.ccxx-peer.log"
    echo "FAIL: compiling the s390x ccxx peer ($build/cross-s390x.ccxx-peer.log)"
    exit 1
  fi
fi
echo "s390x ccxx peer: $(($(date +%s) - start)) s ($peer)"
cross_unlock

set -- qemu-s390x -L /usr/s390x-linux-gnu \
  -E "LD_LIBRARY_PATH=$sysroot/usr/lib/s390x-linux-gnu:$libc:$cross/nexus" "$peer"
"$@" >"$build/cross-s390x.ccxx-usage.log" 2>&1
rc=$?
[ $rc -eq 2 ] || {
  cat "$build/cross-s390x.ccxx-usage.log"
  echo "FAIL: $* (no arguments) exited $rc, expected 2"
  exit 1
}
exec "$host" env -u LD_LIBRARY_PATH "$@"
