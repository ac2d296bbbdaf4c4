# The s390x cross build the heterogeneity tests share (docs/heterogeneity.md),
# sourced by tests/hetero/run.sh, tests/ccxx/hetero.sh and tests/fm/hetero.sh
# with $build (the native build directory) and $src (the source tree) set.
#   cross_build NAME
# checks the cross toolchain, qemu-user and the s390x sysroot with libuv and
# libcrypto ($NX_S390X_SYSROOT, by default $src/.deps/s390x-sysroot; scripts/deps
# installs the first and makes the second), exiting 77 with "SKIP: <reason>"
# when one is missing; sets up the cross build directory (meson,
# scripts/cross/s390x.ini) unless it is set up for this sysroot already; and
# brings libnexus, the local and tcp modules and hetero_peer up to date in it
# (-j2; the log is $build/cross-s390x.NAME.log). Sets cross (that directory),
# sysroot and libc (the cross libc's directory: qemu-s390x -L and the peer's
# LD_LIBRARY_PATH).
# The directory is $NX_S390X_CROSS if set, else $build/cross-s390x. The
# cross build has no sanitizer and does not depend on the native build, so
# scripts/test points every stage's tests at one directory. Tests of two
# streams may build in it at once: cross_build takes a lock on $cross.lock
# (flock) and holds it until the caller, having compiled its own peer into
# $cross, calls cross_unlock (or ends).

skip() {
  echo "SKIP: $*"
  exit 77
}

cross_build() {
  # What the cross build and the run need, each with the package that has it.
  for tool in s390x-linux-gnu-gcc:gcc-s390x-linux-gnu \
    s390x-linux-gnu-g++:g++-s390x-linux-gnu qemu-s390x:qemu-user \
    pkg-config:pkg-config meson:meson ninja:ninja-build; do
    command -v "${tool%%:*}" >/dev/null 2>&1 ||
      skip "${tool%%:*} not found (Debian package ${tool#*:})"
  done
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

  cross=${NX_S390X_CROSS:-$build/cross-s390x}
  mkdir -p "$(dirname "$cross")"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$cross.lock"
    flock 9
  fi
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
  log=$build/cross-s390x.$1.log
  start=$(date +%s)
  if ! ninja -C "$cross" -j2 tests/hetero/hetero_peer \
    protocols/local/libnx_proto_local.so protocols/tcp/libnx_proto_tcp.so \
    >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "FAIL: the s390x cross build ($log)"
    exit 1
  fi
  echo "s390x cross build: $(($(date +%s) - start)) s ($cross)"
}

# The caller's own builds in $cross are done: the next test may build.
cross_unlock() {
  command -v flock >/dev/null 2>&1 && flock -u 9
  return 0
}
