#!/usr/bin/env python3
"""The Figure 3 harness in smoke mode (bench/run --smoke) against the built
tree: the CSV holds a row for every system and both sizes (the zero-copy
RSR rows rsr-zc/<module>/nonthreaded and both raw TCP rows, blocking and
busy-polled, included), the systems that exist everywhere were measured,
the ratio table shows them (its 8 B times and /TCPbest ratios from this
run's CSV), every goal printed divides two rows of this run's CSV with the
verdict its limit gives, the plot's script draws the
paper's view, the ratios and one panel per module without a colour used
twice in a panel, and the private pvmd was started and halted, leaving no
pvmd behind, also when the run is stopped with Ctrl-C. Usage: fig3_smoke.py BUILD_ROOT SOURCE_ROOT."""

import csv
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

build, source = sys.argv[1], sys.argv[2]
run = os.path.join(source, "bench", "run")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, flush=True)


def pid_gone(pid):
    """True when no process `pid` exists any more, or it is not a pvmd
    (the pid was reused)."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return "pvmd" not in f.read()
    except OSError:
        return True


def pvm_installed():
    return shutil.which("pvmd") is not None and \
        os.path.exists(os.path.join(build, "bench", "fig3", "fig3_pvm"))


def check_pvmd(out, when):
    """The run printed the pvmd it started and halted, and that pid is
    gone."""
    started = re.search(r"pvmd: started, pid (\d+) \(PVM_TMP=(\S+)\)", out)
    if not pvm_installed():
        print("WARN: SKIPPED the pvmd checks (%s): PVM is not installed or "
              "fig3_pvm was not built" % when)
        return
    check(started is not None, "%s: pvmd was started" % when)
    if started is None:
        return
    pid, tmp = int(started.group(1)), started.group(2)
    check(re.search(r"pvmd: halted, pid %d\b" % pid, out) is not None,
          "%s: pvmd %d was halted" % (when, pid))
    deadline = time.time() + 10
    while not pid_gone(pid) and time.time() < deadline:
        time.sleep(0.1)
    check(pid_gone(pid), "%s: no pvmd %d left behind" % (when, pid))
    check(not os.path.exists(tmp), "%s: %s removed" % (when, tmp))


MODULES = ["local", "ucx", "ofi", "mpi", "tcp"]
SIZES = {"8 B": 8, "1 MiB": 1 << 20}


def run_name(row):
    """A CSV row's name as bench/run prints it."""
    parts = [row["system"], row["protocol"]]
    if row["system"] in ("rsr", "rsr-zc", "tcp"):
        parts.append(row["handler"])
    elif row["system"] == "pvm":
        parts.append(row["encoding"])
    return "/".join(parts)


# The goals the issues name, each with the rows it may divide (the fastest
# of each list): they must be printed, and measured where their rows are.
GOALS = [
    ("8 B", "PVM direct/raw over RSR, best module (issue 26) (>=100x)",
     ["pvm/direct/raw"],
     ["rsr/%s/nonthreaded" % m for m in ["ucx", "ofi", "mpi", "tcp"]]),
    ("8 B", "PVM direct/raw over nexus-pvm, best module (issue 22) (>=50x)",
     ["pvm/direct/raw"], ["nexus-pvm/%s" % m for m in ["tcp", "ucx", "ofi"]]),
    ("8 B", "RSR non-threaded on tcp over the best raw TCP (<=1.2x)",
     ["rsr/tcp/nonthreaded"], ["tcp/tcp/busy-polled", "tcp/tcp/blocking"]),
    ("8 B", "nexus-pvm over RSR non-threaded, tcp (issue 22) (<=1.3x)",
     ["nexus-pvm/tcp"], ["rsr/tcp/nonthreaded"]),
    ("8 B", "local pooled threaded over non-threaded (issue 26) (<=1.25x)",
     ["rsr/local/threaded"], ["rsr/local/nonthreaded"]),
    ("1 MiB", "RSR tcp over Open MPI's tcp BTL (issue 26) (<=1x)",
     ["rsr/tcp/nonthreaded"], ["mpi/tcp"]),
    ("1 MiB", "zero-copy RSR tcp over Open MPI's tcp BTL (issue 26) (<=1x)",
     ["rsr-zc/tcp/nonthreaded"], ["mpi/tcp"]),
]

