/* What the spin and yield budgets buy: the spin phase (NX_SPIN_US, default
 * 50 us, with its first NXI_SPIN_PURE_NS of pauses: nexus/src/engine/engine.h,
 * waiter.c, primary.c) and the 1 ms yield phase after it. 8 B RSR round
 * trips with NX_SPIN_US=0, 50 and 1000 in turns within each run: in process
 * over the local module (non-threaded and threaded handlers) and between
 * two processes over tcp (pinned to a core each, as bench_rsr_tcp runs
 * them, and unpinned). Then over tcp with the echo delayed, so that the
 * waiting thread's reply comes in its spin phase, in its yield phase, and
 * after it, asleep: what a round trip costs on top of the delay, and the
 * CPU time the waiting process spends per round trip. */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

/* Usage: bench_spin [--quick]. The tcp peer is this program again
 * ("--child <fd> <parent pid> <cpu>"). */

static const unsigned spins[] = {0, 50, 1000};
#define NSPINS 3
#define DEFAULT_SPIN 1 /* spins[1]: NX_SPIN_US's default */

enum system { LOCAL_NT, LOCAL_T, TCP_PINNED, TCP_FREE, NSYSTEMS };
static const char *const system_label[NSYSTEMS] = {
    "in process (local), non-threaded", "in process (local), threaded",
    "two processes over tcp, pinned", "two processes over tcp, unpinned"};

/* The echo's delays: in the spin phase (none), in the yield phase (from
 * NX_SPIN_US to NX_SPIN_US + 1 ms), and past it: at 1.5 ms the waiter
 * sleeps on its futex while the progress thread, which deferred to it,
 * may be in a 1 ms sleep nothing wakes (primary.c, DEFER_SLEEP_MS); at
 * 5 ms both sleep where a reply wakes them. */
static const unsigned delays[] = {0, 200, 1500, 5000};
#define NDELAYS 4
#define ASLEEP 3 /* delays[ASLEEP]: the yield phase's verdict compares it */

#define MAX_RUNS 9
static int runs = 5;
static int quick;

static double cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec * 1e6 + ru.ru_utime.tv_usec +
         ru.ru_stime.tv_sec * 1e6 + ru.ru_stime.tv_usec;
}

static void die_nx(const char *what, int rc) {
  bench_die(what, nx_strerror(rc));
}

/* The handlers. "ping" carries the echo's delay in microseconds; the echo
 * busy-waits that long, then answers "pong" to `reply`. */
static nx_gp_t local_reply; /* in process: the main context */

static void echo(nx_buffer_t *buf, const nx_gp_t *reply) {
  uint64_t delay = 0;
  nx_get_uint64(buf, &delay);
  if (delay > 0) {
    double until = bench_now_us() + (double)delay;
    while (bench_now_us() < until)
      ;
  }
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, reply, "pong", 0) == 0)
    nx_rsr_send(out);
}

static void on_ping_local(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  echo(buf, &local_reply);
}

static void on_ping_tcp(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  echo(buf, &bench_reply_gp);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  bench_reply_arrived();
}

static int peer_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  int r = nx_handler_register(ctx, "ping", on_ping_local,
                              NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_threaded", on_ping_local,
                            NX_HANDLER_THREADED, NULL);
  return r;
}

/* `n` timed round trips after `n / 10` untimed ones, the main thread
 * waiting in nx_cond_wait (bench_wait_replies). Returns the time per round
 * trip; *cpu the CPU time this process spent per round trip. */
static double round_trips(const nx_gp_t *to, const char *handler,
                          unsigned delay, int n, double *cpu) {
  nx_handler_id_t hid = nx_handler_id(handler);
  double t0 = 0, c0 = 0;
  for (int i = -n / 10 - 1; i < n; i++) {
    if (i == 0) {
      t0 = bench_now_us();
      c0 = cpu_us();
    }
    nx_buffer_t *b;
    int rc = nx_rsr_init(&b, to, hid, nx_sizeof_int64(1));
    if (rc == 0 && (rc = nx_put_uint64(b, delay)) != 0)
      nx_buffer_release(b);
    long want = bench_next_reply();
    if (rc != 0 || (rc = nx_rsr_send(b)) != 0)
      die_nx("ping", rc);
    bench_wait_replies(want, 30);
  }
  *cpu = (cpu_us() - c0) / n;
  return (bench_now_us() - t0) / n;
}

