/* A spawned task's output when nobody catches it (no pvm_catchout): it
 * goes to the task log, $PVM_TMP/pvml.<uid> ($PVM_TMP: /tmp when not set),
 * each line with the task's "[t<tid>] " before it, as PVM's pvmd writes
 * its tasks' output there; not to the spawner's stdout, so nothing of the
 * child's is in this program's output. The child writes two lines (stdout
 * and stderr) that carry this process's pid, so a line left in the log by
 * an earlier run is never taken for one of this run's; the spawner waits
 * until the child has left PVM, then looks for them in the log (for up to
 * 10 s: the real PVM's pvmd writes them when it has read them). */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define TAG_GONE 1

/* Whether the task log holds `text` after "[t<tid>] ". */
static int logged(int tid, const char *text) {
  const char *dir = getenv("PVM_TMP");
  char path[1024], want[256], line[1024];
  snprintf(path, sizeof(path), "%s/pvml.%u",
           dir != NULL && dir[0] != '\0' ? dir : "/tmp", (unsigned)getuid());
  snprintf(want, sizeof(want), "[t%x] %s", (unsigned)tid, text);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  int found = 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    size_t n = strlen(line), w = strlen(want);
    found = n >= w && strcmp(line + n - w, want) == 0;
  }
  fclose(f);
  return found;
}

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 2 && strcmp(argv[1], "child") == 0) {
    printf("to the log, for %s\n", argv[2]);
    fprintf(stderr, "to the log on stderr, for %s\n", argv[2]);
    pvm_exit();
    return 0;
  }
  char pid[32], self[PATH_MAX];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  NXT_EXPECT(len > 0, 1);
  self[len] = '\0';
  char *av[] = {"child", pid, NULL};
  int tid;
  NXT_EXPECT(pvm_spawn(self, av, PvmTaskDefault, "", 1, &tid) == 1, 1);
  printf("spawned a child that writes two lines\n");
  NXT_EXPECT(said("notify", pvm_notify(PvmTaskExit, TAG_GONE, 1, &tid), PvmOk),
             1);
  NXT_EXPECT(recv_for(-1, TAG_GONE) > 0, 1);
  char out[128], err[128];
  snprintf(out, sizeof(out), "to the log, for %s", pid);
  snprintf(err, sizeof(err), "to the log on stderr, for %s", pid);
  int got_out = 0, got_err = 0;
  for (int i = 0; i < 100 && !(got_out && got_err); i++) {
    if (i > 0)
      usleep(100000);
    got_out = logged(tid, out);
    got_err = logged(tid, err);
  }
  printf("its stdout line is in the task log: %s\n", got_out ? "yes" : "no");
  printf("its stderr line is in the task log: %s\n", got_err ? "yes" : "no");
  NXT_EXPECT(got_out && got_err, 1);
  pvm_exit();
  printf("done\n");
  return 0;
}
