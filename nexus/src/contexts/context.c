/* Contexts: the process-wide registry, in-process context creation and
 * destruction, and per-context handler tables. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "contexts/context.h"
#include "modules/dlist.h"
#include "base/driver.h"
#include "base/trace.h"

/* The registry maps a context's index (the low 32 bits of its id) to the
 * context. Lookups run on the dispatch path without a lock: the slot array
 * only grows (old arrays are kept until nx_finalize) and a context is
 * unpublished under the driver lock, which every lookup holds. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
struct nx_context *_Atomic *_Atomic nxi_reg_slots;
atomic_uint nxi_reg_cap;
static uint32_t reg_next = 1;
struct retired {
  struct retired *next;
  void *mem;
};
static struct retired *reg_retired;

NXI_TLS nx_context_t *nxi_current;

#define HT_INITIAL 8

static struct nxi_htable *htable_new(uint32_t cap) {
  struct nxi_htable *t = calloc(1, sizeof(*t) + cap * sizeof(t->slot[0]));
  if (t != NULL)
    t->mask = cap - 1;
  return t;
}

void nxi_context_free(struct nx_context *ctx) {
  struct nxi_htable *t = atomic_load(&ctx->handlers);
  int first = 1;
  while (t != NULL) {
    struct nxi_htable *older = t->retired;
    /* Names are shared between a table and the copies made from it; the
     * newest table owns them all. */
    if (first)
      for (uint32_t i = 0; i <= t->mask; i++)
        free(t->slot[i].name);
    first = 0;
    free(t);
    t = older;
  }
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
}

static int publish(struct nx_context *ctx) {
  pthread_mutex_lock(&reg_lock);
  uint32_t idx = reg_next;
  uint32_t cap = atomic_load(&nxi_reg_cap);
  if (idx == UINT32_MAX) {
    pthread_mutex_unlock(&reg_lock);
    return NX_ENOMEM;
  }
  if (idx >= cap) {
    uint32_t ncap = cap ? cap * 2 : 64;
    struct nx_context *_Atomic *old = atomic_load(&nxi_reg_slots);
    struct nx_context *_Atomic *slots = calloc(ncap, sizeof(*slots));
    struct retired *ret = malloc(sizeof(*ret));
    if (slots == NULL || ret == NULL) {
      free(slots);
      free(ret);
      pthread_mutex_unlock(&reg_lock);
      return NX_ENOMEM;
    }
    for (uint32_t i = 0; i < cap; i++)
      atomic_init(&slots[i], atomic_load(&old[i]));
    atomic_store_explicit(&nxi_reg_slots, slots, memory_order_release);
    atomic_store_explicit(&nxi_reg_cap, ncap, memory_order_release);
    ret->mem = old;
    ret->next = reg_retired;
    reg_retired = ret;
  }
  reg_next++;
  ctx->index = idx;
  ctx->id = nxi_ctxid(nxi_rt.proc_id, idx);
  atomic_store_explicit(&nxi_reg_slots[idx], ctx, memory_order_release);
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

/* Takes the context out of the registry, under the driver lock so no
 * dispatch is between its lookup and its reference. Returns NX_ENOCONTEXT
 * if another thread did it first; otherwise the caller drops the
 * registry's reference. */
static int unpublish_locked(struct nx_context *ctx) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&ctx->dead, &expected, 1))
    return NX_ENOCONTEXT;
  pthread_mutex_lock(&reg_lock);
  atomic_store(&atomic_load(&nxi_reg_slots)[ctx->index], NULL);
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

static void unpublish(struct nx_context *ctx) {
  unsigned tok = nxi_driver_lock();
  int r = unpublish_locked(ctx);
  nxi_driver_unlock(tok);
  if (r == 0)
    nxi_context_put(ctx);
}

