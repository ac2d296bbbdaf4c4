/* POSIX thread module: pthreads for threads, mutexes and keys; Linux futexes
 * for condition variables. */
#include <errno.h>
#include <linux/futex.h>
#include <limits.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nexus/errors.h"
#include "nexus/thread.h"
#include "threads/nxi_thread.h"

/* How many pauses a contended mutex waits for its unlock before the thread
 * parks or sleeps. */
#define MUTEX_SPINS 200

static const struct nxi_thread_stages *stages;

void nxi_thread_stages_set(const struct nxi_thread_stages *h) {
  __atomic_store_n(&stages, h, __ATOMIC_RELEASE);
}

static const struct nxi_thread_stages *get_stages(void) {
  return __atomic_load_n(&stages, __ATOMIC_ACQUIRE);
}

int nxi_errno_slow(int err) {
  switch (err) {
  case 0: return 0;
  case EAGAIN: return NX_EAGAIN;
  case ENOMEM: return NX_ENOMEM;
  case EBUSY: return NX_EBUSY;
  case ETIMEDOUT: return NX_ETIMEDOUT;
  default: return NX_EINVAL; /* EINVAL, EPERM, EDEADLK, ESRCH */
  }
}

int nxi_futex_wait(const uint32_t *word, uint32_t old,
                   const struct timespec *abstime) {
  long r;
  /* A deadline before the epoch has passed; the kernel would refuse it
   * (EINVAL), and the caller, taking that for a wake-up, would wait again. */
  if (abstime != NULL && abstime->tv_sec < 0)
    return NX_ETIMEDOUT;
  if (abstime != NULL)
    r = syscall(SYS_futex, word,
                FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME,
                old, abstime, NULL, FUTEX_BITSET_MATCH_ANY);
  else
    r = syscall(SYS_futex, word, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, old, NULL,
                NULL, 0);
  if (r < 0 && errno == ETIMEDOUT)
    return NX_ETIMEDOUT;
  return 0;
}

