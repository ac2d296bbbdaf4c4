/* NX_TRACE's event logs (docs/tracing.md, nexus/src/base/trace_format.h),
 * read back and checked against what this program did: RSRs between two
 * contexts of this process (plain, ordered, by reference, to a threaded
 * handler) and to a process context it creates, whose log is checked too.
 *
 *   trace_record            the whole test (a folder of its own in TMPDIR)
 *   trace_record child      the process context it creates
 *   trace_record unwritable nx_init must fail with NX_EIO
 * Exit 0 when every check held; the failed checks are printed. */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/trace_format.h"
#include "expect.h"
#include "nexus.h"

#define N_PLAIN 100
#define N_ORDERED 10
#define N_THREADED 10
#define N_REF 5
#define REF_BYTES 65536
#define N_CHILD 20

static int failures;
#define CHECK NXT_CHECK /* expect.h */

/* The program: pings to B (or to the child) answered by pongs to A.
 * In the child, a_gp (its creator) is known only after nx_context_peers
 * has told the creator it is ready, so a ping can run before it is set:
 * a_gp is written and read under gp_lock, which the child holds from
 * before nx_context_peers until a_gp is set. */
static nx_gp_t a_gp;
static pthread_mutex_t gp_lock = PTHREAD_MUTEX_INITIALIZER;
static nx_mutex_t m;
static nx_cond_t c;
static long pongs;

static void on_pong(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr, (void)buf;
  nx_mutex_lock(&m);
  pongs++;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static int pong_init(nx_buffer_t **out) {
  pthread_mutex_lock(&gp_lock);
  int r = nx_rsr_init_name(out, &a_gp, "pong", 8);
  pthread_mutex_unlock(&gp_lock);
  return r;
}

static void on_ping(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  int32_t v;
  nx_buffer_t *out;
  if (nx_get_int32(buf, &v) == 0 && pong_init(&out) == 0) {
    nx_put_int32(out, v);
    nx_rsr_send(out);
  }
}

static void on_ping_ref(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  const void *p;
  nx_buffer_t *out;
  (void)ctx, (void)addr;
  if (nx_get_bytes_ptr(buf, &p, REF_BYTES) == 0 && pong_init(&out) == 0) {
    nx_put_int32(out, 1);
    nx_rsr_send(out);
  }
}

/* A threaded handler that blocks until "release" came: its run parks and
 * ends where it resumes (a MOVED end, or others' runs inside it). */
static nx_mutex_t bm;
static nx_cond_t bc;
static int released;
static void on_block(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  nx_mutex_lock(&bm);
  while (!released)
    nx_cond_wait(&bc, &bm);
  nx_mutex_unlock(&bm);
  on_ping(ctx, addr, buf);
}
static void on_release(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  nx_mutex_lock(&bm);
  released = 1;
  nx_cond_broadcast(&bc);
  nx_mutex_unlock(&bm);
  on_ping(ctx, addr, buf);
}

static int b_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  int r =
      nx_handler_register(ctx, "ping", on_ping, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "tping", on_ping, NX_HANDLER_THREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_ref", on_ping_ref,
                            NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "block", on_block, NX_HANDLER_THREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "release", on_release, NX_HANDLER_THREADED,
                            NULL);
  return r;
}

static void wait_pongs(long want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  nx_mutex_lock(&m);
  while (pongs < want && nx_cond_timedwait(&c, &m, &until) != NX_ETIMEDOUT)
    ;
  nx_mutex_unlock(&m);
}

static int send_ping(const nx_gp_t *to, const char *handler, unsigned flags) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, to, handler, 8);
  if (r == 0 && (r = nx_put_int32(b, 7)) == 0)
    r = nx_rsr_send_flags(b, flags);
  return r;
}

static void ref_released(void *arg, const void *v, int status) {
  (void)arg, (void)v, (void)status;
}

/* The child: answers pings from its creator until it is destroyed. */
static int child_main(void) {
  if (nx_init(NULL, NULL) != 0)
    return 1;
  nx_context_t *self = nx_context_self();
  nx_gp_t *peers;
  int n;
  if (nx_handler_register(self, "ping", on_ping, NX_HANDLER_NONTHREADED,
                          NULL) != 0 ||
      nx_handler_register(self, "ping_ref", on_ping_ref, NX_HANDLER_NONTHREADED,
                          NULL) != 0)
    return 1;
  pthread_mutex_lock(&gp_lock);
  int ok = nx_context_peers(&peers, &n, NULL) == 0 && n == 1;
  if (ok) {
    a_gp = peers[0]; /* the creator */
    free(peers);
  }
  pthread_mutex_unlock(&gp_lock);
  if (!ok)
    return 1;
  int r = nx_context_serve();
  pthread_mutex_lock(&gp_lock);
  nx_gp_release(&a_gp);
  pthread_mutex_unlock(&gp_lock);
  nx_finalize();
  return r == 0 ? 0 : 1;
}

