#!/usr/bin/env python3
"""nxtrace on the logs gen_logs writes (tests/trace/gen_logs.c says what
they hold): check_nxtrace.py NXTRACE GEN_LOGS CASE, CASE one of

  summary  the summary's pairs, handler times, contexts and totals; the
           notes on the truncated chunk and the two files that are not
           logs; the same output twice; --no-archive writes no archive
  otf2     otf2-print reads the archive without errors; its events: sends,
           receives, markers; every location's Enter and Leave nest and
           its times never go back; the blocked run's own location
           (skipped, 77, without otf2-print)
  png      --png writes two PNG files and leaves no temporary files
           (skipped, 77, without gnuplot)
  usage    --help, unknown options, no DIR, an empty DIR, --png without
           gnuplot on PATH
  offsets  the logs with beta's realtime clock 3 ms off and the clock
           offsets the processes measured (gen_logs DIR offsets): the
           summary says beta was lined up with alpha by them (the middle
           of their bounds' intersection) and how far its realtime clock
           was outside them, and (with otf2-print) each ping is received
           5 us after it was sent, as without the skew
  mutated  80 copies of the logs (with offsets) with random bytes
           changed or cut short (seeded: the same each run): nxtrace
           exits 0 or 1, never crashes nor trips a sanitizer, and
           otf2-print reads every archive it writes (that part skipped
           without otf2-print, and when a fifth argument "sanitized" says
           nxtrace is built with a sanitizer: the plain build's run reads
           the same archives)

A fifth argument "tsan" (nxtrace built with ThreadSanitizer) skips every
case (77): nxtrace and gen_logs start no thread, so ThreadSanitizer has
nothing to look for in them; the plain and ASan+UBSan builds run them all.
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
MUTATIONS = 80
SANITIZED = sys.argv[4:5] == ["sanitized"]
TSAN = sys.argv[4:5] == ["tsan"]


# otf2-print callocs about 20 hash tables of 8 MiB per archive: on a VM
# where a page fault is dear, 49,000 faults and 0.66 s each. In huge pages
# (glibc's malloc tunable, glibc 2.35 and later; ignored before) it is
# 12,000 faults and 0.2 s: the 80 archives of "mutated" take a minute less.
OTF2_PRINT_ENV = dict(os.environ, GLIBC_TUNABLES=":".join(
    filter(None, [os.environ.get("GLIBC_TUNABLES"),
                  "glibc.malloc.hugetlb=1"])))


def otf2_print(args):
    """run(), for otf2-print with `args`, in huge pages (above)."""
    return run(["otf2-print"] + args, env=OTF2_PRINT_ENV)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=120)
    # Damaged logs have names that are not UTF-8.
    return (p.returncode, p.stdout.decode(errors="replace"),
            p.stderr.decode(errors="replace"))


def section(out, title):
    """The lines of a summary section, without its title and header."""
    lines = out.split("\n")
    try:
        i = lines.index(title)
    except ValueError:
        fail("no section '%s' in:\n%s" % (title, out))
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    return rows


def totals(out):
    rows = {}
    for line in out.split("\n")[out.split("\n").index("Totals") + 1:]:
        m = re.match(r"  (\S.*?)\s{2,}(\S+)$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def expect(what, got, want):
    if got != want:
        fail("%s: got %r, want %r" % (what, got, want))
    print("ok: %s = %r" % (what, want))


A1, A2, B1 = "0000000100000001", "0000000100000002", "0000000200000001"


def case_summary(nxtrace, d):
    rc, out, err = run([nxtrace, d])
    print(out + err)
    expect("exit status", rc, 0)
    expect("pairs", section(out, "RSRs by pair (sender -> destination)"), [
        [A1, A2, "3", "30", "local"],
        [A1, B1, "5", "500", "tcp"],
        [B1, A1, "2", "16", "tcp"],  # the 3 sends of the truncated chunk: out
    ])
    expect("handler runs",
           section(out, "Handler runs by handler and destination context"), [
               ["handler", "0x00000000", A2, "1", "1.000", "1.000"],
               ["ping", B1, "5", "3.000", "5.000"],
               ["pong", A2, "3", "2.000", "2.000"],
               ["pong", B1, "3", "10.000", "10.000"],
           ])
    ctx = {r[0] + (" " + r[1] if r[0] == "process" else ""): r
           for r in section(out, "Contexts")}
    expect("a1 sent, waiting ms", (ctx[A1][4], ctx[A1][7]), ("8", "0.004"))
    expect("b1 runs", ctx[B1][5], "8")
    expect("b1 host", ctx[B1][3], "beta")
    tot = totals(out)
    for k, v in [("rsrs", "10"), ("bytes", "546"), ("handler runs", "12"),
                 ("fallbacks", "1"), ("hops", "1"), ("losses", "1"),
                 ("truncated chunks", "1"), ("unfinished runs", "0"),
                 ("unpaired ends", "0")]:
        expect("total " + k, tot.get(k), v)
    for name in ["bad-magic.nxt", "bad-version.nxt"]:
        if not re.search(re.escape(name) + r": .*skipped", err):
            fail("%s was not reported as skipped" % name)
    if "truncated" not in err:
        fail("the truncated chunk was not noted")
    if not os.path.isfile(os.path.join(d, "nexus.otf2")):
        fail("no nexus.otf2")
    rc2, out2, _ = run([nxtrace, d])
    expect("exit status of a second run (over the first archive)", rc2, 0)
    if out2 != out:
        fail("the summary differs between two runs")
    print("ok: the same summary twice")
    d2 = tempfile.mkdtemp(prefix="nxtrace-noarch-")
    try:
        for f in os.listdir(d):
            if f.endswith(".nxt"):
                shutil.copy(os.path.join(d, f), d2)
        rc3, out3, _ = run([nxtrace, "--no-archive", d2])
        expect("--no-archive exit status", rc3, 0)
        if out3 != out:
            fail("--no-archive printed another summary")
        if os.path.exists(os.path.join(d2, "nexus.otf2")):
            fail("--no-archive wrote an archive")
        print("ok: --no-archive, no archive")
    finally:
        shutil.rmtree(d2)


def otf2_events(archive):
    """otf2-print's events: (name, location, time, rest of the line)."""
    rc, out, err = otf2_print([archive])
    if rc != 0 or err.strip():
        fail("otf2-print %s: status %d\n%s" % (archive, rc, err))
    evs = []
    for line in out.split("\n"):
        m = re.match(r"([A-Z_]+)\s+(\d+)\s+(\d+)\s+(.*)$", line)
        if m:
            evs.append((m.group(1), int(m.group(2)), int(m.group(3)),
                        m.group(4)))
    return evs