void nxi_futex_wake(const uint32_t *word, int n) {
  syscall(SYS_futex, word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
}

/* Threads. */

int nx_thread_create(nx_thread_t *thread, nx_thread_fn fn, void *arg) {
  if (thread == NULL || fn == NULL)
    return NX_EINVAL;
  pthread_t tid;
  int r = pthread_create(&tid, NULL, fn, arg);
  if (r != 0)
    return nxi_errno_to_nx(r);
  thread->tid = tid;
  return 0;
}

void nx_thread_exit(void *result) {
  /* In a lazy threaded handler it ends the handler, not the OS thread it
   * runs on (which has its own work below the handler's stack). */
  const struct nxi_thread_stages *h = get_stages();
  if (h != NULL && h->exit_handler != NULL && h->exit_handler() != 0)
    return; /* misuse, said on stderr: the thread is not the handler's */
  pthread_exit(result);
}

int nx_thread_join(nx_thread_t thread, void **result) {
  if (pthread_equal(thread.tid, pthread_self()))
    return NX_EINVAL;
  const struct nxi_thread_stages *h = get_stages();
  if (h != NULL)
    h->block();
  int r = pthread_join(thread.tid, result);
  if (h != NULL)
    h->unblock();
  return nxi_errno_to_nx(r);
}

void nx_thread_yield(void) { sched_yield(); }

nx_thread_t nx_thread_self(void) {
  nx_thread_t t = {pthread_self()};
  return t;
}

int nx_thread_equal(nx_thread_t a, nx_thread_t b) {
  return pthread_equal(a.tid, b.tid) != 0;
}

/* Mutexes. The owner field is the lock: 0 while the mutex is free, else
 * the owner's nx_thread_id, plus SLEEPERS while threads may sleep on it in
 * the kernel. Taking a free mutex is one compare-exchange, and misuse
 * (relocking, unlocking by another thread of control) is refused by
 * comparing the owner with the caller. An identity is the address of a
 * thread's or a handler's object, so its low bit is free for SLEEPERS.
 *
 * Each thread counts the mutexes it holds, and a threaded handler on a
 * stack of its own has its own count and identity (swapped by the core when
 * it switches stacks): a handler parks only while it holds no mutex, so
 * that a mutex is held by a thread that runs until it unlocks (as with
 * pthread mutexes, which belong to the thread that locked them); and a
 * handler started on top of another one's stack (on the same OS thread)
 * that wants the other's mutex waits for it instead of being taken for its
 * owner.
 *
 * The uncontended lock and unlock are the hot path of every RSR, so they
 * read the identity and count inline, once per call. That is sound only
 * before anything that may wait: code that waits may resume on another
 * thread, and the compiler must not reuse a thread-local (or pthread_self,
 * declared const) read before the wait. So whatever runs after a wait (the
 * contended lock, the relock of a condition wait) counts through the
 * NXI_NOIPA locks_add, and keeps the identity read before: a thread of
 * control keeps its identity wherever it resumes.
 *
 * ThreadSanitizer is told of every lock and unlock (it sees no pthread
 * mutex here), so it orders what the mutex guards and checks lock order
 * as it does for pthread mutexes. */

#if defined(__SANITIZE_THREAD__)
#define MUTEX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MUTEX_TSAN 1
#endif
#endif

#ifdef MUTEX_TSAN
#include <sanitizer/tsan_interface.h>
/* Annotated once the mutex is taken: nothing runs inside the annotation
 * (a contended lock calls the core's stages and may park). */
static void tsan_locked(nx_mutex_t *m, unsigned flags) {
  __tsan_mutex_pre_lock(m, flags);
  __tsan_mutex_post_lock(m, flags, 0);
}
static void tsan_unlocking(nx_mutex_t *m) { __tsan_mutex_pre_unlock(m, 0); }
static void tsan_unlocked(nx_mutex_t *m) { __tsan_mutex_post_unlock(m, 0); }
static void tsan_create(nx_mutex_t *m) { __tsan_mutex_create(m, 0); }
static void tsan_destroy(nx_mutex_t *m) { __tsan_mutex_destroy(m, 0); }
#define TSAN_TRY_LOCK __tsan_mutex_try_lock
#else
static inline void tsan_locked(nx_mutex_t *m, unsigned flags) {
  (void)m;
  (void)flags;
}
static inline void tsan_unlocking(nx_mutex_t *m) { (void)m; }
static inline void tsan_unlocked(nx_mutex_t *m) { (void)m; }
static inline void tsan_create(nx_mutex_t *m) { (void)m; }
static inline void tsan_destroy(nx_mutex_t *m) { (void)m; }
#define TSAN_TRY_LOCK 0
#endif

_Static_assert(sizeof(pthread_t) == sizeof(uint64_t),
               "the owner field holds a 64-bit nx_thread_id");

#define SLEEPERS ((uint64_t)1)

static _Thread_local struct nxi_thread_state me
    __attribute__((tls_model("initial-exec")));

NXI_NOIPA void nxi_thread_state_swap(struct nxi_thread_state *s) {
  struct nxi_thread_state old = me;
  me = *s;
  *s = old;
}

NXI_NOIPA int nxi_thread_locks_held(void) { return me.locks; }

static NXI_NOIPA void locks_add(int d) { me.locks += d; }

/* An OS thread's identity, kept in its state from its first use on. */
static __attribute__((noinline)) uint64_t os_thread_id(void) {
  me.id = (uint64_t)pthread_self();
  return me.id;
}

/* The caller's identity: its handler's, or its OS thread's. Inline: only
 * where no wait came before it in the calling function. */
static inline uint64_t my_id(void) {
  uint64_t id = me.id;
  return __builtin_expect(id != 0, 1) ? id : os_thread_id();
}

uint64_t nx_thread_id(void) { return my_id(); }

/* A handler that finds a mutex taken parks on one of these words, picked by
 * the mutex's address; while any does, every unlock bumps its word and
 * signals it. */
#define UNLOCK_WORDS 64
static uint32_t unlock_words[UNLOCK_WORDS];
static int mutex_parkers;

static uint32_t *unlock_word(const nx_mutex_t *m) {
  return &unlock_words[((uintptr_t)m >> 4) % UNLOCK_WORDS];
}

/* The owner field, SLEEPERS included. */
static uint64_t owner_word(const nx_mutex_t *m) {
  return (uint64_t)__atomic_load_n(&m->owner, __ATOMIC_RELAXED);
}

/* Whether `id` holds the mutex. An identity is never 0, so this also says
 * that the mutex is held. */
static int held_by(const nx_mutex_t *m, uint64_t id) {
  return (owner_word(m) & ~SLEEPERS) == id;
}

/* Takes the mutex if it is free, with `v` as the owner word. */
static int try_take(nx_mutex_t *m, uint64_t v) {
  pthread_t free_ = 0;
  return __atomic_compare_exchange_n(&m->owner, &free_, (pthread_t)v, 0,
                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* The 32 bits of the owner field that sleepers wait on: its low half. */
static uint32_t *sleep_word(nx_mutex_t *m) {
  uint32_t *w = (uint32_t *)(void *)&m->owner;
  return __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? w + 1 : w;
}

int nx_mutex_init(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  __atomic_store_n(&mutex->owner, 0, __ATOMIC_RELAXED);
  tsan_create(mutex);
  return 0;
}

int nx_mutex_destroy(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  if (owner_word(mutex) != 0)
    return NX_EBUSY;
  tsan_destroy(mutex);
  return 0;
}

/* A handler on its own stack waits for the unlock by parking. The parker
 * count goes up before the try, and an unlocker reads it after its
 * unlock (all sequentially consistent): either the try sees the mutex
 * free, or the unlocker sees the parker and bumps the word it parks on.
 * Returns 0 with the mutex taken, or -1 when the caller cannot park (it
 * sleeps instead). */
static int lock_parked(nx_mutex_t *m, uint64_t id,
                       const struct nxi_thread_stages *h) {
  if (h == NULL || h->can_park == NULL || !h->can_park())
    return -1;
  __atomic_fetch_add(&mutex_parkers, 1, __ATOMIC_SEQ_CST);
  uint32_t *w = unlock_word(m);
  int r;
  for (;;) {
    uint32_t seen = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    if (try_take(m, id)) {
      r = 0;
      break;
    }
    if (h->park(w, seen) != 0) {
      r = -1;
      break;
    }
  }
  __atomic_fetch_sub(&mutex_parkers, 1, __ATOMIC_SEQ_CST);
  return r;
}

/* Spins briefly (looking at the owner word after 1, 2, 4, 8, then every 16
 * pauses, so as to leave its cache line to the holder, and trying when the
 * mutex looks free), then parks (a handler on its own stack) or sleeps on
 * the owner field's futex until it takes the mutex; the sleep is bracketed by
 * the block stages so a thread that drives progress hands it over before it
 * sleeps. A sleeper marks the owner word with SLEEPERS, so that the unlock
 * wakes one, and takes the mutex with the mark (others may still sleep). */
static void lock_slow(nx_mutex_t *m, uint64_t id) {
  for (int i = 0, n = 1; i < MUTEX_SPINS; i += n, n = n < 16 ? 2 * n : 16) {
    for (int k = 0; k < n; k++)
      nxi_cpu_relax();
    if (owner_word(m) == 0 && try_take(m, id))
      return;
  }
  const struct nxi_thread_stages *h = get_stages();
  if (lock_parked(m, id, h) == 0)
    return;
  if (h != NULL)
    h->block();
  for (;;) {
    uint64_t cur = owner_word(m);
    if (cur == 0) {
      if (try_take(m, id | SLEEPERS))
        break;
      continue;
    }
    pthread_t seen = (pthread_t)cur;
    if ((cur & SLEEPERS) == 0 &&
        !__atomic_compare_exchange_n(&m->owner, &seen,
                                     (pthread_t)(cur | SLEEPERS), 0,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      continue;
    nxi_futex_wait(sleep_word(m), (uint32_t)(cur | SLEEPERS), NULL);
  }
  if (h != NULL)
    h->unblock();
}

/* Takes the mutex for `id`, waiting as long as it takes. What runs after a
 * wait, apart from the fast path so that nothing it read is reused. */
static __attribute__((noinline)) int take(nx_mutex_t *m, uint64_t id) {
  if (!try_take(m, id))
    lock_slow(m, id);
  locks_add(1);
  tsan_locked(m, 0);
  return 0;
}

/* The fast path found the mutex held, by `owner`. */
static __attribute__((noinline)) int lock_held(nx_mutex_t *m, uint64_t id,
                                               uint64_t owner) {
  if ((owner & ~SLEEPERS) == id)
    return NX_EINVAL;
  return take(m, id);
}

/* nx_mutex_lock by a thread whose identity is not yet kept: kept now. */
static __attribute__((noinline)) int lock_first(nx_mutex_t *mutex) {
  (void)os_thread_id();
  return nx_mutex_lock(mutex);
}

int nx_mutex_lock(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  uint64_t id = me.id; /* my_id, with its first call out of line */
  if (__builtin_expect(id == 0, 0))
    return lock_first(mutex);
  pthread_t owner = 0;
  if (__builtin_expect(
          !__atomic_compare_exchange_n(&mutex->owner, &owner, (pthread_t)id, 0,
                                       __ATOMIC_SEQ_CST, __ATOMIC_RELAXED),
          0))
    return lock_held(mutex, id, (uint64_t)owner);
  me.locks++;
  tsan_locked(mutex, 0);
  return 0;
}

int nx_mutex_trylock(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  uint64_t id = my_id();
  if (!try_take(mutex, id))
    return NX_EBUSY; /* held, by the caller or another */
  me.locks++;
  tsan_locked(mutex, TSAN_TRY_LOCK);
  return 0;
}

/* Bumps the word handlers parked on `m` wait on, and signals it. */
static __attribute__((noinline)) void wake_parkers(const nx_mutex_t *m) {
  uint32_t *w = unlock_word(m);
  __atomic_fetch_add(w, 1, __ATOMIC_SEQ_CST);
  const struct nxi_thread_stages *h = get_stages();
  if (h != NULL)
    h->signal(w, INT_MAX);
}

/* release's rest, out of line: a sleeper to wake (the owner word `old`
 * said so), or handlers parked. Returns 0. */
static __attribute__((noinline)) int release_wake(nx_mutex_t *mutex,
                                                  uint64_t old) {
  if ((old & SLEEPERS) != 0)
    nxi_futex_wake(sleep_word(mutex), 1);
  if (__atomic_load_n(&mutex_parkers, __ATOMIC_SEQ_CST) != 0)
    wake_parkers(mutex);
  return 0;
}

/* Frees a mutex the caller holds (its count of mutexes held is the
 * caller's business): wakes a sleeper if the owner word says one may
 * sleep, and the parked handlers while there are any. The exchange comes
 * before the parker count is read (both sequentially consistent). Returns
 * 0; the waking is a tail call, so that an unlock with nobody to wake
 * saves no registers. */
static inline __attribute__((always_inline)) int release(nx_mutex_t *mutex) {
  tsan_unlocking(mutex);
  uint64_t old =
      (uint64_t)__atomic_exchange_n(&mutex->owner, 0, __ATOMIC_SEQ_CST);
  tsan_unlocked(mutex);
  if (__builtin_expect((old & SLEEPERS) != 0 ||
                           __atomic_load_n(&mutex_parkers, __ATOMIC_SEQ_CST) !=
                               0,
                       0))
    return release_wake(mutex, old);
  return 0;
}

/* nx_mutex_unlock by a thread whose identity is not yet kept. */
static __attribute__((noinline)) int unlock_first(nx_mutex_t *mutex) {
  if (mutex == NULL || !held_by(mutex, os_thread_id()))
    return NX_EINVAL;
  me.locks--;
  return release(mutex);
}

int nx_mutex_unlock(nx_mutex_t *mutex) {
  uint64_t id = me.id; /* my_id, with its first call out of line */
  if (__builtin_expect(id == 0, 0))
    return unlock_first(mutex);
  if (mutex == NULL || !held_by(mutex, id))
    return NX_EINVAL;
  me.locks--;
  return release(mutex);
}

/* Condition variables. `seq` is bumped by every signal; a waiter remembers
 * it, lets the progress stage run, and then sleeps on it with a futex, so no
 * signal is lost between the check and the sleep. `sleepers` lets a signal
 * skip the wake system call when nobody sleeps. */

int nx_cond_init(nx_cond_t *cond) {
  if (cond == NULL)
    return NX_EINVAL;
  __atomic_store_n(&cond->seq, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&cond->sleepers, 0, __ATOMIC_RELAXED);
  return 0;
}

int nx_cond_destroy(nx_cond_t *cond) {
  if (cond == NULL)
    return NX_EINVAL;
  if (__atomic_load_n(&cond->sleepers, __ATOMIC_ACQUIRE) != 0)
    return NX_EBUSY;
  return 0;
}

int nx_cond_timedwait(nx_cond_t *cond, nx_mutex_t *mutex,
                      const struct timespec *abstime) {
  if (cond == NULL || mutex == NULL)
    return NX_EINVAL;
  if (abstime != NULL &&
      (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L))
    return NX_EINVAL;
  uint64_t id = my_id();
  if (!held_by(mutex, id))
    return NX_EINVAL;
  uint32_t seq = __atomic_load_n(&cond->seq, __ATOMIC_ACQUIRE);
  me.locks--;
  release(mutex);

  const struct nxi_thread_stages *h = get_stages();
  int rc = h != NULL ? h->wait(&cond->seq, seq, abstime) : NX_EAGAIN;
  if (rc == NX_EAGAIN) {
    /* Announce the sleeper before the last check of seq: a signaller bumps
     * seq before it reads sleepers, so one of us sees the other. */
    __atomic_fetch_add(&cond->sleepers, 1, __ATOMIC_SEQ_CST);
    rc = 0;
    if (__atomic_load_n(&cond->seq, __ATOMIC_SEQ_CST) == seq) {
      if (h != NULL)
        h->block();
      rc = nxi_futex_wait(&cond->seq, seq, abstime);
      if (h != NULL)
        h->unblock();
    }
    __atomic_fetch_sub(&cond->sleepers, 1, __ATOMIC_SEQ_CST);
  }

  /* After the wait: not the fast path, whose inline reads would no
   * longer be sound. */
  take(mutex, id);
  return rc;
}

int nx_cond_wait(nx_cond_t *cond, nx_mutex_t *mutex) {
  return nx_cond_timedwait(cond, mutex, NULL);
}

static int cond_wake(nx_cond_t *cond, int n) {
  if (cond == NULL)
    return NX_EINVAL;
  __atomic_fetch_add(&cond->seq, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&cond->sleepers, __ATOMIC_SEQ_CST) != 0)
    nxi_futex_wake(&cond->seq, n);
  const struct nxi_thread_stages *h = get_stages();
  if (h != NULL)
    h->signal(&cond->seq, n);
  return 0;
}

int nx_cond_signal(nx_cond_t *cond) { return cond_wake(cond, 1); }

int nx_cond_broadcast(nx_cond_t *cond) { return cond_wake(cond, INT_MAX); }

/* Thread-specific keys. */

int nx_key_create(nx_key_t *key, void (*destructor)(void *)) {
  if (key == NULL)
    return NX_EINVAL;
  return nxi_errno_to_nx(pthread_key_create(&key->k, destructor));
}

int nx_key_delete(nx_key_t key) {
  return nxi_errno_to_nx(pthread_key_delete(key.k));
}

int nx_key_set(nx_key_t key, const void *value) {
  return nxi_errno_to_nx(pthread_setspecific(key.k, value));
}

void *nx_key_get(nx_key_t key) { return pthread_getspecific(key.k); }
