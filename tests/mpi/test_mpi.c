/* Tests only the mpi protocol module needs, run as the ranks of one job under
 * mpirun: every rank checks the same things against the next rank at once; with
 * --no-mpirun, that the module loads spawn-only in a process no launcher
 * started and stands aside in one that inherited a rank's environment. */
#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nexus.h"

/* The handlers of the conformance suite's peer ("ping", "ping_t", "seq",
 * "report", "types", "third"): here every rank serves them. The suite's
 * own cases (ping-pong of every size, every type, a third context, many
 * senders) run for mpi under mpirun too (tests/conformance, meson test
 * conformance-mpi); what is left here is what only mpi has. */
#include "conf_handlers.h"

/* Usage, under mpirun -np N (N >= 2):
 *   test_mpi            the checks below; meson runs it with
 *                       NX_PROTOCOLS=mpi,tcp,local, so mpi must win over
 *                       tcp (and over ucx and ofi when run without it);
 *   test_mpi --own-mpi  the same, with MPI initialized by the program
 *                       (MPI_THREAD_MULTIPLE) before nx_init; then a second
 *                       nx_init in the same process;
 *   test_mpi --job-key MOD  with NX_PROTOCOLS=MOD,mpi,local and no NX_KEY:
 *                       the ranks agree on rank 0's key in nx_init
 *                       (docs/mpi.md, "The job's key"), so RSRs between
 *                       them go over MOD, which checks the key (tcp, ofi),
 *                       and arrive; 77 on every rank when MOD does not load;
 * and without mpirun:
 *   test_mpi --no-mpirun  the module loads spawn-only (no job, MPI not
 *                         started); where a rank's environment was
 *                         inherited or a setting is bad it is skipped,
 *                         with its reason, and nx_init works without it.
 * Each rank prints "rank R: N passed, M failed" and exits non-zero on a
 * failure; a watchdog ends a rank that hangs. */

#define WATCHDOG_S 100
#define WAIT_S 60

static int my_rank = -1;
static int passed, failed;

static int check(int ok, const char *what, const char *file, int line) {
  if (ok) {
    passed++;
  } else {
    failed++;
    fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", my_rank, file, line,
            what);
  }
  return ok;
}

#define CHECK(cond) check((cond) != 0, #cond, __FILE__, __LINE__)

static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", my_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_mpi: watchdog: a rank hung; aborting\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(3);
}

/* What this rank's own context receives. */
static struct {
  nx_mutex_t m;
  nx_cond_t c;
  long pongs;
  uint32_t last_tag;
  uint8_t *last_bytes;
  uint64_t last_len;
  long counts_in;
  uint64_t counts[4];
  long done;
  long idle_done;
  long stalled;
  long errors;
} in;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr;
  uint32_t tag = 0;
  uint64_t len = 0;
  uint8_t *bytes = NULL;
  if (nx_get_uint32(b, &tag) == 0 && nx_get_uint64(b, &len) == 0 &&
      (bytes = malloc(len > 0 ? len : 1)) != NULL &&
      nx_get_bytes(b, bytes, len) != 0) {
    free(bytes);
    bytes = NULL;
  }
  nx_mutex_lock(&in.m);
  free(in.last_bytes);
  in.last_bytes = bytes;
  in.last_len = bytes != NULL ? len : UINT64_MAX;
  in.last_tag = tag;
  in.pongs++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

static void on_counts(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr;
  uint64_t v[4] = {0, 0, 0, 0};
  nx_get_uint64_array(b, v, 4);
  nx_mutex_lock(&in.m);
  memcpy(in.counts, v, sizeof(v));
  in.counts_in++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

static void on_done(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&in.m);
  in.done++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

static void on_idle_done(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&in.m);
  in.idle_done++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

/* Blocks this rank's driver for a while, so that sends to it stay in
 * flight (the backpressure check); tells the sender first ("stalled"),
 * so that it knows the driver is blocked before it sends. */
static void on_stall(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) == 0 &&
      nx_rsr_init_name(&o, &reply, "stalled", 8) == 0)
    nx_rsr_send(o);
  nx_gp_release(&reply);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

static void on_stalled(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr, (void)b;
  nx_mutex_lock(&in.m);
  in.stalled++;
  nx_cond_broadcast(&in.c);
  nx_mutex_unlock(&in.m);
}

