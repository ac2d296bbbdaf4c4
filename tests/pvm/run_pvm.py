#!/usr/bin/env python3
"""Runs one PVM program (perhaps under nxrun or mpirun) and checks what it prints against the expected
output: built against nexus-pvm (over the modules NX_PROTOCOLS names), or,
with --real, built against Debian's PVM 3.4 under a private pvmd that this
script starts and always halts by its pid. Exits 77 (a skip) with the
reason when the program cannot run here."""
import argparse
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
RUN_TIMEOUT = int(os.environ.get("NXPVM_RUN_TIMEOUT", "90"))


def skip(why):
    print("skip: " + why)
    sys.exit(SKIP)


class Pvmd:
    """A pvmd of our own (its own PVM_TMP and HOME), as bench/run starts
    one: never another user's, halted by pid also on failure."""

    def __init__(self):
        self.proc = None
        self.tmp = tempfile.mkdtemp(prefix="nxpvm-test-")
        self.env = None

    def start(self):
        pvmd = shutil.which("pvmd") or "/usr/lib/pvm3/lib/pvmd"
        if not os.access(pvmd, os.X_OK):
            return "PVM is not installed (Debian packages pvm, pvm-dev)"
        env = dict(os.environ)
        env["PVM_ROOT"] = env.get("PVM_ROOT", "/usr/lib/pvm3")
        env["PVM_TMP"] = self.tmp
        env["HOME"] = self.tmp
        if os.getuid() == 0:
            env["PVM_ALLOW_ROOT"] = "1"
        # libgpvm3 spawns the group server "pvmgs" from
        # $HOME/pvm3/bin/$PVM_ARCH; Debian installs it in /usr/bin.
        arch = subprocess.run(["/usr/lib/pvm3/lib/pvmgetarch"],
                              stdout=subprocess.PIPE, text=True).stdout.strip()
        gs = shutil.which("pvmgs") or "/usr/lib/pvm3/lib/pvmgs"
        bindir = os.path.join(self.tmp, "pvm3", "bin", arch or "LINUX64")
        os.makedirs(bindir)
        if os.access(gs, os.X_OK):
            os.symlink(gs, os.path.join(bindir, "pvmgs"))
        self.env = env
        out = open(os.path.join(self.tmp, "pvmd.out"), "w")
        self.proc = subprocess.Popen([pvmd], env=env, stdout=out,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        addr = os.path.join(self.tmp, "pvmd.%d" % os.getuid())
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return "pvmd exited at once (status %d): %s" % (
                    self.proc.returncode, self.output())
            if os.path.exists(addr):
                return None
            time.sleep(0.05)
        return "pvmd did not come up in 15 s: %s" % self.output()

    def output(self):
        try:
            with open(os.path.join(self.tmp, "pvmd.out")) as f:
                return " ".join(f.read().split())[:300]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                subprocess.run(["pvm"], input="halt\n", env=self.env,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True,
                               timeout=10)
            except (OSError, subprocess.SubprocessError):
                pass
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None and self.proc.poll() is None:
                    os.kill(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.tmp, ignore_errors=True)


def on_signal(signum, frame):
    # meson's timeout: unwind through the finally clause, which halts pvmd.
    raise KeyboardInterrupt("signal %d" % signum)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect")
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--compare", metavar="REAL_EXE",
                    help="also run REAL_EXE (the same program built against "
                    "the real PVM) under a private pvmd: both must print the "
                    "same (and --expect's file, if given)")
    ap.add_argument("--number-tids", action="store_true",
                    help="write each tid in a [t<hex>] prefix (pvm_catchout's)"
                    " as [t1], [t2], ... in order of appearance: tids differ "
                    "from run to run")
    ap.add_argument("cmd", nargs=argparse.REMAINDER,
                    help="the program (and its launcher and arguments)")
    a = ap.parse_args()
    if not a.cmd:
        ap.error("no program to run")
    if a.expect is None and a.compare is None:
        ap.error("nothing to check against: --expect or --compare")
    a.exe = a.cmd[-1] if os.path.basename(a.cmd[0]) in (
        "nxrun", "mpirun", "mpiexec") else a.cmd[0]
    expect = None
    if a.expect is not None:
        with open(a.expect) as f:
            expect = f.read()
    signal.signal(signal.SIGTERM, on_signal)
    real = None
    if a.compare is not None:
        real, why = run([a.compare], True)
        if why is not None and expect is None:
            skip("the real PVM half: " + why)
        if why is not None:
            print("the real PVM half cannot run (%s): checking against %s "
                  "only" % (why, a.expect))
        elif failed(a.compare, real):
            show_log(real)
            return 1
    r, why = run(a.cmd, a.real)
    if why is not None:
        skip("the real PVM half: " + why)
    if r.returncode == SKIP:
        skip("%s could not start its PVM" % a.exe)
    if failed(a.exe, r):
        show_log(r)
        return 1
    if a.number_tids:
        r.stdout = number_tids(r.stdout)
        if real is not None:
            real.stdout = number_tids(real.stdout)
    if real is not None and r.stdout != real.stdout:
        print("%s and the real PVM's %s print differently:\n%s" % (
            a.exe, a.compare, "".join(difflib.unified_diff(
                real.stdout.splitlines(True), r.stdout.splitlines(True),
                "real PVM", "nexus-pvm"))))
        show_log(r)
        return 1
    if expect is not None and r.stdout != expect:
        print("%s printed:\n%s\nexpected (%s):\n%s" % (
            a.exe, r.stdout, a.expect, expect))
        show_log(r)
        return 1
    print("%s printed the %s %d lines" % (
        os.path.basename(a.exe),
        "real PVM's" if real is not None else "expected",
        len(r.stdout.splitlines())))
    return 0


