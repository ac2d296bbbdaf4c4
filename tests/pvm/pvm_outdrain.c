/* A task whose output went to a catching task that then dies goes on
 * writing: its output is read and dropped from then on, so the task
 * neither blocks on a full pipe nor dies of SIGPIPE, and its process ends
 * (docs/pvm.md, "Where a spawned task's output goes"). nexus-pvm only:
 * the root spawns the catcher, which catches, spawns the writer and is
 * killed once the writer's pipe is in its hands; the writer then writes
 * far more than a pipe holds, tells the root how much and its pid, and
 * ends, which the root waits for (up to 20 s). Until the output loop, the
 * writer wrote it all but then hung in its atexit handler, whose join of
 * the thread that dropped its output never returned. */
#include <signal.h>
#include <stdlib.h>

#include "api/common.h"
#include "child_pid.h"

#define TAG_WRITER 1 /* catcher to root: the writer's tid */
#define TAG_READY 2  /* writer to catcher: its output is caught */
#define TAG_GONE 3   /* the catcher's exit notify, at the root */
#define TAG_GO 4     /* root to writer: write */
#define TAG_WROTE 5  /* writer to root: the bytes it wrote, its pid */
#define NBYTES (4 << 20)

static void send_int(int tid, int tag, int v) {
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&v, 1, 1);
  pvm_send(tid, tag);
}

static int catcher(void) {
  pvm_catchout(stdout);
  int w;
  if (spawn_self("writer", 1, &w) != 1 || recv_for(w, TAG_READY) <= 0)
    return 1;
  send_int(pvm_parent(), TAG_WRITER, w);
  if (recv_for(-1, TAG_GO) <= 0) /* never comes: the root kills us */
    return 1;
  return 0;
}

static int writer(void) {
  send_int(pvm_parent(), TAG_READY, 0);
  if (recv_for(-1, TAG_GO) <= 0)
    return 1;
  int root;
  pvm_upkint(&root, 1, 1);
  static char chunk[4096];
  memset(chunk, 'x', sizeof(chunk) - 1);
  chunk[sizeof(chunk) - 1] = '\n';
  long wrote = 0;
  for (; wrote < NBYTES; wrote += (long)sizeof(chunk))
    if (fwrite(chunk, 1, sizeof(chunk), stdout) != sizeof(chunk))
      break;
  fflush(stdout);
  int v[2] = {(int)wrote, (int)getpid()};
  pvm_initsend(PvmDataDefault);
  pvm_pkint(v, 2, 1);
  pvm_send(root, TAG_WROTE);
  pvm_exit();
  return 0;
}

int main(int argc, char **argv) {
  if (task_start() < 0)
    return 77;
  if (argc > 1 && strcmp(argv[1], "catcher") == 0)
    return catcher();
  if (argc > 1 && strcmp(argv[1], "writer") == 0)
    return writer();
  int c, w = 0, v[2] = {0, 0};
  NXT_EXPECT(spawn_self("catcher", 1, &c) == 1, 1);
  NXT_EXPECT(pvm_notify(PvmTaskExit, TAG_GONE, 1, &c) == PvmOk, 1);
  NXT_EXPECT(recv_for(c, TAG_WRITER) > 0, 1);
  pvm_upkint(&w, 1, 1);
  NXT_EXPECT(pvm_kill(c) == PvmOk, 1);
  NXT_EXPECT(recv_for(-1, TAG_GONE) > 0, 1);
  printf("the catcher has ended\n");
  send_int(w, TAG_GO, pvm_mytid());
  NXT_EXPECT(recv_for(w, TAG_WROTE) > 0, 1);
  pvm_upkint(v, 2, 1);
  printf("the writer wrote %d bytes after it\n", v[0]);
  NXT_EXPECT(v[0] == NBYTES, 1);
  int i = 0;
  for (; i < 2000 && !nxt_pid_ended(v[1]); i++)
    usleep(10000);
  printf("the writer's process has %s\n", i < 2000 ? "ended" : "not ended");
  NXT_EXPECT(i < 2000, 1);
  pvm_exit();
  return 0;
}