static void on_error(int err, uint64_t context, uint32_t handler, void *arg) {
  (void)arg;
  note("error callback: %s, context %#llx, handler %u", nx_strerror(err),
       (unsigned long long)context, handler);
  nx_mutex_lock(&in.m);
  in.errors++;
  nx_mutex_unlock(&in.m);
}

/* Waits until `*counter` exceeds `before`; 0 on timeout. */
static int wait_above(const long *counter, long before) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_S;
  nx_mutex_lock(&in.m);
  while (*counter <= before)
    if (nx_cond_timedwait(&in.c, &in.m, &deadline) == NX_ETIMEDOUT)
      break;
  int ok = *counter > before;
  nx_mutex_unlock(&in.m);
  return ok;
}

static long get(const long *counter) {
  nx_mutex_lock(&in.m);
  long v = *counter;
  nx_mutex_unlock(&in.m);
  return v;
}

/* The job. */

static nx_gp_t me = NX_GP_NULL;
static nx_gp_t *gps;
static int npeers;
static const nx_gp_t *peer; /* the next rank's initial context */

static int register_all(void) {
  nx_context_t *self = nx_context_self();
  int r = conf_register(self);
  struct {
    const char *name;
    nx_handler_fn fn;
  } mine[] = {{"pong", on_pong},           {"counts", on_counts},
              {"done", on_done},           {"stall", on_stall},
              {"idle_done", on_idle_done}, {"stalled", on_stalled}};
  for (size_t i = 0; r == 0 && i < sizeof(mine) / sizeof(mine[0]); i++)
    r = nx_handler_register(self, mine[i].name, mine[i].fn,
                            NX_HANDLER_NONTHREADED, NULL);
  return r;
}

static const nx_module_info_t *module(const char *name) {
  static nx_module_info_t info;
  for (int i = 0; i < nx_module_count(); i++)
    if (nx_module_info(i, &info) == 0 && strcmp(info.name, name) == 0)
      return &info;
  return NULL;
}

/* A cheaper module than mpi (ucx, ofi) may be built beside it and would
 * rightly win; the checks then say so instead of failing. */
static int cheaper_module_loaded(void) {
  const char *cheaper[] = {"ucx", "ofi"};
  for (size_t i = 0; i < 2; i++) {
    const nx_module_info_t *mi = module(cheaper[i]);
    if (mi != NULL && mi->loaded)
      return 1;
  }
  return 0;
}

static void test_peers(void) {
  int count = 0, rank = -2;
  int r = nx_context_peers(&gps, &count, &rank);
  if (!CHECK(r == 0)) {
    note("nx_context_peers: %s", nx_strerror(r));
    exit(1);
  }
  const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
  const char *wr = getenv("OMPI_COMM_WORLD_RANK");
  if (ws == NULL)
    ws = getenv("PMI_SIZE");
  if (wr == NULL)
    wr = getenv("PMIX_RANK");
  CHECK(ws == NULL || count == atoi(ws));
  CHECK(wr == NULL || rank == atoi(wr));
  CHECK(count >= 2);
  CHECK(rank >= 0 && rank < count);
  npeers = count;
  my_rank = rank;
  CHECK(nx_gp_context(&gps[rank]) == nx_gp_context(&me));
  CHECK(nx_gp_equal(&gps[rank], &me));
  const char *self_proto = nx_gp_protocol(&gps[rank]);
  CHECK(self_proto != NULL && strcmp(self_proto, "local") == 0);
  const nx_module_info_t *mi = module("mpi");
  CHECK(mi != NULL && mi->loaded);
  if (mi != NULL && mi->loaded) {
    const char *t = getenv("NX_MPI_THREAD");
    const char *level = t != NULL && strcmp(t, "serialized") == 0
                            ? "MPI_THREAD_SERIALIZED"
                            : "MPI_THREAD_MULTIPLE";
    CHECK(strstr(mi->backend, level) != NULL);
    CHECK(strncmp(mi->backend, "Open MPI", 8) == 0 ||
          strstr(mi->backend, "MPICH") != NULL);
  }
  int cheaper = cheaper_module_loaded();
  for (int i = 0; i < count; i++) {
    if (i == rank)
      continue;
    const char *p = nx_gp_protocol(&gps[i]);
    if (cheaper)
      note("rank %d is reached over %s (a module cheaper than mpi is loaded)",
           i, p != NULL ? p : "nothing");
    else
      CHECK(p != NULL && strcmp(p, "mpi") == 0);
    char info[256] = "";
    char want[64];
    snprintf(want, sizeof(want), "mpi rank %d of job ", i);
    if (p != NULL && strcmp(p, "mpi") == 0) {
      CHECK(nx_gp_protocol_info(&gps[i], info, sizeof(info)) == 0);
      CHECK(strncmp(info, want, strlen(want)) == 0);
    }
  }
  peer = &gps[(rank + 1) % count];
}

