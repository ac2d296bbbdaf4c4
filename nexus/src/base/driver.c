/* The driver lock (driver.h). */
#include "base/driver.h"

#include <sched.h>

#include "threads/nxi_thread.h"

_Alignas(NXI_CACHELINE) atomic_int nxi_driver_word;

NXI_TLS struct nxi_drive_tls nxi_drive_me;

struct nxi_drive_q nxi_drive_q;

static const struct nxi_drive_stages *_Atomic stages;

void nxi_drive_stages_set(const struct nxi_drive_stages *s) {
  atomic_store_explicit(&stages, s, memory_order_release);
}

void nxi_drive_spill(void) {
  const struct nxi_drive_stages *s =
      atomic_load_explicit(&stages, memory_order_acquire);
  struct nxi_qnode *first =
      atomic_load_explicit(&nxi_drive_q.head, memory_order_relaxed);
  if (s == NULL || first == NULL)
    return;
  atomic_store_explicit(&nxi_drive_q.head, NULL, memory_order_relaxed);
  s->spill(first, nxi_drive_q.last);
}

void nxi_drive_lose(void) {
  if (nxi_drive_me.driving == 0)
    return;
  if (nxi_drive_q_any())
    nxi_drive_spill();
  nxi_drive_me.driving = 0;
  nxi_drive_me.gen++;
  atomic_store_explicit(&nxi_driver_word, 0, memory_order_release);
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
