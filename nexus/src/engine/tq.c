/* The thread queue (engine.h): threaded handlers waiting for a runtime
 * thread, and parked ones made runnable (fiber.c). */
#include "engine/engine.h"

void nxi_tq_push(struct nx_buffer *b) {
  pthread_mutex_lock(&nxi_eng.tq_lock);
  atomic_store_explicit(&b->qnode.next, NULL, memory_order_relaxed);
  if (nxi_eng.tq_tail != NULL)
    atomic_store_explicit(&nxi_eng.tq_tail->next, &b->qnode,
                          memory_order_relaxed);
  else
    nxi_eng.tq_head = &b->qnode;
  nxi_eng.tq_tail = &b->qnode;
  atomic_fetch_add(&nxi_eng.tq_len, 1);
  pthread_mutex_unlock(&nxi_eng.tq_lock);
  if (nxi_rt.poll_mode) {
    /* A spinning pooled thread will see tq_len; it checks tq_len again
     * after it stops spinning, so one of us always sees the other. */
    if (atomic_load(&nxi_eng.spinners) > 0)
      return;
    pthread_mutex_lock(&nxi_eng.pool_lock);
    nxi_pool_kick_locked();
    pthread_mutex_unlock(&nxi_eng.pool_lock);
  } else {
    nxi_progress_wake(); /* the primary runs it */
  }
}

struct nx_buffer *nxi_tq_pop(void) {
  if (atomic_load_explicit(&nxi_eng.tq_len, memory_order_relaxed) == 0)
    return NULL;
  pthread_mutex_lock(&nxi_eng.tq_lock);
  struct nxi_qnode *n = nxi_eng.tq_head;
  if (n != NULL) {
    nxi_eng.tq_head = atomic_load_explicit(&n->next, memory_order_relaxed);
    if (nxi_eng.tq_head == NULL)
      nxi_eng.tq_tail = NULL;
    atomic_fetch_sub(&nxi_eng.tq_len, 1);
  }
  pthread_mutex_unlock(&nxi_eng.tq_lock);
  return n != NULL ? NXI_CONTAINER_OF(n, struct nx_buffer, qnode) : NULL;
}