static void fill(uint8_t *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (uint8_t)x;
  }
}

static int ping(const nx_gp_t *to, const char *handler, uint32_t tag,
                const uint8_t *bytes, size_t len) {
  nx_buffer_t *b = NULL;
  int r = nx_rsr_init_name(&b, to, handler, len + 128);
  if (r == 0 && (r = nx_put_gp(b, &me)) == 0 &&
      (r = nx_put_uint32(b, tag)) == 0 && (r = nx_put_uint64(b, len)) == 0 &&
      (r = nx_put_bytes(b, bytes, len)) == 0)
    return nx_rsr_send(b);
  if (r != 0 && b != NULL)
    nx_buffer_release(b);
  return r;
}

/* Asks the peer for its "seq" totals since the last report (which resets
 * them) and checks them. */
static void check_counts(uint64_t total) {
  nx_buffer_t *b;
  if (!CHECK(nx_rsr_init_name(&b, peer, "report", 64) == 0))
    return;
  CHECK(nx_put_gp(b, &me) == 0);
  long before = get(&in.counts_in);
  CHECK(nx_rsr_send(b) == 0);
  CHECK(wait_above(&in.counts_in, before));
  nx_mutex_lock(&in.m);
  uint64_t c[4];
  memcpy(c, in.counts, sizeof(c));
  nx_mutex_unlock(&in.m);
  if (!CHECK(c[0] == total && c[1] == 0 && c[2] == 0 && c[3] == 0))
    note("seq totals: %llu received (want %llu), %llu duplicates, %llu out "
         "of order, %llu malformed",
         (unsigned long long)c[0], (unsigned long long)total,
         (unsigned long long)c[1], (unsigned long long)c[2],
         (unsigned long long)c[3]);
}

static int seq(uint32_t sender, uint32_t q, const uint8_t *extra, size_t n,
               unsigned flags) {
  nx_buffer_t *b;
  int r = nx_rsr_init(&b, peer, nx_handler_id("seq"), 16 + n);
  if (r != 0)
    return r;
  if ((r = nx_put_uint32(b, sender)) != 0 || (r = nx_put_uint32(b, q)) != 0 ||
      (n > 0 && (r = nx_put_bytes(b, extra, n)) != 0)) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send_flags(b, flags);
}

/* One sender, frames of sizes that alternate between one message and a
 * header with payload messages: the order must hold across both. */
static void test_order_mixed(void) {
  const size_t sizes[] = {
      0, 100, 9000, 70000, 8000, ((size_t)1 << 20) + 3, 10, (size_t)17 << 20};
  uint8_t *extra = malloc((size_t)17 << 20);
  if (!CHECK(extra != NULL))
    return;
  fill(extra, (size_t)17 << 20, 99);
  int errors = 0, n = 0;
  for (uint32_t q = 0; q < 64; q++, n++)
    errors += seq(5, q, extra, sizes[q % 8], 0) != 0;
  CHECK(errors == 0);
  check_counts((uint64_t)n);
  free(extra);
}

/* With NX_MPI_QUEUE_MAX=4m (set by main) and the peer's driver stalled, 1
 * MiB frames stay in flight: a non-blocking send soon gets NX_EAGAIN, and
 * blocking sends wait, then all arrive, in order. */
static void backpressure(void) {
  size_t n = (size_t)1 << 20;
  uint8_t *extra = malloc(n);
  if (!CHECK(extra != NULL))
    return;
  fill(extra, n, 7);
  nx_buffer_t *b;
  long before = get(&in.stalled);
  CHECK(nx_rsr_init_name(&b, peer, "stall", 128) == 0 &&
        nx_put_gp(b, &me) == 0 && nx_rsr_send(b) == 0);
  CHECK(wait_above(&in.stalled, before));
  uint32_t q = 0;
  int r = 0;
  while (q < 16 && (r = seq(6, q, extra, n, NX_RSR_NONBLOCK)) == 0)
    q++;
  if (!CHECK(r == NX_EAGAIN))
    note("non-blocking sends: %s after %u frames", nx_strerror(r), q);
  CHECK(q >= 1 && q <= 5);
  int errors = 0;
  for (uint32_t end = q + 20; q < end; q++)
    errors += seq(6, q, extra, n, 0) != 0;
  CHECK(errors == 0);
  check_counts(q);
  free(extra);
}