static struct nx_context *context_new(void) {
  struct nx_context *ctx = calloc(1, sizeof(*ctx));
  if (ctx == NULL)
    return NULL;
  struct nxi_htable *t = htable_new(HT_INITIAL);
  if (t == NULL) {
    free(ctx);
    return NULL;
  }
  atomic_init(&ctx->handlers, t);
  atomic_init(&ctx->refs, 1);
  pthread_mutex_init(&ctx->lock, NULL);
  if (publish(ctx) < 0) {
    nxi_context_free(ctx);
    return NULL;
  }
  return ctx;
}

int nxi_contexts_init(void) {
  struct nx_context *ctx = context_new();
  if (ctx == NULL)
    return NX_ENOMEM;
  nxi_rt.initial = ctx;
  return 0;
}

void nxi_contexts_finalize(void) {
  struct nx_context *_Atomic *slots = atomic_load(&nxi_reg_slots);
  uint32_t cap = atomic_load(&nxi_reg_cap);
  for (uint32_t i = 0; i < cap; i++) {
    struct nx_context *ctx = atomic_load(&slots[i]);
    if (ctx != NULL) {
      atomic_store(&slots[i], NULL);
      if (ctx == nxi_rt.initial)
        nxi_context_free(ctx); /* counts no references (context.h) */
      else
        nxi_context_put(ctx);
    }
  }
  free(slots);
  while (reg_retired != NULL) {
    struct retired *r = reg_retired;
    reg_retired = r->next;
    free(r->mem);
    free(r);
  }
  atomic_store(&nxi_reg_slots, NULL);
  atomic_store(&nxi_reg_cap, 0);
  reg_next = 1;
  nxi_rt.initial = NULL;
  nxi_current = NULL;
}

nx_context_t *nx_context_self(void) {
  if (nxi_current != NULL)
    return nxi_current;
  return nxi_ready() ? nxi_rt.initial : NULL;
}

uint64_t nx_context_id(const nx_context_t *ctx) {
  return ctx != NULL ? ctx->id : 0;
}

void *nx_context_data(const nx_context_t *ctx) {
  return ctx != NULL ? ctx->data : NULL;
}

int nx_context_set_data(nx_context_t *ctx, void *data) {
  if (ctx == NULL)
    return NX_EINVAL;
  ctx->data = data;
  return 0;
}

