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
  struct nxi_qnode stub;
};

void nxi_mpscq_init(struct nxi_mpscq *q);
void nxi_mpscq_push(struct nxi_mpscq *q, struct nxi_qnode *n);
/* Returns NULL when empty, or while a producer is between its two steps. */
struct nxi_qnode *nxi_mpscq_pop(struct nxi_mpscq *q);
/* Nothing to pop, as the consumer sees it: two loads, for a queue that is
 * empty nearly always (the driver looks at it every round). */
static inline int nxi_mpscq_idle(struct nxi_mpscq *q) {
  return q->tail == &q->stub &&
         atomic_load_explicit(&q->stub.next, memory_order_acquire) == NULL;
}

#endif /* NXI_MPSCQ_H */
