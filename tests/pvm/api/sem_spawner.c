/* A spawner that exits while its children work: the first task spawns a
 * middle task, which spawns two workers and calls pvm_exit at once; the
 * workers go on, and send their results to the first task. A task runs
 * until it exits, whatever its spawner does. */
#include <stdlib.h>

#include "common.h"

#define TAG_RESULT 1
#define TAG_GONE 2

static int worker(int first) {
  /* Work until the spawner has left (its exit notify), then report. */
  int parent = pvm_parent();
  pvm_notify(PvmTaskExit, TAG_GONE, 1, &parent);
  int left = recv_for(-1, TAG_GONE) > 0;
  int *sib = NULL;
  int nsib = pvm_siblings(&sib), self = 0;
  for (int i = 0; i < nsib; i++)
    self += sib[i] == pvm_mytid();
  int r[5] = {left ? 21 : 0, parent > 0, pvm_pstat(parent), nsib, self};
  pvm_initsend(PvmDataDefault);
  pvm_pkint(r, 5, 1);
  pvm_send(first, TAG_RESULT);
  pvm_exit();
  return 0;
}

static int middle(void) {
  char first[32];
  snprintf(first, sizeof(first), "%d", pvm_parent());
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0)
    return 1;
  self[len] = '\0';
  char *argv[] = {"worker", first, NULL};
  int tids[2];
  int n = pvm_spawn(self, argv, PvmTaskDefault, "", 2, tids);
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&n, 1, 1);
  pvm_pkint(tids, 2, 1);
  pvm_send(pvm_parent(), TAG_RESULT);
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 2 && strcmp(argv[1], "worker") == 0)
    return worker(atoi(argv[2]));
  if (argc > 1 && strcmp(argv[1], "middle") == 0)
    return middle();
  int mid;
  if (spawn_self("middle", 1, &mid) != 1)
    return 1;
  pvm_notify(PvmTaskExit, TAG_GONE, 1, &mid);
  int n = 0, tids[2] = {0, 0};
  if (recv_for(mid, TAG_RESULT) <= 0)
    return 1;
  pvm_upkint(&n, 1, 1);
  pvm_upkint(tids, 2, 1);
  printf("the middle task spawned %d workers\n", n);
  NXT_EXPECT(n == 2, 1);
  int left = recv_for(-1, TAG_GONE) > 0;
  printf("it has left: %s\n", left ? "yes" : "no");
  NXT_EXPECT(left, 1);
  int sum = 0;
  for (int i = 0; i < n; i++) {
    int r[5] = {0, 0, 0, 0, 0}, bytes, tag, src;
    if (recv_for(-1, TAG_RESULT) <= 0) {
      printf("a worker did not report\n");
      break;
    }
    pvm_bufinfo(pvm_getrbuf(), &bytes, &tag, &src);
    pvm_upkint(r, 5, 1);
    sum += r[0];
    printf("a worker reported: spawned by the middle task %s, which it "
           "finds %s; %d siblings, itself among them %d time(s)\n",
           r[1] ? "yes" : "no", code(r[2]), r[3], r[4]);
    /* It saw its spawner leave, and still knows its spawner's tid (which
     * no longer names a task) and its siblings. */
    NXT_EXPECT(src == tids[0] || src == tids[1], 1);
    NXT_EXPECT(r[0] == 21 && r[1] && r[2] == PvmNoTask, 1);
    NXT_EXPECT(r[3] == 2 && r[4] == 1, 1);
  }
  printf("sum %d\n", sum);
  NXT_EXPECT(sum == 42, 1);
  pvm_exit();
  return 0;
}
