/* In-process RSR round-trip benchmark, printed beside a shared-memory flag
 * ping-pong and a mutex+condvar hand-off measured in the same run; payloads up
 * to 4 MiB, copying and zero-copy, beside a flag ping-pong that copies each
 * payload once per hop.
 *
 * Usage: bench_rsr_local [--quick | --smoke] [--null-only | --null-threaded].
 * --null-only prints the median null non-threaded round trip alone (the
 * local-only anchor runs the program so), --null-threaded the threaded one:
 * each runs no anchor, for profiling one path (perf, or callgrind with
 * NX_PROGRESS=poll, where no progress thread spins). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_args.h"
#include "bench_util.h"
#include "nexus.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int iters = 200000;
static int reps = 5;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Runs `fn` `reps` times; returns the median of the per-round-trip times. */
static double median_of(double (*fn)(void *), void *arg) {
  double v[32];
  for (int i = 0; i < reps; i++)
    v[i] = fn(arg);
  qsort(v, (size_t)reps, sizeof(double), cmp_double);
  return v[reps / 2];
}

/* The floor is a best case: the minimum over more runs, because the two
 * spinning threads sometimes share a core for a whole run. A lower floor
 * only makes the ratios against it stricter. */
static double min_of(double (*fn)(void *), void *arg) {
  double best = fn(arg);
  for (int i = 1; i < reps + 2; i++) {
    double v = fn(arg);
    if (v < best)
      best = v;
  }
  return best;
}

/* 1. The floor: two threads bouncing a flag through one cache line. */
static _Alignas(64) atomic_int flag;
static void *flag_peer(void *arg) {
  int n = *(int *)arg;
  for (int i = 0; i < n; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 1)
      ;
    atomic_store_explicit(&flag, 0, memory_order_release);
  }
  return NULL;
}
static double bench_flag(void *arg) {
  (void)arg;
  pthread_t t;
  atomic_store(&flag, 0);
  pthread_create(&t, NULL, flag_peer, &iters);
  double t0 = now_us();
  for (int i = 0; i < iters; i++) {
    atomic_store_explicit(&flag, 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 0)
      ;
  }
  double t1 = now_us();
  pthread_join(t, NULL);
  return (t1 - t0) / iters;
}

/* 2. The reference: a pthread mutex + condition variable hand-off. */
static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cc = PTHREAD_COND_INITIALIZER;
static int turn;
static void *cond_peer(void *arg) {
  int n = *(int *)arg;
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&cm);
    while (turn != 1)
      pthread_cond_wait(&cc, &cm);
    turn = 0;
    pthread_cond_broadcast(&cc);
    pthread_mutex_unlock(&cm);
  }
  return NULL;
}
static double bench_cond(void *arg) {
  (void)arg;
  int n = iters / 10;
  pthread_t t;
  turn = 0;
  pthread_create(&t, NULL, cond_peer, &n);
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&cm);
    turn = 1;
    pthread_cond_broadcast(&cc);
    while (turn != 0)
      pthread_cond_wait(&cc, &cm);
    pthread_mutex_unlock(&cm);
  }
  double t1 = now_us();
  pthread_join(t, NULL);
  return (t1 - t0) / n;
}

/* 3. RSR round trips: the main thread sends "ping" to context B, whose
 * handler answers "pong" to the main context; pong signals the waiter. */
struct waiter {
  nx_mutex_t m;
  nx_cond_t c;
  long done;                /* replies received */
  _Atomic long done_atomic; /* the same, for the spinning variant */
};
static struct waiter w;
static nx_gp_t main_gp;    /* gp to the main context's waiter */
static nx_gp_t peer_gp[2]; /* [0] non-threaded peer, [1] threaded peer */
static size_t payload;
static char *payload_buf;
/* The replies go by handler id, as the pings do (a compiler's RSRs name
 * their handlers so): nx_rsr_init_name would hash the name each time, and
 * "pong_threaded" costs 54 instructions more to hash than "pong", which
 * the threaded row would count as the handler kind's cost. */
static nx_handler_id_t pong_id, pong_threaded_id;

static void pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)buf;
  struct waiter *wt = addr;
  nx_mutex_lock(&wt->m);
  wt->done++;
  atomic_store_explicit(&wt->done_atomic, wt->done, memory_order_release);
  nx_cond_signal(&wt->c);
  nx_mutex_unlock(&wt->m);
}

