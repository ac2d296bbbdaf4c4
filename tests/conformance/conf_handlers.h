/* Handlers of the conformance suite's peer, shared by the peer program and by
 * in-process peers (the local module). Header-only: included once per program.
 */
#ifndef CONF_HANDLERS_H
#define CONF_HANDLERS_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nexus.h"

/* "ping"/"ping_t" (non-threaded/threaded): payload = gp reply, u32 tag,
 * bytes; answers "pong" with the tag and the same bytes. */
static void conf_ping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint32_t tag = 0;
  uint64_t len = 0;
  void *data = NULL;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) == 0 && nx_get_uint32(b, &tag) == 0 &&
      nx_get_uint64(b, &len) == 0 &&
      (data = malloc(len > 0 ? len : 1)) != NULL &&
      nx_get_bytes(b, data, len) == 0 &&
      nx_rsr_init_name(&o, &reply, "pong", len + 32) == 0) {
    nx_put_uint32(o, tag);
    nx_put_uint64(o, len);
    nx_put_bytes(o, data, len);
    nx_rsr_send(o);
  }
  free(data);
  nx_gp_release(&reply);
}

/* "zping"/"zping_t": zero copy both ways. Payload = gp reply, u32 tag,
 * u64 len, bytes A (the first len/2) put by reference, u32 0x5eed, bytes B
 * (the rest) by reference, double[3] {0.5, 1.5, 2.5} by reference. Reads
 * them in place, and answers "zpong": u32 tag, u64 len, u32 bad (what was
 * wrong here), then A and B by reference from the received buffer, which it
 * retains until the runtime releases B. */
static void conf_zdone(void *arg, const void *v, int status) {
  (void)v;
  (void)status;
  if (arg != NULL)
    nx_buffer_release((nx_buffer_t *)arg);
}

static void conf_zping(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint32_t tag = 0, mark = 0, bad = 0;
  uint64_t len = 0;
  const void *a = NULL, *bb = NULL;
  const double *d = NULL;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) != 0 || nx_get_uint32(b, &tag) != 0 ||
      nx_get_uint64(b, &len) != 0)
    return;
  bad |= nx_get_bytes_ptr(b, &a, len / 2) != 0;
  bad |= (nx_get_uint32(b, &mark) != 0 || mark != 0x5eed) << 1;
  bad |= nx_get_bytes_ptr(b, &bb, len - len / 2) != 0;
  bad |= nx_get_double_array_ptr(b, &d, 3) != 0;
  if (d != NULL)
    bad |= ((uintptr_t)d % sizeof(double) != 0 || d[0] != 0.5 || d[1] != 1.5 ||
            d[2] != 2.5)
           << 2;
  bad |= (nx_buffer_remaining(b) != 0) << 3;
  if (nx_rsr_init_name(&o, &reply, "zpong", 64) == 0) {
    int ok = bad == 0 && nx_buffer_retain(b) == 0;
    nx_put_uint32(o, tag);
    nx_put_uint64(o, len);
    nx_put_uint32(o, bad);
    if (ok) {
      nx_put_bytes_ref(o, a, len / 2, conf_zdone, NULL);
      nx_put_bytes_ref(o, bb, len - len / 2, conf_zdone, b);
    }
    nx_rsr_send(o);
  }
  nx_gp_release(&reply);
}

/* "seq": u32 sender, u32 seq; counts per sender, notes duplicates and
 * order violations. "report": gp reply -> "counts" with the totals. */
#define CONF_SENDERS 16
#define CONF_MAX_SEQ 20000
static pthread_mutex_t conf_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t conf_next[CONF_SENDERS];
static uint8_t *conf_seen[CONF_SENDERS];
static uint64_t conf_total, conf_dups, conf_out_of_order, conf_bad;

