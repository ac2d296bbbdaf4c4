/* Writes the logs of a small made-up computation into a directory, in
 * exactly the format of base/trace_format.h, for nxtrace's tests
 * (check_nxtrace.py knows what they hold): process 1 on host "alpha" in
 * this machine's byte order, process 2 on host "beta" byte-swapped with
 * another monotonic clock and a truncated last chunk, and two files that
 * are not logs.
 *
 * Process 1 (contexts a1 = 0x100000001, a2 = 0x100000002; modules 0 local,
 * 1 tcp): a1 sends 5 "ping" of 100 bytes to b1 over tcp (ordered), 3
 * "pong" of 10 bytes to a2 over local (by reference), which runs them
 * and a handler of id 0 it was not sent; a1 waits once on a full queue;
 * a fallback, a process creation, ready, loss and finalize.
 * Process 2 (context b1 = 0x200000001; modules 0 tcp): runs the 5 pings
 * (1, 2, 3, 4, 5 us), sends 2 RSRs of an unnamed handler 0x3333 to a1
 * (which runs neither), passes one RSR on as a gateway (a hop), and on
 * thread 7 runs two threaded handlers that do not nest (the first blocks,
 * the second begins inside it and ends after it), and one whose END is on
 * thread 8 (MOVED). Its last chunk claims more records than it holds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/trace_format.h"

#define A1 0x0000000100000001ull
#define A2 0x0000000100000002ull
#define B1 0x0000000200000001ull
#define PING 0x1111u
#define PONG 0x2222u
#define ANON 0x3333u
#define REAL0 1700000000000000000ull /* both hosts' realtime at A's start */

struct log {
  FILE *f;
  int swap;
  uint32_t proc;
  uint64_t tick_base; /* a stamp is tick_base + per_ns * ns */
  uint64_t per_ns;
  uint8_t buf[256 * 48];
  unsigned n; /* bytes in buf */
  uint64_t thread;
  /* Handler runs each thread began (thread, count), and the current
   * thread's count when the pending chunk began (its runs0). */
  uint64_t runs[16][2];
  int nthreads;
  uint64_t runs0;
};

/* The runs the current thread began. */
static uint64_t *runs_of(struct log *l) {
  for (int i = 0; i < l->nthreads; i++)
    if (l->runs[i][0] == l->thread)
      return &l->runs[i][1];
  l->runs[l->nthreads][0] = l->thread;
  l->runs[l->nthreads][1] = 0;
  return &l->runs[l->nthreads++][1];
}

static uint16_t s16(const struct log *l, uint16_t v) {
  return l->swap ? __builtin_bswap16(v) : v;
}
static uint32_t s32(const struct log *l, uint32_t v) {
  return l->swap ? __builtin_bswap32(v) : v;
}
static uint64_t s64(const struct log *l, uint64_t v) {
  return l->swap ? __builtin_bswap64(v) : v;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void open_log(struct log *l, const char *dir, uint32_t proc_id,
                     uint64_t pid, int swap, uint64_t mono0, uint64_t real0,
                     uint8_t uuid, const char *host, uint64_t tick_base,
                     uint64_t per_ns) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%08x-%llu.nxt", dir, proc_id,
           (unsigned long long)pid);
  memset(l, 0, sizeof(*l));
  l->swap = swap;
  l->proc = proc_id;
  l->tick_base = tick_base;
  l->per_ns = per_ns;
  l->f = fopen(path, "wb");
  if (l->f == NULL)
    die(path);
  struct nxt_file_hdr h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, NXT_MAGIC, 8);
  h.version = s32(l, NXT_VERSION);
  h.proc_id = s32(l, proc_id);
  h.pid = s64(l, pid);
  h.mono0 = s64(l, mono0);
  h.real0 = s64(l, real0);
  h.host_uuid[15] = uuid;
  snprintf(h.host, sizeof(h.host), "%s", host);
  if (fwrite(&h, sizeof(h), 1, l->f) != 1)
    die("fwrite");
}

/* Writes the pending records as one chunk of the current thread, with
 * the log's ticks-to-ns map as two pairs; claim more bytes than that to
 * leave a truncated chunk. */
