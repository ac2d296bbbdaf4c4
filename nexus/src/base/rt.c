/* Runtime-wide state: counters, the error callback, logging and drop reports
 * (rt.h). */
#include "base/rt.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The error callbacks: slot 0 is nx_error_cb_set's, slots 1.. those
 * nx_error_cb_add installed, in the order added. Calls hold `errcb_lock`
 * to read, so that a change (which takes it to write) returns only when no
 * call of a removed callback is running. A callback that adds or sets one
 * gets NX_EBUSY; one that removes one empties its slot without waiting
 * (the calls running now finish). */
#define ERRCBS 16
static pthread_rwlock_t errcb_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct {
  _Atomic nx_error_cb cb;
  void *arg;
  int handle;
} errcbs[ERRCBS];
static int errcb_end = 1; /* slots in use are below it */
static unsigned errcb_serial;
static _Thread_local int in_errcb;

int nxi_in_error_cb(void) { return in_errcb > 0; }

static void errcbs_clear(void) {
  pthread_rwlock_wrlock(&errcb_lock);
  for (int i = 0; i < ERRCBS; i++)
    atomic_store(&errcbs[i].cb, NULL);
  errcb_end = 1;
  pthread_rwlock_unlock(&errcb_lock);
}

/* Calls every installed callback; 0 if there is none. */
static int errcbs_call(int err, uint64_t context, uint32_t handler) {
  int nested = in_errcb > 0; /* a callback's own drop: the lock is held */
  if (!nested)
    pthread_rwlock_rdlock(&errcb_lock);
  in_errcb++;
  int called = 0;
  for (int i = 0; i < errcb_end; i++) {
    nx_error_cb cb = atomic_load(&errcbs[i].cb);
    if (cb != NULL) {
      cb(err, context, handler, errcbs[i].arg);
      called = 1;
    }
  }
  in_errcb--;
  if (!nested)
    pthread_rwlock_unlock(&errcb_lock);
  return called;
}

struct nxi_runtime nxi_rt;

#define DROPS_LOGGED_MAX 10

void nxi_vlog(int level, const char *module, const char *fmt, va_list ap) {
  if (level > 0 && nxi_rt.debug < (unsigned)level)
    return;
  char line[512];
  vsnprintf(line, sizeof(line), fmt, ap);
  if (module != NULL)
    fprintf(stderr, "nexus[%d] %s: %s\n", (int)getpid(), module, line);
  else
    fprintf(stderr, "nexus[%d]: %s\n", (int)getpid(), line);
}

void nxi_log(int level, const char *module, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nxi_vlog(level, module, fmt, ap);
  va_end(ap);
}

NXI_TLS struct nxi_tstats nxi_ts;
static pthread_mutex_t ts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nxi_tstats *ts_head;        /* the sets of living threads */
static uint64_t ts_retired[NXI_TS_COUNT]; /* what ended threads counted */
static pthread_key_t ts_key;
static pthread_once_t ts_once = PTHREAD_ONCE_INIT;

/* A thread ends: its counts join the retired sums, its set leaves the
 * list (its memory goes with the thread). */
static void ts_leave(void *arg) {
  struct nxi_tstats *t = arg;
  pthread_mutex_lock(&ts_lock);
  for (int i = 0; i < NXI_TS_COUNT; i++) {
    ts_retired[i] += atomic_load_explicit(&t->n[i], memory_order_relaxed);
    atomic_store_explicit(&t->n[i], 0, memory_order_relaxed);
  }
  struct nxi_tstats **p = &ts_head;
  while (*p != NULL && *p != t)
    p = &(*p)->next;
  if (*p != NULL)
    *p = t->next;
  t->listed = 0;
  pthread_mutex_unlock(&ts_lock);
}

static void ts_key_create(void) { pthread_key_create(&ts_key, ts_leave); }

void nxi_tstats_list(void) {
  pthread_once(&ts_once, ts_key_create);
  pthread_mutex_lock(&ts_lock);
  nxi_ts.next = ts_head;
  ts_head = &nxi_ts;
  nxi_ts.listed = 1;
  pthread_mutex_unlock(&ts_lock);
  pthread_setspecific(ts_key, &nxi_ts);
}