static void conf_seq(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  uint32_t s = 0, q = 0;
  pthread_mutex_lock(&conf_lock);
  if (nx_get_uint32(b, &s) != 0 || nx_get_uint32(b, &q) != 0 ||
      s >= CONF_SENDERS || q >= CONF_MAX_SEQ) {
    conf_bad++;
  } else {
    if (conf_seen[s] == NULL)
      conf_seen[s] = (uint8_t *)calloc(CONF_MAX_SEQ, 1);
    if (conf_seen[s] != NULL && conf_seen[s][q]++ != 0)
      conf_dups++;
    if (q != conf_next[s])
      conf_out_of_order++;
    conf_next[s] = q + 1;
    conf_total++;
  }
  pthread_mutex_unlock(&conf_lock);
}

/* Answers a report request (payload: gp reply) with "counts": the four
 * values `take` reads and resets under conf_lock. */
static void conf_counts_reply(nx_buffer_t *b, void (*take)(uint64_t v[4])) {
  nx_gp_t reply = NX_GP_NULL;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) == 0 &&
      nx_rsr_init_name(&o, &reply, "counts", 64) == 0) {
    uint64_t v[4];
    pthread_mutex_lock(&conf_lock);
    take(v);
    pthread_mutex_unlock(&conf_lock);
    nx_put_uint64_array(o, v, 4);
    nx_rsr_send(o);
  }
  nx_gp_release(&reply);
}

static void conf_seq_take(uint64_t v[4]) {
  v[0] = conf_total, v[1] = conf_dups, v[2] = conf_out_of_order;
  v[3] = conf_bad;
  conf_total = conf_dups = conf_out_of_order = conf_bad = 0;
  for (int i = 0; i < CONF_SENDERS; i++) {
    conf_next[i] = 0;
    free(conf_seen[i]);
    conf_seen[i] = NULL;
  }
}

static void conf_report(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  conf_counts_reply(b, conf_seq_take);
}

/* "types": every type, as the suite puts them; answers "typed" with the
 * number of mismatches. */
static void conf_types(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  int bad = 0;
  nx_gp_t reply = NX_GP_NULL;
  if (nx_get_gp(b, &reply) != 0)
    return;
  int8_t i8;
  uint8_t u8;
  int16_t i16;
  uint16_t u16;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  float f;
  double d;
  char c;
  bad += nx_get_int8(b, &i8) != 0 || i8 != -8;
  bad += nx_get_uint8(b, &u8) != 0 || u8 != 200;
  bad += nx_get_int16(b, &i16) != 0 || i16 != -1600;
  bad += nx_get_uint16(b, &u16) != 0 || u16 != 60000;
  bad += nx_get_int32(b, &i32) != 0 || i32 != -320000;
  bad += nx_get_uint32(b, &u32) != 0 || u32 != 4000000000u;
  bad += nx_get_int64(b, &i64) != 0 || i64 != -(1ll << 60);
  bad += nx_get_uint64(b, &u64) != 0 || u64 != 0xfedcba9876543210ull;
  bad += nx_get_float(b, &f) != 0 || f != 1.5f;
  bad += nx_get_double(b, &d) != 0 || d != -2.25e100;
  bad += nx_get_char(b, &c) != 0 || c != 'q';
  int32_t arr[100];
  bad += nx_get_int32_array(b, arr, 100) != 0;
  for (int k = 0; k < 100; k++)
    bad += arr[k] != k * k - 50;
  double darr[10];
  bad += nx_get_double_array(b, darr, 10) != 0;
  for (int k = 0; k < 10; k++)
    bad += darr[k] != k / 4.0;
  nx_gp_t inner = NX_GP_NULL;
  bad += nx_get_gp(b, &inner) != 0 || !nx_gp_equal(&inner, &reply);
  nx_gp_release(&inner);
  bad += nx_buffer_remaining(b) != 0;
  nx_buffer_t *o;
  if (nx_rsr_init_name(&o, &reply, "typed", 16) == 0) {
    nx_put_int32(o, bad);
    nx_rsr_send(o);
  }
  nx_gp_release(&reply);
}

/* "third": makes an in-process context here and sends its gp back in a
 * "third_is" RSR, with the sender this handler saw (nx_buffer_source) and
 * its own context's id; that context answers "ping" like this one. */
