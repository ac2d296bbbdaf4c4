/* Descriptor lists (dlist.h): their wire encoding, interning, the
 * per-destination protocol choice, and failed processes. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modules/dlist.h"
#include "base/trace.h"
#include "modules/module.h"

/* Descriptor list wire encoding (fixed little-endian, docs/design.md):
 *   u8 count, then per descriptor:
 *   u8 name_len, name, u16 wire_version, u8 scope_len, scope,
 *   u16 data_len, data */

#define BUCKETS 256

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
/* Processes known dead, so each is reported once however the news comes
 * (a module's endpoint, the launcher, a child's channel). */
static uint32_t *dead_procs;
static size_t dead_count, dead_cap;
static struct nxi_dlist *intern_table[BUCKETS];
/* This process's earlier lists, replaced by nxi_dlist_self_add: kept
 * until nxi_dlist_finalize, since nx_gp_make may be taking a reference to
 * one while it is replaced. */
static struct nxi_dlist *self_old[NXI_MAX_MODULES];
static size_t self_old_count;
/* A route failed with candidates left: the driver should fall back
 * (dlist.h, nxi_dlist_fallbacks_due). */
atomic_int nxi_dlist_fallback_due;
static const struct nxi_route_stages *_Atomic route_stages;
/* Bumped whenever candidates may have improved (a module joined here, a
 * list gained descriptors) before the routes are chosen again: a route
 * whose candidates were read before a bump, and installed after the
 * routes were looked at, is chosen again by its installer
 * (nxi_dlist_upgrade). */
static atomic_uint route_epoch;

void nxi_route_stages_set(const struct nxi_route_stages *s) {
  atomic_store(&route_stages, s);
}

/* Process `proc` is lost: its RSRs, then the process itself. Every loss
 * comes here once (mark_dead), however it was found: the trace's
 * PROC_LOSS is made here, but for a process context that was destroyed
 * (NX_ENOCONTEXT: its creator ended it; docs/tracing.md). */
static void report_lost(int status, uint32_t proc) {
  if (nxi_tracing() && status != NX_ENOCONTEXT)
    nxi_trace_event(NXT_PROC_LOSS, 0, (uint64_t)proc << 32, 0, 0, 0xff, 0,
                    (uint32_t)-status, 0);
  const struct nxi_route_stages *s = atomic_load(&route_stages);
  if (s != NULL && s->lost != NULL)
    s->lost(proc, status);
  nxi_report_proc(status, proc);
}

/* The intern table's hash of an encoding: eight bytes a step (callgrind:
 * a byte-wise FNV-1a was 600 of the 1,000 instructions of an nx_get_gp of
 * a two-module list). Only this process compares it, and a match is
 * confirmed byte by byte. */
static uint64_t blob_hash(const uint8_t *p, size_t n) {
  const uint64_t k = 0x9e3779b97f4a7c15ull;
  uint64_t h = n * k, w;
  for (; n >= 8; n -= 8, p += 8) {
    memcpy(&w, p, 8);
    h = (h ^ w) * k;
    h ^= h >> 32;
  }
  w = 0;
  memcpy(&w, p, n);
  h = (h ^ w) * k;
  return h ^ h >> 29;
}

/* Walks the encoding at `p`, checking every field against `avail` and the
 * limits; fills `dl` when it is not NULL. */
static int parse(const uint8_t *p, size_t avail, size_t *len,
                 struct nxi_dlist *dl) {
  if (avail < 1)
    return NX_ERANGE;
  unsigned n = p[0];
  if (n > NXI_MAX_MODULES)
    return NX_EPROTO;
  size_t off = 1;
  for (unsigned i = 0; i < n; i++) {
    if (avail - off < 1)
      return NX_ERANGE;
    unsigned nl = p[off];
    if (nl == 0 || nl > NX_PROTO_NAME_MAX)
      return NX_EPROTO;
    if (avail - off < 1 + nl + 2 + 1)
      return NX_ERANGE;
    const uint8_t *name = p + off + 1;
    off += 1 + nl;
    uint16_t wv = nxu_rd16(p + off);
    off += 2;
    unsigned sl = p[off++];
    if (sl > NX_DESC_SCOPE_MAX)
      return NX_EPROTO;
    if (avail - off < sl + 2u)
      return NX_ERANGE;
    const uint8_t *scope = p + off;
    off += sl;
    unsigned dlen = nxu_rd16(p + off);
    off += 2;
    if (dlen > NX_DESC_DATA_MAX)
      return NX_EPROTO;
    if (avail - off < dlen)
      return NX_ERANGE;
    if (dl != NULL) {
      memcpy(dl->names[i], name, nl);
      dl->names[i][nl] = '\0';
      dl->desc[i].name = dl->names[i];
      dl->desc[i].wire_version = wv;
      dl->desc[i].scope_len = (uint8_t)sl;
      dl->desc[i].scope = dl->blob + (scope - p);
      dl->desc[i].data_len = (uint16_t)dlen;
      dl->desc[i].data = dl->blob + (p + off - p);
    }
    off += dlen;
  }
  if (dl != NULL)
    dl->n = (int)n;
  *len = off;
  return 0;
}