static void finish_together(void);

/* One rank at a time, so that no rank is stalled while it is the one
 * measuring; finish_together is the barrier between turns. */
static void test_backpressure(void) {
  for (int turn = 0; turn < npeers; turn++) {
    if (turn == my_rank)
      backpressure();
    finish_together();
  }
}

/* MPI has no descriptor to sleep on: while rank 1's engine sleeps (rank 0
 * idles first, so both have been idle for a while), the module's watcher
 * must wake it when rank 0's ping arrives, or the pong waits for the
 * engine's 100 ms poll (then every round trip takes 100 to 300 ms). The
 * median of 5 tries is checked, so that one scheduling hiccup on a loaded
 * machine does not count. Only ranks 0 and 1 take part. */
static void test_idle_wakeup(void) {
  if (my_rank > 1)
    return;
  if (my_rank == 1) {
    /* Serve pings until rank 0 says it is done. */
    CHECK(wait_above(&in.idle_done, 0));
    return;
  }
  double ms[5];
  uint8_t bytes[8] = {0};
  for (int i = 0; i < 5; i++) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long before = get(&in.pongs);
    CHECK(ping(&gps[1], "ping", 1000u + (uint32_t)i, bytes, 8) == 0);
    CHECK(wait_above(&in.pongs, before));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
            (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (getenv("TEST_MPI_VERBOSE") != NULL)
      note("idle round trip %d: %.2f ms", i, ms[i]);
  }
  for (int i = 1; i < 5; i++) /* insertion sort */
    for (int k = i; k > 0 && ms[k] < ms[k - 1]; k--) {
      double t = ms[k];
      ms[k] = ms[k - 1];
      ms[k - 1] = t;
    }
  if (!CHECK(ms[2] < 30))
    note("a round trip to an idle rank took %.1f ms (median)", ms[2]);
  nx_buffer_t *b;
  CHECK(nx_rsr_init_name(&b, &gps[1], "idle_done", 8) == 0 &&
        nx_rsr_send(b) == 0);
}

/* Descriptors: gps whose only descriptor is an mpi one, with bytes that
 * are wrong in every way, reach nothing and crash nothing. */

struct mpi_desc {
  uint8_t scope_len;
  uint8_t scope[64];
  uint16_t data_len;
  uint8_t data[256];
};

/* Finds the mpi descriptor in a gp's encoding. */
static int find_mpi_desc(const nx_gp_t *gp, struct mpi_desc *out) {
  nx_buffer_t *b;
  const void *data;
  size_t len;
  int found = 0;
  if (nx_buffer_create(256, &b) != 0)
    return 0;
  if (nx_put_gp(b, gp) == 0 && nx_buffer_bytes(b, &data, &len) == 0 &&
      len > 18) {
    const uint8_t *p = data, *end = p + len;
    p += 17; /* tag, context, address */
    unsigned count = *p++;
    for (unsigned i = 0; i < count && p < end; i++) {
      unsigned nlen = *p++;
      const uint8_t *name = p;
      p += nlen + 2;
      if (p >= end)
        break;
      unsigned slen = *p++;
      const uint8_t *scope = p;
      p += slen;
      if (p + 2 > end)
        break;
      unsigned dlen = (unsigned)p[0] | (unsigned)p[1] << 8;
      p += 2;
      if (p + dlen > end)
        break;
      if (nlen == 3 && memcmp(name, "mpi", 3) == 0 && slen <= 64 &&
          dlen <= 256) {
        out->scope_len = (uint8_t)slen;
        memcpy(out->scope, scope, slen);
        out->data_len = (uint16_t)dlen;
        memcpy(out->data, p, dlen);
        found = 1;
      }
      p += dlen;
    }
  }
  nx_buffer_release(b);
  return found;
}