GOAL_LINE = re.compile(
    r"^  (\d+ (?:B|MiB)): (.*) \((>=|<=)([0-9.]+)x\) +([0-9.]+)x  "
    r"(met|NOT met) +\[(\S+) ([0-9.]+) us / (\S+) ([0-9.]+) us\]$")


def check_goals(out, median, must):
    """Every measured goal line divides two rows of this run's CSV (their
    medians as printed), its ratio is that quotient, its verdict follows
    from its limit; the issues' goals are all printed, measured where
    their rows are, and divide the fastest of the rows they may."""
    check("goals (met or not" in out, "the goals were printed")
    seen = {}
    for line in out.splitlines():
        if not line.startswith("  ") or "(>=" not in line and \
                "(<=" not in line:
            continue
        m = GOAL_LINE.match(line)
        if m is None:
            check(line.rstrip().endswith("not measured"),
                  "a goal line reads \"ratio met|NOT met [a / b]\" or "
                  "\"not measured\": %r" % line)
            continue
        size = SIZES.get(m.group(1))
        a_name, a, b_name, b = m.group(7), float(m.group(8)), \
            m.group(9), float(m.group(10))
        seen["%s (%s%sx)" % (m.group(2), m.group(3), m.group(4))] = \
            (m.group(1), a_name, b_name)
        for name, v in ((a_name, a), (b_name, b)):
            ok = (name, size) in median and \
                abs(median[(name, size)] - v) <= 0.0015
            check(ok, "goal %r: %s at %s is %g in the CSV" % (
                m.group(2), name, m.group(1), v))
        want = a / b
        got = float(m.group(5))
        check(abs(got - want) <= 0.006 + 0.001 * want,
              "goal %r: ratio %g is %g / %g" % (m.group(2), got, a, b))
        limit = float(m.group(4))
        met = got <= limit if m.group(3) == "<=" else got >= limit
        check((m.group(6) == "met") == met,
              "goal %r: %s follows from %gx against %s%g" % (
                  m.group(2), m.group(6), got, m.group(3), limit))
    for label, text, nums, dens in GOALS:
        check(("  %s: %s" % (label, text)) in out,
              "the goal \"%s: %s\" was printed" % (label, text))
        size = SIZES[label]
        if all(any(n in must for n in group) for group in (nums, dens)):
            check(text in seen, "the goal \"%s\" was measured" % text)
        if text not in seen:
            continue
        for group, name in ((nums, seen[text][1]), (dens, seen[text][2])):
            best = min((median[(n, size)], n) for n in group
                       if (n, size) in median)
            check(name == best[1], "goal %r divides the fastest of %s "
                  "(%s), not %s" % (text, group, best[1], name))


def check_table(out, median):
    """The ratio table's rows at 8 B: each RSR row's time is its CSV
    median, and its /TCPbest ratio divides it by the faster raw TCP row of
    the same run."""
    section = out.split("\n-- 8 B\n", 1)[-1].split("\n-- ", 1)[0]
    tcp = [median[(n, 8)] for n in ["tcp/tcp/busy-polled",
                                   "tcp/tcp/blocking"] if (n, 8) in median]
    rows = 0
    for line in section.splitlines():
        f = line.split()
        if len(f) < 6 or not f[0].startswith(("rsr/", "rsr-zc/")):
            continue
        rows += 1
        t = median.get((f[0], 8))
        check(t is not None and abs(float(f[1]) - t) <= 0.006,
              "ratio table: %s at 8 B is its CSV median" % f[0])
        if t is not None and tcp and f[5] != "-":
            want = t / min(tcp)
            check(abs(float(f[5]) - want) <= 0.006 * want,
                  "ratio table: %s /TCPbest %s is %g / %g" % (
                      f[0], f[5], t, min(tcp)))
    check(rows > 0, "the ratio table has RSR rows at 8 B")


