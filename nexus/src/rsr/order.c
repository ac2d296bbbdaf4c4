/* Ordered delivery (order.h): per (sending context, destination context), the
 * sender's numbering and the receiver's turn and held RSRs. */
#include "rsr/order.h"

#include <stdlib.h>

#include "engine/engine.h"

struct nxi_ostream {
  struct nxi_ostream *next; /* in its bucket; set before it is published */
  uint64_t source, dest;
  /* Sending. */
  pthread_mutex_t send_lock;
  uint32_t send_next;
  /* Receiving: the next number to run (low 32 bits) and the flags below,
   * in one word. An RSR whose turn it is, with nothing busy, held or
   * skipped, is admitted by one compare-and-swap, and its end is one
   * more when nothing is held (the common stream: one driver, frames in
   * order); everything else takes `lock`, and changes the word with a
   * compare-and-swap too, so that the lock-free steps see it. */
  _Atomic uint64_t state;
  pthread_mutex_t lock;
  /* Arrived before their turn, in arrival order, under `lock`: the next to
   * run is mostly the first (a stream held back behind a threaded
   * handler). ST_HELD is set while the list is not empty. */
  struct nx_buffer *held, **held_tail;
};

#define ST_BUSY (1ull << 32) /* an admitted RSR has not finished */
#define ST_SKIP (1ull << 33) /* a fence came: the next gap is a loss */
#define ST_HELD (1ull << 34) /* `held` is not empty */

static uint32_t st_next(uint64_t w) { return (uint32_t)w; }

/* Replaces the state word `*w` (as last read) with `nw`; else reads it
 * into `*w` and returns 0. */
static int st_swap(struct nxi_ostream *s, uint64_t *w, uint64_t nw) {
  return atomic_compare_exchange_strong_explicit(
      &s->state, w, nw, memory_order_acq_rel, memory_order_acquire);
}

/* Streams live until nx_finalize: a pair that used ordered RSRs once
 * keeps its entry (about 150 bytes). Buckets are written with a
 * compare-and-swap and read without a lock. */
#define BUCKETS 1024u
static _Atomic(struct nxi_ostream *) buckets[BUCKETS];

