#!/bin/sh
# The heterogeneity test (docs/heterogeneity.md).
#   run.sh s390x BUILDDIR SRCDIR HOST
#     cross-builds libnexus, the local and tcp modules and hetero_peer for
#     s390x into BUILDDIR/cross-s390x (cross.sh: exit 77 with "SKIP:
#     <reason>" when the cross toolchain, qemu-user or the s390x sysroot is
#     missing) and runs HOST (hetero_host, x86-64), which starts the peer
#     under qemu-s390x.
#   run.sh native BUILDDIR SRCDIR HOST PEER
#     runs HOST against the native PEER with HETERO_SAME_ORDER=1 and
#     NX_PROTOCOLS=tcp,local: checks the test itself, no byte order.
set -u
mode=$1 build=$2 src=$3 host=$4

if [ "$mode" = native ]; then
  # tcp between the two, as with the s390x peer (which has no other).
  HETERO_SAME_ORDER=1 NX_PROTOCOLS=tcp,local exec "$host" "$5"
fi

. "$src/tests/hetero/cross.sh"
cross_build build
cross_unlock

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
