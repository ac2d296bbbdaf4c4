/* The raw RSR anchor's peer: a process context whose main thread answers every
 * "ping" (one int32, or an array of doubles) with the same values in "pong",
 * until "quit". */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench_args.h"
#include "nexus.h"

/* The handler hands each ping to the main thread, which answers it: the
 * same structure as an fm process receiving on a channel, without fm. */
static nx_mutex_t m;
static nx_cond_t c;
static nx_buffer_t *pending;
static int quit;

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  if (nx_buffer_retain(buf) != 0)
    return;
  nx_mutex_lock(&m);
  if (pending != NULL) /* one at a time: a ping-pong */
    nx_buffer_release(pending);
  pending = buf;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static void end(void) {
  nx_mutex_lock(&m);
  quit = 1;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static void on_quit(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  end();
}

/* The creator died: stop waiting for it. */
static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)context;
  (void)arg;
  if (err == NX_EPEERDEAD && handler == 0)
    end();
}

/* Reads the values out, as a receiver would, and sends them back. */
static void answer(nx_buffer_t *buf, double *scratch, size_t scratch_n) {
  nx_gp_t reply = NX_GP_NULL;
  int32_t kind, v = 0;
  uint64_t n = 0;
  nx_buffer_t *out;
  if (nx_get_gp(buf, &reply) != 0 || nx_get_int32(buf, &kind) != 0)
    return;
  if (kind == 0 && nx_get_int32(buf, &v) == 0 &&
      nx_rsr_init_name(&out, &reply, "pong", 16) == 0) {
    nx_put_int32(out, v);
    nx_rsr_send(out);
  } else if (kind == 1 && nx_get_uint64(buf, &n) == 0 && n <= scratch_n &&
             nx_get_double_array(buf, scratch, n) == 0 &&
             nx_rsr_init_name(&out, &reply, "pong", nx_sizeof_double(n)) == 0) {
    nx_put_uint64(out, n);
    nx_put_double_array(out, scratch, n);
    nx_rsr_send(out);
  }
  nx_gp_release(&reply);
}

static const char usage[] =
    "usage: fm_rsr_echo   (no arguments)\n"
    "  The peer of fm_bench_pingpong's raw RSR anchor, started by it as a\n"
    "  process context (nx_context_create): answers every \"ping\" with "
    "the same\n"
    "  values in \"pong\" until \"quit\". Not run by hand.\n";

int main(int argc, char **argv) {
  if (argc > 1 && bench_is_help(argv[1]))
    return bench_help(usage);
  if (argc > 1)
    return bench_bad_arg("fm_rsr_echo", argv[1], NULL, usage);
  /* On the echo side's CPU (rsr_anchor.c, fm_bench_pin), before nx_init
   * starts threads. */
  const char *cpu = getenv("FM_BENCH_ECHO_CPU");
  if (cpu != NULL) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(cpu), &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  size_t scratch_n = (size_t)1 << 19; /* 4 MiB of doubles */
  double *scratch = malloc(scratch_n * sizeof(double));
  if (scratch == NULL || nx_init(&argc, &argv) != 0)
    return 1;
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_context_t *self = nx_context_self();
  if (nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "quit", on_quit, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_error_cb_set(on_error, NULL) != 0 || nx_context_ready() != 0)
    return 1;
  nx_mutex_lock(&m);
  while (!quit) {
    if (pending == NULL) {
      nx_cond_wait(&c, &m); /* as fm_receive waits */
      continue;
    }
    nx_buffer_t *buf = pending;
    pending = NULL;
    nx_mutex_unlock(&m);
    answer(buf, scratch, scratch_n);
    nx_buffer_release(buf);
    nx_mutex_lock(&m);
  }
  if (pending != NULL)
    nx_buffer_release(pending);
  nx_mutex_unlock(&m);
  nx_finalize();
  free(scratch);
  return 0;
}
