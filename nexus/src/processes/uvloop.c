/* The process layer's libuv loop: one thread of its own runs it, started by
 * the first call that needs it; work comes to it through a uv_async_t. */
#include "processes/uvloop.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/rt.h"
#include "nexus/errors.h"

/* A call handed to the loop: nxi_uvloop_call's lives on the caller's
 * stack until the loop marks it done; nxi_uvloop_post's is the loop's to
 * free. */
struct call {
  struct call *next;
  void (*fn)(void *arg);
  void *arg;
  int done;
  int posted;
};

/* `lock` guards the calls, every flag of nxi_uvloop_set and the start and
 * stop; the loop and its handles belong to its thread. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uv_loop_t *loop; /* NULL: not running */
  uv_async_t async;
  pthread_t thread;
  struct call *head, **tail;
} L = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void prefork(void) { pthread_mutex_lock(&L.lock); }
static void postfork_parent(void) { pthread_mutex_unlock(&L.lock); }

/* A child forked without exec has no loop thread: the loop it inherited
 * (and its handles, which watch its parent's children) is its parent's.
 * It is forgotten, not closed (closing would change nothing of the
 * parent's, but its memory is of no use); its descriptors are close-on-exec.
 * A call in the child starts a loop of its own. */
static void postfork_child(void) {
  pthread_mutex_init(&L.lock, NULL);
  pthread_cond_init(&L.cond, NULL);
  L.loop = NULL;
  L.head = NULL;
  L.tail = &L.head;
}

static void register_fork(void) {
  pthread_atfork(prefork, postfork_parent, postfork_child);
}

/* The async's callback: runs the calls handed over since the last one. */
static void run_calls(uv_async_t *a) {
  (void)a;
  pthread_mutex_lock(&L.lock);
  struct call *list = L.head;
  L.head = NULL;
  L.tail = &L.head;
  pthread_mutex_unlock(&L.lock);
  while (list != NULL) {
    struct call *c = list;
    list = c->next;
    c->fn(c->arg);
    if (c->posted) {
      free(c);
      continue;
    }
    pthread_mutex_lock(&L.lock);
    c->done = 1; /* c is the caller's again from here */
    pthread_cond_broadcast(&L.cond);
    pthread_mutex_unlock(&L.lock);
  }
}

static void *loop_main(void *arg) {
  uv_run(arg, UV_RUN_DEFAULT); /* until the async is closed, and the rest */
  return NULL;
}

/* Lock held: starts the loop and its thread. */
static int start_locked(void) {
  pthread_once(&fork_once, register_fork);
  uv_loop_t *loop = malloc(sizeof(*loop));
  if (loop == NULL)
    return NX_ENOMEM;
  if (uv_loop_init(loop) != 0) {
    free(loop);
    return NX_EAGAIN;
  }
  if (uv_async_init(loop, &L.async, run_calls) != 0)
    goto err_loop;
  L.head = NULL;
  L.tail = &L.head;
  if (pthread_create(&L.thread, NULL, loop_main, loop) != 0)
    goto err_async;
  L.loop = loop;
  return 0;

err_async:
  uv_close((uv_handle_t *)&L.async, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
err_loop:
  uv_loop_close(loop);
  free(loop);
  return NX_EAGAIN;
}

/* Queues `c` for the loop, starting it if needed: 0, or a negative code
 * (NX_EINVAL: this is the loop's thread, which runs c itself). Returns
 * with the lock held when 0. */
static int queue(struct call *c) {
  pthread_mutex_lock(&L.lock);
  if (L.loop != NULL && pthread_equal(L.thread, pthread_self())) {
    pthread_mutex_unlock(&L.lock);
    return NX_EINVAL;
  }
  int r = L.loop != NULL ? 0 : start_locked();
  if (r < 0) {
    pthread_mutex_unlock(&L.lock);
    return r;
  }
  *L.tail = c;
  L.tail = &c->next;
  uv_async_send(&L.async);
  return 0;
}

int nxi_uvloop_call(void (*fn)(void *arg), void *arg) {
  struct call c = {.fn = fn, .arg = arg};
  int r = queue(&c);
  if (r == NX_EINVAL) {
    fn(arg);
    return 0;
  }
  if (r < 0)
    return r;
  while (!c.done)
    pthread_cond_wait(&L.cond, &L.lock);
  pthread_mutex_unlock(&L.lock);
  return 0;
}

int nxi_uvloop_post(void (*fn)(void *arg), void *arg) {
  struct call *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NX_ENOMEM;
  c->fn = fn;
  c->arg = arg;
  c->posted = 1;
  int r = queue(c);
  if (r == 0) {
    pthread_mutex_unlock(&L.lock);
    return 0;
  }
  free(c);
  if (r == NX_EINVAL) {
    fn(arg);
    return 0;
  }
  return r;
}

uv_loop_t *nxi_uvloop(void) { return L.loop; }

int nxi_uvloop_here(void) {
  pthread_mutex_lock(&L.lock);
  int here = L.loop != NULL && pthread_equal(L.thread, pthread_self());
  pthread_mutex_unlock(&L.lock);
  return here;
}

void nxi_uvloop_set(int *flag, int value) {
  pthread_mutex_lock(&L.lock);
  *flag = value;
  pthread_cond_broadcast(&L.cond);
  pthread_mutex_unlock(&L.lock);
}

void nxi_uvloop_wait(const int *flag) {
  pthread_mutex_lock(&L.lock);
  while (*flag == 0)
    pthread_cond_wait(&L.cond, &L.lock);
  pthread_mutex_unlock(&L.lock);
}

/* On the loop: the async goes, and with it the last handle. One a layer
 * left open is a bug there: it is closed too, so that the loop can close,
 * and said. */
static void close_stray(uv_handle_t *h, void *arg) {
  (void)arg;
  if (uv_is_closing(h))
    return;
  if (h != (uv_handle_t *)&L.async)
    nxi_log(1, NULL, "the process layer left a %s handle open",
            uv_handle_type_name(h->type));
  uv_close(h, NULL);
}

static void stop_loop(void *arg) {
  (void)arg;
  uv_walk(L.loop, close_stray, NULL);
}

void nxi_uvloop_finalize(void) {
  pthread_mutex_lock(&L.lock);
  uv_loop_t *loop = L.loop;
  pthread_mutex_unlock(&L.lock);
  if (loop == NULL)
    return;
  nxi_uvloop_call(stop_loop, NULL);
  pthread_join(L.thread, NULL);
  pthread_mutex_lock(&L.lock);
  L.loop = NULL;
  pthread_mutex_unlock(&L.lock);
  if (uv_loop_close(loop) != 0) {
    nxi_log(0, NULL, "the process layer's loop cannot close; left open");
    return;
  }
  free(loop);
}