def run_timed(argv, env, timeout, stdin=None, cwd=None,
              stderr=subprocess.PIPE):
    """subprocess.run with the output captured as text. A run past
    `timeout` comes back as exit 124, with what it printed so far and a
    line saying so: a failed run that shows how far it got."""
    try:
        return subprocess.run(argv, env=env, input=stdin, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=stderr,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (
                b or "")
        return subprocess.CompletedProcess(
            argv, 124, text(e.stdout) + "[timed out after %d s]\n" % timeout,
            text(e.stderr))


def run(cmd, real):
    """Runs cmd, under a private pvmd if real; returns (the completed
    process, None) or (None, why the real PVM cannot run)."""
    pvmd = None
    env = dict(os.environ)
    # nexus-pvm's spawned tasks write their output (not caught) to the task
    # log, $PVM_TMP/pvml.<uid>, as PVM's pvmd does: a log of this run's
    # own, shown when the run fails (the real PVM's pvmd: in its PVM_TMP).
    logdir = None
    try:
        if not real:
            logdir = tempfile.mkdtemp(prefix="nxpvm-log-")
            env["PVM_TMP"] = logdir
        if real:
            pvmd = Pvmd()
            why = pvmd.start()
            if why is not None:
                return None, why
            env = pvmd.env
            # Under AddressSanitizer the real PVM's own leaks (libpvm3's
            # wait_new) are not ours to report: leak checking is off for
            # the real half only.
            if "ASAN_OPTIONS" in env:
                env["ASAN_OPTIONS"] += ":detect_leaks=0"
        r = run_timed(cmd, env, RUN_TIMEOUT)
        r.task_log = ""
        log = os.path.join(logdir or (pvmd.tmp if pvmd else ""),
                           "pvml.%d" % os.getuid())
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                r.task_log = f.read()
    finally:
        if pvmd is not None:
            pvmd.stop()
        if logdir is not None:
            shutil.rmtree(logdir, ignore_errors=True)
    sys.stderr.write(r.stderr)
    return r, None


def show_log(r):
    """The end of a failed run's task log (its spawned tasks' output)."""
    lines = getattr(r, "task_log", "").splitlines()
    if lines:
        print("the task log (spawned tasks' output), last %d lines:\n%s" % (
            min(60, len(lines)), "\n".join(lines[-60:])))


def number_tids(text):
    seen = {}

    def one(m):
        return "[t%d]" % seen.setdefault(m.group(1), len(seen) + 1)
    return re.sub(r"\[t([0-9a-f]+)\]", one, text)


def failed(exe, r):
    if r.returncode not in (0, SKIP):
        print("%s exited with %d; it printed:\n%s" % (exe, r.returncode,
                                                       r.stdout))
        return True
    return False


if __name__ == "__main__":
    sys.exit(main())
