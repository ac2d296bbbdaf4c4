/* The virtual machine's calls on a machine of one host, and what changed
 * in groups: pvm_config, pvm_tidtohost, pvm_mstat, pvm_addhosts,
 * pvm_delhosts, pvm_hostsync, pvm_archcode, pvm_start_pvmd, pvm_version,
 * pvm_export/pvm_unexport, pvm_freezegroup and pvm_bcast to a group that
 * does not exist. */
#include <stdlib.h>

#include "common.h"

#define NCHILD 2

static char group[] = "nxt_frozen";

/* A member: joins, freezes with the others, reports the results. */
static int child(void) {
  int r[3];
  r[0] = pvm_joingroup(group) >= 0;
  r[1] = pvm_freezegroup(group, NCHILD + 1);
  r[2] = pvm_gsize(group);
  pvm_initsend(PvmDataDefault);
  pvm_pkint(r, 3, 1);
  pvm_send(pvm_parent(), 1);
  /* Stay in the group until the parent is done with it. */
  recv_for(pvm_parent(), 2);
  pvm_lvgroup(group);
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  int me = task_start();
  if (me < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();

  printf("version: %s\n", pvm_version());
  NXT_EXPECT(strcmp(pvm_version(), "3.4.6") == 0, 1);
  int nhost = 0, narch = 0;
  struct pvmhostinfo *hi = NULL;
  int rc = pvm_config(&nhost, &narch, &hi);
  printf("config: %s, %d host(s), %d arch(s)\n", code(rc), nhost, narch);
  NXT_EXPECT(rc == PvmOk && nhost == 1 && narch == 1 && hi != NULL, 1);
  int host = hi[0].hi_tid;
  char name[256];
  snprintf(name, sizeof(name), "%s", hi[0].hi_name);
  printf("tidtohost of me is the host: %s\n",
         pvm_tidtohost(me) == host ? "yes" : "no");
  NXT_EXPECT(pvm_tidtohost(me) == host, 1);
  /* (The real PVM does not check the tid given to pvm_tidtohost;
   * tests/pvm/test_pvm.cpp checks that nexus-pvm refuses a bad one.) */
  NXT_EXPECT(said("mstat of the host", pvm_mstat(name), PvmOk), 1);
  NXT_EXPECT(said("mstat of another", pvm_mstat("nxt-no-such-host"), PvmNoHost),
             1);
  /* (pvm_addhosts of this host: the real PVM answers PvmDupHost, or
   * PvmIPLoopback where the host's name resolves to a loopback address;
   * tests/pvm/test_pvm.cpp checks nexus-pvm's PvmDupHost.) */
  struct timeval clk = {0, 0}, delta = {1, 1};
  rc = pvm_hostsync(host, &clk, &delta);
  printf("hostsync: %s, clock set %s\n", code(rc),
         clk.tv_sec > 0 ? "yes" : "no");
  NXT_EXPECT(rc == PvmOk && clk.tv_sec > 0, 1);
  printf("archcode of the host's arch: %s\n",
         pvm_archcode(hi[0].hi_arch) >= 0 ? "a code" : "an error");
  NXT_EXPECT(pvm_archcode(hi[0].hi_arch) >= 0, 1);
  NXT_EXPECT(
      said("archcode of no arch", pvm_archcode("NXT_NO_ARCH"), PvmNotFound), 1);
  /* A pvmd runs already (the real one, or nexus-pvm's stand-in). */
  NXT_EXPECT(said("start_pvmd", pvm_start_pvmd(0, NULL, 0), PvmDupHost), 1);

  unsetenv("PVM_EXPORT");
  pvm_export("NXT_A");
  pvm_export("NXT_B");
  pvm_export("NXT_A");
  printf("PVM_EXPORT %s\n", getenv("PVM_EXPORT"));
  NXT_EXPECT(strcmp(getenv("PVM_EXPORT"), "NXT_A:NXT_B") == 0, 1);
  pvm_unexport("NXT_A");
  pvm_unexport("NXT_C");
  printf("PVM_EXPORT %s\n", getenv("PVM_EXPORT"));
  NXT_EXPECT(strcmp(getenv("PVM_EXPORT"), "NXT_B") == 0, 1);

  /* Groups: freeze, then what a frozen group and a missing one answer. */
  pvm_initsend(PvmDataDefault);
  NXT_EXPECT(said("bcast to no group", pvm_bcast("nxt_nogroup", 3), PvmNoGroup),
             1);
  NXT_EXPECT(
      said("freeze when not in it", pvm_freezegroup(group, 1), PvmNoGroup), 1);
  int inst = pvm_joingroup(group);
  printf("join: %d\n", inst);
  NXT_EXPECT(inst == 0, 1);
  int tids[NCHILD];
  if (spawn_self("child", NCHILD, tids) != NCHILD)
    return 1;
  rc = pvm_freezegroup(group, NCHILD + 1);
  printf("freeze: %s\n", code(rc));
  NXT_EXPECT(rc == NCHILD + 1, 1); /* the size it froze at */
  for (int i = 0; i < NCHILD; i++) {
    int r[3] = {0, 0, 0};
    NXT_EXPECT(recv_for(tids[i], 1) > 0, 1);
    pvm_upkint(r, 3, 1);
    printf("member %d: joined %s, freeze %s, size %d\n", i, r[0] ? "yes" : "no",
           code(r[1]), r[2]);
    NXT_EXPECT(r[0] && r[1] == NCHILD + 1 && r[2] == NCHILD + 1, 1);
  }
  NXT_EXPECT(said("freeze again", pvm_freezegroup(group, -1), PvmDupGroup), 1);
  printf("size: %d\n", pvm_gsize(group));
  NXT_EXPECT(pvm_gsize(group) == NCHILD + 1, 1);
  NXT_EXPECT(said("bcast", pvm_bcast(group, 3), PvmOk), 1);
  pvm_initsend(PvmDataDefault);
  pvm_mcast(tids, NCHILD, 2);
  pvm_exit();
  return 0;
}
