#!/usr/bin/env python3
"""Instructions per RSR, counted by callgrind (counts do not move with the
machine): the budgets of docs/design.md "The RSR path" and the table in
docs/performance.md. Usage:
  count_rsr.py [BUILD_DIR] [--modules ucx,tcp] [--quick]

In process: bench_rsr_local's null round trip (two RSRs, two non-threaded
handlers; then threaded ones), NX_PROTOCOLS=local and NX_PROGRESS=poll so
that no progress thread spins; what callgrind counts inside bench_rsr
(--toggle-collect), divided by the round trips the program reports. That
includes the program's own mutex and condition variable (its waiter) and
the waiting thread's polls.

Over a module: the 8 B non-threaded round trip of fig3_rsr, both
processes, counted as bench/pvm/count_instr.py counts it (spinning waits
taken out, runs of two lengths subtracted). Needs valgrind; build with
-Dbuildtype=release as bench/run does."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "pvm"))
import count_instr  # noqa: E402  (the module-level method, shared)


def in_process(build, threaded):
    """Instructions per in-process null round trip."""
    prog = os.path.join(build, "bench", "bench_rsr_local")
    d = tempfile.mkdtemp(prefix="nx-count-")
    try:
        out = os.path.join(d, "cg.out")
        env = dict(os.environ, NX_PROTOCOLS="local", NX_PROGRESS="poll")
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--toggle-collect=bench_rsr",
             "--callgrind-out-file=" + out, prog,
             "--null-threaded" if threaded else "--null-only", "--quick"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, timeout=1800)
        m = re.search(r"round trips: (\d+)", r.stderr)
        if r.returncode != 0 or m is None:
            sys.exit("bench_rsr_local failed: %s" % r.stderr[-400:])
        total, _, _ = count_instr.annotate(out, False)
        return total / int(m.group(1))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--modules", default="ucx",
                    help="modules to count a round trip over (comma list; "
                    "empty for none)")
    ap.add_argument("--quick", action="store_true",
                    help="fewer round trips over the modules")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("skip: valgrind is not installed")
        return 0
    b = os.path.abspath(a.build)
    print("instructions per RSR (callgrind)")
    for threaded in (False, True):
        rt = in_process(b, threaded)
        print("  in process, null round trip, %-12s %7.0f  (%.0f per RSR)" %
              ("threaded:" if threaded else "non-threaded:", rt, rt / 2))
    n1, n2 = (100, 600) if a.quick else (200, 1200)
    for mod in [m for m in a.modules.split(",") if m]:
        w1, _ = count_instr.run(b, "rsr", mod, n1)
        w2, _ = count_instr.run(b, "rsr", mod, n2)
        rt = (w2 - w1) / (n2 - n1)
        print("  over %-4s 8 B round trip, both processes: %7.0f  "
              "(%.0f per RSR)" % (mod, rt, rt / 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