static int conf_register(nx_context_t *ctx);
static int conf_third_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  return conf_register(ctx);
}
static void conf_third(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)addr;
  nx_gp_t reply = NX_GP_NULL, third = NX_GP_NULL;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) == 0 &&
      nx_context_create_local(conf_third_init, NULL, &third) == 0 &&
      nx_rsr_init_name(&o, &reply, "third_is", 256) == 0) {
    nx_put_gp(o, &third);
    nx_put_uint64(o, nx_buffer_source(b));
    nx_put_uint64(o, nx_context_id(ctx));
    nx_rsr_send(o);
  }
  nx_gp_release(&third);
  nx_gp_release(&reply);
}

/* [zc-mods] "ping_refs"/"ping_refs_t": gp reply, u32 tag, u32 count, then
 * count times (u64 len, bytes put by reference); reads each in place and
 * answers "pong_refs" with the tag, the count and the same (len, bytes),
 * put by reference to this buffer, which it keeps until the last release
 * callback. */
#define CONF_REFS_MAX 8
struct conf_refs_hold {
  nx_buffer_t *b;
  int left;
};

static void conf_refs_release(void *arg, const void *v, int status) {
  (void)v, (void)status;
  struct conf_refs_hold *h = (struct conf_refs_hold *)arg;
  if (__atomic_sub_fetch(&h->left, 1, __ATOMIC_ACQ_REL) == 0) {
    nx_buffer_release(h->b);
    free(h);
  }
}

static void conf_ping_refs(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint32_t tag = 0, count = 0;
  uint64_t len[CONF_REFS_MAX];
  const void *data[CONF_REFS_MAX];
  struct conf_refs_hold *h = NULL;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) != 0 || nx_get_uint32(b, &tag) != 0 ||
      nx_get_uint32(b, &count) != 0 || count > CONF_REFS_MAX)
    goto out;
  for (uint32_t i = 0; i < count; i++)
    if (nx_get_uint64(b, &len[i]) != 0 ||
        nx_get_bytes_ptr(b, &data[i], len[i]) != 0)
      goto out;
  if (nx_rsr_init_name(&o, &reply, "pong_refs", 64) != 0)
    goto out;
  h = (struct conf_refs_hold *)malloc(sizeof(struct conf_refs_hold));
  if (h == NULL || nx_buffer_retain(b) != 0) {
    free(h);
    nx_buffer_release(o);
    goto out;
  }
  h->b = b;
  h->left = (int)count + 1;
  nx_put_uint32(o, tag);
  nx_put_uint32(o, count);
  for (uint32_t i = 0; i < count; i++) {
    nx_put_uint64(o, len[i]);
    if (nx_put_bytes_ref(o, data[i], len[i], conf_refs_release, h) != 0)
      __atomic_sub_fetch(&h->left, 1, __ATOMIC_ACQ_REL); /* not called */
  }
  nx_rsr_send(o);
  conf_refs_release(h, NULL, 0); /* this handler's share */
out:
  nx_gp_release(&reply);
}

/* "oseq"/"oseq_t" (non-threaded/threaded): u32 seq, then bytes that only
 * make the frame large or small. Sent with NX_RSR_ORDERED from one
 * context: they must run one at a time (the threaded one waits 500 us in
 * nexus, to give an overlap room) with seq counting up from 0. "oreport": gp
 * reply -> "counts" with {total, overlaps, out of order, malformed}. */
static int conf_orunning;
static uint64_t conf_onext, conf_ototal, conf_ooverlap, conf_oout, conf_obad;

static void conf_oseq_run(nx_buffer_t *b, int sleep) {
  int overlap = __atomic_fetch_add(&conf_orunning, 1, __ATOMIC_SEQ_CST) != 0;
  uint32_t q = 0;
  int bad = nx_get_uint32(b, &q) != 0;
  if (sleep) {
    /* A wait in nexus: on the progress thread it hands progress to
     * another thread, which could start the next handler meanwhile. */
    nx_mutex_t m;
    nx_cond_t c;
    struct timespec ts;
    nx_mutex_init(&m);
    nx_cond_init(&c);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 500 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    nx_mutex_lock(&m);
    while (nx_cond_timedwait(&c, &m, &ts) == 0)
      ;
    nx_mutex_unlock(&m);
    nx_cond_destroy(&c);
    nx_mutex_destroy(&m);
  }
  pthread_mutex_lock(&conf_lock);
  conf_ooverlap += overlap;
  if (bad) {
    conf_obad++;
  } else {
    conf_oout += q != conf_onext;
    conf_onext = q + 1;
    conf_ototal++;
  }
  pthread_mutex_unlock(&conf_lock);
  __atomic_fetch_sub(&conf_orunning, 1, __ATOMIC_SEQ_CST);
}

