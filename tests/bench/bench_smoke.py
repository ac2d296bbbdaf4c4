#!/usr/bin/env python3
"""The round-trip benchmarks (bench/rsr_*.c, bench/bench_rsr_tcp.c) in their
quick modes against the built tree: each one that was built runs to the end,
prints its copying and its zero-copy rows at 1 MiB and 4 MiB (where the run
covers them) with a time and a ratio, and prints the zero-copy goal;
bench_rsr_ucx, bench_rsr_ofi and bench_rsr_mpi print their placed rows
(receive placement, issue 40) too, bench_rsr_ucx its placement goal;
bench_rsr_gateway prints its rows and goals or a SKIP line; bench_copy and
bench_spin print their times, ratios and verdicts; bench_mutex its
instruction counts and times with ratios. Nothing is asserted
about the times. Usage: bench_smoke.py BUILD_ROOT."""

import os
import re
import shutil
import subprocess
import sys

build = sys.argv[1]
bench = os.path.join(build, "bench")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
GOAL = "goal: within 1.1x of raw at 1 MiB and 4 MiB"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, flush=True)


def run(name, argv, timeout=240):
    """Runs a benchmark; returns its stdout, or None when it was not built."""
    if not os.access(os.path.join(bench, name), os.X_OK):
        print("WARN: SKIPPED %s: not built here" % name, flush=True)
        return None
    env = dict(os.environ)
    env.pop("NX_PROTOCOLS", None)
    env.pop("NX_PROGRESS", None)
    print("== " + " ".join(argv), flush=True)
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        check(False, "%s finishes within %d s" % (name, timeout))
        return ""
    print(r.stdout, flush=True)
    if r.stderr.strip():
        print(r.stderr[-3000:], flush=True)
    check(r.returncode == 0, "%s exits with 0 (got %d)" % (name,
                                                           r.returncode))
    return r.stdout


def sections(out, sizes):
    """The lines of each size's section: from a line starting with the
    size's label (possibly indented) to the next size or the goals."""
    got = {}
    current = None
    for line in out.splitlines():
        head = line.strip()
        m = re.match(r"(\d+ (?:B|KiB|MiB))\b", head)
        if m and m.group(1) in sizes and not head.startswith(
                m.group(1) + " zero copy"):
            current = m.group(1)
            got.setdefault(current, [])
        elif head.startswith("goals") or head.startswith("== "):
            current = None
        if current is not None:
            got[current].append(line)
    return got


ROW = r"\s+[0-9.]+ us\b.*[0-9.]+x"


def check_rows(name, out, sizes, rows):
    """Every size has each of `rows` with a time and a ratio."""
    secs = sections(out, sizes)
    for size in sizes:
        lines = secs.get(size, [])
        check(lines, "%s: a section for %s" % (name, size))
        for row in rows:
            check(any(re.search(re.escape(row) + ROW, l) for l in lines),
                  "%s: row \"%s\" at %s with a time and a ratio" % (
                      name, row, size))


def check_goals(name, out, sizes, labels):
    """The zero-copy goal, then a met/NOT met line per size and label."""
    check(GOAL in out, "%s prints \"%s\"" % (name, GOAL))
    tail = out[out.find(GOAL):] if GOAL in out else ""
    for size in sizes:
        for label in labels:
            pat = re.escape(size) + r".*" + re.escape(label) + \
                r".*[0-9.]+x\s+(met|NOT met)"
            check(re.search(pat, tail) is not None,
                  "%s: a zero-copy goal line for %s, %s" % (name, size,
                                                            label))


ZC = ["zero copy, progress thread", "zero copy, NX_PROGRESS=poll"]
COPY = ["RSR, progress thread", "RSR, NX_PROGRESS=poll"]
ALL = ["8 B", "1 KiB", "64 KiB", "1 MiB", "4 MiB"]
# Receive placement's rows (issue 40), at 1 MiB and 4 MiB.
PLACED = ["placed, progress thread", "placed, NX_PROGRESS=poll",
          "zero copy placed, thread", "zero copy placed, poll"]

# In process: every row once, few round trips.
out = run("bench_rsr_local",
          [os.path.join(bench, "bench_rsr_local"), "--smoke"])
if out is not None:
    sizes = ["1 KiB", "64 KiB", "1 MiB", "4 MiB"]
    check_rows("bench_rsr_local", out, sizes,
               ["RSR, non-threaded", "zero copy, non-threaded"])
    check_goals("bench_rsr_local", out, ["1 MiB", "4 MiB"],
                ["zero copy / raw"])
    # Tracing's cost, from a traced and an untraced run (docs/tracing.md).
    check(re.search(r"tracing <= 100 ns per traced RSR: +-?[0-9]+ ns  "
                    r"(met|NOT met)", out) is not None,
          "bench_rsr_local: the tracing goal line")