int nxi_dlist_parse_len(const uint8_t *p, size_t avail, size_t *len) {
  return parse(p, avail, len, NULL);
}

int nxi_dlist_intern(const uint8_t *blob, size_t len, struct nxi_dlist **out) {
  /* An encoding equal to an interned one is valid: only a new one is
   * parsed. */
  uint64_t h = blob_hash(blob, len);
  pthread_mutex_lock(&intern_lock);
  for (struct nxi_dlist *d = intern_table[h % BUCKETS]; d; d = d->next) {
    if (d->hash != h || d->len != len || memcmp(d->blob, blob, len) != 0)
      continue;
    /* Take a reference only while the list is alive: one whose count
     * reached zero belongs to the releasing thread, which frees it. */
    unsigned r = atomic_load_explicit(&d->refs, memory_order_relaxed);
    while (r != 0 &&
           !atomic_compare_exchange_weak_explicit(
               &d->refs, &r, r + 1, memory_order_relaxed, memory_order_relaxed))
      ;
    if (r != 0) {
      pthread_mutex_unlock(&intern_lock);
      *out = d;
      return 0;
    }
  }
  size_t check;
  int r = parse(blob, len, &check, NULL);
  if (r == 0 && check != len)
    r = NX_EPROTO;
  if (r < 0) {
    pthread_mutex_unlock(&intern_lock);
    return r;
  }
  struct nxi_dlist *d = calloc(1, sizeof(*d) + len);
  if (d == NULL) {
    pthread_mutex_unlock(&intern_lock);
    return NX_ENOMEM;
  }
  d->blob = (uint8_t *)(d + 1);
  memcpy(d->blob, blob, len);
  d->len = len;
  d->hash = h;
  atomic_init(&d->refs, 1);
  parse(d->blob, len, &check, d);
  d->next = intern_table[h % BUCKETS];
  intern_table[h % BUCKETS] = d;
  pthread_mutex_unlock(&intern_lock);
  *out = d;
  return 0;
}

void nxi_dlist_retain(struct nxi_dlist *dl) {
  atomic_fetch_add_explicit(&dl->refs, 1, memory_order_relaxed);
}

/* Frees a route and the ones it replaced: an endpoint is disconnected only
 * here, when no sender can hold the route any more. It releases the
 * gateway lists the routes went through: never call it under intern_lock. */
static void route_free(struct nxi_route *rt) {
  while (rt != NULL) {
    struct nxi_route *older = rt->older;
    if (rt->via != NULL)
      nxi_dlist_release(rt->via);
    else
      rt->mod->ops->disconnect(rt->mod->state, rt->ep);
    free(rt);
    rt = older;
  }
}

static void dlist_free(struct nxi_dlist *d) {
  route_free(atomic_load(&d->route));
  while (d->gained != NULL) {
    uint8_t *next;
    memcpy(&next, d->gained, sizeof(next));
    free(d->gained);
    d->gained = next;
  }
  free(d);
}

void nxi_dlist_release(struct nxi_dlist *dl) {
  if (atomic_fetch_sub_explicit(&dl->refs, 1, memory_order_acq_rel) != 1)
    return;
  /* Nobody can revive it (nxi_dlist_intern skips dead lists): unlink it. */
  pthread_mutex_lock(&intern_lock);
  struct nxi_dlist **pp = &intern_table[dl->hash % BUCKETS];
  while (*pp != dl)
    pp = &(*pp)->next;
  *pp = dl->next;
  pthread_mutex_unlock(&intern_lock);
  dlist_free(dl);
}

/* The modules are about to go: forget every cached route. The lists stay,
 * owned by the gps that hold them, which may be released (or used again
 * after a new nx_init) later. */
void nxi_dlist_finalize(void) {
  struct nxi_route *dropped = NULL;
  pthread_mutex_lock(&intern_lock);
  free(dead_procs);
  dead_procs = NULL;
  dead_count = dead_cap = 0;
  atomic_store(&nxi_dlist_fallback_due, 0);
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      atomic_store(&d->broken, 0);
      atomic_store(&d->gen_next, 0);
      struct nxi_route *rt = atomic_exchange(&d->route, NULL);
      if (rt == NULL)
        continue;
      /* Freed after the lock: a route through a gateway releases a list. */
      struct nxi_route *last = rt;
      while (last->older != NULL)
        last = last->older;
      last->older = dropped;
      dropped = rt;
    }
  pthread_mutex_unlock(&intern_lock);
  route_free(dropped);
  for (size_t i = 0; i < self_old_count; i++)
    nxi_dlist_release(self_old[i]);
  self_old_count = 0;
}