PANELS = ["The paper's view", "The ratios the goals use",
          "RSR over local", "RSR over ucx", "RSR over ofi", "RSR over mpi",
          "RSR over tcp", "PVM 3.4"]


def check_plot(outdir, median):
    """fig3.gp, the script that drew fig3.png: the panels in order, none
    with two series of one colour; the paper's view holds both raw TCP
    rows and the fastest RSR per module (its 8 B point the fastest
    handler kind's median); fig3.png is a PNG where gnuplot is."""
    gp = os.path.join(outdir, "fig3.gp")
    check(os.path.exists(gp), "fig3.gp written")
    if not os.path.exists(gp):
        return
    with open(gp) as f:
        text = f.read()
    titles = re.findall(r'^set title "([^"]*)"', text, re.M)
    check(len(titles) == len(PANELS) and
          all(t.startswith(p) for t, p in zip(titles, PANELS)),
          "the panels %s (got %s)" % (PANELS, titles))
    blocks = dict(re.findall(r"^\$(\w+) << EOD\n(.*?)^EOD$", text,
                             re.M | re.S))
    for i, plot_cmd in enumerate(re.findall(r"^plot (.*?)(?=^\S|\Z)", text,
                                            re.M | re.S)):
        series = re.findall(r"\$(\w+) using 1:2 with linespoints lc rgb "
                            r"'(#\w+)'.*? title \"([^\"]*)\"", plot_cmd)
        colours = [c for _, c, _ in series]
        check(len(colours) == len(set(colours)),
              "panel %d: no two series share a colour" % (i + 1))
        if i != 0:
            continue
        names = {t: b for b, _, t in series}
        for n in ["tcp/tcp/blocking", "tcp/tcp/busy-polled",
                  "RSR over tcp (fastest handler kind)",
                  "RSR over local (fastest handler kind)"]:
            check(n in names, "the paper's view draws %s" % n)
        block = names.get("RSR over tcp (fastest handler kind)")
        if block in blocks:
            pts = dict(line.split() for line in blocks[block].splitlines())
            best = min(median[("rsr/tcp/%s" % k, 8)]
                       for k in ["nonthreaded", "threaded", "new-thread"]
                       if ("rsr/tcp/%s" % k, 8) in median)
            check(abs(float(pts.get("8", "nan")) - best) <= 0.0015,
                  "the paper's view: RSR over tcp at 8 B is the fastest "
                  "kind's median (%g)" % best)
    png = os.path.join(outdir, "fig3.png")
    if shutil.which("gnuplot"):
        ok = os.path.exists(png)
        if ok:
            with open(png, "rb") as f:
                ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
        check(ok, "fig3.png is a PNG")
    else:
        print("WARN: SKIPPED the plot check: no gnuplot")


