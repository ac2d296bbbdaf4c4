#!/bin/sh
# Operation ids do not depend on the compiler (docs/ccxx.md): the ccxx
# heterogeneity peer (tests/ccxx/hetero_peer.cpp) and libccxx compiled with
# clang++, against this build's libnexus, and the host built here (g++ by
# default) call each other's objects.
#   clang_peer.sh BUILDDIR SRCDIR HOST SANITIZE
# Exits 77 with "SKIP: <reason>" when clang++ is missing, or when this build
# is sanitized (SANITIZE is meson's b_sanitize): its libnexus then needs the
# sanitizer runtime of the compiler that built it, which a clang++ program
# cannot load.
set -u
build=$1 src=$2 host=$3 sanitize=$4

skip() {
  echo "SKIP: $*"
  exit 77
}
command -v clang++ >/dev/null 2>&1 || skip "clang++ not found (Debian package clang)"
[ "$sanitize" = none ] ||
  skip "this build is sanitized ($sanitize): a clang++ peer cannot load its libnexus"

out=$build/tests/ccxx/ccxx_clang_peer
stale=0
[ -x "$out" ] || stale=1
for f in "$src/compilers/ccxx/ccxx.cpp" "$src/compilers/ccxx/include/ccxx/ccxx.hpp" \
  "$src/tests/ccxx/hetero_peer.cpp" "$src/tests/ccxx/hetero_types.hpp"; do
  [ "$f" -nt "$out" ] && stale=1
done
if [ $stale -eq 1 ]; then
  clang++ -std=c++17 -O1 -pthread \
    -I"$src/compilers/ccxx/include" -I"$src/nexus/include" \
    -I"$build/nexus/include" \
    "$src/tests/ccxx/hetero_peer.cpp" "$src/compilers/ccxx/ccxx.cpp" \
    -L"$build/nexus" -lnexus -Wl,-rpath,"$build/nexus" -o "$out" ||
    { echo "FAIL: compiling the clang++ peer"; exit 1; }
fi
exec "$host" "$out"