/* A gp to a made-up context whose list holds `d` alone. */
static int make_gp(const struct mpi_desc *d, nx_gp_t *gp) {
  uint8_t bytes[512];
  size_t n = 0;
  int native = nx_format_native();
  uint64_t ctx = 0x7777000000000001ull, addr = 0;
  bytes[n++] = 0x0D;
  for (int i = 0; i < 8; i++)
    bytes[n++] = (uint8_t)(native == NX_FORMAT_LITTLE ? ctx >> (8 * i)
                                                      : ctx >> (56 - 8 * i));
  for (int i = 0; i < 8; i++)
    bytes[n++] = (uint8_t)(addr >> (8 * i));
  bytes[n++] = 1;
  bytes[n++] = 3;
  memcpy(bytes + n, "mpi", 3);
  n += 3;
  bytes[n++] = 2; /* wire version (MPIMOD_WIRE_VERSION) */
  bytes[n++] = 0;
  bytes[n++] = d->scope_len;
  memcpy(bytes + n, d->scope, d->scope_len);
  n += d->scope_len;
  bytes[n++] = (uint8_t)d->data_len;
  bytes[n++] = (uint8_t)(d->data_len >> 8);
  memcpy(bytes + n, d->data, d->data_len);
  n += d->data_len;
  nx_buffer_t *b;
  int r = nx_buffer_from_bytes(bytes, n, native, &b);
  if (r != 0)
    return r;
  r = nx_get_gp(b, gp);
  nx_buffer_release(b);
  return r;
}

/* Returns the protocol a descriptor resolves to ("" for none) and checks
 * that an RSR through it fails cleanly when there is none. */
static const char *resolve(const struct mpi_desc *d) {
  nx_gp_t gp = NX_GP_NULL;
  int r = make_gp(d, &gp);
  if (r != 0)
    return r == NX_EPROTO ? "" : "(make_gp failed)";
  const char *p = nx_gp_protocol(&gp);
  if (p == NULL) {
    nx_buffer_t *b;
    if (nx_rsr_init_name(&b, &gp, "ping", 16) == 0) {
      int s = nx_rsr_send(b);
      if (s != NX_EUNREACH)
        p = "(a send to it did not fail with NX_EUNREACH)";
    }
  }
  nx_gp_release(&gp);
  return p != NULL ? p : "";
}

static void test_descriptors(void) {
  struct mpi_desc good, mine, d;
  if (!CHECK(find_mpi_desc(peer, &good)) || !CHECK(find_mpi_desc(&me, &mine)))
    return;
  CHECK(good.scope_len == 16 && good.data_len == 24);
  CHECK(memcmp(good.scope, mine.scope, good.scope_len) == 0);
  /* The same descriptor alone: reached over mpi. */
  CHECK(strcmp(resolve(&good), "mpi") == 0);
  d = good;
  d.data_len = 0;
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.data_len = 23;
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.data_len = 25;
  d.data[24] = 0;
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.data[0] = 2; /* another descriptor version */
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.data[2] = 1; /* reserved bytes */
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  uint32_t bad_ranks[] = {(uint32_t)npeers, 0xffffffffu, 0x80000000u,
                          (uint32_t)my_rank};
  for (int i = 0; i < 4; i++) {
    for (int k = 0; k < 4; k++)
      d.data[4 + k] = (uint8_t)(bad_ranks[i] >> (8 * k));
    CHECK(strcmp(resolve(&d), "") == 0);
  }
  d = good;
  memcpy(d.data + 8, mine.data + 8, 16); /* our own uuid */
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.data[8] ^= 0x55; /* a uuid that is not the peer rank's */
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.scope[3] ^= 1; /* another job */
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.scope_len = 15;
  CHECK(strcmp(resolve(&d), "") == 0);
  d = good;
  d.scope_len = 0;
  CHECK(strcmp(resolve(&d), "") == 0);
  /* Random bytes of random lengths. */
  uint32_t x = 12345u + (uint32_t)my_rank;
  int odd = 0;
  for (int i = 0; i < 300; i++) {
    d = good;
    x = x * 1103515245u + 12345u;
    d.data_len = (uint16_t)((x >> 8) % 40);
    fill(d.data, d.data_len, x);
    if (i % 3 == 0) {
      d.scope_len = (uint8_t)((x >> 20) % 33);
      fill(d.scope, d.scope_len, x + 1);
    }
    odd += strcmp(resolve(&d), "") != 0;
  }
  CHECK(odd == 0);
}

/* Every rank tells every other that it is done, and waits for theirs: a
 * barrier, so that no rank finalizes while another still talks to it. */