results = tempfile.mkdtemp(prefix="fig3-smoke-")
try:
    # 1. A whole smoke run.
    argv = [run, "--smoke", "--no-build", "--build-dir", build,
            "--results", results]
    env = dict(os.environ)
    env.pop("NX_PROTOCOLS", None)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=200, env=env)
    print(r.stdout, flush=True)
    check(r.returncode == 0, "bench/run --smoke exits with 0")
    check_pvmd(r.stdout, "smoke run")
    csvs = glob.glob(os.path.join(results, "*", "fig3.csv"))
    check(len(csvs) == 1, "one results/<timestamp>/fig3.csv")
    if csvs:
        outdir = os.path.dirname(csvs[0])
        with open(csvs[0]) as f:
            rows = list(csv.DictReader(f))
        got = {}
        for row in rows:
            got[(run_name(row), int(row["size_bytes"]))] = row
        names = ["rsr/%s/%s" % (m, k) for m in MODULES
                 for k in ["nonthreaded", "threaded", "new-thread"]]
        names += ["rsr-zc/%s/nonthreaded" % m for m in MODULES]
        names += ["pvm/%s/%s" % (r_, e) for r_ in ["pvmd", "direct"]
                  for e in ["xdr", "raw"]]
        names += ["mpi/sm", "mpi/tcp", "tcp/tcp/blocking",
                  "tcp/tcp/busy-polled"]
        names += ["nexus-pvm/%s" % m for m in ["tcp", "ucx", "ofi"]]
        check(len(rows) == 2 * len(names),
              "%d rows (got %d)" % (2 * len(names), len(rows)))
        # Modules that may be missing on a machine are skipped with a
        # reason; the in-process, tcp and raw rows work everywhere, PVM
        # where it is installed, Open MPI where mpi_pingpong was built.
        must = [n for n in names if n.startswith(("rsr/local", "rsr/tcp",
                                                  "rsr-zc/local",
                                                  "rsr-zc/tcp", "tcp/"))]
        if os.path.exists(os.path.join(build, "bench", "pvm",
                                       "fig3_pvm_nexus")):
            must += ["nexus-pvm/tcp"]
        if pvm_installed():
            must += [n for n in names if n.startswith("pvm/")]
        if os.path.exists(os.path.join(build, "bench", "mpi_pingpong")):
            must += ["mpi/sm", "mpi/tcp"]
        for size in (8, 1 << 20):
            for n in names:
                row = got.get((n, size))
                check(row is not None, "a row for %s at %d B" % (n, size))
                if row is None:
                    continue
                if n in must:
                    check(row["status"] == "ok" and
                          float(row["median_us"]) > 0,
                          "%s at %d B measured (%s: %s)" % (
                              n, size, row["status"], row["note"]))
                else:
                    check(row["status"] in ("ok", "skipped") and
                          (row["status"] == "ok" or row["note"]),
                          "%s at %d B measured or skipped with a reason "
                          "(%s: %s)" % (n, size, row["status"], row["note"]))
        median = {k: float(v["median_us"]) for k, v in got.items()
                  if v["status"] == "ok"}
        check(os.path.exists(os.path.join(outdir, "summary.txt")),
              "summary.txt written")
        # What the clever pieces buy (bench_copy, bench_spin --quick).
        clever = os.path.join(outdir, "clever.txt")
        text = open(clever).read() if os.path.exists(clever) else ""
        check("summary: the SSE path pays in" in text and
              re.search(r"the yield phase (pays|does NOT pay)", text),
              "clever.txt written, with bench_copy's and bench_spin's "
              "verdicts")
        # The ratio table: the zero-copy rows (with a ratio over the
        # copying row), both raw TCP rows and the column over the best.
        check(re.search(r"^ +us +/PVMdir +/MPI-sm +/MPItcp +/TCPbest",
                        r.stdout, re.M) is not None,
              "the ratio table has a /TCPbest column")
        for n in ["rsr-zc/local/nonthreaded", "rsr-zc/tcp/nonthreaded"]:
            check(re.search(r"^%s +[0-9.]+ .*[0-9.]+\s*$" % n, r.stdout,
                            re.M) is not None,
                  "the ratio table has %s" % n)
        for n in ["tcp/tcp/blocking", "tcp/tcp/busy-polled"]:
            check(re.search(r"^%s +[0-9.]+\s*$" % n, r.stdout, re.M)
                  is not None, "the ratio table has %s" % n)
        check_table(r.stdout, median)
        check_goals(r.stdout, median, must)
        check_plot(outdir, median)
    # 2. Ctrl-C while it measures: pvmd is halted all the same. The run
    # gets its own process group, and the whole group gets SIGINT, as a
    # terminal's Ctrl-C would send it.
    if pvm_installed():
        p = subprocess.Popen(argv + ["--only", "rsr/local,pvm/direct/raw"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env, start_new_session=True)
        out = ""
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            out += line
            if line.startswith("   rsr/local/"):
                os.killpg(p.pid, signal.SIGINT)
                break
        rest, _ = p.communicate(timeout=60)
        out += rest
        print(out, flush=True)
        check(p.returncode != 0, "an interrupted run does not exit with 0")
        check("interrupted" in out, "the run says it was interrupted")
        check_pvmd(out, "interrupted run")
finally:
    shutil.rmtree(results, ignore_errors=True)

if failures:
    print("%d checks failed" % len(failures))
    sys.exit(1)
print("all checks passed")
