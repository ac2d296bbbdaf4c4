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
#include "nxi_thread.h"

/* How many times a contended mutex is retried before the thread sleeps. */
#define MUTEX_SPINS 200

static const struct nxi_thread_hooks *hooks;

void nxi_thread_hooks_set(const struct nxi_thread_hooks *h) {
  __atomic_store_n(&hooks, h, __ATOMIC_RELEASE);
}

static const struct nxi_thread_hooks *get_hooks(void) {
  return __atomic_load_n(&hooks, __ATOMIC_ACQUIRE);
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
  const struct nxi_thread_hooks *h = get_hooks();
  if (h != NULL && h->exit_handler != NULL)
    h->exit_handler();
  pthread_exit(result);
}

int nx_thread_join(nx_thread_t thread, void **result) {
  if (pthread_equal(thread.tid, pthread_self()))
    return NX_EINVAL;
  const struct nxi_thread_hooks *h = get_hooks();
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

/* Mutexes: plain pthread mutexes plus an owner field (the owner's
 * nx_thread_id), so that relocking and unlocking by another thread of
 * control are refused without asking pthreads (which would call them
 * undefined, and sanitizers would abort).
 *
 * Each thread counts the mutexes it holds, and a threaded handler on a
 * stack of its own has its own count and identity (swapped by the core when
 * it switches stacks): a handler parks only while it holds no mutex, since
 * the pthread mutex belongs to the OS thread that locked it and a parked
 * handler may resume on another; and a handler started on top of another
 * one's stack (on the same OS thread) that wants the other's mutex waits
 * for it instead of being taken for its owner. A thread's identity and
 * count are read through NXI_NOIPA functions: code that waits may resume on
 * another thread, and the compiler must not reuse what it read before
 * (pthread_self is declared const). */

static _Thread_local struct nxi_thread_state me
    __attribute__((tls_model("initial-exec")));

NXI_NOIPA void nxi_thread_state_swap(struct nxi_thread_state *s) {
  struct nxi_thread_state old = me;
  me = *s;
  *s = old;
}

NXI_NOIPA int nxi_thread_locks_held(void) { return me.locks; }

static NXI_NOIPA void locks_add(int d) { me.locks += d; }

/* The caller's identity: its handler's, or its OS thread's. */
static NXI_NOIPA uint64_t self_id(void) {
  return me.id != 0 ? me.id : (uint64_t)pthread_self();
}

uint64_t nx_thread_id(void) { return self_id(); }

/* A handler that finds a mutex taken parks on one of these words, picked by
 * the mutex's address; while any does, every unlock bumps its word and
 * signals it. */
#define UNLOCK_WORDS 64
static uint32_t unlock_words[UNLOCK_WORDS];
static int mutex_parkers;

static uint32_t *unlock_word(const pthread_mutex_t *m) {
  return &unlock_words[((uintptr_t)m >> 4) % UNLOCK_WORDS];
}

static int held_by_me(nx_mutex_t *mutex) {
  pthread_t owner = __atomic_load_n(&mutex->owner, __ATOMIC_RELAXED);
  return owner != 0 && (uint64_t)owner == self_id();
}

static void set_owner(nx_mutex_t *mutex, pthread_t owner) {
  __atomic_store_n(&mutex->owner, owner, __ATOMIC_RELAXED);
}

int nx_mutex_init(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  set_owner(mutex, 0);
  return nxi_errno_to_nx(pthread_mutex_init(&mutex->m, NULL));
}

int nx_mutex_destroy(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  return nxi_errno_to_nx(pthread_mutex_destroy(&mutex->m));
}

/* A handler on its own stack waits for the unlock by parking. The parker
 * count goes up before the trylock, and an unlocker reads it after its
 * unlock: either the trylock sees the mutex free, or the unlocker sees the
 * parker and bumps the word it parks on. Returns EBUSY when the caller
 * cannot park (it sleeps instead). */
static int lock_parked(pthread_mutex_t *m, const struct nxi_thread_hooks *h) {
  if (h == NULL || h->can_park == NULL || !h->can_park())
    return EBUSY;
  __atomic_fetch_add(&mutex_parkers, 1, __ATOMIC_SEQ_CST);
  uint32_t *w = unlock_word(m);
  int r;
  for (;;) {
    uint32_t seen = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    r = pthread_mutex_trylock(m);
    if (r != EBUSY || h->park(w, seen) != 0)
      break;
  }
  __atomic_fetch_sub(&mutex_parkers, 1, __ATOMIC_SEQ_CST);
  return r;
}

/* Spins briefly, then parks (a handler on its own stack) or sleeps; the
 * sleep is bracketed by the block hooks so a thread that drives progress
 * hands it over before it sleeps. */
static int lock_slow(pthread_mutex_t *m) {
  for (int i = 0; i < MUTEX_SPINS; i++) {
    nxi_cpu_relax();
    int r = pthread_mutex_trylock(m);
    if (r != EBUSY)
      return r;
  }
  const struct nxi_thread_hooks *h = get_hooks();
  int r = lock_parked(m, h);
  if (r != EBUSY)
    return r;
  if (h != NULL)
    h->block();
  r = pthread_mutex_lock(m);
  if (h != NULL)
    h->unblock();
  return r;
}

static int lock(nx_mutex_t *mutex) {
  int r = pthread_mutex_trylock(&mutex->m);
  if (r == EBUSY)
    r = lock_slow(&mutex->m);
  if (r == 0) {
    set_owner(mutex, (pthread_t)self_id());
    locks_add(1);
  }
  return nxi_errno_to_nx(r);
}

int nx_mutex_lock(nx_mutex_t *mutex) {
  if (mutex == NULL || held_by_me(mutex))
    return NX_EINVAL;
  return lock(mutex);
}

int nx_mutex_trylock(nx_mutex_t *mutex) {
  if (mutex == NULL)
    return NX_EINVAL;
  if (held_by_me(mutex))
    return NX_EBUSY;
  int r = pthread_mutex_trylock(&mutex->m);
  if (r == 0) {
    set_owner(mutex, (pthread_t)self_id());
    locks_add(1);
  }
  return nxi_errno_to_nx(r);
}

static int unlock(nx_mutex_t *mutex) {
  set_owner(mutex, 0);
  locks_add(-1);
  int r = pthread_mutex_unlock(&mutex->m);
  /* The unlock must be visible before the parker count is read. glibc's
   * unlock is a locked instruction on x86, a full barrier already. */
#if !defined(__x86_64__) && !defined(__i386__)
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
  if (__atomic_load_n(&mutex_parkers, __ATOMIC_SEQ_CST) != 0) {
    uint32_t *w = unlock_word(&mutex->m);
    __atomic_fetch_add(w, 1, __ATOMIC_SEQ_CST);
    const struct nxi_thread_hooks *h = get_hooks();
    if (h != NULL)
      h->signal(w, INT_MAX);
  }
  return nxi_errno_to_nx(r);
}

int nx_mutex_unlock(nx_mutex_t *mutex) {
  if (mutex == NULL || !held_by_me(mutex))
    return NX_EINVAL;
  return unlock(mutex);
}

/* Condition variables. `seq` is bumped by every signal; a waiter remembers
 * it, lets the progress hook run, and then sleeps on it with a futex, so no
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
  if (!held_by_me(mutex))
    return NX_EINVAL;
  uint32_t seq = __atomic_load_n(&cond->seq, __ATOMIC_ACQUIRE);
  unlock(mutex);

  const struct nxi_thread_hooks *h = get_hooks();
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

  int r = lock(mutex);
  return r != 0 ? r : rc;
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
  const struct nxi_thread_hooks *h = get_hooks();
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
