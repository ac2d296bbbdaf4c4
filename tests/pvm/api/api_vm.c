/* The virtual machine's hosts: pvm_config, pvm_addhosts, pvm_delhosts,
 * pvm_mstat, pvm_tidtohost and the PvmHostAdd/PvmHostDelete notifies. What
 * it prints is what the real PVM 3.4 answers on a machine of one host.
 * Built against nexus-pvm, it then adds a nexus node as a host ("mpi:..."
 * where the mpi module is loaded, NX_PROTOCOLS naming it), checks the
 * notifies and the calls with it, and deletes it; it prints nothing there,
 * so both builds print the same. */
#include <stdlib.h>

#include "common.h"

#define TAG_ADD 11
#define TAG_DEL 12

/* Receives a notify with tag `tag` (0 s: whether one waits); returns the
 * number of ints it holds, which go to v. */
static int notified(int tag, int *v, int max, int wait) {
  int id = wait ? recv_for(-1, tag) : pvm_nrecv(-1, tag);
  if (id <= 0)
    return id;
  int bytes = 0, t, src;
  pvm_bufinfo(id, &bytes, &t, &src);
  int n = bytes / (int)sizeof(int);
  if (n > max)
    n = max;
  pvm_upkint(v, n, 1);
  return n;
}

#ifdef NEXUS_PVM
/* An "mpi" node as a host: the mpi module must be loaded for it. */
static int node_host(int me) {
  const char *protos = getenv("NX_PROTOCOLS");
  int mpi = protos == NULL || strstr(protos, "mpi") != NULL;
  char *node[] = {"mpi:host=localhost"};
  int info = 0;
  int n = pvm_addhosts(node, 1, &info);
  if (!mpi) {
    /* No module starts processes on it. */
    NXT_EXPECT(n == 0 && info == PvmCantStart, 1);
    return 0;
  }
  NXT_EXPECT(n == 1 && info > 0, 1);
  int host = info, v[4] = {0};
  /* PvmHostAdd: the count of new hosts, then their tids. */
  NXT_EXPECT(notified(TAG_ADD, v, 4, 1) == 2 && v[0] == 1 && v[1] == host, 1);
  NXT_EXPECT(pvm_addhosts(node, 1, &info) == 0 && info == PvmDupHost, 1);
  int nhost = 0, narch = 0;
  struct pvmhostinfo *hi = NULL;
  NXT_EXPECT(pvm_config(&nhost, &narch, &hi) == PvmOk && nhost == 2, 1);
  NXT_EXPECT(hi[1].hi_tid == host && strcmp(hi[1].hi_name, node[0]) == 0, 1);
  NXT_EXPECT(hi[0].hi_tid != host, 1);
  NXT_EXPECT(pvm_mstat(node[0]) == PvmOk, 1);
  NXT_EXPECT(pvm_tidtohost(host) == host, 1);
  NXT_EXPECT(pvm_tidtohost(me) == hi[0].hi_tid, 1);
  NXT_EXPECT(pvm_notify(PvmHostDelete, TAG_DEL, 1, &host) == PvmOk, 1);
  NXT_EXPECT(notified(TAG_DEL, v, 4, 0) == 0, 1); /* not yet */
  NXT_EXPECT(pvm_delhosts(node, 1, &info) == 1 && info == 0, 1);
  /* PvmHostDelete: the tid of the host. */
  NXT_EXPECT(notified(TAG_DEL, v, 4, 1) == 1 && v[0] == host, 1);
  NXT_EXPECT(pvm_mstat(node[0]) == PvmNoHost, 1);
  NXT_EXPECT(pvm_config(&nhost, &narch, &hi) == PvmOk && nhost == 1, 1);
  NXT_EXPECT(pvm_delhosts(node, 1, &info) == 0 && info == PvmNoHost, 1);
  /* A name that is not on the network: PvmNoHost, as the man page says
   * (the real PVM here answers PvmIPLoopback to any add: its master's
   * address is the loopback, so this is not compared). */
  char *nowhere[] = {"nxt-no-such-host.invalid"};
  NXT_EXPECT(pvm_addhosts(nowhere, 1, &info) == 0 && info == PvmNoHost, 1);
  /* A bare name that resolves stands for "mpi:host=<name>"; once is
   * enough (cnt 1). */
  char *bare[] = {"127.0.0.2"};
  NXT_EXPECT(pvm_addhosts(bare, 1, &info) == 1 && info > 0, 1);
  NXT_EXPECT(notified(TAG_ADD, v, 4, 0) == 0, 1);
  NXT_EXPECT(pvm_delhosts(bare, 1, &info) == 1 && info == 0, 1);
  return 0;
}
#endif

int main(void) {
  int me = task_start();
  if (me < 0)
    return 77;

  int nhost = 0, narch = 0;
  struct pvmhostinfo *hi = NULL;
  NXT_EXPECT(said("config", pvm_config(&nhost, &narch, &hi), PvmOk), 1);
  printf("hosts %d, archs %d\n", nhost, narch);
  NXT_EXPECT(nhost == 1 && narch == 1, 1);
  int host = hi[0].hi_tid;
  char name[256];
  snprintf(name, sizeof(name), "%s", hi[0].hi_name);
  int th = pvm_tidtohost(me);
  printf("tidtohost of me is the host: %s\n", th == host ? "yes" : "no");
  NXT_EXPECT(th == host, 1);
  NXT_EXPECT(
      said("notify host add", pvm_notify(PvmHostAdd, TAG_ADD, 1, NULL), PvmOk),
      1);
  NXT_EXPECT(said("notify host delete of this host",
                  pvm_notify(PvmHostDelete, TAG_DEL, 1, &host), PvmOk),
             1);

  /* Deleting hosts that are not in the machine. */
  char *none[] = {"nxt-no-such-host", "nxt-no-such-host-2"};
  int infos[2] = {0, 0};
  int n = pvm_delhosts(none, 2, infos);
  printf("delhosts of two unknown: %d, %s", n, code(infos[0]));
  printf(" %s\n", code(infos[1]));
  NXT_EXPECT(n == 0 && infos[0] == PvmNoHost && infos[1] == PvmNoHost, 1);
  NXT_EXPECT(said("mstat of the host", pvm_mstat(name), PvmOk), 1);
  NXT_EXPECT(said("mstat of an unknown", pvm_mstat(none[0]), PvmNoHost), 1);
  NXT_EXPECT(
      said("addhosts of none", pvm_addhosts(none, 0, infos), PvmBadParam), 1);
  NXT_EXPECT(
      said("delhosts of none", pvm_delhosts(none, 0, infos), PvmBadParam), 1);
  int v[4];
  int got = notified(TAG_ADD, v, 4, 0);
  printf("host add notifies so far: %d\n", got);
  NXT_EXPECT(got == 0, 1);
#ifdef NEXUS_PVM
  if (node_host(me) != 0)
    return 1;
#endif
  NXT_EXPECT(
      pvm_notify(PvmHostAdd | PvmNotifyCancel, TAG_ADD, 0, NULL) == PvmOk, 1);
  pvm_exit();
  return 0;
}
