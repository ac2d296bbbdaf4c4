/* What ordered delivery (NX_RSR_ORDERED, docs/design.md section 7) costs:
 * one-way streams of 8 B RSRs from this process's initial context to
 * itself (the local module: no transport, so what differs between the
 * rows is the core's numbering, admitting and counting on), sent without
 * and with the flag, in alternating runs of one process; and the same
 * through a threaded handler. Prints the best time per RSR of each and
 * the ratio ordered / plain.
 * Usage: bench_order [--quick] */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

static atomic_long handled;

static void on_sink(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
}

/* Sends `n` RSRs for `handler` at `to` with `flags`, then drives progress
 * until all ran; returns the time per RSR in ns. */
static double stream(const nx_gp_t *to, nx_handler_id_t handler, unsigned flags,
                     long n) {
  long want = atomic_load(&handled) + n;
  double t0 = bench_now_us();
  for (long i = 0; i < n; i++) {
    nx_buffer_t *b;
    int rc = nx_rsr_init(&b, to, handler, 8);
    if (rc == 0)
      rc = nx_put_uint64(b, (uint64_t)i);
    if (rc == 0)
      rc = nx_rsr_send_flags(b, flags);
    if (rc != 0)
      bench_die("send", nx_strerror(rc));
    /* Keep what is queued bounded, as a program with a reply would. */
    if ((i & 255) == 255)
      while (atomic_load(&handled) < want - n + i - 1024)
        nx_poll();
  }
  double t_end = bench_now_us() + 30e6;
  while (atomic_load(&handled) < want) {
    nx_poll();
    if (bench_now_us() > t_end)
      bench_die("stream", "RSRs did not all run within 30 s");
  }
  return (bench_now_us() - t0) * 1e3 / (double)n;
}

static const char usage[] =
    "usage: bench_order [--quick]\n"
    "  One-way streams of 8 B RSRs to this process's own context, without "
    "and\n"
    "  with NX_RSR_ORDERED, through a non-threaded and a threaded "
    "handler;\n"
    "  prints the best time per RSR of each and the ratio ordered / "
    "plain.\n"
    "  --quick   fewer RSRs and runs\n";

int main(int argc, char **argv) {
  bench_name = "bench_order";
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (bench_is_help(argv[i]))
      return bench_help(usage);
    else
      return bench_bad_arg("bench_order", argv[i], NULL, usage);
  }
  long n = quick ? 20000 : 200000;
  int runs = quick ? 3 : 7;
  if (nx_init(&argc, &argv) != 0)
    bench_die("nx_init", NULL);
  nx_context_t *self = nx_context_self();
  if (nx_handler_register(self, "sink", on_sink, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "sink_t", on_sink, NX_HANDLER_THREADED, NULL) !=
          0)
    bench_die("nx_handler_register", NULL);
  nx_gp_t me;
  if (nx_gp_make(NULL, &me) != 0)
    bench_die("nx_gp_make", NULL);
  struct {
    const char *name;
    nx_handler_id_t id;
  } kinds[] = {{"non-threaded", nx_handler_id("sink")},
               {"threaded", nx_handler_id("sink_t")}};
  printf("bench_order: one-way 8 B RSRs to this process's own context, "
         "best of %d runs of %ld, alternating\n",
         runs, n);
  printf("%-14s %12s %12s %10s\n", "handler", "plain ns", "ordered ns",
         "ordered/plain");
  for (int k = 0; k < 2; k++) {
    double best[2] = {1e30, 1e30};
    stream(&me, kinds[k].id, 0, n / 10); /* warm: buffers, stacks, table */
    stream(&me, kinds[k].id, NX_RSR_ORDERED, n / 10);
    for (int r = 0; r < runs; r++)
      for (int o = 0; o < 2; o++) {
        double t = stream(&me, kinds[k].id, o ? NX_RSR_ORDERED : 0, n);
        if (t < best[o])
          best[o] = t;
      }
    printf("%-14s %12.1f %12.1f %9.2fx\n", kinds[k].name, best[0], best[1],
           best[1] / best[0]);
  }
  nx_gp_release(&me);
  nx_finalize();
  return 0;
}
