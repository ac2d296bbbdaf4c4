/* The peer of the protocol conformance suite: a process context whose handlers
 * echo, check and count what the suite sends. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"
#include "conf_handlers.h"

/* Usage: conf_peer          started by the suite with nx_context_create;
 *        conf_peer --job    rank 1 of an MPI job whose rank 0 is the suite
 *                           (mpi): serves until rank 0 sends "conf_quit".
 * A watchdog ends a job rank that is never told to quit. */

#define JOB_WATCHDOG_S 300

static nx_mutex_t quit_lock;
static nx_cond_t quit_cond;
static int quit;

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&quit_lock);
  quit = 1;
  nx_cond_broadcast(&quit_cond);
  nx_mutex_unlock(&quit_lock);
}

static int serve_job(void) {
  nx_gp_t *gps = NULL;
  int count = 0, rank = -1;
  nx_mutex_init(&quit_lock);
  nx_cond_init(&quit_cond);
  if (nx_handler_register(nx_context_self(), "conf_quit", on_quit,
                          NX_HANDLER_NONTHREADED, NULL) != 0 ||
      nx_context_peers(&gps, &count, &rank) != 0) {
    fprintf(stderr, "conf_peer: not a rank of a job\n");
    return 1;
  }
  nx_mutex_lock(&quit_lock);
  while (!quit)
    nx_cond_wait(&quit_cond, &quit_lock);
  nx_mutex_unlock(&quit_lock);
  for (int i = 0; i < count; i++)
    nx_gp_release(&gps[i]);
  free(gps);
  return 0;
}

int main(int argc, char **argv) {
  int job = argc > 1 && strcmp(argv[1], "--job") == 0;
  if (job)
    alarm(JOB_WATCHDOG_S);
  if (nx_init(&argc, &argv) != 0)
    return 2;
  if (conf_register(nx_context_self()) != 0)
    return 3;
  int r = job ? serve_job() : nx_context_serve();
  nx_finalize();
  return r == 0 ? 0 : 1;
}