/* A log read whole. */
struct log {
  struct nxt_file_hdr h;
  struct nxt_rec *r; /* records, names skipped */
  char (*name)[64];  /* r[i]'s name for a DEF record */
  uint64_t *thread;  /* r[i]'s writer */
  size_t n;
};

static int read_log(const char *path, struct log *l) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return -1;
  memset(l, 0, sizeof(*l));
  int ok = fread(&l->h, sizeof(l->h), 1, f) == 1 &&
           memcmp(l->h.magic, NXT_MAGIC, 8) == 0 && l->h.version == NXT_VERSION;
  size_t cap = 0;
  struct nxt_chunk ch;
  uint8_t *buf = NULL;
  while (ok && fread(&ch, sizeof(ch), 1, f) == 1) {
    if (ch.magic != NXT_CHUNK_MAGIC || ch.bytes % 8 != 0 ||
        (buf = realloc(buf, ch.bytes + 1)) == NULL ||
        fread(buf, 1, ch.bytes, f) != ch.bytes) {
      ok = 0;
      break;
    }
    struct nxt_dstate st = {ch.thread, ch.runs0};
    for (uint32_t at = 0; at < ch.bytes;) {
      if (l->n == cap) {
        cap = cap ? cap * 2 : 1024;
        l->r = realloc(l->r, cap * sizeof(*l->r));
        l->name = realloc(l->name, cap * sizeof(*l->name));
        l->thread = realloc(l->thread, cap * sizeof(*l->thread));
      }
      struct nxt_rec *r = &l->r[l->n];
      size_t len = nxt_decode(buf + at, ch.bytes - at, 0, l->h.proc_id, &st, r);
      if (len == 0) {
        ok = 0;
        break;
      }
      l->name[l->n][0] = '\0';
      l->thread[l->n] = ch.thread;
      if (r->type >= NXT_DEF_HANDLER)
        snprintf(l->name[l->n], sizeof(l->name[0]), "%.*s", (int)r->bytes,
                 (const char *)buf + at + sizeof(*r));
      else if (r->type != NXT_CLOCK)
        r->t = nxt_ns(&ch, r->t);
      at += (uint32_t)len;
      l->n++;
    }
  }
  free(buf);
  fclose(f);
  if (!ok) {
    free(l->r);
    free(l->name);
    free(l->thread);
    return -1;
  }
  return 0;
}

static void free_log(struct log *l) {
  free(l->r);
  free(l->name);
  free(l->thread);
}

static size_t count(const struct log *l, uint8_t type, uint64_t ctx,
                    uint64_t peer, uint32_t handler, uint16_t flags) {
  size_t k = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct nxt_rec *r = &l->r[i];
    if (r->type == type && (ctx == 0 || r->ctx == ctx) &&
        (peer == 0 || r->peer == peer) &&
        (handler == 0 || r->handler == handler) && (r->flags & flags) == flags)
      k++;
  }
  return k;
}

static int has_name(const struct log *l, uint8_t type, const char *name) {
  for (size_t i = 0; i < l->n; i++)
    if (l->r[i].type == type && strcmp(l->name[i], name) == 0)
      return 1;
  return 0;
}

/* Every BEGIN has one END with its run number, in its context, no
 * earlier; returns the pairs. */
static size_t check_runs(const struct log *l) {
  size_t pairs = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct nxt_rec *b = &l->r[i];
    if (b->type != NXT_BEGIN)
      continue;
    size_t ends = 0;
    for (size_t j = 0; j < l->n; j++) {
      const struct nxt_rec *e = &l->r[j];
      if (e->type != NXT_END || e->x != b->x)
        continue;
      ends++;
      CHECK(e->ctx == 0 && e->handler == 0 && e->bytes == 0,
            "run %#llx: its END names more than its run",
            (unsigned long long)b->x);
      CHECK(!(e->flags & NXT_F_MOVED) == (l->thread[j] == l->thread[i]),
            "run %#llx: MOVED is %s but it ended on %s thread",
            (unsigned long long)b->x, e->flags & NXT_F_MOVED ? "set" : "clear",
            l->thread[j] == l->thread[i] ? "its" : "another");
      CHECK(e->t >= b->t, "run %#llx ends %lld ns before it began",
            (unsigned long long)b->x, (long long)(b->t - e->t));
    }
    CHECK(ends == 1, "run %#llx has %zu ENDs", (unsigned long long)b->x, ends);
    pairs++;
  }
  return pairs;
}

