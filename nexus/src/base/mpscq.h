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
  _Alignas(NXI_MPSCQ_ALIGN) struct nxi_qnode *tail;
  struct nxi_qnode sentinel; /* always in the queue: it is never empty */
};

void nxi_mpscq_init(struct nxi_mpscq *q);
/* Inline, as both run once per RSR. */
static inline void nxi_mpscq_push(struct nxi_mpscq *q, struct nxi_qnode *n) {
  atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
  struct nxi_qnode *prev =
      atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
  atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Returns NULL when empty, or while a producer is between its two steps
 * (its item is counted in `pushed` only after the link is made). */
static inline struct nxi_qnode *nxi_mpscq_pop(struct nxi_mpscq *q) {
  struct nxi_qnode *tail = q->tail;
  struct nxi_qnode *next =
      atomic_load_explicit(&tail->next, memory_order_acquire);
  if (tail == &q->sentinel) {
    if (next == NULL)
      return NULL;
    q->tail = next;
    tail = next;
    next = atomic_load_explicit(&next->next, memory_order_acquire);
  }
  if (next != NULL) {
    q->tail = next;
    return tail;
  }
  if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
    return NULL;
  nxi_mpscq_push(q, &q->sentinel);
  next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (next != NULL) {
    q->tail = next;
    return tail;
  }
  return NULL;
}
/* Nothing to pop, as the consumer sees it: two loads, for a queue that is
 * empty nearly always (the driver looks at it every round). */
static inline int nxi_mpscq_idle(struct nxi_mpscq *q) {
  return q->tail == &q->sentinel &&
         atomic_load_explicit(&q->sentinel.next, memory_order_acquire) == NULL;
}

#endif /* NXI_MPSCQ_H */
