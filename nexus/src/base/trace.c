/* The event log of NX_TRACE (trace.h, trace_format.h). Each thread fills a
 * buffer of its own, under a lock that only nxi_trace_stop ever contends
 * for, and writes it whole, as one chunk, when it is full, when a second
 * has passed since its last write, and at nx_finalize: memory stays at one
 * buffer per thread, and a process that dies leaves its log readable up
 * to its threads' last writes.
 *
 * Events are stamped with the CPU's time-stamp counter where it is
 * invariant (x86's constant_tsc and nonstop_tsc): a read costs 15-25 ns
 * on the virtual machines we measured, where clock_gettime cost 40-50.
 * The log keeps the counter's ticks; each chunk carries two pairs of
 * (counter, clock) read together, at the thread's last write and at this
 * one, and nxtrace maps the ticks between them to CLOCK_MONOTONIC ns
 * (trace_format.h, nxt_ns). The records of an RSR's send, begin and end
 * have compact forms: they are most of a log, and bytes written are most
 * of what a record costs once its stamp is read (docs/tracing.md). */
#include "base/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/rt.h"
#include "nxu_time.h"
#include "nexus/errors.h"

#define FLUSH_NS 1000000000ull   /* a thread's records wait at most */
#define NAME_MAX_BYTES (48 * 64) /* longer names are cut */

int nxi_trace_on;

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nxi_tbuf *buffers;
static int fd = -1;
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t threads;
static int use_tsc;      /* stamps are the time-stamp counter's, not ns */
uint32_t nxi_trace_proc; /* the high half of this process's context ids */
uint64_t nxi_trace_flush = FLUSH_NS; /* FLUSH_NS in stamp()'s unit */
int nxi_trace_fast;
static atomic_uint_fast64_t last_clock; /* when a CLOCK record was last made */
static pthread_key_t tb_key;
static pthread_once_t tb_once = PTHREAD_ONCE_INIT;
NXI_TLS struct nxi_tbuf *nxi_tb;

/* CLOCK_REALTIME in ns, read beside nxu_now_ns's CLOCK_MONOTONIC. */
static uint64_t realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t tsc(void) { return __rdtsc(); }
/* Whether the counter runs at one rate in every state, on every core. */
static int tsc_invariant(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL)
    return 0;
  char line[4096];
  int ok = 0;
  while (fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, "flags", 5) == 0) {
      ok = strstr(line, " constant_tsc") != NULL &&
           strstr(line, " nonstop_tsc") != NULL;
      break;
    }
  fclose(f);
  return ok;
}
#else
static inline uint64_t tsc(void) { return 0; }
static int tsc_invariant(void) { return 0; }
#endif

/* An event's stamp: the counter's, or CLOCK_MONOTONIC ns. */
static inline uint64_t stamp(void) { return use_tsc ? tsc() : nxu_now_ns(); }

/* The counter and the clock, read together (the clock between two reads
 * of the counter, their middle taken). */
static void pair(uint64_t *t, uint64_t *mono) {
  if (!use_tsc) {
    *t = *mono = nxu_now_ns();
    return;
  }
  uint64_t a = tsc();
  *mono = nxu_now_ns();
  *t = a + (tsc() - a) / 2;
}

/* A buffer is its thread's alone, but for nxi_trace_stop, which closes
 * and writes every one. The thread marks itself busy, then looks whether
 * the buffer is open; the stop closes each, then waits for the busy ones.
 * For the two to see each other's store, each needs a full barrier
 * between its store and its load. The stop pays for both with
 * membarrier(2), which makes every thread of the process run one, so
 * that a record costs no locked instruction; where the kernel has none,
 * both sides' stores and loads are sequentially consistent (the thread's
 * store an exchange). */
static int membarrier_ok;