/* Protocol choice: every loaded module that finds its own name and wire
 * version in the list and calls the descriptor reachable is a candidate;
 * they are tried by cost (or by NX_PROTOCOLS order when that is set) until
 * one connects. The choice is cached in the list. */

struct candidate {
  struct nxi_module *mod; /* NULL: through a gateway */
  const struct nx_desc *desc;
  struct nxi_dlist *via; /* the gateway's list (a reference) */
  int didx;
  int cost;
};

static int better(const struct candidate *a, const struct candidate *b) {
  if (a->cost != b->cost)
    return a->cost < b->cost;
  if (a->mod == NULL || b->mod == NULL) /* gateways: in the list's order */
    return a->mod != NULL && b->mod == NULL;
  return a->mod->order < b->mod->order;
}

static int is_gw(const struct nx_desc *d) {
  return strcmp(d->name, NXI_GW_NAME) == 0 && d->wire_version == 1;
}

/* Set while a gateway's own route is resolved: gateways do not chain, so
 * lists naming each other as gateways cannot recurse. */
static NXI_TLS int gw_depth;

/* A gateway descriptor's gateway (u32 LE process id, then its list), unless
 * it names this process or cannot be read. */
static int gw_candidate(const struct nx_desc *d, struct nxi_dlist **via) {
  if (d->data_len <= 4)
    return -1;
  uint32_t proc = nxu_rd32(d->data);
  if (proc == 0 || proc == nxi_rt.proc_id)
    return -1;
  return nxi_dlist_intern_proc(d->data + 4, d->data_len - 4u, proc, via) < 0
             ? -1
             : 0;
}

/* Every candidate not in `broken`: each descriptor that a loaded module of
 * the same name and wire version calls reachable, then (after all of
 * them, whatever NX_PROTOCOLS says) the gateways the list names. */
static int candidates(struct nxi_dlist *dl, unsigned broken,
                      struct candidate *c) {
  int n = 0;
  int nmods = nxi_module_count_loaded();
  for (int i = 0; i < dl->n; i++) {
    const struct nx_desc *d = &dl->desc[i];
    if (broken & (1u << i))
      continue;
    if (is_gw(d)) {
      /* A gateway's own mark, or one we cannot use, is no candidate. */
      struct nxi_dlist *via;
      if (gw_depth == 0 && gw_candidate(d, &via) == 0)
        c[n++] = (struct candidate){NULL, d, via, i, INT_MAX};
      continue;
    }
    for (int m = 0; m < nmods; m++) {
      struct nxi_module *mod = nxi_module_loaded(m);
      if (strcmp(mod->name, d->name) != 0 ||
          mod->ops->wire_version != d->wire_version)
        continue; /* a module we lack, or another wire version: skip it */
      int cost = mod->ops->reachable(mod->state, d);
      if (cost < 0)
        continue;
      c[n] =
          (struct candidate){mod, d, NULL, i, nxi_rt.explicit_order ? 0 : cost};
      n++;
    }
  }
  /* Insertion sort: at most NXI_MAX_MODULES entries. */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && better(&c[j], &c[j - 1]); j--) {
      struct candidate t = c[j];
      c[j] = c[j - 1];
      c[j - 1] = t;
    }
  return n;
}

/* connect, and what the core checks of the endpoint it returns: there is
 * one, and it has not failed already (a module's shared endpoint to a
 * process that just died). */
static int connect_direct(struct nxi_module *mod, const struct nx_desc *desc,
                          struct nx_endpoint **ep) {
  *ep = NULL;
  int r = mod->ops->connect(mod->state, desc, ep);
  if (r < 0)
    return r;
  if (*ep == NULL) {
    nxi_log(0, mod->name, "connect returned no endpoint");
    return NX_EPROTO;
  }
  if ((r = nx_endpoint_failed(*ep)) != 0) {
    mod->ops->disconnect(mod->state, *ep);
    *ep = NULL;
    return r;
  }
  return 0;
}

/* The gateway's own route, which must be direct (one hop; a gateway's
 * list is resolved like any other, and gateways do not chain). */
static int gw_connect(struct nxi_dlist *via) {
  struct nxi_route *grt;
  gw_depth++;
  int r = nxi_dlist_route(via, &grt);
  gw_depth--;
  return r < 0 ? r : grt->via != NULL ? NX_EUNREACH : 0;
}

