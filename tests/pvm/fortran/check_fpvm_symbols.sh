#!/bin/sh
# Checks that the Fortran binding has every routine of Debian's libfpvm3:
# the pvmf*_ and pvm{sum,product,max,min}_ symbols that libfpvm3.a defines
# are those that pvmf.c and pvmf_pending.c define together (the library
# LIB_OVER_PVM3, built from both over Debian's libpvm3), and libnxfpvm
# exports every one of them.
# Usage: check_fpvm_symbols.sh LIB_OVER_PVM3 LIBNXFPVM_SO
set -eu
both=$1
nx=$2
# Where the C compiler finds libfpvm3.a (Debian's pvm-dev).
real=$(${CC:-cc} -print-file-name=libfpvm3.a)
[ -f "$real" ] || { echo "skip: libfpvm3.a (Debian's pvm-dev) not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pat='^(pvmf[a-z_]*|pvmsum|pvmproduct|pvmmax|pvmmin)_$'
nm --defined-only "$real" | awk '$2 == "T" {print $3}' | grep -E "$pat" | sort -u >"$tmp/real"
nm --defined-only "$both" | awk '$2 == "T" {print $3}' | grep -E "$pat" | sort -u >"$tmp/both"
nm -D --defined-only "$nx" | awk '$2 == "T" {print $3}' | grep -E "$pat" | sort -u >"$tmp/nx"
if ! cmp -s "$tmp/real" "$tmp/both"; then
  echo "pvmf.c and pvmf_pending.c differ from libfpvm3 (< libfpvm3, > ours):"
  diff "$tmp/real" "$tmp/both" || true
  exit 1
fi
extra=$(comm -13 "$tmp/real" "$tmp/nx")
if [ -n "$extra" ]; then
  echo "libnxfpvm exports routines libfpvm3 does not have: $extra"
  exit 1
fi
missing=$(comm -23 "$tmp/real" "$tmp/nx")
if [ -n "$missing" ]; then
  echo "libnxfpvm lacks routines of libfpvm3: $missing"
  exit 1
fi
echo "libnxfpvm exports all $(wc -l <"$tmp/real") routines of libfpvm3"
