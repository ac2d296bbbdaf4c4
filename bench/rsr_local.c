/* In-process RSR round-trip benchmark, printed beside a shared-memory flag
 * ping-pong and a mutex+condvar hand-off measured in the same run. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  if (nx_rsr_init_name(&out, &main_gp, nx_buffer_length(buf) ? "pong" : "pong",
                       0) == 0)
    nx_rsr_send(out);
}

static void ping_threaded(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)addr;
  (void)ctx;
  if (payload > 0)
    nx_get_bytes(buf, payload_buf, payload);
  nx_buffer_t *out;
  if (nx_rsr_init_name(&out, &main_gp, "pong_threaded", 0) == 0)
    nx_rsr_send(out);
}

static int peer_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  int r = nx_handler_register(ctx, "ping", ping, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_threaded", ping_threaded,
                            NX_HANDLER_THREADED, NULL);
  return r;
}

struct rsr_case {
  int threaded;
  size_t size;
  int spin; /* wait by spinning on a flag: the progress thread delivers */
};

static double bench_rsr(void *arg) {
  struct rsr_case *c = arg;
  payload = c->size;
  nx_handler_id_t hid = nx_handler_id(c->threaded ? "ping_threaded" : "ping");
  const nx_gp_t *to = &peer_gp[c->threaded];
  int n = iters / (c->threaded ? 2 : 1);
  double t0 = 0;
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
static double local_only_anchor(const char *self, int quick) {
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "NX_PROTOCOLS=local '%s' --null-only%s", self,
           quick ? " --quick" : "");
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  double v = -1;
  if (fscanf(p, "%lf", &v) != 1)
    v = -1;
  pclose(p);
  return v;
}

int main(int argc, char **argv) {
  int quick = 0, null_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      iters = 20000;
      reps = 3;
      quick = 1;
    } else if (strcmp(argv[i], "--null-only") == 0) {
      null_only = 1;
    }
  }
  /* With the default module set, what only the local module costs, in
   * the same run (and before this process starts its progress thread). */
  double local_only = -1;
  if (!null_only && getenv("NX_PROTOCOLS") == NULL &&
      getenv("NX_PROGRESS") == NULL)
    local_only = local_only_anchor(argv[0], quick);
  /* The anchors run before nx_init, so no runtime thread competes. */
  double floor = min_of(bench_flag, NULL);
  double cond = median_of(bench_cond, NULL);
  if (nx_init(&argc, &argv) < 0) {
    fprintf(stderr, "nx_init failed\n");
    return 1;
  }
  payload_buf = calloc(1, 1024);
  nx_mutex_init(&w.m);
  nx_cond_init(&w.c);
  w.done = 0;
  atomic_init(&w.done_atomic, 0);
  nx_handler_register(nx_context_self(), "pong", pong, NX_HANDLER_NONTHREADED,
                      NULL);
  nx_handler_register(nx_context_self(), "pong_threaded", pong,
                      NX_HANDLER_THREADED, NULL);
  nx_gp_make(&w, &main_gp);
  nx_context_create_local(peer_init, NULL, &peer_gp[0]);
  nx_gp_copy(&peer_gp[0], &peer_gp[1]);
  if (null_only) {
    struct rsr_case c = {0, 0, 0};
    printf("%.4f\n", median_of(bench_rsr, &c));
    nx_gp_release(&peer_gp[0]);
    nx_gp_release(&peer_gp[1]);
    nx_gp_release(&main_gp);
    nx_finalize();
    free(payload_buf);
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
  double create = median_of(bench_create, NULL);
  printf("  %-40s %9.3f us\n", "in-process context creation", create);
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
  printf("  context creation < 20 us:                 %.3f us  %s\n", create,
         create < 20 ? "met" : "NOT met");
  nx_gp_release(&peer_gp[0]);
  nx_gp_release(&peer_gp[1]);
  nx_gp_release(&main_gp);
  nx_finalize();
  free(payload_buf);
  return 0;
}
