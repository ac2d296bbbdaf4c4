/* The driver lock (driver.h). */
#include "base/driver.h"

#include <sched.h>

#include "threads/nxi_thread.h"

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

struct nxi_drive_hold nxi_drive_suspend(void) {
  struct nxi_drive_hold h = {nxi_drive_me.driving, nxi_drive_me.gen};
  if (h.depth > 0) {
    nxi_drive_me.driving = 0;
    atomic_store_explicit(&driver, 0, memory_order_release);
  }
  return h;
}

void nxi_drive_resume(struct nxi_drive_hold h) {
  if (h.depth == 0)
    return;
  int expected = 0;
  if (nxi_drive_me.gen == h.gen && nxi_drive_me.driving == 0 &&
      atomic_load_explicit(&driver, memory_order_relaxed) == 0 &&
      atomic_compare_exchange_strong_explicit(
          &driver, &expected, 1, memory_order_acquire, memory_order_relaxed)) {
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
