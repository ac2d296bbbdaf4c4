#!/usr/bin/env python3
"""Checks nexus-pvm's fpvm3.h against Debian's PVM 3.4.6 fpvm3.h: every
name the real header declares (INTEGER, then PARAMETER) is declared by ours
with the same value, and ours adds only NEXUSPVM. Skips (77) without the
real header. Usage: check_fpvm3_h.py OURS [REAL]"""
import re
import sys


def params(path):
    """The header's integer names and their parameter values."""
    names, values = set(), {}
    with open(path) as f:
        for line in f:
            if line[:1] in "cC*!" or line.strip().startswith("!"):
                continue
            s = line.split("!")[0].strip()
            m = re.match(r"integer\s+(.*)$", s, re.I)
            if m:
                names.update(n.strip().lower() for n in m.group(1).split(","))
                continue
            m = re.match(r"parameter\s*\((.*)\)\s*$", s, re.I)
            if m:
                for item in m.group(1).split(","):
                    n, v = item.split("=")
                    values[n.strip().lower()] = int(v)
    return names, values


def main():
    ours = sys.argv[1]
    real = sys.argv[2] if len(sys.argv) > 2 else "/usr/include/fpvm3.h"
    try:
        rn, rv = params(real)
    except OSError as e:
        print("skip: the real fpvm3.h (Debian's pvm-dev): %s" % e)
        return 77
    on, ov = params(ours)
    bad = []
    for n in sorted(rn):
        if n not in on:
            bad.append("%s: not declared" % n)
        elif ov.get(n) != rv.get(n):
            bad.append("%s: %s, PVM 3.4.6: %s" % (n, ov.get(n), rv.get(n)))
    extra = sorted(on - rn - {"nexuspvm"})
    if extra:
        bad.append("not in PVM's fpvm3.h: " + ", ".join(extra))
    if set(ov) != on:
        bad.append("declared without a value, or a value without a "
                   "declaration: " + ", ".join(sorted(set(ov) ^ on)))
    if bad:
        print("\n".join(bad))
        return 1
    print("fpvm3.h: the %d names of PVM 3.4.6's, with its values" % len(rn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