static unsigned bucket_of(uint64_t source, uint64_t dest) {
  uint64_t h =
      (source ^ (dest * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  return (unsigned)(h >> 54) % BUCKETS;
}

static struct nxi_ostream *find(struct nxi_ostream *s, uint64_t source,
                                uint64_t dest) {
  for (; s != NULL; s = s->next)
    if (s->source == source && s->dest == dest)
      return s;
  return NULL;
}

/* Numbers run 1, 2, ... and skip 0, which means "not ordered". */
static uint32_t after(uint32_t n) { return n + 1 != 0 ? n + 1 : 1; }

/* How far `n` is ahead of `base`; 2^31 and more: behind it. */
static uint32_t ahead(uint32_t n, uint32_t base) { return n - base; }

struct nxi_ostream *nxi_order_stream(uint64_t source, uint64_t dest) {
  _Atomic(struct nxi_ostream *) *bk = &buckets[bucket_of(source, dest)];
  struct nxi_ostream *head = atomic_load_explicit(bk, memory_order_acquire);
  struct nxi_ostream *s = find(head, source, dest);
  if (s != NULL)
    return s;
  struct nxi_ostream *n = calloc(1, sizeof(*n));
  if (n == NULL)
    return NULL;
  n->source = source;
  n->dest = dest;
  n->send_next = 1;
  atomic_init(&n->state, 1); /* next 1, nothing busy, held or skipped */
  n->held_tail = &n->held;
  pthread_mutex_init(&n->send_lock, NULL);
  pthread_mutex_init(&n->lock, NULL);
  for (;;) {
    n->next = head;
    if (atomic_compare_exchange_weak_explicit(
            bk, &head, n, memory_order_acq_rel, memory_order_acquire))
      return n;
    /* Another thread published first: perhaps this very pair. */
    if ((s = find(head, source, dest)) != NULL) {
      pthread_mutex_destroy(&n->send_lock);
      pthread_mutex_destroy(&n->lock);
      free(n);
      return s;
    }
  }
}

uint32_t nxi_order_send_begin(struct nxi_ostream *s) {
  pthread_mutex_lock(&s->send_lock);
  return s->send_next;
}

void nxi_order_send_end(struct nxi_ostream *s, int accepted) {
  if (accepted)
    s->send_next = after(s->send_next);
  pthread_mutex_unlock(&s->send_lock);
}

/* Takes the held RSR numbered `next`, if there is one, admitted: it goes
 * back through the receive queue. Under s->lock. */
static struct nx_buffer *take_held(struct nxi_ostream *s, uint32_t next) {
  for (struct nx_buffer **pp = &s->held; *pp != NULL; pp = &(*pp)->held_next) {
    struct nx_buffer *b = *pp;
    if (b->order == next) {
      *pp = b->held_next;
      if (*pp == NULL)
        s->held_tail = pp;
      b->held_next = NULL;
      b->ostream = s;
      return b;
    }
  }
  return NULL;
}

/* The first number held, counting from `next`. */
static uint32_t first_held(const struct nxi_ostream *s, uint32_t next) {
  uint32_t best = s->held->order;
  for (const struct nx_buffer *b = s->held; b != NULL; b = b->held_next)
    if (ahead(b->order, next) < ahead(best, next))
      best = b->order;
  return best;
}

/* The idle stream whose next number is `next` and whose skip flag is
 * `skip`: what it runs next (its turn's RSR if held; else, after a
 * fence, the first held: the numbers before it were lost with a route),
 * and its state word after. Under s->lock, with the word stable (not
 * busy, or skipped: no lock-free step can change it). */
static struct nx_buffer *next_turn(struct nxi_ostream *s, uint32_t next,
                                   int skip, uint64_t *state) {
  struct nx_buffer *b = take_held(s, next);
  if (b == NULL && skip && s->held != NULL) {
    skip = 0;
    next = first_held(s, next);
    b = take_held(s, next);
  }
  *state = next | (b != NULL ? ST_BUSY : 0) | (skip ? ST_SKIP : 0) |
           (s->held != NULL ? ST_HELD : 0);
  return b;
}

int nxi_order_admit(struct nx_buffer *b) {
  struct nxi_ostream *s = nxi_order_stream(b->source, b->context);
  if (s == NULL)
    return 1; /* no memory for a stream: run it unordered rather than lose it */
  /* Its turn, the stream idle and nothing skipped: one step. */
  uint64_t w = atomic_load_explicit(&s->state, memory_order_acquire);
  if (!(w & (ST_BUSY | ST_SKIP)) && st_next(w) == b->order &&
      st_swap(s, &w, w | ST_BUSY)) {
    b->ostream = s;
    return 1;
  }
  pthread_mutex_lock(&s->lock);
  int r;
  for (;;) {
    w = atomic_load_explicit(&s->state, memory_order_acquire);
    uint32_t next = st_next(w);
    if (!(w & ST_BUSY) &&
        (b->order == next ||
         ((w & ST_SKIP) && ahead(b->order, next) < 1u << 31))) {
      /* Its turn; or the first to arrive after a fence, whose route lost
       * the numbers before it. */
      uint64_t nw = b->order | ST_BUSY | (w & ST_HELD);
      if (!st_swap(s, &w, nw))
        continue; /* a lock-free step came first: look again */
      b->ostream = s;
      r = 1;
    } else if (ahead(b->order, next) >= 1u << 31) {
      r = -1; /* its turn passed: a fence skipped it as lost */
    } else {
      /* Held. The flag goes up first, from the very state judged, so
       * that an end that has not seen it fails its own step and comes
       * here for the list. */
      if (!st_swap(s, &w, w | ST_HELD))
        continue;
      b->held_next = NULL;
      *s->held_tail = b;
      s->held_tail = &b->held_next;
      r = 0;
    }
    break;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

void nxi_order_done(struct nx_buffer *b) {
  struct nxi_ostream *s = b->ostream;
  b->ostream = NULL;
  /* Busy (this RSR) and nothing held or skipped: the next number, idle. */
  uint64_t w = atomic_load_explicit(&s->state, memory_order_acquire);
  if ((w & (ST_BUSY | ST_HELD | ST_SKIP)) == ST_BUSY &&
      st_swap(s, &w, after(st_next(w))))
    return;
  pthread_mutex_lock(&s->lock);
  /* Busy: no lock-free step changes the word meanwhile. */
  w = atomic_load_explicit(&s->state, memory_order_acquire);
  uint64_t nw;
  struct nx_buffer *next =
      next_turn(s, after(st_next(w)), (w & ST_SKIP) != 0, &nw);
  atomic_store_explicit(&s->state, nw, memory_order_release);
  pthread_mutex_unlock(&s->lock);
  if (next != NULL)
    nxi_requeue(next);
}

void nxi_order_skip(uint32_t proc) {
  for (unsigned i = 0; i < BUCKETS; i++) {
    struct nxi_ostream *s =
        atomic_load_explicit(&buckets[i], memory_order_acquire);
    for (; s != NULL; s = s->next) {
      if (nxi_ctxid_proc(s->source) != proc)
        continue;
      pthread_mutex_lock(&s->lock);
      /* The flag first: with it up, no lock-free step changes the word. */
      uint64_t w = ST_SKIP | atomic_fetch_or_explicit(&s->state, ST_SKIP,
                                                      memory_order_acq_rel);
      struct nx_buffer *next = NULL;
      if (!(w & ST_BUSY)) {
        uint64_t nw;
        next = next_turn(s, st_next(w), 1, &nw);
        atomic_store_explicit(&s->state, nw, memory_order_release);
      }
      pthread_mutex_unlock(&s->lock);
      if (next != NULL)
        nxi_requeue(next);
    }
  }
}

void nxi_order_finalize(void) {
  for (unsigned i = 0; i < BUCKETS; i++) {
    struct nxi_ostream *s = atomic_exchange(&buckets[i], NULL);
    while (s != NULL) {
      struct nxi_ostream *next = s->next;
      while (s->held != NULL) {
        struct nx_buffer *b = s->held;
        s->held = b->held_next;
        nxi_buffer_handler_done(b);
      }
      s->held_tail = &s->held;
      pthread_mutex_destroy(&s->send_lock);
      pthread_mutex_destroy(&s->lock);
      free(s);
      s = next;
    }
  }
}