static int own(struct nxi_tbuf *tb) {
  int open;
  if (membarrier_ok) {
    atomic_store_explicit(&tb->busy, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    open = atomic_load_explicit(&tb->open, memory_order_acquire);
  } else {
    atomic_exchange(&tb->busy, 1);
    open = atomic_load(&tb->open);
  }
  if (!open)
    atomic_store_explicit(&tb->busy, 0, memory_order_release);
  return open;
}
static void disown(struct nxi_tbuf *tb) {
  atomic_store_explicit(&tb->busy, 0, memory_order_release);
}

/* Writes the buffer's records as one chunk, in one call (O_APPEND: whole,
 * between other threads' chunks), with the pair of clocks that ends it,
 * which begins the next. A failed write loses them, said once. */
static void tb_write(struct nxi_tbuf *tb, uint64_t now) {
  static int complained;
  pair(&tb->chunk.tick1, &tb->chunk.mono1);
  if (tb->used > 0) {
    tb->chunk.bytes = tb->used;
    struct iovec iov[2] = {{&tb->chunk, sizeof(tb->chunk)},
                           {tb->buf, tb->used}};
    size_t len = iov[0].iov_len + iov[1].iov_len;
    pthread_mutex_lock(&file_lock);
    ssize_t w = fd >= 0 ? writev(fd, iov, 2) : -1;
    pthread_mutex_unlock(&file_lock);
    if ((w < 0 || (size_t)w != len) && !complained) {
      complained = 1;
      fprintf(stderr, "nexus: NX_TRACE: writing the event log: %s\n",
              w < 0 ? strerror(errno) : "short write");
    }
  }
  tb->used = 0;
  tb->last_write = now;
  tb->chunk.runs0 = tb->runs;
  tb->chunk.tick0 = tb->chunk.tick1;
  tb->chunk.mono0 = tb->chunk.mono1;
}

/* A thread's buffer goes back to the list when the thread ends. */
static void tb_release(void *p) {
  struct nxi_tbuf *tb = p;
  if (own(tb)) {
    tb_write(tb, stamp());
    disown(tb);
  }
  pthread_mutex_lock(&list_lock);
  tb->free = 1;
  pthread_mutex_unlock(&list_lock);
}

static void tb_key_create(void) { pthread_key_create(&tb_key, tb_release); }

/* This thread's buffer: a freed one, or a new one. NULL without memory
 * (its events are not recorded). */
static struct nxi_tbuf *tb_get(void) {
  pthread_once(&tb_once, tb_key_create);
  pthread_mutex_lock(&list_lock);
  struct nxi_tbuf *tb = buffers;
  while (tb != NULL && !tb->free)
    tb = tb->next;
  if (tb == NULL && (tb = calloc(1, sizeof(*tb))) != NULL) {
    tb->next = buffers;
    buffers = tb;
  }
  if (tb != NULL) {
    tb->free = 0;
    tb->used = 0;
    atomic_store_explicit(&tb->open, nxi_trace_on, memory_order_release);
    tb->chunk.magic = NXT_CHUNK_MAGIC;
    tb->chunk.thread = atomic_fetch_add(&threads, 1) + 1;
    tb->runs = 0;
    tb->chunk.runs0 = 0;
    pair(&tb->chunk.tick0, &tb->chunk.mono0);
    tb->last_write = stamp();
  }
  pthread_mutex_unlock(&list_lock);
  if (tb != NULL)
    pthread_setspecific(tb_key, tb);
  nxi_tb = tb;
  return tb;
}

/* Room for `len` bytes of records in `tb` (owned): written first if
 * not. */
static inline void tb_reserve(struct nxi_tbuf *tb, uint32_t len, uint64_t now) {
  if (__builtin_expect(tb->used + len > NXI_TB_BYTES, 0))
    tb_write(tb, now);
}
static inline void *tb_room(struct nxi_tbuf *tb, uint32_t len, uint64_t now) {
  tb_reserve(tb, len, now);
  void *r = tb->buf + tb->used;
  tb->used += len;
  return r;
}

/* A CLOCK record: the two clocks read together (its `t` is ns). */
static void clock_rec(struct nxi_tbuf *tb, uint64_t now) {
  struct nxt_rec c;
  memset(&c, 0, sizeof(c));
  c.t = nxu_now_ns();
  c.x = realtime_ns();
  c.type = NXT_CLOCK;
  c.module = 0xff;
  memcpy(tb_room(tb, sizeof(c), now), &c, sizeof(c));
}

/* After a record went in: the buffer is written when full or old, with
 * the clocks read together once a second (the alignment nxtrace uses). */
static __attribute__((noinline)) void tb_write_due(struct nxi_tbuf *tb,
                                                   uint64_t now) {
  uint64_t last = atomic_load_explicit(&last_clock, memory_order_relaxed);
  if (now - last >= nxi_trace_flush &&
      atomic_compare_exchange_strong(&last_clock, &last, now))
    clock_rec(tb, now);
  tb_write(tb, now);
}
static inline void tb_done(struct nxi_tbuf *tb, uint64_t now) {
  if (__builtin_expect(now - tb->last_write >= nxi_trace_flush, 0))
    tb_write_due(tb, now);
}

/* This thread's buffer, owned, and the stamp of the event to record; NULL
 * when it is not recorded (no memory, or tracing stopped). */
static inline struct nxi_tbuf *tb_begin(uint64_t *now) {
  struct nxi_tbuf *tb = nxi_tb;
  if (__builtin_expect(tb == NULL, 0) && (tb = tb_get()) == NULL)
    return NULL;
  *now = stamp();
  return own(tb) ? tb : NULL;
}

/* Puts the `len` bytes at `r` in the owned buffer, writes it if due, and
 * lets it go: every record's last step. */
static void tb_put(struct nxi_tbuf *tb, const void *r, uint32_t len,
                   uint64_t now) {
  memcpy(tb_room(tb, len, now), r, len);
  tb_done(tb, now);
  disown(tb);
}

/* An event in its general form, stamped `t`, into owned `tb` at `now`. */
static void event_put(struct nxi_tbuf *tb, uint64_t now, uint64_t t,
                      uint8_t type, uint64_t ctx, uint64_t peer,
                      uint32_t handler, uint64_t bytes, uint8_t module,
                      uint16_t flags, uint32_t aux, uint64_t x) {
  struct nxt_rec r = {.type = type,
                      .module = module,
                      .flags = flags,
                      .handler = handler,
                      .bytes = nxi_trace_sat32(bytes),
                      .aux = aux,
                      .t = t,
                      .ctx = ctx,
                      .peer = peer,
                      .x = x};
  tb_put(tb, &r, sizeof(r), now);
}

void nxi_trace_event(uint8_t type, uint64_t ctx, uint64_t peer,
                     uint32_t handler, uint64_t bytes, uint8_t module,
                     uint16_t flags, uint32_t aux, uint64_t x) {
  uint64_t now;
  struct nxi_tbuf *tb = tb_begin(&now);
  if (tb != NULL)
    event_put(tb, now, now, type, ctx, peer, handler, bytes, module, flags, aux,
              x);
}

uint64_t nxi_trace_stamp_slow(void) { return stamp(); }

void nxi_trace_send_slow(uint64_t ctx, uint64_t peer, uint32_t handler,
                         uint64_t bytes, uint8_t module, uint16_t flags,
                         uint64_t t) {
  uint64_t now;
  struct nxi_tbuf *tb = tb_begin(&now);
  if (tb == NULL)
    return;
  if (!nxi_trace_mine(ctx)) {
    event_put(tb, now, t, NXT_SEND, ctx, peer, handler, bytes, module, flags, 0,
              0);
    return;
  }
  struct nxt_send r = nxi_trace_compact(NXT_SEND_C, module, flags, handler, ctx,
                                        bytes, peer, t);
  tb_put(tb, &r, sizeof(r), now);
}

uint64_t nxi_trace_begin_slow(uint64_t ctx, uint64_t peer, uint32_t handler,
                              uint64_t bytes, uint16_t flags) {
  uint64_t now;
  struct nxi_tbuf *tb = tb_begin(&now);
  if (tb == NULL)
    return 0;
  /* The room first: a chunk begun here counts this run as its first. */
  int mine = nxi_trace_mine(ctx);
  tb_reserve(tb, mine ? sizeof(struct nxt_send) : sizeof(struct nxt_rec), now);
  uint64_t run = tb->chunk.thread << 40 | ++tb->runs;
  if (mine) {
    struct nxt_send r = nxi_trace_compact(NXT_BEGIN_C, 0xff, flags, handler,
                                          ctx, bytes, peer, now);
    tb_put(tb, &r, sizeof(r), now);
  } else {
    struct nxt_rec r = {.type = NXT_BEGIN,
                        .module = 0xff,
                        .flags = flags,
                        .handler = handler,
                        .bytes = nxi_trace_sat32(bytes),
                        .t = now,
                        .ctx = ctx,
                        .peer = peer,
                        .x = run};
    tb_put(tb, &r, sizeof(r), now);
  }
  return run;
}

void nxi_trace_end_slow(uint64_t run, uint16_t flags) {
  uint64_t now;
  struct nxi_tbuf *tb = tb_begin(&now);
  if (tb == NULL || run == 0) {
    if (tb != NULL)
      disown(tb);
    return;
  }
  if (run >> 40 == tb->chunk.thread) {
    struct nxt_end_s r = {
        .type = NXT_END_S, .flags = flags, .run = (uint32_t)run, .t = now};
    tb_put(tb, &r, sizeof(r), now);
  } else {
    struct nxt_end r = {
        .type = NXT_END_C, .flags = flags | NXT_F_MOVED, .t = now, .x = run};
    tb_put(tb, &r, sizeof(r), now);
  }
}

void nxi_trace_name(uint8_t type, uint64_t ctx, uint32_t handler,
                    uint8_t module, const char *name) {
  uint64_t now;
  struct nxi_tbuf *tb = tb_begin(&now);
  if (tb == NULL)
    return;
  size_t len = strlen(name);
  if (len > NAME_MAX_BYTES)
    len = NAME_MAX_BYTES;
  uint32_t padded = (uint32_t)(len + 7) & ~7u;
  struct nxt_rec r = {.type = type,
                      .module = module,
                      .handler = handler,
                      .bytes = (uint32_t)len,
                      .t = now,
                      .ctx = ctx};
  uint8_t *p = tb_room(tb, (uint32_t)sizeof(r) + padded, now);
  memcpy(p, &r, sizeof(r));
  memset(p + sizeof(r) + len, 0, padded - len);
  memcpy(p + sizeof(r), name, len);
  /* Written at once (names are made a few times a run): the log of a
   * process that dies names its handlers and modules. */
  tb_write(tb, now);
  disown(tb);
}

/* mkdir -p: every missing folder of `path`. */
static int make_dirs(const char *path) {
  char p[PATH_MAX];
  if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
    return -1;
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return -1;
      *s = c;
      if (c == '\0')
        return 0;
    }
  }
}

