/* Internal interface between the thread module and the core's progress engine.
 */
#ifndef NXI_THREAD_H
#define NXI_THREAD_H

#include <stdint.h>
#include <time.h>

/* The core installs these so that threads blocking in nexus calls keep the
 * computation moving (docs/design.md, "Progress"):
 *  - wait: a thread is about to wait for `*word` to differ from `old`. The
 *    hook may drive progress meanwhile. Returns 0 when the word changed,
 *    NX_ETIMEDOUT when `abstime` (may be NULL) passed, or NX_EAGAIN to let
 *    the thread sleep in the kernel.
 *  - block/unblock: bracket every sleep in the kernel (cond wait, contended
 *    mutex, join), so a thread that drives progress hands it over first.
 *  - signal: `*word` was bumped; wakes threads that wait for a word while
 *    asleep in the progress engine's epoll (NX_PROGRESS=poll waiters). */
struct nxi_thread_hooks {
  int (*wait)(const uint32_t *word, uint32_t old,
              const struct timespec *abstime);
  void (*block)(void);
  void (*unblock)(void);
  void (*signal)(const uint32_t *word);
};

/* Installs `hooks` (NULL removes them). Not thread-safe against concurrent
 * nexus calls: used by nx_init and nx_finalize only. */
void nxi_thread_hooks_set(const struct nxi_thread_hooks *hooks);

/* Futex wait on `*word` while it equals `old`, until `abstime`
 * (CLOCK_REALTIME, may be NULL). Returns 0 (woken, changed, or
 * interrupted: callers re-check) or NX_ETIMEDOUT. */
int nxi_futex_wait(const uint32_t *word, uint32_t old,
                   const struct timespec *abstime);
/* Wakes up to `n` threads waiting on `word`. */
void nxi_futex_wake(const uint32_t *word, int n);

/* Maps a pthread/errno code to an NX_E* code. */
int nxi_errno_slow(int err);
static inline int nxi_errno_to_nx(int err) {
  return err == 0 ? 0 : nxi_errno_slow(err);
}

/* A pause instruction for spin loops. */
static inline void nxi_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif /* NXI_THREAD_H */
