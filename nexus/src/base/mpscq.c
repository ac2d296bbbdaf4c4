/* The intrusive multi-producer single-consumer queue (mpscq.h). */
#include "base/mpscq.h"

#include <stddef.h>

void nxi_mpscq_init(struct nxi_mpscq *q) {
  atomic_init(&q->sentinel.next, NULL);
  atomic_init(&q->head, &q->sentinel);
  atomic_init(&q->tail, &q->sentinel);
}
