#!/usr/bin/env python3
"""The Figure 3 harness in smoke mode (bench/run --smoke) against the built
tree: the CSV holds a row for every system and both sizes, the zero-copy
RSR rows (rsr-zc/<module>/nonthreaded) included, the systems that exist
everywhere were measured, the ratio table shows the zero-copy rows and
the goals their comparison with Open MPI and PVM, the plot was drawn, and the private pvmd was
started and halted, leaving no pvmd behind, also when the run is stopped
with Ctrl-C. Usage: fig3_smoke.py BUILD_ROOT SOURCE_ROOT."""

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
            name = "/".join([row["system"], row["protocol"],
                             row["handler"] if row["system"] in
                             ("rsr", "rsr-zc") else row["encoding"]])
            got[(name, int(row["size_bytes"]))] = row
        names = ["rsr/%s/%s" % (m, k)
                 for m in ["local", "ucx", "ofi", "mpi", "tcp"]
                 for k in ["nonthreaded", "threaded", "new-thread"]]
        names += ["rsr-zc/%s/nonthreaded" % m
                  for m in ["local", "ucx", "ofi", "mpi", "tcp"]]
        names += ["pvm/%s/%s" % (r_, e) for r_ in ["pvmd", "direct"]
                  for e in ["xdr", "raw"]]
        names += ["mpi/sm/bytes", "mpi/tcp/bytes", "tcp/tcp/bytes"]
        names += ["nexus-pvm/%s/raw" % m for m in ["tcp", "ucx", "ofi"]]
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
            must += ["nexus-pvm/tcp/raw"]
        if pvm_installed():
            must += [n for n in names if n.startswith("pvm/")]
        if os.path.exists(os.path.join(build, "bench", "mpi_pingpong")):
            must += ["mpi/sm/bytes", "mpi/tcp/bytes"]
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
        png = os.path.join(outdir, "fig3.png")
        if shutil.which("gnuplot"):
            ok = os.path.exists(png)
            if ok:
                with open(png, "rb") as f:
                    ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
            check(ok, "fig3.png is a PNG")
        else:
            print("WARN: SKIPPED the plot check: no gnuplot")
        check(os.path.exists(os.path.join(outdir, "summary.txt")),
              "summary.txt written")
        check("goals (met or not):" in r.stdout, "the goals were printed")
        # The zero-copy rows in the ratio table (with a ratio over the
        # copying row), and their goals.
        for m in ["local", "tcp"]:
            check(re.search(r"^rsr-zc/%s/nonthreaded +[0-9.]+ .*[0-9.]+\s*$"
                            % m, r.stdout, re.M) is not None,
                  "the ratio table has rsr-zc/%s/nonthreaded" % m)
        for text in ["1 MiB: zero-copy RSR ucx bandwidth over MPI shm's",
                     "1 MiB: zero-copy RSR tcp bandwidth over PVM direct/"]:
            check(text in r.stdout, "the goal \"%s\" was printed" % text)

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
