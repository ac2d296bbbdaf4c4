#!/bin/sh
# The heterogeneity test (docs/heterogeneity.md).
#   run.sh s390x BUILDDIR SRCDIR HOST
#     cross-builds libnexus, the local and tcp modules and hetero_peer for
#     s390x into BUILDDIR/cross-s390x (meson, scripts/cross/s390x.ini; only
#     those targets, -j2; later runs only bring it up to date) and runs
#     HOST (hetero_host, x86-64), which starts the peer under qemu-s390x.
#     Exits 77 with "SKIP: <reason>" when the cross toolchain or qemu-user
#     is missing, or the s390x sysroot with libuv and libcrypto
#     ($NX_S390X_SYSROOT, by default SRCDIR/.deps/s390x-sysroot); scripts/deps
#     installs the first and makes the second.
#   run.sh native BUILDDIR SRCDIR HOST PEER
#     runs HOST against the native PEER with HETERO_SAME_ORDER=1 and
#     NX_PROTOCOLS=tcp,local: checks the test itself, no byte order.
set -u
mode=$1 build=$2 src=$3 host=$4

if [ "$mode" = native ]; then
  # tcp between the two, as with the s390x peer (which has no other).
  HETERO_SAME_ORDER=1 NX_PROTOCOLS=tcp,local exec "$host" "$5"
fi

skip() {
  echo "SKIP: $*"
  exit 77
}

# What the cross build and the run need, each with the package that has it.
for tool in s390x-linux-gnu-gcc:gcc-s390x-linux-gnu \
  s390x-linux-gnu-g++:g++-s390x-linux-gnu qemu-s390x:qemu-user \
  pkg-config:pkg-config meson:meson ninja:ninja-build; do
  command -v "${tool%%:*}" >/dev/null 2>&1 ||
    skip "${tool%%:*} not found (Debian package ${tool#*:})"
done
# The s390x loader and libc of the cross toolchain (qemu-s390x -L).
libc=/usr/s390x-linux-gnu/lib
[ -e $libc/ld64.so.1 ] && [ -e $libc/libc.so.6 ] ||
  skip "$libc/ld64.so.1 not found (Debian package libc6-dev-s390x-cross)"
# The s390x libuv and libcrypto, unpacked by scripts/deps (not installed).
sysroot=${NX_S390X_SYSROOT:-$src/.deps/s390x-sysroot}
[ -f "$sysroot/sysroot.ini" ] ||
  skip "no s390x sysroot at $sysroot (scripts/deps makes it; it says why it could not)"
pcdir=$sysroot/usr/lib/s390x-linux-gnu/pkgconfig
for lib in libuv:libuv1-dev libcrypto:libssl-dev; do
  PKG_CONFIG_LIBDIR=$pcdir PKG_CONFIG_SYSROOT_DIR=$sysroot pkg-config --exists "${lib%%:*}" ||
    skip "${lib%%:*} for s390x not found in $sysroot (Debian package ${lib#*:}:s390x; run scripts/deps)"
done

cross=$build/cross-s390x
# A cross build set up for another sysroot (or none) is set up anew.
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
  >"$build/cross-s390x.build.log" 2>&1; then
  tail -n 40 "$build/cross-s390x.build.log"
  echo "FAIL: the s390x cross build ($build/cross-s390x.build.log)"
  exit 1
fi
echo "s390x cross build: $(($(date +%s) - start)) s ($cross)"

peer=$cross/tests/hetero/hetero_peer
# As the cross file's exe_wrapper: the cross loader and libc (-L), the
# sysroot's libuv and libcrypto, and the cross libc's directory again in
# LD_LIBRARY_PATH, searched before /etc/ld.so.cache and so before any
# multiarch libc6:s390x. -E sets it for the s390x program, not for qemu.
set -- qemu-s390x -L /usr/s390x-linux-gnu \
  -E "LD_LIBRARY_PATH=$sysroot/usr/lib/s390x-linux-gnu:$libc" "$peer"
# qemu runs s390x programs at all: the peer's usage message, exit 2.
"$@" >"$build/cross-s390x.usage.log" 2>&1
rc=$?
[ $rc -eq 2 ] || {
  cat "$build/cross-s390x.usage.log"
  echo "FAIL: $* (no arguments) exited $rc, expected 2"
  exit 1
}
# meson test points LD_LIBRARY_PATH at the x86-64 libnexus: not for qemu.
exec "$host" env -u LD_LIBRARY_PATH "$@"
