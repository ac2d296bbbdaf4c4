/* Threads, mutexes, condition variables and thread-specific keys (POSIX-style).
 */
#ifndef NEXUS_THREAD_H
#define NEXUS_THREAD_H

#include "export.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The types are concrete so a compiler can embed them in its own objects.
 * Treat their members as private. */
typedef struct nx_thread {
  pthread_t tid;
} nx_thread_t;

typedef struct nx_mutex {
  pthread_mutex_t m;
  pthread_t owner; /* checked on lock and unlock, so misuse is refused */
} nx_mutex_t;

/* A condition variable. `seq` counts signals; waiters sleep on it with a
 * futex and, while they wait, may drive the runtime's progress engine (so a
 * thread waiting for a reply delivers that reply itself). */
typedef struct nx_cond {
  uint32_t seq;
  uint32_t sleepers;
} nx_cond_t;

typedef struct nx_key {
  pthread_key_t k;
} nx_key_t;

typedef void *(*nx_thread_fn)(void *arg);

/* Starts `fn(arg)` in a new thread. Returns 0, NX_EAGAIN or NX_EINVAL. */
NX_EXTERN int nx_thread_create(nx_thread_t *thread, nx_thread_fn fn, void *arg);

/* Ends the calling thread with `result`; does not return. Called from a
 * lazy threaded handler (docs/design.md, "Where handlers run"), it ends
 * that handler instead (its RSR counts as handled, `result` is ignored)
 * and the OS thread it ran on goes on; from an NX_HANDLER_NEW_THREAD
 * handler, it ends the handler's own thread. From any other handler (a
 * non-threaded one, or a threaded one under NX_THREADED=thread), which
 * runs on a thread that is not its own, it returns at once (misuse,
 * said once on stderr): return from the handler instead. */
NX_EXTERN void nx_thread_exit(void *result);

/* Waits for `thread` to end and stores its result in `*result` (may be NULL).
 * Returns 0, NX_EINVAL (not joinable, or joining oneself). */
NX_EXTERN int nx_thread_join(nx_thread_t thread, void **result);

/* Gives up the processor to another runnable thread. */
NX_EXTERN void nx_thread_yield(void);

/* Returns the calling thread. */
NX_EXTERN nx_thread_t nx_thread_self(void);

/* Returns 1 if `a` and `b` name the same thread, else 0. */
NX_EXTERN int nx_thread_equal(nx_thread_t a, nx_thread_t b);

/* The identity of the calling thread of control, for owner checks such as
 * a recursive lock: never 0, and unique among those that run or wait at
 * the same time (a value may be reused after its holder ends). A lazy
 * threaded handler has one of its own, which it keeps when it parks and
 * resumes on another OS thread, and which differs from that of any other
 * handler on the same OS thread (docs/design.md, "Where handlers run");
 * elsewhere it names the OS thread. Mutexes record it as their owner. */
NX_EXTERN uint64_t nx_thread_id(void);

/* Mutexes. Returns 0 or NX_EINVAL; nx_mutex_trylock returns NX_EBUSY when
 * the mutex is held (by another or by the caller), nx_mutex_destroy when
 * it is locked; nx_mutex_lock of a mutex the caller already holds, and
 * unlocking one it does not hold, return NX_EINVAL and change nothing. */
NX_EXTERN int nx_mutex_init(nx_mutex_t *mutex);
NX_EXTERN int nx_mutex_destroy(nx_mutex_t *mutex);
NX_EXTERN int nx_mutex_lock(nx_mutex_t *mutex);
NX_EXTERN int nx_mutex_trylock(nx_mutex_t *mutex);
NX_EXTERN int nx_mutex_unlock(nx_mutex_t *mutex);

/* Condition variables. Waiters must hold `mutex` and re-check their
 * predicate after waking: like POSIX, a wait may return spuriously.
 * nx_cond_timedwait takes an absolute CLOCK_REALTIME deadline and returns
 * NX_ETIMEDOUT when it passes (a NULL deadline: none, as nx_cond_wait).
 * Return 0 or NX_EINVAL (a NULL `cond` or `mutex`, a wait without holding
 * `mutex`, a deadline whose tv_nsec is outside [0, 1e9)); nx_cond_destroy
 * returns NX_EBUSY while a thread sleeps on the variable in the kernel (not
 * while a waiter still drives progress or a lazy threaded handler is parked on
 * it: destroying a variable that someone waits on is the program's error, as
 * with pthreads). */
NX_EXTERN int nx_cond_init(nx_cond_t *cond);
NX_EXTERN int nx_cond_destroy(nx_cond_t *cond);
NX_EXTERN int nx_cond_wait(nx_cond_t *cond, nx_mutex_t *mutex);
NX_EXTERN int nx_cond_timedwait(nx_cond_t *cond, nx_mutex_t *mutex,
                                const struct timespec *abstime);
NX_EXTERN int nx_cond_signal(nx_cond_t *cond);
NX_EXTERN int nx_cond_broadcast(nx_cond_t *cond);

/* Thread-specific data. `destructor` (may be NULL) runs at thread exit for
 * a non-NULL value. Return 0, NX_EAGAIN (nx_key_create: no key left),
 * NX_ENOMEM (nx_key_create, nx_key_set) or NX_EINVAL. */
NX_EXTERN int nx_key_create(nx_key_t *key, void (*destructor)(void *));
NX_EXTERN int nx_key_delete(nx_key_t key);
NX_EXTERN int nx_key_set(nx_key_t key, const void *value);
NX_EXTERN void *nx_key_get(nx_key_t key);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_THREAD_H */