int nxi_trace_start(void) {
  const char *dir = getenv("NX_TRACE");
  if (dir == NULL || dir[0] == '\0')
    return 0;
  char path[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%08x-%ld.nxt", dir,
               (unsigned)nxi_rt.proc_id, (long)getpid()) >= (int)sizeof(path)) {
    nxi_log(0, NULL, "NX_TRACE: the folder's name is too long");
    return NX_EINVAL;
  }
  if (make_dirs(dir) != 0 ||
      (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                 0644)) < 0) {
    nxi_log(0, NULL, "NX_TRACE: cannot write %s: %s", path, strerror(errno));
    return NX_EIO;
  }
  struct nxt_file_hdr h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, NXT_MAGIC, sizeof(h.magic));
  h.version = NXT_VERSION;
  h.proc_id = nxi_rt.proc_id;
  h.pid = (uint64_t)getpid();
  h.mono0 = nxu_now_ns();
  h.real0 = realtime_ns();
  memcpy(h.host_uuid, nxi_rt.host_uuid, sizeof(h.host_uuid));
  gethostname(h.host, sizeof(h.host) - 1);
  if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
    nxi_log(0, NULL, "NX_TRACE: cannot write %s: %s", path, strerror(errno));
    close(fd);
    fd = -1;
    return NX_EIO;
  }
  nxi_trace_proc = nxi_rt.proc_id;
  use_tsc = tsc_invariant();
  if (use_tsc) {
    /* A second in counts, roughly (it only spaces the writes): 2 ms of
     * both clocks. */
    uint64_t t0, m0, t1, m1;
    pair(&t0, &m0);
    do
      pair(&t1, &m1);
    while (m1 - m0 < 2000000);
    nxi_trace_flush = (uint64_t)((double)(t1 - t0) * 1e9 / (double)(m1 - m0));
  } else {
    nxi_trace_flush = FLUSH_NS;
  }
  atomic_store(&last_clock, stamp());
  /* Buffers of threads from an earlier run of the runtime take records
   * again, from empty. */
  membarrier_ok = syscall(__NR_membarrier,
                          MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  pthread_mutex_lock(&list_lock);
  for (struct nxi_tbuf *tb = buffers; tb != NULL; tb = tb->next) {
    /* Closed since the last stop: their threads do not touch them. */
    tb->used = 0;
    pair(&tb->chunk.tick0, &tb->chunk.mono0);
    tb->last_write = stamp();
    atomic_store_explicit(&tb->open, 1, memory_order_release);
  }
  nxi_trace_fast = use_tsc && membarrier_ok && NXI_TRACE_TSC;
  nxi_trace_on = 1;
  pthread_mutex_unlock(&list_lock);
  return 0;
}

void nxi_trace_stop(void) {
  if (!nxi_trace_on)
    return;
  /* The clocks together once more: nxtrace aligns hosts by the first and
   * last such pair. */
  struct nxi_tbuf *me = nxi_tb != NULL ? nxi_tb : tb_get();
  if (me != NULL && own(me)) {
    clock_rec(me, stamp());
    disown(me);
  }
  pthread_mutex_lock(&list_lock);
  nxi_trace_on = 0;
  for (struct nxi_tbuf *tb = buffers; tb != NULL; tb = tb->next)
    atomic_store(&tb->open, 0);
  /* Registered at start, it does not fail (membarrier(2)). */
  if (membarrier_ok)
    syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  uint64_t now = stamp();
  for (struct nxi_tbuf *tb = buffers; tb != NULL; tb = tb->next) {
    /* A thread that saw it open finishes its record first. */
    while (atomic_load(&tb->busy))
      sched_yield();
    tb_write(tb, now);
  }
  pthread_mutex_unlock(&list_lock);
  pthread_mutex_lock(&file_lock);
  close(fd);
  fd = -1;
  pthread_mutex_unlock(&file_lock);
}
