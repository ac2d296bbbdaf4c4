#!/bin/sh
# The heterogeneous-cluster test: two hosts made of Linux network
# namespaces joined by a veth pair, several processes per host with
# different module sets, joined through nx_attach; the hub process checks
# which protocol every pair of contexts uses (docs/cluster-test.md).
#
# usage: cluster.sh CLUSTER_PEER NXINFO [full|degraded|gateway]
#        cluster.sh TEST_PMIX NXINFO pmix
# "degraded" runs the same cluster with the backends of ucx and ofi made
# unusable at run time (UCX_TLS=bogus, FI_PROVIDER=nonexistent) and the
# ranks started without mpirun: those modules are skipped with their
# reasons and the computation runs over local and tcp.
# "gateway" runs another cluster: host A's processes load only ofi, host
# B's only tcp, on a second veth pair; the hub, on host A, loads both and
# is the gateway every other process joins (nx_gateway_use), so A and B
# reach each other only through it. At the end one B process is killed.
# "pmix" starts one job on both hosts with Open MPI's mpirun (on host A;
# its rsh agent enters host B's namespace to start the daemon there): the
# processes (tests/pmix/test_pmix, the first argument) bootstrap through
# PMIx, load ucx and tcp, and every pair must use ucx within a host and
# tcp between the hosts.
# Exit: 0 passed, 1 failed, 77 skipped (not root, no ip, no namespaces;
# for "gateway" also no ofi module with a shm rail; for "pmix" no mpirun,
# no unshare, or no ucx module).
set -u

peer=$1
nxinfo=$2
mode=${3:-full}
case $mode in
full | degraded | gateway | pmix) ;;
*)
  echo "cluster.sh: unknown mode $mode"
  exit 1
  ;;
esac
deadline=150 # seconds for the whole run; meson's timeout is 180

skip() {
  echo "SKIPPED: $*"
  exit 77
}

[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null 2>&1 || skip "ip (iproute2) is not installed"

# Settings of the caller would change what is expected.
unset NX_PROTOCOLS NX_TCP_LISTEN NX_ATTACH_LISTEN NX_UCX_REMOTE \
  UCX_NET_DEVICES UCX_TLS FI_PROVIDER NX_KEY NX_HOST_ID NX_CTL_FD NX_GATEWAY
if [ "$mode" = degraded ]; then
  export UCX_TLS=bogus FI_PROVIDER=nonexistent
fi

A=nxA-$$
B=nxB-$$
ipA=169.254.77.1
ipB=169.254.77.2
ipA2=169.254.78.1 # the gateway mode's second link
ipB2=169.254.78.2
work=$(mktemp -d /tmp/nx-cluster-XXXXXX)
pids=""   # every process started here
reaped="" # those already waited for (their ids may be reused)

# Whether process $1 (a child of ours) still runs: a zombie does not.
running() {
  [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" != Z ]
}

# Waits for child $1 and records it; its exit status is returned.
reap() {
  wait "$1"
  r=$?
  reaped="$reaped $1"
  return $r
}

# Ends every process started here (each is a process group of its own, and
# anything left inside our namespaces is ours), then removes the namespaces.
cleanup() {
  for p in $pids; do
    case " $reaped " in *" $p "*) continue ;; esac
    kill -KILL -- "-$p" 2>/dev/null
  done
  for ns in $A $B; do
    if ip netns list 2>/dev/null | grep -q "^$ns\b"; then
      for p in $(ip netns pids "$ns" 2>/dev/null); do
        kill -KILL "$p" 2>/dev/null
      done
    fi
  done
  for p in $pids; do
    case " $reaped " in *" $p "*) continue ;; esac
    wait "$p" 2>/dev/null
  done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$work" "/etc/netns/$A" "/etc/netns/$B"
}
trap cleanup EXIT
trap 'echo "cluster.sh: interrupted"; exit 1' INT TERM HUP

ip netns add "$A" 2>"$work/err" ||
  skip "ip netns add failed (no CAP_NET_ADMIN?): $(cat "$work/err")"
ip netns add "$B" 2>"$work/err" ||
  skip "ip netns add failed: $(cat "$work/err")"
# Containers may allow making a namespace but not entering it.
ip netns exec "$A" true 2>"$work/err" ||
  skip "ip netns exec failed: $(cat "$work/err")"
# Interface names are at most 15 characters.
vA=nxa$$
vB=nxb$$
ip link add "$vA" type veth peer name "$vB" 2>"$work/err" ||
  skip "cannot make a veth pair: $(cat "$work/err")"