# tcp: every size and system, Open MPI's tcp BTL where it is built.
out = run("bench_rsr_tcp", [os.path.join(bench, "bench_rsr_tcp"), "--quick"])
if out is not None:
    check_rows("bench_rsr_tcp", out, ALL, COPY + ZC)
    # Its goals name the anchor, then a line per mode.
    check(GOAL in out and "no slower than Open MPI's tcp BTL" in
          out[out.find(GOAL):],
          "bench_rsr_tcp prints the zero-copy goals")
    for size in ["1 MiB", "4 MiB"]:
        for goal in ["zero copy within 1.1x of busy-polled raw TCP",
                     "zero copy no slower than Open MPI's tcp BTL"]:
            pat = re.escape("%s: %s" % (size, goal)) + "".join(
                r"\n\s+" + re.escape(label) +
                r"\s+([0-9.]+x\s+(met|NOT met)|not measured)" for label in ZC)
            check(re.search(pat, out) is not None,
                  "bench_rsr_tcp: goal \"%s: %s\" for both modes" % (size,
                                                                    goal))

# Through a gateway (issue 15): every size, the direct row and the rows
# through the gateway and through a relay handler with their ratios, and a
# met/NOT met line per goal; or
# a SKIP line when this host lacks the addresses the bench needs.
out = run("bench_rsr_gateway",
          [os.path.join(bench, "bench_rsr_gateway"), "--quick"])
if out is not None:
    if out.startswith("SKIP:"):
        print("WARN: SKIPPED bench_rsr_gateway: " + out.strip())
    else:
        check(re.search(r"route S -> P: gw \(via gw", out) is not None,
              "bench_rsr_gateway: the route to P goes through the gateway")
        check_rows("bench_rsr_gateway", out, ALL,
                   ["through a gateway, tcp + tcp",
                    "through a relay handler in G"])
        secs = sections(out, ALL)
        for size in ALL:
            check(any(re.search(r"direct, tcp\s+[0-9.]+ us", l)
                      for l in secs.get(size, [])),
                  "bench_rsr_gateway: a direct row at %s" % size)
        for size, limit in [("8 B", "2.2"), ("1 MiB", "1.2")]:
            pat = re.escape(size) + r"\s+through a gateway / direct\s+" + \
                r"[0-9.]+x\s+(met|NOT met) \(goal " + re.escape(limit) + "x\\)"
            check(re.search(pat, out) is not None,
                  "bench_rsr_gateway: the goal line at %s" % size)

# ucx: every size and system.
out = run("bench_rsr_ucx", [os.path.join(bench, "bench_rsr_ucx"), "--quick"])
if out is not None:
    check_rows("bench_rsr_ucx", out, ALL, COPY + ZC)
    check_goals("bench_rsr_ucx", out, ["1 MiB", "4 MiB"], ZC)
    # The placed rows beside Open MPI, and issue 40's goal over it.
    check_rows("bench_rsr_ucx", out, ["1 MiB", "4 MiB"], PLACED)
    PGOAL = "goal: zero copy + placed >= 1.2x Open MPI's bandwidth"
    check(PGOAL in out, "bench_rsr_ucx prints \"%s\"" % PGOAL)
    for size in ["1 MiB", "4 MiB"]:
        for label in PLACED[2:]:
            pat = re.escape(size) + r"\s+" + re.escape(label) + \
                r"\s+([0-9.]+x Open MPI's bandwidth\s+(met|NOT met)|" + \
                r"not measured)"
            check(re.search(pat, out[out.find(PGOAL):]) is not None,
                  "bench_rsr_ucx: a placement goal line for %s, %s" % (
                      size, label))

# ofi: one provider and one size (every launch is a fresh pair of
# processes; all of them take minutes).
out = run("bench_rsr_ofi", [os.path.join(bench, "bench_rsr_ofi"), "--quick",
                            "--provider", "shm", "--size", str(1 << 20)])
if out is not None:
    if "not available" in out:
        print("WARN: SKIPPED the ofi rows: the shm provider is not available")
    else:
        check_rows("bench_rsr_ofi", out, ["1 MiB"], COPY + ZC + PLACED)
        check_goals("bench_rsr_ofi", out, ["1 MiB"], ZC)

# mpi: under mpirun, one size.
if shutil.which("mpirun") is None:
    print("WARN: SKIPPED bench_rsr_mpi: no mpirun")
else:
    out = run("bench_rsr_mpi",
              MPIRUN + [os.path.join(bench, "bench_rsr_mpi"), "--quick",
                        "--size", str(4 << 20)])
    if out is not None:
        check_rows("bench_rsr_mpi", out, ["4 MiB"], COPY + ZC + PLACED)
        check_goals("bench_rsr_mpi", out, ["4 MiB"], ZC)