/* One run of system `s` with NX_SPIN_US=`spin` (read by nx_init, and by
 * the tcp peer's, which inherits it): a fresh nx_init, and for tcp a fresh
 * peer process. */
static double run(enum system s, unsigned spin, unsigned delay, int n,
                  double *cpu) {
  char v[16];
  snprintf(v, sizeof(v), "%u", spin);
  setenv("NX_SPIN_US", v, 1);
  int tcp = s == TCP_PINNED || s == TCP_FREE;
  setenv("NX_PROTOCOLS", tcp ? "tcp" : "local", 1);
  struct bench_child child;
  if (tcp) {
    bench_child_spawn(&child, s == TCP_PINNED ? "1" : "-1");
    bench_pin_to(s == TCP_PINNED ? 0
                                 : -1); /* before nx_init: its threads too */
  }
  int rc = nx_init(NULL, NULL);
  if (rc != 0)
    die_nx("nx_init", rc);
  bench_sync_init();
  nx_handler_register(nx_context_self(), "pong", on_pong,
                      NX_HANDLER_NONTHREADED, NULL);
  double t;
  if (tcp) {
    bench_child_connect(&child, "tcp");
    t = round_trips(&child.gp, "ping", delay, n, cpu);
    bench_child_stop(&child);
  } else {
    nx_gp_t peer;
    if ((rc = nx_gp_make(NULL, &local_reply)) != 0 ||
        (rc = nx_context_create_local(peer_init, NULL, &peer)) != 0)
      die_nx("the in-process peer", rc);
    t = round_trips(&peer, s == LOCAL_T ? "ping_threaded" : "ping", delay, n,
                    cpu);
    nx_context_destroy(&peer);
    nx_gp_release(&peer);
    nx_gp_release(&local_reply);
  }
  if ((rc = nx_finalize()) != 0)
    die_nx("nx_finalize", rc);
  bench_pin_to(-1);
  return t;
}

static double median(double *v, int n) {
  double best;
  return bench_median(v, n, &best);
}

static double fastest(double *v, int n) {
  double best;
  bench_median(v, n, &best);
  return best;
}

static const char usage[] =
    "usage: bench_spin [--quick]\n"
    "  What the spin and yield budgets buy (NX_SPIN_US 0, 50, 1000): "
    "round\n"
    "  trips in process and over tcp, their times, CPU use, ratios and\n"
    "  verdicts.\n"
    "  --quick   one run\n";

