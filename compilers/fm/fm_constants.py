#!/usr/bin/env python3
"""Writes the Fortran constants of module fm from the C headers, so each is
defined once: the enumerators of fm_errno, fm_intent and fm_placement in
fm.h become `integer, parameter, public` lines, and the message tag of
fm_internal.h (FM_F_MSG_TAG) a private one.
Usage: fm_constants.py FM_H FM_INTERNAL_H OUT"""
import re
import sys

ENUMS = ("fm_errno", "fm_intent", "fm_placement")


def constants(header):
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    found = []
    for name in ENUMS:
        m = re.search(r"enum\s+" + name + r"\s*\{(.*?)\}", text, re.S)
        if m is None:
            sys.exit("fm_constants.py: enum %s not found in fm.h" % name)
        for item in m.group(1).split(","):
            item = item.strip()
            if not item:
                continue
            k = re.fullmatch(r"(FM_[A-Z0-9_]+)\s*=\s*(-?\d+)", item)
            if k is None:
                sys.exit("fm_constants.py: cannot read '%s' in enum %s"
                         % (item, name))
            found.append((k.group(1), int(k.group(2))))
    return found


def msg_tag(internal):
    m = re.search(r"#define\s+FM_F_MSG_TAG\s+INT64_C\((0x[0-9a-fA-F]+)\)",
                  internal)
    if m is None:
        sys.exit("fm_constants.py: FM_F_MSG_TAG not found in fm_internal.h")
    return m.group(1)[2:]


def main():
    with open(sys.argv[1]) as f:
        items = constants(f.read())
    with open(sys.argv[2]) as f:
        tag = msg_tag(f.read())
    lines = ["! Generated from fm.h and fm_internal.h by fm_constants.py: "
             "do not edit."]
    lines += ["integer, parameter, public :: %s = %d" % kv for kv in items]
    lines += ["integer(c_int64_t), parameter :: FM_MSG_TAG = &",
              "  int(z'%s', c_int64_t)" % tag]
    with open(sys.argv[3], "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