static void flush_chunk(struct log *l, unsigned claim) {
  if (l->n == 0)
    return;
  const uint64_t ns1 = 1000000000000ull;
  struct nxt_chunk c = {s32(l, NXT_CHUNK_MAGIC),
                        s32(l, claim ? claim : l->n),
                        s64(l, l->thread),
                        s64(l, l->tick_base),
                        s64(l, 0),
                        s64(l, l->tick_base + l->per_ns * ns1),
                        s64(l, ns1),
                        s64(l, l->runs0)};
  if (fwrite(&c, sizeof(c), 1, l->f) != 1 ||
      fwrite(l->buf, 1, l->n, l->f) != l->n)
    die("fwrite");
  l->n = 0;
}

static void on_thread(struct log *l, uint64_t thread) {
  flush_chunk(l, 0);
  l->thread = thread;
}

/* A record at `t` ns, as the runtime writes it: SEND, BEGIN and END in
 * their compact forms, every other in the general one; stamps in ticks,
 * but a CLOCK's. A BEGIN's run number is the thread's next (its `x` is
 * not used): returned. An END on its run's thread is the short form. */
static uint64_t rec(struct log *l, uint8_t type, uint64_t t, uint64_t ctx,
                    uint64_t peer, uint64_t x, uint32_t handler, uint32_t bytes,
                    uint8_t module, uint16_t flags, uint32_t aux) {
  if (l->n + sizeof(struct nxt_rec) > sizeof(l->buf))
    flush_chunk(l, 0);
  if (l->n == 0)
    l->runs0 = *runs_of(l);
  uint64_t tick = type == NXT_CLOCK ? t : l->tick_base + l->per_ns * t;
  uint8_t *p = l->buf + l->n;
  int compact = ctx >> 32 == l->proc && (uint32_t)ctx != 0;
  if (type == NXT_BEGIN)
    x = l->thread << 40 | ++*runs_of(l);
  if (type == NXT_END && x >> 40 == l->thread) {
    struct nxt_end_s r = {NXT_END_S, 0, s16(l, flags), s32(l, (uint32_t)x),
                          s64(l, tick)};
    memcpy(p, &r, sizeof(r));
    l->n += sizeof(r);
  } else if (type == NXT_END) {
    struct nxt_end r = {NXT_END_C,    0,        s16(l, flags), 0,
                        s64(l, tick), s64(l, x)};
    memcpy(p, &r, sizeof(r));
    l->n += sizeof(r);
  } else if (compact && (type == NXT_SEND || type == NXT_BEGIN)) {
    struct nxt_send r = {type == NXT_SEND ? NXT_SEND_C : NXT_BEGIN_C,
                         module,
                         s16(l, flags),
                         s32(l, handler),
                         s32(l, (uint32_t)ctx),
                         s32(l, bytes),
                         s64(l, peer),
                         s64(l, tick)};
    memcpy(p, &r, sizeof(r));
    l->n += sizeof(r);
  } else {
    struct nxt_rec r = {
        type,          module,      s16(l, flags), s32(l, handler),
        s32(l, bytes), s32(l, aux), s64(l, tick),  s64(l, ctx),
        s64(l, peer),  s64(l, x)};
    memcpy(p, &r, sizeof(r));
    l->n += sizeof(r);
  }
  return x;
}

/* A definition and its name after it, padded to 8 bytes (not swapped). */
static void def(struct log *l, uint8_t type, uint32_t handler, uint8_t module,
                const char *name) {
  size_t len = strlen(name), padded = (len + 7) & ~(size_t)7;
  if (l->n + 48 + padded > sizeof(l->buf))
    flush_chunk(l, 0);
  rec(l, type, 0, 0, 0, 0, handler, (uint32_t)len, module, 0, 0);
  memset(l->buf + l->n, 0, padded);
  memcpy(l->buf + l->n, name, len);
  l->n += (unsigned)padded;
}

static void close_log(struct log *l) {
  flush_chunk(l, 0);
  if (fclose(l->f) != 0)
    die("fclose");
}

/* Process 1: monotonic clock from 1 s, realtime REAL0 at its start. */
/* With `offsets` (gen_logs DIR offsets): beta's realtime clock is 3 ms
 * ahead in its log, and the processes measured their clocks' offset
 * (NXT_OFFSET): only those line beta up with alpha. */
static int offsets;
#define SKEW 3000000ull /* ns */
/* Beta's monotonic clock less alpha's (see process_b). */
#define B_LESS_A (-(int64_t)(1000000000 + 900))

