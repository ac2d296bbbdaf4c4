/* The driver lock (driver.h). */
#include "base/driver.h"

#include <sched.h>

#include "threads/nxi_thread.h"

_Alignas(NXI_CACHELINE) atomic_int nxi_driver_word;

NXI_TLS struct nxi_drive_tls nxi_drive_me;

void nxi_drive_lose(void) {
  if (nxi_drive_me.driving == 0)
    return;
  nxi_drive_me.driving = 0;
  nxi_drive_me.gen++;
  atomic_store_explicit(&nxi_driver_word, 0, memory_order_release);
}

struct nxi_drive_hold nxi_drive_suspend(void) {
  struct nxi_drive_hold h = {nxi_drive_me.driving, nxi_drive_me.gen};
  if (h.depth > 0) {
    nxi_drive_me.driving = 0;
    atomic_store_explicit(&nxi_driver_word, 0, memory_order_release);
  }
  return h;
}

void nxi_drive_resume(struct nxi_drive_hold h) {
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

unsigned nxi_driver_lock(void) {
  unsigned gen;
  for (unsigned i = 0; !nxi_drive_begin(&gen); i++) {
    if (i < 1000)
      nxi_cpu_relax();
    else
      sched_yield();
  }
  return gen;
}

void nxi_driver_unlock(unsigned gen) { nxi_drive_end(gen); }
