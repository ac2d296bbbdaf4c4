#!/bin/sh
# libccxx exports only its public API (docs/ccxx.md): every symbol it
# defines in its dynamic table is in namespace ccxx (functions, and the
# exception classes' typeinfo and vtables), none of the runtime's internals
# (the request and reply handlers, the pending-call table) and none of the
# standard library's template instantiations.
#   exports.sh LIBCCXX
set -u
lib=$1
command -v nm >/dev/null 2>&1 || { echo "SKIP: nm not found (Debian package binutils)"; exit 77; }
syms=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3-) || exit 1
[ -n "$syms" ] || { echo "FAIL: no symbols read from $lib"; exit 1; }
echo "$syms" | grep -q '^ccxx::init(' || { echo "FAIL: ccxx::init is not exported"; exit 1; }
bad=$(echo "$syms" | grep -v -E '^(ccxx::|typeinfo for ccxx::|typeinfo name for ccxx::|vtable for ccxx::)')
internal=$(echo "$syms" | grep -E 'on_op|on_reply|pending|fail_calls|finish\(|register_handlers|std_kind')
if [ -n "$bad$internal" ]; then
  echo "FAIL: libccxx exports more than its public API:"
  echo "$bad"
  echo "$internal"
  exit 1
fi
echo "ok: $(echo "$syms" | wc -l) symbols, all of the public API (namespace ccxx)"
