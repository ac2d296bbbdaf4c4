#!/usr/bin/env python3
"""Instructions per 8 B round trip, nexus-pvm (fig3_pvm_nexus) beside the
raw RSR ping-pong (fig3_rsr --kind nonthreaded), over one module, counted
by callgrind in both processes. The measure docs/pvm.md's performance
section quotes. Usage:
  count_instr.py [BUILD_DIR] [--module ucx] [--n1 200] [--n2 1200]

The method. A waiting thread spins in nexus's wait hook (hook_wait) and a
deferring primary thread loops in nxi_pool_main for as long as the other
side takes, so their instructions depend on the scheduler, not on the
code: both are taken out (inclusive), and the frame dispatches run from
inside them are put back (dispatch, inclusive), without the runtime's own
delivery questions (on_ask), whose number depends on timing; so is
UCX's measurement of the TSC at start-up (ucs_x86_init_tsc_freq, a loop
that runs until enough time passed), taken out. Start-up and shutdown
cancel in the difference between a run of n2 and one of n1 round trips,
divided by n2 - n1. What is left is the work of a round trip: the
packing, the sends, the handlers and the unpacking of both processes. Not
in it: the module's progress call that finds the message (the same for
both programs) and the runtime's ledger ticks. "libnxpvm" is the
instructions nexus-pvm's library runs itself (exclusive), the part of the
work this frontend controls. Needs valgrind; build with -Dbuildtype=release
as bench/run does."""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

LINE = re.compile(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S+):(\S+) \[(\S+)\]")


def annotate(path, inclusive):
    """{function: cost} and {object file: exclusive cost} of one file."""
    argv = ["callgrind_annotate", "--threshold=100"]
    if inclusive:
        argv.append("--inclusive=yes")
    out = subprocess.run(argv + [path], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    fn, obj, total = collections.Counter(), collections.Counter(), 0
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        m = LINE.match(line)
        if m:
            v = int(m.group(1).replace(",", ""))
            if m.group(3) not in fn:  # the first (largest) of a name
                fn[m.group(3)] = v
            obj[os.path.basename(m.group(4))] += v
    return total, fn, obj


# UCX measures the TSC's frequency at start-up in a loop that runs until
# enough time has passed: 0 to 20,000 instructions more or less from one
# process to the next, start-up that would not cancel between two runs.
TIMED_START = "ucs_x86_init_tsc_freq"

CALLER = re.compile(r"\s*[\d,]+\s+\([^)]*\)\s+<\s+\S+ \(([\d,]+)x\)")
CALLEE = re.compile(r"\s*[\d,]+\s+\([^)]*\)\s+\*\s+(\S+) \[")


def calls(path, name):
    """How often function `name` was called in one file: its callers'
    "(Nx)" in callgrind_annotate --tree=caller."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100",
                          "--tree=caller", path], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    n, block = 0, []
    for line in out.splitlines():
        m = CALLER.match(line)
        if m:
            block.append(int(m.group(1).replace(",", "")))
            continue
        m = CALLEE.match(line)
        if m and m.group(1).endswith(":" + name):
            n += sum(block)
        block = []
    return n


def run(build, kind, module, iters, back=None, cond_wait=False):
    """(work, libnxpvm's own, back) instructions of a run, summed over
    both processes; `back` names one more function run from inside the
    waits, whose inclusive cost and number of calls are summed apart, as
    the pair `back` (bench/count_rsr.py puts UCP's active-message handler
    back per message). With `cond_wait`, the whole of nx_cond_timedwait
    is waiting, not only the wait hook in it: also its mutex taken again
    after the wake-up, which spins while the handler that signalled still
    holds it (bench/count_rsr.py)."""
    if kind == "pvm":
        prog = [os.path.join(build, "bench", "pvm", "fig3_pvm_nexus"),
                "--route", "direct", "--encoding", "raw"]
    else:
        prog = [os.path.join(build, "bench", "fig3", "fig3_rsr"),
                "--module", module, "--kind", "nonthreaded"]
    d = tempfile.mkdtemp(prefix="nxpvm-cg-")
    try:
        env = dict(os.environ, NX_PROTOCOLS=module + ",local",
                   UCX_MEM_EVENTS="n")
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--trace-children=yes",
             "--callgrind-out-file=" + os.path.join(d, "cg.%p")] + prog +
            ["--size", "8", "--iters", str(iters), "--warm", "50", "--reps",
             "1", "--max-ms", "100000000"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, timeout=1200)
        if "usec" not in r.stdout:
            sys.exit("%s %s failed: %s" % (kind, module, r.stderr[-400:]))
        work = own = 0
        extra = (0, 0)
        for f in glob.glob(os.path.join(d, "cg.*")):
            total, inc, _ = annotate(f, True)
            _, _, obj = annotate(f, False)
            work += (total - inc["hook_wait"] - inc["nxi_pool_main"] +
                     inc["dispatch"] - inc["on_ask"] - inc[TIMED_START])
            if cond_wait:
                work -= max(0, inc["nx_cond_timedwait"] - inc["hook_wait"])
            if back is not None:
                extra = (extra[0] + inc[back], extra[1] + calls(f, back))
            own += sum(v for k, v in obj.items() if k.startswith("libnxpvm"))
        return work, own, extra
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--module", default="ucx")
    ap.add_argument("--n1", type=int, default=200)
    ap.add_argument("--n2", type=int, default=1200)
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("skip: valgrind is not installed")
        return 0
    b = os.path.abspath(a.build)
    n = a.n2 - a.n1
    res = {}
    for kind in ["pvm", "rsr"]:
        w1, o1, _ = run(b, kind, a.module, a.n1)
        w2, o2, _ = run(b, kind, a.module, a.n2)
        res[kind] = ((w2 - w1) / n, (o2 - o1) / n)
    print("instructions per 8 B round trip over %s (both processes)" %
          a.module)
    print("%-12s %10s %10s" % ("", "work", "libnxpvm"))
    print("%-12s %10.0f %10.0f" % ("nexus-pvm", res["pvm"][0], res["pvm"][1]))
    print("%-12s %10.0f" % ("raw RSR", res["rsr"][0]))
    print("nexus-pvm / raw RSR (work): %.2fx" % (res["pvm"][0] / res["rsr"][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
