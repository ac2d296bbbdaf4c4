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
the waiting thread's polls. Beside it, the locked instructions among them
(lock-prefixed, or xchg with memory: some 20 cycles each, which a count of
instructions does not show), from the same profile made with
--dump-instr=yes and each object's disassembly.

Over a module: the 8 B non-threaded round trip of fig3_rsr, both
processes, counted as bench/pvm/count_instr.py counts it (spinning waits
taken out, runs of two lengths subtracted). Each length runs three
times (--runs) and the run with the least work counts: the runtime's
clock-driven messages and polls only add, and a loaded machine, slower
under valgrind, meets them in fewer round trips (single runs varied from
2,200 to 10,700 per round trip under a load of 4-5 on 2 cores).

Over ucx, beside raw UCP: the anchor is bench_rsr_ucx --raw-count, the
raw UCP active-message ping-pong of bench_rsr_ucx (8 B with a header of
NX_FRAME_HDR_SIZE bytes, both processes busy-polling ucp_worker_progress),
set up as the module sets UCP up (peer-failure handling, keepalive,
256-byte FIFO elements, receive buffers made 128 at a time,
UCP_FEATURE_WAKEUP; what nexus adds is taken
against this one, so that it is nexus's alone) and with UCX's defaults
(printed for reference). Both are counted in the same run by one rule,
both processes together, runs of n1 and n2 round trips subtracted (start-up
and shutdown cancel):
  - the waiting loops go out whole (inclusive), the polls that found a
    message with the empty ones: how often a side polls in vain depends on
    how long the other takes, not on the code. Raw UCP: raw_wait; nexus:
    the program's condition-variable wait whole (nx_cond_timedwait: the
    wait hook in it, and its mutex taken again after the wake-up, which
    spins for as long as the handler that signalled holds it) and
    nxi_pool_main, dispatch put back without on_ask (count_instr.py's
    "work" with cond_wait, printed first);
  - what UCP runs for each message that came goes back in, at its cost
    per message: ucp_am_handler (inclusive: UCP's handling of the active
    message and the program's callback in it, raw_am copying the 8 B out
    or the ucx module's ucx_am_recv making the frame), its inclusive cost
    over the n2 - n1 extra round trips divided by its extra calls, two per
    round trip. Per message, because nexus's runtime messages (the
    ledger's asks and answers) come as often as the clock says, as
    count_instr.py takes on_ask out.
Both counts then hold the sends (ucp_am_send_nbx and, for nexus, all that
leads to it), UCP's active-message handler with the callback in it, and
nexus's dispatch and handlers. Neither holds the poll loops, nor UCT's
finding of the message in the shared-memory FIFO around the handler (the
same code for both). Not counted for nexus, and so missing from the
difference: its work per poll around ucp_worker_progress (nxi_poll_once,
poll_module, ucx_progress's lock and hand-over of the batch), which runs
for empty polls too and cannot be told apart from them by function. The
runtime's own messages count only in ucp_am_handler's average and where
they are sent outside the waits, as the clock has it: what moves nexus's
count between runs. Out of both, as in count_instr.py: UCX's timed TSC
measurement at start-up. UCX_MEM_EVENTS=n as count_instr.py. Needs
valgrind; build with -Dbuildtype=release as bench/run does."""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "pvm"))
import count_instr  # noqa: E402  (the module-level method, shared)

HANDLER = "ucp_am_handler"  # UCP's, for an active message that came


# Instructions that lock the memory bus (or its cache line) whatever their
# operands: any `lock`-prefixed one, and xchg with a memory operand.
LOCKED = re.compile(r"^(lock\s|xchg\S*\s.*\()")
POSITION = re.compile(r"^(0x[0-9a-f]+|[+-]\d+|\*)\s")


def locked_ops(cg_file):
    """Locked read-modify-write instructions executed, from a callgrind
    profile made with --dump-instr=yes: each object's counts by address
    (the cost lines; a call's inclusive line is skipped), matched against
    its disassembly (objdump). Callgrind counts instructions; a locked one
    costs some 20 cycles more than a plain one, which no count of
    instructions shows."""
    names, counts, ob, last, skip = {}, {}, None, 0, False
    for line in open(cg_file):
        m = re.match(r"^ob=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            ob = names.get(m.group(1))
            continue
        m = re.match(r"^cob=\((\d+)\) (.*)$", line.rstrip("\n"))
        if m:
            names[m.group(1)] = m.group(2)
            continue
        if line.startswith("calls="):
            skip = True
            continue
        m = POSITION.match(line)
        if not m:
            continue
        p = m.group(1)
        last = (int(p, 16) if p.startswith("0x") else
                last + int(p) if p[0] in "+-" else last)
        parts = line.split()
        if skip:
            skip = False
        elif ob is not None and len(parts) >= 3:
            key = (ob, last)
            counts[key] = counts.get(key, 0) + int(parts[2])
    total = 0
    for obj in set(o for o, _ in counts):
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True).stdout
        for line in dis.splitlines():
            m = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
            if m and LOCKED.match(m.group(2)):
                total += counts.get((obj, int(m.group(1), 16)), 0)
    return total


def in_process(build, threaded):
    """(instructions, locked instructions) per in-process null round
    trip."""
    prog = os.path.join(build, "bench", "bench_rsr_local")
    d = tempfile.mkdtemp(prefix="nx-count-")
    try:
        out = os.path.join(d, "cg.out")
        env = dict(os.environ, NX_PROTOCOLS="local", NX_PROGRESS="poll")
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--toggle-collect=bench_rsr",
             "--dump-instr=yes", "--callgrind-out-file=" + out, prog,
             "--null-threaded" if threaded else "--null-only", "--quick"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, timeout=1800)
        m = re.search(r"round trips: (\d+)", r.stderr)
        if r.returncode != 0 or m is None:
            sys.exit("bench_rsr_local failed: %s" % r.stderr[-400:])
        total, _, _ = count_instr.annotate(out, False)
        n = int(m.group(1))
        return total / n, locked_ops(out) / n
    finally:
        shutil.rmtree(d, ignore_errors=True)


def raw_ucp(build, as_module, n):
    """(work, ucp_am_handler's inclusive cost, its calls) of `n` raw UCP
    round trips and their start-up, both processes (bench_rsr_ucx
    --raw-count): the module docstring's rule."""
    prog = [os.path.join(build, "bench", "bench_rsr_ucx"), "--raw-count",
            str(n)] + (["--as-module"] if as_module else [])
    d = tempfile.mkdtemp(prefix="nx-count-raw-")
    try:
        env = dict(os.environ, UCX_MEM_EVENTS="n")
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--trace-children=yes",
             "--callgrind-out-file=" + os.path.join(d, "cg.%p")] + prog,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, timeout=1200)
        files = glob.glob(os.path.join(d, "cg.*"))
        if (r.returncode != 0 or "round trips: %d" % n not in r.stdout or
                len(files) != 2):
            sys.exit("bench_rsr_ucx --raw-count failed: %s" % r.stderr[-400:])
        work = hinc = hcalls = 0
        for f in files:
            total, inc, _ = count_instr.annotate(f, True)
            work += total - inc["raw_wait"] - inc[count_instr.TIMED_START]
            hinc += inc[HANDLER]
            hcalls += count_instr.calls(f, HANDLER)
        return work, hinc, hcalls
    finally:
        shutil.rmtree(d, ignore_errors=True)


def per_round_trip(a, b, n):
    """Instructions per round trip from runs `a` and `b` ((work, handler's
    cost, handler's calls), of n1 and n2 round trips; n = n2 - n1): the
    work, plus two messages' worth of the handler."""
    calls = b[2] - a[2]
    if calls <= 0:
        sys.exit("no %s calls between the runs" % HANDLER)
    per_msg = (b[1] - a[1]) / calls
    return (b[0] - a[0]) / n + 2 * per_msg, per_msg


def least(build, mod, n, back, runs):
    """count_instr.run's result for `n` round trips over `mod`: of `runs`
    runs, the one with the least work. The runtime's clock-driven messages
    (the ledger asks about RSRs unconfirmed for 200 ms, which a slow or
    loaded machine reaches in fewer round trips) and polls only add."""
    return min((count_instr.run(build, "rsr", mod, n, back, cond_wait=True)
                for _ in range(runs)), key=lambda r: r[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--modules", default="ucx",
                    help="modules to count a round trip over (comma list; "
                    "empty for none)")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of each length over a module, the least "
                    "work taken (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="fewer round trips over the modules")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("skip: valgrind is not installed")
        return 0
    b = os.path.abspath(a.build)
    print("instructions per RSR (callgrind)")
    for threaded in (False, True):
        rt, locked = in_process(b, threaded)
        print("  in process, null round trip, %-12s %7.0f  (%.0f per RSR; "
              "%.1f locked)" % ("threaded:" if threaded else "non-threaded:",
                                rt, rt / 2, locked))
    n1, n2 = (100, 600) if a.quick else (200, 1200)
    for mod in [m for m in a.modules.split(",") if m]:
        back = HANDLER if mod == "ucx" else None
        w1, _, x1 = least(b, mod, n1, back, a.runs)
        w2, _, x2 = least(b, mod, n2, back, a.runs)
        rt = (w2 - w1) / (n2 - n1)
        print("  over %-4s 8 B round trip, both processes: %7.0f  "
              "(%.0f per RSR)" % (mod, rt, rt / 2))
        if back is None:
            continue
        print("  raw UCP beside it, same rule (docstring), 8 B round trip, "
              "both processes:")
        nx, nx_msg = per_round_trip((w1,) + x1, (w2,) + x2, n2 - n1)
        print("    %-26s %7.0f  (%.0f per RSR; %s %.0f per message)" %
              ("nexus over ucx:", nx, nx / 2, HANDLER, nx_msg))
        raw = {}
        for as_module in (True, False):
            r1 = raw_ucp(b, as_module, n1)
            r2 = raw_ucp(b, as_module, n2)
            raw[as_module], msg = per_round_trip(r1, r2, n2 - n1)
            print("    %-26s %7.0f  (%.0f per message; %s %.0f)" %
                  ("raw UCP, " + ("as the module:" if as_module
                                  else "UCX defaults:"), raw[as_module],
                   raw[as_module] / 2, HANDLER, msg))
        add = (nx - raw[True]) / 2
        print("  nexus adds %.0f instructions per RSR to raw UCP (both "
              "processes; as the module; budget <= 300: %s)" %
              (add, "met" if add <= 300 else "NOT met"))
        print("    (%.0f over raw UCP with UCX defaults)" %
              ((nx - raw[False]) / 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