/* Each thread's stamps never go back, and none is before the log began. */
static void check_times(const struct log *l) {
  for (size_t i = 0; i < l->n; i++) {
    CHECK(l->r[i].t >= l->h.mono0 || l->r[i].type == NXT_CLOCK,
          "record %zu before the log began", i);
    for (size_t j = i + 1; j < l->n; j++)
      if (l->thread[j] == l->thread[i]) {
        CHECK(l->r[j].t >= l->r[i].t || l->r[i].type >= NXT_DEF_HANDLER ||
                  l->r[j].type >= NXT_DEF_HANDLER,
              "thread %llu: record %zu (type %u) at %llu after %zu at %llu",
              (unsigned long long)l->thread[i], j, l->r[j].type,
              (unsigned long long)l->r[j].t, i, (unsigned long long)l->r[i].t);
        break;
      }
  }
}

/* The clock offsets `l` measured, all to the process of context `to`:
 * one host, one CLOCK_MONOTONIC, so each estimate is within half its
 * round trip of 0 (NTP's bound, exact when both read one clock). At
 * least one; with `end` (a time), one before it, at the start, and one
 * after it, at the end. Returns how many. */
static size_t check_offsets(const struct log *l, uint64_t to, uint64_t end,
                            const char *who) {
  size_t n = 0, late = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct nxt_rec *r = &l->r[i];
    if (r->type != NXT_OFFSET)
      continue;
    n++;
    int64_t off = (int64_t)r->x;
    CHECK(r->peer == (to & ~0xffffffffull),
          "an offset to process %#llx, not %#llx's",
          (unsigned long long)(r->peer >> 32), (unsigned long long)to);
    CHECK(r->aux > 0 && r->aux < UINT32_MAX &&
              (off < 0 ? -off : off) <= (int64_t)r->aux / 2 + 1,
          "offset %lld ns, round trip %u ns: one clock is within half the "
          "round trip of itself",
          (long long)off, r->aux);
    late += end != 0 && r->t >= end;
  }
  CHECK(n >= 1 && (end == 0 || (late >= 1 && late < n)),
        "%s: %zu clock offsets, %zu of them at the end", who, n, late);
  return n;
}

