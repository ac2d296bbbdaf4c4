/* An SPMD PVM program, unchanged under the real PVM 3.4 and under
 * nexus-pvm: the first task spawns the others, sends everyone the list of
 * tids, and a token goes round the ring, each task adding its position. */
#include <limits.h>
#include <pvm3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NPROC 4
#define ROUNDS 50
#define TAG_TIDS 10
#define TAG_TOKEN 11

int main(int argc, char **argv) {
  int tids[NPROC];
  int me = 0;
  if (pvm_mytid() < 0)
    return 77;
  int parent = pvm_parent();
  if (parent == PvmNoParent) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
      return 1;
    self[len] = '\0';
    tids[0] = pvm_mytid();
    if (pvm_spawn(self, NULL, PvmTaskDefault, "", NPROC - 1, &tids[1]) !=
        NPROC - 1) {
      pvm_exit();
      return 1;
    }
    pvm_initsend(PvmDataDefault);
    pvm_pkint(tids, NPROC, 1);
    pvm_mcast(&tids[1], NPROC - 1, TAG_TIDS);
  } else {
    pvm_recv(parent, TAG_TIDS);
    pvm_upkint(tids, NPROC, 1);
    for (int i = 0; i < NPROC; i++)
      if (tids[i] == pvm_mytid())
        me = i;
  }
  (void)argc;
  (void)argv;
  int next = tids[(me + 1) % NPROC], prev = tids[(me + NPROC - 1) % NPROC];
  long token = 0;
  for (int r = 0; r < ROUNDS; r++) {
    if (me != 0 || r > 0) {
      pvm_recv(prev, TAG_TOKEN);
      pvm_upklong(&token, 1, 1);
    }
    token += me + 1;
    pvm_initsend(PvmDataRaw);
    pvm_pklong(&token, 1, 1);
    pvm_send(next, TAG_TOKEN);
  }
  if (me == 0) {
    pvm_recv(prev, TAG_TOKEN);
    pvm_upklong(&token, 1, 1);
    printf("token after %d rounds of %d tasks: %ld (expected %ld)\n", ROUNDS,
           NPROC, token, (long)ROUNDS * NPROC * (NPROC + 1) / 2);
  }
  pvm_exit();
  return 0;
}
