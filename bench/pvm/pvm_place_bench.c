/* A 1 MiB ping-pong of doubles between two PVM tasks (this program and the
 * task it spawns) with pvm_psend/pvm_precv, beside a raw RSR ping-pong of
 * the same array between the same two processes over the same module, in
 * the same run, rounds of the two taking turns: the ratio is the cost of
 * nexus-pvm's placed receive (docs/pvm.md, "Receive placement") over what
 * a program of RSRs alone pays for the same transfer.
 *
 * The raw RSR ping-pong is the one a nexus program would write for the
 * least copies: "pb.ping" carries the array put by reference
 * (nx_put_double_array_ref), last, and is placed (nx_handler_set_place)
 * into the peer's receive array, which its handler reads there (no copy)
 * and sends back by reference in "pb.pong", placed into the initiator's
 * receive array; the initiator waits for the pong and for the release of
 * its array in nx_cond_wait, as pvm_psend and pvm_precv wait.
 *
 * Usage: pvm_place_bench [--size BYTES] [--iters N] [--warm N] [--reps N]
 * Prints "usec pvm X", "usec rsr Y" (medians over the reps of a round
 * trip's mean) and "ratio pvm/rsr Z". NX_PROTOCOLS chooses the module. */
#include <nexus.h>
#include <pvm3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bench_args.h"
#include "../bench_util.h"

#define TAG_GP 1
#define TAG_PING 2
#define TAG_PONG 3
#define TAG_QUIT 4
#define MAX_REPS 64

static size_t ndoubles;
static double *out_buf, *in_buf, *raw_in; /* raw_in: the RSRs' */
static nx_gp_t peer_gp;
static nx_handler_id_t ping_id, pong_id;

static nx_mutex_t m;
static nx_cond_t c;
static long pongs, releases;

static void die(const char *what) {
  fprintf(stderr, "pvm_place_bench: %s failed\n", what);
  exit(1);
}

/* Both handlers' arrays are placed into the task's receive array. */
static int place_in(nx_context_t *ctx, void *addr, nx_buffer_t *lead,
                    size_t tail, nx_place_t *where) {
  (void)ctx;
  (void)addr;
  (void)lead;
  if (tail > ndoubles * sizeof(double))
    return 0;
  where->addr = raw_in;
  where->len = ndoubles * sizeof(double);
  return 1;
}

static void released(void *arg, const void *v, int status) {
  (void)arg;
  (void)v;
  if (status < 0)
    die("an RSR's send");
  nx_mutex_lock(&m);
  releases++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

static void send_array(nx_handler_id_t h, const double *v) {
  nx_buffer_t *b;
  if (nx_rsr_init(&b, &peer_gp, h, 64) != 0 ||
      nx_put_double_array_ref(b, v, ndoubles, released, NULL) != 0 ||
      nx_rsr_send(b) != 0)
    die("a raw RSR");
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  if (nx_get_double_array(buf, raw_in, ndoubles) != 0)
    die("the ping's get");
  send_array(pong_id, raw_in);
}

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx;
  (void)addr;
  if (nx_get_double_array(buf, raw_in, ndoubles) != 0)
    die("the pong's get");
  nx_mutex_lock(&m);
  pongs++;
  nx_cond_broadcast(&c);
  nx_mutex_unlock(&m);
}

/* Registers the raw handlers and sends this task's gp to `tid`; takes
 * the peer's from it. */
static void raw_setup(int tid) {
  nx_context_t *self = nx_context_self();
  if (nx_handler_register(self, "pb.ping", on_ping, NX_HANDLER_NONTHREADED,
                          &ping_id) != 0 ||
      nx_handler_register(self, "pb.pong", on_pong, NX_HANDLER_NONTHREADED,
                          &pong_id) != 0 ||
      nx_handler_set_place(self, "pb.ping", place_in) != 0 ||
      nx_handler_set_place(self, "pb.pong", place_in) != 0)
    die("handler registration");
  nx_gp_t me;
  nx_buffer_t *out;
  const void *bytes;
  size_t len;
  if (nx_gp_make(NULL, &me) != 0 ||
      nx_buffer_create(nx_sizeof_gp(&me), &out) != 0 ||
      nx_put_gp(out, &me) != 0 || nx_buffer_bytes(out, &bytes, &len) != 0)
    die("packing the gp");
  int n = (int)len;
  pvm_initsend(PvmDataDefault);
  pvm_pkint(&n, 1, 1);
  pvm_pkbyte((char *)bytes, n, 1);
  if (pvm_send(tid, TAG_GP) < 0)
    die("pvm_send of the gp");
  nx_buffer_release(out);
  nx_gp_release(&me);
  char packed[4096];
  nx_buffer_t *in;
  if (pvm_recv(tid, TAG_GP) <= 0 || pvm_upkint(&n, 1, 1) != 0 || n <= 0 ||
      n > (int)sizeof(packed) || pvm_upkbyte(packed, n, 1) != 0 ||
      nx_buffer_from_bytes(packed, (size_t)n, nx_format_native(), &in) != 0 ||
      nx_get_gp(in, &peer_gp) != 0)
    die("receiving the gp");
  nx_buffer_release(in);
}

