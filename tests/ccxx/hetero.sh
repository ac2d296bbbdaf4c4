#!/bin/sh
# The ccxx heterogeneity test with a big-endian peer (docs/ccxx.md).
#   hetero.sh BUILDDIR SRCDIR HOST
# Brings the s390x cross build of libnexus and its local and tcp modules up
# to date in BUILDDIR/cross-s390x (as tests/hetero/run.sh does, with the
# same set-up, so the two share it), compiles libccxx and the peer
# (tests/ccxx/hetero_peer.cpp) with the s390x C++ compiler into it, and
# runs HOST (x86-64), which starts the peer under qemu-s390x. Exits 77 with
# "SKIP: <reason>" when the cross toolchain, qemu-user or the s390x sysroot
# ($NX_S390X_SYSROOT, by default SRCDIR/.deps/s390x-sysroot, made by
# scripts/deps) is missing.
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
  skip "no s390x sysroot at $sysroot (scripts/deps makes it; it says why it could not)"

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
    echo "FAIL: meson setup of the s390x cross build ($build/cross-s390x.setup.log)"
    rm -rf "$cross"
    exit 1
  fi
  cp "$sysroot/sysroot.ini" "$cross/.sysroot.ini"
fi
start=$(date +%s)
if ! ninja -C "$cross" -j2 tests/hetero/hetero_peer \
  protocols/local/libnx_proto_local.so protocols/tcp/libnx_proto_tcp.so \
  >"$build/cross-s390x.ccxx.log" 2>&1; then
  tail -n 40 "$build/cross-s390x.ccxx.log"
  echo "FAIL: the s390x cross build ($build/cross-s390x.ccxx.log)"
  exit 1
fi
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
echo "s390x cross build and ccxx peer: $(($(date +%s) - start)) s ($cross)"

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
