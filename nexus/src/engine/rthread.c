/* Runtime threads: starting them, joining those that ended, and waking the pool
 * (engine.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "threads/nxi_thread.h"

/* Runtime threads are joinable. One that ends puts its record on `ended`
 * as its last act, and the next spawn or nx_finalize joins it: no runtime
 * thread outlives nx_finalize half torn down (LeakSanitizer's scan at exit
 * crashes on a detached thread that is still exiting), and no thread's
 * resources wait for a join that never comes. Kept apart from the engine,
 * which nxi_progress_init clears. */
struct rt_thread {
  pthread_t tid;
  void *(*fn)(void *self);
  void *arg;
  struct rt_thread *next;
};

static struct {
  pthread_mutex_t lock;
  struct rt_thread *ended;
} reaper = {.lock = PTHREAD_MUTEX_INITIALIZER};

void nxi_rthread_reap(void) {
  pthread_mutex_lock(&reaper.lock);
  struct rt_thread *t = reaper.ended;
  reaper.ended = NULL;
  pthread_mutex_unlock(&reaper.lock);
  while (t != NULL) {
    struct rt_thread *next = t->next;
    pthread_join(t->tid, NULL);
    free(t);
    t = next;
  }
}

void *nxi_rthread_arg(void *self) { return ((struct rt_thread *)self)->arg; }

/* The last act of a runtime thread: from here on it touches nothing. */
void *nxi_rthread_end(void *self) {
  struct rt_thread *t = self;
  pthread_mutex_lock(&reaper.lock);
  t->next = reaper.ended;
  reaper.ended = t;
  pthread_mutex_unlock(&reaper.lock);
  atomic_fetch_sub(&nxi_eng.live, 1);
  return NULL;
}

static void *start(void *self) {
  nxi_eng_me.runtime = 1;
  return ((struct rt_thread *)self)->fn(self);
}

int nxi_rthread_spawn(void *(*fn)(void *self), void *arg) {
  nxi_rthread_reap();
  struct rt_thread *t = malloc(sizeof(*t));
  if (t == NULL) {
    nxi_log(0, NULL, "cannot start a runtime thread: out of memory");
    return NX_ENOMEM;
  }
  t->fn = fn;
  t->arg = arg;
  atomic_fetch_add(&nxi_eng.live, 1);
  /* Counted before it starts: its handler may finish (and the program read
   * the counters) before pthread_create returns here. */
  atomic_fetch_add_explicit(&nxi_rt.threads_created, 1, memory_order_relaxed);
  int r = pthread_create(&t->tid, NULL, start, t);
  if (r != 0) {
    atomic_fetch_sub_explicit(&nxi_rt.threads_created, 1, memory_order_relaxed);
    atomic_fetch_sub(&nxi_eng.live, 1);
    free(t);
    nxi_log(0, NULL, "cannot start a runtime thread: %s", strerror(r));
    return NX_EAGAIN;
  }
  return 0;
}

static const struct nxi_engine_stages *_Atomic engine_stages;

void nxi_engine_stages_set(const struct nxi_engine_stages *s) {
  atomic_store(&engine_stages, s);
}

void nxi_pool_kick_locked(void) {
  if (nxi_eng.idle > 0) {
    __atomic_fetch_add(&nxi_eng.pool_word, 1, __ATOMIC_SEQ_CST);
    nxi_futex_wake(&nxi_eng.pool_word, 1);
  } else {
    const struct nxi_engine_stages *s = atomic_load(&engine_stages);
    if (s != NULL)
      nxi_rthread_spawn(s->pool_main, NULL);
  }
}