/* Every thread's counter `which`, living and ended, summed. */
static uint64_t ts_sum(int which) {
  pthread_mutex_lock(&ts_lock);
  uint64_t n = ts_retired[which];
  for (struct nxi_tstats *t = ts_head; t != NULL; t = t->next)
    n += atomic_load_explicit(&t->n[which], memory_order_relaxed);
  pthread_mutex_unlock(&ts_lock);
  return n;
}

/* At nx_init, before any RSR of the new run: no thread counts meanwhile,
 * so storing into another thread's set loses nothing. */
static void ts_reset(void) {
  pthread_mutex_lock(&ts_lock);
  for (int i = 0; i < NXI_TS_COUNT; i++) {
    ts_retired[i] = 0;
    for (struct nxi_tstats *t = ts_head; t != NULL; t = t->next)
      atomic_store_explicit(&t->n[i], 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&ts_lock);
}

void nxi_rt_reset(void) {
  atomic_store(&nxi_rt.drops_logged, 0);
  ts_reset();
  atomic_store(&nxi_rt.rsr_handled, 0);
  atomic_store(&nxi_rt.drop_no_handler, 0);
  atomic_store(&nxi_rt.drop_no_context, 0);
  atomic_store(&nxi_rt.drop_bad_frame, 0);
  atomic_store(&nxi_rt.threads_created, 0);
  atomic_store(&nxi_rt.rsr_failed, 0);
  atomic_store(&nxi_rt.peers_failed, 0);
  atomic_store(&nxi_rt.lazy_parked, 0);
  atomic_store(&nxi_rt.rsr_forwarded, 0);
  atomic_store(&nxi_rt.route_fallbacks, 0);
  atomic_store(&nxi_rt.rsr_placed, 0);
  errcbs_clear();
}

/* Handler names registered in any context of this process, by id, so that a
 * drop report names the handler instead of its hash when this process
 * knows the name (a handler registered in another context, or in a context
 * since destroyed). Registration is rare and drops are rare: one lock. */
#define NAMES 256
#define NAME_MAX_LEN 48
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint32_t id;
  char name[NAME_MAX_LEN];
} names[NAMES];

void nxi_handler_name_note(uint32_t id, const char *name) {
  pthread_mutex_lock(&names_lock);
  for (uint32_t i = 0; i < NAMES; i++) {
    uint32_t j = (id + i) % NAMES;
    if (names[j].id == id)
      break; /* known */
    if (names[j].id == 0) {
      names[j].id = id;
      snprintf(names[j].name, sizeof(names[j].name), "%s", name);
      break;
    }
  }
  pthread_mutex_unlock(&names_lock);
}

/* Copies the name of handler `id` into `out`, or its hash when unknown. */
static void handler_name(uint32_t id, char *out, size_t len) {
  snprintf(out, len, "%#x", id);
  pthread_mutex_lock(&names_lock);
  for (uint32_t i = 0; i < NAMES; i++) {
    uint32_t j = (id + i) % NAMES;
    if (names[j].id == 0)
      break;
    if (names[j].id == id) {
      snprintf(out, len, "\"%s\" (%#x)", names[j].name, id);
      break;
    }
  }
  pthread_mutex_unlock(&names_lock);
}

void nxi_drop(int err, uint64_t context, uint32_t handler) {
  atomic_uint_fast64_t *counter = err == NX_ENOHANDLER ? &nxi_rt.drop_no_handler
                                  : err == NX_ENOCONTEXT
                                      ? &nxi_rt.drop_no_context
                                      : &nxi_rt.rsr_failed;
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  if (errcbs_call(err, context, handler))
    return;
  if (atomic_fetch_add(&nxi_rt.drops_logged, 1) < DROPS_LOGGED_MAX) {
    char name[NAME_MAX_LEN + 24];
    handler_name(handler, name, sizeof(name));
    nxi_log(0, NULL, "dropped an RSR for context %#llx handler %s: %s",
            (unsigned long long)context, name, nx_strerror(err));
  }
}

/* The process ids of this process's earlier runs (the last FORMER_MAX): a
 * gp kept from one of them names a context that is gone, whatever its
 * descriptors say (dlist.c's resolve refuses it). Written by nx_init only,
 * before any thread of the new run reads it. */
#define FORMER_MAX 16
static uint32_t former[FORMER_MAX];
static unsigned nformer;

