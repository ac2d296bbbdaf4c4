#!/bin/sh
# Checks that a library exports only the public API: every defined dynamic
# symbol of libnexus.so starts with nx_ (docs/design.md, "Layers").
# Usage: check_exports.sh LIBRARY
set -u
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '{print $3}') || exit 1
total=$(printf '%s\n' "$syms" | grep -c .)
other=$(printf '%s\n' "$syms" | grep -v '^nx_' | grep .)
if [ "$total" -lt 50 ]; then
  echo "$lib: only $total symbols defined: not the library expected"
  exit 1
fi
if [ -n "$other" ]; then
  echo "$lib exports symbols outside the API:"
  printf '%s\n' "$other"
  exit 1
fi
echo "$lib: $total symbols, all nx_*"