if ! { ip link set "$vA" netns "$A" &&
  ip link set "$vB" netns "$B" &&
  ip -n "$A" addr add $ipA/30 dev "$vA" &&
  ip -n "$B" addr add $ipB/30 dev "$vB" &&
  ip -n "$A" link set lo up && ip -n "$B" link set lo up &&
  ip -n "$A" link set "$vA" up && ip -n "$B" link set "$vB" up; }; then
  echo "cluster.sh: setting up the veth pair failed"
  exit 1
fi
echo "hosts: $A (hostA, $ipA on $vA) and $B (hostB, $ipB on $vB)"
if [ "$mode" = gateway ]; then
  # A second link, for tcp between the gateway and host B.
  vA2=nxc$$
  vB2=nxd$$
  if ! { ip link add "$vA2" type veth peer name "$vB2" &&
    ip link set "$vA2" netns "$A" && ip link set "$vB2" netns "$B" &&
    ip -n "$A" addr add $ipA2/30 dev "$vA2" &&
    ip -n "$B" addr add $ipB2/30 dev "$vB2" &&
    ip -n "$A" link set "$vA2" up && ip -n "$B" link set "$vB2" up; }; then
    echo "cluster.sh: setting up the second veth pair failed"
    exit 1
  fi
  echo "second link: $ipA2 on $vA2 (hostA) and $ipB2 on $vB2 (hostB)"
fi

# Bytes link $1 carried from host A to host B, and back ("A>B B>A").
link_bytes() {
  tx=$(ip netns exec "$A" cat "/sys/class/net/$1/statistics/tx_bytes")
  rx=$(ip netns exec "$A" cat "/sys/class/net/$1/statistics/rx_bytes")
  echo "$tx $rx"
}

# A module's status in the nxinfo output saved.
status() {
  awk -v m="$1" '$1 == m { print $2; exit }' "$work/nxinfo"
}

# Every process listens for tcp on loopback (same host) and its veth
# address (the other host), unless its command names other addresses.
start() { # start NS HOSTID LOG command...
  ns=$1 host=$2 log=$3
  shift 3
  case $host in hostA) ip=$ipA ;; *) ip=$ipB ;; esac
  setsid ip netns exec "$ns" env NX_HOST_ID="$host" \
    NX_TCP_LISTEN="127.0.0.1,$ip" "$@" >"$work/$log" 2>&1 &
  pids="$pids $!"
  last=$!
}

# Waits for the hub ($hub) to write its URL into $url.
wait_url() {
  i=0
  while [ ! -s "$work/url" ] && [ $i -lt 300 ]; do
    running "$hub" || break
    sleep 0.1
    i=$((i + 1))
  done
  [ -s "$work/url" ] || {
    echo "cluster.sh: the hub gave no URL"
    cat "$work/hub.log"
    exit 1
  }
  url=$(cat "$work/url")
}

# One mpirun job over both hosts (mode pmix): mpirun runs in host A with
# its own host name (a UTS namespace), and starts the daemon of host B
# through an rsh agent that enters B's namespaces. The names resolve in
# both namespaces through /etc/netns/NS/hosts, which ip netns exec mounts
# over /etc/hosts.
if [ "$mode" = pmix ]; then
  mpirun=$(command -v mpirun 2>/dev/null) || skip "no mpirun"
  command -v unshare >/dev/null 2>&1 || skip "no unshare (util-linux)"
  ip netns exec "$A" unshare --uts true 2>"$work/err" ||
    skip "unshare --uts failed: $(cat "$work/err")"
  ip netns exec "$A" env NX_HOST_ID=hostA NX_PROTOCOLS=ucx,tcp,local \
    "$nxinfo" >"$work/nxinfo" 2>&1
  cat "$work/nxinfo"
  for m in ucx tcp; do
    [ "$(status "$m")" = loaded ] ||
      skip "the $m module does not load here: $(grep "^$m " "$work/nxinfo")"
  done
  for ns in $A $B; do
    mkdir -p "/etc/netns/$ns"
    printf '127.0.0.1 localhost\n%s hostA\n%s hostB\n' $ipA $ipB \
      >"/etc/netns/$ns/hosts"
  done
  # The agent: "nxrsh [options] HOST COMMAND..." runs COMMAND (a shell
  # command line) in HOST's namespace, under HOST's name.
  cat >"$work/nxrsh" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do
  case \$1 in -*) shift ;; *) break ;; esac
done
host=\$1
shift
case \$host in
hostA) ns=$A ;;
hostB) ns=$B ;;
*) echo "nxrsh: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host && \$*"
AGENT
  chmod +x "$work/nxrsh"
  printf 'hostA slots=2\nhostB slots=2\n' >"$work/hostfile"
  # Each process: its host's identity (the namespaces share
  # /etc/machine-id) and its tcp addresses, from its host name.
  cat >"$work/onhost" <<ONHOST
