/* An SPMD PVM program for nxrun -n N (or mpirun -np N): every process is a
 * PVM task, pvm_siblings lists them all, a token goes round the ring and
 * the tasks meet in a group. Task 0 prints the checked results; any task
 * that finds something wrong exits 1. */
#include <pvm3.h>
#include <stdio.h>

#include "../common/expect.h"

#define TAG_TOKEN 1
#define TAG_BCAST 2

static int fail(const char *what, int rc) {
  fprintf(stderr, "pvm_spmd: %s: %d\n", what, rc);
  pvm_exit();
  return 1;
}

int main(void) {
  int me = pvm_mytid();
  if (me < 0)
    return 77;
  int *tids;
  int n = pvm_siblings(&tids);
  if (n < 2)
    return fail("pvm_siblings gave fewer than 2 tasks", n);
  int rank = -1;
  for (int i = 0; i < n; i++)
    if (tids[i] == me)
      rank = i;
  if (rank < 0)
    return fail("this task is not among its siblings", me);
  if (pvm_parent() != PvmNoParent)
    return fail("a task of a job has a parent", pvm_parent());
  int next = tids[(rank + 1) % n], prev = tids[(rank + n - 1) % n];
  int token = 0;
  if (rank != 0) {
    if (pvm_recv(prev, TAG_TOKEN) < 0 || pvm_upkint(&token, 1, 1) < 0)
      return fail("token", 0);
  }
  token += rank + 1;
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&token, 1, 1);
  pvm_send(next, TAG_TOKEN);
  if (rank == 0 &&
      (pvm_recv(prev, TAG_TOKEN) < 0 || pvm_upkint(&token, 1, 1) < 0))
    return fail("token", 0);

  char group[] = "spmd";
  if (pvm_joingroup(group) < 0 || pvm_barrier(group, n) < 0)
    return fail("join/barrier", 0);
  int value = 0;
  if (rank == 0) {
    value = 7;
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&value, 1, 1);
    pvm_bcast(group, TAG_BCAST);
  } else if (pvm_recv(-1, TAG_BCAST) < 0 || pvm_upkint(&value, 1, 1) < 0) {
    return fail("bcast", 0);
  }
  int sum = value * (rank + 1);
  int root = pvm_getinst(group, tids[0]);
  if (pvm_reduce(PvmSum, &sum, 1, PVM_INT, 3, group, root) < 0)
    return fail("reduce", 0);
  if (rank == 0)
    printf("%d tasks: token %d (expected %d), reduce %d (expected %d)\n", n,
           token, n * (n + 1) / 2, sum, 7 * n * (n + 1) / 2);
  /* No pvm_lvgroup: a task that exits leaves its groups. */
  pvm_barrier(group, n);
  pvm_exit();
  /* Every task got the broadcast; task 0 the whole ring and the sum. */
  NXT_EXPECT(value == 7, 1);
  NXT_EXPECT(rank != 0 || token == n * (n + 1) / 2, 1);
  NXT_EXPECT(rank != 0 || sum == 7 * n * (n + 1) / 2, 1);
  return 0;
}