def otf2_defs(archive):
    rc, out, err = otf2_print(["-G", archive])
    if rc != 0 or err.strip():
        fail("otf2-print -G %s: status %d\n%s" % (archive, rc, err))
    return out


def expect_ping_latency(evs):
    """Each of the 5 pings runs 5 us after its send (gen_logs.c)."""
    sends = sorted(t for n, _, t, r in evs
                   if n == "MPI_SEND" and "Tag: 4369," in r)
    recvs = sorted(t for n, _, t, r in evs
                   if n == "MPI_RECV" and "Tag: 4369," in r)
    expect("ping receive - send, ns", [r - s for s, r in zip(sends, recvs)],
           [5000] * 5)


def check_nesting(evs):
    """Every location's Enter/Leave nest, and its times never go back."""
    stacks, last = {}, {}
    for name, loc, t, rest in evs:
        if t < last.get(loc, 0):
            fail("location %d goes back in time at %d" % (loc, t))
        last[loc] = t
        if name in ("ENTER", "LEAVE"):
            region = re.match(r'Region: "(.*)" <', rest).group(1)
            st = stacks.setdefault(loc, [])
            if name == "ENTER":
                st.append(region)
            elif not st or st.pop() != region:
                fail("location %d: LEAVE %s at %d does not nest" %
                     (loc, region, t))
    for loc, st in stacks.items():
        if st:
            fail("location %d: %s never left" % (loc, st))
    print("ok: Enter/Leave nest on all %d locations" % len(last))