static void ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)addr;
  (void)ctx;
  if (payload > 0)
    nx_get_bytes(buf, payload_buf, payload);
  nx_buffer_t *out;
  if (nx_rsr_init(&out, &main_gp, pong_id, 0) == 0)
    nx_rsr_send(out);
}

static void ping_threaded(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)addr;
  (void)ctx;
  if (payload > 0)
    nx_get_bytes(buf, payload_buf, payload);
  nx_buffer_t *out;
  if (nx_rsr_init(&out, &main_gp, pong_threaded_id, 0) == 0)
    nx_rsr_send(out);
}

/* 4. Payloads. The raw anchor: the payload copied once per hop, from the
 * sender's array into the receiver's (what a single-copy transport does),
 * on one thread, as a non-threaded in-process RSR runs on the thread that
 * waits for it: two memcpy per round trip and nothing else. Then RSRs
 * echoing the payload: copying (nx_put_bytes, and the echo copies it out and
 * in: bench_echo) and zero-copy (nx_put_bytes_ref, read in place, echoed by
 * reference: bench_send_ref, bench_echo_ref). Both wait in nx_cond_wait. */
#define MAX_PAYLOAD (4 << 20)
static const size_t payload_sizes[] = {1024, 65536, 1 << 20, 4 << 20};
#define NPAYLOADS (sizeof(payload_sizes) / sizeof(payload_sizes[0]))
static char *big_out, *big_peer, *big_back; /* the sender's, the echo's, back */
static size_t big_size;
static long bad_replies;
static nx_handler_id_t pong_copy_id, pong_ref_id;

static int payload_iters(size_t size) {
  int n = (int)((size_t)iters * 128 / (size + 65536)) + 1;
  return n < 5 ? 5 : n;
}

/* Round trips of memcpy alone: hop out, hop back. */
static double bench_copy(void *arg) {
  size_t size = *(size_t *)arg;
  int n = payload_iters(size);
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    memcpy(big_peer, big_out, size);
    __asm__ volatile("" ::: "memory");
    memcpy(big_back, big_peer, size);
    __asm__ volatile("" ::: "memory");
  }
  return (now_us() - t0) / n;
}

static void ping_copy(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo(buf, &main_gp, pong_copy_id, big_peer, MAX_PAYLOAD);
}

static void ping_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  bench_echo_ref(buf, &main_gp, pong_ref_id);
}

static void pong_copy(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (nx_get_bytes(buf, big_back, big_size) != 0)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
  bench_reply_arrived();
}

static void pong_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  if (bench_check_ref(buf, big_out, big_size) != 0)
    __atomic_add_fetch(&bad_replies, 1, __ATOMIC_RELAXED);
  bench_reply_arrived();
}

struct payload_case {
  size_t size;
  int zc;
};

/* The pings of a zero-copy run put big_out by reference: it never
 * changes, so it may go again before its release came; every release is
 * waited for at the end. */
static double bench_payload(void *arg) {
  const struct payload_case *c = arg;
  big_size = c->size;
  nx_handler_id_t hid = nx_handler_id(c->zc ? "ping_ref" : "ping_copy");
  int n = payload_iters(c->size);
  double t0 = 0;
  for (int i = -n / 10 - 1; i < n; i++) {
    if (i == 0)
      t0 = now_us();
    long want = bench_next_reply();
    int rc;
    if (c->zc) {
      rc = bench_send_ref(&peer_gp[0], hid, big_out, c->size);
    } else {
      nx_buffer_t *b;
      rc = nx_rsr_init(&b, &peer_gp[0], hid, nx_sizeof_bytes(c->size));
      if (rc == 0 && (rc = nx_put_bytes(b, big_out, c->size)) != 0)
        nx_buffer_release(b);
      else if (rc == 0)
        rc = nx_rsr_send(b);
    }
    if (rc != 0)
      bench_die("a payload ping", nx_strerror(rc));
    bench_wait_replies(want, 10);
  }
  double t = (now_us() - t0) / n;
  bench_wait_released(10);
  if (bad_replies > 0)
    bench_die("payload replies", "of the wrong size or contents");
  return t;
}

