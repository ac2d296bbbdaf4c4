#!/usr/bin/env python3
"""The nexus-pvm benchmark: the Figure 3 PVM ping-pong source
(bench/fig3/fig3_pvm.c, unchanged) built against nexus-pvm, over each
module, beside the raw RSR ping-pong over the same module (fig3_rsr) and
the real PVM 3.4 (fig3_pvm, routed directly, raw encoding, under a private
pvmd started here and halted by its pid); and pvm_bcast / pvm_barrier
among 8 tasks, ours against the real PVM's; and the ping-pong again with
both sides polling with pvm_nrecv (fig3_pvm --poll), ours against the real
PVM's (no goal). Each program runs --reps times, the programs of one
module (and the real PVM's) in turn. Prints the medians, the ratios and
the goals. Usage:
run_pvm_bench.py [BUILD_DIR] [--iters N] [--coll-iters N] [--reps N]"""
import argparse
import os
import signal
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "pvm"))
from run_pvm import Pvmd  # noqa: E402  (the tests' private pvmd)

MODULES = ["tcp", "ucx", "ofi"]


def run(argv, env, timeout=120):
    """The program's "usec" value, or None with the reason."""
    try:
        r = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    for line in r.stdout.splitlines():
        f = line.split()
        if f and f[0] == "skip:":
            return None, line
        if len(f) >= 2 and f[0] == "usec":
            return float(f[1]), None
    return None, "exit %d: %s" % (r.returncode, r.stderr.strip()[-200:])


def medians(progs, reps):
    """{row: (median, None) or (None, why)} of the programs {row: (argv,
    env)}, run in turn, one run of each per round, `reps` rounds: so a
    stretch of load the machine goes through weighs on every row alike,
    not on the rows that ran during it."""
    vals = {k: [] for k in progs}
    why = {k: None for k in progs}
    for _ in range(reps):
        for k, (argv, env) in progs.items():
            v, w = run(argv, env)
            if v is not None:
                vals[k].append(v)
            else:
                why[k] = w
    return {k: (statistics.median(vals[k]), None) if vals[k] else
            (None, why[k]) for k in progs}


def on_signal(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    # 20,000 round trips of about a microsecond, after 2,000 to warm up:
    # with 2,000 (2 ms a run) a run of either program over ucx could catch
    # its peer still starting (4-12 us a round trip in about half the runs
    # on 2 cores, 2026-11-28), which made the same-run ratios anything from
    # 0.25x to 4x. Each run stops after a second (fig3's --max-ms).
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--coll-iters", type=int, default=500,
                    help="pvm_bcast / pvm_barrier calls per run (the real "
                    "PVM's: a fifth)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    b = os.path.abspath(a.build)
    fig3 = os.path.join(b, "bench", "fig3")
    mine = os.path.join(b, "bench", "pvm")
    pp = ["--route", "direct", "--encoding", "raw", "--size", "8",
          "--iters", str(a.iters), "--warm", str(a.iters // 10),
          "--reps", "1"]
    rows = {}
    built = [m for m in MODULES if os.path.exists(
        os.path.join(b, "protocols", m, "libnx_proto_%s.so" % m))]
    for m in built:
        env = dict(os.environ, NX_PROTOCOLS=m + ",local")
        progs = {
            "nexus-pvm/" + m: ([os.path.join(mine, "fig3_pvm_nexus")] + pp,
                               env),
            "nexus-pvm nrecv/" + m: ([os.path.join(mine, "fig3_pvm_nexus")] +
                                     pp + ["--poll"], env),
            "rsr/" + m: ([os.path.join(fig3, "fig3_rsr"), "--module", m,
                          "--kind", "nonthreaded", "--size", "8", "--iters",
                          str(a.iters), "--warm", str(a.iters // 10),
                          "--reps", "1"], env),
        }
        coll_iters = ["--iters", str(max(10, a.coll_iters))]
        for op in ["bcast", "barrier"]:
            progs["nexus-pvm %s/%s" % (op, m)] = (
                [os.path.join(mine, "pvm_coll_nexus"), op] + coll_iters, env)
        rows.update(medians(progs, a.reps))
    signal.signal(signal.SIGTERM, on_signal)
    pvmd = Pvmd()
    try:
        why = pvmd.start()
        real_fig3 = os.path.join(fig3, "fig3_pvm")
        real_coll = os.path.join(mine, "pvm_coll_real")
        if why is None:
            progs = {
                "pvm/direct/raw": ([real_fig3] + pp, pvmd.env),
                "pvm nrecv/direct/raw": ([real_fig3] + pp + ["--poll"],
                                         pvmd.env),
            }
            for op in ["bcast", "barrier"]:
                progs["pvm %s" % op] = (
                    [real_coll, op, "--iters",
                     str(max(10, a.coll_iters // 5))], pvmd.env)
            rows.update(medians(progs, a.reps))
        else:
            for k in ["pvm/direct/raw", "pvm nrecv/direct/raw", "pvm bcast",
                      "pvm barrier"]:
                rows[k] = (None, why)
    finally:
        pvmd.stop()

    print("%-28s %12s" % ("8-byte round trip / operation", "usec"))
    for k, (v, why) in rows.items():
        print("%-28s %12s" % (k, "%.2f" % v if v is not None else
                              "skipped (%s)" % why))

    def val(k):
        return rows.get(k, (None, None))[0]

    def goal(text, ratio, target, higher=True):
        if ratio is None:
            print("goal %-58s n/a" % text)
            return
        ok = ratio >= target if higher else ratio <= target
        print("goal %-58s %8.2fx  %s" % (text, ratio,
                                          "met" if ok else "NOT met"))

    def r(x, y):
        return x / y if x and y else None

    print()
    best = min((val("nexus-pvm/" + m), m) for m in built
               if val("nexus-pvm/" + m)) if any(
        val("nexus-pvm/" + m) for m in built) else (None, None)
    pvm8 = val("pvm/direct/raw")
    goal("8 B: real PVM direct/raw over nexus-pvm, best module %s (>=50x)"
         % best[1], r(pvm8, best[0]), 50)
    goal("8 B: real PVM direct/raw over nexus-pvm on tcp (>=5x)",
         r(pvm8, val("nexus-pvm/tcp")), 5)
    for m in built:
        goal("8 B: nexus-pvm over raw RSR array ping-pong, %s (<=1.3x)" % m,
             r(val("nexus-pvm/" + m), val("rsr/" + m)), 1.3, higher=False)
    for op in ["bcast", "barrier"]:
        mb = min((val("nexus-pvm %s/%s" % (op, m)) or float("inf"), m)
                 for m in built)
        goal("%s of 8: real PVM over nexus-pvm, %s (>=10x)" % (op, mb[1]),
             r(val("pvm " + op), mb[0] if mb[0] != float("inf") else None),
             10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