int nx_context_create_local(nx_context_init_fn init, void *arg, nx_gp_t *gp) {
  if (gp == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  struct nx_context *ctx = context_new();
  if (ctx == NULL)
    return NX_ENOMEM;
  if (init != NULL) {
    nx_context_t *old = nxi_context_swap(ctx);
    int r = init(ctx, arg);
    nxi_context_swap(old);
    if (r < 0) {
      unpublish(ctx);
      return r;
    }
  }
  if (nxi_tracing())
    nxi_trace_event(NXT_CONTEXT_CREATE, ctx->id, 0, 0, 0, 0xff, 0, 0, 0);
  struct nxi_dlist *self = atomic_load(&nxi_rt.self_dl);
  nxi_dlist_retain(self);
  gp->context = ctx->id;
  gp->address = (uint64_t)(uintptr_t)ctx->data;
  gp->protos = self;
  return 0;
}

int nxi_context_destroy_local(uint64_t id) {
  unsigned tok = nxi_driver_lock();
  struct nx_context *ctx = nxi_context_get(id);
  int r = ctx != NULL ? unpublish_locked(ctx) : NX_ENOCONTEXT;
  nxi_driver_unlock(tok);
  if (ctx == NULL)
    return r;
  nxi_context_put(ctx); /* the lookup's reference */
  if (r == 0)
    nxi_context_put(ctx); /* the registry's */
  if (r == 0 && nxi_tracing())
    nxi_trace_event(NXT_CONTEXT_DESTROY, id, 0, 0, 0, 0xff, 0, 0, 0);
  return r;
}

/* Handlers. */

nx_handler_id_t nx_handler_id(const char *name) {
  uint32_t h = 0x811c9dc5u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 0x01000193u;
  return h != 0 ? h : 1;
}

/* Registration copies the table (readers never lock) and retires the old
 * copy; a context registers a handful of handlers, once. */
int nx_handler_register(nx_context_t *ctx, const char *name, nx_handler_fn fn,
                        int kind, nx_handler_id_t *id) {
  if (ctx == NULL || name == NULL || name[0] == '\0' || fn == NULL ||
      kind < NX_HANDLER_NONTHREADED || kind > NX_HANDLER_NEW_THREAD)
    return NX_EINVAL;
  uint32_t hid = nx_handler_id(name);
  nxi_handler_name_note(hid, name);
  pthread_mutex_lock(&ctx->lock);
  struct nxi_htable *old = atomic_load(&ctx->handlers);
  const struct nxi_handler *cur = nxi_handler_find(ctx, hid);
  if (cur != NULL && strcmp(cur->name, name) != 0) {
    pthread_mutex_unlock(&ctx->lock);
    return NX_ECOLLISION;
  }
  /* At most a quarter full: a lookup (once per RSR, context.h) then reads
   * one slot in most cases; at half full, 4 handlers of a benchmark's
   * context put two in one place, and one of them cost 3 reads. */
  uint32_t cap = old->mask + 1;
  if (cur == NULL && (old->count + 1) * 4 > cap)
    cap *= 2;
  struct nxi_htable *t = htable_new(cap);
  char *copy = cur == NULL ? strdup(name) : NULL;
  if (t == NULL || (cur == NULL && copy == NULL)) {
    free(t);
    free(copy);
    pthread_mutex_unlock(&ctx->lock);
    return NX_ENOMEM;
  }
  for (uint32_t i = 0; i <= old->mask; i++) {
    if (old->slot[i].id == 0)
      continue;
    uint32_t j = old->slot[i].id & t->mask;
    while (t->slot[j].id != 0)
      j = (j + 1) & t->mask;
    t->slot[j] = old->slot[i];
    old->slot[i].name = NULL; /* the new table owns the names now */
    if (t->slot[j].id == hid) {
      t->slot[j].fn = fn;
      t->slot[j].kind = (uint8_t)kind;
    }
  }
  t->count = old->count;
  if (cur == NULL) {
    uint32_t j = hid & t->mask;
    while (t->slot[j].id != 0)
      j = (j + 1) & t->mask;
    t->slot[j].id = hid;
    t->slot[j].fn = fn;
    t->slot[j].kind = (uint8_t)kind;
    t->slot[j].name = copy;
    t->count++;
  }
  t->retired = old;
  atomic_store_explicit(&ctx->handlers, t, memory_order_release);
  pthread_mutex_unlock(&ctx->lock);
  if (nxi_tracing())
    nxi_trace_name(NXT_DEF_HANDLER, ctx->id, hid, 0xff, name);
  if (id != NULL)
    *id = hid;
  return 0;
}

/* A copy of the table, as nx_handler_register makes one, with the
 * handler's placement callback changed. */
int nx_handler_set_place(nx_context_t *ctx, const char *name, nx_place_fn fn) {
  if (ctx == NULL || name == NULL)
    return NX_EINVAL;
  uint32_t hid = nx_handler_id(name);
  pthread_mutex_lock(&ctx->lock);
  struct nxi_htable *old = atomic_load(&ctx->handlers);
  const struct nxi_handler *cur = nxi_handler_find(ctx, hid);
  if (cur == NULL || strcmp(cur->name, name) != 0) {
    pthread_mutex_unlock(&ctx->lock);
    return NX_ENOHANDLER;
  }
  struct nxi_htable *t = htable_new(old->mask + 1);
  if (t == NULL) {
    pthread_mutex_unlock(&ctx->lock);
    return NX_ENOMEM;
  }
  for (uint32_t i = 0; i <= old->mask; i++) {
    t->slot[i] = old->slot[i]; /* the same capacity: the same places */
    old->slot[i].name = NULL;
    if (t->slot[i].id == hid)
      t->slot[i].place = fn;
  }
  t->count = old->count;
  t->retired = old;
  atomic_store_explicit(&ctx->handlers, t, memory_order_release);
  pthread_mutex_unlock(&ctx->lock);
  return 0;
}
