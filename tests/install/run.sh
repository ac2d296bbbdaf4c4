#!/bin/sh
# Installs the build into a scratch DESTDIR, builds tests/install/helper_hello.c
# against it with pkg-config alone, and checks that the installed library
# loads the installed module, not the build tree's, and its PMIx plugin;
# that the installed nxinfo and nxrun start with a clean environment (their
# rpath) and the installed nxtrace reads logs; and that README's "A first
# program" compiles as printed and prints "hello 42".
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

# The PMIx bootstrap's plugin, in a build with PMIx: installed with the
# modules, and found there by the installed library. A process with a
# PMIx server's variables but no server loads it, and the plugin's
# PMIx_Init then fails, saying so (docs/pmix.md).
if [ -f "$build/nexus/libnx_boot_pmix.so" ]; then
  [ -f "$libdir/nexus/libnx_boot_pmix.so" ] ||
    { echo "FAIL: libnx_boot_pmix.so was not installed in $libdir/nexus"; exit 1; }
  out=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$libdir" NX_PROTOCOLS=local \
    PMIX_NAMESPACE=nx-install-test PMIX_RANK=0 "$tmp/hello" 2>&1) || true
  echo "$out" | grep -q "PMIx_Init failed" ||
    { echo "$out"; echo "FAIL: the installed library did not load its PMIx plugin"; exit 1; }
fi

# The installed tools, with nothing in the environment pointing at the
# library: they must find it themselves.
bindir=$(dirname "$(find "$tmp" -type f -name nxinfo | head -n 1)")
info=$(env -i PATH=/usr/bin:/bin "$bindir/nxinfo" 2>&1) ||
  { echo "$info"; echo "FAIL: the installed nxinfo does not start"; exit 1; }
echo "$info" | grep -q "^local  *loaded .*$tmp/.*/nexus/libnx_proto_local.so" ||
  { echo "$info"; echo "FAIL: the installed nxinfo did not load the installed local"; exit 1; }
usage=$(env -i PATH=/usr/bin:/bin "$bindir/nxrun" --help 2>&1) ||
  { echo "$usage"; echo "FAIL: the installed nxrun does not start"; exit 1; }
echo "$usage" | grep -q "^usage: nxrun" ||
  { echo "$usage"; echo "FAIL: the installed nxrun printed no usage"; exit 1; }

# The installed nxtrace (built where OTF2 is found, docs/tracing.md), with
# a clean environment: it reads the logs the build tree's gen_logs writes
# (tests/trace), and the log of the installed hello run with NX_TRACE,
# and writes archives that otf2-print reads.
if [ -f "$build/nexus/tools/nxtrace" ]; then
  [ -x "$bindir/nxtrace" ] || { echo "FAIL: nxtrace was not installed in $bindir"; exit 1; }
  mkdir "$tmp/trace"
  "$build/tests/trace/gen_logs" "$tmp/trace"
  out=$(env -i PATH=/usr/bin:/bin "$bindir/nxtrace" "$tmp/trace" 2>&1) ||
    { echo "$out"; echo "FAIL: the installed nxtrace failed on gen_logs' logs"; exit 1; }
  echo "$out" | grep -q "^  0000000100000001  *0000000200000001  *5  *500  *tcp$" ||
    { echo "$out"; echo "FAIL: the installed nxtrace's summary lacks the pings"; exit 1; }
  # The installed hello, traced: its one RSR to itself over local.
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$libdir" NX_TRACE="$tmp/trace-hello" \
    "$tmp/hello" >/dev/null || { echo "FAIL: hello under NX_TRACE failed"; exit 1; }
  out=$(env -i PATH=/usr/bin:/bin "$bindir/nxtrace" "$tmp/trace-hello" 2>&1) ||
    { echo "$out"; echo "FAIL: the installed nxtrace failed on hello's log"; exit 1; }
  echo "$out" | grep -q "^  \([0-9a-f]\{16\}\)  *\1  *1  *[0-9][0-9]*  *local$" ||
    { echo "$out"; echo "FAIL: the installed nxtrace's summary lacks hello's RSR"; exit 1; }
  echo "$out" | grep -q "^  hello  *[0-9a-f]\{16\}  *1 " ||
    { echo "$out"; echo "FAIL: the installed nxtrace's summary lacks hello's run"; exit 1; }
  if command -v otf2-print >/dev/null; then
    for d in trace trace-hello; do
      otf2-print --silent "$tmp/$d/nexus.otf2" >/dev/null ||
        { echo "FAIL: otf2-print cannot read $d/nexus.otf2"; exit 1; }
    done
  fi
  echo "installed nxtrace: ok"
fi

# README's first program, as printed, 20 times: nx_finalize must run the
# RSR it sent before tearing down.
sed -n '/^## A first program/,/^```$/p' "$src/README.md" |
  sed -n '/^```c$/,/^```$/p' | sed '1d;$d' >"$tmp/first.c"
grep -q nx_rsr_send "$tmp/first.c" || { echo "FAIL: no first program in README"; exit 1; }
$cc -o "$tmp/first" "$tmp/first.c" $flags -Wl,-rpath,"$libdir"
i=0
while [ $i -lt 20 ]; do
  out=$(env -i PATH=/usr/bin:/bin "$tmp/first" 2>&1)
  [ "$out" = "hello 42" ] ||
    { echo "run $i: '$out'"; echo "FAIL: README's first program did not print hello 42"; exit 1; }
  i=$((i + 1))
done
echo "install test: ok"