#!/bin/sh
case \$(hostname) in
hostA) ip=$ipA ;;
*) ip=$ipB ;;
esac
NX_HOST_ID=\$(hostname) NX_TCP_LISTEN=127.0.0.1,\$ip exec "\$@"
ONHOST
  chmod +x "$work/onhost"
  # ucx before tcp: ucx (host scope) within a host, tcp between them.
  setsid ip netns exec "$A" unshare --uts sh -c 'hostname hostA && exec "$@"' \
    sh "$mpirun" --allow-run-as-root --oversubscribe \
    --hostfile "$work/hostfile" -np 4 \
    --mca plm_rsh_agent "$work/nxrsh" \
    --mca oob_tcp_if_include 169.254.77.0/30 \
    -x NX_PROTOCOLS=ucx,tcp,local -x LD_LIBRARY_PATH -x PATH \
    "$work/onhost" "$peer" ucx/tcp 4 >"$work/job.log" 2>&1 &
  job=$!
  pids="$pids $job"
  i=0
  while running "$job" && [ $i -lt $((deadline * 10)) ]; do
    sleep 0.1
    i=$((i + 1))
  done
  rc=0
  if running "$job"; then
    echo "cluster.sh: FAIL: the job did not finish within $deadline s"
    rc=1
  else
    reap "$job" || rc=1
  fi
  echo "---- job.log"
  cat "$work/job.log"
  # Each process printed its row: where the others are and over what.
  for h in hostA hostB; do
    n=$(grep -c "^rank [0-9]* ($h):" "$work/job.log")
    [ "$n" = 2 ] || {
      echo "cluster.sh: FAIL: $n processes ran on $h, not 2"
      rc=1
    }
  done
  grep -q "every pair exchanged RSRs" "$work/job.log" || rc=1
  [ $rc = 0 ] && echo "cluster.sh: passed (one mpirun job on both hosts: ucx within a host, tcp between them)"
  exit $rc
fi

victim="" # the process the gateway mode kills
if [ "$mode" = gateway ]; then
  # What loads here: the hub's modules, on host A. The A processes and the
  # gateway meet over ofi's shm rail (ofi's tcp rail would do too, but the
  # test asks for the shared-memory one within a host).
  ip netns exec "$A" env NX_HOST_ID=hostA NX_PROTOCOLS=ofi,tcp,local \
    "$nxinfo" >"$work/nxinfo" 2>&1
  cat "$work/nxinfo"
  for m in ofi tcp local; do
    [ "$(status "$m")" = loaded ] ||
      skip "the $m module does not load here: $(grep "^$m " "$work/nxinfo")"
  done
  # The rails ofi opened: "backend: libfabric 1.17 tcp;ofi_rxm, shm; ...".
  rails=$(grep -A1 "^ofi " "$work/nxinfo" |
    sed -n 's/^ *backend: libfabric [^ ]* \(.*\); descriptor.*/\1/p')
  case ", $rails," in
  *", shm,"*) ;;
  *) skip "libfabric opened no shm rail here (rails: $rails)" ;;
  esac

  # Host A: the hub, which is the gateway: ofi to host A, tcp to host B on
  # the second link only. The URL names the first link: the attach exchange
  # is all that crosses it.
  start "$A" hostA hub.log env NX_GATEWAY=1 NX_PROTOCOLS=ofi,tcp,local \
    NX_ATTACH_LISTEN=$ipA:0 NX_TCP_LISTEN=$ipA2 \
    "$peer" hub "$work/url" 5 GW 1 gateway
  hub=$last
  wait_url
  # Host A: two processes with ofi alone (and local, the in-process
  # hand-over, for their own second context).
  for n in 1 2; do
    start "$A" hostA a$n.log env NX_PROTOCOLS=ofi,local \
      "$peer" member "$url" A$n 1 gateway
  done
  # Host B: two processes with tcp alone (and local), listening on the
  # second link only. B2 is killed at the end.
  for n in 1 2; do
    start "$B" hostB b$n.log env NX_PROTOCOLS=tcp,local NX_TCP_LISTEN=$ipB2 \
      "$peer" member "$url" B$n 1 gateway
  done
  victim=$last