static void finish_together(void) {
  for (int i = 0; i < npeers; i++) {
    if (i == my_rank)
      continue;
    nx_buffer_t *b;
    CHECK(nx_rsr_init_name(&b, &gps[i], "done", 8) == 0 && nx_rsr_send(b) == 0);
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += WAIT_S;
  nx_mutex_lock(&in.m);
  while (in.done < npeers - 1)
    if (nx_cond_timedwait(&in.c, &in.m, &deadline) == NX_ETIMEDOUT)
      break;
  CHECK(in.done >= npeers - 1);
  in.done -= npeers - 1;
  nx_mutex_unlock(&in.m);
}

static void release_peers(void) {
  for (int i = 0; i < npeers; i++)
    nx_gp_release(&gps[i]);
  free(gps);
  gps = NULL;
  peer = NULL;
  nx_gp_release(&me);
}

static int start(void) {
  int r = nx_init(NULL, NULL);
  if (r != 0) {
    note("nx_init: %s", nx_strerror(r));
    return r;
  }
  if (register_all() != 0 || nx_error_cb_set(on_error, NULL) != 0 ||
      nx_gp_make(NULL, &me) != 0) {
    note("setting up the context failed");
    return NX_EIO;
  }
  return 0;
}

static int run_job(int own_mpi) {
  int provided = 0;
  if (own_mpi && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) !=
                     MPI_SUCCESS)
    return 2;
  if (start() != 0)
    return 2;
  test_peers();
  test_order_mixed();
  test_backpressure();
  test_descriptors();
  /* Quiet first: no rank may still be stalled by the backpressure check. */
  finish_together();
  test_idle_wakeup();
  finish_together();
  nx_stats_t st;
  if (CHECK(nx_stats_get(&st) == 0))
    CHECK(st.drop_bad_frame == 0 && st.rsr_failed == 0 && st.peers_failed == 0);
  CHECK(get(&in.errors) == 0);
  release_peers();
  CHECK(nx_finalize() == 0);
  int fin = 1;
  MPI_Finalized(&fin);
  /* nexus finalizes MPI only if it started it. */
  CHECK(fin == !own_mpi);
  if (own_mpi) {
    /* MPI still runs: a second nexus over it works. */
    if (CHECK(start() == 0)) {
      test_peers();
      uint8_t bytes[64];
      fill(bytes, sizeof(bytes), 3);
      long before = get(&in.pongs);
      CHECK(ping(peer, "ping", 99, bytes, sizeof(bytes)) == 0);
      CHECK(wait_above(&in.pongs, before));
      finish_together();
      release_peers();
      CHECK(nx_finalize() == 0);
    }
    MPI_Finalize();
  }
  return 0;
}

/* Ranks started without NX_KEY each draw a key; nx_init makes them take
 * rank 0's. A rank with another key would be refused by MOD (tcp's
 * handshake fails, ofi drops the sender), and the ring of pings below
 * would not close. */
static int run_job_key(const char *mod) {
  unsetenv("NX_KEY"); /* as mpirun starts ranks: no key handed to them */
  if (start() != 0)
    return 2;
  const nx_module_info_t *mi = module(mod);
  if (mi == NULL || !mi->loaded) {
    printf("SKIPPED: the %s module does not load here: %s\n", mod,
           mi != NULL ? mi->reason : "not built");
    nx_gp_release(&me);
    nx_finalize();
    return 77;
  }
  int r = nx_context_peers(&gps, &npeers, &my_rank);
  if (!CHECK(r == 0 && npeers >= 2)) {
    note("nx_context_peers: %s", nx_strerror(r));
    return 1;
  }
  peer = &gps[(my_rank + 1) % npeers];
  const char *p = nx_gp_protocol(peer);
  if (!CHECK(p != NULL && strcmp(p, mod) == 0))
    note("the next rank is reached over %s", p != NULL ? p : "nothing");
  uint8_t bytes[64];
  fill(bytes, sizeof(bytes), 5);
  long before = get(&in.pongs);
  CHECK(ping(peer, "ping", 7, bytes, sizeof(bytes)) == 0);
  if (CHECK(wait_above(&in.pongs, before))) {
    nx_mutex_lock(&in.m);
    CHECK(in.last_tag == 7 && in.last_len == sizeof(bytes) &&
          memcmp(in.last_bytes, bytes, sizeof(bytes)) == 0);
    nx_mutex_unlock(&in.m);
  }
  finish_together();
  nx_stats_t st;
  if (CHECK(nx_stats_get(&st) == 0))
    CHECK(st.drop_bad_frame == 0 && st.drop_no_context == 0 &&
          st.drop_no_handler == 0 && st.rsr_failed == 0 &&
          st.peers_failed == 0);
  CHECK(get(&in.errors) == 0);
  release_peers();
  CHECK(nx_finalize() == 0);
  return 0;
}

