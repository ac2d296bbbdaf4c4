/* An intrusive multi-producer single-consumer queue (Vyukov): any thread
 * pushes, only the driver pops. */
#ifndef NXI_MPSCQ_H
#define NXI_MPSCQ_H

#include <stdatomic.h>

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

#endif /* NXI_MPSCQ_H */
