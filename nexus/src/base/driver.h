/* The driver lock: one thread at a time polls the modules and dispatches what
 * arrived; reentrant for its holder, and given away by a handler that blocks.
 */
#ifndef NXI_DRIVER_H
#define NXI_DRIVER_H

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
  if (--nxi_drive_me.driving == 0)
    atomic_store_explicit(&nxi_driver_word, 0, memory_order_release);
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