static void process_a(const char *dir) {
  struct log l;
  const uint64_t m = 1000000000ull;
  open_log(&l, dir, 1, 4242, 0, m, REAL0, 1, "alpha", 1000, 2);
  on_thread(&l, 0x7f00);
  def(&l, NXT_DEF_MODULE, 0, 0, "local");
  def(&l, NXT_DEF_MODULE, 0, 1, "tcp");
  def(&l, NXT_DEF_HANDLER, PING, 0, "ping");
  def(&l, NXT_DEF_HANDLER, PONG, 0, "pong");
  rec(&l, NXT_CONTEXT_CREATE, m + 10, A1, 0, 0, 0, 0, 0xff, 0, 0);
  rec(&l, NXT_CONTEXT_CREATE, m + 20, A2, 0, 0, 0, 0, 0xff, 0, 0);
  rec(&l, NXT_PROC_CREATE, m + 100, 0, 0, 0, 0, 0, 0xff, 0, 5151);
  rec(&l, NXT_PROC_READY, m + 200, 0, B1, 0, 0, 0, 0xff, 0, 5151);
  /* Pings at 10, 20, ... 50 us; each runs on b1 5 us later. */
  for (int i = 0; i < 5; i++)
    rec(&l, NXT_SEND, m + 10000 * (i + 1), A1, B1, 0, PING, 100, 1,
        NXT_F_ORDERED, 0);
  /* Pongs to a2, run by a2 on the same thread 1 us later, 2 us long. */
  for (int i = 0; i < 3; i++) {
    uint64_t t = m + 60000 + 10000 * i;
    rec(&l, NXT_SEND, t, A1, A2, 0, PONG, 10, 0, NXT_F_BYREF, 0);
    uint64_t run =
        rec(&l, NXT_BEGIN, t + 1000, A2, A1, 0, PONG, 10, 0xff, 0, 0);
    rec(&l, NXT_END, t + 3000, 0, 0, run, 0, 0, 0xff, 0, 0);
  }
  /* A run of handler id 0 (no name, no send): 1 us on a2. */
  uint64_t run = rec(&l, NXT_BEGIN, m + 95000, A2, 0, 0, 0, 0, 0xff, 0, 0);
  rec(&l, NXT_END, m + 96000, 0, 0, run, 0, 0, 0xff, 0, 0);
  /* A wait of 4 us on a full tcp queue towards b1. */
  rec(&l, NXT_WAIT_BEGIN, m + 100000, A1, B1, 0, 0, 0, 1, 0, 0);
  rec(&l, NXT_WAIT_END, m + 104000, A1, B1, 0, 0, 0, 1, 0, 0);
  rec(&l, NXT_FALLBACK, m + 110000, A1, B1, 0, 0, 0, 0xff, 0, 1);
  /* Process 2 lost: NX_EPEERDEAD (-4009), as a positive number. */
  rec(&l, NXT_PROC_LOSS, m + 120000, 0, B1 & ~0xffffffffull, 0, 0, 0, 0xff, 0,
      4009);
  rec(&l, NXT_FINALIZE, m + 130000, 0, 0, 0, 0, 0, 0xff, 0, 0);
  rec(&l, NXT_CONTEXT_DESTROY, m + 131000, A2, 0, 0, 0, 0, 0xff, 0, 0);
  rec(&l, NXT_CLOCK, m + 140000, 0, 0, REAL0 + 140000, 0, 0, 0xff, 0, 0);
  if (offsets) {
    /* Two exact ones (round trips 4 and 3 us), and one 20 us off with a
     * round trip of 100 us, whose bound the exact ones narrow. */
    rec(&l, NXT_OFFSET, m + 5000, 0, 0x200000000ull, (uint64_t)B_LESS_A, 0, 0,
        0xff, 0, 4000);
    rec(&l, NXT_OFFSET, m + 60000, 0, 0x200000000ull,
        (uint64_t)(B_LESS_A + 20000), 0, 0, 0xff, 0, 100000);
    rec(&l, NXT_OFFSET, m + 135000, 0, 0x200000000ull, (uint64_t)B_LESS_A, 0, 0,
        0xff, 0, 3000);
  }
  close_log(&l);
}

/* Process 2: its monotonic clock reads 100 ns when A's realtime is
 * REAL0 + 1 us, so only the clock mapping puts its runs after the sends. */
