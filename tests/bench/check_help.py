#!/usr/bin/env python3
"""Every program built under bench/ and nexus/tools, and every script under
bench/, answers --help and refuses an argument it does not know: with
--help it exits 0 and prints its usage ("usage:") on stdout; with an
unknown option it exits with a status from 1 to 125 (not a signal, not a
time-out), names that option on stderr, and dies of no runtime error
(a Fortran runtime error, a sanitizer's report, a core dump). Each run
has 20 s; --help must need no runtime, MPI job or pvmd, so nothing else is
started. Usage: check_help.py PROGRAM..."""
import os
import subprocess
import sys

BOGUS = "--no-such-option-xyz"
TIMEOUT = 20
# Signs of a program that died rather than refused: what the runtimes
# print when they stop a program.
CRASH = ("Fortran runtime error", "ERROR STOP", "Segmentation fault",
         "AddressSanitizer", "runtime error:", "core dumped", "Traceback",
         "MPI_ABORT", "PMIX ERROR")


def run(argv):
    """(exit status, stdout, stderr) of one run; status None past TIMEOUT."""
    env = dict(os.environ)
    # The programs must answer before they look at these: left out, so that
    # none waits for a module or a launcher.
    for var in ("NX_PROTOCOLS", "NX_PROGRESS", "PVM_TMP"):
        env.pop(var, None)
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, errors="replace", timeout=TIMEOUT,
                           env=env)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return r.returncode, r.stdout, r.stderr


def check(prog):
    """The failures of one program, as lines."""
    name = os.path.basename(prog)
    argv = [prog]
    bad = []
    rc, out, err = run(argv + ["--help"])
    if rc is None:
        bad.append("%s --help: still running after %d s" % (name, TIMEOUT))
    else:
        if rc != 0:
            bad.append("%s --help: exit %d, not 0" % (name, rc))
        if "usage:" not in out.lower():
            bad.append("%s --help: no \"usage:\" on stdout" % name)
        for c in CRASH:
            if c in out + err:
                bad.append("%s --help: %r in its output" % (name, c))
    rc, out, err = run(argv + [BOGUS])
    if rc is None:
        bad.append("%s %s: still running after %d s" % (name, BOGUS, TIMEOUT))
    else:
        if not 1 <= rc <= 125:
            bad.append("%s %s: exit %d, not 1-125" % (name, BOGUS, rc))
        if BOGUS not in err:
            bad.append("%s %s: stderr does not name it" % (name, BOGUS))
        for c in CRASH:
            if c in out + err:
                bad.append("%s %s: %r in its output" % (name, BOGUS, c))
    if bad:
        print("%s: printed on the bad argument:\n%s%s" % (name, out, err))
    else:
        print("%s: --help and %s answered" % (name, BOGUS))
    return bad


def main():
    progs = sys.argv[1:]
    if not progs:
        print("usage: check_help.py PROGRAM...", file=sys.stderr)
        return 2
    failures = []
    for p in progs:
        if not os.access(p, os.X_OK):
            failures.append("%s: not built or not executable" % p)
            continue
        failures += check(p)
    for f in failures:
        print("FAILED: " + f)
    print("%d programs, %d failures" % (len(progs), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