/* 5. A burst: the main thread sends BURST RSRs to context B's sink, which
 * counts them (under the waiter's mutex) and signals the last; the main
 * thread then waits. Per RSR, threaded sinks against non-threaded ones:
 * queued one behind the other, the threaded ones after the first are
 * calls on the stack the first started (docs/design.md, "Where handlers
 * run"). */
#define BURST 64
static long burst_want; /* w.done at the end of the burst (under w.m) */
static void sink(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  (void)buf;
  nx_mutex_lock(&w.m);
  if (++w.done == burst_want)
    nx_cond_signal(&w.c);
  nx_mutex_unlock(&w.m);
}

static double bench_burst(void *arg) {
  int threaded = *(const int *)arg;
  nx_handler_id_t hid = nx_handler_id(threaded ? "sink_threaded" : "sink");
  int n = iters / BURST;
  double t0 = 0;
  for (int i = -100; i < n; i++) {
    if (i == 0)
      t0 = now_us();
    nx_mutex_lock(&w.m);
    long want = burst_want = w.done + BURST;
    nx_mutex_unlock(&w.m);
    for (int k = 0; k < BURST; k++) {
      nx_buffer_t *b;
      if (nx_rsr_init(&b, &peer_gp[0], hid, 0) < 0 || nx_rsr_send(b) < 0)
        abort();
    }
    nx_mutex_lock(&w.m);
    while (w.done < want)
      nx_cond_wait(&w.c, &w.m);
    nx_mutex_unlock(&w.m);
  }
  return (now_us() - t0) / ((double)n * BURST);
}

static int peer_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  int r = nx_handler_register(ctx, "ping", ping, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "sink", sink, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "sink_threaded", sink, NX_HANDLER_THREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_threaded", ping_threaded,
                            NX_HANDLER_THREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_copy", ping_copy, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_ref", ping_ref, NX_HANDLER_NONTHREADED,
                            NULL);
  return r;
}

struct rsr_case {
  int threaded;
  size_t size;
  int spin; /* wait by spinning on a flag: the progress thread delivers */
};

static long rounds_run; /* round trips bench_rsr made, warm-up included */

static double bench_rsr(void *arg) {
  struct rsr_case *c = arg;
  payload = c->size;
  nx_handler_id_t hid = nx_handler_id(c->threaded ? "ping_threaded" : "ping");
  const nx_gp_t *to = &peer_gp[c->threaded];
  int n = iters / (c->threaded ? 2 : 1);
  double t0 = 0;
  rounds_run += n + 1000;
  for (int i = -1000; i < n; i++) {
    if (i == 0)
      t0 = now_us();
    nx_buffer_t *b;
    if (nx_rsr_init(&b, to, hid, c->size + 8) < 0)
      abort();
    if (c->size > 0)
      nx_put_bytes(b, payload_buf, c->size);
    long want = atomic_load(&w.done_atomic) + 1;
    if (nx_rsr_send(b) < 0)
      abort();
    if (c->spin) {
      while (atomic_load_explicit(&w.done_atomic, memory_order_acquire) < want)
        ;
      continue;
    }
    nx_mutex_lock(&w.m);
    while (w.done < want)
      nx_cond_wait(&w.c, &w.m);
    nx_mutex_unlock(&w.m);
  }
  return (now_us() - t0) / n;
}

static int empty_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  return nx_handler_register(ctx, "ping", ping, NX_HANDLER_NONTHREADED, NULL);
}

static double bench_create(void *arg) {
  (void)arg;
  int n = 2000;
  nx_gp_t *gps = malloc(sizeof(nx_gp_t) * (size_t)n);
  double t0 = now_us();
  for (int i = 0; i < n; i++)
    if (nx_context_create_local(empty_init, NULL, &gps[i]) < 0)
      abort();
  double t1 = now_us();
  for (int i = 0; i < n; i++) {
    nx_context_destroy(&gps[i]);
    nx_gp_release(&gps[i]);
  }
  free(gps);
  return (t1 - t0) / n;
}

/* The anchor for the default module set: this program again, with only
 * the local module, measuring the null non-threaded round trip alone.
 * Returns its median in us, or a negative value if it failed. */
