/* A rank that released every gp of a sender before nx_finalize still tells
 * it that its RSRs ran (docs/design.md, section 9): run under nxrun -n 3.
 * Rank 1 sends rank 2 WORK RSRs; rank 2 handles them, releases its peers'
 * gps and finalizes at once, while rank 0 holds rank 1 back for a while;
 * then rank 1 releases its gps and finalizes. No RSR may be reported lost
 * (every one ran) and every nx_finalize returns 0. Exit 0, or 1 with the
 * reason on stderr. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nexus.h"

#define WORK 200

static atomic_int handled, quit, reports;
static int rank;

/* RSRs reported lost. A process that ended is reported too (handler 0,
 * when its module calls a closed connection a loss, as tcp's does): that
 * is no RSR. */
static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  if (handler == 0)
    return;
  atomic_fetch_add(&reports, 1);
  fprintf(stderr,
          "release_early: rank %d: reported %s (context %#llx, "
          "handler %#x)\n",
          rank, nx_strerror(err), (unsigned long long)context, handler);
}

static void on_work(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  atomic_fetch_add(&handled, 1);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  atomic_store(&quit, 1);
}

static void on_done(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  atomic_fetch_add(&handled, 1);
}

/* Polls until *flag reaches `want`, for at most 30 s. */
static int wait_for(atomic_int *flag, int want) {
  struct timespec ts = {0, 1000000};
  for (int i = 0; i < 30000; i++) {
    if (atomic_load(flag) >= want)
      return 0;
    nx_poll();
    nanosleep(&ts, NULL);
  }
  return -1;
}

static int send_to(nx_gp_t *gp, const char *handler) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, gp, handler, 0);
  return rc != 0 ? rc : nx_rsr_send(b);
}

static int fail(const char *what, int rc) {
  fprintf(stderr, "release_early: rank %d: %s: %s\n", rank, what,
          nx_strerror(rc));
  return 1;
}

int main(int argc, char **argv) {
  if (nx_init(&argc, &argv) != 0)
    return 1;
  nx_error_cb_set(on_error, NULL);
  nx_context_t *self = nx_context_self();
  if (nx_handler_register(self, "work", on_work, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "quit", on_quit, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "done", on_done, NX_HANDLER_NONTHREADED,
                          NULL) != 0)
    return fail("nx_handler_register", NX_EINVAL);
  nx_gp_t *peers;
  int n, rc;
  if ((rc = nx_context_peers(&peers, &n, &rank)) != 0)
    return fail("nx_context_peers (run under nxrun -n 3)", rc);
  if (n != 3)
    return fail("nxrun -n 3 expected", NX_EINVAL);
  int bad = 0;
  if (rank == 1) {
    for (int i = 0; i < WORK && rc == 0; i++)
      rc = send_to(&peers[2], "work");
    if (rc != 0)
      return fail("sending work", rc);
  } else if (rank == 2) {
    /* All ran: tell rank 0, wait for quit, then leave at once. */
    if (wait_for(&handled, WORK) != 0)
      return fail("the work did not arrive", NX_ETIMEDOUT);
    if ((rc = send_to(&peers[0], "done")) != 0)
      return fail("sending done", rc);
  } else {
    if (wait_for(&handled, 1) != 0)
      return fail("rank 2 did not report", NX_ETIMEDOUT);
    if ((rc = send_to(&peers[2], "quit")) != 0)
      return fail("quitting rank 2", rc);
    /* Rank 2 is on its way out: only then may rank 1 finalize. */
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    if ((rc = send_to(&peers[1], "quit")) != 0)
      return fail("quitting rank 1", rc);
  }
  if (rank != 0 && wait_for(&quit, 1) != 0)
    return fail("no quit", NX_ETIMEDOUT);
  /* The order of the README's first program: gps first, then finalize. */
  for (int i = 0; i < n; i++)
    nx_gp_release(&peers[i]);
  free(peers);
  if ((rc = nx_finalize()) != 0)
    bad = fail("nx_finalize", rc);
  if (atomic_load(&reports) != 0) {
    fprintf(stderr, "release_early: rank %d: %d report(s), none expected\n",
            rank, atomic_load(&reports));
    bad = 1;
  }
  return bad;
}
