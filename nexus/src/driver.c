/* The driver lock (driver.h). */
#include "driver.h"

#include <sched.h>

#include "nxi_thread.h"

static _Alignas(NXI_CACHELINE) atomic_int driver;

NXI_TLS struct nxi_drive_tls nxi_drive_me;

int nxi_drive_begin(unsigned *gen) {
  if (nxi_drive_me.driving > 0) {
    nxi_drive_me.driving++;
    *gen = nxi_drive_me.gen;
    return 1;
  }
  int expected = 0;
  if (atomic_load_explicit(&driver, memory_order_relaxed) != 0 ||
      !atomic_compare_exchange_strong_explicit(
          &driver, &expected, 1, memory_order_acquire, memory_order_relaxed))
    return 0;
  nxi_drive_me.driving = 1;
  *gen = nxi_drive_me.gen;
  return 1;
}

void nxi_drive_end(unsigned gen) {
  if (gen != nxi_drive_me.gen || nxi_drive_me.driving == 0)
    return; /* given away meanwhile */
  if (--nxi_drive_me.driving == 0)
    atomic_store_explicit(&driver, 0, memory_order_release);
}

void nxi_drive_lose(void) {
  if (nxi_drive_me.driving == 0)
    return;
  nxi_drive_me.driving = 0;
  nxi_drive_me.gen++;
  atomic_store_explicit(&driver, 0, memory_order_release);
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
