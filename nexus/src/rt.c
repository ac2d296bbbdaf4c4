/* Runtime-wide state: counters, the error callback, logging and drop reports
 * (rt.h). */
#include "rt.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

void nxi_rt_reset(void) {
  atomic_store(&nxi_rt.drops_logged, 0);
  atomic_store(&nxi_rt.rsr_sent, 0);
  atomic_store(&nxi_rt.rsr_handled, 0);
  atomic_store(&nxi_rt.drop_no_handler, 0);
  atomic_store(&nxi_rt.drop_no_context, 0);
  atomic_store(&nxi_rt.drop_bad_frame, 0);
  atomic_store(&nxi_rt.threads_created, 0);
  atomic_store(&nxi_rt.rsr_failed, 0);
  atomic_store(&nxi_rt.peers_failed, 0);
  atomic_store(&nxi_rt.lazy_started, 0);
  atomic_store(&nxi_rt.lazy_parked, 0);
  atomic_store(&nxi_rt.rsr_forwarded, 0);
  atomic_store(&nxi_rt.route_fallbacks, 0);
  nxi_rt.error_cb = NULL;
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
  nx_error_cb cb = __atomic_load_n(&nxi_rt.error_cb, __ATOMIC_ACQUIRE);
  if (cb != NULL) {
    cb(err, context, handler,
       __atomic_load_n(&nxi_rt.error_arg, __ATOMIC_RELAXED));
    return;
  }
  if (atomic_fetch_add(&nxi_rt.drops_logged, 1) < DROPS_LOGGED_MAX) {
    char name[NAME_MAX_LEN + 24];
    handler_name(handler, name, sizeof(name));
    nxi_log(0, NULL, "dropped an RSR for context %#llx handler %s: %s",
            (unsigned long long)context, name, nx_strerror(err));
  }
}

void nxi_report_proc(int status, uint32_t proc) {
  atomic_fetch_add(&nxi_rt.peers_failed, 1);
  nxi_log(1, NULL, "peer process %#x: %s", proc, nx_strerror(status));
  nx_error_cb cb = __atomic_load_n(&nxi_rt.error_cb, __ATOMIC_ACQUIRE);
  if (cb != NULL)
    cb(status, nxi_ctxid(proc, 0), 0,
       __atomic_load_n(&nxi_rt.error_arg, __ATOMIC_RELAXED));
}

int nx_stats_get(nx_stats_t *s) {
  if (s == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  s->rsr_sent = atomic_load(&nxi_rt.rsr_sent);
  s->rsr_handled = atomic_load(&nxi_rt.rsr_handled);
  s->drop_no_handler = atomic_load(&nxi_rt.drop_no_handler);
  s->drop_no_context = atomic_load(&nxi_rt.drop_no_context);
  s->drop_bad_frame = atomic_load(&nxi_rt.drop_bad_frame);
  s->threads_created = atomic_load(&nxi_rt.threads_created);
  s->rsr_failed = atomic_load(&nxi_rt.rsr_failed);
  s->peers_failed = atomic_load(&nxi_rt.peers_failed);
  s->lazy_started = atomic_load(&nxi_rt.lazy_started);
  s->lazy_parked = atomic_load(&nxi_rt.lazy_parked);
  s->rsr_forwarded = atomic_load(&nxi_rt.rsr_forwarded);
  s->route_fallbacks = atomic_load(&nxi_rt.route_fallbacks);
  return 0;
}

int nx_error_cb_set(nx_error_cb cb, void *arg) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  __atomic_store_n(&nxi_rt.error_arg, arg, __ATOMIC_RELAXED);
  __atomic_store_n(&nxi_rt.error_cb, cb, __ATOMIC_RELEASE);
  return 0;
}
