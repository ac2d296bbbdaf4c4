/* Ordered delivery (order.h): per (sending context, destination context), the
 * sender's numbering and the receiver's turn and held RSRs. */
#include "order.h"

#include <stdlib.h>

#include "engine.h"

struct nxi_ostream {
  struct nxi_ostream *next; /* in its bucket; set before it is published */
  uint64_t source, dest;
  /* Sending. */
  pthread_mutex_t send_lock;
  uint32_t send_next;
  /* Receiving, under `lock`. */
  pthread_mutex_t lock;
  uint32_t recv_next;
  int busy; /* an admitted RSR has not finished */
  int skip; /* a fence came: the next gap is a route's loss, jump it */
  /* Arrived before their turn, in arrival order: the next to run is
   * mostly the first (a stream held back behind a threaded handler). */
  struct nx_buffer *held, **held_tail;
};

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
  n->recv_next = 1;
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

/* Takes the held RSR numbered recv_next, if there is one, admitted: it goes
 * back through the receive queue. Under s->lock, with the stream idle. */
static struct nx_buffer *take_turn(struct nxi_ostream *s) {
  for (struct nx_buffer **pp = &s->held; *pp != NULL; pp = &(*pp)->held_next) {
    struct nx_buffer *b = *pp;
    if (b->order == s->recv_next) {
      *pp = b->held_next;
      if (*pp == NULL)
        s->held_tail = pp;
      b->held_next = NULL;
      b->ostream = s;
      s->busy = 1;
      return b;
    }
  }
  return NULL;
}

/* The first number held, counting from recv_next. */
static uint32_t first_held(const struct nxi_ostream *s) {
  uint32_t best = s->held->order;
  for (const struct nx_buffer *b = s->held; b != NULL; b = b->held_next)
    if (ahead(b->order, s->recv_next) < ahead(best, s->recv_next))
      best = b->order;
  return best;
}

/* What the idle stream runs next: its turn's RSR if held; else, after a
 * fence, the first held (the numbers before it were lost with a route). */
static struct nx_buffer *next_turn(struct nxi_ostream *s) {
  struct nx_buffer *next = take_turn(s);
  if (next == NULL && s->skip && s->held != NULL) {
    s->skip = 0;
    s->recv_next = first_held(s);
    next = take_turn(s);
  }
  return next;
}

int nxi_order_admit(struct nx_buffer *b) {
  struct nxi_ostream *s = nxi_order_stream(b->source, b->context);
  if (s == NULL)
    return 1; /* no memory for a stream: run it unordered rather than lose it */
  pthread_mutex_lock(&s->lock);
  int r;
  if (!s->busy && (b->order == s->recv_next ||
                   (s->skip && ahead(b->order, s->recv_next) < 1u << 31))) {
    /* Its turn; or the first to arrive after a fence, whose route lost
     * the numbers before it. */
    s->recv_next = b->order;
    s->skip = 0;
    s->busy = 1;
    b->ostream = s;
    r = 1;
  } else if (ahead(b->order, s->recv_next) >= 1u << 31) {
    r = -1; /* its turn passed: a fence skipped it as lost */
  } else {
    b->held_next = NULL;
    *s->held_tail = b;
    s->held_tail = &b->held_next;
    r = 0;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

void nxi_order_done(struct nx_buffer *b) {
  struct nxi_ostream *s = b->ostream;
  b->ostream = NULL;
  pthread_mutex_lock(&s->lock);
  s->busy = 0;
  s->recv_next = after(s->recv_next);
  struct nx_buffer *next = next_turn(s);
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
      s->skip = 1;
      struct nx_buffer *next = s->busy ? NULL : next_turn(s);
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