/* Without mpirun. */

static const char *skip_reason(void) {
  const nx_module_info_t *mi = module("mpi");
  if (mi == NULL)
    return "(no mpi module found)";
  return mi->loaded ? "(loaded)" : mi->reason;
}

static void expect_skipped(const char *want) {
  int r = nx_init(NULL, NULL);
  if (!CHECK(r == 0)) {
    note("nx_init: %s", nx_strerror(r));
    return;
  }
  const char *why = skip_reason();
  if (!CHECK(strstr(why, want) != NULL))
    note("mpi: \"%s\", expected \"%s\"", why, want);
  /* nexus works without it: an RSR to this process's own context. */
  nx_gp_t self = NX_GP_NULL;
  CHECK(nx_handler_register(nx_context_self(), "pong", on_pong,
                            NX_HANDLER_NONTHREADED, NULL) == 0);
  CHECK(nx_gp_make(NULL, &self) == 0);
  nx_buffer_t *b;
  long before = get(&in.pongs);
  CHECK(nx_rsr_init_name(&b, &self, "pong", 64) == 0 &&
        nx_put_uint32(b, 1) == 0 && nx_put_uint64(b, 0) == 0 &&
        nx_put_bytes(b, "", 0) == 0 && nx_rsr_send(b) == 0);
  CHECK(wait_above(&in.pongs, before));
  nx_gp_release(&self);
  CHECK(nx_finalize() == 0);
}

/* No launcher at all: the module loads for spawning only (test_spawn.c),
 * knows no job and leaves MPI alone. */
static void expect_spawn_only(void) {
  int r = nx_init(NULL, NULL);
  if (!CHECK(r == 0)) {
    note("nx_init: %s", nx_strerror(r));
    return;
  }
  const nx_module_info_t *mi = module("mpi");
  CHECK(mi != NULL && mi->loaded);
  if (mi != NULL && !CHECK(strstr(mi->backend, "spawning only") != NULL))
    note("mpi backend: \"%s\"", mi->backend);
  nx_gp_t *all = NULL;
  int n = 0;
  CHECK(nx_context_peers(&all, &n, NULL) == NX_ENOENT);
  CHECK(nx_finalize() == 0);
}

static int run_alone(void) {
  my_rank = 0;
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMIX_RANK");
  unsetenv("PMI_SIZE");
  unsetenv("NX_MPI_PID");
  expect_spawn_only();
  /* A process that inherited a rank's environment (a child the rank
   * started) is no rank either. */
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("NX_MPI_PID", "1", 1);
  expect_skipped("not started by mpirun: the MPI environment was inherited");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("NX_MPI_PID");
  /* Bad settings are reasons too. */
  setenv("NX_MPI_THREAD", "bogus", 1);
  expect_skipped("NX_MPI_THREAD=bogus");
  unsetenv("NX_MPI_THREAD");
  setenv("NX_MPI_QUEUE_MAX", "12x", 1);
  expect_skipped("NX_MPI_QUEUE_MAX=12x");
  unsetenv("NX_MPI_QUEUE_MAX");
  int inited = 1;
  MPI_Initialized(&inited);
  CHECK(inited == 0); /* the module never started MPI */
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  nx_mutex_init(&in.m);
  nx_cond_init(&in.c);
  int r;
  if (strcmp(mode, "--no-mpirun") == 0) {
    r = run_alone();
  } else if (strcmp(mode, "--job-key") == 0 && argc == 3) {
    r = run_job_key(argv[2]);
  } else if (mode[0] == '\0' || strcmp(mode, "--own-mpi") == 0) {
    /* Small enough that a stalled peer makes senders wait (backpressure). */
    setenv("NX_MPI_QUEUE_MAX", "4m", 1);
    r = run_job(mode[0] != '\0');
  } else {
    fprintf(stderr,
            "usage: test_mpi [--own-mpi | --job-key MOD | --no-mpirun]\n");
    return 2;
  }
  free(in.last_bytes);
  printf("rank %d: %d passed, %d failed\n", my_rank, passed, failed);
  return r != 0 ? r : failed > 0;
}
