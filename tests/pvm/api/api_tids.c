/* Tids as PVM numbers them, so that programs that print them (t%x, a
 * Fortran I7) print what they print under the real PVM: the task started by
 * hand is t40001 on the host t40000, the tasks it spawns t40002, t40003,
 * and a task spawned by one of those the next number, t40004. Run as the
 * first task of its machine (a fresh pvmd, or nexus-pvm's own root). The
 * spawned tasks also say whether they work in $HOME, where pvmd starts
 * them. */
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

/* 1 if this process works in $HOME. */
static int in_home(void) {
  char cwd[PATH_MAX], home[PATH_MAX];
  const char *h = getenv("HOME");
  return h != NULL && getcwd(cwd, sizeof(cwd)) != NULL &&
         realpath(h, home) != NULL && strcmp(cwd, home) == 0;
}

#define TAG_TID 1

int main(int argc, char **argv) {
  int me = task_start();
  if (me < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    /* The first child spawns one more task: numbered after its siblings. */
    int grand = 0, parent = pvm_parent();
    int *sib = NULL;
    int n = pvm_siblings(&sib);
    if (n > 0 && sib[0] == me && spawn_self("grandchild", 1, &grand) != 1)
      grand = 0;
    int home = in_home();
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&me, 1, 1);
    pvm_pkint(&parent, 1, 1);
    pvm_pkint(&grand, 1, 1);
    pvm_pkint(&home, 1, 1);
    pvm_send(parent, TAG_TID);
    pvm_exit();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "grandchild") == 0) {
    pvm_exit();
    return 0;
  }
  printf("pvm_mytid: t%x (%d)\n", me, me);
  NXT_EXPECT(me == 0x40001, 1);
  printf("pvm_tidtohost: t%x\n", pvm_tidtohost(me));
  NXT_EXPECT(pvm_tidtohost(me) == 0x40000, 1);
  int tids[2];
  int n = spawn_self("child", 2, tids);
  printf("pvm_spawn: %d, t%x t%x\n", n, n > 0 ? tids[0] : 0,
         n > 1 ? tids[1] : 0);
  NXT_EXPECT(n == 2 && tids[0] == 0x40002 && tids[1] == 0x40003, 1);
  /* In the order they were spawned, whatever order they report in. */
  int seen[2][4] = {{0}};
  for (int i = 0; i < n; i++) {
    int t[4] = {0, 0, 0, 0};
    if (recv_for(-1, TAG_TID) > 0)
      pvm_upkint(t, 4, 1);
    for (int k = 0; k < n; k++)
      if (t[0] == tids[k])
        memcpy(seen[k], t, sizeof(t));
  }
  for (int k = 0; k < n; k++)
    printf("child t%x: parent t%x, spawned t%x, works in $HOME: %s\n",
           seen[k][0], seen[k][1], seen[k][2], seen[k][3] ? "yes" : "no");
  NXT_EXPECT(seen[0][1] == me && seen[1][1] == me, 1);
  NXT_EXPECT(seen[0][3] == 1 && seen[1][3] == 1, 1);
  NXT_EXPECT(seen[0][2] == 0x40004 && seen[1][2] == 0, 1);
  /* A message or a signal for a task that does not exist (any more) is
   * dropped, as PVM's pvmd drops it: no error, nothing printed. */
  int none = 0x40000 + 0x3fff;
  pvm_initsend(PvmDataDefault);
  int rs = pvm_send(none, 1), rm = pvm_mcast(&none, 1, 1);
  int rk = pvm_kill(none), rc = pvm_send(tids[0], 1);
  printf("to t%x (no task): pvm_send %d, pvm_mcast %d, pvm_kill %d\n", none, rs,
         rm, rk);
  printf("pvm_send to a child that has exited: %d\n", rc);
  NXT_EXPECT(rs == 0 && rm == 0 && rk == 0 && rc == 0, 1);
  pvm_exit();
  return 0;
}
