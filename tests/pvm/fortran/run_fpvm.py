#!/usr/bin/env python3
"""Runs one Fortran PVM program built twice from the same source, against
nexus-fpvm (over the modules NX_PROTOCOLS names) and, with --real, against
Debian's libfpvm3 under a private pvmd (run_pvm.py's Pvmd, started and
halted by its pid), and with --binding built with libnxfpvm's pvmf.c over
Debian's libpvm3 under the same pvmd, and checks that each prints the expected output
(recorded from the real PVM), so that the two print the same. The nexus
half runs first; if it fails the test fails. If the real half cannot run
here (--no-real, or no pvmd), the test is a skip (77) with the reason,
after the nexus half has passed; with neither --real nor --no-real only
the nexus half runs."""
import argparse
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import run_pvm  # noqa: E402

SKIP = 77


NUMBER_TIDS = False


def run(exe, env, expect):
    """Runs exe; returns None if it printed expect, else what went wrong.
    With --number-tids, the tids in [t<hex>] prefixes are numbered first
    (run_pvm.number_tids): they differ from run to run."""
    try:
        r = subprocess.run([exe], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
        return "%s did not end in 60 s; it printed:\n%s" % (exe, out or "")
    sys.stderr.write(r.stderr)
    if r.returncode == SKIP:
        return SKIP
    if r.returncode != 0:
        return "%s exited with %d; it printed:\n%s" % (exe, r.returncode,
                                                        r.stdout)
    if NUMBER_TIDS:
        r.stdout = run_pvm.number_tids(r.stdout)
    if r.stdout != expect:
        return "%s printed:\n%s\nexpected:\n%s" % (exe, r.stdout, expect)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", required=True)
    ap.add_argument("--real", help="the program built against libfpvm3")
    ap.add_argument("--binding", help="the program built with libnxfpvm's "
                    "pvmf.c over libpvm3, run under the same pvmd")
    ap.add_argument("--no-real", metavar="REASON",
                    help="why there is no real half: a skip after the nexus "
                    "half")
    ap.add_argument("--number-tids", action="store_true",
                    help="write each tid in a [t<hex>] prefix "
                    "(pvmfcatchout's) as [t1], [t2], ... in order of "
                    "appearance")
    ap.add_argument("nexus", nargs="?",
                    help="the program built against nexus-fpvm (none: the "
                    "real PVM halves alone)")
    a = ap.parse_args()
    with open(a.expect) as f:
        expect = f.read()
    global NUMBER_TIDS
    NUMBER_TIDS = a.number_tids
    signal.signal(signal.SIGTERM, run_pvm.on_signal)

    if a.nexus is not None:
        why = run(a.nexus, dict(os.environ), expect)
        if why == SKIP:
            run_pvm.skip("%s could not start nexus-pvm" % a.nexus)
        if why is not None:
            print("nexus-fpvm: " + why)
            return 1
        print("nexus-fpvm: %s printed the expected %d lines" % (
            os.path.basename(a.nexus), len(expect.splitlines())))
    elif a.real is None:
        ap.error("nothing to run")

    if a.no_real is not None:
        run_pvm.skip("the real PVM half: " + a.no_real)
    if a.real is None:
        return 0
    pvmd = run_pvm.Pvmd()
    try:
        why = pvmd.start()
        if why is not None:
            run_pvm.skip("the real PVM half: " + why)
        # Under AddressSanitizer the real PVM's own leaks (libpvm3's, with
        # pvmfcatchout) are not ours to report: leak checking is off for
        # the real halves only, as run_pvm.py does.
        env = dict(pvmd.env)
        if "ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] += ":detect_leaks=0"
        why = run(a.real, env, expect)
        if why is None and a.binding is not None:
            why = run(a.binding, env, expect)
            if why is not None:
                why = "libnxfpvm's binding over libpvm3: " + why
    finally:
        pvmd.stop()
    if why == SKIP:
        run_pvm.skip("%s could not start its PVM" % a.real)
    if why is not None:
        print("real PVM: " + why)
        return 1
    print("real PVM: %s printed the same" % os.path.basename(a.real))
    if a.binding is not None:
        print("real PVM: %s (pvmf.c over libpvm3) printed the same" %
              os.path.basename(a.binding))
    return 0


if __name__ == "__main__":
    sys.exit(main())