static int resolve(struct nxi_dlist *dl, unsigned broken,
                   struct nxi_route **out) {
  unsigned epoch = atomic_load(&route_epoch); /* before the candidates */
  /* A gp kept from an earlier run of this process: that run's contexts
   * are gone, and its endpoints closed (design.md, rule 12). */
  uint32_t proc = atomic_load_explicit(&dl->proc, memory_order_relaxed);
  if (proc != 0 && nxi_proc_is_former(proc))
    return NX_EUNREACH;
  struct candidate c[NXI_MAX_MODULES];
  int n = candidates(dl, broken, c);
  int r = NX_EUNREACH;
  int i;
  struct nx_endpoint *ep = NULL;
  for (i = 0; i < n; i++) {
    r = c[i].via != NULL ? gw_connect(c[i].via)
                         : connect_direct(c[i].mod, c[i].desc, &ep);
    if (r == 0)
      break;
    nxi_log(1, c[i].mod != NULL ? c[i].mod->name : NXI_GW_NAME,
            "connect failed: %s; trying the next", nx_strerror(r));
  }
  struct nxi_route *rt = NULL;
  if (i < n && (rt = calloc(1, sizeof(*rt))) == NULL) {
    if (c[i].mod != NULL)
      c[i].mod->ops->disconnect(c[i].mod->state, ep);
    r = NX_ENOMEM;
  }
  for (int j = 0; j < n; j++)
    if (c[j].via != NULL && (rt == NULL || j != i))
      nxi_dlist_release(c[j].via);
  if (rt == NULL)
    return n == 0 ? NX_EUNREACH : i < n ? r : NX_EUNREACH;
  rt->mod = c[i].mod;
  rt->ep = ep;
  rt->via = c[i].via;
  rt->didx = c[i].didx;
  rt->alts = n - i - 1;
  rt->epoch = epoch;
  /* One more for each route this list had before (one that failed, or
   * one a better candidate replaced): the generation its frames carry,
   * so that the receiver counts them apart (ledger.h). Taken for good
   * when the route is installed (install). */
  rt->gen = atomic_load(&dl->gen_next);
  if (rt->gen > NXI_ROUTE_GEN_MAX)
    rt->gen = NXI_ROUTE_GEN_MAX;
  atomic_init(&rt->failed, 0);
  /* Which module carries the frames to whom: the first thing to ask
   * when a destination is slow or unreachable. */
  nxi_log(1, rt->mod != NULL ? rt->mod->name : NXI_GW_NAME,
          "route to process %#x: %s (%d of %d candidates)",
          (unsigned)atomic_load(&dl->proc),
          rt->mod != NULL ? rt->mod->name : "through a gateway", i + 1, n);
  *out = rt;
  return 0;
}

static void fail_list(struct nxi_dlist *dl, int status);
static int upgrade_one(struct nxi_dlist *dl);

/* `rt` was just installed: if candidates may have improved since it read
 * them, the routes were looked at before it was there, so it is chosen
 * again here. */
static void stale_check(struct nxi_dlist *dl, struct nxi_route *rt) {
  if (rt->epoch != atomic_load(&route_epoch))
    upgrade_one(dl);
}

/* Makes `rt` the list's route if `old` still is; its generation is then
 * taken (the next route takes the one after). Returns 0 if another
 * thread replaced `old` first. */
static int install(struct nxi_dlist *dl, struct nxi_route *old,
                   struct nxi_route *rt) {
  struct nxi_route *expected = old;
  if (!atomic_compare_exchange_strong(&dl->route, &expected, rt))
    return 0;
  unsigned next = rt->gen + 1;
  atomic_store(&dl->gen_next, next);
  return 1;
}

/* The cached route failed (and the list did not): the next candidate
 * replaces it, or, with none left, the destination is lost. */
static int fall_back(struct nxi_dlist *dl, struct nxi_route *old) {
  int status = atomic_load(&old->failed);
  unsigned broken =
      atomic_fetch_or(&dl->broken, 1u << old->didx) | 1u << old->didx;
  struct nxi_route *rt;
  int r = resolve(dl, broken, &rt);
  if (r < 0) {
    fail_list(dl, status);
    return atomic_load(&dl->failed);
  }
  rt->older = old;
  if (!install(dl, old, rt)) {
    /* Another sender replaced it first: use its route. */
    rt->older = NULL;
    route_free(rt);
    return 1;
  }
  atomic_fetch_add(&nxi_rt.route_fallbacks, 1);
  stale_check(dl, rt);
  if (nxi_tracing())
    nxi_trace_event(NXT_FALLBACK, 0, (uint64_t)atomic_load(&dl->proc) << 32, 0,
                    0, rt->mod != NULL ? nxi_module_index(rt->mod) : 0xff, 0,
                    old->mod != NULL ? nxi_module_index(old->mod) : 0xff, 0);
  const struct nxi_route_stages *s = atomic_load(&route_stages);
  if (s != NULL && s->rerouted != NULL && old->gen != rt->gen)
    s->rerouted(atomic_load(&dl->proc), old->gen, status);
  nxi_log(1, NULL, "route to process %#x: %s failed (%s); now %s",
          (unsigned)atomic_load(&dl->proc),
          old->mod != NULL ? old->mod->name : NXI_GW_NAME, nx_strerror(status),
          rt->mod != NULL ? rt->mod->name : "through a gateway");
  return 1;
}