int main(int argc, char **argv) {
  bench_cpus_init();
  bench_name = "bench_spin";
  int child = bench_child_run(argc, argv, on_ping_tcp);
  if (child >= 0)
    return child;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
      runs = 1;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_spin", argv[i], NULL, usage);
    }
  }
  if (CPU_COUNT(&bench_all_cpus) < 2)
    printf("note: one CPU only: the pinned rows share it\n");
  bench_set_key();
  unsetenv("NX_PROGRESS");
  double load = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f != NULL) {
    if (fscanf(f, "%lf", &load) != 1)
      load = NAN;
    fclose(f);
  }

  /* 1. 8 B round trips by NX_SPIN_US; systems and values take turns
   * within each run. */
  int n_local = quick ? 2000 : 50000, n_tcp = quick ? 300 : 5000;
  double t[NSYSTEMS][NSPINS][MAX_RUNS], c[NSYSTEMS][NSPINS][MAX_RUNS];
  for (int r = 0; r < runs; r++)
    for (int s = 0; s < NSYSTEMS; s++)
      for (int k = 0; k < NSPINS; k++)
        t[s][k][r] = run((enum system)s, spins[k], 0,
                         s <= LOCAL_T ? n_local : n_tcp, &c[s][k][r]);
  printf("8 B RSR round trip by NX_SPIN_US (median of %d runs, the values in "
         "turns; load %.2f)\n",
         runs, load);
  printf("  %-34s %21s %21s %21s\n", "", "NX_SPIN_US=0", "=50 (default)",
         "=1000");
  printf("  %-34s %21s %21s %21s\n", "", "time   cpu/rt", "time   cpu/rt",
         "time   cpu/rt");
  double ratio[NSYSTEMS][NSPINS], fast[NSYSTEMS][NSPINS];
  for (int s = 0; s < NSYSTEMS; s++) {
    printf("  %-34s", system_label[s]);
    double med[NSPINS];
    for (int k = 0; k < NSPINS; k++) {
      med[k] = median(t[s][k], runs);
      printf(" %8.2f us %7.2f us", med[k], median(c[s][k], runs));
    }
    printf("\n");
    for (int k = 0; k < NSPINS; k++) {
      ratio[s][k] = med[k] / med[DEFAULT_SPIN];
      fast[s][k] = fastest(t[s][k], runs) / fastest(t[s][DEFAULT_SPIN], runs);
    }
  }
  printf("ratios against the default (above 1: the default is faster)\n");
  printf("  %-34s %14s %14s %28s\n", "", "0 / 50", "1000 / 50",
         "(fastest runs: 0/50, 1000/50)");
  for (int s = 0; s < NSYSTEMS; s++)
    printf("  %-34s %13.2fx %13.2fx %13.2fx %13.2fx\n", system_label[s],
           ratio[s][0], ratio[s][2], fast[s][0], fast[s][2]);
  printf("verdicts (the spin phase pays where NX_SPIN_US=0 is more than 1.1x "
         "slower; a\nlonger one would pay where 1000 is more than 1.1x "
         "faster):\n");
  for (int s = 0; s < NSYSTEMS; s++)
    printf("  %-34s spin phase %s (%.2fx); 1000 us %s (%.2fx)\n",
           system_label[s], ratio[s][0] > 1.1 ? "pays" : "does NOT pay",
           ratio[s][0], ratio[s][2] < 1 / 1.1 ? "would pay" : "would not pay",
           ratio[s][2]);

  /* 2. The yield phase: tcp (pinned), default NX_SPIN_US, the echo
   * delayed. What the round trip costs over the delay. */
  double d[NDELAYS][MAX_RUNS], dc[NDELAYS][MAX_RUNS];
  for (int r = 0; r < runs; r++)
    for (int k = 0; k < NDELAYS; k++) {
      int n = delays[k] == 0
                  ? n_tcp
                  : (int)(quick ? 150000 : 1000000) / (int)(delays[k] + 100);
      d[k][r] = run(TCP_PINNED, spins[DEFAULT_SPIN], delays[k], n, &dc[k][r]);
    }
  printf("\n8 B over tcp (pinned), NX_SPIN_US=50, the echo delayed: the "
         "round trip, what it\ntakes over the delay, and the CPU time this "
         "process spends per round trip\n");
  static const char *const phase[NDELAYS] = {
      "none: the reply comes while spinning",
      "200 us: ... while yielding (50 us to 1.05 ms)",
      "1.5 ms: ... asleep, the primary in DEFER's sleep",
      "5 ms: ... asleep (after the yield phase)"};
  double over[NDELAYS];
  for (int k = 0; k < NDELAYS; k++) {
    double med = median(d[k], runs);
    over[k] = med - delays[k];
    printf("  %-49s %9.2f us  over it %7.2f us (fastest %7.2f)  cpu/rt "
           "%7.2f us\n",
           phase[k], med, over[k], fastest(d[k], runs) - delays[k],
           median(dc[k], runs));
  }
  printf("verdict: a reply while yielding costs %.2f us over its delay, "
         "asleep %.2f us (%.2fx):\n  the yield phase %s\n",
         over[1], over[ASLEEP], over[ASLEEP] / over[1],
         over[ASLEEP] > 1.1 * over[1] ? "pays" : "does NOT pay");
  return 0;
}
