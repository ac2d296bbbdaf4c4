/* The raw RSR ping-pong the Fortran channel benchmark is measured against: the
 * same values, the same copies in and out, through bare RSRs to a peer process
 * (rsr_echo) over the same module. Called from Fortran. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nexus.h"

static nx_mutex_t m;
static nx_cond_t c;
static long replies;
static double *sink;
static size_t sink_n;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  int32_t v;
  uint64_t n;
  /* Copy the values out, as a receiver would. */
  if (nx_get_int32(buf, &v) != 0 && nx_get_uint64(buf, &n) == 0 && n <= sink_n)
    nx_get_double_array(buf, sink, n);
  nx_mutex_lock(&m);
  replies++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

double fm_bench_rsr(const char *echo_exe, int n, int iters, char *proto,
                    int len);

/* Median microseconds per round trip of `n` doubles (n == 0: one int32)
 * over `iters` rounds after a warm-up, to a new rsr_echo process context.
 * Writes the module's name into proto (len bytes). Returns a negative
 * value on failure. */
double fm_bench_rsr(const char *echo_exe, int n, int iters, char *proto,
                    int len) {
  nx_node_t node;
  nx_gp_t peer = NX_GP_NULL, self = NX_GP_NULL;
  double result = -1;
  snprintf(proto, (size_t)len, "none");
  nx_mutex_init(&m);
  nx_cond_init(&c);
  sink_n = n > 0 ? (size_t)n : 1;
  sink = calloc(sink_n, sizeof(double));
  double *src = calloc(sink_n, sizeof(double));
  double *t = calloc((size_t)iters, sizeof(double));
  char *argv[] = {(char *)echo_exe, NULL};
  if (sink == NULL || src == NULL || t == NULL ||
      nx_handler_register(nx_context_self(), "pong", on_pong,
                          NX_HANDLER_NONTHREADED, NULL) != 0 ||
      nx_nodes_acquire("localhost", 1, &node) != 0)
    goto out;
  if (nx_context_create(&node, echo_exe, argv, &peer) != 0 ||
      nx_gp_make(NULL, &self) != 0)
    goto out_node;
  const char *p = nx_gp_protocol(&peer);
  snprintf(proto, (size_t)len, "%s", p ? p : "none");
  nx_buffer_t *b;
  for (int i = -iters / 10 - 1; i < iters; i++) {
    double t0 = now_us();
    size_t hint = n > 0 ? nx_sizeof_double((size_t)n) + 64 : 64;
    if (nx_rsr_init_name(&b, &peer, "ping", hint) != 0)
      goto out_ctx;
    nx_put_gp(b, &self);
    nx_put_int32(b, n > 0);
    if (n > 0) {
      nx_put_uint64(b, (uint64_t)n);
      nx_put_double_array(b, src, (size_t)n);
    } else {
      nx_put_int32(b, i);
    }
    nx_mutex_lock(&m);
    long want = replies + 1;
    nx_mutex_unlock(&m);
    if (nx_rsr_send(b) != 0)
      goto out_ctx;
    nx_mutex_lock(&m);
    while (replies < want)
      nx_cond_wait(&c, &m);
    nx_mutex_unlock(&m);
    if (i >= 0)
      t[i] = now_us() - t0;
  }
  /* The median. */
  for (int i = 1; i < iters; i++)
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  result = t[iters / 2];
out_ctx:
  if (nx_rsr_init_name(&b, &peer, "quit", 8) == 0)
    nx_rsr_send(b);
  nx_context_destroy(&peer);
  nx_gp_release(&peer);
  nx_gp_release(&self);
out_node:
  nx_node_release(&node);
out:
  free(sink);
  free(src);
  free(t);
  return result;
}
