/* An intrusive multi-producer single-consumer queue (Vyukov): any thread
 * pushes, only the driver pops. */
#ifndef NXI_MPSCQ_H
#define NXI_MPSCQ_H

#include <stdatomic.h>
#include <stddef.h>

#define NXI_MPSCQ_ALIGN 64

struct nxi_qnode {
  struct nxi_qnode *_Atomic next;
};

struct nxi_mpscq {
  _Alignas(NXI_MPSCQ_ALIGN) struct nxi_qnode *_Atomic head;
  /* Written by the consumer alone; atomic so that nxi_mpscq_empty may read
   * it from any thread. */
  _Alignas(NXI_MPSCQ_ALIGN) struct nxi_qnode *_Atomic tail;
  struct nxi_qnode sentinel; /* always in the queue: it is never empty */
};

void nxi_mpscq_init(struct nxi_mpscq *q);
/* Inline, as both run once per RSR. The exchange is sequentially
 * consistent: a producer's later seq_cst loads (of the engine's sleepers,
 * engine.h) come after it, and a sleeper that then reads nxi_mpscq_empty
 * sees the item or is seen. */
static inline void nxi_mpscq_push(struct nxi_mpscq *q, struct nxi_qnode *n) {
  atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
  struct nxi_qnode *prev =
      atomic_exchange_explicit(&q->head, n, memory_order_seq_cst);
  atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Pushes the chain first..last (linked, last->next NULL) as one. */
static inline void nxi_mpscq_push_chain(struct nxi_mpscq *q,
                                        struct nxi_qnode *first,
                                        struct nxi_qnode *last) {
  struct nxi_qnode *prev =
      atomic_exchange_explicit(&q->head, last, memory_order_seq_cst);
  atomic_store_explicit(&prev->next, first, memory_order_release);
}

static inline void nxi_mpscq_tail_set(struct nxi_mpscq *q,
                                      struct nxi_qnode *n) {
  atomic_store_explicit(&q->tail, n, memory_order_relaxed);
}

/* Returns NULL when empty, or while a producer is between its two steps
 * (its exchange made, its link not yet). */
static inline struct nxi_qnode *nxi_mpscq_pop(struct nxi_mpscq *q) {
  struct nxi_qnode *tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  struct nxi_qnode *next =
      atomic_load_explicit(&tail->next, memory_order_acquire);
  if (tail == &q->sentinel) {
    if (next == NULL)
      return NULL;
    nxi_mpscq_tail_set(q, next);
    tail = next;
    next = atomic_load_explicit(&next->next, memory_order_acquire);
  }
  if (next != NULL) {
    nxi_mpscq_tail_set(q, next);
    return tail;
  }
  if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
    return NULL;
  nxi_mpscq_push(q, &q->sentinel);
  next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (next != NULL) {
    nxi_mpscq_tail_set(q, next);
    return tail;
  }
  return NULL;
}
/* Nothing to pop, as the consumer sees it: two loads, for a queue that is
 * empty nearly always (the driver looks at it every round). */
static inline int nxi_mpscq_idle(struct nxi_mpscq *q) {
  return atomic_load_explicit(&q->tail, memory_order_relaxed) == &q->sentinel &&
         atomic_load_explicit(&q->sentinel.next, memory_order_acquire) == NULL;
}
/* Nothing pushed that the consumer has not popped, as any thread sees it:
 * head and tail are both back at the sentinel (the consumer pushes it
 * last when it takes the last item). A producer between its two steps
 * counts already (its exchange moved the head). What it says is true at
 * some point during the call; a sleeper pairs it with the producers'
 * exchange (nxi_mpscq_push). */
static inline int nxi_mpscq_empty(struct nxi_mpscq *q) {
  return atomic_load_explicit(&q->head, memory_order_seq_cst) == &q->sentinel &&
         atomic_load_explicit(&q->tail, memory_order_relaxed) == &q->sentinel;
}
/* The items queued, counted by walking them: the consumer's own call (it
 * holds the driver lock), for a report. */
static inline int nxi_mpscq_count(struct nxi_mpscq *q) {
  int n = 0;
  struct nxi_qnode *p = atomic_load_explicit(&q->tail, memory_order_relaxed);
  for (; p != NULL; p = atomic_load_explicit(&p->next, memory_order_acquire))
    n += p != &q->sentinel;
  return n;
}

#endif /* NXI_MPSCQ_H */
