/* A PVM master/worker program, unchanged under the real PVM 3.4 and under
 * nexus-pvm: the master spawns workers (this program again), hands each a
 * range of integers, and collects and prints the sums of their squares. */
#include <limits.h>
#include <pvm3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NWORK 3
#define TAG_WORK 1
#define TAG_RESULT 2

static int worker(void) {
  int parent = pvm_parent();
  if (parent < 0)
    return 1;
  int range[2];
  if (pvm_recv(parent, TAG_WORK) < 0 || pvm_upkint(range, 2, 1) < 0)
    return 1;
  long sum = 0;
  for (int i = range[0]; i < range[1]; i++)
    sum += (long)i * i;
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&range[0], 1, 1);
  pvm_pklong(&sum, 1, 1);
  pvm_send(parent, TAG_RESULT);
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (pvm_mytid() < 0)
    return 77; /* no PVM to run on */
  if (argc > 1 && strcmp(argv[1], "worker") == 0)
    return worker();
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0)
    return 1;
  self[len] = '\0';
  char *args[] = {"worker", NULL};
  int tids[NWORK];
  int n = pvm_spawn(self, args, PvmTaskDefault, "", NWORK, tids);
  if (n != NWORK) {
    fprintf(stderr, "master_worker: spawned %d of %d\n", n, NWORK);
    pvm_exit();
    return 1;
  }
  printf("parent of the master: %s\n",
         pvm_parent() == PvmNoParent ? "PvmNoParent" : "?");
  for (int w = 0; w < NWORK; w++) {
    int range[2] = {w * 100, (w + 1) * 100};
    pvm_initsend(PvmDataDefault);
    pvm_pkint(range, 2, 1);
    pvm_send(tids[w], TAG_WORK);
  }
  long sums[NWORK], total = 0;
  for (int w = 0; w < NWORK; w++) {
    int first, bytes, tag, src;
    long sum;
    int buf = pvm_recv(-1, TAG_RESULT);
    pvm_bufinfo(buf, &bytes, &tag, &src);
    pvm_upkint(&first, 1, 1);
    pvm_upklong(&sum, 1, 1);
    int known = 0;
    for (int i = 0; i < NWORK; i++)
      known |= tids[i] == src;
    if (!known || first % 100 != 0 || first / 100 >= NWORK) {
      printf("a result from an unknown task\n");
      pvm_exit();
      return 1;
    }
    sums[first / 100] = sum;
  }
  for (int w = 0; w < NWORK; w++) {
    printf("worker %d: sum of squares in [%d, %d) = %ld\n", w, w * 100,
           (w + 1) * 100, sums[w]);
    total += sums[w];
  }
  printf("total %ld\n", total);
  pvm_exit();
  return 0;
}
