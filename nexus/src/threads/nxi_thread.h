/* Internal interface between the thread module and the core's progress engine.
 */
#ifndef NXI_THREAD_H
#define NXI_THREAD_H

#include <stdint.h>
#include <time.h>

/* The core installs these so that threads blocking in nexus calls keep the
 * computation moving (docs/design.md, "Progress"):
 *  - wait: a thread is about to wait for `*word` to differ from `old`. The
 *    stage may drive progress meanwhile. Returns 0 when the word changed,
 *    NX_ETIMEDOUT when `abstime` (may be NULL) passed, or NX_EAGAIN to let
 *    the thread sleep in the kernel.
 *  - block/unblock: bracket every sleep in the kernel (cond wait, contended
 *    mutex, join), so a thread that drives progress hands it over first.
 *  - signal: `*word` was bumped for up to `n` waiters; wakes threads that
 *    wait for a word while asleep in the progress engine's epoll
 *    (NX_PROGRESS=poll waiters), and handlers parked on it.
 *  - can_park/park: a threaded handler running on a stack of its own
 *    (nexus/src/rsr/fiber.h) parks instead of sleeping, until `*word` is
 *    signalled; park returns NX_EAGAIN when the caller cannot park.
 *  - exit_handler: nx_thread_exit was called; on a handler's own stack it
 *    ends that handler and does not return. Else it returns nonzero when
 *    the calling thread must not end (it runs a handler on a thread that
 *    is not the handler's own: nx_thread_exit then returns), 0 when it
 *    may. */
struct nxi_thread_stages {
  int (*wait)(const uint32_t *word, uint32_t old,
              const struct timespec *abstime);
  void (*block)(void);
  void (*unblock)(void);
  void (*signal)(const uint32_t *word, int n);
  int (*can_park)(void);
  int (*park)(const uint32_t *word, uint32_t old);
  int (*exit_handler)(void);
};

/* Installs `stages` (NULL removes them). Not thread-safe against concurrent
 * nexus calls: used by nx_init and nx_finalize only. */
void nxi_thread_stages_set(const struct nxi_thread_stages *stages);

/* Futex wait on `*word` while it equals `old`, until `abstime`
 * (CLOCK_REALTIME, may be NULL). Returns 0 (woken, changed, or
 * interrupted: callers re-check) or NX_ETIMEDOUT. */
int nxi_futex_wait(const uint32_t *word, uint32_t old,
                   const struct timespec *abstime);
/* Wakes up to `n` threads waiting on `word`. */
void nxi_futex_wake(const uint32_t *word, int n);

/* A function the compiler must call, never inline or look into: what
 * reads thread-locals after a switch between stacks, which may resume on
 * another thread (nexus/src/rsr/fiber.c). */
#if defined(__clang__)
#define NXI_NOIPA __attribute__((noinline))
#else
#define NXI_NOIPA __attribute__((noipa))
#endif

/* What the thread module keeps per thread of control: the nexus mutexes it
 * holds, and its identity (nx_thread_id; 0: the OS thread's, which the
 * thread module writes there at its first use). A lazy threaded handler
 * has its own, an even value (the address of an object of its own: a
 * mutex's owner word marks sleepers in the low bit); the core swaps them
 * when it switches between a thread's stack and a handler's. */
struct nxi_thread_state {
  int locks;
  uint64_t id;
};
void nxi_thread_state_swap(struct nxi_thread_state *s);
int nxi_thread_locks_held(void);

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