# Start-up under mpirun (PMIx bootstrap): 4 ranks, one round; the table
# and the goal line.
if shutil.which("mpirun") is None:
    print("WARN: SKIPPED bench_pmix_boot: no mpirun")
else:
    out = run("bench_pmix_boot",
              [os.path.join(bench, "bench_pmix_boot"), "--np", "4",
               "--rounds", "1"])
    if out is not None:
        for row in ["PMIx_Init + PMIx_Fence (anchor)",
                    "nx_init + nx_context_peers (local,tcp)"]:
            check(re.search(re.escape(row) + r"\s+[\d.]+\s+[\d.]+", out),
                  "bench_pmix_boot: the row " + row)
        check(re.search(r"ratio nexus / anchor\s+[\d.]+x\s+[\d.]+x", out),
              "bench_pmix_boot: the ratio row")
        check("goal: within 1.5x of the anchor" in out,
              "bench_pmix_boot: the goal line")

# The clever pieces (issue 26, item 8), each beside what it replaces, in
# one run: nxi_copy against memcpy (bench_copy), and the spin and yield
# budgets (bench_spin). Each prints its times, its ratios and a verdict
# per case; whether a piece pays is printed, not asserted.
out = run("bench_copy", [os.path.join(bench, "bench_copy"), "--quick"])
if out is not None:
    for case in ["skewed put: array -> block+5",
                 "skewed get: block+5 -> array", "aligned: array -> array"]:
        for size in ["4 KiB", "64 KiB", "128 KiB", "1 MiB"]:
            pat = re.escape(case) + r"\s+" + re.escape(size) + \
                r"\s+(SSE path taken: (pays|does NOT pay)|plain memcpy " \
                r"\(skew \d+\): (does not hurt|HURTS)) \([0-9.]+x"
            check(re.search(pat, out) is not None,
                  "bench_copy: a verdict for %s at %s" % (case, size))
    check(re.search(r"4 KiB\s+5\s+[0-9.]+ us\s+[0-9.]+ us\s+[0-9.]+x", out)
          is not None, "bench_copy: times and a ratio at 4 KiB, skew 5")
    check("summary: the SSE path pays in" in out, "bench_copy: its summary")

out = run("bench_spin", [os.path.join(bench, "bench_spin"), "--quick"])
if out is not None:
    for system in ["in process (local), non-threaded",
                   "in process (local), threaded",
                   "two processes over tcp, pinned",
                   "two processes over tcp, unpinned"]:
        check(re.search(re.escape(system) + r"(\s+[0-9.]+ us){6}", out)
              is not None, "bench_spin: times for %s" % system)
        check(re.search(re.escape(system) + r"\s+[0-9.]+x\s+[0-9.]+x", out)
              is not None, "bench_spin: ratios for %s" % system)
        check(re.search(re.escape(system) + r"\s+spin phase (pays|does NOT "
                        r"pay) \([0-9.]+x\)", out) is not None,
              "bench_spin: a verdict for %s" % system)
    check(re.search(r"the yield phase (pays|does NOT pay)", out) is not None,
          "bench_spin: the yield phase's verdict")

# What NX_RSR_ORDERED costs (docs/design.md section 7, "Ordered delivery"):
# plain and ordered one-way streams in one process, a ratio per handler kind.
out = run("bench_order", [os.path.join(bench, "bench_order"), "--quick"])
if out is not None:
    for kind in ["non-threaded", "threaded"]:
        check(re.search(re.escape(kind) + r"\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x",
                        out) is not None,
              "bench_order: times and a ratio for %s handlers" % kind)

# nx_mutex beside a bare pthread mutex (bench_mutex): instructions per
# pair under callgrind (or a SKIPPED line without valgrind), and the times
# and ratios of its three cases; the ratios are printed, not asserted.
out = run("bench_mutex", [os.path.join(bench, "bench_mutex"), "--quick"])
if out is not None:
    check(re.search(r"nx_mutex [0-9.]+\s+pthread [0-9.]+\s+ratio [0-9.]+x",
                    out) is not None or
          "instructions per uncontended pair: SKIPPED" in out,
          "bench_mutex: instructions per pair, or why not")
    for case in ["uncontended", "contended, 2 threads, back to back",
                 "contended, 2 threads, 200 loops apart"]:
        check(re.search(re.escape(case) + r"(\s+[0-9.]+ \(\s*[0-9.]+\)){2}"
                        r"\s+[0-9.]+x", out) is not None,
              "bench_mutex: times and a ratio for %s" % case)

if failures:
    print("%d checks failed" % len(failures))
    sys.exit(1)
print("all checks passed")