static void process_b(const char *dir) {
  struct log l;
  const uint64_t m = 100, off = 1000; /* b's mono m is realtime REAL0+off */
  const uint64_t skew = offsets ? SKEW : 0;
  open_log(&l, dir, 2, 5151, 1, m, REAL0 + off + skew, 2, "beta", 0, 1);
  on_thread(&l, 1);
  def(&l, NXT_DEF_MODULE, 0, 0, "tcp");
  def(&l, NXT_DEF_HANDLER, PING, 0, "ping");
  rec(&l, NXT_CONTEXT_CREATE, m + 10, B1, 0, 0, 0, 0, 0xff, 0, 0);
  /* Ping i (sent at A's 10 (i + 1) us) begins 5 us later, runs i + 1 us. */
  for (int i = 0; i < 5; i++) {
    uint64_t t = m - off + 10000 * (i + 1) + 5000;
    uint64_t run = rec(&l, NXT_BEGIN, t, B1, A1, 0, PING, 100, 0xff, 0, 0);
    rec(&l, NXT_END, t + 1000 * (i + 1), 0, 0, run, 0, 0, 0xff, 0, 0);
  }
  rec(&l, NXT_SEND, m + 80000, B1, A1, 0, ANON, 8, 0, 0, 0);
  rec(&l, NXT_SEND, m + 81000, B1, A1, 0, ANON, 8, 0, 0, 0);
  rec(&l, NXT_HOP, m + 82000, 0, A2, A1, PONG, 10, 0, 0, 0);
  /* Thread 7: X (pong, threaded) 90..100 us blocks; Y begins at 95 and
   * ends at 105: Y does not nest in X. W begins at 110 and ends on
   * thread 8 at 120. */
  on_thread(&l, 7);
  uint64_t x = rec(&l, NXT_BEGIN, m + 90000, B1, A1, 0, PONG, 10, 0xff,
                   NXT_F_THREADED, 0);
  uint64_t y = rec(&l, NXT_BEGIN, m + 95000, B1, A1, 0, PONG, 10, 0xff,
                   NXT_F_THREADED, 0);
  rec(&l, NXT_END, m + 100000, 0, 0, x, 0, 0, 0xff, NXT_F_THREADED, 0);
  rec(&l, NXT_END, m + 105000, 0, 0, y, 0, 0, 0xff, NXT_F_THREADED, 0);
  uint64_t w = rec(&l, NXT_BEGIN, m + 110000, B1, A1, 0, PONG, 10, 0xff,
                   NXT_F_THREADED, 0);
  on_thread(&l, 8);
  rec(&l, NXT_END, m + 120000, 0, 0, w, 0, 0, 0xff,
      NXT_F_THREADED | NXT_F_MOVED, 0);
  on_thread(&l, 1);
  rec(&l, NXT_CLOCK, m + 130000, 0, 0, REAL0 + off + skew + 130000, 0, 0, 0xff,
      0, 0);
  if (offsets) /* measured the other way, round trip 5 us */
    rec(&l, NXT_OFFSET, m + 20000, 0, 0x100000000ull, (uint64_t)-B_LESS_A, 0, 0,
        0xff, 0, 5000);
  flush_chunk(&l, 0);
  /* The process died while writing this chunk: 3 sends of 32 bytes, 480
   * bytes claimed. */
  rec(&l, NXT_SEND, m + 131000, B1, A1, 0, PING, 1, 0, 0, 0);
  rec(&l, NXT_SEND, m + 132000, B1, A1, 0, PING, 1, 0, 0, 0);
  rec(&l, NXT_SEND, m + 133000, B1, A1, 0, PING, 1, 0, 0, 0);
  flush_chunk(&l, 10 * 48);
  if (fclose(l.f) != 0)
    die("fclose");
}

/* Two files that are not logs: a bad magic and an unknown version. */
static void bad_files(const char *dir) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/bad-magic.nxt", dir);
  FILE *f = fopen(path, "wb");
  if (f == NULL ||
      fputs("this is not a log, but long enough to have a "
            "header's size..........................................."
            "...................................................",
            f) < 0 ||
      fclose(f) != 0)
    die(path);
  struct nxt_file_hdr h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, NXT_MAGIC, 8);
  h.version = 99;
  snprintf(path, sizeof(path), "%s/bad-version.nxt", dir);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(&h, sizeof(h), 1, f) != 1 || fclose(f) != 0)
    die(path);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "offsets"))) {
    fprintf(stderr, "usage: gen_logs DIR [offsets]\n");
    return 2;
  }
  offsets = argc == 3;
  process_a(argv[1]);
  process_b(argv[1]);
  bad_files(argv[1]);
  return 0;
}