void nxi_proc_retire(uint32_t proc) { former[nformer++ % FORMER_MAX] = proc; }

int nxi_proc_is_former(uint32_t proc) {
  if (proc == nxi_rt.proc_id)
    return 0;
  for (unsigned i = 0; i < nformer && i < FORMER_MAX; i++)
    if (former[i] == proc)
      return 1;
  return 0;
}

void nxi_report_proc(int status, uint32_t proc) {
  atomic_fetch_add(&nxi_rt.peers_failed, 1);
  nxi_log(1, NULL, "peer process %#x: %s", proc, nx_strerror(status));
  errcbs_call(status, nxi_ctxid(proc, 0), 0);
}

int nx_stats_get(nx_stats_t *s) {
  if (s == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  s->rsr_sent = ts_sum(NXI_TS_SENT);
  s->rsr_handled = atomic_load(&nxi_rt.rsr_handled);
  s->drop_no_handler = atomic_load(&nxi_rt.drop_no_handler);
  s->drop_no_context = atomic_load(&nxi_rt.drop_no_context);
  s->drop_bad_frame = atomic_load(&nxi_rt.drop_bad_frame);
  s->threads_created = atomic_load(&nxi_rt.threads_created);
  s->rsr_failed = atomic_load(&nxi_rt.rsr_failed);
  s->peers_failed = atomic_load(&nxi_rt.peers_failed);
  s->lazy_started = ts_sum(NXI_TS_LAZY_STARTED);
  s->lazy_parked = atomic_load(&nxi_rt.lazy_parked);
  s->rsr_forwarded = atomic_load(&nxi_rt.rsr_forwarded);
  s->route_fallbacks = atomic_load(&nxi_rt.route_fallbacks);
  s->rsr_placed = atomic_load(&nxi_rt.rsr_placed);
  return 0;
}

int nx_error_cb_set(nx_error_cb cb, void *arg) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (in_errcb > 0)
    return NX_EBUSY;
  pthread_rwlock_wrlock(&errcb_lock);
  errcbs[0].arg = arg;
  atomic_store(&errcbs[0].cb, cb);
  pthread_rwlock_unlock(&errcb_lock);
  return 0;
}

int nx_error_cb_add(nx_error_cb cb, void *arg) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (cb == NULL)
    return NX_EINVAL;
  if (in_errcb > 0)
    return NX_EBUSY;
  int r = NX_ENOMEM;
  pthread_rwlock_wrlock(&errcb_lock);
  if (errcb_end == ERRCBS) {
    /* Full at the end: close the gaps removals left, keeping the order. */
    int k = 1;
    for (int i = 1; i < ERRCBS; i++)
      if (atomic_load(&errcbs[i].cb) != NULL) {
        errcbs[k].arg = errcbs[i].arg;
        errcbs[k].handle = errcbs[i].handle;
        atomic_store(&errcbs[k++].cb, atomic_load(&errcbs[i].cb));
      }
    for (int i = k; i < ERRCBS; i++)
      atomic_store(&errcbs[i].cb, NULL);
    errcb_end = k;
  }
  if (errcb_end < ERRCBS) {
    /* A handle names one installation: a serial number, never 0. */
    errcb_serial = errcb_serial % 0x7fffffu + 1;
    int i = errcb_end++;
    errcbs[i].arg = arg;
    errcbs[i].handle = r = (int)(errcb_serial << 8);
    atomic_store(&errcbs[i].cb, cb);
  }
  pthread_rwlock_unlock(&errcb_lock);
  return r;
}

int nx_error_cb_remove(int handle) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  if (handle <= 0)
    return NX_ENOENT;
  /* From inside a callback this thread holds the lock to read: the slot
   * is emptied without waiting (the calls running now finish). */
  int inside = in_errcb > 0;
  if (!inside)
    pthread_rwlock_wrlock(&errcb_lock);
  int r = NX_ENOENT;
  for (int i = 1; i < errcb_end && r != 0; i++)
    if (atomic_load(&errcbs[i].cb) != NULL && errcbs[i].handle == handle) {
      atomic_store(&errcbs[i].cb, NULL);
      r = 0;
    }
  if (!inside)
    pthread_rwlock_unlock(&errcb_lock);
  return r;
}
