/* PVM groups, unchanged under the real PVM 3.4 (libgpvm3 and its group
 * server) and under nexus-pvm (no server): join, barrier, broadcast,
 * reduce, gather and scatter among a master and the tasks it spawns. */
#include <limits.h>
#include <pvm3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NPROC 4
#define TAG_BCAST 20
#define TAG_REDUCE 21
#define TAG_GATHER 22
#define TAG_SCATTER 23
#define TAG_REPORT 24

static char group[] = "nxpvm-example";

int main(void) {
  if (pvm_mytid() < 0)
    return 77;
  int master = pvm_parent() == PvmNoParent;
  if (master) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
      return 1;
    self[len] = '\0';
    int tids[NPROC - 1];
    /* Join before spawning, so the master is instance 0. */
    if (pvm_joingroup(group) != 0)
      return 1;
    if (pvm_spawn(self, NULL, PvmTaskDefault, "", NPROC - 1, tids) !=
        NPROC - 1) {
      pvm_exit();
      return 1;
    }
  } else if (pvm_joingroup(group) < 0) {
    return 1;
  }
  int inst = pvm_getinst(group, pvm_mytid());
  pvm_barrier(group, NPROC);

  /* Instance 0 broadcasts; the others receive it (bcast skips the caller). */
  int value = 0;
  if (inst == 0) {
    value = 42;
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&value, 1, 1);
    pvm_bcast(group, TAG_BCAST);
  } else {
    pvm_recv(-1, TAG_BCAST);
    pvm_upkint(&value, 1, 1);
  }

  /* Reduce: the sum and the max of (inst + 1) * value, at instance 0. */
  int sum[2] = {(inst + 1) * value, inst * 10};
  int max[2] = {(inst + 1) * value, inst * 10};
  pvm_reduce(PvmSum, sum, 2, PVM_INT, TAG_REDUCE, group, 0);
  pvm_reduce(PvmMax, max, 2, PVM_INT, TAG_REDUCE + 100, group, 0);

  /* Gather every instance's number times 3, then scatter squares. */
  int mine = inst * 3, all[NPROC] = {0};
  pvm_gather(all, &mine, 1, PVM_INT, TAG_GATHER, group, 0);
  double squares[NPROC], got = -1;
  for (int i = 0; i < NPROC; i++)
    squares[i] = (double)i * i + 0.5;
  pvm_scatter(&got, squares, 1, PVM_DOUBLE, TAG_SCATTER, group, 0);

  /* Everyone reports to instance 0, which prints. */
  int gsize = pvm_gsize(group);
  if (inst != 0) {
    pvm_initsend(PvmDataDefault);
    pvm_pkint(&inst, 1, 1);
    pvm_pkint(&value, 1, 1);
    pvm_pkdouble(&got, 1, 1);
    pvm_send(pvm_gettid(group, 0), TAG_REPORT);
  } else {
    printf("group size %d\n", gsize);
    printf("bcast value %d\n", value);
    printf("reduce sum %d %d, max %d %d\n", sum[0], sum[1], max[0], max[1]);
    printf("gather");
    for (int i = 0; i < NPROC; i++)
      printf(" %d", all[i]);
    printf("\nscatter at 0: %.1f\n", got);
    double seen[NPROC] = {got};
    int vals[NPROC] = {value};
    for (int k = 1; k < NPROC; k++) {
      int i, v;
      double g;
      pvm_recv(-1, TAG_REPORT);
      pvm_upkint(&i, 1, 1);
      pvm_upkint(&v, 1, 1);
      pvm_upkdouble(&g, 1, 1);
      if (i > 0 && i < NPROC) {
        seen[i] = g;
        vals[i] = v;
      }
    }
    for (int i = 1; i < NPROC; i++)
      printf("instance %d: bcast value %d, scatter %.1f\n", i, vals[i],
             seen[i]);
  }
  pvm_barrier(group, NPROC);
  pvm_lvgroup(group);
  pvm_exit();
  return 0;
}