else
  # What loads here. ucx, ofi or mpi missing only changes what is expected
  # (each process reports the modules it loaded); without tcp nothing reaches
  # the other host, nor the tcp-only process.
  ip netns exec "$A" env NX_HOST_ID=hostA "$nxinfo" >"$work/nxinfo" 2>&1
  cat "$work/nxinfo"
  [ "$(status tcp)" = loaded ] || skip "the tcp module does not load here"
  for m in ucx ofi; do
    [ "$(status "$m")" = loaded ] ||
      echo "NOTE: module $m does not load here ($(status "$m")); what it would carry is expected over the other modules"
  done
  mpirun=$(command -v mpirun 2>/dev/null || true)
  use_mpi=0
  if [ "$mode" = degraded ]; then
    echo "NOTE: degraded run: the two ranks run as ordinary processes"
    for m in ucx ofi; do
      [ "$(status "$m")" = loaded ] && {
        echo "cluster.sh: FAIL: $m loads although its backend was made unusable"
        exit 1
      }
    done
  elif [ -z "$mpirun" ]; then
    echo "NOTE: no mpirun: the two ranks run as ordinary processes"
  elif [ "$(status mpi)" != loaded ] &&
    ! grep -q "^mpi .*not started by mpirun" "$work/nxinfo"; then
    # Outside mpirun the module loads (for spawning only) or stands aside
    # with that reason; any other reason (not built, libmpi missing) means
    # it cannot run here.
    echo "NOTE: the mpi module cannot run here ($(grep "^mpi " "$work/nxinfo" || echo "not built")): the two ranks run as ordinary processes"
  else
    use_mpi=1
  fi

  # Host A: the hub (every module found, ordered by cost), listening on its
  # veth address.
  start "$A" hostA hub.log env NX_ATTACH_LISTEN=$ipA:0 \
    "$peer" hub "$work/url" 6 A 1
  hub=$last
  wait_url

  # Host A: two MPI ranks. mpi comes first in their NX_PROTOCOLS: by cost ucx
  # (10) and ofi (20) beat mpi (30), so without it the ranks would talk over
  # ucx; with it mpi carries rank to rank and, as it reaches nothing else,
  # the next module everything else. Rank 1 has no ucx or ofi at all: it
  # reaches every other process over tcp.
  protos0=mpi,ucx,ofi,tcp,local
  protos1=mpi,tcp,local
  if [ $use_mpi = 1 ]; then
    start "$A" hostA ranks.log "$mpirun" --allow-run-as-root --oversubscribe \
      -np 1 env NX_PROTOCOLS=$protos0 "$peer" member "$url" Ar 0 : \
      -np 1 env NX_PROTOCOLS=$protos1 "$peer" member "$url" Ar 0
  else
    start "$A" hostA ranks.log env NX_PROTOCOLS=$protos0 \
      "$peer" member "$url" Ar0 0
    start "$A" hostA ranks1.log env NX_PROTOCOLS=$protos1 \
      "$peer" member "$url" Ar1 0
  fi
  # Host A: a process with tcp alone.
  start "$A" hostA tcponly.log env NX_PROTOCOLS=tcp "$peer" member "$url" At 0
  # Host B: two processes with two contexts each; B2 has no ucx, so B1 and B2
  # meet over ofi (shm).
  start "$B" hostB b1.log "$peer" member "$url" B1 1
  start "$B" hostB b2.log env NX_PROTOCOLS=ofi,tcp,local \
    "$peer" member "$url" B2 1
fi

# Wait for the hub, then for the others (told to quit by the hub).
i=0
while running "$hub" && [ $i -lt $((deadline * 10)) ]; do
  sleep 0.1
  i=$((i + 1))
done
rc=0
if running "$hub"; then
  echo "cluster.sh: FAIL: the hub did not finish within $deadline s"
  rc=1
else
  reap "$hub" || rc=1
fi
for p in $pids; do
  [ "$p" = "$hub" ] && continue
  i=0
  while running "$p" && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  if running "$p"; then
    echo "cluster.sh: FAIL: process $p did not end after the hub told it to"
    rc=1
  elif [ "$p" = "$victim" ]; then
    reap "$p"
    r=$?
    [ $r = 137 ] || {
      echo "cluster.sh: FAIL: process $p (B2) was not killed by SIGKILL (status $r)"
      rc=1
    }
  elif ! reap "$p"; then
    echo "cluster.sh: FAIL: process $p exited with an error"
    rc=1
  fi
done

for log in hub ranks ranks1 tcponly a1 a2 b1 b2; do
  [ -f "$work/$log.log" ] || continue
  echo "---- $log.log"
  cat "$work/$log.log"
done

# One computation mixes every protocol that can run here.
want="local tcp"
if [ "$mode" = gateway ]; then
  want="$want ofi gw"
  # tcp ran on the second link; the first carried the attach exchanges.
  echo "bytes host A sent and received: first link $(link_bytes "$vA"), second link $(link_bytes "$vA2")"
else
  [ "$(status ucx)" = loaded ] && want="$want ucx"
  [ "$(status ofi)" = loaded ] && want="$want ofi"
  [ $use_mpi = 1 ] && want="$want mpi"
fi
used=$(sed -n 's/^protocols used://p' "$work/hub.log")
for m in $want; do
  case " $used " in
  *" $m "*) ;;
  *)
    echo "cluster.sh: FAIL: no pair used $m"
    rc=1
    ;;
  esac
done
[ $rc = 0 ] && echo "cluster.sh: passed (protocols used:$used)"
exit $rc
