/* Contexts inside the core: the struct behind nx_context_t, the registry that
 * maps ids to contexts, and handler lookup. */
#ifndef NXI_CONTEXT_H
#define NXI_CONTEXT_H

#include <pthread.h>

#include "base/rt.h"

struct nxi_handler {
  uint32_t id;
  uint8_t kind;
  nx_handler_fn fn;
  char *name;
  nx_place_fn place; /* its placement callback (nx_handler_set_place) */
};

struct nxi_htable {
  uint32_t mask; /* capacity - 1, capacity a power of two */
  uint32_t count;
  struct nxi_htable *retired; /* older tables, freed with the context */
  struct nxi_handler slot[];
};

struct nx_context {
  uint64_t id;
  uint32_t index;
  atomic_uint refs;
  atomic_int dead;
  void *data;
  struct nxi_htable *_Atomic handlers;
  pthread_mutex_t lock; /* serialises registrations */
};

/* Creates the initial context (nxi_rt.initial); and frees them all. */
int nxi_contexts_init(void);
void nxi_contexts_finalize(void);
/* The registry (context.c): a context's index (the low 32 bits of its id)
 * to the context. */
extern struct nx_context *_Atomic *_Atomic nxi_reg_slots;
extern atomic_uint nxi_reg_cap;
void nxi_context_free(struct nx_context *ctx);

/* Looks up a live context and takes a reference; driver lock held. Inline,
 * as the next one: both run once per RSR. The initial context takes none:
 * it cannot be destroyed (nx_context_destroy: NX_EBUSY) and lives until
 * nxi_contexts_finalize, which runs once no handler can run; so an RSR to
 * it, the common case between processes, pays no locked add and sub. */
static inline struct nx_context *nxi_context_get(uint64_t id) {
  if (nxi_ctxid_proc(id) != nxi_rt.proc_id)
    return NULL;
  uint32_t idx = nxi_ctxid_index(id);
  struct nx_context *_Atomic *slots =
      atomic_load_explicit(&nxi_reg_slots, memory_order_acquire);
  if (slots == NULL ||
      idx >= atomic_load_explicit(&nxi_reg_cap, memory_order_acquire))
    return NULL;
  struct nx_context *ctx =
      atomic_load_explicit(&slots[idx], memory_order_acquire);
  if (ctx == NULL || atomic_load_explicit(&ctx->dead, memory_order_relaxed))
    return NULL;
  if (ctx != nxi_rt.initial)
    atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
  return ctx;
}
static inline void nxi_context_put(struct nx_context *ctx) {
  if (ctx != nxi_rt.initial &&
      atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) == 1)
    nxi_context_free(ctx);
}
/* The handler with wire id `id` (nx_handler_id of its name), or NULL. The
 * id indexes the table (its low bits) and is compared whole in the slot,
 * so an id nobody registered here finds nothing, never another handler:
 * in the common case one slot read, inline on the dispatch path. */
static inline const struct nxi_handler *nxi_handler_find(struct nx_context *ctx,
                                                         uint32_t id) {
  if (id == 0)
    return NULL; /* 0 marks an empty slot; no name hashes to it */
  const struct nxi_htable *t =
      atomic_load_explicit(&ctx->handlers, memory_order_acquire);
  for (uint32_t i = id & t->mask;; i = (i + 1) & t->mask) {
    if (t->slot[i].id == id)
      return &t->slot[i];
    if (t->slot[i].id == 0)
      return NULL;
  }
}
/* The calling thread's current context while it runs a handler, else NULL
 * (nx_context_self then answers the initial context). */
extern NXI_TLS nx_context_t *nxi_current;
/* nx_context_id(nx_context_self()) without the calls, for the send path. */
static inline uint64_t nxi_context_self_id(void) {
  const struct nx_context *c = nxi_current != NULL ? nxi_current
                               : nxi_ready()       ? nxi_rt.initial
                                                   : NULL;
  return c != NULL ? c->id : 0;
}
/* Makes `ctx` the calling thread's current context; returns the previous. */
static inline nx_context_t *nxi_context_swap(nx_context_t *ctx) {
  nx_context_t *old = nxi_current;
  nxi_current = ctx;
  return old;
}
/* Destroys an in-process context of this process (nx_context_destroy). */
int nxi_context_destroy_local(uint64_t id);

#endif /* NXI_CONTEXT_H */