static void check_common(const struct log *l, const char *who) {
  CHECK(count(l, NXT_CLOCK, 0, 0, 0, 0) >= 1, "%s: no CLOCK record", who);
  CHECK(count(l, NXT_FINALIZE, 0, 0, 0, 0) == 1, "%s: FINALIZE missing", who);
  CHECK(has_name(l, NXT_DEF_MODULE, "local") &&
            has_name(l, NXT_DEF_MODULE, "tcp"),
        "%s: the modules are not named", who);
  check_times(l);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child_main();
  if (argc > 1 && strcmp(argv[1], "unwritable") == 0) {
    setenv("NX_TRACE", "/proc/nexus-trace-test", 1);
    int r = nx_init(NULL, NULL);
    CHECK(r == NX_EIO, "nx_init gave %d (%s)", r, nx_strerror(r));
    if (r == 0)
      nx_finalize();
    return failures != 0;
  }

  char dir[] = "/tmp/nx-trace-XXXXXX";
  const char *tmp = getenv("TMPDIR");
  char dirbuf[512];
  snprintf(dirbuf, sizeof(dirbuf), "%s/nx-trace-XXXXXX",
           tmp != NULL ? tmp : "/tmp");
  char *d = mkdtemp(dirbuf);
  if (d == NULL && (d = mkdtemp(dir)) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  setenv("NX_TRACE", d, 1);
  nx_mutex_init(&m);
  nx_cond_init(&c);
  nx_mutex_init(&bm);
  nx_cond_init(&bc);
  if (nx_init(NULL, NULL) != 0) {
    fprintf(stderr, "nx_init failed\n");
    return 1;
  }
  nx_context_t *a = nx_context_self();
  nx_gp_t b_gp, child_gp;
  int r = nx_handler_register(a, "pong", on_pong, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_gp_make(NULL, &a_gp);
  if (r == 0)
    r = nx_context_create_local(b_init, NULL, &b_gp);
  nx_node_t node;
  if (r == 0)
    r = nx_nodes_acquire("localhost", 1, &node);
  char *cargv[] = {argv[0], "child", NULL};
  if (r == 0)
    r = nx_context_create(&node, argv[0], cargv, &child_gp);
  if (r != 0) {
    fprintf(stderr, "setting up: %s\n", nx_strerror(r));
    return 1;
  }
  long want = 0;
  for (int i = 0; i < N_PLAIN; i++, want++)
    CHECK(send_ping(&b_gp, "ping", 0) == 0, "plain ping %d", i);
  for (int i = 0; i < N_ORDERED; i++, want++)
    CHECK(send_ping(&b_gp, "ping", NX_RSR_ORDERED) == 0, "ordered ping %d", i);
  for (int i = 0; i < N_THREADED; i++, want++)
    CHECK(send_ping(&b_gp, "tping", 0) == 0, "threaded ping %d", i);
  static uint8_t big[REF_BYTES];
  for (int i = 0; i < 2 * N_REF; i++, want++) {
    nx_buffer_t *b;
    CHECK(nx_rsr_init_name(&b, i < N_REF ? &b_gp : &child_gp, "ping_ref", 0) ==
                  0 &&
              nx_put_bytes_ref(b, big, REF_BYTES, ref_released, NULL) == 0 &&
              nx_rsr_send(b) == 0,
          "ping by reference %d", i);
  }
  for (int i = 0; i < N_CHILD; i++, want++)
    CHECK(send_ping(&child_gp, "ping", 0) == 0, "ping to the child %d", i);
  wait_pongs(want);
  CHECK(send_ping(&b_gp, "block", 0) == 0, "block");
  CHECK(send_ping(&b_gp, "release", 0) == 0, "release");
  want += 2;
  wait_pongs(want);
  CHECK(pongs == want, "%ld of %ld pongs", pongs, want);
  uint64_t a_id = nx_context_id(a), b_id = b_gp.context,
           child_id = child_gp.context;
  CHECK(nx_context_destroy(&child_gp) == 0, "destroying the child");
  nx_gp_release(&child_gp);
  nx_gp_release(&b_gp);
  nx_gp_release(&a_gp);
  nx_node_release(&node);
  CHECK(nx_finalize() == 0, "nx_finalize");

  /* The logs: this process's and the child's, nothing else. */
  struct log me, child;
  int have_me = 0, have_child = 0, others = 0;
  DIR *dd = opendir(d);
  struct dirent *e;
  char path[1024];
  while (dd != NULL && (e = readdir(dd)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "%s/%s", d, e->d_name);
    struct log l;
    if (read_log(path, &l) != 0) {
      CHECK(0, "%s: not a whole log", path);
      continue;
    }
    if (l.h.proc_id == (uint32_t)(a_id >> 32) && l.h.pid == (uint64_t)getpid())
      me = l, have_me = 1;
    else if (l.h.proc_id == (uint32_t)(child_id >> 32))
      child = l, have_child = 1;
    else {
      others++;
      free_log(&l);
    }
    unlink(path);
  }
  if (dd != NULL)
    closedir(dd);
  rmdir(d);
  CHECK(have_me && have_child && others == 0,
        "logs: this process's %d, the child's %d, others %d", have_me,
        have_child, others);
  if (!have_me || !have_child)
    return 1;

  uint32_t ping = nx_handler_id("ping"), tping = nx_handler_id("tping"),
           pref = nx_handler_id("ping_ref"), pong = nx_handler_id("pong");
  check_common(&me, "this process");
  check_common(&child, "the child");
  CHECK(has_name(&me, NXT_DEF_HANDLER, "ping") &&
            has_name(&me, NXT_DEF_HANDLER, "tping") &&
            has_name(&me, NXT_DEF_HANDLER, "pong") &&
            has_name(&child, NXT_DEF_HANDLER, "ping"),
        "handler names missing");
  CHECK(count(&me, NXT_CONTEXT_CREATE, b_id, 0, 0, 0) == 1,
        "B's creation not recorded");
  /* Sends: what this program sent, to whom, how. */
  size_t k;
  k = count(&me, NXT_SEND, a_id, b_id, ping, 0);
  CHECK(k == N_PLAIN + N_ORDERED, "%zu pings A -> B", k);
  k = count(&me, NXT_SEND, a_id, b_id, ping, NXT_F_ORDERED);
  CHECK(k == N_ORDERED, "%zu ordered pings", k);
  /* By reference: over tcp the values stay where they are; in this
   * process the local module has them copied (it takes no iovecs). */
  k = count(&me, NXT_SEND, a_id, b_id, pref, 0);
  CHECK(k == N_REF, "%zu pings by reference to B", k);
  k = count(&me, NXT_SEND, a_id, b_id, pref, NXT_F_BYREF);
  CHECK(k == 0, "%zu pings to B marked by reference (local copies)", k);
  k = count(&me, NXT_SEND, a_id, child_id, pref, NXT_F_BYREF);
  CHECK(k == N_REF, "%zu pings by reference to the child", k);
  for (size_t i = 0; i < me.n; i++)
    if (me.r[i].type == NXT_SEND && me.r[i].handler == pref)
      CHECK(me.r[i].bytes >= REF_BYTES, "a ping by reference of %u bytes",
            me.r[i].bytes);
    else if (me.r[i].type == NXT_SEND && me.r[i].handler == ping)
      CHECK(me.r[i].bytes == 5, "a ping of %u bytes (an int32: 5)",
            me.r[i].bytes);
  k = count(&me, NXT_SEND, b_id, a_id, pong, 0);
  CHECK(k == N_PLAIN + N_ORDERED + N_THREADED + N_REF + 2, "%zu pongs B -> A",
        k); /* and the answers of block and release */
  k = count(&me, NXT_SEND, a_id, child_id, ping, 0);
  CHECK(k == N_CHILD, "%zu pings to the child", k);
  /* Handlers: where they ran, from whom, threaded or not. */
  k = count(&me, NXT_BEGIN, b_id, a_id, ping, 0);
  CHECK(k == N_PLAIN + N_ORDERED, "%zu ping runs in B", k);
  k = count(&me, NXT_BEGIN, b_id, a_id, tping, NXT_F_THREADED);
  CHECK(k == N_THREADED, "%zu threaded ping runs in B", k);
  k = count(&me, NXT_BEGIN, a_id, b_id, pong, 0);
  CHECK(k == N_PLAIN + N_ORDERED + N_THREADED + N_REF + 2,
        "%zu pong runs from B", k);
  k = count(&me, NXT_BEGIN, a_id, child_id, pong, 0);
  CHECK(k == N_CHILD + N_REF, "%zu pong runs from the child", k);
  k = count(&child, NXT_BEGIN, child_id, a_id, ping, 0);
  CHECK(k == N_CHILD, "%zu ping runs in the child", k);
  k = count(&child, NXT_SEND, child_id, a_id, pong, 0);
  CHECK(k == N_CHILD + N_REF, "%zu pongs from the child", k);
  k = count(&child, NXT_BEGIN, child_id, a_id, pref, 0);
  CHECK(k == N_REF, "%zu pings by reference run in the child", k);
  size_t pairs = check_runs(&me);
  CHECK(pairs == count(&me, NXT_BEGIN, 0, 0, 0, 0) &&
            count(&me, NXT_BEGIN, b_id, a_id, nx_handler_id("block"),
                  NXT_F_THREADED) == 1,
        "the blocking handler's run is not one BEGIN and one END");
  check_runs(&child);
  /* The child's life, as its creator saw it. */
  CHECK(count(&me, NXT_PROC_CREATE, 0, 0, 0, 0) == 1, "no PROC_CREATE");
  CHECK(count(&me, NXT_PROC_READY, 0, child_id, 0, 0) == 1, "no PROC_READY");
  for (size_t i = 0; i < me.n; i++)
    if (me.r[i].type == NXT_PROC_CREATE)
      CHECK(me.r[i].aux == (uint32_t)child.h.pid,
            "PROC_CREATE names pid %u, the child's log %llu", me.r[i].aux,
            (unsigned long long)child.h.pid);
  /* Clock offsets: each process asked the other at its first RSR to it
   * (and for its counts), and this one once more as it destroyed the
   * child; each answer gave one. */
  uint64_t last_pong = 0; /* the child's last RSR ran */
  for (size_t i = 0; i < me.n; i++)
    if (me.r[i].type == NXT_BEGIN && me.r[i].peer == child_id &&
        me.r[i].handler == pong && me.r[i].t > last_pong)
      last_pong = me.r[i].t;
  check_offsets(&me, child_id, last_pong, "this process");
  /* The child's at its end would need an answer from this process,
   * which has closed its routes to it by then (nx_context_destroy). */
  check_offsets(&child, a_id, 0, "the child");
  size_t n_me = me.n, n_child = child.n;
  free_log(&me);
  free_log(&child);
  if (failures == 0)
    printf("trace_record: every check held (%zu records here, %zu in the "
           "child's log)\n",
           n_me, n_child);
  return failures != 0;
}
