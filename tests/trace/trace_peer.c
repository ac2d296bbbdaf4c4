/* The traced program of nxtrace's real test (run_traced.py): two process
 * contexts under nxrun exchange a known number of RSRs.
 *
 * Usage: nxrun -n 2 trace_peer N. Rank 1 says "trace_hello" (no bytes)
 * once it knows rank 0 (a ping before would find no one to answer);
 * then rank 0 sends N "trace_ping" RSRs of 64 bytes to rank 1, which
 * answers each with a "trace_pong" of 16 bytes; when rank 0 has its N
 * pongs it sends one "trace_quit" (no bytes), and both end. So rank 0 ->
 * rank 1: N + 1 RSRs, at least 64 N bytes; rank 1 -> rank 0: N + 1 RSRs,
 * at least 16 N bytes; runs: N trace_ping and 1 trace_quit on rank 1, N
 * trace_pong and 1 trace_hello on rank 0. Each rank prints "rank R
 * context HEX" for the test. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus.h"

#define WATCHDOG_S 60

static nx_mutex_t lock;
static nx_cond_t cond;
static long pongs;
static int quit, hello;
static nx_gp_t peer; /* the other rank's context, set under lock */

static void fail(const char *what, int r) {
  fprintf(stderr, "trace_peer: %s: %s\n", what, nx_strerror(r));
  exit(1);
}

static void send_payload(const char *handler, size_t bytes) {
  nx_buffer_t *b;
  nx_mutex_lock(&lock);
  nx_gp_t to = peer;
  nx_mutex_unlock(&lock);
  int r = nx_rsr_init_name(&b, &to, handler, bytes);
  if (r < 0)
    fail("nx_rsr_init_name", r);
  if (bytes > 0) {
    char payload[64] = {0};
    r = nx_put_bytes(b, payload, bytes);
    if (r < 0)
      fail("nx_put_bytes", r);
  }
  r = nx_rsr_send(b);
  if (r < 0)
    fail("nx_rsr_send", r);
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  send_payload("trace_pong", 16);
}

static void on_hello(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&lock);
  hello = 1;
  nx_cond_broadcast(&cond);
  nx_mutex_unlock(&lock);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&lock);
  pongs++;
  nx_cond_broadcast(&cond);
  nx_mutex_unlock(&lock);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&lock);
  quit = 1;
  nx_cond_broadcast(&cond);
  nx_mutex_unlock(&lock);
}

int main(int argc, char **argv) {
  alarm(WATCHDOG_S);
  /* TRACE_PEER_HOSTS=1: each rank claims a host of its own (NX_HOST_ID),
   * so that nxtrace lines the two "hosts" up by the clock offsets they
   * measured; both read this machine's one clock. */
  const char *rank_env = getenv("NX_RANK");
  if (getenv("TRACE_PEER_HOSTS") != NULL && rank_env != NULL) {
    char host[64];
    snprintf(host, sizeof(host), "trace-peer-host-%s", rank_env);
    setenv("NX_HOST_ID", host, 1);
  }
  int r = nx_init(&argc, &argv);
  if (r < 0)
    fail("nx_init", r);
  long n = argc > 1 ? atol(argv[1]) : 0;
  if (n <= 0) {
    fprintf(stderr, "usage: nxrun -n 2 trace_peer N\n");
    return 2;
  }
  nx_mutex_init(&lock);
  nx_cond_init(&cond);
  nx_context_t *self = nx_context_self();
  if ((r = nx_handler_register(self, "trace_ping", on_ping,
                               NX_HANDLER_NONTHREADED, NULL)) < 0 ||
      (r = nx_handler_register(self, "trace_pong", on_pong,
                               NX_HANDLER_NONTHREADED, NULL)) < 0 ||
      (r = nx_handler_register(self, "trace_quit", on_quit,
                               NX_HANDLER_NONTHREADED, NULL)) < 0 ||
      (r = nx_handler_register(self, "trace_hello", on_hello,
                               NX_HANDLER_NONTHREADED, NULL)) < 0)
    fail("nx_handler_register", r);
  nx_gp_t *gps = NULL;
  int count = 0, rank = -1;
  r = nx_context_peers(&gps, &count, &rank);
  if (r < 0)
    fail("nx_context_peers", r);
  if (count != 2) {
    fprintf(stderr, "trace_peer: %d contexts, not 2\n", count);
    return 2;
  }
  nx_mutex_lock(&lock);
  peer = gps[1 - rank];
  nx_mutex_unlock(&lock);
  char id[64];
  snprintf(id, sizeof(id), "%016" PRIx64, nx_gp_context(&gps[rank]));
  printf("rank %d context %s\n", rank, id);
  fflush(stdout);
  if (rank == 0) {
    nx_mutex_lock(&lock);
    while (!hello)
      nx_cond_wait(&cond, &lock);
    nx_mutex_unlock(&lock);
    for (long i = 0; i < n; i++)
      send_payload("trace_ping", 64);
    nx_mutex_lock(&lock);
    while (pongs < n)
      nx_cond_wait(&cond, &lock);
    nx_mutex_unlock(&lock);
    send_payload("trace_quit", 0);
  } else {
    send_payload("trace_hello", 0);
    nx_mutex_lock(&lock);
    while (!quit)
      nx_cond_wait(&cond, &lock);
    nx_mutex_unlock(&lock);
  }
  for (int i = 0; i < count; i++)
    nx_gp_release(&gps[i]);
  free(gps);
  r = nx_finalize();
  if (r < 0)
    fail("nx_finalize", r);
  return 0;
}
