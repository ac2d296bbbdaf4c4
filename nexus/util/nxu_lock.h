/* A lock for a module's state, cheaper than a pthread mutex where it is
 * taken once per frame and once per poll: a compare-and-swap takes it when
 * it is free and an exchange gives it back; only a lock someone waits for
 * costs a system call (futex). Its word is 0 (free), 1 (held) or 2 (held,
 * and someone may sleep on it): the third mutex of Drepper's "Futexes Are
 * Tricky". A thread that finds it held spins a little first: its holders
 * make short calls (a send, one progress of the backend). Not reentrant;
 * no owner is recorded. Linux only, as the core (its futex). */
#ifndef NXU_LOCK_H
#define NXU_LOCK_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
  atomic_int word;
} nxu_lock_t;

static inline void nxu_lock_init(nxu_lock_t *l) { atomic_init(&l->word, 0); }

/* The wait of a lock found held (`c` its word then). */
static __attribute__((noinline, unused)) void nxu_lock_wait(nxu_lock_t *l,
                                                            int c) {
  for (int i = 0; i < 100 && c == 1; i++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    c = atomic_load_explicit(&l->word, memory_order_relaxed);
    if (c == 0 && atomic_compare_exchange_strong_explicit(&l->word, &c, 1,
                                                          memory_order_acquire,
                                                          memory_order_relaxed))
      return;
  }
  if (c != 2)
    c = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
  while (c != 0) {
    syscall(SYS_futex, &l->word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = atomic_exchange_explicit(&l->word, 2, memory_order_acquire);
  }
}

static inline void nxu_lock(nxu_lock_t *l) {
  int c = 0;
  if (!atomic_compare_exchange_strong_explicit(
          &l->word, &c, 1, memory_order_acquire, memory_order_relaxed))
    nxu_lock_wait(l, c);
}

static inline void nxu_unlock(nxu_lock_t *l) {
  if (atomic_exchange_explicit(&l->word, 0, memory_order_release) == 2)
    syscall(SYS_futex, &l->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#endif /* NXU_LOCK_H */
