#!/usr/bin/env python3
"""PVM 3.4's own example programs (Debian's pvm-examples: the sources in
/usr/share/doc/pvm-examples, the real PVM's builds of them in /usr/bin),
written by PVM's authors, not here. Builds each from its source against
nexus-pvm, as a user would (gcc or gfortran, -lnxpvm, -lnxfpvm), runs it
over each module named, and runs the real PVM's build under a private
pvmd in the same test: both must exit the same way and print the same
lines, in any order (tasks print as they go), once tids, context numbers
and the program's own path are written alike and what the program leaves
undefined is masked (MASKS, with the reasons). What a program reads from
stdin is given to both. Exits 77 (a skip) with the reason when PVM, its
examples or a compiler is missing.

Usage: run_pvm_examples.py --include DIR --libdir DIR [--libdir DIR]
                           [--cflags FLAGS] MODULE...
(--cflags: a sanitizer's flags, given to each link only.)"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_pvm import Pvmd, run_timed, skip  # noqa: E402

DOC = "/usr/share/doc/pvm-examples"
TIMEOUT = 60

# (name run, source, what it reads on stdin; None: a program the others
# spawn). Fortran sources are built as f<name>, as Debian names them, but
# for hitc, which spawns hitc_slave by that name. Left out: programs that
# need a second copy started by hand (bwtest; under nxrun -n 2 it passes,
# run by hand), that print times (timing), that race by design (ge: a
# member may leave before the first checks it, on the real PVM too), that
# wait for a key (mbox, mhf, task0, lmbi, gmbi), or that are usage-only
# without a running VM. Of those run, only frsg prints something it leaves
# undefined (MASKS). hitc's task sizes come from the program's own
# generator with a fixed seed; which slave gets which size follows the
# order their results arrive, but every tid is written alike, so the
# sorted lines do not depend on it. tjf stores its 33rd join one past the
# end of gid[]; nothing it prints reads that slot (where the store lands is
# the compiler's choice: UBSan reports it, hence no sanitizer at compile).
PROGRAMS = [
    ("hello", "examples/hello.c", ""),
    ("hello_other", "examples/hello_other.c", None),
    ("master1", "examples/master1.c", ""),
    ("slave1", "examples/slave1.c", None),
    ("spmd", "examples/spmd.c", ""),
    ("gexample", "examples/gexample.c", "10\n4\n"),
    ("inheritb", "examples/inheritb.c", ""),
    ("inherit2", "examples/inherit2.c", None),
    ("tst", "gexamples/tst.c", ""),
    ("tjf", "gexamples/tjf.c", ""),
    ("tjl", "gexamples/tjl.c", ""),
    ("trsg", "gexamples/trsg.c", "4\n5\n"),
    ("fmaster1", "examples/master1.f", ""),
    ("fslave1", "examples/slave1.f", None),
    ("fspmd", "examples/spmd.f", ""),
    ("fgexample", "examples/gexample.f", ""),
    ("hitc", "examples/hitc.f", ""),
    ("hitc_slave", "examples/hitc_slave.f", None),
    ("frsg", "gexamples/frsg.f", "4\n5\n"),
]
# The names of the real PVM's builds in /usr/bin, where Debian renamed.
REAL_NAME = {"hello": "hello.pvm"}

# What a program prints that the program itself leaves undefined, per
# program: (pattern, replacement) for re.sub on each line, applied to both
# runs' output before they are compared. Everything else in the line stays
# compared.
FRSG_SUM1 = "Sum of Squares of the first {} integers: Sum1 masked, Sum2 {}, " \
    "should be {}"
MASKS = {
    # frsg.f adds its row to PSum ("do partial sum on each proc") without
    # ever setting PSum, so Sum1, the sum of the gathered PSums, is
    # whatever the stack held: the real PVM has printed 133768 and 2870,
    # nexus-pvm 68100 over ucx and 35408 over ofi, from one source. Which
    # line the root prints hangs on it too: "Test OK" when Sum1 happens to
    # be right, else "ERROR" with Sum1 in it. Both become one line that
    # keeps what the program defines: N, Sum2 (the PvmfReduce result) and
    # the sum it should be ("Test OK" says Sum2 is that sum). trsg.c, the
    # same program in C, sets PSum = 0 and is compared whole.
    "frsg": [
        (r"^\s*/ ERROR: The Sum of Squares of the first\s+(\d+)\s+integers"
         r" / was calculated by Sum1 as\s+-?\d+\s+and by Sum2 as\s+(-?\d+)"
         r"\s+for both it should have been\s+(-?\d+)\s*$",
         FRSG_SUM1.format(r"\1", r"\2", r"\3")),
        (r"^\s*/ Test OK: Sum of Squares of first\s+(\d+)\s+integers is"
         r"\s+(-?\d+)\s*$",
         FRSG_SUM1.format(r"\1", r"\2", r"\2")),
    ],
}


def norm(text, exe_dir, name=None):
    """Lines with what the program leaves undefined masked first (MASKS,
    before a tid's pattern can take a masked number), then with what
    differs from run to run written alike, sorted."""
    lines = text.splitlines()
    for pattern, repl in MASKS.get(name, []):
        lines = [re.sub(pattern, repl, line) for line in lines]
    text = "\n".join(lines)
    text = text.replace(exe_dir + "/", "").replace("/usr/bin/", "")
    text = text.replace("./", "")
    text = re.sub(r"\b(t|0x)?4[0-9a-f]{4}\b", "TID", text)
    text = re.sub(r"\b26[0-9]{4}\b", "TID", text)  # tids and contexts
    text = re.sub(r"\bhello\.pvm\b", "hello", text)
    return sorted(line.rstrip() for line in text.splitlines())


def build(src_root, out, include, libdir, cflags):
    """Builds every program into `out`; returns the names that failed."""
    bad = []
    inc = os.path.join(src_root, "include")
    os.makedirs(inc, exist_ok=True)
    # The Fortran sources include '../include/fpvm3.h', as in PVM's tree.
    shutil.copy(os.path.join(include, "fpvm3.h"), inc)
    for name, src, _ in PROGRAMS:
        fortran = src.endswith(".f")
        cc = "gfortran" if fortran else "gcc"
        obj = os.path.join(out, name + ".o")
        # Compiled as PVM's makefiles do; `cflags` (a sanitizer's) only at
        # the link, so that the program loads the sanitizer's libraries
        # first without the programs' own slips being checked (tjf.c
        # indexes one past an array, which UBSan reports).
        compile_argv = [cc, "-w", "-c", "-o", obj, os.path.basename(src)]
        compile_argv += (["-fallow-argument-mismatch"] if fortran else
                         ["-I" + include])
        link = [cc, "-o", os.path.join(out, name), obj] + cflags
        link += (["-lnxfpvm"] if fortran else []) + ["-lnxpvm"]
        for d in libdir:
            link += ["-L" + d, "-Wl,-rpath," + d]
        cwd = os.path.join(src_root, os.path.dirname(src))
        r = subprocess.run(compile_argv, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode == 0:
            r = subprocess.run(link, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print("building %s against nexus-pvm failed:\n%s" % (
                name, r.stdout[-2000:]))
            bad.append(name)
    return bad


def run(argv, env, stdin, cwd):
    """(exit status, stdout and stderr together) of one run."""
    r = run_timed(argv, env, TIMEOUT, stdin, cwd, stderr=subprocess.STDOUT)
    return r.returncode, r.stdout


# frsg's root as gfortran prints it, when PSum happened to start at 0 and
# when it did not: lines the real PVM and nexus-pvm have printed.
FRSG_OK = (" / Test OK: Sum of Squares of first           20  integers is"
           "         2870")
FRSG_ERROR = (" / ERROR: The Sum of Squares of the first           20  "
              "integers / was calculated by Sum1 as        {}  and by Sum2 "
              "as         {}  for both it should have been         2870")


def self_test():
    """The masks, without PVM: frsg's undefined Sum1 compares alike, in
    either of its lines and whatever number it is (a tid-like one too),
    what frsg defines (Sum2 here) still compares, and a program without a
    mask is compared whole."""
    def out(line):
        return "  INPUT values: nprocs = 4\n" + line + "\n"
    ok, err = out(FRSG_OK), out(FRSG_ERROR.format(68100, 2870))
    cases = [
        ("frsg, Sum1 68100 against Test OK", "frsg", err, True),
        ("frsg, Sum1 263001 (a tid's pattern) against Test OK", "frsg",
         out(FRSG_ERROR.format(263001, 2870)), True),
        ("frsg, Sum2 2871 against Test OK", "frsg",
         out(FRSG_ERROR.format(2870, 2871)), False),
        ("trsg (no mask), the same two lines", "trsg", err, False),
    ]
    bad = 0
    for what, name, other, same in cases:
        alike = norm(ok, "/x", name) == norm(other, "/y", name)
        print("%s: %s: %s" % ("ok" if alike == same else "FAILED", what,
                              "alike" if alike else "differ"))
        bad += alike != same
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--self-test", action="store_true",
                    help="check the masks (MASKS) alone, without PVM")
    ap.add_argument("--include",
                    help="nexus-pvm's include directory (pvm3.h, fpvm3.h)")
    ap.add_argument("--libdir", action="append",
                    help="where libnxpvm and libnxfpvm are (and, given "
                    "again, libnexus)")
    ap.add_argument("--cflags", default="",
                    help="more flags for each link (a sanitizer's)")
    ap.add_argument("modules", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.include is None or a.libdir is None or not a.modules:
        ap.error("--include, --libdir and a module are needed")
    for f in ("examples.tar.gz", "gexamples.tar.gz"):
        if not os.path.exists(os.path.join(DOC, f)):
            skip("PVM's examples are not installed (Debian package "
                 "pvm-examples)")
    for tool in ("gcc", "gfortran"):
        if shutil.which(tool) is None:
            skip(tool + " is missing")
    tmp = tempfile.mkdtemp(prefix="nxpvm-examples-")
    try:
        return check(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check(a, tmp):
    src = os.path.join(tmp, "src")
    out = os.path.join(tmp, "bin")
    os.makedirs(out)
    for f in ("examples.tar.gz", "gexamples.tar.gz"):
        with tarfile.open(os.path.join(DOC, f)) as t:
            t.extractall(src)
    bad = build(src, out, a.include, a.libdir, a.cflags.split())
    if bad:
        return 1
    mains = [p for p in PROGRAMS if p[2] is not None]

    # The real PVM's builds first, under a private pvmd that finds the
    # programs they spawn where pvmd looks ($HOME/pvm3/bin/$PVM_ARCH).
    real = {}
    pvmd = Pvmd()
    try:
        why = pvmd.start()
        if why is not None:
            skip("the real PVM: " + why)
        bindir = os.path.join(pvmd.tmp, "pvm3", "bin", "LINUX64")
        for name, *_ in PROGRAMS:
            exe = "/usr/bin/" + REAL_NAME.get(name, name)
            if not os.path.exists(exe):
                skip("the real PVM's build of %s is missing (%s)" % (name,
                                                                    exe))
            link = os.path.join(bindir, name)
            if not os.path.exists(link):
                os.symlink(exe, link)
        for name, _, stdin in mains:
            real[name] = run([os.path.join(bindir, name)], pvmd.env, stdin,
                             bindir)
    finally:
        pvmd.stop()

    failed = 0
    for m in a.modules:
        logdir = tempfile.mkdtemp(prefix="nxpvm-log-", dir=tmp)
        env = dict(os.environ, NX_PROTOCOLS=m + ",local", PVM_PATH=out,
                   PVM_TMP=logdir)
        for name, _, stdin in mains:
            rc, text = run([os.path.join(out, name)], env, stdin, out)
            rrc, rtext = real[name]
            mine, theirs = norm(text, out, name), norm(rtext, bindir, name)
            if rc == rrc and mine == theirs:
                print("%s over %s: as the real PVM (exit %d, %d lines)" % (
                    name, m, rc, len(mine)))
                continue
            failed += 1
            print("%s over %s: exit %d, the real PVM's %d; nexus-pvm "
                  "printed:\n%s\nthe real PVM printed:\n%s" % (
                      name, m, rc, rrc, text, rtext))
            log = os.path.join(logdir, "pvml.%d" % os.getuid())
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    print("the task log:\n" + f.read()[-4000:])
    total = len(mains) * len(a.modules)
    print("%d of %d runs as on the real PVM" % (total - failed, total))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