int nxi_dlist_route(struct nxi_dlist *dl, struct nxi_route **out) {
  for (;;) {
    int failed = atomic_load_explicit(&dl->failed, memory_order_relaxed);
    if (failed < 0)
      return failed;
    struct nxi_route *rt =
        atomic_load_explicit(&dl->route, memory_order_acquire);
    if (rt != NULL &&
        atomic_load_explicit(&rt->failed, memory_order_relaxed) == 0) {
      *out = rt;
      return 0;
    }
    if (rt != NULL) {
      int r = fall_back(dl, rt);
      if (r < 0)
        return r;
      continue;
    }
    int r = resolve(dl, atomic_load(&dl->broken), &rt);
    if (r < 0)
      return r;
    if (!install(dl, NULL, rt))
      route_free(rt); /* another sender resolved it first */
    else
      stale_check(dl, rt);
  }
}

int nxi_route_fail(struct nxi_route *rt, int status) {
  /* The RSR's fault, or the runtime stopping: not the route's. */
  if (status == NX_ENOMEM || status == NX_EINVAL || status == NX_ERANGE ||
      status == NX_EMSGSIZE || status == NX_EFINALIZED ||
      status == NX_ENOTINIT || status >= 0)
    return 0;
  int expected = 0;
  atomic_compare_exchange_strong(&rt->failed, &expected, status);
  return 1;
}

int nxi_dlist_is_gateway(const struct nxi_dlist *dl) {
  for (int i = 0; i < dl->n; i++)
    if (is_gw(&dl->desc[i]) && dl->desc[i].data_len == 0)
      return 1;
  return 0;
}

/* Intern lock held. Returns 1 if `proc` was not known dead before. */
static int mark_dead(uint32_t proc) {
  for (size_t i = 0; i < dead_count; i++)
    if (dead_procs[i] == proc)
      return 0;
  if (dead_count == dead_cap) {
    size_t cap = dead_cap ? dead_cap * 2 : 16;
    uint32_t *p = realloc(dead_procs, cap * sizeof(*p));
    if (p == NULL)
      return 1; /* report it, maybe twice, rather than not at all */
    dead_procs = p;
    dead_cap = cap;
  }
  dead_procs[dead_count++] = proc;
  return 1;
}

/* intern_lock held: list `d`'s cached route `rt` failed with `status`.
 * With candidates left only the route is marked (the driver falls back
 * soon, nxi_dlist_fallbacks, so that a dead process is found by the next
 * candidate even if nothing is sent to it); else the list fails and its
 * process, if newly dead, is added to procs[n..63]. Returns the new n. */
static int route_failed(struct nxi_dlist *d, struct nxi_route *rt, int status,
                        uint32_t *procs, int n) {
  int expected = 0;
  atomic_compare_exchange_strong(&rt->failed, &expected, status);
  if (rt->alts > 0) {
    atomic_store(&nxi_dlist_fallback_due, 1);
    return n;
  }
  expected = 0;
  atomic_compare_exchange_strong(&d->failed, &expected, status);
  uint32_t p = atomic_load(&d->proc);
  if (p != 0 && n < 64 && mark_dead(p))
    procs[n++] = p;
  return n;
}

/* intern_lock held: the routes through process `gw` (a gateway) fail, as
 * in route_failed. */
static int fail_through(uint32_t gw, int status, uint32_t *procs, int n) {
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      struct nxi_route *rt = atomic_load(&d->route);
      if (rt != NULL && rt->via != NULL && atomic_load(&rt->via->proc) == gw)
        n = route_failed(d, rt, status, procs, n);
    }
  return n;
}

/* Marks the lists that match (an endpoint, or a process) failed and reports
 * each newly dead process once. A route whose endpoint failed while
 * candidates are left is only marked: the next send falls back to them. */