def case_otf2(nxtrace, d):
    if shutil.which("otf2-print") is None:
        print("SKIP: otf2-print is not on PATH (Debian: otf2-tools)")
        sys.exit(SKIP)
    rc, _, err = run([nxtrace, d])
    expect("exit status", rc, 0)
    archive = os.path.join(d, "nexus.otf2")
    evs = otf2_events(archive)
    count = {}
    for e in evs:
        count[e[0]] = count.get(e[0], 0) + 1
    expect("MPI_SEND events", count.get("MPI_SEND"), 10)
    # 5 pings from a1 and 3 pongs to a2 pair with their runs; b1's two
    # RSRs to a1 were never run, its three pongs were never sent.
    expect("MPI_RECV events", count.get("MPI_RECV"), 8)
    # 3 context creations and 1 destruction, process create, ready, loss,
    # finalize, a fallback and a hop.
    expect("PARAMETER_STRING events", count.get("PARAMETER_STRING"), 10)
    expect("ENTER events", count.get("ENTER"), 13)
    # The run of handler 0 enters its own region, not another handler's.
    zero = [r for n, _, _, r in evs
            if n == "ENTER" and "handler 0x00000000" in r]
    expect("ENTER events of handler 0x00000000", len(zero), 1)
    check_nesting(evs)
    # A receive comes after its send: the logs' clocks were lined up.
    expect_ping_latency(evs)
    defs = otf2_defs(archive)
    for want in [r'LOCATION .*"context 0000000200000001 thread 1 \(blocked\)"',
                 r'REGION .*"ping"', r'REGION .*"handler 0x00003333"',
                 r'REGION .*"wait: full queue"',
                 r'SYSTEM_TREE_NODE .*"beta"',
                 r'COMM .*"nexus contexts"']:
        if not re.search(want, defs):
            fail("no definition matching %s in:\n%s" % (want, defs))
    print("ok: the definitions name the hosts, regions, the blocked "
          "location and the communicator")
    blocked = int(re.search(
        r'LOCATION\s+(\d+)\s+Name: "context 0000000200000001 thread 1 '
        r'\(blocked\)"', defs).group(1))
    on_blocked = [(n, t) for n, loc, t, _ in evs if loc == blocked]
    base = min(t for _, _, t, _ in evs)
    expect("the blocked location's events (relative ns)",
           [(n, t - base) for n, t in on_blocked],
           [("ENTER", 95990), ("LEAVE", 105990)])


def case_png(nxtrace, d):
    if shutil.which("gnuplot") is None:
        print("SKIP: gnuplot is not on PATH (Debian: gnuplot-nox)")
        sys.exit(SKIP)
    tmp = tempfile.mkdtemp(prefix="nxtrace-tmp-")
    try:
        env = dict(os.environ, TMPDIR=tmp)
        prefix = os.path.join(d, "pic")
        for by in ["rsrs", "bytes"]:
            rc, out, err = run([nxtrace, "--no-archive", "--by", by, "--png",
                                prefix, d], env=env)
            expect("--png --by %s exit status" % by, rc, 0)
            for f in ["pic-matrix.png", "pic-timeline.png"]:
                with open(os.path.join(d, f), "rb") as fh:
                    head = fh.read(8)
                if head != b"\x89PNG\r\n\x1a\n":
                    fail("%s is not a PNG" % f)
                os.remove(os.path.join(d, f))
            if os.listdir(tmp):
                fail("temporary files left: %s" % os.listdir(tmp))
        print("ok: two PNGs, no temporary files left")
    finally:
        shutil.rmtree(tmp)


def case_usage(nxtrace, d):
    rc, out, _ = run([nxtrace, "--help"])
    expect("--help exit status", rc, 0)
    if not out.startswith("usage: nxtrace"):
        fail("--help printed no usage:\n" + out)
    for args, what in [(["--bogus", d], "unknown option '--bogus'"),
                       ([], "no DIR"),
                       (["--by", "colour", d], "--by takes rsrs or bytes"),
                       (["--png"], "--png needs a PREFIX"),
                       ([d, d], "one DIR only")]:
        rc, _, err = run([nxtrace] + args)
        expect("%s exit status" % (args or "no argument"), rc, 2)
        if what not in err or "usage: nxtrace" not in err:
            fail("%s: no '%s' and usage on stderr:\n%s" % (args, what, err))
    empty = tempfile.mkdtemp(prefix="nxtrace-empty-")
    try:
        rc, _, err = run([nxtrace, empty])
        expect("an empty DIR's exit status", rc, 1)
        if "no readable log" not in err:
            fail("an empty DIR: no 'no readable log':\n" + err)
        # --png without gnuplot: PATH has only a folder without it.
        env = dict(os.environ, PATH=empty)
        rc, _, err = run([os.path.abspath(nxtrace), "--png", "x", d], env=env)
        expect("--png without gnuplot exit status", rc, 2)
        if "gnuplot" not in err:
            fail("--png without gnuplot did not say so:\n" + err)
    finally:
        shutil.rmtree(empty)


