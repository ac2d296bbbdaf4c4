/* A task on an added host: this program adds the nexus node
 * "mpi:host=localhost" as a host, spawns itself there (PvmTaskHost; Open
 * MPI's MPI_Comm_spawn starts it), checks that pvm_tidtohost names that
 * host for the child, and that pvm_exit returns once the child has left
 * (a child on a module's node ends only after its spawner lets it go).
 * Exits 77 (a skip) where the mpi module cannot start processes. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <pvm3.h>

#include "../common/expect.h"

#define TAG_HELLO 1
#define TAG_BYE 2

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int me = pvm_mytid();
  NXT_EXPECT(me > 0, 1);
  pvm_setopt(PvmAutoErr, 0);
  struct timeval tv = {30, 0};
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    int parent = pvm_parent();
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&me, 1, 1);
    NXT_EXPECT(pvm_send(parent, TAG_HELLO) == PvmOk, 1);
    NXT_EXPECT(pvm_trecv(parent, TAG_BYE, &tv) > 0, 1);
    pvm_exit();
    return 0;
  }
  char *node[] = {"mpi:host=localhost"};
  int host = 0;
  int n = pvm_addhosts(node, 1, &host);
  if (n == 0 && host == PvmCantStart) {
    printf("skip: the mpi module cannot start processes here\n");
    pvm_exit();
    return 77;
  }
  NXT_EXPECT(n == 1 && host > 0, 1);
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  NXT_EXPECT(len > 0, 1);
  self[len] = '\0';
  char *av[] = {"child", NULL};
  int tid = 0;
  NXT_EXPECT(pvm_spawn(self, av, PvmTaskHost, node[0], 1, &tid) == 1, 1);
  int got = 0;
  NXT_EXPECT(pvm_trecv(tid, TAG_HELLO, &tv) > 0, 1);
  NXT_EXPECT(pvm_upkint(&got, 1, 1) == PvmOk && got == tid, 1);
  NXT_EXPECT(pvm_tidtohost(tid) == host, 1);
  NXT_EXPECT(pvm_tidtohost(me) != host, 1);
  pvm_initsend(PvmDataDefault);
  NXT_EXPECT(pvm_send(tid, TAG_BYE) == PvmOk, 1);
  NXT_EXPECT(pvm_exit() == PvmOk, 1);
  printf("a task on host %x: tidtohost right, exit returned\n", host);
  return 0;
}
