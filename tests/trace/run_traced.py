#!/usr/bin/env python3
"""A real traced run read by nxtrace: run_traced.py NXRUN TRACE_PEER
NXTRACE MODULE [MPIRUN | --hosts] runs `NX_TRACE=DIR nxrun -n 2 trace_peer N` over
MODULE (and local), or with MPIRUN, `mpirun -np 2 trace_peer N` (a PMIx
job: the environment passes NX_TRACE on), then checks that

  - under nxrun, nxrun merged the logs itself: DIR/nexus.otf2 is there
    and nxrun said so;

  - with --hosts (tcp, under nxrun), each rank claims a host of its own
    (TRACE_PEER_HOSTS=1: NX_HOST_ID) and listens on this machine's first
    IPv4 address that is not loopback (NX_TCP_LISTEN; skipped, 77,
    without one): the summary's clocks section says that the second
    host's realtime clock agrees with the bounds of at least 2 clock
    offsets the ranks measured (both read this machine's one clock), and
    every check below holds with the two hosts;

  - nxtrace DIR exits 0 and its summary has the two pairs of contexts
    with the RSRs trace_peer sends (rank 0 -> 1: N pings and a quit, at
    least 64 bytes each but the quit; 1 -> 0: a hello and N pongs of at
    least 16 bytes), over MODULE only; trace_ping and trace_quit's runs on
    rank 1 (N and 1), trace_pong and trace_hello's on rank 0 (N and 1);
    each context's sends;
  - otf2-print reads DIR/nexus.otf2: 2N + 2 MpiSends and as many
    MpiRecvs (every run of the program's handlers paired with its send),
    every location's Enter and Leave nest.

Skipped (77) with the reason when otf2-print is missing (after the
summary's checks) or when MODULE cannot start here (nxinfo says so).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_nxtrace as cn  # noqa: E402

N = 200
SKIP = 77


def outward_ipv4():
    """This machine's first IPv4 address that is not loopback, or None."""
    try:
        out = subprocess.run(["hostname", "-I"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for a in out.split():
        if re.match(r"^\d+\.\d+\.\d+\.\d+$", a) and not a.startswith("127."):
            return a
    return None


def main():
    nxrun, peer, nxtrace, module = sys.argv[1:5]
    extra = sys.argv[5] if len(sys.argv) > 5 else None
    hosts = extra == "--hosts"
    mpirun = None if hosts else extra
    env = dict(os.environ, NX_PROTOCOLS=module + ",local")
    env.pop("NX_DEBUG", None)
    nxinfo = os.path.join(os.path.dirname(nxrun), "nxinfo")
    rc, out, err = cn.run([nxinfo], env=env)
    if re.search(r"^%s\s+skipped" % module, out, re.M) or rc != 0:
        print("SKIP: the %s module does not start here:\n%s%s" %
              (module, out, err))
        sys.exit(SKIP)
    d = tempfile.mkdtemp(prefix="nxtrace-real-")
    try:
        env["NX_TRACE"] = d
        if hosts:
            addr = outward_ipv4()
            if addr is None:
                print("SKIP: no IPv4 address but loopback here: two hosts "
                      "on one machine reach each other over tcp only "
                      "through one")
                sys.exit(SKIP)
            env["TRACE_PEER_HOSTS"] = "1"
            env["NX_TCP_LISTEN"] = addr
        if mpirun is None:
            launch = [nxrun, "-n", "2", "--timeout", "60"]
        else:
            launch = [mpirun, "--oversubscribe", "-np", "2", "-x",
                      "NX_TRACE", "-x", "NX_PROTOCOLS"]
        rc, out, err = cn.run(launch + [peer, str(N)], env=env)
        print(out + err)
        cn.expect("the launcher's exit status", rc, 0)
        if mpirun is None:
            cn.expect("nxrun merged the logs",
                      (os.path.exists(os.path.join(d, "nexus.otf2")),
                       "nxrun: trace: %s/nexus.otf2" % d in err),
                      (True, True))
        ctx = dict(re.findall(r"^rank (\d) context ([0-9a-f]{16})$", out,
                              re.M))
        if sorted(ctx) != ["0", "1"]:
            cn.fail("trace_peer did not print both ranks' contexts")
        r0, r1 = ctx["0"], ctx["1"]
        logs = [f for f in os.listdir(d) if f.endswith(".nxt")]
        cn.expect("logs written", len(logs), 2)
        if os.path.exists(os.path.join(d, "nexus.otf2")) and mpirun:
            cn.fail("an archive nobody asked for")

        rc, out, err = cn.run([nxtrace, d])
        print(out + err)
        cn.expect("nxtrace's exit status", rc, 0)
        if hosts:
            # One machine, one clock: the realtime lines agree with every
            # bound the measured offsets give.
            m = re.search(r"^  (\S+) +lined up by its realtime clock, within "
                          r"the bounds of (\d+) measured offsets? \(best "
                          r"round trip ([0-9.]+) us\)$", out, re.M)
            if m is None or int(m.group(2)) < 2:
                cn.fail("no host lined up within the bounds of 2 or more "
                        "measured offsets:\n" + out)
            print("ok: %s's realtime clock within the bounds of %s measured "
                  "offsets (best round trip %s us)" % m.groups())
        pairs = {(r[0], r[1]): r
                 for r in cn.section(out,
                                     "RSRs by pair (sender -> destination)")}
        cn.expect("the pairs", sorted(pairs), sorted([(r0, r1), (r1, r0)]))
        ping, pong = pairs[(r0, r1)], pairs[(r1, r0)]
        cn.expect("rank 0 -> 1: RSRs, modules", (ping[2], ping[4]),
                  (str(N + 1), module))
        cn.expect("rank 1 -> 0: RSRs, modules", (pong[2], pong[4]),
                  (str(N + 1), module))
        if int(ping[3]) < 64 * N or int(pong[3]) < 16 * N:
            cn.fail("fewer bytes than trace_peer put: %s, %s" %
                    (ping[3], pong[3]))
        print("ok: at least the bytes trace_peer put")
        runs = {(r[0], r[1]): r[2] for r in cn.section(
            out, "Handler runs by handler and destination context")}
        for key, want in [(("trace_ping", r1), N), (("trace_quit", r1), 1),
                          (("trace_pong", r0), N), (("trace_hello", r0), 1)]:
            cn.expect("runs of %s on %s" % key, runs.get(key), str(want))
        sent = {r[0]: r[4] for r in cn.section(out, "Contexts")}
        cn.expect("sent by rank 0, 1", (sent[r0], sent[r1]),
                  (str(N + 1), str(N + 1)))
        if shutil.which("otf2-print") is None:
            print("SKIP: the summary is right, but otf2-print is not on "
                  "PATH (Debian: otf2-tools) to read the archive")
            sys.exit(SKIP)
        evs = cn.otf2_events(os.path.join(d, "nexus.otf2"))
        cn.expect("MPI_SEND events",
                  sum(1 for e in evs if e[0] == "MPI_SEND"), 2 * N + 2)
        cn.expect("MPI_RECV events",
                  sum(1 for e in evs if e[0] == "MPI_RECV"), 2 * N + 2)
        cn.check_nesting(evs)
    finally:
        shutil.rmtree(d)
    print("nxtrace on a real run over %s%s: ok" %
          (module, " under mpirun" if mpirun else ""))


if __name__ == "__main__":
    main()
