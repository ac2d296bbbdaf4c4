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
