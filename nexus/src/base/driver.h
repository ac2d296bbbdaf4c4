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

/* Takes the lock if free (or already ours); 1 and the generation in *gen
 * on success, 0 when another thread holds it. */
int nxi_drive_begin(unsigned *gen);
/* Drops one hold taken at generation `gen` (nothing if given away since). */
void nxi_drive_end(unsigned gen);
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
struct nxi_drive_hold nxi_drive_suspend(void);
void nxi_drive_resume(struct nxi_drive_hold h);

/* Whether this thread holds the lock, and at which generation. */
static inline int nxi_driving(void) { return nxi_drive_me.driving > 0; }
static inline unsigned nxi_drive_gen(void) { return nxi_drive_me.gen; }

/* Takes the lock, waiting for it; returns the token for the unlock. */
unsigned nxi_driver_lock(void);
void nxi_driver_unlock(unsigned token);

#endif /* NXI_DRIVER_H */
