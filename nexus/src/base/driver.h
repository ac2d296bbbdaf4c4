/* The driver lock: one thread at a time polls the modules and dispatches what
 * arrived; reentrant for its holder, and given away by a handler that blocks.
 */
#ifndef NXI_DRIVER_H
#define NXI_DRIVER_H

#include "base/mpscq.h"
#include "base/rt.h"

/* Per-thread state: `driving` counts nested holds of the lock; `gen`
 * changes when a blocking handler gives the lock away, which tells every
 * frame up the stack that it no longer holds it. */
struct nxi_drive_tls {
  int driving;
  unsigned gen;
};

extern NXI_TLS struct nxi_drive_tls nxi_drive_me;
/* The lock: 1 while a thread holds it (driver.c). */
extern atomic_int nxi_driver_word;

/* The driver's queue: RSRs that the lock's holder sent to contexts of this
 * process (rsr.c's in-process send), run by it after the receive queue
 * (dispatch.c) with no locked operation: a handler's reply costs no
 * exchange on a queue other threads write. What is left in it when the lock
 * is let go (nxi_drive_end, nxi_drive_lose, nxi_drive_suspend) goes to the
 * receive queue, where the next driver finds it: the spill stage, which the
 * engine registers (struct nxi_drive_stages). Only the holder touches it. */
struct nxi_drive_q {
  /* Atomic (relaxed) for nxi_drive_q_any, which any thread may ask. */
  struct nxi_qnode *_Atomic head;
  struct nxi_qnode *last;
};
extern struct nxi_drive_q nxi_drive_q;

/* What the driver lock calls of a higher layer (docs/design.md, "Stages").
 */
struct nxi_drive_stages {
  /* Puts the chain first..last (linked by `next`, last->next NULL) at the
   * end of the receive queue and wakes a thread to drive. */
  void (*spill)(struct nxi_qnode *first, struct nxi_qnode *last);
};
/* Registers the spill stage (NULL: none; what is queued then stays for the
 * next holder). */
void nxi_drive_stages_set(const struct nxi_drive_stages *s);
/* Hands the driver's queue to the spill stage (driver.c). */
void nxi_drive_spill(void);

/* Appends to the driver's queue; the caller holds the lock. */
static inline void nxi_drive_q_put(struct nxi_qnode *n) {
  atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
  if (atomic_load_explicit(&nxi_drive_q.head, memory_order_relaxed) == NULL)
    atomic_store_explicit(&nxi_drive_q.head, n, memory_order_relaxed);
  else
    atomic_store_explicit(&nxi_drive_q.last->next, n, memory_order_relaxed);
  nxi_drive_q.last = n;
}
/* Takes the first of the driver's queue (NULL: empty); the caller holds the
 * lock. */
static inline struct nxi_qnode *nxi_drive_q_take(void) {
  struct nxi_qnode *n =
      atomic_load_explicit(&nxi_drive_q.head, memory_order_relaxed);
  if (n != NULL)
    atomic_store_explicit(&nxi_drive_q.head,
                          atomic_load_explicit(&n->next, memory_order_relaxed),
                          memory_order_relaxed);
  return n;
}
/* Whether the driver's queue has something: a hint for any thread (the
 * holder runs it, or spills it as it lets go), exact for the holder. */
static inline int nxi_drive_q_any(void) {
  return atomic_load_explicit(&nxi_drive_q.head, memory_order_relaxed) != NULL;
}

/* Takes the lock if free (or already ours); 1 and the generation in *gen
 * on success, 0 when another thread holds it. Inline, as the next one:
 * a waiting thread takes and drops the lock every round. */
static inline int nxi_drive_begin(unsigned *gen) {
  if (nxi_drive_me.driving > 0) {
    nxi_drive_me.driving++;
    *gen = nxi_drive_me.gen;
    return 1;
  }
  int expected = 0;
  if (atomic_load_explicit(&nxi_driver_word, memory_order_relaxed) != 0 ||
      !atomic_compare_exchange_strong_explicit(&nxi_driver_word, &expected, 1,
                                               memory_order_acquire,
                                               memory_order_relaxed))
    return 0;
  nxi_drive_me.driving = 1;
  *gen = nxi_drive_me.gen;
  return 1;
}
/* Drops one hold taken at generation `gen` (nothing if given away since). */
static inline void nxi_drive_end(unsigned gen) {
  if (gen != nxi_drive_me.gen || nxi_drive_me.driving == 0)
    return; /* given away meanwhile */
  if (--nxi_drive_me.driving == 0) {
    if (nxi_drive_q_any())
      nxi_drive_spill();
    atomic_store_explicit(&nxi_driver_word, 0, memory_order_release);
  }
}
/* Gives the lock away from inside a handler that is about to block. */
void nxi_drive_lose(void);

/* Lets go of the lock around code that may block in the kernel (a lazy
 * threaded handler), and takes it back if it is still free: then the
 * frames up the stack go on as if they had held it throughout; else they
 * see the generation change, as after nxi_drive_lose. */
struct nxi_drive_hold {
  int depth;
  unsigned gen;
};
static inline struct nxi_drive_hold nxi_drive_suspend(void) {
  struct nxi_drive_hold h = {nxi_drive_me.driving, nxi_drive_me.gen};
  if (h.depth > 0) {
    if (nxi_drive_q_any())
      nxi_drive_spill();
    nxi_drive_me.driving = 0;
    atomic_store_explicit(&nxi_driver_word, 0, memory_order_release);
  }
  return h;
}
/* Inline, as nxi_drive_suspend: once per lazy threaded handler. */
static inline void nxi_drive_resume(struct nxi_drive_hold h) {
  if (h.depth == 0)
    return;
  int expected = 0;
  if (nxi_drive_me.gen == h.gen && nxi_drive_me.driving == 0 &&
      atomic_load_explicit(&nxi_driver_word, memory_order_relaxed) == 0 &&
      atomic_compare_exchange_strong_explicit(&nxi_driver_word, &expected, 1,
                                              memory_order_acquire,
                                              memory_order_relaxed)) {
    nxi_drive_me.driving = h.depth;
    return;
  }
  /* Taken meanwhile: the frames up the stack no longer hold it. */
  if (nxi_drive_me.gen == h.gen)
    nxi_drive_me.gen++;
}

/* Whether this thread holds the lock, and at which generation. */
static inline int nxi_driving(void) { return nxi_drive_me.driving > 0; }
static inline unsigned nxi_drive_gen(void) { return nxi_drive_me.gen; }

/* Takes the lock, waiting for it; returns the token for the unlock. */
unsigned nxi_driver_lock(void);
void nxi_driver_unlock(unsigned token);

#endif /* NXI_DRIVER_H */
