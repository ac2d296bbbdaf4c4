/* The root task (which keeps the groups, mailboxes and task directory)
 * dies, killed: a task it spawned gets PvmSysErr from its next group and
 * mailbox calls, soon, and never hangs. The process started by hand forks
 * the root, so the test sees a clean exit. nexus-pvm only. */
#include <pvm3.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int child(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  pvm_setopt(PvmAutoErr, 0);
  struct timeval tv = {20, 0};
  if (pvm_trecv(pvm_parent(), 1, &tv) <= 0)
    return 1;
  printf("before: size %d\n", pvm_gsize("nxt_g"));
  pvm_initsend(PvmDataDefault);
  pvm_send(pvm_parent(), 2); /* the root dies when it has this */
  double t0 = now();
  int rc;
  while ((rc = pvm_gsize("nxt_g")) >= 0 && now() - t0 < 60)
    usleep(10000);
  printf("after: gsize %s, within 30 s %s\n",
         rc == PvmSysErr ? "PvmSysErr" : "something else",
         now() - t0 < 30 ? "yes" : "no");
  int id = pvm_mkbuf(PvmDataDefault);
  printf("putinfo: %s\n",
         pvm_putinfo("nxt_m", id, 0) == PvmSysErr ? "PvmSysErr" : "other");
  printf("joingroup: %s\n",
         pvm_joingroup("nxt_h") == PvmSysErr ? "PvmSysErr" : "other");
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    if (pvm_mytid() < 0)
      return 77;
    return child();
  }
  pid_t pid = fork();
  if (pid < 0)
    return 1;
  if (pid > 0) {
    int st;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : 1;
  }
  if (pvm_mytid() < 0)
    _exit(77);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0)
    _exit(1);
  self[len] = '\0';
  char *av[] = {"child", NULL};
  int tid;
  if (pvm_joingroup("nxt_g") != 0 ||
      pvm_spawn(self, av, PvmTaskDefault, "", 1, &tid) != 1)
    _exit(1);
  pvm_initsend(PvmDataDefault);
  pvm_send(tid, 1);
  pvm_recv(tid, 2);
  raise(SIGKILL);
  return 1;
}