static void fail_lists(struct nx_endpoint *ep, uint32_t proc, int status) {
  uint32_t procs[64];
  int n = 0;
  pthread_mutex_lock(&intern_lock);
  if (ep == NULL && mark_dead(proc))
    procs[n++] = proc;
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      struct nxi_route *rt = atomic_load(&d->route);
      if (ep != NULL) {
        if (rt != NULL && rt->ep == ep)
          n = route_failed(d, rt, status, procs, n);
      } else if (atomic_load(&d->proc) == proc) {
        int expected = 0;
        if (rt != NULL)
          atomic_compare_exchange_strong(&rt->failed, &expected, status);
        expected = 0;
        atomic_compare_exchange_strong(&d->failed, &expected, status);
      }
    }
  pthread_mutex_unlock(&intern_lock);
  for (int i = 0; i < n; i++)
    report_lost(status, procs[i]);
  /* Then the routes through a process that just died (a gateway): they
   * fail now, as a route whose endpoint failed does, not at their next
   * send, which may never come (the ledger may ask about the RSRs that
   * went before over another list of the member's, whose first route
   * fails without a report: they were reported only when nx_finalize
   * gave up). After the gateway's report, so that whoever finds a member
   * lost has heard of the gateway first. Gateways do not chain: one
   * pass. `proc` newly dead or not: failing is idempotent. */
  uint32_t behind[64];
  int m = 0;
  pthread_mutex_lock(&intern_lock);
  if (ep == NULL && proc != 0)
    m = fail_through(proc, status, behind, m);
  for (int k = 0; k < n; k++)
    if (procs[k] != proc)
      m = fail_through(procs[k], status, behind, m);
  pthread_mutex_unlock(&intern_lock);
  for (int i = 0; i < m; i++)
    report_lost(status, behind[i]);
}

int nxi_dlist_fallbacks(void) {
  if (!atomic_exchange(&nxi_dlist_fallback_due, 0))
    return 0;
  struct nxi_dlist *due[64];
  int n = 0;
  pthread_mutex_lock(&intern_lock);
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      struct nxi_route *rt = atomic_load(&d->route);
      if (rt == NULL || atomic_load(&rt->failed) == 0 ||
          atomic_load(&d->failed) != 0 || atomic_load(&d->refs) == 0)
        continue;
      if (n == 64) {
        atomic_store(&nxi_dlist_fallback_due, 1); /* the rest next round */
        continue;
      }
      nxi_dlist_retain(due[n++] = d);
    }
  pthread_mutex_unlock(&intern_lock);
  for (int i = 0; i < n; i++) {
    struct nxi_route *rt;
    nxi_dlist_route(due[i], &rt);
    nxi_dlist_release(due[i]);
  }
  return n;
}

/* One list's last route failed: its destination is lost. */
static void fail_list(struct nxi_dlist *dl, int status) {
  int expected = 0;
  atomic_compare_exchange_strong(&dl->failed, &expected, status);
  uint32_t p = atomic_load(&dl->proc);
  pthread_mutex_lock(&intern_lock);
  int report = p != 0 && mark_dead(p);
  pthread_mutex_unlock(&intern_lock);
  if (report)
    report_lost(status, p);
}

struct nxi_dlist *nxi_dlist_of_proc(uint32_t proc) {
  struct nxi_dlist *found = NULL;
  pthread_mutex_lock(&intern_lock);
  for (int i = 0; i < BUCKETS && found == NULL; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      if (atomic_load(&d->proc) != proc || atomic_load(&d->failed) != 0)
        continue;
      unsigned r = atomic_load(&d->refs);
      while (r != 0 && !atomic_compare_exchange_weak(&d->refs, &r, r + 1))
        ;
      if (r != 0) {
        found = d;
        break;
      }
    }
  pthread_mutex_unlock(&intern_lock);
  return found;
}