/* `iters` raw round trips; the mean in microseconds. */
static double raw_rounds(long iters) {
  double t0 = bench_now_us();
  for (long i = 0; i < iters; i++) {
    nx_mutex_lock(&m);
    long want = pongs + 1, rel = releases + 1;
    nx_mutex_unlock(&m);
    send_array(ping_id, out_buf);
    nx_mutex_lock(&m);
    while (pongs < want || releases < rel)
      nx_cond_wait(&c, &m);
    nx_mutex_unlock(&m);
  }
  return (bench_now_us() - t0) / (double)iters;
}

/* `iters` pvm_psend/pvm_precv round trips; the mean in microseconds. */
static double pvm_rounds(int tid, long iters) {
  double t0 = bench_now_us();
  for (long i = 0; i < iters; i++) {
    if (pvm_psend(tid, TAG_PING, out_buf, (int)ndoubles, PVM_DOUBLE) != 0 ||
        pvm_precv(tid, TAG_PONG, in_buf, (int)ndoubles, PVM_DOUBLE, NULL, NULL,
                  NULL) != 0)
      die("the pvm ping-pong");
  }
  return (bench_now_us() - t0) / (double)iters;
}

static void check_back(const char *what, const double *in) {
  for (size_t i = 0; i < ndoubles; i++)
    if (in[i] != out_buf[i]) {
      fprintf(stderr, "pvm_place_bench: %s: item %zu differs\n", what, i);
      exit(1);
    }
}

static int task(void) {
  int parent = pvm_parent();
  raw_setup(parent);
  for (;;) {
    int tag = 0;
    if (pvm_precv(parent, -1, in_buf, (int)ndoubles, PVM_DOUBLE, NULL, &tag,
                  NULL) != 0)
      die("the task's pvm_precv");
    if (tag == TAG_QUIT)
      break;
    if (pvm_psend(parent, TAG_PONG, in_buf, (int)ndoubles, PVM_DOUBLE) != 0)
      die("the task's pvm_psend");
  }
  nx_gp_release(&peer_gp);
  pvm_exit();
  return 0;
}

/* The median of v[0..n-1] (bench_util; sorts v). */
static double median(double *v, int n) {
  double best;
  return bench_median(v, n, &best);
}

static const char usage[] =
    "usage: pvm_place_bench [--size BYTES] [--iters N] [--warm N] [--reps N]\n"
    "  A ping-pong of doubles (default 1 MiB) with pvm_psend/pvm_precv "
    "between\n"
    "  this task and one it spawns, beside a raw RSR ping-pong of the same\n"
    "  array (by reference, placed) between the same processes, taking\n"
    "  turns; prints both medians and the ratio pvm/rsr. NX_PROTOCOLS picks\n"
    "  the module.\n";

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  size_t size = 1 << 20;
  long iters = 200, warm = 20;
  int reps = 5, is_task = 0;
  for (int i = 1; i < argc; i++) {
    if (bench_is_help(argv[i]))
      return bench_help(usage);
    if (strcmp(argv[i], "--task") == 0)
      is_task = 1;
    else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
      size = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      iters = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--warm") == 0 && i + 1 < argc)
      warm = strtol(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else
      return bench_bad_arg("pvm_place_bench", argv[i], NULL, usage);
  }
  if (size < sizeof(double) || size % sizeof(double) != 0 || iters < 1 ||
      warm < 0 || reps < 1 || reps > MAX_REPS) {
    fprintf(stderr, "pvm_place_bench: bad size, iters, warm or reps\n");
    return 2;
  }
  ndoubles = size / sizeof(double);
  out_buf = malloc(size);
  in_buf = malloc(size);
  raw_in = malloc(size);
  if (out_buf == NULL || in_buf == NULL || raw_in == NULL)
    die("malloc");
  for (size_t i = 0; i < ndoubles; i++)
    out_buf[i] = (double)i * 0.25;
  if (pvm_mytid() < 0) {
    printf("skip: pvm_mytid failed\n");
    return 77;
  }
  nx_mutex_init(&m);
  nx_cond_init(&c);
  if (is_task)
    return task();
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0)
    die("readlink");
  self[n] = '\0';
  char sz[32];
  snprintf(sz, sizeof(sz), "%zu", size);
  char *av[] = {"--task", "--size", sz, NULL};
  int tid;
  if (pvm_spawn(self, av, PvmTaskDefault, "", 1, &tid) != 1)
    die("pvm_spawn");
  raw_setup(tid);
  pvm_rounds(tid, warm);
  check_back("pvm", in_buf);
  raw_rounds(warm);
  check_back("rsr", raw_in);
  double pv[MAX_REPS], rv[MAX_REPS], ratio[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    pv[r] = pvm_rounds(tid, iters);
    rv[r] = raw_rounds(iters);
    ratio[r] = pv[r] / rv[r];
  }
  memset(in_buf, 0, size);
  pvm_rounds(tid, 1);
  check_back("pvm", in_buf);
  memset(raw_in, 0, size);
  raw_rounds(1);
  check_back("rsr", raw_in);
  pvm_initsend(PvmDataDefault);
  pvm_send(tid, TAG_QUIT);
  double mp = median(pv, reps), mr = median(rv, reps);
  printf("size %zu bytes, %ld round trips a rep, %d reps\n", size, iters, reps);
  printf("usec pvm %.1f\n", mp);
  printf("usec rsr %.1f\n", mr);
  printf("ratio pvm/rsr %.2f (median of the reps' ratios %.2f)\n", mp / mr,
         median(ratio, reps));
  nx_gp_release(&peer_gp);
  pvm_exit();
  return 0;
}