static double local_only_anchor(const char *self, const char *mode) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "NX_PROTOCOLS=local '%s' --null-only %s", self,
           mode);
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  double v = -1;
  if (fscanf(p, "%lf", &v) != 1)
    v = -1;
  pclose(p);
  return v;
}

/* The cost of tracing (docs/tracing.md): this program again with the
 * local module, the null non-threaded round trip alone, untraced and with
 * NX_TRACE (into a folder of its own, removed after), taking turns `n`
 * times; the medians in *off and *on (us). Returns 0, or -1 if a run
 * failed. --quick round trips (some 17 MB of log per traced launch). */
static int trace_anchor(const char *self, int n, double *off, double *on) {
  char dir[] = "/tmp/nx-bench-trace-XXXXXX";
  if (mkdtemp(dir) == NULL)
    return -1;
  double v[2][32];
  int ok = 1;
  for (int i = 0; i < n && ok; i++)
    for (int traced = 0; traced < 2 && ok; traced++) {
      char cmd[4096];
      snprintf(cmd, sizeof(cmd),
               "%s%s%s NX_PROTOCOLS=local '%s' --null-only --quick; "
               "rm -f '%s'/*.nxt",
               traced ? "NX_TRACE='" : "", traced ? dir : "", traced ? "'" : "",
               self, dir);
      FILE *p = popen(cmd, "r");
      if (p == NULL || fscanf(p, "%lf", &v[traced][i]) != 1)
        ok = 0;
      if (p != NULL)
        pclose(p);
    }
  rmdir(dir);
  if (!ok)
    return -1;
  double best;
  *off = bench_median(v[0], n, &best);
  *on = bench_median(v[1], n, &best);
  return 0;
}

static const char usage[] =
    "usage: bench_rsr_local [--quick | --smoke] [--null-only | "
    "--null-threaded]\n"
    "  In-process RSR round trips, copying and zero-copy, up to 4 MiB, "
    "beside\n"
    "  a shared-memory flag ping-pong and a mutex+condvar hand-off in the "
    "same\n"
    "  run; prints the medians and the ratios.\n"
    "  --quick           fewer round trips and runs\n"
    "  --smoke           every row once, with few round trips\n"
    "  --null-only       the null non-threaded round trip alone, no "
    "anchor\n"
    "  --null-threaded   the null threaded round trip alone, no anchor\n";