void nxi_dlist_peer_failed(struct nx_endpoint *ep, int status) {
  int expected = 0;
  if (__atomic_compare_exchange_n(&ep->failed, &expected, status, 0,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    fail_lists(ep, 0, status);
}

void nxi_dlist_proc_failed(uint32_t proc, int status) {
  if (proc != 0 && proc != nxi_rt.proc_id)
    fail_lists(NULL, proc, status);
}

int nxi_dlist_intern_proc(const uint8_t *blob, size_t len, uint32_t proc,
                          struct nxi_dlist **out) {
  int r = nxi_dlist_intern(blob, len, out);
  if (r == 0) {
    /* The ledger hears of a list once, when it first names `proc`: a gp
     * read again from the same list costs no lookup there. */
    uint32_t was =
        atomic_exchange_explicit(&(*out)->proc, proc, memory_order_relaxed);
    const struct nxi_route_stages *s = atomic_load(&route_stages);
    if (s != NULL && s->known != NULL && proc != 0 && was != proc)
      s->known(proc, *out);
  }
  return r;
}

/* Writes one descriptor's encoding at `p` (NXI_DESC_MAX_LEN at most);
 * returns its length. */
static size_t put_desc(uint8_t *p, const char *name, uint16_t wire_version,
                       const uint8_t *scope, size_t scope_len,
                       const uint8_t *data, size_t data_len) {
  size_t nl = strlen(name), off = 0;
  p[off++] = (uint8_t)nl;
  memcpy(p + off, name, nl);
  off += nl;
  nxu_le16(p + off, wire_version);
  off += 2;
  p[off++] = (uint8_t)scope_len;
  if (scope_len > 0)
    memcpy(p + off, scope, scope_len);
  off += scope_len;
  nxu_le16(p + off, (uint16_t)data_len);
  off += 2;
  if (data_len > 0) /* the gateway's mark has no data */
    memcpy(p + off, data, data_len);
  return off + data_len;
}

/* This process's list gains one descriptor. Its callers (gateway.c, the
 * thread a late module joins on) do not run at once: self_lock. */
static int self_add(const char *name, uint16_t wire_version,
                    const uint8_t *scope, size_t scope_len, const uint8_t *data,
                    size_t len) {
  static pthread_mutex_t self_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&self_lock);
  int r = 0;
  struct nxi_dlist *cur = atomic_load(&nxi_rt.self_dl);
  uint8_t *blob = NULL;
  if (cur->n >= NXI_MAX_MODULES || self_old_count >= NXI_MAX_MODULES)
    r = NX_EBUSY;
  else if (len > NX_DESC_DATA_MAX || strlen(name) > NX_PROTO_NAME_MAX ||
           scope_len > NX_DESC_SCOPE_MAX)
    r = NX_EMSGSIZE;
  else if ((blob = malloc(cur->len + NXI_DESC_MAX_LEN)) == NULL)
    r = NX_ENOMEM;
  if (r < 0) {
    pthread_mutex_unlock(&self_lock);
    return r;
  }
  memcpy(blob, cur->blob, cur->len);
  blob[0] = (uint8_t)(cur->n + 1);
  size_t off = cur->len + put_desc(blob + cur->len, name, wire_version, scope,
                                   scope_len, data, len);
  struct nxi_dlist *dl;
  r = nxi_dlist_intern_proc(blob, off, nxi_rt.proc_id, &dl);
  free(blob);
  if (r == 0) {
    self_old[self_old_count++] = cur;
    atomic_store(&nxi_rt.self_dl, dl);
  }
  pthread_mutex_unlock(&self_lock);
  return r;
}

int nxi_dlist_self_add(const char *name, const uint8_t *data, size_t len) {
  return self_add(name, 1, NULL, 0, data, len);
}

int nxi_dlist_self_add_module(const struct nxi_module *m) {
  return self_add(m->name, m->ops->wire_version, m->desc.scope,
                  m->desc.scope_len, m->desc.data, m->desc.data_len);
}

static int same_desc(const struct nx_desc *a, const struct nx_desc *b) {
  return strcmp(a->name, b->name) == 0 && a->wire_version == b->wire_version &&
         a->scope_len == b->scope_len && a->data_len == b->data_len &&
         (a->scope_len == 0 || memcmp(a->scope, b->scope, a->scope_len) == 0) &&
         (a->data_len == 0 || memcmp(a->data, b->data, a->data_len) == 0);
}

/* intern_lock held: `d` gains descriptor `x` (copied) unless it has it or
 * is full. Readers see the count grow only once the entry is whole. */
static int gain_one(struct nxi_dlist *d, const struct nx_desc *x) {
  int n = atomic_load(&d->n);
  for (int i = 0; i < n; i++)
    if (same_desc(&d->desc[i], x))
      return 0;
  if (n >= NXI_MAX_MODULES || is_gw(x))
    return 0;
  /* A block: the chain's link, then the scope and data bytes. */
  uint8_t *blk =
      malloc(sizeof(uint8_t *) + (size_t)x->scope_len + x->data_len + 1);
  if (blk == NULL)
    return NX_ENOMEM;
  memcpy(blk, &d->gained, sizeof(uint8_t *));
  uint8_t *bytes = blk + sizeof(uint8_t *);
  if (x->scope_len > 0)
    memcpy(bytes, x->scope, x->scope_len);
  if (x->data_len > 0)
    memcpy(bytes + x->scope_len, x->data, x->data_len);
  d->gained = blk;
  snprintf(d->names[n], sizeof(d->names[n]), "%s", x->name);
  d->desc[n] = *x;
  d->desc[n].name = d->names[n];
  d->desc[n].scope = bytes;
  d->desc[n].data = bytes + x->scope_len;
  atomic_store_explicit(&d->n, n + 1, memory_order_release);
  return 1;
}

int nxi_dlist_gain(uint32_t proc, const uint8_t *blob, size_t len) {
  if (proc == 0 || proc == nxi_rt.proc_id)
    return NX_EINVAL;
  /* Its descriptors, read into a list of our own (not interned). */
  size_t check;
  int r = parse(blob, len, &check, NULL);
  if (r == 0 && check != len)
    r = NX_EPROTO;
  if (r < 0)
    return r;
  struct nxi_dlist *x = calloc(1, sizeof(*x) + len);
  if (x == NULL)
    return NX_ENOMEM;
  x->blob = (uint8_t *)(x + 1);
  memcpy(x->blob, blob, len);
  parse(x->blob, len, &check, x);
  int gained = 0;
  pthread_mutex_lock(&intern_lock);
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      if (atomic_load(&d->proc) != proc || atomic_load(&d->failed) != 0)
        continue;
      for (int k = 0; k < x->n; k++)
        if (gain_one(d, &x->desc[k]) > 0)
          gained++;
    }
  pthread_mutex_unlock(&intern_lock);
  free(x);
  return gained;
}