def case_mutated(nxtrace, d):
    rng = random.Random(42)
    logs = {f: open(os.path.join(d, f), "rb").read()
            for f in os.listdir(d) if re.match(r"[0-9a-f]{8}-\d+\.nxt$", f)}
    otf2 = shutil.which("otf2-print") is not None and not SANITIZED
    archives = 0
    for i in range(MUTATIONS):
        m = tempfile.mkdtemp(prefix="nxtrace-mutated-")
        try:
            for name, data in logs.items():
                b = bytearray(data)
                for _ in range(rng.randint(1, 20)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                if rng.random() < 0.3:
                    b = b[:rng.randrange(len(b))]
                with open(os.path.join(m, name), "wb") as fh:
                    fh.write(b)
            rc, _, err = run([nxtrace, m])
            if rc not in (0, 1) or "Sanitizer" in err or "runtime error" in err:
                fail("mutation %d: status %d\n%s" % (i, rc, err[-3000:]))
            if rc == 0 and otf2:
                prc, _, perr = otf2_print(["--silent",
                                           os.path.join(m, "nexus.otf2")])
                if prc != 0:
                    fail("mutation %d: otf2-print: %s" % (i, perr))
                archives += 1
        finally:
            shutil.rmtree(m)
    print("ok: %d mutated sets of logs, %d archives read by otf2-print%s"
          % (MUTATIONS, archives,
             " (nxtrace is sanitized: the plain build's run reads them)"
             if SANITIZED else ""))


def case_offsets(nxtrace, d):
    rc, out, err = run([nxtrace, "--no-archive", d])
    expect("exit status", rc, 0)
    lines = out.split("\n")
    if "clocks" not in lines:
        fail("no section 'clocks' in:\n%s" % out)
    clocks = []
    for line in lines[lines.index("clocks") + 1:]:
        if not line.startswith("  "):
            break
        clocks.append(" ".join(line.split()))
    expect("clocks", clocks,
           ["alpha lined up by its realtime clock",
            "beta lined up with alpha by 4 measured offsets (best round "
            "trip 3.000 us): alpha - beta = +1000000.900 us, drift +0.000 "
            "ppm; its realtime clock was off by +2998.500 us or more"])
    if shutil.which("otf2-print") is None:
        print("ok: the summary (otf2-print is not on PATH: the archive's "
              "times not checked)")
        return
    rc, _, err = run([nxtrace, d])
    expect("exit status", rc, 0)
    evs = otf2_events(os.path.join(d, "nexus.otf2"))
    expect_ping_latency(evs)
    print("ok: beta lined up by the measured offsets, not its realtime clock")


def main():
    nxtrace, gen, case = sys.argv[1:4]
    if TSAN:
        print("SKIP: nxtrace and gen_logs start no thread: ThreadSanitizer "
              "has nothing to check in them (the plain and ASan+UBSan "
              "builds run this case)")
        sys.exit(SKIP)
    d = tempfile.mkdtemp(prefix="nxtrace-test-")
    try:
        # The mutations start from the logs with offsets: their records
        # damaged too.
        rc, out, err = run([gen, d] + (["offsets"] if case in
                                       ("offsets", "mutated") else []))
        if rc != 0:
            fail("gen_logs: %s%s" % (out, err))
        {"summary": case_summary, "otf2": case_otf2, "png": case_png,
         "usage": case_usage, "mutated": case_mutated,
         "offsets": case_offsets}[case](nxtrace, d)
    finally:
        shutil.rmtree(d)
    print("nxtrace %s: ok" % case)


if __name__ == "__main__":
    main()
