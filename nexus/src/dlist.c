/* Descriptor lists (dlist.h): their wire encoding, interning, the
 * per-destination protocol choice, and failed processes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlist.h"

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

static uint64_t fnv64(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
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
  size_t check;
  int r = parse(blob, len, &check, NULL);
  if (r < 0)
    return r;
  if (check != len)
    return NX_EPROTO;
  uint64_t h = fnv64(blob, len);
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

static void dlist_free(struct nxi_dlist *d) {
  struct nxi_route *rt = atomic_load(&d->route);
  if (rt != NULL) {
    rt->mod->ops->disconnect(rt->mod->state, rt->ep);
    free(rt);
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
  pthread_mutex_lock(&intern_lock);
  free(dead_procs);
  dead_procs = NULL;
  dead_count = dead_cap = 0;
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      struct nxi_route *rt = atomic_exchange(&d->route, NULL);
      if (rt != NULL) {
        rt->mod->ops->disconnect(rt->mod->state, rt->ep);
        free(rt);
      }
    }
  pthread_mutex_unlock(&intern_lock);
}

/* Protocol choice: every loaded module that finds its own name and wire
 * version in the list and calls the descriptor reachable is a candidate;
 * they are tried by cost (or by NX_PROTOCOLS order when that is set) until
 * one connects. The choice is cached in the list. */

struct candidate {
  struct nxi_module *mod;
  const struct nx_desc *desc;
  int cost;
};

static int better(const struct candidate *a, const struct candidate *b) {
  if (a->cost != b->cost)
    return a->cost < b->cost;
  return a->mod->order < b->mod->order;
}

static int resolve(struct nxi_dlist *dl, struct nxi_route **out) {
  struct candidate c[NXI_MAX_MODULES];
  int n = 0;
  int nmods = nxi_module_count_loaded();
  for (int i = 0; i < dl->n; i++) {
    const struct nx_desc *d = &dl->desc[i];
    for (int m = 0; m < nmods; m++) {
      struct nxi_module *mod = nxi_module_loaded(m);
      if (strcmp(mod->name, d->name) != 0 ||
          mod->ops->wire_version != d->wire_version)
        continue; /* a module we lack, or another wire version: skip it */
      int cost = mod->ops->reachable(mod->state, d);
      if (cost < 0)
        continue;
      c[n].mod = mod;
      c[n].desc = d;
      c[n].cost = nxi_rt.explicit_order ? 0 : cost;
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
  for (int i = 0; i < n; i++) {
    void *ep = NULL;
    int r = c[i].mod->ops->connect(c[i].mod->state, c[i].desc, &ep);
    if (r < 0) {
      nxi_log(1, c[i].mod->name, "connect failed: %s; trying the next",
              nx_strerror(r));
      continue;
    }
    struct nxi_route *rt = malloc(sizeof(*rt));
    if (rt == NULL) {
      c[i].mod->ops->disconnect(c[i].mod->state, ep);
      return NX_ENOMEM;
    }
    rt->mod = c[i].mod;
    rt->ep = ep;
    atomic_init(&rt->failed, 0);
    /* Which module carries the frames to whom: the first thing to ask
     * when a destination is slow or unreachable. */
    nxi_log(1, c[i].mod->name, "route to process %#x: %s (%d of %d candidates)",
            (unsigned)atomic_load(&dl->proc), c[i].mod->name, i + 1, n);
    *out = rt;
    return 0;
  }
  return NX_EUNREACH;
}

int nxi_dlist_route(struct nxi_dlist *dl, struct nxi_route **out) {
  int failed = atomic_load_explicit(&dl->failed, memory_order_relaxed);
  if (failed < 0)
    return failed;
  struct nxi_route *rt = atomic_load_explicit(&dl->route, memory_order_acquire);
  if (rt != NULL) {
    *out = rt;
    return 0;
  }
  int r = resolve(dl, &rt);
  if (r < 0)
    return r;
  struct nxi_route *expected = NULL;
  if (!atomic_compare_exchange_strong(&dl->route, &expected, rt)) {
    rt->mod->ops->disconnect(rt->mod->state, rt->ep);
    free(rt);
    rt = expected;
  }
  *out = rt;
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

/* Marks the lists that match (an endpoint, or a process) failed and reports
 * each newly dead process once. */
static void fail_lists(void *state, void *ep, uint32_t proc, int status) {
  uint32_t procs[64];
  int n = 0;
  pthread_mutex_lock(&intern_lock);
  if (ep == NULL && mark_dead(proc))
    procs[n++] = proc;
  for (int i = 0; i < BUCKETS; i++)
    for (struct nxi_dlist *d = intern_table[i]; d != NULL; d = d->next) {
      struct nxi_route *rt = atomic_load(&d->route);
      if (ep != NULL) {
        if (rt == NULL || rt->ep != ep || rt->mod->state != state)
          continue;
      } else if (atomic_load(&d->proc) != proc) {
        continue;
      }
      int expected = 0;
      if (rt != NULL)
        atomic_compare_exchange_strong(&rt->failed, &expected, status);
      expected = 0;
      atomic_compare_exchange_strong(&d->failed, &expected, status);
      uint32_t p = atomic_load(&d->proc);
      if (ep != NULL && p != 0 && n < 64 && mark_dead(p))
        procs[n++] = p;
    }
  pthread_mutex_unlock(&intern_lock);
  for (int i = 0; i < n; i++)
    nxi_report_proc(status, procs[i]);
}

void nxi_dlist_peer_failed(void *state, void *ep, int status) {
  fail_lists(state, ep, 0, status);
}

void nxi_dlist_proc_failed(uint32_t proc, int status) {
  if (proc != 0 && proc != nxi_rt.proc_id)
    fail_lists(NULL, NULL, proc, status);
}

int nxi_dlist_intern_proc(const uint8_t *blob, size_t len, uint32_t proc,
                          struct nxi_dlist **out) {
  int r = nxi_dlist_intern(blob, len, out);
  if (r == 0)
    atomic_store_explicit(&(*out)->proc, proc, memory_order_relaxed);
  return r;
}

int nxi_dlist_self(uint32_t proc, struct nxi_dlist **out) {
  int n = nxi_module_count_loaded();
  size_t cap = 1;
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    cap +=
        1 + strlen(m->name) + 2 + 1 + m->desc.scope_len + 2 + m->desc.data_len;
  }
  uint8_t *blob = malloc(cap);
  if (blob == NULL)
    return NX_ENOMEM;
  size_t off = 0;
  blob[off++] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    size_t nl = strlen(m->name);
    blob[off++] = (uint8_t)nl;
    memcpy(blob + off, m->name, nl);
    off += nl;
    nxu_le16(blob + off, m->ops->wire_version);
    off += 2;
    blob[off++] = m->desc.scope_len;
    memcpy(blob + off, m->desc.scope, m->desc.scope_len);
    off += m->desc.scope_len;
    nxu_le16(blob + off, m->desc.data_len);
    off += 2;
    memcpy(blob + off, m->desc.data, m->desc.data_len);
    off += m->desc.data_len;
  }
  int r = nxi_dlist_intern_proc(blob, off, proc, out);
  free(blob);
  return r;
}
