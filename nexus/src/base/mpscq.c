/* The intrusive multi-producer single-consumer queue (mpscq.h). */
#include "base/mpscq.h"

#include <stddef.h>

void nxi_mpscq_init(struct nxi_mpscq *q) {
  atomic_init(&q->stub.next, NULL);
  atomic_init(&q->head, &q->stub);
  q->tail = &q->stub;
}

void nxi_mpscq_push(struct nxi_mpscq *q, struct nxi_qnode *n) {
  atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
  struct nxi_qnode *prev =
      atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
  atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Returns NULL when empty, or while a producer is between its two steps
 * (its item is counted in `pushed` only after the link is made). */
struct nxi_qnode *nxi_mpscq_pop(struct nxi_mpscq *q) {
  struct nxi_qnode *tail = q->tail;
  struct nxi_qnode *next =
      atomic_load_explicit(&tail->next, memory_order_acquire);
  if (tail == &q->stub) {
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
  nxi_mpscq_push(q, &q->stub);
  next = atomic_load_explicit(&tail->next, memory_order_acquire);
  if (next != NULL) {
    q->tail = next;
    return tail;
  }
  return NULL;
}