/* The list's route is replaced by its best candidate if that is better
 * (cheaper) than the route's own. Returns 1 if it was. */
static int upgrade_one(struct nxi_dlist *dl) {
  unsigned epoch = atomic_load(&route_epoch); /* before the candidates */
  struct nxi_route *cur = atomic_load(&dl->route);
  if (cur == NULL || cur->via != NULL || atomic_load(&cur->failed) != 0 ||
      atomic_load(&dl->failed) != 0)
    return 0; /* resolved, or falling back, at the next send anyway */
  struct candidate c[NXI_MAX_MODULES];
  int n = candidates(dl, atomic_load(&dl->broken), c);
  int best = -1, mine = -1;
  for (int i = 0; i < n; i++) {
    if (c[i].via != NULL)
      continue;
    if (best < 0)
      best = i;
    if (c[i].didx == cur->didx && c[i].mod == cur->mod)
      mine = i;
  }
  int r = 0;
  struct nx_endpoint *ep = NULL;
  struct nxi_route *rt = NULL;
  if (best >= 0 && mine > best && better(&c[best], &c[mine]) &&
      connect_direct(c[best].mod, c[best].desc, &ep) == 0) {
    rt = calloc(1, sizeof(*rt));
    if (rt == NULL) {
      c[best].mod->ops->disconnect(c[best].mod->state, ep);
    } else {
      rt->mod = c[best].mod;
      rt->ep = ep;
      rt->didx = c[best].didx;
      rt->alts = n - 1; /* every other one, the old route's included */
      rt->epoch = epoch;
      rt->gen = atomic_load(&dl->gen_next);
      if (rt->gen > NXI_ROUTE_GEN_MAX)
        rt->gen = NXI_ROUTE_GEN_MAX;
      atomic_init(&rt->failed, 0);
      rt->older = cur;
      if (install(dl, cur, rt)) {
        r = 1;
        nxi_log(1, rt->mod->name,
                "route to process %#x: now %s, a better candidate that "
                "joined (was %s)",
                (unsigned)atomic_load(&dl->proc), rt->mod->name,
                cur->mod->name);
      } else {
        rt->older = NULL; /* another thread replaced it: theirs stands */
        route_free(rt);
      }
    }
  }
  for (int i = 0; i < n; i++)
    if (c[i].via != NULL)
      nxi_dlist_release(c[i].via);
  /* Candidates improved again while this one connected: once more (each
   * round needs another bump, which only a module joining makes). */
  if (epoch != atomic_load(&route_epoch))
    r += upgrade_one(dl);
  return r;
}

int nxi_dlist_upgrade(uint32_t proc) {
  atomic_fetch_add(&route_epoch, 1); /* routes being chosen now look again */
  /* The lists with a route, each with a reference: chosen again outside
   * the lock (connect may take a while). */
  struct nxi_dlist **due = NULL;
  size_t n = 0, cap = 0;
  pthread_mutex_lock(&intern_lock);
  for (int b = 0; b < BUCKETS; b++)
    for (struct nxi_dlist *d = intern_table[b]; d != NULL; d = d->next) {
      if ((proc != 0 && atomic_load(&d->proc) != proc) ||
          atomic_load(&d->route) == NULL || atomic_load(&d->failed) != 0)
        continue;
      if (n == cap) {
        size_t more = cap ? cap * 2 : 16;
        struct nxi_dlist **p = realloc(due, more * sizeof(*p));
        if (p == NULL)
          break; /* those left keep their route until it is chosen anew */
        due = p;
        cap = more;
      }
      unsigned r = atomic_load(&d->refs);
      while (r != 0 && !atomic_compare_exchange_weak(&d->refs, &r, r + 1))
        ;
      if (r != 0)
        due[n++] = d;
    }
  pthread_mutex_unlock(&intern_lock);
  int done = 0;
  for (size_t i = 0; i < n; i++) {
    done += upgrade_one(due[i]);
    nxi_dlist_release(due[i]);
  }
  free(due);
  return done;
}

int nxi_dlist_self(uint32_t proc, struct nxi_dlist **out) {
  int n = nxi_module_count_loaded();
  uint8_t *blob = malloc(1 + (size_t)n * NXI_DESC_MAX_LEN);
  if (blob == NULL)
    return NX_ENOMEM;
  size_t off = 0;
  blob[off++] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    off += put_desc(blob + off, m->name, m->ops->wire_version, m->desc.scope,
                    m->desc.scope_len, m->desc.data, m->desc.data_len);
  }
  int r = nxi_dlist_intern_proc(blob, off, proc, out);
  free(blob);
  return r;
}