static void conf_oseq(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  conf_oseq_run(b, 0);
}

static void conf_oseq_t(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  conf_oseq_run(b, 1);
}

static void conf_oseq_take(uint64_t v[4]) {
  v[0] = conf_ototal, v[1] = conf_ooverlap, v[2] = conf_oout, v[3] = conf_obad;
  conf_onext = conf_ototal = conf_ooverlap = conf_oout = conf_obad = 0;
}

static void conf_oreport(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  conf_counts_reply(b, conf_oseq_take);
}

/* "dplace": receive placement with a conversion where the value lands.
 * Payload = gp reply, u32 tag, u64 n, then n doubles last (in whatever
 * format the sender chose). conf_dplace_at names conf_dmem (room for
 * CONF_DPLACE_MAX doubles); the handler gets the doubles into that same
 * memory, which converts them there when the formats differ, and answers
 * "pong": the tag plus 1000000 if they were placed, n * 8, and their
 * bytes in this machine's order. */
#define CONF_DPLACE_MAX (1u << 20)
static double *conf_dmem;

static int conf_dplace_at(nx_context_t *ctx, void *addr, nx_buffer_t *lead,
                          size_t tail, nx_place_t *where) {
  (void)ctx, (void)addr, (void)lead;
  if (conf_dmem == NULL)
    return NX_ENOMEM;
  where->addr = conf_dmem;
  where->len = CONF_DPLACE_MAX * sizeof(double);
  return tail <= where->len ? 1 : 0;
}

static void conf_dplace(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx, (void)addr;
  nx_gp_t reply = NX_GP_NULL;
  uint32_t tag = 0;
  uint64_t n = 0;
  nx_buffer_t *o;
  if (nx_get_gp(b, &reply) == 0 && nx_get_uint32(b, &tag) == 0 &&
      nx_get_uint64(b, &n) == 0 && n <= CONF_DPLACE_MAX &&
      nx_get_double_array(b, conf_dmem, n) == 0 &&
      nx_rsr_init_name(&o, &reply, "pong", n * 8 + 32) == 0) {
    nx_put_uint32(o, tag + (nx_buffer_placement(b) == 1 ? 1000000u : 0u));
    nx_put_uint64(o, n * 8);
    nx_put_bytes(o, conf_dmem, n * 8);
    nx_rsr_send(o);
  }
  nx_gp_release(&reply);
}

static int conf_register(nx_context_t *ctx) {
  if (conf_dmem == NULL)
    conf_dmem = (double *)malloc(CONF_DPLACE_MAX * sizeof(double));
  int r =
      nx_handler_register(ctx, "ping", conf_ping, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_t", conf_ping, NX_HANDLER_THREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "zping", conf_zping, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "zping_t", conf_zping, NX_HANDLER_THREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "seq", conf_seq, NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "report", conf_report, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "oseq", conf_oseq, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "oseq_t", conf_oseq_t, NX_HANDLER_THREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "oreport", conf_oreport,
                            NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "types", conf_types, NX_HANDLER_THREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "third", conf_third, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_refs", conf_ping_refs,
                            NX_HANDLER_NONTHREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "ping_refs_t", conf_ping_refs,
                            NX_HANDLER_THREADED, NULL);
  if (r == 0)
    r = nx_handler_register(ctx, "dplace", conf_dplace, NX_HANDLER_NONTHREADED,
                            NULL);
  if (r == 0)
    r = nx_handler_set_place(ctx, "dplace", conf_dplace_at);
  return r;
}

#endif /* CONF_HANDLERS_H */