int main(int argc, char **argv) {
  bench_name = "bench_rsr_local";
  const char *mode = ""; /* passed on to the local-only anchor */
  int null_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      iters = 20000;
      reps = 3;
      mode = "--quick";
    } else if (strcmp(argv[i], "--smoke") == 0) {
      /* Every row once, with few round trips: a test that it runs. */
      iters = 2000;
      reps = 1;
      mode = "--smoke";
    } else if (strcmp(argv[i], "--null-only") == 0) {
      null_only = 1;
    } else if (strcmp(argv[i], "--null-threaded") == 0) {
      null_only = 2; /* the threaded null round trip alone: to profile */
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_rsr_local", argv[i], NULL, usage);
    }
  }
  /* With the default module set, what only the local module costs, in
   * the same run (and before this process starts its progress thread). */
  double local_only = -1;
  if (!null_only && getenv("NX_PROTOCOLS") == NULL &&
      getenv("NX_PROGRESS") == NULL)
    local_only = local_only_anchor(argv[0], mode);
  /* The anchors run before nx_init, so no runtime thread competes. */
  double floor = null_only ? 0 : min_of(bench_flag, NULL);
  double cond = null_only ? 0 : median_of(bench_cond, NULL);
  if (nx_init(&argc, &argv) < 0) {
    fprintf(stderr, "nx_init failed\n");
    return 1;
  }
  payload_buf = calloc(1, 1024);
  big_out = malloc(MAX_PAYLOAD);
  big_peer = malloc(MAX_PAYLOAD);
  big_back = malloc(MAX_PAYLOAD);
  if (big_out == NULL || big_peer == NULL || big_back == NULL)
    bench_die("malloc", NULL);
  memset(big_out, 0x5a, MAX_PAYLOAD);
  memset(big_peer, 0, MAX_PAYLOAD); /* no page faults in the first run */
  memset(big_back, 0, MAX_PAYLOAD);
  bench_sync_init();
  pong_id = nx_handler_id("pong");
  pong_threaded_id = nx_handler_id("pong_threaded");
  pong_copy_id = nx_handler_id("pong_copy");
  pong_ref_id = nx_handler_id("pong_ref");
  nx_mutex_init(&w.m);
  nx_cond_init(&w.c);
  w.done = 0;
  atomic_init(&w.done_atomic, 0);
  nx_handler_register(nx_context_self(), "pong", pong, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_handler_register(nx_context_self(), "pong_threaded", pong,
                      NX_HANDLER_THREADED, NULL);
  nx_handler_register(nx_context_self(), "pong_copy", pong_copy,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_handler_register(nx_context_self(), "pong_ref", pong_ref,
                      NX_HANDLER_NONTHREADED, NULL);
  nx_gp_make(&w, &main_gp);
  nx_context_create_local(peer_init, NULL, &peer_gp[0]);
  nx_gp_copy(&peer_gp[0], &peer_gp[1]);
  if (null_only) {
    struct rsr_case c = {null_only == 2, 0, 0};
    printf("%.4f\n", median_of(bench_rsr, &c));
    /* For bench/count_rsr.py, which divides what callgrind counted in
     * bench_rsr by this. */
    fprintf(stderr, "round trips: %ld\n", rounds_run);
    nx_gp_release(&peer_gp[0]);
    nx_gp_release(&peer_gp[1]);
    nx_gp_release(&main_gp);
    nx_finalize();
    free(payload_buf);
    free(big_out);
    free(big_peer);
    free(big_back);
    return 0;
  }

  printf("in-process RSR round trip (%d iterations, median of %d runs; "
         "progress %s)\n",
         iters, reps, getenv("NX_PROGRESS") ? getenv("NX_PROGRESS") : "thread");
  printf("  %-40s %9.3f us\n", "shared-memory flag ping-pong (floor, min)",
         floor);
  printf("  %-40s %9.3f us\n", "mutex+condvar hand-off (reference)", cond);
  printf("  waiting in nx_cond_wait (the waiting thread drives progress):\n");
  struct rsr_case cases[] = {{0, 0, 0},    {0, 1024, 0}, {1, 0, 0},
                             {1, 1024, 0}, {0, 0, 1},    {1, 0, 1}};
  const char *names[] = {"RSR null, non-threaded", "RSR 1 KiB, non-threaded",
                         "RSR null, threaded",     "RSR 1 KiB, threaded",
                         "RSR null, non-threaded", "RSR null, threaded"};
  double t[6];
  for (int i = 0; i < 6; i++) {
    if (i == 4) {
      if (getenv("NX_PROGRESS") != NULL)
        break; /* no progress thread to deliver */
      printf("  spinning on a flag (the progress thread delivers):\n");
    }
    t[i] = median_of(bench_rsr, &cases[i]);
    printf("    %-38s %9.3f us  %5.2fx floor  %5.3fx condvar\n", names[i], t[i],
           t[i] / floor, t[i] / cond);
  }
  /* Bursts, waiting in nx_cond_wait once per burst; the kinds take turns. */
  double burst[2];
  {
    double v[2][32], best;
    int kinds[2] = {0, 1};
    for (int r = 0; r < reps; r++)
      for (int k = 0; k < 2; k++)
        v[k][r] = bench_burst(&kinds[k]);
    printf("  a burst of %d RSRs, then one wait (per RSR):\n", BURST);
    for (int k = 0; k < 2; k++) {
      burst[k] = bench_median(v[k], reps, &best);
      printf("    %-38s %9.3f us\n",
             k ? "RSR null, threaded" : "RSR null, non-threaded", burst[k]);
    }
  }
  /* The payloads, non-threaded, waiting in nx_cond_wait; the systems take
   * turns within each size. */
  printf("  payloads, echoed (raw: one memcpy per hop, on one thread; RSR: "
         "nx_put_bytes, copied out\n  and in by the echo; zero copy: "
         "nx_put_bytes_ref, read in place, echoed by reference):\n");
  double zc_ratio[NPAYLOADS];
  for (size_t k = 0; k < NPAYLOADS; k++) {
    size_t size = payload_sizes[k];
    double v[3][32];
    struct payload_case copy = {size, 0}, zc = {size, 1};
    for (int r = 0; r < reps; r++) {
      v[0][r] = bench_copy(&size);
      v[1][r] = bench_payload(&copy);
      v[2][r] = bench_payload(&zc);
    }
    double med[3], best;
    for (int j = 0; j < 3; j++)
      med[j] = bench_median(v[j], reps, &best);
    char label[32];
    bench_size_label(size, label, sizeof(label));
    printf("    %-6s %-31s %9.3f us\n", label, "raw: memcpy, once per hop",
           med[0]);
    printf("    %-6s %-31s %9.3f us  %5.2fx raw\n", "", "RSR, non-threaded",
           med[1], med[1] / med[0]);
    printf("    %-6s %-31s %9.3f us  %5.2fx raw\n", "",
           "zero copy, non-threaded", med[2], med[2] / med[0]);
    zc_ratio[k] = med[2] / med[0];
  }
  double create = median_of(bench_create, NULL);
  printf("  %-40s %9.3f us\n", "in-process context creation", create);
  double untraced = 0, traced = 0;
  int trace_ok = trace_anchor(argv[0], reps, &untraced, &traced) == 0;
  if (trace_ok)
    printf("  tracing (NX_TRACE; NX_PROTOCOLS=local, null non-threaded, "
           "--quick):\n    %-38s %9.3f us\n    %-38s %9.3f us\n",
           "untraced", untraced, "traced", traced);
  else
    printf("  tracing: the traced run failed\n");
  printf("goals:\n");
  printf("  non-threaded null RSR <= 2x floor:        %.2fx  %s\n",
         t[0] / floor, t[0] <= 2 * floor ? "met" : "NOT met");
  printf("  non-threaded null RSR <= 2.5x floor:      %.2fx  %s\n",
         t[0] / floor, t[0] <= 2.5 * floor ? "met" : "NOT met");
  if (local_only > 0)
    printf("  default modules <= 1.1x NX_PROTOCOLS=local: %.2fx  %s  "
           "(local only: %.3f us)\n",
           t[0] / local_only, t[0] <= 1.1 * local_only ? "met" : "NOT met",
           local_only);
  printf("  non-threaded null RSR < condvar hand-off: %.3fx  %s\n", t[0] / cond,
         t[0] < cond ? "met" : "NOT met");
  printf("  threaded <= 1.25x non-threaded (null):    %.2fx  %s\n", t[2] / t[0],
         t[2] <= 1.25 * t[0] ? "met" : "NOT met");
  printf("  threaded <= 1.25x non-threaded (1 KiB):   %.2fx  %s\n", t[3] / t[1],
         t[3] <= 1.25 * t[1] ? "met" : "NOT met");
  if (getenv("NX_PROGRESS") == NULL)
    printf("  (same hops: threaded / non-threaded, both delivered by the "
           "progress thread: %.2fx)\n",
           t[5] / t[4]);
  printf("  threaded <= 1.1x non-threaded (burst):    %.2fx  %s\n",
         burst[1] / burst[0], burst[1] <= 1.1 * burst[0] ? "met" : "NOT met");
  printf("  context creation < 20 us:                 %.3f us  %s\n", create,
         create < 20 ? "met" : "NOT met");
  if (trace_ok) {
    /* A round trip is two RSRs: each a send, a handler's begin and end. */
    double per_rsr = (traced - untraced) * 1000 / 2;
    printf("  tracing <= 100 ns per traced RSR:         %.0f ns  %s\n", per_rsr,
           per_rsr <= 100 ? "met" : "NOT met");
  }
  printf("  zero copy: goal: within 1.1x of raw at 1 MiB and 4 MiB\n");
  for (size_t k = 0; k < NPAYLOADS; k++) {
    if (payload_sizes[k] < (1 << 20))
      continue;
    char label[32];
    bench_size_label(payload_sizes[k], label, sizeof(label));
    printf("    %-6s zero copy / raw:                  %.2fx  %s\n", label,
           zc_ratio[k], zc_ratio[k] <= 1.1 ? "met" : "NOT met");
  }
  nx_gp_release(&peer_gp[0]);
  nx_gp_release(&peer_gp[1]);
  nx_gp_release(&main_gp);
  nx_finalize();
  free(payload_buf);
  free(big_out);
  free(big_peer);
  free(big_back);
  return 0;
}
