/* The raw RSR ping-pong the Fortran channel benchmark is measured against: the
 * same values, the same copies in and out, through bare RSRs to a peer process
 * (rsr_echo) over the same module. Called from Fortran: start the peer, time
 * batches of round trips (alternating with the channel's), stop. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nexus.h"

static nx_mutex_t m;
static nx_cond_t c;
static long replies;
static double *sink, *src;
static size_t sink_n;
static nx_node_t node;
static nx_gp_t peer = NX_GP_NULL, self = NX_GP_NULL;
static int started;

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

void fm_bench_pin(int all);
int fm_bench_rsr_start(const char *echo_exe, int nmax, char *proto, int len);
double fm_bench_rsr_batch(int n, int iters);
void fm_bench_rsr_stop(void);

/* The CPUs this process could use when it first called fm_bench_pin. */
static cpu_set_t all_cpus;
static int all_read;

/* Pins the benchmark's processes, as MPI binds its ranks: in the main
 * program (FM_BENCH_ECHO_CPU unset), the calling thread and the threads it
 * starts later to its first CPU, and FM_BENCH_ECHO_CPU is set to the
 * second for the echo processes it starts, which pin themselves there
 * (the fm echo here, rsr_echo in its main). So the ping side and the echo
 * side never share a core while the other one idles. With `all`, the
 * calling thread goes back to every CPU (before mpirun, which binds its
 * ranks itself). Nothing with fewer than two CPUs. */
void fm_bench_pin(int all) {
  if (!all_read) {
    sched_getaffinity(0, sizeof(all_cpus), &all_cpus);
    all_read = 1;
  }
  cpu_set_t set = all_cpus;
  const char *echo = getenv("FM_BENCH_ECHO_CPU");
  if (all) {
    sched_setaffinity(0, sizeof(set), &set);
    return;
  }
  if (echo != NULL) {
    CPU_ZERO(&set);
    CPU_SET(atoi(echo), &set);
    sched_setaffinity(0, sizeof(set), &set);
    return;
  }
  int first = -1, second = -1;
  for (int i = 0; i < CPU_SETSIZE && second < 0; i++)
    if (CPU_ISSET(i, &all_cpus)) {
      if (first < 0)
        first = i;
      else
        second = i;
    }
  if (second < 0)
    return;
  char buf[16];
  snprintf(buf, sizeof(buf), "%d", second);
  setenv("FM_BENCH_ECHO_CPU", buf, 1);
  CPU_ZERO(&set);
  CPU_SET(first, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

/* Starts the peer: a new rsr_echo process context, for arrays of up to
 * `nmax` doubles. Writes the module's name into proto (len bytes). 0 on
 * success. */
int fm_bench_rsr_start(const char *echo_exe, int nmax, char *proto, int len) {
  char *argv[] = {(char *)echo_exe, NULL};
  snprintf(proto, (size_t)len, "none");
  nx_mutex_init(&m);
  nx_cond_init(&c);
  sink_n = nmax > 0 ? (size_t)nmax : 1;
  sink = calloc(sink_n, sizeof(double));
  src = calloc(sink_n, sizeof(double));
  if (sink == NULL || src == NULL ||
      nx_handler_register(nx_context_self(), "pong", on_pong,
                          NX_HANDLER_NONTHREADED, NULL) != 0 ||
      nx_nodes_acquire("localhost", 1, &node) != 0)
    goto err;
  if (nx_context_create(&node, echo_exe, argv, &peer) != 0)
    goto err_node;
  if (nx_gp_make(NULL, &self) != 0)
    goto err_ctx;
  const char *p = nx_gp_protocol(&peer);
  snprintf(proto, (size_t)len, "%s", p ? p : "none");
  started = 1;
  return 0;
err_ctx:
  nx_context_destroy(&peer);
  nx_gp_release(&peer);
err_node:
  nx_node_release(&node);
err:
  free(sink);
  free(src);
  return -1;
}

/* Microseconds per round trip, the mean of `iters` round trips of `n`
 * doubles (n == 0: one int32). Negative on failure. */
double fm_bench_rsr_batch(int n, int iters) {
  if (!started || (size_t)n > sink_n || iters <= 0)
    return -1;
  nx_buffer_t *b;
  double t0 = now_us();
  for (int i = 0; i < iters; i++) {
    size_t hint = n > 0 ? nx_sizeof_double((size_t)n) + 64 : 64;
    if (nx_rsr_init_name(&b, &peer, "ping", hint) != 0)
      return -1;
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
      return -1;
    nx_mutex_lock(&m);
    while (replies < want)
      nx_cond_wait(&c, &m);
    nx_mutex_unlock(&m);
  }
  return (now_us() - t0) / iters;
}

/* Ends the peer. */
void fm_bench_rsr_stop(void) {
  if (!started)
    return;
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &peer, "quit", 8) == 0)
    nx_rsr_send(b);
  nx_context_destroy(&peer);
  nx_gp_release(&peer);
  nx_gp_release(&self);
  nx_node_release(&node);
  free(sink);
  free(src);
  started = 0;
}
